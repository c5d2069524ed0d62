//! Every plugin kind Weir has, and the instances in service.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use super::{PhaseFuture, Plugin, PluginFactory, PluginInstance};
use crate::config::{self, PluginConfig, PluginValidator};

/// The plugin kinds a proxy can run, and the instances of the routing table in service.
pub struct Registry {
    factories: Vec<Arc<dyn PluginFactory>>,
    /// Instances of the table in service, by kind and configuration: a new table reuses them.
    live: Mutex<HashMap<InstanceKey, Arc<dyn Plugin>>>,
}

/// A plugin kind and one configuration of it, in canonical form (object keys sorted).
#[derive(Clone, PartialEq, Eq, Hash)]
struct InstanceKey {
    kind: usize,
    config: String,
}

/// Instances built or reused for a routing table that is not in service yet.
#[derive(Default)]
pub struct Staged {
    instances: HashMap<InstanceKey, (Arc<dyn Plugin>, serde_json::Value)>,
}

impl Staged {
    /// Distinct instances (one per kind and configuration).
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// Whether no plugin is configured.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }
}

impl Registry {
    /// Every plugin kind that ships with Weir: the one list of them.
    pub fn builtin() -> Registry {
        #[allow(unused_mut)]
        let mut factories: Vec<Arc<dyn PluginFactory>> = vec![
            Arc::new(super::correlation_id::FACTORY),
            Arc::new(super::cors::FACTORY),
            Arc::new(super::ip_restriction::FACTORY),
            Arc::new(super::request_size_limiting::FACTORY),
            Arc::new(super::rate_limiting::Factory::default()),
            Arc::new(super::transformer::REQUEST),
            Arc::new(super::transformer::RESPONSE),
            Arc::new(super::cookie_rewrite::FACTORY),
            Arc::new(super::location_rewrite::FACTORY),
            Arc::new(super::redirect::FACTORY),
            Arc::new(super::context_path::FACTORY),
            Arc::new(super::rewrite::FACTORY),
            Arc::new(super::grpc_web::FACTORY),
            Arc::new(super::request_termination::FACTORY),
            Arc::new(super::auth::JWT),
            Arc::new(super::auth::KEY_AUTH),
            Arc::new(super::auth::MTLS_AUTH),
            Arc::new(super::auth::BASIC_AUTH),
            Arc::new(super::auth::ACL),
            Arc::new(super::forward_auth::FACTORY),
        ];
        // The plugins Weir's own tests observe the pipeline with: compiled in only when the
        // tests ask for them (a dev-dependency feature), so no switch turns them on in a
        // release binary.
        #[cfg(any(test, feature = "test-plugins"))]
        factories.extend(super::testing::factories());
        Registry::new(factories)
    }

    /// A registry of the given kinds.
    pub fn new(factories: Vec<Arc<dyn PluginFactory>>) -> Registry {
        for f in &factories {
            config::mark_secret_fields(f.name(), f.secret_fields());
        }
        Registry {
            factories,
            live: Mutex::new(HashMap::new()),
        }
    }

    fn kind(&self, name: &str) -> Option<(usize, &Arc<dyn PluginFactory>)> {
        self.factories
            .iter()
            .enumerate()
            .find(|(_, f)| f.name() == name)
    }

    /// Every kind's own metrics, appended to `out`.
    pub fn metrics(&self, out: &mut String) {
        for f in &self.factories {
            f.metrics(out);
        }
    }

    /// Looks a plugin kind up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn PluginFactory>> {
        self.kind(name).map(|(_, f)| f)
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.factories.iter().map(|f| f.name())
    }

    /// The instance for a configuration (validated by [`Registry::check`]): the one already
    /// staged or in service with the same kind and configuration, or a new one.
    pub fn instantiate(
        &self,
        cfg: &PluginConfig,
        staged: &mut Staged,
    ) -> Result<PluginInstance, String> {
        let (kind, factory) = self
            .kind(&cfg.name)
            .ok_or_else(|| format!("unknown plugin {:?}", cfg.name))?;
        let key = InstanceKey {
            kind,
            config: canonical(&cfg.config),
        };
        let plugin = match staged.instances.get(&key) {
            Some((p, _)) => p.clone(),
            None => {
                let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
                let plugin = match live.get(&key) {
                    Some(p) => p.clone(),
                    None => {
                        drop(live);
                        factory
                            .build(&cfg.config)
                            .map_err(|m| redact_message(factory.secret_fields(), m))?
                    }
                };
                staged
                    .instances
                    .insert(key, (plugin.clone(), cfg.config.clone()));
                plugin
            }
        };
        let mut instance = PluginInstance::new(
            factory.name(),
            &cfg.id,
            cfg.priority.unwrap_or(factory.priority()),
            plugin,
        );
        instance.namespace = cfg.namespace.as_deref().map(Arc::from);
        Ok(instance)
    }

    /// Makes `staged` the set in service (call after the table that uses it was swapped in)
    /// and tells every factory which of its configurations are active.
    pub fn activate(&self, staged: &Staged) {
        let mut by_kind: Vec<Vec<&serde_json::Value>> = vec![Vec::new(); self.factories.len()];
        let mut live = HashMap::with_capacity(staged.instances.len());
        for (key, (plugin, config)) in &staged.instances {
            by_kind[key.kind].push(config);
            live.insert(key.clone(), plugin.clone());
        }
        // The old instances go when the last request on the old table ends.
        *self.live.lock().unwrap_or_else(|e| e.into_inner()) = live;
        for (factory, active) in self.factories.iter().zip(&by_kind) {
            factory.configured(active);
        }
    }

    /// Runs every factory's per-worker start; called on each worker thread.
    pub fn start_worker(&self, worker: usize) {
        for f in &self.factories {
            f.start_worker(worker);
        }
    }

    /// Every factory's shutdown work.
    pub fn stop(&self) -> Vec<PhaseFuture<'static, ()>> {
        self.factories.iter().filter_map(|f| f.stop()).collect()
    }
}

