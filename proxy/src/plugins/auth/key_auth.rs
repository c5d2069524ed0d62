//! `key-auth`: identify the consumer by an API key sent in a header, the query string or the
//! body (Kong's schema: `key_names`, `key_in_header`, `key_in_query`, `key_in_body`,
//! `hide_credentials`, `anonymous`, `run_on_preflight`, `realm`).
//!
//! Keys are looked up by their SHA-256 in the table's directory: a lookup costs one hash and
//! one map probe however many consumers there are.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method};
use serde::Deserialize;

use super::{challenge, unauthorized, Anonymous, INVALID};
use crate::pipeline::RequestCtx;
use crate::plugins::{params, parse_config, Flow, Handled, Plugin, RequestHead, Simple};

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(crate) const FACTORY: Simple = Simple {
    name: "key-auth",
    priority: 1250,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default = "default_names")]
    key_names: Vec<String>,
    #[serde(default = "yes")]
    key_in_header: bool,
    #[serde(default = "yes")]
    key_in_query: bool,
    #[serde(default)]
    key_in_body: bool,
    #[serde(default)]
    hide_credentials: bool,
    #[serde(default)]
    anonymous: Option<String>,
    #[serde(default = "yes")]
    run_on_preflight: bool,
    #[serde(default)]
    realm: Option<String>,
}

fn default_names() -> Vec<String> {
    vec!["apikey".into()]
}

fn yes() -> bool {
    true
}

struct KeyAuth {
    /// Each key name, as given (query and body) and as a header name.
    names: Vec<(String, HeaderName)>,
    in_header: bool,
    in_query: bool,
    in_body: bool,
    hide: bool,
    anonymous: Anonymous,
    run_on_preflight: bool,
    challenge: HeaderValue,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    if conf.key_names.is_empty() {
        return Err("key_names: must name at least one key".into());
    }
    let names = conf
        .key_names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            HeaderName::from_bytes(n.as_bytes())
                .map(|h| (n.clone(), h))
                .map_err(|_| format!("key_names[{i}]: {n:?} is not a valid header name"))
        })
        .collect::<Result<_, _>>()?;
    if !(conf.key_in_header || conf.key_in_query || conf.key_in_body) {
        return Err("key_in_header: at least one of key_in_header, key_in_query and key_in_body must be true".into());
    }
    Ok(Arc::new(KeyAuth {
        names,
        in_header: conf.key_in_header,
        in_query: conf.key_in_query,
        in_body: conf.key_in_body,
        hide: conf.hide_credentials,
        anonymous: Anonymous::new(conf.anonymous)?,
        run_on_preflight: conf.run_on_preflight,
        challenge: challenge("Key", conf.realm.as_deref().unwrap_or("weir"))?,
    }))
}

/// Where a key was found, to hide it there.
enum Source {
    Header(HeaderName),
    Query(String),
    Body(String, BodyKind),
}

#[derive(Clone, Copy)]
enum BodyKind {
    Form,
    Json,
}

/// What the request carries.
enum Presented {
    None,
    /// The same key name more than once: ambiguous, refused (a front proxy and the upstream
    /// could each read another one).
    Duplicate,
    Key(Vec<u8>, Vec<Source>),
}

impl KeyAuth {
    fn skip(&self, req: &RequestHead) -> bool {
        !self.run_on_preflight && req.method == Method::OPTIONS
    }

    /// Every place a key can be (for each key name: the header, the query, the body) is
    /// looked at: one key, possibly in several places, is the key; two different ones (or one
    /// name given twice) are refused, so the upstream cannot read another key than the one
    /// checked, and `hide_credentials` removes every copy.
    fn find(&self, ctx: &RequestCtx, req: &RequestHead) -> Presented {
        let body = if self.in_body {
            ctx.request_body
                .as_ref()
                .and_then(|b| Some((b, body_kind(req)?)))
        } else {
            None
        };
        let query = crate::plugins::upstream_target(ctx, req).1.unwrap_or("");
        let mut key: Option<Vec<u8>> = None;
        let mut sources = Vec::new();
        let mut found = |value: &[u8], source: Source| -> bool {
            if key.as_deref().is_some_and(|k| k != value) {
                return false;
            }
            key = Some(value.to_vec());
            sources.push(source);
            true
        };
        for (name, header_name) in &self.names {
            if self.in_header {
                let mut all = req.headers.get_all(header_name).iter();
                if let Some(v) = all.next() {
                    if all.next().is_some()
                        || !found(v.as_bytes(), Source::Header(header_name.clone()))
                    {
                        return Presented::Duplicate;
                    }
                }
            }
            if self.in_query {
                match params::values(query.as_bytes(), name).as_slice() {
                    [] => {}
                    [one] if found(one.as_bytes(), Source::Query(name.clone())) => {}
                    _ => return Presented::Duplicate,
                }
            }
            if let Some((bytes, kind)) = body {
                match body_values(bytes, kind, name).as_slice() {
                    [] => {}
                    [one] if found(one.as_bytes(), Source::Body(name.clone(), kind)) => {}
                    _ => return Presented::Duplicate,
                }
            }
        }
        match key {
            Some(k) => Presented::Key(k, sources),
            None => Presented::None,
        }
    }

