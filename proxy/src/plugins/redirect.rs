//! `redirect`: answer every matching request with a redirect, without calling the upstream.
//!
//! Two forms. With `location` (Kong's schema: `status_code`, `location`, `keep_incoming_path`;
//! plus `keep_incoming_query`) the client is sent to a configured location, into which the
//! incoming path and query can be carried. Without it, the location is the request's own URL
//! with parts replaced (`scheme`, `hostname`, `port`, `path` or `replace_prefix`): the Gateway
//! API's `RequestRedirect` filter, usable from any route.

use std::sync::Arc;

use http::{header, HeaderValue, StatusCode};
use serde::Deserialize;

use super::{parse_config, EarlyResponse, Flow, Handled, Plugin, PluginError, RequestHead, Simple};
use crate::pipeline::RequestCtx;

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(super) const FACTORY: Simple = Simple {
    name: "redirect",
    priority: 779,
    build,
};

/// The configuration (Kong's keys, `keep_incoming_query`, and the request-relative keys).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default = "default_status")]
    status_code: u16,
    location: Option<String>,
    #[serde(default)]
    keep_incoming_path: bool,
    #[serde(default)]
    keep_incoming_query: bool,
    scheme: Option<Scheme>,
    hostname: Option<String>,
    port: Option<u16>,
    path: Option<String>,
    replace_prefix: Option<String>,
    matched_prefix: Option<String>,
}

/// A redirect scheme.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

fn default_status() -> u16 {
    301
}

/// The configured location, split where incoming parts may replace or join its own.
#[derive(Debug, PartialEq)]
struct Location {
    /// `scheme://authority` of an absolute URL; empty for a path.
    origin: String,
    /// The path, possibly empty for an absolute URL (`https://example.com`).
    path: String,
    /// The query, without `?`.
    query: Option<String>,
    /// The fragment, with its `#`, or empty.
    fragment: String,
}

/// Where an instance sends the client.
enum Target {
    /// A configured location, with the request's path and query carried in when asked.
    Fixed {
        location: Location,
        keep_path: bool,
        keep_query: bool,
    },
    /// The request's own URL with the configured parts replaced.
    Relative(Relative),
}

/// The parts of the request's URL a request-relative redirect replaces (`None`: kept).
#[derive(Debug, Default)]
struct Relative {
    scheme: Option<Scheme>,
    hostname: Option<String>,
    port: Option<u16>,
    path: PathEdit,
}

/// How a request-relative redirect treats the path.
#[derive(Debug, Default)]
enum PathEdit {
    #[default]
    Keep,
    /// Replace the whole path.
    Full(String),
    /// Replace the leading `matched` path elements with `with`.
    Prefix { matched: String, with: String },
}

/// An instance.
struct Redirect {
    target: Target,
    /// The answer, with `Location` set when it never changes.
    answer: EarlyResponse,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let status = match conf.status_code {
        301 | 302 | 303 | 307 | 308 => StatusCode::from_u16(conf.status_code).expect("valid"),
        n => {
            return Err(format!(
                "status_code: {n} is not one of 301, 302, 303, 307, 308"
            ))
        }
    };
    let mut answer = EarlyResponse::message(status, "redirecting");
    let relative_keys = [
        ("scheme", conf.scheme.is_some()),
        ("hostname", conf.hostname.is_some()),
        ("port", conf.port.is_some()),
        ("path", conf.path.is_some()),
        ("replace_prefix", conf.replace_prefix.is_some()),
        ("matched_prefix", conf.matched_prefix.is_some()),
    ];
    let relative_key = relative_keys.iter().find(|(_, set)| *set).map(|(k, _)| *k);
    let target = match conf.location {
        Some(text) => {
            if let Some(k) = relative_key {
                return Err(format!(
                    "{k}: cannot be combined with `location` (a fixed location already names it)"
                ));
            }
            let location = parse_location(&text).map_err(|e| format!("location: {e}"))?;
            if !conf.keep_incoming_path && !conf.keep_incoming_query {
                let value = HeaderValue::from_str(&text)
                    .map_err(|_| format!("location: {text:?} is not a valid header value"))?;
                answer.headers.insert(header::LOCATION, value);
            }
            Target::Fixed {
                location,
                keep_path: conf.keep_incoming_path,
                keep_query: conf.keep_incoming_query,
            }
        }
        None => {
            if relative_key.is_none() {
                return Err(
                    "location: required unless one of scheme, hostname, port, path, \
                            replace_prefix is set"
                        .into(),
                );
            }
            for (k, set) in [
                ("keep_incoming_path", conf.keep_incoming_path),
                ("keep_incoming_query", conf.keep_incoming_query),
            ] {
                if set {
                    return Err(format!(
                        "{k}: only applies with `location` (without it the path and query \
                         are always the request's)"
                    ));
                }
            }
            Target::Relative(relative(
                conf.scheme,
                conf.hostname,
                conf.port,
                conf.path,
                conf.replace_prefix,
                conf.matched_prefix,
            )?)
        }
    };
    Ok(Arc::new(Redirect { target, answer }))
}

