//! Consumers and their credentials, indexed for authentication plugins.
//!
//! [`Directory::new`] turns the routing table's consumers into lookup maps once per table:
//! key-auth keys by their SHA-256, basic-auth credentials by user name, JWT credentials by
//! their key (with the public key parsed). A plugin sees the directory through the request
//! context's `consumers`, narrowed to the consumers its own namespace may see.

mod compare;

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use crate::config::{Consumer, Credential, JwtAlgorithm};

pub use compare::constant_time_eq;

/// `X-Consumer-ID`: the authenticated consumer's id, sent upstream.
pub const CONSUMER_ID: HeaderName = HeaderName::from_static("x-consumer-id");
/// `X-Consumer-Username`.
pub const CONSUMER_USERNAME: HeaderName = HeaderName::from_static("x-consumer-username");
/// `X-Consumer-Custom-ID`.
pub const CONSUMER_CUSTOM_ID: HeaderName = HeaderName::from_static("x-consumer-custom-id");
/// `X-Credential-Identifier`: the id of the credential that authenticated the request.
pub const CREDENTIAL_IDENTIFIER: HeaderName = HeaderName::from_static("x-credential-identifier");
/// `X-Anonymous-Consumer: true` when an authentication plugin fell back to its `anonymous`.
pub const ANONYMOUS_CONSUMER: HeaderName = HeaderName::from_static("x-anonymous-consumer");
/// `X-Consumer-Groups`: the consumer's ACL groups, sent by `acl`.
pub const CONSUMER_GROUPS: HeaderName = HeaderName::from_static("x-consumer-groups");

/// Headers only Weir may send upstream: removed from every client request when the table has
/// consumers or authentication plugins, so an upstream can trust them.
pub const IDENTITY_HEADERS: [HeaderName; 6] = [
    CONSUMER_ID,
    CONSUMER_USERNAME,
    CONSUMER_CUSTOM_ID,
    CREDENTIAL_IDENTIFIER,
    ANONYMOUS_CONSUMER,
    CONSUMER_GROUPS,
];

/// Removes every [`IDENTITY_HEADERS`] header a client sent.
pub fn remove_identity_headers(headers: &mut HeaderMap) {
    // One pass of cheap name comparisons instead of six hashed removals: most requests carry
    // none of them.
    // `_` counts as `-`: CGI-style servers (WSGI, Rack, PHP) read `X_Consumer_ID` as
    // `X-Consumer-ID`.
    let forged = |k: &HeaderName| {
        let k = k.as_str().as_bytes();
        k.len() > 2
            && (k[1] == b'-' || k[1] == b'_')
            && IDENTITY_HEADERS.iter().any(|n| {
                n.as_str().len() == k.len()
                    && n.as_str()
                        .bytes()
                        .zip(k)
                        .all(|(a, &b)| a == b || (a == b'-' && b == b'_'))
            })
    };
    if headers.keys().any(forged) {
        let names: Vec<HeaderName> = headers.keys().filter(|k| forged(k)).cloned().collect();
        for name in names {
            headers.remove(name);
        }
    }
}

/// A consumer as authentication and ACL plugins need it.
#[derive(Debug)]
pub struct ConsumerEntry {
    /// The consumer's id.
    pub id: Arc<str>,
    /// `username`, if any.
    pub username: Option<String>,
    /// `custom_id`, if any.
    pub custom_id: Option<String>,
    /// The namespace that may see it (`None`: every plugin).
    pub namespace: Option<String>,
    /// ACL groups.
    pub groups: Vec<String>,
}

/// A key-auth credential in the index (found by the key's digest): its consumer and id.
struct Key {
    consumer: usize,
    id: Arc<str>,
}

/// A basic-auth credential in the index (no `Debug`: it holds a digest and a salt).
struct Secret {
    consumer: usize,
    id: Arc<str>,
    salt: Vec<u8>,
    /// SHA-256 of salt and password.
    digest: [u8; 32],
}

