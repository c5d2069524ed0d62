//! The phase pipeline: the per-request context and the plugin loops of each phase.
//!
//! These functions do no I/O of their own: the server calls them around routing and
//! forwarding (the "before" and "after" slices of each phase's sandwich). A plugin's handler
//! in `rewrite`, `access` and `request_body` may return a future, which is awaited here; one
//! that returns its result at once costs no allocation. Every plugin call (and every poll of a
//! plugin's future) is guarded, so an error or a panic in one plugin turns into a 500 (in
//! `rewrite`/`access`/`request_body`) or a log line (in the later phases) and the remaining
//! plugins still run.

mod body;
mod guard;
mod pace;
pub mod plugin;
mod session;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Extensions, Method};
use http_body::Body;

use crate::consumers::{ConsumerEntry, Directory, View};
use guard::{call, finish, sync, Called};
use plugin::{
    AccessRule, BodyChunk, EarlyResponse, Flow, PluginInstance, RequestHead, ResponseHead,
};

pub use body::{ConnActivity, InFlight, LogSink, ProxyBody, ReadTimeout};
pub(crate) use session::{Session, CLIENT_CLOSED};

/// Per-request state shared by the phases and the plugins.
pub struct RequestCtx {
    /// The client's address (after trusted-proxy resolution).
    pub client_ip: IpAddr,
    /// A per-request id used in the access log.
    pub request_id: u64,
    /// Whether the client connection is TLS (Weir's own listener, not a proxy's header).
    pub client_tls: bool,
    /// The certificate the client presented in the connection's handshake, when the
    /// handshake asked for one.
    pub client_cert: Option<Arc<crate::tls::PeerCert>>,
    /// The matched route's id.
    pub route: Option<Arc<str>>,
    /// The matched route's service id.
    pub service: Option<Arc<str>>,
    /// The consumer an authentication plugin identified.
    pub consumer: Option<Arc<str>>,
    /// The credential an authentication plugin identified (its id), for per-credential limits.
    pub credential: Option<Arc<str>>,
    /// The request's correlation id (`correlation-id`'s header value); moved into
    /// [`LogRecord::correlation_id`] before the log phase.
    pub correlation_id: Option<http::HeaderValue>,
    /// A request body limit in bytes a plugin set for this request (`request-size-limiting`):
    /// the lower of it and `--max-body-size` applies, to a declared length and to a streamed
    /// body as it arrives.
    pub body_limit: Option<u64>,
    /// Typed slots plugins use to share data within the request.
    pub slots: Extensions,
    /// Timing marks.
    pub timings: Timings,
    /// The path and query to send upstream, when a plugin rewrites it (Kong's `upstream_uri`).
    pub upstream_uri: Option<String>,
    /// The whole request body, when it was read before `access` for a plugin that asked
    /// ([`Plugin::body_before_access`](plugin::Plugin::body_before_access)). A plugin
    /// may replace it; it is what goes upstream (with its exact length).
    pub request_body: Option<Bytes>,
    /// Balancer data: every try made for this request, in order.
    pub tries: Vec<Try>,
    /// The target chosen by a plugin, bypassing the balancer ([`RequestCtx::set_target`]);
    /// boxed, as most requests have none and every request moves the context.
    pub upstream_target: Option<Box<ChosenTarget>>,
    /// The plugins collected in access, replayed by the later phases.
    pub(crate) plugins: Arc<[PluginInstance]>,
    /// The table's consumers, when it has any or authenticates.
    pub(crate) directory: Option<Arc<Directory>>,
    /// The namespace of the plugin running now (what [`RequestCtx::consumers`] shows).
    pub(crate) consumer_scope: Option<Arc<str>>,
}

/// Timing marks of one request.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// When the request head was received.
    pub start: Instant,
    /// When the request was handed to the upstream connection.
    pub upstream_sent: Option<Instant>,
    /// When the upstream's response head arrived.
    pub upstream_headers: Option<Instant>,
    /// When the last response byte was sent (filled in at log if missing).
    pub end: Option<Instant>,
}

/// One attempt to reach a target. Kept as small as before it had a status and a time: every
/// request moves one.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Try {
    /// The target (`host:port`).
    pub target: Arc<str>,
    /// Why the attempt failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<str>>,
    /// The status the target answered, 0 if it did not.
    #[serde(skip_serializing_if = "is_zero")]
    pub status: u16,
    /// Microseconds from the start of the try to its answer's head or its failure (`ms` in
    /// the log). Filled in for the try that answered only when there was more than one try
    /// (the request's `latencies.upstream` is that time otherwise).
    #[serde(rename = "ms", serialize_with = "ser_micros_as_ms")]
    pub micros: u32,
}

