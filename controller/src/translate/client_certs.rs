//! An Ingress's client certificates (`weir.dev/client-certificate-*`, which ingress-nginx's
//! `auth-tls-*` annotations convert to).
//!
//! As in ingress-nginx the settings belong to a host (its `server`): each TLS host of the
//! Ingress gets a certificate entry of its own that asks for client certificates, and every
//! Ingress route for that host is bound to that entry (`tls_hosts`), so that a connection
//! made without the check (another server name, an HTTP/2 connection reused across hosts)
//! never reaches it. The first Ingress (oldest) to set them for a host wins. Refusals are
//! ingress-nginx's: the handshake completes and requests get `400`.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::Ingress;
use weir_crds::annotations as a;
use weir_proxy::config::{Certificate, ClientProtocol, ClientRefusal, ClientValidation, TlsHost};

use super::annotations::ClientCertificateAnnotations;
use super::{obj, secret_text, Translator};
use crate::problem::Reason;
use crate::store::{Key, Kind};

/// The key of a CA Secret's revocation list (ingress-nginx's).
const CRL_KEY: &str = "ca.crl";

/// The hosts whose client certificates an Ingress set: host → (certificate id, Ingress).
pub(super) type ProtectedHosts = BTreeMap<String, (String, Key)>;

impl Translator<'_> {
    /// The client-certificate check an Ingress's annotations ask for: `None` without
    /// `client-certificate-secret`, `Err` (reported) when its Secret cannot be used.
    pub(super) fn client_validation(
        &mut self,
        key: &Key,
        c: &ClientCertificateAnnotations,
    ) -> Option<Result<ClientValidation, ()>> {
        let name = c.secret.as_deref()?;
        let read = self.ca_bundle(&key.namespace, name).and_then(|ca| {
            let skey = Key::new(key.namespace.as_str(), name);
            let crl = self
                .store
                .secrets
                .get(&skey)
                .and_then(|s| secret_text(s, CRL_KEY));
            let v = ClientValidation {
                ca,
                mode: c.mode,
                crl,
                // ingress-nginx's default depth.
                verify_depth: Some(c.verify_depth.unwrap_or(1)),
                refusal: ClientRefusal::Http,
                upstream_headers: true,
                pass_certificate: c.pass_to_upstream,
                match_subject: c.match_subject.clone(),
                error_page: c.error_page.clone(),
            };
            // The proxy's own check, so that what it would refuse is reported here.
            weir_proxy::tls::ClientCheck::new("", &v)
                .map(|_| v)
                .map_err(|(field, m)| format!("Secret {skey}: {field}: {m}"))
        });
        Some(read.map_err(|m| {
            self.problem(
                obj(Kind::Ingress, key),
                Reason::InvalidSecret,
                format!("metadata.annotations[{:?}]", a::CLIENT_CERTIFICATE_SECRET),
                format!("{m}; the Ingress's paths answer 503"),
            );
        }))
    }

    /// Gives each TLS host of the Ingress (after its certificates were added) an entry of its
    /// own asking for client certificates as `v` says. A host another Ingress protected
    /// first keeps that one's settings (reported when they differ).
    pub(super) fn protect_hosts(&mut self, key: &Key, ing: &Ingress, v: &ClientValidation) {
        let spec = ing.spec.as_ref();
        let hosts = spec
            .and_then(|s| s.tls.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.secret_name.is_some())
            .flat_map(|t| t.hosts.iter().flatten())
            .map(|h| h.to_ascii_lowercase());
        for host in hosts.collect::<Vec<_>>() {
            if let Some((id, winner)) = self.protected_hosts.get(&host) {
                let same = self
                    .config
                    .certificates
                    .iter()
                    .find(|c| &c.id == id)
                    .is_some_and(|c| c.client_validation.as_ref() == Some(v));
                if winner != key && !same {
                    let m = format!(
                        "host {host:?} already has the client-certificate settings of Ingress \
                         {winner}, which apply to it"
                    );
                    let field = format!("metadata.annotations[{:?}]", a::CLIENT_CERTIFICATE_SECRET);
                    self.problem(obj(Kind::Ingress, key), Reason::Conflict, field, m);
                }
                continue;
            }
            // The entry serving the host (this Ingress's Secret, or an earlier Ingress's).
            let Some(i) = self.config.certificates.iter().position(|c| {
                c.client_validation.is_none()
                    && c.snis.iter().any(|s| s.eq_ignore_ascii_case(&host))
            }) else {
                continue;
            };
            let shared = &mut self.config.certificates[i];
            shared.snis.retain(|s| !s.eq_ignore_ascii_case(&host));
            let own = Certificate {
                id: format!("{}#{host}@{key}", shared.id),
                cert: shared.cert.clone(),
                key: shared.key.clone(),
                snis: vec![host.clone()],
                client_validation: Some(v.clone()),
            };
            if shared.snis.is_empty() {
                self.config.certificates.remove(i);
            }
            self.protected_hosts
                .insert(host, (own.id.clone(), key.clone()));
            self.config.certificates.push(own);
        }
    }

    /// Binds every Ingress route of a protected host to that host's entry (Gateway API routes
    /// carry their listeners' own).
    pub(super) fn bind_protected_routes(&mut self) {
        if self.protected_hosts.is_empty() {
            return;
        }
        // A later Ingress's Secret may list a protected host again: its entry would be the
        // first for the name, and the host's routes would answer 421.
        let protected = &self.protected_hosts;
        self.config.certificates.retain_mut(|c| {
            if c.client_validation.is_some() || c.snis.is_empty() {
                return true;
            }
            c.snis
                .retain(|s| !protected.contains_key(&s.to_ascii_lowercase()));
            !c.snis.is_empty()
        });
        for r in &mut self.config.routes {
            let [host] = r.hosts.as_slice() else { continue };
            if let Some((id, _)) = self.protected_hosts.get(&host.to_ascii_lowercase()) {
                r.tls_hosts = vec![TlsHost {
                    host: Some(host.clone()),
                    client_certificate: Some(id.clone()),
                }];
                // Plain HTTP would carry no certificate at all: such requests are sent to
                // HTTPS (the route's redirect status), never served unchecked.
                r.protocols = vec![ClientProtocol::Https];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Store;
    use crate::translate::{fixture_pem, fixture_tls_secret, translate, Options, Translation};
    use weir_proxy::config::{ClientProtocol, ClientRefusal, ClientValidationMode, TlsHost};

    /// The example of docs/annotations.md with its Secrets, `extra` appended.
    fn translated(ca_secret: bool, extra: &str) -> Translation {
        let doc = include_str!("../../../docs/annotations.md");
        let at = doc.find("name: partners\n").expect("the example");
        let start = doc[..at].rfind("```yaml\n").unwrap() + "```yaml\n".len();
        let example = &doc[start..start + doc[start..].find("```").unwrap()];
        let mut yaml = format!(
            "{example}---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: weir}}
spec: {{controller: weir.dev/ingress-controller}}
---
{}",
            fixture_tls_secret("demo", "partners-example-com")
        );
        if ca_secret {
            yaml.push_str(&format!(
                "---
apiVersion: v1
kind: Secret
metadata: {{name: partner-ca, namespace: demo, labels: {{weir.dev/credential: \"true\"}}}}
stringData:
  ca.crt: |
{}",
                fixture_pem("ca.crt")
            ));
        }
        yaml.push_str(extra);
        translate(
            &Store::from_manifests(&yaml),
            &Options::default(),
            &weir_proxy::Registry::builtin(),
        )
    }

    /// The documented Ingress: its host gets a certificate of its own asking for client
    /// certificates as ingress-nginx does, and its route is bound to it; another Ingress
    /// sharing the Secret for another host keeps an entry without.
    #[test]
    fn the_documented_client_certificates_bind_the_host() {
        let other = "---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: public, namespace: demo}
spec:
  ingressClassName: weir
  tls: [{hosts: [www.example.com, partners.example.com], secretName: partners-example-com}]
  rules:
  - host: www.example.com
    http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: partners, port: {number: 80}}}}]}
";
        let t = translated(true, other);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let id = "demo/partners-example-com#partners.example.com@demo/partners";
        let own = t.config.certificates.iter().find(|c| c.id == id).unwrap();
        assert_eq!(own.snis, ["partners.example.com"]);
        let v = own.client_validation.as_ref().unwrap();
        assert_eq!(
            (v.mode, v.refusal, v.verify_depth),
            (ClientValidationMode::Require, ClientRefusal::Http, Some(1))
        );
        assert!(v.upstream_headers && v.pass_certificate && v.crl.is_none());
        // The shared entry keeps the other host only, whichever Ingress added it.
        let shared = t
            .config
            .certificates
            .iter()
            .find(|c| c.id == "demo/partners-example-com")
            .unwrap();
        assert_eq!(shared.snis, ["www.example.com"]);
        let route = |host: &str| {
            t.config
                .routes
                .iter()
                .find(|r| r.hosts == [host])
                .unwrap()
                .tls_hosts
                .clone()
        };
        assert_eq!(
            route("partners.example.com"),
            [TlsHost {
                host: Some("partners.example.com".into()),
                client_certificate: Some(id.into()),
            }]
        );
        assert!(route("www.example.com").is_empty());
        let protocols = |host: &str| {
            let r = t.config.routes.iter().find(|r| r.hosts == [host]).unwrap();
            r.protocols.clone()
        };
        assert_eq!(protocols("partners.example.com"), [ClientProtocol::Https]);
        assert!(protocols("www.example.com").is_empty());
        weir_proxy::compile::Runtime::compile(t.config, &weir_proxy::Registry::builtin()).unwrap();
    }

    /// Without its CA Secret the Ingress fails closed: a problem naming the annotation, and
    /// its paths answer 503 rather than serve the host without client certificates.
    #[test]
    fn a_missing_ca_secret_closes_the_ingress() {
        let t = translated(false, "");
        assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
        let p = &t.problems[0];
        assert_eq!(
            p.field,
            "metadata.annotations[\"weir.dev/client-certificate-secret\"]"
        );
        assert!(p.message.contains("demo/partner-ca not found"), "{p:?}");
        let route = &t.config.routes[0].id;
        assert!(
            t.config
                .plugins
                .iter()
                .any(|pl| pl.route.as_ref() == Some(route)
                    && pl.name == "request-termination"
                    && pl.config["status_code"] == 503),
            "{:?}",
            t.config.plugins
        );
        assert!(t
            .config
            .certificates
            .iter()
            .all(|c| c.client_validation.is_none()));
    }
}
