//! The request body as forwarded upstream: streamed from the client frame by frame, counted,
//! and cut off at the configured size limit.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// Progress of a streamed request body, shared with the task waiting for the response.
#[derive(Debug)]
pub struct BodyStats {
    origin: Instant,
    /// Bytes forwarded so far.
    pub bytes: AtomicU64,
    /// Milliseconds after `origin` of the last frame handed to the upstream connection.
    last_progress_ms: AtomicU64,
    /// The whole body has been forwarded.
    pub done: AtomicBool,
    /// The client sent more than the limit.
    pub too_large: AtomicBool,
    /// The client's body was malformed (a bad chunk): the client's fault, not the
    /// upstream's.
    pub client_error: AtomicBool,
    /// The client's connection ended before its body did: it went away.
    pub client_gone: AtomicBool,
    /// Told when `done` is set: the wait for the answer moves from the write timeout to the
    /// read timeout then, not when its timer next fires.
    pub finished: tokio::sync::Notify,
}

impl BodyStats {
    /// Stats starting now.
    pub fn new() -> Arc<BodyStats> {
        Arc::new(BodyStats {
            origin: Instant::now(),
            bytes: AtomicU64::new(0),
            last_progress_ms: AtomicU64::new(0),
            done: AtomicBool::new(false),
            too_large: AtomicBool::new(false),
            client_error: AtomicBool::new(false),
            client_gone: AtomicBool::new(false),
            finished: tokio::sync::Notify::new(),
        })
    }

    /// The whole body has been forwarded.
    pub fn finish(&self) {
        if !self.done.swap(true, Ordering::Relaxed) {
            // A permit is kept if nobody waits yet.
            self.finished.notify_one();
        }
    }

    /// When a frame last moved (or when streaming started).
    pub fn last_progress(&self) -> Instant {
        self.origin
            + std::time::Duration::from_millis(self.last_progress_ms.load(Ordering::Relaxed))
    }

