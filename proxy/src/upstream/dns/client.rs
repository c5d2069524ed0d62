//! Asking nameservers: one question over UDP to each server in turn, for `attempts` rounds,
//! and again over TCP when the UDP answer was truncated.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::timeout;

use super::conf::ResolvConf;
use super::wire::{self, Answer, ParseError};

/// Largest UDP answer read: a server that does not fit sets TC (no EDNS is sent, so 512 is
/// the most it may send; more room costs nothing).
const UDP_BUFFER: usize = 4096;

/// Why no server answered the question.
#[derive(Debug, Clone, thiserror::Error)]
pub enum QueryError {
    /// No server answered within its timeout.
    #[error("no answer from {0} within {1:?}")]
    Timeout(String, Duration),
    /// Sending or receiving failed (no route, connection refused…).
    #[error("{0}")]
    Io(String),
    /// Every server failed the query (SERVFAIL, REFUSED, malformed answers).
    #[error("{0}")]
    Server(String),
}

/// Asks the servers of `conf` for the `qtype` (`A` or `AAAA`) records of `name`.
pub async fn query(conf: &ResolvConf, name: &str, qtype: u16) -> Result<Answer, QueryError> {
    let mut last = QueryError::Server("no nameserver".into());
    for _ in 0..conf.attempts.max(1) {
        for &server in &conf.nameservers {
            // A fresh id per try: a late answer to an earlier try is ignored, not taken for
            // this one (it would be right, but it could also be a guess).
            let id = fastrand::u16(..);
            let Some(msg) = wire::encode_query(id, name, qtype) else {
                return Err(QueryError::Server(format!("{name:?} is not a DNS name")));
            };
            let udp = match timeout(conf.timeout, ask_udp(server, &msg, id, name, qtype)).await {
                Ok(r) => r,
                Err(_) => Err(QueryError::Timeout(server.to_string(), conf.timeout)),
            };
            let answer = match udp {
                Ok(Answer::Truncated) => {
                    match timeout(conf.timeout, ask_tcp(server, &msg, id, name, qtype)).await {
                        Ok(r) => r,
                        Err(_) => Err(QueryError::Timeout(server.to_string(), conf.timeout)),
                    }
                }
                other => other,
            };
            match answer {
                Ok(Answer::Truncated) => {
                    last = QueryError::Server(format!("{server}: truncated answer over TCP"))
                }
                Ok(a) => return Ok(a),
                Err(e) => last = e,
            }
        }
    }
    Err(last)
}

/// One question over UDP; waits (under the caller's timeout) for an answer to it, ignoring
/// datagrams that answer something else.
async fn ask_udp(
    server: SocketAddr,
    msg: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
) -> Result<Answer, QueryError> {
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let io = |e: std::io::Error| QueryError::Io(format!("{server}: {e}"));
    // A new socket (and so a new random source port) per question; connected, so that the
    // kernel drops datagrams from anyone but the server.
    let socket = UdpSocket::bind(local).await.map_err(io)?;
    socket.connect(server).await.map_err(io)?;
    socket.send(msg).await.map_err(io)?;
    let mut buf = vec![0u8; UDP_BUFFER];
    loop {
        let n = socket.recv(&mut buf).await.map_err(io)?;
        match wire::parse_response(&buf[..n], id, name, qtype) {
            Ok(answer) => return Ok(answer),
            // Not ours (another id, or too short to say): keep waiting for the real answer.
            Err(ParseError::WrongId | ParseError::WrongQuestion) => {}
            Err(ParseError::Malformed) if buf[..n.min(2)] != id.to_be_bytes() => {}
            // The server failed (an error code, with or without the question) or sent a
            // malformed answer to our id: on to the next server at once.
            Err(e @ (ParseError::Rcode(_) | ParseError::Malformed)) => {
                return Err(QueryError::Server(format!("{server}: {e}")))
            }
        }
    }
}

