//! TLS passthrough: connections to the TLS listener whose ClientHello names a server of a
//! `tls_routes` entry are handed, bytes untouched, to a target of that route's services;
//! every other connection is terminated by Weir as usual.
//!
//! The ClientHello is peeked at (not read), so a connection Weir terminates after all reaches
//! rustls whole. A ClientHello too large to read the name from is terminated as usual; a
//! client whose ClientHello has not arrived whole within the limit is closed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::compile::passthrough::PassRoute;
use crate::compile::Runtime;
use crate::config::ProxyProtocol;
use crate::tls::client_hello::{server_name, Hello, MAX_HELLO};

/// What to do with a new TLS connection.
pub enum Decision {
    /// Terminate it (Weir's certificates, HTTP inside).
    Terminate,
    /// Hand it on.
    Pass(Pass),
    /// Close it: its ClientHello did not arrive in time.
    Close,
}

/// A connection handed on: by which route, to which service (`None`: the share of a backend
/// that cannot be used, closed), with which PROXY protocol header first.
pub struct Pass {
    route: Arc<str>,
    service: Option<usize>,
    proxy_protocol: Option<ProxyProtocol>,
    /// Weir ended the client's TLS (the backend may get TLS of its own).
    terminated: bool,
}

impl Pass {
    /// The connection taken by `route`, to `service`.
    pub fn new(route: &PassRoute, service: Option<usize>) -> Pass {
        Pass {
            route: route.id.clone(),
            service,
            proxy_protocol: route.proxy_protocol,
            terminated: route.terminate,
        }
    }
}

/// Peeks at the connection's first bytes until the server name can be read (or `limit`
/// passes) and decides.
pub async fn decide(rt: &Runtime, stream: &tokio::net::TcpStream, limit: Duration) -> Decision {
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = vec![0u8; MAX_HELLO];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) => return Decision::Terminate,
            Err(_) => return Decision::Close,
        };
        match server_name(&buf[..n]) {
            Hello::Sni(name) => {
                let Some(route) = rt.passthrough.find(name) else {
                    return Decision::Terminate;
                };
                if route.terminate {
                    return Decision::Terminate;
                }
                return Decision::Pass(Pass::new(route, route.choose_service()));
            }
            Hello::NoSni | Hello::NotTls => return Decision::Terminate,
            // The peer closed, or the hello is larger than we read.
            Hello::Incomplete if n == 0 || n == buf.len() => return Decision::Terminate,
            Hello::Incomplete => {
                // `peek` returns at once while bytes wait; give the rest time to arrive.
                if tokio::time::Instant::now() >= deadline {
                    return Decision::Close;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
}

/// Connects to a target of the service and copies bytes both ways until either side closes;
/// `client` and `local` are the connection's two ends, for the PROXY protocol header.
pub async fn pass<S>(rt: Arc<Runtime>, pass: Pass, ends: (SocketAddr, SocketAddr), mut client: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Pass {
        route,
        service,
        proxy_protocol,
        terminated,
    } = pass;
    let Some(service) = service.map(|i| rt.services[i].clone()) else {
        tracing::debug!(route = %route, "TLS passthrough share without a usable backend: closed");
        return;
    };
    let checks = service.checks.as_deref();
    let healthy = |i: usize| checks.is_none_or(|c| c.is_healthy(&service.health[i]));
    let Some(i) = service.balancer.pick(None, healthy) else {
        tracing::warn!(route = %route, service = %service.id, "TLS passthrough: no healthy target");
        return;
    };
    let target = service.keys[i].target.clone();
    drop(rt);
    let connect = tokio::net::TcpStream::connect(target.as_ref());
    let mut upstream = match tokio::time::timeout(service.connect_timeout, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let error = e.to_string();
            tracing::warn!(%route, %target, %error, "TLS passthrough: connect failed");
            return;
        }
        Err(_) => {
            tracing::warn!(route = %route, target = %target, "TLS passthrough: connect timed out");
            return;
        }
    };
    if upstream.peer_addr().is_ok_and(crate::upstream::is_own) {
        tracing::warn!(%route, %target, "TLS passthrough: the proxy's own admin API is never a backend");
        return;
    }
    let _ = upstream.set_nodelay(true);
    if let Some(version) = proxy_protocol {
        use tokio::io::AsyncWriteExt;
        let header = proxy_header(version, ends.0, ends.1);
        if let Err(e) = upstream.write_all(&header).await {
            let error = e.to_string();
            tracing::debug!(%route, %target, %error, "TLS passthrough: PROXY header not sent");
            return;
        }
    }
    // A terminated connection whose service speaks TLS (a BackendTLSPolicy) is encrypted
    // again towards the target, verified as the service says; a passed-through one is the
    // client's TLS already.
    let mut upstream = match service.tls.as_ref().filter(|_| terminated) {
        None => crate::upstream::Stream::Tcp(upstream),
        Some(tls) => {
            // The ALPN the service offers (h2 for an h2c Service's port) is what it speaks.
            let handshake = tls.handshake(&target, upstream, service.h2);
            match tokio::time::timeout(service.connect_timeout, handshake).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    let error = e.to_string();
                    tracing::warn!(%route, %target, %error, "TLS passthrough: TLS to the target failed");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%route, %target, "TLS passthrough: TLS to the target timed out");
                    return;
                }
            }
        }
    };
    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        Ok((up, down)) => {
            tracing::debug!(route = %route, target = %target, up, down, "TLS passthrough closed")
        }
        Err(e) => {
            tracing::debug!(route = %route, target = %target, error = %e, "TLS passthrough ended")
        }
    }
}

