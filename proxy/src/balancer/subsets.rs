//! Consistent hashing onto subsets of targets (ingress-nginx's `upstream-hash-by-subset`).
//!
//! The targets, sorted by address so that every Weir process forms the same groups, are cut
//! into subsets of `size`; the last one is topped up with the first targets, so every subset
//! has `size` members (as ingress-nginx's `chashsubset` does). A key's hash picks a subset on
//! a ring, and its requests take the subset's members in turn: one user's requests stay on a
//! few pods that share its cache, without one pod carrying a heavy user alone. Weights only
//! take a target out (0); within a subset members are equal.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::hashing::Ring;
use super::Target;

/// The subsets of one balancer and the ring that picks among them.
#[derive(Debug)]
pub(super) struct Subsets {
    /// Each subset's members (indices into the balancer's targets), without repeats.
    members: Box<[Box<[u32]>]>,
    /// Owners are subsets, each placed by its first member's address.
    ring: Ring,
    /// Turns within a subset, shared by all subsets (an even spread needs no more).
    next: AtomicUsize,
}

impl Subsets {
    /// Subsets of `size` (at least 1) of the targets whose weight is not 0.
    pub(super) fn new(targets: &[Target], weights: &[u32], size: usize) -> Subsets {
        let mut order: Vec<u32> = super::weighted(weights).into_vec();
        order.sort_by(|a, b| targets[*a as usize].addr.cmp(&targets[*b as usize].addr));
        let size = size.max(1);
        let members: Box<[Box<[u32]>]> = (0..order.len().div_ceil(size))
            .map(|s| {
                let mut m: Vec<u32> = Vec::with_capacity(size);
                for k in 0..size {
                    let t = order[(s * size + k) % order.len()];
                    // Fewer targets than `size`: each once.
                    if !m.contains(&t) {
                        m.push(t);
                    }
                }
                m.into_boxed_slice()
            })
            .collect();
        let ring = Ring::named(
            |s| &targets[members[s][0] as usize].addr,
            &vec![1; members.len()],
        );
        Subsets {
            members,
            ring,
            next: AtomicUsize::new(0),
        }
    }

    /// A member of the subset `hash` keeps to, the next eligible one in turn; when none of
    /// its members is eligible, the next subset on the ring with one that is.
    #[inline(never)]
    pub(super) fn pick(&self, hash: u64, eligible: &impl Fn(usize) -> bool) -> Option<usize> {
        let any = |s: usize| self.members[s].iter().any(|&t| eligible(t as usize));
        let members = &self.members[self.ring.pick(hash, &any)?];
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..members.len())
            .map(|k| members[(start + k) % members.len()] as usize)
            .find(|&t| eligible(t))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::t;
    use super::super::{hash_key, Algorithm, Balancer};
    use std::collections::BTreeSet;

    fn balancer(n: usize, size: u32) -> Balancer {
        let targets = (0..n).map(|i| (t(&format!("10.0.0.{i}:80")), 1)).collect();
        Balancer::new(targets, Algorithm::HashSubsets(size))
    }

    fn picks(b: &Balancer, key: &[u8], eligible: impl Fn(usize) -> bool) -> BTreeSet<usize> {
        (0..60)
            .filter_map(|_| b.pick(Some(hash_key(key)), &eligible))
            .collect()
    }

    #[test]
    fn a_key_spreads_over_its_subset_only() {
        let b = balancer(10, 3);
        let mut seen = BTreeSet::new();
        for user in 0..200 {
            let got = picks(&b, format!("user-{user}").as_bytes(), |_| true);
            assert_eq!(got.len(), 3, "user-{user}: {got:?}");
            // The same three every time.
            assert_eq!(got, picks(&b, format!("user-{user}").as_bytes(), |_| true));
            seen.insert(got);
        }
        // 10 targets in subsets of 3: four subsets, the last topped up with the first targets.
        assert_eq!(seen.len(), 4, "{seen:?}");
        let covered: BTreeSet<usize> = seen.iter().flatten().copied().collect();
        assert_eq!(covered.len(), 10);
    }

    #[test]
    fn ineligible_members_are_skipped_then_the_next_subset_serves() {
        let b = balancer(6, 3);
        let key = b"user-7";
        let subset = picks(&b, key, |_| true);
        let first = *subset.iter().next().unwrap();
        let rest = picks(&b, key, |i| i != first);
        assert_eq!(
            rest,
            subset.iter().copied().filter(|&i| i != first).collect()
        );
        let other = picks(&b, key, |i| !subset.contains(&i));
        assert_eq!(other.len(), 3);
        assert!(other.is_disjoint(&subset));
        assert!(picks(&b, key, |_| false).is_empty());
    }

    #[test]
    fn fewer_targets_than_the_size_make_one_subset_of_all() {
        let b = balancer(2, 3);
        assert_eq!(picks(&b, b"k", |_| true), BTreeSet::from([0, 1]));
        let none = Balancer::new(vec![(t("a:1"), 0)], Algorithm::HashSubsets(3));
        assert_eq!(none.pick(Some(1), |_| true), None);
        // Without a hash: round-robin over every target.
        let b = balancer(4, 2);
        let all: BTreeSet<usize> = (0..8).filter_map(|_| b.pick(None, |_| true)).collect();
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn subsets_follow_addresses_not_their_order_in_the_config() {
        let mut targets: Vec<_> = (0..7).map(|i| (t(&format!("10.0.0.{i}:80")), 1)).collect();
        let a = Balancer::new(targets.clone(), Algorithm::HashSubsets(3));
        targets.reverse();
        let b = Balancer::new(targets, Algorithm::HashSubsets(3));
        for user in 0..50 {
            let key = format!("u{user}");
            let names = |bal: &Balancer| -> BTreeSet<String> {
                picks(bal, key.as_bytes(), |_| true)
                    .into_iter()
                    .map(|i| bal.target(i).addr.to_string())
                    .collect()
            };
            assert_eq!(names(&a), names(&b));
        }
    }
}
