//! `cors`: Cross-Origin Resource Sharing (Kong's schema: `origins`, `methods`, `headers`,
//! `exposed_headers`, `credentials`, `max_age`, `preflight_continue`, `private_network`).
//! Preflights are answered in access without calling the upstream; other responses get the
//! CORS headers in header_filter when the request's origin is allowed.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use regex::RegexSet;
use serde::Deserialize;

use super::{
    parse_config, EarlyResponse, Flow, Handled, Plugin, PluginError, RequestHead, ResponseHead,
    Simple,
};
use crate::pipeline::RequestCtx;

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(super) const FACTORY: Simple = Simple {
    name: "cors",
    priority: 2000,
    build,
};

/// The configuration (Kong's keys).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    origins: Option<Vec<String>>,
    #[serde(default)]
    methods: Option<Vec<String>>,
    #[serde(default)]
    headers: Option<Vec<String>>,
    #[serde(default)]
    exposed_headers: Option<Vec<String>>,
    #[serde(default)]
    credentials: bool,
    #[serde(default)]
    max_age: Option<u64>,
    #[serde(default)]
    preflight_continue: bool,
    #[serde(default)]
    private_network: bool,
}

/// The methods Kong's schema accepts, which are also the default.
const METHODS: [&str; 9] = [
    "GET", "HEAD", "PUT", "PATCH", "POST", "DELETE", "OPTIONS", "TRACE", "CONNECT",
];

const ACCESS_CONTROL_REQUEST_PRIVATE_NETWORK: HeaderName =
    HeaderName::from_static("access-control-request-private-network");
const ACCESS_CONTROL_ALLOW_PRIVATE_NETWORK: HeaderName =
    HeaderName::from_static("access-control-allow-private-network");
const STAR: HeaderValue = HeaderValue::from_static("*");
const TRUE: HeaderValue = HeaderValue::from_static("true");
const ORIGIN_VALUE: HeaderValue = HeaderValue::from_static("Origin");

/// Which origins are allowed.
enum Origins {
    /// Every origin (`*`, or no list at all, as in Kong).
    Any,
    /// Exact origins (normalised) and anchored regexes.
    Listed {
        exact: Vec<String>,
        patterns: Option<RegexSet>,
    },
}

/// An instance: every header value computed once.
struct Cors {
    origins: Origins,
    credentials: bool,
    /// `methods: ["*"]`: the preflight's requested method is allowed back.
    any_method: bool,
    /// Whether the CORS headers depend on the request's origin (then caches must key on it):
    /// any configuration but "every origin, without credentials".
    varies: bool,
    preflight_continue: bool,
    private_network: bool,
    /// `Access-Control-Allow-Headers` when configured (else the request's are echoed).
    allow_headers: Option<HeaderValue>,
    exposed_headers: Option<HeaderValue>,
    /// The headers every allowed preflight answer carries.
    preflight_base: HeaderMap,
    /// The answer to a preflight whose origin is not allowed: no CORS headers.
    preflight_refused: EarlyResponse,
}

/// Per request: a preflight, whose answer (ours or the upstream's) gets no headers added.
#[derive(Clone)]
struct Preflight;

