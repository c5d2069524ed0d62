//! Decoding of the chunked transfer coding (RFC 9112 §7.1) from a read buffer, without I/O.
//!
//! The trailer section (§7.1.2) is kept, bounded, and parsed once the body ends: malformed
//! lines and fields that must never be trailers are dropped, not refused.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Longest chunk-size line (size plus extensions) accepted.
const MAX_SIZE_LINE: usize = 4096;
/// Most trailer bytes accepted (the whole trailer section, up to the CR of its empty line).
const MAX_TRAILERS: usize = 64 * 1024;
/// Most trailer fields kept; later ones are dropped.
pub const MAX_TRAILER_FIELDS: usize = 100;

/// What one decoding step produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes.
    Data(Bytes),
    /// The buffer holds no complete next item: read more.
    NeedMore,
    /// The last chunk and the trailer section are consumed. The trailer fields kept come the
    /// first time only, and only if there are any; `End(None)` after that.
    End(Option<HeaderMap>),
}

/// A malformed chunked body.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkError {
    /// The size line is not hexadecimal, too long or overflows.
    #[error("invalid chunk size line")]
    Size,
    /// Chunk data not followed by CRLF.
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    /// More trailer bytes than accepted.
    #[error("chunked trailers too large")]
    Trailers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of the size; `digits` counts them.
    Size { value: u64, digits: u8 },
    /// Skipping a chunk extension up to the line's CR.
    Extension { value: u64 },
    /// Expecting the LF of the size line.
    SizeLf { value: u64 },
    /// Inside chunk data.
    Data { left: u64 },
    /// Expecting CR after chunk data.
    DataCr,
    /// Expecting LF after chunk data.
    DataLf,
    /// At the start of a trailer line (an empty one ends the body).
    TrailerStart,
    /// Inside a trailer line.
    TrailerLine,
    /// Expecting the final LF.
    EndLf,
    /// Done.
    End,
}

/// Incremental decoder; feed it the connection's read buffer until it says `End`.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    line: usize,
    /// The trailer section's lines as read (without its final empty line), parsed at the end;
    /// boxed, and only there if there are any, to keep the decoder (in every response body)
    /// small.
    #[allow(clippy::box_collection)]
    trailer_bytes: Option<Box<Vec<u8>>>,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            line: 0,
            trailer_bytes: None,
        }
    }
}

impl ChunkedDecoder {
    /// Consumes framing bytes from `buf` and returns the next piece of body, if any.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkError> {
        loop {
            if let State::Data { left } = self.state {
                if buf.is_empty() {
                    return Ok(Decoded::NeedMore);
                }
                let n = (left.min(buf.len() as u64)) as usize;
                self.state = if n as u64 == left {
                    State::DataCr
                } else {
                    State::Data {
                        left: left - n as u64,
                    }
                };
                return Ok(Decoded::Data(buf.split_to(n).freeze()));
            }
            if self.state == State::End {
                let trailers = self.trailer_bytes.take().and_then(|b| parse_trailers(&b));
                return Ok(Decoded::End(trailers));
            }
            // Framing bytes: step through them up to the next data or the end.
            let mut used = 0;
            for &b in buf.iter() {
                used += 1;
                self.step(b)?;
                if matches!(self.state, State::Data { .. } | State::End) {
                    break;
                }
            }
            buf.advance(used);
            if !matches!(self.state, State::Data { .. } | State::End) {
                return Ok(Decoded::NeedMore);
            }
        }
    }

    /// Whether the whole body has been decoded.
    pub fn is_end(&self) -> bool {
        self.state == State::End
    }

    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        use State::*;
        if matches!(self.state, Size { .. } | Extension { .. } | SizeLf { .. }) {
            self.line += 1;
            if self.line > MAX_SIZE_LINE {
                return Err(ChunkError::Size);
            }
        }
        self.state = match self.state {
            Size { value, digits } => match (b as char).to_digit(16) {
                Some(d) if digits < 16 => Size {
                    value: value << 4 | d as u64,
                    digits: digits + 1,
                },
                Some(_) => return Err(ChunkError::Size),
                None if digits == 0 => return Err(ChunkError::Size),
                None => match b {
                    b'\r' => SizeLf { value },
                    b';' | b' ' | b'\t' => Extension { value },
                    _ => return Err(ChunkError::Size),
                },
            },
            Extension { value } => match b {
                b'\r' => SizeLf { value },
                b'\n' => return Err(ChunkError::Size),
                _ => Extension { value },
            },
            SizeLf { value } => match b {
                b'\n' => {
                    self.line = 0;
                    if value == 0 {
                        TrailerStart
                    } else {
                        Data { left: value }
                    }
                }
                _ => return Err(ChunkError::Size),
            },
            DataCr if b == b'\r' => DataLf,
            DataLf if b == b'\n' => Size {
                value: 0,
                digits: 0,
            },
            DataCr | DataLf => return Err(ChunkError::MissingCrlf),
            TrailerStart | TrailerLine => {
                // Every trailer byte before this one is kept (the section ends at the first
                // one that is not), so the kept ones count them all.
                let read = self.trailer_bytes.as_ref().map_or(0, |t| t.len());
                if read + 1 > MAX_TRAILERS {
                    return Err(ChunkError::Trailers);
                }
                match (self.state, b) {
                    (TrailerStart, b'\r') => EndLf,
                    // A bare LF ends the body as CRLF does (as it ends the trailer lines):
                    // waiting for more would hang the response until the read timeout.
                    (TrailerStart, b'\n') => End,
                    _ => {
                        self.trailer_bytes.get_or_insert_default().push(b);
                        if b == b'\n' {
                            TrailerStart
                        } else {
                            TrailerLine
                        }
                    }
                }
            }
            EndLf if b == b'\n' => End,
            EndLf => return Err(ChunkError::MissingCrlf),
            Data { .. } | End => unreachable!("handled by decode"),
        };
        Ok(())
    }
}

