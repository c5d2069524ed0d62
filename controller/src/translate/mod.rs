//! The translator: a pure function from the object store to the proxy's routing table and the
//! problems found on the way. No client, no I/O, no clock: the same store always gives the same
//! `Config` (and hash), which is what the golden tests check.

pub mod annotations;
mod backend;
mod ingress;
mod plugins;
mod tls;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceBackendPort;
use weir_proxy::config::{Config, PluginValidator};

use crate::problem::{ObjectRef, Problem, Reason};
use crate::store::{Key, Kind, Store};

/// Controller-wide settings the translation depends on.
#[derive(Debug, Clone)]
pub struct Options {
    /// The class this controller serves (`--ingress-class`).
    pub ingress_class: String,
    /// A Service port answering requests no Ingress rule matches (`--default-backend`).
    pub default_backend: Option<(Key, ServiceBackendPort)>,
    /// Only these namespaces, when set (`--watch-namespace`).
    pub watch_namespaces: Option<BTreeSet<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ingress_class: "weir".into(),
            default_backend: None,
            watch_namespaces: None,
        }
    }
}

/// The result of one translation.
#[derive(Debug, Clone, Default)]
pub struct Translation {
    /// The routing table, with its hash.
    pub config: Config,
    /// Everything that could not be served as written, sorted.
    pub problems: Vec<Problem>,
    /// The Ingresses this controller serves (their status is ours to write).
    pub owned_ingresses: Vec<Key>,
    /// Weir resources that were checked, with or without problems (for their conditions).
    pub checked: Vec<ObjectRef>,
}

impl Translation {
    /// Problems about one object.
    pub fn problems_of<'a>(&'a self, obj: &'a ObjectRef) -> impl Iterator<Item = &'a Problem> + 'a {
        self.problems.iter().filter(move |p| &p.object == obj)
    }
}

/// Translates the store.
pub fn translate(store: &Store, opts: &Options, plugins: &dyn PluginValidator) -> Translation {
    let mut t = Translator::new(store, opts, plugins);
    t.run();
    t.finish()
}

/// Shared state of one translation.
struct Translator<'a> {
    store: &'a Store,
    opts: &'a Options,
    validator: &'a dyn PluginValidator,
    config: Config,
    problems: Vec<Problem>,
    /// EndpointSlices by (namespace, service name), in key order.
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    /// Backends already built: (namespace, service, port) → the proxy service id, or the
    /// failure already reported on the Service.
    backends: BTreeMap<(String, String, i32), Result<String, backend::BackendError>>,
    /// Plugin resources already checked: reference → resolved plugin or why not.
    plugin_cache: BTreeMap<plugins::PluginRef, Result<plugins::Resolved, String>>,
    /// (host, path kind, path) → the Ingress serving it.
    claimed: HashMap<(String, &'static str, String), Key>,
    owned: Vec<Key>,
    checked: BTreeSet<ObjectRef>,
}

impl<'a> Translator<'a> {
    fn new(store: &'a Store, opts: &'a Options, validator: &'a dyn PluginValidator) -> Self {
        let mut slices: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
        for (key, slice) in &store.endpoint_slices {
            let labels = slice.metadata.labels.as_ref();
            if let Some(svc) = labels.and_then(|l| l.get("kubernetes.io/service-name")) {
                slices
                    .entry((key.namespace.as_str(), svc.as_str()))
                    .or_default()
                    .push(slice);
            }
        }
        Translator {
            store,
            opts,
            validator,
            config: Config::default(),
            problems: Vec::new(),
            slices,
            backends: BTreeMap::new(),
            plugin_cache: BTreeMap::new(),
            claimed: HashMap::new(),
            owned: Vec::new(),
            checked: BTreeSet::new(),
        }
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.opts
            .watch_namespaces
            .as_ref()
            .is_none_or(|set| set.contains(namespace))
    }

    fn problem(
        &mut self,
        object: ObjectRef,
        reason: Reason,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.problems.push(Problem {
            object,
            reason,
            field: field.into(),
            message: message.into(),
        });
    }

    fn run(&mut self) {
        self.check_all_plugins();
        self.global_plugins();
        self.ingresses();
        self.controller_default_backend();
        self.check_upstreams();
    }

    fn finish(mut self) -> Translation {
        self.problems.sort();
        self.problems.dedup();
        let config = std::mem::take(&mut self.config).with_hash();
        Translation {
            config,
            problems: self.problems,
            owned_ingresses: self.owned,
            checked: self.checked.into_iter().collect(),
        }
    }
}

/// An object reference for problems.
fn obj(kind: Kind, key: &Key) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: Some(key.namespace.clone()),
        name: key.name.clone(),
    }
}
