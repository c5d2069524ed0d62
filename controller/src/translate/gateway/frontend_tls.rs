//! A Gateway's `spec.tls.frontend`: the client certificates its HTTPS listeners ask for.
//!
//! A listener takes the `perPort` entry of its port, else `default`. Its CA certificates come
//! from ConfigMaps (key `ca.crt`), another namespace's only with a ReferenceGrant. The proxy
//! asks for a client certificate in the handshakes of that listener's certificate entry, so a
//! refused certificate fails the TLS connection itself (no HTTP answer is given).

use std::collections::BTreeMap;

use weir_crds::gateway::{FrontendTls, FrontendValidation, ObjectReference};
use weir_proxy::config::{ClientValidation, ClientValidationMode};

use super::listeners::RefError;
use super::status::Cond;
use super::GatewayEval;
use crate::problem::Reason;
use crate::store::{Key, Kind};
use crate::translate::{obj, Translator};

/// An HTTPS listener's client certificate validation, evaluated.
#[derive(Debug, Default)]
pub(super) struct FrontendEval {
    /// What its certificate asks of clients; `None`, no client certificate is asked for.
    pub validation: Option<ClientValidation>,
    /// `ResolvedRefs: False` when a CA reference cannot be used.
    pub resolved: Option<Cond>,
    /// `Accepted: False` when none can: the listener is not served.
    pub accepted: Option<Cond>,
}

/// Whether any of a Gateway's validations lets clients in without a valid certificate (the
/// Gateway's `InsecureFrontendValidationMode` condition).
pub(super) fn insecure_fallback(frontend: &FrontendTls) -> bool {
    std::iter::once(&frontend.default)
        .chain(frontend.per_port.iter().map(|p| &p.tls))
        .filter_map(|c| c.validation.as_ref())
        .any(|v| v.mode.as_deref() == Some("AllowInsecureFallback"))
}

impl Translator<'_> {
    /// Reports listeners that ask for client certificates while a listener of another
    /// Gateway, with the same host name on the shared TLS socket, asks for none or for
    /// others. One certificate serves a name there (the first Gateway's by name), so the
    /// other's routes answer 421 to requests for it: never served without the check they ask
    /// for, but not served either.
    pub(super) fn client_certificate_overlaps(&mut self, gateways: &[GatewayEval]) {
        let mut by_host: BTreeMap<&str, Vec<(usize, usize)>> = BTreeMap::new();
        for (g, gw) in gateways.iter().enumerate() {
            for (i, l) in gw.listeners.iter().enumerate() {
                if l.has_certificate {
                    by_host
                        .entry(l.hostname.as_deref().unwrap_or("*"))
                        .or_default()
                        .push((g, i));
                }
            }
        }
        for (host, listeners) in by_host {
            for &(g, i) in &listeners {
                let mine = &gateways[g].listeners[i];
                if mine.client_certificate.is_none() {
                    continue;
                }
                let other = listeners.iter().find(|&&(h, j)| {
                    h != g && gateways[h].listeners[j].client_certificate != mine.client_certificate
                });
                let Some(&(h, j)) = other else { continue };
                let (key, theirs) = (&gateways[g].key, &gateways[h].listeners[j]);
                let asks = match theirs.client_certificate {
                    None => "no client certificate",
                    Some(_) => "other client certificates",
                };
                self.problem(
                    obj(Kind::Gateway, key),
                    Reason::Conflict,
                    format!("spec.listeners[{i}].hostname"),
                    format!(
                        "host name {host:?} is also served by listener {} of Gateway {}, \
                         which asks for {asks}; Weir's TLS socket serves one certificate per \
                         name, and this listener's routes answer 421 where the other's is \
                         served: give each a host name of its own",
                        theirs.name, gateways[h].key
                    ),
                );
            }
        }
    }

    /// The client certificate validation of Gateway `key`'s HTTPS listeners on `port`.
    pub(super) fn frontend_validation(
        &mut self,
        key: &Key,
        frontend: &FrontendTls,
        port: i32,
    ) -> FrontendEval {
        let (field, config) = match frontend.per_port.iter().position(|p| p.port == port) {
            Some(i) => (
                format!("spec.tls.frontend.perPort[{i}].tls.validation"),
                &frontend.per_port[i].tls,
            ),
            None => (
                "spec.tls.frontend.default.validation".to_string(),
                &frontend.default,
            ),
        };
        let Some(v) = &config.validation else {
            return FrontendEval::default();
        };
        let mode = self.frontend_mode(key, v, &field);
        let mut pem = String::new();
        let mut bad: Option<(&'static str, String)> = None;
        for (i, r) in v.ca_certificate_refs.iter().enumerate() {
            match self.frontend_ca(key, r) {
                Ok(p) => {
                    pem.push_str(p);
                    pem.push('\n');
                }
                Err((reason, m)) => {
                    let field = format!("{field}.caCertificateRefs[{i}]");
                    self.problem(
                        obj(Kind::Gateway, key),
                        Reason::InvalidFrontendTls,
                        field,
                        m.clone(),
                    );
                    bad.get_or_insert((reason, m));
                }
            }
        }
        let resolved = bad.map(|(reason, m)| Cond::no("ResolvedRefs", reason, m));
        if pem.is_empty() {
            return FrontendEval {
                validation: None,
                resolved,
                accepted: Some(Cond::no(
                    "Accepted",
                    "NoValidCACertificate",
                    format!("no CA certificate of {field} can be used"),
                )),
            };
        }
        FrontendEval {
            validation: Some(ClientValidation {
                ca: pem,
                mode,
                ..Default::default()
            }),
            resolved,
            accepted: None,
        }
    }

    /// The proxy's mode for a validation's `mode`; an unknown one (which the CRD's enum
    /// keeps out) is reported and read as the strictest.
    fn frontend_mode(
        &mut self,
        key: &Key,
        v: &FrontendValidation,
        field: &str,
    ) -> ClientValidationMode {
        match v.mode.as_deref() {
            None | Some("AllowValidOnly") => ClientValidationMode::Require,
            Some("AllowInsecureFallback") => ClientValidationMode::OptionalNoCa,
            Some(other) => {
                self.problem(
                    obj(Kind::Gateway, key),
                    Reason::InvalidFrontendTls,
                    format!("{field}.mode"),
                    format!(
                        "{other:?} is neither AllowValidOnly nor AllowInsecureFallback; read as \
                         AllowValidOnly"
                    ),
                );
                ClientValidationMode::Require
            }
        }
    }

    /// The PEM CA certificates a `caCertificateRefs` entry of Gateway `key` names, or the
    /// listener condition reason and message of why it cannot be used.
    fn frontend_ca(&self, key: &Key, r: &ObjectReference) -> Result<&str, (&'static str, String)> {
        let ns = self
            .gateway_ref(key, r, "ConfigMap", "caCertificateRefs")
            .map_err(|e| match e {
                RefError::WrongKind(m) => ("InvalidCACertificateKind", m),
                RefError::NotPermitted(m) => ("RefNotPermitted", m),
            })?;
        let cm = Key::new(ns, r.name.as_str());
        let pem = self
            .config_map_ca(&cm)
            .map_err(|m| ("InvalidCACertificateRef", m))?;
        // Parsed here as the proxy will, so that a bad bundle is this listener's problem.
        weir_proxy::tls::parse_roots(pem).map_err(|m| {
            (
                "InvalidCACertificateRef",
                format!("ConfigMap {cm} key ca.crt: {m}"),
            )
        })?;
        Ok(pem)
    }
}
