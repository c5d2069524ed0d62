//! The Gateway API (`gateway.networking.k8s.io`, standard channel v1.6) → the same routing
//! table as Ingresses, and the status every object of it should show.
//!
//! Weir's proxy has fixed sockets, as Kong's ingress controller has: a listener on
//! `--gateway-http-port` (80) with protocol `HTTP` is served on `--listen`, one on
//! `--gateway-https-port` (443) with `HTTPS` on `--tls-listen`. Listeners on other ports are
//! not served and say so (`Accepted: False`, `PortUnavailable`). Every Gateway of a class
//! naming [`CONTROLLER_NAME`] shares those sockets: their routes join one table.
//!
//! - `listeners`: which listeners are served, their certificates, which routes they allow;
//! - [`hostnames`]: the names a route is served for on a listener;
//! - `http_route`: HTTPRoute rules → routes, plugin entries (filters) and backends;
//! - [`status`]: the conditions, computed here, written by the leader or shown by the admin
//!   API.

mod backend_tls;
mod frontend_tls;
mod grpc_route;
pub mod hostnames;
mod http_route;
mod listeners;
pub mod status;
mod tls_route;

use std::collections::BTreeSet;

use kube::ResourceExt;
use weir_crds::gateway::{ParentReference, CONTROLLER_NAME, GROUP};

use super::Translator;
use crate::problem::Reason;
use crate::store::{Key, Kind};
use crate::translate::obj;
use listeners::ListenerEval;
use status::{ClassStatus, Cond, RouteParentStatus};

/// The conformance features Weir supports, as `GatewayClass.status.supportedFeatures` lists
/// them (sorted, as the spec asks).
pub const SUPPORTED_FEATURES: [&str; 45] = [
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "GRPCRoute",
    "GRPCRouteNamedRouteRule",
    "GRPCRouteRequestHeaderModifier",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendRequestRedirect",
    "HTTPRouteBackendTimeout",
    "HTTPRouteBackendURLRewrite",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteSchemeRedirect",
    "ReferenceGrant",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
];

/// Whether a Gateway names parameters in `spec.infrastructure.parametersRef`.
fn takes_parameters(gw: &weir_crds::gateway::Gateway) -> bool {
    gw.spec
        .infrastructure
        .as_ref()
        .is_some_and(|i| i.parameters_ref.is_some())
}

/// A Gateway of Weir's with its listeners evaluated.
pub(super) struct GatewayEval {
    key: Key,
    listeners: Vec<ListenerEval>,
    /// `ResolvedRefs` of `spec.tls.backend.clientCertificateRef`, when there is one.
    backend_tls: Option<Cond>,
}

/// Where one parentRef of a route attached: the listeners (by index) and, for each, the
/// host names it is served for there (`None`: every host).
struct Attachment {
    gateway: usize,
    listeners: Vec<(usize, BTreeSet<String>)>,
}

