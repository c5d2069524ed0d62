//! Smooth weighted round-robin.
//!
//! The schedule is computed at config time: each target appears in proportion to its weight,
//! interleaved (smooth weighted round-robin, as nginx does it), and a shared atomic cursor walks
//! it, so a pick is one `fetch_add` and an index in the common case.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Longest schedule kept; weights are scaled down to fit.
const MAX_SCHEDULE: u64 = 4096;

/// Schedule positions tried after the cursor's before every target is looked at once.
const WINDOW: usize = 64;

/// A precomputed schedule and the cursor walking it.
#[derive(Debug)]
pub(super) struct RoundRobin {
    schedule: Box<[u32]>,
    cursor: AtomicUsize,
    /// The targets with a non-zero weight, for the scan when the window holds none eligible.
    weighted: Box<[u32]>,
}

impl RoundRobin {
    /// The schedule for `weights` (indexed like the balancer's targets).
    pub(super) fn new(weights: &[u32]) -> RoundRobin {
        let weighted = super::weighted(weights);
        let mut weights: Vec<u64> = weights.iter().map(|w| *w as u64).collect();
        let g = weights.iter().copied().filter(|w| *w > 0).fold(0, gcd);
        if g > 0 {
            weights.iter_mut().for_each(|w| *w /= g);
        }
        let total: u64 = weights.iter().sum();
        if total > MAX_SCHEDULE {
            for w in weights.iter_mut().filter(|w| **w > 0) {
                *w = (*w * MAX_SCHEDULE / total).max(1);
            }
        }
        // Smooth weighted round-robin: each step add weights, pick the max, subtract the total.
        let total: i64 = weights.iter().map(|w| *w as i64).sum();
        let mut current = vec![0i64; weights.len()];
        let mut schedule = Vec::with_capacity(total as usize);
        for _ in 0..total {
            for (c, w) in current.iter_mut().zip(&weights) {
                *c += *w as i64;
            }
            let (best, _) = current
                .iter()
                .enumerate()
                .filter(|(i, _)| weights[*i] > 0)
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                .expect("total > 0 implies a weighted target");
            current[best] -= total;
            schedule.push(best as u32);
        }
        RoundRobin {
            schedule: schedule.into(),
            cursor: AtomicUsize::new(0),
            weighted,
        }
    }

    /// The next eligible target in the schedule.
    #[inline]
    pub(super) fn pick(&self, eligible: &impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.schedule.len();
        if n == 0 {
            return None;
        }
        let at = self.cursor.fetch_add(1, Ordering::Relaxed) % n;
        let first = self.schedule[at] as usize;
        if eligible(first) {
            return Some(first);
        }
        self.scan(at, eligible)
    }

    /// The rest of [`RoundRobin::pick`], out of line: only retries and unhealthy targets get
    /// here, and the common path stays small.
    #[cold]
    #[inline(never)]
    fn scan(&self, at: usize, eligible: &impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.schedule.len();
        if let Some(t) = (1..n.min(WINDOW))
            .map(|i| self.schedule[(at + i) % n] as usize)
            .find(|&t| eligible(t))
        {
            return Some(t);
        }
        // Heavily skewed weights can fill the window with one ineligible target: look at each
        // target once, starting at a rotating point so the survivors share the load.
        let m = self.weighted.len();
        (0..m)
            .map(|k| self.weighted[(at + k) % m] as usize)
            .find(|&t| eligible(t))
    }

    #[cfg(test)]
    fn schedule_len(&self) -> usize {
        self.schedule.len()
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: usize) -> bool {
        true
    }

    fn picks(rr: &RoundRobin, n: usize) -> Vec<usize> {
        (0..n).map(|_| rr.pick(&all).unwrap()).collect()
    }

    #[test]
    fn weights_are_respected_and_interleaved() {
        let rr = RoundRobin::new(&[500, 100, 0]);
        let p = picks(&rr, 12);
        assert_eq!(p.iter().filter(|x| **x == 0).count(), 10);
        assert_eq!(p.iter().filter(|x| **x == 1).count(), 2);
        assert!(!p.contains(&2));
        // Smooth: the light target is not served twice in a row.
        assert!(!p.windows(2).any(|w| w[0] == 1 && w[1] == 1));
    }

    #[test]
    fn equal_weights_alternate() {
        let rr = RoundRobin::new(&[100, 100]);
        let p = picks(&rr, 4);
        assert_ne!(p[0], p[1]);
        assert_eq!(p[0], p[2]);
    }

    #[test]
    fn retries_take_another_target_and_never_a_tried_one() {
        let rr = RoundRobin::new(&[1, 1]);
        for _ in 0..5 {
            assert_eq!(rr.pick(&|i| i != 0), Some(1));
        }
        assert_eq!(rr.pick(&|_| false), None, "no fallback to a tried target");
    }

    #[test]
    fn retries_find_the_rare_target_with_skewed_weights() {
        let rr = RoundRobin::new(&[1000, 1]);
        for _ in 0..20 {
            assert_eq!(rr.pick(&|i| i != 0), Some(1));
        }
    }

    #[test]
    fn skipping_one_target_keeps_the_others_rotating() {
        let rr = RoundRobin::new(&[1, 1, 1, 1]);
        let p: Vec<usize> = (0..300).map(|_| rr.pick(&|i| i != 2).unwrap()).collect();
        assert!(!p.contains(&2));
        // Target 2's turns go to its successor in the schedule, so 3 gets twice the others.
        let count = |t| p.iter().filter(|x| **x == t).count();
        assert_eq!((count(0), count(1), count(3)), (75, 75, 150));
    }

    #[test]
    fn empty_and_zero_weight() {
        assert_eq!(RoundRobin::new(&[]).pick(&all), None);
        assert_eq!(RoundRobin::new(&[0]).pick(&all), None);
    }

    #[test]
    fn huge_weights_are_scaled() {
        let rr = RoundRobin::new(&[65_535, 1]);
        assert!(rr.schedule_len() as u64 <= MAX_SCHEDULE + 2);
        assert!(picks(&rr, 5000).contains(&1));
    }
}
