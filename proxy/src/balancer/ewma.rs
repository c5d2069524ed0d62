//! Peak-EWMA latency with the power of two choices, as linkerd and Finagle do it.
//!
//! Each target keeps a moving average of its response-head latency that a slower sample replaces
//! at once ("peak": a target that turns slow is avoided from its first slow answer) and faster
//! samples pull down gradually, weighted by the time since the previous sample (time constant
//! [`TAU_NS`]), since samples arrive unevenly. A target's cost is that estimate times the
//! requests it would have in flight counting this one, divided by its weight. A pick compares two
//! distinct eligible targets drawn at random and takes the cheaper: scanning all would send every
//! request to the same momentarily best target, while two random ones are almost as good and
//! spread the herd.
//!
//! Read at pick time, the estimate also decays toward zero for as long as no sample arrives (as
//! Finagle's and tower's do), so a target that was slow once and then not chosen is tried again
//! within a few time constants instead of never. A target never observed costs nothing while
//! idle, so it is tried, and a penalty while its first request is out, so a burst does not all go
//! to a target nobody has timed yet (Finagle's rule).

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Load, Target};

/// Time constant of the decay, in nanoseconds: after it, an old estimate weighs 1/e.
const TAU_NS: f64 = 10e9;

/// Cost per request in flight of a target never observed, in nanoseconds: above any real one.
const PENALTY_NS: f64 = 1e18;

/// The weight an estimate `elapsed` nanoseconds old keeps.
fn decay(elapsed: u64) -> f64 {
    (-(elapsed as f64) / TAU_NS).exp()
}

/// Folds a latency sample taken at `now` (nanoseconds since the epoch) into `load`'s estimate.
pub(super) fn observe(load: &Load, latency: Duration, now: u64) {
    let rtt = latency.as_nanos() as f64;
    let now = now.max(1); // 0 is "never observed"
    let prev = load.stamp.load(Ordering::Acquire);
    let w = if prev == 0 {
        0.0
    } else {
        decay(now.saturating_sub(prev))
    };
    // Concurrent samples each land (no update is lost); their decays may overlap a little.
    let _ = load
        .ewma
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            let v = f64::from_bits(bits);
            let next = if prev == 0 || rtt >= v {
                rtt
            } else {
                v * w + rtt * (1.0 - w)
            };
            Some(next.to_bits())
        });
    // After the estimate, so a reader that sees the stamp sees the estimate too.
    load.stamp.fetch_max(now, Ordering::Release);
}

/// `load`'s estimate in nanoseconds decayed to `now`; `None` before the first sample.
pub(super) fn estimate(load: &Load, now: u64) -> Option<f64> {
    let stamp = load.stamp.load(Ordering::Acquire);
    if stamp == 0 {
        return None;
    }
    let v = f64::from_bits(load.ewma.load(Ordering::Relaxed));
    Some(v * decay(now.saturating_sub(stamp)))
}

/// What sending one more request to `load` costs: estimate × (in flight + 1) / weight.
fn cost(load: &Load, weight: f64, now: u64) -> f64 {
    let in_flight = load.in_flight();
    let per_request = match estimate(load, now) {
        Some(ns) => ns,
        None if in_flight == 0 => return 0.0,
        None => PENALTY_NS,
    };
    per_request * (in_flight as f64 + 1.0) / weight
}

/// The weights the costs are divided by.
#[derive(Debug)]
pub(super) struct PeakEwma {
    /// The targets with a non-zero weight.
    weighted: Box<[u32]>,
    /// Indexed like the balancer's targets.
    weights: Box<[f64]>,
}

impl PeakEwma {
    /// The state for `weights` (indexed like the balancer's targets).
    pub(super) fn new(weights: &[u32]) -> PeakEwma {
        PeakEwma {
            weighted: super::weighted(weights),
            weights: weights.iter().map(|w| *w as f64).collect(),
        }
    }

    /// The cheaper of two distinct eligible targets drawn at random (the only one if just one).
    // Out of line, like the other algorithms, to keep round-robin's inlined pick small.
    #[inline(never)]
    pub(super) fn pick(
        &self,
        targets: &[Target],
        now: u64,
        eligible: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let n = self.weighted.len();
        if n < 2 {
            let only = *self.weighted.first()? as usize;
            return eligible(only).then_some(only);
        }
        let a = below(n);
        let b = below(n - 1);
        let b = if b >= a { b + 1 } else { b };
        let (a, b) = (self.weighted[a] as usize, self.weighted[b] as usize);
        if eligible(a) && eligible(b) {
            return Some(self.cheaper(targets, now, a, b));
        }
        self.sample(targets, now, eligible)
    }

