//! Long-lived streams through Weir: server-sent events flushed event by event over HTTP/1.1,
//! h2c and HTTP/2 over TLS, the service's `read_timeout` applying between events (and only
//! there), and WebSocket echo through the plain and TLS listeners, over HTTP/1.1 and over
//! HTTP/2 (RFC 8441 extended CONNECT, h2c and TLS), closed by either side.
//!
//! Every proxy here runs with 500 ms keep-alive and header-read limits: a stream or tunnel
//! quiet for longer than that is still in use and must not be taken for an idle connection.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::ws::*;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// The name the fixture certificate is for (SNI and Host).
const NAME: &str = "a.example.test";
/// How long any single step may wait before the test fails.
const STEP: Duration = Duration::from_secs(10);

/// An echo upstream behind a proxy with a plain and a TLS listener; the echo's service has
/// `read_timeout` milliseconds.
struct Setup {
    _up: Proc,
    weir: Weir,
    tls_port: u16,
}

fn setup(read_timeout_ms: u64) -> Setup {
    setup_with(read_timeout_ms, &[])
}

/// [`setup`] with extra proxy flags.
fn setup_with(read_timeout_ms: u64, extra: &[&str]) -> Setup {
    let up = echo("stream");
    let table = json!({
        "routes": [{"id": "r", "paths": [{"path": "/"}], "service": "s"}],
        "services": [{"id": "s", "host": "127.0.0.1", "port": up.port,
                      "read_timeout": read_timeout_ms}],
        "certificates": [{
            "id": "a",
            "cert": common::tls::fixture("a.example.test.crt"),
            "key": common::tls::fixture("a.example.test.key"),
            "snis": [NAME],
        }],
    })
    .to_string();
    let tls_port = free_port();
    let tls_listen = format!("127.0.0.1:{tls_port}");
    let mut flags = vec![
        "--tls-listen",
        &tls_listen,
        "--keepalive-timeout",
        "500ms",
        "--header-read-timeout",
        "500ms",
    ];
    flags.extend_from_slice(extra);
    let weir = Weir::start(&table, &flags);
    wait_for_port(tls_port);
    Setup {
        _up: up,
        weir,
        tls_port,
    }
}

async fn dial_plain(port: u16) -> Conn {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    Box::new(tcp)
}

/// A TLS connection to `port` with SNI `a.example.test`, offering `alpn`; checks the protocol
/// the server chose.
async fn dial_tls(port: u16, alpn: &str) -> Conn {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = tokio::time::timeout(
        STEP,
        common::tls::connector(&[alpn]).connect(ServerName::try_from(NAME).unwrap(), tcp),
    )
    .await
    .expect("TLS handshake timed out")
    .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn.as_bytes()));
    Box::new(tls)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ---------------------------------------------------------------------------------------------
// Server-sent events
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Proto {
    /// HTTP/1.1 on the plain listener.
    H1,
    /// HTTP/2 with prior knowledge on the plain listener.
    H2c,
    /// HTTP/2 chosen by ALPN on the TLS listener.
    H2Tls,
}

/// One event as the client saw it.
#[derive(Debug)]
struct Event {
    n: u64,
    /// When the echo upstream produced it (Unix ms, same clock as the test's).
    sent_ms: u64,
    /// When its last byte reached the client.
    arrived_ms: u64,
}

/// What one event-stream request showed.
struct Stream {
    status: u16,
    content_type: Option<String>,
    events: Vec<Event>,
    /// How the body ended: `Ok` for a clean end, `Err` for a cut (with when it was seen).
    end: Result<(), String>,
    /// When the end (clean or not) reached the client (Unix ms).
    ended_ms: u64,
}

