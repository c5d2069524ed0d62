//! Request-head parsing and response-head encoding for the HTTP/1.1 fast path (no I/O).
//!
//! The fast path serves the common request — HTTP/1.1, no body, no upgrade — and leaves every
//! other one to hyper: a request it does not take is never half-interpreted, so hyper's
//! answers (400, 431, 100-continue, chunked bodies, HTTP/1.0 keep-alive, HTTP/2) stay exactly
//! what they were.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};

use crate::wire;

/// Most request headers the fast path parses; a request with more goes to hyper, which applies
/// `--max-headers`.
pub(crate) const MAX_FAST_HEADERS: usize = 128;
/// Largest request head the fast path parses (its offsets are `u16`); a larger one goes to
/// hyper, which applies `--max-header-bytes`.
pub(crate) const FAST_HEAD_MAX: usize = u16::MAX as usize;

/// What the buffered bytes hold.
// Returned once per request and matched at once: boxing the head would cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Parsed {
    /// A complete request head the fast path serves (its bytes are consumed).
    Request {
        /// The request head.
        parts: http::request::Parts,
        /// The client asked to close the connection after this response.
        close: bool,
    },
    /// Not a complete head yet.
    Partial,
    /// A head over `--max-header-bytes` (answered 431 here: hyper's own limit is never under
    /// 8 KiB, so it would let a smaller configured limit pass).
    TooLarge,
    /// A request the fast path leaves to hyper (nothing consumed).
    Handover,
}

/// Parses one request head from the front of `buf` (see [`Parsed`]).
///
/// `max_head` and `max_headers` are the proxy's limits: a head over the first is
/// [`Parsed::TooLarge`], one over the second goes to hyper, which answers 431.
pub(crate) fn parse_request(buf: &mut BytesMut, max_head: usize, max_headers: usize) -> Parsed {
    let slots = max_headers.min(MAX_FAST_HEADERS);
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FAST_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let limit = max_head.min(FAST_HEAD_MAX);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut req,
        buf,
        &mut raw[..slots],
    ) {
        Ok(httparse::Status::Complete(n)) if n <= limit => n,
        Ok(httparse::Status::Partial) if buf.len() < limit => return Parsed::Partial,
        // Over a limit the fast path can hold: hyper applies it.
        Ok(_) if max_head > FAST_HEAD_MAX => return Parsed::Handover,
        Ok(_) => return Parsed::TooLarge,
        Err(_) => return Parsed::Handover,
    };
    if req.version != Some(1) {
        return Parsed::Handover;
    }
    let method = match req.method.map(str::as_bytes) {
        Some(b"GET") => Method::GET,
        Some(b"HEAD") | Some(b"CONNECT") | None => return Parsed::Handover,
        Some(m) => match Method::from_bytes(m) {
            Ok(m) => m,
            Err(_) => return Parsed::Handover,
        },
    };
    // Positions relative to the buffer, so the values can share the frozen head's bytes.
    let base = buf.as_ptr() as usize;
    let offset = |s: &[u8]| s.as_ptr() as usize - base;
    let Some(path) = req.path.map(str::as_bytes) else {
        return Parsed::Handover;
    };
    let path = (offset(path), path.len());
    let mut spans = [(0u16, 0u16, 0u16, 0u16); MAX_FAST_HEADERS];
    let count = req.headers.len();
    let mut close = false;
    for (span, h) in spans.iter_mut().zip(req.headers.iter()) {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"upgrade") {
                    return Parsed::Handover;
                }
                close |= token.eq_ignore_ascii_case(b"close");
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            if h.value.trim_ascii() != b"0" {
                return Parsed::Handover;
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"upgrade")
            || name.eq_ignore_ascii_case(b"expect")
        {
            return Parsed::Handover;
        }
        *span = (
            offset(name) as u16,
            name.len() as u16,
            offset(h.value) as u16,
            h.value.len() as u16,
        );
    }
    let bytes = buf.split_to(len).freeze();

    let Ok(uri) = Uri::from_maybe_shared(bytes.slice(path.0..path.0 + path.1)) else {
        // hyper gets the head back and answers 400.
        return unconsume(buf, &bytes);
    };
    // Room for the forwarding headers the proxy adds without growing the map again.
    let mut headers = HeaderMap::with_capacity(count + 8);
    for &(ns, nl, vs, vl) in &spans[..count] {
        let (ns, nl, vs, vl) = (ns as usize, nl as usize, vs as usize, vl as usize);
        // httparse checked the name's and the value's characters already.
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&bytes[ns..ns + nl]),
            HeaderValue::from_maybe_shared(bytes.slice(vs..vs + vl)),
        ) else {
            return unconsume(buf, &bytes);
        };
        headers.append(name, value);
    }
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    parts.headers = headers;
    Parsed::Request { parts, close }
}

