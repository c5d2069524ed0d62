//! The system's resolver settings, read the way glibc reads them: `/etc/resolv.conf`
//! (nameservers, search list, `ndots`, `timeout`, `attempts`) and `/etc/hosts`.
//!
//! Pure: text in, settings out; unknown or malformed lines are skipped, as glibc skips them
//! (a nameserver it cannot use is also logged, once per process).
//!
//! A link-local IPv6 nameserver keeps its zone when the zone is the interface's number
//! (`fe80::1%2`); a zone given by interface name (`fe80::1%eth0`) is not supported (it would
//! need `if_nametoindex`), and such a nameserver is skipped with a warning.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// glibc's bounds (`MAXNS`, `RES_MAXNDOTS`, `RES_MAXRETRANS`, `RES_MAXRETRY`).
const MAX_NAMESERVERS: usize = 3;
const MAX_NDOTS: usize = 15;
const MAX_TIMEOUT_SECS: u64 = 30;
const MAX_ATTEMPTS: usize = 5;

/// The settings of `/etc/resolv.conf` a stub resolver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvConf {
    /// Servers asked in turn (the first three of the file, as glibc's `MAXNS`);
    /// `127.0.0.1:53` when the file names none.
    pub nameservers: Vec<SocketAddr>,
    /// Domains appended to relative names (`search`, or `domain`: the last line wins).
    pub search: Vec<String>,
    /// Names with fewer dots than this try the search list first.
    pub ndots: usize,
    /// How long to wait for one server's answer.
    pub timeout: Duration,
    /// Rounds over the servers.
    pub attempts: usize,
}

impl Default for ResolvConf {
    /// glibc's defaults: the local server, no search list, ndots 1, 5 s, 2 attempts.
    fn default() -> Self {
        ResolvConf {
            nameservers: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 53))],
            search: Vec::new(),
            ndots: 1,
            timeout: Duration::from_secs(5),
            attempts: 2,
        }
    }
}

