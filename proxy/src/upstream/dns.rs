//! Addresses of targets named by host name (ExternalName Services, `host:` services): every
//! address the resolver returns is used in turn, kept for `--dns-ttl`, and looked up again
//! sooner when connecting to one of them failed.
//!
//! The system resolver (`getaddrinfo`) does not report record TTLs, so the lifetime is a
//! setting, as nginx's `resolver … valid=` is.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pool::ConnectError;

/// How long resolved addresses are used before they are looked up again.
static TTL_MS: AtomicU64 = AtomicU64::new(30_000);

/// Sets how long resolved addresses are kept (for the whole process).
pub fn set_ttl(ttl: Duration) {
    TTL_MS.store(ttl.as_millis() as u64, Ordering::Relaxed);
}

struct Entry {
    addrs: Vec<SocketAddr>,
    until: Instant,
    /// Which address the next connection uses.
    next: Arc<AtomicUsize>,
}

type Cache = Mutex<HashMap<Arc<str>, Entry>>;

fn cache() -> &'static Cache {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(Cache::default)
}

/// The address to connect to for `target` (`host:port`): itself when it is an IP address,
/// else the next of its resolved addresses.
pub async fn resolve(target: &Arc<str>) -> Result<SocketAddr, ConnectError> {
    if let Ok(a) = target.parse::<SocketAddr>() {
        return Ok(a);
    }
    let now = Instant::now();
    let carried = {
        let map = cache().lock().unwrap_or_else(|e| e.into_inner());
        match map.get(target) {
            Some(e) if e.until > now && !e.addrs.is_empty() => {
                let i = e.next.fetch_add(1, Ordering::Relaxed);
                return Ok(e.addrs[i % e.addrs.len()]);
            }
            // Expired: the rotation goes on where it was, over the new answer.
            Some(e) => e.next.clone(),
            None => Arc::default(),
        }
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&**target)
        .await
        .map_err(|e| ConnectError::Resolve(target.clone(), e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(ConnectError::Resolve(target.clone(), "no addresses".into()));
    }
    let i = carried.fetch_add(1, Ordering::Relaxed);
    let chosen = addrs[i % addrs.len()];
    let ttl = Duration::from_millis(TTL_MS.load(Ordering::Relaxed));
    cache().lock().unwrap_or_else(|e| e.into_inner()).insert(
        target.clone(),
        Entry {
            addrs,
            until: now + ttl,
            next: carried,
        },
    );
    Ok(chosen)
}

/// Connecting to an address of `target` failed: its addresses are looked up again on the
/// next connection (which also moves on to the next one).
pub fn failed(target: &Arc<str>) {
    if target.parse::<SocketAddr>().is_ok() {
        return;
    }
    if let Some(e) = cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(target)
    {
        e.until = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ip_targets_are_used_as_they_are_and_names_rotate_over_every_address() {
        let ip: Arc<str> = "127.0.0.1:8080".into();
        assert_eq!(
            resolve(&ip).await.unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );

        // `localhost` resolves to one or two loopback addresses here.
        let name: Arc<str> = "localhost:9".into();
        let all: Vec<SocketAddr> = tokio::net::lookup_host("localhost:9")
            .await
            .unwrap()
            .collect();
        let mut seen = Vec::new();
        for _ in 0..all.len() * 2 {
            seen.push(resolve(&name).await.unwrap());
        }
        for a in &all {
            assert_eq!(seen.iter().filter(|s| *s == a).count(), 2, "{seen:?}");
        }
        // A failure forces a new lookup, and the rotation goes on.
        failed(&name);
        let after = resolve(&name).await.unwrap();
        assert!(all.contains(&after));
        assert!(
            cache().lock().unwrap()[&name].until > Instant::now(),
            "looked up again"
        );

        let bad: Arc<str> = "no-such-host.invalid:80".into();
        assert!(matches!(
            resolve(&bad).await,
            Err(ConnectError::Resolve(..))
        ));
    }
}
