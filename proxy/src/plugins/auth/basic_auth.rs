//! `basic-auth`: identify the consumer by a user name and password (RFC 7617), Kong's schema:
//! `hide_credentials`, `anonymous`, `realm`; plus `htpasswd`, a list of htpasswd lines
//! (ingress-nginx's `auth-type: basic` with an `auth-secret`).
//!
//! Credentials are found by user name; the password is hashed with the credential's salt and
//! compared in constant time with the stored hash (the table never holds it in clear).
//!
//! With a non-empty `htpasswd`, the user and password are checked against its lines only
//! (never against Consumers) and a request that passes goes on without a consumer. Slow hashes
//! (bcrypt, SHA-crypt) are checked off the event loop, at most one per CPU at a time, and a
//! successful check is remembered (keyed by a per-instance keyed SHA-256 of user and password)
//! so that a valid user pays for it once; failures are never remembered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use http::{header, HeaderValue};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::htpasswd::{self, Hash};
use super::{challenge, unauthorized, Anonymous, INVALID};
use crate::pipeline::RequestCtx;
use crate::plugins::{
    parse_config, Flow, Handled, Plugin, PluginError, PluginFactory, RequestHead, Step,
};

/// The kind: its name, its default priority (Kong's), its secret field, and how to build an
/// instance.
pub(crate) const FACTORY: Factory = Factory;

/// The `basic-auth` kind (a factory of its own for its secret field, `htpasswd`).
pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "basic-auth"
    }

    fn priority(&self) -> i32 {
        1100
    }

    fn secret_fields(&self) -> &'static [&'static str] {
        &["htpasswd"]
    }

    fn build(&self, config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
        build(config)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    hide_credentials: bool,
    #[serde(default)]
    anonymous: Option<String>,
    #[serde(default = "default_realm")]
    realm: String,
    /// htpasswd lines; empty or absent: Consumers are checked.
    #[serde(default)]
    htpasswd: Option<Vec<String>>,
}

fn default_realm() -> String {
    "service".into()
}

struct BasicAuth {
    hide: bool,
    anonymous: Anonymous,
    challenge: HeaderValue,
    /// From a non-empty `htpasswd`: then the only credentials checked.
    htpasswd: Option<Htpasswd>,
}

/// How many successful checks of slow hashes an instance remembers.
const REMEMBERED: usize = 1024;

/// The users of an `htpasswd` list.
struct Htpasswd {
    /// By user name; the first line of a user wins, as in Apache and nginx.
    users: HashMap<String, Arc<Hash>>,
    /// Checked (and its answer ignored) for a user not in the list, so that an unknown user
    /// takes as long as a wrong password: the first slow hash, else the first hash.
    decoy: Option<Arc<Hash>>,
    /// Successful checks of slow hashes.
    verified: Mutex<HashSet<[u8; 32]>>,
    /// This instance's key of the fingerprints in `verified` (a memory dump does not give
    /// fast-to-test password digests).
    key: [u8; 32],
}

impl Htpasswd {
    fn parse(lines: &[String]) -> Result<Htpasswd, String> {
        let mut users = HashMap::new();
        let mut first: Option<Arc<Hash>> = None;
        let mut first_slow: Option<Arc<Hash>> = None;
        for (i, line) in lines.iter().enumerate() {
            let Some(entry) = htpasswd::parse_line(i, line)? else {
                continue;
            };
            let hash = Arc::new(entry.hash);
            first.get_or_insert_with(|| hash.clone());
            if hash.is_slow() {
                first_slow.get_or_insert_with(|| hash.clone());
            }
            users.entry(entry.user).or_insert(hash);
        }
        let mut key = [0; 32];
        key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Ok(Htpasswd {
            users,
            decoy: first_slow.or(first),
            verified: Mutex::new(HashSet::new()),
            key,
        })
    }

    /// A keyed digest of a user and password.
    fn fingerprint(&self, user: &str, password: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update((user.len() as u64).to_le_bytes());
        h.update(user.as_bytes());
        h.update(password);
        h.finalize().into()
    }

