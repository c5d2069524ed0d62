//! Pieces of HTTP/1.1 messages that both Weir's server loop and its upstream client write, and
//! the header classes both sides act on.

use http::header::{HeaderName, HeaderValue};

/// Appends `name: value\r\n`.
pub(crate) fn header_line(out: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    out.extend_from_slice(name.as_str().as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `content-length: n\r\n` (without formatting machinery or an allocation).
pub(crate) fn content_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"content-length: ");
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// Appends a chunk-size line for `len` bytes.
pub(crate) fn chunk_header(out: &mut Vec<u8>, len: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

/// `X-Forwarded-*` (every one: `-Ssl`, `-Scheme`, `-Client-Cert` are trusted by some
/// upstreams too), `X-Real-IP` and RFC 7239 `Forwarded`; also spelt with `_` for `-`
/// (`X_Forwarded_For`), which CGI-style servers fold into the same variable.
pub(crate) fn is_forwarding(n: &HeaderName) -> bool {
    // Header names are lower case here.
    fn same(name: &[u8], want: &[u8]) -> bool {
        name.len() == want.len()
            && name
                .iter()
                .zip(want)
                .all(|(&a, &b)| a == b || (a == b'_' && b == b'-'))
    }
    let n = n.as_str().as_bytes();
    (n.len() > 12 && same(&n[..12], b"x-forwarded-")) || same(n, b"x-real-ip") || n == b"forwarded"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_lengths() {
        let mut out = Vec::new();
        header_line(
            &mut out,
            &http::header::VIA,
            &HeaderValue::from_static("1.1 weir"),
        );
        content_length(&mut out, 0);
        content_length(&mut out, u64::MAX);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "via: 1.1 weir\r\ncontent-length: 0\r\ncontent-length: 18446744073709551615\r\n"
        );
    }

    #[test]
    fn chunk_headers_are_hex() {
        let mut out = Vec::new();
        chunk_header(&mut out, 0);
        chunk_header(&mut out, 255);
        chunk_header(&mut out, 0x10000);
        assert_eq!(out, b"0\r\nff\r\n10000\r\n");
    }
}