    /// [`PeakEwma::pick`] when a draw was ruled out: two distinct eligible targets chosen
    /// uniformly in one pass (reservoir sampling), asking about each target once.
    #[cold]
    #[inline(never)]
    fn sample(
        &self,
        targets: &[Target],
        now: u64,
        eligible: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let mut chosen = [0usize; 2];
        let mut seen = 0;
        for &i in self.weighted.iter() {
            let i = i as usize;
            if !eligible(i) {
                continue;
            }
            if seen < 2 {
                chosen[seen] = i;
            } else {
                let slot = below(seen + 1);
                if slot < 2 {
                    chosen[slot] = i;
                }
            }
            seen += 1;
        }
        match seen {
            0 => None,
            1 => Some(chosen[0]),
            _ => {
                // The slots are not equally likely to hold each target: a coin decides which is
                // first, which wins ties.
                if below(2) == 1 {
                    chosen.swap(0, 1);
                }
                Some(self.cheaper(targets, now, chosen[0], chosen[1]))
            }
        }
    }

    /// `a` unless `b` costs strictly less.
    fn cheaper(&self, targets: &[Target], now: u64, a: usize, b: usize) -> usize {
        let cost_a = cost(&targets[a].load, self.weights[a], now);
        let cost_b = cost(&targets[b].load, self.weights[b], now);
        if cost_b < cost_a {
            b
        } else {
            a
        }
    }
}

/// A random number in `0..n` from a per-thread wyrand generator (multiply-shift, whose bias for
/// `n` in the thousands is far below anything a balancer notices).
fn below(n: usize) -> usize {
    ((random() as u128 * n as u128) >> 64) as usize
}

/// The next wyrand output for this thread.
fn random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    STATE.with(|state| {
        let mut s = state.get();
        if s == 0 {
            s = seed();
        }
        s = s.wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let t = s as u128 * (s ^ 0xe703_7ed1_a0b4_28db) as u128;
        ((t >> 64) as u64) ^ t as u64
    })
}

/// A seed that differs between threads (each has its own stack) and between processes (time).
fn seed() -> u64 {
    let local = 0u8;
    let stack = std::ptr::addr_of!(local).addr() as u64;
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    super::hashing::mix(stack ^ super::hashing::mix(time ^ super::now_nanos())) | 1
}

#[cfg(test)]
mod tests {
    use super::super::tests::t;
    use super::*;
    use std::collections::VecDeque;

    fn all(_: usize) -> bool {
        true
    }

    const MS: u64 = 1_000_000;

    fn now() -> u64 {
        super::super::now_nanos()
    }

    #[test]
    fn a_fast_target_wins_over_a_slow_one() {
        let targets = [t("fast"), t("slow")];
        targets[0].load.observe(Duration::from_millis(5));
        targets[1].load.observe(Duration::from_millis(50));
        let p2c = PeakEwma::new(&[1, 1]);
        // Two targets: every pick compares both, and idle the fast one always costs less.
        let fast = (0..1000)
            .filter(|_| p2c.pick(&targets, now(), &all) == Some(0))
            .count();
        assert_eq!(fast, 1000);
    }

    #[test]
    fn under_concurrency_the_slow_target_takes_the_overflow() {
        let targets = [t("fast"), t("slow")];
        let latency = [Duration::from_millis(5), Duration::from_millis(50)];
        let p2c = PeakEwma::new(&[1, 1]);
        // Sixteen requests in flight at any time; each answers with its target's latency.
        let mut open = VecDeque::new();
        let mut counts = [0usize; 2];
        for _ in 0..1000 {
            let i = p2c.pick(&targets, now(), &all).unwrap();
            counts[i] += 1;
            open.push_back(targets[i].load.start());
            targets[i].load.observe(latency[i]);
            if open.len() > 16 {
                open.pop_front();
            }
        }
        assert!(counts[0] >= 4 * counts[1], "{counts:?}");
        assert!(
            counts[1] > 0,
            "in flight raises the fast one's cost: {counts:?}"
        );
    }

    #[test]
    fn random_pairs_give_the_fast_target_the_pairs_it_is_in() {
        let targets = [t("fast"), t("slow-1"), t("slow-2")];
        targets[0].load.observe(Duration::from_millis(5));
        targets[1].load.observe(Duration::from_millis(50));
        targets[2].load.observe(Duration::from_millis(50));
        let p2c = PeakEwma::new(&[1, 1, 1]);
        let mut counts = [0usize; 3];
        for _ in 0..3000 {
            counts[p2c.pick(&targets, now(), &all).unwrap()] += 1;
        }
        // The fast one is in two pairs of three (2000 expected), and wins each. (Which slow one
        // takes the third pair is decided by their estimates' slightly different ages.)
        assert!((1800..=2200).contains(&counts[0]), "{counts:?}");
    }

    #[test]
    fn in_flight_and_weight_scale_the_cost() {
        let targets = [t("a"), t("b")];
        targets[0].load.observe(Duration::from_millis(5));
        targets[1].load.observe(Duration::from_millis(50));
        let p2c = PeakEwma::new(&[1, 1]);
        // 5 ms × 20 in flight > 50 ms × 1.
        let guards: Vec<_> = (0..19).map(|_| targets[0].load.start()).collect();
        assert_eq!(p2c.pick(&targets, now(), &all), Some(1));
        drop(guards);
        assert_eq!(p2c.pick(&targets, now(), &all), Some(0));
        // 50 ms / 20 < 5 ms / 1.
        let weighted = PeakEwma::new(&[1, 20]);
        assert_eq!(weighted.pick(&targets, now(), &all), Some(1));
    }

