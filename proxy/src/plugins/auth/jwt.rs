//! `jwt`: placeholder until the plugin lands (being written now).

use std::sync::Arc;

use crate::plugins::{Plugin, Simple};

pub(crate) const FACTORY: Simple = Simple {
    name: "jwt",
    priority: 1450,
    build,
};

fn build(_config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    Err("jwt: not available yet".into())
}
