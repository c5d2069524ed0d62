//! Abusive and malformed clients: the right 4xx, closed idle connections, a connection cap,
//! and a proxy that keeps serving everyone else.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

fn table(echo_port: u16) -> String {
    format!("routes:\n- {{id: r, service: s}}\nservices:\n- {{id: s, host: 127.0.0.1, port: {echo_port}}}\n")
}

fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_requests_get_4xx() {
    let up = echo("up");
    let weir = Weir::start(
        &table(up.port),
        &[
            "--max-header-bytes",
            "16384",
            "--max-headers",
            "50",
            "--max-body-size",
            "1000",
        ],
    );
    let port = weir.proc.port;
    let t = Duration::from_secs(5);

    let big = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    assert_eq!(status_of(&raw(port, big.as_bytes(), t)), 431);

    let mut many = String::from("GET / HTTP/1.1\r\nHost: t\r\n");
    for i in 0..80 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert_eq!(status_of(&raw(port, many.as_bytes(), t)), 431);

    assert_eq!(status_of(&raw(port, b"GARBAGE\r\n\r\n", t)), 400);
    assert_eq!(
        status_of(&raw(
            port,
            b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: x\r\n\r\n",
            t
        )),
        400
    );

    // Body limit: declared too large, and streamed (chunked) past the limit.
    let declared = raw(
        port,
        b"POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 5000\r\n\r\n",
        t,
    );
    assert_eq!(status_of(&declared), 413, "{declared}");
    let chunk = format!("{:x}\r\n{}\r\n", 3000, "b".repeat(3000));
    let chunked = format!("POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}0\r\n\r\n");
    assert_eq!(status_of(&raw(port, chunked.as_bytes(), t)), 413);

    // Within the limits everything works, on the same process.
    let c = client();
    let r = send(&c, "POST", &weir.url("/"), &[], "x".repeat(900)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body_length"], 900);
}

#[test]
fn idle_keepalive_connections_are_closed() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &["--keepalive-timeout", "300ms"]);
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 65536];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Nothing more is sent; the server closes within the timeout (read returns 0).
    let started = std::time::Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(4) {
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {}
            Err(e) => panic!("read error instead of a clean close: {e}"),
        }
    }
    assert!(closed, "idle connection still open after 4s");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_request_head_trickled_slowly_is_cut_off() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &["--header-read-timeout", "500ms"]);
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // One byte of a never-ending header every 100 ms: a slowloris client. Without the limit
    // the connection would stay open for the whole 10 s.
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 1024];
    let closed = loop {
        if started.elapsed() > Duration::from_secs(10) {
            break false;
        }
        if s.write_all(b"a").is_err() {
            break true;
        }
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break true,
        }
    };
    assert!(closed, "a trickled head kept its connection open for 10 s");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_request_that_starts_as_an_idle_connection_is_closed_still_completes() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &["--header-read-timeout", "500ms"]);
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Half a head; the idle limit passes (close asked, dropped 1 s later if still idle)...
    s.write_all(b"GET /?delay_ms=1500 HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    // ...but the head completes within that second, and its answer takes longer than it.
    s.write_all(b"\r\n").unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[test]
fn connections_over_the_cap_are_closed_at_accept() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port), &["--max-connections", "2"]);
    let port = weir.proc.port;
    let open = |req: bool| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        if req {
            s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        }
        s
    };
    // The start-up probe's connection counts until the worker sees it closed.
    assert!(eventually(Duration::from_secs(5), || {
        raw(
            weir.admin,
            b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            Duration::from_secs(2),
        )
        .contains("weir_connections_active 0\n")
    }));
    let a = open(true);
    let b = open(true);
    let mut third = TcpStream::connect(("127.0.0.1", port)).unwrap();
    third
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let _ = third.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut buf = [0u8; 64];
    let refused = matches!(third.read(&mut buf), Ok(0) | Err(_));
    assert!(
        refused,
        "a third connection was served past --max-connections 2"
    );
    drop((a, b));
    // Capacity comes back once the others are gone.
    assert!(eventually(Duration::from_secs(5), || {
        let answer = raw(
            port,
            b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            Duration::from_secs(2),
        );
        answer.starts_with("HTTP/1.1 200")
    }));
}