/// Per request: the `Access-Control-Allow-Origin` value for an allowed origin.
#[derive(Clone)]
struct Allowed(HeaderValue);

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let origins = parse_origins(conf.origins.as_deref().unwrap_or_default())?;
    // `["*"]` (Weir's, for the Gateway API's CORS filter): any method, answered with the one
    // the preflight asks for (a literal `*` means nothing to a browser with credentials).
    let any_method = conf.methods.as_deref() == Some(&["*".to_string()][..]);
    let methods = match conf.methods.as_deref() {
        None | Some([]) => METHODS.join(","),
        Some(_) if any_method => String::new(),
        Some(list) => {
            for (i, m) in list.iter().enumerate() {
                if !METHODS.contains(&m.as_str()) {
                    return Err(format!(
                        "methods[{i}]: {m:?} is not one of {}",
                        METHODS.join(", ")
                    ));
                }
            }
            list.join(",")
        }
    };
    let allow_headers = header_list("headers", conf.headers.as_deref())?;
    let exposed_headers = header_list("exposed_headers", conf.exposed_headers.as_deref())?;

    let varies = !matches!(origins, Origins::Any) || conf.credentials;
    let mut preflight_base = HeaderMap::new();
    if !any_method {
        preflight_base.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_str(&methods).expect("methods are tokens"),
        );
    }
    if let Some(h) = &allow_headers {
        preflight_base.insert(ACCESS_CONTROL_ALLOW_HEADERS, h.clone());
    }
    // Browsers read it from the actual response only; the Gateway API's CORS filter (and
    // Envoy's) sends it on preflights too, and its conformance suite checks for it there.
    if let Some(h) = &exposed_headers {
        preflight_base.insert(ACCESS_CONTROL_EXPOSE_HEADERS, h.clone());
    }
    if let Some(age) = conf.max_age {
        preflight_base.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from(age));
    }
    if conf.credentials {
        preflight_base.insert(ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE);
    }
    let mut refused_headers = HeaderMap::new();
    if varies {
        preflight_base.insert(VARY, ORIGIN_VALUE);
        refused_headers.insert(VARY, ORIGIN_VALUE);
    }
    Ok(Arc::new(Cors {
        origins,
        credentials: conf.credentials,
        any_method,
        varies,
        preflight_continue: conf.preflight_continue,
        private_network: conf.private_network,
        allow_headers,
        exposed_headers,
        preflight_base,
        preflight_refused: EarlyResponse {
            status: StatusCode::OK,
            headers: refused_headers,
            body: Bytes::new(),
        },
    }))
}

/// `*` anywhere allows every origin. Like Kong, an entry made only of letters, digits and
/// `.:/-` is an exact origin; anything else is a regex, matched against the whole origin.
fn parse_origins(list: &[String]) -> Result<Origins, String> {
    if list.is_empty() || list.iter().any(|o| o == "*") {
        return Ok(Origins::Any);
    }
    let mut exact = Vec::new();
    let mut patterns = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let literal = entry
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'/' | b'-'));
        if literal {
            let origin = if entry == "null" {
                Cow::Borrowed(entry.as_str())
            } else {
                normalize_origin(entry).ok_or_else(|| {
                    format!(
                        "origins[{i}]: {entry:?} is not an origin (scheme://host[:port]), a regex or *"
                    )
                })?
            };
            exact.push(origin.into_owned());
        } else {
            let anchored = format!("^(?:{entry})$");
            if regex::Regex::new(&anchored).is_err() {
                // Reported against what the user wrote, not the anchored form.
                let why = match regex::Regex::new(entry) {
                    Err(e) => regex_problem(e),
                    Ok(_) => "it does not compile once anchored as ^(?:...)$".into(),
                };
                return Err(format!(
                    "origins[{i}]: {entry:?} is not a valid regex: {why}"
                ));
            }
            patterns.push(anchored);
        }
    }
    let patterns = if patterns.is_empty() {
        None
    } else {
        Some(RegexSet::new(&patterns).map_err(|e| format!("origins: {e}"))?)
    };
    Ok(Origins::Listed { exact, patterns })
}

/// A regex error on one line (the syntax errors draw a caret under the pattern): they end up in
/// Events and status conditions.
fn regex_problem(e: regex::Error) -> String {
    match e {
        regex::Error::Syntax(text) => {
            let last = text.lines().last().unwrap_or_default();
            last.strip_prefix("error: ").unwrap_or(last).to_string()
        }
        other => other.to_string(),
    }
}

/// A list of header names joined for a response header; `None` when empty or unset.
fn header_list(field: &str, list: Option<&[String]>) -> Result<Option<HeaderValue>, String> {
    let list = match list {
        None | Some([]) => return Ok(None),
        Some(l) => l,
    };
    for (i, name) in list.iter().enumerate() {
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("{field}[{i}]: {name:?} is not a header name"));
        }
    }
    Ok(Some(
        HeaderValue::from_str(&list.join(",")).expect("header names are valid values"),
    ))
}