impl Try {
    /// A try of `target`, under way.
    pub fn new(target: Arc<str>) -> Try {
        Try {
            target,
            error: None,
            status: 0,
            micros: 0,
        }
    }

    /// The target answered `status` after `elapsed`.
    pub fn answered(&mut self, status: u16, elapsed: Duration) {
        self.status = status;
        self.micros = u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX);
    }

    /// The try failed for `error`; `elapsed` counts unless an answer already set the time.
    pub fn failed(&mut self, error: String, elapsed: Duration) {
        if self.micros == 0 {
            self.micros = u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX);
        }
        self.error = Some(error.into_boxed_str());
    }
}

fn is_zero(n: &u16) -> bool {
    *n == 0
}

fn ser_micros_as_ms<S: serde::Serializer>(us: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(f64::from(*us) / 1000.0)
}

/// A target a plugin chose for a request ([`RequestCtx::set_target`]).
#[derive(Debug, Clone)]
pub struct ChosenTarget {
    /// `host:port`.
    pub addr: Arc<str>,
    /// The `Host` header sent when the route does not keep the client's.
    pub host_header: http::HeaderValue,
}

impl RequestCtx {
    /// A fresh context for a request received now.
    pub fn new(client_ip: IpAddr, request_id: u64, global: Arc<[PluginInstance]>) -> RequestCtx {
        RequestCtx {
            client_ip,
            request_id,
            client_tls: false,
            client_cert: None,
            route: None,
            service: None,
            consumer: None,
            credential: None,
            correlation_id: None,
            body_limit: None,
            slots: Extensions::new(),
            timings: Timings {
                start: Instant::now(),
                upstream_sent: None,
                upstream_headers: None,
                end: None,
            },
            upstream_uri: None,
            request_body: None,
            tries: Vec::new(),
            upstream_target: None,
            plugins: global,
            directory: None,
            consumer_scope: None,
        }
    }

    /// Sends this request to `host:port` instead of a target the balancer picks (Kong's
    /// `kong.service.set_target`), with the service's protocol, TLS settings and timeouts. Set
    /// before the balancer phase; health checks and the algorithm do not apply.
    pub fn set_target(&mut self, host: &str, port: u16) -> Result<(), String> {
        let (addr, host_header) = crate::config::target_address(host, port);
        crate::config::parse_target(&addr)?;
        self.upstream_target = Some(Box::new(ChosenTarget { addr, host_header }));
        Ok(())
    }

    /// The plugins that later phases run for this request.
    pub fn plugins(&self) -> &Arc<[PluginInstance]> {
        &self.plugins
    }

    /// The consumers the running plugin may see (those of its namespace).
    pub fn consumers(&self) -> View<'_> {
        static NONE: OnceLock<Directory> = OnceLock::new();
        let dir = match &self.directory {
            Some(d) => d,
            None => NONE.get_or_init(Directory::default),
        };
        dir.view(self.consumer_scope.as_deref())
    }

    /// The consumer the request was authenticated as, if any.
    pub fn consumer_entry(&self) -> Option<&ConsumerEntry> {
        self.directory.as_ref()?.get(self.consumer.as_deref()?)
    }

    /// Makes the consumer with id `consumer` (found through [`RequestCtx::consumers`]) the
    /// request's consumer, identified by `credential` or, when `None`, the anonymous fallback,
    /// and tells the upstream with the identity headers.
    pub fn authenticate(
        &mut self,
        req: &mut RequestHead,
        consumer: Arc<str>,
        credential: Option<Arc<str>>,
    ) {
        if let Some(entry) = self.directory.as_ref().and_then(|d| d.get(&consumer)) {
            crate::consumers::set_identity_headers(
                &mut req.headers,
                entry,
                credential.as_deref(),
                credential.is_none(),
            );
        }
        self.consumer = Some(consumer);
        self.credential = credential;
    }
}

/// The per-route plugin lists, resolved at config time.
#[derive(Debug, Clone, Default)]
pub struct RouteChain {
    /// Plugins without a consumer (route, service, global), by priority.
    pub base: Arc<[PluginInstance]>,
    /// The full list to switch to once an authentication plugin sets a consumer.
    pub by_consumer: HashMap<Arc<str>, Arc<[PluginInstance]>>,
    /// A request passes when its source-address rules or its credentials allow it (nginx's
    /// `satisfy any`), instead of only when both do.
    pub satisfy_any: bool,
}

/// Rewrite phase: the global plugins, before a route is known.
pub async fn rewrite(ctx: &mut RequestCtx, req: &mut RequestHead) -> Option<EarlyResponse> {
    let chain = ctx.plugins.clone();
    for p in chain.iter() {
        let (c, r) = (&mut *ctx, &mut *req);
        let flow = match call(p, "rewrite", || p.plugin.rewrite(c, r)) {
            Called::Now(flow) => flow,
            Called::Later(fut) => finish(p, "rewrite", fut).await,
        };
        if let Flow::Respond(answer) = flow {
            return Some(answer);
        }
    }
    None
}

