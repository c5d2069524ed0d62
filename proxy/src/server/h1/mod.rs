//! Weir's own HTTP/1.1 server loop for the common request: keep-alive HTTP/1.1 without a
//! request body or upgrade.
//!
//! The connection's task reads a head, runs the handler inline and writes the response head
//! and body straight to the socket, with no dispatcher, channel or per-request timer between
//! them (hyper's server spent about a third of the proxy's instructions per request there).
//! The first request it does not take — a body, an upgrade, `Expect`, HTTP/1.0, an HTTP/2
//! preface, anything malformed or over a limit — hands the connection to hyper together with
//! the bytes already read, and hyper serves the rest of it.

pub(crate) mod head;
mod rewind;

use std::future::poll_fn;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::Response;
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::session::{self, ConnInfo};
use super::{Shared, IDLE_CLOSE_GRACE};
use crate::pipeline::{ConnActivity, ProxyBody};
use head::{Framing, Parsed};
pub(crate) use rewind::Rewind;

/// Room kept free in the read buffer before each read. Small: it is held by every idle
/// keep-alive connection, and a request head is rarely larger (a larger one grows it).
const READ_BUF: usize = 2 * 1024;
/// The response buffer's size at first and after a large response: a small answer's head and
/// body fit (the buffer grows for larger ones).
const OUT_BUF: usize = 1024;
/// Body frames up to this size are copied behind the head (one write); larger ones are
/// written on their own.
const COPY_MAX: usize = 16 * 1024;
/// Most bytes gathered before they are written, even when the body has more ready.
const OUT_MAX: usize = 64 * 1024;

/// How the fast path ended.
pub(crate) enum Outcome<S> {
    /// The connection is finished (closed by either side, idle, or shut down).
    Closed,
    /// hyper serves the rest.
    Handover {
        /// The client connection.
        stream: S,
        /// Bytes read but not consumed (the request hyper is to serve starts here).
        read: Bytes,
        /// The connection was asked to close (idle or shutdown): hyper answers this request
        /// and closes.
        closing: bool,
        /// The fast path answered a request on it: the connection stays HTTP/1.1.
        served: bool,
    },
}

/// Serves requests until the connection ends or a request needs hyper.
pub(crate) async fn serve<S>(
    shared: &Arc<Shared>,
    conn: &Arc<ConnInfo>,
    activity: &Arc<ConnActivity>,
    mut stream: S,
    stop: &mut watch::Receiver<bool>,
) -> Outcome<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut state = State {
        buf: BytesMut::with_capacity(READ_BUF),
        closing: *stop.borrow(),
        served: false,
    };
    let handover = serve_requests(shared, conn, activity, &mut stream, stop, &mut state).await;
    if handover {
        return Outcome::Handover {
            stream,
            read: state.buf.freeze(),
            closing: state.closing,
            served: state.served,
        };
    }
    if conn.tls {
        // A TLS client is owed a close_notify (hyper's path sends one too).
        let _ = tokio::time::timeout(IDLE_CLOSE_GRACE, stream.shutdown()).await;
    }
    Outcome::Closed
}

/// What [`serve_requests`] leaves behind for a hand-over.
struct State {
    buf: BytesMut,
    closing: bool,
    served: bool,
}