    fn progress(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.last_progress_ms
            .store(self.origin.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// The client's body exceeded the configured maximum.
#[derive(Debug, thiserror::Error)]
#[error("request body larger than {0} bytes")]
pub struct TooLarge(u64);

/// Whether reading a client's body failed because the client went away (its connection
/// ended before the body did) rather than because it sent something malformed.
pub fn client_left(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        let eof = c
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof);
        let incomplete = c
            .downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_incomplete_message() || h.is_canceled());
        if eof || incomplete {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A client's request trailers without the fields that must never be trailers (framing,
/// routing, authentication, …) and without the identity headers only authentication plugins
/// may set: the upstream acts on trailers as on headers, and these were checked in the head.
pub fn clean_trailers(mut t: http::HeaderMap) -> http::HeaderMap {
    crate::consumers::remove_identity_headers(&mut t);
    let forbidden: Vec<http::HeaderName> = t
        .keys()
        // Forwarding fields are Weir's to set, in the head: some servers merge trailers into
        // the headers.
        .filter(|n| {
            super::h1::chunked::is_forbidden_trailer(n.as_str().as_bytes())
                || crate::wire::is_forwarding(n)
        })
        .cloned()
        .collect();
    for n in forbidden {
        t.remove(n);
    }
    t
}

/// A request body on its way upstream.
pub struct UpstreamBody {
    inner: Option<Incoming>,
    /// A body known in full (read through the request_body plugins).
    full: Option<Bytes>,
    /// Trailers sent after a full body (boxed: most bodies have none).
    trailers: Option<Box<http::HeaderMap>>,
    stats: Option<Arc<BodyStats>>,
    limit: u64,
    /// A copy of a streamed body being kept for mirrors (boxed: most requests have none).
    tee: Option<Box<Tee>>,
}

/// The copy of a streamed body kept for request mirrors: each gets the whole body once it has
/// streamed through, or nothing (its sender dropped) when it grew past the limit or failed.
struct Tee {
    buf: bytes::BytesMut,
    limit: usize,
    to: Vec<tokio::sync::oneshot::Sender<Bytes>>,
}

impl Tee {
    fn data(&mut self, data: &[u8]) {
        if self.buf.len() + data.len() > self.limit {
            self.to.clear();
        } else if !self.to.is_empty() {
            self.buf.extend_from_slice(data);
        }
    }

    fn end(&mut self) {
        let body = std::mem::take(&mut self.buf).freeze();
        for to in self.to.drain(..) {
            let _ = to.send(body.clone());
        }
    }
}

impl UpstreamBody {
    /// Also keeps a copy of the body as it streams through, up to `limit` bytes: each of `to`
    /// gets it at the end, or nothing if it grows larger.
    pub fn tee(mut self, limit: usize, to: Vec<tokio::sync::oneshot::Sender<Bytes>>) -> Self {
        if !to.is_empty() {
            self.tee = Some(Box::new(Tee {
                buf: bytes::BytesMut::new(),
                limit,
                to,
            }));
        }
        self
    }

    /// No body.
    pub fn empty() -> UpstreamBody {
        UpstreamBody {
            inner: None,
            full: None,
            trailers: None,
            stats: None,
            limit: 0,
            tee: None,
        }
    }

    /// A body known in full, sent with its exact length.
    pub fn full(bytes: Bytes) -> UpstreamBody {
        UpstreamBody {
            full: Some(bytes).filter(|b| !b.is_empty()),
            ..UpstreamBody::empty()
        }
    }

    /// The full body followed by `trailers` (HTTP/2 upstreams get them; Weir's HTTP/1.1 client
    /// drops them, as it does a streamed body's).
    /// Trailers are cleaned as `clean_trailers` says.
    pub fn with_trailers(mut self, trailers: Option<http::HeaderMap>) -> UpstreamBody {
        self.trailers = trailers
            .map(clean_trailers)
            .filter(|t| !t.is_empty())
            .map(Box::new);
        self
    }

    /// Streams `body`, recording progress in `stats`; `limit` 0 means unlimited.
    pub fn streamed(body: Incoming, stats: Arc<BodyStats>, limit: u64) -> UpstreamBody {
        if body.is_end_stream() {
            stats.finish();
        }
        UpstreamBody {
            inner: Some(body),
            full: None,
            trailers: None,
            stats: Some(stats),
            limit,
            tee: None,
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            if let Some(b) = this.full.take() {
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(*t))));
        };
        let polled = Pin::new(inner).poll_frame(cx);
        let stats = this.stats.as_ref();
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(tee), Some(data)) = (this.tee.as_mut(), frame.data_ref()) {
                    tee.data(data);
                }
                if let (Some(data), Some(stats)) = (frame.data_ref(), stats) {
                    stats.progress(data.len());
                    if this.limit > 0 && stats.bytes.load(Ordering::Relaxed) > this.limit {
                        stats.too_large.store(true, Ordering::Relaxed);
                        this.inner = None;
                        return Poll::Ready(Some(Err(Box::new(TooLarge(this.limit)))));
                    }
                }
                // hyper's HTTP/2 client stops polling a body that says it has ended, so the
                // end is recorded here rather than only at `Ready(None)`; otherwise the wait
                // for the answer would go on under the write timeout.
                let ended =
                    frame.is_trailers() || this.inner.as_ref().is_some_and(|b| b.is_end_stream());
                if let (true, Some(s)) = (ended, stats) {
                    s.finish();
                }
                if let (true, Some(tee)) = (ended, this.tee.as_mut()) {
                    tee.end();
                }
                match frame.into_trailers() {
                    Ok(t) => Poll::Ready(Some(Ok(Frame::trailers(clean_trailers(t))))),
                    Err(frame) => Poll::Ready(Some(Ok(frame))),
                }
            }
            Poll::Ready(None) => {
                if let Some(s) = stats {
                    s.finish();
                }
                if let Some(tee) = this.tee.as_mut() {
                    tee.end();
                }
                this.inner = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(s) = stats {
                    let flag = if client_left(&e) {
                        &s.client_gone
                    } else {
                        &s.client_error
                    };
                    flag.store(true, Ordering::Relaxed);
                }
                this.inner = None;
                Poll::Ready(Some(Err(Box::new(e))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.full.is_none()
            && self.trailers.is_none()
            && self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.inner, &self.full) {
            (Some(b), _) => b.size_hint(),
            (None, Some(full)) => SizeHint::with_exact(full.len() as u64),
            (None, None) => SizeHint::with_exact(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tee_hands_on_the_whole_body_or_nothing_past_its_limit() {
        let (to, mut from) = tokio::sync::oneshot::channel();
        let mut small = Tee {
            buf: Default::default(),
            limit: 10,
            to: vec![to],
        };
        small.data(b"hello");
        small.data(b" you");
        small.end();
        assert_eq!(from.try_recv().unwrap(), Bytes::from_static(b"hello you"));

        let (to, mut from) = tokio::sync::oneshot::channel();
        let mut large = Tee {
            buf: Default::default(),
            limit: 10,
            to: vec![to],
        };
        large.data(b"hello");
        large.data(b" you all");
        large.end();
        assert!(from.try_recv().is_err(), "past the limit: no copy");
    }

    #[test]
    fn request_trailers_lose_forwarding_identity_and_framing_fields() {
        let mut t = http::HeaderMap::new();
        for name in [
            "x-forwarded-for",
            "x_forwarded_for",
            "forwarded",
            "x-real-ip",
            "x-consumer-id",
            "content-length",
            "host",
            "authorization",
            "x-checksum",
        ] {
            t.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_static("v"),
            );
        }
        let kept: Vec<String> = clean_trailers(t).keys().map(|k| k.to_string()).collect();
        assert_eq!(kept, ["x-checksum"]);
    }
}