/// Access phase: the route's plugins in priority order until one answers.
///
/// When a plugin sets [`RequestCtx::consumer`] and the route has a list for that consumer,
/// the remaining plugins come from that list (consumer-scoped configs win). The list in use is
/// the one the later phases replay, also after a short-circuit or when the client leaves while
/// a plugin waits.
pub async fn access(
    ctx: &mut RequestCtx,
    req: &mut RequestHead,
    chain: &RouteChain,
) -> Option<EarlyResponse> {
    if chain.satisfy_any {
        // Boxed: few routes take it, and the common path's future should not carry it.
        return Box::pin(access_any(ctx, req, chain)).await;
    }
    run_access(ctx, req, chain, Skip::Nothing).await.0
}

/// The access phase of a route with `satisfy: any`: its [source](AccessRule::Source) rules
/// run first; when they all allow the client, the [credential](AccessRule::Credentials)
/// plugins are skipped; otherwise the credentials decide, and their refusal (a 401 that asks
/// for them) is the answer, as nginx's. A route without credential plugins answers the
/// source rules' refusal. Every other plugin runs as usual.
async fn access_any(
    ctx: &mut RequestCtx,
    req: &mut RequestHead,
    chain: &RouteChain,
) -> Option<EarlyResponse> {
    // An index loop, not an iterator adapter: a closure held across an `.await` makes the
    // future's `Send` depend on lifetimes the compiler cannot prove general.
    let mut refusal = None;
    let mut any_source = false;
    for p in chain.base.iter() {
        if p.access_rule != Some(AccessRule::Source) {
            continue;
        }
        any_source = true;
        if p.namespace != ctx.consumer_scope {
            ctx.consumer_scope = p.namespace.clone();
        }
        let (c, r) = (&mut *ctx, &mut *req);
        let flow = match call(p, "access", || p.plugin.access(c, r)) {
            Called::Now(flow) => flow,
            Called::Later(fut) => finish(p, "access", fut).await,
        };
        if let Flow::Respond(answer) = flow {
            refusal = Some(answer);
            break;
        }
    }
    let granted = any_source && refusal.is_none();
    let credentials = |p: &PluginInstance| p.access_rule == Some(AccessRule::Credentials);
    if refusal.is_some() && !chain.base.iter().any(credentials) {
        return refusal;
    }
    let skip = if granted {
        Skip::SourcesAndCredentials
    } else {
        Skip::Sources
    };
    let (answer, authenticated) = run_access(ctx, req, chain, skip).await;
    match answer {
        Some(a) => Some(a),
        None if granted || authenticated => None,
        None => refusal,
    }
}

/// Access rules the access loop leaves out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// None: every plugin runs.
    Nothing,
    /// [`AccessRule::Source`] plugins (they ran already).
    Sources,
    /// Those and [`AccessRule::Credentials`] plugins (the sources let the client in).
    SourcesAndCredentials,
}

impl Skip {
    fn skips(self, p: &PluginInstance) -> bool {
        match (self, p.access_rule) {
            (Skip::Nothing, _) | (_, None) => false,
            (Skip::Sources, Some(rule)) => rule == AccessRule::Source,
            (Skip::SourcesAndCredentials, Some(_)) => true,
        }
    }
}

/// The access loop: the chain's plugins that `skip` leaves in, in priority order, until one
/// answers; with whether a credential plugin let the request go on.
async fn run_access(
    ctx: &mut RequestCtx,
    req: &mut RequestHead,
    chain: &RouteChain,
    skip: Skip,
) -> (Option<EarlyResponse>, bool) {
    let mut authenticated = false;
    // The lists live in the route's chain, which outlives the request: borrowed, not cloned.
    let mut list = &chain.base;
    ctx.plugins = list.clone();
    let mut consumer = ctx.consumer.clone();
    // Names whose access handler already ran: filled only when the list changes, so a chain
    // that never switches allocates nothing.
    let mut ran: Vec<&'static str> = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let p = &list[i];
        i += 1;
        if (!ran.is_empty() && ran.contains(&p.name)) || skip.skips(p) {
            continue;
        }
        if p.namespace != ctx.consumer_scope {
            ctx.consumer_scope = p.namespace.clone();
        }
        let (c, r) = (&mut *ctx, &mut *req);
        let flow = match call(p, "access", || p.plugin.access(c, r)) {
            Called::Now(flow) => flow,
            Called::Later(fut) => finish(p, "access", fut).await,
        };
        if let Flow::Respond(answer) = flow {
            return (Some(answer), authenticated);
        }
        authenticated |= p.access_rule == Some(AccessRule::Credentials);
        if ctx.consumer != consumer {
            consumer = ctx.consumer.clone();
            // A consumer without a list of its own (or none, after a plugin cleared it) gets
            // the route's.
            let next = consumer
                .as_ref()
                .and_then(|c| chain.by_consumer.get(c))
                .unwrap_or(&chain.base);
            if !Arc::ptr_eq(next, list) {
                // Everything before `i` ran (or had run); the new list's other plugins all run
                // next, in its order, whatever their priority: a consumer's own plugin may rank
                // above the one that identified the consumer, and must still run.
                ran.extend(list[..i].iter().map(|q| q.name));
                list = next;
                ctx.plugins = list.clone();
                i = 0;
            }
        }
    }
    (None, authenticated)
}