impl Translator<'_> {
    /// The PEM CA certificates of ConfigMap `cm` (key `ca.crt`), as BackendTLSPolicies and
    /// Gateways' client certificate validation name them, or why there are none.
    pub(super) fn config_map_ca(&self, cm: &Key) -> Result<&str, String> {
        self.store
            .config_maps
            .get(cm)
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("ca.crt"))
            .filter(|p| p.contains("-----BEGIN CERTIFICATE-----"))
            .map(String::as_str)
            .ok_or_else(|| format!("ConfigMap {cm} has no PEM certificate at key ca.crt"))
    }

    /// Translates every Gateway API object that is Weir's.
    pub(super) fn gateway_api(&mut self) {
        let store = self.store;
        let ours: BTreeSet<&str> = store
            .gateway_classes
            .iter()
            .filter(|(_, c)| c.spec.controller_name == CONTROLLER_NAME)
            .map(|(name, _)| name.as_str())
            .collect();
        for name in &ours {
            let class = &store.gateway_classes[*name];
            let mut conditions = vec![
                Cond::yes("Accepted", "Accepted"),
                Cond::yes("SupportedVersion", "SupportedVersion"),
            ];
            if class.spec.parameters_ref.is_some() {
                conditions[0] = Cond::no(
                    "Accepted",
                    "InvalidParameters",
                    "Weir's GatewayClasses take no parametersRef",
                );
            }
            self.gateway_status.gateway_classes.insert(
                name.to_string(),
                ClassStatus {
                    observed_generation: class.metadata.generation,
                    conditions,
                    supported_features: SUPPORTED_FEATURES.to_vec(),
                },
            );
        }
        let mut gateways = Vec::new();
        for (key, gw) in &store.gateways {
            if !ours.contains(gw.spec.gateway_class_name.as_str()) || !self.in_scope(&key.namespace)
            {
                continue;
            }
            // Weir takes no per-Gateway parameters: a Gateway asking for some is not accepted,
            // and none of its listeners is served.
            let listeners = if takes_parameters(gw) {
                self.problem(
                    obj(Kind::Gateway, key),
                    Reason::Unsupported,
                    "spec.infrastructure.parametersRef",
                    "Weir takes no Gateway parameters; the Gateway is not served",
                );
                Vec::new()
            } else {
                self.listeners(key, gw)
            };
            let backend_tls = self.backend_client_certificate(key, gw);
            gateways.push(GatewayEval {
                key: key.clone(),
                listeners,
                backend_tls,
            });
        }
        self.client_certificate_overlaps(&gateways);
        self.http_routes(&mut gateways);
        self.grpc_routes(&mut gateways);
        self.tls_routes(&mut gateways);
        for g in &gateways {
            let gw = &store.gateways[&g.key];
            let mut status = listeners::gateway_status(gw.metadata.generation, &g.listeners);
            if takes_parameters(gw) {
                status.conditions = vec![
                    Cond::no(
                        "Accepted",
                        "InvalidParameters",
                        "Weir takes no Gateway parameters (spec.infrastructure.parametersRef)",
                    ),
                    Cond::no("Programmed", "Invalid", "the Gateway is not accepted"),
                ];
            }
            if let Some(c) = &g.backend_tls {
                status.conditions.push(c.clone());
            }
            let frontend = gw.spec.tls.as_ref().and_then(|t| t.frontend.as_ref());
            if frontend.is_some_and(frontend_tls::insecure_fallback) {
                status.conditions.push(Cond::yes_because(
                    "InsecureFrontendValidationMode",
                    "ConfigurationChanged",
                    "clients without a valid certificate are let in (AllowInsecureFallback)",
                ));
            }
            // Weir is reached at its Service's addresses; it cannot take others. An address
            // without a value asks for any address of its type, which those are.
            let named = gw.spec.addresses.iter().any(|a| {
                let any_of_type =
                    matches!(a["type"].as_str(), None | Some("IPAddress" | "Hostname"));
                !(any_of_type && a["value"].as_str().is_none_or(str::is_empty))
            });
            if named {
                if let Some(p) = status
                    .conditions
                    .iter_mut()
                    .find(|c| c.type_ == "Programmed")
                {
                    *p = Cond::no(
                        "Programmed",
                        "AddressNotAssigned",
                        "spec.addresses cannot be honoured: Weir is reached at the addresses \
                         of its Service (status.addresses); the listeners are served there",
                    );
                }
                self.problem(
                    obj(Kind::Gateway, &g.key),
                    Reason::Unsupported,
                    "spec.addresses",
                    "Weir is reached at its Service's addresses; requested addresses are \
                     not assigned (the listeners are served at the Service's)",
                );
            }
            self.gateway_status
                .gateways
                .insert(g.key.to_string(), status);
        }
    }

    /// Resolves a route's parent reference: `None` when the parent is not a Gateway of Weir's
    /// (nothing to say about it), else its status conditions and, when accepted, where it
    /// attached.
    fn attach(
        &self,
        gateways: &mut [GatewayEval],
        route: &Key,
        kind: &str,
        hostnames: &[String],
        parent: &ParentReference,
    ) -> Option<(Cond, Option<Attachment>)> {
        let group = parent.group.as_deref().unwrap_or(GROUP);
        let pkind = parent.kind.as_deref().unwrap_or("Gateway");
        if group != GROUP || pkind != "Gateway" {
            return None;
        }
        let ns = parent.namespace.as_deref().unwrap_or(&route.namespace);
        let gi = gateways
            .iter()
            .position(|g| g.key.namespace == ns && g.key.name == parent.name)?;
        let g = &gateways[gi];
        let candidates: Vec<usize> = g
            .listeners
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                parent.section_name.as_deref().is_none_or(|s| s == l.name)
                    && parent.port.is_none_or(|p| p == l.port)
            })
            .map(|(i, _)| i)
            .collect();
        if candidates.is_empty() {
            let what = match (&parent.section_name, parent.port) {
                (Some(s), Some(p)) => format!("no listener named {s:?} on port {p}"),
                (Some(s), None) => format!("no listener named {s:?}"),
                (None, Some(p)) => format!("no listener on port {p}"),
                (None, None) => "no listeners".to_string(),
            };
            return Some((
                Cond::no(
                    "Accepted",
                    "NoMatchingParent",
                    format!("Gateway {}: {what}", g.key),
                ),
                None,
            ));
        }
        let allowed: Vec<usize> = candidates
            .into_iter()
            .filter(|&i| g.listeners[i].usable() && self.allows(&g.listeners[i], route, kind))
            .collect();
        if allowed.is_empty() {
            return Some((
                Cond::no(
                    "Accepted",
                    "NotAllowedByListeners",
                    format!(
                        "no listener of Gateway {} that is served allows {kind}s from namespace {}",
                        g.key, route.namespace
                    ),
                ),
                None,
            ));
        }
        let mut at = Attachment {
            gateway: gi,
            listeners: Vec::new(),
        };
        for i in allowed {
            if let Some(names) = hostnames::intersect(g.listeners[i].hostname.as_deref(), hostnames)
            {
                at.listeners.push((i, names));
            }
        }
        if at.listeners.is_empty() {
            return Some((
                Cond::no(
                    "Accepted",
                    "NoMatchingListenerHostname",
                    format!(
                        "no host name of the route is served by a listener of Gateway {}",
                        g.key
                    ),
                ),
                None,
            ));
        }
        for (i, _) in &at.listeners {
            gateways[gi].listeners[*i].attached_routes += 1;
        }
        Some((Cond::yes("Accepted", "Accepted"), Some(at)))
    }

    /// Whether a listener takes routes of `kind` from the route's namespace.
    fn allows(&self, l: &ListenerEval, route: &Key, kind: &str) -> bool {
        if !l.kinds.iter().any(|k| k.kind == kind) {
            return false;
        }
        match &l.from {
            listeners::From::All => true,
            listeners::From::Same => l.namespace == route.namespace,
            listeners::From::Selector(sel) => {
                let mut labels = self
                    .store
                    .namespaces
                    .get(&route.namespace)
                    .map(|n| n.labels().clone())
                    .unwrap_or_default();
                // The API server sets this label on every Namespace; manifests read from a
                // folder (standalone mode) may lack it, and selecting by it is common.
                labels
                    .entry("kubernetes.io/metadata.name".into())
                    .or_insert_with(|| route.namespace.clone());
                listeners::selects(sel, &labels)
            }
        }
    }
}

