//! Plugin names → constructors that validate their configuration.

use std::sync::Arc;

use super::{Plugin, PluginInstance};
use crate::config::{PluginConfig, PluginValidator};

/// How to build one kind of plugin.
pub struct PluginSpec {
    /// The name configurations refer to.
    pub name: &'static str,
    /// Default priority (higher runs first), after Kong's order.
    pub priority: i32,
    /// Validates a `config` object and builds the plugin.
    pub build: fn(&serde_json::Value) -> Result<Arc<dyn Plugin>, String>,
}

/// The set of plugins a proxy can run.
pub struct Registry {
    specs: Vec<PluginSpec>,
}

impl Registry {
    /// The plugins that ship with Weir.
    pub fn builtin() -> Registry {
        Registry {
            specs: vec![
                super::correlation_id::SPEC,
                super::request_termination::SPEC,
            ],
        }
    }

    /// Adds the `test-*` plugins used by Weir's own end-to-end tests.
    pub fn with_test_plugins(mut self) -> Registry {
        self.specs.extend(super::testing::SPECS);
        self
    }

    /// Looks a plugin up by name.
    pub fn get(&self, name: &str) -> Option<&PluginSpec> {
        self.specs.iter().find(|s| s.name == name)
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.specs.iter().map(|s| s.name)
    }

    /// Builds a configured plugin; the config has been validated by [`Registry::check`].
    pub fn instantiate(&self, cfg: &PluginConfig) -> Result<PluginInstance, String> {
        let spec = self
            .get(&cfg.name)
            .ok_or_else(|| format!("unknown plugin {:?}", cfg.name))?;
        Ok(PluginInstance {
            name: spec.name,
            id: cfg.id.as_str().into(),
            priority: cfg.priority.unwrap_or(spec.priority),
            plugin: (spec.build)(&cfg.config)?,
        })
    }
}

impl PluginValidator for Registry {
    fn check(&self, name: &str, config: &serde_json::Value) -> Result<(), Option<String>> {
        let spec = self.get(name).ok_or(None)?;
        (spec.build)(config).map(drop).map_err(Some)
    }
}
