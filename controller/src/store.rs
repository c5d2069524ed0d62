//! The objects the translator reads, keyed by namespace/name in sorted maps so translation is
//! deterministic. Filled by the Kubernetes watchers or by the manifest folder.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::ResourceExt;
use weir_crds::gateway::{
    BackendTLSPolicy, GRPCRoute, Gateway, GatewayClass, HTTPRoute, ReferenceGrant, TLSRoute,
};
use weir_crds::{ClusterPlugin, Consumer, Plugin, Upstream};

/// Namespace and name of a namespaced object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl Key {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Key {
        Key {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a namespaced object (`default` when the manifest leaves it out).
    pub fn of<K: kube::Resource>(obj: &K) -> Key {
        Key::new(
            obj.namespace().unwrap_or_else(|| "default".into()),
            obj.name_any(),
        )
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Every object kind the translator reads.
#[derive(Debug, Clone)]
pub enum Object {
    /// networking.k8s.io/v1 Ingress.
    Ingress(Ingress),
    /// networking.k8s.io/v1 IngressClass.
    IngressClass(IngressClass),
    /// v1 Service.
    Service(Service),
    /// discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice(EndpointSlice),
    /// v1 Secret.
    Secret(Secret),
    /// weir.dev/v1alpha1 Plugin.
    Plugin(Plugin),
    /// weir.dev/v1alpha1 ClusterPlugin.
    ClusterPlugin(ClusterPlugin),
    /// weir.dev/v1alpha1 Upstream.
    Upstream(Upstream),
    /// weir.dev/v1alpha1 Consumer.
    Consumer(Consumer),
    /// v1 Namespace (its labels, for Gateway listeners' `allowedRoutes` selectors).
    Namespace(Namespace),
    /// gateway.networking.k8s.io GatewayClass.
    GatewayClass(GatewayClass),
    /// gateway.networking.k8s.io Gateway.
    Gateway(Gateway),
    /// gateway.networking.k8s.io HTTPRoute.
    HTTPRoute(HTTPRoute),
    /// gateway.networking.k8s.io GRPCRoute.
    GRPCRoute(GRPCRoute),
    /// gateway.networking.k8s.io TLSRoute (`v1`, or `v1alpha2` before Gateway API v1.5).
    TLSRoute(TLSRoute),
    /// gateway.networking.k8s.io BackendTLSPolicy (`v1`, or `v1alpha3` before v1.4).
    BackendTLSPolicy(BackendTLSPolicy),
    /// v1 ConfigMap (CA certificates of BackendTLSPolicies).
    ConfigMap(ConfigMap),
    /// gateway.networking.k8s.io ReferenceGrant (`v1` or `v1beta1`).
    ReferenceGrant(ReferenceGrant),
}

/// The kinds of [`Object`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Ingress.
    Ingress,
    /// IngressClass.
    IngressClass,
    /// Service.
    Service,
    /// EndpointSlice.
    EndpointSlice,
    /// Secret.
    Secret,
    /// Plugin.
    Plugin,
    /// ClusterPlugin.
    ClusterPlugin,
    /// Upstream.
    Upstream,
    /// Consumer.
    Consumer,
    /// Namespace.
    Namespace,
    /// GatewayClass.
    GatewayClass,
    /// Gateway.
    Gateway,
    /// HTTPRoute.
    HTTPRoute,
    /// GRPCRoute.
    GRPCRoute,
    /// TLSRoute.
    TLSRoute,
    /// BackendTLSPolicy.
    BackendTLSPolicy,
    /// ConfigMap.
    ConfigMap,
    /// ReferenceGrant.
    ReferenceGrant,
}

impl Kind {
    /// The Kubernetes `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ingress => "Ingress",
            Kind::IngressClass => "IngressClass",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Secret => "Secret",
            Kind::Plugin => "Plugin",
            Kind::ClusterPlugin => "ClusterPlugin",
            Kind::Upstream => "Upstream",
            Kind::Consumer => "Consumer",
            Kind::Namespace => "Namespace",
            Kind::GatewayClass => "GatewayClass",
            Kind::Gateway => "Gateway",
            Kind::HTTPRoute => "HTTPRoute",
            Kind::GRPCRoute => "GRPCRoute",
            Kind::TLSRoute => "TLSRoute",
            Kind::BackendTLSPolicy => "BackendTLSPolicy",
            Kind::ConfigMap => "ConfigMap",
            Kind::ReferenceGrant => "ReferenceGrant",
        }
    }
}

