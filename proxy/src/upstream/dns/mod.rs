//! Addresses of targets named by host name (ExternalName Services, `host:` services), from
//! Weir's own stub resolver, as Kong's DNS client does rather than through `getaddrinfo`,
//! which hides record TTLs.
//!
//! Every address of the answer is used in turn. An answer is kept for its records' TTL (the
//! smallest along the CNAME chain, at least 1 s), or for `--dns-ttl` when that is set (nginx's
//! `resolver … valid=`, also at least 1 s); once it ran out it is still used for up to
//! [`STALE`] while one lookup refreshes it in the background, so that requests do not wait for
//! the query. A lookup that fails without an answer (timeouts, unreachable servers, SERVFAIL)
//! does not replace known addresses: they are still used, up to [`STALE_ON_ERROR`] past their
//! TTL, and looked up again at most once per [`NEGATIVE_TTL`] meanwhile (RFC 8767's
//! serve-stale); only an authoritative "no such name" (NXDOMAIN, or no addresses) replaces
//! them. A failed lookup with nothing to fall back on is remembered for [`NEGATIVE_TTL`], so
//! a burst of requests for a name that does not resolve sends one query, not one per request.
//! Lookups run in tasks of their own, bounded by the resolver's timeouts: concurrent callers
//! of one name share one query, and a caller that gives up (its connect timeout) cancels
//! nothing; a lookup whose runtime stopped is started again by those waiting for it. `A` and
//! `AAAA` are asked together; once one has addresses, the other gets [`OTHER_FAMILY_WAIT`]
//! more. A failed connection (refused or timed out) to one address makes the next connection
//! look the name up again, at most once per [`RELOOK_AFTER_FAILURE`].
//!
//! The nameservers, search list and options come from `/etc/resolv.conf` (the servers from
//! `--dns-resolver` when given), names in `/etc/hosts` are answered from it; both files are
//! read again at most every few seconds, and only when a name is looked up (a file that
//! cannot be read then leaves the settings as they were).

mod client;
pub(crate) mod conf;
pub(crate) mod wire;

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::pool::ConnectError;
use client::QueryError;
use conf::ResolvConf;
use wire::{Answer, TYPE_A, TYPE_AAAA};

pub use conf::parse_nameserver;

/// How long a failed lookup (no such name, no addresses, no answer) is remembered.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(1);
/// How long past its TTL an answer is still used while a lookup refreshes it.
pub const STALE: Duration = Duration::from_secs(10);
/// How long past its TTL an answer is still used while lookups fail without an answer
/// (timeouts, SERVFAIL), retried once per [`NEGATIVE_TTL`] (RFC 8767, Kong's `stale_ttl`).
pub const STALE_ON_ERROR: Duration = Duration::from_secs(300);
/// How much longer the other of `A` and `AAAA` is waited for once one has addresses (as
/// RFC 8305's resolution delay): a server that drops one type does not hold up the other.
pub const OTHER_FAMILY_WAIT: Duration = Duration::from_millis(75);
/// How old an answer must be for a failed connection to one of its addresses to look the
/// name up again.
pub const RELOOK_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// Shortest time an answer is kept, whatever its records say (a TTL of 0 would otherwise
/// mean one query per connection).
const MIN_TTL: Duration = Duration::from_secs(1);
/// How long names of `/etc/hosts` are kept without `--dns-ttl` (the file has no TTLs).
const HOSTS_TTL: Duration = Duration::from_secs(30);
/// How often `/etc/resolv.conf` and `/etc/hosts` may be read again.
const REREAD: Duration = Duration::from_secs(5);
/// Names cached before spent ones are dropped, then the least recently used (targets come
/// from the routing table and plugins, so this is rarely reached).
const MAX_ENTRIES: usize = 4096;

/// `--dns-ttl` in milliseconds; `u64::MAX` when unset (the records' TTLs apply).
static TTL_OVERRIDE_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets, for the whole process, how long answers are kept: `Some` replaces the records' TTLs
/// (`--dns-ttl`; at least 1 s all the same, as the records' TTLs: shorter would make every
/// answer stale at once, one refresh per request), `None` uses them.
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
    SETTINGS_CHANGED.fetch_add(1, Ordering::Relaxed);
}

/// Bumped by [`set_resolvers`]: settings read before are read again.
static SETTINGS_CHANGED: AtomicU64 = AtomicU64::new(0);

/// The resolver settings in force.
struct System {
    resolv: ResolvConf,
    /// What `/etc/resolv.conf` said, before `--dns-resolver` (kept when it cannot be read).
    file: ResolvConf,
    hosts: HashMap<String, Vec<IpAddr>>,
    /// Whether `AAAA` records are worth asking for (this host has an IPv6 route).
    ipv6: bool,
    read: Instant,
    /// [`SETTINGS_CHANGED`] when read.
    generation: u64,
}

static SYSTEM: Mutex<Option<Arc<System>>> = Mutex::new(None);

