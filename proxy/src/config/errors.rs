//! What validating a routing table reports, and the limits the table's types promise.

use std::fmt;

/// The largest weight of one of a route's `backends` (the Gateway API's limit).
pub const MAX_BACKEND_WEIGHT: u32 = 1_000_000;

/// One problem in a routing table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigError {
    /// Entity kind: `route`, `service`, `upstream`, `plugin`, `consumer`, `certificate`, `config`.
    pub entity: &'static str,
    /// The entity's id (empty for table-wide problems).
    pub id: String,
    /// The offending field, e.g. `paths[1].path`.
    pub field: String,
    /// What was wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?}: {}: {}",
            self.entity, self.id, self.field, self.message
        )
    }
}

/// Checks plugin names and configurations; implemented by the proxy's plugin registry.
pub trait PluginValidator {
    /// `Err(None)` for an unknown plugin name, `Err(Some(message))` for a bad configuration.
    fn check(&self, name: &str, config: &serde_json::Value) -> Result<(), Option<String>>;
}

/// The longest route `timeout` and service timeout, in milliseconds (a day).
pub const MAX_ROUTE_TIMEOUT_MS: u64 = 86_400_000;
