//! `ip-restriction`: allow or deny requests by the client's IP address (Kong's schema: `allow`,
//! `deny`, `status`, `message`). The client address is the one resolved behind trusted proxies;
//! `deny` wins over `allow`, and an IPv4-mapped IPv6 address matches IPv4 rules.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use http::StatusCode;
use serde::Deserialize;

use super::{parse_config, EarlyResponse, Flow, Handled, Plugin, RequestHead, Simple};
use crate::pipeline::RequestCtx;

/// The kind: its name, its default priority (Kong's), and how to build an instance.
pub(super) const FACTORY: Simple = Simple {
    name: "ip-restriction",
    priority: 990,
    build,
};

/// The configuration (Kong's keys).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Option<Vec<String>>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    message: Option<String>,
}

const DEFAULT_MESSAGE: &str = "Your IP address is not allowed";

/// A set of addresses as sorted, disjoint, inclusive ranges per family: a lookup is a binary
/// search however many entries the list has.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct IpSet {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl IpSet {
    /// Parses a list's entries (`field` names it in errors).
    pub(crate) fn parse(field: &str, entries: &[String]) -> Result<IpSet, String> {
        let mut set = IpSet::default();
        for (i, entry) in entries.iter().enumerate() {
            match parse_entry(entry) {
                Some(Range::V4(a, b)) => set.v4.push((a, b)),
                Some(Range::V6(a, b)) => set.v6.push((a, b)),
                None => return Err(format!("{field}[{i}]: {entry:?} is not an address or CIDR")),
            }
        }
        merge(&mut set.v4);
        merge(&mut set.v6);
        Ok(set)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => within(&self.v4, u32::from(a)),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => within(&self.v4, u32::from(v4)),
                None => within(&self.v6, u128::from(a)),
            },
        }
    }
}

fn within<T: Ord + Copy>(ranges: &[(T, T)], x: T) -> bool {
    let i = ranges.partition_point(|&(start, _)| start <= x);
    i > 0 && x <= ranges[i - 1].1
}

/// Sorts ranges and joins those that overlap or touch.
fn merge<T: Ord + Copy + Succ>(ranges: &mut Vec<(T, T)>) {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges.iter() {
        match out.last_mut() {
            Some(last) if last.1.succ().is_none_or(|next| start <= next) => {
                last.1 = last.1.max(end);
            }
            _ => out.push((start, end)),
        }
    }
    out.shrink_to_fit();
    *ranges = out;
}

/// The next value, `None` at the top (so ranges ending there absorb everything after).
trait Succ: Sized {
    fn succ(self) -> Option<Self>;
}

impl Succ for u32 {
    fn succ(self) -> Option<u32> {
        self.checked_add(1)
    }
}

impl Succ for u128 {
    fn succ(self) -> Option<u128> {
        self.checked_add(1)
    }
}

/// One entry as an inclusive range.
#[derive(Debug, PartialEq)]
enum Range {
    V4(u32, u32),
    V6(u128, u128),
}

/// `address` or `address/prefix`; host bits under the prefix are ignored, as Kong does.
fn parse_entry(entry: &str) -> Option<Range> {
    let (addr, prefix) = match entry.trim().split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (entry.trim(), None),
    };
    // Only plain decimal prefixes: `u8::from_str` would take "+8".
    let prefix = match prefix {
        Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u32>().ok()?)
        }
        Some(_) => return None,
        None => None,
    };
    match addr.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => v4_range(a, prefix.unwrap_or(32)),
        IpAddr::V6(a) => {
            let prefix = prefix.unwrap_or(128);
            // `::ffff:10.0.0.0/104` is an IPv4 rule written in IPv6: clients of either
            // spelling must match it.
            match a.to_ipv4_mapped() {
                Some(v4) if (96..=128).contains(&prefix) => v4_range(v4, prefix - 96),
                _ => v6_range(a, prefix),
            }
        }
    }
}

fn v4_range(a: Ipv4Addr, prefix: u32) -> Option<Range> {
    if prefix > 32 {
        return None;
    }
    let host = u32::MAX.checked_shr(prefix).unwrap_or(0);
    let start = u32::from(a) & !host;
    Some(Range::V4(start, start | host))
}

