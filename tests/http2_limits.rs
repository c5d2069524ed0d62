//! HTTP/2 limits of client connections through the real binary: concurrent streams (100 on
//! one connection, all answered; the advertised limit enforced), window and header-list
//! settings, oversized header lists refused while the connection lives on, and the two
//! HTTP/2 floods: rapid reset (CVE-2023-44487) and CONTINUATION, sent by a raw-frame client,
//! cost the proxy bounded CPU and memory and leave other clients served.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// Upstreams

/// An HTTP/1.1 upstream that counts requests and holds each one before answering `200 ok`.
struct Counting {
    port: u16,
    /// Request heads received.
    requests: Arc<AtomicUsize>,
    /// Most requests held at once.
    peak: Arc<AtomicUsize>,
    /// Answers every held request when set.
    release: Arc<AtomicBool>,
}

/// Holds each request until `barrier` requests have arrived (0: no barrier), `release` is set
/// or `hold` has passed, whichever comes first; gives up on a request the proxy abandons (its
/// connection closed).
fn counting(hold: Duration, barrier: usize) -> Counting {
    let requests = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let (r2, p2, rel2) = (requests.clone(), peak.clone(), release.clone());
    let up = scripted(move |_, mut r, mut w| {
        while read_head(&mut r).is_some() {
            r2.fetch_add(1, Ordering::SeqCst);
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            p2.fetch_max(now, Ordering::SeqCst);
            let until = Instant::now() + hold;
            let _ = r.get_ref().set_nonblocking(true);
            let mut abandoned = false;
            while Instant::now() < until
                && !rel2.load(Ordering::SeqCst)
                && !(barrier > 0 && r2.load(Ordering::SeqCst) >= barrier)
            {
                let mut b = [0u8; 1];
                match r.get_ref().peek(&mut b) {
                    Ok(0) => {
                        abandoned = true;
                        break;
                    }
                    Err(e) if e.kind() != std::io::ErrorKind::WouldBlock => {
                        abandoned = true;
                        break;
                    }
                    _ => {}
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            in_flight.fetch_sub(1, Ordering::SeqCst);
            let _ = r.get_ref().set_nonblocking(false);
            if abandoned
                || w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .is_err()
            {
                return;
            }
        }
    });
    Counting {
        port: up.port,
        requests,
        peak,
        release,
    }
}

/// `/slow` to the counting upstream, everything else to `fast` (an echo upstream).
fn table(slow: u16, fast: u16) -> String {
    json!({
        "routes": [
            {"id": "slow", "paths": [{"path": "/slow"}], "service": "slow"},
            {"id": "fast", "paths": [{"path": "/"}], "service": "fast"},
        ],
        "services": [
            {"id": "slow", "host": "127.0.0.1", "port": slow, "retries": 0},
            {"id": "fast", "host": "127.0.0.1", "port": fast},
        ],
    })
    .to_string()
}

// ---------------------------------------------------------------------------------------------
// hyper's HTTP/2 client, one connection

type H2 = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;

/// One HTTP/2 connection (prior knowledge) to the proxy.
async fn h2_connect(port: u16) -> H2 {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("HTTP/2 handshake");
    tokio::spawn(conn);
    send
}

/// `GET path` with extra headers on `send`; the status and body, or the error as text.
async fn h2_get(
    send: &mut H2,
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, Bytes), String> {
    let mut b = http::Request::get(format!("http://127.0.0.1:{port}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Empty::new()).unwrap();
    let fut = async {
        send.ready().await.map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(Duration::from_secs(15), fut)
        .await
        .map_err(|_| "no answer in 15 s".to_string())?
}

// ---------------------------------------------------------------------------------------------
// A raw-frame HTTP/2 client

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const CANCEL: u32 = 0x8;
const REFUSED_STREAM: u32 = 0x7;

fn frame(out: &mut Vec<u8>, ty: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(ty);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK integer with an `n`-bit prefix; `first` holds the bits above the prefix.
fn hpack_int(out: &mut Vec<u8>, first: u8, n: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// An HPACK string literal without Huffman coding.
fn hpack_str(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A field "literal without indexing" with a new name.
fn hpack_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    hpack_str(out, name);
    hpack_str(out, value);
}

/// The header block of `GET path` (static-table `:method`, `:scheme`; literal `:path` and
/// `:authority` with static-table names).
fn request_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x86]; // :method GET, :scheme http
    hpack_int(&mut b, 0, 4, 4); // :path, literal value
    hpack_str(&mut b, path.as_bytes());
    hpack_int(&mut b, 0, 4, 1); // :authority, literal value
    hpack_str(&mut b, b"localhost");
    b
}

#[derive(Debug)]
struct Frame {
    ty: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// A GOAWAY's or RST_STREAM's error code.
    fn error_code(&self) -> u32 {
        let at = if self.ty == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
}

/// Reads one frame; `None` at EOF, a reset, or when `read_timeout` passes.
fn read_frame(s: &mut TcpStream) -> Option<Frame> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).ok()?;
    Some(Frame {
        ty: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// Opens a connection: preface, empty SETTINGS, and the ACK of the server's SETTINGS.
fn raw_connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.set_nodelay(true);
    let mut out = PREFACE.to_vec();
    frame(&mut out, SETTINGS, 0, 0, &[]);
    frame(&mut out, SETTINGS, ACK, 0, &[]);
    (&s).write_all(&out).unwrap();
    s
}

/// Reads until the server's (non-ACK) SETTINGS; returns its (identifier, value) pairs and
/// the connection window increments seen on the way.
fn server_settings(s: &mut TcpStream) -> (Vec<(u16, u32)>, u32) {
    let mut conn_window = 0;
    for _ in 0..16 {
        let f = read_frame(s).expect("server SETTINGS");
        if f.ty == WINDOW_UPDATE && f.stream == 0 {
            conn_window += u32::from_be_bytes(f.payload[..4].try_into().unwrap());
        }
        if f.ty == SETTINGS && f.flags & ACK == 0 {
            // A WINDOW_UPDATE for the connection may follow at once.
            let settings = f
                .payload
                .chunks(6)
                .map(|c| {
                    (
                        u16::from_be_bytes([c[0], c[1]]),
                        u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                    )
                })
                .collect();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            while let Some(f) = read_frame(s) {
                if f.ty == WINDOW_UPDATE && f.stream == 0 {
                    conn_window += u32::from_be_bytes(f.payload[..4].try_into().unwrap());
                    break;
                }
            }
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            return (settings, conn_window);
        }
    }
    panic!("no SETTINGS from the server");
}

fn setting(settings: &[(u16, u32)], id: u16) -> Option<u32> {
    settings
        .iter()
        .rev()
        .find(|(i, _)| *i == id)
        .map(|(_, v)| *v)
}

/// How an attacked connection ended, as the attacker saw it.
#[derive(Debug, Default)]
struct Ended {
    /// The GOAWAY's error code, if one came.
    goaway: Option<u32>,
    /// The GOAWAY's last stream id: the highest stream the server took.
    last_stream: Option<u32>,
    /// The connection was closed (EOF or reset) within the time allowed.
    closed: bool,
    /// Writes of the attack that succeeded before the connection refused more (the last ones
    /// may only have reached the kernel's buffers).
    written: usize,
    /// Responses (HEADERS) the server sent on the connection.
    responses: usize,
}

/// On a new connection, writes what `next(i)` yields for write i (until it yields `None` or a
/// write fails) while a second thread reads what the server sends; returns once the server
/// closed the connection or stayed silent for `limit`.
fn flood(port: u16, limit: Duration, mut next: impl FnMut(usize) -> Option<Vec<u8>>) -> Ended {
    let s = raw_connect(port);
    let mut reader = s.try_clone().unwrap();
    reader.set_read_timeout(Some(limit)).unwrap();
    let read = std::thread::spawn(move || {
        let mut ended = Ended::default();
        let deadline = Instant::now() + limit + Duration::from_secs(20);
        while Instant::now() < deadline {
            match read_frame(&mut reader) {
                Some(f) if f.ty == GOAWAY => {
                    ended.goaway = Some(f.error_code());
                    ended.last_stream =
                        Some(u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff);
                }
                Some(f) if f.ty == HEADERS => ended.responses += 1,
                Some(_) => {}
                None => {
                    // EOF or reset, or the timeout: tell them apart.
                    let mut b = [0u8; 1];
                    reader
                        .set_read_timeout(Some(Duration::from_millis(1)))
                        .unwrap();
                    ended.closed = !matches!(
                        reader.peek(&mut b),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut
                    );
                    break;
                }
            }
        }
        ended
    });
    let mut written = 0;
    let mut w = &s;
    while let Some(batch) = next(written) {
        if w.write_all(&batch).is_err() {
            break;
        }
        written += 1;
    }
    let mut ended = read.join().unwrap();
    ended.written = written;
    let _ = s.shutdown(std::net::Shutdown::Both);
    ended
}

// ---------------------------------------------------------------------------------------------
// Process measurements

/// Clock ticks a second (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User plus system CPU time of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command (in parentheses): state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / clock_ticks()
}

/// Current resident set size of `pid`, in bytes (VmRSS).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// Sends normal requests (HTTP/2 and HTTP/1.1, each on connections of their own) until
/// `stop` is set; returns (answered 200, sent).
async fn bystander(port: u16, stop: Arc<AtomicBool>) -> (usize, usize) {
    let h1 = client();
    let (mut ok, mut sent) = (0, 0);
    let mut h2 = h2_connect(port).await;
    loop {
        let done = stop.load(Ordering::SeqCst);
        sent += 2;
        if let Ok((200, _)) = h2_get(&mut h2, port, "/bystander", &[]).await {
            ok += 1;
        }
        let r = tokio::time::timeout(
            Duration::from_secs(15),
            h1.request(
                http::Request::get(format!("http://127.0.0.1:{port}/bystander"))
                    .body(http_body_util::Full::new(Bytes::new()))
                    .unwrap(),
            ),
        )
        .await;
        if matches!(r, Ok(Ok(ref resp)) if resp.status() == 200) {
            ok += 1;
        }
        if done || sent >= 2_000 {
            return (ok, sent);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrent streams and settings

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_concurrent_streams_on_one_connection_are_all_answered() {
    // Each request is held until all 100 have reached the upstream: they can only be answered
    // if the proxy runs all 100 streams of the connection at once.
    let up = counting(Duration::from_secs(20), 100);
    let fast = echo("fast");
    let w = Weir::start(&table(up.port, fast.port), &[]);
    let send = h2_connect(w.proc.port).await;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..100 {
        let mut send = send.clone();
        let port = w.proc.port;
        tasks.spawn(async move { (i, h2_get(&mut send, port, &format!("/slow/{i}"), &[]).await) });
    }
    let mut answered = 0;
    while let Some(r) = tasks.join_next().await {
        let (i, r) = r.unwrap();
        let (status, body) = r.unwrap_or_else(|e| panic!("stream {i}: {e}"));
        assert_eq!((status, &body[..]), (200, &b"ok"[..]), "stream {i}");
        answered += 1;
    }
    assert_eq!(answered, 100);
    assert_eq!(up.requests.load(Ordering::SeqCst), 100);
    assert_eq!(up.peak.load(Ordering::SeqCst), 100, "all 100 held at once");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn settings_are_advertised_as_configured() {
    let fast = echo("fast");
    // (flags, max concurrent streams, stream window, connection window, header list size)
    let cases: &[(&[&str], u32, u32, u32, u32)] = &[
        (&[], 128, 1 << 20, 2 << 20, 65_536),
        (
            &[
                "--h2-max-concurrent-streams",
                "10",
                "--h2-initial-stream-window",
                "65535",
                "--h2-initial-connection-window",
                "1048576",
                "--h2-max-header-list-size",
                "8192",
            ],
            10,
            65_535,
            1 << 20,
            8_192,
        ),
        // The header-list size follows --max-header-bytes unless set.
        (
            &["--max-header-bytes", "16384"],
            128,
            1 << 20,
            2 << 20,
            16_384,
        ),
    ];
    for (flags, streams, stream_window, conn_window, header_list) in cases {
        let w = Weir::start(&table(fast.port, fast.port), flags);
        let mut s = raw_connect(w.proc.port);
        let (settings, increment) = server_settings(&mut s);
        assert_eq!(
            setting(&settings, 0x3),
            Some(*streams),
            "{flags:?}: {settings:?}"
        );
        assert_eq!(
            setting(&settings, 0x4).unwrap_or(65_535),
            *stream_window,
            "{flags:?}: {settings:?}"
        );
        assert_eq!(
            setting(&settings, 0x6),
            Some(*header_list),
            "{flags:?}: {settings:?}"
        );
        assert_eq!(
            65_535 + increment,
            *conn_window,
            "{flags:?}: connection window"
        );
    }
}

#[test]
fn streams_over_the_limit_are_refused_and_the_rest_answered() {
    let up = counting(Duration::from_secs(20), 0);
    let fast = echo("fast");
    let w = Weir::start(
        &table(up.port, fast.port),
        &["--h2-max-concurrent-streams", "10"],
    );
    let mut s = raw_connect(w.proc.port);
    let (settings, _) = server_settings(&mut s);
    assert_eq!(setting(&settings, 0x3), Some(10));
    let mut out = Vec::new();
    for i in 0..10u32 {
        frame(
            &mut out,
            HEADERS,
            END_HEADERS | END_STREAM,
            2 * i + 1,
            &request_block(&format!("/slow/{i}")),
        );
    }
    (&s).write_all(&out).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || up
            .requests
            .load(Ordering::SeqCst)
            == 10),
        "10 streams reach the upstream: {}",
        up.requests.load(Ordering::SeqCst)
    );
    // The 11th, while 10 are open, is refused.
    out.clear();
    frame(
        &mut out,
        HEADERS,
        END_HEADERS | END_STREAM,
        21,
        &request_block("/slow/10"),
    );
    (&s).write_all(&out).unwrap();
    let mut refused = None;
    for _ in 0..20 {
        match read_frame(&mut s) {
            Some(f) if f.ty == RST_STREAM && f.stream == 21 => {
                refused = Some(f.error_code());
                break;
            }
            Some(f) if f.ty == PING => {
                let mut out = Vec::new();
                frame(&mut out, PING, ACK, 0, &f.payload);
                (&s).write_all(&out).unwrap();
            }
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(refused, Some(REFUSED_STREAM));
    // The 10 open streams are answered once the upstream lets go.
    up.release.store(true, Ordering::SeqCst);
    let mut ok = std::collections::BTreeSet::new();
    while ok.len() < 10 {
        let f = read_frame(&mut s).expect("responses of the open streams");
        // `:status: 200` is HPACK static-table entry 8.
        if f.ty == HEADERS && f.payload.first() == Some(&0x88) {
            ok.insert(f.stream);
        }
    }
    assert_eq!(ok, (0..10).map(|i| 2 * i + 1).collect());
    assert_eq!(
        up.requests.load(Ordering::SeqCst),
        10,
        "the refused stream went nowhere"
    );
}

#[test]
fn bad_values_are_refused_at_start() {
    for (flag, value, says) in [
        ("--h2-max-concurrent-streams", "0", "0 is not in 1.."),
        (
            "--h2-initial-stream-window",
            "65534",
            "is not between 65535",
        ),
        (
            "--h2-initial-stream-window",
            "2147483648",
            "is not between 65535",
        ),
        (
            "--h2-initial-connection-window",
            "1k",
            "is not a number of bytes",
        ),
        ("--h2-max-header-list-size", "100", "100 is not in 1024.."),
        ("--h2-max-pending-reset-streams", "0", "0 is not in 1.."),
        ("--h2-max-local-reset-streams", "0", "0 is not in 1.."),
        ("--h2-max-cancelled-streams", "0", "0 is not in 1.."),
        ("--h2-ping-interval", "0", "must be above zero"),
        ("--h2-ping-timeout", "0ms", "must be above zero"),
    ] {
        // `weir proxy` and `weir standalone` share the flags.
        let dir = temp_dir("h2-flags");
        let dir = dir.to_str().unwrap();
        for command in [&["proxy"][..], &["standalone", dir]] {
            let out = std::process::Command::new(WEIR)
                .args(command)
                .args(["--listen", "127.0.0.1:0", flag, value])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command:?} {flag} {value}");
            assert!(
                err.contains(flag) && err.contains(says),
                "{command:?} {flag} {value}: {err}"
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

// ---------------------------------------------------------------------------------------------
// Header-list size

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_lists_over_the_limit_are_refused_and_the_connection_lives_on() {
    let fast = echo("fast");
    let w = Weir::start(
        &table(fast.port, fast.port),
        &["--h2-max-header-list-size", "4096"],
    );
    let port = w.proc.port;
    let mut send = h2_connect(port).await;
    // (header value size, the answer: a status, or None for a connection error; whether the
    // connection serves on)
    for (size, answer, lives_on) in [
        (1_000, Some(200), true),
        (3_800, Some(200), true),
        // One HEADERS frame: h2 answers 431 and resets the stream.
        (4_200, Some(431), true),
        (15_000, Some(431), true),
        // HEADERS and CONTINUATION frames: h2 buffers no more than the limit of a block it
        // refuses, and ends a connection that goes on sending one (GOAWAY).
        (40_000, None, false),
        (200, Some(200), true),
    ] {
        let value = "v".repeat(size);
        let r = h2_get(&mut send, port, "/h", &[("x-big", &value)]).await;
        match (&r, answer) {
            (Ok((status, _)), Some(want)) => assert_eq!(*status, want, "{size}"),
            (Err(e), None) => assert!(!e.contains("no answer"), "{size}: {e}"),
            _ => panic!("{size}: {r:?}, expected {answer:?}"),
        }
        // The connection (or, after a connection error, a new one) serves the next request.
        match h2_get(&mut send, port, "/after", &[]).await {
            Ok((status, _)) => {
                assert!(lives_on, "{size}: the connection was not closed");
                assert_eq!(status, 200, "{size}");
            }
            Err(e) => {
                assert!(!lives_on, "{size}: the connection was closed: {e}");
                send = h2_connect(port).await;
                let (status, _) = h2_get(&mut send, port, "/after", &[]).await.unwrap();
                assert_eq!(status, 200, "{size}");
            }
        }
    }
    let other = get(&client(), &w.url("/other"), &[]).await;
    assert_eq!(other.status, 200);
}

// ---------------------------------------------------------------------------------------------
// Rapid reset

/// How a rapid-reset attacker sends its HEADERS + RST_STREAM(CANCEL) pairs.
#[derive(Debug, Clone, Copy)]
enum Style {
    /// 100 pairs a write: the server reads each RST_STREAM with its HEADERS.
    BackToBack,
    /// One write a pair.
    PairPerWrite,
    /// HEADERS, then the RST_STREAM a millisecond later: the server has started the stream
    /// (and its upstream request) by the time it is cancelled.
    Paced,
}

/// One attacker: `connections` connections one after the other, each sent up to `pairs` pairs
/// in `style` (fewer when the server closes it first).
fn rapid_reset(port: u16, style: Style, connections: usize, pairs: usize) -> Vec<Ended> {
    let block = request_block("/slow/attack");
    let rst = CANCEL.to_be_bytes();
    let per_write = match style {
        Style::BackToBack => 100,
        Style::PairPerWrite | Style::Paced => 1,
    };
    (0..connections)
        .map(|_| {
            flood(port, Duration::from_secs(5), |write| {
                let mut out = Vec::with_capacity(per_write * 64);
                match style {
                    Style::BackToBack | Style::PairPerWrite => {
                        if write * per_write >= pairs {
                            return None;
                        }
                        for i in 0..per_write {
                            let id = 2 * (write * per_write + i) as u32 + 1;
                            frame(&mut out, HEADERS, END_HEADERS | END_STREAM, id, &block);
                            frame(&mut out, RST_STREAM, 0, id, &rst);
                        }
                    }
                    Style::Paced => {
                        if write / 2 >= pairs {
                            return None;
                        }
                        let id = 2 * (write / 2) as u32 + 1;
                        if write % 2 == 0 {
                            frame(&mut out, HEADERS, END_HEADERS | END_STREAM, id, &block);
                        } else {
                            std::thread::sleep(Duration::from_millis(1));
                            frame(&mut out, RST_STREAM, 0, id, &rst);
                        }
                    }
                }
                Some(out)
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rapid_reset_costs_bounded_cpu_and_leaves_others_served() {
    // Attack requests go to an upstream that takes 2 s to answer.
    let up = counting(Duration::from_secs(2), 0);
    let fast = echo("fast");
    let w = Weir::start(&table(up.port, fast.port), &[]);
    let (port, pid) = (w.proc.port, w.proc.pid());
    let warm = h2_get(&mut h2_connect(port).await, port, "/", &[]).await;
    assert_eq!(warm.unwrap().0, 200);

    // (style, attackers at once, connections each, pairs a connection at most)
    for (style, attackers, connections, pairs) in [
        (Style::BackToBack, 4, 3, 20_000),
        (Style::PairPerWrite, 4, 3, 20_000),
        (Style::Paced, 3, 2, 2_000),
    ] {
        let stop = Arc::new(AtomicBool::new(false));
        let bystander = tokio::spawn(bystander(port, stop.clone()));
        let upstream_before = up.requests.load(Ordering::SeqCst);
        let cpu_before = cpu_seconds(pid);
        let started = Instant::now();
        let ends = tokio::task::spawn_blocking(move || {
            let threads: Vec<_> = (0..attackers)
                .map(|_| std::thread::spawn(move || rapid_reset(port, style, connections, pairs)))
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        let attack_time = started.elapsed();
        // What the proxy still does for the attack (cancelled upstream requests) settles.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let cpu = cpu_seconds(pid) - cpu_before;
        stop.store(true, Ordering::SeqCst);
        let (ok, sent) = bystander.await.unwrap();
        let upstream = up.requests.load(Ordering::SeqCst) - upstream_before;
        // A graceful GOAWAY names stream 2^31 - 1 and so says nothing of what was taken.
        let streams: u32 = ends
            .iter()
            .filter_map(|e| e.last_stream.filter(|&l| l < 0x7fff_ffff))
            .map(|l| l / 2 + 1)
            .sum();
        eprintln!(
            "rapid reset {style:?}: {} connections in {attack_time:?}, streams the proxy took \
             (GOAWAY last-stream-id) {streams}, proxy CPU {cpu:.2} s, {upstream} upstream \
             requests, bystander {ok}/{sent}; (GOAWAY code, last stream, closed): {:?}",
            ends.len(),
            ends.iter()
                .map(|e| (e.goaway, e.last_stream, e.closed))
                .collect::<Vec<_>>()
        );
        for e in &ends {
            assert!(
                e.closed || e.goaway.is_some(),
                "{style:?}: an attacking connection was neither closed nor sent GOAWAY: {e:?}"
            );
        }
        assert!(
            cpu < 2.0,
            "{style:?}: the attack cost the proxy {cpu:.2} s of CPU"
        );
        assert!(
            upstream < 1_000,
            "{style:?}: {upstream} attack requests reached the upstream"
        );
        assert!(sent >= 2, "{style:?}: the bystander sent {sent}");
        assert_eq!(ok, sent, "{style:?}: bystander requests not answered");
    }
    // After the attacks, everyone is served.
    let after = h2_get(&mut h2_connect(port).await, port, "/", &[]).await;
    assert_eq!(after.unwrap().0, 200);
    assert_eq!(get(&client(), &w.url("/after"), &[]).await.status, 200);
}

/// Sends `GET /slow/...` on `send` and drops it (hyper resets the stream: RST_STREAM CANCEL)
/// once the upstream has the request.
async fn cancel_one(send: &mut H2, port: u16, up: &Counting) {
    let before = up.requests.load(Ordering::SeqCst);
    let req = http::Request::get(format!("http://127.0.0.1:{port}/slow/cancelled"))
        .body(Empty::new())
        .unwrap();
    send.ready().await.expect("connection ready");
    let fut = send.send_request(req);
    let reached = async {
        while up.requests.load(Ordering::SeqCst) == before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::select! {
        r = fut => panic!("answered before it was cancelled: {:?}", r.map(|r| r.status())),
        _ = tokio::time::timeout(Duration::from_secs(10), reached) => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_of_started_streams_close_a_connection_only_past_the_limit() {
    let up = counting(Duration::from_secs(20), 0);
    let fast = echo("fast");
    let w = Weir::start(
        &table(up.port, fast.port),
        &["--h2-max-cancelled-streams", "10"],
    );
    let port = w.proc.port;

    // Ten cancelled streams are within the limit: the connection serves on.
    let mut send = h2_connect(port).await;
    for _ in 0..10 {
        cancel_one(&mut send, port, &up).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h2_get(&mut send, port, "/ok", &[]).await.unwrap().0, 200);
    // The eleventh (11 of 12 streams) closes it: what it sends next is not served.
    cancel_one(&mut send, port, &up).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = h2_get(&mut send, port, "/refused", &[]).await;
    assert!(!matches!(r, Ok((200, _))), "{r:?}");
    let closed = async {
        while !send.is_closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(5), closed)
            .await
            .is_ok(),
        "the connection is closed"
    );
    assert!(
        metrics(&client(), &w)
            .await
            .contains("weir_http2_cancel_closes_total 1"),
        "the close is counted"
    );

    // A connection whose streams are mostly answered may cancel more than the limit.
    let mut send = h2_connect(port).await;
    for i in 0..30 {
        let (status, _) = h2_get(&mut send, port, "/ok", &[]).await.unwrap();
        assert_eq!(status, 200, "{i}");
        cancel_one(&mut send, port, &up).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h2_get(&mut send, port, "/ok", &[]).await.unwrap().0, 200);
    assert!(!send.is_closed());
}

// ---------------------------------------------------------------------------------------------
// CONTINUATION flood

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_floods_are_cut_off_with_bounded_memory() {
    let fast = echo("fast");
    let w = Weir::start(&table(fast.port, fast.port), &[]);
    let (port, pid) = (w.proc.port, w.proc.pid());
    assert_eq!(get(&client(), &w.url("/warm"), &[]).await.status, 200);
    let hwm_before = w.peak_rss();
    // (name, the payload of CONTINUATION frame i): 10,000 frames each, END_HEADERS never set.
    type Payload = fn(usize) -> Vec<u8>;
    let cases: &[(&str, Payload)] = &[
        ("small fields", |i| {
            let mut b = Vec::new();
            hpack_field(&mut b, format!("x-f{i}").as_bytes(), b"flood");
            b
        }),
        ("empty frames", |_| Vec::new()),
        // One field whose value never ends: every frame continues the same literal.
        ("one endless value", |_| vec![b'v'; 16_384]),
        ("full frames of fields", |i| {
            let mut b = Vec::new();
            while b.len() < 16_000 {
                let field = format!("x-{i}-{}", b.len());
                hpack_field(&mut b, field.as_bytes(), &[b'v'; 200]);
            }
            b
        }),
    ];
    for (name, payload) in cases {
        let payload = *payload;
        let endless = name.contains("endless");
        let started = Instant::now();
        let ends = tokio::task::spawn_blocking(move || {
            flood(port, Duration::from_secs(5), |i| {
                let mut out = Vec::new();
                if i == 0 {
                    let mut block = request_block("/flood");
                    // Start a literal whose value is 1 GiB long: only the endless case
                    // continues it; the others start a new field on the next frame
                    // and hpack reports the block malformed or too large.
                    if endless {
                        block.push(0);
                        hpack_str(&mut block, b"x-endless");
                        hpack_int(&mut block, 0, 7, 1 << 30);
                    }
                    frame(&mut out, HEADERS, END_STREAM, 1, &block);
                }
                // 10 frames a write, 10,000 in all.
                (i < 1_000).then(|| {
                    for j in 0..10 {
                        frame(&mut out, CONTINUATION, 0, 1, &payload(i * 10 + j));
                    }
                    out
                })
            })
        })
        .await
        .unwrap();
        let took = started.elapsed();
        let grown = w.peak_rss().saturating_sub(hwm_before);
        eprintln!(
            "CONTINUATION flood ({name}): {} frames written (or buffered) before the close, GOAWAY {:?}, \
             closed {}, {took:?}, VmHWM +{} KiB, VmRSS {} KiB",
            ends.written * 10,
            ends.goaway,
            ends.closed,
            grown / 1024,
            rss(pid) / 1024,
        );
        assert!(ends.closed || ends.goaway.is_some(), "{name}: {ends:?}");
        // Refused as an error (ENHANCE_YOUR_CALM, PROTOCOL_ERROR), not a graceful close. How
        // many frames were written says little: the kernel's buffers take them all.
        assert_ne!(ends.goaway, Some(0), "{name}: {ends:?}");
        assert_eq!(
            ends.responses, 0,
            "{name}: the flood's request was answered"
        );
        assert!(took < Duration::from_secs(10), "{name}: {took:?}");
        assert!(
            grown < 50 << 20,
            "{name}: VmHWM grew by {} KiB",
            grown / 1024
        );
        // Others are still served, over HTTP/2 and HTTP/1.1.
        let mut h2 = h2_connect(port).await;
        assert_eq!(
            h2_get(&mut h2, port, "/after", &[]).await.unwrap().0,
            200,
            "{name}"
        );
        assert_eq!(
            get(&client(), &w.url("/after"), &[]).await.status,
            200,
            "{name}"
        );
    }
}

/// The raw client's encoders: a frame header, and an HPACK integer (RFC 7541 §5.1).
#[test]
fn frame_encoding() {
    let mut out = Vec::new();
    frame(&mut out, DATA, END_STREAM, 3, b"ab");
    assert_eq!(out, [0, 0, 2, 0, 1, 0, 0, 0, 3, b'a', b'b']);
    let mut i = Vec::new();
    hpack_int(&mut i, 0, 7, 1337);
    assert_eq!(i, [127, 186, 9]);
}
