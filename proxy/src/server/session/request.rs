//! The upstream request: its head (upgrade, path, forwarding headers), its body (streamed, or
//! read whole for the request_body phase, a retry or a mirror), and the mirrors' copies.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;

use super::{content_length, error, too_large, Answer, Plan, Session};
use crate::compile::{CompiledRoute, CompiledService};
use crate::pipeline::{self, BodyStop, RequestCtx};
use crate::server::headers::{self, Forwarding};
use crate::server::{mirror, ProxyOptions};
use crate::upstream::{BodyStats, UpstreamBody};

/// What is needed to send a request again after the upstream saw it.
pub(super) struct Replay {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Replay {
    /// The request, ready to send again.
    pub(super) fn request(&self) -> Request<UpstreamBody> {
        let mut r = Request::new(UpstreamBody::full(self.body.clone()));
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// The body as the upstream gets it, and what the mirrors' copies carry.
struct Body {
    upstream: UpstreamBody,
    /// The whole body, when it was read (kept for a retry when `replayable`).
    whole: Option<Bytes>,
    /// For a streamed body: where each chosen mirror gets it once it has streamed through.
    later: Vec<tokio::sync::oneshot::Receiver<Bytes>>,
}

impl<'t> Session<'t> {
    /// The request that goes upstream (the balancer sets its Host and, for HTTP/2, its URI);
    /// the mirrors' copies are on their way when it returns.
    pub(super) async fn upstream_request(&mut self, plan: &mut Plan<'t>) -> Result<(), Answer> {
        if plan.max_body > 0 && content_length(&self.head) > Some(plan.max_body) {
            return Err(too_large(plan.max_body));
        }
        let upstream_path = self.upstream_head(plan);
        // A request that may be sent again after the upstream saw it (`retry_on`) keeps its
        // body: idempotent, not a tunnel, and small enough (a large upload streams, and is
        // sent once).
        let replayable = !plan.service.retry_on.is_off()
            && plan.asked_upgrade.is_none()
            && headers::is_idempotent(&self.head.method);
        // A mirrored route's requests are copied, with their bodies where the mirror asks.
        let mirrors = if !plan.route.mirrors.is_empty() && plan.asked_upgrade.is_none() {
            mirror::chosen(plan.route)
        } else {
            Vec::new()
        };
        let with_body = mirrors.iter().filter(|m| m.body).count();
        let body = self
            .upstream_body(plan, replayable, with_body > 0, with_body)
            .await?;
        let head = &mut self.head;
        // Most routes forward the client's own path and query: its parsed URI is reused.
        let unchanged = head.uri.scheme().is_none()
            && head.uri.path_and_query().map(|pq| pq.as_str()) == Some(upstream_path.as_str());
        if !unchanged {
            head.uri = upstream_path
                .parse()
                .map_err(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "invalid upstream URI"))?;
        }
        head.version = http::Version::HTTP_11;
        let keep_limit = self.shared.opts.max_retry_body;
        plan.replay = body
            .whole
            .as_ref()
            .filter(|b| replayable && b.len() as u64 <= keep_limit)
            .map(|body| {
                Box::new(Replay {
                    method: head.method.clone(),
                    uri: head.uri.clone(),
                    headers: head.headers.clone(),
                    body: body.clone(),
                })
            });
        if let Some(page) = plan.error_page.as_mut() {
            page.method = head.method.clone();
            page.headers = head.headers.clone();
        }
        if !mirrors.is_empty() {
            let (route, added) = (plan.route, &self.added);
            let (shared, rt) = (self.shared, self.rt);
            mirror::spawn_all(
                shared, rt, mirrors, route, head, added, body.whole, body.later,
            );
        }
        let head = std::mem::replace(&mut self.head, Request::new(()).into_parts().0);
        self.request = Some(Request::from_parts(head, body.upstream));
        Ok(())
    }

    /// The head as it goes upstream, but for its URI: the upgrade allowed or not, `Expect`
    /// gone, the hash key read, the forwarding headers set. Returns the upstream path.
    fn upstream_head(&mut self, plan: &mut Plan<'t>) -> String {
        let (route, service) = (plan.route, plan.service);
        // Only protocols the route allows are switched to; the rest go on as plain requests.
        let head = &mut self.head;
        let upgrade = self.client.upgrade
            && headers::allow_upgrade(&mut head.headers, &route.upgrade_protocols);
        if upgrade {
            plan.asked_upgrade = head.headers.get(header::UPGRADE).cloned();
            plan.client_upgrade = head.extensions.remove::<hyper::upgrade::OnUpgrade>();
        }
        let path = self.s.record.path.as_str();
        let routing = plan.routing.as_deref().unwrap_or(path);
        let query = head.uri.query();
        let upstream_path = upstream_path(
            &mut self.s.ctx,
            route,
            service,
            path,
            routing,
            plan.matched_len,
            query,
        );
        let stripped = (route.strip_path && plan.matched_len > 0).then_some(plan.matched_len);
        // hyper answers `Expect: 100-continue` itself when the body is first read (the fast
        // path, which passes no body, never takes a request that has one).
        if self.body.is_some() || self.s.ctx.request_body.is_some() {
            head.headers.remove(header::EXPECT);
        }
        // Consistent hashing reads the request as the plugins left it, before it is rewritten.
        if let Some(h) = &service.hash {
            let k = h.key(self.s.ctx.client_ip, &head.headers, path, head.uri.query());
            (plan.hash_key, plan.set_cookie) = (k.hash, k.set_cookie);
        }
        self.forwarding_headers(plan, stripped);
        if service.h2 {
            self.added.append_to(&mut self.head.headers);
            // The one TE value HTTP/2 allows (RFC 9113 §8.2.2), and gRPC servers require it
            // (a gRPC-Web client from a browser cannot send it).
            if self.client.accepts_trailers || self.s.grpc.is_some() {
                let te = HeaderValue::from_static("trailers");
                self.head.headers.insert(header::TE, te);
            }
        }
        upstream_path
    }

    /// `X-Forwarded-*`, `X-Real-IP` and `Via`, and the Host kept with `preserve_host`;
    /// `stripped` is the length of the path prefix `strip_path` removed.
    // One call site on the hot path.
    #[inline(always)]
    fn forwarding_headers(&mut self, plan: &mut Plan<'t>, stripped: Option<usize>) {
        let (head, conn) = (&mut self.head, self.conn);
        let stripped = stripped.map(|n| &self.s.record.path[..n]);
        // The Host survives in Host with preserve_host (as a plugin left it: Kong's upstream
        // host); for h2 clients it comes from :authority.
        let original_host = head.headers.get(header::HOST).cloned().or_else(|| {
            head.uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        // X-Forwarded-Host is always the client's.
        let forwarded_host = plan.client_host.take().or_else(|| original_host.clone());
        headers::set_forwarded(
            &mut head.headers,
            &mut self.added,
            &Forwarding {
                peer: conn.peer.ip(),
                peer_value: &conn.peer_value,
                client: self.s.ctx.client_ip,
                proto: if conn.tls { "https" } else { "http" },
                host: forwarded_host.as_ref(),
                port: &conn.port_value,
                stripped_prefix: plan.route.forwarded_prefix.as_deref().or(stripped),
                plugins_ran: !self.s.ctx.plugins().is_empty(),
            },
            &self.shared.opts.trusted_proxies,
        );
        if plan.route.preserve_host {
            if let Some(h) = original_host {
                head.headers.insert(header::HOST, h);
            }
        }
        self.added.push(header::VIA, headers::via(head.version));
    }

    /// The body that goes upstream: read whole first when the request_body phase, a retry
    /// or a mirror needs it (and it is small enough), else streamed through.
    async fn upstream_body(
        &mut self,
        plan: &Plan<'t>,
        replayable: bool,
        mirrored: bool,
        mirrors: usize,
    ) -> Result<Body, Answer> {
        let shared = self.shared;
        let opts = &shared.opts;
        let (max_body, keep_limit) = (plan.max_body, opts.max_retry_body);
        // A body read before access (and perhaps edited there) is what goes upstream.
        let mut early = self.s.ctx.request_body.take();
        if early
            .as_ref()
            .is_some_and(|b| max_body > 0 && b.len() as u64 > max_body)
        {
            return Err(too_large(max_body));
        }
        let limit = keep_limit.min(buffered_limit(max_body, opts));
        if (replayable || mirrored)
            && early.is_none()
            && self.body.as_ref().is_some_and(|b| !b.is_end_stream())
            && content_length(&self.head).is_some_and(|n| n <= limit)
            && !pipeline::reads_request_body(&self.s.ctx)
        {
            let idle = opts.header_read_timeout;
            let read = read_whole(&mut self.s.ctx, self.body.take(), limit, idle)
                .await
                .map_err(|stop| body_stopped(stop, limit))?;
            self.s.record.request_bytes = read.received;
            self.s.request_trailers = read.trailers.map(Box::new);
            early = Some(read.bytes);
        }
        if pipeline::reads_request_body(&self.s.ctx) {
            return self.request_body_phase(max_body, early).await;
        }
        let head = &mut self.head;
        Ok(match (early, self.body.take()) {
            (Some(bytes), _) => {
                head.headers.remove(header::CONTENT_LENGTH);
                head.headers.remove(header::TRANSFER_ENCODING);
                let trailers = self.s.request_trailers.take().map(|t| *t);
                whole_body(bytes, trailers)
            }
            (None, Some(body)) if !body.is_end_stream() => {
                let stats = BodyStats::new();
                self.s.request_bytes = Some(stats.clone());
                let (to, later): (Vec<_>, Vec<_>) = (0..mirrors)
                    .map(|_| tokio::sync::oneshot::channel())
                    .unzip();
                let upstream =
                    UpstreamBody::streamed(body, stats, max_body).tee(keep_limit as usize, to);
                Body {
                    upstream,
                    whole: None,
                    later,
                }
            }
            _ => Body {
                upstream: UpstreamBody::empty(),
                whole: Some(Bytes::new()),
                later: Vec::new(),
            },
        })
    }

    /// request_body: the plugins that read bodies see it (also an empty one: a plugin that
    /// requires a body must see it missing) before anything goes upstream.
    async fn request_body_phase(
        &mut self,
        max_body: u64,
        early: Option<Bytes>,
    ) -> Result<Body, Answer> {
        let shared = self.shared;
        let opts = &shared.opts;
        let limit = buffered_limit(max_body, opts);
        if content_length(&self.head).is_some_and(|n| n > limit) {
            return Err(too_large(limit));
        }
        let idle = opts.header_read_timeout;
        let ctx = &mut self.s.ctx;
        let read = match (early, self.body.take()) {
            (Some(bytes), _) => {
                let whole = http_body_util::Full::new(bytes);
                pipeline::request_body(ctx, whole, limit, idle).await
            }
            (None, Some(body)) => pipeline::request_body(ctx, body, limit, idle).await,
            (None, None) => {
                let empty = http_body_util::Empty::<Bytes>::new();
                pipeline::request_body(ctx, empty, limit, idle).await
            }
        };
        let read = read.map_err(|stop| body_stopped(stop, limit))?;
        self.s.record.request_bytes = read.received;
        // A body read before access had its trailers kept then.
        let trailers = read
            .trailers
            .or_else(|| self.s.request_trailers.take().map(|t| *t));
        // The length changed with the plugins' edits: the encoder frames it anew.
        self.head.headers.remove(header::CONTENT_LENGTH);
        self.head.headers.remove(header::TRANSFER_ENCODING);
        Ok(whole_body(read.bytes, trailers))
    }
}

/// A body held whole, with its trailers.
fn whole_body(bytes: Bytes, trailers: Option<http::HeaderMap>) -> Body {
    Body {
        upstream: UpstreamBody::full(bytes.clone()).with_trailers(trailers),
        whole: Some(bytes),
        later: Vec::new(),
    }
}

/// Reads the whole request body, up to `limit`, no plugin seeing the chunks; the caller keeps
/// it (what then goes upstream, with its exact length).
pub(super) async fn read_whole(
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
pub(super) fn buffered_limit(max_body: u64, opts: &ProxyOptions) -> u64 {
    match max_body {
        0 => opts.max_buffered_body,
        n => n.min(opts.max_buffered_body),
    }
}

/// The answer when reading a request body in full stopped short.
pub(super) fn body_stopped(stop: BodyStop, limit: u64) -> Answer {
    match stop {
        BodyStop::Respond(r) => Box::new(r),
        BodyStop::TooLarge => too_large(limit),
        BodyStop::Timeout => error(StatusCode::REQUEST_TIMEOUT, "request body timed out"),
        // Nobody reads the answer: it only says, in the log, that the client left (499).
        BodyStop::ClientGone => error(client_closed(), "client closed the request"),
        BodyStop::Client(e) => {
            tracing::debug!(error = %e, "client request body failed");
            error(StatusCode::BAD_REQUEST, "malformed request body")
        }
    }
}

/// nginx's 499, "client closed request".
fn client_closed() -> StatusCode {
    StatusCode::from_u16(pipeline::CLIENT_CLOSED).unwrap_or(StatusCode::BAD_REQUEST)
}

/// Whether a streamed body failed on the client's side (malformed, or over the limit) rather
/// than the upstream's: the client's error, with the client's status.
pub(super) fn client_body_error(stats: Option<&BodyStats>, max_body: u64) -> Option<Answer> {
    let stats = stats?;
    if stats.client_gone.load(Ordering::Relaxed) {
        return Some(error(client_closed(), "client closed the request"));
    }
    if stats.client_error.load(Ordering::Relaxed) {
        return Some(error(StatusCode::BAD_REQUEST, "malformed request body"));
    }
    stats
        .too_large
        .load(Ordering::Relaxed)
        .then(|| too_large(max_body))
}

/// The path and query sent upstream: a plugin's rewrite, or strip_path and the service prefix.
// One call site on the hot path: kept inline (out of line it cost ~150 instructions per
// request).
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

/// Makes a request HTTP/2 to `target`: `:scheme`, and `:authority` from the Host chosen.
pub(in crate::server) fn set_absolute_uri(
    req: &mut Request<UpstreamBody>,
    target: &str,
    tls: bool,
) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balancer::Balancer;
    use crate::pipeline::RouteChain;
    use std::sync::Arc;
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
            upstream_error: StatusCode::BAD_GATEWAY,
            tls_hosts: None,
            response_rate: None,
            id: "r".into(),
            strip_path: strip,
            preserve_host: false,
            https_redirect: StatusCode::UPGRADE_REQUIRED,
            service: Some(0),
            chain: RouteChain {
                base: Arc::from(vec![]),
                by_consumer: Default::default(),
                satisfy_any: false,
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
            mirror_gate: Default::default(),
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