/// Checks the request-relative keys.
fn relative(
    scheme: Option<Scheme>,
    hostname: Option<String>,
    port: Option<u16>,
    path: Option<String>,
    replace_prefix: Option<String>,
    matched_prefix: Option<String>,
) -> Result<Relative, String> {
    if let Some(h) = &hostname {
        if !valid_hostname(h) {
            return Err(format!(
                "hostname: {h:?} is not a host name (letters, digits, `-` and `.`)"
            ));
        }
    }
    if port == Some(0) {
        return Err("port: 0 is not a port".into());
    }
    let check_path = |key: &str, p: &str| -> Result<(), String> {
        if !p.starts_with('/') || p.starts_with("//") {
            return Err(format!("{key}: {p:?} must start with a single /"));
        }
        if p.contains(['?', '#']) || p.parse::<http::uri::PathAndQuery>().is_err() {
            return Err(format!(
                "{key}: {p:?} is not a path (no query, fragment, spaces or control characters)"
            ));
        }
        Ok(())
    };
    let path = match (path, replace_prefix, matched_prefix) {
        (Some(_), Some(_), _) => {
            return Err("replace_prefix: cannot be combined with `path`".into());
        }
        (Some(p), None, None) => {
            check_path("path", &p)?;
            PathEdit::Full(p)
        }
        (Some(_), None, Some(_)) => {
            return Err("matched_prefix: only applies with `replace_prefix`".into());
        }
        (None, Some(with), matched) => {
            check_path("replace_prefix", &with)?;
            let matched = matched.unwrap_or_else(|| "/".into());
            check_path("matched_prefix", &matched)?;
            PathEdit::Prefix { matched, with }
        }
        (None, None, Some(_)) => {
            return Err("matched_prefix: only applies with `replace_prefix`".into());
        }
        (None, None, None) => PathEdit::Keep,
    };
    Ok(Relative {
        scheme,
        hostname,
        port,
        path,
    })
}

/// Whether `h` is a DNS name or IPv4 address fit for a URL's host.
fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// `path` with its leading elements `matched` replaced by `with`, on element boundaries:
/// `/old` → `/new` turns `/old/x` into `/new/x`, and `/` → `/new` turns `/x` into `/new/x`.
/// (Also the `rewrite` plugin's `replace_prefix`.)
pub(super) fn replace_prefix(path: &str, matched: &str, with: &str) -> String {
    let matched = matched.trim_end_matches('/');
    let rest = match path.strip_prefix(matched) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        // The route matched on this prefix, so only a differently cased or encoded path
        // lands here; keep it whole rather than cut it mid-element.
        _ => path,
    };
    let with = with.trim_end_matches('/');
    match (with.is_empty(), rest.is_empty()) {
        (true, true) => "/".into(),
        (true, false) => rest.into(),
        (false, _) => format!("{with}{rest}"),
    }
}

