//! [`PluginFactory`]: one per plugin kind (Kong's handler + schema + `configure`).

use std::sync::Arc;

use super::{PhaseFuture, Plugin};

/// A kind of plugin: validates configurations, builds instances, owns what they share.
///
/// The [`Registry`](super::Registry) asks a factory for an instance once per distinct
/// configuration and keeps it across routing-table swaps while that configuration is in use,
/// so state an instance holds (counters, connection pools) survives pushes that change
/// something else. State shared by several instances (for example Redis clients keyed by their
/// settings) belongs to the factory: it lives as long as the proxy.
///
/// Lifecycle, in order: [`start_worker`](Self::start_worker) on every worker thread as it
/// starts; [`configured`](Self::configured) after every routing-table swap;
/// [`stop`](Self::stop) at shutdown, awaited within the grace period.
pub trait PluginFactory: Send + Sync + 'static {
    /// The name configurations refer to (`rate-limiting`).
    fn name(&self) -> &'static str;

    /// Default priority (higher runs first), after Kong's order.
    fn priority(&self) -> i32;

    /// Configuration fields that hold secrets, as dotted paths (`redis.password`): redacted in
    /// `GET /config`, in `Debug` output and in validation errors.
    fn secret_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Checks a configuration; errors start with the field they are about (`status_code: …`).
    ///
    /// The default builds an instance and drops it; a factory whose instances are costly to
    /// build (connections, files) checks without building.
    fn validate(&self, config: &serde_json::Value) -> Result<(), String> {
        self.build(config).map(drop)
    }

    /// Builds an instance for a configuration (already validated).
    fn build(&self, config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String>;

    /// Called on each worker thread, inside its runtime, before it accepts connections: the
    /// place to spawn per-worker tasks (`tokio::spawn` runs them on that worker).
    fn start_worker(&self, _worker: usize) {}

    /// Called after each routing-table swap with the configuration of every instance of this
    /// kind now in service (empty when none is). Requests that started on the old table may
    /// still hold old instances for a while: shared state the new set no longer names should
    /// be released when its last user drops it (an `Arc`), not torn down here.
    fn configured(&self, _active: &[&serde_json::Value]) {}

    /// Appends this kind's own series to the `/metrics` text (Prometheus exposition format,
    /// with `# HELP` and `# TYPE` lines); names start with `weir_`.
    fn metrics(&self, _out: &mut String) {}

    /// Called once at shutdown, after the workers stopped (tasks spawned in `start_worker` have
    /// ended with them; queues a log shipper must flush belong to a thread or state the factory
    /// owns); the returned future is awaited until the grace period ends, and at least 1 s.
    fn stop(&self) -> Option<PhaseFuture<'static, ()>> {
        None
    }
}

/// A factory for a plugin kind that needs no shared state or lifecycle: a name, a priority and
/// a function from configuration to instance.
pub struct Simple {
    /// The name configurations refer to.
    pub name: &'static str,
    /// Default priority.
    pub priority: i32,
    /// Validates a configuration and builds the plugin.
    pub build: fn(&serde_json::Value) -> Result<Arc<dyn Plugin>, String>,
}

impl PluginFactory for Simple {
    fn name(&self) -> &'static str {
        self.name
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn build(&self, config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
        (self.build)(config)
    }
}