/// Sends `GET path` through the proxy over `proto` and reads the event stream to its end,
/// recording when each event arrived.
async fn sse(s: &Setup, proto: Proto, path: &str) -> Stream {
    let uri = match proto {
        Proto::H1 => path.to_string(),
        Proto::H2c => format!("http://{NAME}{path}"),
        Proto::H2Tls => format!("https://{NAME}{path}"),
    };
    let req = http::Request::get(uri)
        .header("host", NAME)
        .header("accept", "text/event-stream")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = match proto {
        Proto::H1 => {
            let io = TokioIo::new(dial_plain(s.weir.proc.port).await);
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            tokio::time::timeout(STEP, send.send_request(req)).await
        }
        Proto::H2c | Proto::H2Tls => {
            let io = if proto == Proto::H2c {
                dial_plain(s.weir.proc.port).await
            } else {
                dial_tls(s.tls_port, "h2").await
            };
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let mut req = req;
            req.headers_mut().remove("host");
            tokio::time::timeout(STEP, send.send_request(req)).await
        }
    }
    .expect("response head timed out")
    .expect("response head");
    let expected = if proto == Proto::H1 {
        http::Version::HTTP_11
    } else {
        http::Version::HTTP_2
    };
    assert_eq!(resp.version(), expected);
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string());
    let mut body = resp.into_body();
    let mut text = String::new();
    let mut events = Vec::new();
    let end = loop {
        let frame = tokio::time::timeout(STEP, body.frame())
            .await
            .expect("no frame for 10 s");
        match frame {
            None => break Ok(()),
            Some(Err(e)) => break Err(e.to_string()),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let arrived_ms = unix_ms();
                text.push_str(std::str::from_utf8(&data).unwrap());
                while let Some(at) = text.find("\n\n") {
                    let event: String = text.drain(..at + 2).collect();
                    let data = event
                        .lines()
                        .find_map(|l| l.strip_prefix("data: "))
                        .unwrap_or_else(|| panic!("no data line in {event:?}"));
                    let v: serde_json::Value = serde_json::from_str(data).unwrap();
                    events.push(Event {
                        n: v["n"].as_u64().unwrap(),
                        sent_ms: v["sent_unix_ms"].as_u64().unwrap(),
                        arrived_ms,
                    });
                }
            }
        }
    };
    assert!(text.is_empty(), "half an event left over: {text:?}");
    Stream {
        status,
        content_type,
        events,
        end,
        ended_ms: unix_ms(),
    }
}

/// Milliseconds between consecutive arrivals.
fn gaps(events: &[Event]) -> Vec<u64> {
    events
        .windows(2)
        .map(|w| w[1].arrived_ms - w[0].arrived_ms)
        .collect()
}

/// Checks a stream of `count` events `interval` ms apart came through whole and one by one:
/// each event reached the client within 150 ms of leaving the upstream.
fn assert_streamed(proto: Proto, st: &Stream, count: u64, interval: u64) {
    assert_eq!(st.status, 200, "{proto:?}");
    assert_eq!(
        st.content_type.as_deref(),
        Some("text/event-stream"),
        "{proto:?}"
    );
    assert_eq!(st.end, Ok(()), "{proto:?}: the stream ends cleanly");
    let ns: Vec<u64> = st.events.iter().map(|e| e.n).collect();
    assert_eq!(ns, (1..=count).collect::<Vec<_>>(), "{proto:?}");
    let lags: Vec<i64> = st
        .events
        .iter()
        .map(|e| e.arrived_ms as i64 - e.sent_ms as i64)
        .collect();
    let gaps = gaps(&st.events);
    println!(
        "{proto:?}: {count} events {interval} ms apart; arrival gaps {gaps:?} ms, \
         upstream-to-client lag {lags:?} ms, end {} ms after the last event",
        st.ended_ms - st.events.last().unwrap().arrived_ms
    );
    for (e, lag) in st.events.iter().zip(&lags) {
        assert!(
            *lag <= 150,
            "{proto:?}: event {} arrived {lag} ms after it was sent (buffered): {:?}",
            e.n,
            st.events
        );
    }
    for g in &gaps {
        assert!(
            g + 100 >= interval && *g <= interval + 150,
            "{proto:?}: arrival gaps {gaps:?} ms, want about {interval} ms each"
        );
    }
    // The last event arrived a whole stream's length after the first: not batched at the end.
    let spread = st.events.last().unwrap().arrived_ms - st.events[0].arrived_ms;
    assert!(
        spread + 150 >= (count - 1) * interval,
        "{proto:?}: {spread} ms"
    );
}

/// Five events 300 ms apart over each client protocol: each arrives when the upstream sends
/// it, about 300 ms after the previous one, and the stream ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_events_arrive_one_by_one() {
    let s = setup(60_000);
    for proto in [Proto::H1, Proto::H2c, Proto::H2Tls] {
        let st = sse(&s, proto, "/events?sse=5&interval_ms=300").await;
        assert_streamed(proto, &st, 5, 300);
    }
}

