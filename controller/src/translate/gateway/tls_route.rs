//! TLSRoutes → the table's `tls_routes`: connections to the TLS socket whose ClientHello names
//! one of the route's host names (intersected with its listeners') go, untouched, to its
//! backends by weight. Served on listeners with protocol `TLS`: with `tls.mode: Passthrough`
//! the bytes go as they are; in `Terminate` mode (the default) Weir ends TLS with the
//! listener's certificate and the backend gets the decrypted bytes (encrypted again when a
//! BackendTLSPolicy applies to its Service).

use weir_crds::gateway::TLSRoute;
use weir_proxy::config::TlsRoute;

use super::http_route::Attached;
use super::status::Cond;
use super::GatewayEval;
use crate::store::{Key, Kind};
use crate::translate::Translator;

/// The id prefix of TLSRoutes' entries (`tlsroute:namespace/name/r0`).
pub(in crate::translate) const ID_PREFIX: &str = "tlsroute:";

impl Translator<'_> {
    /// Translates every TLSRoute with a parent that is Weir's, oldest first.
    pub(super) fn tls_routes(&mut self, gateways: &mut [GatewayEval]) {
        let store = self.store;
        let routes = super::oldest_first(self, &store.tls_routes);
        for (key, route) in routes {
            let spec = &route.spec;
            let kind = Kind::TLSRoute;
            let Some(a) = self.attach_all(gateways, key, kind, &spec.hostnames, &spec.parent_refs)
            else {
                continue;
            };
            self.route_gateways = a.gateways.clone();
            let resolved = if a.attached {
                self.tls_rules(key, route, &a)
            } else {
                Cond::yes("ResolvedRefs", "ResolvedRefs")
            };
            let status = a.status(route.metadata.generation, resolved);
            self.gateway_status
                .tls_routes
                .insert(key.to_string(), status);
        }
    }

    /// One passthrough entry per rule; returns the route's `ResolvedRefs` condition.
    fn tls_rules(&mut self, key: &Key, route: &TLSRoute, at: &Attached<'_>) -> Cond {
        let mut resolved = Cond::yes("ResolvedRefs", "ResolvedRefs");
        for (ri, rule) in route.spec.rules.iter().enumerate() {
            let refs = &rule.backend_refs;
            let mut backends = self.http_backends(Kind::TLSRoute, key, ri, refs, at.terminated);
            if let Some(c) = backends.unresolved.take() {
                if resolved.holds() {
                    resolved = c;
                }
            }
            self.config.tls_routes.push(TlsRoute {
                id: format!("{ID_PREFIX}{key}/r{ri}"),
                hosts: at.hosts.clone(),
                backends: backends.entries,
                terminate: at.terminated,
                single_label_wildcards: false,
                proxy_protocol: None,
            });
        }
        resolved
    }
}
