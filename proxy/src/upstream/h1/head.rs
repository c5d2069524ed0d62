//! HTTP/1.1 message heads of an upstream exchange: the request head Weir writes and the
//! response head it parses, with the body framing each implies (RFC 9112 §6).

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

use crate::upstream::Added;
use crate::wire;

/// Most headers a response head may carry (hyper's default too).
pub const MAX_HEADERS: usize = 100;
/// Largest response head accepted.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How the request body travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFraming {
    /// No body.
    Empty,
    /// `Content-Length` bytes, as the client declared.
    Length(u64),
    /// `Transfer-Encoding: chunked`: the client's length is unknown.
    Chunked,
}

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body (HEAD, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// A parsed response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// Status, version and headers.
    pub parts: http::response::Parts,
    /// Where the body ends.
    pub framing: ResponseFraming,
    /// The connection may carry another request after this response.
    pub keep_alive: bool,
}

/// A response head Weir refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeadError {
    /// httparse rejected the bytes.
    #[error("malformed response head: {0}")]
    Malformed(httparse::Error),
    /// No end of head within [`MAX_HEAD_BYTES`].
    #[error("response head larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    /// The status code is outside 100..=999 or the version is not HTTP/1.x.
    #[error("invalid status line")]
    StatusLine,
    /// A header name or value http cannot hold.
    #[error("invalid response header")]
    Header,
    /// Content-Length values that are not one number.
    #[error("invalid Content-Length")]
    ContentLength,
}

