//! `rate-limiting`: not written yet.

use std::sync::Arc;

use super::{Plugin, PluginFactory};

/// The `rate-limiting` kind.
#[derive(Default)]
pub(super) struct Factory {}

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "rate-limiting"
    }

    fn priority(&self) -> i32 {
        910
    }

    fn build(&self, _config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
        Err("not written yet".into())
    }
}
