//! Rewrite (the global plugins, before a route is known), then the path normalised and
//! routed on, with the redirects routing may answer (to HTTPS, to a decoded path).

use std::borrow::Cow;
use std::time::Instant;

use http::header::{self, HeaderValue};
use http::StatusCode;

use super::{error, Answer, Matched, Session};
use crate::access_log::Unlogged;
use crate::compile::tls_hosts::Admit;
use crate::compile::{CompiledRoute, Runtime};
use crate::config::ClientProtocol;
use crate::pipeline;
use crate::plugins::EarlyResponse;
use crate::router::{
    has_escaped_slash, normalize_request_path, request_host, with_params_len, without_params,
    EscapedSlashes, Lookup, RequestView,
};
use crate::server::headers;
use crate::tls::client_cert::{ClientCheck, PeerCert, Refused};

impl<'t> Session<'t> {
    /// rewrite: the global plugins, on the request as the client sent it.
    pub(super) async fn rewrite(&mut self) -> Result<(), Answer> {
        if self.s.ctx.plugins().is_empty() {
            return Ok(());
        }
        match pipeline::rewrite(&mut self.s.ctx, &mut self.head).await {
            Some(answer) => Err(Box::new(answer)),
            None => Ok(()),
        }
    }

    /// The path normalised (kept in the log record, which owns it) and looked up.
    pub(super) fn route(&mut self) -> Result<Matched<'t>, Answer> {
        let slashes = self.shared.opts.escaped_slashes;
        let merge = self.rt.settings.merge_slashes;
        self.s.record.path = match normalize_request_path(self.head.uri.path(), merge, slashes) {
            Ok(path) => path.into_owned(),
            Err(e) => return Err(error(StatusCode::BAD_REQUEST, &e.to_string())),
        };
        if slashes == EscapedSlashes::UnescapeAndRedirect && has_escaped_slash(self.head.uri.path())
        {
            return Err(self.redirect_to_normal_path());
        }
        let path = self.s.record.path.as_str();
        // Routes match the path without `;` parameters, as the backends that honour them read it.
        let routing = match without_params(path) {
            Ok(r) => r,
            Err(e) => return Err(error(StatusCode::BAD_REQUEST, &e.to_string())),
        };
        // Without global plugins nothing can have changed the head since the log record's Host.
        let head = &self.head;
        let host = if self.s.ctx.plugins().is_empty() {
            self.s.record.host.as_str()
        } else {
            request_host(&head.uri, &head.headers)
        };
        let view = RequestView {
            host,
            path: &routing,
            method: &head.method,
            headers: &head.headers,
            query: head.uri.query(),
            protocol: if self.conn.tls {
                ClientProtocol::Https
            } else {
                ClientProtocol::Http
            },
        };
        let not_found = || error(StatusCode::NOT_FOUND, "no Route matched with those values");
        let m = match self.rt.router.lookup(&view) {
            Lookup::Matched(m) => m,
            Lookup::NotFound => return Err(not_found()),
            // Like Kong: an http-only route does not match over HTTPS.
            Lookup::WrongProtocol(_) if self.conn.tls => return Err(not_found()),
            Lookup::WrongProtocol(m)
                if headers::forwarded_https(
                    self.conn.peer.ip(),
                    &head.headers,
                    &self.shared.opts.trusted_proxies,
                ) =>
            {
                m
            }
            Lookup::WrongProtocol(m) => {
                let route = &self.rt.routes[m.route];
                let answer = redirect_to_https(route, host, head);
                if !route.access_log {
                    self.s.ctx.slots.insert(Unlogged);
                }
                return Err(answer);
            }
        };
        let rt: &'t Runtime = self.rt;
        let route = &rt.routes[m.route];
        if let Some(tls_hosts) = route.tls_hosts.as_deref().filter(|_| self.conn.tls) {
            let host = crate::router::strip_port(host);
            match tls_hosts.admit(host, self.conn.client_check.as_ref()) {
                Admit::Open => {}
                Admit::Checked(check) => {
                    let peer = self.conn.client_cert.as_deref();
                    client_certificate(check, peer, &mut self.head.headers)?
                }
                Admit::Rechecked(check) => {
                    let chain = self.conn.client_cert.as_ref().map(|p| p.chain.as_slice());
                    let peer = check.peer(chain);
                    if !check.admits_handshake(peer.as_deref()) {
                        return Err(super::edge::misdirected_request());
                    }
                    client_certificate(check, peer.as_deref(), &mut self.head.headers)?
                }
                // The route asks for a client certificate this connection's handshake did
                // not check: the client is sent to a connection of its own for the host.
                Admit::Misdirected => return Err(super::edge::misdirected_request()),
            }
        }
        let (matched_len, routing) = match routing {
            Cow::Borrowed(_) => (m.matched_len, None),
            Cow::Owned(r) => (with_params_len(path, m.matched_len), Some(r)),
        };
        let deadline = route_deadline(route, self.s.ctx.timings.start, self.s.grpc_deadline);
        self.s.ctx.route = Some(route.id.clone());
        self.s.record.route = Some(route.id.clone());
        self.s.response_rate = route.response_rate;
        if !route.access_log {
            self.s.ctx.slots.insert(Unlogged);
        }
        Ok(Matched {
            route,
            matched_len,
            routing,
            deadline,
        })
    }

    /// Sends the client to its path with encoded slashes decoded (the escaped-slashes policy
    /// `unescape-and-redirect`), keeping the query.
    fn redirect_to_normal_path(&self) -> Answer {
        // `//evil.example/` would be another host to a browser: one leading slash only.
        let mut location = format!("/{}", self.s.record.path.trim_start_matches('/'));
        if let Some(q) = self.head.uri.query() {
            location.push('?');
            location.push_str(q);
        }
        let message = "The request path had encoded slashes";
        redirect(StatusCode::TEMPORARY_REDIRECT, message, &location)
    }
}

