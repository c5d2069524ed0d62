//! The route's fallback answering instead of the upstream: an upstream status the fallback
//! intercepts is replaced by the fallback service's error page (ingress-nginx's
//! `custom-http-errors` with `default-backend`).

use std::time::Instant;

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};

use super::balance::{fail_try, pick, wait_response, TimedOut};
use super::request::set_absolute_uri;
use super::{error, Answer, Plan, Session};
use crate::compile::fallback::CompiledFallback;
use crate::compile::{CompiledRoute, CompiledService};
use crate::health::Outcome;
use crate::pipeline::Try;
use crate::plugins::RequestHead;
use crate::server::fallback;
use crate::upstream::{self, Added, ResponseBody, UpstreamBody};

/// What an error page request is made of: the request as it went upstream (its method and
/// headers, without a body) and the path and query the client asked for.
pub(super) struct ErrorPage {
    pub(super) method: http::Method,
    pub(super) headers: http::HeaderMap,
    original_uri: Option<HeaderValue>,
}

impl ErrorPage {
    /// For a route whose fallback replaces some statuses (boxed: the others carry a `None`).
    #[inline(always)]
    pub(super) fn start(route: &CompiledRoute, head: &RequestHead) -> Option<Box<ErrorPage>> {
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

/// How one try of an error page ended.
// Returned once per try and never stored: boxing the answer would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum PageTry {
    Answered(Response<ResponseBody>),
    /// The target failed before the request could have been acted on: another may answer.
    Another,
    /// No answer, and no other try.
    Stop,
}

impl<'t> Session<'t> {
    /// On a route whose fallback replaces some statuses: the fallback's error page instead
    /// of an upstream answer with one of them (then the status itself when the fallback gave
    /// no answer). Returns the service whose answer the session holds.
    pub(super) async fn error_page(
        &mut self,
        plan: &Plan<'t>,
        page: Box<ErrorPage>,
    ) -> Result<&'t CompiledService, Answer> {
        let Some(status) = self.response.as_ref().map(|r| r.status()) else {
            return Ok(plan.service);
        };
        let fallback = plan.route.fallback.as_deref();
        let Some(fallback) = fallback.filter(|f| f.intercepts(status.as_u16())) else {
            return Ok(plan.service);
        };
        if let Some(replaced) = self.response.take() {
            fallback::discard(replaced.into_body());
        }
        // The replaced answer's load ends here.
        self.s.upstream_load = None;
        let rt = self.rt;
        let to = &*rt.services[fallback.service];
        // Boxed: rarely taken, and its future would enlarge every request's.
        let asked = Box::pin(self.ask_fallback(plan, fallback, to, page, status));
        match asked.await {
            Some(response) => {
                self.response = Some(response);
                Ok(to)
            }
            None => Err(error(
                status,
                status.canonical_reason().unwrap_or("Upstream error"),
            )),
        }
    }

    /// Asks the route's fallback service for the error page of an upstream answer `status`:
    /// the request's method and headers, path `/`, no body, `X-Code` and the rest. Connection
    /// failures try another target, as `retries` allows; `None` when no answer came. The
    /// tries are logged after the replaced answer's.
    async fn ask_fallback(
        &mut self,
        plan: &Plan<'t>,
        fallback: &CompiledFallback,
        service: &CompiledService,
        page: Box<ErrorPage>,
        status: StatusCode,
    ) -> Option<Response<ResponseBody>> {
        let (request, added_beside) =
            error_page_request(plan, &self.added, fallback, service, *page, status)?;
        let none = Added::default();
        // A copy: the tries below borrow the session mutably (a rare path).
        let beside = if added_beside {
            self.added.clone()
        } else {
            none
        };
        // The replaced answer's try gets its time, as the last of several tries does.
        let t = &self.s.ctx.timings;
        if let (Some(sent), Some(head)) = (t.upstream_sent, t.upstream_headers) {
            if let Some(last) = self.s.ctx.tries.last_mut() {
                last.answered(last.status, head.saturating_duration_since(sent));
            }
        }
        let mut excluded: Vec<usize> = Vec::new();
        let mut answer = None;
        for _ in 0..=service.retries {
            let Some(i) = pick(service, None, &excluded) else {
                break;
            };
            match self.fallback_try(plan, service, i, &request, &beside).await {
                PageTry::Another => excluded.push(i),
                PageTry::Stop => break,
                PageTry::Answered(response) => {
                    answer = Some(response);
                    break;
                }
            }
        }
        self.s.record.tries = self.s.ctx.tries.len();
        self.s.record.upstream_tries = Some(self.s.ctx.tries.as_slice().into());
        answer
    }