impl PluginValidator for Registry {
    fn check(&self, name: &str, config: &serde_json::Value) -> Result<(), Option<String>> {
        let factory = self.get(name).ok_or(None)?;
        factory
            .validate(config)
            .map_err(|m| Some(redact_message(factory.secret_fields(), m)))
    }
}

/// A validation error about a secret field loses its detail (serde quotes bad values).
fn redact_message(secrets: &[&str], message: String) -> String {
    let path = message.split(':').next().unwrap_or("");
    // The error may be about the secret, inside it, or about an object that holds it (a
    // `redis` given as a URL string with the password in it).
    match secrets.iter().find(|s| {
        path == **s || path.starts_with(&format!("{s}.")) || s.starts_with(&format!("{path}."))
    }) {
        Some(field) => format!("{field}: invalid value (a secret, not shown)"),
        None => message,
    }
}

/// JSON with object keys sorted, so equal configurations get equal keys.
fn canonical(v: &serde_json::Value) -> String {
    fn write(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{:?}:", k);
                    write(&m[k.as_str()], out);
                }
                out.push('}');
            }
            serde_json::Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            other => {
                let _ = write!(out, "{other}");
            }
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(id: &str, name: &str, config: serde_json::Value) -> PluginConfig {
        serde_json::from_value(json!({"id": id, "name": name, "config": config})).unwrap()
    }

    #[test]
    fn equal_configurations_share_one_instance_and_survive_a_swap() {
        let r = Registry::builtin();
        let mut staged = Staged::default();
        let a = r
            .instantiate(
                &cfg(
                    "a",
                    "correlation-id",
                    json!({"header_name": "x-a", "echo_downstream": true}),
                ),
                &mut staged,
            )
            .unwrap();
        let b = r
            .instantiate(
                &cfg(
                    "b",
                    "correlation-id",
                    json!({"echo_downstream": true, "header_name": "x-a"}),
                ),
                &mut staged,
            )
            .unwrap();
        assert!(
            Arc::ptr_eq(&a.plugin, &b.plugin),
            "same config, key order aside"
        );
        assert_eq!((&*a.id, &*b.id), ("a", "b"));
        let c = r
            .instantiate(
                &cfg("c", "correlation-id", json!({"header_name": "x-c"})),
                &mut staged,
            )
            .unwrap();
        assert!(!Arc::ptr_eq(&a.plugin, &c.plugin));
        assert_eq!(staged.len(), 2);
        r.activate(&staged);

        let mut next = Staged::default();
        let a2 = r
            .instantiate(
                &cfg(
                    "a",
                    "correlation-id",
                    json!({"header_name": "x-a", "echo_downstream": true}),
                ),
                &mut next,
            )
            .unwrap();
        let c2 = r
            .instantiate(
                &cfg("c", "correlation-id", json!({"header_name": "x-c2"})),
                &mut next,
            )
            .unwrap();
        assert!(
            Arc::ptr_eq(&a.plugin, &a2.plugin),
            "unchanged config keeps its instance"
        );
        assert!(
            !Arc::ptr_eq(&c.plugin, &c2.plugin),
            "changed config gets a new one"
        );
    }

    #[test]
    fn errors_about_secret_fields_do_not_quote_values() {
        let secrets = &["redis.password", "token"];
        assert_eq!(
            redact_message(
                secrets,
                "redis.password: invalid type: integer `1234`, expected a string".into()
            ),
            "redis.password: invalid value (a secret, not shown)"
        );
        assert_eq!(
            redact_message(secrets, "token: invalid type: map".into()),
            "token: invalid value (a secret, not shown)"
        );
        assert_eq!(
            redact_message(
                secrets,
                "redis: invalid type: string \"redis://:pw@h\"".into()
            ),
            "redis.password: invalid value (a secret, not shown)"
        );
        let kept = "redis.port: invalid type: string \"x\", expected u16";
        assert_eq!(redact_message(secrets, kept.into()), kept);
    }

    #[test]
    fn canonical_form_sorts_keys_at_every_level() {
        assert_eq!(
            canonical(&json!({"b": [1, {"y": 2, "x": "s"}], "a": null})),
            r#"{"a":null,"b":[1,{"x":"s","y":2}]}"#
        );
    }
}
