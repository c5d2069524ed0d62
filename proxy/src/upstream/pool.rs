//! Keep-alive connections to upstream targets, pooled per worker thread.
//!
//! Each worker runs a current-thread runtime, so its pool is a thread-local map with no lock.
//! An HTTP/1.1 connection is taken out of the pool for one request and put back by its response
//! body once read to its end ([`h1`]); an HTTP/2 connection (hyper's client) is shared by
//! concurrent requests.
//! The key is everything that makes two connections interchangeable: the target, the
//! protocol and the TLS settings (SNI, verification, CAs, client certificate, ALPN), so a
//! connection verified one way is never handed to a service that asked for another.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use std::time::Duration;

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use super::stream::Stream;
use super::tls::TlsClient;
use super::{h1, Added, ResponseBody, UpstreamBody};
use crate::router::Fnv;

/// Longest time between two sweeps of a worker's idle connections.
const MAX_SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Sweeps an idle connection lives through at least, when the idle timeout is short enough
/// to sweep more often than [`MAX_SWEEP_EVERY`].
const MIN_IDLE_SWEEPS: u64 = 6;

/// Limits on idle connections, the same for every worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Idle HTTP/1.1 connections kept per key (and worker); more are closed when released.
    pub max_idle_per_key: usize,
    /// How long an idle HTTP/1.1 connection is kept unused (to within a sweep); zero keeps
    /// none.
    pub idle_timeout: Duration,
}

impl Default for PoolSettings {
    /// 256 per key, and about a minute: under the keep-alive timeouts upstreams commonly use
    /// (nginx 75 s), so the upstream rarely closes a connection first.
    fn default() -> Self {
        PoolSettings {
            max_idle_per_key: 256,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// The settings in force; atomics rather than a lock because every release reads one.
static MAX_IDLE_PER_KEY: AtomicUsize = AtomicUsize::new(256);

/// Targets the last routing-table swap removed; each worker's next sweep closes their idle
/// connections.
static RETIRED: LazyLock<ArcSwap<HashSet<Arc<str>>>> = LazyLock::new(ArcSwap::default);

/// Records the targets a routing-table swap removed (those of the previous table that the
/// new one lacks), for the workers' next sweeps.
pub fn retire(removed: HashSet<Arc<str>>, live: &HashSet<Arc<str>>) {
    // Two swaps within one sweep must not lose the first one's removals; a target that came
    // back is live again. Bounded: a very long list starts over from this swap's.
    let before = RETIRED.load();
    let mut all: HashSet<Arc<str>> = if before.len() > 65_536 {
        HashSet::new()
    } else {
        before
            .iter()
            .filter(|t| !live.contains(*t))
            .cloned()
            .collect()
    };
    all.extend(removed);
    RETIRED.store(Arc::new(all));
}
static IDLE_TIMEOUT_MS: AtomicU64 = AtomicU64::new(60_000);

/// Sets the pool's limits for the whole process; call it before the workers start (each
/// reads the idle timeout once, when its sweeper starts).
pub fn configure(settings: PoolSettings) {
    let idle_ms = u64::try_from(settings.idle_timeout.as_millis()).unwrap_or(u64::MAX);
    // Kept for no time at all is not kept.
    let max = if idle_ms == 0 {
        0
    } else {
        settings.max_idle_per_key
    };
    MAX_IDLE_PER_KEY.store(max, Ordering::Relaxed);
    IDLE_TIMEOUT_MS.store(idle_ms, Ordering::Relaxed);
}

/// How often to sweep, and after how many sweeps an idle connection is closed, for an idle
/// timeout: sweeps every 10 s at most, and at least 6 sweeps per timeout, so that a
/// connection is closed within a sixth of the timeout past it (and never before 5/6 of it).
fn sweep_schedule(idle_timeout: Duration) -> (Duration, u64) {
    let every =
        (idle_timeout / MIN_IDLE_SWEEPS as u32).clamp(Duration::from_millis(10), MAX_SWEEP_EVERY);
    let sweeps = idle_timeout.as_nanos().div_ceil(every.as_nanos()).max(1);
    (every, u64::try_from(sweeps).unwrap_or(u64::MAX))
}

/// What identifies interchangeable upstream connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolKey {
    /// `host:port` of the target.
    pub target: Arc<str>,
    /// HTTP/2 (with prior knowledge over TCP, agreed by ALPN over TLS) instead of HTTP/1.1.
    pub h2: bool,
    /// TLS settings, `None` for plain TCP; built once per distinct settings (see
    /// [`TlsClient`]).
    pub tls: Option<Arc<TlsClient>>,
}

/// By hand so that a plain key hashes exactly what it did before TLS (the target and one
/// byte), and a TLS key only the client's precomputed digest on top.
impl Hash for PoolKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.target.hash(state);
        match &self.tls {
            None => state.write_u8(u8::from(self.h2)),
            Some(tls) => {
                state.write_u8(u8::from(self.h2) | 2);
                tls.hash(state);
            }
        }
    }
}

enum Sender {
    /// With the sweep count at which it became idle.
    H1(h1::Connection, u64),
    H2(http2::SendRequest<UpstreamBody>),
}

