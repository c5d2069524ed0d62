//! Ingress `tls` sections → certificates. A missing or unusable Secret affects only the hosts
//! it was meant for; Secret contents never appear in problems or logs.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use weir_proxy::config::Certificate;

use super::{obj, secret_text, Translator};
use crate::problem::Reason;
use crate::store::{Key, Kind};

/// The Secret type of certificates (Ingress `tls`, an Upstream's client certificate).
pub(super) const TLS_TYPE: &str = "kubernetes.io/tls";

impl Translator<'_> {
    pub(super) fn tls(&mut self, key: &Key, ing: &Ingress) {
        let Some(spec) = ing.spec.as_ref() else {
            return;
        };
        for (i, t) in spec.tls.iter().flatten().enumerate() {
            // No secretName: the hosts use the default certificate.
            let Some(secret_name) = &t.secret_name else {
                continue;
            };
            let hosts: Vec<String> = t.hosts.clone().unwrap_or_default();
            let field = format!("spec.tls[{i}].secretName");
            let skey = Key::new(key.namespace.as_str(), secret_name.as_str());
            let result = match self.store.secrets.get(&skey) {
                None => Err(format!("Secret {skey} not found")),
                Some(s) if s.type_.as_deref() != Some(TLS_TYPE) => {
                    Err(format!("Secret {skey} is not of type {TLS_TYPE}"))
                }
                Some(s) => read_pair(s).map_err(|m| format!("Secret {skey} {m}")),
            };
            match result {
                Ok((cert, key_pem)) => {
                    // A host-less entry makes the default certificate; kept apart from the
                    // same Secret's named hosts, which would otherwise take the default role away.
                    let id = if hosts.is_empty() {
                        format!("{skey}#default")
                    } else {
                        skey.to_string()
                    };
                    match self.config.certificates.iter_mut().find(|c| c.id == id) {
                        Some(c) => {
                            for h in hosts {
                                if !c.snis.contains(&h) {
                                    c.snis.push(h);
                                }
                            }
                        }
                        None => self.config.certificates.push(Certificate {
                            id,
                            cert,
                            key: key_pem,
                            snis: hosts,
                            client_validation: None,
                        }),
                    }
                }
                Err(m) => {
                    let hosts = if hosts.is_empty() {
                        "its hosts".to_string()
                    } else {
                        hosts.join(", ")
                    };
                    self.problem(
                        obj(Kind::Ingress, key),
                        Reason::InvalidSecret,
                        field,
                        format!("{m}; no certificate for {hosts}"),
                    );
                }
            }
        }
    }
}

/// The Secret's certificate and key, checked the way the proxy will load them.
pub(super) fn read_pair(secret: &Secret) -> Result<(String, String), String> {
    let text = |key: &str| secret_text(secret, key).ok_or_else(|| format!("has no readable {key}"));
    let (cert, key) = (text("tls.crt")?, text("tls.key")?);
    let probe = Certificate {
        id: String::new(),
        cert,
        key,
        snis: Vec::new(),
        client_validation: None,
    };
    // The message describes the PEM; it never quotes it.
    weir_proxy::tls::parse_certificate(&probe).map_err(|(field, m)| {
        format!(
            "{}: {m}",
            if field == "cert" {
                "tls.crt"
            } else {
                "tls.key"
            }
        )
    })?;
    Ok((probe.cert, probe.key))
}
