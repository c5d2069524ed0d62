//! Standalone mode: the manifest folder as the source, the translator, and the proxy in the
//! same process. Problems, Events and Ingress status go to the log.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir_proxy::Proxy;

use crate::manifests::ManifestDir;
use crate::translate::{translate, Options};

/// How often the folder is checked for changes.
const POLL: Duration = Duration::from_millis(250);

/// Reads the folder, translates and applies; then keeps doing so on every change.
pub struct Standalone {
    dir: ManifestDir,
    opts: Options,
    proxy: Proxy,
    reported: BTreeSet<String>,
    owned: Vec<String>,
}

impl Standalone {
    /// A source over `dir` feeding `proxy`.
    pub fn new(dir: PathBuf, opts: Options, proxy: Proxy) -> Standalone {
        Standalone {
            dir: ManifestDir::new(dir),
            opts,
            proxy,
            reported: BTreeSet::new(),
            owned: Vec::new(),
        }
    }

    /// One scan; applies a new table when anything changed. Returns whether it applied.
    pub fn sync(&mut self) -> bool {
        let scan = self.dir.scan();
        for (path, error) in &scan.errors {
            tracing::warn!(file = %path.display(), %error, "manifest file not applied; its previous objects are kept");
        }
        if !scan.changed {
            return false;
        }
        let started = Instant::now();
        let store = self.dir.store();
        let t = translate(&store, &self.opts, self.proxy.registry());
        let translate_ms = started.elapsed().as_secs_f64() * 1000.0;

        // Each problem is logged once while it lasts, like an Event.
        let now: BTreeSet<String> = t.problems.iter().map(|p| p.to_string()).collect();
        for p in &t.problems {
            if !self.reported.contains(&p.to_string()) {
                tracing::warn!(object = %p.object, field = %p.field, reason = p.reason.as_str(), message = %p.message, "problem");
            }
        }
        self.reported = now;
        let owned: Vec<String> = t.owned_ingresses.iter().map(|k| k.to_string()).collect();
        if owned != self.owned {
            tracing::info!(ingresses = ?owned, "serving Ingresses");
            self.owned = owned;
        }
        let status = serde_json::json!({ "gatewayApi": &t.gateway_api });
        self.proxy.set_controller_status(status);
        match self.proxy.apply(t.config) {
            Ok(hash) => {
                tracing::info!(%hash, translate_ms, routes = store.ingresses.len(), "manifests applied");
                true
            }
            Err(errors) => {
                // The translator only produces valid tables; this is a bug worth shouting about.
                for e in errors {
                    tracing::error!(error = %e, "translated table rejected by the proxy");
                }
                false
            }
        }
    }

    /// Polls the folder forever (run on its own thread).
    pub fn run(mut self) {
        loop {
            std::thread::sleep(POLL);
            self.sync();
        }
    }
}
