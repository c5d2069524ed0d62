//! Choosing a target for each request.
//!
//! Weighted round-robin over a schedule computed at config time: each target appears in
//! proportion to its weight, interleaved (smooth weighted round-robin, as nginx does it), and a
//! shared atomic cursor walks it, so picking a target takes no lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::HeaderValue;

/// One place requests can be sent to.
#[derive(Debug, Clone)]
pub struct Target {
    /// `host:port` (the pool key and the log's `target`).
    pub addr: Arc<str>,
    /// The `Host` header to send when the route does not preserve the client's.
    pub host_header: HeaderValue,
}

/// A set of targets and the state to pick among them.
#[derive(Debug)]
pub struct Balancer {
    targets: Vec<Target>,
    schedule: Vec<u32>,
    cursor: AtomicUsize,
    active: usize,
}

/// Longest schedule kept; weights are scaled down to fit.
const MAX_SCHEDULE: u64 = 4096;

impl Balancer {
    /// Builds a balancer over `(target, weight)` pairs; weight 0 takes a target out.
    pub fn new(targets: Vec<(Target, u32)>) -> Balancer {
        let mut weights: Vec<u64> = targets.iter().map(|(_, w)| *w as u64).collect();
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
        Balancer {
            active: weights.iter().filter(|w| **w > 0).count(),
            targets: targets.into_iter().map(|(t, _)| t).collect(),
            schedule,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The next target in rotation, skipping any in `exclude` (already tried) when possible.
    pub fn pick(&self, exclude: &[Arc<str>]) -> Option<&Target> {
        if self.schedule.is_empty() {
            return None;
        }
        let n = self.schedule.len();
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        let mut fallback = None;
        for i in 0..n.min(64) {
            let t = &self.targets[self.schedule[(start + i) % n] as usize];
            if !exclude
                .iter()
                .any(|e| Arc::ptr_eq(e, &t.addr) || **e == *t.addr)
            {
                return Some(t);
            }
            fallback.get_or_insert(t);
        }
        // Heavily skewed weights can fill the window with tried targets: look at the rest.
        let mut weighted = self.schedule.iter().map(|&i| &self.targets[i as usize]);
        weighted
            .find(|t| !exclude.iter().any(|e| **e == *t.addr))
            .or(fallback)
    }

    /// Number of targets with a non-zero weight.
    pub fn len(&self) -> usize {
        self.active
    }

    /// Whether no target can be picked.
    pub fn is_empty(&self) -> bool {
        self.schedule.is_empty()
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

    fn t(name: &str) -> Target {
        Target {
            addr: name.into(),
            host_header: HeaderValue::from_static("h"),
        }
    }

    fn picks(b: &Balancer, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| b.pick(&[]).unwrap().addr.to_string())
            .collect()
    }

    #[test]
    fn weights_are_respected_and_interleaved() {
        let b = Balancer::new(vec![(t("a"), 500), (t("b"), 100), (t("c"), 0)]);
        let p = picks(&b, 12);
        assert_eq!(p.iter().filter(|x| *x == "a").count(), 10);
        assert_eq!(p.iter().filter(|x| *x == "b").count(), 2);
        assert!(!p.contains(&"c".to_string()));
        // Smooth: b is not served twice in a row.
        assert!(!p.windows(2).any(|w| w[0] == "b" && w[1] == "b"));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn equal_weights_alternate() {
        let b = Balancer::new(vec![(t("a"), 100), (t("b"), 100)]);
        let p = picks(&b, 4);
        assert_ne!(p[0], p[1]);
        assert_eq!(p[0], p[2]);
    }

    #[test]
    fn retries_prefer_another_target() {
        let b = Balancer::new(vec![(t("a"), 1), (t("b"), 1)]);
        for _ in 0..5 {
            assert_eq!(&*b.pick(&["a".into()]).unwrap().addr, "b");
        }
        assert!(
            b.pick(&["a".into(), "b".into()]).is_some(),
            "falls back to a tried target"
        );
    }

    #[test]
    fn retries_find_the_rare_target_with_skewed_weights() {
        let b = Balancer::new(vec![(t("big"), 1000), (t("small"), 1)]);
        for _ in 0..20 {
            assert_eq!(&*b.pick(&["big".into()]).unwrap().addr, "small");
        }
    }

    #[test]
    fn empty_and_zero_weight() {
        assert!(Balancer::new(vec![]).pick(&[]).is_none());
        assert!(Balancer::new(vec![(t("a"), 0)]).pick(&[]).is_none());
    }

    #[test]
    fn huge_weights_are_scaled() {
        let b = Balancer::new(vec![(t("a"), 65_535), (t("b"), 1)]);
        assert!(b.schedule.len() as u64 <= MAX_SCHEDULE + 2);
        assert!(picks(&b, 5000).contains(&"b".to_string()));
    }
}
