//! The limiting algorithms as plain functions over their state, with the time passed in: the
//! `local` policy runs them directly, and the Redis scripts (`scripts.rs`) do the same
//! arithmetic on the server's clock.

use super::config::Window;

/// The counters of one window (fixed or sliding) for one limited key.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowCount {
    /// Which window (`floor(now / size)`) `count` belongs to.
    pub id: i64,
    /// Requests counted in that window.
    pub count: u64,
    /// Requests counted in the window before it (for the sliding estimate).
    pub prev: u64,
}

/// How full one window is after a decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowUsage {
    /// The window.
    pub window: Window,
    /// Its limit.
    pub limit: u64,
    /// Requests counted (for a sliding window, the weighted estimate), this one included when
    /// it was allowed.
    pub used: f64,
    /// Seconds until the current window ends.
    pub reset: f64,
}

impl WindowUsage {
    /// Requests left in this window.
    pub fn remaining(&self) -> u64 {
        (self.limit as f64 - self.used).floor().max(0.0) as u64
    }
}

/// Fixed or sliding windows: allowed only when every window has room for `cost` more
/// (Kong's rule: nothing is counted for a refused request).
pub fn windows(
    state: &mut [WindowCount],
    limits: &[(Window, u64)],
    now: f64,
    sliding: bool,
    cost: u64,
    usage: &mut Vec<WindowUsage>,
) -> bool {
    usage.clear();
    let mut allowed = true;
    for (s, &(window, limit)) in state.iter_mut().zip(limits) {
        let size = window.seconds() as f64;
        let id = (now / size).floor() as i64;
        // Roll the counters forward to the current window.
        if s.id != id {
            s.prev = if s.id == id - 1 { s.count } else { 0 };
            s.count = 0;
            s.id = id;
        }
        let elapsed = (now - id as f64 * size) / size;
        let mut used = s.count as f64;
        if sliding {
            // Whole requests only: a saturated window then passes exactly `limit` a window
            // (a fractional remainder would hold one back at every window's end).
            used += (s.prev as f64 * (1.0 - elapsed)).floor();
        }
        if used + cost as f64 > limit as f64 {
            allowed = false;
        }
        usage.push(WindowUsage {
            window,
            limit,
            used,
            reset: (id + 1) as f64 * size - now,
        });
    }
    if allowed {
        for (s, u) in state.iter_mut().zip(usage.iter_mut()) {
            s.count += cost;
            u.used += cost as f64;
        }
    }
    allowed
}

/// A token bucket (the seed's): `rate` tokens a second up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Tokens left at `at`.
    pub tokens: f64,
    /// When `tokens` was computed (seconds).
    pub at: f64,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn full(burst: f64, now: f64) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// Refills for the time since the last decision, then takes `cost` tokens if there are
    /// that many; returns whether it did.
    pub fn take(&mut self, rate: f64, burst: f64, cost: f64, now: f64) -> bool {
        let elapsed = (now - self.at).max(0.0);
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now.max(self.at);
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_window_counts_until_its_end() {
        let limits = [(Window::Second, 3)];
        let mut st = [WindowCount::default()];
        let mut u = Vec::new();
        let t = 1000.2;
        for _ in 0..3 {
            assert!(windows(&mut st, &limits, t, false, 1, &mut u));
        }
        assert!(!windows(&mut st, &limits, t + 0.7, false, 1, &mut u));
        assert_eq!(u[0].remaining(), 0);
        assert!((u[0].reset - 0.1).abs() < 1e-6);
        // A new second, a new count.
        assert!(windows(&mut st, &limits, 1001.0, false, 1, &mut u));
        assert_eq!(u[0].remaining(), 2);
    }

    #[test]
    fn every_window_must_have_room_and_a_refusal_counts_nothing() {
        let limits = [(Window::Second, 10), (Window::Minute, 4)];
        let mut st = [WindowCount::default(); 2];
        let mut u = Vec::new();
        for i in 0..4 {
            assert!(windows(&mut st, &limits, 60.0 + i as f64, false, 1, &mut u));
        }
        assert!(!windows(&mut st, &limits, 65.0, false, 1, &mut u));
        assert_eq!(st[0].count, 0, "the refused request was not counted");
        assert_eq!(st[1].count, 4);
        assert_eq!(u[1].remaining(), 0);
        assert_eq!(u[0].remaining(), 10);
    }

    #[test]
    fn a_sliding_window_weighs_the_previous_one() {
        let limits = [(Window::Second, 10)];
        let mut st = [WindowCount::default()];
        let mut u = Vec::new();
        for _ in 0..10 {
            assert!(windows(&mut st, &limits, 5.5, true, 1, &mut u));
        }
        assert!(!windows(&mut st, &limits, 5.9, true, 1, &mut u));
        // A quarter into the next second, 10 × 0.75 = 7.5 (7 whole) still count: three fit.
        for _ in 0..3 {
            assert!(windows(&mut st, &limits, 6.25, true, 1, &mut u));
        }
        assert!(!windows(&mut st, &limits, 6.25, true, 1, &mut u));
        // Two windows later the old requests weigh nothing.
        assert!(windows(&mut st, &limits, 8.0, true, 1, &mut u));
        assert_eq!(st[0].prev, 0);
    }

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let (rate, burst) = (10.0, 20.0);
        let mut b = Bucket::full(burst, 0.0);
        let taken = (0..30).filter(|_| b.take(rate, burst, 1.0, 0.0)).count();
        assert_eq!(taken, 20);
        // 0.35 s later: 3.5 tokens.
        let taken = (0..10).filter(|_| b.take(rate, burst, 1.0, 0.35)).count();
        assert_eq!(taken, 3);
        // Idle for a minute: full again, never more.
        assert!(b.take(rate, burst, 1.0, 60.0));
        assert!((b.tokens - 19.0).abs() < 1e-9);
        // A cost larger than what is left is refused and takes nothing.
        let mut b = Bucket::full(burst, 0.0);
        assert!(!b.take(rate, burst, 25.0, 0.0));
        assert_eq!(b.tokens, 20.0);
    }

    /// Saturated from t=0 for T seconds, a bucket allows floor(burst + rate × T).
    #[test]
    fn a_saturated_bucket_allows_burst_plus_rate_times_elapsed() {
        let (rate, burst) = (10.0, 20.0);
        let mut b = Bucket::full(burst, 0.0);
        let allowed = (0..=5000)
            .filter(|ms| b.take(rate, burst, 1.0, *ms as f64 / 1000.0))
            .count();
        // 70 exactly in real numbers; refills summed in floating point may fall a hair short.
        assert!((69..=70).contains(&allowed), "{allowed}");
    }
}
