//! Entry points for the fuzz targets in `fuzz/` and the property tests in
//! `proxy/tests/properties.rs` (feature `fuzzing`; not an API): thin wrappers around the HTTP/1
//! head parsers, the chunked coding and path normalisation, and the oracles (`check_*`) that
//! both the fuzzer and the test suite hold them to. An oracle panics, naming the input, when
//! the code under test breaks it.
//!
//! The request-body encoder, `Upload` in `upstream/h1/upload.rs`, needs a hyper body and a
//! `TcpStream`, so [`encode_chunked`] restates its framing around the real
//! [`crate::wire::chunk_header`].

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};

use crate::config::{ClientProtocol, PathKind, PathRule, Route};
use crate::router::{
    has_escaped_slash, normalize_request_path, with_params_len, without_params, BadPath,
    EscapedSlashes, Lookup, RequestView, Router,
};

use crate::server::h1::head as client_head;
use crate::upstream::h1::chunked;
use crate::upstream::h1::head as upstream_head;

pub use chunked::{ChunkError, ChunkedDecoder, Decoded, MAX_TRAILER_FIELDS};
pub use upstream_head::{
    parse_response, HeadError, ResponseFraming, ResponseHead, MAX_HEADERS as RESPONSE_MAX_HEADERS,
    MAX_HEAD_BYTES as RESPONSE_MAX_HEAD_BYTES,
};

/// Largest request head the client fast path parses itself.
pub const REQUEST_FAST_HEAD_MAX: usize = client_head::FAST_HEAD_MAX;
/// Most request headers the client fast path parses itself.
pub const REQUEST_MAX_FAST_HEADERS: usize = client_head::MAX_FAST_HEADERS;

/// `input` for panic messages.
fn show(input: &[u8]) -> String {
    let mut s = input.escape_ascii().to_string();
    if s.len() > 600 {
        let tail = s.split_off(s.len() - 200);
        s.truncate(300);
        s = format!("{s}…[{} bytes]…{tail}", input.len());
    }
    format!("\"{s}\"")
}

fn same_headers(got: &HeaderMap, want: &[(HeaderName, &[u8])], what: &dyn Fn() -> String) {
    assert_eq!(got.len(), want.len(), "header count: {}", what());
    for (name, _) in want {
        let got: Vec<&[u8]> = got.get_all(name).iter().map(|v| v.as_bytes()).collect();
        let want: Vec<&[u8]> = want
            .iter()
            .filter(|(n, _)| n == name)
            .map(|&(_, v)| v)
            .collect();
        assert_eq!(got, want, "values of {name}: {}", what());
    }
}

fn connection_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

// ---------------------------------------------------------------------------------------------
// The client request head (`server/h1/head.rs`).

/// What [`parse_request`] made of the buffer.
pub use crate::server::h1::head::Parsed as RequestHead;

/// The fast path's request-head parser.
pub fn parse_request(buf: &mut BytesMut, max_head: usize, max_headers: usize) -> RequestHead {
    client_head::parse_request(buf, max_head, max_headers)
}

/// `head` with an `x-pad` header after its first line, grown so that the whole is `total`
/// bytes long where it can be (to reach the size limits with small fuzz inputs).
pub fn pad_head(head: &[u8], total: usize) -> Vec<u8> {
    let Some(eol) = head.iter().position(|&b| b == b'\n') else {
        return head.to_vec();
    };
    let fixed = head.len() + b"x-pad: \r\n".len();
    let pad = total.saturating_sub(fixed);
    let mut out = Vec::with_capacity(fixed + pad);
    out.extend_from_slice(&head[..=eol]);
    out.extend_from_slice(b"x-pad: ");
    out.resize(out.len() + pad, b'a');
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head[eol + 1..]);
    out
}

/// What the fast path must make of a buffer, from httparse's reading of it.
enum WantRequest<'a> {
    Request {
        len: usize,
        method: &'a str,
        target: &'a str,
        headers: Vec<(HeaderName, &'a [u8])>,
        close: bool,
    },
    Partial,
    TooLarge,
    /// Why hyper gets it.
    Handover(&'static str),
}

fn want_request(input: &[u8], max_head: usize, max_headers: usize) -> WantRequest<'_> {
    use WantRequest::*;
    // The fast path parses with as many header slots as it allows itself.
    let mut slots = vec![httparse::EMPTY_HEADER; max_headers.min(REQUEST_MAX_FAST_HEADERS)];
    let mut req = httparse::Request::new(&mut slots);
    let limit = max_head.min(REQUEST_FAST_HEAD_MAX);
    // Over the configured limit: 431 at once, unless the limit is larger than the fast path can
    // hold, when hyper applies it (and answers 431 itself).
    let over = || {
        if max_head > REQUEST_FAST_HEAD_MAX {
            Handover("over the fast path's size: hyper applies the limit")
        } else {
            TooLarge
        }
    };
    let len = match req.parse(input) {
        // hyper reads it again and answers 400 (or 431 for too many headers).
        Err(_) => return Handover("httparse refuses it"),
        Ok(httparse::Status::Partial) if input.len() < limit => return Partial,
        Ok(httparse::Status::Partial) => return over(),
        Ok(httparse::Status::Complete(n)) if n > limit => return over(),
        Ok(httparse::Status::Complete(n)) => n,
    };
    // The fast path takes HTTP/1.1 requests without a body, an upgrade or an expectation, whose
    // method, target and headers http can hold; hyper takes everything else, as it comes.
    if req.version != Some(1) {
        return Handover("not HTTP/1.1");
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        unreachable!("a complete head has a method and a target")
    };
    if method == "HEAD" || method == "CONNECT" {
        return Handover("HEAD or CONNECT");
    }
    if Method::from_bytes(method.as_bytes()).is_err() {
        return Handover("a method http refuses");
    }
    if Uri::try_from(target).is_err() {
        return Handover("a target http refuses");
    }
    let mut headers = Vec::with_capacity(req.headers.len());
    let mut close = false;
    for h in req.headers.iter() {
        let is = |n: &str| h.name.eq_ignore_ascii_case(n);
        if is("transfer-encoding") || is("upgrade") || is("expect") {
            return Handover("a body, an upgrade or an expectation");
        }
        if is("content-length") && h.value.trim_ascii() != b"0" {
            return Handover("a body");
        }
        if is("connection") {
            for token in connection_tokens(h.value) {
                if token.eq_ignore_ascii_case(b"upgrade") {
                    return Handover("an upgrade");
                }
                close |= token.eq_ignore_ascii_case(b"close");
            }
        }
        let (Ok(name), Ok(_)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return Handover("a header http refuses");
        };
        headers.push((name, h.value));
    }
    Request {
        len,
        method,
        target,
        headers,
        close,
    }
}

