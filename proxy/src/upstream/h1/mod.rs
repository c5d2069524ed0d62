//! Weir's own HTTP/1.1 client for upstream connections.
//!
//! A request is written and its response read by the request's own task: no connection task,
//! no channels between them. The response body owns the connection while it is read and puts
//! it back in the pool when the body ends cleanly; a request body still being sent when the
//! answer came keeps going from there ([`upload`]). The codec itself (heads, chunked coding) is
//! in [`head`] and [`chunked`], free of I/O.

pub(crate) mod chunked;
pub(crate) mod head;
mod upload;

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode};
use http_body::{Body as _, Frame, SizeHint};
use tokio::io::AsyncWriteExt;

use super::body::UpstreamBody;
use super::pool::{self, PoolKey, SendError};
use super::stream::Stream;
use super::Added;
pub use chunked::ChunkError;
use chunked::{ChunkedDecoder, Decoded};
pub use head::HeadError;
use head::{RequestFraming, ResponseFraming};
use upload::Upload;

/// First read of a response; grows for large bodies.
const INITIAL_READ: usize = 8 * 1024;
/// Largest single read (1 MiB bodies arrive in 16 of them).
const MAX_READ: usize = 64 * 1024;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing the socket failed.
    #[error("upstream connection error: {0}")]
    Io(#[from] io::Error),
    /// The upstream closed the connection before the response was complete.
    #[error("upstream closed the connection before the response was complete")]
    Closed,
    /// The response head was refused.
    #[error(transparent)]
    Head(#[from] HeadError),
    /// The chunked response body was malformed.
    #[error("malformed chunked response body: {0}")]
    Chunked(#[from] ChunkError),
    /// The client's request body failed (cut off, or over the size limit).
    #[error("request body: {0}")]
    RequestBody(Box<dyn std::error::Error + Send + Sync>),
}

/// An HTTP/1.1 connection to one upstream target.
pub struct Connection {
    stream: Stream,
    /// Bytes read and not yet consumed.
    buf: BytesMut,
    /// The request head being written, kept to reuse its allocation.
    head: Vec<u8>,
    /// Size of the next read.
    read_size: usize,
}

/// A response body being read from an HTTP/1.1 connection.
pub struct ResponseBody {
    /// `None` once the body has ended (and the connection went back to the pool or closed).
    conn: Option<Connection>,
    key: PoolKey,
    state: BodyState,
    keep_alive: bool,
    /// The rest of a request body the upstream answered before receiving whole.
    upload: Option<Box<Upload>>,
    /// The response head came before the request body was sent whole: the connection is never
    /// reused (an upstream that answered without reading the body would take the rest of it
    /// for the next request, and that request's answer would reach another client).
    answered_early: bool,
    /// Bound on finishing that upload once the response has ended.
    write_timeout: Duration,
}

enum BodyState {
    Length(u64),
    Chunked(ChunkedDecoder),
    Close,
    /// A 101 response: the connection belongs to the tunnel.
    Upgraded,
}

/// An upstream connection switched to another protocol, with bytes already read from it.
pub struct Upgraded {
    /// The connection (plain or TLS).
    pub stream: Stream,
    /// Bytes the upstream sent after its 101 response head.
    pub read_ahead: Bytes,
}

impl Connection {
    /// Wraps a connected stream (after its TLS handshake, if any).
    pub fn new(stream: Stream) -> Connection {
        Connection {
            stream,
            buf: BytesMut::new(),
            head: Vec::new(),
            read_size: INITIAL_READ,
        }
    }

    /// Readies the connection for the pool: the next response starts with small reads, and a
    /// buffer grown by a large body is given back rather than kept by an idle socket.
    pub fn prepare_idle(&mut self) {
        self.read_size = INITIAL_READ;
        if self.buf.capacity() > MAX_READ {
            self.buf = BytesMut::new();
        }
    }

    /// Whether an idle connection may carry a request: the upstream has neither closed it nor
    /// sent anything unasked. Costs no system call unless the socket became readable.
    pub fn is_usable(&self) -> bool {
        self.stream.is_idle_usable()
    }

    /// Writes `req` and reads the response head. `reused` says the connection came from the
    /// pool, where the upstream may have closed it just as it was taken; `write_timeout`
    /// bounds finishing an upload the upstream answered before receiving whole.
    pub async fn send(
        mut self,
        req: Request<UpstreamBody>,
        added: &Added,
        key: PoolKey,
        reused: bool,
        write_timeout: Duration,
    ) -> Result<Response<ResponseBody>, SendError> {
        let (parts, body) = req.into_parts();
        let framing = head::request_framing(
            &parts.method,
            &parts.headers,
            body.is_end_stream(),
            body.size_hint().exact(),
        );
        head::encode_request(&parts, added, &key.target, framing, &mut self.head);
        let mut wrote = self.stream.write_all(&self.head).await;
        // TLS may hold back what the socket did not take, and the response is awaited next.
        if wrote.is_ok() && matches!(self.stream, Stream::Tls(_)) {
            wrote = self.stream.flush().await;
        }
        if let Err(e) = wrote {
            // The upstream never saw a whole request head.
            return Err(failed(e.into(), Some(Request::from_parts(parts, body))));
        }
        // The body goes out while the response head is awaited, and after it if need be.
        let mut upload =
            (framing != RequestFraming::Empty).then(|| Box::new(Upload::new(body, framing)));
        let mut keep_alive = true;
        // Any answer at all (a 1xx included) means the upstream saw the request.
        let mut answered = false;
        let method = parts.method.clone();
        let head = loop {
            match head::parse_response(&mut self.buf, &method) {
                Ok(Some(h))
                    if h.parts.status.is_informational()
                        && h.parts.status != StatusCode::SWITCHING_PROTOCOLS =>
                {
                    answered = true;
                    continue;
                }
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(e) => return Err(failed(e.into(), None)),
            }
            let filled = poll_fn(|cx| {
                match poll_upload(&mut upload, cx, &mut self.stream) {
                    Err(e @ Error::RequestBody(_)) => return Poll::Ready(Err(e)),
                    // The upstream stopped reading; what it says may still arrive.
                    Err(_) => keep_alive = false,
                    Ok(()) => {}
                }
                self.poll_fill(cx).map_err(Error::from)
            })
            .await;
            let closed = match filled {
                Ok(0) => Error::Closed,
                Ok(_) => continue,
                Err(Error::Io(e)) if is_reset(&e) => Error::Io(e),
                Err(e) => return Err(failed(e, None)),
            };
            // A pooled connection closed under us before any answer: most likely the
            // upstream's keep-alive timeout crossed our request, so an idempotent one without
            // a body may be sent again (as nginx does for its cached connections).
            let retry = reused
                && !answered
                && self.buf.is_empty()
                && matches!(framing, RequestFraming::Empty | RequestFraming::Length(0))
                && is_idempotent(&method);
            let unsent = retry.then(|| Request::from_parts(parts, UpstreamBody::empty()));
            return Err(failed(closed, unsent));
        };
        let state = if head.parts.status == StatusCode::SWITCHING_PROTOCOLS {
            BodyState::Upgraded
        } else {
            match head.framing {
                ResponseFraming::Empty => BodyState::Length(0),
                ResponseFraming::Length(n) => BodyState::Length(n),
                ResponseFraming::Chunked => BodyState::Chunked(ChunkedDecoder::default()),
                ResponseFraming::Close => BodyState::Close,
            }
        };
        let mut body = ResponseBody {
            conn: Some(self),
            key,
            state,
            keep_alive: keep_alive && head.keep_alive,
            answered_early: upload.is_some(),
            upload,
            write_timeout,
        };
        if matches!(body.state, BodyState::Length(0)) {
            body.finish();
        }
        Ok(Response::from_parts(head.parts, body))
    }

    /// Reads once into the buffer; `Ok(0)` is the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < self.read_size / 2 {
            self.buf.reserve(self.read_size);
        }
        let spare = self.buf.capacity() - self.buf.len();
        let n = match ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.stream),
            cx,
            &mut self.buf
        )) {
            Ok(n) => n,
            // A TLS upstream that closed without close_notify: many do, so it is read as the
            // end of the stream (as nginx does), which still fails a body cut short of its
            // announced length.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Poll::Ready(Err(e)),
        };
        // A read that filled the buffer suggests a large body: read more at once next time.
        if n == spare && self.read_size < MAX_READ {
            self.read_size *= 2;
        }
        Poll::Ready(Ok(n))
    }
}

