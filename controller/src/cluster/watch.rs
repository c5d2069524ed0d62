//! Watchers for every kind the translator reads, feeding the shared store.
//!
//! kube-runtime's watcher lists, then watches from the list's resourceVersion, and relists on
//! `410 Gone`; errors back off. Each watcher remembers the keys it contributed so a relist can
//! drop objects deleted while it was away without touching what other watchers provided. Two
//! watchers can provide the same object (a TLS Secret that is also labelled
//! `weir.dev/credential`): it leaves the store only when neither holds it any more.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use weir_crds::gateway::{
    BackendTLSPolicy, GRPCRoute, Gateway, GatewayClass, HTTPRoute, ReferenceGrant, TLSRoute,
};
use weir_crds::{ClusterPlugin, Consumer, Plugin, Upstream};

use crate::store::{Key, Kind, Object, Store};

/// What the watchers share with the reconcile loop.
pub struct Shared {
    /// The objects seen so far.
    pub store: Mutex<Store>,
    /// Woken on every change.
    pub changed: Notify,
    /// Watchers that finished their first list.
    pub synced: AtomicUsize,
    /// Watchers started.
    pub watchers: AtomicUsize,
    /// How many watchers currently hold each object (always locked after `store`).
    pub holders: Mutex<HashMap<(Kind, Key), usize>>,
}

impl Shared {
    /// Whether every watcher has listed once (translating earlier would serve a partial view).
    pub fn all_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire) >= self.watchers.load(Ordering::Acquire)
    }
}

impl Shared {
    /// A watcher (whose keys are `mine`) saw an object added or changed.
    fn applied(&self, mine: &mut BTreeSet<Key>, kind: Kind, key: Key, obj: Object) {
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        if mine.insert(key.clone()) {
            *holders.entry((kind, key)).or_default() += 1;
        }
        store.insert(obj);
    }

    /// A watcher saw an object go (deleted, or no longer matching its selector): it leaves
    /// the store unless another watcher still holds it.
    fn deleted(&self, mine: &mut BTreeSet<Key>, kind: Kind, key: Key) {
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        if mine.remove(&key) {
            release(&mut holders, kind, &key);
        }
        if !holders.contains_key(&(kind, key.clone())) {
            store.remove(kind, &key);
        }
    }

    /// A watcher listed its objects (at start and after `410 Gone`): what it held and no
    /// longer lists goes, unless another watcher holds it.
    fn listed(&self, mine: &mut BTreeSet<Key>, kind: Kind, listing: Vec<(Key, Object)>) {
        let fresh: BTreeSet<Key> = listing.iter().map(|(k, _)| k.clone()).collect();
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        for gone in mine.difference(&fresh) {
            if release(&mut holders, kind, gone) {
                store.remove(kind, gone);
            }
        }
        for new in fresh.difference(mine) {
            *holders.entry((kind, new.clone())).or_default() += 1;
        }
        for (_, o) in listing {
            store.insert(o);
        }
        *mine = fresh;
    }
}

/// One watcher less holds the object; returns whether none is left.
fn release(holders: &mut HashMap<(Kind, Key), usize>, kind: Kind, key: &Key) -> bool {
    let k = (kind, key.clone());
    match holders.get_mut(&k) {
        Some(n) if *n > 1 => {
            *n -= 1;
            false
        }
        _ => {
            holders.remove(&k);
            true
        }
    }
}

fn key_of<K: Resource>(kind: Kind, o: &K) -> Key {
    match kind {
        Kind::IngressClass | Kind::ClusterPlugin | Kind::Namespace | Kind::GatewayClass => {
            Key::new("", o.meta().name.clone().unwrap_or_default())
        }
        _ => Key::of(o),
    }
}

