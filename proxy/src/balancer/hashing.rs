//! Consistent hashing on a ring, ketama-style.
//!
//! Each target owns points on a 64-bit ring, as many as its share of the weight (about
//! [`POINTS_PER_WEIGHT`] for a target of average weight), placed by hashing `addr#n`. A key goes
//! to the owner of the first point at or after its hash, clockwise, skipping targets the caller
//! rules out. A point depends only on its target's address, never on the target's position in
//! the config or on the other targets, so adding or removing one target moves only the keys that
//! target gains or loses, and every Weir process (of any version) sends a key to the same target.
//!
//! The hash is FNV-1a (64-bit) with the splitmix64 finaliser: both are fixed public algorithms
//! (unlike std's `DefaultHasher`, whose output may change between Rust releases), and the
//! finaliser spreads FNV's weak high bits, which matters for keys like `addr#0`, `addr#1`.

use super::Target;

/// Ring points for a target of average weight.
const POINTS_PER_WEIGHT: u64 = 160;

/// The stable 64-bit hash of `bytes` used for ring points; callers hash request keys with it.
pub fn hash_key(bytes: &[u8]) -> u64 {
    mix(fnv1a(bytes))
}

/// FNV-1a, 64-bit.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ *b as u64).wrapping_mul(PRIME))
}

/// splitmix64's finaliser: every input bit affects every output bit.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The ring: sorted point hashes and, at the same positions, the target owning each.
#[derive(Debug)]
pub(super) struct Ring {
    /// Apart from `owners` so the binary search reads only hashes.
    points: Box<[u64]>,
    owners: Box<[u32]>,
    /// Number of distinct owners, to stop a walk once all were ruled out.
    active: usize,
}

impl Ring {
    /// The ring for `targets` with `weights` (same indices).
    pub(super) fn new(targets: &[Target], weights: &[u32]) -> Ring {
        Ring::named(|i| &targets[i].addr, weights)
    }

