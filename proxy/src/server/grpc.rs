//! Answering a gRPC client in its own terms when Weir itself fails the call (no route, no
//! target, a timeout, a plugin's refusal): a trailers-only response whose `grpc-status` is
//! mapped from the HTTP status Weir would have sent, as gRPC's own HTTP-to-gRPC mapping does,
//! rather than an HTTP error page the client can only report as `UNKNOWN`.

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};

pub use crate::grpc::*;
use crate::plugins::EarlyResponse;

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

#[cfg(test)]
mod tests {
    use super::*;

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