/// A JWT credential with its verification key ready.
pub struct JwtCredential {
    consumer: usize,
    /// The credential's id.
    pub id: Arc<str>,
    /// The algorithm tokens must use.
    pub algorithm: JwtAlgorithm,
    /// The HMAC secret or the parsed public key.
    pub key: jsonwebtoken::DecodingKey,
    /// `HS*`: the secret read as base64, for a `jwt` plugin with `secret_is_base64` (Kong's
    /// option); `None` when the secret is not base64 or the algorithm takes a public key.
    /// Decoded here once per table: the plugin cannot read the secret back out of `key`.
    pub base64_key: Option<jsonwebtoken::DecodingKey>,
}

impl std::fmt::Debug for JwtCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtCredential")
            .field("id", &self.id)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// Every consumer of a routing table, indexed for lookups.
#[derive(Default)]
pub struct Directory {
    consumers: Vec<ConsumerEntry>,
    by_id: HashMap<Arc<str>, usize>,
    /// Consumers by username and by custom id (`mtls-auth`'s `consumer_by`), in table order.
    by_name: HashMap<String, Vec<usize>>,
    by_custom_id: HashMap<String, Vec<usize>>,
    keys: HashMap<[u8; 32], Vec<Key>>,
    basic: HashMap<String, Vec<Secret>>,
    jwt: HashMap<String, Vec<JwtCredential>>,
    /// Whether client-sent identity headers are removed (the table authenticates someone).
    pub strips_identity_headers: bool,
}

/// Counts only: the index holds digests and keys.
impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("consumers", &self.consumers.len())
            .field("keys", &self.keys.len())
            .field("basic", &self.basic.len())
            .field("jwt", &self.jwt.len())
            .finish_non_exhaustive()
    }
}

impl Directory {
    /// Indexes a validated table's consumers. `authenticates` says whether any plugin of the
    /// table authenticates (then identity headers are stripped even without consumers).
    pub fn new(consumers: &[Consumer], authenticates: bool) -> Directory {
        let mut d = Directory {
            strips_identity_headers: authenticates || !consumers.is_empty(),
            ..Directory::default()
        };
        for (i, c) in consumers.iter().enumerate() {
            let id: Arc<str> = c.id.as_str().into();
            d.by_id.insert(id.clone(), i);
            if let Some(u) = &c.username {
                d.by_name.entry(u.clone()).or_default().push(i);
            }
            if let Some(c) = &c.custom_id {
                d.by_custom_id.entry(c.clone()).or_default().push(i);
            }
            d.consumers.push(ConsumerEntry {
                id,
                username: c.username.clone(),
                custom_id: c.custom_id.clone(),
                namespace: c.namespace.clone(),
                groups: c.groups.clone(),
            });
            for cred in &c.credentials {
                let cred_id: Arc<str> = cred.id().into();
                match cred {
                    Credential::KeyAuth { key_sha256, .. } => {
                        let Some(digest) = parse_digest(key_sha256) else {
                            continue;
                        };
                        d.keys.entry(digest).or_default().push(Key {
                            consumer: i,
                            id: cred_id,
                        });
                    }
                    Credential::BasicAuth {
                        username,
                        password_hash,
                        ..
                    } => {
                        let Some((salt, digest)) = parse_password_hash(password_hash) else {
                            continue;
                        };
                        d.basic.entry(username.clone()).or_default().push(Secret {
                            consumer: i,
                            id: cred_id,
                            salt,
                            digest,
                        });
                    }
                    Credential::Jwt { key, secret, .. } => {
                        let Ok((algorithm, decoding)) = jwt_key(cred) else {
                            continue;
                        };
                        let base64_key = secret
                            .as_deref()
                            .filter(|_| algorithm.is_hmac())
                            .and_then(base64_secret);
                        d.jwt.entry(key.clone()).or_default().push(JwtCredential {
                            consumer: i,
                            id: cred_id,
                            algorithm,
                            key: decoding,
                            base64_key,
                        });
                    }
                }
            }
        }
        d
    }

    /// A consumer by id, whoever asks (the consumer a request was authenticated as).
    pub fn get(&self, id: &str) -> Option<&ConsumerEntry> {
        self.by_id.get(id).map(|&i| &self.consumers[i])
    }

