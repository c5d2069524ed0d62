//! An Ingress as Gateway API objects, for `weir migrate --to gateway-api`: its rules as one
//! HTTPRoute per host, its TLS entries as HTTPS listeners of the namespace's Gateway, and its
//! `weir.dev/*` annotations (those `weir migrate` made of ingress-nginx's included) as filters:
//! Weir Plugins by `ExtensionRef`, `strip-path` and `rewrite` as `URLRewrite`, `host-header` as
//! a host rewrite, `methods` and `headers.*` as matches, timeouts and retries as the rule's.
//! What has no Gateway API form is reported, never dropped silently.
//!
//! Pure: the store is read for Service port names only.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use serde_json::{json, Value};
use weir_crds::annotations as ann;

use crate::store::{Key, Store};

/// The name of the Gateway (and GatewayClass) the converted routes attach to.
pub const GATEWAY_NAME: &str = "weir";

/// What became of one annotation or field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    /// The annotation or field.
    pub what: String,
    /// Whether it carried over.
    pub carried: bool,
    /// How, or why not.
    pub note: String,
}

/// An Ingress as Gateway API objects.
#[derive(Debug, Default)]
pub struct Converted {
    /// HTTPRoute manifests.
    pub routes: Vec<Value>,
    /// HTTPS listeners the namespace's Gateway needs: (host, Secret name).
    pub tls: Vec<(String, String)>,
    /// What became of each annotation and field.
    pub outcomes: Vec<Outcome>,
}

impl Converted {
    /// Whether everything carried over.
    pub fn carries_over(&self) -> bool {
        self.outcomes.iter().all(|o| o.carried)
    }

    fn note(&mut self, what: impl Into<String>, carried: bool, note: impl Into<String>) {
        self.outcomes.push(Outcome {
            what: what.into(),
            carried,
            note: note.into(),
        });
    }
}

/// The Gateway of a namespace: HTTP on port 80, and one HTTPS listener on 443 per host.
pub fn gateway(namespace: &str, tls: &[(String, String)]) -> Value {
    let mut listeners = vec![json!({"name": "http", "port": 80, "protocol": "HTTP"})];
    let mut seen = std::collections::BTreeSet::new();
    for (i, (host, secret)) in tls.iter().enumerate() {
        if !seen.insert(host.clone()) {
            continue;
        }
        listeners.push(json!({
            "name": format!("https-{i}"),
            "port": 443,
            "protocol": "HTTPS",
            "hostname": host,
            "tls": {"certificateRefs": [{"name": secret}]},
        }));
    }
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": GATEWAY_NAME, "namespace": namespace},
        "spec": {"gatewayClassName": GATEWAY_NAME, "listeners": listeners},
    })
}

/// The GatewayClass the Gateways name.
pub fn gateway_class() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": GATEWAY_NAME},
        "spec": {"controllerName": weir_crds::gateway::CONTROLLER_NAME},
    })
}

