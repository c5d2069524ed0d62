//! The access log's writer: lines go from the workers through a bounded queue to one thread
//! that writes them, so a slow or blocked stdout never stalls a request. A line that finds the
//! queue full is dropped (and counted by the caller).

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pipeline::RequestCtx;

/// Batches of this many bytes are written at once when lines queue up.
const BATCH: usize = 64 * 1024;

/// Marks a request that is not written to the access log (its route has `access_log: false`),
/// in the request's [`RequestCtx::slots`]; its metrics are still counted.
#[derive(Debug, Clone, Copy)]
pub struct Unlogged;

/// Whether a request goes to the access log: no [`Unlogged`] mark (a `None` check on the
/// slots of a request that has none).
#[inline]
pub fn wanted(ctx: &RequestCtx) -> bool {
    ctx.slots.get::<Unlogged>().is_none()
}

/// The sending side of the access log.
pub struct AccessLog {
    tx: SyncSender<Vec<u8>>,
    /// Lines queued or being written.
    pending: Arc<AtomicUsize>,
}

impl AccessLog {
    /// Starts the writer thread on `out`; at most `capacity` lines wait for it.
    pub fn start(capacity: usize, out: impl Write + Send + 'static) -> AccessLog {
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(capacity.max(1));
        let pending = Arc::new(AtomicUsize::new(0));
        let left = pending.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::with_capacity(BATCH, out);
                while let Ok(line) = rx.recv() {
                    let mut n = 1;
                    let mut ok = out.write_all(&line).is_ok();
                    // Write what else is queued in the same batch, then flush once.
                    while out.buffer().len() < BATCH {
                        match rx.try_recv() {
                            Ok(line) => {
                                ok &= out.write_all(&line).is_ok();
                                n += 1;
                            }
                            Err(_) => break,
                        }
                    }
                    ok &= out.flush().is_ok();
                    left.fetch_sub(n, Ordering::AcqRel);
                    if !ok {
                        // stdout is gone (closed pipe): keep draining so senders never block.
                        continue;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "access-log writer thread failed to start");
        }
        AccessLog { tx, pending }
    }

    /// Queues one line; `false` if the queue was full and the line was dropped.
    pub fn send(&self, line: Vec<u8>) -> bool {
        self.pending.fetch_add(1, Ordering::AcqRel);
        match self.tx.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                false
            }
        }
    }

    /// Waits (at most `limit`) until every queued line was written.
    pub fn drain(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.pending.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Condvar, Mutex};

    /// A writer that blocks until released, then records what it got.
    #[derive(Clone, Default)]
    struct Gate(Arc<(Mutex<State>, Condvar)>);

    #[derive(Default)]
    struct State {
        entered: bool,
        open: bool,
        got: Vec<u8>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let (m, cv) = &*self.0;
            let mut g = m.lock().unwrap();
            g.entered = true;
            cv.notify_all();
            let mut g = cv.wait_while(g, |s| !s.open).unwrap();
            g.got.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_blocked_writer_drops_lines_beyond_the_queue_and_never_blocks_senders() {
        let gate = Gate::default();
        let log = AccessLog::start(4, gate.clone());
        assert!(log.send(b"first\n".to_vec()));
        let (m, cv) = &*gate.0;
        drop(cv.wait_while(m.lock().unwrap(), |s| !s.entered).unwrap());
        // The writer is stuck in write(): the queue takes 4 more lines, the rest are dropped.
        let started = Instant::now();
        let sent = (0..200)
            .filter(|i| log.send(format!("{i}\n").into_bytes()))
            .count();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "senders never wait"
        );
        assert_eq!(sent, 4);
        m.lock().unwrap().open = true;
        cv.notify_all();
        log.drain(Duration::from_secs(5));
        let written = String::from_utf8(m.lock().unwrap().got.clone()).unwrap();
        assert_eq!(written, "first\n0\n1\n2\n3\n");
        assert!(log.send(b"after\n".to_vec()), "room again once written");
        log.drain(Duration::from_secs(5));
        assert!(m.lock().unwrap().got.ends_with(b"after\n"));
    }
}
