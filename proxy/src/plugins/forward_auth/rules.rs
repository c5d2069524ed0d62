//! `forward-auth`'s decisions, free of I/O: the headers of the subrequest, what the auth
//! service's status means, the answer to a refused client, and the headers a 2xx hands to the
//! upstream request.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

use crate::plugins::params::encode_into;
use crate::plugins::{EarlyResponse, RequestHead};

/// The original request, as the subrequest describes it.
#[derive(Debug)]
pub(super) struct Original {
    /// Its method.
    pub method: Method,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The Host the client sent (with its port, if any); `None` without one.
    pub host: Option<String>,
    /// Its path (as routed) and query.
    pub path_and_query: String,
    /// The client's address, as Weir resolved it (behind `--trusted-proxies`).
    pub client_ip: IpAddr,
}

impl Original {
    /// What the subrequest needs to know of `req`.
    ///
    /// The scheme is `https` when the client connection is TLS (`tls`) or the request's URI
    /// says so (HTTP/2's `:scheme`, an absolute-form HTTP/1.1 target), else `http`.
    pub fn of(req: &RequestHead, client_ip: IpAddr, tls: bool) -> Original {
        let scheme = match req.uri.scheme_str() {
            _ if tls => "https",
            Some(s) if s.eq_ignore_ascii_case("https") => "https",
            _ => "http",
        };
        let host = match req.headers.get(header::HOST) {
            Some(h) => h.to_str().ok().map(str::to_owned),
            None => req.uri.authority().map(|a| a.as_str().to_owned()),
        }
        .filter(|h| !h.is_empty());
        let path_and_query = req
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        Original {
            method: req.method.clone(),
            scheme,
            host,
            path_and_query,
            client_ip,
        }
    }

    /// `scheme://host/path?query`; without a Host, the path and query alone.
    pub fn url(&self) -> String {
        match &self.host {
            Some(h) => format!("{}://{h}{}", self.scheme, self.path_and_query),
            None => self.path_and_query.clone(),
        }
    }
}

/// Headers a client's request carries that the subrequest never forwards: hop-by-hop fields,
/// framing (the subrequest has no body), and `Host` (the auth service's own).
const NOT_FORWARDED: [&str; 12] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "http2-settings",
    "content-length",
    "expect",
    "host",
];

/// Headers only Weir sets on the subrequest: a client's own are dropped, so it cannot tell the
/// auth service another URL, method or address.
const SET_BY_WEIR: [&str; 4] = [
    "x-real-ip",
    "x-original-url",
    "x-original-method",
    "x-auth-request-redirect",
];

/// Whether two header names are the same once `_` and `-` are taken as one (CGI-style servers,
/// WSGI, Rack, PHP, read `X_User` as `X-User`).
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .all(|(x, y)| x == y || (matches!(x, b'-' | b'_') && matches!(y, b'-' | b'_')))
}

/// Whether the client's header `name` stays out of the subrequest.
fn dropped(name: &HeaderName, connection_tokens: &[String]) -> bool {
    let n = name.as_str();
    NOT_FORWARDED.iter().any(|d| same_name(d, n))
        || SET_BY_WEIR.iter().any(|d| same_name(d, n))
        || (n.len() > "x-forwarded-".len() && same_name("x-forwarded-", &n[.."x-forwarded-".len()]))
        || connection_tokens.iter().any(|t| t == n)
}

