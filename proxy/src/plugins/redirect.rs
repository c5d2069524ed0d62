//! `redirect`: answer every matching request with a redirect to a configured location, without
//! calling the upstream (Kong's schema: `status_code`, `location`, `keep_incoming_path`; plus
//! `keep_incoming_query`). The incoming path and query can be carried into the location.

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

/// The configuration (Kong's keys, and `keep_incoming_query`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default = "default_status")]
    status_code: u16,
    location: String,
    #[serde(default)]
    keep_incoming_path: bool,
    #[serde(default)]
    keep_incoming_query: bool,
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

/// An instance.
struct Redirect {
    location: Location,
    keep_path: bool,
    keep_query: bool,
    /// The answer, with `Location` set when it never changes (neither `keep_*` on).
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
    let location = parse_location(&conf.location).map_err(|e| format!("location: {e}"))?;
    let mut answer = EarlyResponse::message(status, "redirecting");
    if !conf.keep_incoming_path && !conf.keep_incoming_query {
        let value = HeaderValue::from_str(&conf.location)
            .map_err(|_| format!("location: {:?} is not a valid header value", conf.location))?;
        answer.headers.insert(header::LOCATION, value);
    }
    Ok(Arc::new(Redirect {
        location,
        keep_path: conf.keep_incoming_path,
        keep_query: conf.keep_incoming_query,
        answer,
    }))
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

impl Redirect {
    fn answer(&self, req: &RequestHead) -> Result<EarlyResponse, PluginError> {
        let mut answer = self.answer.clone();
        if self.keep_path || self.keep_query {
            let location = self.location.render(
                self.keep_path.then(|| req.uri.path()),
                if self.keep_query {
                    req.uri.query()
                } else {
                    None
                },
            );
            let value = HeaderValue::from_str(&location)
                .map_err(|_| PluginError(format!("redirect: invalid location {location:?}")))?;
            answer.headers.insert(header::LOCATION, value);
        }
        Ok(answer)
    }
}

impl Plugin for Redirect {
    fn access<'a>(&'a self, _ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        self.answer(req).map(Flow::Respond).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn location_of(config: serde_json::Value, uri: &str) -> (u16, String) {
        let p = build(&config).unwrap();
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(Vec::new()));
        let mut req = http::Request::get(uri).body(()).unwrap().into_parts().0;
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
            (json!({}), "missing field `location`"),
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
}
