//! Consumer resources → the routing table's consumers, their credentials, and the entries of
//! consumer-scoped plugins.
//!
//! A Consumer `ns/name` becomes the consumer `ns/name` (visible to the plugins of `ns` and to
//! ClusterPlugins). Each name in `spec.credentials` is a Secret of the same namespace labelled
//! `weir.dev/credential` with the credential's kind:
//!
//! - `key-auth`: key `key`, stored as its SHA-256;
//! - `basic-auth`: keys `username` and `password`, the password salted and hashed with a salt
//!   derived from the credential id and the Secret's uid, so that translating again gives the
//!   same table;
//! - `jwt`: keys `key`, `algorithm` (default `HS256`), and `secret` (HS*) or `rsa_public_key`
//!   (RS*, ES*).
//!
//! A credential that cannot be used is reported on the Consumer (`spec.credentials[i]`) and
//! left out; the Consumer keeps its other credentials. Two consumers of a namespace proving the
//! same thing (same key, same basic-auth username, same JWT key): the first by namespace/name
//! keeps it. Problems name Secrets and keys, never what the Secret holds.
//!
//! The Consumer's `weir.dev/plugins` annotation names consumer-scoped plugins. A Consumer whose
//! annotations or plugins are broken is left out altogether: serving it without a plugin meant
//! for it (a stricter rate limit, a ban) would fail open. So is a Consumer naming a plugin that
//! cannot be consumer-scoped (`key-auth`, `basic-auth`, `jwt`, `acl`: a consumer's copy could
//! replace the route's). What a Consumer names never changes a route's plugins unless it is
//! served and names a Plugin of its own namespace that an Ingress or Service of that namespace
//! names too (pairing, see `plugins.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Secret;
use sha2::{Digest, Sha256};
use weir_crds::annotations as a;
use weir_crds::CREDENTIAL_LABEL;
use weir_proxy::config::{
    self, hash_key, hash_password, Credential, JwtAlgorithm, NOT_CONSUMER_SCOPED,
};

use super::annotations;
use super::plugins::PluginRef;
use super::{obj, Translator};
use crate::problem::Reason;
use crate::store::{Key, Kind};

/// The algorithm of a JWT credential without an `algorithm` key (Kong's default).
const DEFAULT_JWT_ALGORITHM: JwtAlgorithm = JwtAlgorithm::HS256;

/// What a problem says when it keeps a whole Consumer out of the table.
const LEFT_OUT: &str = "; the Consumer is left out (its credentials do not authenticate)";

/// The consumer that first proved something (a kind of credential and what identifies it) in
/// a namespace.
struct Claim {
    consumer: Key,
    secret: String,
    index: usize,
}

/// (namespace, credential kind, key hash / username / JWT key) → its first claim.
type Claims = HashMap<(String, &'static str, String), Claim>;

/// The salt of a basic-auth credential's password hash: 16 bytes of SHA-256 over a fixed tag,
/// the credential id and the Secret's uid. Deterministic, so an unchanged Secret gives an
/// unchanged table (no push); the uid makes it differ between clusters and when the Secret is
/// recreated.
pub(super) fn basic_auth_salt(credential_id: &str, uid: Option<&str>) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"weir basic-auth salt v1\0");
    h.update(credential_id.as_bytes());
    h.update(b"\0");
    h.update(uid.unwrap_or("").as_bytes());
    let digest = h.finalize();
    let mut salt = [0u8; 16];
    salt.copy_from_slice(&digest[..16]);
    salt
}

/// A Secret key as text: `stringData` (manifest files) over `data`. The error names the key,
/// never the value.
fn text(secret: &Secret, skey: &Key, key: &str) -> Result<String, String> {
    optional_text(secret, skey, key)?.ok_or_else(|| format!("Secret {skey} has no key {key:?}"))
}

fn optional_text(secret: &Secret, skey: &Key, key: &str) -> Result<Option<String>, String> {
    if let Some(t) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
        return Ok(Some(t.clone()));
    }
    match secret.data.as_ref().and_then(|d| d.get(key)) {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes.0.clone())
            .map(Some)
            .map_err(|_| format!("Secret {skey} key {key:?} is not UTF-8 text")),
    }
}

fn non_empty(skey: &Key, key: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        Err(format!("Secret {skey} key {key:?} is empty"))
    } else {
        Ok(())
    }
}

