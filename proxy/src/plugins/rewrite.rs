//! `rewrite`: sets the upstream path outright (`uri`, the seed's RewritePlugin), rewrites
//! it with a regular expression (`regex` and `replace`, with capture groups `$1`…`$9`; every
//! match is replaced), or replaces its leading elements (`replace_prefix` for
//! `matched_prefix`: the Gateway API's `ReplacePrefixMatch` on a backendRef). The query string
//! is kept unless `keep_query: false`.
//!
//! The expression applies to the path as it stands when the plugin runs: after
//! `context-path` (which runs first), so when both run the rewrite wins.

use std::sync::Arc;

use regex::Regex;
use serde::Deserialize;

use super::{parse_config, upstream_target, Flow, Handled, Plugin, RequestHead, Simple};
use crate::pipeline::RequestCtx;

pub(super) const FACTORY: Simple = Simple {
    name: "rewrite",
    priority: 770,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default)]
    replace: Option<String>,
    #[serde(default)]
    replace_prefix: Option<String>,
    #[serde(default)]
    matched_prefix: Option<String>,
    #[serde(default = "yes")]
    keep_query: bool,
}

fn yes() -> bool {
    true
}

/// A piece of a `replace` template.
#[derive(Debug, PartialEq)]
enum Piece {
    Text(String),
    Group(usize),
}

enum Rule {
    Set(String),
    Regex {
        re: Regex,
        replace: Vec<Piece>,
    },
    /// The leading elements `matched` replaced by `with`, on element boundaries.
    Prefix {
        matched: String,
        with: String,
    },
}

struct Rewrite {
    rule: Rule,
    keep_query: bool,
}

/// Splits `$1`…`$9` (and `$$` for a dollar) out of a template; other `$` are refused, so a
/// typo does not silently become text.
fn template(s: &str, groups: usize) -> Result<Vec<Piece>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '$' {
            text.push(c);
            continue;
        }
        match chars.next() {
            Some('$') => text.push('$'),
            Some(d @ '0'..='9') => {
                let n = d as usize - '0' as usize;
                if n >= groups {
                    return Err(format!(
                        "replace: ${n} refers to a group the regex does not have ({} groups)",
                        groups - 1
                    ));
                }
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Group(n));
            }
            _ => {
                return Err(format!(
                    "replace: {s:?}: `$` must be followed by a digit or `$`"
                ))
            }
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    if conf.matched_prefix.is_some() && conf.replace_prefix.is_none() {
        return Err("matched_prefix: only applies with replace_prefix".into());
    }
    let rule = match (conf.uri, conf.regex, conf.replace, conf.replace_prefix) {
        (Some(uri), None, None, None) => {
            if !uri.starts_with('/') {
                return Err(format!("uri: {uri:?} does not start with /"));
            }
            if uri.contains('#') || uri.parse::<http::uri::PathAndQuery>().is_err() {
                return Err(format!("uri: {uri:?} is not a URI path"));
            }
            Rule::Set(uri)
        }
        (None, Some(re), Some(replace), None) => {
            let compiled = Regex::new(&re).map_err(|e| format!("regex: {e}"))?;
            let pieces = template(&replace, compiled.captures_len())?;
            Rule::Regex {
                re: compiled,
                replace: pieces,
            }
        }
        (None, None, None, Some(with)) => {
            let matched = conf.matched_prefix.unwrap_or_else(|| "/".into());
            prefix_path("replace_prefix", &with)?;
            prefix_path("matched_prefix", &matched)?;
            Rule::Prefix { matched, with }
        }
        (None, Some(_), None, None) => return Err("replace: required with regex".into()),
        (None, None, Some(_), None) => return Err("regex: required with replace".into()),
        (Some(_), ..) => {
            return Err("uri: set one of uri, regex and replace, or replace_prefix".into())
        }
        (None, None, None, None) => {
            return Err("uri: set uri, regex and replace, or replace_prefix".into())
        }
        (None, ..) => {
            return Err("replace_prefix: cannot be combined with regex and replace".into())
        }
    };
    Ok(Arc::new(Rewrite {
        rule,
        keep_query: conf.keep_query,
    }))
}

/// Checks a `replace_prefix` or `matched_prefix` value: a path, without query or fragment.
fn prefix_path(key: &str, p: &str) -> Result<(), String> {
    if !p.starts_with('/')
        || p.contains(['?', '#'])
        || p.parse::<http::uri::PathAndQuery>().is_err()
    {
        return Err(format!(
            "{key}: {p:?} is not a path starting with / (no query, fragment or spaces)"
        ));
    }
    Ok(())
}

impl Rewrite {
    /// The new path for `path`.
    fn path(&self, path: &str) -> String {
        match &self.rule {
            Rule::Set(uri) => uri.clone(),
            Rule::Prefix { matched, with } => super::redirect::replace_prefix(path, matched, with),
            Rule::Regex { re, replace } => {
                let mut out = String::with_capacity(path.len() + 16);
                let mut last = 0;
                for caps in re.captures_iter(path) {
                    let m = caps.get(0).expect("group 0 always matches");
                    out.push_str(&path[last..m.start()]);
                    for piece in replace {
                        match piece {
                            Piece::Text(t) => out.push_str(t),
                            Piece::Group(n) => {
                                out.push_str(caps.get(*n).map_or("", |g| g.as_str()))
                            }
                        }
                    }
                    last = m.end();
                }
                out.push_str(&path[last..]);
                if !out.starts_with('/') {
                    out.insert(0, '/');
                }
                out
            }
        }
    }
}

