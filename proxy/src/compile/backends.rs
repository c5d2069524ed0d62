//! A route's weighted backends (the Gateway API's `backendRefs`): which service serves a
//! request, decided once, before the route's plugins run, with the plugin chain of that
//! (route, service) pair.
//!
//! The spread is exact over each cycle of the weights: a per-route counter walks a precomputed
//! smooth weighted round-robin sequence (nginx's), so 70:30 gives exactly 7 and 3 of every 10
//! requests, interleaved. Weights whose sum (after dividing by their gcd) exceeds
//! [`MAX_SEQUENCE`] use a low-discrepancy walk over the cumulative weights instead, which stays
//! within a few requests of the exact shares without a table of that size.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::pipeline::RouteChain;

/// Longest precomputed sequence (entries of 2 bytes each).
pub const MAX_SEQUENCE: u64 = 4096;

/// One backend: its service (an index into the runtime's services; `None` answers 500) and
/// the plugins that run when it serves.
pub struct Backend {
    /// The service, or `None` for a backend that cannot be used.
    pub service: Option<usize>,
    /// The route's plugins with this service's.
    pub chain: RouteChain,
}

/// A route's backends and the order they take requests in.
pub struct Backends {
    /// The backends with a non-zero weight, in the route's order.
    pub entries: Vec<Backend>,
    pick: Picker,
    next: AtomicU64,
}

/// How the next backend is chosen.
#[derive(Debug, PartialEq)]
enum Picker {
    /// Indices into `entries`, one cycle of the weights.
    Sequence(Box<[u16]>),
    /// Cumulative weights: entry `i` takes `[cum[i-1], cum[i])` of the total.
    Cumulative(Box<[u64]>),
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// One cycle of smooth weighted round-robin over `weights` (all non-zero, sum ≤ the cap).
fn sequence(weights: &[u64]) -> Box<[u16]> {
    let total: i64 = weights.iter().map(|w| *w as i64).sum();
    let mut current = vec![0i64; weights.len()];
    (0..total)
        .map(|_| {
            let mut best = 0;
            for (i, w) in weights.iter().enumerate() {
                current[i] += *w as i64;
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            best as u16
        })
        .collect()
}

impl Picker {
    fn new(weights: &[u64]) -> Picker {
        let g = weights.iter().copied().fold(0, gcd).max(1);
        let reduced: Vec<u64> = weights.iter().map(|w| w / g).collect();
        let total: u64 = reduced.iter().sum();
        if total <= MAX_SEQUENCE && weights.len() <= usize::from(u16::MAX) {
            Picker::Sequence(sequence(&reduced))
        } else {
            let mut sum = 0;
            Picker::Cumulative(
                reduced
                    .iter()
                    .map(|w| {
                        sum += w;
                        sum
                    })
                    .collect(),
            )
        }
    }

    /// The entry for the `n`th request.
    fn pick(&self, n: u64) -> usize {
        match self {
            Picker::Sequence(s) => usize::from(s[(n % s.len() as u64) as usize]),
            Picker::Cumulative(cum) => {
                let total = *cum.last().expect("at least one entry");
                // The golden ratio's fractional part walks [0, 1) evenly (a Weyl sequence).
                const PHI: u64 = 0x9E37_79B9_7F4A_7C15;
                let x = ((u128::from(n.wrapping_mul(PHI)) * u128::from(total)) >> 64) as u64;
                cum.partition_point(|c| *c <= x)
            }
        }
    }
}

impl Backends {
    /// The backends of a route: `(service, chain, weight)` each; entries of weight 0 are left
    /// out. `None` when no entry has a weight (the route answers 500).
    pub fn new(list: Vec<(Option<usize>, RouteChain, u32)>) -> Option<Backends> {
        let list: Vec<_> = list.into_iter().filter(|(_, _, w)| *w > 0).collect();
        if list.is_empty() {
            return None;
        }
        let weights: Vec<u64> = list.iter().map(|(_, _, w)| u64::from(*w)).collect();
        Some(Backends {
            pick: Picker::new(&weights),
            entries: list
                .into_iter()
                .map(|(service, chain, _)| Backend { service, chain })
                .collect(),
            next: AtomicU64::new(0),
        })
    }

    /// The backend for the next request.
    pub fn choose(&self) -> &Backend {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        &self.entries[self.pick.pick(n)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(p: &Picker, entries: usize, n: u64) -> Vec<u64> {
        let mut c = vec![0; entries];
        for i in 0..n {
            c[p.pick(i)] += 1;
        }
        c
    }

    #[test]
    fn shares_are_exact_over_each_cycle_and_interleaved() {
        let p = Picker::new(&[1, 3]);
        assert_eq!(p, Picker::Sequence(vec![1, 0, 1, 1].into()));
        assert_eq!(counts(&p, 2, 400), [100, 300]);
        let p = Picker::new(&[70, 30]);
        assert_eq!(counts(&p, 2, 10), [7, 3], "gcd-reduced to a cycle of 10");
        assert_eq!(counts(&p, 2, 500), [350, 150]);
        let p = Picker::new(&[5]);
        assert_eq!(counts(&p, 1, 7), [7]);
    }

    #[test]
    fn large_weights_stay_close_to_their_shares() {
        let p = Picker::new(&[1_000_000, 999_999, 1]);
        assert!(matches!(p, Picker::Cumulative(_)));
        let c = counts(&p, 3, 20_000);
        assert!((9_900..=10_100).contains(&c[0]), "{c:?}");
        assert!((9_900..=10_100).contains(&c[1]), "{c:?}");
        assert!(c[2] <= 2, "{c:?}");
    }

    #[test]
    fn weight_zero_takes_nothing_and_all_zero_is_none() {
        let chain = || RouteChain::default();
        assert!(Backends::new(vec![(Some(0), chain(), 0)]).is_none());
        let b = Backends::new(vec![(Some(0), chain(), 0), (Some(1), chain(), 2)]).unwrap();
        assert_eq!(b.entries.len(), 1);
        for _ in 0..10 {
            assert_eq!(b.choose().service, Some(1));
        }
    }
}