/// `scheme://host[:port]` with scheme and host in lower case and the scheme's default port
/// dropped (borrowed when already so); `None` when it is not an origin of that shape.
fn normalize_origin(origin: &str) -> Option<Cow<'_, str>> {
    let (scheme, rest) = origin.split_once("://")?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok || rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    let (host, port) = if rest.starts_with('[') {
        let end = rest.find(']')?;
        match &rest[end + 1..] {
            "" => (rest, None),
            p => (&rest[..=end], Some(p.strip_prefix(':')?)),
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if host.is_empty() || (host.contains(':') && !host.starts_with('[')) {
        return None;
    }
    if let Some(p) = port {
        if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    let default_port = (scheme.eq_ignore_ascii_case("http") && port == Some("80"))
        || (scheme.eq_ignore_ascii_case("https") && port == Some("443"));
    let normal = !default_port
        && !scheme.bytes().any(|b| b.is_ascii_uppercase())
        && !host.bytes().any(|b| b.is_ascii_uppercase())
        && rest.len() + scheme.len() + 3 == origin.len();
    if normal {
        return Some(Cow::Borrowed(origin));
    }
    let mut out = format!(
        "{}://{}",
        scheme.to_ascii_lowercase(),
        host.to_ascii_lowercase()
    );
    if let (Some(p), false) = (port, default_port) {
        out.push(':');
        out.push_str(p);
    }
    Some(Cow::Owned(out))
}

impl Cors {
    /// The `Access-Control-Allow-Origin` for a request's `Origin`, if it is allowed.
    fn allow_origin(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        let Origins::Listed { exact, patterns } = &self.origins else {
            // `*` may not be combined with credentials: the origin itself is sent back.
            return Some(if self.credentials {
                origin.clone()
            } else {
                STAR
            });
        };
        let text = origin.to_str().ok()?;
        // Browsers send origins already normalised: the common case allocates nothing.
        let normal = normalize_origin(text).unwrap_or(Cow::Borrowed(text));
        let listed = exact.iter().any(|e| *e == normal)
            || patterns.as_ref().is_some_and(|p| p.is_match(&normal));
        listed.then(|| origin.clone())
    }

    /// The answer to a preflight.
    fn preflight(&self, req: &RequestHead, origin: &HeaderValue) -> EarlyResponse {
        let Some(allow) = self.allow_origin(origin) else {
            return self.preflight_refused.clone();
        };
        let mut headers = self.preflight_base.clone();
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
        if self.any_method {
            if let Some(asked) = req.headers.get(ACCESS_CONTROL_REQUEST_METHOD) {
                headers.insert(ACCESS_CONTROL_ALLOW_METHODS, asked.clone());
            }
        }
        if self.allow_headers.is_none() {
            if let Some(asked) = req.headers.get(ACCESS_CONTROL_REQUEST_HEADERS) {
                headers.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
            }
        }
        if self.private_network
            && req
                .headers
                .get(ACCESS_CONTROL_REQUEST_PRIVATE_NETWORK)
                .is_some_and(|v| v == "true")
        {
            headers.insert(ACCESS_CONTROL_ALLOW_PRIVATE_NETWORK, TRUE);
        }
        EarlyResponse {
            status: StatusCode::OK,
            headers,
            body: Bytes::new(),
        }
    }
}

/// Adds `Origin` to `Vary` unless the upstream's `Vary` already covers it.
fn add_vary_origin(headers: &mut HeaderMap) {
    let covered = headers.get_all(VARY).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .map(str::trim)
                .any(|t| t == "*" || t.eq_ignore_ascii_case("origin"))
        })
    });
    if !covered {
        headers.append(VARY, ORIGIN_VALUE);
    }
}