/// Splits and checks a `location`: an absolute URL (`scheme://authority[/path][?query]`) or a
/// path starting with one `/`, either with an optional `#fragment`.
fn parse_location(text: &str) -> Result<Location, String> {
    // A CR or LF would split the Location header into a second, attacker-shaped header.
    if let Some(c) = text.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "{text:?} contains {c:?}; control characters and spaces are not allowed"
        ));
    }
    let (rest, fragment) = match text.split_once('#') {
        Some((r, f)) => (r, format!("#{f}")),
        None => (text, String::new()),
    };
    if rest.parse::<http::Uri>().is_err() {
        return Err(format!("{text:?} is not a valid URL or path"));
    }
    let (head, query) = match rest.split_once('?') {
        Some((h, q)) => (h, Some(q.to_string())),
        None => (rest, None),
    };
    let not_absolute = || {
        format!(
            "{text:?} is neither an absolute URL (scheme://host/...) nor a path starting with /"
        )
    };
    let (origin, path) = if head.starts_with('/') {
        // `//host/x` would be read by browsers as another host, not as a path.
        if head.starts_with("//") {
            return Err(not_absolute());
        }
        (String::new(), head.to_string())
    } else {
        let (scheme, after) = head.split_once("://").ok_or_else(not_absolute)?;
        let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        let (authority, path) = match after.find('/') {
            Some(i) => after.split_at(i),
            None => (after, ""),
        };
        if !scheme_ok || authority.is_empty() {
            return Err(not_absolute());
        }
        (format!("{scheme}://{authority}"), path.to_string())
    };
    Ok(Location {
        origin,
        path,
        query,
        fragment,
    })
}

impl Location {
    /// The location for a request with this path and query.
    fn render(&self, path: Option<&str>, query: Option<&str>) -> String {
        let cleaned;
        let path = match path {
            // The request's path: a browser reads `//evil.example/x` (or `/\evil.example`)
            // in a Location as another host, so it starts with exactly one `/`.
            Some(p) => {
                let rest = p.trim_start_matches(['/', '\\']);
                if p.len() - rest.len() == 1 && p.starts_with('/') {
                    p
                } else {
                    cleaned = format!("/{rest}");
                    &cleaned
                }
            }
            None => &self.path,
        };
        let query = query.filter(|q| !q.is_empty());
        let mut out = String::with_capacity(
            self.origin.len()
                + path.len()
                + self.query.as_ref().map_or(0, |q| q.len() + 1)
                + query.map_or(0, |q| q.len() + 1)
                + self.fragment.len()
                + 1,
        );
        out.push_str(&self.origin);
        out.push_str(path);
        let mut queries = self.query.as_deref().into_iter().chain(query);
        if let Some(first) = queries.next() {
            if path.is_empty() {
                out.push('/');
            }
            out.push('?');
            out.push_str(first);
            for q in queries {
                out.push('&');
                out.push_str(q);
            }
        }
        out.push_str(&self.fragment);
        out
    }
}

