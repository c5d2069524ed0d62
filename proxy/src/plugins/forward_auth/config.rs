//! `forward-auth`'s configuration: parsed and checked once, when the routing table is compiled;
//! every error starts with the key it is about.

use std::time::Duration;

use http::uri::{PathAndQuery, Scheme};
use http::{HeaderName, HeaderValue, Method, Uri};
use serde::Deserialize;

use crate::plugins::parse_config;

/// The configuration as written; unknown keys are errors.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    response_headers: Vec<String>,
    #[serde(default)]
    signin: Option<String>,
    #[serde(default = "default_redirect_param")]
    signin_redirect_param: String,
    #[serde(default = "default_timeout")]
    timeout: u64,
    #[serde(default = "default_tls_verify")]
    tls_verify: bool,
    #[serde(default)]
    request_redirect: Option<String>,
    #[serde(default)]
    set_cookies: SetCookies,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
}

/// When the auth service's `Set-Cookie` fields of an allowing answer reach the client.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum SetCookies {
    /// Never.
    #[default]
    Never,
    /// On the client's answer when its status is a success or a redirect (nginx's
    /// `add_header` list: 200, 201, 204, 206, 301, 302, 303, 304, 307, 308).
    OnSuccess,
    /// On every answer.
    Always,
}

fn default_redirect_param() -> String {
    "rd".into()
}

fn default_timeout() -> u64 {
    5000
}

fn default_tls_verify() -> bool {
    true
}

/// Longest `timeout`, in milliseconds.
const MAX_TIMEOUT_MS: u64 = 60_000;

/// Request headers an auth service may not set on the upstream request: framing, routing and
/// hop-by-hop fields, which belong to the proxy.
const RESERVED: [&str; 11] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "http2-settings",
];

/// A checked configuration.
#[derive(Debug)]
pub(super) struct Settings {
    /// `host:port` of the auth service (the port explicit), the pool's target.
    pub target: String,
    /// Whether the auth service is reached over TLS.
    pub https: bool,
    /// The `Host` of the subrequest: the URL's authority as written.
    pub host: HeaderValue,
    /// The path and query of the subrequest, as configured.
    pub path_and_query: PathAndQuery,
    /// `scheme://authority/path` of the URL, without its query (which may hold a token): what
    /// log lines show.
    pub shown_url: String,
    /// The subrequest's method; `None`: the original request's.
    pub method: Option<Method>,
    /// Headers copied from a 2xx answer to the upstream request.
    pub response_headers: Vec<HeaderName>,
    /// Where a 401 sends the client, and the name of the parameter that carries the original
    /// URL.
    pub signin: Option<(String, String)>,
    /// Bound on the whole exchange with the auth service.
    pub timeout: Duration,
    /// Verify the auth service's certificate (https only).
    pub tls_verify: bool,
    /// `X-Auth-Request-Redirect` of the subrequest; `None`: the original path and query.
    pub request_redirect: Option<HeaderValue>,
    /// When the auth service's cookies reach the client.
    pub set_cookies: SetCookies,
    /// Headers set on every authorization request, over the client's and Weir's own.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Parses and checks a configuration.
pub(super) fn parse(config: &serde_json::Value) -> Result<Settings, String> {
    let conf: Conf = parse_config(config)?;
    let url = parse_url(&conf.url)?;
    let method = conf.method.as_deref().map(parse_method).transpose()?;
    let response_headers = conf
        .response_headers
        .iter()
        .enumerate()
        .map(|(i, name)| parse_response_header(i, name))
        .collect::<Result<Vec<_>, _>>()?;
    let param = conf.signin_redirect_param;
    if param.is_empty()
        || !param
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
    {
        return Err(format!(
            "signin_redirect_param: {param:?} must be a non-empty query parameter name of \
             letters, digits and -._~"
        ));
    }
    let signin = conf
        .signin
        .map(|s| check_signin(&s).map(|()| (s, param)))
        .transpose()?;
    if !(1..=MAX_TIMEOUT_MS).contains(&conf.timeout) {
        return Err(format!(
            "timeout: {} must be 1..={MAX_TIMEOUT_MS} milliseconds",
            conf.timeout
        ));
    }
    let request_redirect = conf
        .request_redirect
        .map(|r| match HeaderValue::from_str(&r) {
            Ok(v) if !r.is_empty() => Ok(v),
            _ => Err(format!("request_redirect: {r:?} is not a header value")),
        })
        .transpose()?;
    let headers = conf
        .headers
        .iter()
        .map(|(name, value)| parse_set_header(name, value))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Settings {
        headers,
        target: url.target,
        https: url.https,
        host: url.host,
        path_and_query: url.path_and_query,
        shown_url: url.shown,
        method,
        response_headers,
        signin,
        timeout: Duration::from_millis(conf.timeout),
        tls_verify: conf.tls_verify,
        request_redirect,
        set_cookies: conf.set_cookies,
    })
}