/// The request loop; returns `true` when hyper is to take the connection over.
async fn serve_requests<S>(
    shared: &Arc<Shared>,
    conn: &Arc<ConnInfo>,
    activity: &Arc<ConnActivity>,
    stream: &mut S,
    stop: &mut watch::Receiver<bool>,
    state: &mut State,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let opts = &shared.opts;
    // With no request in flight a connection is idle or still receiving a request head;
    // either may last this long (the keep-alive and header-read limits in one clock).
    let idle_limit = opts.keepalive_timeout.min(opts.header_read_timeout);
    let buf = &mut state.buf;
    let mut out = Vec::with_capacity(OUT_BUF);
    // Set once a connection holding half a request head was asked to close: it has this long
    // to complete the head (then served and closed) before it is dropped.
    let mut give_up: Option<Instant> = None;
    // One timer per connection, moved only when it fires, instead of one per request.
    let mut timer = pin!(tokio::time::sleep(idle_limit));
    let mut stopped = pin!(stop.changed());
    loop {
        match head::parse_request(buf, opts.max_header_bytes, opts.max_headers) {
            Parsed::Handover => return true,
            Parsed::TooLarge => {
                answer_and_close(stream, &mut out, "431 Request Header Fields Too Large").await;
                return false;
            }
            Parsed::Request { parts, close } => {
                state.served = true;
                // Watch the client while the upstream works: a client that goes away cancels
                // its request (and frees the upstream connection), as with hyper. A read that
                // took the whole request left no readiness behind, so this costs no system call.
                // With the next request already buffered (pipelined) there is nothing to watch.
                let mut watch = buf.is_empty();
                let mut handling = pin!(session::serve(
                    shared.clone(),
                    conn.clone(),
                    activity.clone(),
                    parts,
                    None
                ));
                let resp = poll_fn(|cx| {
                    if let Poll::Ready(resp) = handling.as_mut().poll(cx) {
                        return Poll::Ready(Some(resp));
                    }
                    if watch {
                        match tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, buf) {
                            Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(None),
                            Poll::Ready(Ok(_)) => watch = false,
                            Poll::Pending => {}
                        }
                    }
                    Poll::Pending
                })
                .await;
                let Some(resp) = resp else {
                    return false;
                };
                state.closing |= shared.stopping.load(Ordering::Relaxed);
                let close = close || state.closing;
                let reusable = write_response(stream, &mut out, resp, close).await;
                if !reusable || close {
                    return false;
                }
                // A large response grew the buffer: do not keep that for an idle connection.
                if out.capacity() > OUT_MAX {
                    out = Vec::with_capacity(OUT_BUF);
                }
                continue;
            }
            Parsed::Partial => {}
        }
        if state.closing && buf.is_empty() {
            return false;
        }
        if buf.capacity() - buf.len() < READ_BUF / 8 {
            buf.reserve(READ_BUF);
        }
        tokio::select! {
            biased;
            r = stream.read_buf(buf) => match r {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            },
            () = timer.as_mut() => {
                let now = Instant::now();
                if give_up.is_some_and(|t| now >= t) {
                    return false;
                }
                match activity.idle_since() {
                    Some(since) if now.duration_since(since) >= idle_limit => {
                        if buf.is_empty() {
                            return false;
                        }
                        state.closing = true;
                        give_up = Some(now + IDLE_CLOSE_GRACE);
                        timer.as_mut().reset((now + IDLE_CLOSE_GRACE).into());
                    }
                    Some(since) => timer.as_mut().reset((since + idle_limit).into()),
                    None => timer.as_mut().reset((now + idle_limit).into()),
                }
            }
            _ = stopped.as_mut(), if !state.closing => {
                state.closing = true;
                let now = Instant::now();
                give_up = Some(now + IDLE_CLOSE_GRACE);
                timer.as_mut().reset((now + IDLE_CLOSE_GRACE).into());
            }
        }
    }
}

