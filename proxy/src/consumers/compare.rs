//! Comparison whose time does not depend on where two secrets differ.

/// Whether `a` and `b` are equal, in time that depends only on their lengths: every byte is
/// compared, and the result is folded without a branch an attacker could time.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // Keeps the optimiser from turning the fold into an early-exit comparison.
    std::hint::black_box(fold_difference(a.iter().zip(b))) == 0
}

/// ORs together the XOR of every pair: zero exactly when all pairs are equal, and always
/// consumes every pair.
fn fold_difference<'a>(pairs: impl Iterator<Item = (&'a u8, &'a u8)>) -> u8 {
    pairs.fold(0u8, |acc, (x, y)| acc | (x ^ y))
}

#[cfg(test)]
mod tests {
    use super::{constant_time_eq, fold_difference};
    use std::cell::Cell;

    #[test]
    fn equal_and_unequal_inputs() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"Secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
        for i in 0..32 {
            let a = [7u8; 32];
            let mut b = a;
            b[i] ^= 0x80;
            assert!(!constant_time_eq(&a, &b), "difference at {i}");
        }
    }

    /// The property that makes it constant-time: wherever the first difference is (or if there
    /// is none), every byte pair is read; an early exit would stop at the difference.
    #[test]
    fn every_pair_is_read_wherever_the_inputs_differ() {
        let a = [0x5au8; 64];
        for at in [None, Some(0), Some(1), Some(31), Some(63)] {
            let mut b = a;
            if let Some(i) = at {
                b[i] ^= 1;
            }
            let read = Cell::new(0);
            let diff = fold_difference(a.iter().zip(&b).inspect(|_| read.set(read.get() + 1)));
            assert_eq!(read.get(), 64, "difference at {at:?}");
            assert_eq!(diff == 0, at.is_none());
        }
    }
}
