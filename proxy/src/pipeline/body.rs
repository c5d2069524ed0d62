//! The response body sent to the client: streamed from the upstream (or a short-circuit),
//! passed through the plugins' `body_filter`, and followed by the log phase when it ends, is
//! cut off, or is dropped because the client went away.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::timer::Timer;

use super::plugin::BodyChunk;
use super::{LogRecord, RequestCtx, Session};
use crate::upstream::ResponseBody;

/// Receives every finished request after the plugins' log handlers (metrics, access log).
pub trait LogSink: Send + Sync + 'static {
    /// Called once per request.
    fn log(&self, ctx: &RequestCtx, record: &LogRecord);
}

/// The upstream went silent for longer than the service's read timeout mid-body.
#[derive(Debug, thiserror::Error)]
#[error("upstream read timeout")]
pub struct ReadTimeout;

enum Inner {
    Full(Option<Bytes>),
    Upstream {
        body: ResponseBody,
        read_timeout: Duration,
        timer: Option<Timer>,
    },
}

/// In-flight requests and idleness of one client connection.
#[derive(Debug)]
pub struct ConnActivity {
    origin: Instant,
    inflight: AtomicUsize,
    idle_since_ms: AtomicU64,
}

impl ConnActivity {
    /// A connection accepted now, idle until its first request.
    pub fn new() -> Arc<ConnActivity> {
        Arc::new(ConnActivity {
            origin: Instant::now(),
            inflight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
        })
    }

    /// When the connection became idle, or `None` while a request is in flight.
    pub fn idle_since(&self) -> Option<Instant> {
        if self.inflight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.origin + Duration::from_millis(self.idle_since_ms.load(Ordering::Acquire)))
    }
}

/// Counts a request as in flight on its connection until dropped.
pub struct InFlight(Arc<ConnActivity>);

