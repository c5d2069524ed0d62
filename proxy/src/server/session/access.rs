//! access: which backend serves the request (a canary, or one of weighted backends), the
//! route's plugins (after reading the body when one of them needs it before access), and the
//! service that will be tried, or the route's fallback when that has nothing to try.

use http::header;
use http::StatusCode;

use super::request::{body_stopped, buffered_limit, read_whole};
use super::{
    content_length, error, fallback::ErrorPage, too_large, Answer, Matched, Plan, Session,
};
use crate::compile::CompiledService;
use crate::pipeline::{self, RouteChain};

impl<'t> Session<'t> {
    /// access: the backend chosen, the route's plugins run, the service settled.
    pub(super) async fn access(&mut self, m: Matched<'t>) -> Result<Plan<'t>, Answer> {
        let (service, chain, unusable) = self.backend(&m);
        // A route that replaces some upstream statuses keeps what the error page needs.
        let mut error_page = ErrorPage::start(m.route, &self.head);
        if let Some(s) = service {
            self.s.ctx.service = Some(s.id.clone());
            self.s.record.service = Some(s.id.clone());
        }
        // The client's Host, for X-Forwarded-Host, in case a plugin replaces the one sent upstream.
        let mut client_host = None;
        if !chain.base.is_empty() {
            client_host = self.head.headers.get(header::HOST).cloned();
            self.route_plugins(chain).await?;
        }
        let service = match (service, m.route.fallback.as_deref()) {
            (Some(s), None) => s,
            (None, _) if unusable => {
                return Err(error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the backend of this Route cannot be used",
                ))
            }
            (None, None) => {
                return Err(error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no Service configured for this Route",
                ))
            }
            // A target a plugin chose needs none of the service's.
            (Some(s), Some(_)) if self.s.ctx.upstream_target.is_some() || s.has_target_to_try() => {
                s
            }
            // Nothing to try: the fallback serves the request as the service would have (and its
            // own statuses are never replaced).
            (_, Some(fallback)) => {
                let s = &self.rt.services[fallback.service];
                self.s.ctx.service = Some(s.id.clone());
                self.s.record.service = Some(s.id.clone());
                error_page = None;
                s
            }
        };
        let max_body = match (self.shared.opts.max_body_size, self.s.ctx.body_limit) {
            (global, None) => global,
            (0, Some(plugin)) => plugin,
            (global, Some(plugin)) => global.min(plugin),
        };
        Ok(Plan {
            route: m.route,
            service,
            matched_len: m.matched_len,
            routing: m.routing,
            deadline: m.deadline,
            error_page,
            client_host,
            max_body,
            asked_upgrade: None,
            client_upgrade: None,
            hash_key: None,
            set_cookie: None,
            replay: None,
        })
    }

    /// The service and plugins that serve the request, decided on the headers before the
    /// route's plugins run: a canary's service (with the route's plugins), or one of weighted
    /// backends (each with its own plugins; one that cannot be used answers 500 after the
    /// plugins, so that a redirect still wins). The third value says the chosen backend
    /// cannot be used.
    fn backend(&self, m: &Matched<'t>) -> (Option<&'t CompiledService>, &'t RouteChain, bool) {
        let route = m.route;
        let (service, chain, unusable) = match (&route.backends, &route.canary) {
            (Some(b), _) => {
                let b = b.choose();
                (b.service, &b.chain, b.service.is_none())
            }
            (None, Some(c)) if c.chooses(&self.head.headers) => {
                (Some(c.service), &route.chain, false)
            }
            (None, _) => (route.service, &route.chain, false),
        };
        let rt = self.rt;
        (service.map(|i| &*rt.services[i]), chain, unusable)
    }

    /// The route's plugins' access, on the path that was routed on (normalised), as the
    /// upstream will see it; with the body read first when one of them may need it.
    async fn route_plugins(&mut self, chain: &'t RouteChain) -> Result<(), Answer> {
        let head = &mut self.head;
        let path = self.s.record.path.as_str();
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
        if pipeline::body_before_access(chain, &self.head) {
            let limit = buffered_limit(self.shared.opts.max_body_size, &self.shared.opts);
            if content_length(&self.head).is_some_and(|n| n > limit) {
                return Err(too_large(limit));
            }
            let idle = self.shared.opts.header_read_timeout;
            let read = read_whole(&mut self.s.ctx, self.body.take(), limit, idle)
                .await
                .map_err(|stop| body_stopped(stop, limit))?;
            self.s.record.request_bytes = read.received;
            self.s.ctx.request_body = Some(read.bytes);
            self.s.request_trailers = read.trailers.map(Box::new);
        }
        match pipeline::access(&mut self.s.ctx, &mut self.head, chain).await {
            Some(answer) => Err(Box::new(answer)),
            None => Ok(()),
        }
    }
}