fn system() -> Arc<System> {
    let mut current = SYSTEM.lock().unwrap_or_else(|e| e.into_inner());
    let generation = SETTINGS_CHANGED.load(Ordering::Relaxed);
    if let Some(s) = &*current {
        if s.read.elapsed() < REREAD && s.generation == generation {
            return s.clone();
        }
    }
    // Small files, read only when a name is looked up, at most every REREAD.
    let servers = RESOLVERS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let s = Arc::new(read_settings(
        std::fs::read_to_string("/etc/resolv.conf").ok().as_deref(),
        std::fs::read_to_string("/etc/hosts").ok().as_deref(),
        current.as_deref(),
        servers,
        client::has_ipv6_route(),
        generation,
    ));
    *current = Some(s.clone());
    s
}

/// The settings from the texts of `/etc/resolv.conf` and `/etc/hosts` (`None`: the file
/// could not be read, and what it said `before` stays) and `--dns-resolver`'s `servers`.
fn read_settings(
    resolv: Option<&str>,
    hosts: Option<&str>,
    before: Option<&System>,
    servers: Vec<SocketAddr>,
    ipv6: bool,
    generation: u64,
) -> System {
    let file = match (resolv, before) {
        (Some(text), _) => conf::parse_resolv_conf(text),
        (None, Some(b)) => b.file.clone(),
        (None, None) => ResolvConf::default(),
    };
    let mut resolv = file.clone();
    if !servers.is_empty() {
        resolv.nameservers = servers;
    }
    let hosts = match (hosts, before) {
        (Some(text), _) => conf::parse_hosts(text),
        (None, Some(b)) => b.hosts.clone(),
        (None, None) => HashMap::new(),
    };
    System {
        resolv,
        file,
        hosts,
        ipv6,
        read: Instant::now(),
        generation,
    }
}

/// How long an answer is kept: `--dns-ttl` (`over`) if set, else the records' `ttl`; at least
/// [`MIN_TTL`] either way.
fn keep_for(ttl: Duration, over: Option<Duration>) -> Duration {
    over.unwrap_or(ttl).max(MIN_TTL)
}

/// Why a lookup gave no addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LookupError {
    /// The servers say the name has no addresses (NXDOMAIN, or no records of the types
    /// asked): this replaces addresses known before.
    NoSuchName(String),
    /// No usable answer (timeouts, unreachable servers, SERVFAIL…, or a bad target): addresses
    /// known before are kept.
    Failed(String),
}

impl LookupError {
    fn text(self) -> String {
        match self {
            LookupError::NoSuchName(s) | LookupError::Failed(s) => s,
        }
    }
}

/// An answer for one target.
struct Resolved {
    /// Never empty when `Ok`.
    addrs: Result<Box<[SocketAddr]>, Arc<str>>,
    /// When the lookup that gave it, or last kept it after failing, ended.
    at: Instant,
    /// Until when it holds (its TTL, `--dns-ttl`, or [`NEGATIVE_TTL`]); a kept answer keeps
    /// its own.
    until: Instant,
}

/// A lookup under way: its task sends the answer once, to every caller waiting for it.
struct Pending {
    /// Which lookup this is, so that its task stores its answer only in its own entry.
    id: u64,
    rx: watch::Receiver<Option<Arc<Resolved>>>,
}

impl Pending {
    /// Whether its task still runs (it is gone without an answer only when the runtime it
    /// ran on stopped).
    fn live(&self) -> bool {
        self.rx.has_changed().is_ok()
    }
}

/// One target's answer and lookups.
struct Entry {
    /// The latest answer.
    answer: Option<Arc<Resolved>>,
    /// Until when `answer` is used as is.
    fresh: Instant,
    /// Until when, past `fresh`, it is still used while one lookup refreshes it in the
    /// background ([`STALE`] for addresses, up to [`STALE_ON_ERROR`] past their TTL once
    /// lookups fail; never for an error or after a failed connection).
    stale: Instant,
    /// The lookup under way, if any.
    pending: Option<Pending>,
    /// Which address the next connection uses; carried over new answers.
    next: usize,
    /// Last asked for (the oldest go first when the cache is full).
    used: Instant,
}

impl Entry {
    /// Whether nothing in it is worth keeping at `now`: no lookup under way and no answer
    /// that may still be used.
    fn spent(&self, now: Instant) -> bool {
        !self.pending.as_ref().is_some_and(Pending::live)
            && (self.answer.is_none() || now >= self.fresh.max(self.stale))
    }
}

/// The cache of answers, and where lookups take their settings from.
struct Resolver {
    cache: Mutex<HashMap<Arc<str>, Entry>>,
    /// Settings fixed for tests; `None`: the system's ([`system`]).
    settings: Option<Arc<System>>,
    /// Names cached at most ([`MAX_ENTRIES`]).
    max_entries: usize,
}

/// What [`Resolver::start`] found.
enum Start {
    /// The answer, used as it is.
    Done(Result<SocketAddr, ConnectError>),
    /// A lookup to wait for.
    Wait(watch::Receiver<Option<Arc<Resolved>>>),
}

/// Numbers the lookups (process-wide, so that ids never repeat across resolvers).
static LOOKUPS: AtomicU64 = AtomicU64::new(0);

