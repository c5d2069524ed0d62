//! balancer: pick a target, connect, send, wait for the answer; a failed try goes to another
//! target as the service's `retries` and `retry_on` allow.

use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::StatusCode;

use super::request::{client_body_error, set_absolute_uri, Replay};
use super::{error, Answer, Plan, Session};
use crate::compile::CompiledService;
use crate::health::Outcome;
use crate::pipeline::{RequestCtx, Try};
use crate::plugins::EarlyResponse;
use crate::server::grpc;
use crate::upstream::{self, BodyStats, PoolKey};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the tries so far leave for the next.
#[derive(Default)]
struct Tries {
    /// Targets that failed this request.
    excluded: Vec<usize>,
    /// The last failure was a timeout (504 rather than 502 when no try is left).
    last_timeout: bool,
    /// One failure on a kept-alive connection may be the upstream's idle close crossing the
    /// request: that retry keeps the target eligible. A second one counts against the target.
    stale_retried: bool,
    /// When the first try began: `retry_on.timeout` counts from there.
    first: Option<Instant>,
}

impl Tries {
    /// Whether `retry_on.timeout` has passed since the first try began: no retry starts.
    fn out_of_time(&self, retry_on: &crate::config::RetryOn) -> bool {
        retry_on.timeout > 0
            && self
                .first
                .is_some_and(|f| f.elapsed() >= Duration::from_millis(retry_on.timeout))
    }
}

/// The target of one try.
struct Peer {
    /// The balanced target's index (`None`: a plugin chose the target).
    index: Option<usize>,
    /// The pool key of a target a plugin chose (the balanced ones are the service's).
    chosen: Option<PoolKey>,
    host: HeaderValue,
}

/// How one try ended.
///
/// Small on purpose: the request and the answer stay in the session (`request`,
/// `response`), so that no try copies them around.
enum Sent {
    /// No connection: the request was never sent (it is back in the session).
    NotConnected(upstream::ConnectError),
    /// The answer is in the session.
    Answered,
    /// The connection failed; the request is back in the session when the upstream cannot
    /// have acted on it (`true`).
    Failed(BoxError, bool),
    TimedOut,
}

/// What follows a try.
enum Next {
    /// The answer in the session is the request's.
    Answer,
    /// The request in the session goes to another try.
    Again,
}

impl<'t> Session<'t> {
    /// Tries targets until one answers, or the tries run out.
    pub(super) async fn balance(&mut self, plan: &Plan<'t>) -> Result<(), Answer> {
        let service = plan.service;
        let mut tries = Tries::default();
        loop {
            let done = self.s.ctx.tries.len();
            if done > service.retries as usize || (done > 0 && tries.out_of_time(&service.retry_on))
            {
                let status = if tries.last_timeout {
                    StatusCode::GATEWAY_TIMEOUT
                } else {
                    plan.route.upstream_error
                };
                return Err(bad_gateway(status));
            }
            if done > 0 && service.retry_on.backoff > 0 {
                backoff(service, plan.deadline).await;
            }
            let peer = self.upstream_peer(plan, &tries)?;
            let began = Instant::now();
            tries.first.get_or_insert(began);
            self.upstream_request_filter(plan, &peer);
            let sent = self.send(plan, &peer, began).await;
            if let Next::Answer = self.after_try(plan, &peer, &mut tries, sent, began)? {
                break;
            }
        }
        self.s.record.tries = self.s.ctx.tries.len();
        if self.s.record.tries > 1 {
            // The answered try's time, only when the tries are logged (not on every request).
            let t = &self.s.ctx.timings;
            if let (Some(sent), Some(head)) = (t.upstream_sent, t.upstream_headers) {
                if let Some(last) = self.s.ctx.tries.last_mut() {
                    last.answered(last.status, head - sent);
                }
            }
            self.s.record.upstream_tries = Some(self.s.ctx.tries.as_slice().into());
        }
        Ok(())
    }

