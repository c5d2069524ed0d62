//! Target health: what passive checks learn from real traffic and active probes learn by
//! asking, kept per upstream and target so that it survives every routing-table swap in
//! which the target did not change.
//!
//! The state is a handful of atomics: requests on every worker report into it and read it
//! without a lock. Decisions (when a target goes out, when it comes back) are plain functions
//! of the counters and the configured thresholds, tested without sockets; [`probe`] is the I/O.

pub mod probe;

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::config::{ActiveHealthcheck, Healthchecks, PassiveHealthcheck};
use crate::router::Fnv;

/// An upstream's health-check settings, compiled.
#[derive(Debug)]
pub struct Checks {
    /// Thresholds from real traffic.
    pub passive: Option<PassiveHealthcheck>,
    /// Periodic probes.
    pub active: Option<ActiveHealthcheck>,
    /// With every target unhealthy, use them all rather than answer 503.
    pub panic: bool,
}

impl Checks {
    /// The compiled form of an upstream's `healthchecks`; `None` when nothing is checked (the
    /// request path then never looks at health).
    pub fn new(config: &Healthchecks) -> Option<Arc<Checks>> {
        (!config.is_off()).then(|| {
            Arc::new(Checks {
                passive: config.passive.as_deref().cloned(),
                active: config.active.as_deref().cloned(),
                panic: config.panic,
            })
        })
    }

    /// Whether `t` may be sent requests now. An unhealthy target that only passive checks
    /// ejected comes back once its cool-down is over (no probe would ever bring it back).
    pub fn is_healthy(&self, t: &TargetHealth) -> bool {
        if t.healthy.load(Ordering::Relaxed) {
            return true;
        }
        if self.active.is_some() {
            return false;
        }
        // No cool-down on record (ejected by probes that are gone now, or a success and a
        // failure crossing): the cool-down is due, so no target stays out for good.
        let due = t.retry_at.load(Ordering::Relaxed);
        if due != 0 && now_ms() < due {
            return false;
        }
        if t.retry_at
            .compare_exchange(due, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            t.failures.store(0, Ordering::Relaxed);
            t.timeouts.store(0, Ordering::Relaxed);
            t.set(true, "cool-down over (passive check)");
        }
        true
    }

    /// Counts the result of one try on real traffic (passive checks).
    pub fn report(&self, t: &TargetHealth, outcome: Outcome) {
        let Some(p) = &self.passive else { return };
        let failed = match outcome {
            Outcome::Status(s) if p.unhealthy_statuses.contains(&s) => Some(Counter::Failures),
            Outcome::Status(_) => None,
            Outcome::ConnectFailure => Some(Counter::Failures),
            Outcome::Timeout => Some(Counter::Timeouts),
        };
        let Some(which) = failed else {
            // An ejected target reached anyway (panic mode, or the request that ended a
            // cool-down) and answering well is back.
            if !t.healthy.load(Ordering::Relaxed) {
                t.retry_at.store(0, Ordering::Relaxed);
                t.set(true, "answered again (passive check)");
            }
            // A success ends both runs of failures.
            if t.failures.load(Ordering::Relaxed) != 0 {
                t.failures.store(0, Ordering::Relaxed);
            }
            if t.timeouts.load(Ordering::Relaxed) != 0 {
                t.timeouts.store(0, Ordering::Relaxed);
            }
            return;
        };
        let (counter, limit, what) = match which {
            Counter::Failures => (&t.failures, p.failures, "failures"),
            Counter::Timeouts => (&t.timeouts, p.timeouts, "timeouts"),
        };
        if limit == 0 {
            return;
        }
        let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= limit && t.healthy.load(Ordering::Relaxed) {
            t.retry_at.store(
                now_ms().saturating_add(p.cooldown.saturating_mul(1000).max(1)),
                Ordering::Relaxed,
            );
            t.set(false, &format!("{n} consecutive {what} (passive check)"));
        }
    }

    /// Counts one active probe: `Ok(status)` for an answer, `Err(reason)` for none.
    pub fn probed(&self, t: &TargetHealth, result: Result<u16, String>) {
        let Some(a) = &self.active else { return };
        let healthy = t.healthy.load(Ordering::Relaxed);
        match result {
            Ok(status) if a.healthy_statuses.contains(&status) => {
                t.probe_failures.store(0, Ordering::Relaxed);
                let n = t.probe_successes.fetch_add(1, Ordering::Relaxed) + 1;
                if !healthy && n >= a.healthy_threshold {
                    t.failures.store(0, Ordering::Relaxed);
                    t.timeouts.store(0, Ordering::Relaxed);
                    t.set(true, &format!("{n} healthy probes (active check)"));
                }
            }
            other => {
                t.probe_successes.store(0, Ordering::Relaxed);
                let n = t.probe_failures.fetch_add(1, Ordering::Relaxed) + 1;
                if healthy && n >= a.unhealthy_threshold {
                    let why = match other {
                        Ok(status) => format!("status {status}"),
                        Err(e) => e,
                    };
                    t.set(
                        false,
                        &format!("{n} failed probes (active check), last: {why}"),
                    );
                }
            }
        }
    }
}

