//! Bandwidth pacing of a response body (nginx's `limit_rate` and `limit_rate_after`): the
//! first `after` bytes go at once, the rest no faster than `rate` bytes a second counted from
//! the body's start, in slices of a tenth of a second's worth so a client sees a steady flow
//! rather than bursts a second apart.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::config::ResponseRate;
use crate::timer::Timer;

/// Largest slice sent at once, whatever the rate.
const MAX_SLICE: u64 = 64 * 1024;

/// The pacing state of one body.
pub(super) struct Pace {
    rate: u64,
    after: u64,
    slice: u64,
    /// When the first byte was ready to go.
    start: Option<Instant>,
    /// Bytes handed on so far.
    sent: u64,
    /// What is left of the chunk being paced.
    held: Option<Bytes>,
    timer: Option<Timer>,
}

impl Pace {
    /// Pacing at `r` (whose rate is at least 1 byte a second, as the config's check says).
    pub(super) fn new(r: ResponseRate) -> Pace {
        let rate = r.bytes_per_second.max(1);
        Pace {
            rate,
            after: r.after_bytes,
            slice: (rate / 10).clamp(1, MAX_SLICE),
            start: None,
            sent: 0,
            held: None,
            timer: None,
        }
    }

    /// Whether a chunk is still being paced out.
    pub(super) fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// Bytes taken but not given on yet.
    pub(super) fn held_len(&self) -> u64 {
        self.held.as_ref().map_or(0, |b| b.len() as u64)
    }

    /// Takes `data` to pace out through [`Pace::poll_next`].
    pub(super) fn hold(&mut self, data: Bytes) {
        debug_assert!(self.held.is_none());
        if !data.is_empty() {
            self.held = Some(data);
        }
    }

    /// The next slice of the held chunk once it may go, or `None` when nothing is held.
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let Some(data) = self.held.as_mut() else {
            return Poll::Ready(None);
        };
        let now = Instant::now();
        let start = *self.start.get_or_insert(now);
        let free = self.after.saturating_sub(self.sent);
        let n = if free > 0 {
            // What is left of the free bytes goes at once, without waiting for a slice that
            // would straddle their end.
            free.min(data.len() as u64)
        } else {
            let want = self.slice.min(data.len() as u64);
            // The time by which `sent + want` bytes are allowed.
            let paced = self.sent + want - self.after;
            let nanos = paced as u128 * 1_000_000_000 / self.rate as u128;
            let due = start + Duration::from_nanos(nanos.min(u64::MAX as u128) as u64);
            if due > now {
                let timer = self.timer.get_or_insert_with(|| Timer::at(due));
                timer.reset(due);
                if Pin::new(timer).poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            want
        };
        let out = data.split_to(n as usize);
        if data.is_empty() {
            self.held = None;
        }
        self.sent += n;
        Poll::Ready(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    async fn drain(pace: &mut Pace, data: &'static [u8]) -> Vec<(u64, usize)> {
        let t0 = Instant::now();
        pace.hold(Bytes::from_static(data));
        let mut out = Vec::new();
        while let Some(b) = poll_fn(|cx| pace.poll_next(cx)).await {
            out.push((t0.elapsed().as_millis() as u64, b.len()));
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_after_the_free_ones_go_at_the_rate_in_tenths_of_a_second() {
        let mut pace = Pace::new(ResponseRate {
            bytes_per_second: 1000,
            after_bytes: 300,
        });
        let sent = drain(&mut pace, &[0; 800]).await;
        // 300 at once, then 100 bytes every 100 ms.
        assert_eq!(
            sent,
            vec![
                (0, 300),
                (100, 100),
                (200, 100),
                (300, 100),
                (400, 100),
                (500, 100)
            ]
        );
        // A later chunk keeps the count: the rate is over the body, not per chunk.
        let more = drain(&mut pace, &[0; 200]).await;
        assert_eq!(more, vec![(100, 100), (200, 100)]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_free_bytes_never_wait_even_in_a_chunk_that_goes_past_them() {
        let mut pace = Pace::new(ResponseRate {
            bytes_per_second: 1000,
            after_bytes: 250,
        });
        assert_eq!(drain(&mut pace, &[0; 200]).await, vec![(0, 200)]);
        // 50 free bytes left: at once; then slices of 100 at the rate.
        let sent = drain(&mut pace, &[0; 250]).await;
        assert_eq!(sent, vec![(0, 50), (100, 100), (200, 100)]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_free_bytes_the_first_slice_waits_its_turn() {
        let mut pace = Pace::new(ResponseRate {
            bytes_per_second: 50,
            after_bytes: 0,
        });
        // Slices of 5 bytes, one every 100 ms.
        let sent = drain(&mut pace, b"0123456789abc").await;
        assert_eq!(sent, vec![(100, 5), (200, 5), (260, 3)]);
        assert!(!pace.holds());
    }
}