/// The client request-head parser agrees with httparse.
///
/// A request the fast path serves must be one httparse accepts whole, with the same method,
/// target and headers, and only its head consumed. A request it hands over to hyper counts as
/// "not taken", never as accepted: that must leave the buffer untouched, and happens exactly
/// when httparse refuses the bytes (hyper answers 400) or the request is outside the fast
/// path's scope (see `want_request`). `Partial` and `TooLarge` follow httparse's `Partial` and
/// the head's length against the limits.
pub fn check_request_head(input: &[u8], max_head: usize, max_headers: usize) {
    let mut buf = BytesMut::from(input);
    let got = parse_request(&mut buf, max_head, max_headers);
    let what = || {
        format!(
            "max_head {max_head}, max_headers {max_headers}, {}",
            show(input)
        )
    };
    match (want_request(input, max_head, max_headers), got) {
        (
            WantRequest::Request {
                len,
                method,
                target,
                headers,
                close,
            },
            RequestHead::Request {
                parts,
                close: got_close,
            },
        ) => {
            assert_eq!(parts.method.as_str(), method, "method: {}", what());
            assert_eq!(parts.version, Version::HTTP_11, "version: {}", what());
            // The target as http reads httparse's: http drops a fragment and lower-cases a
            // scheme, as it would for hyper. An origin-form target travels byte for byte.
            let want_uri = Uri::try_from(target).expect("checked by want_request");
            assert_eq!(parts.uri, want_uri, "target: {}", what());
            if target.starts_with('/') && !target.contains('#') {
                assert_eq!(
                    parts.uri.path_and_query().map(|p| p.as_str()),
                    Some(target),
                    "target: {}",
                    what()
                );
            }
            same_headers(&parts.headers, &headers, &what);
            assert_eq!(got_close, close, "connection: close: {}", what());
            assert_eq!(&buf[..], &input[len..], "bytes after the head: {}", what());
        }
        (WantRequest::Partial, RequestHead::Partial) => {
            assert_eq!(&buf[..], input, "a partial head is kept: {}", what());
        }
        (WantRequest::TooLarge, RequestHead::TooLarge) => {}
        (WantRequest::Handover(_), RequestHead::Handover) => {
            assert_eq!(
                &buf[..],
                input,
                "hyper gets the bytes as they came: {}",
                what()
            );
        }
        (WantRequest::Handover(why), got) => {
            panic!("want a handover ({why}), got {got:?}: {}", what())
        }
        (WantRequest::Request { .. }, got) => {
            panic!("want the fast path to take it, got {got:?}: {}", what())
        }
        (WantRequest::Partial, got) => panic!("want Partial, got {got:?}: {}", what()),
        (WantRequest::TooLarge, got) => panic!("want TooLarge, got {got:?}: {}", what()),
    }
}

// ---------------------------------------------------------------------------------------------
// The chunked coding (`upstream/h1/chunked.rs`, `wire.rs`, `upstream/h1/upload.rs`).

/// A chunk-size line for `len` bytes, as Weir writes it.
pub fn chunk_header(len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    crate::wire::chunk_header(&mut out, len);
    out
}

