//! One request through the phases: rewrite, access (route, plugins), balancer (connect, send,
//! retry), header_filter, and the response body that runs body_filter and log.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::fallback::{self, CompiledFallback};
use super::grpc;
use super::headers::{self, Forwarding};
use super::tunnel;
use super::Shared;
use crate::access_log::Unlogged;
use crate::compile::{CompiledRoute, CompiledService};
use crate::config::ClientProtocol;
use crate::health::Outcome;
use crate::pipeline::{
    self, BodyStop, ConnActivity, InFlight, LogRecord, ProxyBody, RequestCtx, Session, Try,
};
use crate::plugins::{EarlyResponse, RequestHead};
use crate::router::{
    has_escaped_slash, normalize_request_path, request_host, with_params_len, without_params,
    EscapedSlashes, Lookup, RequestView,
};
use crate::upstream::{self, Added, BodyStats, PoolKey, ResponseBody, UpstreamBody};

const SERVER: HeaderValue = HeaderValue::from_static("weir");
const PROXY_LATENCY: HeaderName = HeaderName::from_static("x-weir-proxy-latency");
const UPSTREAM_LATENCY: HeaderName = HeaderName::from_static("x-weir-upstream-latency");
const UPSTREAM_TRIES: HeaderName = HeaderName::from_static("x-weir-upstream-tries");

/// What the handler knows about the client connection (built once per connection).
#[derive(Debug)]
pub struct ConnInfo {
    /// The TCP peer.
    pub peer: SocketAddr,
    /// The connection is HTTPS (TLS terminated here).
    pub tls: bool,
    /// The peer address as a header value: every request forwards it at least once.
    pub peer_value: HeaderValue,
    /// The local port as a header value (`X-Forwarded-Port`).
    pub port_value: HeaderValue,
    /// The server name the TLS client asked for (SNI), which chose the certificate.
    pub sni: Option<Box<str>>,
}

impl ConnInfo {
    /// Connection facts with their header values formatted once.
    pub fn new(peer: SocketAddr, local_port: u16, tls: bool) -> ConnInfo {
        ConnInfo {
            peer,
            tls,
            peer_value: headers::ip_value(peer.ip()),
            port_value: HeaderValue::from(local_port),
            sni: None,
        }
    }
}

