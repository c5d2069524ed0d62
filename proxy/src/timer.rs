//! Per-worker reusable timers for the per-request deadlines (response head, body reads).
//!
//! Registering a fresh `Sleep` in tokio's timer wheel and removing it again costs a lock and
//! a wheel update per request. A `Sleep` that stays registered and is only moved to a later
//! deadline is cheap to reset (tokio extends it in place and re-files it when it comes due),
//! so finished requests hand theirs back to a small per-thread pool.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

/// Timers kept per worker thread; beyond this, released ones are dropped.
const POOL_MAX: usize = 256;

thread_local! {
    static POOL: RefCell<Vec<Pin<Box<Sleep>>>> = const { RefCell::new(Vec::new()) };
}

/// Drops this thread's pooled timers: they belong to its runtime, which is about to end (a
/// later runtime on the thread must not get them).
pub(crate) fn clear_pool() {
    let _ = POOL.try_with(|p| p.borrow_mut().clear());
}

/// A timer taken from this thread's pool; it goes back when dropped.
///
/// A worker thread runs one runtime for its life; [`clear_pool`] ends it.
pub(crate) struct Timer(Option<Pin<Box<Sleep>>>);

impl Timer {
    /// A timer that completes at `deadline`.
    pub(crate) fn at(deadline: impl Into<Instant>) -> Timer {
        let deadline = deadline.into();
        let mut sleep = POOL
            .try_with(|p| p.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Box::pin(tokio::time::sleep_until(deadline)));
        sleep.as_mut().reset(deadline);
        Timer(Some(sleep))
    }

    /// Moves the deadline.
    pub(crate) fn reset(&mut self, deadline: impl Into<Instant>) {
        if let Some(s) = &mut self.0 {
            s.as_mut().reset(deadline.into());
        }
    }
}

impl Future for Timer {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            Some(s) => s.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            let _ = POOL.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOL_MAX {
                    p.push(s);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_reused_timer_keeps_its_new_deadline() {
        // Pooled with a far deadline, taken again with a near one: the near one counts.
        drop(Timer::at(Instant::now() + Duration::from_secs(30)));
        let t = Timer::at(Instant::now() + Duration::from_millis(20));
        tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("the earlier deadline is kept");
        // Moved later: it does not fire at the first deadline.
        let start = Instant::now();
        let mut t = Timer::at(start + Duration::from_millis(10));
        t.reset(start + Duration::from_millis(150));
        t.await;
        assert!(start.elapsed() >= Duration::from_millis(150));
    }
}