fn v6_range(a: Ipv6Addr, prefix: u32) -> Option<Range> {
    if prefix > 128 {
        return None;
    }
    let host = u128::MAX.checked_shr(prefix).unwrap_or(0);
    let start = u128::from(a) & !host;
    Some(Range::V6(start, start | host))
}

/// An instance: both lists parsed, and the refusal ready to send.
struct IpRestriction {
    allow: IpSet,
    deny: IpSet,
    /// Whether an allow list was given: then only its addresses pass.
    has_allow: bool,
    refusal: EarlyResponse,
}

fn build(config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
    let conf: Conf = parse_config(config)?;
    let allow = IpSet::parse("allow", conf.allow.as_deref().unwrap_or_default())?;
    let deny = IpSet::parse("deny", conf.deny.as_deref().unwrap_or_default())?;
    if allow.is_empty() && deny.is_empty() {
        return Err("allow: at least one of `allow` and `deny` must be non-empty".into());
    }
    let status = conf.status.unwrap_or(403);
    let status = StatusCode::from_u16(status)
        .ok()
        .filter(|_| (200..=599).contains(&status))
        .ok_or_else(|| format!("status: {status} is not between 200 and 599"))?;
    let refusal =
        EarlyResponse::message(status, conf.message.as_deref().unwrap_or(DEFAULT_MESSAGE));
    Ok(Arc::new(IpRestriction {
        has_allow: !allow.is_empty(),
        allow,
        deny,
        refusal,
    }))
}

impl IpRestriction {
    fn allows(&self, ip: IpAddr) -> bool {
        !self.deny.contains(ip) && (!self.has_allow || self.allow.contains(ip))
    }
}

