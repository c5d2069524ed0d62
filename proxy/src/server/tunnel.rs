//! What an upgraded connection's tunnel needs besides copying: knowing when it went idle.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
// Tokio's clock (the same as std's outside tests, where it can be paused).
use tokio::time::Instant;

/// A stream that notes, in milliseconds since `started`, when it last read a byte; both ends of
/// a tunnel share one clock, so it tells when the tunnel last carried anything.
pub(super) struct Watched<S> {
    inner: S,
    last: Arc<AtomicU64>,
    started: Instant,
}

impl<S> Watched<S> {
    pub(super) fn new(inner: S, last: Arc<AtomicU64>, started: Instant) -> Self {
        Watched {
            inner,
            last,
            started,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = self.started.elapsed().as_millis() as u64;
            self.last.store(now, Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Resolves once nothing was read for `idle` (checked when the limit would fall due, so a busy
/// tunnel costs one timer per `idle`, not one per read).
pub(super) async fn idle_for(idle: Duration, last: &AtomicU64, started: Instant) {
    loop {
        let last_ms = last.load(Ordering::Relaxed);
        let due = started + Duration::from_millis(last_ms) + idle;
        if Instant::now() >= due {
            return;
        }
        tokio::time::sleep_until(due).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn reads_move_the_idle_deadline() {
        let (a, mut b) = tokio::io::duplex(64);
        let started = Instant::now();
        let last = Arc::new(AtomicU64::new(0));
        let mut w = Watched::new(a, last.clone(), started);
        let idle = Duration::from_millis(500);
        let watchdog = tokio::spawn({
            let last = last.clone();
            async move { idle_for(idle, &last, started).await }
        });
        // Traffic every 300 ms keeps the tunnel alive past 500 ms.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            b.write_all(b"x").await.unwrap();
            let mut one = [0u8; 1];
            w.read_exact(&mut one).await.unwrap();
            assert!(!watchdog.is_finished());
        }
        assert!(last.load(Ordering::Relaxed) >= 800);
        // Then silence: the watchdog fires.
        tokio::time::timeout(Duration::from_secs(2), watchdog)
            .await
            .expect("idle tunnel noticed")
            .unwrap();
    }
}
