//! Prometheus metrics, sharded per worker thread so recording never contends.
//!
//! Each worker records into its own shard (an uncontended mutex); a scrape merges the shards.
//! Series are keyed by route/service id, so they survive config swaps.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Upper bounds of the latency histogram buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

type Key = (Arc<str>, Arc<str>, u16);

#[derive(Default)]
struct Shard {
    /// Upstream requests over a new connection and over a pooled one.
    upstream_connections: [u64; 2],
    requests: FnvMap<Key, u64>,
    request_latency: FnvMap<Arc<str>, Histogram>,
    upstream_latency: FnvMap<Arc<str>, Histogram>,
}

/// Recording is per request: keys are route/service ids and status codes from the operator's
/// table, so the router's fast FNV hasher is safe here too.
type FnvMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<crate::router::Fnv>>;

/// All of the proxy's metrics.
pub struct Metrics {
    shards: Vec<Mutex<Shard>>,
    /// Successful config applies.
    pub config_applies: AtomicU64,
    /// Rejected config pushes.
    pub config_failures: AtomicU64,
    /// Connections refused because of `--max-connections`.
    pub connections_refused: AtomicU64,
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures: AtomicU64,
    /// Access-log lines dropped because the writer's queue was full.
    pub access_log_dropped: AtomicU64,
    /// HTTP/2 connections closed for resetting too many started streams (rapid reset).
    pub h2_cancel_closes: AtomicU64,
    /// Mirror copies by service and outcome (few: one lock per copy is cheap beside it).
    mirrors: Mutex<BTreeMap<(Arc<str>, MirrorOutcome), u64>>,
}

/// How a mirror copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MirrorOutcome {
    /// The mirror answered (any status).
    Answered,
    /// No answer: no target, connection or protocol failure, body not available.
    Failed,
    /// No answer within the copy's deadline.
    TimedOut,
    /// Not sent: the mirror had too many copies on their way already.
    Dropped,
}

impl MirrorOutcome {
    fn label(self) -> &'static str {
        match self {
            MirrorOutcome::Answered => "answered",
            MirrorOutcome::Failed => "failed",
            MirrorOutcome::TimedOut => "timeout",
            MirrorOutcome::Dropped => "dropped",
        }
    }
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Makes the calling thread record into shard `i` (one per worker).
pub fn set_worker_shard(i: usize) {
    SHARD.with(|s| s.set(i));
}

impl Metrics {
    /// Metrics with one shard per worker plus one for other threads.
    pub fn new(workers: usize) -> Metrics {
        Metrics {
            shards: (0..=workers).map(|_| Mutex::default()).collect(),
            config_applies: AtomicU64::new(0),
            config_failures: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
            access_log_dropped: AtomicU64::new(0),
            h2_cancel_closes: AtomicU64::new(0),
            mirrors: Mutex::default(),
        }
    }

    /// Counts one mirror copy to `service`.
    pub fn record_mirror(&self, service: &Arc<str>, outcome: MirrorOutcome) {
        let mut m = self.mirrors.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((service.clone(), outcome)).or_default() += 1;
    }

    fn shard(&self) -> std::sync::MutexGuard<'_, Shard> {
        let i = SHARD.with(|s| s.get()).min(self.shards.len() - 1);
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one finished request.
    pub fn record(
        &self,
        route: &Arc<str>,
        service: &Arc<str>,
        status: u16,
        total_s: f64,
        upstream_s: Option<f64>,
        upstream_reused: Option<bool>,
    ) {
        let mut s = self.shard();
        if let Some(reused) = upstream_reused {
            s.upstream_connections[usize::from(reused)] += 1;
        }
        let key = (route.clone(), service.clone(), status);
        *s.requests.entry(key).or_default() += 1;
        match s.request_latency.get_mut(route) {
            Some(h) => h.observe(total_s),
            None => {
                let mut h = Histogram::default();
                h.observe(total_s);
                s.request_latency.insert(route.clone(), h);
            }
        }
        if let Some(u) = upstream_s {
            s.upstream_latency
                .entry(service.clone())
                .or_default()
                .observe(u);
        }
    }

