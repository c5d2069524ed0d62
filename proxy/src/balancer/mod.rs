//! Choosing a target for each request.
//!
//! A [`Balancer`] is built once per service at config time and then only read: every pick takes
//! no lock, since picks happen on several threads at once. Five algorithms share one interface:
//!
//! - [`Algorithm::RoundRobin`]: smooth weighted round-robin over a schedule computed up front
//!   (`round_robin`); one atomic increment per pick.
//! - [`Algorithm::LeastConnections`]: fewest requests in flight per unit of weight
//!   (`least_connections`).
//! - [`Algorithm::ConsistentHashing`]: a ketama-style ring, so a key keeps its target while the
//!   set of targets changes little (`hashing`).
//! - [`Algorithm::HashSubsets`]: the same ring over subsets of targets, a key's requests
//!   taking its subset's members in turn (`subsets`).
//! - [`Algorithm::PeakEwma`]: power of two random choices on latency times load, as linkerd and
//!   Finagle do it (`ewma`).
//!
//! The caller decides what may be picked (`eligible`: not already tried by this request, not
//! unhealthy) and what to do when nothing may: a pick never falls back to an ineligible target.
//! Live statistics sit in each target's shared [`Load`], which outlives a routing-table swap for
//! a target that did not change, so a new table starts with what the old one learned.

mod ewma;
pub mod hash_on;
mod hashing;
mod least_connections;
mod round_robin;
mod same_site;
mod subsets;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use http::HeaderValue;

pub use hash_on::HashInput;
pub use hashing::hash_key;

/// One place requests can be sent to.
#[derive(Debug, Clone)]
pub struct Target {
    /// `host:port` (the pool key and the log's `target`).
    pub addr: Arc<str>,
    /// The `Host` header to send when the route does not preserve the client's.
    pub host_header: HeaderValue,
    /// Live statistics, shared by every thread and by successive routing tables.
    pub load: Arc<Load>,
}

impl Target {
    /// A target with fresh (empty) statistics.
    pub fn new(addr: Arc<str>, host_header: HeaderValue) -> Target {
        Target {
            addr,
            host_header,
            load: Arc::default(),
        }
    }
}

/// How a [`Balancer`] chooses among its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Smooth weighted round-robin.
    RoundRobin,
    /// Fewest requests in flight relative to weight.
    LeastConnections,
    /// A ring keyed by the request's hash; round-robin when the request has none.
    ConsistentHashing,
    /// A ring of subsets of this many targets keyed by the request's hash, the subset's
    /// members taken in turn; round-robin when the request has no hash.
    HashSubsets(u32),
    /// Power of two choices on peak-EWMA latency times requests in flight.
    PeakEwma,
}

/// A target's live statistics: requests in flight and a latency estimate, all atomics.
#[derive(Debug, Default)]
pub struct Load {
    in_flight: AtomicUsize,
    /// The peak-EWMA latency in nanoseconds, as `f64` bits.
    ewma: AtomicU64,
    /// When `ewma` was last updated, in nanoseconds since [`now_nanos`]'s epoch; 0 for never.
    stamp: AtomicU64,
}

impl Load {
    /// Counts a request in flight until the returned guard is dropped.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Records the time a response head took (for [`Algorithm::PeakEwma`]).
    pub fn observe(&self, latency: Duration) {
        ewma::observe(self, latency, now_nanos());
    }

    /// The current latency estimate, decayed for the time since the last observation; `None`
    /// before the first.
    #[cfg(test)]
    pub fn latency_estimate(&self) -> Option<Duration> {
        ewma::estimate(self, now_nanos()).map(|ns| Duration::from_nanos(ns as u64))
    }
}

