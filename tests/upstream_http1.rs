//! Weir's HTTP/1.1 client against scripted upstreams: response framing (length, chunked, until
//! close), informational responses, request body framing, an answer before the upload ends
//! (refusing it, or echoing it full-duplex), kept-alive connections the upstream closed,
//! malformed responses, and a protocol switch with bytes right behind the 101.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;

fn proxy_to(up: &Scripted) -> Weir {
    Weir::start(
        &format!(
            "routes:\n- {{id: r, service: s}}\nservices:\n- {{id: s, host: 127.0.0.1, port: {}, retries: 1}}\n",
            up.port
        ),
        &["--access-log", "false"],
    )
}

/// One request as the upstream received it.
struct Received {
    head: String,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// Reads one chunk of a chunked body: its data, empty for the last chunk.
fn read_chunk(r: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut size = String::new();
    r.read_line(&mut size).unwrap();
    let n = usize::from_str_radix(size.trim(), 16).unwrap();
    let mut chunk = vec![0; n + 2];
    r.read_exact(&mut chunk).unwrap();
    chunk.truncate(n);
    chunk
}

/// Answers 200 with `body` and its length.
fn respond(w: &mut TcpStream, body: &str) {
    write!(
        w,
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
}

/// Reads one request (head and body, by its framing); `None` when the peer closed.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<Received> {
    let head = read_head(r)?;
    let mut req = Received {
        head,
        body: Vec::new(),
    };
    if let Some(n) = req.header("content-length") {
        let mut body = vec![0; n.parse().unwrap()];
        r.read_exact(&mut body).unwrap();
        req.body = body;
    } else if req.header("transfer-encoding").as_deref() == Some("chunked") {
        loop {
            let chunk = read_chunk(r);
            if chunk.is_empty() {
                break;
            }
            req.body.extend_from_slice(&chunk);
        }
    }
    Some(req)
}

/// Reads a client-side response whose body runs to the connection's end.
fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_and_close_delimited_responses_arrive_whole() {
    let up = scripted(|n, mut r, mut w| {
        if n == 0 {
            // Chunked, in pieces, then a second request on the same connection.
            let req = read_request(&mut r).unwrap();
            assert!(
                req.head.starts_with("GET /chunked HTTP/1.1\r\n"),
                "{}",
                req.head
            );
            w.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel")
                .unwrap();
            std::thread::sleep(Duration::from_millis(50));
            w.write_all(b"lo\r\n6;ext=1\r\n world\r\n0\r\ntrailer: x\r\n\r\n")
                .unwrap();
            let req = read_request(&mut r).unwrap();
            assert!(req.head.starts_with("GET /again "), "{}", req.head);
            w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nagain")
                .unwrap();
            let _ = read_request(&mut r);
        } else {
            // No length: the body ends when the upstream closes.
            let req = read_request(&mut r).unwrap();
            assert!(req.head.starts_with("GET /close "), "{}", req.head);
            w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil ")
                .unwrap();
            std::thread::sleep(Duration::from_millis(50));
            w.write_all(b"the end").unwrap();
        }
    });
    let weir = proxy_to(&up);
    let c = client();
    let r = get(&c, &weir.url("/chunked"), &[]).await;
    assert_eq!((r.status, &r.body[..]), (200, &b"hello world"[..]));
    let r = get(&c, &weir.url("/again"), &[]).await;
    assert_eq!((r.status, &r.body[..]), (200, &b"again"[..]));
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "chunked response reused"
    );
    let r = get(&c, &weir.url("/close"), &[]).await;
    assert_eq!((r.status, &r.body[..]), (200, &b"until the end"[..]));
}

