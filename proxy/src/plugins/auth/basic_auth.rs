//! `basic-auth`: identify the consumer by a user name and password (RFC 7617), Kong's schema:
//! `hide_credentials`, `anonymous`, `realm`.
//!
//! Credentials are found by user name; the password is hashed with the credential's salt and
//! compared in constant time with the stored hash (the table never holds it in clear).

use std::sync::Arc;

use base64::Engine as _;
use http::{header, HeaderValue};
use serde::Deserialize;

use super::{challenge, unauthorized, Anonymous, INVALID};
use crate::pipeline::RequestCtx;
use crate::plugins::{parse_config, Flow, Handled, Plugin, RequestHead, Simple};

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(crate) const FACTORY: Simple = Simple {
    name: "basic-auth",
    priority: 1100,
    build,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    hide_credentials: bool,
    #[serde(default)]
    anonymous: Option<String>,
    #[serde(default = "default_realm")]
    realm: String,
}

fn default_realm() -> String {
    "service".into()
}

struct BasicAuth {
    hide: bool,
    anonymous: Anonymous,
    challenge: HeaderValue,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    Ok(Arc::new(BasicAuth {
        hide: conf.hide_credentials,
        anonymous: Anonymous::new(conf.anonymous)?,
        challenge: challenge("Basic", &conf.realm)?,
    }))
}

/// What the request's `Authorization` header holds.
#[derive(Debug, PartialEq)]
enum Presented {
    None,
    /// Not `Basic <base64 of user:password>`, or more than one header.
    Malformed,
    Credentials(String, Vec<u8>),
}

/// Reads `Authorization`. (Kong also reads `Proxy-Authorization`; Weir removes that header at
/// the edge as hop-by-hop, before any plugin runs, since it is addressed to a forward proxy.)
fn presented(req: &RequestHead) -> Presented {
    let mut all = req.headers.get_all(header::AUTHORIZATION).iter();
    match (all.next(), all.next()) {
        (None, _) => Presented::None,
        (Some(v), None) => parse(v.as_bytes()),
        (Some(_), Some(_)) => Presented::Malformed,
    }
}

/// `Basic <token68>`: the scheme is case-insensitive (RFC 9110 §11.1); the user name is what
/// comes before the first `:` (RFC 7617 §2), and must be UTF-8.
fn parse(value: &[u8]) -> Presented {
    let Some((scheme, rest)) = value.split_at_checked(6) else {
        return Presented::Malformed;
    };
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return Presented::Malformed;
    }
    let token = rest.trim_ascii();
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(token) else {
        return Presented::Malformed;
    };
    let Some(colon) = decoded.iter().position(|&b| b == b':') else {
        return Presented::Malformed;
    };
    match std::str::from_utf8(&decoded[..colon]) {
        Ok(user) if !user.is_empty() => {
            Presented::Credentials(user.to_string(), decoded[colon + 1..].to_vec())
        }
        _ => Presented::Malformed,
    }
}

impl Plugin for BasicAuth {
    fn authenticates(&self) -> bool {
        true
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        if self.anonymous.already_done(ctx) {
            return Flow::Continue.into();
        }
        let refusal = match presented(req) {
            Presented::None => unauthorized("Unauthorized", Some(&self.challenge)),
            Presented::Malformed => unauthorized(INVALID, Some(&self.challenge)),
            Presented::Credentials(user, password) => {
                let found = ctx
                    .consumers()
                    .by_password(&user, &password)
                    .map(|f| (f.consumer.id.clone(), f.credential.clone()));
                match found {
                    Some((consumer, credential)) => {
                        if self.hide {
                            req.headers.remove(header::AUTHORIZATION);
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
    use crate::config::{hash_password, Credential};
    use crate::plugins::auth::testing::{self, head, message};
    use crate::plugins::EarlyResponse;
    use serde_json::json;

    fn ctx() -> RequestCtx {
        let alice = testing::consumer(
            "alice",
            None,
            vec![Credential::BasicAuth {
                id: "ns/alice-pw".into(),
                username: "alice".into(),
                password_hash: hash_password(b"pepper", "open:sesame"),
            }],
        );
        testing::ctx(vec![alice], Some("ns"))
    }

    fn basic(user_pass: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
    }

    fn run(
        p: &dyn Plugin,
        c: &mut RequestCtx,
        auth: &[(&str, &str)],
    ) -> (Option<EarlyResponse>, RequestHead) {
        let mut r = head("/x", auth);
        (testing::run(p, c, &mut r), r)
    }

    #[test]
    fn rfc_7617_credentials() {
        assert_eq!(
            parse(basic("alice:open:sesame").as_bytes()),
            Presented::Credentials("alice".into(), b"open:sesame".to_vec())
        );
        assert_eq!(
            parse(format!("bAsIc   {}", &basic("a:")[6..]).as_bytes()),
            Presented::Credentials("a".into(), vec![])
        );
        for bad in [
            "Basic",
            "Basic !!!",
            "Bearer abc",
            &basic("no-colon"),
            &basic(":pw"),
        ] {
            assert_eq!(parse(bad.as_bytes()), Presented::Malformed, "{bad}");
        }
    }

    #[test]
    fn valid_missing_wrong_and_malformed_credentials() {
        let p = build(&json!({"hide_credentials": true})).unwrap();
        let mut c = ctx();
        let (e, r) = run(
            &*p,
            &mut c,
            &[("authorization", &basic("alice:open:sesame"))],
        );
        assert!(e.is_none());
        assert_eq!(c.consumer.as_deref(), Some("ns/alice"));
        assert_eq!(r.headers["x-credential-identifier"], "ns/alice-pw");
        assert!(r.headers.get("authorization").is_none());
        for (h, msg) in [
            (vec![], "Unauthorized"),
            (vec![("authorization", basic("alice:open:sesam"))], INVALID),
            (vec![("authorization", basic("bob:open:sesame"))], INVALID),
            (vec![("authorization", "Basic %%%".to_string())], INVALID),
            (
                vec![
                    ("authorization", basic("alice:open:sesame")),
                    ("authorization", basic("x:y")),
                ],
                INVALID,
            ),
        ] {
            let mut c = ctx();
            let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let (e, _) = run(&*p, &mut c, &h);
            let e = e.expect("refused");
            assert_eq!(e.status, 401);
            assert_eq!(e.headers["www-authenticate"], "Basic realm=\"service\"");
            assert_eq!(message(&e), msg, "{h:?}");
            assert!(c.consumer.is_none());
        }
        // The realm is configurable.
        let p = build(&json!({"realm": "internal"})).unwrap();
        let (e, _) = run(&*p, &mut ctx(), &[]);
        assert_eq!(
            e.unwrap().headers["www-authenticate"],
            "Basic realm=\"internal\""
        );
    }
}