/// The service's read_timeout (500 ms) bounds the silence between two events, not the
/// stream: events every 200 ms for 2 s all pass, while a gap of 800 ms is cut about 500 ms
/// after the last event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_timeout_applies_between_events_not_to_the_stream() {
    let s = setup(500);
    for proto in [Proto::H1, Proto::H2c, Proto::H2Tls] {
        let started = Instant::now();
        let st = sse(&s, proto, "/long?sse=11&interval_ms=200").await;
        assert!(started.elapsed() >= Duration::from_millis(1900));
        assert_streamed(proto, &st, 11, 200);

        let st = sse(&s, proto, "/gap?sse=3&interval_ms=800").await;
        assert_eq!(st.status, 200, "{proto:?}");
        let ns: Vec<u64> = st.events.iter().map(|e| e.n).collect();
        assert_eq!(ns, [1], "{proto:?}: only the event before the gap");
        assert!(st.end.is_err(), "{proto:?}: the stream is cut, not ended");
        let cut_after = st.ended_ms - st.events[0].arrived_ms;
        println!("{proto:?}: 800 ms gap cut {cut_after} ms after the last event");
        assert!(
            (400..=750).contains(&cut_after),
            "{proto:?}: cut {cut_after} ms after the last event ({:?})",
            st.end
        );
    }
}

// ---------------------------------------------------------------------------------------------
// WebSocket
// ---------------------------------------------------------------------------------------------

/// The messages of one exchange: text and binary, in each length encoding (7-bit, 16-bit,
/// 64-bit).
fn messages() -> Vec<(u8, Vec<u8>)> {
    vec![
        (TEXT, b"hello".to_vec()),
        (BINARY, vec![0, 1, 2, 0xfe, 0xff]),
        (TEXT, "through weir, caf\u{e9} \u{2713}".as_bytes().to_vec()),
        (TEXT, "x".repeat(300).into_bytes()),
        (BINARY, (0..70_000u32).map(|i| (i % 251) as u8).collect()),
        (BINARY, Vec::new()),
    ]
}

/// Messages both ways at once, a ping, a message after 1 s of silence; returns the session
/// still open.
async fn exchange(mut ws: Ws) -> Ws {
    let msgs = messages();
    // The client writes every message while reading the echoes: both directions in flight.
    let frames: Vec<Vec<u8>> = msgs.iter().map(|(op, p)| ws.frame(*op, p)).collect();
    let Ws { r, w, .. } = &mut ws;
    let write = async {
        for f in &frames {
            w.write_all(f).await.unwrap();
        }
    };
    let read = async {
        let mut got = Vec::new();
        for _ in 0..msgs.len() {
            got.push(read_frame(r).await.unwrap());
        }
        got
    };
    let ((), got) = tokio::time::timeout(STEP, async { tokio::join!(write, read) })
        .await
        .expect("echo timed out");
    for ((op, p), f) in msgs.iter().zip(&got) {
        assert_eq!(
            (f.opcode, f.fin, f.payload.len()),
            (*op, true, p.len()),
            "{f:?}"
        );
        assert!(f.payload == *p, "payload of {} bytes differs", p.len());
    }

    ws.send(PING, b"are you there").await;
    assert_eq!(
        ws.recv().await,
        Frame {
            opcode: PONG,
            fin: true,
            payload: b"are you there".to_vec()
        }
    );

    // Quiet for longer than the proxy's keep-alive and header-read limits.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    ws.send(TEXT, b"still here").await;
    assert_eq!(
        ws.recv().await,
        Frame {
            opcode: TEXT,
            fin: true,
            payload: b"still here".to_vec()
        }
    );
    ws
}

/// The client closes: its close frame is answered with one carrying the same code, then the
/// connection ends.
async fn client_closes(mut ws: Ws) {
    ws.send(CLOSE, &close_payload(1000, "done")).await;
    let f = ws.recv().await;
    assert_eq!((f.opcode, f.fin), (CLOSE, true), "{f:?}");
    assert_eq!(f.payload, close_payload(1000, "done"));
    ws.expect_eof().await;
}

