//! The access log's writer. Each worker thread appends its lines to a buffer of its own (a
//! shard: a lock no other worker takes), and one writer thread takes whole buffers and writes
//! them: when a buffer has gathered [`BATCH`] bytes, and every [`FLUSH_EVERY`] for the rest.
//!
//! Why shards and not a queue of lines: with one line per message, every request woke the
//! writer thread (a futex wake, a context switch and a `write` per line), which cost as much
//! CPU as proxying the request (2.8 context switches per request, 70.9 µs against 31.0 µs with
//! the log off, issue 32). Here a line is a `memcpy` into memory the worker already owns; the
//! writer wakes a few times a second, or once per 64 KiB under load.
//!
//! A slow or blocked stdout never stalls a request: a shard holding its share of
//! `--access-log-queue` lines drops further lines (the caller counts them).

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::pipeline::RequestCtx;

/// A shard that gathers this many bytes wakes the writer at once.
const BATCH: usize = 64 * 1024;

/// The longest a line waits in its shard when there is little traffic.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

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

/// One thread's lines, waiting for the writer.
#[derive(Default)]
struct Lines {
    bytes: Vec<u8>,
    count: usize,
}

/// A shard on its own cache line, so that two workers' appends never share one.
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<Lines>);

struct Inner {
    shards: Box<[Shard]>,
    /// Lines a shard may hold before it drops more.
    per_shard: usize,
    /// The writer thread, to wake it.
    writer: OnceLock<Thread>,
    /// Flushes asked for ([`AccessLog::drain`]) and flushes done.
    asked: AtomicU64,
    done: AtomicU64,
}

thread_local! {
    /// This thread's shard, chosen once per thread.
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// The sending side of the access log.
pub struct AccessLog {
    inner: Arc<Inner>,
}

impl AccessLog {
    /// Starts the writer thread on `out`, with a shard per expected thread (`threads`, more
    /// threads share shards); at most `capacity` lines wait for it in all.
    pub fn start(capacity: usize, threads: usize, out: impl Write + Send + 'static) -> AccessLog {
        let shards = threads.max(1);
        let inner = Arc::new(Inner {
            shards: (0..shards).map(|_| Shard::default()).collect(),
            per_shard: capacity.div_ceil(shards).max(1),
            writer: OnceLock::new(),
            asked: AtomicU64::new(0),
            done: AtomicU64::new(0),
        });
        let state = Arc::downgrade(&inner);
        let spawned = std::thread::Builder::new()
            .name("weir-access-log".into())
            .spawn(move || write_loop(state, out));
        match spawned {
            Ok(handle) => {
                let _ = inner.writer.set(handle.thread().clone());
            }
            Err(e) => tracing::error!(error = %e, "access-log writer thread failed to start"),
        }
        AccessLog { inner }
    }

    /// Appends one line, written by `line` (which must end it with `\n`) into this thread's
    /// buffer; `false` if the buffer was full and the line was dropped.
    pub fn append(&self, line: impl FnOnce(&mut Vec<u8>)) -> bool {
        let inner = &*self.inner;
        let shard = &inner.shards[SHARD.with(|s| *s) % inner.shards.len()];
        let mut lines = match shard.0.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        if lines.count >= inner.per_shard {
            return false;
        }
        let before = lines.bytes.len();
        line(&mut lines.bytes);
        lines.count += 1;
        let full = before < BATCH && lines.bytes.len() >= BATCH;
        drop(lines);
        if full {
            if let Some(w) = inner.writer.get() {
                w.unpark();
            }
        }
        true
    }

    /// Waits (at most `limit`) until every line appended so far was written.
    pub fn drain(&self, limit: Duration) {
        let inner = &*self.inner;
        let want = inner.asked.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(w) = inner.writer.get() {
            w.unpark();
        }
        let deadline = Instant::now() + limit;
        while inner.done.load(Ordering::Acquire) < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// The writer thread: takes each shard's buffer (leaving it an empty one with capacity, so
/// that no buffer is allocated in the steady state) and writes it, on every wake-up.
/// It ends when the proxy drops its [`AccessLog`].
fn write_loop(inner: Weak<Inner>, out: impl Write) {
    let mut out = out;
    let mut spare = Lines::default();
    loop {
        std::thread::park_timeout(FLUSH_EVERY);
        let Some(inner) = inner.upgrade() else { return };
        let asked = inner.asked.load(Ordering::Acquire);
        for shard in inner.shards.iter() {
            {
                let mut lines = match shard.0.lock() {
                    Ok(l) => l,
                    Err(poisoned) => poisoned.into_inner(),
                };
                if lines.count == 0 {
                    continue;
                }
                std::mem::swap(&mut *lines, &mut spare);
            }
            // stdout gone (a closed pipe): the lines are lost, and the shards keep draining
            // so that no worker ever waits or fills up.
            let _ = out.write_all(&spare.bytes);
            spare.bytes.clear();
            spare.count = 0;
        }
        let _ = out.flush();
        inner.done.store(asked, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Condvar;

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

    fn line(text: &str) -> impl FnOnce(&mut Vec<u8>) + '_ {
        move |buf| {
            buf.extend_from_slice(text.as_bytes());
            buf.push(b'\n');
        }
    }

    #[test]
    fn a_blocked_writer_drops_lines_beyond_the_queue_and_never_blocks_senders() {
        let gate = Gate::default();
        let log = AccessLog::start(4, 1, gate.clone());
        assert!(log.append(line("first")));
        let (m, cv) = &*gate.0;
        // The writer takes the line on its timer and is stuck in write().
        drop(cv.wait_while(m.lock().unwrap(), |s| !s.entered).unwrap());
        // The shard takes 4 more lines, the rest are dropped.
        let started = Instant::now();
        let sent = (0..200)
            .filter(|i| log.append(line(&i.to_string())))
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
        assert!(log.append(line("after")), "room again once written");
        log.drain(Duration::from_secs(5));
        assert!(m.lock().unwrap().got.ends_with(b"after\n"));
    }

    #[test]
    fn lines_of_several_threads_are_all_written_whole_in_each_threads_order() {
        let out = Arc::new(Mutex::new(Vec::new()));
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = Arc::new(AccessLog::start(1_000_000, 4, Shared(out.clone())));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        // Long lines, so that the size trigger is crossed many times.
                        let text = format!("{t} {i} {}", "x".repeat(40));
                        assert!(log.append(line(&text)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        log.drain(Duration::from_secs(5));
        let written = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let mut next = [0usize; 4];
        for l in written.lines() {
            let mut parts = l.split(' ');
            let t: usize = parts.next().unwrap().parse().unwrap();
            let i: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(parts.next().unwrap().len(), 40, "a whole line: {l}");
            assert_eq!(i, next[t], "thread {t}'s lines in order");
            next[t] += 1;
        }
        assert_eq!(next, [5_000; 4]);
    }
}