    /// upstream_peer: the target a plugin chose, or the balancer's pick among the healthy
    /// targets not yet tried (then among all healthy, then, in panic mode, any).
    fn upstream_peer(&self, plan: &Plan<'t>, tries: &Tries) -> Result<Peer, Answer> {
        let service = plan.service;
        if let Some(chosen) = &self.s.ctx.upstream_target {
            let key = PoolKey {
                target: chosen.addr.clone(),
                h2: service.h2,
                tls: service.tls.clone(),
            };
            let host = chosen.host_header.clone();
            return Ok(Peer {
                index: None,
                chosen: Some(key),
                host,
            });
        }
        let Some(i) = pick(service, plan.hash_key, &tries.excluded) else {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no healthy upstream targets",
            ));
        };
        let host = service.balancer.target(i).host_header.clone();
        Ok(Peer {
            index: Some(i),
            chosen: None,
            host,
        })
    }

    /// upstream_request_filter: the try's Host (and `:authority`), and its record.
    fn upstream_request_filter(&mut self, plan: &Plan<'t>, peer: &Peer) {
        let (route, service) = (plan.route, plan.service);
        let Some(request) = self.request.as_mut() else {
            return;
        };
        let key = peer.key(service);
        self.s.ctx.tries.push(Try::new(key.target.clone()));
        self.s.record.target = Some(key.target.clone());
        if let Some(h) = &route.host_header {
            request.headers_mut().insert(header::HOST, h.clone());
        } else if !route.preserve_host {
            request
                .headers_mut()
                .insert(header::HOST, peer.host.clone());
        }
        if service.h2 {
            set_absolute_uri(request, &key.target, key.tls.is_some());
        }
        // Held until the request ends, for the algorithms that weigh load.
        if service.counts_load {
            self.s.upstream_load = peer.index.map(|i| service.balancer.target(i).load.start());
        }
    }

    /// Connects (a pooled connection, or a new one) and sends; waits for the answer's head.
    async fn send(&mut self, plan: &Plan<'t>, peer: &Peer, began: Instant) -> Sent {
        let service = plan.service;
        let conn = match upstream::checkout(peer.key(service), service.connect_timeout).await {
            Ok(c) => c,
            Err(e) => return Sent::NotConnected(e),
        };
        let Some(request) = self.request.take() else {
            return Sent::Failed("no request to send".into(), false);
        };
        let reused = conn.reused;
        self.s.record.upstream_reused = Some(reused);
        // A pooled connection was taken at once: the try's start is when the request went.
        let sent_at = if reused { began } else { Instant::now() };
        self.s.ctx.timings.upstream_sent = Some(sent_at);
        // Pinned where it is built: passed by value, the send future (hundreds of bytes) was
        // copied twice more per request.
        let send = std::pin::pin!(conn.send(request, &self.added, service.write_timeout));
        let stats = self.s.request_bytes.as_deref();
        match wait_response(send, sent_at, stats, service, plan.deadline).await {
            Ok(Ok(resp)) => {
                let now = Instant::now();
                self.s.ctx.timings.upstream_headers = Some(now);
                if let (true, Some(i)) = (service.counts_load, peer.index) {
                    service.balancer.target(i).load.observe(now - sent_at);
                }
                self.response = Some(resp);
                Sent::Answered
            }
            Ok(Err(e)) => {
                let unsent = e.unsent.is_some();
                self.request = e.unsent;
                Sent::Failed(e.error, unsent)
            }
            Err(TimedOut) => Sent::TimedOut,
        }
    }

    /// fail_to_connect and the retry decisions: the try's outcome reported to the health
    /// checks, and the answer, the request to send again, or the proxy's own answer.
    fn after_try(
        &mut self,
        plan: &Plan<'t>,
        peer: &Peer,
        tries: &mut Tries,
        sent: Sent,
        began: Instant,
    ) -> Result<Next, Answer> {
        let service = plan.service;
        let report = |outcome| peer.report(service, outcome);
        let replay = self.replay(plan, tries);
        match sent {
            Sent::NotConnected(e) => {
                report(Outcome::ConnectFailure);
                fail_try(&mut self.s.ctx, e.to_string(), began);
                let timeout = matches!(e, upstream::ConnectError::Timeout(_));
                tries.again(peer, timeout)
            }
            Sent::Answered => {
                let status = self.response.as_ref().map_or(0, |r| r.status().as_u16());
                report(Outcome::Status(status));
                if let Some(t) = self.s.ctx.tries.last_mut() {
                    t.status = status;
                }
                match replay.filter(|_| service.retry_on.statuses.contains(&status)) {
                    Some(r) => {
                        fail_try(&mut self.s.ctx, format!("status {status}"), began);
                        self.response = None;
                        self.request = Some(r.request());
                        tries.again(peer, false)
                    }
                    None => Ok(Next::Answer),
                }
            }
            Sent::Failed(error, unsent) => self.failed(plan, peer, tries, error, unsent, began),
            Sent::TimedOut => {
                fail_try(&mut self.s.ctx, "upstream timed out".into(), began);
                let client_deadline = plan.deadline.is_some_and(|d| Instant::now() >= d);
                // Only the target's own slowness counts against it: not a client's short
                // gRPC deadline, nor a client whose upload stalled (the write timeout).
                if !client_deadline && !upload_stalled(self.s.request_bytes.as_deref()) {
                    report(Outcome::Timeout);
                }
                match replay {
                    Some(r) if service.retry_on.timeouts && !client_deadline => {
                        self.request = Some(r.request());
                        tries.again(peer, true)
                    }
                    _ => Err(self.timed_out()),
                }
            }
        }
    }

    /// A try whose connection failed after it was taken: sent again when the upstream cannot
    /// have acted on it (or when it can be replayed), else the proxy's answer.
    fn failed(
        &mut self,
        plan: &Plan<'t>,
        peer: &Peer,
        tries: &mut Tries,
        error: BoxError,
        unsent: bool,
        began: Instant,
    ) -> Result<Next, Answer> {
        let report = |outcome| peer.report(plan.service, outcome);
        let replay = self.replay(plan, tries);
        match unsent {
            true => {
                // Never acted on: safe to send again. A kept-alive connection the target
                // closed says nothing about the target, so it stays eligible.
                if self.s.record.upstream_reused == Some(true) && !tries.stale_retried {
                    tries.stale_retried = true;
                    // Common and harmless: not worth a warning.
                    tracing::debug!(%error, "kept-alive upstream connection was closed; sending again");
                    if let Some(t) = self.s.ctx.tries.last_mut() {
                        t.failed(error.to_string(), began.elapsed());
                    }
                    tries.last_timeout = false;
                    return Ok(Next::Again);
                }
                fail_try(&mut self.s.ctx, error.to_string(), began);
                report(Outcome::ConnectFailure);
                tries.again(peer, false)
            }
            false => {
                fail_try(&mut self.s.ctx, error.to_string(), began);
                // A malformed request body is the client's fault (nginx: 400), and a client that left
                // is logged as such (499).
                let stats = self.s.request_bytes.as_deref();
                if let Some(answer) = client_body_error(stats, plan.max_body) {
                    return Err(answer);
                }
                report(Outcome::ConnectFailure);
                match replay {
                    Some(r) => {
                        self.request = Some(r.request());
                        tries.again(peer, false)
                    }
                    None => Err(bad_gateway(plan.route.upstream_error)),
                }
            }
        }
    }

    /// The request to send again, when a retry is left and the request can be replayed.
    fn replay<'p>(&self, plan: &'p Plan<'t>, tries: &Tries) -> Option<&'p Replay> {
        let retry_left = self.s.ctx.tries.len() <= plan.service.retries as usize
            && !tries.out_of_time(&plan.service.retry_on);
        plan.replay.as_deref().filter(|_| retry_left)
    }

    /// 504, and for a gRPC client whose own deadline passed, `DEADLINE_EXCEEDED`.
    fn timed_out(&self) -> Answer {
        let mut early = EarlyResponse::message(
            StatusCode::GATEWAY_TIMEOUT,
            "The upstream server is timing out",
        );
        if self.s.grpc_deadline.is_some_and(|d| Instant::now() >= d) {
            early.headers.insert(
                grpc::GRPC_STATUS,
                HeaderValue::from(grpc::code::DEADLINE_EXCEEDED),
            );
        }
        Box::new(early)
    }
}