/// Holds one request in its target's [`Load::in_flight`] count.
#[derive(Debug)]
#[must_use = "the request stops counting as in flight when the guard is dropped"]
pub struct InFlight(Arc<Load>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A set of targets and the state to pick among them.
#[derive(Debug)]
pub struct Balancer {
    targets: Vec<Target>,
    algorithm: Algorithm,
    /// Number of targets with a non-zero weight.
    active: usize,
    strategy: Strategy,
}

/// Each algorithm's precomputed state; only what its picks need is built.
#[derive(Debug)]
enum Strategy {
    RoundRobin(round_robin::RoundRobin),
    LeastConnections(least_connections::LeastConnections),
    ConsistentHashing {
        ring: hashing::Ring,
        /// For requests without a hash.
        fallback: round_robin::RoundRobin,
    },
    HashSubsets {
        subsets: subsets::Subsets,
        /// For requests without a hash.
        fallback: round_robin::RoundRobin,
    },
    PeakEwma(ewma::PeakEwma),
}

impl Balancer {
    /// Builds a balancer over `(target, weight)` pairs; weight 0 takes a target out.
    pub fn new(targets: Vec<(Target, u32)>, algorithm: Algorithm) -> Balancer {
        let weights: Vec<u32> = targets.iter().map(|(_, w)| *w).collect();
        let targets: Vec<Target> = targets.into_iter().map(|(t, _)| t).collect();
        let strategy = match algorithm {
            Algorithm::RoundRobin => Strategy::RoundRobin(round_robin::RoundRobin::new(&weights)),
            Algorithm::LeastConnections => {
                Strategy::LeastConnections(least_connections::LeastConnections::new(&weights))
            }
            Algorithm::ConsistentHashing => Strategy::ConsistentHashing {
                ring: hashing::Ring::new(&targets, &weights),
                fallback: round_robin::RoundRobin::new(&weights),
            },
            Algorithm::HashSubsets(size) => Strategy::HashSubsets {
                subsets: subsets::Subsets::new(&targets, &weights, size as usize),
                fallback: round_robin::RoundRobin::new(&weights),
            },
            Algorithm::PeakEwma => Strategy::PeakEwma(ewma::PeakEwma::new(&weights)),
        };
        Balancer {
            active: weights.iter().filter(|w| **w > 0).count(),
            targets,
            algorithm,
            strategy,
        }
    }

    /// The index (into [`Balancer::targets`]) of the target for a request, among those
    /// `eligible` accepts; `None` when it accepts none. `hash` keys consistent hashing.
    #[inline]
    pub fn pick(&self, hash: Option<u64>, eligible: impl Fn(usize) -> bool) -> Option<usize> {
        match &self.strategy {
            Strategy::RoundRobin(rr) => rr.pick(&eligible),
            Strategy::LeastConnections(lc) => lc.pick(&self.targets, &eligible),
            Strategy::ConsistentHashing { ring, fallback } => match hash {
                Some(h) => ring.pick(h, &eligible),
                None => fallback.pick(&eligible),
            },
            Strategy::HashSubsets { subsets, fallback } => match hash {
                Some(h) => subsets.pick(h, &eligible),
                None => fallback.pick(&eligible),
            },
            Strategy::PeakEwma(p2c) => p2c.pick(&self.targets, now_nanos(), &eligible),
        }
    }

    /// Every target, including those of weight 0 (which are never picked).
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The target at `i` (an index [`Balancer::pick`] returned).
    pub fn target(&self, i: usize) -> &Target {
        &self.targets[i]
    }

    /// Number of targets with a non-zero weight.
    pub fn len(&self) -> usize {
        self.active
    }

    /// Whether no target can be picked.
    pub fn is_empty(&self) -> bool {
        self.active == 0
    }

    /// The algorithm this balancer was built with.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

/// Indices of the targets with a non-zero weight, the only ones any algorithm considers.
fn weighted(weights: &[u32]) -> Box<[u32]> {
    (0..weights.len() as u32)
        .filter(|&i| weights[i as usize] > 0)
        .collect()
}

/// Nanoseconds since a process-wide epoch: an `Instant` cannot be stored in an atomic.
fn now_nanos() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn t(name: &str) -> Target {
        Target::new(name.into(), HeaderValue::from_static("h"))
    }

    fn all(_: usize) -> bool {
        true
    }

    #[test]
    fn every_algorithm_skips_weight_zero_and_ineligible_targets() {
        for algorithm in [
            Algorithm::RoundRobin,
            Algorithm::LeastConnections,
            Algorithm::ConsistentHashing,
            Algorithm::HashSubsets(2),
            Algorithm::PeakEwma,
        ] {
            let b = Balancer::new(vec![(t("a"), 1), (t("z"), 0), (t("b"), 3)], algorithm);
            assert_eq!(b.algorithm(), algorithm);
            assert_eq!((b.len(), b.is_empty(), b.targets().len()), (2, false, 3));
            for k in 0..200u64 {
                let hash = (k % 2 == 0).then(|| hash_key(&k.to_le_bytes()));
                let i = b.pick(hash, all).unwrap();
                assert_ne!(i, 1, "{algorithm:?} picked a weight-0 target");
                assert_eq!(b.pick(hash, |i| i == 0), Some(0), "{algorithm:?}");
                assert_eq!(b.pick(hash, |i| i != 2), Some(0), "{algorithm:?}");
                assert_eq!(b.pick(hash, |i| i == 1), None, "{algorithm:?}");
                assert_eq!(b.pick(hash, |_| false), None, "{algorithm:?}");
            }
        }
    }

    #[test]
    fn empty_and_all_zero_weight_pick_nothing() {
        for algorithm in [
            Algorithm::RoundRobin,
            Algorithm::LeastConnections,
            Algorithm::ConsistentHashing,
            Algorithm::HashSubsets(2),
            Algorithm::PeakEwma,
        ] {
            let empty = Balancer::new(vec![], algorithm);
            assert!(empty.is_empty());
            assert_eq!(empty.pick(Some(7), all), None);
            assert_eq!(empty.pick(None, all), None);
            let zero = Balancer::new(vec![(t("a"), 0), (t("b"), 0)], algorithm);
            assert!(zero.is_empty());
            assert_eq!(zero.pick(Some(7), all), None);
            assert_eq!(zero.pick(None, all), None);
        }
    }

    #[test]
    fn in_flight_counts_guards_and_is_shared_by_clones() {
        let a = t("a");
        let copy = a.clone();
        let g1 = a.load.start();
        let g2 = copy.load.start();
        assert_eq!(a.load.in_flight(), 2);
        drop(g1);
        assert_eq!(copy.load.in_flight(), 1);
        drop(g2);
        assert_eq!(a.load.in_flight(), 0);
        // A fresh target does not share.
        let _g = t("a").load.start();
        assert_eq!(a.load.in_flight(), 0);
    }

    #[test]
    fn in_flight_is_exact_under_concurrency() {
        let load = Arc::new(Load::default());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let _g = load.start();
                        assert!(load.in_flight() >= 1);
                    }
                });
            }
        });
        assert_eq!(load.in_flight(), 0);
    }

    #[test]
    fn consistent_hashing_without_a_hash_is_round_robin() {
        let b = Balancer::new(vec![(t("a"), 1), (t("b"), 1)], Algorithm::ConsistentHashing);
        let p: Vec<usize> = (0..4).map(|_| b.pick(None, all).unwrap()).collect();
        assert_ne!(p[0], p[1]);
        assert_eq!(p[0], p[2]);
        assert_eq!(p[1], p[3]);
        // With a hash it is the ring's answer, every time.
        let h = hash_key(b"user-42");
        let first = b.pick(Some(h), all).unwrap();
        assert!((0..20).all(|_| b.pick(Some(h), all) == Some(first)));
    }

    #[test]
    fn concurrent_picks_stay_in_range() {
        for algorithm in [
            Algorithm::RoundRobin,
            Algorithm::LeastConnections,
            Algorithm::ConsistentHashing,
            Algorithm::HashSubsets(2),
            Algorithm::PeakEwma,
        ] {
            let b = Balancer::new(
                vec![(t("a"), 1), (t("b"), 2), (t("c"), 0), (t("d"), 5)],
                algorithm,
            );
            let counts: Vec<[usize; 4]> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4u64)
                    .map(|n| {
                        let b = &b;
                        s.spawn(move || {
                            let mut counts = [0; 4];
                            for k in 0..2_000u64 {
                                let hash = hash_key(&(k * 4 + n).to_le_bytes());
                                let i = b.pick(Some(hash), |i| i != 0).unwrap();
                                let _g = b.target(i).load.start();
                                b.target(i).load.observe(Duration::from_micros(100));
                                counts[i] += 1;
                            }
                            counts
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let total = counts.iter().fold([0; 4], |mut acc, c| {
                acc.iter_mut().zip(c).for_each(|(a, c)| *a += c);
                acc
            });
            assert_eq!(total[0] + total[2], 0, "{algorithm:?}: {total:?}");
            assert_eq!(total[1] + total[3], 8_000, "{algorithm:?}");
            // Least connections sends everything to the heavier target until it has two in
            // flight, which four threads may or may not reach.
            if algorithm != Algorithm::LeastConnections {
                assert!(total[1] > 0 && total[3] > 0, "{algorithm:?}: {total:?}");
            }
            assert!(b.targets().iter().all(|t| t.load.in_flight() == 0));
        }
    }
}
