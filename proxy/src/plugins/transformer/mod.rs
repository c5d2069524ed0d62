//! `request-transformer` and `response-transformer`: not written yet.

use std::sync::Arc;

use super::{Plugin, Simple};

pub(in crate::plugins) const REQUEST: Simple = Simple {
    name: "request-transformer",
    priority: 801,
    build,
};

pub(in crate::plugins) const RESPONSE: Simple = Simple {
    name: "response-transformer",
    priority: 800,
    build,
};

fn build(_config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Err("not written yet".into())
}