impl InFlight {
    /// Marks a request as started on `conn`.
    pub fn new(conn: &Arc<ConnActivity>) -> InFlight {
        conn.inflight.fetch_add(1, Ordering::AcqRel);
        InFlight(conn.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let since = self.0.origin.elapsed().as_millis() as u64;
        self.0.idle_since_ms.store(since, Ordering::Release);
        self.0.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The response body type of every response the proxy sends.
pub struct ProxyBody {
    inner: Inner,
    filter: bool,
    filtered_eof: bool,
    /// Trailers held back while the bytes plugins made of them go first (boxed: every
    /// response body carries the field, few ever use it).
    pending_trailers: Option<Box<http::HeaderMap>>,
    sent: u64,
    finish: Option<Box<Session>>,
    /// Bandwidth pacing, for routes with a response rate (boxed: few have one).
    pace: Option<Box<super::pace::Pace>>,
}

impl ProxyBody {
    /// A complete body known up front (errors, short-circuits).
    pub(crate) fn full(bytes: Bytes, finish: Option<Box<Session>>) -> ProxyBody {
        let filter = finish.as_ref().is_some_and(|f| super::filters_body(&f.ctx));
        ProxyBody {
            inner: Inner::Full(Some(bytes)),
            filter,
            filtered_eof: false,
            pending_trailers: None,
            sent: 0,
            pace: paced(finish.as_deref()),
            finish,
        }
        .filtered_if_over()
    }

    /// A body that is over before it starts (a trailers-only gRPC answer, a 204) goes through
    /// the filters' eof at once: if they add nothing it stays empty and ends with the head
    /// (HTTP/2 END_STREAM on HEADERS), as it would without filtering plugins.
    fn filtered_if_over(mut self) -> ProxyBody {
        if self.filter && self.is_inner_end() {
            let f = self.finish.as_mut().expect("filtering implies a pipeline");
            let mut chunk = BodyChunk {
                data: Bytes::new(),
                eof: true,
            };
            super::body_filter(&mut f.ctx, &mut chunk);
            self.filter = false;
            self.filtered_eof = true;
            if !chunk.data.is_empty() {
                self.inner = Inner::Full(Some(chunk.data));
            }
        }
        self
    }

    /// A body streamed from the upstream (which returns its connection to the pool at its end).
    pub(crate) fn upstream(
        body: ResponseBody,
        read_timeout: Duration,
        finish: Box<Session>,
    ) -> ProxyBody {
        let filter = super::filters_body(&finish.ctx);
        ProxyBody {
            inner: Inner::Upstream {
                body,
                read_timeout,
                timer: None,
            },
            filter,
            filtered_eof: false,
            pending_trailers: None,
            sent: 0,
            pace: paced(Some(&finish)),
            finish: Some(finish),
        }
        .filtered_if_over()
    }

    /// An empty body outside any request pipeline (admin API, tunnels).
    pub fn empty() -> ProxyBody {
        ProxyBody::full(Bytes::new(), None)
    }

    /// A complete body outside any request pipeline (admin API).
    pub fn bytes(b: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::full(b.into(), None)
    }

    /// Ends the request's session (which runs the log phase).
    fn done(&mut self, aborted: bool) {
        if let Some(mut f) = self.finish.take() {
            // Bytes still held by the pacing never reached the client.
            let held = self.pace.as_ref().map_or(0, |p| p.held_len());
            f.record.response_bytes = self.sent - held;
            // A client that left before its request was read was answered with 499 only for
            // the log: it stays aborted however much of that answer hyper took.
            f.record.aborted |= aborted;
        }
    }

    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let grpc_deadline = self.finish.as_ref().and_then(|f| f.grpc_deadline);
        match &mut self.inner {
            Inner::Full(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            Inner::Upstream {
                body,
                read_timeout,
                timer,
            } => {
                if grpc_deadline.is_some_and(|d| Instant::now() >= d) && !body.is_end_stream() {
                    return Poll::Ready(Some(Ok(deadline_exceeded(body))));
                }
                match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Ready(r) => {
                        *timer = None;
                        Poll::Ready(r)
                    }
                    Poll::Pending => {
                        let t = timer.get_or_insert_with(|| {
                            let at = tokio::time::Instant::now() + *read_timeout;
                            Timer::at(
                                grpc_deadline
                                    .map_or(at, |d| at.min(tokio::time::Instant::from_std(d))),
                            )
                        });
                        match Pin::new(t).poll(cx) {
                            Poll::Ready(())
                                if grpc_deadline.is_some_and(|d| Instant::now() >= d) =>
                            {
                                Poll::Ready(Some(Ok(deadline_exceeded(body))))
                            }
                            Poll::Ready(()) => {
                                // Dropping the body closes the connection mid-response.
                                *body = ResponseBody::Done;
                                Poll::Ready(Some(Err(Box::new(ReadTimeout))))
                            }
                            Poll::Pending => Poll::Pending,
                        }
                    }
                }
            }
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The pacing a request's route asks for, if any.
fn paced(finish: Option<&Session>) -> Option<Box<super::pace::Pace>> {
    let rate = finish?.response_rate?;
    Some(Box::new(super::pace::Pace::new(rate)))
}

/// A gRPC call whose deadline passed while its answer streamed: the upstream's stream is
/// dropped (reset, so the upstream stops working on it) and the client's ends with the
/// status a gRPC server gives for it, in trailers, instead of a cut stream.
fn deadline_exceeded(body: &mut ResponseBody) -> Frame<Bytes> {
    *body = ResponseBody::Done;
    tracing::debug!("grpc-timeout passed mid-response; the call ends with DEADLINE_EXCEEDED");
    let mut trailers = http::HeaderMap::with_capacity(2);
    trailers.insert(
        crate::grpc::GRPC_STATUS,
        http::HeaderValue::from(crate::grpc::code::DEADLINE_EXCEEDED),
    );
    trailers.insert(
        crate::grpc::GRPC_MESSAGE,
        http::HeaderValue::from_static("Deadline Exceeded"),
    );
    Frame::trailers(trailers)
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(pace) = this.pace.as_mut() else {
            return this.poll_unpaced(cx);
        };
        if pace.holds() {
            return match pace.poll_next(cx) {
                Poll::Ready(Some(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
                Poll::Ready(None) => unreachable!("a pace that holds bytes gives them"),
                Poll::Pending => Poll::Pending,
            };
        }
        match this.poll_unpaced(cx) {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() => {
                let data = frame.into_data().expect("is data");
                let pace = this.pace.as_mut().expect("checked above");
                pace.hold(data);
                match pace.poll_next(cx) {
                    Poll::Ready(Some(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
                    // An empty chunk.
                    Poll::Ready(None) => Poll::Ready(Some(Ok(Frame::data(Bytes::new())))),
                    Poll::Pending => Poll::Pending,
                }
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        // An empty body ends with the head (HTTP/2 END_STREAM on HEADERS: a gRPC
        // trailers-only answer stays one); the session is finished when the body is dropped.
        // Filtered bodies are polled to the end, as `body_filter` may add bytes at eof.
        !self.filter && self.is_inner_end() && !self.pace.as_ref().is_some_and(|p| p.holds())
    }

    fn size_hint(&self) -> SizeHint {
        if self.filter {
            return SizeHint::default();
        }
        match &self.inner {
            Inner::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Upstream { body, .. } => body.size_hint(),
        }
    }
}

impl ProxyBody {
    /// The next frame as the upstream and the plugins make it, before any pacing.
    fn poll_unpaced(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self;
        loop {
            if let Some(t) = this.pending_trailers.take() {
                return Poll::Ready(Some(Ok(Frame::trailers(*t))));
            }
            match this.poll_inner(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => {
                    let frame = match frame.into_data() {
                        Ok(data) if this.filter => {
                            let eof = this.is_inner_end();
                            let f = this.finish.as_mut().expect("filtering implies a pipeline");
                            let mut chunk = BodyChunk { data, eof };
                            super::body_filter(&mut f.ctx, &mut chunk);
                            this.filtered_eof |= eof;
                            if chunk.data.is_empty() && !eof {
                                continue;
                            }
                            Frame::data(chunk.data)
                        }
                        Ok(data) => Frame::data(data),
                        Err(trailers) => {
                            if let (Some(f), Some(t)) =
                                (this.finish.as_mut(), trailers.trailers_ref())
                            {
                                if f.grpc.is_some() {
                                    f.record.grpc_status =
                                        crate::grpc::status_in(t).or(f.record.grpc_status);
                                }
                            }
                            if !this.filter {
                                trailers
                            } else {
                                // The body's end for the filters, then their trailers hook;
                                // what they produce goes out before the trailers.
                                let f = this.finish.as_mut().expect("filtering implies a pipeline");
                                let mut map = trailers.into_trailers().unwrap_or_default();
                                let mut out = bytes::BytesMut::new();
                                if !this.filtered_eof {
                                    this.filtered_eof = true;
                                    let mut chunk = BodyChunk {
                                        data: Bytes::new(),
                                        eof: true,
                                    };
                                    super::body_filter(&mut f.ctx, &mut chunk);
                                    out.extend_from_slice(&chunk.data);
                                }
                                out.extend_from_slice(&super::trailers_filter(
                                    &mut f.ctx, &mut map,
                                ));
                                if !map.is_empty() {
                                    this.pending_trailers = Some(Box::new(map));
                                }
                                if out.is_empty() {
                                    continue;
                                }
                                Frame::data(out.freeze())
                            }
                        }
                    };
                    if let Some(d) = frame.data_ref() {
                        this.sent += d.len() as u64;
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done(true);
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    if this.filter && !this.filtered_eof {
                        this.filtered_eof = true;
                        let f = this.finish.as_mut().expect("filtering implies a pipeline");
                        let mut chunk = BodyChunk {
                            data: Bytes::new(),
                            eof: true,
                        };
                        super::body_filter(&mut f.ctx, &mut chunk);
                        if !chunk.data.is_empty() {
                            this.sent += chunk.data.len() as u64;
                            return Poll::Ready(Some(Ok(Frame::data(chunk.data))));
                        }
                    }
                    this.done(false);
                    return Poll::Ready(None);
                }
            }
        }
    }
}

impl ProxyBody {
    fn is_inner_end(&self) -> bool {
        match &self.inner {
            Inner::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            Inner::Upstream { body, .. } => body.is_end_stream(),
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        // A body dropped before its end means the client went away (or a HEAD/304 response).
        let aborted = !self.is_inner_end() || self.pace.as_ref().is_some_and(|p| p.holds());
        self.done(aborted);
    }
}
