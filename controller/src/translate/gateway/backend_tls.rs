//! BackendTLSPolicy: how Weir speaks TLS to the Services Gateway API routes send to. A policy
//! targeting a Service (or one of its ports, by `sectionName`) turns the backends of routes to
//! it into TLS ones: the CA certificates of its ConfigMaps (key `ca.crt`), or the well-known
//! public CAs (`System`), `hostname` as the server name sent and verified, or, with
//! `subjectAltNames` (`Hostname` ones), any one of those names verified instead.
//!
//! A policy that cannot be applied (a missing ConfigMap, no CA at all) is reported on the
//! policy, and the routes' shares to that Service answer 500 rather than go out in plain text.

use std::collections::BTreeSet;

use weir_crds::gateway::{BackendTLSPolicy, ParentReference};
use weir_proxy::config::ServiceTls;

use super::status::{Cond, PolicyAncestorStatus, PolicyStatus};
use super::CONTROLLER_NAME;
use crate::problem::Reason;
use crate::store::{Key, Kind};
use crate::translate::{obj, Translator};

/// A policy's TLS settings for one Service port (with a label that tells its variants apart:
/// the policy, and the Gateway whose client certificate is presented), or the policy that
/// cannot be applied.
pub(super) type Applied = Result<(String, ServiceTls), Key>;

