//! Keep-alive connections to upstream targets, pooled per worker thread.
//!
//! Each worker runs a current-thread runtime, so its pool is a thread-local map with no lock.
//! An HTTP/1.1 connection is taken out of the pool for one request and put back by its response
//! body once read to its end ([`h1`]); an h2c connection (hyper's client) is shared by
//! concurrent requests.
//! The key is everything that makes two connections interchangeable (the target and the
//! protocol; TLS settings join it when upstream TLS arrives).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use super::{h1, Added, ResponseBody, UpstreamBody};
use crate::router::Fnv;

/// Idle HTTP/1.1 connections kept per key; more are closed when released.
const MAX_IDLE_PER_KEY: usize = 256;
/// How often each worker sweeps its idle connections.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Sweeps an idle HTTP/1.1 connection may stay unused: about a minute, under the keep-alive
/// timeouts upstreams commonly use (nginx 75 s), so the upstream rarely closes one first.
const MAX_IDLE_SWEEPS: u64 = 6;

/// What identifies interchangeable upstream connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// `host:port` of the target.
    pub target: Arc<str>,
    /// HTTP/2 with prior knowledge instead of HTTP/1.1.
    pub h2: bool,
}

enum Sender {
    /// With the sweep count at which it became idle.
    H1(h1::Connection, u64),
    H2(http2::SendRequest<UpstreamBody>),
}

thread_local! {
    static IDLE: RefCell<HashMap<PoolKey, Vec<Sender>, BuildHasherDefault<Fnv>>> = RefCell::default();
    /// Sweeps done on this worker: the pool's clock, cheaper than reading the time per release.
    static SWEEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Closes, every few seconds, this worker's idle connections that the upstream closed or that
/// went unused for about a minute, and forgets targets with none left. Without it a socket
/// the upstream closed would sit in CLOSE_WAIT until taken again, which for a target gone
/// from the table is never. Runs until the worker's runtime stops.
pub async fn sweep_idle() {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        sweep_once();
    }
}

/// One sweep of this worker's idle connections.
fn sweep_once() {
    let now = SWEEPS.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    IDLE.with(|m| {
        m.borrow_mut().retain(|_, list| {
            list.retain(|s| match s {
                Sender::H1(c, since) => now - since < MAX_IDLE_SWEEPS && c.is_usable(),
                Sender::H2(s) => !s.is_closed(),
            });
            !list.is_empty()
        })
    });
}

/// Why no connection could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The host name did not resolve.
    #[error("cannot resolve {0}: {1}")]
    Resolve(Arc<str>, String),
    /// TCP connect failed.
    #[error("connect to {0} failed: {1}")]
    Connect(Arc<str>, std::io::Error),
    /// TCP connect took longer than the service's connect timeout.
    #[error("connect to {0} timed out")]
    Timeout(Arc<str>),
    /// The HTTP/2 handshake failed.
    #[error("handshake with {0} failed: {1}")]
    Handshake(Arc<str>, hyper::Error),
}

/// A failed exchange on an established connection.
pub struct SendError {
    /// The underlying error.
    pub error: Box<dyn std::error::Error + Send + Sync>,
    /// The request, when the upstream cannot have acted on it (safe to send again).
    pub unsent: Option<http::Request<UpstreamBody>>,
}

/// A connection checked out of the pool.
pub struct Conn {
    key: PoolKey,
    sender: Sender,
    /// Taken from the pool rather than opened for this request.
    pub reused: bool,
}

/// Returns an idle pooled connection for `key`, or connects a new one.
pub async fn checkout(key: &PoolKey, connect_timeout: Duration) -> Result<Conn, ConnectError> {
    if let Some(sender) = take_idle(key) {
        return Ok(Conn {
            key: key.clone(),
            sender,
            reused: true,
        });
    }
    // The connect timeout covers resolution, TCP connect and the HTTP handshake.
    match tokio::time::timeout(connect_timeout, connect(key)).await {
        Ok(r) => r,
        Err(_) => Err(ConnectError::Timeout(key.target.clone())),
    }
}

async fn connect(key: &PoolKey) -> Result<Conn, ConnectError> {
    let addr = resolve(&key.target).await?;
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| ConnectError::Connect(key.target.clone(), e))?;
    let _ = stream.set_nodelay(true);
    let sender = if key.h2 {
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ConnectError::Handshake(key.target.clone(), e))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        // h2 connections are shared: keep a handle in the pool right away.
        IDLE.with(|m| {
            m.borrow_mut()
                .entry(key.clone())
                .or_default()
                .push(Sender::H2(sender.clone()))
        });
        Sender::H2(sender)
    } else {
        Sender::H1(h1::Connection::new(stream), 0)
    };
    Ok(Conn {
        key: key.clone(),
        sender,
        reused: false,
    })
}