fn algorithm_names() -> String {
    JwtAlgorithm::ALL
        .iter()
        .map(|a| a.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The credential a Secret holds, or why it cannot be used (naming the Secret and the key).
fn credential(secret: &Secret, skey: &Key) -> Result<Credential, String> {
    let id = skey.to_string();
    let label = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CREDENTIAL_LABEL))
        .map(String::as_str);
    let cred = match label {
        Some("key-auth") => {
            let key = text(secret, skey, "key")?;
            non_empty(skey, "key", &key)?;
            Credential::KeyAuth {
                id,
                key_sha256: hash_key(&key),
            }
        }
        Some("basic-auth") => {
            let username = text(secret, skey, "username")?;
            let password = text(secret, skey, "password")?;
            if username.is_empty() || username.contains(':') {
                return Err(format!(
                    "Secret {skey} key \"username\" must be non-empty and hold no ':' (RFC 7617)"
                ));
            }
            non_empty(skey, "password", &password)?;
            let salt = basic_auth_salt(&id, secret.metadata.uid.as_deref());
            Credential::BasicAuth {
                id,
                username,
                password_hash: hash_password(&salt, &password),
            }
        }
        Some("jwt") => {
            let key = text(secret, skey, "key")?;
            non_empty(skey, "key", &key)?;
            let algorithm = match optional_text(secret, skey, "algorithm")? {
                None => DEFAULT_JWT_ALGORITHM,
                Some(name) => JwtAlgorithm::ALL
                    .into_iter()
                    .find(|a| a.as_str() == name.trim())
                    .ok_or_else(|| {
                        format!(
                            "Secret {skey} key \"algorithm\" is not one of {}",
                            algorithm_names()
                        )
                    })?,
            };
            let needed = if algorithm.is_hmac() {
                "secret"
            } else {
                "rsa_public_key"
            };
            let value = text(secret, skey, needed)
                .map_err(|m| format!("{m} ({} needs it)", algorithm.as_str()))?;
            non_empty(skey, needed, &value)?;
            let (hmac_secret, public_key) = if algorithm.is_hmac() {
                (Some(value), None)
            } else {
                (None, Some(value))
            };
            Credential::Jwt {
                id,
                key,
                algorithm,
                secret: hmac_secret,
                rsa_public_key: public_key,
            }
        }
        None => {
            return Err(format!(
                "Secret {skey} lacks the label {CREDENTIAL_LABEL} (key-auth, basic-auth or jwt)"
            ))
        }
        Some(weir_crds::CONFIG_SECRET_LABEL_VALUE) => {
            return Err(format!(
                "Secret {skey} has the label {CREDENTIAL_LABEL}=\"true\", which marks a Plugin configuration; a credential's label names its kind: key-auth, basic-auth or jwt"
            ))
        }
        Some(other) => {
            return Err(format!(
                "Secret {skey} has the label {CREDENTIAL_LABEL}={other:?}, not key-auth, basic-auth or jwt"
            ))
        }
    };
    // The proxy's own checks (a JWT public key must parse, …). The messages are ours, so that
    // nothing the Secret holds can reach a problem.
    weir_proxy::consumers::check_credential(&cred).map_err(|(field, _)| match (&cred, field) {
        (Credential::Jwt { algorithm, .. }, "rsa_public_key") => {
            let kind = match algorithm {
                JwtAlgorithm::ES256 => "an EC P-256 public key",
                JwtAlgorithm::ES384 => "an EC P-384 public key",
                _ => "an RSA public key",
            };
            format!(
                "Secret {skey} key \"rsa_public_key\" is not a PEM public key for {} ({kind})",
                algorithm.as_str()
            )
        }
        (_, field) => {
            let key = match field {
                "key_sha256" => "key",
                "password_hash" => "password",
                other => other,
            };
            format!("Secret {skey} key {key:?} is rejected by the proxy's credential check")
        }
    })?;
    Ok(cred)
}

/// Why a value cannot be sent upstream in a header (`X-Consumer-Username`, …), if it cannot.
fn header_problem(value: &str, in_list: bool) -> Option<&'static str> {
    if value.is_empty() {
        Some("must not be empty")
    } else if http::HeaderValue::from_str(value).is_err() {
        Some("must not hold control characters or non-ASCII characters")
    } else if in_list && value.contains(',') {
        Some("must not hold a comma (groups are sent comma-separated)")
    } else {
        None
    }
}