/// One question over TCP (two-byte length prefixes, RFC 1035 §4.2.2).
async fn ask_tcp(
    server: SocketAddr,
    msg: &[u8],
    id: u16,
    name: &str,
    qtype: u16,
) -> Result<Answer, QueryError> {
    let io = |e: std::io::Error| QueryError::Io(format!("{server} (TCP): {e}"));
    let mut tcp = TcpStream::connect(server).await.map_err(io)?;
    let mut framed = Vec::with_capacity(msg.len() + 2);
    framed.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    framed.extend_from_slice(msg);
    tcp.write_all(&framed).await.map_err(io)?;
    let len = usize::from(tcp.read_u16().await.map_err(io)?);
    let mut buf = vec![0u8; len];
    tcp.read_exact(&mut buf).await.map_err(io)?;
    wire::parse_response(&buf, id, name, qtype)
        .map_err(|e| QueryError::Server(format!("{server} (TCP): {e}")))
}

/// Whether this host can reach IPv6 addresses beyond itself (glibc's `AI_ADDRCONFIG`, by
/// route rather than by address): `AAAA` records are asked for only then. Connecting a UDP
/// socket sends nothing; it only looks the route up.
pub fn has_ipv6_route() -> bool {
    std::net::UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0))
        .and_then(|s| s.connect("[2001:4860:4860::8888]:53"))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    /// An answer to `query` (echoing its id and question) with `flags` and one A record per
    /// address, TTL 60.
    fn reply(query: &[u8], flags: u16, addrs: &[[u8; 4]]) -> Vec<u8> {
        let mut m = query[..2].to_vec();
        m.extend_from_slice(&flags.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, addrs.len() as u8, 0, 0, 0, 0]);
        m.extend_from_slice(&query[12..]);
        for a in addrs {
            m.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            m.extend_from_slice(a);
        }
        m
    }

    fn conf(servers: &[SocketAddr]) -> ResolvConf {
        ResolvConf {
            nameservers: servers.to_vec(),
            timeout: Duration::from_millis(300),
            attempts: 1,
            ..ResolvConf::default()
        }
    }

    fn a(list: &[[u8; 4]]) -> Answer {
        Answer::Records {
            addrs: list.iter().map(|&b| IpAddr::from(b)).collect(),
            ttl: Some(60),
        }
    }

    #[tokio::test]
    async fn asks_over_udp_and_ignores_answers_to_other_questions() {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let at = server.local_addr().unwrap();
        let serve = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, from) = server.recv_from(&mut buf).await.unwrap();
            let q = &buf[..n];
            // A guess at the id first, then the answer.
            let mut wrong = reply(q, 0x8180, &[[6, 6, 6, 6]]);
            wrong[0] ^= 0xFF;
            server.send_to(&wrong, from).await.unwrap();
            server.send_to(b"junk", from).await.unwrap();
            server
                .send_to(&reply(q, 0x8180, &[[10, 0, 0, 1], [10, 0, 0, 2]]), from)
                .await
                .unwrap();
        });
        let got = query(&conf(&[at]), "app.weir.test", wire::TYPE_A).await;
        assert_eq!(got.unwrap(), a(&[[10, 0, 0, 1], [10, 0, 0, 2]]));
        serve.await.unwrap();
    }

    #[tokio::test]
    async fn a_truncated_answer_is_asked_again_over_tcp() {
        // The same port number for UDP and TCP: a free UDP port's TCP twin may be taken by
        // another test's listener, so another pair is tried.
        let mut pair = None;
        for _ in 0..50 {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let at = udp.local_addr().unwrap();
            if let Ok(tcp) = tokio::net::TcpListener::bind(at).await {
                pair = Some((udp, tcp, at));
                break;
            }
        }
        let (udp, tcp, at) = pair.expect("a port free for both UDP and TCP");
        let serve = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, from) = udp.recv_from(&mut buf).await.unwrap();
            udp.send_to(&reply(&buf[..n], 0x8380, &[]), from)
                .await
                .unwrap();
            let (mut s, _) = tcp.accept().await.unwrap();
            let len = usize::from(s.read_u16().await.unwrap());
            let mut q = vec![0u8; len];
            s.read_exact(&mut q).await.unwrap();
            let addrs: Vec<[u8; 4]> = (1..=40).map(|i| [10, 0, 1, i]).collect();
            let r = reply(&q, 0x8180, &addrs);
            s.write_all(&(r.len() as u16).to_be_bytes()).await.unwrap();
            s.write_all(&r).await.unwrap();
        });
        let got = query(&conf(&[at]), "big.weir.test", wire::TYPE_A).await;
        let want: Vec<[u8; 4]> = (1..=40).map(|i| [10, 0, 1, i]).collect();
        assert_eq!(got.unwrap(), a(&want));
        serve.await.unwrap();
    }

    #[tokio::test]
    async fn a_silent_or_failing_server_gives_way_to_the_next() {
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let failing = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let good = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let servers = [
            silent.local_addr().unwrap(),
            failing.local_addr().unwrap(),
            good.local_addr().unwrap(),
        ];
        let serve = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, from) = failing.recv_from(&mut buf).await.unwrap();
            // SERVFAIL.
            failing
                .send_to(&reply(&buf[..n], 0x8182, &[]), from)
                .await
                .unwrap();
            let (n, from) = good.recv_from(&mut buf).await.unwrap();
            // NXDOMAIN is an answer: passed on, not retried elsewhere.
            good.send_to(&reply(&buf[..n], 0x8183, &[]), from)
                .await
                .unwrap();
        });
        let started = std::time::Instant::now();
        let got = query(&conf(&servers), "gone.weir.test", wire::TYPE_A).await;
        assert_eq!(got.unwrap(), Answer::NxDomain);
        assert!(started.elapsed() >= Duration::from_millis(300));
        serve.await.unwrap();
        drop(silent);

        // Nobody answers at all: a timeout naming the server, after the attempts.
        let quiet = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut c = conf(&[quiet.local_addr().unwrap()]);
        c.attempts = 2;
        let started = std::time::Instant::now();
        let got = query(&c, "slow.weir.test", wire::TYPE_A).await;
        assert!(matches!(got, Err(QueryError::Timeout(..))), "{got:?}");
        assert!(started.elapsed() >= Duration::from_millis(600));
    }

    #[tokio::test]
    async fn a_refusal_without_the_question_or_a_malformed_answer_moves_on_at_once() {
        let refusing = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let garbling = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let good = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let servers = [
            refusing.local_addr().unwrap(),
            garbling.local_addr().unwrap(),
            good.local_addr().unwrap(),
        ];
        let serve = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, from) = refusing.recv_from(&mut buf).await.unwrap();
            // A guess at the id is still ignored...
            let mut spoof = reply(&buf[..n], 0x8180, &[[6, 6, 6, 6]]);
            spoof[0] ^= 0xFF;
            refusing.send_to(&spoof, from).await.unwrap();
            // ...and REFUSED with the header alone (no question section) ends this server.
            let mut refused = buf[..2].to_vec();
            refused.extend_from_slice(&[0x81, 0x85, 0, 0, 0, 0, 0, 0, 0, 0]);
            refusing.send_to(&refused, from).await.unwrap();
            // Our id, then bytes that do not parse.
            let (n, from) = garbling.recv_from(&mut buf).await.unwrap();
            let mut garbled = reply(&buf[..n], 0x8180, &[[6, 6, 6, 6]]);
            garbled.truncate(garbled.len() - 3);
            garbling.send_to(&garbled, from).await.unwrap();
            let (n, from) = good.recv_from(&mut buf).await.unwrap();
            good.send_to(&reply(&buf[..n], 0x8180, &[[10, 0, 0, 1]]), from)
                .await
                .unwrap();
        });
        let started = std::time::Instant::now();
        let got = query(&conf(&servers), "moved.weir.test", wire::TYPE_A).await;
        assert_eq!(got.unwrap(), a(&[[10, 0, 0, 1]]));
        // Well within one server's timeout (300 ms).
        assert!(started.elapsed() < Duration::from_millis(250));
        serve.await.unwrap();
    }
}
