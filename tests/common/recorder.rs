//! A recording HTTP/1.1 test server: keeps every request (head and body) and answers each
//! with a raw response the test makes of it. For checking what an upstream or an
//! authentication service received, or that it received nothing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use super::{read_head, scripted};

/// A request a test server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request line and header lines.
    pub head: String,
    /// The body, unframed.
    pub body: Vec<u8>,
}

impl Seen {
    /// The request line.
    pub fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }

    /// Every value of header `name` (case-insensitive), in order.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
            .collect()
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<String> {
        self.all(name).into_iter().next()
    }
}

/// A keep-alive HTTP/1.1 server that records every request (head and body) and answers each
/// with the raw response `answer` makes of it.
pub struct Server {
    /// Its loopback port.
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections accepted.
    pub accepted: Arc<AtomicUsize>,
}

impl Server {
    /// Starts it on a free loopback port.
    pub fn start(answer: impl Fn(&Seen) -> String + Send + Sync + 'static) -> Server {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let s = scripted(move |_, mut r, mut w| {
            while let Some(head) = read_head(&mut r) {
                let Some(body) = read_body(&mut r, &head) else {
                    return;
                };
                let req = Seen { head, body };
                log.lock().unwrap().push(req.clone());
                if w.write_all(answer(&req).as_bytes()).is_err() {
                    return;
                }
            }
        });
        Server {
            port: s.port,
            seen,
            accepted: s.accepted,
        }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The latest request.
    pub fn last(&self) -> Seen {
        self.seen().pop().expect("no request received")
    }

    /// How many requests so far.
    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// A request body framed by Content-Length or chunked coding; `None` if the peer went away.
pub fn read_body(r: &mut BufReader<TcpStream>, head: &str) -> Option<Vec<u8>> {
    let h = Seen {
        head: head.to_string(),
        body: Vec::new(),
    };
    if let Some(n) = h.header("content-length") {
        let mut body = vec![0; n.parse().ok()?];
        r.read_exact(&mut body).ok()?;
        return Some(body);
    }
    let mut body = Vec::new();
    if h.header("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        loop {
            let mut line = String::new();
            r.read_line(&mut line).ok()?;
            let size = usize::from_str_radix(line.trim().split(';').next()?, 16).ok()?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    line.clear();
                    r.read_line(&mut line).ok()?;
                    if line == "\r\n" || line.is_empty() {
                        return Some(body);
                    }
                }
            }
            let start = body.len();
            body.resize(start + size + 2, 0);
            r.read_exact(&mut body[start..]).ok()?;
            body.truncate(start + size);
        }
    }
    Some(body)
}

/// A raw HTTP/1.1 response with a Content-Length.
pub fn response(status: u16, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status} X\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
}