/// Writes a response; returns whether the connection may carry another request.
///
/// A body that fails or ends short of its declared length leaves the connection unusable
/// (the client sees it cut); one longer than declared is cut at the declared length.
async fn write_response<S>(
    stream: &mut S,
    out: &mut Vec<u8>,
    resp: Response<ProxyBody>,
    close: bool,
) -> bool
where
    S: AsyncWrite + Unpin,
{
    let (parts, body) = resp.into_parts();
    out.clear();
    if parts.status.is_informational() {
        // Only a protocol switch may answer with 1xx, and the fast path takes no upgrade; a
        // 1xx written as the final answer would pair every later response with the wrong
        // request. hyper answers such a response with 500 too.
        drop(body);
        answer_and_close(stream, out, "500 Internal Server Error").await;
        return false;
    }
    let framing = head::encode_response_head(out, &parts, body.size_hint().exact(), close);
    // Trailers go to the client only as announced (`Trailer`, set for clients that asked with
    // `TE: trailers`), as hyper sends them on the connections it serves.
    let announced = (framing == Framing::Chunked)
        .then(|| parts.headers.get(http::header::TRAILER))
        .flatten()
        .map(|v| v.to_str().unwrap_or_default().to_ascii_lowercase());
    let mut trailers: Option<http::HeaderMap> = None;
    drop(parts);
    let mut remaining = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    if framing == Framing::Empty {
        drop(body);
        return flush(stream, out).await && !close;
    }
    let mut body = pin!(body);
    loop {
        // Gather what the body has ready (up to OUT_MAX); write when it has no more for now.
        let frame = poll_fn(|cx| {
            if out.len() >= OUT_MAX {
                return Poll::Ready(None);
            }
            match body.as_mut().poll_frame(cx) {
                Poll::Pending if !out.is_empty() => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
                Poll::Ready(f) => Poll::Ready(Some(f)),
            }
        })
        .await;
        let data = match frame {
            None => {
                if !flush(stream, out).await {
                    return false;
                }
                continue;
            }
            Some(None) => break,
            Some(Some(Err(_))) => {
                flush(stream, out).await;
                return false;
            }
            Some(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                Ok(_) => continue,
                Err(frame) => {
                    if announced.is_some() {
                        trailers = frame.into_trailers().ok();
                    }
                    continue;
                }
            },
        };
        match framing {
            Framing::Length(_) => {
                if data.len() as u64 > remaining {
                    let fits = data.slice(..remaining as usize);
                    let _ = put(stream, out, fits).await && flush(stream, out).await;
                    return false;
                }
                remaining -= data.len() as u64;
                if !put(stream, out, data).await {
                    return false;
                }
            }
            Framing::Chunked => {
                crate::wire::chunk_header(out, data.len());
                if !put(stream, out, data).await {
                    return false;
                }
                out.extend_from_slice(b"\r\n");
            }
            Framing::Empty => {}
        }
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"0\r\n");
        if let (Some(names), Some(t)) = (&announced, &trailers) {
            write_trailers(out, names, t);
        }
        out.extend_from_slice(b"\r\n");
    }
    flush(stream, out).await && remaining == 0 && !close
}

/// The trailer fields named in `announced` (a lower-cased `Trailer` list), each a valid
/// trailer, as header lines.
fn write_trailers(out: &mut Vec<u8>, announced: &str, trailers: &http::HeaderMap) {
    let listed = |n: &str| announced.split(',').any(|a| a.trim() == n);
    for (name, value) in trailers {
        let forbidden =
            crate::upstream::h1::chunked::is_forbidden_trailer(name.as_str().as_bytes());
        if !forbidden && listed(name.as_str()) {
            crate::wire::header_line(out, name, value);
        }
    }
}

/// Queues `data` behind what `out` holds, or writes both when `data` is large.
async fn put<S: AsyncWrite + Unpin>(stream: &mut S, out: &mut Vec<u8>, data: Bytes) -> bool {
    if data.len() <= COPY_MAX {
        out.extend_from_slice(&data);
        return true;
    }
    flush(stream, out).await && stream.write_all(&data).await.is_ok()
}

/// Writes out what `out` holds (and flushes a TLS session's records).
/// Writes an empty answer with `status` (code and reason) that closes the connection.
async fn answer_and_close<S: AsyncWrite + Unpin>(stream: &mut S, out: &mut Vec<u8>, status: &str) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    flush(stream, out).await;
}

async fn flush<S: AsyncWrite + Unpin>(stream: &mut S, out: &mut Vec<u8>) -> bool {
    let ok = out.is_empty() || stream.write_all(out).await.is_ok();
    out.clear();
    ok && stream.flush().await.is_ok()
}