/// Moves an unfinished upload along as far as it goes now; on its end or failure it is dropped,
/// and a failure is returned.
fn poll_upload(
    upload: &mut Option<Box<Upload>>,
    cx: &mut Context<'_>,
    stream: &mut Stream,
) -> Result<(), Error> {
    let Some(up) = upload.as_mut() else {
        return Ok(());
    };
    match up.poll_send(cx, stream) {
        Poll::Pending => Ok(()),
        Poll::Ready(r) => {
            *upload = None;
            r
        }
    }
}

/// Sends the rest of a request body after its response ended (the upstream may still expect
/// it), then closes the connection.
async fn finish_upload(mut conn: Connection, mut upload: Box<Upload>, limit: Duration) {
    let sent = tokio::time::timeout(limit, poll_fn(|cx| upload.poll_send(cx, &mut conn.stream)));
    let _ = sent.await;
}

/// A reset or broken connection: the peer closed it hard.
fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

fn failed(error: Error, unsent: Option<Request<UpstreamBody>>) -> SendError {
    SendError {
        error: Box::new(error),
        unsent,
    }
}

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

impl ResponseBody {
    /// The body ended: the connection goes back to the pool if it can carry another request.
    fn finish(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        // Bytes past the body's end would be an answer to nothing: close instead.
        if !self.keep_alive || !conn.buf.is_empty() {
            return;
        }
        match self.upload.take() {
            None if !self.answered_early => pool::release_h1(&self.key, conn),
            None => {}
            // Answered early (a 202 while the body still streams, say) and not closing: the
            // upstream may still expect the rest, so it is sent; the connection is not reused.
            Some(upload) => {
                tokio::spawn(finish_upload(conn, upload, self.write_timeout));
            }
        }
    }

