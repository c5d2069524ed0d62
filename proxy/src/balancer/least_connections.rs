//! Least connections, weighted.
//!
//! The eligible target with the fewest requests in flight per unit of weight wins, counting the
//! request being placed: `(in_flight + 1) / weight`, so an idle heavy target beats an idle light
//! one and, under load, targets fill in proportion to their weights. Compared by
//! cross-multiplication in integers (no rounding, no division). Equal costs are broken by a
//! start point that rotates with every pick, so equal targets alternate instead of the first one
//! taking every tie.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::Target;

/// The weights and the rotating start.
#[derive(Debug)]
pub(super) struct LeastConnections {
    /// The targets with a non-zero weight.
    weighted: Box<[u32]>,
    /// Indexed like the balancer's targets.
    weights: Box<[u32]>,
    cursor: AtomicUsize,
}

impl LeastConnections {
    /// The state for `weights` (indexed like the balancer's targets).
    pub(super) fn new(weights: &[u32]) -> LeastConnections {
        LeastConnections {
            weighted: super::weighted(weights),
            weights: weights.into(),
            cursor: AtomicUsize::new(0),
        }
    }

    /// The eligible target with the smallest `(in_flight + 1) / weight`.
    // Out of line: inlined, its loop would cost every round-robin pick a heavier prologue.
    #[inline(never)]
    pub(super) fn pick(
        &self,
        targets: &[Target],
        eligible: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let m = self.weighted.len();
        if m == 0 {
            return None;
        }
        let start = self.cursor.fetch_add(1, Ordering::Relaxed) % m;
        // (index, in_flight + 1, weight) of the best so far.
        let mut best: Option<(usize, u128, u128)> = None;
        for k in 0..m {
            let i = self.weighted[(start + k) % m] as usize;
            if !eligible(i) {
                continue;
            }
            let load = targets[i].load.in_flight() as u128 + 1;
            let weight = self.weights[i] as u128;
            // load / weight < best_load / best_weight; strict, so the first of equals stays.
            if best.is_none_or(|(_, bl, bw)| load * bw < bl * weight) {
                best = Some((i, load, weight));
            }
        }
        best.map(|(i, _, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::t;
    use super::*;

    fn all(_: usize) -> bool {
        true
    }

    #[test]
    fn picks_the_target_with_fewest_in_flight() {
        let targets = [t("a"), t("b"), t("c")];
        let lc = LeastConnections::new(&[1, 1, 1]);
        let _a = targets[0].load.start();
        let _b = targets[1].load.start();
        for _ in 0..10 {
            assert_eq!(lc.pick(&targets, &all), Some(2));
        }
        let _c1 = targets[2].load.start();
        let _c2 = targets[2].load.start();
        // Now a and b (one each) beat c (two): they share the picks.
        let p: Vec<_> = (0..10).map(|_| lc.pick(&targets, &all).unwrap()).collect();
        assert!(p.contains(&0) && p.contains(&1) && !p.contains(&2), "{p:?}");
    }

    #[test]
    fn equal_idle_targets_alternate() {
        let targets = [t("a"), t("b")];
        let lc = LeastConnections::new(&[5, 5]);
        let p: Vec<_> = (0..6).map(|_| lc.pick(&targets, &all).unwrap()).collect();
        assert!(p.windows(2).all(|w| w[0] != w[1]), "{p:?}");
    }

    #[test]
    fn requests_held_open_fill_targets_in_proportion_to_weight() {
        let targets = [t("heavy"), t("light"), t("off")];
        let lc = LeastConnections::new(&[3, 1, 0]);
        let mut guards = Vec::new();
        let mut counts = [0usize; 3];
        for _ in 0..400 {
            let i = lc.pick(&targets, &all).unwrap();
            counts[i] += 1;
            guards.push(targets[i].load.start());
        }
        // Balanced when (heavy + 1) / 3 == (light + 1) / 1: heavy = 301, light = 99 (give or
        // take the tie at the last step).
        assert!((299..=302).contains(&counts[0]), "{counts:?}");
        assert_eq!(counts[0] + counts[1], 400);
        assert_eq!(counts[2], 0, "weight 0 is never picked");
        // An idle heavy target beats an idle light one: (0 + 1) / 3 < (0 + 1) / 1.
        drop(guards);
        assert_eq!(lc.pick(&targets, &all), Some(0));
    }

    #[test]
    fn ineligible_targets_are_skipped_even_when_least_loaded() {
        let targets = [t("a"), t("b")];
        let lc = LeastConnections::new(&[1, 1]);
        let _guards: Vec<_> = (0..5).map(|_| targets[1].load.start()).collect();
        assert_eq!(lc.pick(&targets, &all), Some(0));
        assert_eq!(lc.pick(&targets, &|i| i != 0), Some(1));
        assert_eq!(lc.pick(&targets, &|_| false), None);
    }

    #[test]
    fn extreme_weights_do_not_overflow() {
        let targets = [t("a"), t("b")];
        let lc = LeastConnections::new(&[u32::MAX, 1]);
        let _guards: Vec<_> = (0..1000).map(|_| targets[0].load.start()).collect();
        // 1001 / u32::MAX is still far below 1 / 1.
        assert_eq!(lc.pick(&targets, &all), Some(0));
    }
}