/// The subrequest's headers: the client's, less those that must not go, plus the auth
/// service's `Host` and Weir's description of the original request.
/// `redirect`: the `X-Auth-Request-Redirect` to send, instead of the original path and query;
/// `configured`: headers the configuration sets, over all of those.
pub(super) fn subrequest_headers(
    client: &HeaderMap,
    auth_host: &HeaderValue,
    original: &Original,
    redirect: Option<&HeaderValue>,
    configured: &[(HeaderName, HeaderValue)],
) -> HeaderMap {
    // Fields `Connection` names are hop-by-hop too (the pipeline removed them already; a
    // plugin before this one may have added some).
    let connection_tokens: Vec<String> = client
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = HeaderMap::with_capacity(client.len() + 10);
    out.insert(header::HOST, auth_host.clone());
    for (name, value) in client {
        if dropped(name, &connection_tokens) || name == header::COOKIE {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    // HTTP/2 clients may split Cookie into several fields; an HTTP/1.1 message has one
    // (RFC 9113 §8.2.3).
    let cookies: Vec<&[u8]> = client
        .get_all(header::COOKIE)
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    match cookies.as_slice() {
        [] => {}
        [one] => {
            out.insert(
                header::COOKIE,
                HeaderValue::from_bytes(one).expect("was a header value"),
            );
        }
        many => {
            if let Ok(v) = HeaderValue::from_bytes(&many.join(&b"; "[..])) {
                out.insert(header::COOKIE, v);
            }
        }
    }
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(value) {
            out.insert(HeaderName::from_static(name), v);
        }
    };
    let method = original.method.as_str();
    let client_ip = original.client_ip.to_string();
    set("x-original-url", &original.url());
    set("x-original-method", method);
    set("x-forwarded-method", method);
    set("x-forwarded-proto", original.scheme);
    if let Some(h) = &original.host {
        set("x-forwarded-host", h);
    }
    set("x-forwarded-uri", &original.path_and_query);
    set("x-forwarded-for", &client_ip);
    set("x-real-ip", &client_ip);
    match redirect {
        Some(r) => {
            out.insert(
                HeaderName::from_static("x-auth-request-redirect"),
                r.clone(),
            );
        }
        None => set("x-auth-request-redirect", &original.path_and_query),
    }
    for (name, value) in configured {
        out.insert(name.clone(), value.clone());
    }
    out
}

/// Whether the auth service's cookies go on a client answer of `status` (nginx's
/// `add_header` without `always`).
pub(super) fn cookies_go_with(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

/// What the auth service's answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// 2xx: the request goes on.
    Allow,
    /// 401: the client must authenticate (or sign in).
    Unauthorized,
    /// 403: the client may not.
    Forbidden,
    /// Anything else: the auth service failed; the client gets a 500.
    Unexpected,
}

/// The verdict of the auth service's status.
pub(super) fn verdict(status: StatusCode) -> Verdict {
    match status.as_u16() {
        200..=299 => Verdict::Allow,
        401 => Verdict::Unauthorized,
        403 => Verdict::Forbidden,
        _ => Verdict::Unexpected,
    }
}

/// `signin` with `param=<original URL, percent-encoded>` appended to its query.
pub(super) fn signin_location(signin: &str, param: &str, original_url: &str) -> String {
    let sep = match signin.find('?') {
        None => "?",
        Some(_) if signin.ends_with(['?', '&']) => "",
        Some(_) => "&",
    };
    let mut encoded = Vec::with_capacity(original_url.len() * 3 / 2);
    encode_into(&mut encoded, original_url);
    let encoded = String::from_utf8(encoded).expect("percent-encoding is ASCII");
    format!("{signin}{sep}{param}={encoded}")
}

/// The answer to a client the auth service refused (`Unauthorized` or `Forbidden`): a
/// redirect to `signin` (its URL and parameter name) for a 401 when one is configured, else
/// the same status with Weir's short body; a 401 carries the service's `WWW-Authenticate`
/// challenges. The service's body is not passed on.
pub(super) fn refusal(
    verdict: Verdict,
    auth: &HeaderMap,
    signin: Option<&(String, String)>,
    original_url: &str,
) -> EarlyResponse {
    match (verdict, signin) {
        (Verdict::Unauthorized, Some((url, param))) => {
            let mut r = EarlyResponse::message(StatusCode::FOUND, "redirecting");
            if let Ok(v) = HeaderValue::from_str(&signin_location(url, param, original_url)) {
                r.headers.insert(header::LOCATION, v);
            }
            r
        }
        (Verdict::Unauthorized, None) => {
            let mut r = EarlyResponse::message(StatusCode::UNAUTHORIZED, "Unauthorized");
            for c in auth.get_all(header::WWW_AUTHENTICATE) {
                r.headers.append(header::WWW_AUTHENTICATE, c.clone());
            }
            r
        }
        _ => EarlyResponse::message(StatusCode::FORBIDDEN, "Forbidden"),
    }
}

/// After a 2xx: every header in `names` the client sent is removed (spelled with `_` too), and
/// the values the auth service gave for it are set. A listed header the service did not send
/// is then absent: a client can never supply it.
pub(super) fn set_response_headers(req: &mut HeaderMap, auth: &HeaderMap, names: &[HeaderName]) {
    if names.is_empty() {
        return;
    }
    let forged: Vec<HeaderName> = req
        .keys()
        .filter(|k| names.iter().any(|n| same_name(n.as_str(), k.as_str())))
        .cloned()
        .collect();
    for k in forged {
        req.remove(k);
    }
    for name in names {
        for v in auth.get_all(name) {
            req.append(name.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(uri: &str, headers: &[(&str, &str)]) -> RequestHead {
        let mut b = http::Request::builder().method("POST").uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn ip() -> IpAddr {
        "203.0.113.7".parse().unwrap()
    }

    fn all<'a>(h: &'a HeaderMap, name: &str) -> Vec<&'a str> {
        h.get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }

    #[test]
    fn the_original_request_is_described() {
        let req = head("/app/x?a=1&b=%20", &[("host", "shop.example:8080")]);
        let o = Original::of(&req, ip(), false);
        assert_eq!(o.url(), "http://shop.example:8080/app/x?a=1&b=%20");
        // HTTP/2: the URI carries scheme and authority.
        let req = head("https://shop.example/p", &[]);
        assert_eq!(
            Original::of(&req, ip(), false).url(),
            "https://shop.example/p"
        );
        // No host at all: the path alone.
        let req = head("/p?q", &[]);
        assert_eq!(Original::of(&req, ip(), false).url(), "/p?q");
    }

    #[test]
    fn subrequests_carry_the_client_headers_and_weirs_description() {
        let req = head(
            "/app/orders?id=7",
            &[
                ("host", "shop.example"),
                ("authorization", "Bearer good"),
                ("cookie", "a=1"),
                ("cookie", "b=2"),
                ("accept", "application/json"),
                ("content-type", "application/json"),
                ("content-length", "12"),
                ("transfer-encoding", "chunked"),
                ("expect", "100-continue"),
                ("connection", "x-hop"),
                ("x-hop", "1"),
                ("upgrade", "websocket"),
                ("te", "trailers"),
                // Forged descriptions, in both spellings.
                ("x-original-url", "http://evil/"),
                ("x_original_method", "DELETE"),
                ("x-forwarded-for", "6.6.6.6"),
                ("x_forwarded_host", "evil"),
                ("x-forwarded-prefix", "/evil"),
                ("x-real-ip", "6.6.6.6"),
                ("x-auth-request-redirect", "/evil"),
                ("x-user", "mallory"),
            ],
        );
        let o = Original::of(&req, ip(), false);
        let h = subrequest_headers(
            &req.headers,
            &HeaderValue::from_static("auth:9000"),
            &o,
            None,
            &[],
        );
        assert_eq!(all(&h, "host"), ["auth:9000"]);
        assert_eq!(all(&h, "authorization"), ["Bearer good"]);
        assert_eq!(all(&h, "cookie"), ["a=1; b=2"]);
        assert_eq!(all(&h, "accept"), ["application/json"]);
        assert_eq!(all(&h, "content-type"), ["application/json"]);
        // The auth service decides who the user is; a client-sent X-User is the service's
        // business (it goes along, as every end-to-end header does).
        assert_eq!(all(&h, "x-user"), ["mallory"]);
        for gone in [
            "content-length",
            "transfer-encoding",
            "expect",
            "connection",
            "x-hop",
            "upgrade",
            "te",
            "x_original_method",
            "x_forwarded_host",
            "x-forwarded-prefix",
        ] {
            assert!(!h.contains_key(gone), "{gone} forwarded");
        }
        assert_eq!(
            all(&h, "x-original-url"),
            ["http://shop.example/app/orders?id=7"]
        );
        assert_eq!(all(&h, "x-original-method"), ["POST"]);
        assert_eq!(all(&h, "x-forwarded-method"), ["POST"]);
        assert_eq!(all(&h, "x-forwarded-proto"), ["http"]);
        assert_eq!(all(&h, "x-forwarded-host"), ["shop.example"]);
        assert_eq!(all(&h, "x-forwarded-uri"), ["/app/orders?id=7"]);
        assert_eq!(all(&h, "x-forwarded-for"), ["203.0.113.7"]);
        assert_eq!(all(&h, "x-real-ip"), ["203.0.113.7"]);
        assert_eq!(all(&h, "x-auth-request-redirect"), ["/app/orders?id=7"]);
        // A configured redirect replaces it (and never the client's).
        let fixed = HeaderValue::from_static("https://app.example/");
        // Configured headers go over the client's and Weir's own.
        let set = [
            (
                HeaderName::from_static("x-user"),
                HeaderValue::from_static(""),
            ),
            (
                HeaderName::from_static("x-real-ip"),
                HeaderValue::from_static("set"),
            ),
            (
                HeaderName::from_static("x-auth-from"),
                HeaderValue::from_static("weir"),
            ),
        ];
        let h = subrequest_headers(&req.headers, &fixed, &o, None, &set);
        assert_eq!(all(&h, "x-user"), [""]);
        assert_eq!(all(&h, "x-real-ip"), ["set"]);
        assert_eq!(all(&h, "x-auth-from"), ["weir"]);
        assert_eq!(all(&h, "authorization"), ["Bearer good"]);
        let h = subrequest_headers(&req.headers, &fixed, &o, Some(&fixed), &[]);
        assert_eq!(all(&h, "x-auth-request-redirect"), ["https://app.example/"]);
    }

    #[test]
    fn cookies_go_with_what_nginx_adds_headers_to() {
        for s in [200, 204, 302, 304, 308] {
            assert!(cookies_go_with(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [202, 300, 400, 404, 500, 503] {
            assert!(!cookies_go_with(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }

    #[test]
    fn a_request_without_host_has_no_forwarded_host() {
        let req = head("/p", &[]);
        let o = Original::of(&req, "::1".parse().unwrap(), false);
        let h = subrequest_headers(&req.headers, &HeaderValue::from_static("a"), &o, None, &[]);
        assert!(!h.contains_key("x-forwarded-host"));
        assert_eq!(all(&h, "x-original-url"), ["/p"]);
        assert_eq!(all(&h, "x-forwarded-for"), ["::1"]);
    }

    #[test]
    fn statuses_decide() {
        for (s, v) in [
            (200, Verdict::Allow),
            (204, Verdict::Allow),
            (299, Verdict::Allow),
            (401, Verdict::Unauthorized),
            (403, Verdict::Forbidden),
            (101, Verdict::Unexpected),
            (302, Verdict::Unexpected),
            (400, Verdict::Unexpected),
            (404, Verdict::Unexpected),
            (407, Verdict::Unexpected),
            (500, Verdict::Unexpected),
            (503, Verdict::Unexpected),
        ] {
            assert_eq!(verdict(StatusCode::from_u16(s).unwrap()), v, "{s}");
        }
    }

    #[test]
    fn signin_locations_carry_the_original_url() {
        let url = "https://shop.example/app?a=1&b=2";
        let enc = "https%3A%2F%2Fshop.example%2Fapp%3Fa%3D1%26b%3D2";
        assert_eq!(
            signin_location("https://login.example/start", "rd", url),
            format!("https://login.example/start?rd={enc}")
        );
        assert_eq!(
            signin_location("https://login.example/start?client=weir", "rd", url),
            format!("https://login.example/start?client=weir&rd={enc}")
        );
        assert_eq!(
            signin_location("/oauth2/start?", "return_to", "/x y"),
            "/oauth2/start?return_to=%2Fx%20y"
        );
        assert_eq!(signin_location("/s?a=1&", "rd", "/"), "/s?a=1&rd=%2F");
    }

    #[test]
    fn refusals() {
        let mut auth = HeaderMap::new();
        auth.append(
            "www-authenticate",
            HeaderValue::from_static("Bearer realm=\"a\""),
        );
        auth.append(
            "www-authenticate",
            HeaderValue::from_static("Basic realm=\"b\""),
        );
        auth.append("x-other", HeaderValue::from_static("1"));
        let r = refusal(Verdict::Unauthorized, &auth, None, "/x");
        assert_eq!(r.status, 401);
        assert_eq!(
            all(&r.headers, "www-authenticate"),
            ["Bearer realm=\"a\"", "Basic realm=\"b\""]
        );
        assert!(!r.headers.contains_key("x-other"));
        assert_eq!(&r.body[..], br#"{"message":"Unauthorized"}"#);

        let signin = ("https://login.example/start".to_string(), "rd".to_string());
        let r = refusal(Verdict::Unauthorized, &auth, Some(&signin), "http://a/b");
        assert_eq!(r.status, 302);
        assert_eq!(
            all(&r.headers, "location"),
            ["https://login.example/start?rd=http%3A%2F%2Fa%2Fb"]
        );
        assert!(!r.headers.contains_key("www-authenticate"));

        // 403 ignores signin and challenges.
        let r = refusal(Verdict::Forbidden, &auth, Some(&signin), "/x");
        assert_eq!(r.status, 403);
        assert!(!r.headers.contains_key("location"));
        assert!(!r.headers.contains_key("www-authenticate"));
        assert_eq!(&r.body[..], br#"{"message":"Forbidden"}"#);
    }

    #[test]
    fn listed_headers_come_only_from_the_auth_service() {
        let names = [
            HeaderName::from_static("x-user"),
            HeaderName::from_static("x-groups"),
            HeaderName::from_static("x-email"),
        ];
        let mut req = HeaderMap::new();
        req.insert("x-user", HeaderValue::from_static("mallory"));
        req.insert("x_user", HeaderValue::from_static("mallory"));
        req.insert("x-email", HeaderValue::from_static("forged@example"));
        req.insert("x-kept", HeaderValue::from_static("1"));
        let mut auth = HeaderMap::new();
        auth.insert("x-user", HeaderValue::from_static("alice"));
        auth.append("x-groups", HeaderValue::from_static("admins"));
        auth.append("x-groups", HeaderValue::from_static("ops"));
        auth.insert("x-secret", HeaderValue::from_static("not listed"));
        set_response_headers(&mut req, &auth, &names);
        assert_eq!(all(&req, "x-user"), ["alice"]);
        assert!(!req.contains_key("x_user"));
        assert_eq!(all(&req, "x-groups"), ["admins", "ops"]);
        // Listed, not sent by the service: the client's is gone all the same.
        assert!(!req.contains_key("x-email"));
        assert!(!req.contains_key("x-secret"));
        assert_eq!(all(&req, "x-kept"), ["1"]);
    }
}
