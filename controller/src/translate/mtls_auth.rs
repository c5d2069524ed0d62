//! The `mtls-auth` plugin's Kubernetes side: its `ca_certificates` name Secrets (a Plugin's
//! own namespace's, `namespace/name` for a ClusterPlugin), whose `ca.crt` (and `ca.crl`)
//! the routing table gets as PEM; and the TLS hosts of an Ingress that names the plugin ask
//! for client certificates in their handshakes (any certificate: the plugin checks it).

use k8s_openapi::api::networking::v1::Ingress;
use serde_json::Value;
use weir_proxy::config::{ClientRefusal, ClientValidation, ClientValidationMode};

use super::plugins::Resolved;
use super::{secret_text, Translator};
use crate::store::Key;

/// The plugin kind.
pub(super) const KIND: &str = "mtls-auth";

impl Translator<'_> {
    /// Replaces the Secret names of an `mtls-auth` configuration's `ca_certificates` by their
    /// `ca.crt`, and fills `crls` from their `ca.crl`; an entry that is PEM already is kept.
    /// `Err` names the entry.
    pub(super) fn mtls_ca_certificates(
        &self,
        namespace: Option<&str>,
        config: &mut Value,
    ) -> Result<(), (String, String)> {
        let Some(list) = config.get("ca_certificates").and_then(Value::as_array) else {
            // The proxy's check says what is missing.
            return Ok(());
        };
        let mut pems = Vec::new();
        let mut crls = Vec::new();
        for (i, entry) in list.iter().enumerate() {
            let field = format!("spec.config.ca_certificates[{i}]");
            let Some(name) = entry.as_str() else {
                return Err((field, "not a Secret name".into()));
            };
            if name.trim_start().starts_with("-----BEGIN") {
                pems.push(Value::String(name.to_string()));
                continue;
            }
            let (ns, name) = match (name.split_once('/'), namespace) {
                (Some((ns, n)), None) => (ns.to_string(), n.to_string()),
                (None, Some(ns)) => (ns.to_string(), name.to_string()),
                (Some(_), Some(ns)) => {
                    let m = format!("{name:?}: a Plugin reads CA Secrets of its own namespace ({ns}), named without one");
                    return Err((field, m));
                }
                (None, None) => {
                    let m =
                        format!("{name:?}: a ClusterPlugin names its CA Secrets namespace/name");
                    return Err((field, m));
                }
            };
            let pem = self.ca_bundle(&ns, &name).map_err(|m| (field.clone(), m))?;
            pems.push(Value::String(pem));
            if let Some(s) = self
                .store
                .secrets
                .get(&Key::new(ns.as_str(), name.as_str()))
            {
                if let Some(crl) = secret_text(s, "ca.crl") {
                    crls.push(Value::String(crl));
                }
            }
        }
        config["ca_certificates"] = Value::Array(pems);
        if !crls.is_empty() {
            config["crls"] = Value::Array(crls);
        }
        Ok(())
    }

    /// An Ingress whose plugins include `mtls-auth` (and that sets no client certificates of
    /// its own): its TLS hosts' handshakes ask for a client certificate, naming the plugins'
    /// CAs, take any, and leave the decision to the plugin.
    pub(super) fn ask_for_client_certificates(
        &mut self,
        key: &Key,
        ing: &Ingress,
        plugins: &[Resolved],
    ) {
        let cas: Vec<&str> = plugins
            .iter()
            .filter(|p| p.kind() == KIND)
            .flat_map(|p| {
                p.config()["ca_certificates"]
                    .as_array()
                    .into_iter()
                    .flatten()
            })
            .filter_map(Value::as_str)
            .collect();
        if cas.is_empty() {
            return;
        }
        let v = ClientValidation {
            ca: cas.join("\n"),
            mode: ClientValidationMode::OptionalNoCa,
            refusal: ClientRefusal::Http,
            ..ClientValidation::default()
        };
        self.protect_hosts(key, ing, &v);
    }
}
