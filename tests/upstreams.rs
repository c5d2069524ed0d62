//! Talking to upstreams: streaming both ways in bounded memory, WebSocket tunnels, h2c on both
//! sides, `Expect: 100-continue`, connection failures, retries and timeouts.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

fn service_table(service: &str) -> String {
    format!("routes:\n- {{id: r, service: s}}\nservices:\n- {service}\n")
}

/// Reads an HTTP/1.1 response head; returns (status line, headers lower-cased).
fn read_head(r: &mut BufReader<TcpStream>) -> (String, Vec<(String, String)>) {
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    (status.trim_end().to_string(), headers)
}

/// An echo upstream behind a proxy with one catch-all route to it.
fn single(name: &str) -> (Proc, Weir) {
    let up = echo(name);
    let weir = Weir::start(
        &service_table(&format!("{{id: s, host: 127.0.0.1, port: {}}}", up.port)),
        &[],
    );
    (up, weir)
}

/// A raw client connection: (writer, the same socket for reading).
fn connect(port: u16, timeout: Duration) -> (TcpStream, TcpStream) {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    (s.try_clone().unwrap(), s)
}

/// Reads a `Content-Length` body after [`read_head`] and parses it as JSON.
fn read_json_body(r: &mut BufReader<TcpStream>, headers: &[(String, String)]) -> serde_json::Value {
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .expect("content-length")
        .1
        .parse()
        .unwrap();
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    serde_json::from_slice(&body).unwrap()
}

const MB: u64 = 1024 * 1024;

#[test]
fn two_hundred_megabytes_each_way_in_bounded_memory() {
    let up = echo("up");
    let weir = Weir::start(
        &service_table(&format!("{{id: s, host: 127.0.0.1, port: {}}}", up.port)),
        &["--access-log", "false"],
    );
    let size = 200 * MB;

    // Download.
    let (mut w, s) = connect(weir.proc.port, Duration::from_secs(120));
    write!(w, "GET /big?bytes={size} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut r = BufReader::with_capacity(256 * 1024, s);
    let (status, headers) = read_head(&mut r);
    assert!(status.contains("200"), "{status}");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-length" && *v == size.to_string()),
        "{headers:?}"
    );
    let mut got = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    while got < size {
        let n = r.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed after {got} bytes");
        got += n as u64;
    }
    assert_eq!(got, size);

    // Upload (chunk by chunk; the echo upstream only counts).
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n"
    )
    .unwrap();
    let chunk = vec![b'u'; 256 * 1024];
    let mut sent = 0;
    while sent < size {
        s.write_all(&chunk).unwrap();
        sent += chunk.len() as u64;
    }
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    assert!(status.contains("200"), "{status}");
    let info = read_json_body(&mut r, &headers);
    assert_eq!(info["body_length"], size);

    let rss = weir.peak_rss();
    assert!(rss < 64 * MB, "proxy peak RSS {} MiB", rss / MB);
}