/// Runs one watcher until the process ends.
async fn run<K, W>(api: Api<K>, config: watcher::Config, kind: Kind, wrap: W, shared: Arc<Shared>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    W: Fn(K) -> Object,
{
    let mut mine: BTreeSet<Key> = BTreeSet::new();
    let mut listing: Vec<(Key, Object)> = Vec::new();
    let mut first_sync = true;
    let mut stream = watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(o)) => {
                shared.applied(&mut mine, kind, key_of(kind, &o), wrap(o));
                shared.changed.notify_one();
            }
            Ok(Event::Delete(o)) => {
                shared.deleted(&mut mine, kind, key_of(kind, &o));
                shared.changed.notify_one();
            }
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(o)) => listing.push((key_of(kind, &o), wrap(o))),
            Ok(Event::InitDone) => {
                shared.listed(&mut mine, kind, std::mem::take(&mut listing));
                if first_sync {
                    first_sync = false;
                    shared.synced.fetch_add(1, Ordering::AcqRel);
                }
                tracing::debug!(kind = kind.as_str(), objects = mine.len(), "listed");
                shared.changed.notify_one();
            }
            Err(e) => {
                tracing::warn!(kind = kind.as_str(), error = %e, "watch failed; retrying with backoff")
            }
        }
    }
}

