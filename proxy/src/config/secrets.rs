//! Which plugin configuration fields hold secrets, and their redaction.
//!
//! Plugin factories declare their secret fields when a registry is built; the contract keeps
//! the list so that everything that shows a configuration (`GET /config`, `Debug`, logs)
//! redacts the same fields without knowing the plugins.

use std::collections::HashMap;
use std::fmt;
use std::sync::{OnceLock, RwLock};

use super::PluginConfig;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "<redacted>";

fn table() -> &'static RwLock<HashMap<String, &'static [&'static str]>> {
    static TABLE: OnceLock<RwLock<HashMap<String, &'static [&'static str]>>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// Declares the secret fields (dotted paths into `config`) of the plugin kind `name`.
pub fn mark_secret_fields(name: &str, fields: &'static [&'static str]) {
    if fields.is_empty() {
        return;
    }
    table()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), fields);
}

/// Replaces the secret fields of a `name` plugin's `config` with [`REDACTED`].
pub fn redact_plugin_config(name: &str, config: &mut serde_json::Value) {
    let Some(fields) = table()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .copied()
    else {
        return;
    };
    for field in fields {
        let mut at = &mut *config;
        let mut parts = field.split('.').peekable();
        while let Some(part) = parts.next() {
            let Some(next) = at.get_mut(part) else { break };
            if parts.peek().is_none() {
                if !next.is_null() {
                    *next = serde_json::Value::String(REDACTED.into());
                }
                break;
            }
            at = next;
        }
    }
}

impl fmt::Debug for PluginConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut config = self.config.clone();
        redact_plugin_config(&self.name, &mut config);
        f.debug_struct("PluginConfig")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("config", &config)
            .field("route", &self.route)
            .field("service", &self.service)
            .field("consumer", &self.consumer)
            .field("namespace", &self.namespace)
            .field("enabled", &self.enabled)
            .field("priority", &self.priority)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_fields_are_redacted_wherever_they_are() {
        mark_secret_fields(
            "test-secretive",
            &["password", "redis.password", "absent.x"],
        );
        let mut c =
            json!({"password": "p1", "redis": {"password": "p2", "host": "h"}, "other": "o"});
        redact_plugin_config("test-secretive", &mut c);
        assert_eq!(
            c,
            json!({"password": REDACTED, "redis": {"password": REDACTED, "host": "h"}, "other": "o"})
        );
        let p: PluginConfig = serde_json::from_value(
            json!({"id": "x", "name": "test-secretive", "config": {"password": "hunter2"}}),
        )
        .unwrap();
        let shown = format!("{p:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains(REDACTED),
            "{shown}"
        );
        let mut untouched = json!({"password": "p"});
        redact_plugin_config("other-kind", &mut untouched);
        assert_eq!(untouched, json!({"password": "p"}));
    }
}
