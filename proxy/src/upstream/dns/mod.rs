//! Addresses of targets named by host name (ExternalName Services, `host:` services), from
//! Weir's own stub resolver, as Kong's DNS client does rather than through `getaddrinfo`,
//! which hides record TTLs.
//!
//! Every address of the answer is used in turn. An answer is kept for its records' TTL (the
//! smallest along the CNAME chain, at least 1 s), or for `--dns-ttl` when that is set (nginx's
//! `resolver … valid=`); a failed lookup is remembered for [`NEGATIVE_TTL`], so a burst of
//! requests for a name that does not resolve sends one query, not one per request; concurrent
//! lookups of one name share one query. A failed connection to one address makes the next
//! connection look the name up again.
//!
//! The nameservers, search list and options come from `/etc/resolv.conf` (the servers from
//! `--dns-resolver` when given), names in `/etc/hosts` are answered from it; both files are
//! read again at most every few seconds, and only when a name is looked up.

mod client;
pub(crate) mod conf;
pub(crate) mod wire;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

use super::pool::ConnectError;
use conf::ResolvConf;
use wire::{Answer, TYPE_A, TYPE_AAAA};

pub use conf::parse_nameserver;

/// How long a failed lookup (no such name, no addresses, no answer) is remembered.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(1);
/// Shortest time an answer is kept, whatever its records say (a TTL of 0 would otherwise
/// mean one query per connection).
const MIN_TTL: Duration = Duration::from_secs(1);
/// How long names of `/etc/hosts` are kept without `--dns-ttl` (the file has no TTLs).
const HOSTS_TTL: Duration = Duration::from_secs(30);
/// How often `/etc/resolv.conf` and `/etc/hosts` may be read again.
const REREAD: Duration = Duration::from_secs(5);
/// Names cached before expired ones are dropped (targets come from the routing table and
/// plugins, so this is rarely reached).
const MAX_ENTRIES: usize = 4096;

/// `--dns-ttl` in milliseconds; `u64::MAX` when unset (the records' TTLs apply).
static TTL_OVERRIDE_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets, for the whole process, how long answers are kept: `Some` replaces the records' TTLs
/// (`--dns-ttl`), `None` uses them.
pub fn set_ttl(ttl: Option<Duration>) {
    let ms = ttl.map_or(u64::MAX, |t| {
        u64::try_from(t.as_millis()).unwrap_or(u64::MAX - 1)
    });
    TTL_OVERRIDE_MS.store(ms, Ordering::Relaxed);
}