/// A request body of `frames` in the chunked coding, as `Upload::poll_send` writes it: each
/// non-empty frame as one chunk (an empty one would read as the last chunk), then the last
/// chunk without trailers.
pub fn encode_chunked<B: AsRef<[u8]>>(frames: &[B]) -> Vec<u8> {
    let mut out = Vec::new();
    for data in frames {
        let data = data.as_ref();
        if data.is_empty() {
            continue;
        }
        crate::wire::chunk_header(&mut out, data.len());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// `frames` in the chunked coding as other senders may write it (RFC 9112 §7.1), by the bits
/// of `style`: 1 upper-case hex, 2 a leading zero, 4 chunk extensions, 8 whitespace before
/// them, 16 trailer fields ([`STYLED_TRAILERS`], and a `Content-Length` one, never kept).
pub fn encode_chunked_styled<B: AsRef<[u8]>>(frames: &[B], style: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let size_line = |out: &mut Vec<u8>, len: usize, i: usize| {
        if style & 2 != 0 {
            out.push(b'0');
        }
        let hex = if style & 1 != 0 {
            format!("{len:X}")
        } else {
            format!("{len:x}")
        };
        out.extend_from_slice(hex.as_bytes());
        if style & 4 != 0 {
            if style & 8 != 0 {
                out.extend_from_slice(b" \t");
            }
            match i % 3 {
                0 => out.extend_from_slice(b";ext"),
                1 => out.extend_from_slice(b";name=value;n2=v2"),
                _ => out.extend_from_slice(b";q=\"quoted; string\""),
            }
        }
        out.extend_from_slice(b"\r\n");
    };
    let mut i = 0;
    for data in frames {
        let data = data.as_ref();
        if data.is_empty() {
            continue;
        }
        size_line(&mut out, data.len(), i);
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        i += 1;
    }
    size_line(&mut out, 0, i);
    if style & 16 != 0 {
        out.extend_from_slice(b"X-Checksum: abc\r\nContent-Length: 5\r\nx-empty:  \r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The trailer fields [`encode_chunked_styled`] writes that the decoder keeps.
pub const STYLED_TRAILERS: [(&str, &str); 2] = [("x-checksum", "abc"), ("x-empty", "")];

/// How a decoding run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeEnd {
    /// The decoder reached the end of the body; `rest` is what follows it.
    End {
        /// The input after the body.
        rest: Vec<u8>,
        /// The trailer fields kept, in order.
        trailers: Vec<(String, Vec<u8>)>,
    },
    /// The decoder refused the input.
    Error(ChunkError),
    /// The input ran out first.
    Incomplete,
}

/// What a decoder made of an input.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoding {
    /// The body bytes.
    pub data: Vec<u8>,
    /// How it ended.
    pub end: DecodeEnd,
}

/// Decodes `input` arriving in reads of `reads` bytes (cycled; zeros count as one; none: a
/// single read), checking every call: the decoder consumes bytes from the front of its buffer
/// only, never alters the rest, returns as body only bytes it consumed in that call, makes
/// progress, and stays ended once ended; the trailers it returns hold ([`check_trailers`]).
pub fn decode_in_reads(input: &[u8], reads: &[usize]) -> Decoding {
    let mut decoder = ChunkedDecoder::default();
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut next = 0;
    let mut data = Vec::new();
    let what = || format!("reads {reads:?}, {}", show(input));
    loop {
        let start = fed - buf.len();
        let result = decoder.decode(&mut buf);
        assert!(buf.len() <= fed - start, "the buffer grew: {}", what());
        let at = fed - buf.len();
        assert!(
            buf[..] == input[at..fed],
            "bytes left in the buffer were changed: {}",
            what()
        );
        match result {
            Ok(Decoded::Data(d)) => {
                assert!(at > start, "body without consuming input: {}", what());
                assert!(
                    input[start..at].ends_with(&d),
                    "body bytes that are not the input consumed: {}",
                    what()
                );
                data.extend_from_slice(&d);
            }
            Ok(Decoded::NeedMore) => {
                if fed == input.len() {
                    return Decoding {
                        data,
                        end: DecodeEnd::Incomplete,
                    };
                }
                let n = match reads {
                    [] => input.len(),
                    r => r[next % r.len()].max(1),
                };
                next += 1;
                let to = input.len().min(fed + n);
                buf.extend_from_slice(&input[fed..to]);
                fed = to;
            }
            Ok(Decoded::End(trailers)) => {
                assert!(decoder.is_end(), "End but not is_end: {}", what());
                let again = decoder.decode(&mut buf);
                assert_eq!(
                    again,
                    Ok(Decoded::End(None)),
                    "not ended for good, or trailers twice: {}",
                    what()
                );
                assert_eq!(fed - buf.len(), at, "consumed after the end: {}", what());
                assert!(
                    trailers.as_ref().is_none_or(|t| !t.is_empty()),
                    "empty trailers: {}",
                    what()
                );
                let trailers: Vec<(String, Vec<u8>)> = trailers
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                    .collect();
                check_trailers(&input[..at], &trailers);
                return Decoding {
                    data,
                    end: DecodeEnd::End {
                        rest: input[at..].to_vec(),
                        trailers,
                    },
                };
            }
            Err(e) => {
                return Decoding {
                    data,
                    end: DecodeEnd::Error(e),
                }
            }
        }
    }
}

/// Arbitrary bytes into the decoder: no panic, no reading past the end of the body, and the
/// same result whatever the read boundaries (`reads`, single bytes, one read).
pub fn check_chunked_decode(input: &[u8], reads: &[usize]) {
    let whole = decode_in_reads(input, &[]);
    if let DecodeEnd::End { rest, .. } = &whole.end {
        assert!(
            whole.data.len() + rest.len() < input.len(),
            "a body without framing: {}",
            show(input)
        );
    }
    for reads in [reads, &[1]] {
        let split = decode_in_reads(input, reads);
        let what = || format!("reads {reads:?}, {}", show(input));
        match (&whole.end, &split.end) {
            (DecodeEnd::End { .. }, _) | (_, DecodeEnd::End { .. }) => {
                assert_eq!(split, whole, "read boundaries change the body: {}", what())
            }
            (DecodeEnd::Error(a), DecodeEnd::Error(b)) => {
                assert_eq!(a, b, "read boundaries change the error: {}", what());
            }
            (DecodeEnd::Incomplete, DecodeEnd::Incomplete) => {}
            (a, b) => panic!(
                "read boundaries change the outcome ({a:?} in one read, {b:?}): {}",
                what()
            ),
        }
        // Body bytes already returned stay returned: one run's body starts the other's.
        let (short, long) = if split.data.len() <= whole.data.len() {
            (&split.data, &whole.data)
        } else {
            (&whole.data, &split.data)
        };
        assert!(
            long.starts_with(short),
            "read boundaries change the body: {}",
            what()
        );
    }
}

/// `decode(encode(frames)) == frames`, joined, whatever the chunk and read boundaries, for
/// Weir's own encoding and (`style` non-zero) for a valid one of another sender's; bytes after
/// the body (`tail`) stay unread.
pub fn check_chunked_roundtrip<B: AsRef<[u8]>>(
    frames: &[B],
    reads: &[usize],
    style: u8,
    tail: &[u8],
) {
    let body: Vec<u8> = frames.iter().flat_map(|f| f.as_ref()).copied().collect();
    let mut encodings = vec![("Weir's", encode_chunked(frames))];
    if style != 0 {
        encodings.push(("styled", encode_chunked_styled(frames, style)));
    }
    for (which, mut wire) in encodings {
        wire.extend_from_slice(tail);
        let got = decode_in_reads(&wire, reads);
        let trailers = match which {
            "styled" if style & 16 != 0 => STYLED_TRAILERS
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
            _ => Vec::new(),
        };
        let want = Decoding {
            data: body.clone(),
            end: DecodeEnd::End {
                rest: tail.to_vec(),
                trailers,
            },
        };
        assert_eq!(
            got,
            want,
            "{which} encoding (style {style}) of {} frames, reads {reads:?}: {}",
            frames.len(),
            show(&wire)
        );
    }
}

/// Trailer fields a decoder returned from a body (`consumed`, the input up to the body's end)
/// hold: at most [`MAX_TRAILER_FIELDS`], none that must never be a trailer (framing, routing,
/// hop-by-hop, authentication: RFC 9110 §6.5.1), each with a lower-case token name and a value
/// without control characters or surrounding whitespace, read from one line of the input
/// (`name: value`, the name in any case, whitespace around the value) not followed by a folded
/// continuation line.
pub fn check_trailers(consumed: &[u8], trailers: &[(String, Vec<u8>)]) {
    const NEVER: [&str; 15] = [
        "content-length",
        "transfer-encoding",
        "trailer",
        "host",
        "connection",
        "keep-alive",
        "te",
        "upgrade",
        "authorization",
        "www-authenticate",
        "set-cookie",
        "cookie",
        "content-type",
        "content-encoding",
        "content-range",
    ];
    let what = || format!("trailers {trailers:?} of {}", show(consumed));
    assert!(trailers.len() <= MAX_TRAILER_FIELDS, "{}", what());
    let lines: Vec<&[u8]> = consumed
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .collect();
    for (name, value) in trailers {
        assert!(
            !NEVER.contains(&name.as_str()) && !name.starts_with("proxy-"),
            "forbidden trailer {name}: {}",
            what()
        );
        assert!(
            !name.is_empty()
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b)
                }),
            "trailer name {name:?}: {}",
            what()
        );
        assert!(
            value
                .iter()
                .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
                && !value.starts_with(b" ")
                && !value.starts_with(b"\t")
                && !value.ends_with(b" ")
                && !value.ends_with(b"\t"),
            "trailer value {}: {}",
            show(value),
            what()
        );
        let from_a_line = lines.iter().enumerate().any(|(i, line)| {
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return false;
            };
            let folded = lines
                .get(i + 1)
                .is_some_and(|next| matches!(next.first(), Some(b' ' | b'\t')));
            line[..colon].eq_ignore_ascii_case(name.as_bytes())
                && line[colon + 1..].trim_ascii().eq(&value[..])
                && !folded
        });
        assert!(
            from_a_line,
            "trailer {name} not from a line of the input: {}",
            what()
        );
    }
}

