//! `mtls-auth`: identify the consumer by the client certificate of the TLS handshake (Kong's
//! schema: `ca_certificates`, `consumer_by`, `skip_consumer_lookup`, `anonymous`,
//! `default_consumer`, `allow_partial_chain`, `revocation_check_mode`).
//!
//! The handshake only collects the certificate (the host's certificate asks for one); the
//! chain is checked here against the plugin's own CAs, so that each route can trust its own.
//! The certificate's subject common name is then matched against the consumers' usernames
//! and custom ids, so rate limits and ACLs apply per client certificate.
//!
//! In a routing table `ca_certificates` holds PEM text and `crls` the CAs' revocation
//! lists; the controller fills both from the Secrets a Plugin names.

use std::sync::Arc;

use rustls::pki_types::UnixTime;
use serde::Deserialize;

use super::{unauthorized, Anonymous};
use crate::pipeline::RequestCtx;
use crate::plugins::{parse_config, Flow, Handled, Plugin, RequestHead, Simple};
use crate::tls::client_cert::{common_name, failure, ChainCheck};

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(crate) const FACTORY: Simple = Simple {
    name: "mtls-auth",
    priority: 1600,
    build,
};

/// Kong's answer to a request over a connection without a client certificate.
const NO_CERTIFICATE: &str = "No required TLS certificate was sent";
/// Kong's answer to a certificate that does not verify or names no consumer.
const FAILED: &str = "TLS certificate failed verification";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    ca_certificates: Vec<String>,
    #[serde(default)]
    crls: Vec<String>,
    #[serde(default = "both")]
    consumer_by: Vec<ConsumerBy>,
    #[serde(default)]
    skip_consumer_lookup: bool,
    #[serde(default)]
    anonymous: Option<String>,
    #[serde(default)]
    default_consumer: Option<String>,
    #[serde(default)]
    allow_partial_chain: bool,
    #[serde(default)]
    revocation_check_mode: RevocationCheck,
    // Kong's settings for its caches and for fetching OCSP answers and CRLs over HTTP: Weir
    // checks every request against lists it already holds, so they have no effect.
    #[serde(default, rename = "cache_ttl")]
    _cache_ttl: Option<serde_json::Value>,
    #[serde(default, rename = "cert_cache_ttl")]
    _cert_cache_ttl: Option<serde_json::Value>,
    #[serde(default, rename = "http_timeout")]
    _http_timeout: Option<serde_json::Value>,
    #[serde(default, rename = "send_ca_dn")]
    _send_ca_dn: Option<serde_json::Value>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum ConsumerBy {
    Username,
    CustomId,
}

fn both() -> Vec<ConsumerBy> {
    vec![ConsumerBy::Username, ConsumerBy::CustomId]
}

/// Kong's `revocation_check_mode`, over the revocation lists the plugin holds.
#[derive(Deserialize, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum RevocationCheck {
    /// No revocation check.
    Skip,
    /// A certificate a list revokes is refused; one no list speaks for passes.
    #[default]
    IgnoreCaError,
    /// A certificate of the chain no list speaks for is refused too.
    Strict,
}

struct MtlsAuth {
    chain: ChainCheck,
    consumer_by: Vec<ConsumerBy>,
    skip_lookup: bool,
    anonymous: Anonymous,
    default_consumer: Option<String>,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    if conf.ca_certificates.is_empty() {
        return Err("ca_certificates: must hold at least one CA certificate".into());
    }
    let ca = conf.ca_certificates.join("\n");
    let crl = (!conf.crls.is_empty() && conf.revocation_check_mode != RevocationCheck::Skip)
        .then(|| conf.crls.join("\n"));
    if conf.revocation_check_mode == RevocationCheck::Strict && crl.is_none() {
        return Err("revocation_check_mode: STRICT needs the CAs' revocation lists (crls; ca.crl in the CA Secrets)".into());
    }
    let strict = conf.revocation_check_mode == RevocationCheck::Strict;
    let chain = ChainCheck::from_pem(&ca, crl.as_deref(), None, strict, conf.allow_partial_chain)
        .map_err(|(field, m)| {
        let field = if field == "crl" {
            "crls"
        } else {
            "ca_certificates"
        };
        format!("{field}: {m}")
    })?;
    if let Some(d) = &conf.default_consumer {
        if d.trim().is_empty() {
            return Err("default_consumer: must name a consumer (its id or username)".into());
        }
    }
    Ok(Arc::new(MtlsAuth {
        chain,
        consumer_by: conf.consumer_by,
        skip_lookup: conf.skip_consumer_lookup,
        anonymous: Anonymous::new(conf.anonymous)?,
        default_consumer: conf.default_consumer,
    }))
}

