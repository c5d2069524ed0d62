//! A route's fallback service (ingress-nginx's `default-backend` and `custom-http-errors`):
//! it takes the requests the route's service has no target for, and answers instead of the
//! upstream when the upstream's status is one of `statuses` (an error page).
//!
//! The handler does the sending; this module holds the parts that need no connection: the
//! error-page request's head, and discarding the upstream's answer. The compiled settings are
//! `compile::fallback`.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::StatusCode;
use http_body::Body as _;

pub use crate::compile::fallback::CompiledFallback;
use crate::upstream::ResponseBody;

const X_CODE: HeaderName = HeaderName::from_static("x-code");
const X_FORMAT: HeaderName = HeaderName::from_static("x-format");
const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
const TEXT_HTML: HeaderValue = HeaderValue::from_static("text/html");

/// Most of a discarded response body read to give its connection back to the pool.
const DISCARD_LIMIT: usize = 64 * 1024;

/// Makes `headers` (the request's, as they went upstream) those of an error-page request for
/// an upstream answer `status`: no body (`Content-Length: 0`), no upgrade, and `X-Code`,
/// `X-Format` (the request's `Accept`, or `text/html`), `X-Original-URI` and the fallback's
/// own headers. `X-Request-ID` stays when the request has one.
pub fn error_page_headers(
    headers: &mut HeaderMap,
    fallback: &CompiledFallback,
    status: StatusCode,
    original_uri: Option<HeaderValue>,
) {
    for name in [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::EXPECT,
        header::UPGRADE,
        header::CONNECTION,
        header::CONTENT_ENCODING,
        header::CONTENT_TYPE,
    ] {
        headers.remove(name);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    headers.insert(X_CODE, HeaderValue::from(status.as_u16()));
    let format = headers.get(header::ACCEPT).cloned().unwrap_or(TEXT_HTML);
    headers.insert(X_FORMAT, format);
    match original_uri {
        Some(uri) => headers.insert(X_ORIGINAL_URI, uri),
        None => headers.remove(X_ORIGINAL_URI),
    };
    for (name, value) in fallback.headers.iter() {
        headers.insert(name.clone(), value.clone());
    }
}

/// The error-page request's path: `/`, under the fallback service's `path`.
pub fn error_page_path(service_path: Option<&str>) -> String {
    match service_path {
        Some(p) if p != "/" && !p.ends_with('/') => format!("{p}/"),
        Some(p) => p.to_string(),
        None => "/".to_string(),
    }
}

/// Drops an upstream answer that is not passed on. What of its body already arrived is read
/// first, without waiting (at most 64 KiB): a body read to its end gives its connection back
/// to the pool; any other is closed.
pub fn discard(mut body: ResponseBody) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut left = DISCARD_LIMIT;
    while let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) {
        let n = frame.data_ref().map_or(0, |d| d.len());
        if n > left {
            return;
        }
        left -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::fallback::tests::fallback;

    #[test]
    fn error_page_requests_carry_the_code_format_and_uri() {
        let f = fallback("{service: e, statuses: [404], headers: {X-Namespace: shop, X-Code: no}}");
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("12"));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-request-id", HeaderValue::from_static("abc"));
        h.insert("x-original-uri", HeaderValue::from_static("/forged"));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        error_page_headers(
            &mut h,
            &f,
            StatusCode::NOT_FOUND,
            Some(HeaderValue::from_static("/a/b?c=1")),
        );
        assert_eq!(h[header::CONTENT_LENGTH], "0");
        assert!(!h.contains_key(header::CONTENT_TYPE));
        assert!(!h.contains_key(header::UPGRADE));
        assert_eq!(h["x-format"], "application/json");
        assert_eq!(h["x-original-uri"], "/a/b?c=1");
        assert_eq!(h["x-request-id"], "abc");
        assert_eq!(h["x-namespace"], "shop");
        // The fallback's own headers are set last.
        assert_eq!(h["x-code"], "no");

        let mut h = HeaderMap::new();
        h.insert("x-original-uri", HeaderValue::from_static("/forged"));
        error_page_headers(
            &mut h,
            &fallback("{service: e}"),
            StatusCode::BAD_GATEWAY,
            None,
        );
        assert_eq!(h["x-code"], "502");
        assert_eq!(h["x-format"], "text/html");
        assert!(!h.contains_key("x-original-uri"));
    }

    #[test]
    fn error_pages_are_asked_for_at_the_root_of_the_service_path() {
        assert_eq!(error_page_path(None), "/");
        assert_eq!(error_page_path(Some("/")), "/");
        assert_eq!(error_page_path(Some("/errors")), "/errors/");
        assert_eq!(error_page_path(Some("/errors/")), "/errors/");
    }
}