/// The parts of `url` the plugin uses.
struct Url {
    target: String,
    https: bool,
    host: HeaderValue,
    path_and_query: PathAndQuery,
    shown: String,
}

fn parse_url(text: &str) -> Result<Url, String> {
    let bad = |why: &str| format!("url: {text:?} {why}");
    if text.contains('#') {
        return Err(bad("may not have a fragment"));
    }
    let uri: Uri = text
        .parse()
        .map_err(|_| bad("is not an absolute http(s) URL"))?;
    let https = match uri.scheme() {
        Some(s) if *s == Scheme::HTTPS => true,
        Some(s) if *s == Scheme::HTTP => false,
        _ => return Err(bad("is not an absolute http(s) URL")),
    };
    let authority = uri
        .authority()
        .ok_or_else(|| bad("is not an absolute http(s) URL"))?;
    if authority.as_str().contains('@') {
        return Err(bad("may not hold credentials (user info)"));
    }
    let host = authority.host();
    if host.is_empty() || host == "[]" {
        return Err(bad("has no host"));
    }
    // `:` with no port, or a port of 0, names nothing to connect to.
    let after_host = match authority.as_str().rfind(']') {
        Some(i) => &authority.as_str()[i + 1..],
        None => authority.as_str(),
    };
    if after_host.contains(':') && authority.port_u16().is_none_or(|p| p == 0) {
        return Err(bad("has an invalid port"));
    }
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path_and_query = uri
        .path_and_query()
        .filter(|p| !p.as_str().is_empty())
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let path_and_query = if path_and_query.as_str().starts_with('/') {
        path_and_query
    } else {
        // `http://h?x` has an empty path: it is `/`.
        format!("/{}", path_and_query.as_str())
            .parse()
            .map_err(|_| bad("has an invalid path"))?
    };
    let scheme = if https { "https" } else { "http" };
    Ok(Url {
        target: format!("{}:{port}", host.to_ascii_lowercase()),
        https,
        host: HeaderValue::from_str(authority.as_str()).map_err(|_| bad("has an invalid host"))?,
        shown: format!("{scheme}://{authority}{}", path_and_query.path()),
        path_and_query,
    })
}

fn parse_method(text: &str) -> Result<Method, String> {
    let method = Method::from_bytes(text.as_bytes())
        .map_err(|_| format!("method: {text:?} is not an HTTP method (a token)"))?;
    if method == Method::CONNECT {
        return Err("method: CONNECT cannot carry an authorization subrequest".into());
    }
    Ok(method)
}

fn parse_response_header(i: usize, name: &str) -> Result<HeaderName, String> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("response_headers[{i}]: {name:?} is not a header name"))?;
    if RESERVED.contains(&header.as_str()) {
        return Err(format!(
            "response_headers[{i}]: {name:?} belongs to the proxy and cannot be copied to the \
             upstream request"
        ));
    }
    Ok(header)
}

/// An entry of `headers`: not a header the proxy owns (framing, routing, hop-by-hop).
fn parse_set_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let header = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("headers: {name:?} is not a header name"))?;
    if RESERVED.contains(&header.as_str()) {
        return Err(format!(
            "headers: {name:?} belongs to the proxy and cannot be set on the authorization \
             request"
        ));
    }
    let value = HeaderValue::from_str(value)
        .map_err(|_| format!("headers.{name}: {value:?} is not a header value"))?;
    Ok((header, value))
}