enum Counter {
    Failures,
    Timeouts,
}

/// What one try on real traffic came to, for passive checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The target answered with this status.
    Status(u16),
    /// No connection could be made, or it failed before an answer.
    ConnectFailure,
    /// No answer within the read timeout.
    Timeout,
}

/// The health of one target of one upstream.
#[derive(Debug)]
pub struct TargetHealth {
    /// The upstream (or service) the target belongs to, for logs and metrics.
    pub upstream: Arc<str>,
    /// `host:port`.
    pub target: Arc<str>,
    healthy: AtomicBool,
    failures: AtomicU32,
    timeouts: AtomicU32,
    probe_successes: AtomicU32,
    probe_failures: AtomicU32,
    /// When a passively ejected target may come back (ms on [`now_ms`]'s clock), 0 for never.
    retry_at: AtomicU64,
}

impl TargetHealth {
    /// A healthy target.
    pub fn new(upstream: Arc<str>, target: Arc<str>) -> TargetHealth {
        TargetHealth {
            upstream,
            target,
            healthy: AtomicBool::new(true),
            failures: AtomicU32::new(0),
            timeouts: AtomicU32::new(0),
            probe_successes: AtomicU32::new(0),
            probe_failures: AtomicU32::new(0),
            retry_at: AtomicU64::new(0),
        }
    }

    /// Whether the target is marked healthy (without the passive cool-down taken into account:
    /// see [`Checks::is_healthy`]).
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    fn set(&self, healthy: bool, reason: &str) {
        if self.healthy.swap(healthy, Ordering::Relaxed) == healthy {
            return;
        }
        if healthy {
            tracing::warn!(upstream = %self.upstream, target = %self.target, reason, "upstream target is healthy again");
        } else {
            tracing::warn!(upstream = %self.upstream, target = %self.target, reason, "upstream target is unhealthy");
        }
    }
}

/// Milliseconds on a process-wide monotonic clock (never 0).
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Per-target state that outlives a routing table: found again by (upstream, target) while
/// any table in service still holds it, made anew otherwise.
pub struct Kept<T> {
    map: Mutex<KeptMap<T>>,
}

/// (upstream, target) → the state while a table holds it.
type KeptMap<T> = HashMap<(Arc<str>, Arc<str>), Weak<T>, BuildHasherDefault<Fnv>>;

impl<T> Kept<T> {
    /// An empty set.
    pub const fn new() -> Kept<T> {
        Kept {
            map: Mutex::new(HashMap::with_hasher(BuildHasherDefault::new())),
        }
    }

    /// The live state of `target` in `upstream`, or a new one from `make`.
    pub fn get(&self, upstream: &Arc<str>, target: &Arc<str>, make: impl FnOnce() -> T) -> Arc<T> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let key = (upstream.clone(), target.clone());
        if let Some(t) = map.get(&key).and_then(Weak::upgrade) {
            return t;
        }
        let t = Arc::new(make());
        map.insert(key, Arc::downgrade(&t));
        t
    }

    /// Forgets the states no table holds any more; called once per table swapped in (not per
    /// target: that made compiling a table quadratic in its targets).
    pub fn prune(&self) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
    }
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept::new()
    }
}

/// The health of every target of every table that keeps one, for `/metrics` and the admin API.
pub static HEALTH: Kept<TargetHealth> = Kept::new();