/// The objects of `map` in the namespaces served, oldest first (then by `namespace/name`):
/// the order the spec gives routes that would otherwise tie.
pub(super) fn oldest_first<'m, T: kube::Resource>(
    t: &Translator<'_>,
    map: &'m std::collections::BTreeMap<Key, T>,
) -> Vec<(&'m Key, &'m T)> {
    let mut list: Vec<(&Key, &T)> = map
        .iter()
        .filter(|(k, _)| t.in_scope(&k.namespace))
        .collect();
    list.sort_by(|a, b| {
        let ts = |o: &T| o.meta().creation_timestamp.as_ref().map(|t| t.0);
        ts(a.1).cmp(&ts(b.1)).then(a.0.cmp(b.0))
    });
    list
}

/// A parent's status entry.
fn parent_status(parent: &ParentReference, conditions: Vec<Cond>) -> RouteParentStatus {
    RouteParentStatus {
        parent_ref: parent.clone(),
        controller_name: CONTROLLER_NAME,
        conditions,
    }
}

/// The id prefix of routes made from HTTPRoutes.
pub(super) const HTTP_ROUTE_ID_PREFIX: &str = http_route::ID_PREFIX;
/// The id prefix of TLSRoutes' passthrough entries.
pub(super) const TLS_ROUTE_ID_PREFIX: &str = tls_route::ID_PREFIX;
/// The route id prefix of GRPCRoutes.
pub(super) const GRPC_ROUTE_ID_PREFIX: &str = grpc_route::ID_PREFIX;