fn take_idle(key: &PoolKey) -> Option<Sender> {
    IDLE.with(|m| {
        let mut m = m.borrow_mut();
        let list = m.get_mut(key)?;
        while let Some(s) = list.pop() {
            match s {
                Sender::H1(c, since) if c.is_usable() => return Some(Sender::H1(c, since)),
                Sender::H2(s) if !s.is_closed() => {
                    list.push(Sender::H2(s.clone()));
                    return Some(Sender::H2(s));
                }
                _ => {}
            }
        }
        None
    })
}

async fn resolve(target: &Arc<str>) -> Result<SocketAddr, ConnectError> {
    if let Ok(a) = target.parse::<SocketAddr>() {
        return Ok(a);
    }
    let mut addrs = tokio::net::lookup_host(&**target)
        .await
        .map_err(|e| ConnectError::Resolve(target.clone(), e.to_string()))?;
    addrs
        .next()
        .ok_or_else(|| ConnectError::Resolve(target.clone(), "no addresses".into()))
}

impl Conn {
    /// Sends a request; on failure, hands the request back if the upstream cannot have acted
    /// on it. An HTTP/1.1 connection travels on inside the response body.
    /// `added` is written after the request's own headers (HTTP/1.1 only: for HTTP/2 the
    /// caller appends it to the map). `write_timeout` bounds sending the rest of a request body
    /// after an early answer.
    pub async fn send(
        self,
        req: http::Request<UpstreamBody>,
        added: &Added,
        write_timeout: Duration,
    ) -> Result<http::Response<ResponseBody>, SendError> {
        match self.sender {
            Sender::H1(c, _) => c
                .send(req, added, self.key, self.reused, write_timeout)
                .await
                .map(|res| res.map(ResponseBody::H1)),
            Sender::H2(mut s) => match s.try_send_request(req).await {
                Ok(res) => Ok(res.map(ResponseBody::H2)),
                Err(mut e) => {
                    let unsent = e.take_message();
                    Err(SendError {
                        error: Box::new(e.into_error()),
                        unsent,
                    })
                }
            },
        }
    }
}

/// Returns an HTTP/1.1 connection whose response was read to its end to this worker's pool.
pub(super) fn release_h1(key: &PoolKey, mut conn: h1::Connection) {
    conn.prepare_idle();
    let idle = Sender::H1(conn, SWEEPS.with(|s| s.get()));
    IDLE.with(|m| {
        let mut m = m.borrow_mut();
        if let Some(list) = m.get_mut(key) {
            if list.len() < MAX_IDLE_PER_KEY {
                list.push(idle);
            }
        } else {
            m.insert(key.clone(), vec![idle]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    fn idle(key: &PoolKey) -> usize {
        IDLE.with(|m| m.borrow().get(key).map_or(0, Vec::len))
    }

    /// A pooled connection to a fresh listener, and the listener's end of it.
    async fn pooled() -> (PoolKey, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let key = PoolKey {
            target: addr.to_string().into(),
            h2: false,
        };
        release_h1(&key, h1::Connection::new(client));
        (key, server)
    }

    #[tokio::test]
    async fn sweeps_close_connections_the_upstream_closed() {
        let (key, server) = pooled().await;
        let (kept, _server2) = pooled().await;
        sweep_once();
        assert_eq!((idle(&key), idle(&kept)), (1, 1));
        drop(server);
        // Let the runtime see the close.
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            sweep_once();
            if idle(&key) == 0 {
                break;
            }
        }
        assert_eq!(idle(&key), 0, "closed connection still pooled");
        assert!(
            IDLE.with(|m| !m.borrow().contains_key(&key)),
            "empty key kept"
        );
        assert_eq!(idle(&kept), 1);
    }

    #[tokio::test]
    async fn sweeps_close_connections_idle_for_about_a_minute() {
        let (key, _server) = pooled().await;
        for _ in 1..MAX_IDLE_SWEEPS {
            sweep_once();
        }
        assert_eq!(idle(&key), 1, "closed before its time");
        sweep_once();
        assert_eq!(idle(&key), 0, "kept past {MAX_IDLE_SWEEPS} sweeps");
    }
}
