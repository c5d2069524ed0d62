//! Plugin and ClusterPlugin resources → plugin entries of the routing table.
//!
//! Every resource is checked once (its config, or the Secret key it comes from, against the
//! proxy's plugin registry). A route or service that names a missing or rejected plugin is
//! left out rather than served without it: a broken authentication plugin must not open a
//! route.
//!
//! A plugin that Consumers name (their `weir.dev/plugins` annotation) is consumer-scoped:
//!
//! - a Plugin named by served Consumers and by an Ingress or Service of its own namespace is
//!   paired with each route or service that names it (route+consumer, service+consumer entries
//!   replacing the plain entry), as Kong's ingress controller does;
//! - a Plugin only Consumers name gets one consumer-only entry per consumer, with the Plugin's
//!   namespace (the proxy applies it only on that namespace's routes);
//! - a ClusterPlugin named by a Consumer gets a consumer-only entry with the Consumer's
//!   namespace, and never changes a route's or service's entries: a Consumer of one namespace
//!   cannot take a ClusterPlugin off another team's routes.
//!
//! A ClusterPlugin attached by an Ingress or a Service carries that object's namespace (its
//! authentication finds only that namespace's consumers); only a global entry has none.

use weir_proxy::config::PluginConfig;

use super::{obj, Translator};
use crate::problem::{ObjectRef, Reason};
use crate::store::{Key, Kind};

/// Which resource a plugin name resolved to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum PluginRef {
    Namespaced(Key),
    Cluster(String),
}

impl PluginRef {
    /// `namespace/name` or `cluster/name`: the prefix of its entries' ids.
    pub(super) fn id(&self) -> String {
        match self {
            PluginRef::Namespaced(key) => key.to_string(),
            PluginRef::Cluster(name) => format!("cluster/{name}"),
        }
    }

    /// The resource, for problems.
    pub(super) fn object(&self) -> ObjectRef {
        match self {
            PluginRef::Namespaced(key) => obj(Kind::Plugin, key),
            PluginRef::Cluster(name) => ObjectRef {
                kind: Kind::ClusterPlugin,
                namespace: None,
                name: name.clone(),
            },
        }
    }
}

/// A checked plugin resource, ready to be attached to scopes.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    /// `namespace/name` or `cluster/name`: the prefix of its entries' ids.
    id: String,
    plugin: String,
    config: serde_json::Value,
    enabled: bool,
    priority: Option<i32>,
    /// The Plugin's namespace (`None` for a ClusterPlugin, whose entries take the namespace of
    /// what attaches them).
    namespace: Option<String>,
}

impl Resolved {
    /// The plugin kind (`rate-limiting`, `key-auth`, …).
    pub(super) fn kind(&self) -> &str {
        &self.plugin
    }

    /// The configuration, as the routing table gets it.
    pub(super) fn config(&self) -> &serde_json::Value {
        &self.config
    }

    /// The routing-table entry for one scope. Ids: `<plugin>[@<route or service>][~<consumer>]`,
    /// `<plugin>@~<consumer>` for a consumer alone.
    ///
    /// `namespace`: the namespace of the object attaching it (Ingress, Service, Consumer), the
    /// entry's namespace for a ClusterPlugin; `None` only for a global entry. A Plugin's entries
    /// always carry the Plugin's namespace.
    pub(super) fn entry(
        &self,
        namespace: Option<&str>,
        route: Option<&str>,
        service: Option<&str>,
        consumer: Option<&str>,
    ) -> PluginConfig {
        let mut scope = route.or(service).map_or(String::new(), |s| format!("@{s}"));
        if let Some(c) = consumer {
            if scope.is_empty() {
                scope.push('@');
            }
            scope.push('~');
            scope.push_str(c);
        }
        PluginConfig {
            id: format!("{}{scope}", self.id),
            name: self.plugin.clone(),
            config: self.config.clone(),
            route: route.map(str::to_string),
            service: service.map(str::to_string),
            consumer: consumer.map(str::to_string),
            namespace: self.namespace.clone().or(namespace.map(str::to_string)),
            enabled: self.enabled,
            priority: self.priority,
        }
    }
}