/// Converts a Weir-native Ingress.
pub fn convert(key: &Key, ing: &Ingress, store: &Store) -> Converted {
    let mut out = Converted::default();
    let annotations = ing.metadata.annotations.clone().unwrap_or_default();
    let spec = ing.spec.clone().unwrap_or_default();

    // Filters and match conditions shared by every rule.
    let mut filters: Vec<Value> = Vec::new();
    let mut methods: Vec<String> = Vec::new();
    let mut headers: Vec<Value> = Vec::new();
    let mut rule_extra = serde_json::Map::new();
    let mut strip = false;
    let mut rewrite: Option<String> = None;
    // `weir.dev/protocols`: which listeners the routes attach to; for HTTPS alone, plain HTTP
    // requests are redirected with this status (`weir.dev/https-redirect-status-code`).
    let protocols = a_value(&annotations, ann::PROTOCOLS).unwrap_or_default();
    let https_only = protocols.split(',').map(str::trim).eq(["https"]);
    let http_only = protocols.split(',').map(str::trim).eq(["http"]);
    let mut redirect_code: u16 = 426;
    for (name, value) in &annotations {
        let Some(short) = name.strip_prefix(ann::PREFIX) else {
            continue;
        };
        let value = value.trim();
        match short {
            "plugins" => {
                for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    if p.contains('/') {
                        out.note(
                            name.as_str(),
                            false,
                            format!(
                                "{p}: ExtensionRef names Plugins of the route's namespace only"
                            ),
                        );
                    } else {
                        filters.push(json!({
                            "type": "ExtensionRef",
                            "extensionRef": {"group": weir_crds::GROUP, "kind": "Plugin", "name": p},
                        }));
                        out.note(name.as_str(), true, format!("{p}: an ExtensionRef filter"));
                    }
                }
            }
            "strip-path" => {
                strip = value == "true";
                out.note(name.as_str(), true, "a URLRewrite ReplacePrefixMatch to /");
            }
            "rewrite" if !value.contains('$') => {
                rewrite = Some(value.to_string());
                out.note(name.as_str(), true, "a URLRewrite ReplaceFullPath");
            }
            "host-header" => {
                filters.push(json!({"type": "URLRewrite", "urlRewrite": {"hostname": value}}));
                out.note(name.as_str(), true, "a URLRewrite hostname");
            }
            "preserve-host" => {
                let same = value == "true";
                let note = if same {
                    "HTTPRoute backends get the client's Host"
                } else {
                    "HTTPRoute backends always get the client's Host (add a URLRewrite hostname)"
                };
                out.note(name.as_str(), same, note);
            }
            "protocols" => {
                let note = if https_only {
                    "the routes attach to the HTTPS listeners (port 443); a redirect route takes HTTP"
                } else if http_only {
                    "the routes attach to the HTTP listener only"
                } else {
                    "the routes attach to every listener"
                };
                out.note(name.as_str(), true, note);
            }
            "https-redirect-status-code" => {
                let code = value.parse::<u16>().unwrap_or(426);
                redirect_code = code;
                let (carried, note) = match code {
                    301 | 302 | 303 | 307 | 308 => (true, "the redirect route's statusCode"),
                    _ => (
                        false,
                        "a 426 answer has no Gateway API form: the redirect route answers 301",
                    ),
                };
                if https_only {
                    out.note(name.as_str(), carried, note);
                }
            }
            "methods" => {
                methods = value
                    .split(',')
                    .map(|m| m.trim().to_ascii_uppercase())
                    .filter(|m| !m.is_empty())
                    .collect();
                out.note(name.as_str(), true, "a method match per method");
            }
            "read-timeout" => match value.parse::<u64>() {
                Ok(ms) => {
                    rule_extra.insert(
                        "timeouts".into(),
                        json!({"backendRequest": format!("{ms}ms")}),
                    );
                    out.note(name.as_str(), true, "timeouts.backendRequest");
                }
                Err(_) => out.note(name.as_str(), false, "not a number of milliseconds"),
            },
            "retries" => match value.parse::<u32>() {
                Ok(n) => {
                    rule_extra.insert("retry".into(), json!({"attempts": n}));
                    out.note(name.as_str(), true, "retry.attempts");
                }
                Err(_) => out.note(name.as_str(), false, "not a number"),
            },
            "unsupported-annotations" => {}
            other if other.starts_with("headers.") => {
                let header = &other["headers.".len()..];
                let first = value.split(',').next().unwrap_or_default().trim();
                headers.push(json!({"name": header, "value": first}));
                let note = if value.contains(',') {
                    "a header match on the first value only (HTTPRoute matches one value)"
                } else {
                    "a header match"
                };
                out.note(name.as_str(), !value.contains(','), note);
            }
            _ => out.note(
                name.as_str(),
                false,
                "no Gateway API form: the HTTPRoute is served without it",
            ),
        }
    }

    for t in spec.tls.iter().flatten() {
        match &t.secret_name {
            Some(secret) => {
                for h in t.hosts.iter().flatten() {
                    out.tls.push((h.clone(), secret.clone()));
                }
                out.note(
                    "spec.tls",
                    true,
                    format!("HTTPS listeners with Secret {secret}"),
                );
            }
            None => out.note("spec.tls", false, "an entry without secretName"),
        }
    }
    if spec.default_backend.is_some() {
        out.note(
            "spec.defaultBackend",
            false,
            "a catch-all HTTPRoute would serve other Ingresses' hosts too; write one if wanted",
        );
    }

    // One HTTPRoute per host (a rule without host: one without hostnames).
    let mut by_host: BTreeMap<Option<String>, Vec<Value>> = BTreeMap::new();
    for rule in spec.rules.iter().flatten() {
        let rules = by_host.entry(rule.host.clone()).or_default();
        for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
            let mut path = p.path.clone().unwrap_or_else(|| "/".into());
            let (kind, note) = match p.path_type.as_str() {
                "Exact" => ("Exact", None),
                "Prefix" => ("PathPrefix", None),
                // Weir's regex form (`/~` then the pattern) matches from the start.
                _ if path.starts_with("/~") => {
                    path = format!("{}.*", &path[2..]);
                    ("RegularExpression", None)
                }
                _ => (
                    "PathPrefix",
                    Some("ImplementationSpecific paths become PathPrefix"),
                ),
            };
            if let Some(n) = note {
                out.note(format!("path {path}"), true, n);
            }
            let mut matches: Vec<Value> = Vec::new();
            let base = |method: Option<&String>| {
                let mut m = json!({"path": {"type": kind, "value": path}});
                if let Some(method) = method {
                    m["method"] = method.clone().into();
                }
                if !headers.is_empty() {
                    m["headers"] = headers.clone().into();
                }
                m
            };
            if methods.is_empty() {
                matches.push(base(None));
            } else {
                matches.extend(methods.iter().map(|m| base(Some(m))));
            }
            let mut rule_filters = filters.clone();
            if let Some(full) = &rewrite {
                let path = json!({"type": "ReplaceFullPath", "replaceFullPath": full});
                rule_filters.push(json!({"type": "URLRewrite", "urlRewrite": {"path": path}}));
            } else if strip {
                let path_mod = if kind == "Exact" {
                    json!({"type": "ReplaceFullPath", "replaceFullPath": "/"})
                } else {
                    json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"})
                };
                rule_filters.push(json!({"type": "URLRewrite", "urlRewrite": {"path": path_mod}}));
            }
            let mut r = json!({"matches": matches});
            if !rule_filters.is_empty() {
                r["filters"] = rule_filters.into();
            }
            match backend_ref(&key.namespace, p.backend.clone(), store) {
                Ok(b) => r["backendRefs"] = json!([b]),
                Err(why) => out.note(format!("path {path}"), false, why),
            }
            for (k, v) in &rule_extra {
                r[k] = v.clone();
            }
            rules.push(r);
        }
    }
    for (i, (host, rules)) in by_host.into_iter().enumerate() {
        let name = if i == 0 {
            key.name.clone()
        } else {
            format!("{}-{i}", key.name)
        };
        // HTTPS alone needs a listener with this host's certificate: without one the route
        // stays on every listener (ingress-nginx redirects for a TLS proxy in front, which
        // the Gateway API cannot say).
        let has_tls = host
            .as_ref()
            .is_some_and(|h| out.tls.iter().any(|(t, _)| t == h));
        if https_only && !has_tls {
            out.note(
                format!(
                    "{} (host {})",
                    ann::PROTOCOLS,
                    host.as_deref().unwrap_or("*")
                ),
                false,
                "HTTPS alone, but the Ingress has no certificate for the host: served on \
                 every listener, without the redirect",
            );
        }
        let https_only = https_only && has_tls;
        let parent = if https_only {
            json!({"name": GATEWAY_NAME, "port": 443})
        } else if http_only {
            json!({"name": GATEWAY_NAME, "sectionName": "http"})
        } else {
            json!({"name": GATEWAY_NAME})
        };
        let mut route = json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": key.namespace},
            "spec": {"parentRefs": [parent], "rules": rules},
        });
        if let Some(h) = &host {
            route["spec"]["hostnames"] = json!([h]);
        }
        out.routes.push(route);
        if https_only {
            let code = match redirect_code {
                c @ (301 | 302 | 303 | 307 | 308) => c,
                _ => 301,
            };
            let mut redirect = json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": format!("{name}-https-redirect"), "namespace": key.namespace},
                "spec": {
                    "parentRefs": [{"name": GATEWAY_NAME, "sectionName": "http"}],
                    "rules": [{"filters": [{"type": "RequestRedirect",
                        "requestRedirect": {"scheme": "https", "statusCode": code}}]}],
                },
            });
            if let Some(h) = &host {
                redirect["spec"]["hostnames"] = json!([h]);
            }
            out.routes.push(redirect);
        }
    }
    out
}