thread_local! {
    static REQUEST_SEQ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

static WORKER_SALT: AtomicU64 = AtomicU64::new(1);

/// A per-process unique, cheap request id: a per-thread prefix and a counter.
fn next_request_id() -> u64 {
    REQUEST_SEQ.with(|c| {
        let mut n = c.get();
        if n == 0 {
            n = WORKER_SALT.fetch_add(1, Ordering::Relaxed) << 40;
        }
        n += 1;
        c.set(n);
        n
    })
}

/// A request under way: its session (which logs it when it ends, however it ends) and the
/// proxy it runs on.
struct Pending {
    shared: Arc<Shared>,
    s: Box<Session>,
}

impl Pending {
    /// Sends a response made by the proxy itself, through header_filter, body_filter and log.
    fn respond(mut self, mut early: EarlyResponse) -> Response<ProxyBody> {
        // Weir's refusals and failures, not a plugin's deliberate answers (a redirect, a 200).
        if self.s.grpc.is_some() && early.status.as_u16() >= 400 {
            let (answer, status) = grpc::trailers_only(early, self.s.grpc.as_ref());
            early = answer;
            self.s.record.grpc_status = Some(status);
        }
        let mut resp = Response::new(());
        *resp.status_mut() = early.status;
        *resp.headers_mut() = early.headers;
        let (mut parts, ()) = resp.into_parts();
        parts.headers.insert(header::SERVER, SERVER);
        pipeline::header_filter(&mut self.s.ctx, &mut parts);
        self.s.record.status = parts.status.as_u16();
        let body = ProxyBody::full(early.body, Some(self.s));
        Response::from_parts(parts, body)
    }

    fn error(self, status: StatusCode, message: &str) -> Response<ProxyBody> {
        self.respond(EarlyResponse::message(status, message))
    }

    /// 413, naming the limit the body went over.
    fn too_large(self, limit: u64) -> Response<ProxyBody> {
        let message = format!("Request size limit exceeded: at most {limit} bytes");
        self.error(StatusCode::PAYLOAD_TOO_LARGE, &message)
    }
}

/// Handles one request (`body` is `None` when it has none); never fails (errors become
/// responses).
pub async fn handle(
    shared: Arc<Shared>,
    conn: Arc<ConnInfo>,
    activity: Arc<ConnActivity>,
    mut head: RequestHead,
    mut body: Option<Incoming>,
) -> Response<ProxyBody> {
    let guard = InFlight::new(&activity);
    let rt = shared.runtime.load_full();
    // Edge, before anything reads the head: one Host (the one routed on and forwarded), and
    // the client's hop-by-hop headers gone before any plugin adds its own.
    let (routed_host, host_problem) = match headers::one_host(&mut head) {
        Ok(h) => (h, None),
        Err(problem) => (String::new(), Some(problem)),
    };
    // RFC 8441: a WebSocket over HTTP/2 goes upstream as the HTTP/1.1 upgrade, and Weir, which
    // made the key, checks the answer.
    let h2_websocket =
        headers::is_h2_websocket(&head).then(|| headers::h2_websocket_to_upgrade(&mut head));
    let upgrade = (head.version <= http::Version::HTTP_11 || h2_websocket.is_some())
        && headers::is_upgrade(&head.headers);
    // The client IP is read first: `Connection: x-forwarded-for` must not change it.
    let client_ip = headers::client_ip(conn.peer.ip(), &head.headers, &shared.opts.trusted_proxies);
    headers::remove_untrusted_forwarding(
        &mut head.headers,
        conn.peer.ip(),
        &shared.opts.trusted_proxies,
    );
    let accepts_trailers = headers::remove_hop_by_hop(&mut head.headers, upgrade);
    // An HTTP/1.1 client gets trailers only for fields the response announces (`Trailer`).
    let h1_client_trailers = accepts_trailers && head.version <= http::Version::HTTP_11;
    let mut ctx = RequestCtx::new(client_ip, next_request_id(), rt.global.clone());
    ctx.client_tls = conn.tls;
    if rt.consumers.strips_identity_headers {
        // Only an authentication plugin of this table may say who the client is.
        crate::consumers::remove_identity_headers(&mut head.headers);
        ctx.directory = Some(rt.consumers.clone());
    }
    let record = LogRecord {
        request_id: ctx.request_id,
        client_ip,
        method: head.method.clone(),
        host: routed_host,
        path: String::new(),
        status: 0,
        route: None,
        service: None,
        target: None,
        tries: 0,
        upstream_tries: None,
        request_bytes: 0,
        response_bytes: 0,
        latencies: Default::default(),
        aborted: false,
        upstream_reused: None,
        grpc_status: None,
        correlation_id: None,
        consumer: None,
    };
    // gRPC calls are POSTs: other methods skip the header lookup.
    let grpc = (head.method == http::Method::POST && grpc::is_grpc(&head.headers))
        .then(|| head.headers.get(header::CONTENT_TYPE).cloned())
        .flatten();
    let mut p = Pending {
        s: Box::new(Session {
            ctx,
            record,
            sink: shared.clone(),
            request_bytes: None,
            _guard: Some(guard),
            grpc,
            grpc_deadline: None,
            upstream_load: None,
            request_trailers: None,
        }),
        shared,
    };

    if let Some(problem) = host_problem {
        return p.error(StatusCode::BAD_REQUEST, problem);
    }
    if misdirected(&conn, &rt, &p.s.record.host) {
        return p.error(
            StatusCode::MISDIRECTED_REQUEST,
            "this connection's certificate is not the one for this host",
        );
    }
    // A gRPC client's deadline bounds the wait for the upstream's answer.
    let deadline = p.s.grpc.as_ref().and_then(|_| {
        let timeout = grpc::parse_timeout(head.headers.get(grpc::GRPC_TIMEOUT)?)?;
        // 99999999H is 11,000 years: no deadline rather than an overflow.
        p.s.ctx.timings.start.checked_add(timeout)
    });
    p.s.grpc_deadline = deadline;

    // rewrite: global plugins only.
    if !p.s.ctx.plugins().is_empty() {
        if let Some(r) = pipeline::rewrite(&mut p.s.ctx, &mut head).await {
            return p.respond(r);
        }
    }

    // access, before: normalise and route.
    // The log record owns the normalised path; the handler borrows it from there.
    let slashes = p.shared.opts.escaped_slashes;
    p.s.record.path =
        match normalize_request_path(head.uri.path(), rt.settings.merge_slashes, slashes) {
            Ok(path) => path.into_owned(),
            Err(e) => return p.error(StatusCode::BAD_REQUEST, &e.to_string()),
        };
    if slashes == EscapedSlashes::UnescapeAndRedirect && has_escaped_slash(head.uri.path()) {
        return redirect_to_normal_path(p, &head);
    }
    let path = p.s.record.path.as_str();
    // Routes match the path without `;` parameters, as the backends that honour them read it.
    let routing = match without_params(path) {
        Ok(r) => r,
        Err(e) => return p.error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    // Without global plugins nothing can have changed the head since the log record's Host.
    let host = if p.s.ctx.plugins().is_empty() {
        p.s.record.host.as_str()
    } else {
        request_host(&head.uri, &head.headers)
    };
    let view = RequestView {
        host,
        path: &routing,
        method: &head.method,
        headers: &head.headers,
        query: head.uri.query(),
        protocol: if conn.tls {
            ClientProtocol::Https
        } else {
            ClientProtocol::Http
        },
    };
    let m = match rt.router.lookup(&view) {
        Lookup::Matched(m) => m,
        Lookup::NotFound => {
            return p.error(StatusCode::NOT_FOUND, "no Route matched with those values")
        }
        // Like Kong: an http-only route does not match over HTTPS.
        Lookup::WrongProtocol(_) if conn.tls => {
            return p.error(StatusCode::NOT_FOUND, "no Route matched with those values")
        }
        Lookup::WrongProtocol(m)
            if headers::forwarded_https(
                conn.peer.ip(),
                &head.headers,
                &p.shared.opts.trusted_proxies,
            ) =>
        {
            m
        }
        Lookup::WrongProtocol(m) => {
            let route = &rt.routes[m.route];
            if !route.access_log {
                p.s.ctx.slots.insert(Unlogged);
            }
            let host = host.to_owned();
            return redirect_to_https(p, route, &host, &head);
        }
    };
    let route = &rt.routes[m.route];
    let deadline = route_deadline(route, p.s.ctx.timings.start, deadline);
    // The matched prefix, measured in the forwarded path (parameters included).
    let matched_len = match routing {
        std::borrow::Cow::Borrowed(_) => m.matched_len,
        std::borrow::Cow::Owned(_) => with_params_len(path, m.matched_len),
    };
    p.s.ctx.route = Some(route.id.clone());
    p.s.record.route = Some(route.id.clone());
    if !route.access_log {
        p.s.ctx.slots.insert(Unlogged);
    }
    // The canary, on the headers before the route's plugins: its service serves the whole
    // request (balancer, retries, timeouts), with the route's plugins.
    // Weighted backends likewise: the chosen one's service and plugins serve the request; one
    // that cannot be used answers 500 (after the plugins, so a redirect still wins).
    let (service, chain, unusable) = match (&route.backends, &route.canary) {
        (Some(b), _) => {
            let b = b.choose();
            (b.service, &b.chain, b.service.is_none())
        }
        (None, Some(c)) if c.chooses(&head.headers) => (Some(c.service), &route.chain, false),
        (None, _) => (route.service, &route.chain, false),
    };
    let service = service.map(|i| &rt.services[i]);
    // A route that replaces some upstream statuses keeps what the error page needs.
    let mut error_page = ErrorPage::start(route, &head);
    if let Some(s) = service {
        p.s.ctx.service = Some(s.id.clone());
        p.s.record.service = Some(s.id.clone());
    }

    // access: the route's plugins.
    // The client's Host, for X-Forwarded-Host, in case a plugin replaces the one sent upstream.
    let mut client_host = None;
    if !chain.base.is_empty() {
        client_host = head.headers.get(header::HOST).cloned();
        // Plugins see the path that was routed on (normalised), as the upstream will.
        if head.uri.path() != path {
            let mut pq = path.to_owned();
            if let Some(q) = head.uri.query() {
                pq.push('?');
                pq.push_str(q);
            }
            let mut parts = head.uri.clone().into_parts();
            parts.path_and_query = pq.parse().ok();
            if let Ok(uri) = http::Uri::from_parts(parts) {
                head.uri = uri;
            }
        }
        if pipeline::body_before_access(chain, &head) {
            let limit = buffered_limit(p.shared.opts.max_body_size, &p);
            if content_length(&head).is_some_and(|n| n > limit) {
                return p.too_large(limit);
            }
            let idle = p.shared.opts.header_read_timeout;
            let read = match read_whole(&mut p.s.ctx, body.take(), limit, idle).await {
                Ok(read) => read,
                Err(stop) => return body_stopped(p, stop, limit),
            };
            p.s.record.request_bytes = read.received;
            p.s.ctx.request_body = Some(read.bytes);
            p.s.request_trailers = read.trailers.map(Box::new);
        }
        if let Some(r) = pipeline::access(&mut p.s.ctx, &mut head, chain).await {
            return p.respond(r);
        }
    }
    let service = match (service, route.fallback.as_deref()) {
        (Some(s), None) => s,
        (None, _) if unusable => {
            return p.error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the backend of this Route cannot be used",
            )
        }
        (None, None) => {
            return p.error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no Service configured for this Route",
            )
        }
        // A target a plugin chose needs none of the service's.
        (Some(s), Some(_)) if p.s.ctx.upstream_target.is_some() || s.has_target_to_try() => s,
        // Nothing to try: the fallback serves the request as the service would have (and its
        // own statuses are never replaced).
        (_, Some(fallback)) => {
            let s = &rt.services[fallback.service];
            p.s.ctx.service = Some(s.id.clone());
            p.s.record.service = Some(s.id.clone());
            error_page = None;
            s
        }
    };

    // access, after: build the upstream request.
    let max_body = match (p.shared.opts.max_body_size, p.s.ctx.body_limit) {
        (global, None) => global,
        (0, Some(plugin)) => plugin,
        (global, Some(plugin)) => global.min(plugin),
    };
    if max_body > 0 && content_length(&head) > Some(max_body) {
        return p.too_large(max_body);
    }
    // Only protocols the route allows are switched to; the rest go on as plain requests.
    let upgrade = upgrade && headers::allow_upgrade(&mut head.headers, &route.upgrade_protocols);
    let asked_upgrade = upgrade
        .then(|| head.headers.get(header::UPGRADE).cloned())
        .flatten();
    let client_upgrade = if upgrade {
        head.extensions.remove::<hyper::upgrade::OnUpgrade>()
    } else {
        None
    };
    let upstream_path = upstream_path(
        &mut p.s.ctx,
        route,
        service,
        path,
        &routing,
        matched_len,
        head.uri.query(),
    );
    let stripped = (route.strip_path && matched_len > 0).then(|| &path[..matched_len]);
    // hyper answers `Expect: 100-continue` itself when the body is first read (the fast path,
    // which passes no body, never takes a request that has one).
    if body.is_some() || p.s.ctx.request_body.is_some() {
        head.headers.remove(header::EXPECT);
    }
    // Consistent hashing reads the request as the plugins left it, before it is rewritten.
    let (hash_key, set_cookie) = match &service.hash {
        Some(h) => {
            let k = h.key(p.s.ctx.client_ip, &head.headers, path, head.uri.query());
            (k.hash, k.set_cookie)
        }
        None => (None, None),
    };
    let mut added = Added::default();
    prepare_request_headers(
        &mut head,
        &mut added,
        &p,
        &conn,
        route,
        stripped,
        client_host,
    );
    if service.h2 {
        added.append_to(&mut head.headers);
        // The one TE value HTTP/2 allows (RFC 9113 §8.2.2), and gRPC servers require it (a
        // gRPC-Web client from a browser cannot send it).
        if accepts_trailers || p.s.grpc.is_some() {
            head.headers
                .insert(header::TE, HeaderValue::from_static("trailers"));
        }
    }

    // A body read before access (and perhaps edited there) is what goes upstream.
    let early = p.s.ctx.request_body.take();
    if early
        .as_ref()
        .is_some_and(|b| max_body > 0 && b.len() as u64 > max_body)
    {
        return p.too_large(max_body);
    }
    // A request that may be sent again after the upstream saw it (`retry_on`) keeps its body:
    // idempotent, not a tunnel, and small enough (a large upload streams, and is sent once).
    let replayable = !service.retry_on.is_off()
        && asked_upgrade.is_none()
        && headers::is_idempotent(&head.method);
    let keep_limit = p.shared.opts.max_retry_body;
    // A mirrored route's requests are copied with their bodies: a small one is read first,
    // as for retries (a large upload streams, and is not copied).
    let mirrored_route = !route.mirrors.is_empty() && asked_upgrade.is_none();
    let mut body = body;
    if (replayable || mirrored_route)
        && body.as_ref().is_some_and(|b| !b.is_end_stream())
        && content_length(&head).is_some_and(|n| n <= keep_limit.min(buffered_limit(max_body, &p)))
        && !pipeline::reads_request_body(&p.s.ctx)
        && early.is_none()
    {
        let limit = keep_limit.min(buffered_limit(max_body, &p));
        let idle = p.shared.opts.header_read_timeout;
        let read = match read_whole(&mut p.s.ctx, body.take(), limit, idle).await {
            Ok(read) => read,
            Err(stop) => return body_stopped(p, stop, limit),
        };
        p.s.record.request_bytes = read.received;
        p.s.ctx.request_body = Some(read.bytes);
        p.s.request_trailers = read.trailers.map(Box::new);
    }
    let early = early.or_else(|| p.s.ctx.request_body.take());
    let mut kept: Option<bytes::Bytes> = None;
    // The body as a mirror copy carries it, when it is whole in memory (see `mirror`); for a
    // streamed one, where each chosen mirror will get it.
    let mirrors = if mirrored_route {
        super::mirror::chosen(route)
    } else {
        Vec::new()
    };
    let mut mirrored: Option<bytes::Bytes> = None;
    let mut later = Vec::new();
    let body = match body {
        // request_body: the plugins that read bodies see it (also an empty one: a plugin that
        // requires a body must see it missing) before anything goes upstream.
        body if pipeline::reads_request_body(&p.s.ctx) => {
            let limit = buffered_limit(max_body, &p);
            if content_length(&head).is_some_and(|n| n > limit) {
                return p.too_large(limit);
            }
            let idle = p.shared.opts.header_read_timeout;
            let ctx = &mut p.s.ctx;
            let read = match (early, body) {
                (Some(bytes), _) => {
                    let whole = http_body_util::Full::new(bytes);
                    pipeline::request_body(ctx, whole, limit, idle).await
                }
                (None, Some(body)) => pipeline::request_body(ctx, body, limit, idle).await,
                (None, None) => {
                    let empty = http_body_util::Empty::<bytes::Bytes>::new();
                    pipeline::request_body(ctx, empty, limit, idle).await
                }
            };
            match read {
                Ok(read) => {
                    p.s.record.request_bytes = read.received;
                    // A body read before access had its trailers kept then.
                    let trailers = read
                        .trailers
                        .or_else(|| p.s.request_trailers.take().map(|t| *t));
                    // The length changed with the plugins' edits: the encoder frames it anew.
                    head.headers.remove(header::CONTENT_LENGTH);
                    head.headers.remove(header::TRANSFER_ENCODING);
                    if replayable && read.bytes.len() as u64 <= keep_limit {
                        kept = Some(read.bytes.clone());
                    }
                    mirrored = Some(read.bytes.clone());
                    UpstreamBody::full(read.bytes).with_trailers(trailers)
                }
                Err(stop) => return body_stopped(p, stop, limit),
            }
        }
        _ if early.is_some() => {
            head.headers.remove(header::CONTENT_LENGTH);
            head.headers.remove(header::TRANSFER_ENCODING);
            let bytes = early.unwrap_or_default();
            if replayable && bytes.len() as u64 <= keep_limit {
                kept = Some(bytes.clone());
            }
            mirrored = Some(bytes.clone());
            UpstreamBody::full(bytes).with_trailers(p.s.request_trailers.take().map(|t| *t))
        }
        Some(body) if !body.is_end_stream() => {
            let stats = BodyStats::new();
            p.s.request_bytes = Some(stats.clone());
            let (to, from): (Vec<_>, Vec<_>) = mirrors
                .iter()
                .map(|_| tokio::sync::oneshot::channel())
                .unzip();
            later = from;
            UpstreamBody::streamed(body, stats, max_body).tee(keep_limit as usize, to)
        }
        _ => {
            if replayable {
                kept = Some(bytes::Bytes::new());
            }
            mirrored = Some(bytes::Bytes::new());
            UpstreamBody::empty()
        }
    };
    // Most routes forward the client's own path and query: its parsed URI is reused.
    let unchanged = head.uri.scheme().is_none()
        && head.uri.path_and_query().map(|pq| pq.as_str()) == Some(upstream_path.as_str());
    if !unchanged {
        head.uri = match upstream_path.parse() {
            Ok(uri) => uri,
            Err(_) => return p.error(StatusCode::INTERNAL_SERVER_ERROR, "invalid upstream URI"),
        };
    }
    head.version = http::Version::HTTP_11;
    let replay = kept.map(|body| Replay {
        method: head.method.clone(),
        uri: head.uri.clone(),
        headers: head.headers.clone(),
        body,
    });
    if let Some(page) = error_page.as_mut() {
        page.method = head.method.clone();
        page.headers = head.headers.clone();
    }
    if !mirrors.is_empty() {
        super::mirror::spawn_all(&rt, mirrors, route, &head, &added, mirrored, later);
    }
    let mut request = Request::from_parts(head, body);

    // balancer: pick, connect, send; retry on another target what failed.
    let mut excluded: Vec<usize> = Vec::new();
    let mut last_timeout = false;
    // One failure on a kept-alive connection may be the upstream's idle close crossing the
    // request: that retry keeps the target eligible. A second one counts against the target.
    let mut stale_retried = false;
    let checks = service.checks.as_deref();
    let healthy = |i: usize| checks.is_none_or(|c| c.is_healthy(&service.health[i]));
    let mut response = loop {
        let tries = p.s.ctx.tries.len();
        if tries > service.retries as usize {
            let status = if last_timeout {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            return p.error(
                status,
                "An invalid response was received from the upstream server",
            );
        }
        if tries > 0 && service.retry_on.backoff > 0 {
            backoff(service, deadline).await;
        }
        // The balanced target's key is borrowed from the service (no copy per request).
        let chosen_key: PoolKey;
        let (target, key, host_value) = match &p.s.ctx.upstream_target {
            // A plugin chose the target (Kong's `set_target`): no balancing.
            Some(chosen) => {
                chosen_key = PoolKey {
                    target: chosen.addr.clone(),
                    h2: service.h2,
                    tls: service.tls.clone(),
                };
                (None, &chosen_key, chosen.host_header.clone())
            }
            None => {
                let balancer = &service.balancer;
                let picked = balancer
                    .pick(hash_key, |i| healthy(i) && !excluded.contains(&i))
                    // Every healthy target was tried: one of them again, rather than none.
                    .or_else(|| balancer.pick(hash_key, healthy))
                    // Panic mode: with none healthy, all of them.
                    .or_else(|| {
                        checks
                            .filter(|c| c.panic)
                            .and_then(|_| balancer.pick(hash_key, |_| true))
                    });
                let Some(i) = picked else {
                    return p.error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no healthy upstream targets",
                    );
                };
                let host = service.balancer.target(i).host_header.clone();
                (Some(i), &service.keys[i], host)
            }
        };
        let began = Instant::now();
        p.s.ctx.tries.push(Try::new(key.target.clone()));
        p.s.record.target = Some(key.target.clone());
        if let Some(h) = &route.host_header {
            request.headers_mut().insert(header::HOST, h.clone());
        } else if !route.preserve_host {
            request.headers_mut().insert(header::HOST, host_value);
        }
        if service.h2 {
            set_absolute_uri(&mut request, &key.target, key.tls.is_some());
        }
        // Held until the request ends, for the algorithms that weigh load.
        if service.counts_load {
            p.s.upstream_load = target.map(|i| service.balancer.target(i).load.start());
        }
        let report = |outcome| {
            if let (Some(c), Some(i)) = (checks, target) {
                c.report(&service.health[i], outcome);
            }
        };
        let conn = match upstream::checkout(key, service.connect_timeout).await {
            Ok(c) => c,
            Err(e) => {
                last_timeout = matches!(e, upstream::ConnectError::Timeout(_));
                report(Outcome::ConnectFailure);
                fail_try(&mut p.s.ctx, e.to_string(), began);
                excluded.extend(target);
                continue;
            }
        };
        let reused = conn.reused;
        p.s.record.upstream_reused = Some(reused);
        // A pooled connection was taken at once: the try's start is when the request went.
        let sent_at = if reused { began } else { Instant::now() };
        p.s.ctx.timings.upstream_sent = Some(sent_at);
        // Pinned where it is built: passed by value, the send future (hundreds of bytes) was
        // copied twice more per request.
        let send = std::pin::pin!(conn.send(request, &added, service.write_timeout));
        let sent = wait_response(
            send,
            sent_at,
            p.s.request_bytes.as_deref(),
            service,
            deadline,
        )
        .await;
        let retry_left = tries < service.retries as usize;
        // The answer is looked at in place: the response is large, and each move of it is a
        // copy on every request.
        let mut again = None;
        if let Ok(Ok(resp)) = &sent {
            let status = resp.status().as_u16();
            let now = Instant::now();
            p.s.ctx.timings.upstream_headers = Some(now);
            if let (true, Some(i)) = (service.counts_load, target) {
                service.balancer.target(i).load.observe(now - sent_at);
            }
            report(Outcome::Status(status));
            if let Some(t) = p.s.ctx.tries.last_mut() {
                t.status = status;
            }
            again = replay
                .as_ref()
                .filter(|_| retry_left && service.retry_on.statuses.contains(&status))
                .map(|r| (r, status));
        }
        match sent {
            Ok(Ok(resp)) if again.is_none() => break resp,
            Ok(Ok(_)) => {
                let (r, status) = again.expect("checked above");
                fail_try(&mut p.s.ctx, format!("status {status}"), began);
                excluded.extend(target);
                request = r.request();
                last_timeout = false;
            }
            Ok(Err(e)) => match e.unsent {
                Some(unsent) => {
                    // Never acted on: safe to send again. A kept-alive connection the target
                    // closed says nothing about the target, so it stays eligible.
                    if reused && !stale_retried {
                        stale_retried = true;
                        // Common and harmless: not worth a warning.
                        tracing::debug!(target = %key.target, error = %e.error, "kept-alive upstream connection was closed; sending again");
                        if let Some(t) = p.s.ctx.tries.last_mut() {
                            t.failed(e.error.to_string(), began.elapsed());
                        }
                    } else {
                        fail_try(&mut p.s.ctx, e.error.to_string(), began);
                        report(Outcome::ConnectFailure);
                        excluded.extend(target);
                    }
                    request = unsent;
                    last_timeout = false;
                }
                None => {
                    fail_try(&mut p.s.ctx, e.error.to_string(), began);
                    // A malformed or cut request body is the client's fault (nginx: 400).
                    if p.s
                        .request_bytes
                        .as_ref()
                        .is_some_and(|s| s.client_error.load(Ordering::Relaxed))
                    {
                        return p.error(StatusCode::BAD_REQUEST, "malformed request body");
                    }
                    if p.s
                        .request_bytes
                        .as_ref()
                        .is_some_and(|s| s.too_large.load(Ordering::Relaxed))
                    {
                        return p.too_large(max_body);
                    }
                    report(Outcome::ConnectFailure);
                    match &replay {
                        Some(r) if retry_left => {
                            excluded.extend(target);
                            request = r.request();
                            last_timeout = false;
                        }
                        _ => {
                            return p.error(
                                StatusCode::BAD_GATEWAY,
                                "An invalid response was received from the upstream server",
                            )
                        }
                    }
                }
            },
            Err(TimedOut) => {
                fail_try(&mut p.s.ctx, "upstream timed out".into(), began);
                let client_deadline = deadline.is_some_and(|d| Instant::now() >= d);
                // Only the target's own slowness counts against it: not a client's short
                // gRPC deadline, nor a client whose upload stalled (the write timeout).
                let upload_stalled =
                    p.s.request_bytes
                        .as_ref()
                        .is_some_and(|s| !s.done.load(Ordering::Relaxed));
                if !client_deadline && !upload_stalled {
                    report(Outcome::Timeout);
                }
                match &replay {
                    Some(r) if retry_left && service.retry_on.timeouts && !client_deadline => {
                        excluded.extend(target);
                        request = r.request();
                        last_timeout = true;
                        continue;
                    }
                    _ => {}
                }
                let mut early = EarlyResponse::message(
                    StatusCode::GATEWAY_TIMEOUT,
                    "The upstream server is timing out",
                );
                // The gRPC client's own deadline passed (not only the service's timeout).
                if p.s.grpc_deadline.is_some_and(|d| Instant::now() >= d) {
                    early.headers.insert(
                        grpc::GRPC_STATUS,
                        HeaderValue::from(grpc::code::DEADLINE_EXCEEDED),
                    );
                }
                return p.respond(early);
            }
        }
    };
    p.s.record.tries = p.s.ctx.tries.len();
    if p.s.record.tries > 1 {
        // The answered try's time, only when the tries are logged (not on every request).
        if let (Some(t), Some(sent), Some(head)) = (
            p.s.ctx.tries.last_mut(),
            p.s.ctx.timings.upstream_sent,
            p.s.ctx.timings.upstream_headers,
        ) {
            t.answered(t.status, head - sent);
        }
        p.s.record.upstream_tries = Some(p.s.ctx.tries.as_slice().into());
    }

    // An upstream status the route's fallback answers instead: its answer goes on from here.
    let mut service = service;
    if let Some(page) = error_page {
        let status = response.status();
        let fallback = route
            .fallback
            .as_deref()
            .filter(|f| f.intercepts(status.as_u16()));
        if let Some(fallback) = fallback {
            let replaced = std::mem::replace(&mut response, Response::new(ResponseBody::Done));
            fallback::discard(replaced.into_body());
            // The replaced answer's load ends here.
            p.s.upstream_load = None;
            let to = &rt.services[fallback.service];
            let asked = ask_fallback(
                &mut p, route, fallback, to, page, status, &added, service.h2, deadline,
            );
            match Box::pin(asked).await {
                Some(answer) => {
                    response = answer;
                    service = to;
                }
                None => {
                    let message = status.canonical_reason().unwrap_or("Upstream error");
                    return p.error(status, message);
                }
            }
        }
    }

    // header_filter.
    let (mut parts, mut body) = response.into_parts();
    let switching = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    if switching && !headers::upgraded_as_asked(asked_upgrade.as_ref(), &parts.headers) {
        return p.error(
            StatusCode::BAD_GATEWAY,
            "upstream switched to a protocol that was not asked for",
        );
    }
    // (An upstream that refuses the upgrade has its answer passed back as it is.)
    if let (true, Some(key)) = (switching, &h2_websocket) {
        if !headers::websocket_accepted(key, &parts.headers) {
            return p.error(
                StatusCode::BAD_GATEWAY,
                "upstream answered the WebSocket upgrade without the right Sec-WebSocket-Accept",
            );
        }
    }
    if switching {
        match (client_upgrade, body.take_upgraded()) {
            (Some(client), Some(upstream)) => {
                tokio::spawn(tunnel(client, upstream, p.shared.opts.tunnel_idle_timeout));
            }
            _ => {
                return p.error(
                    StatusCode::BAD_GATEWAY,
                    "upstream switched protocols unasked",
                )
            }
        }
    }
    let mut announced = None;
    if h1_client_trailers && !body.is_end_stream() {
        let grpc = p.s.grpc.is_some() || grpc::is_grpc(&parts.headers);
        announced = headers::trailers_to_announce(&parts.headers, grpc);
    }
    let _ = headers::remove_hop_by_hop(&mut parts.headers, switching && h2_websocket.is_none());
    if let Some(names) = announced {
        parts.headers.insert(header::TRAILER, names);
    }
    if switching && h2_websocket.is_some() {
        // RFC 8441 §5: the HTTP/2 client's tunnel opens with a 200, without the HTTP/1.1
        // handshake's headers.
        parts.status = StatusCode::OK;
        parts.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
    }
    // One growth of the map instead of one per added header.
    parts.headers.reserve(4);
    if rt.settings.latency_headers {
        let t = p.s.ctx.timings;
        let proxy_ms = t
            .upstream_sent
            .map_or(0, |s| (s - t.start).as_millis() as u64);
        let upstream_ms = match (t.upstream_sent, t.upstream_headers) {
            (Some(s), Some(h)) => (h - s).as_millis() as u64,
            _ => 0,
        };
        parts.headers.insert(PROXY_LATENCY, millis_value(proxy_ms));
        parts
            .headers
            .insert(UPSTREAM_LATENCY, millis_value(upstream_ms));
    }
    if rt.settings.upstream_tries_header {
        parts
            .headers
            .insert(UPSTREAM_TRIES, HeaderValue::from(p.s.ctx.tries.len()));
    }
    pipeline::header_filter(&mut p.s.ctx, &mut parts);
    // Weir's own affinity cookie goes after the plugins: those that rewrite the upstream's
    // cookies (cookie-rewrite) leave it as its Upstream configures it.
    if let Some(cookie) = set_cookie {
        parts.headers.append(header::SET_COOKIE, cookie);
    }
    parts
        .headers
        .append(header::VIA, headers::via(parts.version));
    p.s.record.status = parts.status.as_u16();
    if p.s.grpc.is_some() {
        // A trailers-only answer carries its status in the head; others in the trailers.
        p.s.record.grpc_status = grpc::status_in(&parts.headers);
    }
    let read_timeout = service.read_timeout;
    let body = ProxyBody::upstream(body, read_timeout, p.s);
    Response::from_parts(parts, body)
}