/// A chunk-size line says `len` in lower-case hex without leading zeros, and the decoder takes
/// any size that fits in 16 digits: the bytes after the line are body.
pub fn check_chunk_size(len: usize, data: &[u8]) {
    let line = chunk_header(len);
    let what = || format!("len {len}, line {}", show(&line));
    let digits = line
        .strip_suffix(b"\r\n")
        .unwrap_or_else(|| panic!("{}", what()));
    assert!(
        !digits.is_empty()
            && (digits == b"0" || digits[0] != b'0')
            && digits
                .iter()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{}",
        what()
    );
    let parsed = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| usize::from_str_radix(d, 16).ok());
    assert_eq!(parsed, Some(len), "{}", what());

    let have = &data[..data.len().min(len)];
    let mut wire = line.clone();
    wire.extend_from_slice(have);
    let got = decode_in_reads(&wire, &[]);
    assert_eq!(
        got,
        Decoding {
            data: have.to_vec(),
            end: DecodeEnd::Incomplete
        },
        "{}",
        what()
    );
}

// ---------------------------------------------------------------------------------------------
// The upstream response head (`upstream/h1/head.rs`).

/// A Content-Length element as Weir reads it: 1 to 19 digits. (Weir's own bound: 19 digits
/// hold any length below 10^19 and never overflow; a 20-digit length is refused even if it
/// would fit in a u64.)
fn content_length(part: &[u8]) -> Option<u64> {
    if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(part).ok()?.parse().ok()
}