impl Plugin for IpRestriction {
    /// Allows or refuses by the client's address.
    fn access_rule(&self) -> Option<crate::pipeline::plugin::AccessRule> {
        Some(crate::pipeline::plugin::AccessRule::Source)
    }

    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, _req: &'a mut RequestHead) -> Handled<'a> {
        if self.allows(ctx.client_ip) {
            Flow::Continue.into()
        } else {
            Flow::Respond(self.refusal.clone()).into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(config: serde_json::Value) -> IpRestriction {
        let conf: Conf = parse_config(&config).unwrap();
        let allow = IpSet::parse("allow", conf.allow.as_deref().unwrap_or_default()).unwrap();
        let deny = IpSet::parse("deny", conf.deny.as_deref().unwrap_or_default()).unwrap();
        IpRestriction {
            has_allow: !allow.is_empty(),
            allow,
            deny,
            refusal: EarlyResponse::message(StatusCode::FORBIDDEN, DEFAULT_MESSAGE),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn configuration_errors_name_the_field_and_index() {
        assert!(build(&json!({"allow": ["10.0.0.0/8"]})).is_ok());
        assert!(build(&json!({"deny": ["::1"], "allow": []})).is_ok());
        let e = build(&json!({"allow": ["10.0.0.1", "::1", "10.0.0.0/33"]}))
            .err()
            .unwrap();
        assert_eq!(e, r#"allow[2]: "10.0.0.0/33" is not an address or CIDR"#);
        for (config, field) in [
            (json!({"deny": ["1.2.3.4", "nope"]}), "deny[1]:"),
            (json!({"deny": ["::/129"]}), "deny[0]:"),
            (json!({"deny": ["10.0.0.0/+8"]}), "deny[0]:"),
            (json!({"deny": ["10.0.0.0/"]}), "deny[0]:"),
            (json!({"deny": ["10.0.0.0/8/8"]}), "deny[0]:"),
            (json!({"deny": ["10.0.0/8"]}), "deny[0]:"),
            (json!({"deny": [7]}), "deny[0]:"),
            (json!({}), "allow:"),
            (json!({"allow": [], "deny": null}), "allow:"),
            (json!({"allow": ["::1"], "status": 99}), "status:"),
            (json!({"allow": ["::1"], "status": 600}), "status:"),
            (json!({"allow": ["::1"], "message": 1}), "message:"),
            (json!({"allow": "10.0.0.1"}), "allow:"),
        ] {
            let e = build(&config).err().unwrap();
            assert!(e.starts_with(field), "{config}: {e}");
        }
        let e = build(&json!({"whitelist": ["::1"]})).err().unwrap();
        assert!(e.contains("whitelist"), "{e}");
    }

    #[test]
    fn entries_become_ranges() {
        assert_eq!(
            parse_entry("10.1.2.3"),
            Some(Range::V4(0x0a01_0203, 0x0a01_0203))
        );
        assert_eq!(
            parse_entry("10.1.2.3/8"),
            Some(Range::V4(0x0a00_0000, 0x0aff_ffff)),
            "host bits ignored"
        );
        assert_eq!(parse_entry("0.0.0.0/0"), Some(Range::V4(0, u32::MAX)));
        assert_eq!(parse_entry("::/0"), Some(Range::V6(0, u128::MAX)));
        assert_eq!(
            parse_entry("::ffff:10.0.0.0/104"),
            Some(Range::V4(0x0a00_0000, 0x0aff_ffff)),
            "IPv4-mapped rules are IPv4 rules"
        );
        assert_eq!(parse_entry("2001:db8::/129"), None);
    }

    #[test]
    fn overlapping_and_touching_ranges_merge() {
        let set = IpSet::parse(
            "allow",
            &[
                "10.0.0.0/9".into(),
                "10.128.0.0/9".into(),
                "10.1.0.0/16".into(),
                "192.168.0.1".into(),
                "255.255.255.255".into(),
                "255.0.0.0/8".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            set.v4,
            [
                (0x0a00_0000, 0x0aff_ffff),
                (0xc0a8_0001, 0xc0a8_0001),
                (0xff00_0000, u32::MAX)
            ]
        );
    }

    #[test]
    fn deny_wins_over_allow() {
        let r = rules(json!({"allow": ["10.0.0.0/8"], "deny": ["10.0.0.5"]}));
        assert!(r.allows(ip("10.0.0.4")));
        assert!(!r.allows(ip("10.0.0.5")));
        assert!(!r.allows(ip("11.0.0.1")), "not in the allow list");
        assert!(!r.allows(ip("::1")), "an IPv4-only allow list refuses IPv6");
    }

    #[test]
    fn a_deny_list_alone_lets_everyone_else_through() {
        let r = rules(json!({"deny": ["192.168.0.0/16", "2001:db8::/32"]}));
        assert!(!r.allows(ip("192.168.3.4")));
        assert!(!r.allows(ip("2001:db8::1")));
        assert!(r.allows(ip("192.169.0.1")));
        assert!(r.allows(ip("2001:db9::1")));
    }

    #[test]
    fn ipv4_mapped_clients_match_ipv4_rules() {
        let r = rules(json!({"allow": ["127.0.0.1", "fd00::/8"]}));
        assert!(r.allows(ip("::ffff:127.0.0.1")));
        assert!(!r.allows(ip("::ffff:127.0.0.2")));
        assert!(r.allows(ip("fd12::1")));
        let d = rules(json!({"deny": ["10.0.0.0/8"]}));
        assert!(!d.allows(ip("::ffff:10.9.9.9")));
        assert!(d.allows(ip("::ffff:11.0.0.1")));
    }

    #[test]
    fn the_refusal_carries_the_configured_status_and_message() {
        let p =
            build(&json!({"deny": ["127.0.0.1"], "status": 401, "message": "go away"})).unwrap();
        let mut ctx = RequestCtx::new(ip("127.0.0.1"), 1, Arc::from(Vec::new()));
        let mut req = http::Request::get("/").body(()).unwrap().into_parts().0;
        let crate::plugins::Step::Ready(Ok(Flow::Respond(r))) = p.access(&mut ctx, &mut req) else {
            panic!("not refused")
        };
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["message"], "go away");
        ctx.client_ip = ip("127.0.0.2");
        assert!(matches!(
            p.access(&mut ctx, &mut req),
            crate::plugins::Step::Ready(Ok(Flow::Continue))
        ));
    }
}