#[cfg(test)]
mod tests {
    use crate::store::Store;
    use crate::translate::{fixture_pem, fixture_tls_secret, translate, Options};

    /// The translation of a manifest text, with the default options and plugins.
    fn translated(yaml: &str) -> crate::translate::Translation {
        translate(
            &Store::from_manifests(yaml),
            &Options::default(),
            &weir_proxy::Registry::builtin(),
        )
    }

    const BASE: &str = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  gatewayClassName: weir
  listeners: [{name: http, port: 80, protocol: HTTP, hostname: '*.example.com'}]
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: shop}
spec: {ports: [{port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: shop}
spec: {ports: [{port: 8080}]}
---
";

    /// The ```yaml block of docs/gateway-api.md that holds `marker`, with Weir's GatewayClass
    /// after it.
    fn documented(marker: &str) -> String {
        let doc = include_str!("../../../../docs/gateway-api.md");
        let at = doc.find(marker).expect("the example");
        let start = doc[..at].rfind("```yaml\n").expect("its block") + "```yaml\n".len();
        let yaml = &doc[start..start + doc[start..].find("```").unwrap()];
        format!(
            "{yaml}---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec: {{controllerName: weir.dev/gateway-controller}}
---
"
        )
    }

    /// A PEM of tests/fixtures/tls, indented as a YAML block scalar's lines (4 spaces).
    /// The TLSRoute example of docs/gateway-api.md, translated.
    #[test]
    fn the_documented_tls_route_passes_its_host_through() {
        let yaml = format!(
            "{}apiVersion: v1
kind: Service
metadata: {{name: console, namespace: demo}}
spec: {{ports: [{{port: 8443}}]}}
",
            documented("kind: TLSRoute")
        );
        let t = translated(&yaml);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let routes = &t.config.tls_routes;
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].hosts, ["console.example.com"]);
        assert_eq!(
            routes[0].backends[0].service.as_deref(),
            Some("demo/console:8443")
        );
        let status = &t.gateway_api.tls_routes["demo/db-console"].parents[0];
        assert!(status.conditions.iter().all(|c| c.holds()), "{status:?}");
    }

    /// The objects the client certificate example of docs/gateway-api.md names: the
    /// `demo/secure-example-com` TLS Secret, and (after `---`) the `demo/client-ca` ConfigMap.
    fn secure_secret_and_client_ca() -> (String, String) {
        let secret = fixture_tls_secret("demo", "secure-example-com");
        let config_map = format!(
            "---
apiVersion: v1
kind: ConfigMap
metadata: {{name: client-ca, namespace: demo}}
data:
  ca.crt: |
{}",
            fixture_pem("ca.crt")
        );
        (secret, config_map)
    }

    /// The Gateway with client certificate validation of docs/gateway-api.md, translated:
    /// its listener's certificate asks for client certificates signed by the ConfigMap's CA;
    /// without the ConfigMap the listener is not served.
    #[test]
    fn the_documented_client_certificate_validation_resolves() {
        let (secret, config_map) = secure_secret_and_client_ca();
        let gateway = documented("caCertificateRefs: [{group: '', kind: ConfigMap");
        let t = translated(&format!("{gateway}{secret}{config_map}"));
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let cert = &t.config.certificates[0];
        assert_eq!(cert.snis, ["secure.example.com"]);
        let v = cert.client_validation.as_ref().expect("client validation");
        assert_eq!(v.mode, weir_proxy::config::ClientValidationMode::Require);
        assert!(v.ca.contains("BEGIN CERTIFICATE"));
        let gw = &t.gateway_api.gateways["demo/secure"];
        assert!(
            gw.listeners[0]
                .conditions
                .iter()
                .all(|c| c.type_ == "Conflicted" || c.holds()),
            "{gw:?}"
        );

        let t = translated(&format!("{gateway}{secret}"));
        assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
        assert_eq!(
            t.problems[0].field,
            "spec.tls.frontend.default.validation.caCertificateRefs[0]"
        );
        assert!(t.config.certificates.is_empty(), "nothing let in unchecked");
        let gw = &t.gateway_api.gateways["demo/secure"];
        let accepted = gw.listeners[0]
            .conditions
            .iter()
            .find(|c| c.type_ == "Accepted");
        assert_eq!(accepted.unwrap().reason, "NoValidCACertificate");
    }

    /// Routes of a listener that asks for client certificates carry its certificate's id for
    /// their HTTPS host names (the proxy answers 421 over other handshakes), routes of other
    /// listeners carry none; another Gateway's listener with the same host name, asking for
    /// none, is reported on the protecting Gateway.
    #[test]
    fn routes_of_a_protected_listener_name_its_certificate() {
        let (secret, config_map) = secure_secret_and_client_ca();
        let secret = format!("---\n{secret}{config_map}");
        let gateway = documented("caCertificateRefs: [{group: '', kind: ConfigMap");
        let others = "---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: plain, namespace: demo}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: https, port: 443, protocol: HTTPS, hostname: other.example.com, tls: {certificateRefs: [{name: secure-example-com}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: both, namespace: demo}
spec:
  parentRefs: [{name: secure}, {name: plain}]
  rules: [{backendRefs: [{name: app, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: plain-only, namespace: demo}
spec:
  parentRefs: [{name: plain}]
  rules: [{backendRefs: [{name: app, port: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: demo}
spec: {ports: [{port: 80}]}
";
        let t = translated(&format!("{gateway}{others}{secret}"));
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let id = "demo/secure-example-com#secure.example.com@demo/secure";
        assert!(t.config.certificates.iter().any(|c| c.id == id));
        let route = |name: &str| {
            let prefix = format!("httproute:demo/{name}/");
            t.config
                .routes
                .iter()
                .find(|r| r.id.starts_with(&prefix))
                .unwrap_or_else(|| panic!("{name}: {:#?}", t.config.routes))
        };
        let tls = |host: Option<&str>, cert: Option<&str>| weir_proxy::config::TlsHost {
            host: host.map(str::to_string),
            client_certificate: cert.map(str::to_string),
        };
        // Over TLS, `both` is served for the protected name with its check, for the plain
        // Gateway's name without; over plain HTTP the proxy does not look.
        let both = route("both");
        assert_eq!(
            both.tls_hosts,
            [
                tls(Some("secure.example.com"), Some(id)),
                tls(Some("other.example.com"), None)
            ]
        );
        assert!(route("plain-only").tls_hosts.is_empty());

        // The plain Gateway takes the protected name as well: reported.
        let clash = others.replace("other.example.com", "secure.example.com");
        let t = translated(&format!("{gateway}{clash}{secret}"));
        assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
        let p = &t.problems[0];
        assert_eq!(p.field, "spec.listeners[0].hostname");
        assert!(
            p.message.contains("listener https of Gateway demo/plain"),
            "{p:?}"
        );
        assert!(p.to_string().contains("demo/secure"), "{p:?}");
    }

    /// The Gateway with a backend client certificate of docs/gateway-api.md, translated.
    #[test]
    fn the_documented_backend_client_certificate_resolves() {
        let yaml = format!(
            "{}apiVersion: v1
kind: Secret
metadata: {{name: gateway-client, namespace: demo}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{}  tls.key: |
{}",
            documented("clientCertificateRef: {kind: Secret"),
            fixture_pem("a.example.test.crt"),
            fixture_pem("a.example.test.key")
        );
        let t = translated(&yaml);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let gw = &t.gateway_api.gateways["demo/edge"];
        let resolved = gw.conditions.iter().find(|c| c.type_ == "ResolvedRefs");
        assert!(resolved.is_some_and(|c| c.holds()), "{gw:?}");
    }

    /// BackendTLSPolicyConflictResolution: of two policies naming the same Service and
    /// sectionName the older applies and the other is `Conflicted`; a policy naming a port and
    /// one naming the whole Service do not conflict.
    #[test]
    fn backend_tls_policies_for_the_same_target_conflict() {
        let ca = fixture_pem("ca.crt");
        let policy = |name: &str, ts: &str, service: &str, section: Option<&str>, host: &str| {
            let section = section.map_or(String::new(), |s| format!(", sectionName: {s}"));
            format!(
                "apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: shop, creationTimestamp: '{ts}'}}
spec:
  targetRefs: [{{group: '', kind: Service, name: {service}{section}}}]
  validation: {{caCertificateRefs: [{{group: '', kind: ConfigMap, name: ca}}], hostname: {host}}}
---
"
            )
        };
        let mut yaml = format!(
            "{BASE}apiVersion: v1
kind: ConfigMap
metadata: {{name: ca, namespace: shop}}
data:
  ca.crt: |
{ca}---
apiVersion: v1
kind: Service
metadata: {{name: c, namespace: shop}}
spec: {{ports: [{{name: https-1, port: 443}}, {{name: https-2, port: 8443}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: shop}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [shop.example.com]
  rules:
  - matches: [{{path: {{type: Exact, value: /a}}}}]
    backendRefs: [{{name: a, port: 8080}}]
  - matches: [{{path: {{type: Exact, value: /c1}}}}]
    backendRefs: [{{name: c, port: 443}}]
  - matches: [{{path: {{type: Exact, value: /c2}}}}]
    backendRefs: [{{name: c, port: 8443}}]
---
"
        );
        yaml += &policy(
            "a-new",
            "2026-01-02T00:00:00Z",
            "a",
            None,
            "new.example.com",
        );
        yaml += &policy(
            "a-old",
            "2026-01-01T00:00:00Z",
            "a",
            None,
            "old.example.com",
        );
        yaml += &policy(
            "c-port",
            "2026-01-02T00:00:00Z",
            "c",
            Some("https-1"),
            "port.example.com",
        );
        yaml += &policy(
            "c-all",
            "2026-01-01T00:00:00Z",
            "c",
            None,
            "all.example.com",
        );
        let t = translated(&yaml);
        let accepted = |name: &str| {
            let p = &t.gateway_api.backend_tls_policies[&format!("shop/{name}")];
            let c = p.ancestors[0]
                .conditions
                .iter()
                .find(|c| c.type_ == "Accepted")
                .unwrap();
            (c.status, c.reason.clone())
        };
        assert_eq!(accepted("a-old"), ("True", "Accepted".to_string()));
        assert_eq!(accepted("a-new"), ("False", "Conflicted".to_string()));
        assert_eq!(accepted("c-port"), ("True", "Accepted".to_string()));
        assert_eq!(accepted("c-all"), ("True", "Accepted".to_string()));
        let sni = |service_prefix: &str| {
            t.config
                .services
                .iter()
                .filter(|s| s.id.starts_with(service_prefix))
                .filter_map(|s| s.tls.as_ref()?.sni.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(sni("shop/a:8080"), ["old.example.com"]);
        assert_eq!(sni("shop/c:443"), ["port.example.com"]);
        assert_eq!(sni("shop/c:8443"), ["all.example.com"]);
    }

    #[test]
    fn grpc_mirrors_are_grpc_calls_too() {
        let yaml = format!(
            "{BASE}apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: calls, namespace: shop}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - filters: [{{type: RequestMirror, requestMirror: {{backendRef: {{name: b, port: 8080}}, percent: 10}}}}]
    backendRefs: [{{name: a, port: 8080}}]
"
        );
        let t = translated(&yaml);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let r = &t.config.routes[0];
        assert_eq!(r.service.as_deref(), Some("shop/a:8080~grpc"));
        assert_eq!(r.mirrors.len(), 1);
        assert_eq!(r.mirrors[0].percent, 10.0);
        let mirror = t
            .config
            .services
            .iter()
            .find(|s| s.id == r.mirrors[0].service)
            .expect("the mirror's service");
        assert_eq!(mirror.id, "shop/b:8080~grpc");
        assert_eq!(mirror.protocol, weir_proxy::config::UpstreamProtocol::Grpc);
    }

    #[test]
    fn requested_addresses_are_reported_not_assigned() {
        let yaml = BASE.replace(
            "  listeners: [{name: http, port: 80, protocol: HTTP, hostname: '*.example.com'}]",
            "  addresses: [{type: IPAddress, value: 203.0.113.9}]
  listeners: [{name: http, port: 80, protocol: HTTP, hostname: '*.example.com'}]",
        );
        assert_ne!(yaml, BASE);
        let t = translated(&yaml);
        let gw = &t.gateway_api.gateways["shop/gw"];
        let programmed = gw
            .conditions
            .iter()
            .find(|c| c.type_ == "Programmed")
            .unwrap();
        assert_eq!(
            (programmed.status, programmed.reason.as_str()),
            ("False", "AddressNotAssigned")
        );
        assert!(gw.listeners[0]
            .conditions
            .iter()
            .all(|c| c.type_ == "Conflicted" || c.holds()));
        assert!(t.problems.iter().any(|p| p.field == "spec.addresses"));
        // Addresses without a value (GatewayAddressEmpty) ask for any: Weir's own are.
        for any in [
            "[{type: IPAddress}]",
            "[{type: Hostname, value: ''}]",
            "[{value: ''}]",
        ] {
            let yaml = BASE.replace(
                "  listeners: [{name: http, port: 80, protocol: HTTP, hostname: '*.example.com'}]",
                &format!(
                    "  addresses: {any}
  listeners: [{{name: http, port: 80, protocol: HTTP, hostname: '*.example.com'}}]"
                ),
            );
            let t = translated(&yaml);
            let gw = &t.gateway_api.gateways["shop/gw"];
            assert!(gw.conditions.iter().all(|c| c.holds()), "{any}");
            assert!(
                t.problems.iter().all(|p| p.field != "spec.addresses"),
                "{any}"
            );
        }
    }

    #[test]
    fn a_grpc_backends_own_header_filters_apply_to_its_share() {
        let yaml = format!(
            "{BASE}apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: calls, namespace: shop}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs:
    - {{name: a, port: 8080, filters: [{{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: x-b, value: a}}]}}}}]}}
    - {{name: b, port: 8080}}
"
        );
        let t = translated(&yaml);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let r = &t.config.routes[0];
        let own = r.backends[0].service.clone().unwrap();
        assert!(own.starts_with("shop/a:8080~grpc~for="), "{own}");
        assert_eq!(r.backends[1].service.as_deref(), Some("shop/b:8080~grpc"));
        let p = t
            .config
            .plugins
            .iter()
            .find(|p| p.service.as_deref() == Some(own.as_str()))
            .expect("the backend's own entry");
        assert_eq!(p.name, "request-transformer");
        assert_eq!(p.route.as_deref(), Some(r.id.as_str()));
    }

    #[test]
    fn supported_features_are_sorted_and_unique() {
        let mut sorted = super::SUPPORTED_FEATURES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, super::SUPPORTED_FEATURES);
    }

    #[test]
    fn timeouts_and_retries_make_one_service_copy_per_distinct_setting() {
        let yaml = format!(
            "{BASE}apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: shop}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /one}}}}]
    timeouts: {{request: 2s, backendRequest: 500ms}}
    retry: {{attempts: 2, codes: [503, 502, 503, 200]}}
    backendRefs: [{{name: a, port: 8080}}]
  - matches: [{{path: {{type: PathPrefix, value: /two}}}}]
    timeouts: {{request: 2s, backendRequest: 500ms}}
    retry: {{attempts: 2, codes: [502, 503]}}
    backendRefs: [{{name: a, port: 8080}}]
  - matches: [{{path: {{type: PathPrefix, value: /three}}}}]
    timeouts: {{request: soon}}
    backendRefs: [{{name: a, port: 8080}}]
"
        );
        let t = translated(&yaml);
        let service_of = |i: usize| t.config.routes[i].service.clone().unwrap();
        let id = "shop/a:8080~timeout=500ms~retry=2:502,503";
        assert_eq!(service_of(0), id);
        assert_eq!(service_of(1), id, "the same settings share one copy");
        assert_eq!(
            service_of(2),
            "shop/a:8080",
            "an unreadable timeout is left out"
        );
        let copies: Vec<_> = t.config.services.iter().filter(|s| s.id == id).collect();
        assert_eq!(copies.len(), 1);
        let s = copies[0];
        assert_eq!((s.read_timeout, s.retries), (500, 2));
        assert_eq!(s.retry_on.statuses, [502, 503]);
        assert!(s.retry_on.timeouts, "a try that times out is retried");
        let fields: Vec<&str> = t.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rules[0].retry.codes[3]",
                "spec.rules[2].timeouts.request"
            ]
        );
    }

    #[test]
    fn rules_become_routes_with_the_specs_precedence_and_filters_become_plugins() {
        let yaml = format!(
            "{BASE}apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: shop}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [www.example.com, other.org]
  rules:
  - matches:
    - {{path: {{type: Exact, value: /x}}, method: GET, headers: [{{name: A, value: '1'}}, {{name: a, value: '2'}}]}}
    - queryParams: [{{name: q, value: v}}]
    filters:
    - {{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: s, value: '1'}}], add: [{{name: d, value: '2'}}], remove: [r]}}}}
    backendRefs: [{{name: a, port: 8080, weight: 3}}, {{name: b, port: 8080}}, {{name: gone, port: 1}}]
  - backendRefs: [{{name: a, port: 8080}}]
"
        );
        let t = translated(&yaml);
        let ids: Vec<&str> = t.config.routes.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "httproute:shop/web/r0/m0",
                "httproute:shop/web/r0/m1",
                "httproute:shop/web/r1/m0"
            ]
        );
        let r0 = &t.config.routes[0];
        // Only the host under the listener's wildcard is served.
        assert_eq!(r0.hosts, ["www.example.com"]);
        // The method, then one header match (the second `a` is dropped, as the spec says).
        assert_eq!(r0.priority, (1 << 20) | (1 << 10));
        assert_eq!(r0.header_matches.len(), 1);
        assert!(r0.preserve_host && r0.service.is_none());
        let shares: Vec<(Option<&str>, u32)> = r0
            .backends
            .iter()
            .map(|b| (b.service.as_deref(), b.weight))
            .collect();
        assert_eq!(
            shares,
            [
                (Some("shop/a:8080"), 3),
                (Some("shop/b:8080"), 1),
                (None, 1)
            ]
        );
        assert_eq!(t.config.routes[1].priority, 1);
        // One backend: the same plain route an Ingress makes.
        let r2 = &t.config.routes[2];
        assert_eq!(r2.service.as_deref(), Some("shop/a:8080"));
        assert!(r2.backends.is_empty());
        let p = t
            .config
            .plugins
            .iter()
            .find(|p| p.id == "httproute:shop/web/r0/m0/request-transformer")
            .expect("header modifier entry");
        assert_eq!(p.route.as_deref(), Some("httproute:shop/web/r0/m0"));
        assert_eq!(
            p.config,
            serde_json::json!({"remove": {"headers": ["r", "s"]}, "add": {"headers": ["s:1"]}, "append": {"headers": ["d:2"]}})
        );
        let problem = t
            .problems
            .iter()
            .find(|p| p.object.to_string() == "HTTPRoute shop/web")
            .expect("the missing Service is reported on the route");
        assert_eq!(problem.field, "spec.rules[0].backendRefs[2]");
        let status = &t.gateway_api.http_routes["shop/web"].parents[0];
        let resolved = &status.conditions[1];
        assert_eq!(
            (resolved.type_, resolved.status, resolved.reason.as_str()),
            ("ResolvedRefs", "False", "BackendNotFound")
        );
        assert_eq!(
            t.gateway_api.gateways["shop/gw"].listeners[0].attached_routes,
            1
        );
    }

    #[test]
    fn gateways_of_other_controllers_and_their_routes_are_left_alone() {
        let yaml = "\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: theirs}
spec: {controllerName: example.com/other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec: {gatewayClassName: theirs, listeners: [{name: http, port: 80, protocol: HTTP}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec: {parentRefs: [{name: gw}], rules: [{backendRefs: [{name: a, port: 80}]}]}
";
        let t = translate(
            &Store::from_manifests(yaml),
            &Options::default(),
            &weir_proxy::Registry::builtin(),
        );
        assert!(t.config.routes.is_empty());
        assert!(t.gateway_api.is_empty(), "{:?}", t.gateway_api);
        assert!(t.problems.is_empty());
    }
}
