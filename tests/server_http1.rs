//! Weir's own HTTP/1.1 server loop (the "fast path" for client connections), driven over raw
//! sockets: pipelined requests answered in order, the hand-over to hyper at the first request
//! the fast path does not take (a body, HTTP/1.0, HEAD, a malformed head, too many headers)
//! with the rest of the connection still served, `Connection: close` (asked by the client, or
//! at shutdown), the response framing Weir encodes itself (an upstream's length kept, chunked
//! otherwise, nothing for 204/304, a `date` added when missing, reason phrases kept), an
//! upstream body cut short, a client going away (its request cancelled), idle or half-sent
//! connections closed on time, shutdown (also with a request that hyper takes), a 1xx refused as
//! a final answer, no HTTP/2 after HTTP/1.1, and 431 under a small `--max-header-bytes`.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::*;

/// How long any single read waits before the test fails (no test waits unbounded).
const READ_LIMIT: Duration = Duration::from_secs(5);

fn table(port: u16) -> String {
    format!(
        "routes:\n- {{id: r, service: s}}\nservices:\n- {{id: s, host: 127.0.0.1, port: {port}}}\n"
    )
}

/// The proxy in front of `port`, without access log lines.
fn proxy(port: u16, extra: &[&str]) -> Weir {
    let mut args = vec!["--access-log", "false"];
    args.extend_from_slice(extra);
    Weir::start(&table(port), &args)
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` shaped.
fn is_http_date(s: &str) -> bool {
    s.len() == 29 && s.ends_with(" GMT") && &s[3..5] == ", "
}

/// One response as the client received it.
#[derive(Debug)]
struct Response {
    status_line: String,
    status: u16,
    /// Names lower-cased, in order, repeats kept.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The chunk sizes, when the body came chunked.
    chunks: Option<Vec<usize>>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(k, _)| k == name).count()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {self:?} body {:?}", lossy(&self.body)))
    }
}

/// A raw client connection with what was read but not yet consumed.
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(READ_LIMIT)).unwrap();
        Conn { s, buf: Vec::new() }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// Reads more into the buffer; false when the peer closed (FIN or reset). Fails the test
    /// when nothing arrives within the read limit.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.s.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!(
                    "nothing more within {READ_LIMIT:?}; unconsumed so far: {:?}",
                    lossy(&self.buf)
                )
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => false,
            Err(e) => panic!("read: {e}"),
        }
    }

    fn read_line(&mut self) -> String {
        loop {
            if let Some(i) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                return lossy(&line[..i]);
            }
            assert!(
                self.fill(),
                "closed before a line ended: {:?}",
                lossy(&self.buf)
            );
        }
    }

    fn read_exact(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(
                self.fill(),
                "closed after {} of {n} bytes: {:?}",
                self.buf.len(),
                lossy(&self.buf)
            );
        }
        self.buf.drain(..n).collect()
    }

    /// Reads a response head: (status line, headers).
    fn read_head(&mut self) -> (String, Vec<(String, String)>) {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            assert!(
                self.fill(),
                "closed before a complete response head: {:?}",
                lossy(&self.buf)
            );
        };
        let head: Vec<u8> = self.buf.drain(..end + 4).collect();
        let head = lossy(&head[..end]);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap().to_string();
        let headers = lines
            .map(|l| {
                let (k, v) = l
                    .split_once(':')
                    .unwrap_or_else(|| panic!("bad header line {l:?} in {head:?}"));
                (k.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        (status_line, headers)
    }

    /// Reads one response; `to_head` says it answers a HEAD request (no body follows).
    fn read_response(&mut self, to_head: bool) -> Response {
        let (status_line, headers) = self.read_head();
        assert!(
            status_line.starts_with("HTTP/1."),
            "not a status line: {status_line:?}"
        );
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {status_line:?}"));
        let mut r = Response {
            status_line,
            status,
            headers,
            body: Vec::new(),
            chunks: None,
        };
        if to_head || status < 200 || status == 204 || status == 304 {
            return r;
        }
        if r.header("transfer-encoding").is_some() {
            assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{r:?}");
            let mut sizes = Vec::new();
            loop {
                let line = self.read_line();
                let size = line.split(';').next().unwrap().trim();
                let n = usize::from_str_radix(size, 16)
                    .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
                if n == 0 {
                    // Trailers, then the empty line.
                    while !self.read_line().is_empty() {}
                    break;
                }
                sizes.push(n);
                let data = self.read_exact(n);
                r.body.extend_from_slice(&data);
                assert_eq!(self.read_exact(2), b"\r\n", "chunk not followed by CRLF");
            }
            r.chunks = Some(sizes);
        } else if let Some(n) = r.header("content-length") {
            let n: usize = n.parse().unwrap_or_else(|_| panic!("bad length {n:?}"));
            r.body = self.read_exact(n);
        } else {
            // Delimited by the close.
            while self.fill() {}
            r.body = std::mem::take(&mut self.buf);
        }
        r
    }

    /// Reads until the peer closes and returns the bytes that came before; `Err` (with them)
    /// when the connection is still open after `limit`.
    fn closed_within(&mut self, limit: Duration) -> Result<Vec<u8>, Vec<u8>> {
        let deadline = Instant::now() + limit;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::mem::take(&mut self.buf));
            }
            self.s.set_read_timeout(Some(left)).unwrap();
            match self.s.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        self.s.set_read_timeout(Some(READ_LIMIT)).unwrap();
        Ok(std::mem::take(&mut self.buf))
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    // Three requests in one write: the fast path answers them from its buffer, in order.
    c.send(
        b"GET /one HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /two?x=1 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /three HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    for (path, query) in [("/one", None), ("/two", Some("x=1")), ("/three", None)] {
        let r = c.read_response(false);
        assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{r:?}");
        assert_eq!(r.count("content-length"), 1, "{r:?}");
        assert!(r.header("connection").is_none(), "{r:?}");
        let info = r.json();
        assert_eq!(info["method"], "GET", "{info}");
        assert_eq!(info["path"], path, "{info}");
        assert_eq!(info["query"].as_str(), query, "{info}");
        assert_eq!(r.header("x-echo-name"), Some("up"));
    }
    assert!(c.buf.is_empty(), "extra bytes: {:?}", lossy(&c.buf));
    // The connection is still open for more.
    c.send(b"GET /four HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/four");
}

#[test]
fn the_upstream_gets_the_normalised_origin_form_target() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    // A target already in normal form goes on as the client sent it; dot segments are
    // resolved first; an absolute-form target goes on as its path and query.
    for (target, path, query) in [
        ("/a/b?x=1&y", "/a/b", Some("x=1&y")),
        ("/a/./b/../c?x=1", "/a/c", Some("x=1")),
        ("http://t/abs/./x?q=2", "/abs/x", Some("q=2")),
    ] {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        let r = c.read_response(false);
        assert_eq!(r.status, 200, "{target}: {r:?}");
        let info = r.json();
        assert_eq!(info["path"], path, "{target}: {info}");
        assert_eq!(info["query"].as_str(), query, "{target}: {info}");
    }
}

#[test]
fn a_body_request_mid_connection_hands_over_to_hyper() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);

    // One request at a time: fast path, hyper from the POST on, and hyper again.
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /before HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/before");
    c.send(b"POST /post HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    let info = r.json();
    assert_eq!(
        (&info["method"], &info["path"], &info["body_length"]),
        (&"POST".into(), &"/post".into(), &serde_json::Value::from(5)),
        "{info}"
    );
    c.send(b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    let info = r.json();
    assert_eq!(
        (&info["method"], &info["path"]),
        (&"GET".into(), &"/after".into())
    );
    assert_eq!(info["body_length"], 0);

    // All in one write: the bytes the fast path read past the first request (the POST's head
    // and body, and everything behind them) reach hyper intact.
    let mut c = Conn::open(weir.proc.port);
    c.send(
        b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n\
          POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello\
          DELETE /c HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n\
          PUT /d HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n\
          GET /e HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    for (method, path, len) in [
        ("GET", "/a", 0),
        ("POST", "/b", 5),
        ("DELETE", "/c", 0),
        ("PUT", "/d", 7),
        ("GET", "/e", 0),
    ] {
        let r = c.read_response(false);
        assert_eq!(r.status, 200, "{method} {path}: {r:?}");
        let info = r.json();
        assert_eq!(info["method"], method, "{info}");
        assert_eq!(info["path"], path, "{info}");
        assert_eq!(info["body_length"], len, "{info}");
    }
    assert!(c.buf.is_empty(), "extra bytes: {:?}", lossy(&c.buf));
}

#[test]
fn bodiless_methods_with_an_empty_length_stay_on_one_connection() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    for (method, extra) in [
        ("DELETE", "Content-Length: 0\r\n"),
        ("OPTIONS", ""),
        ("GET", "content-length: 0\r\n"),
    ] {
        c.send(format!("{method} /m HTTP/1.1\r\nHost: t\r\n{extra}\r\n").as_bytes());
        let r = c.read_response(false);
        assert_eq!(r.status, 200, "{method}: {r:?}");
        let info = r.json();
        assert_eq!(info["method"], method, "{info}");
        assert_eq!(info["body_length"], 0, "{info}");
    }
}

#[test]
fn connection_close_is_honoured() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);

    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /bye HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/bye");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    assert_eq!(r.count("connection"), 1, "{r:?}");
    let rest = c
        .closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("still open after Connection: close; read {:?}", lossy(&b)));
    assert!(rest.is_empty(), "{:?}", lossy(&rest));

    // Asked on a later request of a kept-alive connection, among other tokens; a pipelined
    // request behind it is not answered.
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /first HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200);
    assert!(r.header("connection").is_none(), "{r:?}");
    c.send(
        b"GET /last HTTP/1.1\r\nHost: t\r\nConnection: keep-alive, Close\r\n\r\n\
          GET /never HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let r = c.read_response(false);
    assert_eq!(r.json()["path"], "/last");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    let rest = c
        .closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("still open after Connection: close; read {:?}", lossy(&b)));
    assert!(
        rest.is_empty(),
        "answered past the close: {:?}",
        lossy(&rest)
    );
}

#[test]
fn responses_carry_date_and_framing() {
    const UPSTREAM_DATE: &str = "Mon, 30 Nov 2026 12:00:00 GMT";
    let up = scripted(|_, mut r, mut w| {
        while let Some(head) = read_head(&mut r) {
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            match path.as_str() {
                "/chunked" => {
                    // Two chunks apart in time, no date, a reason phrase of its own.
                    w.write_all(
                        b"HTTP/1.1 200 Fine Thanks\r\ntransfer-encoding: chunked\r\nx-up: 1\r\n\r\n\
                          5\r\nhello\r\n",
                    )
                    .unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                    w.write_all(b"6\r\n world\r\n0\r\n\r\n").unwrap();
                }
                "/length" => write!(
                    w,
                    "HTTP/1.1 200 OK\r\ncontent-length: 12\r\ndate: {UPSTREAM_DATE}\r\n\r\nhello length"
                )
                .unwrap(),
                "/big" => {
                    // Chunks larger than what the fast path copies behind the head.
                    w.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                        .unwrap();
                    for b in [b'a', b'b', b'c'] {
                        write!(w, "{:x}\r\n", 40_000).unwrap();
                        w.write_all(&[b; 40_000]).unwrap();
                        w.write_all(b"\r\n").unwrap();
                    }
                    w.write_all(b"0\r\n\r\n").unwrap();
                }
                _ => w
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    .unwrap(),
            }
        }
    });
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);

    // (a) Chunked upstream, no date: chunked to the client, decoding to the whole body, with
    // a date added and the upstream's reason phrase.
    c.send(b"GET /chunked HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status_line, "HTTP/1.1 200 Fine Thanks", "{r:?}");
    assert_eq!(r.count("transfer-encoding"), 1, "{r:?}");
    assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{r:?}");
    assert_eq!(r.count("content-length"), 0, "{r:?}");
    assert!(r.chunks.as_ref().is_some_and(|c| !c.is_empty()), "{r:?}");
    assert_eq!(lossy(&r.body), "hello world");
    assert_eq!(r.header("x-up"), Some("1"));
    assert_eq!(r.count("date"), 1, "{r:?}");
    let date = r.header("date").unwrap();
    assert!(is_http_date(date), "{date:?}");

    // (b) The upstream's length and date are kept; the connection carries another request.
    c.send(b"GET /length HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{r:?}");
    assert_eq!(r.header("content-length"), Some("12"), "{r:?}");
    assert_eq!(r.count("content-length"), 1, "{r:?}");
    assert_eq!(r.count("transfer-encoding"), 0, "{r:?}");
    assert_eq!(lossy(&r.body), "hello length");
    assert_eq!(r.count("date"), 1, "{r:?}");
    assert_eq!(r.header("date"), Some(UPSTREAM_DATE), "{r:?}");

    // Large chunks arrive whole and in order.
    c.send(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{:?}", r.status_line);
    assert_eq!(r.body.len(), 120_000);
    assert!(r.body[..40_000].iter().all(|&b| b == b'a'));
    assert!(r.body[40_000..80_000].iter().all(|&b| b == b'b'));
    assert!(r.body[80_000..].iter().all(|&b| b == b'c'));

    c.send(b"GET /length HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(lossy(&r.body), "hello length");
    assert!(c.buf.is_empty(), "extra bytes: {:?}", lossy(&c.buf));
}

#[test]
fn bodiless_statuses_and_large_bodies_keep_the_connection_usable() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /?status=204 HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status_line, "HTTP/1.1 204 No Content", "{r:?}");
    assert_eq!(r.count("content-length"), 0, "a 204 with a length: {r:?}");
    assert_eq!(r.count("transfer-encoding"), 0, "{r:?}");
    c.send(b"GET /?status=304 HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 304, "{r:?}");
    assert_eq!(r.count("transfer-encoding"), 0, "{r:?}");
    // A megabyte streamed by the upstream in 64 KiB frames.
    c.send(b"GET /?bytes=1000000 HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{:?}", r.status_line);
    assert_eq!(r.body.len(), 1_000_000);
    assert!(r.body.iter().all(|&b| b == b'x'));
    // Nothing was left behind any of them.
    c.send(b"GET /end HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/end");
}

#[test]
fn an_upstream_cut_mid_body_cuts_the_client() {
    let up = scripted(|_, mut r, mut w| {
        if read_head(&mut r).is_none() {
            return;
        }
        w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
            .unwrap();
        // Let the proxy pass the first bytes on, then close the connection.
        std::thread::sleep(Duration::from_millis(200));
    });
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    // Keep-alive: only the cut itself may end the connection.
    c.send(b"GET /cut HTTP/1.1\r\nHost: t\r\n\r\n");
    let started = Instant::now();
    let (status, headers) = c.read_head();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "content-length" && v == "100"),
        "{headers:?}"
    );
    let rest = c.closed_within(Duration::from_secs(5)).unwrap_or_else(|b| {
        panic!(
            "client connection left open after the upstream cut; body so far {:?}",
            lossy(&b)
        )
    });
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(lossy(&rest), "0123456789", "never completed, never padded");
}

#[test]
fn http10_and_head_requests_still_work() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);

    // HTTP/1.0 without keep-alive: answered, then closed.
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /ten HTTP/1.0\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/ten");
    let rest = c
        .closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("HTTP/1.0 connection left open; read {:?}", lossy(&b)));
    assert!(rest.is_empty(), "{:?}", lossy(&rest));

    // HTTP/1.0 keep-alive, then HTTP/1.1 on the same connection (hyper serves both).
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /ten-ka HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/ten-ka");
    c.send(b"GET /eleven HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/eleven");

    // HEAD after a fast-path GET, then GET: the HEAD answer has a length but no body.
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /g1 HTTP/1.1\r\nHost: t\r\n\r\n");
    let full = c.read_response(false);
    assert_eq!(full.json()["path"], "/g1");
    c.send(b"HEAD /g1 HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(true);
    assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{r:?}");
    assert!(
        r.header("content-length").is_some() || r.header("transfer-encoding").is_some(),
        "{r:?}"
    );
    c.send(b"GET /g2 HTTP/1.1\r\nHost: t\r\n\r\n");
    // A body after the HEAD answer would show up here instead of a status line.
    let r = c.read_response(false);
    assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{r:?}");
    assert_eq!(r.json()["path"], "/g2");

    // HEAD as the first request of a connection.
    let mut c = Conn::open(weir.proc.port);
    c.send(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\nGET /after-head HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(true);
    assert_eq!(r.status, 200, "{r:?}");
    let r = c.read_response(false);
    assert_eq!(r.status_line, "HTTP/1.1 200 OK", "{r:?}");
    assert_eq!(r.json()["path"], "/after-head");
}

fn many_headers(n: usize) -> String {
    let mut req = String::from("GET /many HTTP/1.1\r\nHost: t\r\n");
    for i in 1..n {
        req.push_str(&format!("X-H{i}: v\r\n"));
    }
    req.push_str("\r\n");
    req
}

#[test]
fn garbage_gets_400_and_too_many_headers_431() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);
    let port = weir.proc.port;
    let t = Duration::from_secs(5);

    let bad = raw(port, b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", t);
    assert!(bad.starts_with("HTTP/1.1 400 "), "{bad}");

    // After a request the fast path served, on the same connection.
    let mut c = Conn::open(port);
    c.send(b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read_response(false).json()["path"], "/ok");
    c.send(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 400, "{r:?}");
    c.closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("open after a 400; read {:?}", lossy(&b)));

    // 200 headers, twice the default --max-headers.
    let many = many_headers(200);
    let answer = raw(port, many.as_bytes(), t);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    let mut c = Conn::open(port);
    c.send(b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read_response(false).status, 200);
    c.send(many.as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 431, "{r:?}");
}

#[test]
fn header_counts_follow_max_headers_on_both_sides_of_the_hand_over() {
    // Answers with the number of header lines it received.
    let up = scripted(|_, mut r, mut w| {
        while let Some(head) = read_head(&mut r) {
            let n = head.lines().skip(1).filter(|l| !l.is_empty()).count();
            let body = n.to_string();
            write!(
                w,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
    });
    let count_seen = |r: &Response| -> usize { lossy(&r.body).parse().unwrap() };

    // Default limit (100): exactly 100 is served (the fast path takes it), 101 is not.
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    c.send(many_headers(100).as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(count_seen(&r) >= 100, "{r:?}");
    c.send(many_headers(101).as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 431, "{r:?}");

    // Over the fast path's own header slots (128) but within --max-headers: hyper serves it.
    let weir = proxy(up.port, &["--max-headers", "200"]);
    let mut c = Conn::open(weir.proc.port);
    c.send(many_headers(150).as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(count_seen(&r) >= 150, "{r:?}");
    c.send(many_headers(200).as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    c.send(many_headers(201).as_bytes());
    let r = c.read_response(false);
    assert_eq!(r.status, 431, "{r:?}");
}

#[test]
fn a_client_that_goes_away_cancels_its_request() {
    // The upstream answers only after 8 s; it reports when Weir gives its connection up.
    let (tx, rx) = std::sync::mpsc::channel();
    let up = scripted(move |_, mut r, _w| {
        if read_head(&mut r).is_none() {
            return;
        }
        let started = Instant::now();
        let mut rest = Vec::new();
        // Read timeout 20 s (scripted): EOF here means Weir closed the upstream connection.
        let _ = r.read_to_end(&mut rest);
        let _ = tx.send(started.elapsed());
    });
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(300));
    drop(c);
    let took = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the upstream connection outlived its client by 10 s");
    assert!(
        took < Duration::from_secs(5),
        "upstream released after {took:?}"
    );

    // A client that half-closes after pipelining: what is buffered when its end of stream
    // shows is answered; the request in flight when it shows is cancelled, as if it had gone.
    let up = echo("up");
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /h1 HTTP/1.1\r\nHost: t\r\n\r\nGET /h2 HTTP/1.1\r\nHost: t\r\n\r\n");
    c.s.shutdown(Shutdown::Write).unwrap();
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/h1");
    c.closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("half-closed connection left open; read {:?}", lossy(&b)));
}

#[test]
fn a_1xx_final_answer_is_refused() {
    let up = echo("up");
    let config = format!(
        "{}plugins:\n- {{id: t, name: request-termination, route: r, config: {{status_code: 103, trigger: x-hint}}}}\n",
        table(up.port)
    );
    let weir = Weir::start(&config, &["--access-log", "false"]);
    let mut c = Conn::open(weir.proc.port);
    // A 103 written as the answer would make the client pair /b's answer with /a.
    c.send(b"GET /a HTTP/1.1\r\nHost: t\r\nX-Hint: 1\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    let rest = c
        .closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("open after a refused 1xx; read {:?}", lossy(&b)));
    assert!(rest.is_empty(), "{:?}", lossy(&rest));
}

#[test]
fn an_http2_preface_after_an_http1_request_is_not_http2() {
    let up = echo("up");
    let weir = proxy(up.port, &[]);
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read_response(false).status, 200);
    // Preface plus an empty SETTINGS frame.
    c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00");
    let rest = c
        .closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("connection kept open after a preface; read {:?}", lossy(&b)));
    assert!(
        rest.is_empty() || rest.starts_with(b"HTTP/1.1 4"),
        "answered as HTTP/2: {:?}",
        lossy(&rest)
    );
}

#[test]
fn a_head_over_a_small_max_header_bytes_gets_431() {
    let up = echo("up");
    let weir = proxy(up.port, &["--max-header-bytes", "1000"]);
    let mut c = Conn::open(weir.proc.port);
    let head = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(3000)
    );
    c.send(head.as_bytes());
    let r = c.read_response(true);
    assert_eq!(r.status, 431, "{r:?}");
    // Under the limit on a new connection: served.
    let mut c = Conn::open(weir.proc.port);
    let head = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "a".repeat(500)
    );
    c.send(head.as_bytes());
    assert_eq!(c.read_response(false).status, 200);
}

#[test]
fn a_request_for_hyper_completed_at_shutdown_is_answered() {
    let up = echo("up");
    let mut weir = proxy(up.port, &["--shutdown-grace", "10s"]);
    let mut c = Conn::open(weir.proc.port);
    // Half a head when SIGTERM comes; the rest (a body: hyper's) within the second of grace.
    c.send(b"POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n");
    std::thread::sleep(Duration::from_millis(200));
    weir.proc.terminate();
    std::thread::sleep(Duration::from_millis(300));
    c.send(b"\r\nhello");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["body_length"], 5, "{r:?}");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    c.closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("open after the answer at shutdown; read {:?}", lossy(&b)));
    let status = weir.proc.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn idle_connection_is_closed() {
    let up = echo("up");
    let weir = proxy(up.port, &["--keepalive-timeout", "1s"]);

    // After a response, the keep-alive limit.
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(c.read_response(false).status, 200);
    let idle = Instant::now();
    let rest = c
        .closed_within(Duration::from_secs(4))
        .unwrap_or_else(|_| panic!("idle connection still open after 4 s"));
    assert!(rest.is_empty(), "{:?}", lossy(&rest));
    let took = idle.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(3),
        "closed after {took:?}, not about 1 s"
    );

    // Half a head: the same limit, then 1 s of grace to complete it, then dropped.
    let mut c = Conn::open(weir.proc.port);
    let opened = Instant::now();
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\n");
    let rest = c
        .closed_within(Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("half a head kept its connection open for 5 s"));
    let took = opened.elapsed();
    assert!(rest.is_empty(), "{:?}", lossy(&rest));
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_millis(4500),
        "closed after {took:?}, not about 2 s"
    );

    // A head completed within the grace is answered, with `connection: close`.
    let mut c = Conn::open(weir.proc.port);
    c.send(b"GET /late HTTP/1.1\r\nHost: t\r\n");
    std::thread::sleep(Duration::from_millis(1400));
    c.send(b"\r\n");
    let r = c.read_response(false);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["path"], "/late");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    c.closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("open after connection: close; read {:?}", lossy(&b)));
}

#[test]
fn a_response_during_shutdown_says_close() {
    let up = echo("up");
    let mut weir = proxy(up.port, &["--shutdown-grace", "10s"]);
    let port = weir.proc.port;

    let mut idle = Conn::open(port);
    idle.send(b"GET /idle HTTP/1.1\r\nHost: t\r\n\r\n");
    let r = idle.read_response(false);
    assert_eq!(r.status, 200);
    assert!(r.header("connection").is_none(), "{r:?}");

    // Kept-alive request in flight at SIGTERM.
    let mut busy = Conn::open(port);
    busy.send(b"GET /?delay_ms=1500 HTTP/1.1\r\nHost: t\r\n\r\n");
    std::thread::sleep(Duration::from_millis(400));
    weir.proc.terminate();

    let r = busy.read_response(false);
    assert_eq!(r.status, 200, "in-flight request cut: {r:?}");
    assert_eq!(r.json()["query"], "delay_ms=1500");
    assert_eq!(r.header("connection"), Some("close"), "{r:?}");
    let rest = busy
        .closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("open after a response at shutdown; read {:?}", lossy(&b)));
    assert!(rest.is_empty(), "{:?}", lossy(&rest));
    idle.closed_within(Duration::from_secs(3))
        .unwrap_or_else(|b| panic!("idle connection open at shutdown; read {:?}", lossy(&b)));
    let status = weir.proc.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
}
