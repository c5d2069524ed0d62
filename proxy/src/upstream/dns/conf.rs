//! The system's resolver settings, read the way glibc reads them: `/etc/resolv.conf`
//! (nameservers, search list, `ndots`, `timeout`, `attempts`) and `/etc/hosts`.
//!
//! Pure: text in, settings out; unknown or malformed lines are skipped, as glibc skips them.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// glibc's bounds (`RES_MAXNDOTS`, `RES_MAXRETRANS`, `RES_MAXRETRY`).
const MAX_NDOTS: usize = 15;
const MAX_TIMEOUT_SECS: u64 = 30;
const MAX_ATTEMPTS: usize = 5;

/// The settings of `/etc/resolv.conf` a stub resolver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvConf {
    /// Servers asked in turn; `127.0.0.1:53` when the file names none.
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
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => {
                // A zone index (`fe80::1%eth0`) is dropped: the address without it is what
                // a link-local server can be reached at on most hosts anyway.
                if let Some(ip) = words
                    .next()
                    .and_then(|w| w.split('%').next())
                    .and_then(|w| w.parse::<IpAddr>().ok())
                {
                    conf.nameservers.push(SocketAddr::new(ip, 53));
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

/// A nameserver given on the command line: `ip`, `ip:port` or `[ipv6]:port` (port 53 when
/// not given).
pub fn parse_nameserver(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bare = s
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(s);
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("{s:?} is not a nameserver address (ip or ip:port)"))
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
                nameservers: addrs(&["10.96.0.10:53", "[fd00::a]:53", "[fe80::1]:53"]),
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