/// `signin`: an absolute http(s) URL or a path on the client's host, that a query parameter
/// can be appended to.
fn check_signin(text: &str) -> Result<(), String> {
    let bad = |why: &str| format!("signin: {text:?} {why}");
    if text.contains('#') {
        return Err(bad("may not have a fragment"));
    }
    if HeaderValue::from_str(text).is_err() {
        return Err(bad("is not a valid Location"));
    }
    if text.starts_with('/') {
        // `//host/…` would be another host, written as a path.
        if text.starts_with("//") || text.parse::<PathAndQuery>().is_err() {
            return Err(bad(
                "is neither an absolute http(s) URL nor a path starting with /",
            ));
        }
        return Ok(());
    }
    match text.parse::<Uri>() {
        Ok(u)
            if (u.scheme() == Some(&Scheme::HTTP) || u.scheme() == Some(&Scheme::HTTPS))
                && u.host().is_some_and(|h| !h.is_empty()) =>
        {
            Ok(())
        }
        _ => Err(bad(
            "is neither an absolute http(s) URL nor a path starting with /",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: serde_json::Value) -> String {
        parse(&v).expect_err("refused")
    }

    #[test]
    fn a_minimal_configuration_takes_the_defaults() {
        let s = parse(&json!({"url": "http://auth.local/check?app=1"})).unwrap();
        assert_eq!(s.target, "auth.local:80");
        assert!(!s.https);
        assert_eq!(s.host, "auth.local");
        assert_eq!(s.path_and_query, "/check?app=1");
        assert_eq!(s.shown_url, "http://auth.local/check");
        assert_eq!(s.method, None);
        assert!(s.response_headers.is_empty());
        assert!(s.signin.is_none());
        assert_eq!(s.timeout, Duration::from_secs(5));
        assert!(s.tls_verify);
    }

    #[test]
    fn urls_keep_ports_paths_and_queries() {
        let s = parse(&json!({"url": "https://Auth.Example:8443"})).unwrap();
        assert_eq!(s.target, "auth.example:8443");
        assert!(s.https);
        assert_eq!(s.host, "Auth.Example:8443");
        assert_eq!(s.path_and_query, "/");
        let s = parse(&json!({"url": "https://auth.example"})).unwrap();
        assert_eq!(s.target, "auth.example:443");
        let s = parse(&json!({"url": "http://[::1]:9000/v?x=%20"})).unwrap();
        assert_eq!(s.target, "[::1]:9000");
        assert_eq!(s.host, "[::1]:9000");
        assert_eq!(s.path_and_query, "/v?x=%20");
        let s = parse(&json!({"url": "http://10.0.0.1?x=1"})).unwrap();
        assert_eq!(s.path_and_query, "/?x=1");
    }

    #[test]
    fn bad_urls_are_refused_naming_the_key() {
        for bad in [
            "/auth",
            "auth.local/check",
            "ftp://auth.local/",
            "http://",
            "http://user:pw@auth.local/",
            "http://auth.local/#frag",
            "http://auth.local:0/",
            "http://auth.local:/",
            "http://auth.local:99999/",
            "http://auth local/",
            "",
        ] {
            let e = err(json!({ "url": bad }));
            assert!(e.starts_with("url: "), "{bad}: {e}");
        }
        // The password is not quoted back... by the URL parser at least: credentials are
        // refused whole.
        let e = err(json!({"url": "http://user:pw@auth.local/"}));
        assert!(e.contains("credentials"), "{e}");
        let e = err(json!({}));
        assert!(e.contains("url"), "{e}");
    }

    #[test]
    fn every_other_key_is_checked() {
        let base = |k: &str, v: serde_json::Value| {
            let mut c = json!({"url": "http://a/"});
            c[k] = v;
            c
        };
        assert_eq!(
            parse(&base("method", json!("GET"))).unwrap().method,
            Some(Method::GET)
        );
        for (k, v) in [
            ("method", json!("GE T")),
            ("method", json!("")),
            ("method", json!("CONNECT")),
            ("method", json!(1)),
            ("response_headers", json!(["x-user", "bad header"])),
            ("response_headers", json!(["Content-Length"])),
            ("response_headers", json!(["host"])),
            ("response_headers", json!("x-user")),
            ("signin", json!("login.example/start")),
            ("signin", json!("//evil.example/start")),
            ("signin", json!("https://login.example/#x")),
            ("signin", json!("javascript:alert(1)")),
            ("signin_redirect_param", json!("")),
            ("signin_redirect_param", json!("r d")),
            ("signin_redirect_param", json!("a&b")),
            ("timeout", json!(0)),
            ("timeout", json!(60001)),
            ("timeout", json!(-1)),
            ("tls_verify", json!("no")),
            ("headers", json!({"bad header": "x"})),
            ("headers", json!({"Content-Length": "1"})),
            ("headers", json!({"x-a": "line\nbreak"})),
            ("headers", json!(["x-a: 1"])),
        ] {
            let e = err(base(k, v.clone()));
            assert!(e.starts_with(k), "{k} = {v}: {e}");
        }
        let e = err(base("response_headers", json!(["x-user", "bad header"])));
        assert!(e.starts_with("response_headers[1]:"), "{e}");
        let h = parse(&base("headers", json!({"X-Using-Weir": "true", "x-b": ""})));
        let h = h.unwrap().headers;
        assert_eq!(h.len(), 2);
        assert_eq!(
            (h[0].0.as_str(), h[0].1.to_str().unwrap()),
            ("x-using-weir", "true")
        );
        let e = err(base("sign_in", json!("/x")));
        assert!(e.contains("unknown field"), "{e}");

        let s = parse(&json!({
            "url": "https://a/",
            "response_headers": ["X-User", "x-groups"],
            "signin": "https://login.example/start?client=weir",
            "signin_redirect_param": "return_to",
            "timeout": 60000,
            "tls_verify": false,
        }))
        .unwrap();
        assert_eq!(s.response_headers, ["x-user", "x-groups"]);
        assert_eq!(
            s.signin,
            Some((
                "https://login.example/start?client=weir".into(),
                "return_to".into()
            ))
        );
        assert_eq!(s.timeout, Duration::from_secs(60));
        assert!(!s.tls_verify);
        assert!(parse(&base("signin", json!("/oauth2/start"))).is_ok());
    }
}
