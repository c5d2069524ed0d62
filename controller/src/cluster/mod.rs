//! `weir controller`: watch the cluster, translate (debounced), push to the proxies, and report
//! problems and status back on the objects.

mod leader;
mod push;
mod report;
mod watch;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::watch as channel;
use weir_proxy::Registry;

pub use report::Publish;

use crate::store::Store;
use crate::translate::{translate, Options, Translation};

/// Settings of `weir controller`.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Translation settings.
    pub translate: Options,
    /// Admin API base URLs of the proxies to push to.
    pub proxies: Vec<String>,
    /// Where Ingress status addresses come from.
    pub publish: Publish,
    /// Namespace of the leader-election Lease.
    pub election_namespace: String,
    /// Name of the leader-election Lease.
    pub election_name: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// Where `/metrics` is served.
    pub metrics_listen: Option<SocketAddr>,
}

/// Changes are batched while they keep coming for this long…
const QUIET: Duration = Duration::from_millis(100);
/// …but never delayed by more than this.
const MAX_DELAY: Duration = Duration::from_secs(1);

/// Controller metrics, rendered in Prometheus text format.
#[derive(Default)]
struct Metrics {
    translations: AtomicU64,
    translate_micros_total: AtomicU64,
    last_translate_micros: AtomicU64,
    objects: Mutex<Vec<(&'static str, usize)>>,
    problems: Mutex<Vec<(&'static str, usize)>>,
    pushes: Arc<push::PushCounters>,
}

impl Metrics {
    fn render(&self) -> String {
        let mut out = String::new();
        let n = self.translations.load(Ordering::Relaxed);
        let total = self.translate_micros_total.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "# HELP weir_controller_translations_total Translations run.\n# TYPE weir_controller_translations_total counter\nweir_controller_translations_total {n}");
        let _ = writeln!(out, "# HELP weir_controller_translate_seconds_total Time spent translating.\n# TYPE weir_controller_translate_seconds_total counter\nweir_controller_translate_seconds_total {total}");
        let last = self.last_translate_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "# HELP weir_controller_last_translate_seconds Duration of the last translation.\n# TYPE weir_controller_last_translate_seconds gauge\nweir_controller_last_translate_seconds {last}");
        let _ = writeln!(out, "# HELP weir_controller_objects Objects in the store by kind.\n# TYPE weir_controller_objects gauge");
        for (kind, count) in self
            .objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(out, "weir_controller_objects{{kind=\"{kind}\"}} {count}");
        }
        let _ = writeln!(out, "# HELP weir_controller_problems Current problems by reason.\n# TYPE weir_controller_problems gauge");
        for (reason, count) in self
            .problems
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "weir_controller_problems{{reason=\"{reason}\"}} {count}"
            );
        }
        let _ = writeln!(out, "# HELP weir_controller_pushes_total Routing-table pushes by result.\n# TYPE weir_controller_pushes_total counter");
        for (result, v) in [
            ("ok", &self.pushes.ok),
            ("rejected", &self.pushes.rejected),
            ("failed", &self.pushes.failed),
        ] {
            let _ = writeln!(
                out,
                "weir_controller_pushes_total{{result=\"{result}\"}} {}",
                v.load(Ordering::Relaxed)
            );
        }
        out
    }

    fn record(&self, t: &Translation, store: &Store, took: Duration) {
        self.translations.fetch_add(1, Ordering::Relaxed);
        self.translate_micros_total
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.last_translate_micros
            .store(took.as_micros() as u64, Ordering::Relaxed);
        *self.objects.lock().unwrap_or_else(|e| e.into_inner()) = store
            .counts()
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        let mut by_reason: std::collections::BTreeMap<&'static str, usize> = Default::default();
        for p in &t.problems {
            *by_reason.entry(p.reason.as_str()).or_default() += 1;
        }
        *self.problems.lock().unwrap_or_else(|e| e.into_inner()) = by_reason.into_iter().collect();
    }
}