/// The server closes (the echo does on the message `close`): the client sees its close frame,
/// answers it, and the connection ends.
async fn server_closes(mut ws: Ws) {
    ws.send(TEXT, b"close").await;
    let f = ws.recv().await;
    assert_eq!((f.opcode, f.fin), (CLOSE, true), "{f:?}");
    assert_eq!(f.payload, close_payload(1000, "bye"));
    ws.send(CLOSE, &close_payload(1000, "")).await;
    ws.expect_eof().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echo_through_the_plain_listener() {
    let s = setup(60_000);
    let port = s.weir.proc.port;
    tokio::join!(
        async {
            client_closes(exchange(Ws::connect(dial_plain(port).await, NAME, "/chat").await).await)
                .await
        },
        async {
            server_closes(exchange(Ws::connect(dial_plain(port).await, NAME, "/chat").await).await)
                .await
        },
    );
    // The proxy still serves after both tunnels closed.
    let r = get(&client(), &s.weir.url("/after"), &[]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echo_through_the_tls_listener() {
    let s = setup(60_000);
    let port = s.tls_port;
    tokio::join!(
        async {
            client_closes(
                exchange(Ws::connect(dial_tls(port, "http/1.1").await, NAME, "/chat").await).await,
            )
            .await
        },
        async {
            server_closes(
                exchange(Ws::connect(dial_tls(port, "http/1.1").await, NAME, "/chat").await).await,
            )
            .await
        },
    );
    let r = get(&client(), &s.weir.url("/after"), &[]).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_over_http2_through_h2c_and_tls() {
    let s = setup(60_000);
    let (plain, tls) = (s.weir.proc.port, s.tls_port);
    let h2c =
        |port| async move { Ws::connect_h2(dial_plain(port).await, "http", NAME, "/chat").await };
    let h2 = |port| async move {
        Ws::connect_h2(dial_tls(port, "h2").await, "https", NAME, "/chat").await
    };
    tokio::join!(
        async { client_closes(exchange(h2c(plain).await).await).await },
        async { server_closes(exchange(h2c(plain).await).await).await },
        async { client_closes(exchange(h2(tls).await).await).await },
        async { server_closes(exchange(h2(tls).await).await).await },
    );
    let r = get(&client(), &s.weir.url("/after"), &[]).await;
    assert_eq!(r.status, 200);
}

/// What the upstream of an HTTP/2 WebSocket receives (the HTTP/1.1 upgrade, with a key Weir
/// made), and an upstream whose `Sec-WebSocket-Accept` does not match that key: 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_websocket_reaches_the_upstream_as_an_upgrade_whose_answer_is_checked() {
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = heads.clone();
    let up = scripted(move |_, mut r, mut w| {
        use std::io::Write;
        if let Some(head) = read_head(&mut r) {
            seen.lock().unwrap().push(head);
            let _ = w.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                  Connection: Upgrade\r\nSec-WebSocket-Accept: bm90LXRoZS1yaWdodC1vbmU=\r\n\r\n",
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let table = json!({
        "routes": [{"id": "r", "paths": [{"path": "/"}], "service": "s"}],
        "services": [{"id": "s", "host": "127.0.0.1", "port": up.port}],
    })
    .to_string();
    let weir = Weir::start(&table, &[]);
    let conn = dial_plain(weir.proc.port).await;
    let (mut send, driver) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(conn))
            .await
            .unwrap();
    tokio::spawn(driver);
    // The first request (answered 101 by this upstream too) only makes the SETTINGS known.
    let _ = send
        .send_request(
            http::Request::get(format!("http://{NAME}/first"))
                .body(Empty::<Bytes>::new())
                .unwrap(),
        )
        .await;
    let mut req = http::Request::builder()
        .method(http::Method::CONNECT)
        .version(http::Version::HTTP_2)
        .uri(format!("http://{NAME}/chat?room=1"))
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", "chat")
        .body(Empty::<Bytes>::new())
        .unwrap();
    req.extensions_mut()
        .insert(hyper::ext::Protocol::from_static("websocket"));
    let resp = send.send_request(req).await.expect("an answer");
    assert_eq!(resp.status(), 502, "{resp:?}");

    let heads = heads.lock().unwrap().clone();
    let head = heads
        .last()
        .expect("the upstream got the upgrade")
        .to_ascii_lowercase();
    assert!(head.starts_with("get /chat?room=1 http/1.1\r\n"), "{head}");
    for line in [
        "\r\nupgrade: websocket\r\n",
        "\r\nsec-websocket-version: 13\r\n",
        "\r\nsec-websocket-protocol: chat\r\n",
    ] {
        assert!(head.contains(line), "{line:?} missing in {head}");
    }
    assert!(head.contains("\r\nconnection: upgrade\r\n"), "{head}");
    let key = head
        .lines()
        .find_map(|l| l.strip_prefix("sec-websocket-key: "))
        .expect("a Sec-WebSocket-Key");
    assert_eq!(key.trim().len(), 24, "16 random bytes in base64: {key}");
}

/// `--tunnel-idle-timeout`: a tunnel that carries a message now and then stays open past the
/// limit; once quiet for longer, Weir closes it (both directions count as traffic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_after_the_configured_time() {
    let s = setup_with(60_000, &["--tunnel-idle-timeout", "1s"]);
    let mut ws = Ws::connect(dial_plain(s.weir.proc.port).await, NAME, "/chat").await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        ws.send(TEXT, b"tick").await;
        assert_eq!(ws.recv().await.payload, b"tick");
    }
    // Silence: the proxy ends the tunnel (the client sees the connection close).
    ws.expect_eof().await;
}
