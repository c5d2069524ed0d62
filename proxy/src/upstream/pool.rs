//! Keep-alive connections to upstream targets, pooled per worker thread.
//!
//! Each worker runs a current-thread runtime, so its pool is a thread-local map with no lock.
//! An HTTP/1.1 connection is taken out of the pool for one request and put back by its response
//! body once read to its end ([`h1`]); an HTTP/2 connection (hyper's client) is shared by
//! concurrent requests.
//! The key is everything that makes two connections interchangeable: the target, the
//! protocol and the TLS settings (SNI, verification, CAs, client certificate, ALPN), so a
//! connection verified one way is never handed to a service that asked for another. A target
//! named by host name is resolved before its pool is looked at, and its connections are kept
//! per address ([`Slot::Named`]): connections to different addresses never mix, and when DNS
//! moves the name, new requests go to new connections while those to the old addresses age
//! out with the idle sweep. For that a host name's HTTP/2 connection ages too, from the last
//! request it was taken for, and is closed once unused for the idle timeout, as an HTTP/1.1
//! one is (an IP target's stays while it is open).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// How long an idle HTTP/1.1 connection (or a host name's HTTP/2 one) is kept unused (to
    /// within a sweep); zero keeps none.
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
    /// `host:port` of the target. For a host name, the key of a connection made by
    /// [`checkout`] carries an `Arc` of its own per resolved address, with the same text
    /// (the pool's `Via`).
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
    /// With the sweep count at which it was last taken (kept up to date for host names only).
    H2(http2::SendRequest<UpstreamBody>, u64),
}

/// The idle connections of one key.
enum Slot {
    /// An IP target's: the key says where they go.
    Direct(Vec<Sender>),
    /// A host-name target's, per address it resolved to.
    Named(Vec<Via>),
}

/// A host-name target's connections to one of its addresses.
struct Via {
    addr: SocketAddr,
    /// The target's `host:port`, allocated for this address alone. The key of a connection
    /// to the address carries this `Arc`, which is how a released connection finds its
    /// address again (`Arc::ptr_eq`), while the key's text stays the target's, as the TLS
    /// server name and the default `Host` want it. Its count also says whether connections
    /// to the address are out.
    target: Arc<str>,
    idle: Vec<Sender>,
}

impl Slot {
    /// The idle list of the connections `key` stands for: an IP target's, or a host-name
    /// target's to the address `key` was made for; `None` for a host name's own key.
    fn list(&mut self, key: &PoolKey) -> Option<&mut Vec<Sender>> {
        match self {
            Slot::Direct(list) => Some(list),
            Slot::Named(vias) => vias
                .iter_mut()
                .find(|v| Arc::ptr_eq(&v.target, &key.target))
                .map(|v| &mut v.idle),
        }
    }
}

/// Whether an idle connection is kept by a sweep at `now`: an HTTP/2 one while it is open,
/// and, when `named` (a host name's), only while taken within the idle timeout too, so that
/// one to an address that left the answer is closed.
fn keep(s: &Sender, now: u64, max_sweeps: u64, named: bool) -> bool {
    match s {
        Sender::H1(c, since) => now - since < max_sweeps && c.is_usable(),
        Sender::H2(s, since) => !s.is_closed() && (!named || now - since < max_sweeps),
    }
}

