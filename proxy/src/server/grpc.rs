//! gRPC at the edge: recognising a gRPC request, its `grpc-timeout`, and answering a gRPC
//! client in its own terms when Weir itself fails the call (no route, no target, a timeout, a
//! plugin's refusal): a trailers-only response whose `grpc-status` is mapped from the HTTP
//! status Weir would have sent, as gRPC's own HTTP-to-gRPC mapping does, rather than an HTTP
//! error page the client can only report as `UNKNOWN`.

use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::plugins::EarlyResponse;

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

/// Turns an answer Weir made into a trailers-only gRPC response: HTTP 200, the request's
/// gRPC content type, `grpc-status` and `grpc-message` in the head, no body. Headers a plugin
/// set (rate-limit headers, `WWW-Authenticate`) stay; a body goes (its JSON `message` becomes
/// `grpc-message`). Returns the response and the gRPC status.
pub fn trailers_only(
    early: EarlyResponse,
    content_type: Option<&HeaderValue>,
) -> (EarlyResponse, u16) {
    // A `grpc-status` already set (a deadline the handler saw pass) wins.
    let status = status_in(&early.headers).unwrap_or_else(|| status_for(early.status));
    let message = serde_json::from_slice::<serde_json::Value>(&early.body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| early.status.canonical_reason().unwrap_or("").to_owned());
    let mut headers = early.headers;
    headers.remove(http::header::CONTENT_LENGTH);
    headers.insert(
        CONTENT_TYPE,
        content_type
            .cloned()
            .unwrap_or(HeaderValue::from_static("application/grpc")),
    );
    headers.insert(GRPC_STATUS, HeaderValue::from(status));
    if let Ok(v) = HeaderValue::from_str(&encode_message(&message)) {
        headers.insert(GRPC_MESSAGE, v);
    }
    (
        EarlyResponse {
            status: StatusCode::OK,
            headers,
            body: Bytes::new(),
        },
        status,
    )
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

    #[test]
    fn weirs_answers_become_grpc_statuses() {
        let (r, s) = trailers_only(
            EarlyResponse::message(StatusCode::NOT_FOUND, "no Route matched with those values"),
            Some(&HeaderValue::from_static("application/grpc+proto")),
        );
        assert_eq!((r.status, s), (StatusCode::OK, code::UNIMPLEMENTED));
        assert!(r.body.is_empty());
        assert_eq!(r.headers[CONTENT_TYPE], "application/grpc+proto");
        assert_eq!(r.headers[GRPC_STATUS], "12");
        assert_eq!(
            r.headers[GRPC_MESSAGE],
            "no Route matched with those values"
        );
        let mut limited = EarlyResponse::message(StatusCode::TOO_MANY_REQUESTS, "slow: 100%\n");
        limited
            .headers
            .insert("retry-after", HeaderValue::from_static("3"));
        let (r, s) = trailers_only(limited, None);
        assert_eq!(s, code::UNAVAILABLE);
        assert_eq!(r.headers["retry-after"], "3");
        assert_eq!(r.headers[GRPC_MESSAGE], "slow: 100%25%0A");
        assert_eq!(r.headers[CONTENT_TYPE], "application/grpc");
        assert_eq!(status_for(StatusCode::GATEWAY_TIMEOUT), code::UNAVAILABLE);
        let mut late = EarlyResponse::message(StatusCode::GATEWAY_TIMEOUT, "late");
        late.headers
            .insert(GRPC_STATUS, HeaderValue::from(code::DEADLINE_EXCEEDED));
        assert_eq!(trailers_only(late, None).1, code::DEADLINE_EXCEEDED);
        assert_eq!(status_for(StatusCode::UNAUTHORIZED), code::UNAUTHENTICATED);
        assert_eq!(status_for(StatusCode::IM_A_TEAPOT), code::UNKNOWN);
    }
}
