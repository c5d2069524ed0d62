//! The byte stream under an upstream connection: plain TCP, or TLS over it.
//!
//! One enum rather than a trait object or a generic client: the HTTP/1.1 client, uploads,
//! tunnels and hyper's h2 client all take it as it is, and plain TCP pays one branch per
//! read or write (no allocation, no indirection).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A connection to an upstream target.
pub enum Stream {
    /// Plain TCP (HTTP/1.1 or h2c).
    Tcp(TcpStream),
    /// TLS over TCP; boxed because rustls's state is kilobytes, which plain TCP should not carry.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// Whether an idle connection may carry a request: the upstream has neither closed it nor
    /// sent anything unasked. Costs no system call unless the socket became readable.
    pub fn is_idle_usable(&self) -> bool {
        match self {
            Stream::Tcp(s) => socket_is_quiet(s),
            // Nothing may wait in rustls (data or a close_notify read along with the last
            // response) nor in the socket. A byte there is not decrypted to see what it is (a
            // late session ticket would be harmless): the connection is dropped, which is
            // conservative and never wrong.
            Stream::Tls(s) => {
                let (tcp, tls) = s.get_ref();
                tls.wants_read() && socket_is_quiet(tcp)
            }
        }
    }
}

/// Whether an idle socket has nothing to read and is not closed.
fn socket_is_quiet(s: &TcpStream) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    match s.poll_read_ready(&mut cx) {
        Poll::Pending => true,
        Poll::Ready(Err(_)) => false,
        // Readiness may be stale (the last read filled its buffer exactly): look. A byte read
        // here is lost, but then the connection is not used again anyway.
        Poll::Ready(Ok(())) => matches!(
            s.try_read(&mut [0u8; 1]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock
        ),
    }
}

impl Drop for Stream {
    /// Says `close_notify` to a TLS upstream, as far as the socket takes it without waiting:
    /// without it some servers log (or count) every closed pooled connection as truncated.
    fn drop(&mut self) {
        if let Stream::Tls(s) = self {
            let (tcp, tls) = s.get_mut();
            tls.send_close_notify();
            let mut w = TryWrite(tcp);
            while tls.wants_write() {
                if !matches!(tls.write_tls(&mut w), Ok(n) if n > 0) {
                    break;
                }
            }
        }
    }
}

/// A non-blocking `io::Write` over a Tokio socket, for the `close_notify` written on drop.
struct TryWrite<'a>(&'a TcpStream);

impl io::Write for TryWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsyncRead for Stream {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

/// A TLS write may leave encrypted bytes in rustls when the socket is full: writers that then
/// wait for something else (the response, the client's body) flush first.
impl AsyncWrite for Stream {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(_) => Poll::Ready(Ok(())),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}
