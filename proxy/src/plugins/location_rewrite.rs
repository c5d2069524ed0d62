//! `location-rewrite`: edits the start of the URL in the upstream's `Location` and `Refresh`
//! headers, as nginx's `proxy_redirect <from> <to>` does (ingress-nginx's
//! `proxy-redirect-from` and `proxy-redirect-to`): an application that redirects to its own
//! internal address or path, behind a route that renames the host or strips a prefix.
//!
//! Config: `rules`, a list of `{from, to}`; the first rule whose `from` starts the URL
//! (case-sensitive) replaces that part with `to`.

use std::sync::Arc;

use http::header::{HeaderName, LOCATION, REFRESH};
use http::HeaderValue;
use serde::Deserialize;

use super::cookie_rewrite::Rule;
use super::{parse_config, Plugin, PluginError, ResponseHead, Simple};
use crate::pipeline::RequestCtx;

pub(super) const FACTORY: Simple = Simple {
    name: "location-rewrite",
    // Beside response-transformer (800) and cookie-rewrite (805).
    priority: 806,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    rules: Vec<Rule>,
}

struct LocationRewrite {
    rules: Vec<Rule>,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    if conf.rules.is_empty() {
        return Err("rules: give at least one rule".into());
    }
    for (i, r) in conf.rules.iter().enumerate() {
        for (which, v) in [("from", &r.from), ("to", &r.to)] {
            if v.is_empty() || !v.bytes().all(|b| (0x21..0x7f).contains(&b)) {
                return Err(format!(
                    "rules[{i}].{which}: {v:?} must be a URL or path of visible ASCII characters"
                ));
            }
        }
    }
    Ok(Arc::new(LocationRewrite { rules: conf.rules }))
}

impl LocationRewrite {
    /// `url` with the first matching rule applied, or `None`.
    fn rewrite(&self, url: &str) -> Option<String> {
        let r = self.rules.iter().find(|r| url.starts_with(&r.from))?;
        Some(format!("{}{}", r.to, &url[r.from.len()..]))
    }

    /// A `Refresh` value (`5; url=/next`): the URL after `url=` is rewritten.
    fn refresh(&self, value: &str) -> Option<String> {
        let lower = value.to_ascii_lowercase();
        let at = lower.find("url=")? + "url=".len();
        let url = value[at..].trim_matches(|c| c == '"' || c == '\'');
        let quote = &value[at..at + (value.len() - at - url.len()) / 2];
        Some(format!(
            "{}{quote}{}{quote}",
            &value[..at],
            self.rewrite(url)?
        ))
    }

    fn edit(&self, resp: &mut ResponseHead, name: HeaderName, refresh: bool) {
        let Some(v) = resp.headers.get(&name).and_then(|v| v.to_str().ok()) else {
            return;
        };
        let edited = if refresh {
            self.refresh(v)
        } else {
            self.rewrite(v)
        };
        if let Some(v) = edited.and_then(|s| HeaderValue::from_str(&s).ok()) {
            resp.headers.insert(name, v);
        }
    }
}

impl Plugin for LocationRewrite {
    fn header_filter(
        &self,
        _ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        self.edit(resp, LOCATION, false);
        self.edit(resp, REFRESH, true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_prefix_is_replaced() {
        let p = LocationRewrite {
            rules: vec![
                Rule {
                    from: "http://app.internal:8080/".into(),
                    to: "https://www.example.com/shop/".into(),
                },
                Rule {
                    from: "/".into(),
                    to: "/shop/".into(),
                },
            ],
        };
        assert_eq!(
            p.rewrite("http://app.internal:8080/cart?x=1").as_deref(),
            Some("https://www.example.com/shop/cart?x=1")
        );
        assert_eq!(p.rewrite("/login").as_deref(), Some("/shop/login"));
        assert_eq!(p.rewrite("https://elsewhere.example/"), None);
        assert_eq!(
            p.refresh("5; URL='/next'").as_deref(),
            Some("5; URL='/shop/next'")
        );
        assert_eq!(
            p.refresh("5; url=/next").as_deref(),
            Some("5; url=/shop/next")
        );
        assert_eq!(p.refresh("5"), None);
    }

    #[test]
    fn bad_configs_are_refused() {
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"rules": []}),
            serde_json::json!({"rules": [{"from": "", "to": "/"}]}),
            serde_json::json!({"rules": [{"from": "/a b", "to": "/"}]}),
        ] {
            assert!(build(&bad).is_err(), "{bad}");
        }
        assert!(build(&serde_json::json!({"rules": [{"from": "/", "to": "/x/"}]})).is_ok());
    }
}