impl Translator<'_> {
    /// Reads a configuration from a labelled Secret key (JSON or YAML).
    fn config_from_secret(
        &self,
        ns: &str,
        name: &str,
        key: &str,
    ) -> Result<serde_json::Value, String> {
        let secret = self.store.secrets.get(&Key::new(ns, name)).ok_or_else(|| {
            format!(
                "Secret {ns}/{name} not found (it must carry the label {}=\"true\")",
                weir_crds::CREDENTIAL_LABEL
            )
        })?;
        // In a cluster only labelled Secrets are watched; requiring the label here too keeps
        // standalone mode and the cluster in agreement.
        let label = secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(weir_crds::CREDENTIAL_LABEL))
            .map(String::as_str);
        match label {
            Some(weir_crds::CONFIG_SECRET_LABEL_VALUE) => {}
            None => {
                return Err(format!(
                    "Secret {ns}/{name} lacks the label {}=\"true\"",
                    weir_crds::CREDENTIAL_LABEL
                ))
            }
            Some(other) => {
                return Err(format!(
                    "Secret {ns}/{name} has the label {}={other:?}, which marks a Consumer's credential; a plugin configuration needs \"true\"",
                    weir_crds::CREDENTIAL_LABEL
                ))
            }
        }
        let text = super::secret_text(secret, key)
            .ok_or_else(|| format!("Secret {ns}/{name} has no key {key:?}"))?;
        // The error must not echo the Secret's contents.
        serde_yaml::from_str::<serde_json::Value>(&text)
            .map_err(|_| format!("Secret {ns}/{name} key {key:?} is not JSON or YAML"))
    }

    pub(super) fn check(&mut self, r: &PluginRef) -> Result<Resolved, String> {
        if let Some(done) = self.plugin_cache.get(r) {
            return done.clone();
        }
        let id = r.id();
        let (object, namespace, plugin, config, from, enabled, priority) = match r {
            PluginRef::Namespaced(key) => {
                let p = &self.store.plugins[key];
                let from = p.spec.config_from.as_ref().map(|f| {
                    (
                        key.namespace.clone(),
                        f.secret_key_ref.name.clone(),
                        f.secret_key_ref.key.clone(),
                    )
                });
                (
                    r.object(),
                    Some(key.namespace.clone()),
                    p.spec.plugin.clone(),
                    p.spec.config.clone(),
                    from,
                    !p.spec.disabled,
                    p.spec.priority,
                )
            }
            PluginRef::Cluster(name) => {
                let p = &self.store.cluster_plugins[name];
                let f = p.spec.config_from.as_ref().map(|f| {
                    let r = &f.secret_key_ref;
                    (r.namespace.clone(), r.name.clone(), r.key.clone())
                });
                (
                    r.object(),
                    None,
                    p.spec.plugin.clone(),
                    p.spec.config.clone(),
                    f,
                    !p.spec.disabled,
                    p.spec.priority,
                )
            }
        };
        self.checked.insert(object.clone());
        let result = (|| {
            let mut config = match (config, from) {
                (Some(_), Some(_)) => {
                    return Err((
                        "spec.configFrom".to_string(),
                        "set either spec.config or spec.configFrom, not both".to_string(),
                    ));
                }
                (None, Some((ns, name, key))) => self
                    .config_from_secret(&ns, &name, &key)
                    .map_err(|m| ("spec.configFrom".to_string(), m))?,
                (Some(c), None) => c,
                (None, None) => serde_json::json!({}),
            };
            if plugin == super::mtls_auth::KIND {
                self.mtls_ca_certificates(namespace.as_deref(), &mut config)?;
            }
            match self.validator.check(&plugin, &config) {
                Ok(()) => Ok(config),
                Err(None) => Err((
                    "spec.plugin".to_string(),
                    format!("unknown plugin {plugin:?}"),
                )),
                Err(Some(m)) => Err(("spec.config".to_string(), m)),
            }
        })();
        let out = match result {
            Ok(config) => Ok(Resolved {
                id,
                plugin,
                config,
                enabled,
                priority,
                namespace,
            }),
            Err((field, message)) => {
                let reason = if field == "spec.configFrom" || field.starts_with("spec.config.ca") {
                    Reason::InvalidSecret
                } else {
                    Reason::InvalidPluginConfig
                };
                self.problem(object.clone(), reason, field, message.clone());
                Err(format!("{object} is not accepted: {message}"))
            }
        };
        self.plugin_cache.insert(r.clone(), out.clone());
        out
    }

    /// Checks every plugin resource, referenced or not, so each gets its condition.
    pub(super) fn check_all_plugins(&mut self) {
        let keys: Vec<Key> = self
            .store
            .plugins
            .keys()
            .filter(|k| self.in_scope(&k.namespace))
            .cloned()
            .collect();
        for k in keys {
            let _ = self.check(&PluginRef::Namespaced(k));
        }
        let names: Vec<String> = self.store.cluster_plugins.keys().cloned().collect();
        for n in names {
            let _ = self.check(&PluginRef::Cluster(n));
        }
    }

    /// ClusterPlugins with `global: true` apply to every route.
    pub(super) fn global_plugins(&mut self) {
        let globals: Vec<String> = self
            .store
            .cluster_plugins
            .iter()
            .filter(|(_, p)| p.spec.global)
            .map(|(n, _)| n.clone())
            .collect();
        let mut seen = std::collections::BTreeMap::new();
        for name in globals {
            let checked = self.check(&PluginRef::Cluster(name.clone()));
            let kind = self.store.cluster_plugins[&name].spec.plugin.as_str();
            let guards =
                kind == "ip-restriction" || weir_proxy::config::NOT_CONSUMER_SCOPED.contains(&kind);
            if checked.is_err() && guards && !self.store.cluster_plugins[&name].spec.disabled {
                // Serving every route without the global gatekeeper would open them all.
                let object = ObjectRef {
                    kind: Kind::ClusterPlugin,
                    namespace: None,
                    name: name.clone(),
                };
                self.problem(
                    object,
                    Reason::PluginNotAccepted,
                    "spec.global",
                    format!("a global {kind:?} plugin that is not accepted: every route answers 503 until it is fixed or disabled"),
                );
                self.global_broken = Some("a global access-control ClusterPlugin is not accepted");
            }
            if let Ok(r) = checked {
                // One global instance per plugin kind: the first by name wins.
                if let Some(first) = seen.get(&r.plugin) {
                    let object = ObjectRef {
                        kind: Kind::ClusterPlugin,
                        namespace: None,
                        name,
                    };
                    self.problem(object, Reason::Conflict, "spec.global", format!("ClusterPlugin {first} is already the global {:?} plugin; this one is not applied globally", r.plugin));
                    continue;
                }
                seen.insert(r.plugin.clone(), name);
                self.config.plugins.push(r.entry(None, None, None, None));
            }
        }
    }

    /// The resource a plugin name means for an object in `namespace`: a Plugin in the same
    /// namespace, else a ClusterPlugin.
    pub(super) fn plugin_ref(&self, namespace: &str, name: &str) -> Option<PluginRef> {
        let key = Key::new(namespace, name);
        if self.store.plugins.contains_key(&key) {
            Some(PluginRef::Namespaced(key))
        } else if self.store.cluster_plugins.contains_key(name) {
            Some(PluginRef::Cluster(name.to_string()))
        } else {
            None
        }
    }

    /// The entries of a plugin named by a route or a service (one of the two set) of
    /// `namespace`. A Plugin of that namespace that served Consumers of that namespace name
    /// too applies to those consumers only on that route or service: one entry per consumer,
    /// and none without a consumer (pairing). Anything else, a ClusterPlugin in particular,
    /// gets its plain entry, with `namespace` when it is a ClusterPlugin.
    pub(super) fn scoped_entries(
        &self,
        p: &Resolved,
        namespace: &str,
        route: Option<&str>,
        service: Option<&str>,
    ) -> Vec<PluginConfig> {
        let paired: Vec<String> = match (&p.namespace, self.consumer_scopes.get(&p.id)) {
            (Some(own), Some((PluginRef::Namespaced(_), consumers))) if own == namespace => {
                consumers
                    .iter()
                    .filter(|c| c.namespace == namespace)
                    .map(Key::to_string)
                    .collect()
            }
            _ => Vec::new(),
        };
        if paired.is_empty() {
            return vec![p.entry(Some(namespace), route, service, None)];
        }
        paired
            .iter()
            .map(|c| p.entry(Some(namespace), route, service, Some(c)))
            .collect()
    }

    /// Resolves the names of a `weir.dev/plugins` annotation for an object in `namespace`:
    /// a Plugin in the same namespace, else a ClusterPlugin.
    pub(super) fn resolve_names(
        &mut self,
        namespace: &str,
        names: &[String],
    ) -> Result<Vec<Resolved>, (Reason, String)> {
        let mut out = Vec::new();
        for name in names {
            let Some(r) = self.plugin_ref(namespace, name) else {
                return Err((
                    Reason::PluginNotFound,
                    format!("no Plugin {namespace}/{name} and no ClusterPlugin {name}"),
                ));
            };
            match self.check(&r) {
                Ok(resolved) => {
                    if out.iter().any(|o: &Resolved| o.plugin == resolved.plugin) {
                        return Err((
                            Reason::Conflict,
                            format!(
                                "two plugins of kind {:?} are named; keep one",
                                resolved.plugin
                            ),
                        ));
                    }
                    out.push(resolved)
                }
                Err(why) => return Err((Reason::PluginNotAccepted, why)),
            }
        }
        Ok(out)
    }
}
