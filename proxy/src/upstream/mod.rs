//! Talking to upstream targets: a per-worker connection pool, Weir's HTTP/1.1 client, the
//! streamed bodies in both directions, and TLS towards targets that ask for it.

mod added;
mod body;
pub(crate) mod dns;
pub(crate) mod h1;
mod own_addresses;
mod pool;
mod stream;
mod tls;
#[cfg(test)]
mod tls_tests;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pub use added::Added;
pub use body::{client_left, BodyStats, UpstreamBody};
pub use dns::{
    parse_nameserver as parse_dns_resolver, set_resolvers as set_dns_resolvers,
    set_ttl as set_dns_ttl,
};
pub use h1::Upgraded;
pub use own_addresses::{forbid, is_own};
pub use pool::{
    checkout, configure, retire, sweep_idle, Conn, ConnectError, PoolKey, PoolSettings, SendError,
};
pub use stream::Stream;
pub(crate) use tls::tls_error;
pub use tls::{check_san_uri, check_service_tls, tls_settings, Alpn, TlsClient, TlsSettings};

/// A response body from an upstream, over either protocol.
pub enum ResponseBody {
    /// From Weir's HTTP/1.1 client; holds the connection until the body ends.
    H1(h1::ResponseBody),
    /// From an HTTP/2 connection, h2c or over TLS (hyper's client).
    H2(hyper::body::Incoming),
    /// Abandoned mid-response (a read timeout); its connection is closed.
    Done,
}

impl ResponseBody {
    /// The upstream's connection after a 101 response, for a tunnel.
    pub fn take_upgraded(&mut self) -> Option<Upgraded> {
        match self {
            ResponseBody::H1(b) => b.take_upgraded(),
            ResponseBody::H2(_) | ResponseBody::Done => None,
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            ResponseBody::H1(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            ResponseBody::H2(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            ResponseBody::Done => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::H1(b) => b.is_end_stream(),
            ResponseBody::H2(b) => b.is_end_stream(),
            ResponseBody::Done => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::H1(b) => b.size_hint(),
            ResponseBody::H2(b) => b.size_hint(),
            ResponseBody::Done => SizeHint::with_exact(0),
        }
    }
}