/// A request under its host's client-certificate check: refused as the check says (the
/// `auth-tls-error-page` redirect instead, where one is set), else given the check's
/// `ssl-client-*` headers for the upstream.
fn client_certificate(
    check: &ClientCheck,
    peer: Option<&PeerCert>,
    headers: &mut http::HeaderMap,
) -> Result<(), Answer> {
    if let Err(refused) = check.decide(peer) {
        let page = check.validation.error_page.as_deref();
        return Err(match page.filter(|_| refused != Refused::Subject) {
            Some(page) => redirect(StatusCode::FOUND, "Client certificate refused", page),
            None => {
                let (status, message) = refused.answer();
                error(status, message)
            }
        });
    }
    check.upstream_headers(peer, headers);
    Ok(())
}

/// A redirect to `location`, with a short message as its body.
fn redirect(status: StatusCode, message: &str, location: &str) -> Answer {
    let mut early = EarlyResponse::message(status, message);
    if let Ok(v) = HeaderValue::from_str(location) {
        early.headers.insert(header::LOCATION, v);
    }
    Box::new(early)
}

/// The route's redirect of a plain-HTTP request to HTTPS.
fn redirect_to_https(
    route: &CompiledRoute,
    host: &str,
    head: &crate::plugins::RequestHead,
) -> Answer {
    let mut location = format!("https://{host}{}", head.uri.path());
    if let Some(q) = head.uri.query() {
        location.push('?');
        location.push_str(q);
    }
    redirect(route.https_redirect, "Please use HTTPS protocol", &location)
}

/// The route's budget joined to the gRPC client's deadline: the earlier bounds every try.
fn route_deadline(route: &CompiledRoute, start: Instant, grpc: Option<Instant>) -> Option<Instant> {
    match route.timeout.and_then(|t| start.checked_add(t)) {
        Some(at) => Some(grpc.map_or(at, |d| d.min(at))),
        // No timeout, or one so long it is none.
        None => grpc,
    }
}