/// Writes the request line, the request's headers and then `added`; adds `Host` when absent. The body's framing header is
/// written from `framing` alone: the message's own `Content-Length` is never copied, so what
/// the upstream is told always matches what is sent (the client's `Transfer-Encoding` was
/// removed as hop-by-hop).
pub fn encode_request(
    head: &http::request::Parts,
    added: &Added,
    default_host: &str,
    framing: RequestFraming,
    out: &mut Vec<u8>,
) {
    out.clear();
    let target = head.uri.path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !head.headers.contains_key(header::HOST) {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(default_host.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in &head.headers {
        // Framing is the encoder's alone: a plugin-set Transfer-Encoding beside Weir's own
        // Content-Length would make the upstream read the body (and the next request) wrongly.
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        wire::header_line(out, name, value);
    }
    for (name, value) in added.iter() {
        wire::header_line(out, name, value);
    }
    match framing {
        RequestFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        RequestFraming::Length(n) => wire::content_length(out, n),
        // A body-less POST/PUT/PATCH says so, as curl does: some servers insist (411).
        RequestFraming::Empty
            if head.headers.contains_key(header::CONTENT_LENGTH)
                || matches!(head.method, Method::POST | Method::PUT | Method::PATCH) =>
        {
            out.extend_from_slice(b"content-length: 0\r\n")
        }
        RequestFraming::Empty => {}
    }
    out.extend_from_slice(b"\r\n");
}

/// How a request body is framed: its declared length (or its exact size); a `GET`/`HEAD` of
/// unknown length as empty (as hyper does; any data then fails the upload); otherwise chunked.
pub fn request_framing(
    method: &Method,
    headers: &HeaderMap,
    end_stream: bool,
    exact: Option<u64>,
) -> RequestFraming {
    if end_stream {
        return RequestFraming::Empty;
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|v| v.parse().ok());
    match declared.or(exact) {
        Some(n) => RequestFraming::Length(n),
        None if matches!(*method, Method::GET | Method::HEAD) => RequestFraming::Length(0),
        None => RequestFraming::Chunked,
    }
}

/// Parses a response head from the start of `buf`. Returns `None` when more bytes are needed;
/// on success the head's bytes are split off `buf`, leaving the body's first bytes.
pub fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<ResponseHead>, HeadError> {
    // Uninitialised slots: initialising 100 headers per response costs more than parsing.
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, buf, &mut raw)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HeadError::Malformed(e)),
    };
    let version = match res.version {
        Some(0) => Version::HTTP_10,
        Some(1) => Version::HTTP_11,
        _ => return Err(HeadError::StatusLine),
    };
    let status = res
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(HeadError::StatusLine)?;
    // A reason phrase of the upstream's own travels on (hyper's server writes it).
    let reason = res
        .reason
        .filter(|r| status.canonical_reason() != Some(*r))
        .and_then(|r| hyper::ext::ReasonPhrase::try_from(r.as_bytes().to_vec()).ok());
    // Header positions relative to the buffer, so values can share the frozen head's bytes.
    let base = buf.as_ptr() as usize;
    // u16 keeps the array small enough to clear cheaply: in a head of at most 64 KiB every
    // offset and length fits.
    if len > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let mut spans = [(0u16, 0u16, 0u16, 0u16); MAX_HEADERS];
    let count = res.headers.len();
    for (span, h) in spans.iter_mut().zip(res.headers.iter()) {
        *span = (
            (h.name.as_ptr() as usize - base) as u16,
            h.name.len() as u16,
            (h.value.as_ptr() as usize - base) as u16,
            h.value.len() as u16,
        );
    }
    let bytes = buf.split_to(len).freeze();

    // Room for what the proxy adds (Via, latency headers) without growing the map again.
    let mut headers = HeaderMap::with_capacity(count + 4);
    let mut close = false;
    let mut keep_alive_token = false;
    let mut chunked = None;
    let mut transfer_encoding = false;
    let mut length: Option<u64> = None;
    for &(ns, nl, vs, vl) in &spans[..count] {
        let (ns, nl, vs, vl) = (ns as usize, nl as usize, vs as usize, vl as usize);
        let name = HeaderName::from_bytes(&bytes[ns..ns + nl]).map_err(|_| HeadError::Header)?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(vs..vs + vl))
            .map_err(|_| HeadError::Header)?;
        if name == header::CONNECTION {
            for token in value.as_bytes().split(|&b| b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name == header::TRANSFER_ENCODING {
            transfer_encoding = true;
            // Only the last coding decides; a later header line overrides an earlier one.
            let last = value
                .as_bytes()
                .rsplit(|&b| b == b',')
                .next()
                .unwrap_or(b"");
            chunked = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name == header::CONTENT_LENGTH {
            for part in value.as_bytes().split(|&b| b == b',') {
                let n = parse_length(part.trim_ascii()).ok_or(HeadError::ContentLength)?;
                if length.is_some_and(|l| l != n) {
                    return Err(HeadError::ContentLength);
                }
                length = Some(n);
            }
        }
        headers.append(name, value);
    }

    let mut keep_alive = if version == Version::HTTP_11 {
        !close
    } else {
        keep_alive_token && !close
    };
    // Both length headers, or chunking from an HTTP/1.0 server: decodable, but the framing is
    // suspect, so the connection is not trusted with another request (RFC 9112 §6.1, §6.3).
    if transfer_encoding && (length.is_some() || version == Version::HTTP_10) {
        keep_alive = false;
    }
    let no_body = *method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        ResponseFraming::Empty
    } else if let Some(chunked) = chunked {
        // Transfer-Encoding overrides Content-Length, which must not travel on (RFC 9112 §6.3).
        headers.remove(header::CONTENT_LENGTH);
        if chunked {
            ResponseFraming::Chunked
        } else {
            keep_alive = false;
            ResponseFraming::Close
        }
    } else if let Some(n) = length {
        ResponseFraming::Length(n)
    } else {
        keep_alive = false;
        ResponseFraming::Close
    };

    let mut parts = http::Response::new(()).into_parts().0;
    if let Some(r) = reason {
        parts.extensions.insert(r);
    }
    parts.status = status;
    parts.version = version;
    parts.headers = headers;
    Ok(Some(ResponseHead {
        parts,
        framing,
        keep_alive,
    }))
}

fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str, method: Method) -> Result<Option<ResponseHead>, HeadError> {
        parse_response(&mut BytesMut::from(raw), &method)
    }

    fn head(raw: &str) -> ResponseHead {
        parse(raw, Method::GET).unwrap().expect("complete head")
    }

    #[test]
    fn request_head_is_written_with_host_and_framing() {
        let mut req = http::Request::post("/a/b?x=1")
            .header("x-one", "1")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let mut out = Vec::new();
        let mut added = Added::default();
        added.push(header::VIA, HeaderValue::from_static("1.1 weir"));
        encode_request(
            &req,
            &added,
            "10.0.0.1:80",
            RequestFraming::Chunked,
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "POST /a/b?x=1 HTTP/1.1\r\nhost: 10.0.0.1:80\r\nx-one: 1\r\nvia: 1.1 weir\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        // The message's own Content-Length never travels: the framing decides.
        req.headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        encode_request(
            &req,
            &Added::default(),
            "u",
            RequestFraming::Chunked,
            &mut out,
        );
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(!text.contains("content-length"), "{text}");
        encode_request(
            &req,
            &Added::default(),
            "u",
            RequestFraming::Length(7),
            &mut out,
        );
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.ends_with("x-one: 1\r\ncontent-length: 7\r\n\r\n"),
            "{text}"
        );
        req.headers.remove(header::CONTENT_LENGTH);
        assert_eq!(
            request_framing(&Method::GET, &req.headers, false, None),
            RequestFraming::Length(0)
        );
        assert_eq!(
            request_framing(&Method::POST, &req.headers, false, None),
            RequestFraming::Chunked
        );
        assert_eq!(
            request_framing(&Method::POST, &req.headers, false, Some(3)),
            RequestFraming::Length(3)
        );
        req.headers
            .insert(header::HOST, HeaderValue::from_static("example.com"));
        req.uri = http::Uri::from_static("*");
        encode_request(
            &req,
            &Added::default(),
            "10.0.0.1:80",
            RequestFraming::Empty,
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST * HTTP/1.1\r\nx-one: 1\r\nhost: example.com\r\ncontent-length: 0\r\n\r\n"
        );
    }

    #[test]
    fn partial_heads_wait_for_more_bytes() {
        assert!(parse("HTTP/1.1 200 OK\r\ncontent-le", Method::GET)
            .unwrap()
            .is_none());
        let big = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(parse(&big, Method::GET).unwrap_err(), HeadError::TooLarge);
    }

    #[test]
    fn head_is_split_off_and_body_bytes_stay() {
        let mut buf = BytesMut::from("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello");
        let h = parse_response(&mut buf, &Method::GET).unwrap().unwrap();
        assert_eq!(&buf[..], b"hello");
        assert_eq!(h.parts.status, StatusCode::OK);
        assert_eq!(h.parts.headers["x-a"], "b");
        assert_eq!(h.framing, ResponseFraming::Length(5));
        assert!(h.keep_alive);
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let chunked = head(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
        );
        assert_eq!(chunked.framing, ResponseFraming::Chunked);
        assert!(!chunked.parts.headers.contains_key(header::CONTENT_LENGTH));
        // Both length headers, or chunking from HTTP/1.0: decoded, but not trusted again.
        assert!(!chunked.keep_alive);
        let old =
            head("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(old.framing, ResponseFraming::Chunked);
        assert!(!old.keep_alive);
        assert!(head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").keep_alive);
        let not_last = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
        assert_eq!(not_last.framing, ResponseFraming::Close);
        assert!(!not_last.keep_alive);
        let until_close = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(until_close.framing, ResponseFraming::Close);
        assert!(!until_close.keep_alive);
        for status in ["204 No Content", "304 Not Modified", "100 Continue"] {
            let h = head(&format!("HTTP/1.1 {status}\r\nContent-Length: 9\r\n\r\n"));
            assert_eq!(h.framing, ResponseFraming::Empty, "{status}");
        }
        let to_head = parse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", Method::HEAD)
            .unwrap()
            .unwrap();
        assert_eq!(to_head.framing, ResponseFraming::Empty);
        assert_eq!(to_head.parts.headers[header::CONTENT_LENGTH], "9");
        let same = head("HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\nContent-Length: 4\r\n\r\n");
        assert_eq!(same.framing, ResponseFraming::Length(4));
    }

    #[test]
    fn keep_alive_depends_on_version_and_connection() {
        assert!(
            !head("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").keep_alive
        );
        assert!(!head("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").keep_alive);
        assert!(
            head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n")
                .keep_alive
        );
    }

    #[test]
    fn bad_heads_are_refused() {
        for (raw, want) in [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
                HeadError::ContentLength,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                HeadError::ContentLength,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: +4\r\n\r\n",
                HeadError::ContentLength,
            ),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
                HeadError::ContentLength,
            ),
            (
                "HTTP/1.1 99 Odd\r\n\r\n",
                HeadError::Malformed(httparse::Error::Status),
            ),
            (
                "HTTP/2.0 200 OK\r\n\r\n",
                HeadError::Malformed(httparse::Error::Version),
            ),
            (
                "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
                HeadError::Malformed(httparse::Error::HeaderName),
            ),
        ] {
            assert_eq!(parse(raw, Method::GET).unwrap_err(), want, "{raw:?}");
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: 1\r\n")).collect();
        let raw = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert_eq!(
            parse(&raw, Method::GET).unwrap_err(),
            HeadError::Malformed(httparse::Error::TooManyHeaders)
        );
    }
}