    /// The directory as a plugin of `namespace` sees it.
    pub fn view<'a>(&'a self, namespace: Option<&'a str>) -> View<'a> {
        View {
            dir: self,
            namespace,
        }
    }
}

/// The consumers one plugin may see: those of its namespace and those without one (all of
/// them for a plugin without a namespace).
#[derive(Clone, Copy)]
pub struct View<'a> {
    dir: &'a Directory,
    namespace: Option<&'a str>,
}

/// A consumer and the credential that identified it.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a> {
    /// The consumer.
    pub consumer: &'a ConsumerEntry,
    /// The credential's id.
    pub credential: &'a Arc<str>,
}

impl<'a> View<'a> {
    /// Whether the plugin may see `c` (its namespace's, or one without a namespace).
    pub fn can_see(&self, c: &ConsumerEntry) -> bool {
        crate::config::namespaces_meet(self.namespace, c.namespace.as_deref())
    }

    /// The consumer whose key-auth key is `key` (compared by SHA-256: equal digests are what a
    /// lookup reveals, never the key).
    pub fn by_key(&self, key: &[u8]) -> Option<Found<'a>> {
        let digest: [u8; 32] = Sha256::digest(key).into();
        let dir = self.dir;
        dir.keys.get(&digest)?.iter().find_map(|s| {
            let consumer = &dir.consumers[s.consumer];
            self.can_see(consumer).then_some(Found {
                consumer,
                credential: &s.id,
            })
        })
    }

    /// The consumer with the basic-auth credential `username`/`password`; the password's hash
    /// is compared in constant time. An unknown user name costs a hash too, so answer times do
    /// not tell which user names exist.
    pub fn by_password(&self, username: &str, password: &[u8]) -> Option<Found<'a>> {
        let dir = self.dir;
        let digest = |salt: &[u8]| -> [u8; 32] {
            let mut h = Sha256::new();
            h.update(salt);
            h.update(password);
            h.finalize().into()
        };
        let Some(candidates) = dir.basic.get(username) else {
            std::hint::black_box(digest(b"weir: no such user"));
            return None;
        };
        candidates.iter().find_map(|s| {
            let consumer = &dir.consumers[s.consumer];
            if !self.can_see(consumer) {
                return None;
            }
            constant_time_eq(&digest(&s.salt), &s.digest).then_some(Found {
                consumer,
                credential: &s.id,
            })
        })
    }

    /// The JWT credentials whose key is `key` that the plugin may see, with their consumers, in
    /// table order. Several namespaces may register one issuer: a plugin that sees them all
    /// tries each, so another namespace's credential cannot shadow the right one.
    pub fn jwt(
        &self,
        key: &str,
    ) -> impl Iterator<Item = (&'a JwtCredential, &'a ConsumerEntry)> + '_ {
        let dir = self.dir;
        dir.jwt.get(key).into_iter().flatten().filter_map(move |j| {
            let consumer = &dir.consumers[j.consumer];
            self.can_see(consumer).then_some((j, consumer))
        })
    }

    /// The consumer whose username (`custom_id` false) or custom id is `name`: for a plugin
    /// with a namespace, the first of its namespace's; for one without, the only one in the
    /// table (usernames are anyone's to choose in their namespace, so two is no answer).
    pub fn by_name(&self, name: &str, custom_id: bool) -> Option<&'a ConsumerEntry> {
        let dir = self.dir;
        let index = if custom_id {
            &dir.by_custom_id
        } else {
            &dir.by_name
        };
        let mut found = index.get(name)?.iter().map(|&i| &dir.consumers[i]);
        match self.namespace {
            Some(ns) => found.find(|c| c.namespace.as_deref() == Some(ns)),
            None => match (found.next(), found.next()) {
                (Some(c), None) => Some(c),
                _ => None,
            },
        }
    }

    /// A consumer by id; for a plugin with a namespace also by `<namespace>/<name>` or by
    /// username (Kong's `anonymous` takes an id or a username). A plugin without a namespace
    /// sees every namespace, where a username is anyone's to choose: it finds by id only.
    pub fn find(&self, name: &str) -> Option<&'a ConsumerEntry> {
        let dir = self.dir;
        let by_id = |id: &str| dir.by_id.get(id).map(|&i| &dir.consumers[i]);
        let found = match self.namespace {
            None => by_id(name),
            Some(ns) => by_id(&format!("{ns}/{name}"))
                .or_else(|| by_id(name))
                .or_else(|| {
                    dir.consumers.iter().find(|c| {
                        c.username.as_deref() == Some(name) && c.namespace.as_deref() == Some(ns)
                    })
                }),
        };
        found.filter(|c| self.can_see(c))
    }
}