impl Translator<'_> {
    /// Every Consumer of the watched namespaces, then the consumer-only entries: of the Plugins
    /// no Ingress or Service of their namespace names (those are paired with the routes and
    /// services instead), and of every ClusterPlugin a Consumer names.
    pub(super) fn consumers(&mut self) {
        let store = self.store;
        let named_by_routes = self.plugins_named_by_routes();
        let mut claims = Claims::new();
        for (key, c) in &store.consumers {
            if self.in_scope(&key.namespace) {
                self.consumer(key, c, &mut claims);
            }
        }
        let alone: Vec<(PluginRef, Vec<Key>)> = self
            .consumer_scopes
            .iter()
            .filter(|(id, (r, _))| {
                matches!(r, PluginRef::Cluster(_)) || !named_by_routes.contains(*id)
            })
            .map(|(_, scope)| scope.clone())
            .collect();
        for (r, consumers) in alone {
            // Only served Consumers are in the scopes, and they named accepted plugins only.
            if let Ok(p) = self.check(&r) {
                for c in &consumers {
                    let entry = p.entry(Some(&c.namespace), None, None, Some(&c.to_string()));
                    self.config.plugins.push(entry);
                }
            }
        }
    }

    /// The ids of the Plugins that Ingresses of this class or Services of their own namespace
    /// name: a Plugin that Consumers name too is paired with those routes and services instead
    /// of applying to the consumers everywhere. Read from the annotations as written, so a
    /// broken Ingress does not turn a route+consumer plugin into a consumer-wide one.
    /// ClusterPlugins are never paired, so they are not listed.
    fn plugins_named_by_routes(&self) -> BTreeSet<String> {
        let store = self.store;
        let ingresses = store
            .ingresses
            .iter()
            .filter(|(k, i)| self.in_scope(&k.namespace) && self.owns(i))
            .map(|(k, i)| (k, i.metadata.annotations.as_ref()));
        let services = store
            .services
            .iter()
            .filter(|(k, _)| self.in_scope(&k.namespace))
            .map(|(k, s)| (k, s.metadata.annotations.as_ref()));
        let mut out = BTreeSet::new();
        for (key, ann) in ingresses.chain(services) {
            for name in annotations::plugin_names_of(ann) {
                if let Some(PluginRef::Namespaced(p)) = self.plugin_ref(&key.namespace, &name) {
                    if p.namespace == key.namespace {
                        out.insert(PluginRef::Namespaced(p).id());
                    }
                }
            }
        }
        out
    }

    fn consumer(&mut self, key: &Key, c: &weir_crds::Consumer, claims: &mut Claims) {
        let me = obj(Kind::Consumer, key);
        self.checked.insert(me.clone());
        let mut serve = true;
        let plugins_field = format!("metadata.annotations[{:?}]", a::PLUGINS);

        let empty = BTreeMap::new();
        let parsed = annotations::consumer(c.metadata.annotations.as_ref().unwrap_or(&empty));
        let ann = match self.read_annotations(&me, "a Consumer", parsed, LEFT_OUT) {
            Some(a) => a,
            None => {
                serve = false;
                Default::default()
            }
        };
        let named: Vec<PluginRef> = ann
            .plugins
            .iter()
            .filter_map(|n| self.plugin_ref(&key.namespace, n))
            .collect();
        if let Err((reason, m)) = self.resolve_names(&key.namespace, &ann.plugins) {
            self.problem(
                me.clone(),
                reason,
                plugins_field.clone(),
                format!("{m}{LEFT_OUT}"),
            );
            serve = false;
        }
        // Kong's `no_consumer`: a consumer's own authentication or acl would replace the
        // route's (the proxy refuses such entries).
        for r in &named {
            let Ok(p) = self.check(r) else { continue };
            if NOT_CONSUMER_SCOPED.contains(&p.kind()) {
                let m = format!(
                    "{} runs {:?}, which cannot be scoped to a consumer (it decides who the consumer is or whether it may pass); name it on an Ingress or a Service instead{LEFT_OUT}",
                    r.object(),
                    p.kind()
                );
                self.problem(
                    me.clone(),
                    Reason::PluginNotAccepted,
                    plugins_field.clone(),
                    m,
                );
                serve = false;
            }
        }

        let username = c.spec.username.clone().unwrap_or_else(|| key.name.clone());
        let mut identity: Vec<(String, &str, bool)> =
            vec![("spec.username".into(), &username, false)];
        if let Some(id) = &c.spec.custom_id {
            identity.push(("spec.customId".into(), id, false));
        }
        for (i, g) in c.spec.groups.iter().enumerate() {
            identity.push((format!("spec.groups[{i}]"), g, true));
        }
        for (field, value, in_list) in identity {
            if let Some(why) = header_problem(value, in_list) {
                self.problem(
                    me.clone(),
                    Reason::InvalidConsumer,
                    field,
                    format!("{why}{LEFT_OUT}"),
                );
                serve = false;
            }
        }

        let credentials = self.credentials(key, c, claims, serve);
        let id = key.to_string();
        if serve {
            // Only a served Consumer scopes plugins: one that is left out must not take a
            // plugin off a route.
            for r in named {
                let (_, consumers) = self
                    .consumer_scopes
                    .entry(r.id())
                    .or_insert_with(|| (r.clone(), Vec::new()));
                if !consumers.contains(key) {
                    consumers.push(key.clone());
                }
            }
            self.config.consumers.push(config::Consumer {
                id,
                username: Some(username),
                custom_id: c.spec.custom_id.clone(),
                namespace: Some(key.namespace.clone()),
                groups: c.spec.groups.clone(),
                credentials,
            });
        }
    }

    /// The usable credentials of a Consumer; the others are reported. `claim`: whether the
    /// Consumer is served (only then do its credentials take what they prove).
    fn credentials(
        &mut self,
        key: &Key,
        c: &weir_crds::Consumer,
        claims: &mut Claims,
        claim: bool,
    ) -> Vec<Credential> {
        let me = obj(Kind::Consumer, key);
        let ns = key.namespace.as_str();
        let mut out = Vec::new();
        for (i, name) in c.spec.credentials.iter().enumerate() {
            let field = format!("spec.credentials[{i}]");
            let skey = Key::new(ns, name.as_str());
            if let Some(j) = c.spec.credentials[..i].iter().position(|n| n == name) {
                let m = format!(
                    "Secret {skey} is already listed at spec.credentials[{j}]; this entry is ignored"
                );
                self.problem(me.clone(), Reason::Conflict, field, m);
                continue;
            }
            let found = match self.store.secrets.get(&skey) {
                None => Err(format!(
                    "Secret {skey} not found (a credential Secret needs the label {CREDENTIAL_LABEL} set to key-auth, basic-auth or jwt)"
                )),
                Some(secret) => credential(secret, &skey),
            };
            let cred = match found {
                Ok(cred) => cred,
                Err(m) => {
                    let m = format!("{m}; this credential is left out");
                    self.problem(me.clone(), Reason::InvalidSecret, field, m);
                    continue;
                }
            };
            if !claim {
                continue;
            }
            let (what, proof) = match &cred {
                Credential::KeyAuth { key_sha256, .. } => ("key", key_sha256.clone()),
                Credential::BasicAuth { username, .. } => ("username", username.clone()),
                Credential::Jwt { key, .. } => ("key", key.clone()),
            };
            let kind = cred.kind();
            let claim_key = (ns.to_string(), kind, proof);
            if let Some(w) = claims.get(&claim_key) {
                let m = if w.consumer == *key {
                    format!(
                        "Secret {skey} is the same {kind} credential as Secret {ns}/{} (spec.credentials[{}]); this one is left out",
                        w.secret, w.index
                    )
                } else if w.secret == *name {
                    format!(
                        "Secret {skey} is already a credential of Consumer {}, which comes first by namespace/name; it is left out here",
                        w.consumer
                    )
                } else {
                    format!(
                        "Consumer {} (Secret {ns}/{}) already has a {kind} credential with the same {what}, and comes first by namespace/name; this credential is left out",
                        w.consumer, w.secret
                    )
                };
                self.problem(me.clone(), Reason::Conflict, field, m);
                continue;
            }
            claims.insert(
                claim_key,
                Claim {
                    consumer: key.clone(),
                    secret: name.clone(),
                    index: i,
                },
            );
            out.push(cred);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::translate::{translate, Options, Translation};

    fn run(yaml: &str) -> Translation {
        let store = Store::from_manifests(yaml);
        translate(
            &store,
            &Options::default(),
            &weir_proxy::Registry::builtin(),
        )
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    const BASIC: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: alice-basic, namespace: shop, uid: 6f1c1a52-0000-4000-8000-000000000001, labels: {weir.dev/credential: basic-auth}}\n\
        stringData: {username: alice, password: open-sesame}\n---\n\
        apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: alice, namespace: shop}\nspec: {credentials: [alice-basic]}\n";

    #[test]
    fn the_basic_auth_salt_is_deterministic() {
        let a = basic_auth_salt("shop/alice-basic", Some("uid-1"));
        assert_eq!(a, basic_auth_salt("shop/alice-basic", Some("uid-1")));
        assert_ne!(a, basic_auth_salt("shop/alice-basic", Some("uid-2")));
        assert_ne!(a, basic_auth_salt("shop/bob-basic", Some("uid-1")));
        assert_ne!(a, basic_auth_salt("shop/alice-basic", None));
        // Pinned: another derivation would rehash every password on upgrade (a new table).
        assert_eq!(
            hex(&basic_auth_salt("shop/alice-basic", None)),
            "8198f51b5fe876ce0aa6ba56932eaaee"
        );

        // The same store gives the same table, hash included.
        let (t1, t2) = (run(BASIC), run(BASIC));
        assert!(t1.problems.is_empty(), "{:#?}", t1.problems);
        assert_eq!(t1.config, t2.config);
        assert_eq!(t1.config.hash, t2.config.hash);
        let Credential::BasicAuth {
            id, password_hash, ..
        } = &t1.config.consumers[0].credentials[0]
        else {
            panic!("a basic-auth credential");
        };
        assert_eq!(id, "shop/alice-basic");
        let salt = basic_auth_salt(id, Some("6f1c1a52-0000-4000-8000-000000000001"));
        assert_eq!(password_hash, &hash_password(&salt, "open-sesame"));
        assert!(!password_hash.contains("open-sesame"));
        // Recreating the Secret (new uid) changes the salt.
        let t3 = run(&BASIC.replace("000000000001", "000000000002"));
        assert_ne!(t1.config.consumers, t3.config.consumers);
    }

    /// Bad credential Secrets of every kind, each holding a value marked `SECRET-n`: every one
    /// is reported, and no report shows any of the values.
    #[test]
    fn problems_never_show_what_a_secret_holds() {
        let secret = |name: &str, label: Option<&str>, data: &str| {
            let labels = label.map_or(String::new(), |l| {
                format!(", labels: {{weir.dev/credential: {l}}}")
            });
            format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: ns{labels}}}\nstringData: {data}\n---\n")
        };
        let mut yaml = String::new();
        let bad = [
            // (Secret name, label, data, what the problem must name)
            ("ka-no-key", Some("key-auth"), "{apikey: SECRET-01}", "has no key \"key\""),
            ("ka-no-label", None, "{key: SECRET-02}", "lacks the label"),
            ("ka-config", Some("\"true\""), "{key: SECRET-03}", "marks a Plugin configuration"),
            ("ka-odd-label", Some("oauth2"), "{key: SECRET-04}", "\"oauth2\", not key-auth"),
            ("ba-colon", Some("basic-auth"), "{username: 'SECRET-05:x', password: SECRET-06}", "key \"username\""),
            ("ba-no-password", Some("basic-auth"), "{username: SECRET-07}", "has no key \"password\""),
            ("jwt-alg", Some("jwt"), "{key: SECRET-08, algorithm: SECRET-09, secret: SECRET-10}", "key \"algorithm\" is not one of"),
            ("jwt-pem", Some("jwt"), "{key: SECRET-11, algorithm: RS256, rsa_public_key: \"-----BEGIN PUBLIC KEY-----\\nSECRET-12\\n-----END PUBLIC KEY-----\\n\"}", "not a PEM public key for RS256"),
            ("jwt-es-pem", Some("jwt"), "{key: SECRET-13, algorithm: ES384, rsa_public_key: SECRET-14}", "not a PEM public key for ES384"),
            ("jwt-no-secret", Some("jwt"), "{key: SECRET-15}", "has no key \"secret\" (HS256 needs it)"),
            ("jwt-empty-secret", Some("jwt"), "{key: SECRET-16, algorithm: HS512, secret: ''}", "key \"secret\" is empty"),
        ];
        for (name, label, data, _) in bad {
            yaml.push_str(&secret(name, label, data));
        }
        // Conflicts: the same key, username and JWT key held by two consumers.
        for (owner, n) in [("a", "1"), ("b", "2")] {
            yaml.push_str(&secret(
                &format!("dup-ka-{owner}"),
                Some("key-auth"),
                "{key: SECRET-20}",
            ));
            yaml.push_str(&secret(
                &format!("dup-ba-{owner}"),
                Some("basic-auth"),
                &format!("{{username: SECRET-21, password: SECRET-2{n}}}"),
            ));
            yaml.push_str(&secret(
                &format!("dup-jwt-{owner}"),
                Some("jwt"),
                &format!(
                    "{{key: SECRET-24, secret: SECRET-2{}}}",
                    4 + n.parse::<u8>().unwrap()
                ),
            ));
        }
        let names: Vec<&str> = bad.iter().map(|b| b.0).collect();
        yaml.push_str(&format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {{name: a, namespace: ns}}\nspec: {{credentials: [{}, dup-ka-a, dup-ba-a, dup-jwt-a]}}\n---\n",
            names.join(", ")
        ));
        yaml.push_str("apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: b, namespace: ns}\nspec: {credentials: [dup-ka-b, dup-ba-b, dup-jwt-b]}\n");
        let t = run(&yaml);

        for (i, (name, _, _, expected)) in bad.iter().enumerate() {
            let p = t
                .problems
                .iter()
                .find(|p| p.field == format!("spec.credentials[{i}]"))
                .unwrap_or_else(|| panic!("{name} is reported: {:#?}", t.problems));
            assert_eq!(p.reason, Reason::InvalidSecret, "{p}");
            assert!(p.message.contains(&format!("Secret ns/{name}")), "{p}");
            assert!(p.message.contains(expected), "{name}: {p}");
        }
        let conflicts: Vec<_> = t
            .problems
            .iter()
            .filter(|p| p.reason == Reason::Conflict)
            .collect();
        assert_eq!(conflicts.len(), 3, "{conflicts:#?}");
        assert!(conflicts
            .iter()
            .all(|p| p.object.name == "b" && p.message.contains("Consumer ns/a")));

        let everything = format!(
            "{:?}\n{}",
            t.problems,
            t.problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(!everything.contains("SECRET-"), "{everything}");
        // The served credentials: consumer a keeps the three it won, b none.
        let kept: Vec<&str> = t
            .config
            .consumers
            .iter()
            .flat_map(|c| c.credentials.iter().map(|c| c.id()))
            .collect();
        assert_eq!(kept, ["ns/dup-ka-a", "ns/dup-ba-a", "ns/dup-jwt-a"]);
    }

    #[test]
    fn a_broken_consumer_plugin_keeps_the_consumer_out() {
        let t = run(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: k, namespace: ns, labels: {weir.dev/credential: key-auth}}\nstringData: {key: k1}\n---\n\
             apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: a, namespace: ns, annotations: {weir.dev/plugins: missing}}\nspec: {credentials: [k]}\n---\n\
             apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: b, namespace: ns}\nspec: {credentials: [k], groups: ['x,y']}\n",
        );
        assert!(t.config.consumers.is_empty(), "{:#?}", t.config.consumers);
        let problems: Vec<String> = t.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(
            problems[0].starts_with(
                "Consumer ns/a: metadata.annotations[\"weir.dev/plugins\"]: PluginNotFound"
            ),
            "{problems:#?}"
        );
        assert!(
            problems[1].starts_with("Consumer ns/b: spec.groups[0]: InvalidConsumer"),
            "{problems:#?}"
        );
        // Neither claimed the key: nothing conflicts, and both are checked for their conditions.
        assert_eq!(t.checked.len(), 2);
    }

    // Consumer-scoped plugins: what a Consumer names never takes a plugin off a route for
    // everyone else, except by pairing with a Plugin of its own namespace.

    fn plugin(ns: &str, name: &str, spec: &str) -> String {
        format!("apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n---\n")
    }

    fn cluster_plugin(name: &str, spec: &str) -> String {
        format!("apiVersion: weir.dev/v1alpha1\nkind: ClusterPlugin\nmetadata: {{name: {name}}}\nspec: {spec}\n---\n")
    }

    fn consumer(ns: &str, name: &str, plugins: &str, spec: &str) -> String {
        format!("apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {{name: {name}, namespace: {ns}, annotations: {{weir.dev/plugins: \"{plugins}\"}}}}\nspec: {spec}\n---\n")
    }

    /// An Ingress `ns/web` (host `ns.example.com`) naming `plugins`, with one path to Service
    /// `ns/web`, which names `service_plugins`.
    fn web(ns: &str, plugins: &str, service_plugins: &str) -> String {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web, namespace: {ns}, annotations: {{weir.dev/plugins: \"{plugins}\"}}}}\n\
             spec:\n  ingressClassName: weir\n  rules:\n  - host: {ns}.example.com\n    http:\n      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}, annotations: {{weir.dev/plugins: \"{service_plugins}\"}}}}\nspec: {{ports: [{{port: 80}}]}}\n---\n"
        )
    }

    /// The plugin entries as `(id, namespace)`, sorted; the table must compile.
    fn entries(t: &Translation) -> Vec<(String, Option<String>)> {
        weir_proxy::compile::Runtime::compile(t.config.clone(), &weir_proxy::Registry::builtin())
            .expect("the proxy accepts the table");
        let mut v: Vec<_> = t
            .config
            .plugins
            .iter()
            .map(|p| (p.id.clone(), p.namespace.clone()))
            .collect();
        v.sort();
        v
    }

    fn e(id: &str, ns: Option<&str>) -> (String, Option<String>) {
        (id.to_string(), ns.map(str::to_string))
    }

    fn served(t: &Translation) -> Vec<&str> {
        t.config.consumers.iter().map(|c| c.id.as_str()).collect()
    }

    const LIMIT: &str = "{plugin: rate-limiting, config: {minute: 10, policy: local}}";

    #[test]
    fn a_consumer_pairs_with_the_routes_of_its_plugins_namespace() {
        let yaml = [
            plugin("shop", "vip", LIMIT),
            plugin("other", "vip", LIMIT),
            consumer("shop", "alice", "vip", "{}"),
            web("shop", "vip", ""),
            web("other", "vip", ""),
        ]
        .concat();
        let t = run(&yaml);
        assert!(t.problems.is_empty(), "{:#?}", t.problems);
        // shop's route: alice's route+consumer entry replaces the plain one (Kong's pairing);
        // other's Plugin of the same name is another resource, untouched.
        assert_eq!(
            entries(&t),
            [
                e("other/vip@other/web/r0/p0", Some("other")),
                e("shop/vip@shop/web/r0/p0~shop/alice", Some("shop")),
            ]
        );
        let namespaces: Vec<_> = t
            .config
            .routes
            .iter()
            .map(|r| (r.id.as_str(), r.namespace.as_deref()))
            .collect();
        assert_eq!(
            namespaces,
            [
                ("other/web/r0/p0", Some("other")),
                ("shop/web/r0/p0", Some("shop"))
            ]
        );
    }

    #[test]
    fn a_consumer_may_not_name_an_authentication_or_acl_plugin() {
        for kind in NOT_CONSUMER_SCOPED {
            let spec = if kind == "acl" {
                "{plugin: acl, config: {allow: [staff]}}".to_string()
            } else if kind == "forward-auth" {
                "{plugin: forward-auth, config: {url: 'http://auth.example/check'}}".to_string()
            } else if kind == "mtls-auth" {
                let ca = std::fs::read_to_string(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../tests/fixtures/tls/ca.crt"
                ))
                .unwrap();
                let ca = serde_json::to_string(&ca).unwrap();
                format!("{{plugin: mtls-auth, config: {{ca_certificates: [{ca}]}}}}")
            } else {
                format!("{{plugin: {kind}}}")
            };
            for cluster in [false, true] {
                let resource = if cluster {
                    cluster_plugin("guard", &spec)
                } else {
                    plugin("shop", "guard", &spec)
                };
                let yaml = [
                    resource,
                    consumer("shop", "alice", "guard", "{groups: [staff]}"),
                    consumer("shop", "bob", "", "{groups: [staff]}"),
                    web("shop", "guard", ""),
                ]
                .concat();
                let t = run(&yaml);
                let what = format!("{kind} (cluster: {cluster})");
                assert_eq!(served(&t), ["shop/bob"], "{what}: alice is left out");
                let problems: Vec<String> = t.problems.iter().map(|p| p.to_string()).collect();
                assert_eq!(problems.len(), 1, "{what}: {problems:#?}");
                let p = &t.problems[0];
                assert_eq!(
                    (p.object.to_string().as_str(), p.reason, p.field.as_str()),
                    (
                        "Consumer shop/alice",
                        Reason::PluginNotAccepted,
                        "metadata.annotations[\"weir.dev/plugins\"]"
                    ),
                    "{what}"
                );
                assert!(
                    p.message.contains(&format!(
                        "runs {kind:?}, which cannot be scoped to a consumer"
                    )) && p.message.ends_with(LEFT_OUT),
                    "{what}: {p}"
                );
                // The route keeps its plugin, for everyone.
                let prefix = if cluster {
                    "cluster/guard"
                } else {
                    "shop/guard"
                };
                assert_eq!(
                    entries(&t),
                    [e(&format!("{prefix}@shop/web/r0/p0"), Some("shop"))],
                    "{what}"
                );
            }
        }
    }

    #[test]
    fn a_left_out_consumer_never_takes_a_plugin_off_a_route_or_a_service() {
        let yaml = [
            plugin("shop", "vip", LIMIT),
            plugin(
                "shop",
                "tag",
                "{plugin: correlation-id, config: {header_name: X-Tag}}",
            ),
            // Left out: a group that cannot be sent upstream, and a missing plugin.
            consumer("shop", "zed", "vip, tag", "{groups: ['a,b']}"),
            consumer("shop", "zoe", "vip, nosuch", "{}"),
            web("shop", "vip", "tag"),
        ]
        .concat();
        let t = run(&yaml);
        assert!(served(&t).is_empty());
        assert_eq!(t.problems.len(), 2, "{:#?}", t.problems);
        assert_eq!(
            entries(&t),
            [
                e("shop/tag@shop/web:80", Some("shop")),
                e("shop/vip@shop/web/r0/p0", Some("shop")),
            ]
        );

        // With a served Consumer too, only that one is paired.
        let t = run(&format!("{yaml}{}", consumer("shop", "alice", "vip", "{}")));
        assert_eq!(served(&t), ["shop/alice"]);
        assert_eq!(
            entries(&t),
            [
                e("shop/tag@shop/web:80", Some("shop")),
                e("shop/vip@shop/web/r0/p0~shop/alice", Some("shop")),
            ]
        );
    }

    /// Also: a ClusterPlugin's entries carry the namespace of the Ingress or Service attaching
    /// it; only its global entry has none.
    #[test]
    fn a_consumer_naming_a_cluster_plugin_gets_its_own_entry_and_no_route_loses_it() {
        let yaml = [
            cluster_plugin(
                "tag",
                "{plugin: correlation-id, config: {header_name: X-Tag}}",
            ),
            cluster_plugin(
                "limits",
                "{plugin: rate-limiting, global: true, config: {minute: 5, policy: local}}",
            ),
            consumer("team-a", "alice", "tag, limits", "{}"),
            web("team-a", "tag", ""),
            web("team-b", "tag", "limits"),
        ]
        .concat();
        let t = run(&yaml);
        assert!(t.problems.is_empty(), "{:#?}", t.problems);
        assert_eq!(
            entries(&t),
            [
                // The global entry alone has no namespace (every namespace's consumers).
                e("cluster/limits", None),
                // Attached by a Service or an Ingress: that object's namespace.
                e("cluster/limits@team-b/web:80", Some("team-b")),
                // Alice's own entries, applied on team-a's routes only.
                e("cluster/limits@~team-a/alice", Some("team-a")),
                e("cluster/tag@team-a/web/r0/p0", Some("team-a")),
                e("cluster/tag@team-b/web/r0/p0", Some("team-b")),
                e("cluster/tag@~team-a/alice", Some("team-a")),
            ]
        );
    }
}
