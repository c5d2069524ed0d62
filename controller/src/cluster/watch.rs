//! Watchers for every kind the translator reads, feeding the shared store.
//!
//! kube-runtime's watcher lists, then watches from the list's resourceVersion, and relists on
//! `410 Gone`; errors back off. Each watcher remembers the keys it contributed so a relist can
//! drop objects deleted while it was away without touching what other watchers provided.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use weir_crds::{ClusterPlugin, Plugin, Upstream};

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
}

impl Shared {
    /// Whether every watcher has listed once (translating earlier would serve a partial view).
    pub fn all_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire) >= self.watchers.load(Ordering::Acquire)
    }
}

fn key_of<K: Resource>(kind: Kind, o: &K) -> Key {
    match kind {
        Kind::IngressClass | Kind::ClusterPlugin => {
            Key::new("", o.meta().name.clone().unwrap_or_default())
        }
        _ => Key::of(o),
    }
}

/// Runs one watcher until the process ends.
async fn run<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
    wrap: fn(K) -> Object,
    shared: Arc<Shared>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut mine: BTreeSet<Key> = BTreeSet::new();
    let mut listing: Vec<K> = Vec::new();
    let mut first_sync = true;
    let mut stream = watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(o)) => {
                mine.insert(key_of(kind, &o));
                shared
                    .store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(wrap(o));
                shared.changed.notify_one();
            }
            Ok(Event::Delete(o)) => {
                let key = key_of(kind, &o);
                mine.remove(&key);
                shared
                    .store
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(kind, &key);
                shared.changed.notify_one();
            }
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(o)) => listing.push(o),
            Ok(Event::InitDone) => {
                let fresh: BTreeSet<Key> = listing.iter().map(|o| key_of(kind, o)).collect();
                {
                    let mut store = shared.store.lock().unwrap_or_else(|e| e.into_inner());
                    for gone in mine.difference(&fresh) {
                        store.remove(kind, gone);
                    }
                    for o in listing.drain(..) {
                        store.insert(wrap(o));
                    }
                }
                mine = fresh;
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

fn spawn_apis<K>(
    apis: Vec<Api<K>>,
    config: watcher::Config,
    kind: Kind,
    wrap: fn(K) -> Object,
    shared: &Arc<Shared>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    for api in apis {
        shared.watchers.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(run(api, config.clone(), kind, wrap, shared.clone()));
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
    // Only TLS Secrets and Secrets labelled as Weir credentials are read.
    let tls = all.clone().fields("type=kubernetes.io/tls");
    spawn::<Secret>(
        client,
        namespaces,
        tls,
        Kind::Secret,
        Object::Secret,
        shared,
    );
    let creds = all
        .clone()
        .labels(&format!("{}=true", weir_crds::CREDENTIAL_LABEL));
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
        all,
        Kind::Upstream,
        Object::Upstream,
        shared,
    );
}