#[test]
fn informational_responses_are_dropped_and_reason_phrases_kept() {
    let up = scripted(|_, mut r, mut w| {
        while read_request(&mut r).is_some() {
            w.write_all(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n\
                  HTTP/1.1 201 Made It\r\ncontent-length: 2\r\n\r\nok",
            )
            .unwrap();
        }
    });
    let weir = proxy_to(&up);
    let answer = raw(
        weir.proc.port,
        b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    );
    assert!(answer.starts_with("HTTP/1.1 201 Made It\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    assert!(!answer.contains("link:"), "{answer}");
}

#[test]
fn request_bodies_keep_their_length_or_travel_chunked() {
    let up = scripted(|_, mut r, mut w| {
        while let Some(req) = read_request(&mut r) {
            let framing = match (
                req.header("content-length"),
                req.header("transfer-encoding"),
            ) {
                (Some(n), None) => format!("length {n}"),
                (None, Some(te)) => te,
                other => panic!("framing {other:?}"),
            };
            respond(
                &mut w,
                &format!("{framing}: {}", String::from_utf8_lossy(&req.body)),
            );
        }
    });
    let weir = proxy_to(&up);
    let t = Duration::from_secs(10);
    let sized = raw(
        weir.proc.port,
        b"POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 5\r\n\r\nabcde",
        t,
    );
    assert!(sized.ends_with("\r\n\r\nlength 5: abcde"), "{sized}");
    let chunked = raw(
        weir.proc.port,
        b"POST / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n\
          3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
        t,
    );
    assert!(chunked.ends_with("\r\n\r\nchunked: abcdefg"), "{chunked}");
}

#[test]
fn an_answer_before_the_upload_ends_reaches_the_client() {
    let up = scripted(|_, mut r, mut w| {
        read_head(&mut r).unwrap();
        // Refuse the body without reading it.
        w.write_all(
            b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\ncontent-length: 4\r\n\r\nnope",
        )
        .unwrap();
        std::thread::sleep(Duration::from_secs(2));
    });
    let weir = proxy_to(&up);
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // 64 MiB announced, far more than the socket buffers hold; sent from another thread.
    let size = 64 << 20;
    write!(
        s,
        "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n"
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    let upload = std::thread::spawn(move || {
        let chunk = vec![b'u'; 256 * 1024];
        for _ in 0..(size / chunk.len()) {
            if writer.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    // The upstream's own answer, not one of Weir's.
    read_head(&mut r).unwrap();
    let mut body = [0u8; 4];
    r.read_exact(&mut body).unwrap();
    assert_eq!(&body, b"nope");
    drop(r);
    upload.join().unwrap();
}

#[test]
fn an_early_answer_still_gets_the_whole_body_but_the_connection_is_not_reused() {
    let size: usize = 4 << 20;
    let received = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = received.clone();
    let up = scripted(move |n, mut r, mut w| {
        if n > 0 {
            while let Some(req) = read_request(&mut r) {
                let line = req.head.lines().next().unwrap().to_string();
                respond(&mut w, &format!("{line} on {n}"));
            }
            return;
        }
        // Accept at once, then read the whole body; Weir must not send another request here.
        let head = read_head(&mut r).unwrap();
        assert!(head.contains(&format!("content-length: {size}")), "{head}");
        w.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            .unwrap();
        let mut body = vec![0u8; size];
        r.read_exact(&mut body).unwrap();
        assert!(body.iter().all(|&b| b == b'u'));
        flag.store(true, Ordering::SeqCst);
        if let Some(next) = read_request(&mut r) {
            respond(&mut w, "reused after an early answer");
            panic!(
                "a second request on an early-answered connection: {}",
                next.head
            );
        }
    });
    let weir = proxy_to(&up);
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n"
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    let mut next = s.try_clone().unwrap();
    // The body's tail waits for the answer, so the answer surely comes first.
    let (answered, wait_answer) = std::sync::mpsc::channel::<()>();
    let upload = std::thread::spawn(move || {
        let chunk = vec![b'u'; 64 * 1024];
        for i in 0..(size / chunk.len()) {
            if i == 1 {
                wait_answer.recv().unwrap();
            }
            writer.write_all(&chunk).unwrap();
        }
    });
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 202"), "{status}");
    answered.send(()).unwrap();
    upload.join().unwrap();
    // The whole body still reached the upstream.
    assert!(eventually(Duration::from_secs(20), || received.load(Ordering::SeqCst)));
    std::thread::sleep(Duration::from_millis(100));
    next.write_all(b"GET /next HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = r.read_to_string(&mut answer);
    assert!(answer.ends_with("GET /next HTTP/1.1 on 1"), "{answer}");
}

#[test]
fn a_body_an_upstream_ignored_cannot_answer_another_request() {
    // The CL.0 pattern: the upstream answers without reading the body, then parses the body
    // as the next request on the connection. Its answer to that must never reach a client.
    let size: usize = 4 << 20;
    let head_for =
        |len: usize| format!("GET /smuggled HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\r\n");
    // The smuggled request's own body pads the upload to `size` exactly.
    let mut pad = size - head_for(0).len();
    while head_for(pad).len() + pad != size {
        pad = size - head_for(pad).len();
    }
    let smuggled = head_for(pad);
    let body_len = size;
    let up = scripted(move |n, mut r, mut w| {
        let mut first = true;
        while let Some(head) = read_head(&mut r) {
            let line = head.lines().next().unwrap().to_string();
            if first && n == 0 {
                // Answer the upload at once and leave its body on the wire.
                first = false;
                respond(&mut w, "upload accepted");
                continue;
            }
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length: ")
                        .or(l.strip_prefix("Content-Length: "))
                })
                .map_or(0, |v| v.trim().parse().unwrap());
            let mut body = vec![0u8; len];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            if line.contains("/smuggled") {
                // Late enough that the connection looks clean when the upload ends.
                std::thread::sleep(Duration::from_millis(800));
            }
            respond(&mut w, &format!("{line} on {n}"));
        }
    });
    let weir = proxy_to(&up);
    let mut body = smuggled.clone().into_bytes();
    body.resize(body_len, b'p');
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {body_len}\r\n\r\n"
    )
    .unwrap();
    let mut writer = s.try_clone().unwrap();
    // The body's tail waits for the answer: the upstream answered before the body was sent
    // whole (were the body through first, Weir could not tell this upstream from a good one).
    let (answered, wait_answer) = std::sync::mpsc::channel::<()>();
    let upload = std::thread::spawn(move || {
        writer.write_all(&body[..64 * 1024]).unwrap();
        wait_answer.recv().unwrap();
        writer.write_all(&body[64 * 1024..]).unwrap();
    });
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    read_head(&mut r).unwrap();
    let mut first = vec![0u8; "upload accepted".len()];
    r.read_exact(&mut first).unwrap();
    answered.send(()).unwrap();
    upload.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Later requests (on the same worker, whose pool the connection would have gone to) are
    // answered by the upstream for themselves.
    for i in 0..3 {
        write!(s, "GET /next/{i} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        let head = read_head(&mut r).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_string)
            })
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut answer = vec![0u8; len];
        r.read_exact(&mut answer).unwrap();
        let answer = String::from_utf8(answer).unwrap();
        assert!(
            answer.starts_with(&format!("GET /next/{i} HTTP/1.1 on ")),
            "{answer}"
        );
        assert!(!answer.contains("smuggled"), "{answer}");
    }
}

#[test]
fn a_full_duplex_upstream_answers_while_the_body_streams() {
    // Echoes each chunk as it arrives, having answered at once.
    let up = scripted(|_, mut r, mut w| {
        read_head(&mut r).unwrap();
        w.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .unwrap();
        loop {
            let chunk = read_chunk(&mut r);
            write!(w, "{:x}\r\n", chunk.len()).unwrap();
            w.write_all(&chunk).unwrap();
            w.write_all(b"\r\n").unwrap();
            if chunk.is_empty() {
                return;
            }
        }
    });
    let weir = proxy_to(&up);
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /duplex HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    // Each piece is sent only once the echo of the one before came back.
    for word in ["first", "second", "third"] {
        write!(s, "{:x}\r\n{word}\r\n", word.len()).unwrap();
        while !seen.contains(word) {
            let n = s.read(&mut buf).expect("the echo did not come back");
            assert!(n > 0, "closed early: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    while !seen.ends_with("0\r\n\r\n") {
        let n = s.read(&mut buf).expect("the response did not end");
        assert!(n > 0, "closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_closed_by_the_upstream_is_retried() {
    let up = scripted(|n, mut r, mut w| {
        let req = read_request(&mut r).unwrap();
        if n == 0 {
            w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\none")
                .unwrap();
            // Read the next request, then close without a word: the keep-alive race.
            let _ = read_request(&mut r);
            return;
        }
        respond(
            &mut w,
            &format!("{} on {n}", req.head.lines().next().unwrap()),
        );
        while read_request(&mut r).is_some() {}
    });
    let weir = proxy_to(&up);
    let c = client();
    assert_eq!(&get(&c, &weir.url("/1"), &[]).await.body[..], b"one");
    let r = get(&c, &weir.url("/2"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"GET /2 HTTP/1.1 on 1");
    // Not for a POST: the upstream may have acted on it.
    let up = scripted(|_, mut r, mut w| {
        let _ = read_request(&mut r);
        w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\none")
            .unwrap();
        let _ = read_request(&mut r);
    });
    let weir = proxy_to(&up);
    assert_eq!(get(&c, &weir.url("/1"), &[]).await.status, 200);
    // The connection goes back to the pool just after the answer reached the client: without
    // this pause a busy machine sends the POST on a new connection (which then answers).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = send(&c, "POST", &weir.url("/2"), &[], "x").await;
    assert_eq!(r.status, 502);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
}

#[test]
fn malformed_or_cut_responses() {
    let up = scripted(|n, mut r, mut w| {
        let _ = read_request(&mut r);
        let answer: &[u8] = match n {
            0 => b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 5\r\n\r\nabcd",
            1 => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            2 => {
                // Let the proxy pass the first bytes on before the connection drops.
                w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
                    .unwrap();
                std::thread::sleep(Duration::from_millis(200));
                return;
            }
            _ => b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        };
        w.write_all(answer).unwrap();
    });
    let weir = proxy_to(&up);
    let t = Duration::from_secs(10);
    let req = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let ambiguous = raw(weir.proc.port, req, t);
    assert!(ambiguous.starts_with("HTTP/1.1 502"), "{ambiguous}");
    // A bad chunk after a good head: the client's response is cut off (before its head went
    // out, as here, or after), never completed.
    let bad_chunk = raw(weir.proc.port, req, t);
    assert!(
        bad_chunk.is_empty() || bad_chunk.starts_with("HTTP/1.1 200"),
        "{bad_chunk}"
    );
    assert!(!bad_chunk.ends_with("0\r\n\r\n"), "{bad_chunk}");
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(t)).unwrap();
    s.write_all(req).unwrap();
    let cut = read_to_close(&mut s);
    assert!(cut.starts_with("HTTP/1.1 200"), "{cut}");
    assert!(cut.contains("content-length: 10\r\n"), "{cut}");
    assert!(cut.ends_with("\r\n\r\nabc"), "{cut}");
    let bad_header = raw(weir.proc.port, req, t);
    assert!(bad_header.starts_with("HTTP/1.1 502"), "{bad_header}");
}

#[test]
fn bytes_right_behind_a_101_reach_the_client() {
    let up = scripted(|_, mut r, mut w| {
        let req = read_request(&mut r).unwrap();
        assert_eq!(
            req.header("upgrade").as_deref(),
            Some("x-test"),
            "{}",
            req.head
        );
        w.write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: x-test\r\n\r\nHELLO")
            .unwrap();
        let mut buf = [0u8; 4];
        r.read_exact(&mut buf).unwrap();
        w.write_all(&buf).unwrap();
    });
    // x-test is not websocket: the route allows it explicitly.
    let weir = Weir::start(
        &format!(
            "routes:\n- {{id: r, service: s, upgrade_protocols: [x-test]}}\nservices:\n- {{id: s, host: 127.0.0.1, port: {}}}\n",
            up.port
        ),
        &["--access-log", "false"],
    );
    let mut s = TcpStream::connect(("127.0.0.1", weir.proc.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: x-test\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let head = read_head(&mut r).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut hello = [0u8; 5];
    r.read_exact(&mut hello).unwrap();
    assert_eq!(&hello, b"HELLO");
    s.write_all(b"ping").unwrap();
    let mut pong = [0u8; 4];
    r.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"ping");
}