impl Tries {
    /// Another try: the target failed this request (it is tried again only when no other is
    /// left).
    fn again(&mut self, peer: &Peer, timeout: bool) -> Result<Next, Answer> {
        self.excluded.extend(peer.index);
        self.last_timeout = timeout;
        Ok(Next::Again)
    }
}

impl Peer {
    /// Reports a try's outcome to the target's health checks.
    fn report(&self, service: &CompiledService, outcome: Outcome) {
        if let (Some(c), Some(i)) = (service.checks.as_deref(), self.index) {
            c.report(&service.health[i], outcome);
        }
    }

    /// The pool key of this try's target.
    fn key<'a>(&'a self, service: &'a CompiledService) -> &'a PoolKey {
        match (&self.chosen, self.index) {
            (Some(key), _) => key,
            (None, Some(i)) => &service.keys[i],
            (None, None) => unreachable!("a peer has a chosen key or a target index"),
        }
    }
}

/// The balancer's pick among the healthy targets not `excluded` (then among all healthy ones
/// rather than none, then, in panic mode, any).
pub(super) fn pick(
    service: &CompiledService,
    hash: Option<u64>,
    excluded: &[usize],
) -> Option<usize> {
    let checks = service.checks.as_deref();
    let healthy = |i: usize| checks.is_none_or(|c| c.is_healthy(&service.health[i]));
    let balancer = &service.balancer;
    balancer
        .pick(hash, |i| healthy(i) && !excluded.contains(&i))
        .or_else(|| balancer.pick(hash, healthy))
        .or_else(|| {
            checks
                .filter(|c| c.panic)
                .and_then(|_| balancer.pick(hash, |_| true))
        })
}

/// The proxy's answer when no try answered.
fn bad_gateway(status: StatusCode) -> Answer {
    error(
        status,
        "An invalid response was received from the upstream server",
    )
}

/// Whether a streamed upload is still under way (its stall is the client's, not the target's).
fn upload_stalled(stats: Option<&BodyStats>) -> bool {
    stats.is_some_and(|s| !s.done.load(std::sync::atomic::Ordering::Relaxed))
}

/// Records why the last try failed, and logs it naming the target.
pub(super) fn fail_try(ctx: &mut RequestCtx, error: String, began: Instant) {
    let Some(t) = ctx.tries.last_mut() else {
        return;
    };
    tracing::warn!(target = %t.target, error = %error, "upstream try failed");
    t.failed(error, began.elapsed());
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
pub(super) struct TimedOut;

/// Waits for the response head: the write timeout applies while the request body is still
/// streaming (between two forwarded frames), the read timeout after it.
pub(super) async fn wait_response<F, T>(
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
            Some(s) if !s.done.load(std::sync::atomic::Ordering::Relaxed) => {
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
        let fired = match stats.filter(|s| !s.done.load(std::sync::atomic::Ordering::Relaxed)) {
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
