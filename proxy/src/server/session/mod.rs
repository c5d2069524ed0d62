//! One request as a session: the state a request gathers from its head to its log, and a
//! method per step of Kong's run loop on it, driven by [`Session::run`]:
//!
//! | step | method | file |
//! |---|---|---|
//! | edge rules: one Host, `421` across certificates | `edge` | `edge.rs` |
//! | rewrite: the global plugins | `rewrite` | `route.rs` |
//! | normalise and route; redirects to HTTPS or a decoded path | `route` | `route.rs` |
//! | access: the backend (canary, weights), the route's plugins, the service or fallback | `access` | `access.rs` |
//! | the upstream request: head, body (read, replayed, mirrored), mirrors | `upstream_request` | `request.rs` |
//! | balancer: pick, connect, send, retry | `balance` | `balance.rs` |
//! | the fallback's error page instead of an upstream status | `error_page` | `fallback.rs` |
//! | header_filter, upgrades; body_filter and log follow in the body | `respond_upstream` | `respond.rs` |
//!
//! Any step may answer the request itself: it returns `Err(Answer)` (a boxed
//! `EarlyResponse`), and [`Session::respond`] sends that through header_filter, body_filter
//! and log. The session holds what the steps share (the request between tries, the upstream's
//! answer, the headers Weir adds); a step's own results are small values. The log phase
//! runs in one place whatever path the request took: the [`pipeline::Session`] that the
//! response body owns logs the request when it is dropped (answered, answered early, failed
//! over, tunnelled, or cancelled in any step, then with status 499).

mod access;
mod balance;
mod edge;
mod fallback;
mod request;
mod respond;
mod route;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::headers;
use super::Shared;
use crate::compile::{CompiledRoute, CompiledService, Runtime};
use crate::pipeline::{self, ConnActivity, ProxyBody};
use crate::plugins::{EarlyResponse, RequestHead};
use crate::tls::{ClientCheck, PeerCert};
use crate::upstream::{Added, ResponseBody, UpstreamBody};

pub(super) use request::set_absolute_uri;

const SERVER: HeaderValue = HeaderValue::from_static("weir");

/// What the session knows about the client connection (built once per connection).
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
    /// What the handshake checked of the client's certificate, when it asked for one.
    pub client_check: Option<Arc<ClientCheck>>,
    /// The certificate the client presented, when the handshake asked for one.
    pub client_cert: Option<Arc<PeerCert>>,
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
            client_check: None,
            client_cert: None,
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

/// One request's state, from its head to the response handed to the connection.
pub(super) struct Session<'t> {
    shared: &'t Arc<Shared>,
    conn: &'t ConnInfo,
    /// The routing table the request started with (a swap during the request changes nothing).
    rt: &'t Arc<Runtime>,
    /// Context, log record, in-flight mark: logs the request when dropped.
    s: Box<pipeline::Session>,
    head: RequestHead,
    /// The client's body, until a step reads or forwards it (`None`: none, or taken).
    body: Option<Incoming>,
    client: Client,
    /// Headers the proxy adds upstream (written beside the head by the HTTP/1.1 encoder, or
    /// in it for HTTP/2).
    added: Added,
    /// The request as it goes upstream, between tries (the balancer takes it for each).
    request: Option<Request<UpstreamBody>>,
    /// The upstream's answer, once one came.
    response: Option<Response<ResponseBody>>,
}

/// What the edge learned of the client's request that later steps act on.
struct Client {
    /// Why the Host is unusable, if it is (answered 400 by the first step).
    host_problem: Option<&'static str>,
    /// The key of an RFC 8441 WebSocket (HTTP/2 `CONNECT`), sent upstream as an HTTP/1.1
    /// upgrade: Weir made the key and checks the answer.
    h2_websocket: Option<HeaderValue>,
    /// The client asked to switch protocols.
    upgrade: bool,
    /// The client accepts trailers (`TE: trailers`).
    accepts_trailers: bool,
    /// An HTTP/1.1 client gets trailers only for fields the response announces (`Trailer`).
    h1_trailers: bool,
}

/// What the route lookup found.
struct Matched<'t> {
    route: &'t CompiledRoute,
    /// The matched prefix's length in the forwarded path (parameters included).
    matched_len: usize,
    /// The path routed on when it differs from the normalised path (`;` parameters removed).
    routing: Option<String>,
    /// The route's budget joined to a gRPC client's deadline.
    deadline: Option<Instant>,
}