/// The probe interval, clamped to what a probe loop can keep.
pub fn interval(a: &ActiveHealthcheck) -> Duration {
    Duration::from_millis(a.interval.max(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passive(failures: u32, timeouts: u32) -> Checks {
        Checks {
            passive: Some(PassiveHealthcheck {
                failures,
                timeouts,
                unhealthy_statuses: vec![500, 503],
                cooldown: 30,
            }),
            active: None,
            panic: false,
        }
    }

    fn active() -> ActiveHealthcheck {
        serde_json::from_str(r#"{"healthy_threshold": 2, "unhealthy_threshold": 3}"#).unwrap()
    }

    fn t() -> TargetHealth {
        TargetHealth::new("u".into(), "127.0.0.1:1".into())
    }

    #[test]
    fn consecutive_failures_eject_and_a_success_resets_the_run() {
        let c = passive(3, 2);
        let t = t();
        c.report(&t, Outcome::Status(500));
        c.report(&t, Outcome::ConnectFailure);
        c.report(&t, Outcome::Status(200));
        c.report(&t, Outcome::Status(503));
        c.report(&t, Outcome::Status(404));
        assert!(t.healthy(), "runs were broken by successes");
        for _ in 0..3 {
            c.report(&t, Outcome::Status(500));
        }
        assert!(!t.healthy());
        assert!(!c.is_healthy(&t), "in its cool-down");

        let t2 = super::tests::t();
        c.report(&t2, Outcome::Timeout);
        assert!(t2.healthy());
        c.report(&t2, Outcome::Timeout);
        assert!(!t2.healthy(), "two timeouts");
    }

    #[test]
    fn a_target_ejected_by_probes_that_are_then_removed_does_not_stay_out() {
        let probing = Checks {
            passive: None,
            active: Some(active()),
            panic: false,
        };
        let t = t();
        for _ in 0..3 {
            probing.probed(&t, Err("refused".into()));
        }
        assert!(!probing.is_healthy(&t));
        // The next table keeps the state but has passive checks only: nothing would probe.
        let passive_only = passive(5, 5);
        assert!(
            passive_only.is_healthy(&t),
            "no cool-down on record means due"
        );
        assert!(t.healthy());
    }

    #[test]
    fn a_passively_ejected_target_returns_after_its_cool_down() {
        let c = passive(1, 0);
        let t = t();
        c.report(&t, Outcome::ConnectFailure);
        assert!(!c.is_healthy(&t));
        // Zero threshold counts nothing.
        let t2 = super::tests::t();
        c.report(&t2, Outcome::Timeout);
        assert!(t2.healthy());
        // End the cool-down now.
        t.retry_at.store(1, Ordering::Relaxed);
        assert!(c.is_healthy(&t));
        assert!(t.healthy());
        assert_eq!(
            t.failures.load(Ordering::Relaxed),
            0,
            "a fresh run of failures"
        );
    }

    #[test]
    fn with_active_checks_only_probes_bring_a_target_back() {
        let c = Checks {
            active: Some(active()),
            ..passive(1, 1)
        };
        let t = t();
        c.report(&t, Outcome::ConnectFailure);
        t.retry_at.store(1, Ordering::Relaxed);
        assert!(!c.is_healthy(&t), "no cool-down with active checks");
        c.probed(&t, Ok(200));
        assert!(!t.healthy(), "one success of two");
        c.probed(&t, Err("refused".into()));
        c.probed(&t, Ok(200));
        assert!(!t.healthy(), "the run was broken");
        c.probed(&t, Ok(204));
        assert!(c.is_healthy(&t));
    }

    #[test]
    fn failed_probes_eject_after_the_threshold() {
        let c = Checks {
            passive: None,
            active: Some(active()),
            panic: false,
        };
        let t = t();
        c.probed(&t, Ok(500));
        c.probed(&t, Err("timed out".into()));
        assert!(t.healthy());
        c.probed(&t, Ok(200));
        c.probed(&t, Ok(404));
        c.probed(&t, Ok(500));
        assert!(t.healthy(), "a success broke the run");
        c.probed(&t, Ok(500));
        assert!(!t.healthy());
        // Passive reports do nothing without passive settings.
        let t2 = super::tests::t();
        c.report(&t2, Outcome::ConnectFailure);
        assert!(t2.healthy());
    }

    #[test]
    fn kept_state_is_found_while_held_and_made_anew_after() {
        let kept: Kept<TargetHealth> = Kept::new();
        let (u, a): (Arc<str>, Arc<str>) = ("u".into(), "a:1".into());
        let first = kept.get(&u, &a, || TargetHealth::new(u.clone(), a.clone()));
        first.set(false, "test");
        let again = kept.get(&u, &a, || TargetHealth::new(u.clone(), a.clone()));
        assert!(Arc::ptr_eq(&first, &again));
        let other = kept.get(&"v".into(), &a, || TargetHealth::new(u.clone(), a.clone()));
        assert!(!Arc::ptr_eq(&first, &other), "another upstream's target");
        drop((first, again));
        kept.prune();
        assert!(
            kept.map.lock().unwrap().len() == 1,
            "only v's target is held"
        );
        let fresh = kept.get(&u, &a, || TargetHealth::new(u.clone(), a.clone()));
        assert!(fresh.healthy(), "not the dropped state");
    }
}
