//! Request mirroring: a copy of a route's request goes to each of its mirror services (all of
//! them, or a share of requests each), and the copy's answer is read and thrown away.
//!
//! The copy runs on its own task once the request is ready to go upstream, so it never delays
//! the client's request or its answer, and its failures are only counted and logged (debug).
//! It is the request as the upstream gets it (after the plugins' edits), with its body: a
//! declared body of at most `--max-retry-body` is read before the request goes upstream (as
//! for retries); any other is copied as it streams through to the upstream, and the copy goes
//! once it has ended — or not at all when it grows past `--max-retry-body`, rather than hold
//! the client back or buffer without bound. A protocol upgrade (a WebSocket) is not copied.
//! A mirror without `body` gets the head alone, at once. Each copy is counted in
//! `weir_mirror_requests_total` by how it ended; a mirror's gate
//! ([`MirrorGate`](crate::compile::mirror::MirrorGate)) drops copies past a bound in flight
//! and for a second after one could not connect.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request};
use http_body_util::BodyExt;

pub use crate::compile::mirror::{chosen, CompiledMirror};
use crate::compile::{CompiledRoute, Runtime};
use crate::metrics::MirrorOutcome;
use crate::upstream::{self, Added, UpstreamBody};

use super::Shared;

/// Longest a copy may take, connection to last byte of the answer, whatever the service's
/// own timeouts: a slow mirror must not pile up copies.
const MIRROR_DEADLINE: Duration = Duration::from_secs(30);

/// A copy's body: known now, or once the client's body has streamed through (nothing, when
/// it grew past the limit or failed).
enum CopyBody {
    /// The whole body.
    Ready(Bytes),
    /// The body, when it has streamed through.
    Later(tokio::sync::oneshot::Receiver<Bytes>),
}

/// Sends each chosen mirror its copy: with `whole`, the body known now; else the body of
/// `later` (one receiver per mirror, from the upstream body's tee).
#[allow(clippy::too_many_arguments)] // the request's parts, each borrowed where it lies
pub(crate) fn spawn_all(
    shared: &Arc<Shared>,
    rt: &Arc<Runtime>,
    mirrors: Vec<CompiledMirror>,
    route: &CompiledRoute,
    head: &http::request::Parts,
    added: &Added,
    whole: Option<Bytes>,
    later: Vec<tokio::sync::oneshot::Receiver<Bytes>>,
) {
    // One receiver per mirror that takes the body, in order.
    let mut later = later.into_iter();
    for m in mirrors {
        let body = if !m.body {
            CopyBody::Ready(Bytes::new())
        } else {
            match (&whole, later.next()) {
                (Some(b), _) => CopyBody::Ready(b.clone()),
                (None, Some(rx)) => CopyBody::Later(rx),
                (None, None) => continue,
            }
        };
        spawn(shared, rt, m, route, head, added, body);
    }
}

/// Sends a copy of the request with this head and body to mirror `m`, on its own task.
/// `added` are the proxy's own request headers (`X-Forwarded-*`, …).
fn spawn(
    shared: &Arc<Shared>,
    rt: &Arc<Runtime>,
    m: CompiledMirror,
    route: &CompiledRoute,
    head: &http::request::Parts,
    added: &Added,
    body: CopyBody,
) {
    let service = &rt.services[m.service];
    if !service.mirror_gate.enter() {
        shared
            .metrics
            .record_mirror(&service.id, MirrorOutcome::Dropped);
        return;
    }
    let mut headers = head.headers.clone();
    for (name, value) in added.iter() {
        headers.append(name.clone(), value.clone());
    }
    if !m.body {
        // The head alone: nothing may announce a body that does not follow.
        headers.remove(header::CONTENT_LENGTH);
        headers.remove(header::TRANSFER_ENCODING);
    }
    let copy = Copy {
        method: head.method.clone(),
        uri: head.uri.clone(),
        headers,
        host_header: m.host.or_else(|| route.host_header.clone()),
        preserve_host: route.preserve_host,
    };
    let (shared, rt) = (shared.clone(), rt.clone());
    tokio::spawn(async move {
        let service = rt.services[m.service].clone();
        let id = service.id.clone();
        let sent = async {
            let body = match body {
                CopyBody::Ready(b) => b,
                CopyBody::Later(rx) => rx.await.map_err(|_| NotSent {
                    error: "the body grew past --max-retry-body, or failed".into(),
                    connect: false,
                })?,
            };
            copy.send(&rt, m.service, body).await
        };
        let mut connect_failed = false;
        let outcome = match tokio::time::timeout(MIRROR_DEADLINE, sent).await {
            Ok(Ok(status)) => {
                tracing::debug!(service = %id, status, "mirrored");
                MirrorOutcome::Answered
            }
            Ok(Err(e)) => {
                tracing::debug!(service = %id, error = %e.error, "not mirrored");
                connect_failed = e.connect;
                MirrorOutcome::Failed
            }
            Err(_) => {
                tracing::debug!(service = %id, "mirror copy timed out");
                MirrorOutcome::TimedOut
            }
        };
        service.mirror_gate.done(connect_failed);
        shared.metrics.record_mirror(&id, outcome);
    });
}

/// Why a copy got no answer; `connect`: no connection could be made.
struct NotSent {
    error: String,
    connect: bool,
}

impl NotSent {
    fn other(error: impl ToString) -> NotSent {
        NotSent {
            error: error.to_string(),
            connect: false,
        }
    }
}

/// A request copy, owned by its task.
struct Copy {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    host_header: Option<http::HeaderValue>,
    preserve_host: bool,
}

impl Copy {
    /// Sends the copy to one target of the service (one try) and reads its answer through;
    /// returns the answer's status.
    async fn send(self, rt: &Runtime, service: usize, body: Bytes) -> Result<u16, NotSent> {
        let service = &rt.services[service];
        let checks = service.checks.as_deref();
        let healthy = |i: usize| checks.is_none_or(|c| c.is_healthy(&service.health[i]));
        let i = service
            .balancer
            .pick(None, healthy)
            .ok_or_else(|| NotSent::other("no healthy target"))?;
        let key = &service.keys[i];
        let mut request = Request::new(UpstreamBody::full(body));
        *request.method_mut() = self.method;
        *request.uri_mut() = self.uri;
        *request.headers_mut() = self.headers;
        if let Some(h) = self.host_header {
            request.headers_mut().insert(header::HOST, h);
        } else if !self.preserve_host {
            let host = service.balancer.target(i).host_header.clone();
            request.headers_mut().insert(header::HOST, host);
        }
        if service.h2 {
            super::session::set_absolute_uri(&mut request, &key.target, key.tls.is_some());
        }
        let conn = upstream::checkout(key, service.connect_timeout)
            .await
            .map_err(|e| NotSent {
                error: e.to_string(),
                connect: true,
            })?;
        let resp = conn
            .send(request, &Added::default(), service.write_timeout)
            .await
            .map_err(|e| NotSent::other(e.error))?;
        let status = resp.status().as_u16();
        // Read through, so the connection can be reused; the contents go nowhere.
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            frame.map_err(NotSent::other)?;
        }
        Ok(status)
    }
}