impl Relative {
    /// The location for a request; `None` when the request's own host is unusable in a URL.
    fn render(&self, client_tls: bool, req: &RequestHead) -> Option<String> {
        let incoming = if client_tls {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let scheme = self.scheme.unwrap_or(incoming);
        let raw_host = match req.uri.authority() {
            Some(a) => a.as_str(),
            None => req
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or(""),
        };
        let request_host = crate::router::strip_port(raw_host);
        let host = match &self.hostname {
            Some(h) => h.as_str(),
            None if valid_hostname(request_host) => request_host,
            // `[::1]`: brackets are kept as they came.
            None if request_host.contains(':')
                && request_host.parse::<std::net::Ipv6Addr>().is_ok() =>
            {
                request_host
            }
            None => return None,
        };
        // The port: as configured; else, with a new scheme, that scheme's own; else the port
        // the client reached (named in its Host), which is the listener's.
        let port = match (self.port, self.scheme) {
            (Some(p), _) => Some(p),
            (None, Some(_)) => None,
            (None, None) => raw_host
                .rsplit_once(':')
                .filter(|(h, _)| !h.is_empty() && (!h.contains(':') || h.ends_with(']')))
                .and_then(|(_, p)| p.parse::<u16>().ok()),
        }
        .filter(|&p| p != scheme.default_port());
        let path = req.uri.path();
        let path = match &self.path {
            PathEdit::Keep => path.to_string(),
            PathEdit::Full(p) => p.clone(),
            PathEdit::Prefix { matched, with } => replace_prefix(path, matched, with),
        };
        let mut out = format!("{}://", scheme.as_str());
        if host.contains(':') {
            out.push('[');
            out.push_str(host);
            out.push(']');
        } else {
            out.push_str(host);
        }
        if let Some(p) = port {
            out.push(':');
            out.push_str(&p.to_string());
        }
        // A path starting `//` would read as another host to a browser.
        let trimmed = path.trim_start_matches(['/', '\\']);
        out.push('/');
        out.push_str(trimmed);
        if let Some(q) = req.uri.query().filter(|q| !q.is_empty()) {
            out.push('?');
            out.push_str(q);
        }
        Some(out)
    }
}

impl Redirect {
    fn answer(&self, client_tls: bool, req: &RequestHead) -> Result<EarlyResponse, PluginError> {
        let mut answer = self.answer.clone();
        let location = match &self.target {
            Target::Fixed {
                keep_path: false,
                keep_query: false,
                ..
            } => return Ok(answer),
            Target::Fixed {
                location,
                keep_path,
                keep_query,
            } => location.render(
                keep_path.then(|| req.uri.path()),
                if *keep_query { req.uri.query() } else { None },
            ),
            Target::Relative(r) => match r.render(client_tls, req) {
                Some(l) => l,
                None => {
                    return Ok(EarlyResponse::message(
                        StatusCode::BAD_REQUEST,
                        "the request's Host is not a host name",
                    ))
                }
            },
        };
        let value = HeaderValue::from_str(&location)
            .map_err(|_| PluginError(format!("redirect: invalid location {location:?}")))?;
        answer.headers.insert(header::LOCATION, value);
        Ok(answer)
    }
}

impl Plugin for Redirect {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        self.answer(ctx.client_tls, req).map(Flow::Respond).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn location_of(config: serde_json::Value, uri: &str) -> (u16, String) {
        answer_for(config, uri, None, false)
    }

    /// The status and `Location` for a request to `uri` with this `Host`, over TLS or not.
    fn answer_for(
        config: serde_json::Value,
        uri: &str,
        host: Option<&str>,
        tls: bool,
    ) -> (u16, String) {
        let p = build(&config).unwrap();
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(Vec::new()));
        ctx.client_tls = tls;
        let mut req = http::Request::get(uri);
        if let Some(h) = host {
            req = req.header(header::HOST, h);
        }
        let mut req = req.body(()).unwrap().into_parts().0;
        let crate::plugins::Step::Ready(Ok(Flow::Respond(r))) = p.access(&mut ctx, &mut req) else {
            panic!("no redirect")
        };
        let location = r.headers[header::LOCATION].to_str().unwrap().to_string();
        (r.status.as_u16(), location)
    }

    #[test]
    fn configuration_errors_name_the_field() {
        assert!(build(&json!({"location": "https://example.com"})).is_ok());
        assert!(build(&json!({"location": "/moved", "status_code": 308})).is_ok());
        for (config, field) in [
            (json!({}), "location: required"),
            (
                json!({"location": "https://x", "hostname": "y"}),
                "hostname: cannot be combined",
            ),
            (json!({"hostname": "a/b"}), "hostname:"),
            (
                json!({"hostname": "a", "keep_incoming_path": true}),
                "keep_incoming_path:",
            ),
            (json!({"scheme": "ftp"}), "scheme:"),
            (json!({"port": 0}), "port:"),
            (json!({"port": 70000}), "port:"),
            (json!({"path": "x"}), "path:"),
            (json!({"path": "//evil/x"}), "path:"),
            (json!({"path": "/a?b"}), "path:"),
            (
                json!({"path": "/a", "replace_prefix": "/b"}),
                "replace_prefix:",
            ),
            (json!({"matched_prefix": "/b"}), "matched_prefix:"),
            (json!({"replace_prefix": "/b\r\nX: y"}), "replace_prefix:"),
            (
                json!({"location": "https://x", "status_code": 200}),
                "status_code:",
            ),
            (
                json!({"location": "https://x", "status_code": 300}),
                "status_code:",
            ),
            (
                json!({"location": "https://x", "status_code": "301"}),
                "status_code:",
            ),
            (
                json!({"location": "https://x/\r\nSet-Cookie: a=b"}),
                "location:",
            ),
            (json!({"location": "https://x/a\nb"}), "location:"),
            (json!({"location": "https://x/a b"}), "location:"),
            (json!({"location": "example.com/path"}), "location:"),
            (json!({"location": "//evil.example/x"}), "location:"),
            (json!({"location": "https://"}), "location:"),
            (json!({"location": "1http://x"}), "location:"),
            (json!({"location": ""}), "location:"),
            (
                json!({"location": "https://x", "keep_path": true}),
                "keep_path:",
            ),
        ] {
            let e = build(&config).err().unwrap();
            assert!(e.starts_with(field), "{config}: {e}");
        }
    }

