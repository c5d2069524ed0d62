//! gRPC's protocol facts that several layers need: recognising a gRPC request, its
//! `grpc-timeout`, the status codes and headers, and the HTTP-to-gRPC status mapping.

use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

/// `grpc-status`.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`.
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-timeout`.
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// gRPC status codes Weir produces.
pub mod code {
    /// The catch-all.
    pub const UNKNOWN: u16 = 2;
    /// The deadline passed.
    pub const DEADLINE_EXCEEDED: u16 = 4;
    /// Refused for lack of permission.
    pub const PERMISSION_DENIED: u16 = 7;
    /// A quota or size limit.
    pub const RESOURCE_EXHAUSTED: u16 = 8;
    /// No such method (no route).
    pub const UNIMPLEMENTED: u16 = 12;
    /// A malformed request.
    pub const INTERNAL: u16 = 13;
    /// Try again later.
    pub const UNAVAILABLE: u16 = 14;
    /// No valid credentials.
    pub const UNAUTHENTICATED: u16 = 16;
}

/// Whether a request is a gRPC call (`content-type: application/grpc`, `application/grpc+proto`,
/// `application/grpc-web…`).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16 && v[..16].eq_ignore_ascii_case(b"application/grpc")
    })
}

/// A `grpc-timeout` value: 1 to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub fn parse_timeout(v: &HeaderValue) -> Option<Duration> {
    let v = v.as_bytes();
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The gRPC status for an HTTP status Weir answered with (gRPC's HTTP-to-gRPC mapping; sizes
/// over a limit are `RESOURCE_EXHAUSTED`). A call whose own `grpc-timeout` ran out is
/// `DEADLINE_EXCEEDED`, which the handler sets itself: Weir's other timeouts are `UNAVAILABLE`,
/// which clients may retry.
pub fn status_for(http: StatusCode) -> u16 {
    match http.as_u16() {
        400 => code::INTERNAL,
        401 => code::UNAUTHENTICATED,
        403 => code::PERMISSION_DENIED,
        404 => code::UNIMPLEMENTED,
        413 | 431 => code::RESOURCE_EXHAUSTED,
        429 | 502 | 503 | 504 => code::UNAVAILABLE,
        _ => code::UNKNOWN,
    }
}

/// `grpc-message` encoding: printable ASCII except `%` as is, every other byte `%XX`.
pub fn encode_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The `grpc-status` in a head or trailers, if any.
pub fn status_in(headers: &HeaderMap) -> Option<u16> {
    headers.get(GRPC_STATUS)?.to_str().ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_grpc_content_types() {
        let mut h = HeaderMap::new();
        assert!(!is_grpc(&h));
        for (ct, want) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("Application/GRPC-web-text", true),
            ("application/json", false),
            ("application/grp", false),
        ] {
            h.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
            assert_eq!(is_grpc(&h), want, "{ct}");
        }
    }

    #[test]
    fn timeouts() {
        let t = |s: &'static str| parse_timeout(&HeaderValue::from_static(s));
        assert_eq!(t("100m"), Some(Duration::from_millis(100)));
        assert_eq!(t("2S"), Some(Duration::from_secs(2)));
        assert_eq!(t("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(t("5u"), Some(Duration::from_micros(5)));
        assert_eq!(t("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "m", "100", "123456789S", "1x", "-1S", "1.5S", " 1S"] {
            assert_eq!(t(bad), None, "{bad:?}");
        }
    }
}