    /// `hide_credentials`: the key does not go upstream.
    fn hide(&self, ctx: &mut RequestCtx, req: &mut RequestHead, source: Source) {
        match source {
            Source::Header(h) => {
                req.headers.remove(h);
            }
            Source::Query(name) => super::remove_query_param(ctx, req, &name),
            Source::Body(name, kind) => {
                if let Some(body) = &ctx.request_body {
                    if let Some(edited) = body_without(body, kind, &name) {
                        ctx.request_body = Some(edited);
                    }
                }
            }
        }
    }
}

fn body_kind(req: &RequestHead) -> Option<BodyKind> {
    let ct = req.headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = ct.split(';').next()?.trim().to_ascii_lowercase();
    match essence.as_str() {
        "application/x-www-form-urlencoded" => Some(BodyKind::Form),
        "application/json" => Some(BodyKind::Json),
        _ => None,
    }
}

/// The string values of `name` in a body (a JSON object's top-level field).
fn body_values(body: &[u8], kind: BodyKind, name: &str) -> Vec<String> {
    match kind {
        BodyKind::Form => params::values(body, name),
        BodyKind::Json => match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(serde_json::Value::Object(m)) => match m.get(name) {
                Some(serde_json::Value::String(s)) => vec![s.clone()],
                // A key that is not a string is no key; two would be `Duplicate`.
                Some(serde_json::Value::Array(a)) if a.len() > 1 => vec![String::new(); 2],
                _ => Vec::new(),
            },
            _ => Vec::new(),
        },
    }
}

fn body_without(body: &[u8], kind: BodyKind, name: &str) -> Option<Bytes> {
    match kind {
        BodyKind::Form => params::without(body, name).map(Bytes::from),
        BodyKind::Json => {
            let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
            v.as_object_mut()?.remove(name)?;
            serde_json::to_vec(&v).ok().map(Bytes::from)
        }
    }
}

impl Plugin for KeyAuth {
    fn authenticates(&self) -> bool {
        true
    }

    fn may_need_body_before_access(&self) -> bool {
        self.in_body
    }