    fn seen(&self, fingerprint: &[u8; 32]) -> bool {
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(fingerprint)
    }

    fn remember(&self, fingerprint: [u8; 32]) {
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if verified.len() >= REMEMBERED {
            // Some entry goes (a valid user it held pays one more check).
            if let Some(old) = verified.iter().next().copied() {
                verified.remove(&old);
            }
        }
        verified.insert(fingerprint);
    }
}

/// Checks a slow hash on the blocking pool, at most one per CPU at a time (a flood of wrong
/// passwords queues here instead of stalling the workers' event loops).
async fn verify_off_loop(hash: Arc<Hash>, password: Vec<u8>) -> Result<bool, PluginError> {
    static SLOTS: OnceLock<tokio::sync::Semaphore> = OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
    });
    let permit = slots
        .acquire()
        .await
        .map_err(|_| PluginError("basic-auth: htpasswd checks stopped".into()))?;
    // The permit goes with the check: a client that leaves does not free its slot early.
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        hash.verify(&password)
    })
    .await
    .map_err(|e| PluginError(format!("basic-auth: htpasswd check failed: {e}")))
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(instance(config)?))
}

fn instance(config: &serde_json::Value) -> Result<BasicAuth, String> {
    let conf: Conf = parse_config(config)?;
    let lines = conf.htpasswd.unwrap_or_default();
    let htpasswd = if lines.is_empty() {
        None
    } else {
        Some(Htpasswd::parse(&lines)?)
    };
    if htpasswd.is_some() && conf.anonymous.is_some() {
        return Err("anonymous: not available with htpasswd (its users are not consumers)".into());
    }
    Ok(BasicAuth {
        hide: conf.hide_credentials,
        anonymous: Anonymous::new(conf.anonymous)?,
        challenge: challenge("Basic", &conf.realm)?,
        htpasswd,
    })
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

impl BasicAuth {
    /// An `htpasswd` list's answer for `user` and `password`.
    fn check_htpasswd<'a>(
        &'a self,
        list: &'a Htpasswd,
        req: &'a mut RequestHead,
        user: String,
        password: Vec<u8>,
    ) -> Handled<'a> {
        let (hash, known) = match list.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => match &list.decoy {
                Some(d) => (d.clone(), false),
                None => return self.htpasswd_answer(req, false).into(),
            },
        };
        if !hash.is_slow() {
            let ok = hash.verify(&password) && known;
            return self.htpasswd_answer(req, ok).into();
        }
        let fingerprint = known.then(|| list.fingerprint(&user, &password));
        if fingerprint.as_ref().is_some_and(|f| list.seen(f)) {
            return self.htpasswd_answer(req, true).into();
        }
        Step::wait(async move {
            let ok = verify_off_loop(hash, password).await? && known;
            if let (true, Some(f)) = (ok, fingerprint) {
                list.remember(f);
            }
            Ok(self.htpasswd_answer(req, ok))
        })
    }

    /// Go on (without a consumer), or the 401 with the challenge.
    fn htpasswd_answer(&self, req: &mut RequestHead, ok: bool) -> Flow {
        if !ok {
            return Flow::Respond(unauthorized(INVALID, Some(&self.challenge)));
        }
        if self.hide {
            req.headers.remove(header::AUTHORIZATION);
        }
        Flow::Continue
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
                if let Some(list) = &self.htpasswd {
                    return self.check_htpasswd(list, req, user, password);
                }
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

    // Made with `htpasswd -nbB -C 5`, `-nbm` and `-nbs`; each password is "open sesame".
    const BCRYPT: &str = "alice:$2y$05$ro5zclb0z5ualKoQy3TyMeQPjBASQj34ZvGqSHyVHBwy9K9.78i/q";
    const APR1: &str = "carol:$apr1$a0hE7Xgg$AXK2PJNzqEI/TstAXkSe91";
    const SHA: &str = "erin:{SHA}W8r/fyL/UzygmbNAjq2HbA67qac=";

    /// Runs `access`, waiting if it waits.
    async fn run_waiting(
        p: &dyn Plugin,
        c: &mut RequestCtx,
        auth: &[(&str, &str)],
    ) -> (Option<EarlyResponse>, RequestHead) {
        let mut r = head("/x", auth);
        let flow = match p.access(c, &mut r) {
            Step::Ready(f) => f,
            Step::Wait(f) => f.await,
        };
        match flow.expect("no plugin error") {
            Flow::Continue => (None, r),
            Flow::Respond(e) => (Some(e), r),
        }
    }

    fn htpasswd_config(extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({"htpasswd": ["# staff", BCRYPT, APR1, "", SHA]});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    #[tokio::test]
    async fn htpasswd_users_pass_without_becoming_consumers() {
        let p = build(&htpasswd_config(
            json!({"hide_credentials": true, "realm": "staff"}),
        ))
        .unwrap();
        for user in ["alice", "carol", "erin"] {
            let mut c = ctx();
            let auth = basic(&format!("{user}:open sesame"));
            let (e, r) = run_waiting(&*p, &mut c, &[("authorization", &auth)]).await;
            assert!(e.is_none(), "{user}");
            assert!(c.consumer.is_none() && c.credential.is_none(), "{user}");
            assert!(r.headers.get("authorization").is_none(), "hidden");
            assert!(r.headers.get("x-credential-identifier").is_none());
            assert!(r.headers.get("x-consumer-id").is_none());
        }
        for (h, msg) in [
            (vec![], "Unauthorized"),
            (
                vec![("authorization", basic("alice:open sesame!"))],
                INVALID,
            ),
            (vec![("authorization", basic("carol:open"))], INVALID),
            (vec![("authorization", basic("erin:"))], INVALID),
            (
                vec![("authorization", basic("mallory:open sesame"))],
                INVALID,
            ),
            // A Consumer's credential is not looked at.
            (vec![("authorization", basic("alice:open:sesame"))], INVALID),
            (vec![("authorization", "Basic %%%".to_string())], INVALID),
        ] {
            let mut c = ctx();
            let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let (e, r) = run_waiting(&*p, &mut c, &h).await;
            let e = e.unwrap_or_else(|| panic!("{h:?} passed"));
            assert_eq!(e.status, 401);
            assert_eq!(e.headers["www-authenticate"], "Basic realm=\"staff\"");
            assert_eq!(message(&e), msg, "{h:?}");
            assert!(c.consumer.is_none());
            assert_eq!(r.headers.get("authorization").is_some(), !h.is_empty());
        }
        // Without hide_credentials the header goes upstream.
        let p = build(&htpasswd_config(json!({}))).unwrap();
        let auth = basic("erin:open sesame");
        let (e, r) = run_waiting(&*p, &mut ctx(), &[("authorization", &auth)]).await;
        assert!(e.is_none());
        assert_eq!(r.headers["authorization"], auth.as_str());
    }

    #[tokio::test]
    async fn slow_hashes_run_off_the_loop_and_only_successes_are_remembered() {
        let p = instance(&htpasswd_config(json!({}))).unwrap();
        let waits = |auth: &str| {
            let (mut c, mut r) = (ctx(), head("/x", &[("authorization", auth)]));
            let waits = matches!(p.access(&mut c, &mut r), Step::Wait(_));
            waits
        };
        let right = basic("alice:open sesame");
        let wrong = basic("alice:open sesame?");
        for _ in 0..2 {
            assert!(waits(&wrong), "a failure is never remembered");
            let (e, _) = run_waiting(&p, &mut ctx(), &[("authorization", &wrong)]).await;
            assert_eq!(e.unwrap().status, 401);
        }
        assert!(waits(&right), "checked once");
        let (e, _) = run_waiting(&p, &mut ctx(), &[("authorization", &right)]).await;
        assert!(e.is_none());
        assert!(!waits(&right), "then remembered");
        let (e, _) = run_waiting(&p, &mut ctx(), &[("authorization", &right)]).await;
        assert!(e.is_none());
        assert!(waits(&wrong), "still checked");
        // A fast hash never waits; an unknown user costs a check of the decoy (bcrypt here).
        assert!(!waits(&basic("erin:nope")));
        assert!(waits(&basic("mallory:open sesame")));
        let (e, _) = run_waiting(
            &p,
            &mut ctx(),
            &[("authorization", &basic("mallory:open sesame"))],
        )
        .await;
        assert_eq!(e.unwrap().status, 401);
        // The memory is bounded.
        let list = p.htpasswd.as_ref().unwrap();
        for i in 0..REMEMBERED + 10 {
            list.remember(list.fingerprint("alice", format!("{i}").as_bytes()));
        }
        assert_eq!(list.verified.lock().unwrap().len(), REMEMBERED);
        // Another instance (another key) does not share the memory.
        let other = instance(&htpasswd_config(json!({}))).unwrap();
        let other = other.htpasswd.as_ref().unwrap();
        assert_ne!(
            other.fingerprint("alice", b"open sesame"),
            list.fingerprint("alice", b"open sesame")
        );
    }

    #[test]
    fn htpasswd_first_line_of_a_user_wins() {
        let p = instance(&json!({"htpasswd": [SHA, "erin:{SHA}AAAAAAAAAAAAAAAAAAAAAAAAAAA="]}))
            .unwrap();
        let list = p.htpasswd.as_ref().unwrap();
        assert_eq!(list.users.len(), 1);
        assert!(list.users["erin"].verify(b"open sesame"));
        // Only comments: a list of no one, refusing everyone.
        let p = instance(&json!({"htpasswd": ["# nobody yet"]})).unwrap();
        let (e, _) = run(
            &p,
            &mut ctx(),
            &[("authorization", &basic("erin:open sesame"))],
        );
        assert_eq!(e.unwrap().status, 401);
        // An empty list: Consumers, as without the key.
        for empty in [json!([]), json!(null)] {
            let p = instance(&json!({ "htpasswd": empty })).unwrap();
            assert!(p.htpasswd.is_none());
        }
    }

    #[test]
    fn htpasswd_configuration_errors() {
        let e = build(&json!({"htpasswd": [SHA, APR1, "frank:.KEFZS1jXDhk."]}))
            .err()
            .unwrap();
        assert_eq!(
            e,
            r#"htpasswd[2] (user "frank"): DES crypt hashes are not supported; re-create it with htpasswd -B"#
        );
        let e = build(&json!({"htpasswd": ["gina:hunter2"]})).err().unwrap();
        assert!(
            e.starts_with(r#"htpasswd[0] (user "gina"): plain-text"#),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let e = build(&json!({"htpasswd": [SHA], "anonymous": "guest"}))
            .err()
            .unwrap();
        assert!(e.starts_with("anonymous:"), "{e}");
        let e = build(&json!({"htpasswd": SHA})).err().unwrap();
        assert!(e.starts_with("htpasswd:"), "{e}");
    }

    #[test]
    fn htpasswd_is_a_secret_field() {
        use crate::config::{redact_plugin_config, PluginValidator, REDACTED};
        assert_eq!(FACTORY.secret_fields(), ["htpasswd"]);
        let registry = crate::plugins::Registry::builtin();
        let mut c = json!({"htpasswd": [SHA], "realm": "staff"});
        redact_plugin_config("basic-auth", &mut c);
        assert_eq!(c, json!({"htpasswd": REDACTED, "realm": "staff"}));
        // A serde error quoting the value is not shown.
        let e = registry
            .check("basic-auth", &json!({"htpasswd": SHA}))
            .unwrap_err()
            .unwrap();
        assert!(!e.contains("W8r/"), "{e}");
        assert!(e.starts_with("htpasswd:"), "{e}");
    }
}