fn ttl_override() -> Option<Duration> {
    match TTL_OVERRIDE_MS.load(Ordering::Relaxed) {
        u64::MAX => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// `--dns-resolver`: the servers asked instead of those of `/etc/resolv.conf` (empty: those).
static RESOLVERS: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

/// Sets, for the whole process, the nameservers asked (`--dns-resolver`); an empty list
/// means those of `/etc/resolv.conf`.
pub fn set_resolvers(servers: Vec<SocketAddr>) {
    *RESOLVERS.lock().unwrap_or_else(|e| e.into_inner()) = servers;
    // The next lookup reads the settings again, with these servers.
    *SYSTEM.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The resolver settings in force.
struct System {
    resolv: ResolvConf,
    hosts: HashMap<String, Vec<IpAddr>>,
    /// Whether `AAAA` records are worth asking for (this host has an IPv6 route).
    ipv6: bool,
    read: Instant,
}

static SYSTEM: Mutex<Option<Arc<System>>> = Mutex::new(None);

fn system() -> Arc<System> {
    let mut current = SYSTEM.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = &*current {
        if s.read.elapsed() < REREAD {
            return s.clone();
        }
    }
    // Small files, read only when a name is looked up, at most every REREAD.
    let mut resolv =
        conf::parse_resolv_conf(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    let servers = RESOLVERS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !servers.is_empty() {
        resolv.nameservers = servers;
    }
    let s = Arc::new(System {
        resolv,
        hosts: conf::parse_hosts(&std::fs::read_to_string("/etc/hosts").unwrap_or_default()),
        ipv6: client::has_ipv6_route(),
        read: Instant::now(),
    });
    *current = Some(s.clone());
    s
}

/// An answer for one target, good until `until`.
struct Resolved {
    /// Never empty when `Ok`.
    addrs: Result<Box<[SocketAddr]>, Arc<str>>,
    until: Instant,
}

/// One target's lookups.
struct Entry {
    /// The answer in use, or the lookup under way that every caller waits for (one query
    /// for concurrent connections).
    lookup: Arc<OnceCell<Resolved>>,
    /// Which address the next connection uses; carried over new answers.
    next: usize,
}

type Cache = Mutex<HashMap<Arc<str>, Entry>>;

fn cache() -> &'static Cache {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(Cache::default)
}

/// The next address of `target`, a `host:port` whose host is a name, looked up when its
/// answer ran out.
pub async fn resolve_name(target: &Arc<str>) -> Result<SocketAddr, ConnectError> {
    let lookup = {
        let mut map = cache().lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match map.get_mut(&**target) {
            Some(e) => {
                match e.lookup.get() {
                    Some(r) if r.until > now => return pick(&mut e.next, r, target),
                    // Ran out: a new lookup, which concurrent callers join.
                    Some(_) => e.lookup = Arc::default(),
                    None => {}
                }
                e.lookup.clone()
            }
            None => {
                if map.len() >= MAX_ENTRIES {
                    map.retain(|_, e| e.lookup.get().is_none_or(|r| r.until > now));
                }
                let lookup: Arc<OnceCell<Resolved>> = Arc::default();
                map.insert(
                    target.clone(),
                    Entry {
                        lookup: lookup.clone(),
                        next: 0,
                    },
                );
                lookup
            }
        }
    };
    // Whoever gets here first asks; if it is cancelled (its connect timeout), the next
    // waiter asks instead.
    let resolved = lookup.get_or_init(|| look_up(target)).await;
    let mut map = cache().lock().unwrap_or_else(|e| e.into_inner());
    // The entry may have been dropped meanwhile (a full cache): the first address then.
    let mut first = 0;
    let next = map.get_mut(&**target).map_or(&mut first, |e| &mut e.next);
    pick(next, resolved, target)
}

/// The next address of an answer, or its error.
fn pick(next: &mut usize, r: &Resolved, target: &Arc<str>) -> Result<SocketAddr, ConnectError> {
    match &r.addrs {
        Ok(addrs) if !addrs.is_empty() => {
            let i = *next;
            *next = next.wrapping_add(1);
            Ok(addrs[i % addrs.len()])
        }
        Ok(_) => Err(ConnectError::Resolve(target.clone(), "no addresses".into())),
        Err(why) => Err(ConnectError::Resolve(target.clone(), why.to_string())),
    }
}

/// Connecting to an address of `target` failed: its addresses are looked up again on the
/// next connection (which also moves on to the next one).
pub fn failed(target: &Arc<str>) {
    if target.parse::<SocketAddr>().is_ok() {
        return;
    }
    let mut map = cache().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = map.get_mut(&**target) {
        // A lookup already under way is as new as it gets.
        if e.lookup.initialized() {
            e.lookup = Arc::default();
        }
    }
}

/// Looks `target` up and says for how long the answer holds.
async fn look_up(target: &str) -> Resolved {
    let result = addresses(target).await;
    let now = Instant::now();
    match result {
        Ok((addrs, ttl)) => {
            let keep = ttl_override().unwrap_or_else(|| ttl.max(MIN_TTL));
            tracing::debug!(target, ?addrs, ?keep, "resolved");
            Resolved {
                addrs: Ok(addrs.into()),
                until: now + keep,
            }
        }
        Err(why) => {
            tracing::debug!(target, error = %why, "resolution failed");
            Resolved {
                addrs: Err(why.into()),
                until: now + NEGATIVE_TTL,
            }
        }
    }
}

/// Every address of `target` (`host:port`) and the TTL of the answer: from `/etc/hosts`, else
/// from the nameservers, trying the search list as glibc does.
async fn addresses(target: &str) -> Result<(Vec<SocketAddr>, Duration), String> {
    let (host, port) = target
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| "not host:port".to_string())?;
    let sys = system();
    let key = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if let Some(ips) = sys.hosts.get(&key) {
        let addrs = ips.iter().map(|&ip| SocketAddr::new(ip, port)).collect();
        return Ok((addrs, HOSTS_TTL));
    }
    let mut server_error = None;
    let mut nodata = false;
    for name in conf::candidates(host, &sys.resolv) {
        let (a, aaaa) = if sys.ipv6 {
            tokio::join!(
                client::query(&sys.resolv, &name, TYPE_A),
                client::query(&sys.resolv, &name, TYPE_AAAA)
            )
        } else {
            let a = client::query(&sys.resolv, &name, TYPE_A).await;
            (a, Ok(Answer::NxDomain))
        };
        let mut addrs = Vec::new();
        let mut ttl: Option<u32> = None;
        let mut unreachable = None;
        for answer in [a, aaaa] {
            match answer {
                Ok(Answer::Records {
                    addrs: found,
                    ttl: t,
                }) => {
                    nodata |= found.is_empty();
                    if !found.is_empty() {
                        addrs.extend(found.into_iter().map(|ip| SocketAddr::new(ip, port)));
                        ttl = match (ttl, t) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                    }
                }
                Ok(Answer::NxDomain | Answer::Truncated) => {}
                Err(e @ client::QueryError::Server(_)) => server_error = Some(e.to_string()),
                Err(e) => unreachable = Some(e.to_string()),
            }
        }
        if !addrs.is_empty() {
            return Ok((addrs, Duration::from_secs(ttl.unwrap_or(0).into())));
        }
        // No server answered: the other names would not fare better (glibc stops too).
        if let Some(e) = unreachable {
            return Err(e);
        }
    }
    Err(match server_error {
        Some(e) => e,
        None if nodata => "no addresses".into(),
        None => "no such name (NXDOMAIN)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_of_etc_hosts_rotate_over_every_address() {
        // `localhost` is in /etc/hosts here, with one or two loopback addresses.
        let name: Arc<str> = "localhost:9".into();
        let sys = system();
        let Some(all) = sys.hosts.get("localhost") else {
            return;
        };
        let all: Vec<SocketAddr> = all.iter().map(|&ip| SocketAddr::new(ip, 9)).collect();
        let mut seen = Vec::new();
        for _ in 0..all.len() * 2 {
            seen.push(resolve_name(&name).await.unwrap());
        }
        for a in &all {
            assert_eq!(seen.iter().filter(|s| *s == a).count(), 2, "{seen:?}");
        }
        // A failure forces a new lookup, and the rotation goes on.
        failed(&name);
        assert!(!cache().lock().unwrap()[&name].lookup.initialized());
        let after = resolve_name(&name).await.unwrap();
        assert!(all.contains(&after));
        assert!(cache().lock().unwrap()[&name].lookup.initialized());
    }

    #[tokio::test]
    async fn a_target_without_a_port_does_not_resolve() {
        let bad: Arc<str> = "no-port".into();
        assert!(matches!(
            resolve_name(&bad).await,
            Err(ConnectError::Resolve(..))
        ));
    }
}