/// The route and service serving the request, and what the later steps carry between them.
struct Plan<'t> {
    route: &'t CompiledRoute,
    service: &'t CompiledService,
    matched_len: usize,
    routing: Option<String>,
    deadline: Option<Instant>,
    /// What an error page request needs, on a route whose fallback replaces statuses.
    error_page: Option<Box<fallback::ErrorPage>>,
    /// The client's Host, for `X-Forwarded-Host`, when a plugin may have replaced it.
    client_host: Option<HeaderValue>,
    /// The body limit in force (0: none).
    max_body: u64,
    /// The upgrade the client asked for, when the route allows it.
    asked_upgrade: Option<HeaderValue>,
    /// The client side of an allowed upgrade.
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// Consistent hashing's key, and the affinity cookie to set.
    hash_key: Option<u64>,
    set_cookie: Option<HeaderValue>,
    /// The request as sent, when it may be sent again after the upstream saw it (boxed: most
    /// requests have none).
    replay: Option<Box<request::Replay>>,
}

/// What the response step needs of the earlier ones (the answer itself is in the session).
struct Answered<'t> {
    /// The service that answered (the fallback's, after an error page).
    service: &'t CompiledService,
    set_cookie: Option<HeaderValue>,
    asked_upgrade: Option<HeaderValue>,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
}

/// Serves one request (`body` is `None` when it has none); never fails (errors become
/// responses).
pub(super) async fn serve(
    shared: Arc<Shared>,
    conn: Arc<ConnInfo>,
    activity: Arc<ConnActivity>,
    head: RequestHead,
    body: Option<Incoming>,
) -> Response<ProxyBody> {
    let rt = shared.runtime.load_full();
    let mut session = Session::new(&shared, &conn, &rt, &activity, head, body);
    match session.run().await {
        Ok(answered) => session.respond_upstream(answered),
        Err(early) => session.respond(*early),
    }
}

impl<'t> Session<'t> {
    /// The steps in order. An `Err` is the proxy's own answer, from whichever step.
    ///
    /// Large values stay in the session rather than pass from step to step (the request, the
    /// answer, the added headers): each move of one is a copy on every request.
    async fn run(&mut self) -> Result<Answered<'t>, Answer> {
        self.edge()?;
        self.rewrite().await?;
        let matched = self.route()?;
        let mut plan = self.access(matched).await?;
        self.upstream_request(&mut plan).await?;
        self.balance(&plan).await?;
        let service = match plan.error_page.take() {
            Some(page) => self.error_page(&plan, page).await?,
            None => plan.service,
        };
        Ok(Answered {
            service,
            set_cookie: plan.set_cookie,
            asked_upgrade: plan.asked_upgrade,
            client_upgrade: plan.client_upgrade,
        })
    }

    /// Sends a response made by the proxy itself, through header_filter, body_filter and log.
    fn respond(mut self, mut early: EarlyResponse) -> Response<ProxyBody> {
        // Weir's refusals and failures, not a plugin's deliberate answers (a redirect, a 200).
        if self.s.grpc.is_some() && early.status.as_u16() >= 400 {
            let (answer, status) = super::grpc::trailers_only(early, self.s.grpc.as_ref());
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
        // The client left while the request was read: its answer goes nowhere.
        self.s.record.aborted = self.s.record.status == pipeline::CLIENT_CLOSED;
        let body = ProxyBody::full(early.body, Some(self.s));
        Response::from_parts(parts, body)
    }
}

/// The proxy's own answer to a request, from whichever step gave it (boxed: every step's
/// `Result` carries it, and the requests that are answered upstream should not pay for its
/// size).
type Answer = Box<EarlyResponse>;

/// The proxy's answer with a JSON `message`.
fn error(status: StatusCode, message: &str) -> Answer {
    Box::new(EarlyResponse::message(status, message))
}

/// 413, naming the limit the body went over.
fn too_large(limit: u64) -> Answer {
    let message = format!("Request size limit exceeded: at most {limit} bytes");
    error(StatusCode::PAYLOAD_TOO_LARGE, &message)
}

/// The request's declared body length.
fn content_length(head: &RequestHead) -> Option<u64> {
    head.headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}