    #[test]
    fn a_single_eligible_target_is_returned() {
        let targets = [t("a"), t("b"), t("c")];
        targets[1].load.observe(Duration::from_secs(5));
        let p2c = PeakEwma::new(&[1, 1, 1]);
        for _ in 0..100 {
            assert_eq!(p2c.pick(&targets, now(), &|i| i == 1), Some(1));
            assert_eq!(p2c.pick(&targets, now(), &|_| false), None);
        }
        let one = PeakEwma::new(&[0, 3, 0]);
        assert_eq!(one.pick(&targets, now(), &all), Some(1));
        assert_eq!(one.pick(&targets, now(), &|i| i != 1), None);
        assert_eq!(PeakEwma::new(&[]).pick(&[], now(), &all), None);
    }

    #[test]
    fn picks_are_spread_uniformly_among_equals() {
        let targets = [t("a"), t("b"), t("c"), t("d")];
        let p2c = PeakEwma::new(&[1, 1, 1, 1]);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            counts[p2c.pick(&targets, now(), &all).unwrap()] += 1;
        }
        assert!(
            counts.iter().all(|c| (850..=1150).contains(c)),
            "{counts:?}"
        );
        // With one ruled out, the draws that hit it are redrawn among the other three.
        let mut counts = [0usize; 4];
        for _ in 0..3000 {
            counts[p2c.pick(&targets, now(), &|i| i != 2).unwrap()] += 1;
        }
        assert_eq!(counts[2], 0);
        assert!(
            [0, 1, 3].iter().all(|&i| (850..=1150).contains(&counts[i])),
            "{counts:?}"
        );
    }

    #[test]
    fn a_new_target_is_tried_once_then_waits_for_its_first_answer() {
        let targets = [t("known"), t("new")];
        targets[0].load.observe(Duration::from_millis(1));
        let p2c = PeakEwma::new(&[1, 1]);
        assert_eq!(
            p2c.pick(&targets, now(), &all),
            Some(1),
            "never timed: tried"
        );
        let probe = targets[1].load.start();
        let _busy: Vec<_> = (0..50).map(|_| targets[0].load.start()).collect();
        assert_eq!(p2c.pick(&targets, now(), &all), Some(0), "probe out: wait");
        drop(probe);
        targets[1].load.observe(Duration::from_millis(2));
        // Now timed: 2 ms × 1 beats 1 ms × 51.
        assert_eq!(p2c.pick(&targets, now(), &all), Some(1));
    }

    #[test]
    fn the_estimate_jumps_to_peaks_and_decays_toward_later_samples() {
        let load = Load::default();
        assert_eq!(estimate(&load, 5), None);
        observe(&load, Duration::from_millis(10), 1_000);
        assert_eq!(estimate(&load, 1_000), Some(10.0 * MS as f64));
        // A higher sample replaces the estimate at once, however soon it comes.
        observe(&load, Duration::from_millis(50), 2_000);
        assert_eq!(estimate(&load, 2_000), Some(50.0 * MS as f64));
        // A lower one right after barely moves it...
        observe(&load, Duration::from_millis(5), 2_001);
        let v = estimate(&load, 2_001).unwrap();
        assert!(v > 49.99 * MS as f64 && v < 50.0 * MS as f64, "{v}");
        // ...but one a time constant later weighs 1 - 1/e.
        let later = 2_001 + TAU_NS as u64;
        observe(&load, Duration::from_millis(5), later);
        let expected =
            v / std::f64::consts::E + 5.0 * MS as f64 * (1.0 - 1.0 / std::f64::consts::E);
        let got = estimate(&load, later).unwrap();
        assert!((got - expected).abs() < 1_000.0, "{got} vs {expected}");
        // Unobserved, it fades toward zero: slow once is not slow forever.
        let faded = estimate(&load, later + 3 * TAU_NS as u64).unwrap();
        assert!((faded - got / std::f64::consts::E.powi(3)).abs() < 1_000.0);
    }

    #[test]
    fn the_public_estimate_reports_what_was_observed() {
        let load = Load::default();
        assert_eq!(load.latency_estimate(), None);
        load.observe(Duration::from_millis(5));
        let e = load.latency_estimate().unwrap();
        // Decayed only by the microseconds since: within 0.1%.
        assert!(
            e <= Duration::from_millis(5) && e > Duration::from_micros(4995),
            "{e:?}"
        );
    }

    #[test]
    fn threads_draw_different_numbers() {
        let here: Vec<u64> = (0..4).map(|_| random()).collect();
        let there: Vec<u64> = std::thread::spawn(|| (0..4).map(|_| random()).collect())
            .join()
            .unwrap();
        assert_ne!(here, there);
        assert!(here.windows(2).all(|w| w[0] != w[1]));
    }
}
