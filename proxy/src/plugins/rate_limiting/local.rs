//! The `local` policy: counters in this process, shared by its workers, in a sharded map so
//! workers rarely wait for each other. Entries nobody touched for twice their window (or
//! refill time) are swept as the shard is used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::algorithm::{self, Bucket, WindowCount, WindowUsage};
use super::config::Algorithm;
use super::Outcome;

const SHARDS: usize = 16;
/// Operations on a shard between two sweeps of its idle entries.
const SWEEP_EVERY: u32 = 4096;
/// Keys a shard holds at most (a million in all): clients that invent keys (a rotating header
/// value, a fresh IPv6 address each time) cannot grow the map without bound. A new key in a
/// full shard first sweeps it, then evicts one key that holds no in-flight slot.
const MAX_ENTRIES: usize = 65_536;

/// Counters of every limited key of every `local` rate-limiting instance.
pub struct Local {
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<String, Entry>,
    ops: u32,
}

struct Entry {
    state: State,
    /// When it was last used (seconds) and how long it matters after that.
    touched: f64,
    keep: f64,
}

enum State {
    Windows(Vec<WindowCount>),
    Bucket(Bucket),
    InFlight(u64),
}

impl Default for Local {
    fn default() -> Self {
        Local {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Local {
    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, Shard> {
        let mut h = crate::router::Fnv::default();
        std::hash::Hasher::write(&mut h, key.as_bytes());
        let i = std::hash::Hasher::finish(&h) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides one request for `key` at `now` (seconds since the epoch).
    pub fn decide(
        &self,
        algorithm: &Algorithm,
        key: &str,
        now: f64,
        usage: &mut Vec<WindowUsage>,
    ) -> Outcome {
        let mut shard = self.shard(key);
        shard.ops += 1;
        if shard.ops >= SWEEP_EVERY {
            shard.ops = 0;
            shard.entries.retain(|_, e| {
                now - e.touched <= e.keep || matches!(e.state, State::InFlight(n) if n > 0)
            });
        }
        if !shard.entries.contains_key(key) && shard.entries.len() >= MAX_ENTRIES {
            shard.entries.retain(|_, e| {
                now - e.touched <= e.keep || matches!(e.state, State::InFlight(n) if n > 0)
            });
            if shard.entries.len() >= MAX_ENTRIES {
                let victim = shard
                    .entries
                    .iter()
                    .find(|(_, e)| !matches!(e.state, State::InFlight(n) if n > 0))
                    .map(|(k, _)| k.clone());
                if let Some(k) = victim {
                    shard.entries.remove(&k);
                }
            }
        }
        let entry = match shard.entries.get_mut(key) {
            Some(e) => e,
            None => shard.entries.entry(key.to_owned()).or_insert(Entry {
                state: State::InFlight(0),
                touched: now,
                keep: 0.0,
            }),
        };
        entry.touched = now;
        match algorithm {
            Algorithm::Windows { limits, sliding } => {
                let state = match &mut entry.state {
                    State::Windows(s) if s.len() == limits.len() => s,
                    other => {
                        *other = State::Windows(vec![WindowCount::default(); limits.len()]);
                        let State::Windows(s) = other else {
                            unreachable!()
                        };
                        s
                    }
                };
                entry.keep = 2.0 * limits.last().map_or(1, |(w, _)| w.seconds()) as f64;
                let allowed = algorithm::windows(state, limits, now, *sliding, 1, usage);
                Outcome::Windows { allowed }
            }
            Algorithm::TokenBucket { rate, burst, cost } => {
                let bucket = match &mut entry.state {
                    State::Bucket(b) => b,
                    other => {
                        *other = State::Bucket(Bucket::full(*burst, now));
                        let State::Bucket(b) = other else {
                            unreachable!()
                        };
                        b
                    }
                };
                entry.keep = (2.0 * burst / rate).max(1.0);
                let allowed = bucket.take(*rate, *burst, *cost, now);
                Outcome::Bucket {
                    allowed,
                    tokens: bucket.tokens,
                }
            }
            Algorithm::Concurrency { max } => {
                let n = match &mut entry.state {
                    State::InFlight(n) => n,
                    other => {
                        *other = State::InFlight(0);
                        let State::InFlight(n) = other else {
                            unreachable!()
                        };
                        n
                    }
                };
                entry.keep = 0.0;
                let allowed = *n < *max;
                if allowed {
                    *n += 1;
                }
                Outcome::InFlight {
                    allowed,
                    in_flight: *n,
                }
            }
        }
    }

    /// Gives back one in-flight slot of `key`.
    pub fn release(&self, key: &str) {
        if let Some(Entry {
            state: State::InFlight(n),
            ..
        }) = self.shard(key).entries.get_mut(key)
        {
            *n = n.saturating_sub(1);
        }
    }
}

/// An in-flight slot of the `local` policy, given back when the request ends (it lives in the
/// request's context, which is dropped however the request ends).
pub struct LocalPermit {
    /// The counters.
    pub local: Arc<Local>,
    /// The limited key.
    pub key: String,
}

impl Drop for LocalPermit {
    fn drop(&mut self) {
        self.local.release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_slots_come_back() {
        let local = Arc::new(Local::default());
        let alg = Algorithm::Concurrency { max: 2 };
        let mut u = Vec::new();
        let take = |local: &Local, u: &mut Vec<_>| match local.decide(&alg, "k", 1.0, u) {
            Outcome::InFlight { allowed, .. } => allowed,
            _ => unreachable!(),
        };
        assert!(take(&local, &mut u));
        assert!(take(&local, &mut u));
        assert!(!take(&local, &mut u));
        drop(LocalPermit {
            local: local.clone(),
            key: "k".into(),
        });
        assert!(take(&local, &mut u));
        assert!(!take(&local, &mut u));
        local.release("k");
        local.release("k");
        local.release("k");
        assert!(take(&local, &mut u));
        assert!(take(&local, &mut u));
        assert!(!take(&local, &mut u));
    }

    #[test]
    fn keys_are_independent_and_idle_ones_are_swept() {
        let local = Local::default();
        let alg = Algorithm::Windows {
            limits: vec![(super::super::config::Window::Second, 1)],
            sliding: false,
        };
        let mut u = Vec::new();
        let ok = |key: &str, now: f64, u: &mut Vec<_>| {
            matches!(
                local.decide(&alg, key, now, u),
                Outcome::Windows { allowed: true }
            )
        };
        assert!(ok("a", 10.5, &mut u));
        assert!(ok("b", 10.5, &mut u));
        assert!(!ok("a", 10.6, &mut u));
        // Enough operations for every shard to sweep at least once.
        for i in 0..SWEEP_EVERY as usize * SHARDS * 2 {
            ok(&format!("k{i}"), 100.0, &mut u);
        }
        let held: usize = local
            .shards
            .iter()
            .map(|s| s.lock().unwrap().entries.contains_key("a") as usize)
            .sum();
        assert_eq!(held, 0, "an entry idle for 90 s of a 1 s window is gone");
    }
}
