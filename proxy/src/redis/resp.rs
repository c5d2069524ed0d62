//! RESP2, the Redis wire protocol: commands out as arrays of bulk strings, replies in.
//!
//! Only what Weir sends and reads: no RESP3, no push messages. The reply parser is
//! incremental (a partial reply asks for more bytes) and bounded (nesting and lengths), since
//! its input comes from the network.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// A reply from the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR …`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$5\r\nhello` (`$-1` is [`Reply::Nil`]).
    Bulk(Bytes),
    /// `*2 …` (`*-1` is [`Reply::Nil`]).
    Array(Vec<Reply>),
    /// A null bulk string or array.
    Nil,
}

/// The server sent something that is not RESP2 (the connection cannot be trusted any more).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Redis reply: {0}")]
pub struct Malformed(pub &'static str);

/// Nested arrays deeper than this are refused: Weir's scripts return flat arrays.
const MAX_DEPTH: usize = 8;
/// Bulk strings and arrays longer than this are refused (Weir reads small replies).
const MAX_LEN: i64 = 64 * 1024 * 1024;

/// Appends one command (an array of bulk strings) to `out`.
pub fn encode(out: &mut BytesMut, args: &[&[u8]]) {
    out.put_u8(b'*');
    put_decimal(out, args.len() as i64);
    for a in args {
        out.put_u8(b'$');
        put_decimal(out, a.len() as i64);
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn put_decimal(out: &mut BytesMut, n: i64) {
    use std::fmt::Write as _;
    let _ = write!(out, "{n}\r\n");
}

/// Parses one reply from the front of `buf`, consuming it; `Ok(None)` when more bytes are
/// needed (nothing is consumed then).
pub fn parse(buf: &mut BytesMut) -> Result<Option<Reply>, Malformed> {
    let mut pos = 0;
    match parse_at(buf, &mut pos, 0)? {
        Some(reply) => {
            buf.advance(pos);
            Ok(Some(reply))
        }
        None => Ok(None),
    }
}

fn parse_at(buf: &[u8], pos: &mut usize, depth: usize) -> Result<Option<Reply>, Malformed> {
    let Some(line) = line_at(buf, *pos)? else {
        return Ok(None);
    };
    let (kind, text) = (line[0], &line[1..]);
    let next = *pos + line.len() + 2;
    let reply = match kind {
        b'+' => Reply::Status(String::from_utf8_lossy(text).into_owned()),
        b'-' => Reply::Error(String::from_utf8_lossy(text).into_owned()),
        b':' => Reply::Integer(decimal(text)?),
        b'$' => {
            let len = decimal(text)?;
            if len == -1 {
                *pos = next;
                return Ok(Some(Reply::Nil));
            }
            if !(0..=MAX_LEN).contains(&len) {
                return Err(Malformed("bulk length out of range"));
            }
            let end = next + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(Malformed("bulk string not followed by CRLF"));
            }
            *pos = end + 2;
            return Ok(Some(Reply::Bulk(Bytes::copy_from_slice(&buf[next..end]))));
        }
        b'*' => {
            let len = decimal(text)?;
            if len == -1 {
                *pos = next;
                return Ok(Some(Reply::Nil));
            }
            if !(0..=MAX_LEN).contains(&len) {
                return Err(Malformed("array length out of range"));
            }
            if depth >= MAX_DEPTH {
                return Err(Malformed("arrays nested too deeply"));
            }
            let mut at = next;
            // Capped so a huge declared length cannot allocate before its elements arrive.
            let mut items = Vec::with_capacity((len as usize).min(64));
            for _ in 0..len {
                match parse_at(buf, &mut at, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            *pos = at;
            return Ok(Some(Reply::Array(items)));
        }
        _ => return Err(Malformed("unknown reply type")),
    };
    *pos = next;
    Ok(Some(reply))
}

/// The line starting at `pos`, without its CRLF; `None` while it is incomplete.
fn line_at(buf: &[u8], pos: usize) -> Result<Option<&[u8]>, Malformed> {
    let rest = &buf[pos.min(buf.len())..];
    // A status or error line longer than this is not a Redis reply.
    const MAX_LINE: usize = 64 * 1024;
    match rest.iter().position(|&b| b == b'\n') {
        Some(0) => Err(Malformed("empty line")),
        Some(i) if rest[i - 1] == b'\r' && i >= 2 => Ok(Some(&rest[..i - 1])),
        Some(_) => Err(Malformed("line not ended by CRLF")),
        None if rest.len() > MAX_LINE => Err(Malformed("line too long")),
        None => Ok(None),
    }
}

fn decimal(text: &[u8]) -> Result<i64, Malformed> {
    std::str::from_utf8(text)
        .ok()
        .filter(|t| !t.is_empty() && !t.starts_with('+'))
        .and_then(|t| t.parse().ok())
        .ok_or(Malformed("not a decimal number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(input: &[u8]) -> Result<Option<Reply>, Malformed> {
        parse(&mut BytesMut::from(input))
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = BytesMut::new();
        encode(&mut out, &[b"EVALSHA", b"abc", b"1", b"k"]);
        assert_eq!(
            &out[..],
            b"*4\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nk\r\n"
        );
    }

    #[test]
    fn replies_of_every_kind() {
        assert_eq!(one(b"+OK\r\n"), Ok(Some(Reply::Status("OK".into()))));
        assert_eq!(
            one(b"-NOSCRIPT x\r\n"),
            Ok(Some(Reply::Error("NOSCRIPT x".into())))
        );
        assert_eq!(one(b":-7\r\n"), Ok(Some(Reply::Integer(-7))));
        assert_eq!(
            one(b"$3\r\na\r\n\r\n"),
            Ok(Some(Reply::Bulk(Bytes::from_static(b"a\r\n"))))
        );
        assert_eq!(one(b"$-1\r\n"), Ok(Some(Reply::Nil)));
        assert_eq!(one(b"*-1\r\n"), Ok(Some(Reply::Nil)));
        assert_eq!(
            one(b"*2\r\n:1\r\n*1\r\n$0\r\n\r\n"),
            Ok(Some(Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![Reply::Bulk(Bytes::new())])
            ])))
        );
    }

    #[test]
    fn partial_replies_wait_and_consume_nothing() {
        let full = b"*3\r\n:1\r\n$5\r\nhello\r\n+OK\r\n";
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(parse(&mut buf), Ok(None), "cut at {cut}");
            assert_eq!(buf.len(), cut);
        }
        let mut buf = BytesMut::from(&b"+A\r\n+B\r\n"[..]);
        assert_eq!(parse(&mut buf), Ok(Some(Reply::Status("A".into()))));
        assert_eq!(parse(&mut buf), Ok(Some(Reply::Status("B".into()))));
        assert!(buf.is_empty());
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b":+1\r\n",
            b"$-2\r\n",
            b"$3\r\nabcde",
            b"+OK\n",
            b"\r\n",
            b"*99999999999\r\n",
        ] {
            assert!(one(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(one(deep.as_bytes()).is_err());
    }
}