thread_local! {
    static IDLE: RefCell<HashMap<PoolKey, Vec<Sender>, BuildHasherDefault<Fnv>>> = RefCell::default();
    /// Sweeps done on this worker: the pool's clock, cheaper than reading the time per release.
    static SWEEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Closes, every few seconds, this worker's idle connections that the upstream closed or that
/// went unused for about a minute, and forgets targets with none left. Without it a socket
/// the upstream closed would sit in CLOSE_WAIT until taken again, which for a target gone
/// from the table is never. Runs until the worker's runtime stops.
pub async fn sweep_idle() {
    let idle = Duration::from_millis(IDLE_TIMEOUT_MS.load(Ordering::Relaxed));
    let (every, max_sweeps) = sweep_schedule(idle);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        sweep_once(max_sweeps);
    }
}

/// One sweep of this worker's idle connections, closing those idle for `max_sweeps` sweeps.
fn sweep_once(max_sweeps: u64) {
    let now = SWEEPS.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let retired = RETIRED.load();
    IDLE.with(|m| {
        m.borrow_mut().retain(|key, list| {
            // A target gone from the table is never asked for again: close its connections
            // now rather than when the upstream or the idle timeout does.
            if retired.contains(&key.target) {
                return false;
            }
            list.retain(|s| match s {
                Sender::H1(c, since) => now - since < max_sweeps && c.is_usable(),
                Sender::H2(s) => !s.is_closed(),
            });
            !list.is_empty()
        })
    });
}

/// Why no connection could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The host name did not resolve.
    #[error("cannot resolve {0}: {1}")]
    Resolve(Arc<str>, String),
    /// TCP connect failed.
    #[error("connect to {0} failed: {1}")]
    Connect(Arc<str>, std::io::Error),
    /// Connecting (TCP, then TLS and HTTP/2 handshakes) took longer than the service's connect
    /// timeout.
    #[error("connect to {0} timed out")]
    Timeout(Arc<str>),
    /// The TLS handshake failed (certificate refused, no common protocol, ALPN not agreed…).
    #[error("TLS handshake with {0} failed: {1}")]
    Tls(Arc<str>, String),
    /// The HTTP/2 handshake failed.
    #[error("handshake with {0} failed: {1}")]
    Handshake(Arc<str>, hyper::Error),
}

/// A failed exchange on an established connection.
pub struct SendError {
    /// The underlying error.
    pub error: Box<dyn std::error::Error + Send + Sync>,
    /// The request, when the upstream cannot have acted on it (safe to send again).
    pub unsent: Option<http::Request<UpstreamBody>>,
}

/// A connection checked out of the pool.
pub struct Conn {
    key: PoolKey,
    sender: Sender,
    /// Taken from the pool rather than opened for this request.
    pub reused: bool,
}

/// Returns an idle pooled connection for `key`, or connects a new one.
pub async fn checkout(key: &PoolKey, connect_timeout: Duration) -> Result<Conn, ConnectError> {
    if let Some(sender) = take_idle(key) {
        return Ok(Conn {
            key: key.clone(),
            sender,
            reused: true,
        });
    }
    // The connect timeout covers resolution, TCP connect, and the TLS and HTTP/2 handshakes.
    match tokio::time::timeout(connect_timeout, connect(key)).await {
        Ok(r) => r,
        Err(_) => Err(ConnectError::Timeout(key.target.clone())),
    }
}