#[test]
fn websocket_echo_through_the_proxy() {
    let (_up, weir) = single("ws");
    let (mut w, s) = connect(weir.proc.port, Duration::from_secs(10));
    w.write_all(
        b"GET /chat HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    assert!(status.contains("101"), "{status}");
    assert!(
        headers.contains(&(
            "sec-websocket-accept".into(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into()
        )),
        "{headers:?}"
    );

    for msg in ["hello", "through weir", &"x".repeat(1000)] {
        // A masked text frame, as a client must send.
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81];
        if msg.len() < 126 {
            frame.push(0x80 | msg.len() as u8);
        } else {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        }
        frame.extend_from_slice(&mask);
        frame.extend(msg.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        w.write_all(&frame).unwrap();

        let mut h = [0u8; 2];
        r.read_exact(&mut h).unwrap();
        assert_eq!(h[0], 0x81);
        let len = match h[1] {
            126 => {
                let mut l = [0u8; 2];
                r.read_exact(&mut l).unwrap();
                u16::from_be_bytes(l) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        r.read_exact(&mut payload).unwrap();
        assert_eq!(String::from_utf8(payload).unwrap(), msg);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_502_and_retries_go_to_another_target() {
    let up = echo("alive");
    let dead = free_port();
    let weir = Weir::start(
        &format!(
            "routes:\n- {{id: down, paths: [{{path: /down}}], service: down}}\n- {{id: mixed, paths: [{{path: /mixed}}], service: mixed}}\n\
             services:\n- {{id: down, host: 127.0.0.1, port: {dead}, retries: 2}}\n- {{id: mixed, upstream: u}}\n\
             upstreams:\n- {{id: u, targets: [{{target: '127.0.0.1:{dead}'}}, {{target: '127.0.0.1:{}'}}]}}\n",
            up.port
        ),
        &[],
    );
    let c = client();
    let r = get(&c, &weir.url("/down"), &[]).await;
    assert_eq!(r.status, 502);
    assert!(r.json()["message"].is_string());
    for _ in 0..10 {
        let r = get(&c, &weir.url("/mixed"), &[]).await;
        assert_eq!(
            r.status, 200,
            "a failed connect is retried on the live target"
        );
        assert_eq!(r.echo_name().as_deref(), Some("alive"));
    }
}

#[test]
fn upstream_connections_are_reused() {
    let (_up, weir) = single("up");
    // One client connection (so one worker), sequential requests.
    let (mut w, s) = connect(weir.proc.port, Duration::from_secs(10));
    let mut r = BufReader::new(s);
    let mut seen = std::collections::BTreeSet::new();
    for path in ["/", "/?status=404", "/a", "/?delay_ms=5", "/"] {
        write!(w, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let (_, headers) = read_head(&mut r);
        seen.insert(
            read_json_body(&mut r, &headers)["connection"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(seen.len(), 1, "upstream connections used: {seen:?}");
    // The metric says the same: one connection opened, then four requests over it.
    let text = raw(
        weir.admin,
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(
        text.contains("weir_upstream_requests_total{connection=\"new\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("weir_upstream_requests_total{connection=\"reused\"} 4\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_upstream_is_504() {
    let up = echo("slow");
    let weir = Weir::start(
        &service_table(&format!(
            "{{id: s, host: 127.0.0.1, port: {}, read_timeout: 300}}",
            up.port
        )),
        &[],
    );
    let c = client();
    let started = Instant::now();
    let r = get(&c, &weir.url("/?delay_ms=3000"), &[]).await;
    assert_eq!(r.status, 504);
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(get(&c, &weir.url("/?delay_ms=10"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_codes_from_the_upstream_pass_through() {
    let (_up, weir) = single("up");
    let c = client();
    for code in [201u16, 204, 302, 404, 500, 503] {
        let r = get(&c, &weir.url(&format!("/?status={code}")), &[]).await;
        assert_eq!(r.status, code);
    }
    let r = send(&c, "HEAD", &weir.url("/"), &[], "").await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_on_both_sides() {
    let up = echo("h2");
    let weir = Weir::start(
        &format!(
            "routes:\n- {{id: h1, paths: [{{path: /h1}}], service: h1}}\n- {{id: h2, paths: [{{path: /h2}}], service: h2}}\n\
             - {{id: kept, paths: [{{path: /kept}}], service: h2, preserve_host: true}}\n\
             - {{id: named, paths: [{{path: /named}}], service: h2, host_header: api.internal}}\n\
             services:\n- {{id: h1, host: 127.0.0.1, port: {p}}}\n- {{id: h2, host: 127.0.0.1, port: {p}, protocol: h2c}}\n",
            p = up.port
        ),
        &[],
    );
    let h2 = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let r = get(&h2, &weir.url("/h1/x"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["protocol"],
        "HTTP/1.1",
        "h2c client, HTTP/1.1 upstream"
    );
    assert_eq!(
        r.json()["headers"]["x-forwarded-host"],
        format!("127.0.0.1:{}", weir.proc.port)
    );
    let r = get(&client(), &weir.url("/h2/x"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["protocol"],
        "HTTP/2.0",
        "HTTP/1.1 client, h2c upstream"
    );
    assert_eq!(r.json()["path"], "/h2/x");
    // HTTP/2 upstreams get the host in `:authority` and no `Host` (RFC 9113 §8.3.1): the
    // target's, the client's with preserve_host, or host_header.
    for (path, want) in [
        ("/h2/x", format!("127.0.0.1:{}", up.port)),
        ("/kept/x", "client.test".to_string()),
        ("/named/x", "api.internal".to_string()),
    ] {
        let seen = get(&client(), &weir.url(path), &[("host", "client.test")])
            .await
            .json();
        assert_eq!(seen["host"], want.as_str(), "{path}: {seen}");
        assert!(seen["headers"].get("host").is_none(), "{path}: {seen}");
        assert_eq!(seen["headers"]["x-forwarded-host"], "client.test", "{path}");
    }
}

#[test]
fn expect_100_continue() {
    let (_up, weir) = single("up");
    let (mut w, s) = connect(weir.proc.port, Duration::from_secs(10));
    w.write_all(
        b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let (status, _) = read_head(&mut r);
    assert!(
        status.contains("100"),
        "expected 100 Continue first, got {status}"
    );
    w.write_all(b"hello").unwrap();
    let (status, headers) = read_head(&mut r);
    assert!(status.contains("200"), "{status}");
    let info = read_json_body(&mut r, &headers);
    assert_eq!(info["body_length"], 5);
    assert!(info["headers"].get("expect").is_none());
}
