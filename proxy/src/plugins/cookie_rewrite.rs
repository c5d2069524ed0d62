//! `cookie-rewrite`: edits the `Path` and `Domain` attributes of the upstream's `Set-Cookie`
//! headers, as nginx's `proxy_cookie_path` and `proxy_cookie_domain` do (ingress-nginx's
//! `proxy-cookie-path` and `proxy-cookie-domain`): an application that sets its cookies for
//! the path or host it sees itself, behind a route that strips a prefix or renames the host.
//!
//! Config: `path` and `domain`, each a list of `{from, to}` rules, the first that matches
//! applying. A path rule matches a `Path` that starts with `from` (case-sensitive) and
//! replaces that prefix; a domain rule matches a `Domain` equal to `from` (case-insensitive, a
//! leading dot ignored) and replaces it.

use std::sync::Arc;

use http::header::SET_COOKIE;
use http::HeaderValue;
use serde::Deserialize;

use super::{parse_config, Plugin, PluginError, ResponseHead, Simple};
use crate::pipeline::RequestCtx;

pub(super) const FACTORY: Simple = Simple {
    name: "cookie-rewrite",
    // Beside response-transformer (800), before header-adding plugins see the answer.
    priority: 805,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    path: Vec<Rule>,
    #[serde(default)]
    domain: Vec<Rule>,
}

/// One `{from, to}` rule (also `location-rewrite`'s).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Rule {
    pub(super) from: String,
    pub(super) to: String,
}

struct CookieRewrite {
    path: Vec<Rule>,
    domain: Vec<Rule>,
}

/// What may stand in an attribute value: visible ASCII except `;` (RFC 6265's `av-octet`).
fn attribute_value(field: &str, i: usize, which: &str, v: &str) -> Result<(), String> {
    if v.bytes().all(|b| (0x21..0x7f).contains(&b) && b != b';') {
        Ok(())
    } else {
        Err(format!(
            "{field}[{i}].{which}: {v:?} may hold only visible ASCII characters other than ';'"
        ))
    }
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    if conf.path.is_empty() && conf.domain.is_empty() {
        return Err("path, domain: give at least one rule".into());
    }
    for (i, r) in conf.path.iter().enumerate() {
        attribute_value("path", i, "from", &r.from)?;
        attribute_value("path", i, "to", &r.to)?;
        if !r.from.starts_with('/') || !r.to.starts_with('/') {
            return Err(format!("path[{i}]: from and to must start with \"/\""));
        }
    }
    for (i, r) in conf.domain.iter().enumerate() {
        attribute_value("domain", i, "from", &r.from)?;
        attribute_value("domain", i, "to", &r.to)?;
        if r.from.is_empty() || r.to.is_empty() {
            return Err(format!("domain[{i}]: from and to may not be empty"));
        }
    }
    Ok(Arc::new(CookieRewrite {
        path: conf.path,
        domain: conf.domain,
    }))
}

impl CookieRewrite {
    /// The cookie with its attributes rewritten, or `None` when no rule applies. Bytes, not
    /// text: a cookie value may hold non-ASCII bytes, and its attributes are still edited.
    fn rewrite(&self, cookie: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(cookie.len() + 16);
        let mut changed = false;
        for (n, part) in cookie.split(|&b| b == b';').enumerate() {
            if n > 0 {
                out.push(b';');
            }
            // The first part is the name=value pair, never an attribute.
            match (n > 0).then(|| self.attribute(part)).flatten() {
                Some(edited) => {
                    out.extend_from_slice(&edited);
                    changed = true;
                }
                None => out.extend_from_slice(part),
            }
        }
        changed.then_some(out)
    }