async fn connect(key: &PoolKey) -> Result<Conn, ConnectError> {
    let addr = super::dns::resolve(&key.target).await?;
    let tcp = TcpStream::connect(addr).await.map_err(|e| {
        // A host name's other addresses are tried (and looked up again) next time.
        super::dns::failed(&key.target);
        ConnectError::Connect(key.target.clone(), e)
    })?;
    let _ = tcp.set_nodelay(true);
    let stream = match &key.tls {
        None => Stream::Tcp(tcp),
        Some(tls) => tls.handshake(&key.target, tcp, key.h2).await?,
    };
    let sender = if key.h2 {
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ConnectError::Handshake(key.target.clone(), e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        // h2 connections are shared: keep a handle in the pool right away.
        IDLE.with(|m| {
            m.borrow_mut()
                .entry(key.clone())
                .or_default()
                .push(Sender::H2(sender.clone()))
        });
        Sender::H2(sender)
    } else {
        Sender::H1(h1::Connection::new(stream), 0)
    };
    Ok(Conn {
        key: key.clone(),
        sender,
        reused: false,
    })
}

fn take_idle(key: &PoolKey) -> Option<Sender> {
    IDLE.with(|m| {
        let mut m = m.borrow_mut();
        let list = m.get_mut(key)?;
        while let Some(s) = list.pop() {
            match s {
                Sender::H1(c, since) if c.is_usable() => return Some(Sender::H1(c, since)),
                Sender::H2(s) if !s.is_closed() => {
                    list.push(Sender::H2(s.clone()));
                    return Some(Sender::H2(s));
                }
                _ => {}
            }
        }
        None
    })
}

impl Conn {
    /// Sends a request; on failure, hands the request back if the upstream cannot have acted
    /// on it. An HTTP/1.1 connection travels on inside the response body.
    /// `added` is written after the request's own headers (HTTP/1.1 only: for HTTP/2 the
    /// caller appends it to the map). `write_timeout` bounds sending the rest of a request body
    /// after an early answer.
    pub async fn send(
        self,
        req: http::Request<UpstreamBody>,
        added: &Added,
        write_timeout: Duration,
    ) -> Result<http::Response<ResponseBody>, SendError> {
        match self.sender {
            Sender::H1(c, _) => c
                .send(req, added, self.key, self.reused, write_timeout)
                .await
                .map(|res| res.map(ResponseBody::H1)),
            Sender::H2(mut s) => match s.try_send_request(req).await {
                Ok(res) => Ok(res.map(ResponseBody::H2)),
                Err(mut e) => {
                    let unsent = e.take_message();
                    Err(SendError {
                        error: Box::new(e.into_error()),
                        unsent,
                    })
                }
            },
        }
    }
}

/// Returns an HTTP/1.1 connection whose response was read to its end to this worker's pool.
pub(super) fn release_h1(key: &PoolKey, mut conn: h1::Connection) {
    conn.prepare_idle();
    let max = MAX_IDLE_PER_KEY.load(Ordering::Relaxed);
    let idle = Sender::H1(conn, SWEEPS.with(|s| s.get()));
    IDLE.with(|m| {
        let mut m = m.borrow_mut();
        if let Some(list) = m.get_mut(key) {
            if list.len() < max {
                list.push(idle);
            }
        } else if max > 0 {
            m.insert(key.clone(), vec![idle]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn idle(key: &PoolKey) -> usize {
        IDLE.with(|m| m.borrow().get(key).map_or(0, Vec::len))
    }

    /// A pooled connection to a fresh listener, and the listener's end of it.
    async fn pooled() -> (PoolKey, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let key = PoolKey {
            target: addr.to_string().into(),
            h2: false,
            tls: None,
        };
        release_h1(&key, h1::Connection::new(Stream::Tcp(client)));
        (key, server)
    }

    #[tokio::test]
    async fn sweeps_close_connections_the_upstream_closed() {
        let (key, server) = pooled().await;
        let (kept, _server2) = pooled().await;
        sweep_once(6);
        assert_eq!((idle(&key), idle(&kept)), (1, 1));
        drop(server);
        // Let the runtime see the close.
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            sweep_once(6);
            if idle(&key) == 0 {
                break;
            }
        }
        assert_eq!(idle(&key), 0, "closed connection still pooled");
        assert!(
            IDLE.with(|m| !m.borrow().contains_key(&key)),
            "empty key kept"
        );
        assert_eq!(idle(&kept), 1);
    }

    #[tokio::test]
    async fn sweeps_close_connections_of_retired_targets() {
        let (gone, _server) = pooled().await;
        let (kept, _server2) = pooled().await;
        retire([gone.target.clone()].into_iter().collect(), &HashSet::new());
        sweep_once(6);
        assert_eq!((idle(&gone), idle(&kept)), (0, 1));
        // Live again: no longer retired.
        retire(HashSet::new(), &[gone.target.clone()].into_iter().collect());
        assert!(RETIRED.load().is_empty());
    }

    #[tokio::test]
    async fn sweeps_close_connections_idle_for_about_a_minute() {
        let (key, _server) = pooled().await;
        let (_, sweeps) = sweep_schedule(PoolSettings::default().idle_timeout);
        for _ in 1..sweeps {
            sweep_once(sweeps);
        }
        assert_eq!(idle(&key), 1, "closed before its time");
        sweep_once(sweeps);
        assert_eq!(idle(&key), 0, "kept past {sweeps} sweeps");
    }

    #[test]
    fn sweep_schedule_follows_the_idle_timeout() {
        let s = |secs: f64| sweep_schedule(Duration::from_secs_f64(secs));
        // The default is what the pool always did: every 10 s, closed after 6 sweeps.
        assert_eq!(s(60.0), (Duration::from_secs(10), 6));
        // Longer: still every 10 s, more sweeps.
        assert_eq!(s(125.0), (Duration::from_secs(10), 13));
        // Shorter: sweeps more often, so that the timeout is kept to within a sixth.
        assert_eq!(s(3.0), (Duration::from_millis(500), 6));
        assert_eq!(s(0.001), (Duration::from_millis(10), 1));
    }

    #[test]
    fn plain_keys_hash_as_before_tls() {
        // Hashed per request: a plain key costs what it did when the key had no TLS field.
        #[derive(Hash)]
        struct Before {
            target: Arc<str>,
            h2: bool,
        }
        let hash = |v: &dyn Fn(&mut Fnv)| {
            let mut h = Fnv::default();
            v(&mut h);
            h.finish()
        };
        let key = PoolKey {
            target: "10.0.0.1:80".into(),
            h2: true,
            tls: None,
        };
        let before = Before {
            target: key.target.clone(),
            h2: true,
        };
        assert_eq!(hash(&|h| key.hash(h)), hash(&|h| before.hash(h)));
    }
}