/// What an error page request is made of: the request as it went upstream (its method and
/// headers, without a body) and the path and query the client asked for.
struct ErrorPage {
    method: http::Method,
    headers: http::HeaderMap,
    original_uri: Option<HeaderValue>,
}

impl ErrorPage {
    /// For a route whose fallback replaces some statuses (boxed: the others carry a `None`).
    #[inline(always)]
    fn start(route: &CompiledRoute, head: &RequestHead) -> Option<Box<ErrorPage>> {
        if !route.fallback.as_ref()?.intercepts_any {
            return None;
        }
        let original_uri = head
            .uri
            .path_and_query()
            .and_then(|pq| HeaderValue::from_str(pq.as_str()).ok());
        // Method and headers are taken as they go upstream.
        Some(Box::new(ErrorPage {
            method: http::Method::GET,
            headers: http::HeaderMap::new(),
            original_uri,
        }))
    }
}

/// Asks the route's fallback service for the error page of an upstream answer `status`: the
/// request's method and headers, path `/`, no body, `X-Code` and the rest. Connection failures
/// try another target, as `retries` allows; `None` when no answer came. The tries are logged
/// after the replaced answer's.
#[allow(clippy::too_many_arguments)]
async fn ask_fallback(
    p: &mut Pending,
    route: &CompiledRoute,
    fallback: &CompiledFallback,
    service: &CompiledService,
    page: Box<ErrorPage>,
    status: StatusCode,
    added: &Added,
    headers_have_added: bool,
    deadline: Option<Instant>,
) -> Option<Response<ResponseBody>> {
    let ErrorPage {
        method,
        mut headers,
        original_uri,
    } = *page;
    fallback::error_page_headers(&mut headers, fallback, status, original_uri);
    // The proxy's own headers: in the map already after an HTTP/2 service, beside it after an
    // HTTP/1.1 one (the encoder writes them; HTTP/2 needs them in the map).
    let none = Added::default();
    let added = match (headers_have_added, service.h2) {
        (true, _) => &none,
        (false, false) => added,
        (false, true) => {
            for (name, value) in added.iter() {
                headers.append(name.clone(), value.clone());
            }
            &none
        }
    };
    let uri: http::Uri = fallback::error_page_path(service.path.as_deref())
        .parse()
        .ok()?;
    // The replaced answer's try gets its time, as the last of several tries does.
    if let (Some(t), Some(sent), Some(head)) = (
        p.s.ctx.tries.last_mut(),
        p.s.ctx.timings.upstream_sent,
        p.s.ctx.timings.upstream_headers,
    ) {
        t.answered(t.status, head.saturating_duration_since(sent));
    }
    let checks = service.checks.as_deref();
    let healthy = |i: usize| checks.is_none_or(|c| c.is_healthy(&service.health[i]));
    let mut excluded: Vec<usize> = Vec::new();
    let mut answer = None;
    for _ in 0..=service.retries {
        let balancer = &service.balancer;
        let picked = balancer
            .pick(None, |i| healthy(i) && !excluded.contains(&i))
            .or_else(|| balancer.pick(None, healthy))
            .or_else(|| {
                checks
                    .filter(|c| c.panic)
                    .and_then(|_| balancer.pick(None, |_| true))
            });
        let Some(i) = picked else { break };
        let key = &service.keys[i];
        let report = |outcome| {
            if let Some(c) = checks {
                c.report(&service.health[i], outcome);
            }
        };
        let mut request = Request::new(UpstreamBody::empty());
        *request.method_mut() = method.clone();
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = headers.clone();
        if let Some(h) = &route.host_header {
            request.headers_mut().insert(header::HOST, h.clone());
        } else if !route.preserve_host {
            let host = balancer.target(i).host_header.clone();
            request.headers_mut().insert(header::HOST, host);
        }
        if service.h2 {
            set_absolute_uri(&mut request, &key.target, key.tls.is_some());
        }
        let began = Instant::now();
        p.s.ctx.tries.push(Try::new(key.target.clone()));
        p.s.record.target = Some(key.target.clone());
        if service.counts_load {
            p.s.upstream_load = Some(balancer.target(i).load.start());
        }
        let conn = match upstream::checkout(key, service.connect_timeout).await {
            Ok(c) => c,
            Err(e) => {
                report(Outcome::ConnectFailure);
                fail_try(&mut p.s.ctx, e.to_string(), began);
                excluded.push(i);
                continue;
            }
        };
        p.s.record.upstream_reused = Some(conn.reused);
        let sent_at = Instant::now();
        let send = std::pin::pin!(conn.send(request, added, service.write_timeout));
        match wait_response(send, sent_at, None, service, deadline).await {
            Ok(Ok(resp)) => {
                let now = Instant::now();
                p.s.ctx.timings.upstream_headers = Some(now);
                let status = resp.status().as_u16();
                if service.counts_load {
                    balancer.target(i).load.observe(now - sent_at);
                }
                report(Outcome::Status(status));
                if let Some(t) = p.s.ctx.tries.last_mut() {
                    t.answered(status, began.elapsed());
                }
                // Nothing asked it to switch protocols.
                if status == 101 {
                    fail_try(&mut p.s.ctx, "switched protocols unasked".into(), began);
                    fallback::discard(resp.into_body());
                } else {
                    answer = Some(resp);
                }
                break;
            }
            Ok(Err(e)) => {
                fail_try(&mut p.s.ctx, e.error.to_string(), began);
                report(Outcome::ConnectFailure);
                // Sent again only when the upstream cannot have acted on it.
                if e.unsent.is_none() {
                    break;
                }
                excluded.push(i);
            }
            Err(TimedOut) => {
                fail_try(&mut p.s.ctx, "upstream timed out".into(), began);
                report(Outcome::Timeout);
                break;
            }
        }
    }
    p.s.record.tries = p.s.ctx.tries.len();
    p.s.record.upstream_tries = Some(p.s.ctx.tries.as_slice().into());
    answer
}

