//! A route's mirrors, compiled, the draw that picks which of them copy a request, and the
//! gate that keeps a mirror that hangs or is down from costing the proxy more than a bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use super::CompiledRoute;

/// Most copies on their way to one mirror service at once; more are dropped (and counted).
/// A mirror that hangs would otherwise hold a connection and a task per request for the
/// whole deadline, until the proxy ran out of file descriptors for its clients. 1,024 is
/// Envoy's default bound on a cluster's requests in flight.
pub const MAX_COPIES_IN_FLIGHT: usize = 1024;

/// After a copy could not connect, copies to that mirror are dropped for this long: a dead
/// mirror would otherwise cost a refused connection per request. Measured with
/// bench/mirror.py (one worker, 32 connections): a dead mirror without the pause took the
/// proxy from 35,749 to 16,934 requests per second.
pub const PAUSE_AFTER_CONNECT_FAILURE: Duration = Duration::from_secs(1);

/// A mirror service's copies in flight, and until when it is paused.
#[derive(Debug, Default)]
pub struct MirrorGate {
    in_flight: AtomicUsize,
    /// Milliseconds since [`EPOCH`] before which copies are dropped.
    paused_until: AtomicU64,
}

/// The gates by service id, kept across tables: a service compiled again (its targets
/// changed) keeps its copies in flight and its pause. A gate outlives its service (a few
/// bytes per service id the process has seen).
static GATES: LazyLock<Mutex<HashMap<Box<str>, Arc<MirrorGate>>>> = LazyLock::new(Default::default);

/// The gate of service `id`.
pub fn gate(id: &str) -> Arc<MirrorGate> {
    let mut gates = GATES.lock().unwrap_or_else(|e| e.into_inner());
    gates.entry(id.into()).or_default().clone()
}

/// The process's clock origin for [`MirrorGate`].
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

fn now_ms() -> u64 {
    EPOCH.elapsed().as_millis() as u64
}

impl MirrorGate {
    /// Lets one more copy go (`true`; call [`MirrorGate::done`] when it ends), or not: the
    /// mirror is paused, or has [`MAX_COPIES_IN_FLIGHT`] copies on their way.
    pub fn enter(&self) -> bool {
        if now_ms() < self.paused_until.load(Ordering::Relaxed) {
            return false;
        }
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_COPIES_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// A copy let in has ended; `connect_failed` pauses the mirror.
    pub fn done(&self, connect_failed: bool) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if connect_failed {
            let until = now_ms() + PAUSE_AFTER_CONNECT_FAILURE.as_millis() as u64;
            self.paused_until.fetch_max(until, Ordering::Relaxed);
        }
    }
}

/// One mirror of a compiled route.
#[derive(Debug, Clone)]
pub struct CompiledMirror {
    /// The mirror service's index.
    pub service: usize,
    /// The share of requests copied, in millionths (1,000,000: every request).
    pub per_million: u32,
    /// The copy's `Host`, when the mirror sets one.
    pub host: Option<http::HeaderValue>,
    /// The copy carries the request's body.
    pub body: bool,
}

/// The mirrors of `route` that copy this request (each drawn by its share).
pub fn chosen(route: &CompiledRoute) -> Vec<CompiledMirror> {
    route
        .mirrors
        .iter()
        .filter(|m| m.per_million >= 1_000_000 || fastrand::u32(0..1_000_000) < m.per_million)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_bounds_copies_and_pauses_after_a_connect_failure() {
        let g = MirrorGate::default();
        for _ in 0..MAX_COPIES_IN_FLIGHT {
            assert!(g.enter());
        }
        assert!(!g.enter(), "the bound");
        g.done(false);
        assert!(g.enter(), "room again");
        g.done(true);
        assert!(!g.enter(), "paused after a connect failure");
        g.paused_until.store(now_ms(), Ordering::Relaxed);
        assert!(g.enter(), "the pause is over");
    }

    #[test]
    fn a_service_compiled_again_keeps_its_gate() {
        let first = gate("kept-across-tables");
        assert!(first.enter());
        let again = gate("kept-across-tables");
        assert!(Arc::ptr_eq(&first, &again), "one gate per service id");
        assert!(!Arc::ptr_eq(&first, &gate("another-service")));
        again.done(false);
    }
}