/// The PROXY protocol header (HAProxy's `proxy-protocol.txt`) for a TCP connection from
/// `client` to `local`. Written by hand: it is a fixed layout of a few fields, only ever
/// written (nothing here parses what a peer sends), and not worth a dependency.
fn proxy_header(version: ProxyProtocol, client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    // Both ends in one family: an IPv4 end beside an IPv6 one is written as IPv4-mapped.
    let (src, dst) = match (client.ip().to_canonical(), local.ip().to_canonical()) {
        (IpAddr::V4(a), IpAddr::V6(b)) => (IpAddr::V6(a.to_ipv6_mapped()), IpAddr::V6(b)),
        (IpAddr::V6(a), IpAddr::V4(b)) => (IpAddr::V6(a), IpAddr::V6(b.to_ipv6_mapped())),
        pair => pair,
    };
    let (sport, dport) = (client.port(), local.port());
    match version {
        ProxyProtocol::V1 => {
            let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
            format!("PROXY {family} {src} {dst} {sport} {dport}\r\n").into_bytes()
        }
        ProxyProtocol::V2 => {
            let mut h = b"\r\n\r\n\x00\r\nQUIT\n".to_vec();
            // Version 2, PROXY command.
            h.push(0x21);
            let addresses: Vec<u8> = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    h.push(0x11); // TCP over IPv4
                    [s.octets().as_slice(), &d.octets()].concat()
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    h.push(0x21); // TCP over IPv6
                    [s.octets().as_slice(), &d.octets()].concat()
                }
                _ => unreachable!("both ends are in one family"),
            };
            let len = addresses.len() as u16 + 4;
            h.extend_from_slice(&len.to_be_bytes());
            h.extend_from_slice(&addresses);
            h.extend_from_slice(&sport.to_be_bytes());
            h.extend_from_slice(&dport.to_be_bytes());
            h
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_headers_carry_both_ends() {
        let c: SocketAddr = "192.0.2.7:51000".parse().unwrap();
        let l: SocketAddr = "10.0.0.1:443".parse().unwrap();
        assert_eq!(
            proxy_header(ProxyProtocol::V1, c, l),
            b"PROXY TCP4 192.0.2.7 10.0.0.1 51000 443\r\n"
        );
        let v2 = proxy_header(ProxyProtocol::V2, c, l);
        assert_eq!(&v2[..12], b"\r\n\r\n\x00\r\nQUIT\n");
        assert_eq!(&v2[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&v2[16..20], &[192, 0, 2, 7]);
        assert_eq!(&v2[20..24], &[10, 0, 0, 1]);
        assert_eq!(&v2[24..], &[0xc7, 0x38, 0x01, 0xbb]);
        let c6: SocketAddr = "[2001:db8::1]:5".parse().unwrap();
        let mixed = proxy_header(ProxyProtocol::V1, c6, l);
        assert_eq!(mixed, b"PROXY TCP6 2001:db8::1 ::ffff:10.0.0.1 5 443\r\n");
        let v2 = proxy_header(ProxyProtocol::V2, c6, l);
        assert_eq!(&v2[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(v2.len(), 16 + 36);
    }
}