    /// Renders the Prometheus text exposition format; `gauges` are appended as-is.
    pub fn render(&self, gauges: &[(&str, &str, f64)]) -> String {
        let mut requests: HashMap<Key, u64> = HashMap::new();
        let mut req_lat: HashMap<Arc<str>, Histogram> = HashMap::new();
        let mut up_lat: HashMap<Arc<str>, Histogram> = HashMap::new();
        let mut connections = [0u64; 2];
        for shard in &self.shards {
            let s = shard.lock().unwrap_or_else(|e| e.into_inner());
            connections[0] += s.upstream_connections[0];
            connections[1] += s.upstream_connections[1];
            for (k, v) in &s.requests {
                *requests.entry(k.clone()).or_default() += v;
            }
            for (k, h) in &s.request_latency {
                req_lat.entry(k.clone()).or_default().merge(h);
            }
            for (k, h) in &s.upstream_latency {
                up_lat.entry(k.clone()).or_default().merge(h);
            }
        }
        let mut out = String::new();
        out.push_str("# HELP weir_requests_total Requests by route, service and status.\n# TYPE weir_requests_total counter\n");
        let mut rows: Vec<_> = requests.into_iter().collect();
        rows.sort();
        for ((route, service, status), n) in rows {
            let _ = writeln!(
                out,
                "weir_requests_total{{route=\"{}\",service=\"{}\",status=\"{status}\"}} {n}",
                escape(&route),
                escape(&service)
            );
        }
        let _ = writeln!(
            out,
            "# HELP weir_upstream_requests_total Requests sent upstream, by whether the connection was new or taken from the pool.\n\
             # TYPE weir_upstream_requests_total counter\n\
             weir_upstream_requests_total{{connection=\"new\"}} {}\n\
             weir_upstream_requests_total{{connection=\"reused\"}} {}",
            connections[0], connections[1]
        );
        out.push_str("# HELP weir_mirror_requests_total Request copies sent to mirrors, by service and outcome.\n# TYPE weir_mirror_requests_total counter\n");
        for ((service, outcome), n) in self
            .mirrors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "weir_mirror_requests_total{{service=\"{}\",outcome=\"{}\"}} {n}",
                escape(service),
                outcome.label()
            );
        }
        histogram(
            &mut out,
            "weir_request_duration_seconds",
            "Total request time by route.",
            "route",
            req_lat,
        );
        histogram(
            &mut out,
            "weir_upstream_duration_seconds",
            "Upstream response-head time by service.",
            "service",
            up_lat,
        );
        for (name, help, v) in [
            (
                "weir_config_applies_total",
                "Routing tables applied.",
                self.config_applies.load(Ordering::Relaxed) as f64,
            ),
            (
                "weir_config_failures_total",
                "Routing tables rejected.",
                self.config_failures.load(Ordering::Relaxed) as f64,
            ),
            (
                "weir_connections_refused_total",
                "Connections closed at accept because of --max-connections.",
                self.connections_refused.load(Ordering::Relaxed) as f64,
            ),
            (
                "weir_tls_handshake_failures_total",
                "TLS handshakes that failed, found no certificate or timed out.",
                self.tls_handshake_failures.load(Ordering::Relaxed) as f64,
            ),
            (
                "weir_access_log_dropped_total",
                "Access-log lines dropped because stdout did not keep up (queue full).",
                self.access_log_dropped.load(Ordering::Relaxed) as f64,
            ),
            (
                "weir_http2_cancel_closes_total",
                "HTTP/2 connections closed because the client reset more started streams than --h2-max-cancelled-streams allows.",
                self.h2_cancel_closes.load(Ordering::Relaxed) as f64,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        out
    }
}

fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    data: HashMap<Arc<str>, Histogram>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    let mut rows: Vec<_> = data.into_iter().collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, h) in rows {
        let key = escape(&key);
        let mut cumulative = 0;
        for (b, c) in BUCKETS.iter().zip(h.counts) {
            cumulative += c;
            let _ = writeln!(
                out,
                "{name}_bucket{{{label}=\"{key}\",le=\"{b}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{label}=\"{key}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(out, "{name}_sum{{{label}=\"{key}\"}} {}", h.sum);
        let _ = writeln!(out, "{name}_count{{{label}=\"{key}\"}} {}", h.count);
    }
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_merged_shards() {
        let m = Metrics::new(2);
        let (r, s): (Arc<str>, Arc<str>) = ("r\"1".into(), "s".into());
        set_worker_shard(0);
        m.record(&r, &s, 200, 0.002, Some(0.001), Some(false));
        set_worker_shard(1);
        m.record(&r, &s, 200, 0.2, None, Some(true));
        m.record(&r, &s, 404, 0.0001, None, None);
        let text = m.render(&[("weir_up", "Up.", 1.0)]);
        assert!(
            text.contains("weir_requests_total{route=\"r\\\"1\",service=\"s\",status=\"200\"} 2"),
            "{text}"
        );
        assert!(text.contains("status=\"404\"} 1"));
        assert!(
            text.contains("weir_request_duration_seconds_bucket{route=\"r\\\"1\",le=\"0.0025\"} 2"),
            "{text}"
        );
        assert!(text.contains("weir_request_duration_seconds_count{route=\"r\\\"1\"} 3"));
        assert!(text.contains("weir_upstream_duration_seconds_count{service=\"s\"} 1"));
        assert!(text.contains("weir_up 1"));
        assert!(text.contains("weir_upstream_requests_total{connection=\"new\"} 1"));
        assert!(text.contains("weir_upstream_requests_total{connection=\"reused\"} 1"));
    }
}