impl Object {
    /// Decodes one manifest; `Ok(None)` for kinds Weir does not read (Deployments, …).
    pub fn from_value(v: serde_json::Value) -> Result<Option<Object>, String> {
        let api_version = v
            .get("apiVersion")
            .and_then(|a| a.as_str())
            .unwrap_or("")
            .to_string();
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        fn de<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, String> {
            serde_json::from_value(v).map_err(|e| e.to_string())
        }
        let obj = match (api_version.as_str(), kind.as_str()) {
            ("networking.k8s.io/v1", "Ingress") => Object::Ingress(de(v)?),
            ("networking.k8s.io/v1", "IngressClass") => Object::IngressClass(de(v)?),
            ("v1", "Service") => Object::Service(de(v)?),
            ("discovery.k8s.io/v1", "EndpointSlice") => Object::EndpointSlice(de(v)?),
            ("v1", "Secret") => Object::Secret(de(v)?),
            ("weir.dev/v1alpha1", "Plugin") => Object::Plugin(de(v)?),
            ("weir.dev/v1alpha1", "ClusterPlugin") => Object::ClusterPlugin(de(v)?),
            ("weir.dev/v1alpha1", "Upstream") => Object::Upstream(de(v)?),
            ("weir.dev/v1alpha1", "Consumer") => Object::Consumer(de(v)?),
            ("v1", "Namespace") => Object::Namespace(de(v)?),
            (GATEWAY_V1 | GATEWAY_V1BETA1, "GatewayClass") => Object::GatewayClass(de(v)?),
            (GATEWAY_V1 | GATEWAY_V1BETA1, "Gateway") => Object::Gateway(de(v)?),
            (GATEWAY_V1 | GATEWAY_V1BETA1, "HTTPRoute") => Object::HTTPRoute(de(v)?),
            (GATEWAY_V1, "GRPCRoute") => Object::GRPCRoute(de(v)?),
            (GATEWAY_V1 | GATEWAY_V1ALPHA2, "TLSRoute") => Object::TLSRoute(de(v)?),
            (GATEWAY_V1 | GATEWAY_V1ALPHA3, "BackendTLSPolicy") => Object::BackendTLSPolicy(de(v)?),
            ("v1", "ConfigMap") => Object::ConfigMap(de(v)?),
            (GATEWAY_V1 | GATEWAY_V1BETA1, "ReferenceGrant") => Object::ReferenceGrant(de(v)?),
            ("", _) | (_, "") => return Err("missing apiVersion or kind".into()),
            _ => return Ok(None),
        };
        Ok(Some(obj))
    }

    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Object::Ingress(_) => Kind::Ingress,
            Object::IngressClass(_) => Kind::IngressClass,
            Object::Service(_) => Kind::Service,
            Object::EndpointSlice(_) => Kind::EndpointSlice,
            Object::Secret(_) => Kind::Secret,
            Object::Plugin(_) => Kind::Plugin,
            Object::ClusterPlugin(_) => Kind::ClusterPlugin,
            Object::Upstream(_) => Kind::Upstream,
            Object::Consumer(_) => Kind::Consumer,
            Object::Namespace(_) => Kind::Namespace,
            Object::GatewayClass(_) => Kind::GatewayClass,
            Object::Gateway(_) => Kind::Gateway,
            Object::HTTPRoute(_) => Kind::HTTPRoute,
            Object::GRPCRoute(_) => Kind::GRPCRoute,
            Object::TLSRoute(_) => Kind::TLSRoute,
            Object::BackendTLSPolicy(_) => Kind::BackendTLSPolicy,
            Object::ConfigMap(_) => Kind::ConfigMap,
            Object::ReferenceGrant(_) => Kind::ReferenceGrant,
        }
    }
}

/// The Gateway API's served versions that Weir reads.
const GATEWAY_V1: &str = "gateway.networking.k8s.io/v1";
const GATEWAY_V1BETA1: &str = "gateway.networking.k8s.io/v1beta1";
const GATEWAY_V1ALPHA2: &str = "gateway.networking.k8s.io/v1alpha2";
const GATEWAY_V1ALPHA3: &str = "gateway.networking.k8s.io/v1alpha3";