    /// One try of the error page at target `i`.
    async fn fallback_try(
        &mut self,
        plan: &Plan<'t>,
        service: &CompiledService,
        i: usize,
        template: &Request<()>,
        added: &Added,
    ) -> PageTry {
        let (key, balancer) = (&service.keys[i], &service.balancer);
        let report = |outcome| {
            if let Some(c) = service.checks.as_deref() {
                c.report(&service.health[i], outcome);
            }
        };
        let mut request = Request::new(UpstreamBody::empty());
        *request.method_mut() = template.method().clone();
        *request.uri_mut() = template.uri().clone();
        *request.headers_mut() = template.headers().clone();
        if let Some(h) = &plan.route.host_header {
            request.headers_mut().insert(header::HOST, h.clone());
        } else if !plan.route.preserve_host {
            let host = balancer.target(i).host_header.clone();
            request.headers_mut().insert(header::HOST, host);
        }
        if service.h2 {
            set_absolute_uri(&mut request, &key.target, key.tls.is_some());
        }
        let began = Instant::now();
        self.s.ctx.tries.push(Try::new(key.target.clone()));
        self.s.record.target = Some(key.target.clone());
        if service.counts_load {
            self.s.upstream_load = Some(balancer.target(i).load.start());
        }
        let conn = match upstream::checkout(key, service.connect_timeout).await {
            Ok(conn) => conn,
            Err(e) => {
                report(Outcome::ConnectFailure);
                fail_try(&mut self.s.ctx, e.to_string(), began);
                return PageTry::Another;
            }
        };
        self.s.record.upstream_reused = Some(conn.reused);
        let sent_at = Instant::now();
        let send = std::pin::pin!(conn.send(request, added, service.write_timeout));
        match wait_response(send, sent_at, None, service, plan.deadline).await {
            Ok(Ok(resp)) => {
                let now = Instant::now();
                self.s.ctx.timings.upstream_headers = Some(now);
                let status = resp.status().as_u16();
                if service.counts_load {
                    balancer.target(i).load.observe(now - sent_at);
                }
                report(Outcome::Status(status));
                if let Some(t) = self.s.ctx.tries.last_mut() {
                    t.answered(status, began.elapsed());
                }
                if status != 101 {
                    return PageTry::Answered(resp);
                }
                // Nothing asked it to switch protocols.
                fail_try(&mut self.s.ctx, "switched protocols unasked".into(), began);
                fallback::discard(resp.into_body());
                PageTry::Stop
            }
            Ok(Err(e)) => {
                fail_try(&mut self.s.ctx, e.error.to_string(), began);
                report(Outcome::ConnectFailure);
                // Sent again only when the upstream cannot have acted on it.
                match e.unsent {
                    Some(_) => PageTry::Another,
                    None => PageTry::Stop,
                }
            }
            Err(TimedOut) => {
                fail_try(&mut self.s.ctx, "upstream timed out".into(), began);
                report(Outcome::Timeout);
                PageTry::Stop
            }
        }
    }
}

/// The error page request's head (method, headers, path), and whether the proxy's own
/// headers go beside it (for the HTTP/1.1 encoder) rather than in it.
fn error_page_request(
    plan: &Plan<'_>,
    added: &Added,
    fallback: &CompiledFallback,
    service: &CompiledService,
    page: ErrorPage,
    status: StatusCode,
) -> Option<(Request<()>, bool)> {
    let ErrorPage {
        method,
        mut headers,
        original_uri,
    } = page;
    fallback::error_page_headers(&mut headers, fallback, status, original_uri);
    // The proxy's own headers: in the map already after an HTTP/2 service, beside it after an
    // HTTP/1.1 one (the encoder writes them; HTTP/2 needs them in the map).
    let beside = match (plan.service.h2, service.h2) {
        (true, _) => false,
        (false, false) => true,
        (false, true) => {
            for (name, value) in added.iter() {
                headers.append(name.clone(), value.clone());
            }
            false
        }
    };
    let uri: http::Uri = fallback::error_page_path(service.path.as_deref())
        .parse()
        .ok()?;
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    Some((request, beside))
}