/// Whether any collected plugin reads request bodies.
pub fn reads_request_body(ctx: &RequestCtx) -> bool {
    ctx.plugins
        .iter()
        .any(|p| p.reads_request_body && p.plugin.wants_request_body(ctx))
}

/// Why the request body phase did not produce a body to forward.
#[derive(Debug)]
pub enum BodyStop {
    /// A plugin answered (or failed: a 500).
    Respond(EarlyResponse),
    /// The body grew past the limit.
    TooLarge,
    /// The client went silent for longer than the limit between two reads.
    Timeout,
    /// The client's body was malformed.
    Client(String),
    /// The client went away before its body's end (its connection closed).
    ClientGone,
}

/// Why reading a client's body failed: the client left, or it sent something malformed.
fn client_stop(e: &(dyn std::error::Error + 'static)) -> BodyStop {
    if crate::upstream::client_left(e) {
        BodyStop::ClientGone
    } else {
        BodyStop::Client(e.to_string())
    }
}

/// Request-body phase: reads the client's body chunk by chunk, runs every chunk (the last one
/// with `eof`) through the collected plugins that read bodies, and returns what they left, to
/// be forwarded with an exact length. Nothing is sent upstream before the whole body passed,
/// so a plugin can refuse a request on its content.
pub async fn request_body<B>(
    ctx: &mut RequestCtx,
    body: B,
    limit: u64,
    idle: Duration,
) -> Result<Collected, BodyStop>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + 'static,
{
    let chain = ctx.plugins.clone();
    collect(ctx, body, limit, idle, &chain).await
}

/// Reads the whole request body before `access`, for a plugin that decides on it
/// ([`Plugin::body_before_access`](plugin::Plugin::body_before_access)); no plugin
/// sees the chunks. Stops as [`request_body`] does.
pub async fn read_body_before_access<B>(
    ctx: &mut RequestCtx,
    body: B,
    limit: u64,
    idle: Duration,
) -> Result<Collected, BodyStop>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + 'static,
{
    collect(ctx, body, limit, idle, &[]).await
}

/// Whether a plugin of the route's chain needs the body before `access`.
pub fn body_before_access(chain: &RouteChain, req: &RequestHead) -> bool {
    chain
        .base
        .iter()
        .any(|p| p.body_before_access && p.plugin.body_before_access(req))
}

/// A request body read whole.
#[derive(Debug, Default)]
pub struct Collected {
    /// The body, as the plugins left it.
    pub bytes: Bytes,
    /// Bytes received from the client.
    pub received: u64,
    /// The client's trailers, forwarded after the body (to HTTP/2 upstreams).
    pub trailers: Option<http::HeaderMap>,
}

async fn collect<B>(
    ctx: &mut RequestCtx,
    mut body: B,
    limit: u64,
    idle: Duration,
    chain: &[PluginInstance],
) -> Result<Collected, BodyStop>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + 'static,
{
    let mut out = BytesMut::new();
    let mut received = 0u64;
    let mut trailers = None;
    let mut eof = body.is_end_stream();
    loop {
        let data = if eof {
            Bytes::new()
        } else {
            let frame = tokio::time::timeout(
                idle,
                std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)),
            )
            .await
            .map_err(|_| BodyStop::Timeout)?;
            match frame {
                None => {
                    eof = true;
                    Bytes::new()
                }
                Some(Err(e)) => return Err(client_stop(&e)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(d) => {
                        received += d.len() as u64;
                        if limit > 0 && received > limit {
                            return Err(BodyStop::TooLarge);
                        }
                        eof = body.is_end_stream();
                        d
                    }
                    // Kept for after the body; the plugins see the data only.
                    Err(frame) => {
                        trailers = frame.into_trailers().ok();
                        continue;
                    }
                },
            }
        };
        let mut chunk = BodyChunk { data, eof };
        for p in chain.iter().filter(|p| p.reads_request_body) {
            if !p.plugin.wants_request_body(ctx) {
                continue;
            }
            let (c, k) = (&mut *ctx, &mut chunk);
            let flow = match call(p, "request_body", || p.plugin.request_body(c, k)) {
                Called::Now(flow) => flow,
                Called::Later(fut) => finish(p, "request_body", fut).await,
            };
            if let Flow::Respond(answer) = flow {
                return Err(BodyStop::Respond(answer));
            }
        }
        out.extend_from_slice(&chunk.data);
        if limit > 0 && out.len() as u64 > limit {
            return Err(BodyStop::TooLarge);
        }
        if eof {
            return Ok(Collected {
                bytes: out.freeze(),
                received,
                trailers,
            });
        }
    }
}

