//! `context-path`: serves an application mounted under a prefix (`context_path`) from an
//! upstream that does not know it, the seed's ContextPathMapping done by path element:
//! `/api/x` → `/x`, `/api` → `/`, `/apix` is not under `/api`, and a later repeat of the prefix
//! (`/api/api/x` → `/api/x`) stays. `add_prefix` goes in front of the result. A request outside
//! the prefix gets 404.
//!
//! The result becomes the upstream path (in place of `strip_path` and the service path); a
//! `rewrite` plugin, which runs after this one, works on it and wins.

use std::sync::Arc;

use http::StatusCode;
use serde::Deserialize;

use super::{
    parse_config, upstream_target, EarlyResponse, Flow, Handled, Plugin, RequestHead, Simple,
};
use crate::pipeline::RequestCtx;

pub(super) const FACTORY: Simple = Simple {
    name: "context-path",
    priority: 775,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    context_path: String,
    #[serde(default)]
    add_prefix: Option<String>,
}

struct ContextPath {
    /// Without a trailing slash.
    prefix: String,
    /// Without a trailing slash; empty for none.
    add: String,
    not_under: EarlyResponse,
}

/// Checks a configured path: absolute, no query, no dot segments, no characters a URI path
/// cannot carry.
fn check_path(field: &str, p: &str) -> Result<String, String> {
    if !p.starts_with('/') {
        return Err(format!("{field}: {p:?} does not start with /"));
    }
    if p.contains(['?', '#']) || p.parse::<http::uri::PathAndQuery>().is_err() {
        return Err(format!("{field}: {p:?} is not a URI path"));
    }
    if p.split('/').any(|s| s == "." || s == "..") {
        return Err(format!("{field}: {p:?} has a dot segment"));
    }
    Ok(p.trim_end_matches('/').to_string())
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let prefix = check_path("context_path", &conf.context_path)?;
    if prefix.is_empty() {
        return Err("context_path: \"/\" strips nothing; give a prefix such as /api".into());
    }
    let add = match &conf.add_prefix {
        Some(p) => check_path("add_prefix", p)?,
        None => String::new(),
    };
    let not_under = EarlyResponse::message(
        StatusCode::NOT_FOUND,
        &format!("the request path is not under the context path {prefix}"),
    );
    Ok(Arc::new(ContextPath {
        prefix,
        add,
        not_under,
    }))
}

impl ContextPath {
    /// The path with the prefix stripped and `add_prefix` put in front, or `None` when the
    /// path is not under the prefix.
    fn map(&self, path: &str) -> Option<String> {
        let rest = path.strip_prefix(&self.prefix)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        let mut out = String::with_capacity(self.add.len() + rest.len() + 1);
        out.push_str(&self.add);
        out.push_str(rest);
        if out.is_empty() {
            out.push('/');
        }
        Some(out)
    }
}

impl Plugin for ContextPath {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        let (path, query) = upstream_target(ctx, req);
        let Some(mapped) = self.map(path) else {
            return Flow::Respond(self.not_under.clone()).into();
        };
        // `/api//evil/x` (kept as is with merge_slashes off) must not become `//evil/x`.
        let mut uri = match super::clean_upstream_path(&mapped) {
            Ok(p) => p.to_owned(),
            Err(e) => return Err(e).into(),
        };
        if let Some(q) = query {
            uri.push('?');
            uri.push_str(q);
        }
        ctx.upstream_uri = Some(uri);
        Flow::Continue.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin(config: serde_json::Value) -> ContextPath {
        let conf: Conf = parse_config(&config).unwrap();
        ContextPath {
            prefix: check_path("context_path", &conf.context_path).unwrap(),
            add: conf
                .add_prefix
                .map(|p| check_path("add_prefix", &p).unwrap())
                .unwrap_or_default(),
            not_under: EarlyResponse::message(StatusCode::NOT_FOUND, "x"),
        }
    }

    #[test]
    fn strips_by_path_element() {
        let p = plugin(json!({"context_path": "/api"}));
        assert_eq!(p.map("/api/x").as_deref(), Some("/x"));
        assert_eq!(p.map("/api").as_deref(), Some("/"));
        assert_eq!(p.map("/api/").as_deref(), Some("/"));
        assert_eq!(p.map("/api/api/x").as_deref(), Some("/api/x"));
        assert_eq!(p.map("/apix"), None);
        assert_eq!(p.map("/other/api/x"), None);
        assert_eq!(p.map("/"), None);
        // The seed's example.
        let p = plugin(json!({"context_path": "/soul/http/"}));
        assert_eq!(p.map("/soul/http/order").as_deref(), Some("/order"));
    }

    #[test]
    fn adds_a_prefix() {
        let p = plugin(json!({"context_path": "/api", "add_prefix": "/v2/"}));
        assert_eq!(p.map("/api/x/y").as_deref(), Some("/v2/x/y"));
        assert_eq!(p.map("/api").as_deref(), Some("/v2"));
        assert_eq!(p.map("/api/").as_deref(), Some("/v2/"));
    }

    #[test]
    fn config_errors_name_the_field() {
        for (config, field) in [
            (json!({}), "context_path"),
            (json!({"context_path": "api"}), "context_path:"),
            (json!({"context_path": "/"}), "context_path:"),
            (json!({"context_path": "/a/../b"}), "context_path:"),
            (json!({"context_path": "/a?x=1"}), "context_path:"),
            (json!({"context_path": "/a b"}), "context_path:"),
            (
                json!({"context_path": "/a", "add_prefix": "v1"}),
                "add_prefix:",
            ),
            (json!({"context_path": "/a", "strip": true}), "strip"),
        ] {
            let e = build(&config).err().expect("refused");
            assert!(e.contains(field), "{config}: {e}");
        }
    }
}