/// The trailer fields of a trailer section (lines ended by LF, a CR before it dropped), as a
/// map, or `None` when none is kept. A line that is not `name: value` with a valid name and
/// value is dropped, as is a field folded over several lines (obs-fold, with its continuation
/// lines), one that must never be a trailer ([`is_forbidden_trailer`]), and any field past the
/// first [`MAX_TRAILER_FIELDS`] kept.
pub fn parse_trailers(section: &[u8]) -> Option<HeaderMap> {
    if section.is_empty() {
        return None;
    }
    let is_fold = |line: &[u8]| matches!(line.first(), Some(b' ' | b'\t'));
    let mut lines = section
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .peekable();
    let mut map = HeaderMap::new();
    while let Some(line) = lines.next() {
        if map.len() >= MAX_TRAILER_FIELDS {
            break;
        }
        // A continuation line drops the field it continues (its value would be cut short
        // otherwise), and is dropped itself.
        if is_fold(line) || lines.peek().is_some_and(|next| is_fold(next)) {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if is_forbidden_trailer(name) {
            continue;
        }
        let value = trim_ows(value);
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            continue;
        };
        map.append(name, value);
    }
    (!map.is_empty()).then_some(map)
}

/// A field that must never be sent as a trailer (RFC 9110 §6.5.1), compared case-insensitively:
/// message framing, routing, hop-by-hop (RFC 9110 §7.6.1), request modifiers, authentication,
/// response control data and what says how to process the content.
pub fn is_forbidden_trailer(name: &[u8]) -> bool {
    const FORBIDDEN: &[&[u8]] = &[
        // Framing.
        b"content-length",
        b"transfer-encoding",
        b"trailer",
        // Routing.
        b"host",
        // Hop-by-hop.
        b"connection",
        b"keep-alive",
        b"te",
        b"upgrade",
        b"http2-settings",
        // Request modifiers: controls and conditionals.
        b"cache-control",
        b"expect",
        b"max-forwards",
        b"range",
        b"if-match",
        b"if-none-match",
        b"if-modified-since",
        b"if-unmodified-since",
        b"if-range",
        // Authentication and cookies.
        b"authorization",
        b"www-authenticate",
        b"authentication-info",
        b"cookie",
        b"set-cookie",
        // Response control data.
        b"age",
        b"date",
        b"expires",
        b"location",
        b"retry-after",
        b"vary",
        // How to process the content.
        b"content-type",
        b"content-encoding",
        b"content-range",
    ];
    // `proxy-*`: proxy-connection, proxy-authenticate, proxy-authorization, …
    name.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"proxy-"))
        || FORBIDDEN.iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// `value` without leading and trailing spaces and tabs.