/// The upstream response-head parser agrees with httparse on accept/reject, status, version
/// and headers, and frames the body as RFC 9112 §6.3 says.
///
/// Differences on purpose: Weir refuses a status outside 100..=999 (http's `StatusCode`;
/// httparse reads any three digits), a header http cannot hold, Content-Length values that are
/// not one number, and a head over [`RESPONSE_MAX_HEAD_BYTES`]. Where several of those apply,
/// any one may be reported. A Content-Length is dropped where Transfer-Encoding frames the body.
pub fn check_response_head(input: &[u8], method: &Method) {
    let mut buf = BytesMut::from(input);
    let got = parse_response(&mut buf, method);
    let what = || format!("response to {method}: {}", show(input));
    let mut slots = vec![httparse::EMPTY_HEADER; RESPONSE_MAX_HEADERS];
    let mut res = httparse::Response::new(&mut slots);
    let len = match res.parse(input) {
        Err(e) => {
            assert!(
                matches!(got, Err(HeadError::Malformed(g)) if g == e),
                "want Malformed({e:?}), got {got:?}: {}",
                what()
            );
            return;
        }
        Ok(httparse::Status::Partial) => {
            if input.len() >= RESPONSE_MAX_HEAD_BYTES {
                assert!(
                    matches!(got, Err(HeadError::TooLarge)),
                    "want TooLarge, got {got:?}: {}",
                    what()
                );
            } else {
                assert!(
                    matches!(got, Ok(None)),
                    "want Ok(None), got {got:?}: {}",
                    what()
                );
                assert_eq!(&buf[..], input, "a partial head is kept: {}", what());
            }
            return;
        }
        Ok(httparse::Status::Complete(n)) => n,
    };
    let (Some(version), Some(code)) = (res.version, res.code) else {
        unreachable!("a complete head has a version and a status")
    };

    let mut refusals = Vec::new();
    if len > RESPONSE_MAX_HEAD_BYTES {
        refusals.push(HeadError::TooLarge);
    }
    if !(100..=999).contains(&code) || version > 1 {
        refusals.push(HeadError::StatusLine);
    }
    let mut headers = Vec::with_capacity(res.headers.len());
    let mut lengths = Vec::new();
    let mut bad_length = false;
    for h in res.headers.iter() {
        let (Ok(name), Ok(_)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            refusals.push(HeadError::Header);
            continue;
        };
        if name == header::CONTENT_LENGTH {
            for part in h.value.split(|&b| b == b',') {
                match content_length(part.trim_ascii()) {
                    Some(n) => lengths.push(n),
                    None => bad_length = true,
                }
            }
        }
        headers.push((name, h.value));
    }
    if bad_length || lengths.windows(2).any(|w| w[0] != w[1]) {
        refusals.push(HeadError::ContentLength);
    }
    if !refusals.is_empty() {
        assert!(
            matches!(&got, Err(e) if refusals.contains(e)),
            "want one of {refusals:?}, got {got:?}: {}",
            what()
        );
        return;
    }
    let head = match got {
        Ok(Some(head)) => head,
        other => panic!("want a head, got {other:?}: {}", what()),
    };
    assert_eq!(head.parts.status.as_u16(), code, "status: {}", what());
    let want_version = if version == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    assert_eq!(head.parts.version, want_version, "version: {}", what());
    // A reason phrase of the upstream's own travels on, where hyper can hold it.
    let canonical = StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason());
    let want_reason = res
        .reason
        .filter(|r| canonical != Some(*r))
        .and_then(|r| hyper::ext::ReasonPhrase::try_from(r.as_bytes().to_vec()).ok());
    assert_eq!(
        head.parts
            .extensions
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| r.as_bytes()),
        want_reason.as_ref().map(|r| r.as_bytes()),
        "reason phrase: {}",
        what()
    );

    // Framing (RFC 9112 §6.3).
    let no_body =
        *method == Method::HEAD || (100..200).contains(&code) || code == 204 || code == 304;
    // Chunked when the final coding is: hyper's reading, the last element of the last
    // Transfer-Encoding line, even an empty one (RFC 9110 §5.6.1 would skip empty list
    // elements: `chunked,` is then read until close, and the connection not reused).
    let chunked = headers
        .iter()
        .rev()
        .find(|(n, _)| n == header::TRANSFER_ENCODING)
        .map(|(_, v)| {
            v.rsplit(|&b| b == b',')
                .next()
                .unwrap_or(b"")
                .trim_ascii()
                .eq_ignore_ascii_case(b"chunked")
        });
    let length = lengths.first().copied();
    let (mut close, mut keep_alive_token) = (false, false);
    for (_, v) in headers.iter().filter(|(n, _)| n == header::CONNECTION) {
        for token in connection_tokens(v) {
            close |= token.eq_ignore_ascii_case(b"close");
            keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
        }
    }
    let mut keep_alive = !close && (version == 1 || keep_alive_token);
    // Both length headers, or chunking from HTTP/1.0: suspect framing, no reuse (§6.1, §6.3).
    if chunked.is_some() && (length.is_some() || version == 0) {
        keep_alive = false;
    }
    let framing = match (no_body, chunked, length) {
        (true, _, _) => ResponseFraming::Empty,
        (false, Some(true), _) => ResponseFraming::Chunked,
        (false, Some(false), _) | (false, None, None) => ResponseFraming::Close,
        (false, None, Some(n)) => ResponseFraming::Length(n),
    };
    if framing == ResponseFraming::Close {
        keep_alive = false;
    }
    assert_eq!(head.framing, framing, "framing: {}", what());
    assert_eq!(head.keep_alive, keep_alive, "keep-alive: {}", what());
    if chunked.is_some() && !no_body {
        headers.retain(|(n, _)| n != header::CONTENT_LENGTH);
    }
    same_headers(&head.parts.headers, &headers, &what);
    assert_eq!(&buf[..], &input[len..], "bytes after the head: {}", what());
}

// ---------------------------------------------------------------------------------------------
// Path normalisation and routing (`router/normalize.rs`, `router/mod.rs`).