    fn body_before_access(&self, req: &RequestHead) -> bool {
        // Only a body that can hold a key, and only when the head holds none.
        self.in_body
            && !self.skip(req)
            && body_kind(req).is_some()
            && !self.names.iter().any(|(name, h)| {
                (self.in_header && req.headers.contains_key(h))
                    || (self.in_query
                        && params::contains(req.uri.query().unwrap_or("").as_bytes(), name))
            })
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        if self.skip(req) || self.anonymous.already_done(ctx) {
            return Flow::Continue.into();
        }
        let refusal = match self.find(ctx, req) {
            Presented::None => unauthorized("No API key found in request", Some(&self.challenge)),
            Presented::Duplicate => unauthorized("Duplicate API key found", Some(&self.challenge)),
            Presented::Key(key, sources) => {
                let found = ctx
                    .consumers()
                    .by_key(&key)
                    .map(|f| (f.consumer.id.clone(), f.credential.clone()));
                match found {
                    Some((consumer, credential)) => {
                        if self.hide {
                            for source in sources {
                                self.hide(ctx, req, source);
                            }
                        }
                        ctx.authenticate(req, consumer, Some(credential));
                        return Flow::Continue.into();
                    }
                    None => unauthorized(INVALID, Some(&self.challenge)),
                }
            }
        };
        self.anonymous.fallback(ctx, req, refusal).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{hash_key, Credential};
    use crate::plugins::auth::testing::{self, head, message, run};
    use serde_json::json;

    fn plugin(config: serde_json::Value) -> Arc<dyn Plugin> {
        build(&config).unwrap()
    }

    fn ctx() -> RequestCtx {
        let alice = testing::consumer(
            "alice",
            Some("A-1"),
            vec![Credential::KeyAuth {
                id: "ns/alice-key".into(),
                key_sha256: hash_key("s3cret"),
            }],
        );
        testing::ctx(vec![alice, testing::guest()], Some("ns"))
    }

    #[test]
    fn a_valid_key_in_a_header_identifies_the_consumer() {
        let p = plugin(json!({}));
        let (mut c, mut r) = (ctx(), head("/x", &[("apikey", "s3cret")]));
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(c.consumer.as_deref(), Some("ns/alice"));
        assert_eq!(c.credential.as_deref(), Some("ns/alice-key"));
        assert_eq!(r.headers["x-consumer-username"], "alice");
        assert_eq!(r.headers["x-consumer-custom-id"], "A-1");
        assert_eq!(r.headers["x-credential-identifier"], "ns/alice-key");
        assert!(r.headers.get("x-anonymous-consumer").is_none());
        // Without hide_credentials the key goes on.
        assert_eq!(r.headers["apikey"], "s3cret");
    }

    #[test]
    fn missing_wrong_and_duplicate_keys_are_refused_with_a_challenge() {
        let p = plugin(json!({"realm": "api"}));
        for (h, msg) in [
            (vec![], "No API key found in request"),
            (vec![("apikey", "nope")], INVALID),
            (vec![("apikey", "")], INVALID),
            (
                vec![("apikey", "s3cret"), ("apikey", "s3cret")],
                "Duplicate API key found",
            ),
        ] {
            let (mut c, mut r) = (ctx(), head("/x", &h));
            let e = run(&*p, &mut c, &mut r).expect("refused");
            assert_eq!(e.status, 401, "{h:?}");
            assert_eq!(message(&e), msg, "{h:?}");
            assert_eq!(e.headers["www-authenticate"], "Key realm=\"api\"");
            assert!(c.consumer.is_none());
        }
        let (mut c, mut r) = (ctx(), head("/x?apikey=s3cret&apikey=other", &[]));
        assert_eq!(
            message(&run(&*p, &mut c, &mut r).unwrap()),
            "Duplicate API key found"
        );
    }

    #[test]
    fn query_keys_are_decoded_and_hidden() {
        let p = plugin(json!({"key_names": ["apikey", "x-key"], "hide_credentials": true}));
        let (mut c, mut r) = (ctx(), head("/x?a=1&apikey=s3cre%74&b=2", &[]));
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(c.consumer.as_deref(), Some("ns/alice"));
        assert_eq!(r.uri.path_and_query().unwrap().as_str(), "/x?a=1&b=2");
        let (mut c, mut r) = (ctx(), head("/x", &[("x-key", "s3cret")]));
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert!(r.headers.get("x-key").is_none());
        // Where only the header is allowed, a query key is no key.
        let p = plugin(json!({"key_in_query": false}));
        let (mut c, mut r) = (ctx(), head("/x?apikey=s3cret", &[]));
        assert_eq!(run(&*p, &mut c, &mut r).unwrap().status, 401);
    }

    #[test]
    fn a_key_in_several_places_must_be_one_key_and_is_hidden_everywhere() {
        let p = plugin(json!({"key_names": ["apikey", "x-key"], "hide_credentials": true}));
        // Two different keys: the upstream could read the one that was not checked.
        for (uri, headers) in [
            ("/x?apikey=other", vec![("apikey", "s3cret")]),
            ("/x", vec![("apikey", "s3cret"), ("x-key", "other")]),
        ] {
            let (mut c, mut r) = (ctx(), head(uri, &headers));
            let e = run(&*p, &mut c, &mut r).expect("refused");
            assert_eq!(message(&e), "Duplicate API key found", "{uri} {headers:?}");
        }
        // The same key twice: accepted, and no copy goes upstream.
        let (mut c, mut r) = (ctx(), head("/x?apikey=s3cret&a=1", &[("x-key", "s3cret")]));
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert!(r.headers.get("x-key").is_none());
        assert_eq!(r.uri.path_and_query().unwrap().as_str(), "/x?a=1");
    }

    #[test]
    fn body_keys_are_read_from_forms_and_json_and_hidden() {
        let p = plugin(json!({"key_in_body": true, "hide_credentials": true}));
        for (ct, body, rest) in [
            (
                "application/x-www-form-urlencoded",
                &b"a=1&apikey=s3cret"[..],
                &b"a=1"[..],
            ),
            (
                "application/json; charset=utf-8",
                br#"{"apikey":"s3cret","a":1}"#,
                br#"{"a":1}"#,
            ),
        ] {
            let mut r = head("/x", &[("content-type", ct)]);
            assert!(p.body_before_access(&r), "{ct}");
            let mut c = ctx();
            c.request_body = Some(Bytes::from_static(body));
            assert!(run(&*p, &mut c, &mut r).is_none(), "{ct}");
            assert_eq!(c.consumer.as_deref(), Some("ns/alice"));
            assert_eq!(c.request_body.as_deref(), Some(rest));
        }
        // A key in the head: no need to read the body.
        assert!(!p.body_before_access(&head(
            "/x",
            &[("apikey", "k"), ("content-type", "application/json")]
        )));
        assert!(!p.body_before_access(&head("/x", &[("content-type", "text/plain")])));
        assert!(!plugin(json!({}))
            .body_before_access(&head("/x", &[("content-type", "application/json")])));
    }

    #[test]
    fn anonymous_is_used_for_missing_or_wrong_keys_and_named_in_the_headers() {
        testing::assert_anonymous_fallback(plugin, &[vec![], vec![("apikey", "nope")]], ctx);
    }

    #[test]
    fn preflights_pass_when_asked() {
        testing::assert_preflight_switch(plugin, ctx);
    }

    #[test]
    fn configuration_errors_name_the_field() {
        for (config, field) in [
            (json!({"key_names": []}), "key_names"),
            (json!({"key_names": ["bad name"]}), "key_names[0]"),
            (
                json!({"key_in_header": false, "key_in_query": false}),
                "key_in_header",
            ),
            (json!({"anonymous": ""}), "anonymous"),
            (json!({"realm": "a\"b"}), "realm"),
            (json!({"nope": 1}), "nope"),
        ] {
            let e = build(&config).err().unwrap();
            assert!(e.contains(field), "{config}: {e}");
        }
    }
}