    #[test]
    fn locations_split_into_their_parts() {
        assert_eq!(
            parse_location("https://a.example:8443/x/y?p=1#top").unwrap(),
            Location {
                origin: "https://a.example:8443".into(),
                path: "/x/y".into(),
                query: Some("p=1".into()),
                fragment: "#top".into(),
            }
        );
        assert_eq!(
            parse_location("/new").unwrap(),
            Location {
                origin: String::new(),
                path: "/new".into(),
                query: None,
                fragment: String::new(),
            }
        );
        let bare = parse_location("https://a.example").unwrap();
        assert_eq!(
            (bare.origin.as_str(), bare.path.as_str()),
            ("https://a.example", "")
        );
    }

    #[test]
    fn the_location_is_used_as_configured_by_default() {
        assert_eq!(
            location_of(json!({"location": "https://new.example/x?p=1"}), "/old?q=2"),
            (301, "https://new.example/x?p=1".into())
        );
        assert_eq!(
            location_of(json!({"location": "/x", "status_code": 307}), "/old"),
            (307, "/x".into())
        );
    }

    #[test]
    fn an_incoming_path_never_names_another_host() {
        for path in [
            "//evil.example/x",
            "/\\evil.example/x",
            "///\\/evil.example/x",
        ] {
            let (_, loc) = location_of(json!({"location": "/", "keep_incoming_path": true}), path);
            assert_eq!(loc, "/evil.example/x", "{path}");
        }
    }

    #[test]
    fn incoming_path_and_query_are_carried_when_asked() {
        let loc = "https://new.example/base?p=1#f";
        let cases = [
            (false, true, "https://new.example/base?p=1&q=2#f"),
            (true, false, "https://new.example/demo/a?p=1#f"),
            (true, true, "https://new.example/demo/a?p=1&q=2#f"),
        ];
        for (keep_path, keep_query, want) in cases {
            let config = json!({
                "location": loc,
                "keep_incoming_path": keep_path,
                "keep_incoming_query": keep_query,
            });
            assert_eq!(location_of(config, "/demo/a?q=2").1, want);
        }
        // No query of its own: the incoming one alone; none at all: no `?`.
        let bare = json!({"location": "https://new.example", "keep_incoming_query": true});
        assert_eq!(
            location_of(bare.clone(), "/x?q=2").1,
            "https://new.example/?q=2"
        );
        assert_eq!(location_of(bare.clone(), "/x").1, "https://new.example");
        assert_eq!(location_of(bare, "/x?").1, "https://new.example");
        let path = json!({"location": "https://new.example", "keep_incoming_path": true});
        assert_eq!(location_of(path, "/demo?q=1").1, "https://new.example/demo");
    }

