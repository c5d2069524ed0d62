//! `weir.dev/ssl-passthrough` → the table's `tls_routes`: TLS connections whose ClientHello
//! names one of the Ingress's hosts go, undecrypted, to the backend of that rule's `/` path,
//! as ingress-nginx's `ssl-passthrough` does. Plain HTTP to the same hosts is routed as usual.

use k8s_openapi::api::networking::v1::Ingress;
use weir_crds::annotations as a;
use weir_proxy::config::{TlsRoute, WeightedBackend};
use weir_proxy::validate::check_host;

use super::annotations::IngressAnnotations;
use super::{obj, Translator};
use crate::problem::Reason;
use crate::store::{Key, Kind};

impl Translator<'_> {
    /// An Ingress of this controller, outside `key`'s namespace, with `host` in a rule or in
    /// its TLS section.
    fn host_served_in_another_namespace(&self, key: &Key, host: &str) -> Option<Key> {
        let names_host = |ing: &Ingress| {
            let spec = ing.spec.as_ref();
            let rules = spec.iter().flat_map(|s| s.rules.iter().flatten());
            let tls = spec.iter().flat_map(|s| s.tls.iter().flatten());
            rules
                .filter_map(|r| r.host.as_deref())
                .chain(
                    tls.flat_map(|t| t.hosts.iter().flatten())
                        .map(String::as_str),
                )
                .any(|h| h.eq_ignore_ascii_case(host))
        };
        self.store
            .ingresses
            .iter()
            .find(|(k, ing)| {
                k.namespace != key.namespace
                    && self.in_scope(&k.namespace)
                    && self.owns(ing)
                    && names_host(ing)
            })
            .map(|(k, _)| k.clone())
    }

    /// One passthrough entry per rule with a host and a `/` path; the first Ingress to pass
    /// a host through keeps it.
    pub(super) fn ssl_passthrough(&mut self, key: &Key, ing: &Ingress, ann: &IngressAnnotations) {
        let me = obj(Kind::Ingress, key);
        let rules = ing.spec.iter().flat_map(|s| s.rules.iter().flatten());
        for (ri, rule) in rules.enumerate() {
            let field = format!("spec.rules[{ri}]");
            let Some(host) = rule.host.as_deref().filter(|h| check_host(h).is_ok()) else {
                let m = format!("{} needs a host on each rule: TLS connections are passed through by the server name they ask for; this rule's are terminated", a::SSL_PASSTHROUGH);
                self.problem(me.clone(), Reason::Unsupported, format!("{field}.host"), m);
                continue;
            };
            let paths = rule.http.iter().flat_map(|h| h.paths.iter());
            let root = paths
                .enumerate()
                .find(|(_, p)| p.path.as_deref().unwrap_or("/") == "/");
            let Some((pi, path)) = root else {
                let m = format!("{} passes connections to the backend of the rule's \"/\" path, and this rule has none; its TLS connections are terminated", a::SSL_PASSTHROUGH);
                self.problem(
                    me.clone(),
                    Reason::Unsupported,
                    format!("{field}.http.paths"),
                    m,
                );
                continue;
            };
            // Passing a host through takes all of its TLS traffic: only Ingresses of one
            // namespace may do that to a host, or a tenant could take another's.
            if let Some(other) = self.host_served_in_another_namespace(key, host) {
                let m = format!("host {host:?} is also served by Ingress {other} of another namespace; its TLS connections are not passed through");
                self.problem(me.clone(), Reason::Conflict, format!("{field}.host"), m);
                continue;
            }
            let claim = (host.to_ascii_lowercase(), "Passthrough", String::new());
            if let Some(winner) = self.claimed.get(&claim) {
                let m = format!("TLS connections for {host:?} are already passed through by Ingress {winner}; this rule's are not");
                self.problem(me.clone(), Reason::Conflict, format!("{field}.host"), m);
                continue;
            }
            let backend_field = format!("{field}.http.paths[{pi}].backend.service");
            // A backend that cannot be used closes the host's TLS connections: terminating
            // them instead would serve the host without what it asked for.
            let service = match &path.backend.service {
                Some(s) => {
                    let port = s.port.clone().unwrap_or_default();
                    match self.backend_for(&key.namespace, &s.name, &port, None) {
                        Ok(id) => Some(id),
                        Err((reason, m)) => {
                            let m = format!("{m}; TLS connections for {host:?} are closed");
                            self.problem(me.clone(), reason, backend_field, m);
                            None
                        }
                    }
                }
                None => {
                    let m = format!("a passed-through path needs a Service backend; TLS connections for {host:?} are closed");
                    self.problem(me.clone(), Reason::UnsupportedBackend, backend_field, m);
                    None
                }
            };
            self.config.tls_routes.push(TlsRoute {
                id: format!("{key}/r{ri}/passthrough"),
                hosts: vec![host.to_string()],
                backends: vec![WeightedBackend { service, weight: 1 }],
                terminate: false,
                single_label_wildcards: true,
                proxy_protocol: ann.passthrough_proxy_protocol,
            });
            self.claimed.insert(claim, key.clone());
        }
    }
}