impl MtlsAuth {
    /// The consumer a certificate with common name `cn` is: by username, then by custom id,
    /// as `consumer_by` orders them, else `default_consumer`.
    fn consumer(&self, ctx: &RequestCtx, cn: Option<&str>) -> Option<Arc<str>> {
        let view = ctx.consumers();
        let matched = cn.and_then(|cn| {
            self.consumer_by
                .iter()
                .find_map(|by| view.by_name(cn, *by == ConsumerBy::CustomId))
        });
        let found = match (matched, &self.default_consumer) {
            (Some(c), _) => Some(c),
            (None, Some(d)) => view.find(d),
            (None, None) => None,
        };
        found.map(|c| c.id.clone())
    }
}

impl Plugin for MtlsAuth {
    fn authenticates(&self) -> bool {
        true
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        if self.anonymous.already_done(ctx) {
            return Flow::Continue.into();
        }
        let refusal = match ctx.client_cert.clone() {
            None => unauthorized(NO_CERTIFICATE, None),
            Some(peer) => {
                let verified = match peer.chain.split_first() {
                    Some((leaf, rest)) => self
                        .chain
                        .verify(leaf, rest, UnixTime::now())
                        .map_err(|e| failure(&e)),
                    None => Err("no certificate"),
                };
                match verified {
                    Err(why) => {
                        tracing::debug!(subject = %peer.subject, why, "mtls-auth: certificate refused");
                        unauthorized(FAILED, None)
                    }
                    Ok(()) if self.skip_lookup => return Flow::Continue.into(),
                    Ok(()) => {
                        let cn = common_name(&peer.chain[0]);
                        match self.consumer(ctx, cn.as_deref()) {
                            Some(consumer) => {
                                let credential: Arc<str> = peer.subject.as_str().into();
                                ctx.authenticate(req, consumer, Some(credential));
                                return Flow::Continue.into();
                            }
                            None => unauthorized(FAILED, None),
                        }
                    }
                }
            }
        };
        self.anonymous.fallback(ctx, req, refusal).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::auth::testing::{self, head, message, run};
    use crate::tls::client_cert::tests::{ca, client, crl, Issuer};
    use crate::tls::PeerCert;
    use rustls::pki_types::CertificateDer;
    use serde_json::json;

    fn ctx(chain: &[CertificateDer<'static>]) -> RequestCtx {
        let alice = testing::consumer("alice", Some("A-1"), vec![]);
        let mut c = testing::ctx(vec![alice, testing::guest()], Some("ns"));
        c.client_cert = (!chain.is_empty()).then(|| {
            Arc::new(PeerCert {
                verified: Ok(()),
                subject: "CN=test".into(),
                issuer: String::new(),
                escaped_pem: None,
                chain: chain.to_vec(),
            })
        });
        c
    }

    fn plugin(cas: &[&Issuer], extra: serde_json::Value) -> Arc<dyn Plugin> {
        let mut config =
            json!({"ca_certificates": cas.iter().map(|c| c.pem()).collect::<Vec<_>>()});
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        build(&config).unwrap()
    }

    /// The consumer the chain authenticates as, or the refusal's message.
    fn outcome(p: &dyn Plugin, chain: &[CertificateDer<'static>]) -> Result<String, String> {
        let (mut c, mut r) = (ctx(chain), head("/x", &[]));
        match run(p, &mut c, &mut r) {
            None => Ok(c.consumer.as_deref().unwrap_or("-").to_string()),
            Some(e) => {
                assert_eq!(e.status, 401);
                Err(message(&e))
            }
        }
    }

    #[test]
    fn certificates_map_to_consumers_by_username_then_custom_id() {
        let root = ca("Root CA", None);
        let p = plugin(&[&root], json!({}));
        let alice = client(&root, "alice", 1, false);
        let by_id = client(&root, "A-1", 2, false);
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&alice)),
            Ok("ns/alice".into())
        );
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&by_id)),
            Ok("ns/alice".into())
        );
        let (mut c, mut r) = (ctx(std::slice::from_ref(&alice)), head("/x", &[]));
        assert!(run(&*p, &mut c, &mut r).is_none());
        assert_eq!(r.headers["x-consumer-username"], "alice");
        assert_eq!(c.credential.as_deref(), Some("CN=test"));
        // Only custom ids: the username no longer matches.
        let p = plugin(&[&root], json!({"consumer_by": ["custom_id"]}));
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&alice)),
            Err(FAILED.into())
        );
        assert_eq!(outcome(&*p, &[by_id]), Ok("ns/alice".into()));
        // No consumer matching: refused, or the default consumer.
        let nobody = client(&root, "nobody", 3, false);
        let p = plugin(&[&root], json!({}));
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&nobody)),
            Err(FAILED.into())
        );
        let p = plugin(&[&root], json!({"default_consumer": "guest"}));
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&nobody)),
            Ok("ns/guest".into())
        );
        // skip_consumer_lookup: a valid certificate is enough.
        let p = plugin(&[&root], json!({"skip_consumer_lookup": true}));
        assert_eq!(outcome(&*p, &[nobody]), Ok("-".into()));
    }

    #[test]
    fn a_cluster_wide_plugin_refuses_a_name_two_namespaces_use() {
        let root = ca("Root CA", None);
        let p = plugin(&[&root], json!({}));
        let alice = client(&root, "alice", 1, false);
        let consumer = |ns: &str| crate::config::Consumer {
            id: format!("{ns}/alice"),
            username: Some("alice".into()),
            custom_id: None,
            namespace: Some(ns.into()),
            groups: vec![],
            credentials: vec![],
        };
        let run_as = |consumers| {
            let mut c = testing::ctx(consumers, None);
            c.client_cert = ctx(std::slice::from_ref(&alice)).client_cert;
            let mut r = head("/x", &[]);
            (
                run(&*p, &mut c, &mut r).map(|e| e.status.as_u16()),
                c.consumer,
            )
        };
        let (refused, who) = run_as(vec![consumer("a")]);
        assert_eq!((refused, who.as_deref()), (None, Some("a/alice")));
        // Another namespace's "alice" makes the name ambiguous: nobody is picked.
        let (refused, who) = run_as(vec![consumer("a"), consumer("b")]);
        assert_eq!((refused, who), (Some(401), None));
    }

    #[test]
    fn missing_foreign_and_expired_certificates_are_refused() {
        let root = ca("Root CA", None);
        let other = ca("Other CA", None);
        let p = plugin(&[&root], json!({}));
        assert_eq!(outcome(&*p, &[]), Err(NO_CERTIFICATE.into()));
        let foreign = client(&other, "alice", 1, false);
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&foreign)),
            Err(FAILED.into())
        );
        let expired = client(&root, "alice", 2, true);
        assert_eq!(outcome(&*p, &[expired]), Err(FAILED.into()));
        // Each plugin trusts its own CAs.
        let p = plugin(&[&root, &other], json!({}));
        assert_eq!(outcome(&*p, &[foreign]), Ok("ns/alice".into()));
        // anonymous takes the refused.
        let p = plugin(&[&root], json!({"anonymous": "guest"}));
        assert_eq!(outcome(&*p, &[]), Ok("ns/guest".into()));
    }

    #[test]
    fn partial_chains_and_revocation_as_configured() {
        let root = ca("Root CA", None);
        let mid = ca("Intermediate CA", Some(&root));
        let leaf = client(&mid, "alice", 5, false);
        let chain = [leaf.clone(), mid.der().clone()];
        // Trusting the intermediate only: a chain that stops there is partial.
        let p = plugin(&[&mid], json!({}));
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&leaf)),
            Err(FAILED.into())
        );
        let p = plugin(&[&mid], json!({"allow_partial_chain": true}));
        assert_eq!(
            outcome(&*p, std::slice::from_ref(&leaf)),
            Ok("ns/alice".into())
        );
        assert_eq!(
            outcome(&*plugin(&[&root], json!({})), &chain),
            Ok("ns/alice".into())
        );
        // Listing the intermediate beside the root: a client that sends only its certificate
        // still reaches the root.
        let both = plugin(&[&mid, &root], json!({}));
        assert_eq!(
            outcome(&*both, std::slice::from_ref(&leaf)),
            Ok("ns/alice".into())
        );

        let revoked = client(&root, "alice", 9, false);
        let crls = json!([crl(&root, &[9])]);
        for (mode, revoked_ok, unlisted_ok) in [
            ("SKIP", true, true),
            ("IGNORE_CA_ERROR", false, true),
            ("STRICT", false, false),
        ] {
            let p = plugin(
                &[&root],
                json!({"crls": crls, "revocation_check_mode": mode}),
            );
            assert_eq!(
                outcome(&*p, std::slice::from_ref(&revoked)).is_ok(),
                revoked_ok,
                "{mode}"
            );
            // The intermediate has no list: its certificates' status is unknown.
            assert_eq!(outcome(&*p, &chain).is_ok(), unlisted_ok, "{mode}");
        }
    }

    #[test]
    fn configuration_errors_name_the_field() {
        let root = ca("Root CA", None);
        for (config, field) in [
            (json!({}), "ca_certificates"),
            (json!({"ca_certificates": []}), "ca_certificates"),
            (json!({"ca_certificates": ["not PEM"]}), "ca_certificates"),
            (
                json!({"ca_certificates": [root.pem()], "crls": ["x"]}),
                "crls",
            ),
            (
                json!({"ca_certificates": [root.pem()], "revocation_check_mode": "STRICT"}),
                "revocation_check_mode",
            ),
            (
                json!({"ca_certificates": [root.pem()], "consumer_by": ["email"]}),
                "consumer_by",
            ),
            (
                json!({"ca_certificates": [root.pem()], "anonymous": ""}),
                "anonymous",
            ),
        ] {
            let e = build(&config).err().unwrap();
            assert!(e.contains(field), "{config}: {e}");
        }
        // Kong's cache and fetch settings are accepted.
        let kong = json!({"ca_certificates": [root.pem()], "cache_ttl": 60, "cert_cache_ttl": 60000,
            "http_timeout": 30000, "send_ca_dn": false});
        assert!(build(&kong).is_ok());
    }
}
