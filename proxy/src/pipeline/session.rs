//! A request's session: its context and collected plugins, and the log phase that runs exactly
//! once when it ends, for whatever reason.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::{InFlight, LogRecord, LogSink, RequestCtx};
use crate::upstream::BodyStats;

/// Status logged for a request whose client went away before any response was made (nginx's
/// and Kong's convention).
pub const CLIENT_CLOSED: u16 = 499;

/// Owns a request from its head to its end: the context, the log record, the request's
/// in-flight mark. Dropping it ends the request: the log phase runs (every collected plugin's
/// `log`, then the access log and metrics) exactly once, whether the response was sent, failed,
/// was cut off, or the client left first (then with status 499), and also when a task is
/// cancelled or unwinds.
pub(crate) struct Session {
    pub ctx: RequestCtx,
    pub record: LogRecord,
    pub sink: Arc<dyn LogSink>,
    /// Progress of a request body streamed upstream.
    pub request_bytes: Option<Arc<BodyStats>>,
    /// Released when the request is over (the connection's in-flight count), after the log.
    pub _guard: Option<InFlight>,
    /// A gRPC call's content type: Weir's own answers are gRPC statuses in that type.
    pub grpc: Option<http::HeaderValue>,
    /// A gRPC call's deadline (its `grpc-timeout`): it bounds the whole call, the response
    /// body included, not only the wait for the head.
    pub grpc_deadline: Option<Instant>,
    /// The request counted in flight on its target, until it ends.
    pub upstream_load: Option<crate::balancer::InFlight>,
    /// The trailers of a request body read whole before `access`, sent after it (boxed:
    /// every request moves the session, few have trailers).
    pub request_trailers: Option<Box<http::HeaderMap>>,
    /// The pace of the answer's body, as the matched route says.
    pub response_rate: Option<crate::config::ResponseRate>,
}

impl Drop for Session {
    fn drop(&mut self) {
        let (ctx, record) = (&mut self.ctx, &mut self.record);
        if record.status == 0 {
            record.status = CLIENT_CLOSED;
            record.aborted = true;
        }
        // A request that failed upstream ended before the tries were copied into the record
        // (an answered one has them already): its tries, with why each failed, are logged too.
        if record.tries == 0 && !ctx.tries.is_empty() {
            record.tries = ctx.tries.len();
            record.upstream_tries = Some(ctx.tries.as_slice().into());
        }
        if let Some(stats) = &self.request_bytes {
            record.request_bytes = stats.bytes.load(Ordering::Relaxed);
        }
        ctx.timings.end.get_or_insert_with(Instant::now);
        record.latencies = ctx.timings.latencies();
        record.correlation_id = ctx.correlation_id.take();
        record.consumer = ctx.consumer.clone();
        super::log(ctx, record);
        self.sink.log(ctx, record);
    }
}