/// Everything the translator reads.
#[derive(Debug, Clone, Default)]
pub struct Store {
    /// Ingresses.
    pub ingresses: BTreeMap<Key, Ingress>,
    /// IngressClasses by name.
    pub ingress_classes: BTreeMap<String, IngressClass>,
    /// Services.
    pub services: BTreeMap<Key, Service>,
    /// EndpointSlices.
    pub endpoint_slices: BTreeMap<Key, EndpointSlice>,
    /// Secrets (in a cluster: TLS Secrets and those labelled `weir.dev/credential` only).
    pub secrets: BTreeMap<Key, Secret>,
    /// Plugins.
    pub plugins: BTreeMap<Key, Plugin>,
    /// ClusterPlugins by name.
    pub cluster_plugins: BTreeMap<String, ClusterPlugin>,
    /// Upstreams.
    pub upstreams: BTreeMap<Key, Upstream>,
    /// Consumers.
    pub consumers: BTreeMap<Key, Consumer>,
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, Namespace>,
    /// GatewayClasses by name.
    pub gateway_classes: BTreeMap<String, GatewayClass>,
    /// Gateways.
    pub gateways: BTreeMap<Key, Gateway>,
    /// HTTPRoutes.
    pub http_routes: BTreeMap<Key, HTTPRoute>,
    /// GRPCRoutes.
    pub grpc_routes: BTreeMap<Key, GRPCRoute>,
    /// TLSRoutes.
    pub tls_routes: BTreeMap<Key, TLSRoute>,
    /// BackendTLSPolicies.
    pub backend_tls_policies: BTreeMap<Key, BackendTLSPolicy>,
    /// ConfigMaps.
    pub config_maps: BTreeMap<Key, ConfigMap>,
    /// ReferenceGrants.
    pub reference_grants: BTreeMap<Key, ReferenceGrant>,
    /// The API version Gateway API kinds are read (and their status written) at, where it is
    /// not `v1`: TLSRoute `v1alpha2` and BackendTLSPolicy `v1alpha3` before Gateway API v1.5
    /// and v1.4.
    pub served_versions: BTreeMap<Kind, String>,
}

impl Store {
    /// Adds or replaces an object.
    pub fn insert(&mut self, obj: Object) {
        match obj {
            Object::Ingress(o) => {
                self.ingresses.insert(Key::of(&o), o);
            }
            Object::IngressClass(o) => {
                self.ingress_classes.insert(o.name_any(), o);
            }
            Object::Service(o) => {
                self.services.insert(Key::of(&o), o);
            }
            Object::EndpointSlice(o) => {
                self.endpoint_slices.insert(Key::of(&o), o);
            }
            Object::Secret(o) => {
                self.secrets.insert(Key::of(&o), o);
            }
            Object::Plugin(o) => {
                self.plugins.insert(Key::of(&o), o);
            }
            Object::ClusterPlugin(o) => {
                self.cluster_plugins.insert(o.name_any(), o);
            }
            Object::Upstream(o) => {
                self.upstreams.insert(Key::of(&o), o);
            }
            Object::Consumer(o) => {
                self.consumers.insert(Key::of(&o), o);
            }
            Object::Namespace(o) => {
                self.namespaces.insert(o.name_any(), o);
            }
            Object::GatewayClass(o) => {
                self.gateway_classes.insert(o.name_any(), o);
            }
            Object::Gateway(o) => {
                self.gateways.insert(Key::of(&o), o);
            }
            Object::HTTPRoute(o) => {
                self.http_routes.insert(Key::of(&o), o);
            }
            Object::GRPCRoute(o) => {
                self.grpc_routes.insert(Key::of(&o), o);
            }
            Object::TLSRoute(o) => {
                self.tls_routes.insert(Key::of(&o), o);
            }
            Object::BackendTLSPolicy(o) => {
                self.backend_tls_policies.insert(Key::of(&o), o);
            }
            Object::ConfigMap(o) => {
                self.config_maps.insert(Key::of(&o), o);
            }
            Object::ReferenceGrant(o) => {
                self.reference_grants.insert(Key::of(&o), o);
            }
        }
    }

    /// Removes an object (`namespace` is ignored for cluster-scoped kinds).
    pub fn remove(&mut self, kind: Kind, key: &Key) {
        match kind {
            Kind::Ingress => drop(self.ingresses.remove(key)),
            Kind::IngressClass => drop(self.ingress_classes.remove(&key.name)),
            Kind::Service => drop(self.services.remove(key)),
            Kind::EndpointSlice => drop(self.endpoint_slices.remove(key)),
            Kind::Secret => drop(self.secrets.remove(key)),
            Kind::Plugin => drop(self.plugins.remove(key)),
            Kind::ClusterPlugin => drop(self.cluster_plugins.remove(&key.name)),
            Kind::Upstream => drop(self.upstreams.remove(key)),
            Kind::Consumer => drop(self.consumers.remove(key)),
            Kind::Namespace => drop(self.namespaces.remove(&key.name)),
            Kind::GatewayClass => drop(self.gateway_classes.remove(&key.name)),
            Kind::Gateway => drop(self.gateways.remove(key)),
            Kind::HTTPRoute => drop(self.http_routes.remove(key)),
            Kind::GRPCRoute => drop(self.grpc_routes.remove(key)),
            Kind::TLSRoute => drop(self.tls_routes.remove(key)),
            Kind::BackendTLSPolicy => drop(self.backend_tls_policies.remove(key)),
            Kind::ConfigMap => drop(self.config_maps.remove(key)),
            Kind::ReferenceGrant => drop(self.reference_grants.remove(key)),
        }
    }