/// An annotation's value, trimmed.
fn a_value<'m>(annotations: &'m BTreeMap<String, String>, name: &str) -> Option<&'m str> {
    annotations.get(name).map(|v| v.trim())
}

/// A backendRef for an Ingress backend: the Service port by number (a named port is looked
/// up on the Service).
fn backend_ref(namespace: &str, b: IngressBackend, store: &Store) -> Result<Value, String> {
    let Some(svc) = b.service else {
        return Err("a resource backend has no Gateway API form".into());
    };
    let port = svc.port.unwrap_or_default();
    let number = match (port.number, &port.name) {
        (Some(n), _) => n,
        (None, Some(name)) => store
            .services
            .get(&Key::new(namespace, svc.name.as_str()))
            .and_then(|s| {
                s.spec
                    .as_ref()?
                    .ports
                    .as_ref()?
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
                    .map(|p| p.port)
            })
            .ok_or_else(|| {
                format!(
                    "Service {namespace}/{}: no port named {name} to give a number to",
                    svc.name
                )
            })?,
        (None, None) => return Err(format!("Service {namespace}/{}: no port", svc.name)),
    };
    Ok(json!({"name": svc.name, "port": number}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::{translate, Options};

    const INGRESS: &str = "\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: demo
  annotations:
    weir.dev/plugins: limits, cluster/global-auth
    weir.dev/strip-path: 'true'
    weir.dev/methods: GET,POST
    weir.dev/read-timeout: '2500'
    weir.dev/access-log: 'false'
spec:
  ingressClassName: weir
  tls: [{hosts: [shop.example.com], secretName: shop-cert}]
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /api, pathType: Prefix, backend: {service: {name: api, port: {name: http}}}}
      - {path: /health, pathType: Exact, backend: {service: {name: api, port: {number: 8080}}}}
  - host: admin.example.com
    http:
      paths:
      - {path: /, pathType: ImplementationSpecific, backend: {service: {name: admin, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: demo}
spec: {ports: [{name: http, port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: admin, namespace: demo}
spec: {ports: [{port: 80}]}
---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {name: limits, namespace: demo}
spec: {plugin: request-size-limiting, config: {allowed_payload_size: 1}}
";

    #[test]
    fn an_ingress_becomes_routes_a_gateway_can_serve() {
        let store = Store::from_manifests(INGRESS);
        let key = Key::new("demo", "shop");
        let c = convert(&key, &store.ingresses[&key], &store);
        assert_eq!(c.routes.len(), 2, "one HTTPRoute per host");
        assert_eq!(
            c.tls,
            [("shop.example.com".to_string(), "shop-cert".to_string())]
        );
        let not: Vec<&str> = c
            .outcomes
            .iter()
            .filter(|o| !o.carried)
            .map(|o| o.what.as_str())
            .collect();
        assert_eq!(
            not,
            ["weir.dev/access-log", "weir.dev/plugins"],
            "{:?}",
            c.outcomes
        );
        assert!(!c.carries_over());

        // What it wrote is served by the translator as the Ingress meant it.
        let mut docs: Vec<String> = vec![
            serde_yaml::to_string(&gateway_class()).unwrap(),
            serde_yaml::to_string(&gateway("demo", &c.tls)).unwrap(),
        ];
        docs.extend(c.routes.iter().map(|r| serde_yaml::to_string(r).unwrap()));
        let services: String = INGRESS
            .split("---\n")
            .skip(1)
            .collect::<Vec<_>>()
            .join("---\n");
        let yaml = format!("{}---\n{services}", docs.join("---\n"));
        let t = translate(
            &Store::from_manifests(&yaml),
            &Options::default(),
            &weir_proxy::Registry::builtin(),
        );
        let problems: Vec<String> = t.problems.iter().map(|p| p.to_string()).collect();
        assert!(
            problems
                .iter()
                .all(|p| p.contains("HTTPS") || p.contains("shop-cert")),
            "only the missing certificate Secret: {problems:?}"
        );
        let route = t
            .config
            .routes
            .iter()
            .find(|r| r.paths[0].path == "/api" && r.methods == ["POST"])
            .expect("the /api route for POST");
        assert_eq!(route.hosts, ["shop.example.com"]);
        assert!(route.strip_path, "strip-path as a prefix rewrite");
        let service = t
            .config
            .services
            .iter()
            .find(|s| Some(&s.id) == route.service.as_ref())
            .unwrap();
        assert_eq!(service.read_timeout, 2500);
        assert!(
            t.config
                .plugins
                .iter()
                .any(|p| p.name == "request-size-limiting"
                    && p.route.as_deref() == Some(route.id.as_str())),
            "the Plugin attached by ExtensionRef"
        );
        let admin = t
            .config
            .routes
            .iter()
            .find(|r| r.hosts == ["admin.example.com"])
            .expect("the admin host");
        assert!(
            admin
                .service
                .as_deref()
                .is_some_and(|s| s.starts_with("demo/admin:80~")),
            "the annotations apply to every rule: {:?}",
            admin.service
        );
    }

    #[test]
    fn https_only_ingresses_get_a_redirect_route_on_http() {
        let yaml = "\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: secure
  namespace: demo
  annotations: {weir.dev/protocols: https, weir.dev/https-redirect-status-code: '308'}
spec:
  ingressClassName: weir
  tls: [{hosts: [secure.example.com], secretName: cert}]
  rules:
  - host: secure.example.com
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: demo}
spec: {ports: [{port: 80}]}
";
        let store = Store::from_manifests(yaml);
        let key = Key::new("demo", "secure");
        let c = convert(&key, &store.ingresses[&key], &store);
        assert!(c.carries_over(), "{:?}", c.outcomes);
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[0]["spec"]["parentRefs"][0]["port"], 443);
        let redirect = &c.routes[1];
        assert_eq!(redirect["spec"]["parentRefs"][0]["sectionName"], "http");
        assert_eq!(
            redirect["spec"]["rules"][0]["filters"][0]["requestRedirect"],
            json!({"scheme": "https", "statusCode": 308})
        );
        assert_eq!(redirect["spec"]["hostnames"], json!(["secure.example.com"]));
    }
}