    /// The ring for owners `0..weights.len()`, owner `i` placed by the hash of `name(i)`.
    pub(super) fn named<'a>(name: impl Fn(usize) -> &'a str, weights: &[u32]) -> Ring {
        let weighted = super::weighted(weights);
        let n = weighted.len() as u128;
        let total: u128 = weights.iter().map(|w| *w as u128).sum();
        let mut ring: Vec<(u64, u32)> = Vec::new();
        let mut point = String::new();
        for &i in weighted.iter() {
            // Rounded share of POINTS_PER_WEIGHT * n, at least one point.
            let w = weights[i as usize] as u128;
            let count = ((POINTS_PER_WEIGHT as u128 * w * n + total / 2) / total).max(1) as u64;
            let addr = name(i as usize);
            for k in 0..count {
                use std::fmt::Write;
                point.clear();
                let _ = write!(point, "{addr}#{k}");
                ring.push((hash_key(point.as_bytes()), i));
            }
        }
        // Ties (two points with one hash) go to the lower index, the same in every process.
        ring.sort_unstable();
        Ring {
            points: ring.iter().map(|(p, _)| *p).collect(),
            owners: ring.iter().map(|(_, o)| *o).collect(),
            active: weighted.len(),
        }
    }

    /// The first eligible owner clockwise from `hash`.
    // Out of line, like the other algorithms, to keep round-robin's inlined pick small.
    #[inline(never)]
    pub(super) fn pick(&self, hash: u64, eligible: &impl Fn(usize) -> bool) -> Option<usize> {
        let len = self.points.len();
        if len == 0 {
            return None;
        }
        let at = self.points.partition_point(|&p| p < hash) % len;
        let first = self.owners[at] as usize;
        if eligible(first) {
            return Some(first);
        }
        self.walk(at, eligible)
    }

    /// The rest of [`Ring::pick`]: a walk past ruled-out owners, each asked about once (the
    /// first 256 targets are remembered), ending when every owner has said no.
    #[cold]
    #[inline(never)]
    fn walk(&self, at: usize, eligible: &impl Fn(usize) -> bool) -> Option<usize> {
        let len = self.points.len();
        let mut refused = [0u64; 4];
        let mut refusals = 0;
        for step in 0..len {
            let owner = self.owners[(at + step) % len] as usize;
            let slot = (owner < 256).then(|| (owner / 64, 1u64 << (owner % 64)));
            if slot.is_some_and(|(word, bit)| refused[word] & bit != 0) {
                continue;
            }
            // Step 0 is the owner `pick` already asked.
            if step > 0 && eligible(owner) {
                return Some(owner);
            }
            if let Some((word, bit)) = slot {
                refused[word] |= bit;
                refusals += 1;
                if refusals == self.active {
                    return None;
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::t;
    use super::*;

    fn all(_: usize) -> bool {
        true
    }

    fn ring(names: &[&str], weights: &[u32]) -> (Vec<Target>, Ring) {
        let targets: Vec<Target> = names.iter().map(|n| t(n)).collect();
        let ring = Ring::new(&targets, weights);
        (targets, ring)
    }

    fn keys() -> Vec<u64> {
        (0..10_000)
            .map(|k| hash_key(format!("client-{k}").as_bytes()))
            .collect()
    }

    /// The address each key lands on.
    fn owners(targets: &[Target], ring: &Ring, keys: &[u64]) -> Vec<String> {
        keys.iter()
            .map(|k| targets[ring.pick(*k, &all).unwrap()].addr.to_string())
            .collect()
    }

    const TEN: [&str; 10] = [
        "10.0.0.1:80",
        "10.0.0.2:80",
        "10.0.0.3:80",
        "10.0.0.4:80",
        "10.0.0.5:80",
        "10.0.0.6:80",
        "10.0.0.7:80",
        "10.0.0.8:80",
        "10.0.0.9:80",
        "10.0.0.10:80",
    ];

    #[test]
    fn the_hash_is_fnv1a_with_the_splitmix64_finaliser() {
        // Published test vectors: the hash cannot drift between versions or processes.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        // splitmix64's first output for seed 0 is mix(golden gamma).
        assert_eq!(mix(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
        assert_eq!(hash_key(b"foobar"), mix(0x8594_4171_f739_67e8));
    }

    #[test]
    fn a_key_always_lands_on_the_same_address() {
        let keys = keys();
        let (targets, a) = ring(&TEN, &[1; 10]);
        let first = owners(&targets, &a, &keys);
        assert_eq!(
            first,
            owners(&targets, &a, &keys),
            "same ring, same answers"
        );
        // Another process, with the targets listed in another order, agrees.
        let mut reversed = TEN;
        reversed.reverse();
        let (targets, b) = ring(&reversed, &[1; 10]);
        assert_eq!(first, owners(&targets, &b, &keys));
    }

    #[test]
    fn removing_one_of_ten_moves_only_its_keys() {
        let keys = keys();
        let (targets, before) = ring(&TEN, &[1; 10]);
        let before = owners(&targets, &before, &keys);
        let removed = TEN[3];
        let rest: Vec<&str> = TEN.iter().copied().filter(|a| *a != removed).collect();
        let (targets, after) = ring(&rest, &[1; 9]);
        let after = owners(&targets, &after, &keys);
        let moved: Vec<usize> = (0..keys.len()).filter(|&k| before[k] != after[k]).collect();
        assert!(moved.iter().all(|&k| before[k] == removed));
        assert_eq!(moved.len(), before.iter().filter(|a| *a == removed).count());
        assert!(moved.len() <= 1500, "{} of 10000 keys moved", moved.len());
        // Weight 0 is the same as absent.
        let (targets, zero) = ring(&TEN, &[1, 1, 1, 0, 1, 1, 1, 1, 1, 1]);
        assert_eq!(after, owners(&targets, &zero, &keys));
    }

    #[test]
    fn adding_an_eleventh_moves_keys_only_to_it() {
        let keys = keys();
        let (targets, before) = ring(&TEN, &[1; 10]);
        let before = owners(&targets, &before, &keys);
        let mut eleven = TEN.to_vec();
        eleven.push("10.0.0.11:80");
        let (targets, after) = ring(&eleven, &[1; 11]);
        let after = owners(&targets, &after, &keys);
        let moved: Vec<usize> = (0..keys.len()).filter(|&k| before[k] != after[k]).collect();
        assert!(moved.iter().all(|&k| after[k] == "10.0.0.11:80"));
        assert!((400..=1500).contains(&moved.len()), "{}", moved.len());
    }

    #[test]
    fn keys_spread_evenly_over_equal_targets() {
        let keys = keys();
        let (targets, ring) = ring(&TEN, &[1; 10]);
        let mut counts = [0usize; 10];
        for k in &keys {
            counts[ring.pick(*k, &all).unwrap()] += 1;
        }
        let _ = targets;
        // 1000 each on average; 160 points per target keep every share within a third of it.
        assert!(
            counts.iter().all(|c| (700..=1300).contains(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn weights_set_the_shares() {
        let keys = keys();
        let (_, ring) = ring(&TEN[..4], &[1, 2, 3, 4]);
        let mut counts = [0usize; 4];
        for k in &keys {
            counts[ring.pick(*k, &all).unwrap()] += 1;
        }
        // Expected 1000, 2000, 3000, 4000.
        for (i, c) in counts.iter().enumerate() {
            let expected = 1000 * (i + 1);
            assert!(c.abs_diff(expected) <= expected / 4, "{counts:?}");
        }
        assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    }

    #[test]
    fn extreme_weights_keep_the_ring_small_and_every_target_on_it() {
        let (_, ring) = ring(&TEN[..2], &[u32::MAX, 1]);
        assert!(ring.points.len() <= 2 * POINTS_PER_WEIGHT as usize + 2);
        assert!(ring.owners.contains(&1));
    }

    #[test]
    fn ruled_out_targets_pass_their_keys_clockwise_as_if_removed() {
        let keys = keys();
        let (targets, full) = ring(&TEN, &[1; 10]);
        let rest: Vec<&str> = TEN.iter().copied().filter(|a| *a != TEN[3]).collect();
        let (rest_targets, without) = ring(&rest, &[1; 9]);
        for k in &keys {
            let i = full.pick(*k, &|i| i != 3).unwrap();
            let j = without.pick(*k, &all).unwrap();
            assert_eq!(targets[i].addr, rest_targets[j].addr);
        }
        // Only one left: every key goes there; none left: no answer.
        for k in &keys[..100] {
            assert_eq!(full.pick(*k, &|i| i == 7), Some(7));
            assert_eq!(full.pick(*k, &|_| false), None);
        }
    }

    #[test]
    fn a_walk_asks_each_refused_target_once() {
        let (_, ring) = ring(&TEN, &[1; 10]);
        let asked = std::cell::Cell::new(0);
        let none = ring.pick(hash_key(b"k"), &|_| {
            asked.set(asked.get() + 1);
            false
        });
        assert_eq!((none, asked.get()), (None, 10));
    }
}
