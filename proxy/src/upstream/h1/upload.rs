//! The request body on its way to the upstream, written as far as the socket takes it.
//!
//! It is driven by polling, alongside reading the response: an upstream may answer before
//! the body is all sent (a 413, an unasked `100 Continue`, or a full-duplex stream that echoes
//! as it reads), and the upload goes on for as long as the response is being read.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::buf::Chain;
use bytes::{Buf, Bytes};
use http_body::Body;
use tokio::io::AsyncWrite;

use super::head::RequestFraming;
use super::Error;
use crate::upstream::body::UpstreamBody;
use crate::upstream::stream::Stream;

/// Bytes of one body frame on the wire: the chunk-size line, the data, the chunk's CRLF.
type Out = Chain<Chain<Bytes, Bytes>, &'static [u8]>;

/// A request body that does not match the length announced upstream.
#[derive(Debug, thiserror::Error)]
pub enum LengthMismatch {
    /// More bytes than announced: sending them would start a request of their own.
    #[error("request body longer than its {0}-byte Content-Length")]
    Long(u64),
    /// Fewer: the upstream would wait for the rest, or read the next request as body.
    #[error("request body shorter than its {0}-byte Content-Length")]
    Short(u64),
}

/// A request body being sent.
pub struct Upload {
    body: UpstreamBody,
    chunked: bool,
    /// The announced length and what is left of it (`None` when chunked).
    length: Option<(u64, u64)>,
    out: Out,
    ended: bool,
}

impl Upload {
    /// Starts sending `body` as `framing` (length or chunked) announced it.
    pub fn new(body: UpstreamBody, framing: RequestFraming) -> Upload {
        let length = match framing {
            RequestFraming::Length(n) => Some((n, n)),
            RequestFraming::Empty => Some((0, 0)),
            RequestFraming::Chunked => None,
        };
        Upload {
            body,
            chunked: length.is_none(),
            length,
            out: frame_out(Bytes::new(), Bytes::new(), b""),
            ended: false,
        }
    }

    /// Writes until the socket or the client's body has nothing more to give; `Ready(Ok)`
    /// once the whole body (and the last chunk) is written and flushed.
    pub fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut Stream,
    ) -> Poll<Result<(), Error>> {
        loop {
            while self.out.has_remaining() {
                let n = ready!(tokio_util::io::poll_write_buf(
                    Pin::new(&mut *stream),
                    cx,
                    &mut self.out
                ))?;
                if n == 0 {
                    return Poll::Ready(Err(Error::Io(std::io::ErrorKind::WriteZero.into())));
                }
            }
            // All announced bytes are out: done, without waiting for the client's body to
            // say so (hyper may only say it when the client's next request arrives).
            if self.ended || self.length.is_some_and(|(_, left)| left == 0) {
                self.ended = true;
                // TLS may hold back what the socket did not take: out before saying done.
                ready!(Pin::new(&mut *stream).poll_flush(cx))?;
                return Poll::Ready(Ok(()));
            }
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(f) => f,
                Poll::Pending => {
                    // Waiting on the client: what TLS holds back goes out meanwhile (a
                    // streaming client may wait for the answer to what it sent so far).
                    if let Poll::Ready(Err(e)) = Pin::new(&mut *stream).poll_flush(cx) {
                        return Poll::Ready(Err(e.into()));
                    }
                    return Poll::Pending;
                }
            };
            match frame {
                None => {
                    if let Some((n, left)) = self.length {
                        if left > 0 {
                            return Poll::Ready(Err(Error::RequestBody(Box::new(
                                LengthMismatch::Short(n),
                            ))));
                        }
                    }
                    self.ended = true;
                    if self.chunked {
                        self.out = frame_out(Bytes::new(), Bytes::new(), b"0\r\n\r\n");
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(Error::RequestBody(e))),
                Some(Ok(frame)) => {
                    // Trailers are dropped: HTTP/1 trailers need the client to have announced
                    // them, and few upstreams read them.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if data.is_empty() {
                        continue;
                    }
                    if let Some((n, left)) = self.length.as_mut() {
                        match left.checked_sub(data.len() as u64) {
                            Some(rest) => *left = rest,
                            None => {
                                return Poll::Ready(Err(Error::RequestBody(Box::new(
                                    LengthMismatch::Long(*n),
                                ))))
                            }
                        }
                    }
                    self.out = if self.chunked {
                        let mut size = Vec::with_capacity(18);
                        crate::wire::chunk_header(&mut size, data.len());
                        let size = Bytes::from(size);
                        frame_out(size, data, b"\r\n")
                    } else {
                        frame_out(Bytes::new(), data, b"")
                    };
                }
            }
        }
    }
}

fn frame_out(size: Bytes, data: Bytes, end: &'static [u8]) -> Out {
    size.chain(data).chain(end)
}