/// A router with one route per rule (route `i` for `rules[i]`) and, with `regex`, one Regex
/// route last (`/re/[a-z]+\.txt`), built as `compile` builds the table's.
pub fn router(rules: &[(PathKind, &str)], merge_slashes: bool, regex: bool) -> Router {
    thread_local! {
        /// A route with every default, parsed once: deserialising one per rule and input
        /// would cost more than the checks.
        static TEMPLATE: Route = serde_json::from_value(serde_json::json!({"id": "r"}))
            .expect("a route");
    }
    let route = |id: String, path: &str, kind: PathKind| {
        TEMPLATE.with(|t| Route {
            id,
            paths: vec![PathRule {
                path: path.to_owned(),
                kind,
            }],
            ..t.clone()
        })
    };
    let mut routes: Vec<Route> = rules
        .iter()
        .enumerate()
        .map(|(i, &(kind, path))| route(format!("r{i}"), path, kind))
        .collect();
    if regex {
        routes.push(route("regex".into(), "/re/[a-z]+\\.txt", PathKind::Regex));
    }
    Router::new(&routes, merge_slashes).expect("the rules compile")
}

/// Looks `path` up for a plain GET to `fuzz.test`.
pub fn route(router: &Router, path: &str) -> Lookup {
    router.lookup(&RequestView {
        host: "fuzz.test",
        path,
        method: &Method::GET,
        headers: &HeaderMap::new(),
        query: None,
        protocol: ClientProtocol::Http,
    })
}

