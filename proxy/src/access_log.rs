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

use crate::pipeline::{LogRecord, RequestCtx};

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

/// Appends one access-log line: `record` as JSON (the fields and names its `Serialize` gives,
/// in the same order) and a newline.
///
/// Written by hand because it runs for every request: through `serde_json` the line cost
/// about 5,000 instructions (escaping byte by byte, the request id and the client address
/// through `fmt`), more than nginx spends on the whole request's log (callgrind,
/// `bench/callgrind.py`, issue 32); this is the same JSON, checked against `serde_json` by
/// the tests below. Rare parts (the tries of a retried request) still go through `serde_json`.
pub fn write_line(r: &LogRecord, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"request_id\":\"");
    hex16(out, r.request_id);
    out.extend_from_slice(b"\",\"client_ip\":");
    ip(out, r.client_ip);
    out.extend_from_slice(b",\"method\":");
    string(out, r.method.as_str());
    out.extend_from_slice(b",\"host\":");
    string(out, &r.host);
    out.extend_from_slice(b",\"path\":");
    string(out, &r.path);
    out.extend_from_slice(b",\"status\":");
    integer(out, r.status);
    out.extend_from_slice(b",\"route\":");
    optional(out, r.route.as_deref());
    out.extend_from_slice(b",\"service\":");
    optional(out, r.service.as_deref());
    out.extend_from_slice(b",\"target\":");
    optional(out, r.target.as_deref());
    out.extend_from_slice(b",\"tries\":");
    integer(out, r.tries);
    if let Some(tries) = &r.upstream_tries {
        out.extend_from_slice(b",\"upstream_tries\":");
        let start = out.len();
        if serde_json::to_writer(&mut *out, tries).is_err() {
            out.truncate(start);
            out.extend_from_slice(b"null");
        }
    }
    out.extend_from_slice(b",\"request_bytes\":");
    integer(out, r.request_bytes);
    out.extend_from_slice(b",\"response_bytes\":");
    integer(out, r.response_bytes);
    let l = &r.latencies;
    out.extend_from_slice(b",\"latencies\":{\"proxy\":");
    float(out, l.proxy);
    out.extend_from_slice(b",\"upstream\":");
    float(out, l.upstream);
    out.extend_from_slice(b",\"receive\":");
    float(out, l.receive);
    out.extend_from_slice(b",\"total\":");
    float(out, l.total);
    out.extend_from_slice(b"},\"aborted\":");
    out.extend_from_slice(if r.aborted { b"true" } else { b"false" });
    if let Some(s) = r.grpc_status {
        out.extend_from_slice(b",\"grpc_status\":");
        integer(out, s);
    }
    if let Some(id) = &r.correlation_id {
        out.extend_from_slice(b",\"correlation_id\":");
        string(out, &String::from_utf8_lossy(id.as_bytes()));
    }
    if let Some(c) = &r.consumer {
        out.extend_from_slice(b",\"consumer\":");
        string(out, c);
    }
    out.extend_from_slice(b"}\n");
}

/// A JSON string: copied as it is when nothing in it needs escaping (almost always), else
/// escaped as `serde_json` escapes it.
fn string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

fn optional(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn integer(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// As `serde_json` writes an `f64` (the same formatter; `null` for NaN and infinities).
fn float(out: &mut Vec<u8>, f: f64) {
    if f.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(f).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// 16 lower-case hex digits.
fn hex16(out: &mut Vec<u8>, n: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = DIGITS[((n >> ((15 - i) * 4)) & 0xf) as usize];
    }
    out.extend_from_slice(&buf);
}

/// An IP address as a JSON string (IPv4 by hand, the rare IPv6 through `fmt`).
fn ip(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            out.push(b'"');
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                integer(out, octet);
            }
            out.push(b'"');
        }
        std::net::IpAddr::V6(v6) => {
            use std::io::Write as _;
            let _ = write!(out, "\"{v6}\"");
        }
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

    fn record() -> LogRecord {
        let mut r = LogRecord::new(
            0x0000_0100_0000_002a,
            [10, 0, 0, 7].into(),
            http::Method::GET,
            "shop.example".into(),
        );
        r.path = "/cart/items".into();
        r.status = 200;
        r.route = Some("default.shop.0".into());
        r.service = Some("default.shop.80".into());
        r.target = Some("10.1.2.3:8080".into());
        r.tries = 1;
        r.request_bytes = 12;
        r.response_bytes = 345;
        r.latencies = crate::pipeline::Latencies {
            proxy: 0.123,
            upstream: 1.5,
            receive: 0.0,
            total: 1234.567,
        };
        r
    }

    fn same_as_serde(r: &LogRecord) {
        let mut line = Vec::new();
        write_line(r, &mut line);
        assert_eq!(line.last(), Some(&b'\n'));
        let ours: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(ours, serde_json::to_value(r).unwrap());
        // Byte for byte, field order included.
        let mut serde = serde_json::to_vec(r).unwrap();
        serde.push(b'\n');
        assert_eq!(
            String::from_utf8(line).unwrap(),
            String::from_utf8(serde).unwrap()
        );
    }

    #[test]
    fn the_hand_written_line_is_serde_jsons_line() {
        let mut r = record();
        same_as_serde(&r);
        // Everything optional, and strings that need escaping, non-ASCII and IPv6.
        r.client_ip = "2001:db8::1".parse().unwrap();
        r.method = http::Method::from_bytes(b"PURGE").unwrap();
        r.host = "h\"o\\st\u{7f}".into();
        r.path = "/caf\u{e9}/\u{1}\ttab\nline".into();
        r.route = None;
        r.service = None;
        r.target = None;
        r.status = 499;
        r.aborted = true;
        r.grpc_status = Some(14);
        r.correlation_id = Some(http::HeaderValue::from_static("abc-\"1\""));
        r.consumer = Some("alice".into());
        r.latencies.total = f64::NAN;
        r.latencies.proxy = 1e-7;
        let mut t = crate::pipeline::Try::new("10.0.0.1:80".into());
        t.failed(
            "connection refused".into(),
            std::time::Duration::from_micros(1500),
        );
        r.upstream_tries = Some(vec![t].into_boxed_slice());
        same_as_serde(&r);
        r.request_id = u64::MAX;
        r.client_ip = [0, 0, 0, 0].into();
        same_as_serde(&r);
    }
}