/// Puts a head split off the buffer back in front of it, for hyper: a rare path (a target or
/// header `http` refuses after httparse took it), so a copy is fine.
fn unconsume(buf: &mut BytesMut, head: &[u8]) -> Parsed {
    let mut whole = BytesMut::with_capacity(head.len() + buf.len());
    whole.extend_from_slice(head);
    whole.extend_from_slice(buf);
    *buf = whole;
    Parsed::Handover
}

/// How a response body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body may follow (1xx, 204, 304).
    Empty,
    /// Exactly this many bytes follow.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
}

/// Appends the status line and headers of `parts` to `out` and says how the body is framed.
///
/// The framing headers are the encoder's own: a valid `content-length` of the response is
/// kept, otherwise the body's exact length when known, otherwise chunked. `connection` and
/// `transfer-encoding` from the map are never copied. `close` adds `connection: close`.
pub(crate) fn encode_response_head(
    out: &mut Vec<u8>,
    parts: &http::response::Parts,
    exact_len: Option<u64>,
    close: bool,
) -> Framing {
    let status = parts.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    match parts.extensions.get::<hyper::ext::ReasonPhrase>() {
        Some(r) => out.extend_from_slice(r.as_bytes()),
        None => out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");

    let no_body = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let mut declared: Option<u64> = None;
    let mut has_date = false;
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH {
            if declared.is_none() {
                declared = std::str::from_utf8(value.as_bytes())
                    .ok()
                    .and_then(|v| v.trim().parse().ok());
            }
            continue;
        }
        if name == header::CONNECTION || name == header::TRANSFER_ENCODING {
            continue;
        }
        has_date |= name == header::DATE;
        wire::header_line(out, name, value);
    }
    let framing = if no_body {
        // A 304 keeps the length of what it stands for; 1xx and 204 carry none.
        if let (true, Some(n)) = (status == StatusCode::NOT_MODIFIED, declared) {
            wire::content_length(out, n);
        }
        Framing::Empty
    } else if let Some(n) = declared.or(exact_len) {
        wire::content_length(out, n);
        Framing::Length(n)
    } else {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        Framing::Chunked
    };
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    if !has_date {
        out.extend_from_slice(b"date: ");
        http_date(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

thread_local! {
    /// The current second's IMF-fixdate, formatted once per second per worker.
    static DATE: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
}

/// Appends the current time as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            let s = httpdate::fmt_http_date(now);
            if s.len() == 29 {
                d.1.copy_from_slice(s.as_bytes());
                d.0 = secs;
            }
        }
        out.extend_from_slice(&d.1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Parsed {
        let mut buf = BytesMut::from(s);
        parse_request(&mut buf, 64 * 1024, 100)
    }

    #[test]
    fn a_plain_get_is_parsed_and_consumed() {
        let mut buf = BytesMut::from(
            "GET /a/b?x=1 HTTP/1.1\r\nHost: example.test\r\nX-Two: a\r\nx-two: b\r\n\r\nGET /next",
        );
        let Parsed::Request { parts, close } = parse_request(&mut buf, 1024, 100) else {
            panic!("not parsed");
        };
        assert!(!close);
        assert_eq!(parts.method, Method::GET);
        assert_eq!(parts.uri, "/a/b?x=1");
        assert_eq!(parts.version, Version::HTTP_11);
        assert_eq!(parts.headers["host"], "example.test");
        let two: Vec<_> = parts.headers.get_all("x-two").iter().collect();
        assert_eq!(two, ["a", "b"]);
        assert_eq!(&buf[..], b"GET /next");
    }

    #[test]
    fn connection_close_and_empty_bodies_stay_on_the_fast_path() {
        match parse(
            "DELETE /x HTTP/1.1\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n",
        ) {
            Parsed::Request { parts, close } => {
                assert!(close);
                assert_eq!(parts.method, Method::DELETE);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn partial_heads_wait_for_more() {
        assert!(matches!(
            parse("GET / HTTP/1.1\r\nHost: a"),
            Parsed::Partial
        ));
        assert!(matches!(parse(""), Parsed::Partial));
    }

    #[test]
    fn everything_else_goes_to_hyper_untouched() {
        for head in [
            "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
            "PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
            "GET / HTTP/1.0\r\n\r\n",
            "HEAD / HTTP/1.1\r\n\r\n",
            "CONNECT a:443 HTTP/1.1\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
            "GET http://[::1 HTTP/1.1\r\n\r\n",
        ] {
            let mut buf = BytesMut::from(head);
            assert!(
                matches!(parse_request(&mut buf, 1024, 100), Parsed::Handover),
                "{head:?}"
            );
            assert_eq!(&buf[..], head.as_bytes(), "{head:?} must be left whole");
        }
    }

    #[test]
    fn heads_over_the_limits_are_refused_or_go_to_hyper() {
        let long = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(200));
        let mut buf = BytesMut::from(long.as_str());
        assert!(matches!(
            parse_request(&mut buf, 100, 100),
            Parsed::TooLarge
        ));
        let mut buf = BytesMut::from(&long.as_bytes()[..150]);
        assert!(matches!(
            parse_request(&mut buf, 100, 100),
            Parsed::TooLarge
        ));
        // Over what the fast path holds: hyper applies the configured limit.
        let huge = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(70_000));
        let mut buf = BytesMut::from(huge.as_str());
        assert!(matches!(
            parse_request(&mut buf, 128 * 1024, 100),
            Parsed::Handover
        ));
        let many = "GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n";
        let mut buf = BytesMut::from(many);
        assert!(matches!(parse_request(&mut buf, 1024, 2), Parsed::Handover));
    }

    fn encode(parts: &http::response::Parts, exact: Option<u64>, close: bool) -> (String, Framing) {
        let mut out = Vec::new();
        let f = encode_response_head(&mut out, parts, exact, close);
        (String::from_utf8(out).unwrap(), f)
    }

    fn response(status: u16, headers: &[(&str, &str)]) -> http::response::Parts {
        let mut b = http::Response::builder().status(status);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn response_heads_carry_their_own_framing() {
        let date = ("date", "Mon, 30 Nov 2026 12:00:00 GMT");
        let (s, f) = encode(
            &response(200, &[("content-length", "64"), date]),
            Some(1),
            false,
        );
        assert_eq!(f, Framing::Length(64));
        assert_eq!(
            s,
            "HTTP/1.1 200 OK\r\ndate: Mon, 30 Nov 2026 12:00:00 GMT\r\ncontent-length: 64\r\n\r\n"
        );
        let (s, f) = encode(&response(404, &[date]), Some(12), true);
        assert_eq!(f, Framing::Length(12));
        assert!(s.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(s.contains("content-length: 12\r\nconnection: close\r\n"));
        let (s, f) = encode(
            &response(
                200,
                &[("transfer-encoding", "chunked"), ("connection", "x"), date],
            ),
            None,
            false,
        );
        assert_eq!(f, Framing::Chunked);
        assert!(s.contains("transfer-encoding: chunked\r\n"));
        assert_eq!(s.matches("transfer-encoding").count(), 1);
        assert!(!s.contains("connection"));
        let (s, f) = encode(
            &response(204, &[("content-length", "5"), date]),
            Some(5),
            false,
        );
        assert_eq!(f, Framing::Empty);
        assert!(!s.contains("content-length"));
        let (s, f) = encode(
            &response(304, &[("content-length", "5"), date]),
            None,
            false,
        );
        assert_eq!(f, Framing::Empty);
        assert!(s.contains("content-length: 5\r\n"));
    }

    #[test]
    fn a_missing_date_is_added_and_reason_phrases_kept() {
        let mut parts = response(200, &[]);
        parts
            .extensions
            .insert(hyper::ext::ReasonPhrase::from_static(b"Fine"));
        let (s, _) = encode(&parts, Some(0), false);
        assert!(s.starts_with("HTTP/1.1 200 Fine\r\n"), "{s}");
        let date = s
            .split("date: ")
            .nth(1)
            .unwrap()
            .split("\r\n")
            .next()
            .unwrap();
        assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
        let (s, _) = encode(&response(599, &[]), Some(0), false);
        assert!(s.starts_with("HTTP/1.1 599 \r\n"), "{s}");
    }
}
