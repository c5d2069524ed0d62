//! header_filter on the upstream's answer: a protocol switch checked and its tunnel started,
//! hop-by-hop headers gone, the proxy's own headers, the plugins' header_filter; the body
//! then runs body_filter and, at its end, log.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body::Body as _;
use hyper_util::rt::TokioIo;

use super::{error, Answer, Answered, Session};
use crate::pipeline::{self, ProxyBody};
use crate::plugins::ResponseHead;
use crate::server::{grpc, headers, tunnel};
use crate::upstream::{self, ResponseBody};

const PROXY_LATENCY: HeaderName = HeaderName::from_static("x-weir-proxy-latency");
const UPSTREAM_LATENCY: HeaderName = HeaderName::from_static("x-weir-upstream-latency");
const UPSTREAM_TRIES: HeaderName = HeaderName::from_static("x-weir-upstream-tries");

impl<'t> Session<'t> {
    /// The upstream's answer as the client gets it; its body owns the session (and logs it).
    pub(super) fn respond_upstream(mut self, answered: Answered<'t>) -> Response<ProxyBody> {
        let Some(response) = self.response.take() else {
            return self.respond(*error(StatusCode::BAD_GATEWAY, "no upstream answer"));
        };
        let (mut parts, mut body) = response.into_parts();
        let (asked, client) = (answered.asked_upgrade.as_ref(), answered.client_upgrade);
        if let Err(answer) = self.switch_protocols(asked, client, &parts, &mut body) {
            return self.respond(*answer);
        }
        let switching = parts.status == StatusCode::SWITCHING_PROTOCOLS;
        let mut announced = None;
        if self.client.h1_trailers && !body.is_end_stream() {
            let grpc = self.s.grpc.is_some() || grpc::is_grpc(&parts.headers);
            announced = headers::trailers_to_announce(&parts.headers, grpc);
        }
        let h2_websocket = self.client.h2_websocket.is_some();
        let _ = headers::remove_hop_by_hop(&mut parts.headers, switching && !h2_websocket);
        if let Some(names) = announced {
            parts.headers.insert(header::TRAILER, names);
        }
        if switching && h2_websocket {
            // RFC 8441 §5: the HTTP/2 client's tunnel opens with a 200, without the HTTP/1.1
            // handshake's headers.
            parts.status = StatusCode::OK;
            parts.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
        }
        self.proxy_headers(&mut parts);
        pipeline::header_filter(&mut self.s.ctx, &mut parts);
        // Weir's own affinity cookie goes after the plugins: those that rewrite the upstream's
        // cookies (cookie-rewrite) leave it as its Upstream configures it.
        if let Some(cookie) = answered.set_cookie {
            parts.headers.append(header::SET_COOKIE, cookie);
        }
        parts
            .headers
            .append(header::VIA, headers::via(parts.version));
        self.s.record.status = parts.status.as_u16();
        if self.s.grpc.is_some() {
            // A trailers-only answer carries its status in the head; others in the trailers.
            self.s.record.grpc_status = grpc::status_in(&parts.headers);
        }
        let body = ProxyBody::upstream(body, answered.service.read_timeout, self.s);
        Response::from_parts(parts, body)
    }

    /// A `101 Switching Protocols` checked against what was asked (the protocol, and the
    /// WebSocket accept key Weir made for an HTTP/2 client), and its tunnel started. An
    /// upstream that refuses the upgrade has its answer passed back as it is.
    fn switch_protocols(
        &self,
        asked: Option<&HeaderValue>,
        client: Option<hyper::upgrade::OnUpgrade>,
        parts: &http::response::Parts,
        body: &mut ResponseBody,
    ) -> Result<(), Answer> {
        if parts.status != StatusCode::SWITCHING_PROTOCOLS {
            return Ok(());
        }
        if !headers::upgraded_as_asked(asked, &parts.headers) {
            return Err(error(
                StatusCode::BAD_GATEWAY,
                "upstream switched to a protocol that was not asked for",
            ));
        }
        if let Some(key) = &self.client.h2_websocket {
            if !headers::websocket_accepted(key, &parts.headers) {
                return Err(error(
                    StatusCode::BAD_GATEWAY,
                    "upstream answered the WebSocket upgrade without the right Sec-WebSocket-Accept",
                ));
            }
        }
        match (client, body.take_upgraded()) {
            (Some(client), Some(upstream)) => {
                let idle = self.shared.opts.tunnel_idle_timeout;
                tokio::spawn(tunnel(client, upstream, idle));
                Ok(())
            }
            _ => Err(error(
                StatusCode::BAD_GATEWAY,
                "upstream switched protocols unasked",
            )),
        }
    }

    /// The latency and tries headers the table asks for.
    fn proxy_headers(&self, parts: &mut ResponseHead) {
        // One growth of the map instead of one per added header.
        parts.headers.reserve(4);
        if self.rt.settings.latency_headers {
            let t = self.s.ctx.timings;
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
        if self.rt.settings.upstream_tries_header {
            let tries = HeaderValue::from(self.s.ctx.tries.len());
            parts.headers.insert(UPSTREAM_TRIES, tries);
        }
    }
}

/// A latency in milliseconds as a header value; the common single digits need no allocation.
fn millis_value(ms: u64) -> HeaderValue {
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match DIGITS.get(ms as usize) {
        Some(d) => HeaderValue::from_static(d),
        None => HeaderValue::from(ms),
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