impl Plugin for Cors {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        let Some(origin) = req.headers.get(ORIGIN) else {
            return Flow::Continue.into();
        };
        if req.method == Method::OPTIONS && req.headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
        {
            // Its answer, ours or the upstream's, gets nothing more in header_filter (as in
            // Kong): with `preflight_continue` the upstream owns its preflights whole.
            ctx.slots.insert(Preflight);
            if self.preflight_continue {
                return Flow::Continue.into();
            }
            return Flow::Respond(self.preflight(req, origin)).into();
        }
        // `*` without credentials is the same for everyone: header_filter needs no slot.
        if self.varies {
            if let Some(allow) = self.allow_origin(origin) {
                ctx.slots.insert(Allowed(allow));
            }
        }
        Flow::Continue.into()
    }

    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        if ctx.slots.get::<Preflight>().is_some() {
            return Ok(());
        }
        if self.varies {
            add_vary_origin(&mut resp.headers);
        }
        let allow = if self.varies {
            match ctx.slots.get::<Allowed>() {
                Some(Allowed(v)) => v.clone(),
                None => return Ok(()),
            }
        } else {
            STAR
        };
        resp.headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
        if self.credentials {
            resp.headers.insert(ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE);
        }
        if let Some(exposed) = &self.exposed_headers {
            resp.headers
                .insert(ACCESS_CONTROL_EXPOSE_HEADERS, exposed.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::Step;
    use serde_json::json;

    fn cors(config: serde_json::Value) -> Arc<dyn Plugin> {
        build(&config).unwrap_or_else(|e| panic!("{config}: {e}"))
    }

    fn request(method: &str, headers: &[(&str, &str)]) -> RequestHead {
        let mut b = http::Request::builder().method(method).uri("/x");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    /// Runs access and, unless it answered, header_filter on an upstream 200 with
    /// `upstream_headers`; returns the response headers the client would see.
    fn run(
        p: &Arc<dyn Plugin>,
        method: &str,
        headers: &[(&str, &str)],
        upstream_headers: &[(&str, &str)],
    ) -> (bool, HeaderMap) {
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(Vec::new()));
        let mut req = request(method, headers);
        let (answered, mut resp) = match p.access(&mut ctx, &mut req) {
            Step::Ready(Ok(Flow::Respond(r))) => {
                let mut resp = http::Response::new(()).into_parts().0;
                resp.status = r.status;
                resp.headers = r.headers;
                (true, resp)
            }
            Step::Ready(Ok(Flow::Continue)) => {
                let mut b = http::Response::builder();
                for (k, v) in upstream_headers {
                    b = b.header(*k, *v);
                }
                (false, b.body(()).unwrap().into_parts().0)
            }
            _ => panic!("unexpected access result"),
        };
        p.header_filter(&mut ctx, &mut resp).unwrap();
        (answered, resp.headers)
    }

    fn get<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
        h.get(name).map(|v| v.to_str().unwrap())
    }

    #[test]
    fn configuration_errors_name_the_field() {
        assert!(build(&json!({})).is_ok());
        assert!(build(&json!({
            "origins": ["https://a.example", "https://.*\\.b\\.example", "null"],
            "methods": ["GET", "POST"],
            "headers": ["X-Token", "Content-Type"],
            "exposed_headers": ["X-Total"],
            "credentials": true,
            "max_age": 3600,
            "preflight_continue": false,
            "private_network": true,
        }))
        .is_ok());
        for (config, field) in [
            (
                json!({"origins": ["https://a.example", "https://(b"]}),
                "origins[1]:",
            ),
            (json!({"origins": ["a.example"]}), "origins[0]:"),
            (
                json!({"origins": ["https://a.example/path"]}),
                "origins[0]:",
            ),
            (
                json!({"origins": ["https://a.example:port"]}),
                "origins[0]:",
            ),
            (json!({"origins": "https://a.example"}), "origins:"),
            (json!({"methods": ["GET", "FETCH"]}), "methods[1]:"),
            (json!({"methods": ["get"]}), "methods[0]:"),
            (json!({"headers": ["ok", "not ok"]}), "headers[1]:"),
            (
                json!({"exposed_headers": ["x\r\ny"]}),
                "exposed_headers[0]:",
            ),
            (json!({"credentials": "yes"}), "credentials:"),
            (json!({"max_age": -1}), "max_age:"),
            (json!({"preflight_continue": 1}), "preflight_continue:"),
            (json!({"private_network": "true"}), "private_network:"),
        ] {
            let e = build(&config)
                .err()
                .unwrap_or_else(|| panic!("{config} accepted"));
            assert!(e.starts_with(field), "{config}: {e}");
        }
        let e = build(&json!({"origins": ["https://(b"]})).err().unwrap();
        assert_eq!(
            e,
            r#"origins[0]: "https://(b" is not a valid regex: unclosed group"#
        );
        let e = build(&json!({"origins": ["(?x)https://a # comment"]}))
            .err()
            .unwrap();
        assert!(e.ends_with("once anchored as ^(?:...)$"), "{e}");
        let e = build(&json!({"origin": ["*"]})).err().unwrap();
        assert!(e.contains("origin"), "{e}");
    }

    #[test]
    fn origins_normalise_like_browsers_send_them() {
        let n = |s| normalize_origin(s).map(Cow::into_owned);
        assert!(matches!(
            normalize_origin("https://a.example"),
            Some(Cow::Borrowed(_))
        ));
        assert_eq!(
            n("HTTPS://A.Example:443/"),
            Some("https://a.example".into())
        );
        assert_eq!(n("http://a.example:80"), Some("http://a.example".into()));
        assert_eq!(
            n("http://a.example:8080"),
            Some("http://a.example:8080".into())
        );
        assert_eq!(
            n("https://a.example:80"),
            Some("https://a.example:80".into())
        );
        assert_eq!(n("http://[::1]:3000"), Some("http://[::1]:3000".into()));
        assert_eq!(n("a.example"), None);
        assert_eq!(n("https://"), None);
        assert_eq!(n("https://a.example/x"), None);
        assert_eq!(n("https://u@a.example"), None);
        assert_eq!(n("https://a.example:"), None);
    }

    #[test]
    fn listed_origins_match_exactly_or_by_anchored_regex() {
        let p = build(&json!({"origins": ["https://a.example", "https://[a-z]+\\.b\\.example"]}))
            .unwrap();
        let cors = |o: &str| {
            let (_, h) = run(&p, "GET", &[("origin", o)], &[]);
            get(&h, "access-control-allow-origin").map(str::to_string)
        };
        assert_eq!(
            cors("https://a.example").as_deref(),
            Some("https://a.example")
        );
        assert_eq!(
            cors("https://A.EXAMPLE:443").as_deref(),
            Some("https://A.EXAMPLE:443"),
            "matched normalised, echoed as sent"
        );
        assert_eq!(
            cors("https://x.b.example").as_deref(),
            Some("https://x.b.example")
        );
        assert_eq!(cors("http://a.example"), None);
        assert_eq!(cors("https://a.example.evil"), None);
        assert_eq!(
            cors("https://x.b.example.evil"),
            None,
            "regexes are anchored"
        );
        assert_eq!(cors("https://evil.x.b.examplex"), None);
        assert_eq!(cors("null"), None);
    }

    #[test]
    fn normal_requests_get_the_headers_only_for_allowed_origins() {
        let p = cors(json!({
            "origins": ["https://a.example"],
            "credentials": true,
            "exposed_headers": ["X-Total", "X-Page"],
        }));
        let (answered, h) = run(
            &p,
            "POST",
            &[("origin", "https://a.example")],
            &[("vary", "Accept-Encoding")],
        );
        assert!(!answered);
        assert_eq!(
            get(&h, "access-control-allow-origin"),
            Some("https://a.example")
        );
        assert_eq!(get(&h, "access-control-allow-credentials"), Some("true"));
        assert_eq!(
            get(&h, "access-control-expose-headers"),
            Some("X-Total,X-Page")
        );
        let vary: Vec<_> = h.get_all("vary").iter().collect();
        assert_eq!(vary, ["Accept-Encoding", "Origin"]);

        for headers in [&[("origin", "https://b.example")][..], &[]] {
            let (answered, h) = run(&p, "GET", headers, &[]);
            assert!(!answered, "a refused origin still goes upstream");
            assert_eq!(get(&h, "vary"), Some("Origin"));
            assert_eq!(h.len(), 1, "no CORS headers: {h:?}");
        }
        // An upstream Vary that covers Origin is left alone.
        let (_, h) = run(&p, "GET", &[], &[("vary", "accept, origin")]);
        assert_eq!(h.get_all("vary").iter().count(), 1);
    }

    #[test]
    fn a_star_is_sent_only_without_credentials() {
        let any = cors(json!({}));
        let (_, h) = run(&any, "GET", &[("origin", "https://x.example")], &[]);
        assert_eq!(get(&h, "access-control-allow-origin"), Some("*"));
        assert_eq!(get(&h, "vary"), None, "the same answer for every origin");
        assert_eq!(get(&h, "access-control-allow-credentials"), None);

        let with_credentials = cors(json!({"origins": ["*"], "credentials": true}));
        let (_, h) = run(
            &with_credentials,
            "GET",
            &[("origin", "https://x.example")],
            &[],
        );
        assert_eq!(
            get(&h, "access-control-allow-origin"),
            Some("https://x.example")
        );
        assert_eq!(get(&h, "access-control-allow-credentials"), Some("true"));
        assert_eq!(get(&h, "vary"), Some("Origin"));
        let (_, h) = run(&with_credentials, "GET", &[], &[]);
        assert_eq!(get(&h, "access-control-allow-origin"), None);
    }

    #[test]
    fn preflights_are_answered_with_the_configured_headers() {
        let p = cors(json!({
            "origins": ["https://a.example"],
            "methods": ["GET", "POST"],
            "max_age": 600,
            "credentials": true,
            "private_network": true,
        }));
        let asked = [
            ("origin", "https://a.example"),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", "x-token,content-type"),
            ("access-control-request-private-network", "true"),
        ];
        let (answered, h) = run(&p, "OPTIONS", &asked, &[]);
        assert!(answered);
        assert_eq!(
            get(&h, "access-control-allow-origin"),
            Some("https://a.example")
        );
        assert_eq!(get(&h, "access-control-allow-methods"), Some("GET,POST"));
        assert_eq!(
            get(&h, "access-control-allow-headers"),
            Some("x-token,content-type"),
            "echoed when not configured"
        );
        assert_eq!(get(&h, "access-control-max-age"), Some("600"));
        assert_eq!(get(&h, "access-control-allow-credentials"), Some("true"));
        assert_eq!(
            get(&h, "access-control-allow-private-network"),
            Some("true")
        );
        assert_eq!(get(&h, "vary"), Some("Origin"));

        assert_eq!(get(&h, "access-control-expose-headers"), None);

        // Configured headers win over the request's; the defaults list every method.
        let q = cors(json!({"headers": ["X-Token"], "exposed_headers": ["X-Total"]}));
        let (_, h) = run(&q, "OPTIONS", &asked, &[]);
        assert_eq!(get(&h, "access-control-allow-headers"), Some("X-Token"));
        assert_eq!(get(&h, "access-control-expose-headers"), Some("X-Total"));
        assert_eq!(
            get(&h, "access-control-allow-methods"),
            Some("GET,HEAD,PUT,PATCH,POST,DELETE,OPTIONS,TRACE,CONNECT")
        );
        assert_eq!(get(&h, "access-control-allow-origin"), Some("*"));
        assert_eq!(get(&h, "access-control-allow-private-network"), None);

        // A refused origin: answered, but with nothing a browser would accept.
        let refused = [
            ("origin", "https://evil.example"),
            ("access-control-request-method", "POST"),
        ];
        let (answered, h) = run(&p, "OPTIONS", &refused, &[]);
        assert!(answered);
        assert_eq!(get(&h, "vary"), Some("Origin"));
        assert_eq!(h.len(), 1, "{h:?}");
    }

    #[test]
    fn only_real_preflights_are_answered_and_preflight_continue_passes_them_on() {
        let p = cors(json!({"origins": ["https://a.example"]}));
        // OPTIONS without Access-Control-Request-Method is an ordinary request.
        let (answered, h) = run(&p, "OPTIONS", &[("origin", "https://a.example")], &[]);
        assert!(!answered);
        assert_eq!(
            get(&h, "access-control-allow-origin"),
            Some("https://a.example")
        );
        let (answered, _) = run(
            &p,
            "OPTIONS",
            &[("access-control-request-method", "GET")],
            &[],
        );
        assert!(!answered, "no Origin: not a CORS preflight");

        let cont = cors(json!({"origins": ["https://a.example"], "preflight_continue": true}));
        let preflight = [
            ("origin", "https://a.example"),
            ("access-control-request-method", "GET"),
        ];
        let (answered, h) = run(&cont, "OPTIONS", &preflight, &[("allow", "GET")]);
        assert!(!answered, "passed on to the upstream");
        assert_eq!(get(&h, "access-control-allow-origin"), None);
        assert_eq!(get(&h, "allow"), Some("GET"));
    }

    #[test]
    fn any_method_answers_the_method_the_preflight_asks_for() {
        let p =
            cors(json!({"origins": ["https://a.example"], "methods": ["*"], "credentials": true}));
        let (answered, h) = run(
            &p,
            "OPTIONS",
            &[
                ("origin", "https://a.example"),
                ("access-control-request-method", "PATCH"),
            ],
            &[],
        );
        assert!(answered);
        assert_eq!(h[ACCESS_CONTROL_ALLOW_METHODS], "PATCH");
        assert_eq!(h[ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
        // `*` only alone: in a list it is an unknown method.
        let e = build(&json!({"methods": ["GET", "*"]})).err().unwrap();
        assert!(e.starts_with("methods[1]:"), "{e}");
    }
}