    /// Takes the connection of a 101 response for a tunnel.
    pub fn take_upgraded(&mut self) -> Option<Upgraded> {
        if !matches!(self.state, BodyState::Upgraded) {
            return None;
        }
        let conn = self.conn.take()?;
        Some(Upgraded {
            stream: conn.stream,
            read_ahead: conn.buf.freeze(),
        })
    }

    fn fail(&mut self, e: Error) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if poll_upload(&mut this.upload, cx, &mut conn.stream).is_err() {
                this.keep_alive = false;
            }
            match &mut this.state {
                BodyState::Upgraded => return Poll::Ready(None),
                BodyState::Length(left) => {
                    if *left == 0 {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    if !conn.buf.is_empty() {
                        let n = (*left).min(conn.buf.len() as u64);
                        let data = conn.buf.split_to(n as usize).freeze();
                        *left -= n;
                        if *left == 0 {
                            // The end is known now: release before the server stops polling.
                            this.finish();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                BodyState::Chunked(decoder) => match decoder.decode(&mut conn.buf) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Decoded::End(trailers)) => {
                        // Released as the body ends, whether or not trailers follow: they are
                        // read whole already.
                        this.finish();
                        return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))));
                    }
                    Ok(Decoded::NeedMore) => {}
                    Err(e) => return this.fail(e.into()),
                },
                BodyState::Close => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.state, BodyState::Close) => {
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(Error::Closed),
                Ok(_) => {}
                Err(e) => return this.fail(e.into()),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.conn.is_none()
            || matches!(self.state, BodyState::Length(0))
            || matches!(&self.state, BodyState::Chunked(d) if d.is_end())
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            BodyState::Length(n) => SizeHint::with_exact(n),
            _ if self.conn.is_none() => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
