//! Ingress `tls` sections → certificates. A missing or unusable Secret affects only the hosts
//! it was meant for; Secret contents never appear in problems or logs.

use k8s_openapi::api::networking::v1::Ingress;
use weir_proxy::config::Certificate;

use super::{obj, Translator};
use crate::problem::Reason;
use crate::store::{Key, Kind};

const TLS_TYPE: &str = "kubernetes.io/tls";

fn pem(data: Option<&k8s_openapi::ByteString>, what: &str) -> Result<String, String> {
    let text = data
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .ok_or_else(|| format!("has no readable {what}"))?;
    if !text.contains("-----BEGIN ") {
        return Err(format!("{what} is not PEM"));
    }
    Ok(text)
}

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
                Some(s) => {
                    let data = s.data.as_ref();
                    pem(data.and_then(|d| d.get("tls.crt")), "tls.crt")
                        .and_then(|cert| {
                            Ok((cert, pem(data.and_then(|d| d.get("tls.key")), "tls.key")?))
                        })
                        .map_err(|m| format!("Secret {skey} {m}"))
                }
            };
            match result {
                Ok((cert, key_pem)) => {
                    let id = skey.to_string();
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