/// Header-filter phase: every collected plugin may edit the response head.
pub fn header_filter(ctx: &mut RequestCtx, resp: &mut ResponseHead) {
    let chain = ctx.plugins.clone();
    for p in chain.iter() {
        let _ = sync(p, "header_filter", || p.plugin.header_filter(ctx, resp));
    }
}

/// Whether any collected plugin filters bodies.
pub fn filters_body(ctx: &RequestCtx) -> bool {
    ctx.plugins.iter().any(|p| p.filters_body)
}

/// Body-filter phase for one chunk.
pub fn body_filter(ctx: &mut RequestCtx, chunk: &mut BodyChunk) {
    let chain = ctx.plugins.clone();
    for p in chain.iter().filter(|p| p.filters_body) {
        let _ = sync(p, "body_filter", || p.plugin.body_filter(ctx, chunk));
    }
}

/// Trailers of a filtered response: each plugin that filters bodies may edit them and add
/// bytes to the body's end; returns those bytes.
pub fn trailers_filter(ctx: &mut RequestCtx, trailers: &mut http::HeaderMap) -> BytesMut {
    let chain = ctx.plugins.clone();
    let mut out = BytesMut::new();
    for p in chain.iter().filter(|p| p.filters_body) {
        let _ = sync(p, "trailers_filter", || {
            if let Some(b) = p.plugin.trailers_filter(ctx, trailers)? {
                out.extend_from_slice(&b);
            }
            Ok(())
        });
    }
    out
}

/// Log phase: every collected plugin's log handler.
pub fn log(ctx: &RequestCtx, record: &LogRecord) {
    for p in ctx.plugins.iter() {
        let _ = sync(p, "log", || {
            p.plugin.log(ctx, record);
            Ok(())
        });
    }
}

/// What the log phase knows about a finished request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogRecord {
    /// Per-request id (written as 16 hex digits).
    #[serde(serialize_with = "ser_request_id")]
    pub request_id: u64,
    /// Client IP.
    pub client_ip: IpAddr,
    /// Request method.
    #[serde(serialize_with = "ser_method")]
    pub method: Method,
    /// Host the client addressed.
    pub host: String,
    /// Normalised request path.
    pub path: String,
    /// Status sent to the client.
    pub status: u16,
    /// Matched route id.
    pub route: Option<Arc<str>>,
    /// Service id.
    pub service: Option<Arc<str>>,
    /// The target that answered.
    pub target: Option<Arc<str>>,
    /// Tries made.
    pub tries: usize,
    /// Every try, when there was more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_tries: Option<Box<[Try]>>,
    /// Request body bytes received.
    pub request_bytes: u64,
    /// Response body bytes sent.
    pub response_bytes: u64,
    /// Timings in milliseconds.
    pub latencies: Latencies,
    /// Whether the client went away before the response was complete.
    pub aborted: bool,
    /// Whether the last upstream request went over a pooled connection (None: none was sent).
    #[serde(skip)]
    pub upstream_reused: Option<bool>,
    /// A gRPC call's status (from the upstream's trailers, or Weir's own answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<u16>,
    /// The correlation id the `correlation-id` plugin found or made (what the client and the
    /// upstream see in its header), so a request can be found by the id a client reports.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_header_value"
    )]
    pub correlation_id: Option<http::HeaderValue>,
    /// The consumer an authentication plugin identified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<Arc<str>>,
}

impl LogRecord {
    /// The record of a request as it arrived: nothing routed, sent or answered yet.
    pub fn new(request_id: u64, client_ip: IpAddr, method: Method, host: String) -> LogRecord {
        LogRecord {
            request_id,
            client_ip,
            method,
            host,
            path: String::new(),
            status: 0,
            route: None,
            service: None,
            target: None,
            tries: 0,
            upstream_tries: None,
            request_bytes: 0,
            response_bytes: 0,
            latencies: Latencies::default(),
            aborted: false,
            upstream_reused: None,
            grpc_status: None,
            correlation_id: None,
            consumer: None,
        }
    }
}

fn ser_request_id<S: serde::Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{id:016x}"))
}