impl Translator<'_> {
    /// The BackendTLSPolicy for port `port` (named `port_name`) of Service `namespace/name`:
    /// one naming that port before one naming the whole Service, then the oldest. Records the
    /// Gateways of the route being translated as the policy's ancestors.
    pub(super) fn backend_tls(
        &mut self,
        namespace: &str,
        name: &str,
        port_name: Option<&str>,
    ) -> Option<Applied> {
        let store = self.store;
        let conflicts = self.tls_conflicts.get_or_insert_with(|| conflicts(store));
        let (mut candidates, lost): (Vec<(&Key, &BackendTLSPolicy)>, Vec<_>) = store
            .backend_tls_policies
            .iter()
            .filter(|(k, p)| {
                k.namespace == namespace
                    && p.spec.target_refs.iter().any(|t| {
                        t.group.is_empty()
                            && t.kind == "Service"
                            && t.name == name
                            && t.section_name
                                .as_deref()
                                .is_none_or(|s| Some(s) == port_name)
                    })
            })
            .partition(|(k, _)| !conflicts.contains(*k));
        for (key, policy) in lost {
            let m = "another BackendTLSPolicy, older (or first by name), targets the same \
                     Service and sectionName"
                .to_string();
            self.record_ancestors(key, policy, vec![Cond::no("Accepted", "Conflicted", m)]);
        }
        let specific = |p: &BackendTLSPolicy| {
            p.spec
                .target_refs
                .iter()
                .any(|t| t.name == name && t.section_name.is_some())
        };
        candidates.sort_by(|a, b| {
            let ts = |p: &BackendTLSPolicy| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            specific(b.1)
                .cmp(&specific(a.1))
                .then(ts(a.1).cmp(&ts(b.1)))
                .then(a.0.cmp(b.0))
        });
        let (key, policy) = candidates.first().copied()?;
        let key = key.clone();
        let result = self.policy_tls(&key, policy);
        let conditions = match &result {
            Ok(_) => vec![
                Cond::yes("Accepted", "Accepted"),
                Cond::yes("ResolvedRefs", "ResolvedRefs"),
            ],
            Err((reason, m)) => vec![
                Cond::no("Accepted", "NoValidCACertificate", m.clone()),
                Cond::no("ResolvedRefs", reason, m.clone()),
            ],
        };
        self.record_ancestors(&key, policy, conditions);
        Some(match result {
            Ok(mut tls) => {
                // The first of the route's Gateways that has a client certificate presents
                // it (a route served by several Gateways with different ones gets one of
                // them: its backends are shared).
                let client = self
                    .route_gateways
                    .iter()
                    .find_map(|g| Some((g, self.backend_client_certs.get(g)?)));
                let label = match client {
                    Some((g, cert)) => {
                        tls.client_certificate = Some(cert.clone());
                        format!("{key}+client-of={g}")
                    }
                    None => key.to_string(),
                };
                Ok((label, tls))
            }
            Err(_) => Err(key),
        })
    }

    /// Records `conditions` for the Gateways of the route being translated among `policy`'s
    /// ancestors (once per Gateway).
    fn record_ancestors(&mut self, key: &Key, policy: &BackendTLSPolicy, conditions: Vec<Cond>) {
        let gateways = self.route_gateways.clone();
        let status = self
            .gateway_status
            .backend_tls_policies
            .entry(key.to_string())
            .or_insert_with(|| PolicyStatus {
                observed_generation: policy.metadata.generation,
                ancestors: Vec::new(),
            });
        let known: BTreeSet<Key> = status
            .ancestors
            .iter()
            .map(|a| {
                Key::new(
                    a.ancestor_ref.namespace.clone().unwrap_or_default(),
                    a.ancestor_ref.name.clone(),
                )
            })
            .collect();
        for g in gateways {
            if !known.contains(&g) {
                status.ancestors.push(PolicyAncestorStatus {
                    ancestor_ref: ParentReference {
                        group: Some(weir_crds::gateway::GROUP.into()),
                        kind: Some("Gateway".into()),
                        namespace: Some(g.namespace.clone()),
                        name: g.name.clone(),
                        section_name: None,
                        port: None,
                    },
                    controller_name: CONTROLLER_NAME,
                    conditions: conditions.clone(),
                });
            }
        }
    }

    /// The TLS settings a policy asks for, or (reason, message) when it cannot be applied
    /// (reported on the policy once).
    fn policy_tls(
        &mut self,
        key: &Key,
        policy: &BackendTLSPolicy,
    ) -> Result<ServiceTls, (&'static str, String)> {
        let v = &policy.spec.validation;
        let me = obj(Kind::BackendTLSPolicy, key);
        let fail = |this: &mut Self, field: &str, reason: &'static str, m: String| {
            if this.checked_policies.insert(key.clone()) {
                this.problem(
                    me.clone(),
                    Reason::InvalidBackendTls,
                    field.to_string(),
                    format!("{m}; routes to its Services answer 500"),
                );
            }
            Err((reason, m))
        };
        if let Err(m) = weir_proxy::validate::check_host(&v.hostname) {
            return fail(self, "spec.validation.hostname", "InvalidKind", m);
        }
        let mut names = Vec::new();
        for (i, san) in v.subject_alt_names.iter().enumerate() {
            let field = format!("spec.validation.subjectAltNames[{i}]");
            match (san.type_.as_str(), san.hostname.as_deref()) {
                ("Hostname", Some(h)) if weir_proxy::validate::check_host(h).is_ok() => {
                    names.push(h.to_string())
                }
                ("Hostname", h) => {
                    let m = format!("hostname {:?} is not a DNS name", h.unwrap_or_default());
                    return fail(self, &field, "InvalidKind", m);
                }
                ("URI", _) => match san.uri.as_deref() {
                    Some(u)
                        if u.contains("://") && weir_proxy::upstream::check_san_uri(u).is_ok() =>
                    {
                        names.push(u.to_string())
                    }
                    u => {
                        let m = format!("uri {:?} is not an absolute URI", u.unwrap_or_default());
                        return fail(self, &field, "InvalidKind", m);
                    }
                },
                (other, _) => {
                    let m = format!(
                        "subject alternative names of type {other:?} are not served by this \
                         version of Weir (Hostname and URI are)"
                    );
                    return fail(self, &field, "InvalidKind", m);
                }
            }
        }
        let ca = match (
            v.well_known_ca_certificates.as_deref(),
            v.ca_certificate_refs.as_slice(),
        ) {
            (Some("System"), []) => None,
            (Some(other), []) => {
                let m = format!("wellKnownCACertificates {other:?} is not System");
                return fail(
                    self,
                    "spec.validation.wellKnownCACertificates",
                    "InvalidKind",
                    m,
                );
            }
            (None, []) => {
                let m = "neither caCertificateRefs nor wellKnownCACertificates".to_string();
                return fail(self, "spec.validation", "InvalidCACertificateRef", m);
            }
            (Some(_), _) => {
                let m = "caCertificateRefs and wellKnownCACertificates both set".to_string();
                return fail(self, "spec.validation", "InvalidKind", m);
            }
            (None, refs) => {
                let mut pem = String::new();
                for (i, r) in refs.iter().enumerate() {
                    let field = format!("spec.validation.caCertificateRefs[{i}]");
                    if !r.group.is_empty() || r.kind != "ConfigMap" {
                        let m = format!("{}/{} is not a ConfigMap", r.group, r.kind);
                        return fail(self, &field, "InvalidKind", m);
                    }
                    let cm = Key::new(key.namespace.as_str(), r.name.as_str());
                    match self.config_map_ca(&cm) {
                        Ok(p) => {
                            pem.push_str(p);
                            pem.push('\n');
                        }
                        Err(m) => return fail(self, &field, "InvalidCACertificateRef", m),
                    }
                }
                Some(pem)
            }
        };
        let tls = ServiceTls {
            ca_certificates: ca,
            sni: Some(v.hostname.clone()),
            subject_alt_names: names,
            ..Default::default()
        };
        // What the proxy would refuse (a PEM that does not parse) is this policy's problem,
        // not the Service's: checked with the proxy's own construction.
        let probe = weir_proxy::config::Service {
            protocol: weir_proxy::config::UpstreamProtocol::Https,
            tls: Some(Box::new(tls.clone())),
            ..crate::translate::backend::default_service()
        };
        if let Err((field, m)) = weir_proxy::upstream::check_service_tls(&probe, false) {
            let (field, reason) = if field == "tls.ca_certificates" {
                (
                    "spec.validation.caCertificateRefs",
                    "InvalidCACertificateRef",
                )
            } else {
                ("spec.validation", "InvalidKind")
            };
            return fail(self, field, reason, m);
        }
        Ok(tls)
    }
}

/// The BackendTLSPolicies that lose a conflict: of those naming the same Service and
/// `sectionName` (or both none), all but the oldest (then first by namespace and name).
fn conflicts(store: &crate::store::Store) -> BTreeSet<Key> {
    let mut first: std::collections::BTreeMap<(String, &str, Option<&str>), (Option<_>, &Key)> =
        std::collections::BTreeMap::new();
    let mut lost = BTreeSet::new();
    for (key, p) in &store.backend_tls_policies {
        let ts = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        for t in p
            .spec
            .target_refs
            .iter()
            .filter(|t| t.group.is_empty() && t.kind == "Service")
        {
            let target = (
                key.namespace.clone(),
                t.name.as_str(),
                t.section_name.as_deref(),
            );
            match first.get_mut(&target) {
                None => {
                    first.insert(target, (ts, key));
                }
                Some(winner) if (ts, key) < (winner.0, winner.1) => {
                    lost.insert(winner.1.clone());
                    *winner = (ts, key);
                }
                Some(_) => {
                    lost.insert(key.clone());
                }
            }
        }
    }
    lost
}