/// Records why the last try failed, and logs it naming the target.
fn fail_try(ctx: &mut RequestCtx, error: String, began: Instant) {
    let Some(t) = ctx.tries.last_mut() else {
        return;
    };
    tracing::warn!(target = %t.target, error = %error, "upstream try failed");
    t.failed(error, began.elapsed());
}

/// What is needed to send a request again after the upstream saw it.
struct Replay {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    body: bytes::Bytes,
}

impl Replay {
    fn request(&self) -> Request<UpstreamBody> {
        let mut r = Request::new(UpstreamBody::full(self.body.clone()));
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// Reads the whole request body, up to `limit`, no plugin seeing the chunks; the caller keeps
/// it in `ctx.request_body` (what then goes upstream, with its exact length).
async fn read_whole(
    ctx: &mut RequestCtx,
    body: Option<Incoming>,
    limit: u64,
    idle: Duration,
) -> Result<pipeline::Collected, BodyStop> {
    match body {
        Some(b) => pipeline::read_body_before_access(ctx, b, limit, idle).await,
        None => Ok(pipeline::Collected::default()),
    }
}

/// How much of a request body may be held in memory: `--max-buffered-body`, or the body limit
/// in force (`max_body`, 0 for none) when lower.
fn buffered_limit(max_body: u64, p: &Pending) -> u64 {
    match max_body {
        0 => p.shared.opts.max_buffered_body,
        n => n.min(p.shared.opts.max_buffered_body),
    }
}

/// The answer when reading a request body in full stopped short.
fn body_stopped(p: Pending, stop: BodyStop, limit: u64) -> Response<ProxyBody> {
    match stop {
        BodyStop::Respond(r) => p.respond(r),
        BodyStop::TooLarge => p.too_large(limit),
        BodyStop::Timeout => p.error(StatusCode::REQUEST_TIMEOUT, "request body timed out"),
        BodyStop::Client(e) => {
            tracing::debug!(error = %e, "client request body failed");
            p.error(StatusCode::BAD_REQUEST, "malformed request body")
        }
    }
}

fn content_length(head: &RequestHead) -> Option<u64> {
    head.headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

fn redirect_to_https(
    p: Pending,
    route: &CompiledRoute,
    host: &str,
    head: &RequestHead,
) -> Response<ProxyBody> {
    let mut location = format!("https://{host}{}", head.uri.path());
    if let Some(q) = head.uri.query() {
        location.push('?');
        location.push_str(q);
    }
    let mut early = EarlyResponse::message(route.https_redirect, "Please use HTTPS protocol");
    if let Ok(v) = HeaderValue::from_str(&location) {
        early.headers.insert(header::LOCATION, v);
    }
    p.respond(early)
}

/// Sends the client to its path with encoded slashes decoded (the escaped-slashes policy
/// `unescape-and-redirect`), keeping the query.
fn redirect_to_normal_path(p: Pending, head: &RequestHead) -> Response<ProxyBody> {
    // `//evil.example/` would be another host to a browser: one leading slash only.
    let mut location = format!("/{}", p.s.record.path.trim_start_matches('/'));
    if let Some(q) = head.uri.query() {
        location.push('?');
        location.push_str(q);
    }
    let mut early = EarlyResponse::message(
        StatusCode::TEMPORARY_REDIRECT,
        "The request path had encoded slashes",
    );
    if let Ok(v) = HeaderValue::from_str(&location) {
        early.headers.insert(header::LOCATION, v);
    }
    p.respond(early)
}

/// The path and query sent upstream: a plugin's rewrite, or strip_path and the service prefix.
// One call site on the hot path: kept inline however large `handle` grows (out of line it cost
// ~150 instructions per request).
#[inline(always)]
fn upstream_path(
    ctx: &mut RequestCtx,
    route: &CompiledRoute,
    service: &CompiledService,
    path: &str,
    routing: &str,
    matched_len: usize,
    query: Option<&str>,
) -> String {
    if let Some(uri) = ctx.upstream_uri.take() {
        return uri;
    }
    if let Some((template, regexes)) = &route.rewrite {
        let mut out = expand_rewrite(template, regexes, routing);
        if let Some(q) = query {
            out.push('?');
            out.push_str(q);
        }
        return out;
    }
    let rest = if route.strip_path {
        &path[matched_len.min(path.len())..]
    } else {
        path
    };
    let mut out = String::with_capacity(path.len() + 16);
    match service.path.as_deref() {
        Some(prefix) if prefix != "/" => {
            out.push_str(prefix);
            match (prefix.ends_with('/'), rest.starts_with('/')) {
                (true, true) => out.push_str(&rest[1..]),
                (false, false) if !rest.is_empty() => {
                    out.push('/');
                    out.push_str(rest);
                }
                _ => out.push_str(rest),
            }
        }
        _ => {
            if !rest.starts_with('/') {
                out.push('/');
            }
            out.push_str(rest);
        }
    }
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Fills `$1`…`$9` in `template` from the first regex rule that matches `path`.
fn expand_rewrite(template: &str, regexes: &[regex::Regex], path: &str) -> String {
    if !template.contains('$') {
        return template.to_string();
    }
    let caps = regexes.iter().find_map(|re| re.captures(path));
    let mut out = String::with_capacity(template.len() + path.len());
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek().and_then(|d| d.to_digit(10))) {
            ('$', Some(n)) if n > 0 => {
                chars.next();
                if let Some(m) = caps.as_ref().and_then(|c| c.get(n as usize)) {
                    out.push_str(m.as_str());
                }
            }
            _ => out.push(c),
        }
    }
    out
}

#[inline(always)]
fn prepare_request_headers(
    head: &mut RequestHead,
    added: &mut Added,
    p: &Pending,
    conn: &ConnInfo,
    route: &CompiledRoute,
    stripped: Option<&str>,
    client_host: Option<HeaderValue>,
) {
    // The Host survives in Host with preserve_host (as a plugin left it: Kong's upstream host);
    // for h2 clients it comes from :authority.
    let original_host = head.headers.get(header::HOST).cloned().or_else(|| {
        head.uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    // X-Forwarded-Host is always the client's.
    let forwarded_host = client_host.or_else(|| original_host.clone());
    headers::set_forwarded(
        &mut head.headers,
        added,
        &Forwarding {
            peer: conn.peer.ip(),
            peer_value: &conn.peer_value,
            client: p.s.ctx.client_ip,
            proto: if conn.tls { "https" } else { "http" },
            host: forwarded_host.as_ref(),
            port: &conn.port_value,
            stripped_prefix: route.forwarded_prefix.as_deref().or(stripped),
            plugins_ran: !p.s.ctx.plugins().is_empty(),
        },
        &p.shared.opts.trusted_proxies,
    );
    if route.preserve_host {
        if let Some(h) = original_host {
            head.headers.insert(header::HOST, h);
        }
    }
    added.push(header::VIA, headers::via(head.version));
}

/// A latency in milliseconds as a header value; the common single digits need no allocation.
fn millis_value(ms: u64) -> HeaderValue {
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match DIGITS.get(ms as usize) {
        Some(d) => HeaderValue::from_static(d),
        None => HeaderValue::from(ms),
    }
}

pub(super) fn set_absolute_uri(req: &mut Request<UpstreamBody>, target: &str, tls: bool) {
    let pq = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    // `:scheme` says how the upstream was reached.
    let scheme = if tls { "https" } else { "http" };
    // HTTP/2 names the host in `:authority`, and a `Host` beside it may not differ (RFC 9113
    // §8.3.1; servers such as Go's route on `:authority`): the Host chosen for the request
    // (the target's, the client's with preserve_host, or host_header) becomes `:authority`.
    // A request sent again (its connection failed before it went) has no `Host` any more:
    // the authority it got the first time stays.
    let host = req.headers_mut().remove(header::HOST);
    let kept = req.uri().authority().map(|a| a.as_str().to_owned());
    let uri = host
        .as_ref()
        .and_then(|h| h.to_str().ok())
        .or(kept.as_deref())
        .and_then(|h| format!("{scheme}://{h}{pq}").parse().ok())
        .or_else(|| format!("{scheme}://{target}{pq}").parse().ok());
    if let Some(uri) = uri {
        *req.uri_mut() = uri;
    }
    *req.version_mut() = http::Version::HTTP_2;
}

/// Whether a request over TLS names a host with a certificate of its own other than the one
/// the connection's server name got (HTTP/2 connection reuse across hosts): it gets 421, so
/// that the client opens a connection for that host. Hosts without their own certificate are
/// not refused.
fn misdirected(conn: &ConnInfo, rt: &crate::compile::Runtime, host: &str) -> bool {
    let Some(sni) = conn.sni.as_deref() else {
        return false;
    };
    let host = crate::router::strip_port(host);
    !host.is_empty()
        && !host.eq_ignore_ascii_case(sni)
        && match (rt.certs.find_own(host), rt.certs.find(Some(sni))) {
            (Some(asked), Some(got)) => !Arc::ptr_eq(&asked, &got),
            (Some(_), None) => true,
            (None, _) => false,
        }
}

/// The route's budget joined to the gRPC client's deadline: the earlier bounds every try.
fn route_deadline(route: &CompiledRoute, start: Instant, grpc: Option<Instant>) -> Option<Instant> {
    match route.timeout.and_then(|t| start.checked_add(t)) {
        Some(at) => Some(grpc.map_or(at, |d| d.min(at))),
        // No timeout, or one so long it is none.
        None => grpc,
    }
}

/// A retry's wait (the service's `retry_on.backoff`), within the route's budget.
async fn backoff(service: &CompiledService, deadline: Option<Instant>) {
    let mut wait = Duration::from_millis(service.retry_on.backoff);
    if let Some(d) = deadline {
        wait = wait.min(d.saturating_duration_since(Instant::now()));
    }
    tokio::time::sleep(wait).await;
}

/// The upstream did not answer in time.
struct TimedOut;

/// Waits for the response head: the write timeout applies while the request body is still
/// streaming (between two forwarded frames), the read timeout after it.
async fn wait_response<F, T>(
    mut fut: std::pin::Pin<&mut F>,
    sent: Instant,
    stats: Option<&BodyStats>,
    service: &CompiledService,
    limit: Option<Instant>,
) -> Result<T, TimedOut>
where
    F: std::future::Future<Output = T>,
{
    let deadline = || -> Instant {
        let at = match stats {
            Some(s) if !s.done.load(Ordering::Relaxed) => {
                s.last_progress().max(sent) + service.write_timeout
            }
            Some(s) => s.last_progress().max(sent) + service.read_timeout,
            None => sent + service.read_timeout,
        };
        limit.map_or(at, |l| l.min(at))
    };
    let mut timer = crate::timer::Timer::at(deadline());
    loop {
        // The upload's end moves the deadline (from the write timeout to the read timeout);
        // a body-less request (most) waits on two futures only.
        let fired = match stats.filter(|s| !s.done.load(Ordering::Relaxed)) {
            Some(uploading) => tokio::select! {
                r = fut.as_mut() => return Ok(r),
                _ = &mut timer => true,
                () = uploading.finished.notified() => false,
            },
            None => tokio::select! {
                r = fut.as_mut() => return Ok(r),
                _ = &mut timer => true,
            },
        };
        let at = deadline();
        if fired && Instant::now() >= at {
            return Err(TimedOut);
        }
        timer.reset(at);
    }
}

/// Copies bytes both ways between an upgraded client and upstream connection, until either
/// side closes or, with a non-zero `idle`, no byte went either way for that long.
async fn tunnel(client: hyper::upgrade::OnUpgrade, upstream: upstream::Upgraded, idle: Duration) {
    let client = match client.await {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let mut c = TokioIo::new(client);
    let mut u = upstream.stream;
    // What the upstream sent right behind its 101 head belongs to the client first.
    if !upstream.read_ahead.is_empty()
        && tokio::io::AsyncWriteExt::write_all(&mut c, &upstream.read_ahead)
            .await
            .is_err()
    {
        return;
    }
    if idle.is_zero() {
        let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
        return;
    }
    let started = tokio::time::Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let mut c = tunnel::Watched::new(c, last.clone(), started);
    let mut u = tunnel::Watched::new(u, last.clone(), started);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut c, &mut u) => {}
        () = tunnel::idle_for(idle, &last, started) => {
            tracing::debug!(idle_s = idle.as_secs_f64(), "closing an idle tunnel");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::Balancer;
    use crate::pipeline::RouteChain;
    use std::time::Duration;

    #[test]
    fn http2_upstreams_get_the_chosen_host_as_authority_also_when_sent_again() {
        let mut req = Request::new(UpstreamBody::empty());
        *req.uri_mut() = "/a?b".parse().unwrap();
        req.headers_mut()
            .insert(header::HOST, HeaderValue::from_static("client.test"));
        set_absolute_uri(&mut req, "10.0.0.5:50051", false);
        assert_eq!(req.uri(), "http://client.test/a?b");
        assert!(
            req.headers().get(header::HOST).is_none(),
            "no Host beside :authority"
        );
        // Sent again after its connection failed (no Host any more): the same authority.
        set_absolute_uri(&mut req, "10.0.0.6:50051", true);
        assert_eq!(req.uri(), "https://client.test/a?b");
        // Nothing chosen: the target.
        let mut req = Request::new(UpstreamBody::empty());
        *req.uri_mut() = "/".parse().unwrap();
        set_absolute_uri(&mut req, "10.0.0.5:50051", false);
        assert_eq!(req.uri(), "http://10.0.0.5:50051/");
    }

    fn route(strip: bool) -> CompiledRoute {
        CompiledRoute {
            mirrors: Box::new([]),
            timeout: None,
            id: "r".into(),
            strip_path: strip,
            preserve_host: false,
            https_redirect: StatusCode::UPGRADE_REQUIRED,
            service: Some(0),
            chain: RouteChain {
                base: Arc::from(vec![]),
                by_consumer: Default::default(),
            },
            host_header: None,
            rewrite: None,
            upgrade_protocols: Vec::new(),
            canary: None,
            fallback: None,
            access_log: true,
            forwarded_prefix: None,
            backends: None,
        }
    }

    fn service(path: Option<&str>) -> CompiledService {
        CompiledService {
            id: "s".into(),
            path: path.map(str::to_string),
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(1),
            retries: 0,
            retry_on: Default::default(),
            h2: false,
            tls: None,
            upstream: "s".into(),
            balancer: Balancer::new(vec![], crate::balancer::Algorithm::RoundRobin),
            keys: Vec::new(),
            checks: None,
            health: Vec::new(),
            hash: None,
            probe_tls: None,
            counts_load: false,
            weighted: Box::default(),
        }
    }

    fn up(
        strip: bool,
        prefix: Option<&str>,
        path: &str,
        matched: usize,
        q: Option<&str>,
    ) -> String {
        let mut ctx = RequestCtx::new([127, 0, 0, 1].into(), 1, Arc::from(vec![]));
        upstream_path(
            &mut ctx,
            &route(strip),
            &service(prefix),
            path,
            path,
            matched,
            q,
        )
    }

    #[test]
    fn rewrites_fill_capture_groups() {
        let re = vec![regex::Regex::new("^(?:/api/v([0-9]+)/(.*))").unwrap()];
        assert_eq!(
            expand_rewrite("/v$1/$2", &re, "/api/v2/users/7"),
            "/v2/users/7"
        );
        assert_eq!(expand_rewrite("/fixed", &re, "/api/v2/x"), "/fixed");
        assert_eq!(expand_rewrite("/x/$3$", &re, "/api/v2/x"), "/x/$");
        assert_eq!(expand_rewrite("/$1", &re, "/nomatch"), "/");
    }

    #[test]
    fn upstream_paths() {
        assert_eq!(up(false, None, "/api/x", 4, Some("a=1")), "/api/x?a=1");
        assert_eq!(up(true, None, "/api/x", 4, None), "/x");
        assert_eq!(up(true, None, "/api", 4, None), "/");
        assert_eq!(up(true, Some("/v1"), "/api/x", 4, None), "/v1/x");
        assert_eq!(up(true, Some("/v1/"), "/api/x", 4, None), "/v1/x");
        assert_eq!(up(true, Some("/v1"), "/api", 4, None), "/v1");
        assert_eq!(up(false, Some("/v1"), "/api", 4, None), "/v1/api");
        assert_eq!(up(true, None, "/v2/x/tail", 5, None), "/tail");
    }
}
