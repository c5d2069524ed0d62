//! The data plane: listeners, worker threads, connections, graceful shutdown.
//!
//! One current-thread tokio runtime per worker, each with its own `SO_REUSEPORT` listener and
//! upstream pool; workers share only the compiled routing table (one atomic pointer), the
//! metrics shards and a few counters. Starting them, the admin API, signals and draining are
//! the process's (the `process` module).

pub mod fallback;
pub mod grpc;
pub(crate) mod h1;
pub mod headers;
pub mod mirror;
pub mod passthrough;
mod session;
mod tunnel;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::watch;

use crate::access_log::AccessLog;
use crate::compile::Runtime;
use crate::config::{Config, ConfigError};
use crate::metrics::Metrics;
use crate::pipeline::{ConnActivity, LogRecord, LogSink, RequestCtx};
use crate::plugins::Registry;
use crate::tls::ClientCheck;

pub use headers::Cidr;

/// Settings of the proxy process (command-line flags), as opposed to the routing table.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// Where the proxy listens for client traffic.
    pub listen: SocketAddr,
    /// Where the proxy listens for HTTPS (TLS terminated with the routing table's certificates).
    pub tls_listen: Option<SocketAddr>,
    /// Where the admin API listens.
    pub admin_listen: SocketAddr,
    /// Where the read-only status listener serves `/healthz`, `/readyz` and `/metrics` (for
    /// probes and scraping on the pod's address; the admin API stays on loopback).
    pub status_listen: Option<SocketAddr>,
    /// Worker threads (one runtime and listener each).
    pub worker_threads: usize,
    /// Print a JSON access-log line per request on stdout.
    pub access_log: bool,
    /// Peers whose `X-Forwarded-*` headers are believed.
    pub trusted_proxies: Vec<Cidr>,
    /// Client connections accepted at once; more are closed on accept.
    pub max_connections: usize,
    /// Time a connection may go without a request in progress: from accept, or from the end
    /// of the previous response, to a complete request head (also the TLS handshake's limit).
    pub header_read_timeout: Duration,
    /// Idle time after which a keep-alive connection (HTTP/1.1 or HTTP/2) is closed.
    pub keepalive_timeout: Duration,
    /// Largest request head accepted (431 above it).
    pub max_header_bytes: usize,
    /// Most request headers accepted (431 above it).
    pub max_headers: usize,
    /// Largest request body accepted, 0 for no limit (413 above it).
    pub max_body_size: u64,
    /// Largest request body held in memory for plugins that read request bodies (413 above it).
    pub max_buffered_body: u64,
    /// Largest request body kept to be sent again when a service's `retry_on` retries a
    /// request the upstream saw; larger bodies stream and are sent once.
    pub max_retry_body: u64,
    /// Idle HTTP/1.1 connections kept per upstream pool key and worker.
    pub upstream_keepalive: usize,
    /// How long an idle upstream connection is kept.
    pub upstream_idle_timeout: Duration,
    /// How long the addresses a target's host name resolved to are used, in place of the
    /// records' TTLs; `None`: the records' TTLs.
    pub dns_ttl: Option<Duration>,
    /// Nameservers asked for targets' host names instead of those of `/etc/resolv.conf`.
    pub dns_resolvers: Vec<std::net::SocketAddr>,
    /// What `%2F`, `%5C` and `\` in request paths get.
    pub escaped_slashes: crate::router::EscapedSlashes,
    /// Access-log lines that may wait for the writer thread; more are dropped and counted.
    pub access_log_queue: usize,
    /// How long in-flight requests may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// How long the proxy goes on serving as usual after SIGTERM, with `/readyz` answering
    /// 503, before it stops accepting: load balancers take time to see the endpoint go.
    pub shutdown_delay: Duration,
    /// An upgraded connection idle (no byte either way) for this long is closed; zero: never.
    pub tunnel_idle_timeout: Duration,
    /// Largest routing table `POST /config` accepts.
    pub admin_max_body: usize,
    /// Limits of HTTP/2 client connections.
    pub http2: Http2Options,
}