/// `path` with some of its unreserved characters percent-encoded (which, and in which case,
/// chosen by the bits of `seed`); the hex digits of its escapes are left alone.
pub fn percent_encode_some(path: &str, seed: u64) -> String {
    let mut state = seed | 1;
    let mut bit = || {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state & 1 == 1
    };
    let mut out = String::with_capacity(path.len() * 3);
    // The two characters after a `%` belong to its escape.
    let mut escape = 0u8;
    for c in path.chars() {
        let unreserved = c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~');
        let in_escape = escape > 0;
        escape = if c == '%' {
            2
        } else {
            escape.saturating_sub(1)
        };
        if unreserved && !in_escape && bit() {
            if bit() {
                out.push_str(&format!("%{:02X}", c as u8));
            } else {
                out.push_str(&format!("%{:02x}", c as u8));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Every escaped-slashes policy.
pub const ESCAPED_SLASHES: [EscapedSlashes; 4] = [
    EscapedSlashes::Reject,
    EscapedSlashes::Keep,
    EscapedSlashes::UnescapeAndRedirect,
    EscapedSlashes::UnescapeAndForward,
];

/// What a request path finds, as the handler looks it up: the path normalised under the
/// escaped-slashes policy, then matched without its `;` parameters.
pub fn route_request(
    router: &Router,
    raw: &str,
    merge_slashes: bool,
    slashes: EscapedSlashes,
) -> Result<(String, Lookup), BadPath> {
    let normal = normalize_request_path(raw, merge_slashes, slashes)?;
    let routing = without_params(&normal)?;
    let found = route(router, &routing);
    Ok((normal.into_owned(), found))
}

/// Normalising is idempotent, and a normalised path whose unreserved characters are
/// percent-encoded (chosen by `seed`) normalises back to itself and finds the same route, as
/// the handler looks routes up ([`route_request`]). Also: a path redirected to its normal form
/// is not redirected again, and the matched prefix, carried over to the path with its `;`
/// parameters (what `strip_path` cuts), ends on a character boundary and holds the same
/// segments. Routes come from `rules` and `regex` (see [`router`]).
pub fn check_path(
    raw: &str,
    merge_slashes: bool,
    slashes: EscapedSlashes,
    rules: &[(PathKind, &str)],
    regex: bool,
    seed: u64,
) {
    let router = router(rules, merge_slashes, regex);
    let what = || {
        format!(
            "path {raw:?}, merge_slashes {merge_slashes}, {slashes:?}, rules {rules:?}, regex {regex}"
        )
    };
    // Any string, for panics only (the handler looks up normalised paths).
    let _ = route(&router, raw);
    let Ok(normal) = normalize_request_path(raw, merge_slashes, slashes) else {
        return;
    };
    assert!(
        normal.starts_with('/'),
        "not absolute: {normal:?}: {}",
        what()
    );
    let again = normalize_request_path(&normal, merge_slashes, slashes);
    assert_eq!(again.as_deref(), Ok(&*normal), "not idempotent: {}", what());
    if slashes == EscapedSlashes::UnescapeAndRedirect {
        assert!(
            !has_escaped_slash(&normal),
            "the redirect to {normal:?} would redirect again: {}",
            what()
        );
    }

    let found = route_request(&router, &normal, merge_slashes, slashes);
    let encoded = percent_encode_some(&normal, seed);
    let found_back = route_request(&router, &encoded, merge_slashes, slashes);
    assert_eq!(
        found_back.as_ref().map(|f| f.1),
        found.as_ref().map(|f| f.1),
        "{encoded:?} routes unlike {normal:?}: {}",
        what()
    );
    assert_eq!(
        normalize_request_path(&encoded, merge_slashes, slashes).as_deref(),
        Ok(&*normal),
        "{encoded:?} does not normalise to {normal:?}: {}",
        what()
    );

    if let Ok((_, Lookup::Matched(m) | Lookup::WrongProtocol(m))) = found {
        let routing = without_params(&normal).expect("routed");
        assert!(
            m.matched_len <= routing.len() && routing.is_char_boundary(m.matched_len),
            "matched {} bytes of {routing:?}: {}",
            m.matched_len,
            what()
        );
        let end = with_params_len(&normal, m.matched_len);
        assert!(
            end <= normal.len() && normal.is_char_boundary(end),
            "the matched prefix ends at {end} in {normal:?}: {}",
            what()
        );
        assert_eq!(
            without_params(&normal[..end]).as_deref(),
            Ok(&routing[..m.matched_len]),
            "the matched prefix, parameters included, is not the one matched: {}",
            what()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The fuzz targets' inputs: raw bytes to a case for the oracles above. The targets in `fuzz/`
// call these, and the property tests replay the seeds in `fuzz/seeds/` through them.

/// `request_head`: `[limits, max_headers, pad, head…]`. The low 3 bits of `limits` pick the
/// size limit; `limits` ≥ 248 grows the head to around a limit (see [`pad_head`]).
pub fn fuzz_request_head(data: &[u8]) {
    const LIMITS: [usize; 8] = [0, 16, 100, 1024, 8192, 65_535, 65_536, 1 << 20];
    let [limits, max_headers, pad, head @ ..] = data else {
        return;
    };
    let max_head = LIMITS[usize::from(limits & 7)];
    let padded;
    let input = if limits >> 3 == 31 {
        let around = [max_head, REQUEST_FAST_HEAD_MAX, REQUEST_FAST_HEAD_MAX + 1]
            [usize::from(pad % 3)]
        .min(REQUEST_FAST_HEAD_MAX + 1);
        padded = pad_head(head, (around + usize::from(pad / 3 % 16)).saturating_sub(8));
        &padded[..]
    } else {
        head
    };
    check_request_head(input, max_head, usize::from(*max_headers));
}

/// `chunked`: `[mode, …]`, by `mode % 4`:
/// 0, 1: `[reads, bytes…]`, arbitrary bytes into the decoder ([`check_chunked_decode`]);
/// 2: `[k, reads, style, k frame lengths…, payload…]`, a round trip
/// ([`check_chunked_roundtrip`]; `style`'s top 3 bits pick bytes that follow the body);
/// 3: `[8-byte little-endian size, bytes…]`, a chunk-size line ([`check_chunk_size`]; `mode`
/// bit 2 keeps the size under 64 KiB).
pub fn fuzz_chunked(data: &[u8]) {
    let [mode, rest @ ..] = data else {
        return;
    };
    let reads_of = |r: u8| [1 + usize::from(r & 15), 1 + 7 * usize::from(r >> 4)];
    match mode % 4 {
        0 | 1 => {
            let [reads, input @ ..] = rest else {
                return;
            };
            check_chunked_decode(input, &reads_of(*reads));
        }
        2 => {
            let [k, reads, style, rest @ ..] = rest else {
                return;
            };
            let (lens, mut payload) = rest.split_at(usize::from(k % 8).min(rest.len()));
            let mut frames = Vec::with_capacity(lens.len() + 1);
            for &len in lens {
                let (frame, more) = payload.split_at(usize::from(len).min(payload.len()));
                frames.push(frame);
                payload = more;
            }
            frames.push(payload);
            const TAILS: [&[u8]; 5] = [
                b"",
                b"NEXT",
                b"HTTP/1.1 200 OK\r\n\r\n",
                b"\r\n",
                b"0\r\n\r\n",
            ];
            let tail = TAILS[usize::from(style >> 5) % TAILS.len()];
            check_chunked_roundtrip(&frames, &reads_of(*reads), style & 31, tail);
        }
        _ => {
            let Some((size, body)) = rest.split_first_chunk::<8>() else {
                return;
            };
            let mut len = u64::from_le_bytes(*size);
            if mode & 4 != 0 {
                len &= 0xffff;
            }
            check_chunk_size(usize::try_from(len).unwrap_or(usize::MAX), body);
        }
    }
}

/// `response_head`: `[method, pad, head…]`. The low 2 bits of `method` pick GET, HEAD, POST or
/// CONNECT; `method` ≥ 252 grows the head to around [`RESPONSE_MAX_HEAD_BYTES`].
pub fn fuzz_response_head(data: &[u8]) {
    let [method, pad, head @ ..] = data else {
        return;
    };
    let m =
        [Method::GET, Method::HEAD, Method::POST, Method::CONNECT][usize::from(method & 3)].clone();
    let padded;
    let input = if method >> 2 == 63 {
        padded = pad_head(head, RESPONSE_MAX_HEAD_BYTES - 8 + usize::from(pad % 16));
        &padded[..]
    } else {
        head
    };
    check_response_head(input, &m);
}

/// `path_routing`: `[flags, 8-byte seed, text…]`; `flags` bit 0 merges slashes, bits 1–2 pick
/// the escaped-slashes policy, bit 3 adds the Regex route (compiling it is slow). The text's last line is the request path; each line before it
/// (8 at most) a rule, Exact when it starts with `E`, else Prefix (a leading `P` or `E` is not
/// part of the path). Rule paths are made valid as configuration validation requires: starting
/// with `/`, without `?`, `#`, spaces or control characters.
pub fn fuzz_path(data: &[u8]) {
    let [flags, rest @ ..] = data else {
        return;
    };
    let Some((seed, text)) = rest.split_first_chunk::<8>() else {
        return;
    };
    let text = String::from_utf8_lossy(text);
    let mut lines: Vec<&str> = text.split('\n').collect();
    let path = lines.pop().unwrap_or("");
    let rules: Vec<(PathKind, String)> = lines
        .iter()
        .take(8)
        .map(|line| {
            let (kind, p) = match line.strip_prefix('E') {
                Some(p) => (PathKind::Exact, p),
                None => (PathKind::Prefix, line.strip_prefix('P').unwrap_or(line)),
            };
            let p: String = p
                .chars()
                .map(|c| {
                    if c.is_control() || matches!(c, '?' | '#' | ' ') {
                        '_'
                    } else {
                        c
                    }
                })
                .collect();
            let p = if p.starts_with('/') {
                p
            } else {
                format!("/{p}")
            };
            (kind, p)
        })
        .collect();
    let rules: Vec<(PathKind, &str)> = rules.iter().map(|(k, p)| (*k, p.as_str())).collect();
    check_path(
        path,
        flags & 1 == 1,
        ESCAPED_SLASHES[usize::from(flags >> 1 & 3)],
        &rules,
        flags & 8 != 0,
        u64::from_le_bytes(*seed),
    );
}

/// The Redis reply parser (`redis/resp.rs`) on arbitrary bytes, with an oracle: whatever it
/// accepts, it accepts the same way when the bytes arrive one at a time (every shorter prefix
/// asks for more and consumes nothing), and a command it encodes parses back as an array of
/// the same bulk strings.
pub fn fuzz_resp(data: &[u8]) {
    use crate::redis::resp::{encode, parse, Reply};
    use bytes::BytesMut;

    let mut whole = BytesMut::from(data);
    let first = parse(&mut whole);
    if let Ok(Some(reply)) = &first {
        let used = data.len() - whole.len();
        assert!(used > 0);
        for cut in 0..used {
            let mut part = BytesMut::from(&data[..cut]);
            assert_eq!(parse(&mut part), Ok(None), "prefix of {cut} bytes");
            assert_eq!(part.len(), cut, "a partial reply consumed bytes");
        }
        let mut exact = BytesMut::from(&data[..used]);
        assert_eq!(parse(&mut exact).as_ref(), Ok(&Some(reply.clone())));
        assert!(exact.is_empty());
    }
    if let Ok(None) = first {
        assert_eq!(whole.len(), data.len(), "nothing consumed when incomplete");
    }
    // Round trip: the input split at 0xff bytes into command arguments.
    let args: Vec<&[u8]> = data.split(|b| *b == 0xff).collect();
    let mut out = BytesMut::new();
    encode(&mut out, &args);
    let back = parse(&mut out).expect("our own encoding parses");
    let want = Reply::Array(
        args.iter()
            .map(|a| Reply::Bulk(bytes::Bytes::copy_from_slice(a)))
            .collect(),
    );
    assert_eq!(back, Some(want));
    assert!(out.is_empty());
}

/// `dns_response`: `[selector, message…]`. The low bit of `selector` picks the question type
/// (`A` or `AAAA`), the rest one of a few names; the id asked is the message's own, so that
/// the parser gets past the id check. The oracle: no panic; addresses of the asked family
/// only, with a TTL when there are any, never above 2³¹−1; and a query Weir encodes (its name
/// the message as text, when that is a DNS name) read back as a response (QR set) is a valid
/// empty answer.
pub fn fuzz_dns_response(data: &[u8]) {
    use crate::upstream::dns::wire::{encode_query, parse_response, Answer, ParseError};
    use crate::upstream::dns::wire::{TYPE_A, TYPE_AAAA};

    let Some((&selector, msg)) = data.split_first() else {
        return;
    };
    let qtype = if selector & 1 == 0 { TYPE_A } else { TYPE_AAAA };
    let names = ["app.weir.test", "a", "WWW.Example.Test."];
    let name = names[usize::from(selector >> 1) % names.len()];
    let id = match msg {
        [a, b, ..] => u16::from_be_bytes([*a, *b]),
        _ => 0,
    };
    match parse_response(msg, id, name, qtype) {
        Ok(Answer::Records { addrs, ttl }) => {
            assert!(
                addrs.iter().all(|a| a.is_ipv4() == (qtype == TYPE_A)),
                "wrong family in {addrs:?}: {}",
                show(data)
            );
            assert!(addrs.is_empty() || ttl.is_some(), "no TTL: {}", show(data));
            assert!(
                ttl.is_none_or(|t| t <= i32::MAX as u32),
                "TTL {ttl:?}: {}",
                show(data)
            );
        }
        Ok(Answer::NxDomain | Answer::Truncated) => {}
        Err(e) => assert_ne!(e, ParseError::WrongId, "{}", show(data)),
    }

    if let Ok(text) = std::str::from_utf8(msg) {
        if let Some(query) = encode_query(id, text, qtype) {
            let mut response = query.clone();
            response[2] |= 0x80;
            assert_eq!(
                parse_response(&response, id, &text.to_ascii_uppercase(), qtype),
                Ok(Answer::Records {
                    addrs: Vec::new(),
                    ttl: None
                }),
                "our query for {text:?} as its own answer: {}",
                show(&query)
            );
        }
    }
}

/// `client_hello`: arbitrary bytes as the start of a TLS connection. The oracle: no panic; a
/// name found is a valid DNS name (letters, digits, `-`, `_`, `.`); an answer other than
/// `Incomplete` does not change when more bytes follow (a connection decided on a prefix is
/// decided as the whole would be).
pub fn fuzz_client_hello(data: &[u8]) {
    use crate::tls::client_hello::{server_name, Hello};
    let got = server_name(data);
    if let Hello::Sni(n) = got {
        assert!(
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')),
            "name {n:?}: {}",
            show(data)
        );
    }
    if got != Hello::Incomplete {
        let mut longer = data.to_vec();
        longer.extend_from_slice(&[0x16, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(server_name(&longer), got, "{}", show(data));
    }
}