fn trim_ows(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &value[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; returns the body or the first error.
    fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, BytesMut), ChunkError> {
        decode_with_trailers(input, step).map(|(body, _, rest)| (body, rest))
    }

    /// As [`decode_in_steps`], with the trailers; checks that they come once.
    fn decode_with_trailers(
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, Option<HeaderMap>, BytesMut), ChunkError> {
        let mut d = ChunkedDecoder::default();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Decoded::Data(b) => body.extend_from_slice(&b),
                Decoded::End(trailers) => {
                    assert!(trailers.as_ref().is_none_or(|t| !t.is_empty()));
                    assert_eq!(d.decode(&mut buf), Ok(Decoded::End(None)));
                    return Ok((body, trailers, buf));
                }
                Decoded::NeedMore => {
                    assert!(fed < input.len(), "decoder wants more than the input has");
                    let end = (fed + step).min(input.len());
                    buf.extend_from_slice(&input[fed..end]);
                    fed = end;
                }
            }
        }
    }

    #[test]
    fn decodes_whatever_the_read_boundaries() {
        let input = b"5\r\nhello\r\nA;name=\"v\"\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 64] {
            let (body, rest) = decode_in_steps(input, step).unwrap();
            assert_eq!(body, b"hello0123456789", "step {step}");
            // Bytes after the body stay for the connection to judge.
            let mut d = ChunkedDecoder::default();
            let mut all = BytesMut::from(&input[..]);
            while !matches!(d.decode(&mut all).unwrap(), Decoded::End(_)) {}
            assert_eq!(&all[..], b"NEXT");
            assert!(rest.len() <= 4);
        }
    }

    #[test]
    fn empty_body_and_uppercase_hex() {
        assert_eq!(decode_in_steps(b"0\r\n\r\n", 64).unwrap().0, b"");
        let (body, _) =
            decode_in_steps(b"1F\r\n0123456789012345678901234567890\r\n0\r\n\r\n", 5).unwrap();
        assert_eq!(body.len(), 31);
    }

    #[test]
    fn a_bare_lf_after_the_last_chunk_ends_the_body_at_once() {
        for input in [
            &b"3\r\nabc\r\n0\r\n\n"[..],
            b"0\r\nx: y\n\n",
            b"0\r\nx: y\r\n\n",
        ] {
            for step in [1, 2, 64] {
                let (body, rest) = decode_in_steps(input, step).unwrap();
                assert!(rest.is_empty(), "{input:?}");
                assert!(body.is_empty() || body == b"abc");
            }
        }
    }

    #[test]
    fn malformed_input_is_an_error() {
        for (input, want) in [
            (&b"x\r\n"[..], ChunkError::Size),
            (b"\r\n", ChunkError::Size),
            (b"5\n", ChunkError::Size),
            (b"11111111111111111\r\n", ChunkError::Size),
            (b"3\r\nabcX", ChunkError::MissingCrlf),
            (b"3\r\nabc\rX", ChunkError::MissingCrlf),
            (b"0\r\n\rX", ChunkError::MissingCrlf),
        ] {
            assert_eq!(decode_in_steps(input, 64).unwrap_err(), want, "{input:?}");
        }
        let long_ext = format!("1;{}\r\n", "e".repeat(MAX_SIZE_LINE));
        assert_eq!(
            decode_in_steps(long_ext.as_bytes(), 64).unwrap_err(),
            ChunkError::Size
        );
        let long_trailers = format!("0\r\nx: {}\r\n\r\n", "t".repeat(MAX_TRAILERS));
        assert_eq!(
            decode_in_steps(long_trailers.as_bytes(), 4096).unwrap_err(),
            ChunkError::Trailers
        );
    }

    /// `(name, value)` pairs of a map, in order.
    fn pairs(map: &Option<HeaderMap>) -> Vec<(String, String)> {
        map.iter()
            .flatten()
            .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
            .collect()
    }

    fn want(fields: &[(&str, &str)]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn trailers_arrive_whatever_the_read_boundaries() {
        let input = b"5\r\nhello\r\n0;last\r\nGrpc-Status: 0\r\nx-checksum:  abc \t\r\n\
                      x-empty:\r\nx-two: 1\nx-two: 2\r\n\r\nNEXT";
        let expect = want(&[
            ("grpc-status", "0"),
            ("x-checksum", "abc"),
            ("x-empty", ""),
            ("x-two", "1"),
            ("x-two", "2"),
        ]);
        for step in 1..=input.len() {
            let (body, trailers, rest) = decode_with_trailers(input, step).unwrap();
            assert_eq!(body, b"hello", "step {step}");
            assert_eq!(pairs(&trailers), expect, "step {step}");
            assert!(b"NEXT".starts_with(&rest), "step {step}");
        }
        // Every split of the input into two reads, the trailer section cut at each byte.
        for cut in 0..input.len() {
            let mut d = ChunkedDecoder::default();
            let mut buf = BytesMut::from(&input[..cut]);
            let mut body = Vec::new();
            let mut fed_all = false;
            let trailers = loop {
                match d.decode(&mut buf).unwrap() {
                    Decoded::Data(b) => body.extend_from_slice(&b),
                    Decoded::End(t) => break t,
                    Decoded::NeedMore if !fed_all => {
                        buf.extend_from_slice(&input[cut..]);
                        fed_all = true;
                    }
                    Decoded::NeedMore => panic!("cut {cut}: wants more"),
                }
            };
            assert_eq!(body, b"hello", "cut {cut}");
            assert_eq!(pairs(&trailers), expect, "cut {cut}");
        }
    }

    #[test]
    fn no_trailer_section_means_no_trailers() {
        for input in [&b"0\r\n\r\n"[..], b"3\r\nabc\r\n0\r\n\n"] {
            assert_eq!(decode_with_trailers(input, 1).unwrap().1, None);
        }
        // Only dropped fields: nothing to send either.
        let input = b"0\r\ncontent-length: 5\r\nno colon\r\n\r\n";
        assert_eq!(decode_with_trailers(input, 64).unwrap().1, None);
    }

    #[test]
    fn forbidden_and_malformed_trailers_are_dropped() {
        let input = b"0\r\n\
            Content-Length: 5\r\ntransfer-encoding: chunked\r\nTrailer: x\r\nhost: h\r\n\
            connection: close\r\nkeep-alive: 5\r\nTE: trailers\r\nupgrade: h2c\r\n\
            proxy-connection: close\r\nProxy-Authenticate: Basic\r\nauthorization: a\r\n\
            www-authenticate: b\r\nset-cookie: c=1\r\ncookie: d=2\r\ncontent-type: text/x\r\n\
            content-encoding: gzip\r\ncontent-range: bytes 0-1/2\r\n\
            x-ok-1: a\r\n\
            no colon here\r\n\
            bad name: v\r\n\
            : empty name\r\n\
            x-nul: a\x00b\r\n\
            x-cr: a\rb\r\n\
            x-folded: first\r\n  continued\r\n\tagain\r\n\
            x-ok-2: caf\xe9\r\n\
            \r\n";
        for step in [1, 5, 4096] {
            let (_, trailers, rest) = decode_with_trailers(input, step).unwrap();
            assert!(rest.is_empty());
            let got = trailers.unwrap();
            let names: Vec<_> = got.keys().map(|k| k.as_str()).collect();
            assert_eq!(names, ["x-ok-1", "x-ok-2"], "step {step}");
            assert_eq!(got["x-ok-2"].as_bytes(), b"caf\xe9");
        }
        for name in ["content-length", "HOST", "Proxy-Foo", "te", "Set-Cookie"] {
            assert!(is_forbidden_trailer(name.as_bytes()), "{name}");
        }
        for name in ["grpc-status", "x-checksum", "tee", "proxy", "server-timing"] {
            assert!(!is_forbidden_trailer(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn trailer_limits() {
        // The byte limit covers the whole section up to its final CR.
        let field = "x: ";
        let fits = format!(
            "0\r\n{field}{}\r\n\r\n",
            "t".repeat(MAX_TRAILERS - field.len() - 3)
        );
        let (_, trailers, _) = decode_with_trailers(fits.as_bytes(), 4096).unwrap();
        assert_eq!(trailers.unwrap()["x"].len(), MAX_TRAILERS - field.len() - 3);
        let over = format!(
            "0\r\n{field}{}\r\n\r\n",
            "t".repeat(MAX_TRAILERS - field.len() - 2)
        );
        assert_eq!(
            decode_with_trailers(over.as_bytes(), 4096).unwrap_err(),
            ChunkError::Trailers
        );
        // Fields past the count limit are dropped; the body still ends.
        let mut many = String::from("0\r\n");
        for i in 0..MAX_TRAILER_FIELDS + 50 {
            many.push_str(&format!("x-{i}: {i}\r\n"));
        }
        many.push_str("\r\n");
        let (_, trailers, rest) = decode_with_trailers(many.as_bytes(), 100).unwrap();
        let trailers = trailers.unwrap();
        assert!(rest.is_empty());
        assert_eq!(trailers.len(), MAX_TRAILER_FIELDS);
        assert_eq!(trailers["x-0"], "0");
        assert!(!trailers.contains_key(format!("x-{MAX_TRAILER_FIELDS}")));
    }
}
