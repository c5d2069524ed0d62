//! TLS passthrough: connections to the TLS listener whose ClientHello names a server of a
//! `tls_routes` entry are handed, bytes untouched, to a target of that route's services;
//! every other connection is terminated by Weir as usual.
//!
//! The ClientHello is peeked at (not read), so a connection Weir terminates after all reaches
//! rustls whole. A client that sends nothing, or a ClientHello too large to read the name
//! from, is terminated as usual (and meets the handshake timeout there).

use std::sync::Arc;
use std::time::Duration;

use crate::compile::Runtime;
use crate::tls::client_hello::{server_name, Hello, MAX_HELLO};

/// What to do with a new TLS connection.
pub enum Decision {
    /// Terminate it (Weir's certificates, HTTP inside).
    Terminate,
    /// Hand it on to this service, or close it (`None`: the share of a backend that cannot
    /// be used).
    Pass(Arc<str>, Option<usize>),
}

/// Peeks at the connection's first bytes until the server name can be read (or `limit`
/// passes) and decides.
pub async fn decide(rt: &Runtime, stream: &tokio::net::TcpStream, limit: Duration) -> Decision {
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = vec![0u8; MAX_HELLO];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            _ => return Decision::Terminate,
        };
        match server_name(&buf[..n]) {
            Hello::Sni(name) => {
                let Some((id, backends, terminate)) = rt.passthrough.find(name) else {
                    return Decision::Terminate;
                };
                if terminate {
                    return Decision::Terminate;
                }
                let service = backends.as_ref().and_then(|b| b.choose().service);
                return Decision::Pass(id.clone(), service);
            }
            Hello::NoSni | Hello::NotTls => return Decision::Terminate,
            // The peer closed, or the hello is larger than we read.
            Hello::Incomplete if n == 0 || n == buf.len() => return Decision::Terminate,
            Hello::Incomplete => {
                // `peek` returns at once while bytes wait; give the rest time to arrive.
                if tokio::time::Instant::now() >= deadline {
                    return Decision::Terminate;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
}

/// Connects to a target of the service and copies bytes both ways until either side closes.
pub async fn pass<S>(rt: Arc<Runtime>, route: Arc<str>, service: Option<usize>, mut client: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Some(service) = service.map(|i| rt.services[i].clone()) else {
        tracing::debug!(route = %route, "TLS passthrough share without a usable backend: closed");
        return;
    };
    let checks = service.checks.as_deref();
    let healthy = |i: usize| checks.is_none_or(|c| c.is_healthy(&service.health[i]));
    let Some(i) = service.balancer.pick(None, healthy) else {
        tracing::warn!(route = %route, service = %service.id, "TLS passthrough: no healthy target");
        return;
    };
    let target = service.keys[i].target.clone();
    drop(rt);
    let connect = tokio::net::TcpStream::connect(target.as_ref());
    let upstream = match tokio::time::timeout(service.connect_timeout, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let error = e.to_string();
            tracing::warn!(%route, %target, %error, "TLS passthrough: connect failed");
            return;
        }
        Err(_) => {
            tracing::warn!(route = %route, target = %target, "TLS passthrough: connect timed out");
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    // A terminated connection whose service speaks TLS (a BackendTLSPolicy) is encrypted
    // again towards the target, verified as the service says.
    let mut upstream = match &service.tls {
        None => crate::upstream::Stream::Tcp(upstream),
        Some(tls) => {
            // The ALPN the service offers (h2 for an h2c Service's port) is what it speaks.
            let handshake = tls.handshake(&target, upstream, service.h2);
            match tokio::time::timeout(service.connect_timeout, handshake).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    let error = e.to_string();
                    tracing::warn!(%route, %target, %error, "TLS passthrough: TLS to the target failed");
                    return;
                }
                Err(_) => {
                    tracing::warn!(%route, %target, "TLS passthrough: TLS to the target timed out");
                    return;
                }
            }
        }
    };
    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        Ok((up, down)) => {
            tracing::debug!(route = %route, target = %target, up, down, "TLS passthrough closed")
        }
        Err(e) => {
            tracing::debug!(route = %route, target = %target, error = %e, "TLS passthrough ended")
        }
    }
}
