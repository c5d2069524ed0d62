//! TLS passthrough: connections to the TLS listener whose ClientHello names a server of a
//! `tls_routes` entry are handed, bytes untouched, to a target of that route's services;
//! every other connection is terminated by Weir as usual.
//!
//! The ClientHello is peeked at (not read), so a connection Weir terminates after all reaches
//! rustls whole. A client that sends nothing, or a ClientHello too large to read the name
//! from, is terminated as usual (and meets the handshake timeout there).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::compile::Runtime;
use crate::config::TlsRoute;
use crate::server::backends::Backends;
use crate::tls::client_hello::{server_name, Hello, MAX_HELLO};

/// The passthrough routes of a table, by server name.
#[derive(Default)]
pub struct Passthrough {
    exact: HashMap<Box<str>, usize>,
    /// `*.suffix` names by suffix; any depth under it.
    wildcard: HashMap<Box<str>, usize>,
    /// The first route without names: any server name.
    any: Option<usize>,
    /// Each route's id, its backends (`None`: every share closes), and whether Weir
    /// terminates its connections.
    routes: Vec<(Arc<str>, Option<Backends>, bool)>,
}

impl Passthrough {
    /// Compiles validated routes; `service_index` maps service ids to their positions.
    pub fn new(routes: &[TlsRoute], service_index: &HashMap<&str, usize>) -> Passthrough {
        let mut p = Passthrough::default();
        for (i, r) in routes.iter().enumerate() {
            if r.hosts.is_empty() {
                p.any.get_or_insert(i);
            }
            for h in &r.hosts {
                let h = h.to_ascii_lowercase();
                let map = match h.strip_prefix("*.") {
                    Some(suffix) => p.wildcard.entry(suffix.into()),
                    None => p.exact.entry(h.into()),
                };
                // The first route naming a host keeps it.
                map.or_insert(i);
            }
            let list = r
                .backends
                .iter()
                .map(|b| {
                    let service = b
                        .service
                        .as_deref()
                        .and_then(|s| service_index.get(s).copied());
                    (service, Default::default(), b.weight)
                })
                .collect();
            p.routes
                .push((r.id.as_str().into(), Backends::new(list), r.terminate));
        }
        p
    }

    /// Whether any route is configured (else connections are terminated without a peek).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The route for a server name: exact, then the longest wildcard suffix.
    fn find(&self, name: &str) -> Option<usize> {
        let lower = name.to_ascii_lowercase();
        if let Some(&i) = self.exact.get(lower.as_str()) {
            return Some(i);
        }
        let mut rest = lower.as_str();
        while let Some((_, suffix)) = rest.split_once('.') {
            if let Some(&i) = self.wildcard.get(suffix) {
                return Some(i);
            }
            rest = suffix;
        }
        self.any
    }
}

impl Passthrough {
    /// After Weir's handshake: the route (id and service chosen) that takes a connection
    /// naming `name` decrypted, if a terminating route serves that name.
    pub fn terminated(&self, name: &str) -> Option<(Arc<str>, Option<usize>)> {
        let i = self.find(name)?;
        let (id, backends, terminate) = &self.routes[i];
        terminate.then(|| {
            (
                id.clone(),
                backends.as_ref().and_then(|b| b.choose().service),
            )
        })
    }
}

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
                let Some(i) = rt.passthrough.find(name) else {
                    return Decision::Terminate;
                };
                let (id, backends, terminate) = &rt.passthrough.routes[i];
                if *terminate {
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
    let mut upstream = match tokio::time::timeout(service.connect_timeout, connect).await {
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
    match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        Ok((up, down)) => {
            tracing::debug!(route = %route, target = %target, up, down, "TLS passthrough closed")
        }
        Err(e) => {
            tracing::debug!(route = %route, target = %target, error = %e, "TLS passthrough ended")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_find_their_route_exact_first_then_the_longest_wildcard() {
        let routes: Vec<TlsRoute> = serde_json::from_value(serde_json::json!([
            {"id": "a", "hosts": ["*.example.com"]},
            {"id": "b", "hosts": ["*.foo.example.com", "exact.example.com"]},
            {"id": "c", "hosts": ["exact.example.com"]},
            {"id": "d"},
        ]))
        .unwrap();
        let p = Passthrough::new(&routes, &HashMap::new());
        let id = |n: &str| p.find(n).map(|i| p.routes[i].0.to_string());
        assert!(
            p.terminated("x.example.com").is_none(),
            "passthrough routes"
        );
        assert_eq!(id("x.example.com").as_deref(), Some("a"));
        assert_eq!(id("x.y.example.com").as_deref(), Some("a"));
        assert_eq!(id("x.foo.example.com").as_deref(), Some("b"));
        assert_eq!(
            id("EXACT.example.com").as_deref(),
            Some("b"),
            "first route keeps it"
        );
        assert_eq!(
            id("example.com").as_deref(),
            Some("d"),
            "the route without names"
        );
        assert_eq!(id("other.org").as_deref(), Some("d"));
    }
}