/// Sets the identity headers for `consumer` on a request going upstream (replacing any).
pub fn set_identity_headers(
    headers: &mut HeaderMap,
    consumer: &ConsumerEntry,
    credential: Option<&str>,
    anonymous: bool,
) {
    // A value is replaced or removed, never left over from a consumer set earlier in the
    // request (two authentication plugins).
    let mut set = |name: HeaderName, value: Option<&str>| {
        match value.and_then(|v| HeaderValue::from_str(v).ok()) {
            Some(v) => headers.insert(name, v),
            None => headers.remove(name),
        };
    };
    set(CONSUMER_ID, Some(&consumer.id));
    set(CONSUMER_USERNAME, consumer.username.as_deref());
    set(CONSUMER_CUSTOM_ID, consumer.custom_id.as_deref());
    set(CREDENTIAL_IDENTIFIER, credential);
    if anonymous {
        headers.insert(ANONYMOUS_CONSUMER, HeaderValue::from_static("true"));
    } else {
        headers.remove(ANONYMOUS_CONSUMER);
    }
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let bytes = parse_hex(hex)?;
    bytes.try_into().ok()
}

fn parse_hex(hex: &str) -> Option<Vec<u8>> {
    // `from_str_radix` alone would take a sign (`+f`).
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Splits `sha256$<salt hex>$<digest hex>`.
fn parse_password_hash(s: &str) -> Option<(Vec<u8>, [u8; 32])> {
    let mut parts = s.split('$');
    if parts.next()? != "sha256" {
        return None;
    }
    let salt = parse_hex(parts.next()?)?;
    let digest = parse_digest(parts.next()?)?;
    parts.next().is_none().then_some((salt, digest))
}

/// Checks a credential's format (the table's validation, and the controller's report on the
/// Consumer): the error names the field and never shows a secret.
pub fn check_credential(cred: &Credential) -> Result<(), (&'static str, String)> {
    match cred {
        Credential::KeyAuth { key_sha256, .. } => match parse_digest(key_sha256) {
            Some(_) => Ok(()),
            None => Err((
                "key_sha256",
                "must be 64 hexadecimal digits (the SHA-256 of the key)".into(),
            )),
        },
        Credential::BasicAuth {
            username,
            password_hash,
            ..
        } => {
            if username.is_empty() || username.contains(':') {
                return Err((
                    "username",
                    "must be non-empty and hold no ':' (RFC 7617)".into(),
                ));
            }
            match parse_password_hash(password_hash) {
                Some(_) => Ok(()),
                None => Err((
                    "password_hash",
                    "must be sha256$<salt hex>$<64 hex digits>".into(),
                )),
            }
        }
        Credential::Jwt { key, .. } => {
            if key.is_empty() {
                return Err(("key", "must not be empty".into()));
            }
            jwt_key(cred).map(drop)
        }
    }
}

/// An HMAC secret given in base64, as Kong decodes it: either alphabet (Kong 3 takes the URL
/// one, older versions both), padding optional, trailing bits ignored. An empty result is no
/// key (HMAC would accept it).
fn base64_secret(secret: &str) -> Option<jsonwebtoken::DecodingKey> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine as _;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(true),
    );
    let standard = secret.replace('-', "+").replace('_', "/");
    let bytes = LENIENT.decode(standard).ok()?;
    (!bytes.is_empty()).then(|| jsonwebtoken::DecodingKey::from_secret(&bytes))
}