/// Limits of HTTP/2 client connections (h2c and ALPN `h2`), applied to every connection.
///
/// Rapid reset (CVE-2023-44487) is bounded twice: streams the client resets before the server
/// started them count against `max_pending_reset_streams` (past it the connection gets GOAWAY
/// `ENHANCE_YOUR_CALM`), and streams it resets after they started (their upstream request
/// sent) against `max_cancelled_streams` (past it the connection gets GOAWAY, its new streams
/// 503 without an upstream request, and it is closed 100 ms later). CONTINUATION floods are
/// bounded by `max_header_list_size`: a header block may span only about as many frames as
/// that size needs, and past it the connection gets GOAWAY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Options {
    /// Streams a client may have open at once on one connection
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`); more are refused with `REFUSED_STREAM`.
    pub max_concurrent_streams: u32,
    /// Bytes of a request body a client may send ahead on one stream
    /// (`SETTINGS_INITIAL_WINDOW_SIZE`); at least 65,535, at most 2^31 - 1.
    pub initial_stream_window: u32,
    /// Bytes of request bodies a client may send ahead on the whole connection; at least
    /// 65,535, at most 2^31 - 1.
    pub initial_connection_window: u32,
    /// Largest request header list (`SETTINGS_MAX_HEADER_LIST_SIZE`: names, values and 32
    /// bytes a field), 431 above it; `None` takes `max_header_bytes`.
    pub max_header_list_size: Option<u32>,
    /// Streams reset by the client before the server started them that may wait at once;
    /// one more closes the connection (GOAWAY `ENHANCE_YOUR_CALM`).
    pub max_pending_reset_streams: usize,
    /// Streams the server may reset because of the client's errors over a connection's
    /// life; one more closes the connection (GOAWAY `ENHANCE_YOUR_CALM`).
    pub max_local_reset_streams: usize,
    /// Streams a client may reset after they started, before their answer, on one
    /// connection while such streams are more than half of the connection's; one more
    /// closes the connection.
    pub max_cancelled_streams: usize,
    /// Interval of PING frames that check a connection is alive; `None` for none.
    pub ping_interval: Option<Duration>,
    /// Time a PING has to be answered before the connection is closed.
    pub ping_timeout: Duration,
}

impl Default for Http2Options {
    fn default() -> Self {
        Http2Options {
            max_concurrent_streams: 128,
            initial_stream_window: 1024 * 1024,
            initial_connection_window: 2 * 1024 * 1024,
            max_header_list_size: None,
            max_pending_reset_streams: 20,
            max_local_reset_streams: 1024,
            max_cancelled_streams: 100,
            ping_interval: None,
            ping_timeout: Duration::from_secs(20),
        }
    }
}

impl Http2Options {
    /// The largest window RFC 9113 allows (§6.9.1).
    pub const MAX_WINDOW: u32 = (1 << 31) - 1;
    /// The window every stream and connection starts with (RFC 9113 §6.9.2).
    pub const MIN_WINDOW: u32 = 65_535;

    /// Checks the limits; the message names the offending setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_concurrent_streams == 0 {
            return Err("HTTP/2 max concurrent streams must be at least 1".into());
        }
        for (name, v) in [
            ("initial stream window", self.initial_stream_window),
            ("initial connection window", self.initial_connection_window),
        ] {
            if !(Self::MIN_WINDOW..=Self::MAX_WINDOW).contains(&v) {
                return Err(format!(
                    "HTTP/2 {name} must be between {} and {} bytes, not {v}",
                    Self::MIN_WINDOW,
                    Self::MAX_WINDOW
                ));
            }
        }
        if let Some(v) = self.max_header_list_size {
            if v < 1024 {
                return Err(format!(
                    "HTTP/2 max header list size must be at least 1024 bytes, not {v}"
                ));
            }
        }
        if self.max_pending_reset_streams == 0
            || self.max_local_reset_streams == 0
            || self.max_cancelled_streams == 0
        {
            return Err("HTTP/2 reset-stream limits must be at least 1".into());
        }
        if self.ping_interval == Some(Duration::ZERO) || self.ping_timeout.is_zero() {
            return Err("HTTP/2 ping interval and timeout must be above zero".into());
        }
        Ok(())
    }
}

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            listen: ([0, 0, 0, 0], 8080).into(),
            tls_listen: None,
            admin_listen: ([127, 0, 0, 1], 8100).into(),
            status_listen: None,
            worker_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            access_log: true,
            trusted_proxies: Vec::new(),
            max_connections: 16_384,
            header_read_timeout: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(60),
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            max_body_size: 0,
            max_buffered_body: 8 * 1024 * 1024,
            max_retry_body: 64 * 1024,
            upstream_keepalive: 256,
            upstream_idle_timeout: Duration::from_secs(60),
            dns_ttl: None,
            dns_resolvers: Vec::new(),
            escaped_slashes: crate::router::EscapedSlashes::Reject,
            access_log_queue: 16_384,
            shutdown_grace: Duration::from_secs(30),
            shutdown_delay: Duration::ZERO,
            tunnel_idle_timeout: Duration::from_secs(3600),
            admin_max_body: 64 * 1024 * 1024,
            http2: Http2Options::default(),
        }
    }
}

/// State shared by the workers and the admin API.
pub(crate) struct Shared {
    pub runtime: ArcSwap<Runtime>,
    pub registry: Registry,
    pub opts: ProxyOptions,
    pub metrics: Metrics,
    pub ready: AtomicBool,
    /// Set at SIGTERM: `/readyz` answers 503 (the proxy serves on for `--shutdown-delay`).
    pub unready: AtomicBool,
    /// Set once the shutdown delay is over: connections close after their current response.
    pub stopping: AtomicBool,
    pub started: Instant,
    pub connections: AtomicUsize,
    /// The access log's writer thread, when the access log is on.
    pub(crate) access_log: Option<AccessLog>,
    apply_lock: Mutex<()>,
    /// Counts the tables swapped in: the active health checks follow it.
    pub(crate) tables: watch::Sender<u64>,
    /// What the controller feeding this process reports about its sources (standalone mode:
    /// the Gateway API status), served as is by `GET /controller-status`.
    pub controller_status: ArcSwap<serde_json::Value>,
}

impl LogSink for Shared {
    fn log(&self, ctx: &RequestCtx, r: &LogRecord) {
        static NONE: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
        let none = NONE.get_or_init(|| Arc::from(""));
        let upstream = (r.latencies.upstream > 0.0).then_some(r.latencies.upstream / 1000.0);
        self.metrics.record(
            r.route.as_ref().unwrap_or(none),
            r.service.as_ref().unwrap_or(none),
            r.status,
            r.latencies.total / 1000.0,
            upstream,
            r.upstream_reused,
        );
        if let Some(log) = self
            .access_log
            .as_ref()
            .filter(|_| crate::access_log::wanted(ctx))
        {
            let appended = log.append(|buf| crate::access_log::write_line(r, buf));
            if !appended {
                self.metrics
                    .access_log_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A proxy: the routing table it serves and the means to serve it.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

impl Proxy {
    /// A proxy with an empty table (every request 404, not ready) and the given plugins.
    pub fn new(opts: ProxyOptions, registry: Registry) -> Proxy {
        crate::upstream::configure(crate::upstream::PoolSettings {
            max_idle_per_key: opts.upstream_keepalive,
            idle_timeout: opts.upstream_idle_timeout,
        });
        crate::upstream::set_dns_ttl(opts.dns_ttl);
        crate::upstream::set_dns_resolvers(opts.dns_resolvers.clone());
        let workers = opts.worker_threads.max(1);
        let access_log = opts
            .access_log
            // A shard per worker, and one for the threads that answer outside them (admin).
            .then(|| AccessLog::start(opts.access_log_queue, workers + 1, std::io::stdout()));
        Proxy {
            shared: Arc::new(Shared {
                access_log,
                runtime: ArcSwap::from_pointee(Runtime::empty()),
                registry,
                metrics: Metrics::new(workers),
                opts,
                ready: AtomicBool::new(false),
                unready: AtomicBool::new(false),
                stopping: AtomicBool::new(false),
                started: Instant::now(),
                connections: AtomicUsize::new(0),
                apply_lock: Mutex::new(()),
                tables: watch::Sender::new(0),
                controller_status: ArcSwap::from_pointee(serde_json::json!({})),
            }),
        }
    }

    /// Publishes what an embedded controller reports (shown by `GET /controller-status`).
    pub fn set_controller_status(&self, status: serde_json::Value) {
        self.shared.controller_status.store(Arc::new(status));
    }

    /// Validates, compiles and atomically swaps in a routing table; returns its hash.
    ///
    /// On error the table in service is kept.
    pub fn apply(&self, config: Config) -> Result<Arc<str>, Vec<ConfigError>> {
        let _serial = self
            .shared
            .apply_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let started = Instant::now();
        let current = self.shared.runtime.load_full();
        match Runtime::next(&current, config, &self.shared.registry) {
            Ok(rt) => {
                let hash = rt.hash.clone();
                let rt = Arc::new(rt);
                self.shared.runtime.store(rt.clone());
                let (removed, live) = removed_targets(&current, &rt);
                crate::upstream::retire(removed, &live);
                // An endpoint change keeps the plugins as they are.
                if !Arc::ptr_eq(&rt.plugins, &current.plugins) {
                    self.shared.registry.activate(&rt.plugins);
                }
                // The old table's targets that are gone lose their kept state (once requests
                // still on the old table are done, at the latest on the next swap).
                drop(current);
                crate::compile::prune_kept_state();
                self.shared.tables.send_modify(|n| *n += 1);
                self.shared.ready.store(true, Ordering::Release);
                self.shared
                    .metrics
                    .config_applies
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(%hash, elapsed_ms = started.elapsed().as_millis() as u64, "routing table applied");
                Ok(hash)
            }
            Err(errors) => {
                self.shared
                    .metrics
                    .config_failures
                    .fetch_add(1, Ordering::Relaxed);
                for e in &errors {
                    tracing::warn!(error = %e, "routing table rejected");
                }
                Err(errors)
            }
        }
    }

    /// The hash of the table in service.
    pub fn current_hash(&self) -> Arc<str> {
        self.shared.runtime.load().hash.clone()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The plugins this proxy can run (also what validates plugin configurations).
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }
}

type Targets = std::collections::HashSet<Arc<str>>;

/// The targets of `old` that `new` does not have, and those `new` has.
fn removed_targets(old: &Runtime, new: &Runtime) -> (Targets, Targets) {
    let targets = |rt: &Runtime| -> Targets {
        rt.services
            .iter()
            .flat_map(|s| s.keys.iter().map(|k| k.target.clone()))
            .collect()
    };
    let live = targets(new);
    let removed = targets(old)
        .into_iter()
        .filter(|t| !live.contains(t))
        .collect();
    (removed, live)
}

/// One worker thread: its own runtime, listeners and upstream pool, until `stop`.
pub(crate) fn worker(
    index: usize,
    shared: Arc<Shared>,
    (listener, tls_listener): (std::net::TcpListener, Option<std::net::TcpListener>),
    mut stop: watch::Receiver<bool>,
) {
    crate::metrics::set_worker_shard(index);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "worker runtime failed to start");
            return;
        }
    };
    rt.block_on(async move {
        let listen = tokio::net::TcpListener::from_std;
        let (listener, tls_listener) =
            match (listen(listener), tls_listener.map(listen).transpose()) {
                (Ok(l), Ok(t)) => (l, t),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::error!(error = %e, "listener failed");
                    return;
                }
            };
        let tls_config = tls_listener.as_ref().map(|_| shared_tls_config(&shared));
        shared.registry.start_worker(index);
        let builder = Arc::new(Builders::new(&shared.opts));
        tokio::spawn(crate::upstream::sweep_idle());
        let live = Arc::new(AtomicUsize::new(0));
        let port = |l: &tokio::net::TcpListener| l.local_addr().map(|a| a.port()).unwrap_or(0);
        let (plain_port, tls_port) = (port(&listener), tls_listener.as_ref().map_or(0, port));
        loop {
            let (accepted, tls) = tokio::select! {
                a = listener.accept() => (a, false),
                a = accept_if_some(tls_listener.as_ref()) => (a, true),
                _ = stop.changed() => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let total = shared.connections.fetch_add(1, Ordering::AcqRel) + 1;
            if total > shared.opts.max_connections {
                shared.connections.fetch_sub(1, Ordering::AcqRel);
                shared
                    .metrics
                    .connections_refused
                    .fetch_add(1, Ordering::Relaxed);
                drop(stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
            live.fetch_add(1, Ordering::AcqRel);
            let conn = session::ConnInfo::new(peer, if tls { tls_port } else { plain_port }, tls);
            let tls_config = if tls { tls_config.clone() } else { None };
            let (shared, builder, live, stop) =
                (shared.clone(), builder.clone(), live.clone(), stop.clone());
            tokio::spawn(async move {
                match tls_config {
                    None => serve_connection(&shared, &builder, stream, conn, stop, true).await,
                    Some(tls_config) => {
                        let rt = shared.runtime.load_full();
                        let decision = if rt.passthrough.is_empty() {
                            passthrough::Decision::Terminate
                        } else {
                            let limit = shared.opts.header_read_timeout;
                            passthrough::decide(&rt, &stream, limit).await
                        };
                        let ends = (peer, stream.local_addr().unwrap_or(peer));
                        match decision {
                            passthrough::Decision::Pass(pass) => {
                                passthrough::pass(rt, pass, ends, stream).await
                            }
                            passthrough::Decision::Close => {
                                shared
                                    .metrics
                                    .tls_handshake_failures
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                            passthrough::Decision::Terminate => {
                                drop(rt);
                                if let Some((stream, check)) =
                                    handshake(&tls_config, stream, &shared, stop.clone()).await
                                {
                                    let rt = shared.runtime.load_full();
                                    let name = stream.get_ref().1.server_name();
                                    match name.and_then(|n| rt.passthrough.terminated(n)) {
                                        // A TLSRoute of a terminating listener: the bytes.
                                        Some((route, service)) => {
                                            let pass = passthrough::Pass::new(route, service);
                                            passthrough::pass(rt.clone(), pass, ends, stream).await
                                        }
                                        None => {
                                            drop(rt);
                                            let mut conn = conn;
                                            conn.sni = name.map(Box::from);
                                            client_of(&stream, check, &mut conn);
                                            let h2 =
                                                stream.get_ref().1.alpn_protocol() == Some(b"h2");
                                            serve_connection(
                                                &shared, &builder, stream, conn, stop, !h2,
                                            )
                                            .await
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                shared.connections.fetch_sub(1, Ordering::AcqRel);
                live.fetch_sub(1, Ordering::AcqRel);
            });
        }
        drop(listener);
        drop(tls_listener);
        let deadline = tokio::time::Instant::now() + shared.opts.shutdown_grace;
        while live.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        crate::timer::clear_pool();
    });
}

/// Runs a TLS handshake, bounded by `--header-read-timeout` (a budget of its own, before the
/// request head's) and abandoned when the proxy shuts down, so a silent client delays neither.
async fn handshake(
    shared_config: &Arc<rustls::ServerConfig>,
    stream: tokio::net::TcpStream,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) -> Option<(
    tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    Option<Arc<ClientCheck>>,
)> {
    if *stop.borrow() {
        return None;
    }
    let limit = shared.opts.header_read_timeout;
    let result = tokio::select! {
        r = tokio::time::timeout(limit, accept_tls(shared_config, stream, shared)) => r,
        _ = stop.changed() => return None,
    };
    match result {
        Ok(Ok(accepted)) => Some(accepted),
        Ok(Err(e)) => {
            shared
                .metrics
                .tls_handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            shared
                .metrics
                .tls_handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

async fn accept_if_some(
    listener: Option<&tokio::net::TcpListener>,
) -> io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The server configuration of handshakes that ask for no client certificate: certificates
/// come from the routing table in service at each handshake.
fn shared_tls_config(shared: &Arc<Shared>) -> Arc<rustls::ServerConfig> {
    let shared = shared.clone();
    let resolver =
        crate::tls::Resolver(move |name: Option<&str>| shared.runtime.load().certs.find(name));
    Arc::new(crate::tls::server_config(Arc::new(resolver)))
}

/// A TLS handshake whose configuration is chosen once the ClientHello is read: a server
/// name whose certificate asks for client certificates gets that certificate's own
/// configuration, any other the shared one.
async fn accept_tls(
    shared_config: &Arc<rustls::ServerConfig>,
    stream: tokio::net::TcpStream,
    shared: &Shared,
) -> io::Result<(
    tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    Option<Arc<ClientCheck>>,
)> {
    let acceptor = rustls::server::Acceptor::default();
    let start = tokio_rustls::LazyConfigAcceptor::new(acceptor, stream).await?;
    let config = {
        let hello = start.client_hello();
        let name = hello.server_name();
        let certs = &shared.runtime.load().certs;
        // A name Weir has no certificate for: the connection is closed without an alert, as
        // Envoy closes one no listener matches (the Gateway API suite counts only a closed or
        // reset connection as refused).
        if certs.find(name).is_none() {
            return Err(io::Error::other("no certificate for the server name"));
        }
        match certs.mutual_config(name) {
            Some((config, check)) => (config, Some(check)),
            None => (shared_config.clone(), None),
        }
    };
    let (config, check) = config;
    Ok((start.into_stream(config).await?, check))
}

/// What a connection's requests are told of its TLS client: the check its handshake made and
/// the certificate it presented, checked once here.
fn client_of(
    stream: &tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    check: Option<Arc<ClientCheck>>,
    conn: &mut session::ConnInfo,
) {
    if let Some(check) = check {
        conn.client_cert = check.peer(stream.get_ref().1.peer_certificates());
        conn.client_check = Some(check);
    }
}

/// hyper's server, as each kind of connection it takes needs it.
struct Builders {
    /// HTTP/1.1 or HTTP/2 (prior knowledge), told apart by the first bytes.
    auto: auto::Builder<TokioExecutor>,
    /// HTTP/1.1 closing after the request it is handed: a connection asked to close.
    closing: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(opts: &ProxyOptions) -> Builders {
        let mut closing = connection_builder(opts);
        closing.http1().keep_alive(false);
        Builders {
            auto: connection_builder(opts),
            closing,
        }
    }
}

/// The start of the HTTP/2 connection preface (what hyper's version detection looks for).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2";

fn connection_builder(opts: &ProxyOptions) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    // The head's time limit is kept by `serve_connection`'s idle clock: hyper's own arms and
    // drops a timer for every request.
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(opts.max_header_bytes.max(8192))
        .max_headers(opts.max_headers);
    let h2 = &opts.http2;
    let header_list = h2
        .max_header_list_size
        .unwrap_or(opts.max_header_bytes.min(u32::MAX as usize) as u32);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(header_list)
        .max_concurrent_streams(h2.max_concurrent_streams)
        .initial_stream_window_size(h2.initial_stream_window)
        .initial_connection_window_size(h2.initial_connection_window)
        .max_pending_accept_reset_streams(h2.max_pending_reset_streams)
        .max_local_error_reset_streams(h2.max_local_reset_streams)
        .keep_alive_interval(h2.ping_interval)
        .keep_alive_timeout(h2.ping_timeout)
        // RFC 8441: WebSocket over HTTP/2 (extended CONNECT with `:protocol: websocket`).
        .enable_connect_protocol();
    b
}

/// Requests of one connection whose client reset them before their answer.
///
/// h2 itself closes a connection whose client resets streams faster than they are started
/// (`max_pending_reset_streams`); a client that waits until each stream has started (and its
/// upstream request is on its way) before resetting it is stopped here, as Envoy does: once
/// more than `limit` started requests were reset, and they are more than half of the
/// connection's, the connection is closed.
struct Cancels {
    limit: usize,
    started: AtomicUsize,
    cancelled: AtomicUsize,
    /// The limit was passed.
    tripped: AtomicBool,
    /// Wakes the connection's task when the limit is passed.
    notify: tokio::sync::Notify,
}

impl Cancels {
    fn new(limit: usize) -> Arc<Cancels> {
        Arc::new(Cancels {
            limit,
            started: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            tripped: AtomicBool::new(false),
            notify: tokio::sync::Notify::new(),
        })
    }

    /// Counts a started request; the guard counts it cancelled unless it is answered.
    fn start(self: &Arc<Self>) -> Started {
        self.started.fetch_add(1, Ordering::Relaxed);
        Started(Some(self.clone()))
    }
}

/// How long a connection that reset too many started streams has, after its GOAWAY, before it
/// is dropped (what it sends meanwhile is answered 503 without reaching an upstream).
const CANCELS_CLOSE_GRACE: Duration = Duration::from_millis(100);

/// A started request of a [`Cancels`]; dropped unanswered, it counts as reset by the client.
struct Started(Option<Arc<Cancels>>);

impl Started {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let Some(c) = self.0.take() else { return };
        let cancelled = c.cancelled.fetch_add(1, Ordering::Relaxed) + 1;
        if cancelled > c.limit
            && cancelled * 2 > c.started.load(Ordering::Relaxed)
            && !c.tripped.swap(true, Ordering::Relaxed)
        {
            c.notify.notify_one();
        }
    }
}

/// How long a connection asked to close (idle, or at shutdown) may take to go before it is
/// dropped, unless a request is in flight on it.
pub(crate) const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

async fn serve_connection<S>(
    shared: &Arc<Shared>,
    builders: &Builders,
    stream: S,
    conn_info: session::ConnInfo,
    mut stop: watch::Receiver<bool>,
    http1: bool,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = ConnActivity::new();
    let conn_info = Arc::new(conn_info);
    // HTTP/1.1 starts on Weir's own loop; hyper takes over at the first request it leaves.
    let (stream, read, builder, handed_closing) = if http1 {
        match h1::serve(shared, &conn_info, &activity, stream, &mut stop).await {
            h1::Outcome::Closed => return,
            h1::Outcome::Handover {
                stream,
                read,
                closing,
                served,
            } => {
                // An HTTP/2 preface is a new connection's first bytes, never a later request's
                // (nor allowed after ALPN chose http/1.1): such a connection is dropped.
                if (served || closing || conn_info.tls) && read.starts_with(H2_PREFACE) {
                    return;
                }
                let builder = if closing {
                    &builders.closing
                } else {
                    &builders.auto
                };
                (stream, read, builder, closing)
            }
        }
    } else {
        (stream, bytes::Bytes::new(), &builders.auto, false)
    };
    let stream = h1::Rewind::new(stream, read);
    let cancels = Cancels::new(shared.opts.http2.max_cancelled_streams);
    let peer = conn_info.peer;
    let svc = {
        let shared = shared.clone();
        let activity = activity.clone();
        let cancels = cancels.clone();
        hyper::service::service_fn(move |req| {
            let shared = shared.clone();
            let activity = activity.clone();
            let conn_info = conn_info.clone();
            let cancels = cancels.clone();
            async move {
                if cancels.tripped.load(Ordering::Relaxed) {
                    // The connection is closing for resetting too many streams: what it
                    // still sends goes nowhere.
                    let mut resp = http::Response::new(crate::pipeline::ProxyBody::empty());
                    *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                    return Ok::<_, Infallible>(resp);
                }
                let started = cancels.start();
                let (head, body) = req.into_parts();
                let resp = session::serve(shared, conn_info, activity, head, Some(body)).await;
                started.answered();
                Ok(resp)
            }
        })
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    // With no request in flight a connection is idle or still receiving a request head;
    // either may last this long (the keep-alive and header-read limits in one clock).
    let idle_limit = shared
        .opts
        .keepalive_timeout
        .min(shared.opts.header_read_timeout);
    // Set once the connection was asked to close: an idle one (or one holding half a request
    // head, which hyper's graceful shutdown leaves open) is dropped at this point.
    let mut force_close: Option<tokio::time::Instant> = None;
    let mut closing = *stop.borrow() || handed_closing;
    if handed_closing {
        // hyper answers the request it was handed and closes (keep-alive is off): a graceful
        // shutdown before its first poll would drop that request unanswered.
        force_close = Some(tokio::time::Instant::now() + IDLE_CLOSE_GRACE);
    } else if closing {
        conn.as_mut().graceful_shutdown();
        force_close = Some(tokio::time::Instant::now() + IDLE_CLOSE_GRACE);
    }
    let mut check_at = tokio::time::Instant::now() + idle_limit;
    // Set once the client reset too many started streams: the connection is dropped then,
    // whatever is in flight.
    let mut hard_close: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            _ = cancels.notify.notified(), if hard_close.is_none() => {
                tracing::debug!(
                    %peer,
                    "client reset too many streams (rapid reset): closing the connection"
                );
                shared.metrics.h2_cancel_closes.fetch_add(1, Ordering::Relaxed);
                if !closing {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                hard_close = Some(tokio::time::Instant::now() + CANCELS_CLOSE_GRACE);
            }
            _ = tokio::time::sleep_until(hard_close.unwrap_or(check_at)), if hard_close.is_some() => break,
            _ = stop.changed(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
                force_close = Some(tokio::time::Instant::now() + IDLE_CLOSE_GRACE);
            }
            _ = tokio::time::sleep_until(check_at), if !closing => {
                match activity.idle_since() {
                    Some(since) if since.elapsed() >= idle_limit => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                        // An idle HTTP/1.1 connection closes at once; one holding half a
                        // request head does not, so it is dropped shortly after.
                        force_close = Some(tokio::time::Instant::now() + IDLE_CLOSE_GRACE);
                    }
                    Some(since) => check_at = tokio::time::Instant::from_std(since + idle_limit),
                    None => check_at = tokio::time::Instant::now() + idle_limit,
                }
            }
            _ = tokio::time::sleep_until(force_close.unwrap_or(check_at)), if force_close.is_some() => {
                // A request that started meanwhile finishes; hyper closes after it.
                if activity.idle_since().is_some() {
                    break;
                }
                force_close = None;
            }
        }
    }
}