fn resolver() -> &'static Resolver {
    static RESOLVER: std::sync::OnceLock<Resolver> = std::sync::OnceLock::new();
    RESOLVER.get_or_init(|| Resolver::new(None, MAX_ENTRIES))
}

/// The next address of `target`, a `host:port` whose host is a name, looked up when its
/// answer ran out.
pub async fn resolve_name(target: &Arc<str>) -> Result<SocketAddr, ConnectError> {
    resolver().resolve(target).await
}

/// Connecting to an address of `target` failed (refused, or timed out): its addresses are
/// looked up again on the next connection, unless the answer is newer than
/// [`RELOOK_AFTER_FAILURE`] (the rotation moves the next connection on to another address
/// anyway). IP targets are ignored.
pub fn failed(target: &Arc<str>) {
    if target.parse::<SocketAddr>().is_ok() {
        return;
    }
    resolver().failed(target, Instant::now());
}

impl Resolver {
    fn new(settings: Option<Arc<System>>, max_entries: usize) -> Resolver {
        Resolver {
            cache: Mutex::default(),
            settings,
            max_entries,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Entry>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn resolve(&'static self, target: &Arc<str>) -> Result<SocketAddr, ConnectError> {
        // A lookup whose task is gone without an answer (its runtime stopped: a worker's at
        // shutdown, the health checker's) is started once more, on this caller's runtime.
        for round in 0.. {
            let mut rx = match self.start(target) {
                Start::Done(r) => return r,
                Start::Wait(rx) => rx,
            };
            // The lookup runs in a task of its own: a caller that gives up (its connect
            // timeout) cancels nothing, and those after it find the answer, or the same
            // lookup under way.
            let resolved = match rx.wait_for(Option::is_some).await {
                Ok(r) => r.clone(),
                Err(_) => None,
            };
            let Some(resolved) = resolved else {
                if round == 0 {
                    continue;
                }
                return Err(ConnectError::Resolve(
                    target.clone(),
                    "lookup abandoned".into(),
                ));
            };
            let mut map = self.lock();
            // The entry may have been dropped meanwhile (a full cache): the first address then.
            let mut first = 0;
            let next = map.get_mut(&**target).map_or(&mut first, |e| &mut e.next);
            return pick(next, &resolved, target);
        }
        unreachable!("the loop returns")
    }

    /// The next address of `target`'s answer when it may be used, else the lookup to wait
    /// for, started if there is none.
    fn start(&'static self, target: &Arc<str>) -> Start {
        Start::Wait({
            let mut map = self.lock();
            let now = Instant::now();
            if !map.contains_key(&**target) {
                self.make_room(&mut map, now);
                map.insert(
                    target.clone(),
                    Entry {
                        answer: None,
                        fresh: now,
                        stale: now,
                        pending: None,
                        next: 0,
                        used: now,
                    },
                );
            }
            let Some(e) = map.get_mut(&**target) else {
                unreachable!("inserted above")
            };
            e.used = now;
            if let Some(r) = &e.answer {
                if now < e.fresh {
                    return Start::Done(pick(&mut e.next, r, target));
                }
                if now < e.stale {
                    // Ran out a little while ago: used while one lookup refreshes it.
                    let r = r.clone();
                    self.look_up_in_background(target, e);
                    return Start::Done(pick(&mut e.next, &r, target));
                }
            }
            self.look_up_in_background(target, e)
        })
    }

    /// The lookup of `target` under way, started (in a task of its own) if there is none.
    fn look_up_in_background(
        &'static self,
        target: &Arc<str>,
        e: &mut Entry,
    ) -> watch::Receiver<Option<Arc<Resolved>>> {
        if let Some(p) = e.pending.as_ref().filter(|p| p.live()) {
            return p.rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        let id = LOOKUPS.fetch_add(1, Ordering::Relaxed);
        e.pending = Some(Pending { id, rx: rx.clone() });
        let target = target.clone();
        tokio::spawn(async move {
            let sys = self.settings.clone().unwrap_or_else(system);
            // Bounded on its own, beyond as long as the resolver would try.
            let bound = lookup_bound(&sys.resolv);
            let result = match tokio::time::timeout(bound, addresses(&target, &sys)).await {
                Ok(r) => r,
                Err(_) => Err(LookupError::Failed(format!("no answer within {bound:?}"))),
            };
            let r = {
                let mut map = self.lock();
                match map
                    .get_mut(&*target)
                    .filter(|e| e.pending.as_ref().is_some_and(|p| p.id == id))
                {
                    Some(e) => {
                        let (r, fresh, stale) =
                            answered(&target, result, e.answer.as_deref(), Instant::now());
                        let r = Arc::new(r);
                        (e.fresh, e.stale) = (fresh, stale);
                        e.answer = Some(r.clone());
                        e.pending = None;
                        r
                    }
                    None => Arc::new(answered(&target, result, None, Instant::now()).0),
                }
            };
            tx.send_replace(Some(r));
        });
        rx
    }

    /// Before a new name goes in: when the cache is full, drops the entries with nothing
    /// worth keeping, then, if it is still more than three quarters full, the least recently
    /// used, so that the next scan is a quarter of the cache's inserts away.
    fn make_room(&self, map: &mut HashMap<Arc<str>, Entry>, now: Instant) {
        if map.len() < self.max_entries {
            return;
        }
        map.retain(|_, e| !e.spent(now));
        let keep = self.max_entries * 3 / 4;
        if map.len() <= keep {
            return;
        }
        let mut by_use: Vec<(Instant, Arc<str>)> =
            map.iter().map(|(k, e)| (e.used, k.clone())).collect();
        let drop = by_use.len() - keep;
        by_use.select_nth_unstable_by_key(drop - 1, |(used, _)| *used);
        for (_, k) in &by_use[..drop] {
            map.remove(k);
        }
    }

    fn failed(&self, target: &str, now: Instant) {
        let mut map = self.lock();
        let Some(e) = map.get_mut(target) else {
            return;
        };
        // A lookup under way is as new as it gets; an answer younger than a second is
        // kept (otherwise every connection to a refusing address would ask again).
        if e.pending.as_ref().is_some_and(Pending::live) {
            return;
        }
        if e.answer
            .as_ref()
            .is_some_and(|r| now.saturating_duration_since(r.at) >= RELOOK_AFTER_FAILURE)
        {
            // The next connection waits for the new answer rather than use this one.
            e.fresh = now;
            e.stale = now;
        }
    }
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

/// How long a lookup may take at most: longer than the resolver tries (every name of the
/// search list, every attempt on every server, each over UDP and again over TCP, and the wait
/// for the other address family), so that it ends with the resolver's own error.
fn lookup_bound(resolv: &ResolvConf) -> Duration {
    let names = u32::try_from(resolv.search.len() + 1).unwrap_or(u32::MAX);
    let tries = resolv
        .attempts
        .max(1)
        .saturating_mul(resolv.nameservers.len().max(1))
        .saturating_mul(2);
    let per_name = resolv
        .timeout
        .saturating_mul(u32::try_from(tries).unwrap_or(u32::MAX))
        .saturating_add(OTHER_FAMILY_WAIT);
    per_name.saturating_mul(names).saturating_add(MIN_TTL)
}

/// The answer of a lookup of `target` ending at `now`, given the answer `before` it, with
/// until when it is used as is and until when while a lookup refreshes it.
fn answered(
    target: &str,
    result: Result<(Vec<SocketAddr>, Duration), LookupError>,
    before: Option<&Resolved>,
    now: Instant,
) -> (Resolved, Instant, Instant) {
    let why = match result {
        Ok((addrs, ttl)) => {
            let keep = keep_for(ttl, ttl_override());
            tracing::debug!(target, ?addrs, ?keep, "resolved");
            let until = now + keep;
            let r = Resolved {
                addrs: Ok(addrs.into()),
                at: now,
                until,
            };
            return (r, until, until + STALE);
        }
        Err(LookupError::Failed(why)) => {
            // No answer: addresses known before are still used (up to STALE_ON_ERROR past
            // their TTL), and looked up again once per NEGATIVE_TTL.
            if let Some(old) = before {
                let limit = old.until + STALE_ON_ERROR;
                if matches!(&old.addrs, Ok(a) if !a.is_empty()) && now < limit {
                    tracing::warn!(target, error = %why, "resolution failed, using the addresses known before");
                    let r = Resolved {
                        addrs: old.addrs.clone(),
                        at: now,
                        until: old.until,
                    };
                    return (r, (now + NEGATIVE_TTL).min(limit), limit);
                }
            }
            why
        }
        Err(e) => e.text(),
    };
    tracing::debug!(target, error = %why, "resolution failed");
    let until = now + NEGATIVE_TTL;
    let r = Resolved {
        addrs: Err(why.into()),
        at: now,
        until,
    };
    (r, until, until)
}

/// The answers to `A` and `AAAA` questions for `name`, asked together; once one has
/// addresses, the other is waited for [`OTHER_FAMILY_WAIT`] more at most.
async fn both_families(
    conf: &ResolvConf,
    name: &str,
) -> (Result<Answer, QueryError>, Result<Answer, QueryError>) {
    let a = client::query(conf, name, TYPE_A);
    let aaaa = client::query(conf, name, TYPE_AAAA);
    tokio::pin!(a, aaaa);
    tokio::select! {
        r = &mut a => {
            let other = other_family(&r, aaaa).await;
            (r, other)
        }
        r = &mut aaaa => {
            let other = other_family(&r, a).await;
            (other, r)
        }
    }
}

/// The answer of `other` after `first` came: waited for in full unless `first` has addresses.
async fn other_family(
    first: &Result<Answer, QueryError>,
    other: impl Future<Output = Result<Answer, QueryError>>,
) -> Result<Answer, QueryError> {
    if !matches!(first, Ok(Answer::Records { addrs, .. }) if !addrs.is_empty()) {
        return other.await;
    }
    tokio::time::timeout(OTHER_FAMILY_WAIT, other)
        .await
        .unwrap_or_else(|_| {
            Err(QueryError::Timeout(
                "the other address family".into(),
                OTHER_FAMILY_WAIT,
            ))
        })
}

/// Every address of `target` (`host:port`) and the TTL of the answer: from `/etc/hosts`, else
/// from the nameservers, trying the search list as glibc does.
async fn addresses(target: &str, sys: &System) -> Result<(Vec<SocketAddr>, Duration), LookupError> {
    let (host, port) = target
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| LookupError::Failed("not host:port".into()))?;
    let key = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if let Some(ips) = sys.hosts.get(&key) {
        let addrs = ips.iter().map(|&ip| SocketAddr::new(ip, port)).collect();
        return Ok((addrs, HOSTS_TTL));
    }
    // A question that got no answer (server failure, timeout, I/O error): the lookup fails
    // rather than say the name has no addresses.
    let mut failure = None;
    let mut nodata = false;
    for name in conf::candidates(host, &sys.resolv) {
        let answers = if sys.ipv6 {
            let (a, aaaa) = both_families(&sys.resolv, &name).await;
            vec![a, aaaa]
        } else {
            vec![client::query(&sys.resolv, &name, TYPE_A).await]
        };
        let asked = answers.len();
        let mut addrs = Vec::new();
        let mut ttl: Option<u32> = None;
        let mut unreachable = 0;
        for answer in answers {
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
                Err(e @ QueryError::Server(_)) => failure = Some(e.to_string()),
                Err(e) => {
                    unreachable += 1;
                    failure = Some(e.to_string());
                }
            }
        }
        if !addrs.is_empty() {
            return Ok((addrs, Duration::from_secs(ttl.unwrap_or(0).into())));
        }
        // No question answered (timeouts, I/O errors): the servers are out of reach, the
        // other names would not fare better (glibc stops too).
        if unreachable == asked {
            return Err(LookupError::Failed(failure.unwrap_or_default()));
        }
    }
    Err(match failure {
        Some(e) => LookupError::Failed(e),
        None if nodata => LookupError::NoSuchName("no addresses".into()),
        None => LookupError::NoSuchName("no such name (NXDOMAIN)".into()),
    })
}

/// For tests of other modules: makes the process resolver's answer for `target` look `by`
/// older than it is.
#[cfg(test)]
pub(crate) fn age_for_test(target: &str, by: Duration) {
    tests::age(resolver(), target, by);
}

/// For tests of other modules: whether the next connection to `target` waits for a new
/// lookup (a failed connection asked for one).
#[cfg(test)]
pub(crate) fn relook_forced(target: &str) -> bool {
    resolver()
        .lock()
        .get(target)
        .is_some_and(|e| e.fresh <= Instant::now() && e.stale <= Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::net::UdpSocket;

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
        let answer_at = || resolver().lock()[&name].answer.as_ref().unwrap().at;
        let first = answer_at();
        // A failure right after the lookup keeps the answer: no new lookup.
        failed(&name);
        assert!(resolver().lock()[&name].fresh > Instant::now());
        // A second later, it forces one, and the rotation goes on.
        age(resolver(), &name, RELOOK_AFTER_FAILURE);
        failed(&name);
        assert!(resolver().lock()[&name].fresh <= Instant::now());
        let after = resolve_name(&name).await.unwrap();
        assert!(all.contains(&after));
        assert!(answer_at() > first);
        // IP targets are nobody's business here.
        failed(&"127.0.0.1:9".into());
        assert!(!resolver().lock().contains_key("127.0.0.1:9"));
    }

    #[tokio::test]
    async fn a_target_without_a_port_does_not_resolve() {
        let bad: Arc<str> = "no-port".into();
        assert!(matches!(
            resolve_name(&bad).await,
            Err(ConnectError::Resolve(..))
        ));
    }

    /// Makes the answer for `target` look `by` older than it is.
    pub(super) fn age(r: &Resolver, target: &str, by: Duration) {
        let mut map = r.lock();
        let e = map.get_mut(target).unwrap();
        let old = e.answer.as_ref().unwrap();
        e.answer = Some(Arc::new(Resolved {
            addrs: old.addrs.clone(),
            at: old.at.checked_sub(by).unwrap(),
            until: old.until,
        }));
    }

    /// Settings asking `servers` only (1 s per server, one attempt), with `hosts`.
    fn settings(servers: &[SocketAddr], hosts: &[(&str, &str)]) -> Arc<System> {
        let mut s = read_settings(Some(""), Some(""), None, servers.to_vec(), false, 0);
        s.resolv.timeout = Duration::from_secs(1);
        s.resolv.attempts = 1;
        for (name, ip) in hosts {
            s.hosts
                .entry(name.to_string())
                .or_default()
                .push(ip.parse().unwrap());
        }
        Arc::new(s)
    }

    /// A resolver of its own (not the process's), as the tasks it starts want it: `'static`.
    fn resolver_with(settings: Arc<System>, max_entries: usize) -> &'static Resolver {
        Box::leak(Box::new(Resolver::new(Some(settings), max_entries)))
    }

    /// What [`Server`] answers.
    #[derive(Clone, Copy)]
    struct Reply {
        addr: [u8; 4],
        delay: Duration,
        /// Non-zero: this RCODE (2 SERVFAIL, 3 NXDOMAIN), without records.
        rcode: u8,
        /// Whether `AAAA` questions get an answer (with the A record only: no data).
        aaaa: bool,
    }

    /// A DNS server on loopback answering every A question with `addr` (TTL 1 s) after
    /// `delay` (the latest values of both); it counts the questions.
    struct Server {
        at: SocketAddr,
        asked: Arc<AtomicUsize>,
        answer: Arc<Mutex<Reply>>,
    }

    /// The type asked in a query (after the name of its question).
    fn qtype(q: &[u8]) -> u16 {
        let mut i = 12;
        while i < q.len() && q[i] != 0 {
            i += usize::from(q[i]) + 1;
        }
        q.get(i + 1..i + 3)
            .map_or(0, |t| u16::from_be_bytes([t[0], t[1]]))
    }

    impl Server {
        async fn start(addr: [u8; 4], delay: Duration) -> Server {
            let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
            let at = socket.local_addr().unwrap();
            let asked = Arc::new(AtomicUsize::new(0));
            let answer = Arc::new(Mutex::new(Reply {
                addr,
                delay,
                rcode: 0,
                aaaa: true,
            }));
            let (count, answer2) = (asked.clone(), answer.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 512];
                loop {
                    let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                        return;
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    let q = buf[..n].to_vec();
                    let reply = *answer2.lock().unwrap();
                    if !reply.aaaa && qtype(&q) == TYPE_AAAA {
                        continue;
                    }
                    let socket = socket.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(reply.delay).await;
                        let mut m = q[..2].to_vec();
                        let records = u8::from(reply.rcode == 0);
                        m.extend_from_slice(&[0x81, 0x80 | reply.rcode, 0, 1, 0, records]);
                        m.extend_from_slice(&[0, 0, 0, 0]);
                        m.extend_from_slice(&q[12..]);
                        if records == 1 {
                            m.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4]);
                            m.extend_from_slice(&reply.addr);
                        }
                        let _ = socket.send_to(&m, from).await;
                    });
                }
            });
            Server { at, asked, answer }
        }

        fn asked(&self) -> usize {
            self.asked.load(Ordering::SeqCst)
        }

        fn set(&self, addr: [u8; 4], delay: Duration) {
            let mut a = self.answer.lock().unwrap();
            (a.addr, a.delay, a.rcode) = (addr, delay, 0);
        }

        /// Answers with `rcode` (and no records) from now on.
        fn fail(&self, rcode: u8) {
            self.answer.lock().unwrap().rcode = rcode;
        }

        /// Leaves `AAAA` questions unanswered from now on.
        fn ignore_aaaa(&self) {
            self.answer.lock().unwrap().aaaa = false;
        }
    }

    /// Makes `target`'s answer run out now: the next caller waits for a lookup.
    fn expire(r: &Resolver, target: &str) {
        let mut map = r.lock();
        let e = map.get_mut(target).unwrap();
        (e.fresh, e.stale) = (Instant::now(), Instant::now());
    }

    #[tokio::test]
    async fn a_failed_lookup_keeps_the_addresses_known_before() {
        let server = Server::start([10, 0, 0, 1], Duration::ZERO).await;
        let r = resolver_with(settings(&[server.at], &[]), 16);
        let target: Arc<str> = "flaky.weir.test:80".into();
        let one: SocketAddr = ([10, 0, 0, 1], 80).into();
        assert_eq!(r.resolve(&target).await.unwrap(), one);

        // SERVFAIL from now on. The answer ran out: used while it is refreshed, and still
        // after the refresh failed, retried at most once per NEGATIVE_TTL.
        server.fail(2);
        r.lock().get_mut(&*target).unwrap().fresh = Instant::now();
        assert_eq!(r.resolve(&target).await.unwrap(), one);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(server.asked(), 2);
        for _ in 0..20 {
            assert_eq!(r.resolve(&target).await.unwrap(), one);
        }
        assert_eq!(server.asked(), 2);
        {
            let map = r.lock();
            let e = &map[&*target];
            let now = Instant::now();
            assert!(e.fresh > now && e.fresh <= now + NEGATIVE_TTL);
            assert!(e.stale > now + STALE, "kept only as long as usual");
        }

        // Past STALE as well (or after a failed connection): the caller waits for the
        // lookup, which fails, and gets the addresses known before.
        expire(r, &target);
        assert_eq!(r.resolve(&target).await.unwrap(), one);
        assert_eq!(server.asked(), 3);
        age(r, &target, RELOOK_AFTER_FAILURE);
        r.failed(&target, Instant::now());
        assert_eq!(r.resolve(&target).await.unwrap(), one);
        assert_eq!(server.asked(), 4);

        // Up to STALE_ON_ERROR past their TTL, not longer; with nothing before, the error.
        let old = r.lock()[&*target].answer.clone().unwrap();
        let failed = || Err(LookupError::Failed("SERVFAIL".into()));
        let (kept, ..) = answered("x:80", failed(), Some(&old), old.until + STALE_ON_ERROR);
        assert!(kept.addrs.is_err());
        let (kept, ..) = answered("x:80", failed(), None, Instant::now());
        assert!(kept.addrs.is_err());

        // An authoritative "no such name" does replace them.
        server.set([10, 0, 0, 2], Duration::ZERO);
        expire(r, &target);
        let two: SocketAddr = ([10, 0, 0, 2], 80).into();
        assert_eq!(r.resolve(&target).await.unwrap(), two);
        server.fail(3);
        r.lock().get_mut(&*target).unwrap().fresh = Instant::now();
        assert_eq!(r.resolve(&target).await.unwrap(), two);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(
            r.resolve(&target).await,
            Err(ConnectError::Resolve(..))
        ));
        assert_eq!(server.asked(), 6);
    }

    #[tokio::test]
    async fn an_unanswered_aaaa_question_does_not_hold_up_the_a_records() {
        let server = Server::start([10, 0, 0, 1], Duration::ZERO).await;
        server.ignore_aaaa();
        let Ok(mut s) = Arc::try_unwrap(settings(&[server.at], &[])) else {
            unreachable!("one reference")
        };
        s.ipv6 = true;
        let r = resolver_with(Arc::new(s), 16);
        let started = Instant::now();
        assert_eq!(
            r.resolve(&"dual.weir.test:80".into()).await.unwrap(),
            ([10, 0, 0, 1], 80).into()
        );
        // Not the server's timeout (1 s).
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(server.asked(), 2);
    }

    #[test]
    fn a_lookup_is_bounded_beyond_what_the_resolver_tries() {
        let c = ResolvConf {
            nameservers: vec!["10.0.0.1:53".parse().unwrap(); 3],
            search: vec!["a.test".into(), "b.test".into()],
            attempts: 2,
            timeout: Duration::from_secs(1),
            ..ResolvConf::default()
        };
        // 3 names × 2 attempts × 3 servers × 1 s, each over UDP then TCP.
        assert!(lookup_bound(&c) > Duration::from_secs(3 * 2 * 3 * 2));
    }

    #[tokio::test]
    async fn a_lookup_whose_runtime_stopped_is_started_again_by_those_waiting() {
        let server = Server::start([10, 0, 0, 1], Duration::from_millis(300)).await;
        let r = resolver_with(settings(&[server.at], &[]), 16);
        let target: Arc<str> = "orphan.weir.test:80".into();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (stop_tx, stop) = std::sync::mpsc::channel::<()>();
        let t = target.clone();
        // Another runtime starts the lookup, then stops.
        let other = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let _ = tokio::time::timeout(Duration::from_millis(20), r.resolve(&t)).await;
            });
            started_tx.send(()).unwrap();
            stop.recv().unwrap();
            drop(rt);
        });
        started.await.unwrap();
        let t = target.clone();
        let waiter = tokio::spawn(async move { r.resolve(&t).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(()).unwrap();
        tokio::task::spawn_blocking(move || other.join().unwrap())
            .await
            .unwrap();
        assert_eq!(waiter.await.unwrap().unwrap(), ([10, 0, 0, 1], 80).into());
        assert_eq!(server.asked(), 2);
    }

    #[test]
    fn a_dns_ttl_below_a_second_keeps_answers_a_second() {
        let s = Duration::from_secs;
        assert_eq!(keep_for(s(30), Some(Duration::ZERO)), MIN_TTL);
        assert_eq!(keep_for(s(30), Some(Duration::from_millis(100))), MIN_TTL);
        assert_eq!(keep_for(s(30), Some(s(5))), s(5));
        assert_eq!(keep_for(Duration::ZERO, None), MIN_TTL);
        assert_eq!(keep_for(s(30), None), s(30));
    }

    #[tokio::test]
    async fn a_slow_lookup_completes_though_every_caller_gives_up_before_it() {
        // The server takes 600 ms; each caller gives up after 200 ms, one every 50 ms.
        let server = Server::start([10, 0, 0, 1], Duration::from_millis(600)).await;
        let r = resolver_with(settings(&[server.at], &[]), 16);
        let target: Arc<str> = "slow.weir.test:80".into();
        let want: SocketAddr = ([10, 0, 0, 1], 80).into();
        let start = Instant::now();
        let mut callers = Vec::new();
        for _ in 0..30 {
            let t = target.clone();
            let caller = tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(200), r.resolve(&t)).await
            });
            callers.push((start.elapsed(), caller));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut resolved = 0;
        for (started, caller) in callers {
            match caller.await.unwrap() {
                Ok(got) => {
                    assert_eq!(got.unwrap(), want);
                    resolved += 1;
                }
                // Gave up; only those before the answer (with slack for a loaded machine).
                Err(_) => assert!(started < Duration::from_millis(1200), "{started:?}"),
            }
        }
        assert!(resolved > 0);
        assert_eq!(server.asked(), 1, "the lookup was started again");
    }

    #[tokio::test]
    async fn an_answer_that_ran_out_is_used_while_one_lookup_refreshes_it() {
        let server = Server::start([10, 0, 0, 1], Duration::ZERO).await;
        let r = resolver_with(settings(&[server.at], &[]), 16);
        let target: Arc<str> = "stale.weir.test:80".into();
        assert_eq!(
            r.resolve(&target).await.unwrap(),
            ([10, 0, 0, 1], 80).into()
        );
        assert_eq!(server.asked(), 1);

        // Ran out; the server is slow now, and has moved the name.
        server.set([10, 0, 0, 2], Duration::from_millis(300));
        r.lock().get_mut(&*target).unwrap().fresh = Instant::now();
        let started = Instant::now();
        for _ in 0..20 {
            assert_eq!(
                r.resolve(&target).await.unwrap(),
                ([10, 0, 0, 1], 80).into()
            );
        }
        assert!(started.elapsed() < Duration::from_millis(250));
        // One refresh for all of them, and its answer is used once it came.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(server.asked(), 2);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            r.resolve(&target).await.unwrap(),
            ([10, 0, 0, 2], 80).into()
        );
        assert_eq!(server.asked(), 2);

        // Long past its TTL (beyond STALE), an answer is not used: the caller waits.
        server.set([10, 0, 0, 3], Duration::from_millis(300));
        {
            let mut map = r.lock();
            let e = map.get_mut(&*target).unwrap();
            (e.fresh, e.stale) = (Instant::now(), Instant::now());
        }
        let started = Instant::now();
        assert_eq!(
            r.resolve(&target).await.unwrap(),
            ([10, 0, 0, 3], 80).into()
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(server.asked(), 3);
    }

    #[tokio::test]
    async fn failed_connections_look_the_name_up_again_at_most_once_a_second() {
        let server = Server::start([10, 0, 0, 1], Duration::ZERO).await;
        let r = resolver_with(settings(&[server.at], &[]), 16);
        let target: Arc<str> = "refusing.weir.test:80".into();
        r.resolve(&target).await.unwrap();
        // A burst of failures on a new answer: no new question.
        for _ in 0..50 {
            r.failed(&target, Instant::now());
            r.resolve(&target).await.unwrap();
        }
        assert_eq!(server.asked(), 1);
        // A second on, one failure does ask again, and the next connection waits for it.
        server.set([10, 0, 0, 2], Duration::ZERO);
        age(r, &target, RELOOK_AFTER_FAILURE);
        r.failed(&target, Instant::now());
        assert_eq!(
            r.resolve(&target).await.unwrap(),
            ([10, 0, 0, 2], 80).into()
        );
        assert_eq!(server.asked(), 2);
        // A name not cached yet: nothing to do.
        r.failed("other.weir.test:80", Instant::now());
        assert!(!r.lock().contains_key("other.weir.test:80"));
    }

    #[tokio::test]
    async fn the_cache_drops_spent_entries_then_the_least_recently_used() {
        let names: Vec<String> = (0..40).map(|i| format!("h{i}.weir.test")).collect();
        let hosts: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "10.0.0.1")).collect();
        let r = resolver_with(settings(&[], &hosts), 8);
        let hot: Arc<str> = "h0.weir.test:80".into();
        for name in &names {
            r.resolve(&hot).await.unwrap();
            r.resolve(&format!("{name}:80").into()).await.unwrap();
            assert!(r.lock().len() <= 8);
        }
        // The name in constant use stays.
        assert!(r.lock().contains_key(&*hot));

        // Entries with nothing in them (a lookup whose runtime went away) and answers long
        // gone are dropped first, the rest kept.
        let now = Instant::now();
        {
            let mut map = r.lock();
            map.clear();
            let (tx, rx) = watch::channel(None);
            drop(tx);
            let entry = |answer: Option<Arc<Resolved>>, pending| Entry {
                answer,
                fresh: now,
                stale: now,
                pending,
                next: 0,
                used: now,
            };
            let gone = Some(Pending { id: 0, rx });
            map.insert("abandoned:80".into(), entry(None, gone));
            let old = Arc::new(Resolved {
                addrs: Ok(Box::new([])),
                at: now,
                until: now,
            });
            map.insert("expired:80".into(), entry(Some(old.clone()), None));
            for i in 0..6 {
                let mut e = entry(Some(old.clone()), None);
                e.fresh = now + Duration::from_secs(60);
                map.insert(format!("valid{i}:80").into(), e);
            }
            r.make_room(&mut map, now);
            assert_eq!(map.len(), 6);
            assert!(map.keys().all(|k| k.starts_with("valid")));
        }
    }

    #[test]
    fn settings_that_cannot_be_read_stay_as_they_were() {
        let server: SocketAddr = "10.0.0.53:53".parse().unwrap();
        let first = read_settings(
            Some("nameserver 10.0.0.10\nsearch demo.svc\n"),
            Some("10.0.0.5 db\n"),
            None,
            Vec::new(),
            false,
            0,
        );
        assert_eq!(first.resolv.search, ["demo.svc"]);
        let again = read_settings(None, None, Some(&first), vec![server], false, 0);
        assert_eq!(again.file, first.file);
        assert_eq!(again.resolv.search, ["demo.svc"]);
        assert_eq!(again.resolv.nameservers, [server]);
        assert_eq!(again.hosts, first.hosts);
        // Nothing before: glibc's defaults.
        let none = read_settings(None, None, None, Vec::new(), false, 0);
        assert_eq!(none.resolv, ResolvConf::default());
    }
}