/// The verification key of a JWT credential.
fn jwt_key(
    cred: &Credential,
) -> Result<(JwtAlgorithm, jsonwebtoken::DecodingKey), (&'static str, String)> {
    let Credential::Jwt {
        algorithm,
        secret,
        rsa_public_key,
        ..
    } = cred
    else {
        unreachable!("jwt_key is called for JWT credentials");
    };
    let alg = *algorithm;
    if alg.is_hmac() {
        let secret = secret
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or(("secret", format!("{} needs a secret", alg.as_str())))?;
        return Ok((
            alg,
            jsonwebtoken::DecodingKey::from_secret(secret.as_bytes()),
        ));
    }
    let pem = rsa_public_key.as_deref().ok_or((
        "rsa_public_key",
        format!("{} needs a PEM public key", alg.as_str()),
    ))?;
    let parsed = if matches!(alg, JwtAlgorithm::ES256 | JwtAlgorithm::ES384) {
        jsonwebtoken::DecodingKey::from_ec_pem(pem.as_bytes())
    } else {
        jsonwebtoken::DecodingKey::from_rsa_pem(pem.as_bytes())
    };
    parsed.map(|k| (alg, k)).map_err(|_| {
        (
            "rsa_public_key",
            format!("is not a PEM public key for {}", alg.as_str()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{hash_key, hash_password};

    fn consumer(id: &str, ns: Option<&str>, creds: Vec<Credential>) -> Consumer {
        Consumer {
            id: id.into(),
            username: Some(id.rsplit('/').next().unwrap().into()),
            custom_id: None,
            namespace: ns.map(Into::into),
            groups: vec![],
            credentials: creds,
        }
    }

    fn key(id: &str, key: &str) -> Credential {
        Credential::KeyAuth {
            id: id.into(),
            key_sha256: hash_key(key),
        }
    }

    #[test]
    fn keys_are_found_by_digest_within_the_namespace() {
        let d = Directory::new(
            &[
                consumer("a/alice", Some("a"), vec![key("a/k1", "s3cret")]),
                consumer("b/bob", Some("b"), vec![key("b/k1", "s3cret")]),
                consumer("carol", None, vec![key("k3", "other")]),
            ],
            false,
        );
        let found = d.view(Some("a")).by_key(b"s3cret").unwrap();
        assert_eq!(&*found.consumer.id, "a/alice");
        assert_eq!(&**found.credential, "a/k1");
        assert_eq!(
            &*d.view(Some("b")).by_key(b"s3cret").unwrap().consumer.id,
            "b/bob"
        );
        // A cluster-wide plugin sees all; the first in table order wins.
        assert_eq!(
            &*d.view(None).by_key(b"s3cret").unwrap().consumer.id,
            "a/alice"
        );
        assert!(d.view(Some("c")).by_key(b"s3cret").is_none());
        // A consumer without a namespace is visible to every plugin.
        assert!(d.view(Some("c")).by_key(b"other").is_some());
        assert!(d.view(Some("a")).by_key(b"s3cre").is_none());
    }

    #[test]
    fn passwords_are_checked_against_their_salted_hash() {
        let cred = Credential::BasicAuth {
            id: "a/pw".into(),
            username: "alice".into(),
            password_hash: hash_password(b"salt-1", "open sesame"),
        };
        check_credential(&cred).unwrap();
        let d = Directory::new(&[consumer("a/alice", Some("a"), vec![cred])], false);
        let v = d.view(Some("a"));
        assert_eq!(
            &*v.by_password("alice", b"open sesame").unwrap().consumer.id,
            "a/alice"
        );
        assert!(v.by_password("alice", b"open sesame!").is_none());
        assert!(v.by_password("alice", b"").is_none());
        assert!(v.by_password("bob", b"open sesame").is_none());
        assert!(d
            .view(Some("b"))
            .by_password("alice", b"open sesame")
            .is_none());
    }

    #[test]
    fn anonymous_is_found_by_id_name_or_username() {
        let d = Directory::new(
            &[
                consumer("a/guest", Some("a"), vec![]),
                consumer("b/guest", Some("b"), vec![]),
            ],
            false,
        );
        assert_eq!(&*d.view(Some("b")).find("guest").unwrap().id, "b/guest");
        assert_eq!(&*d.view(Some("a")).find("a/guest").unwrap().id, "a/guest");
        assert!(d.view(Some("a")).find("b/guest").is_none());
        assert!(d.view(Some("c")).find("guest").is_none());
        assert_eq!(&*d.view(None).find("b/guest").unwrap().id, "b/guest");
        // Without a namespace, a username could be anyone's: only ids count.
        assert!(d.view(None).find("guest").is_none());
    }

    #[test]
    fn bad_credentials_name_their_field_without_the_secret() {
        let bad = [
            (
                Credential::KeyAuth {
                    id: "k".into(),
                    key_sha256: "abc".into(),
                },
                "key_sha256",
            ),
            (
                Credential::KeyAuth {
                    id: "k".into(),
                    key_sha256: "+f".repeat(32),
                },
                "key_sha256",
            ),
            (
                Credential::BasicAuth {
                    id: "b".into(),
                    username: "a:b".into(),
                    password_hash: hash_password(b"s", "p"),
                },
                "username",
            ),
            (
                Credential::Jwt {
                    id: "j".into(),
                    key: "iss".into(),
                    algorithm: JwtAlgorithm::HS256,
                    secret: None,
                    rsa_public_key: None,
                },
                "secret",
            ),
            (
                Credential::Jwt {
                    id: "j".into(),
                    key: "iss".into(),
                    algorithm: JwtAlgorithm::RS256,
                    secret: None,
                    rsa_public_key: Some(
                        "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n".into(),
                    ),
                },
                "rsa_public_key",
            ),
        ];
        for (cred, field) in bad {
            let (f, m) = check_credential(&cred).unwrap_err();
            assert_eq!(f, field, "{m}");
            assert!(!m.contains("nope"), "{m}");
        }
    }

    #[test]
    fn every_forged_identity_header_is_removed() {
        let mut h = HeaderMap::new();
        h.insert("x-other", HeaderValue::from_static("kept"));
        h.append(CONSUMER_USERNAME, HeaderValue::from_static("admin"));
        h.append(CONSUMER_USERNAME, HeaderValue::from_static("root"));
        h.insert(CONSUMER_GROUPS, HeaderValue::from_static("admins"));
        h.insert(ANONYMOUS_CONSUMER, HeaderValue::from_static("false"));
        h.insert("x_consumer_id", HeaderValue::from_static("demo/root"));
        h.insert("x-consumer_custom-id", HeaderValue::from_static("1"));
        h.insert("x_other", HeaderValue::from_static("kept"));
        remove_identity_headers(&mut h);
        assert_eq!(h.len(), 2, "{h:?}");
        assert_eq!(h["x_other"], "kept");
        assert_eq!(h["x-other"], "kept");
    }

    #[test]
    fn identity_headers_replace_what_was_there() {
        let d = Directory::new(&[consumer("a/alice", Some("a"), vec![])], false);
        let mut h = HeaderMap::new();
        h.insert(CREDENTIAL_IDENTIFIER, HeaderValue::from_static("forged"));
        h.insert(ANONYMOUS_CONSUMER, HeaderValue::from_static("true"));
        set_identity_headers(&mut h, d.get("a/alice").unwrap(), Some("a/k"), false);
        assert_eq!(h[&CONSUMER_ID], "a/alice");
        assert_eq!(h[&CONSUMER_USERNAME], "alice");
        assert_eq!(h[&CREDENTIAL_IDENTIFIER], "a/k");
        assert!(h.get(ANONYMOUS_CONSUMER).is_none());
        set_identity_headers(&mut h, d.get("a/alice").unwrap(), None, true);
        assert!(h.get(CREDENTIAL_IDENTIFIER).is_none());
        assert_eq!(h[&ANONYMOUS_CONSUMER], "true");
    }
}
