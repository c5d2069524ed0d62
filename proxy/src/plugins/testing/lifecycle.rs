//! `test-lifecycle`: a factory that records its lifecycle (worker starts, swaps, stop) in the
//! `file` of each of its configurations.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use super::super::{parse_config, PhaseFuture, Plugin, PluginFactory};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    file: String,
}

struct Instance;

impl Plugin for Instance {}

/// The factory and the events it saw.
#[derive(Default)]
pub(in crate::plugins) struct Lifecycle {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    events: Vec<String>,
    files: Vec<String>,
}

impl State {
    fn record(&mut self, event: String) {
        self.events.push(event);
        for f in &self.files {
            let _ = std::fs::write(f, self.events.join("\n") + "\n");
        }
    }
}

impl PluginFactory for Lifecycle {
    fn name(&self) -> &'static str {
        "test-lifecycle"
    }
    fn priority(&self) -> i32 {
        10
    }
    fn build(&self, config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
        parse_config::<Conf>(config)?;
        Ok(Arc::new(Instance))
    }
    fn start_worker(&self, worker: usize) {
        let mut s = self.state.lock().unwrap();
        s.record(format!("worker {worker} started"));
    }
    fn configured(&self, active: &[&serde_json::Value]) {
        let mut s = self.state.lock().unwrap();
        s.files = active
            .iter()
            .filter_map(|c| parse_config::<Conf>(c).ok())
            .map(|c| c.file)
            .collect();
        s.files.sort();
        s.files.dedup();
        s.record(format!("configured {}", active.len()));
    }
    fn stop(&self) -> Option<PhaseFuture<'static, ()>> {
        let files = self.state.lock().unwrap().files.clone();
        let events = self.state.lock().unwrap().events.join("\n");
        Some(Box::pin(async move {
            // Shows that the proxy awaits this future: the line is written after a wait.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            for f in files {
                if let Ok(mut out) = std::fs::File::create(&f) {
                    let _ = writeln!(out, "{events}\nstopped");
                }
            }
        }))
    }
}