    fn attribute(&self, part: &[u8]) -> Option<Vec<u8>> {
        let eq = part.iter().position(|&b| b == b'=')?;
        let (name, value) = (&part[..eq], &part[eq + 1..]);
        let lead = name.len() - name.trim_ascii_start().len();
        let name = name.trim_ascii();
        let value = value.trim_ascii();
        let replaced: Vec<u8> = if name.eq_ignore_ascii_case(b"path") {
            let r = self
                .path
                .iter()
                .find(|r| value.starts_with(r.from.as_bytes()))?;
            [r.to.as_bytes(), &value[r.from.len()..]].concat()
        } else if name.eq_ignore_ascii_case(b"domain") {
            // nginx keeps a leading dot where the cookie had one.
            let (dot, bare) = match value.strip_prefix(b".") {
                Some(bare) => (&b"."[..], bare),
                None => (&b""[..], value),
            };
            let r = self.domain.iter().find(|r| {
                r.from
                    .trim_start_matches('.')
                    .as_bytes()
                    .eq_ignore_ascii_case(bare)
            })?;
            [dot, r.to.trim_start_matches('.').as_bytes()].concat()
        } else {
            return None;
        };
        Some([&part[..lead], name, b"=", &replaced].concat())
    }
}

impl Plugin for CookieRewrite {
    fn header_filter(
        &self,
        _ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), PluginError> {
        if !resp.headers.contains_key(SET_COOKIE) {
            return Ok(());
        }
        let cookies: Vec<HeaderValue> = resp.headers.get_all(SET_COOKIE).iter().cloned().collect();
        resp.headers.remove(SET_COOKIE);
        for c in cookies {
            let edited = self
                .rewrite(c.as_bytes())
                .and_then(|b| HeaderValue::from_bytes(&b).ok());
            resp.headers.append(SET_COOKIE, edited.unwrap_or(c));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(config: serde_json::Value) -> CookieRewrite {
        let conf: Conf = serde_json::from_value(config).unwrap();
        CookieRewrite {
            path: conf.path,
            domain: conf.domain,
        }
    }

    #[test]
    fn paths_and_domains_are_rewritten_as_nginx_does() {
        let p = plugin(serde_json::json!({
            "path": [{"from": "/two/", "to": "/"}, {"from": "/app", "to": "/shop"}],
            "domain": [{"from": "localhost", "to": "example.org"}],
        }));
        assert_eq!(
            p.rewrite(b"a=1; Path=/two/some/uri/; HttpOnly").as_deref(),
            Some(&b"a=1; Path=/some/uri/; HttpOnly"[..])
        );
        // The first rule that matches; the prefix only.
        assert_eq!(
            p.rewrite(b"a=1; path=/app/x").as_deref(),
            Some(&b"a=1; path=/shop/x"[..])
        );
        assert_eq!(
            p.rewrite(b"s=x; Domain=.LOCALHOST; Secure").as_deref(),
            Some(&b"s=x; Domain=.example.org; Secure"[..]),
            "the leading dot stays, as nginx keeps it"
        );
        // Nothing applies: untouched (None); the cookie's own value is never an attribute.
        assert_eq!(p.rewrite(b"path=/two/; Max-Age=1"), None);
        assert_eq!(p.rewrite(b"a=1; Path=/other; Domain=example.net"), None);
        // A value with non-ASCII bytes still has its attributes edited, the bytes untouched.
        assert_eq!(
            p.rewrite("n=J\u{f6}hn; Path=/two/".as_bytes()).as_deref(),
            Some("n=J\u{f6}hn; Path=/".as_bytes())
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"path": [{"from": "two", "to": "/"}]}),
            serde_json::json!({"path": [{"from": "/a;b", "to": "/"}]}),
            serde_json::json!({"domain": [{"from": "", "to": "x"}]}),
            serde_json::json!({"domain": [{"from": "a", "to": "b c"}]}),
            serde_json::json!({"path": [{"from": "/", "to": "/", "regex": true}]}),
        ] {
            assert!(build(&bad).is_err(), "{bad}");
        }
        assert!(build(&serde_json::json!({"domain": [{"from": "a", "to": "b"}]})).is_ok());
    }
}