    /// Number of objects per kind (for metrics and logs).
    pub fn counts(&self) -> [(Kind, usize); 18] {
        [
            (Kind::Ingress, self.ingresses.len()),
            (Kind::IngressClass, self.ingress_classes.len()),
            (Kind::Service, self.services.len()),
            (Kind::EndpointSlice, self.endpoint_slices.len()),
            (Kind::Secret, self.secrets.len()),
            (Kind::Plugin, self.plugins.len()),
            (Kind::ClusterPlugin, self.cluster_plugins.len()),
            (Kind::Upstream, self.upstreams.len()),
            (Kind::Consumer, self.consumers.len()),
            (Kind::Namespace, self.namespaces.len()),
            (Kind::GatewayClass, self.gateway_classes.len()),
            (Kind::Gateway, self.gateways.len()),
            (Kind::HTTPRoute, self.http_routes.len()),
            (Kind::GRPCRoute, self.grpc_routes.len()),
            (Kind::TLSRoute, self.tls_routes.len()),
            (Kind::BackendTLSPolicy, self.backend_tls_policies.len()),
            (Kind::ConfigMap, self.config_maps.len()),
            (Kind::ReferenceGrant, self.reference_grants.len()),
        ]
    }

    /// A store holding every object of a multi-document manifest text (tests).
    #[cfg(test)]
    pub fn from_manifests(text: &str) -> Store {
        let mut store = Store::default();
        for o in Store::parse_manifests(text).expect("test manifests parse") {
            store.insert(o);
        }
        store
    }

    /// Parses a multi-document YAML (or JSON) text into objects; `List` kinds are unpacked.
    pub fn parse_manifests(text: &str) -> Result<Vec<Object>, String> {
        let mut out = Vec::new();
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let value = <serde_yaml::Value as serde::Deserialize>::deserialize(doc)
                .map_err(|e| format!("document {}: {e}", i + 1))?;
            let json: serde_json::Value =
                serde_json::to_value(value).map_err(|e| format!("document {}: {e}", i + 1))?;
            if json.is_null() {
                continue;
            }
            let items = match (json.get("kind").and_then(|k| k.as_str()), json.get("items")) {
                (Some(k), Some(serde_json::Value::Array(items))) if k.ends_with("List") => {
                    items.clone()
                }
                _ => vec![json],
            };
            for item in items {
                let name = item
                    .pointer("/metadata/name")
                    .and_then(|n| n.as_str())
                    .unwrap_or("?")
                    .to_string();
                if let Some(obj) = Object::from_value(item)
                    .map_err(|e| format!("document {} ({name}): {e}", i + 1))?
                {
                    out.push(obj);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_document_yaml_and_lists() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: [{port: 80}]}\n---\n\
                    apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ignored}\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: b, namespace: x}}\n---\n\
                    apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: alice, namespace: x}\nspec: {credentials: [k]}\n";
        let objs = Store::parse_manifests(text).unwrap();
        assert_eq!(objs.len(), 3);
        let mut s = Store::default();
        objs.into_iter().for_each(|o| s.insert(o));
        assert!(s.services.contains_key(&Key::new("default", "a")));
        assert!(s.services.contains_key(&Key::new("x", "b")));
        assert_eq!(s.consumers[&Key::new("x", "alice")].spec.credentials, ["k"]);
        s.remove(Kind::Consumer, &Key::new("x", "alice"));
        assert!(s.consumers.is_empty());
    }

    #[test]
    fn bad_documents_are_named() {
        let e = Store::parse_manifests(
            "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: oops}\n",
        )
        .unwrap_err();
        assert!(e.contains("document 1 (a)"), "{e}");
        let e = Store::parse_manifests("a: [").unwrap_err();
        assert!(e.contains("document 1"), "{e}");
    }
}