fn spawn_apis<K, W>(
    apis: Vec<Api<K>>,
    config: watcher::Config,
    kind: Kind,
    wrap: W,
    shared: &Arc<Shared>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    W: Fn(K) -> Object + Clone + Send + Sync + 'static,
{
    for api in apis {
        shared.watchers.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(run(api, config.clone(), kind, wrap.clone(), shared.clone()));
    }
}

fn spawn<K>(
    client: &Client,
    namespaces: &Option<Vec<String>>,
    config: watcher::Config,
    kind: Kind,
    wrap: fn(K) -> Object,
    shared: &Arc<Shared>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let apis = match namespaces {
        Some(list) => list
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
        None => vec![Api::all(client.clone())],
    };
    spawn_apis(apis, config, kind, wrap, shared);
}

fn spawn_cluster<K>(
    client: &Client,
    config: watcher::Config,
    kind: Kind,
    wrap: fn(K) -> Object,
    shared: &Arc<Shared>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    spawn_apis(vec![Api::all(client.clone())], config, kind, wrap, shared);
}

/// Starts a watcher per kind (per namespace with `--watch-namespace`).
pub fn start(client: &Client, namespaces: &Option<Vec<String>>, shared: &Arc<Shared>) {
    let all = watcher::Config::default();
    spawn::<Ingress>(
        client,
        namespaces,
        all.clone(),
        Kind::Ingress,
        Object::Ingress,
        shared,
    );
    spawn_cluster::<IngressClass>(
        client,
        all.clone(),
        Kind::IngressClass,
        Object::IngressClass,
        shared,
    );
    spawn::<Service>(
        client,
        namespaces,
        all.clone(),
        Kind::Service,
        Object::Service,
        shared,
    );
    let slices = all.clone().labels("kubernetes.io/service-name");
    spawn::<EndpointSlice>(
        client,
        namespaces,
        slices,
        Kind::EndpointSlice,
        Object::EndpointSlice,
        shared,
    );
    // Only TLS Secrets (Ingress certificates, Upstream client certificates and CA bundles) and
    // Secrets labelled `weir.dev/credential` (with any value: `"true"` for Plugin
    // configurations and Upstream CA bundles, the credential kind for Consumers' credentials)
    // are read.
    let tls = all.clone().fields("type=kubernetes.io/tls");
    spawn::<Secret>(
        client,
        namespaces,
        tls,
        Kind::Secret,
        Object::Secret,
        shared,
    );
    let creds = all.clone().labels(weir_crds::CREDENTIAL_LABEL);
    spawn::<Secret>(
        client,
        namespaces,
        creds,
        Kind::Secret,
        Object::Secret,
        shared,
    );
    spawn::<Plugin>(
        client,
        namespaces,
        all.clone(),
        Kind::Plugin,
        Object::Plugin,
        shared,
    );
    spawn_cluster::<ClusterPlugin>(
        client,
        all.clone(),
        Kind::ClusterPlugin,
        Object::ClusterPlugin,
        shared,
    );
    spawn::<Upstream>(
        client,
        namespaces,
        all.clone(),
        Kind::Upstream,
        Object::Upstream,
        shared,
    );
    // ConfigMaps: headers that ingress-nginx's `custom-headers` and `auth-proxy-set-headers`
    // name, and the CA certificates of BackendTLSPolicies and Gateways' `spec.tls.frontend`.
    spawn::<ConfigMap>(
        client,
        namespaces,
        all.clone(),
        Kind::ConfigMap,
        Object::ConfigMap,
        shared,
    );
    spawn::<Consumer>(
        client,
        namespaces,
        all,
        Kind::Consumer,
        Object::Consumer,
        shared,
    );
}

/// The Gateway API group the controller serves.
const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// How often the controller looks for the Gateway API CRDs until they are installed.
pub const GATEWAY_API_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// Which Gateway API resources the API server serves, from its discovery documents.
#[derive(Debug, Default, PartialEq)]
struct GatewayApiServed {
    /// The v1 resources (plural names).
    v1: BTreeSet<String>,
    /// The v1beta1 resources (plural names).
    v1beta1: BTreeSet<String>,
    /// The v1alpha2 resources (plural names).
    v1alpha2: BTreeSet<String>,
    /// The v1alpha3 resources (plural names).
    v1alpha3: BTreeSet<String>,
}

impl GatewayApiServed {
    /// Whether enough is served to run Gateways: the three kinds every Gateway needs.
    fn usable(&self) -> bool {
        ["gatewayclasses", "gateways", "httproutes"]
            .iter()
            .all(|r| self.v1.contains(*r))
    }
}

/// The plural names served at `group/version`; empty when the version is not served.
async fn served(client: &Client, version: &str) -> Result<BTreeSet<String>, kube::Error> {
    match client
        .list_api_group_resources(&format!("{GATEWAY_GROUP}/{version}"))
        .await
    {
        Ok(list) => Ok(list
            .resources
            .into_iter()
            .map(|r| r.name)
            .filter(|n| !n.contains('/'))
            .collect()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

/// Waits until the API server serves the Gateway API (the upstream CRDs are installed), then
/// starts its watchers. Until then the controller serves Ingresses alone and says so once.
pub async fn gateway_api(client: Client, namespaces: Option<Vec<String>>, shared: Arc<Shared>) {
    let mut said_off = false;
    let found = loop {
        let found = async {
            Ok::<_, kube::Error>(GatewayApiServed {
                v1: served(&client, "v1").await?,
                v1beta1: served(&client, "v1beta1").await?,
                v1alpha2: served(&client, "v1alpha2").await?,
                v1alpha3: served(&client, "v1alpha3").await?,
            })
        }
        .await;
        match found {
            Ok(f) if f.usable() => break f,
            Ok(_) if !said_off => {
                said_off = true;
                tracing::info!(
                    group = GATEWAY_GROUP,
                    "the Gateway API CRDs are not installed: Gateway API is off; \
                     Weir starts watching Gateways when they appear"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(group = GATEWAY_GROUP, error = %e, "Gateway API discovery failed")
            }
        }
        tokio::time::sleep(GATEWAY_API_POLL).await;
    };
    let grants = if found.v1.contains("referencegrants") {
        Some("v1")
    } else if found.v1beta1.contains("referencegrants") {
        Some("v1beta1")
    } else {
        None
    };
    let tls = if found.v1.contains("tlsroutes") {
        Some("v1")
    } else if found.v1alpha2.contains("tlsroutes") {
        Some("v1alpha2")
    } else {
        None
    };
    tracing::info!(
        group = GATEWAY_GROUP,
        grpc_routes = found.v1.contains("grpcroutes"),
        reference_grants = grants.unwrap_or("not served"),
        tls_routes = tls.unwrap_or("not served"),
        "Gateway API is on"
    );
    start_gateway_api(&client, &namespaces, &shared, &found, grants, tls);
    shared.changed.notify_one();
}

/// Starts the watchers of the Gateway API kinds that are served, and of Namespaces (whose
/// labels listeners' `allowedRoutes` select on).
fn start_gateway_api(
    client: &Client,
    namespaces: &Option<Vec<String>>,
    shared: &Arc<Shared>,
    found: &GatewayApiServed,
    grants: Option<&str>,
    tls: Option<&str>,
) {
    let all = watcher::Config::default();
    spawn_cluster::<Namespace>(
        client,
        all.clone(),
        Kind::Namespace,
        Object::Namespace,
        shared,
    );
    spawn_cluster::<GatewayClass>(
        client,
        all.clone(),
        Kind::GatewayClass,
        Object::GatewayClass,
        shared,
    );
    spawn::<Gateway>(
        client,
        namespaces,
        all.clone(),
        Kind::Gateway,
        Object::Gateway,
        shared,
    );
    spawn::<HTTPRoute>(
        client,
        namespaces,
        all.clone(),
        Kind::HTTPRoute,
        Object::HTTPRoute,
        shared,
    );
    if found.v1.contains("grpcroutes") {
        spawn::<GRPCRoute>(
            client,
            namespaces,
            all.clone(),
            Kind::GRPCRoute,
            Object::GRPCRoute,
            shared,
        );
    }
    let policies = if found.v1.contains("backendtlspolicies") {
        Some("v1")
    } else if found.v1alpha3.contains("backendtlspolicies") {
        Some("v1alpha3")
    } else {
        None
    };
    {
        let mut store = shared.store.lock().unwrap_or_else(|e| e.into_inner());
        for (kind, version) in [(Kind::BackendTLSPolicy, policies), (Kind::TLSRoute, tls)] {
            match version {
                Some(v) if v != "v1" => store.served_versions.insert(kind, v.to_string()),
                _ => store.served_versions.remove(&kind),
            };
        }
    }
    if let Some(version) = policies {
        // v1 from Gateway API v1.4 on, v1alpha3 (experimental channel) before.
        spawn_versioned::<BackendTLSPolicy>(
            client,
            namespaces,
            version,
            all.clone(),
            Kind::BackendTLSPolicy,
            Object::BackendTLSPolicy,
            shared,
        );
    }
    if let Some(version) = tls {
        // v1 from Gateway API v1.5 on, v1alpha2 (experimental channel) before.
        spawn_versioned::<TLSRoute>(
            client,
            namespaces,
            version,
            all.clone(),
            Kind::TLSRoute,
            Object::TLSRoute,
            shared,
        );
    }
    if let Some(version) = grants {
        spawn_versioned::<ReferenceGrant>(
            client,
            namespaces,
            version,
            all,
            Kind::ReferenceGrant,
            Object::ReferenceGrant,
            shared,
        );
    }
}

/// Watches a namespaced kind at another version of its group than its Rust type names, whose
/// schema is the same (ReferenceGrant: `v1` from Gateway API v1.5 on, `v1beta1` before).
fn spawn_versioned<K>(
    client: &Client,
    namespaces: &Option<Vec<String>>,
    version: &str,
    config: watcher::Config,
    kind: Kind,
    wrap: fn(K) -> Object,
    shared: &Arc<Shared>,
) where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + DeserializeOwned
        + 'static,
{
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&K::group(&()), version, &K::kind(&())),
        &K::plural(&()),
    );
    let apis = match namespaces {
        Some(list) => list
            .iter()
            .map(|ns| Api::namespaced_with(client.clone(), ns, &ar))
            .collect(),
        None => vec![Api::all_with(client.clone(), &ar)],
    };
    let typed = move |o: DynamicObject| wrap(typed::<K>(o, kind));
    spawn_apis::<DynamicObject, _>(apis, config, kind, typed, shared);
}

/// `o` as its typed kind; one the type cannot read (the API server validated it, so a schema
/// Weir does not know) keeps only its metadata, with a warning: a ReferenceGrant then grants
/// nothing. `K`'s spec must read `{}`.
fn typed<K: Resource<DynamicType = ()> + DeserializeOwned>(o: DynamicObject, kind: Kind) -> K {
    let mut v = serde_json::to_value(&o).unwrap_or_default();
    v["apiVersion"] = K::api_version(&()).into();
    serde_json::from_value::<K>(v).unwrap_or_else(|e| {
        tracing::warn!(kind = kind.as_str(), name = ?o.metadata.name, namespace = ?o.metadata.namespace, error = %e, "object not understood; only its name is kept");
        let v = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": o.metadata,
            "spec": {},
        });
        serde_json::from_value(v).expect("a spec that reads {}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    fn secret(name: &str) -> (Key, Object) {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        (Key::new("ns", name), Object::Secret(s))
    }

    /// A labelled TLS Secret comes from both Secret watchers: losing the label (a delete for
    /// the label watcher) must not drop it while the TLS watcher still has it.
    #[test]
    fn a_v1beta1_reference_grant_reads_as_the_typed_one() {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": {"name": "g", "namespace": "b"},
            "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "a"}],
                     "to": [{"group": "", "kind": "Service"}]},
        }))
        .unwrap();
        let g: ReferenceGrant = typed(o, Kind::ReferenceGrant);
        assert_eq!(g.metadata.name.as_deref(), Some("g"));
        assert_eq!(g.spec.from[0].namespace, "a");
        assert_eq!(g.spec.to[0].kind, "Service");
        // A shape Weir cannot read: kept by name, granting nothing.
        let odd: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": {"name": "odd", "namespace": "b"},
            "spec": {"from": "everyone"},
        }))
        .unwrap();
        let g: ReferenceGrant = typed(odd, Kind::ReferenceGrant);
        assert_eq!(g.metadata.name.as_deref(), Some("odd"));
        assert!(g.spec.from.is_empty() && g.spec.to.is_empty());
    }

    #[test]
    fn an_object_two_watchers_hold_stays_until_both_let_go() {
        let shared = Shared {
            store: Mutex::new(Store::default()),
            changed: Notify::new(),
            synced: AtomicUsize::new(0),
            watchers: AtomicUsize::new(2),
            holders: Mutex::new(HashMap::new()),
        };
        let (mut tls, mut labelled) = (BTreeSet::new(), BTreeSet::new());
        let has = |name: &str| {
            shared
                .store
                .lock()
                .unwrap()
                .secrets
                .contains_key(&Key::new("ns", name))
        };
        let (k, o) = secret("both");
        shared.listed(&mut tls, Kind::Secret, vec![(k.clone(), o.clone())]);
        shared.applied(&mut labelled, Kind::Secret, k.clone(), o.clone());
        shared.applied(&mut labelled, Kind::Secret, k.clone(), o);
        shared.deleted(&mut labelled, Kind::Secret, k.clone());
        assert!(has("both"), "the TLS watcher still holds it");
        // A relist of the TLS watcher without it: now nobody holds it.
        let (k2, o2) = secret("other");
        shared.listed(&mut tls, Kind::Secret, vec![(k2, o2)]);
        assert!(!has("both"));
        assert!(has("other"));
        // One watcher alone: a delete removes at once.
        let (k3, o3) = secret("alone");
        shared.applied(&mut labelled, Kind::Secret, k3.clone(), o3);
        shared.deleted(&mut labelled, Kind::Secret, k3);
        assert!(!has("alone"));
        assert_eq!(
            shared.holders.lock().unwrap().len(),
            1,
            "only \"other\" is held"
        );
    }
}