thread_local! {
    static IDLE: RefCell<HashMap<PoolKey, Slot, BuildHasherDefault<Fnv>>> = RefCell::default();
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
        m.borrow_mut().retain(|key, slot| {
            // A target gone from the table is never asked for again: close its connections
            // now rather than when the upstream or the idle timeout does.
            if retired.contains(&key.target) {
                return false;
            }
            match slot {
                Slot::Direct(list) => {
                    list.retain(|s| keep(s, now, max_sweeps, false));
                    !list.is_empty()
                }
                Slot::Named(vias) => {
                    // An address with connections out stays, so that they find it when
                    // released; the others go with their last idle connection (addresses
                    // no longer in the answer among them: nothing takes their connections,
                    // HTTP/2 ones included, so they age out).
                    vias.retain_mut(|v| {
                        v.idle.retain(|s| keep(s, now, max_sweeps, true));
                        !v.idle.is_empty() || Arc::strong_count(&v.target) > 1
                    });
                    !vias.is_empty()
                }
            }
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
    // An IP target's idle connection costs one lookup, as it did before host names were
    // pooled by address.
    let named = match take_idle(key) {
        Idle::Taken(sender) => {
            return Ok(Conn {
                key: key.clone(),
                sender,
                reused: true,
            })
        }
        Idle::Named => true,
        Idle::Empty => false,
    };
    // The connect timeout covers resolution, TCP connect, and the TLS and HTTP/2 handshakes.
    let connected = AtomicBool::new(false);
    match tokio::time::timeout(connect_timeout, open(key, named, &connected)).await {
        Ok(r) => r,
        Err(_) => {
            // An address that drops SYNs fails as one that refuses: a host name is looked up
            // again (an IP target is left alone there). A slow handshake past the TCP
            // connect says nothing about the address.
            if !connected.load(Ordering::Relaxed) {
                super::dns::failed(&key.target);
            }
            Err(ConnectError::Timeout(key.target.clone()))
        }
    }
}

/// What the pool holds for a key.
enum Idle {
    /// A usable idle connection, taken out.
    Taken(Sender),
    /// The key is a host name's: which connections fit depends on what it resolves to.
    Named,
    /// None idle (or not known yet whether the target is a host name).
    Empty,
}

/// A connection for `key` when none of an IP target is idle: for a host name, the next
/// address of its answer (looked up when it ran out), then an idle connection to that
/// address or a new one. `connected` is set once the TCP connection is up.
async fn open(key: &PoolKey, named: bool, connected: &AtomicBool) -> Result<Conn, ConnectError> {
    let ip = if named {
        None
    } else {
        key.target.parse::<SocketAddr>().ok()
    };
    let (key, addr) = match ip {
        Some(addr) => (key.clone(), addr),
        None => {
            let addr = super::dns::resolve_name(&key.target).await?;
            let via = via_key(key, addr);
            if let Idle::Taken(sender) = take_idle(&via) {
                return Ok(Conn {
                    key: via,
                    sender,
                    reused: true,
                });
            }
            (via, addr)
        }
    };
    connect(key, addr, connected).await
}

/// The key of `key`'s connections to `addr`, a host-name target's address: `key` with the
/// address's own `target` ([`Via`]), made on first use.
fn via_key(key: &PoolKey, addr: SocketAddr) -> PoolKey {
    let target = IDLE.with(|m| {
        let mut m = m.borrow_mut();
        let slot = m
            .entry(key.clone())
            .or_insert_with(|| Slot::Named(Vec::new()));
        let Slot::Named(vias) = slot else {
            // A host name parses the same way every time, so its slot is never `Direct`.
            return key.target.clone();
        };
        match vias.iter().find(|v| v.addr == addr) {
            Some(v) => v.target.clone(),
            None => {
                let target: Arc<str> = Arc::from(&*key.target);
                vias.push(Via {
                    addr,
                    target: target.clone(),
                    idle: Vec::new(),
                });
                target
            }
        }
    });
    PoolKey {
        target,
        h2: key.h2,
        tls: key.tls.clone(),
    }
}

async fn connect(
    key: PoolKey,
    addr: SocketAddr,
    connected: &AtomicBool,
) -> Result<Conn, ConnectError> {
    if super::is_own(addr) {
        let e = std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the proxy's own admin API is never an upstream",
        );
        return Err(ConnectError::Connect(key.target.clone(), e));
    }
    let tcp = TcpStream::connect(addr).await.map_err(|e| {
        // A host name's other addresses are tried (and looked up again) next time.
        super::dns::failed(&key.target);
        ConnectError::Connect(key.target.clone(), e)
    })?;
    connected.store(true, Ordering::Relaxed);
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
        let now = SWEEPS.with(|s| s.get());
        park(&key, Sender::H2(sender.clone(), now), usize::MAX);
        Sender::H2(sender, now)
    } else {
        Sender::H1(h1::Connection::new(stream), 0)
    };
    Ok(Conn {
        key,
        sender,
        reused: false,
    })
}