fn ser_header_value<S: serde::Serializer>(
    v: &Option<http::HeaderValue>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&String::from_utf8_lossy(v.as_bytes())),
        None => s.serialize_none(),
    }
}

fn ser_method<S: serde::Serializer>(m: &Method, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.as_str())
}

/// The four timings of a request, in milliseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Latencies {
    /// Request received → request sent upstream (Weir's own work, plugins included).
    pub proxy: f64,
    /// Request sent → upstream response head received.
    pub upstream: f64,
    /// Response head → last byte sent.
    pub receive: f64,
    /// Request received → last byte sent.
    pub total: f64,
}

/// Milliseconds with microsecond precision (without `as_micros`' 128-bit division).
fn ms(d: Duration) -> f64 {
    d.as_secs() as f64 * 1000.0 + f64::from(d.subsec_micros()) / 1000.0
}

impl Timings {
    /// Fills in the missing marks and computes the four latencies.
    pub fn latencies(&mut self) -> Latencies {
        let end = *self.end.get_or_insert_with(Instant::now);
        let sent = self.upstream_sent;
        let headers = self.upstream_headers;
        Latencies {
            proxy: sent.map_or(0.0, |s| ms(s - self.start)),
            upstream: match (sent, headers) {
                (Some(s), Some(h)) => ms(h - s),
                _ => 0.0,
            },
            receive: headers.map_or(0.0, |h| ms(end - h)),
            total: ms(end - self.start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plugin::{Handled, Plugin, Step};
    use super::*;
    use http::StatusCode;
    use std::sync::Mutex;

    /// Appends "name:phase" to a shared journal; answers in access when `stop` is set.
    struct Probe {
        name: &'static str,
        stop: bool,
        journal: Arc<Mutex<Vec<String>>>,
        set_consumer: Option<&'static str>,
        rule: Option<AccessRule>,
    }

    impl Plugin for Probe {
        fn access_rule(&self) -> Option<AccessRule> {
            self.rule
        }
        fn access<'a>(&'a self, ctx: &'a mut RequestCtx, _req: &'a mut RequestHead) -> Handled<'a> {
            self.journal
                .lock()
                .unwrap()
                .push(format!("{}:access", self.name));
            if let Some(c) = self.set_consumer {
                ctx.consumer = Some(c.into());
            }
            if self.stop {
                let status = match self.rule {
                    Some(AccessRule::Credentials) => StatusCode::UNAUTHORIZED,
                    _ => StatusCode::FORBIDDEN,
                };
                return Flow::Respond(EarlyResponse::message(status, "no")).into();
            }
            Flow::Continue.into()
        }
        fn log(&self, _ctx: &RequestCtx, _r: &LogRecord) {
            self.journal
                .lock()
                .unwrap()
                .push(format!("{}:log", self.name));
        }
    }

    struct Boom;
    impl Plugin for Boom {
        fn access<'a>(
            &'a self,
            _ctx: &'a mut RequestCtx,
            _req: &'a mut RequestHead,
        ) -> Handled<'a> {
            panic!("boom")
        }
    }

    /// Waits (yields once) before answering; panics inside its future with `panic`.
    struct Waits {
        panic: bool,
    }
    impl Plugin for Waits {
        fn access<'a>(&'a self, _ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
            Step::wait(async move {
                tokio::task::yield_now().await;
                if self.panic {
                    panic!("boom, later");
                }
                req.headers
                    .insert("x-waited", http::HeaderValue::from_static("1"));
                Ok(Flow::Continue)
            })
        }
        fn reads_request_body(&self) -> bool {
            true
        }
        fn request_body<'a>(
            &'a self,
            _ctx: &'a mut RequestCtx,
            chunk: &'a mut BodyChunk,
        ) -> Handled<'a> {
            Step::wait(async move {
                tokio::task::yield_now().await;
                if chunk.data.as_ref() == b"stop" {
                    return Ok(Flow::Respond(EarlyResponse::message(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "no",
                    )));
                }
                chunk.data = Bytes::from(chunk.data.to_ascii_uppercase());
                if chunk.eof {
                    chunk.data = Bytes::from([&chunk.data[..], b"!"].concat());
                }
                Ok(Flow::Continue)
            })
        }
    }

    fn route_chain(base: Vec<PluginInstance>) -> RouteChain {
        RouteChain {
            base: base.into(),
            by_consumer: HashMap::new(),
            satisfy_any: false,
        }
    }

    fn fresh() -> RequestCtx {
        RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(vec![]))
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn inst(name: &'static str, priority: i32, plugin: Arc<dyn Plugin>) -> PluginInstance {
        PluginInstance::new(name, name, priority, plugin)
    }

    fn probe(
        j: &Arc<Mutex<Vec<String>>>,
        name: &'static str,
        prio: i32,
        stop: bool,
    ) -> PluginInstance {
        let probe = Probe {
            name,
            stop,
            journal: j.clone(),
            set_consumer: None,
            rule: None,
        };
        inst(name, prio, Arc::new(probe))
    }

    /// A probe that goes on, having identified the request as `consumer` (as an authentication
    /// plugin does).
    fn probe_setting_consumer(
        j: &Arc<Mutex<Vec<String>>>,
        name: &'static str,
        prio: i32,
        consumer: &'static str,
    ) -> PluginInstance {
        let probe = Probe {
            name,
            stop: false,
            journal: j.clone(),
            set_consumer: Some(consumer),
            rule: None,
        };
        inst(name, prio, Arc::new(probe))
    }

    /// A probe that is an access rule of kind `rule`; refusing, a credential rule answers 401.
    fn rule_probe(
        j: &Arc<Mutex<Vec<String>>>,
        name: &'static str,
        prio: i32,
        stop: bool,
        rule: AccessRule,
    ) -> PluginInstance {
        let probe = Probe {
            name,
            stop,
            journal: j.clone(),
            set_consumer: None,
            rule: Some(rule),
        };
        inst(name, prio, Arc::new(probe))
    }

    #[test]
    fn satisfy_any_lets_either_the_source_or_the_credentials_in() {
        use AccessRule::{Credentials, Source};
        // (source refuses, credentials refuse, credential plugin present, answer, journal)
        type Case = (bool, bool, bool, Option<u16>, &'static [&'static str]);
        let cases: [Case; 6] = [
            (false, true, true, None, &["src:access", "other:access"]),
            (false, false, true, None, &["src:access", "other:access"]),
            (
                true,
                false,
                true,
                None,
                &["src:access", "cred:access", "other:access"],
            ),
            (true, true, true, Some(401), &["src:access", "cred:access"]),
            (true, false, false, Some(403), &["src:access"]),
            (false, false, false, None, &["src:access", "other:access"]),
        ];
        for (src_stop, cred_stop, with_cred, status, journal) in cases {
            for any in [true, false] {
                let j = Arc::new(Mutex::new(Vec::new()));
                // Kong's order: authentication (1100) before ip-restriction (990).
                let mut base = vec![rule_probe(&j, "cred", 1100, cred_stop, Credentials)];
                if !with_cred {
                    base.clear();
                }
                base.push(probe(&j, "other", 1000, false));
                base.push(rule_probe(&j, "src", 990, src_stop, Source));
                let chain = RouteChain {
                    satisfy_any: any,
                    ..route_chain(base)
                };
                let (mut ctx, mut req) = (fresh(), head());
                let answer = block_on(access(&mut ctx, &mut req, &chain));
                let got = answer.map(|a| a.status.as_u16());
                let case = (src_stop, cred_stop, with_cred, any);
                if any {
                    assert_eq!(got, status, "{case:?}");
                    assert_eq!(*j.lock().unwrap(), journal, "{case:?}");
                } else {
                    // satisfy: all — the first refusal in priority order answers.
                    let want = match (with_cred && cred_stop, src_stop) {
                        (true, _) => Some(401),
                        (false, true) => Some(403),
                        (false, false) => None,
                    };
                    assert_eq!(got, want, "{case:?}");
                }
            }
        }
    }

    fn head() -> RequestHead {
        http::Request::new(()).into_parts().0
    }

    fn record() -> LogRecord {
        let mut r = LogRecord::new(0, [127, 0, 0, 1].into(), Method::GET, String::new());
        r.path = "/".into();
        r.status = 200;
        r
    }

    #[test]
    fn short_circuit_skips_later_access_but_every_log_runs() {
        let j = Arc::new(Mutex::new(Vec::new()));
        let chain = route_chain(vec![
            probe(&j, "a", 30, false),
            probe(&j, "b", 20, true),
            probe(&j, "c", 10, false),
        ]);
        let mut ctx = fresh();
        let answer = block_on(access(&mut ctx, &mut head(), &chain)).expect("b answers");
        assert_eq!(answer.status, StatusCode::FORBIDDEN);
        log(&ctx, &record());
        assert_eq!(
            *j.lock().unwrap(),
            ["a:access", "b:access", "a:log", "b:log", "c:log"]
        );
    }

    #[test]
    fn a_panic_becomes_500_and_the_chain_survives() {
        let j = Arc::new(Mutex::new(Vec::new()));
        let chain = route_chain(vec![
            inst("boom", 50, Arc::new(Boom)),
            probe(&j, "after", 10, false),
        ]);
        let mut ctx = fresh();
        let answer = block_on(access(&mut ctx, &mut head(), &chain)).expect("500");
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        log(&ctx, &record());
        assert_eq!(*j.lock().unwrap(), ["after:log"]);
    }

    #[test]
    fn a_consumer_switches_to_its_list_after_the_authenticating_plugin() {
        let j = Arc::new(Mutex::new(Vec::new()));
        let auth = probe_setting_consumer(&j, "auth", 1000, "alice");
        let base: Arc<[PluginInstance]> =
            vec![auth.clone(), probe(&j, "limit-default", 900, false)].into();
        let alice: Arc<[PluginInstance]> = vec![
            auth,
            probe(&j, "limit-alice", 900, false),
            probe(&j, "extra", 5, false),
        ]
        .into();
        let chain = RouteChain {
            base,
            by_consumer: HashMap::from([(Arc::from("alice"), alice)]),
            satisfy_any: false,
        };
        let mut ctx = fresh();
        assert!(block_on(access(&mut ctx, &mut head(), &chain)).is_none());
        assert_eq!(
            *j.lock().unwrap(),
            ["auth:access", "limit-alice:access", "extra:access"]
        );
        assert_eq!(ctx.plugins().len(), 3);
    }

    #[test]
    fn after_a_switch_every_plugin_not_yet_run_runs_whatever_its_priority() {
        let j = Arc::new(Mutex::new(Vec::new()));
        let auth = probe_setting_consumer(&j, "auth", 1000, "alice");
        let pre = probe(&j, "pre", 2000, false);
        let limit = probe(&j, "limit", 900, false);
        let base: Arc<[PluginInstance]> = vec![pre.clone(), auth.clone(), limit.clone()].into();
        // Alice's own plugin ranks above the plugin that identified her: it runs right after.
        let alice: Arc<[PluginInstance]> =
            vec![probe(&j, "ban", 5000, false), pre, auth, limit].into();
        let chain = RouteChain {
            base,
            by_consumer: HashMap::from([(Arc::from("alice"), alice)]),
            satisfy_any: false,
        };
        let mut ctx = fresh();
        assert!(block_on(access(&mut ctx, &mut head(), &chain)).is_none());
        assert_eq!(
            *j.lock().unwrap(),
            ["pre:access", "auth:access", "ban:access", "limit:access"]
        );
        assert_eq!(ctx.plugins().len(), 4);
    }

    #[test]
    fn a_waiting_plugin_is_awaited_and_a_panic_in_its_future_becomes_500() {
        let j = Arc::new(Mutex::new(Vec::new()));
        let chain = route_chain(vec![
            inst("waits", 50, Arc::new(Waits { panic: false })),
            probe(&j, "after", 10, false),
        ]);
        let mut ctx = fresh();
        let mut req = head();
        assert!(block_on(access(&mut ctx, &mut req, &chain)).is_none());
        assert_eq!(req.headers["x-waited"], "1");
        assert_eq!(*j.lock().unwrap(), ["after:access"]);

        let chain = route_chain(vec![
            inst("waits", 50, Arc::new(Waits { panic: true })),
            probe(&j, "later", 10, false),
        ]);
        let mut ctx = fresh();
        let answer = block_on(access(&mut ctx, &mut head(), &chain)).expect("500");
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        log(&ctx, &record());
        assert_eq!(
            *j.lock().unwrap(),
            ["after:access", "later:log"],
            "the chain survives"
        );
    }

    #[test]
    fn request_body_chunks_pass_through_waiting_plugins_in_order() {
        let chain: Arc<[PluginInstance]> =
            vec![inst("waits", 50, Arc::new(Waits { panic: false }))].into();
        let body = parts(vec!["ab", "cd"]);
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, chain.clone());
        let read = block_on(request_body(&mut ctx, body, 0, Duration::from_secs(5))).unwrap();
        assert_eq!((&read.bytes[..], read.received), (&b"ABCD!"[..], 4));
        assert!(read.trailers.is_none());

        let body = parts(vec!["ab", "stop", "cd"]);
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, chain.clone());
        match block_on(request_body(&mut ctx, body, 0, Duration::from_secs(5))) {
            Err(BodyStop::Respond(r)) => assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE),
            other => panic!("{other:?}"),
        }

        let body = parts(vec!["abc", "def"]);
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, chain);
        assert!(matches!(
            block_on(request_body(&mut ctx, body, 5, Duration::from_secs(5))),
            Err(BodyStop::TooLarge)
        ));
    }

    /// A body of data frames, one per string.
    struct Parts(std::collections::VecDeque<&'static str>);

    impl Body for Parts {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Ready(
                self.0
                    .pop_front()
                    .map(|s| Ok(http_body::Frame::data(Bytes::from_static(s.as_bytes())))),
            )
        }
    }

    fn parts(v: Vec<&'static str>) -> Parts {
        Parts(v.into())
    }
}