/// Reads the text of `/etc/resolv.conf`.
pub fn parse_resolv_conf(text: &str) -> ResolvConf {
    let mut conf = ResolvConf {
        nameservers: Vec::new(),
        ..ResolvConf::default()
    };
    for line in text.lines() {
        // As glibc: a comment is a line that starts with `#` or `;`; elsewhere they are words
        // (that a nameserver line, say, ignores after its address).
        if line.starts_with(['#', ';']) {
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => {
                let Some(word) = words.next() else { continue };
                match server_addr(word, 53) {
                    Ok(addr) if conf.nameservers.len() < MAX_NAMESERVERS => {
                        conf.nameservers.push(addr)
                    }
                    Ok(_) | Err(ServerAddrError::NotAnAddress) => {}
                    Err(ServerAddrError::NamedZone) => {
                        static WARNED: AtomicBool = AtomicBool::new(false);
                        if !WARNED.swap(true, Ordering::Relaxed) {
                            tracing::warn!(
                                nameserver = word,
                                "nameserver of /etc/resolv.conf skipped: a zone given by \
                                 interface name is not supported (give its number, as in \
                                 fe80::1%2)"
                            );
                        }
                    }
                }
            }
            Some("search") | Some("domain") => {
                conf.search = words
                    .map(|w| w.trim_end_matches('.').to_ascii_lowercase())
                    .filter(|w| !w.is_empty())
                    .collect();
            }
            Some("options") => {
                for option in words {
                    let Some((key, value)) = option.split_once(':') else {
                        continue;
                    };
                    let Ok(n) = value.parse::<u64>() else {
                        continue;
                    };
                    match key {
                        "ndots" => conf.ndots = (n as usize).min(MAX_NDOTS),
                        "timeout" => {
                            conf.timeout = Duration::from_secs(n.clamp(1, MAX_TIMEOUT_SECS))
                        }
                        "attempts" => conf.attempts = (n as usize).clamp(1, MAX_ATTEMPTS),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if conf.nameservers.is_empty() {
        conf.nameservers = ResolvConf::default().nameservers;
    }
    conf
}

/// Reads the text of `/etc/hosts`: each name (lower-cased) with its addresses, in file order.
pub fn parse_hosts(text: &str) -> HashMap<String, Vec<IpAddr>> {
    let mut hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        for name in words {
            let list = hosts
                .entry(name.trim_end_matches('.').to_ascii_lowercase())
                .or_default();
            if !list.contains(&ip) {
                list.push(ip);
            }
        }
    }
    hosts
}

/// The names to ask for, in order, for `name`, as glibc's search does: a trailing dot makes
/// it absolute (asked as is, alone); a name with at least `ndots` dots is asked as is first,
/// then with each search domain; one with fewer tries the search domains first.
pub fn candidates(name: &str, conf: &ResolvConf) -> Vec<String> {
    if let Some(absolute) = name.strip_suffix('.') {
        return vec![absolute.to_string()];
    }
    let searched = conf.search.iter().map(|d| format!("{name}.{d}"));
    if name.matches('.').count() >= conf.ndots {
        std::iter::once(name.to_string()).chain(searched).collect()
    } else {
        searched.chain(std::iter::once(name.to_string())).collect()
    }
}

/// Why a word is not a nameserver address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerAddrError {
    NotAnAddress,
    /// A link-local address whose zone is an interface name (`fe80::1%eth0`).
    NamedZone,
}

/// `ip`, or `ipv6%zone` with the zone as the interface's number, on `port`.
fn server_addr(word: &str, port: u16) -> Result<SocketAddr, ServerAddrError> {
    match word.split_once('%') {
        None => word
            .parse::<IpAddr>()
            .map(|ip| SocketAddr::new(ip, port))
            .map_err(|_| ServerAddrError::NotAnAddress),
        Some((ip, zone)) => {
            let ip = ip
                .parse::<Ipv6Addr>()
                .map_err(|_| ServerAddrError::NotAnAddress)?;
            match zone.parse::<u32>() {
                Ok(scope) => Ok(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope))),
                Err(_) if !zone.is_empty() && zone.bytes().all(|b| b.is_ascii_graphic()) => {
                    Err(ServerAddrError::NamedZone)
                }
                Err(_) => Err(ServerAddrError::NotAnAddress),
            }
        }
    }
}

/// A nameserver given on the command line: `ip`, `ip:port` or `[ipv6]:port` (port 53 when
/// not given); a link-local IPv6 address takes its zone as the interface's number
/// (`fe80::1%2`, `[fe80::1%2]:53`).
pub fn parse_nameserver(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    // `[ip%zone]:port`, `[ip]`, `[ip%zone]`, `ip`, `ip%zone`.
    let (bare, port) = match s.strip_prefix('[').and_then(|v| v.split_once(']')) {
        Some((ip, "")) => (ip, Some(53)),
        Some((ip, port)) => (ip, port.strip_prefix(':').and_then(|p| p.parse().ok())),
        None => (s, Some(53)),
    };
    let bad = || format!("{s:?} is not a nameserver address (ip or ip:port)");
    let port = port.ok_or_else(bad)?;
    server_addr(bare, port).map_err(|e| match e {
        ServerAddrError::NotAnAddress => bad(),
        ServerAddrError::NamedZone => format!(
            "{s:?}: a zone given by interface name is not supported; give its number \
             (as in fe80::1%2)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn reads_a_kubernetes_resolv_conf() {
        let conf = parse_resolv_conf(
            "# generated\n\
             search demo.svc.cluster.local svc.cluster.local cluster.local\n\
             nameserver 10.96.0.10\n\
             nameserver fd00::a ; second\n\
             nameserver fe80::1%eth0\n\
             nameserver not-an-ip\n\
             options ndots:5 timeout:2 attempts:3 rotate edns0\n",
        );
        assert_eq!(
            conf,
            ResolvConf {
                // A zone named by interface is not supported: that server is skipped.
                nameservers: addrs(&["10.96.0.10:53", "[fd00::a]:53"]),
                search: vec![
                    "demo.svc.cluster.local".into(),
                    "svc.cluster.local".into(),
                    "cluster.local".into()
                ],
                ndots: 5,
                timeout: Duration::from_secs(2),
                attempts: 3,
            }
        );
    }

    #[test]
    fn link_local_servers_keep_their_zone() {
        let conf = parse_resolv_conf("nameserver fe80::1%2\nnameserver fe80::2%\n");
        let want = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 53, 0, 2));
        assert_eq!(conf.nameservers, [want]);
        assert_eq!(parse_nameserver("fe80::1%2"), Ok(want));
        assert_eq!(parse_nameserver("[fe80::1%2]"), Ok(want));
        let on_54 = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 54, 0, 2));
        assert_eq!(parse_nameserver("[fe80::1%2]:54"), Ok(on_54));
        let named = parse_nameserver("fe80::1%eth0").unwrap_err();
        assert!(named.contains("interface name"), "{named}");
        assert!(parse_nameserver("10.0.0.1%2").is_err());
        assert!(parse_nameserver("[fe80::1%2]:x").is_err());
    }

    #[test]
    fn three_servers_at_most_and_comments_only_at_the_start_of_a_line() {
        let conf = parse_resolv_conf(
            "nameserver 10.0.0.1\n\
             # nameserver 10.0.0.9\n\
             ; nameserver 10.0.0.8\n\
             nameserver 10.0.0.2 # the second\n\
             search a.example # b.example\n\
             nameserver 10.0.0.3\n\
             nameserver 10.0.0.4\n",
        );
        assert_eq!(
            conf.nameservers,
            addrs(&["10.0.0.1:53", "10.0.0.2:53", "10.0.0.3:53"])
        );
        // glibc reads the rest of a search line as domains, `#` included.
        assert_eq!(conf.search, ["a.example", "#", "b.example"]);
    }

    #[test]
    fn defaults_bounds_and_the_last_search_line() {
        // No nameserver: the local one; `domain` after `search` replaces it.
        let conf = parse_resolv_conf(
            "search a.example b.example\ndomain Corp.Example.\n\
             options ndots:99 timeout:0 attempts:100 ndots:x\n",
        );
        assert_eq!(conf.nameservers, addrs(&["127.0.0.1:53"]));
        assert_eq!(conf.search, vec!["corp.example".to_string()]);
        assert_eq!(
            (conf.ndots, conf.timeout, conf.attempts),
            (15, Duration::from_secs(1), 5)
        );
        assert_eq!(parse_resolv_conf(""), ResolvConf::default());
    }

    #[test]
    fn reads_hosts() {
        let hosts = parse_hosts(
            "127.0.0.1 localhost\n\
             ::1 localhost ip6-localhost # comment\n\
             # 10.0.0.9 commented.out\n\
             10.0.0.5\tDB.internal db\n\
             bogus line\n",
        );
        let ips = |l: &[&str]| {
            l.iter()
                .map(|s| s.parse().unwrap())
                .collect::<Vec<IpAddr>>()
        };
        assert_eq!(hosts["localhost"], ips(&["127.0.0.1", "::1"]));
        assert_eq!(hosts["db.internal"], ips(&["10.0.0.5"]));
        assert_eq!(hosts["db"], ips(&["10.0.0.5"]));
        assert!(!hosts.contains_key("commented.out"));
        assert_eq!(hosts.len(), 4);
    }

    #[test]
    fn search_order_follows_ndots_as_glibc_does() {
        let conf = ResolvConf {
            search: vec!["demo.svc".into(), "svc".into()],
            ndots: 2,
            ..ResolvConf::default()
        };
        // Fewer dots than ndots: search list first.
        assert_eq!(
            candidates("api", &conf),
            vec!["api.demo.svc", "api.svc", "api"]
        );
        assert_eq!(
            candidates("api.other", &conf),
            vec!["api.other.demo.svc", "api.other.svc", "api.other"]
        );
        // Enough dots: as is first.
        assert_eq!(
            candidates("api.example.com", &conf),
            vec![
                "api.example.com",
                "api.example.com.demo.svc",
                "api.example.com.svc"
            ]
        );
        // Absolute.
        assert_eq!(candidates("api.", &conf), vec!["api"]);
        // No search list.
        assert_eq!(candidates("api", &ResolvConf::default()), vec!["api"]);
    }

    #[test]
    fn nameserver_flags() {
        assert_eq!(parse_nameserver("10.0.0.1"), Ok(addrs(&["10.0.0.1:53"])[0]));
        assert_eq!(
            parse_nameserver("127.0.0.1:5353"),
            Ok(addrs(&["127.0.0.1:5353"])[0])
        );
        assert_eq!(parse_nameserver("fd00::1"), Ok(addrs(&["[fd00::1]:53"])[0]));
        assert_eq!(
            parse_nameserver("[fd00::1]"),
            Ok(addrs(&["[fd00::1]:53"])[0])
        );
        assert_eq!(
            parse_nameserver("[fd00::1]:54"),
            Ok(addrs(&["[fd00::1]:54"])[0])
        );
        assert!(parse_nameserver("dns.example").is_err());
        assert!(parse_nameserver("10.0.0.1:x").is_err());
    }
}
