//! `cors`: not written yet.

use std::sync::Arc;

use super::{Plugin, Simple};

pub(super) const FACTORY: Simple = Simple {
    name: "cors",
    priority: 2000,
    build,
};

fn build(_config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Err("not written yet".into())
}