fn take_idle(key: &PoolKey) -> Idle {
    IDLE.with(|m| {
        let mut m = m.borrow_mut();
        let Some(slot) = m.get_mut(key) else {
            return Idle::Empty;
        };
        let named = matches!(slot, Slot::Named(_));
        let Some(list) = slot.list(key) else {
            return Idle::Named;
        };
        while let Some(s) = list.pop() {
            match s {
                Sender::H1(c, since) if c.is_usable() => return Idle::Taken(Sender::H1(c, since)),
                Sender::H2(s, since) if !s.is_closed() => {
                    // A host name's connection to an address still in use stays young.
                    let since = if named {
                        SWEEPS.with(|n| n.get())
                    } else {
                        since
                    };
                    list.push(Sender::H2(s.clone(), since));
                    return Idle::Taken(Sender::H2(s, since));
                }
                _ => {}
            }
        }
        Idle::Empty
    })
}

/// Puts an idle connection of `key` in this worker's pool if fewer than `limit` are there.
fn park(key: &PoolKey, idle: Sender, limit: usize) {
    IDLE.with(|m| {
        let mut m = m.borrow_mut();
        match m.get_mut(key) {
            Some(slot) => {
                if let Some(list) = slot.list(key) {
                    if list.len() < limit {
                        list.push(idle);
                    }
                }
                // Else a host name's address the sweep or a table swap forgot: closed.
            }
            // Only an IP target gets a slot here: a host name's was made before connecting,
            // and one gone since went with a table swap.
            None if limit > 0 && key.target.parse::<SocketAddr>().is_ok() => {
                m.insert(key.clone(), Slot::Direct(vec![idle]));
            }
            None => {}
        }
    });
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
            Sender::H2(mut s, _) => match s.try_send_request(req).await {
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
    park(key, Sender::H1(conn, SWEEPS.with(|s| s.get())), max);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn idle(key: &PoolKey) -> usize {
        IDLE.with(|m| {
            m.borrow_mut()
                .get_mut(key)
                .and_then(|s| s.list(key))
                .map_or(0, |l| l.len())
        })
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

    #[tokio::test]
    async fn a_host_names_connections_are_pooled_per_address() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let name = PoolKey {
            target: format!("pooled.weir.test:{port}").into(),
            h2: false,
            tls: None,
        };
        let a: SocketAddr = ([127, 0, 0, 1], port).into();
        let b: SocketAddr = ([127, 0, 0, 2], port).into();
        let via_a = via_key(&name, a);
        let via_b = via_key(&name, b);
        // Same text (the TLS name and default Host), not the same connections.
        assert_eq!(via_a, name);
        assert!(!Arc::ptr_eq(&via_a.target, &via_b.target));
        assert!(Arc::ptr_eq(&via_key(&name, a).target, &via_a.target));

        let client = TcpStream::connect(a).await.unwrap();
        let (_server, _) = listener.accept().await.unwrap();
        release_h1(&via_a, h1::Connection::new(Stream::Tcp(client)));
        assert_eq!((idle(&via_a), idle(&via_b)), (1, 0));
        // The name's own key finds nothing without an address: it has to be resolved.
        assert!(matches!(take_idle(&name), Idle::Named));
        assert!(matches!(take_idle(&via_b), Idle::Empty));
        assert!(matches!(take_idle(&via_a), Idle::Taken(_)));

        // An address with nothing idle stays while a key made for it is out, and goes after.
        sweep_once(6);
        assert!(IDLE.with(|m| m.borrow().contains_key(&name)));
        let vias = || {
            IDLE.with(|m| match m.borrow().get(&name) {
                Some(Slot::Named(v)) => v.iter().map(|v| v.addr).collect::<Vec<_>>(),
                _ => Vec::new(),
            })
        };
        assert_eq!(vias(), [a, b]);
        drop(via_b);
        sweep_once(6);
        assert_eq!(vias(), [a]);
        drop(via_a);
        sweep_once(6);
        assert!(IDLE.with(|m| !m.borrow().contains_key(&name)));

        // A connection released after its slot went (a table swap) is closed, not pooled
        // as if the name were an address.
        let stale = via_key(&name, a);
        IDLE.with(|m| m.borrow_mut().clear());
        let client = TcpStream::connect(a).await.unwrap();
        release_h1(&stale, h1::Connection::new(Stream::Tcp(client)));
        assert!(IDLE.with(|m| m.borrow().is_empty()));
    }

    #[tokio::test]
    async fn a_host_names_h2_connection_ages_out_once_no_longer_taken() {
        // An HTTP/2 connection whose peer just stays there.
        let (client, _peer) = tokio::io::duplex(1 << 16);
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake::<_, UpstreamBody>(TokioIo::new(client))
            .await
            .unwrap();
        tokio::spawn(conn);
        let now = || SWEEPS.with(|s| s.get());
        let name = PoolKey {
            target: "h2.weir.test:443".into(),
            h2: true,
            tls: None,
        };
        let via = via_key(&name, ([127, 0, 0, 1], 443).into());
        park(&via, Sender::H2(sender.clone(), now()), usize::MAX);
        // The same connection as an IP target's, for comparison.
        let ip = PoolKey {
            target: "127.0.0.1:443".into(),
            h2: true,
            tls: None,
        };
        park(&ip, Sender::H2(sender, now()), usize::MAX);

        // Taken for requests now and then (its address is in the answer): kept, however
        // long.
        for _ in 0..20 {
            sweep_once(6);
            assert!(matches!(take_idle(&via), Idle::Taken(_)));
        }
        // Its address left the answer: nothing takes it; closed after the idle timeout, and
        // the address forgotten.
        drop(via);
        for _ in 1..6 {
            sweep_once(6);
            assert!(
                IDLE.with(|m| m.borrow().contains_key(&name)),
                "closed early"
            );
        }
        sweep_once(6);
        assert!(IDLE.with(|m| !m.borrow().contains_key(&name)));
        // The IP target's is kept while open, as before.
        assert_eq!(idle(&ip), 1);
    }

    #[tokio::test]
    async fn a_handshake_timeout_does_not_look_the_name_up_again() {
        use super::super::dns;
        // Takes the TCP connection and says nothing: the TLS handshake never ends.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target: Arc<str> = format!("localhost:{}", silent.local_addr().unwrap().port()).into();
        // `localhost` is in /etc/hosts here, as 127.0.0.1 alone.
        match dns::resolve_name(&target).await {
            Ok(a) if a.ip() == std::net::Ipv4Addr::LOCALHOST => {}
            _ => return,
        }
        let hold = tokio::spawn(async move {
            let (s, _) = silent.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
            drop(s);
        });
        let tls = TlsClient::new(super::super::TlsSettings {
            sni: None,
            verify: false,
            verify_depth: None,
            ca_pem: None,
            client_cert: None,
            alpn: super::super::Alpn::Http11,
            names: Vec::new(),
        })
        .unwrap();
        let key = PoolKey {
            target: target.clone(),
            h2: false,
            tls: Some(Arc::new(tls)),
        };
        dns::age_for_test(&target, dns::RELOOK_AFTER_FAILURE);
        let got = checkout(&key, Duration::from_millis(200)).await;
        assert!(matches!(got, Err(ConnectError::Timeout(_))));
        assert!(
            !dns::relook_forced(&target),
            "a slow handshake blamed the address"
        );
        hold.abort();

        // A refused connection does look it up again.
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let refused: Arc<str> = format!("localhost:{port}").into();
        dns::resolve_name(&refused).await.unwrap();
        dns::age_for_test(&refused, dns::RELOOK_AFTER_FAILURE);
        let key = PoolKey {
            target: refused.clone(),
            h2: false,
            tls: None,
        };
        let got = checkout(&key, Duration::from_millis(200)).await;
        assert!(matches!(got, Err(ConnectError::Connect(..))));
        assert!(dns::relook_forced(&refused));
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