async fn serve_metrics(addr: SocketAddr, metrics: Arc<Metrics>) {
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot serve controller metrics");
            return;
        }
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let metrics = metrics.clone();
                    async move {
                        let (status, body) = match req.uri().path() {
                            "/metrics" => (200, metrics.render()),
                            "/healthz" => (200, "ok\n".to_string()),
                            _ => (404, "not found\n".to_string()),
                        };
                        let resp = http::Response::builder()
                            .status(status)
                            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                            .expect("static parts");
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Runs the controller until `shutdown` completes, then gives up the leader lease if it holds it.
pub async fn run(
    client: Client,
    opts: ControllerOptions,
    registry: Registry,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let shared = Arc::new(watch::Shared {
        store: Mutex::new(Store::default()),
        changed: tokio::sync::Notify::new(),
        synced: Default::default(),
        watchers: Default::default(),
        holders: Default::default(),
    });
    let namespaces = opts
        .translate
        .watch_namespaces
        .as_ref()
        .map(|s| s.iter().cloned().collect::<Vec<_>>());
    watch::start(&client, &namespaces, &shared);
    tokio::spawn(watch::gateway_api(
        client.clone(),
        namespaces.clone(),
        shared.clone(),
    ));

    let leadership = Arc::new(leader::Leadership::default());
    let campaign = tokio::spawn(leader::run(
        client.clone(),
        opts.election_namespace.clone(),
        opts.election_name.clone(),
        opts.identity.clone(),
        leadership.clone(),
    ));

    let metrics = Arc::new(Metrics::default());
    if let Some(addr) = opts.metrics_listen {
        tokio::spawn(serve_metrics(addr, metrics.clone()));
    }
    let (desired_tx, desired_rx) = channel::channel(None);
    for proxy in &opts.proxies {
        tokio::spawn(push::push_loop(
            proxy.clone(),
            desired_rx.clone(),
            metrics.pushes.clone(),
        ));
    }
    let mut reporter = report::Reporter::new(
        client.clone(),
        "weir-controller",
        &opts.identity,
        opts.publish.clone(),
    );
    let mut logged: BTreeSet<String> = BTreeSet::new();
    let mut was_leader = false;

    let reconcile = async {
        loop {
            // Wake on a change, or every few seconds to catch up on leadership changes.
            let woke = tokio::time::timeout(Duration::from_secs(5), shared.changed.notified())
                .await
                .is_ok();
            if woke {
                let first = Instant::now();
                while first.elapsed() < MAX_DELAY {
                    if tokio::time::timeout(QUIET, shared.changed.notified())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
            if !shared.all_synced() {
                continue;
            }
            let leader = leadership.is_leader();
            if !woke && leader == was_leader {
                continue;
            }
            was_leader = leader;
            let started = Instant::now();
            let (mut t, snapshot) = {
                let store = shared.store.lock().unwrap_or_else(|e| e.into_inner());
                (translate(&store, &opts.translate, &registry), store.clone())
            };
            metrics.record(&t, &snapshot, started.elapsed());
            let now: BTreeSet<String> = t.problems.iter().map(|p| p.to_string()).collect();
            for p in &t.problems {
                if !logged.contains(&p.to_string()) {
                    tracing::warn!(object = %p.object, field = %p.field, reason = p.reason.as_str(), message = %p.message, "problem");
                }
            }
            logged = now;
            tracing::debug!(hash = ?t.config.hash, routes = t.config.routes.len(), took_ms = started.elapsed().as_millis() as u64, "translated");
            // The table is only pushed from here on; the reporter reads the problems.
            desired_tx.send_replace(Some(Arc::new(std::mem::take(&mut t.config))));
            if leader {
                reporter.report(&t, &snapshot).await;
            }
        }
    };
    tokio::select! {
        () = reconcile => {}
        () = shutdown => {}
    }
    campaign.abort();
    let _ = campaign.await;
    let lease = format!("{}/{}", opts.election_namespace, opts.election_name);
    // Bounded: an unreachable API server must not hold up the exit (the lease then expires).
    let released = tokio::time::timeout(
        Duration::from_secs(3),
        leader::release(
            client,
            &opts.election_namespace,
            &opts.election_name,
            &opts.identity,
        ),
    )
    .await;
    match released {
        Ok(Ok(true)) => tracing::info!(%lease, "leader lease released"),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::warn!(%lease, error = %e, "could not release the leader lease"),
        Err(_) => tracing::warn!(%lease, "releasing the leader lease timed out"),
    }
}