    #[test]
    fn relative_redirects_replace_only_the_configured_parts() {
        let cases = [
            // (config, host, tls, location)
            (
                json!({"scheme": "https"}),
                "a.example",
                false,
                "https://a.example/p/q?x=1",
            ),
            (
                json!({"scheme": "http"}),
                "a.example:8443",
                true,
                "http://a.example/p/q?x=1",
            ),
            (
                json!({"hostname": "b.example"}),
                "a.example",
                false,
                "http://b.example/p/q?x=1",
            ),
            (
                json!({"hostname": "b.example"}),
                "a.example",
                true,
                "https://b.example/p/q?x=1",
            ),
            // No new scheme: the port the client reached is kept, unless the scheme's own.
            (
                json!({"hostname": "b.example"}),
                "a.example:8080",
                false,
                "http://b.example:8080/p/q?x=1",
            ),
            (
                json!({"hostname": "b.example"}),
                "a.example:80",
                false,
                "http://b.example/p/q?x=1",
            ),
            (
                json!({"port": 8083}),
                "a.example:80",
                false,
                "http://a.example:8083/p/q?x=1",
            ),
            (
                json!({"port": 443, "scheme": "https"}),
                "a.example",
                false,
                "https://a.example/p/q?x=1",
            ),
            (
                json!({"port": 80, "scheme": "https"}),
                "a.example",
                false,
                "https://a.example:80/p/q?x=1",
            ),
            (
                json!({"path": "/full"}),
                "a.example",
                false,
                "http://a.example/full?x=1",
            ),
            (
                json!({"replace_prefix": "/new", "matched_prefix": "/p"}),
                "a.example",
                false,
                "http://a.example/new/q?x=1",
            ),
            (
                json!({"replace_prefix": "/", "matched_prefix": "/p"}),
                "a.example",
                false,
                "http://a.example/q?x=1",
            ),
            (
                json!({"replace_prefix": "/new/", "matched_prefix": "/"}),
                "a.example",
                false,
                "http://a.example/new/p/q?x=1",
            ),
            (
                json!({"scheme": "https"}),
                "[::1]:8080",
                false,
                "https://[::1]/p/q?x=1",
            ),
            (
                json!({"port": 9000}),
                "[::1]:8080",
                false,
                "http://[::1]:9000/p/q?x=1",
            ),
        ];
        for (config, host, tls, want) in cases {
            let got = answer_for(config.clone(), "/p/q?x=1", Some(host), tls);
            assert_eq!(got, (301, want.to_string()), "{config} {host} tls={tls}");
        }
    }

    #[test]
    fn prefixes_are_replaced_on_element_boundaries() {
        assert_eq!(replace_prefix("/old", "/old", "/new"), "/new");
        assert_eq!(replace_prefix("/old/", "/old", "/new"), "/new/");
        assert_eq!(replace_prefix("/old/x", "/old/", "/new"), "/new/x");
        assert_eq!(replace_prefix("/old/x", "/old", "/"), "/x");
        assert_eq!(replace_prefix("/old", "/old", "/"), "/");
        assert_eq!(replace_prefix("/x", "/", "/new"), "/new/x");
        // Not an element boundary: the path is kept whole.
        assert_eq!(replace_prefix("/older", "/old", "/new"), "/new/older");
    }

    #[test]
    fn a_host_unfit_for_a_url_is_refused_not_echoed() {
        for host in ["evil.example/x@", "a b", ""] {
            let (status, _) = {
                let p = build(&json!({"scheme": "https"})).unwrap();
                let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(Vec::new()));
                let mut req = http::Request::get("/x").body(()).unwrap().into_parts().0;
                if let Ok(v) = HeaderValue::from_str(host) {
                    req.headers.insert(header::HOST, v);
                }
                let crate::plugins::Step::Ready(Ok(Flow::Respond(r))) =
                    p.access(&mut ctx, &mut req)
                else {
                    panic!("no answer")
                };
                assert!(r.headers.get(header::LOCATION).is_none(), "{host:?}");
                (r.status.as_u16(), ())
            };
            assert_eq!(status, 400, "{host:?}");
        }
        // A path with leading slashes never turns into another host.
        let (_, loc) = answer_for(
            json!({"scheme": "https"}),
            "//evil.example/x",
            Some("a.example"),
            false,
        );
        assert_eq!(loc, "https://a.example/evil.example/x");
    }
}
