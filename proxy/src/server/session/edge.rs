//! The edge: what is done to a request before anything reads its head (one Host, the client's
//! hop-by-hop and forwarding headers, identity headers only plugins may set), and the first
//! refusals (a bad Host, a host served with another certificate than the connection's).

use std::sync::Arc;

use http::header;
use http::StatusCode;
use hyper::body::Incoming;

use super::{error, next_request_id, Answer, Client, ConnInfo, Session};
use crate::compile::Runtime;
use crate::pipeline::{self, ConnActivity, InFlight, LogRecord, RequestCtx};
use crate::plugins::RequestHead;
use crate::server::{grpc, headers, Shared};
use crate::upstream::Added;

impl<'t> Session<'t> {
    /// A session for a request as it arrived: the edge rules applied, its context and log
    /// record begun.
    pub(super) fn new(
        shared: &'t Arc<Shared>,
        conn: &'t ConnInfo,
        rt: &'t Arc<Runtime>,
        activity: &Arc<ConnActivity>,
        mut head: RequestHead,
        body: Option<Incoming>,
    ) -> Session<'t> {
        let guard = InFlight::new(activity);
        // One Host: the one routed on and forwarded.
        let (routed_host, host_problem) = match headers::one_host(&mut head) {
            Ok(h) => (h, None),
            Err(problem) => (String::new(), Some(problem)),
        };
        let h2_websocket =
            headers::is_h2_websocket(&head).then(|| headers::h2_websocket_to_upgrade(&mut head));
        let upgrade = (head.version <= http::Version::HTTP_11 || h2_websocket.is_some())
            && headers::is_upgrade(&head.headers);
        // The client IP is read first: `Connection: x-forwarded-for` must not change it.
        let trusted = &shared.opts.trusted_proxies;
        let client_ip = headers::client_ip(conn.peer.ip(), &head.headers, trusted);
        headers::remove_untrusted_forwarding(&mut head.headers, conn.peer.ip(), trusted);
        // The client's hop-by-hop headers go before any plugin adds its own.
        let accepts_trailers = headers::remove_hop_by_hop(&mut head.headers, upgrade);
        let mut ctx = RequestCtx::new(client_ip, next_request_id(), rt.global.clone());
        ctx.client_tls = conn.tls;
        ctx.client_cert.clone_from(&conn.client_cert);
        if rt.consumers.strips_identity_headers {
            // Only an authentication plugin of this table may say who the client is.
            crate::consumers::remove_identity_headers(&mut head.headers);
            ctx.directory = Some(rt.consumers.clone());
        }
        let method = head.method.clone();
        let record = LogRecord::new(ctx.request_id, client_ip, method, routed_host);
        // gRPC calls are POSTs: other methods skip the header lookup.
        let grpc = (head.method == http::Method::POST && grpc::is_grpc(&head.headers))
            .then(|| head.headers.get(header::CONTENT_TYPE).cloned())
            .flatten();
        // A gRPC client's deadline bounds the wait for the upstream's answer.
        let grpc_deadline = grpc.as_ref().and_then(|_| {
            let timeout = grpc::parse_timeout(head.headers.get(grpc::GRPC_TIMEOUT)?)?;
            // 99999999H is 11,000 years: no deadline rather than an overflow.
            ctx.timings.start.checked_add(timeout)
        });
        let s = Box::new(pipeline::Session {
            ctx,
            record,
            sink: shared.clone(),
            request_bytes: None,
            _guard: Some(guard),
            grpc,
            grpc_deadline,
            upstream_load: None,
            request_trailers: None,
            response_rate: None,
        });
        let client = Client {
            host_problem,
            h2_websocket,
            upgrade,
            accepts_trailers,
            h1_trailers: accepts_trailers && head.version <= http::Version::HTTP_11,
        };
        Session {
            shared,
            conn,
            rt,
            s,
            head,
            body,
            client,
            added: Added::default(),
            request: None,
            response: None,
        }
    }

    /// The edge's refusals: a missing or doubled Host (400), and a host that has a
    /// certificate of its own other than the one this connection's server name got (421).
    pub(super) fn edge(&mut self) -> Result<(), Answer> {
        if let Some(problem) = self.client.host_problem {
            return Err(error(StatusCode::BAD_REQUEST, problem));
        }
        if misdirected(self.conn, self.rt, &self.s.record.host) {
            return Err(misdirected_request());
        }
        Ok(())
    }
}

/// `421`: the client is to open a connection of its own for the host it asked for.
pub(super) fn misdirected_request() -> Answer {
    error(
        StatusCode::MISDIRECTED_REQUEST,
        "this connection's certificate is not the one for this host",
    )
}

/// Whether a request over TLS names a host whose certificate (its own, else the default one)
/// is not the one the connection's server name got (HTTP/2 connection reuse across hosts, or
/// a Host other than the SNI): it gets 421, so that the client opens a connection for that
/// host. A Host that no certificate covers (no default) is not refused. Each Gateway listener
/// host name gets a certificate entry of its own, so this is the Gateway API's "the request
/// belongs to another listener" too. A request without a host (HTTP/1.0, HTTP/2 without
/// `:authority`) is served by host-less routes, the default certificate's; that, and a
/// connection without a server name (which got the default certificate), are refused only
/// where the certificate asked for asks for client certificates, so that neither way reaches
/// such a host without one.
fn misdirected(conn: &ConnInfo, rt: &Runtime, host: &str) -> bool {
    if !conn.tls {
        return false;
    }
    let host = crate::router::strip_port(host);
    let asked_name = (!host.is_empty()).then_some(host);
    let sni = conn.sni.as_deref();
    if let (Some(h), Some(s)) = (asked_name, sni) {
        if h.eq_ignore_ascii_case(s) {
            return false;
        }
    }
    let Some(asked) = rt.certs.find(asked_name) else {
        return false;
    };
    match rt.certs.find(sni) {
        Some(got) if Arc::ptr_eq(&asked, &got) => false,
        _ if asked_name.is_none() || sni.is_none() => rt.certs.mutual_config(asked_name).is_some(),
        _ => true,
    }
}