impl Plugin for Rewrite {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        let (path, query) = upstream_target(ctx, req);
        // An expression that does not match leaves the request as it is (strip-path included).
        if let Rule::Regex { re, .. } = &self.rule {
            if !re.is_match(path) {
                return Flow::Continue.into();
            }
        }
        let built = self.path(path);
        // A capture can hold `..` inside a segment (`/u/...json` with `^/u/(.+)\.json$`).
        let mut uri = match super::clean_upstream_path(&built) {
            Ok(p) => p.to_owned(),
            Err(e) => return Err(e).into(),
        };
        if let Some(q) = query.filter(|_| self.keep_query) {
            // A `uri` with its own query keeps it, the request's joins it.
            uri.push(if uri.contains('?') { '&' } else { '?' });
            uri.push_str(q);
        }
        if uri.parse::<http::uri::PathAndQuery>().is_err() {
            return Err(super::PluginError(format!(
                "rewrite produced an invalid path {uri:?}"
            )))
            .into();
        }
        ctx.upstream_uri = Some(uri);
        Flow::Continue.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(config: serde_json::Value, p: &str) -> String {
        let conf: Conf = parse_config(&config).unwrap();
        let rule = match (conf.uri, conf.regex, conf.replace, conf.replace_prefix) {
            (Some(u), ..) => Rule::Set(u),
            (_, Some(re), Some(r), _) => {
                let re = Regex::new(&re).unwrap();
                let replace = template(&r, re.captures_len()).unwrap();
                Rule::Regex { re, replace }
            }
            (.., Some(with)) => Rule::Prefix {
                matched: conf.matched_prefix.unwrap_or_else(|| "/".into()),
                with,
            },
            _ => unreachable!(),
        };
        Rewrite {
            rule,
            keep_query: true,
        }
        .path(p)
    }

    #[test]
    fn sets_or_rewrites_the_path() {
        assert_eq!(path(json!({"uri": "/fixed"}), "/a/b"), "/fixed");
        assert_eq!(
            path(
                json!({"regex": "^/api/(\\w+)/(.*)$", "replace": "/$2/$1"}),
                "/api/v1/users/7"
            ),
            "/users/7/v1"
        );
        // Every match is replaced; the unmatched rest stays.
        assert_eq!(
            path(json!({"regex": "-", "replace": "_"}), "/a-b-c"),
            "/a_b_c"
        );
        assert_eq!(
            path(json!({"regex": "^/old", "replace": "/new"}), "/old/x"),
            "/new/x"
        );
        assert_eq!(
            path(json!({"regex": "^/old", "replace": "/new"}), "/other"),
            "/other"
        );
        // A result without a leading slash gets one.
        assert_eq!(
            path(json!({"regex": "^/(.*)", "replace": "$1"}), "/x"),
            "/x"
        );
        assert_eq!(
            path(json!({"regex": "^/p", "replace": "/$$1"}), "/p"),
            "/$1"
        );
        let prefix = |with: &str, matched: &str, p: &str| {
            path(
                json!({"replace_prefix": with, "matched_prefix": matched}),
                p,
            )
        };
        assert_eq!(prefix("/new", "/old", "/old/x"), "/new/x");
        assert_eq!(prefix("/new", "/old", "/old"), "/new");
        assert_eq!(prefix("/", "/old", "/old/x"), "/x");
        assert_eq!(prefix("/", "/old/", "/old"), "/");
        assert_eq!(prefix("/new", "/", "/x"), "/new/x");
    }

    #[test]
    fn templates() {
        assert_eq!(
            template("/a/$1$2b", 3).unwrap(),
            vec![
                Piece::Text("/a/".into()),
                Piece::Group(1),
                Piece::Group(2),
                Piece::Text("b".into())
            ]
        );
        assert!(template("/$3", 3).unwrap_err().starts_with("replace:"));
        assert!(template("/${name}", 3).unwrap_err().starts_with("replace:"));
    }

    #[test]
    fn config_errors_name_the_field() {
        for (config, field) in [
            (json!({}), "uri:"),
            (json!({"uri": "x"}), "uri:"),
            (json!({"uri": "/a b"}), "uri:"),
            (json!({"uri": "/a", "regex": "x", "replace": "y"}), "uri:"),
            (json!({"regex": "("}), "replace:"),
            (json!({"regex": "(", "replace": "/"}), "regex:"),
            (json!({"replace": "/"}), "regex:"),
            (json!({"regex": "(a)", "replace": "/$2"}), "replace:"),
            (json!({"uri": "/a", "keep_query": "no"}), "keep_query:"),
            (json!({"matched_prefix": "/a"}), "matched_prefix:"),
            (json!({"replace_prefix": "b"}), "replace_prefix:"),
            (json!({"replace_prefix": "/b?x"}), "replace_prefix:"),
            (
                json!({"replace_prefix": "/b", "matched_prefix": "a"}),
                "matched_prefix:",
            ),
            (json!({"replace_prefix": "/b", "uri": "/a"}), "uri:"),
            (
                json!({"replace_prefix": "/b", "regex": "a", "replace": "c"}),
                "replace_prefix:",
            ),
        ] {
            let e = build(&config).err().expect("refused");
            assert!(e.starts_with(field), "{config}: {e}");
        }
    }
}
