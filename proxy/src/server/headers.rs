//! Proxy header semantics: hop-by-hop removal, `X-Forwarded-*`, `X-Real-IP`, `Via`, and the
//! trusted-proxy list that decides whether a client's forwarding headers are believed.

use std::net::IpAddr;
use std::str::FromStr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::upstream::Added;
use crate::wire::is_forwarding;

/// An IP network in CIDR notation (`10.0.0.0/8`, `::1/128`, or a bare address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, p) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
        };
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is inside the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) if self.addr.is_ipv4() => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            ip => ip,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

fn trusted(list: &[Cidr], ip: IpAddr) -> bool {
    list.iter().any(|c| c.contains(ip))
}

/// Whether a plain-HTTP request came to a trusted proxy (a TLS-terminating load balancer) over
/// HTTPS, as its `X-Forwarded-Proto` says: then an https-only route serves it rather than
/// redirecting it again, which would loop.
pub fn forwarded_https(peer: IpAddr, headers: &HeaderMap, trusted_list: &[Cidr]) -> bool {
    trusted(trusted_list, peer)
        && headers
            .get(X_FORWARDED_PROTO)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"))
}

/// The client's IP: the peer, or, when the peer is a trusted proxy, the right-most address in
/// `X-Forwarded-For` that is not itself trusted.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted_list: &[Cidr]) -> IpAddr {
    if !trusted(trusted_list, peer) {
        return peer;
    }
    let mut client = peer;
    for v in headers.get_all(X_FORWARDED_FOR).iter().rev() {
        let Ok(s) = v.to_str() else { break };
        for hop in s.rsplit(',') {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) => {
                    client = ip;
                    if !trusted(trusted_list, ip) {
                        return client;
                    }
                }
                Err(_) => return client,
            }
        }
    }
    client
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
const X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// The `Via` value Weir adds to a message it received over `version` (RFC 9110 §7.6.3: the
/// received protocol's version, `2 weir` for HTTP/2).
pub fn via(version: http::Version) -> HeaderValue {
    // Constants: `from_static` checks its bytes when it runs, but not in a `const`.
    const V09: HeaderValue = HeaderValue::from_static("0.9 weir");
    const V10: HeaderValue = HeaderValue::from_static("1.0 weir");
    const V11: HeaderValue = HeaderValue::from_static("1.1 weir");
    const V2: HeaderValue = HeaderValue::from_static("2 weir");
    const V3: HeaderValue = HeaderValue::from_static("3 weir");
    match version {
        http::Version::HTTP_09 => V09,
        http::Version::HTTP_10 => V10,
        http::Version::HTTP_2 => V2,
        http::Version::HTTP_3 => V3,
        _ => V11,
    }
}

/// Hop-by-hop headers besides `Connection` and `Upgrade` (which a protocol switch keeps).
/// `HTTP2-Settings` belongs to the `h2c` upgrade, which is never forwarded.
const ALWAYS_HOP_BY_HOP: [HeaderName; 7] = [
    HTTP2_SETTINGS,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Removes hop-by-hop headers (RFC 9110 §7.6.1), including those named in `Connection` (but
/// never `Host`, which routing depends on). With `keep_upgrade`, `Connection: upgrade` and
/// `Upgrade` survive for a protocol switch.
///
/// On requests this runs before any plugin: a client must not be able to name a header a
/// plugin adds (`Connection: x-request-id`) and have it removed afterwards.
///
/// Returns whether the message's `TE` offered `trailers` (a client that accepts trailers,
/// which HTTP/2 upstreams such as gRPC servers require to be told).
pub fn remove_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) -> bool {
    // Most messages carry none: one pass over the names is much cheaper than eight removals.
    let hop = |n: &HeaderName| {
        *n == header::CONNECTION || *n == header::UPGRADE || ALWAYS_HOP_BY_HOP.contains(n)
    };
    if !keep_upgrade && !headers.keys().any(hop) {
        return false;
    }
    let trailers = headers.get_all(header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|t| {
                t.split(';')
                    .next()
                    .is_some_and(|t| t.trim().eq_ignore_ascii_case("trailers"))
            })
        })
    });
    let mut named: Vec<HeaderName> = Vec::new();
    for v in headers.get_all(header::CONNECTION) {
        if let Ok(s) = v.to_str() {
            for token in s.split(',') {
                if let Ok(n) = HeaderName::from_bytes(token.trim().as_bytes()) {
                    if !(keep_upgrade && n == header::UPGRADE) && n != header::HOST {
                        named.push(n);
                    }
                }
            }
        }
    }
    for n in named {
        headers.remove(n);
    }
    for n in ALWAYS_HOP_BY_HOP {
        headers.remove(n);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
    trailers
}

/// The `Trailer` value announcing to an HTTP/1.1 client (which asked with `TE: trailers`)
/// the trailer fields it may get: those the upstream announced, and a gRPC call's status
/// fields (HTTP/2 upstreams do not announce them). HTTP/1.1 trailers not announced are not
/// sent (hyper's rule, kept by Weir's own HTTP/1.1 server too). `None` when there are none.
pub fn trailers_to_announce(upstream: &HeaderMap, grpc: bool) -> Option<HeaderValue> {
    let mut names: Vec<String> = Vec::new();
    for v in upstream.get_all(header::TRAILER) {
        for n in v.to_str().unwrap_or_default().split(',') {
            let n = n.trim().to_ascii_lowercase();
            let allowed = !crate::upstream::h1::chunked::is_forbidden_trailer(n.as_bytes());
            if allowed && HeaderName::from_bytes(n.as_bytes()).is_ok() && !names.contains(&n) {
                names.push(n);
            }
        }
    }
    if grpc {
        for n in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
            if !names.iter().any(|x| x == n) {
                names.push(n.to_string());
            }
        }
    }
    (!names.is_empty())
        .then(|| HeaderValue::from_str(&names.join(", ")).ok())
        .flatten()
}

/// Whether sending `method` twice has the effect of sending it once (RFC 9110 §9.2.2): what
/// may be retried after an upstream saw it.
pub fn is_idempotent(method: &http::Method) -> bool {
    use http::Method;
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Whether a request asks to switch protocols (`Connection: upgrade` plus `Upgrade`).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|s| {
                s.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
        })
}

/// Gives a request exactly one `Host`, the one it is routed on, and returns that host without
/// its port (for the log record and routing), or says why the request gets 400.
///
/// RFC 9112 §3.2: an HTTP/1.1 request without `Host`, or any request with more than one or
/// with an invalid one, is refused. §3.2.2: the authority of an absolute-form target (and
/// HTTP/2's `:authority`) wins over `Host`, which is replaced by it, so the host routed on, the
/// `Host` and `X-Forwarded-Host` forwarded, and what plugins see are one and the same.
pub fn one_host(head: &mut http::request::Parts) -> Result<String, &'static str> {
    let mut all = head.headers.get_all(header::HOST).iter();
    let host = all.next();
    if all.next().is_some() {
        return Err("more than one Host header");
    }
    if host.is_some_and(|h| !valid_authority(h.as_bytes())) {
        return Err("invalid Host header");
    }
    let Some(authority) = head.uri.authority() else {
        return match host {
            // Valid authority bytes are ASCII.
            Some(h) => Ok(crate::router::strip_port(h.to_str().unwrap_or("")).to_string()),
            None if head.version == http::Version::HTTP_11 => Err("missing Host header"),
            None => Ok(String::new()),
        };
    };
    if authority.as_str().contains('@') {
        return Err("userinfo in the request target");
    }
    if !valid_authority(authority.as_str().as_bytes()) {
        return Err("invalid authority in the request target");
    }
    let routed = crate::router::strip_port(authority.host()).to_string();
    if host.map(HeaderValue::as_bytes) != Some(authority.as_str().as_bytes()) {
        let v = HeaderValue::from_str(authority.as_str()).map_err(|_| "invalid request target")?;
        head.headers.insert(header::HOST, v);
    }
    Ok(routed)
}

/// Bytes a `Host` value may hold: a DNS name or IPv4 address (letters, digits, `-`, `.`, `_`),
/// `[` `]` around an IPv6 literal, and `:` before the port. No list separators, escapes or
/// sub-delimiters: nothing a backend could read as a path, userinfo or a second host
/// (`admin.internal,x` is `admin.internal` to frameworks that take a list's first item).
const AUTHORITY_BYTES: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'[' | b']');
        c += 1;
    }
    t
};

fn valid_authority(b: &[u8]) -> bool {
    b.iter().all(|&c| AUTHORITY_BYTES[c as usize])
}

/// The protocol name of an `Upgrade` token (`websocket` of `WebSocket/13`), lower-cased.
fn protocol_name(token: &str) -> String {
    token
        .split('/')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Keeps only the `Upgrade` protocols a route allows: `websocket`, and the route's own
/// `upgrade_protocols`; `h2c` never (a tunnel past routing and plugins). Returns whether any is
/// left; if none is, `Upgrade` and `Connection` are removed and the request goes on as a
/// plain one.
pub fn allow_upgrade(headers: &mut HeaderMap, allowed: &[String]) -> bool {
    let mut kept: Vec<&str> = Vec::new();
    let mut dropped = false;
    for v in headers.get_all(header::UPGRADE) {
        for token in v.to_str().unwrap_or("").split(',') {
            let token = token.trim();
            let name = protocol_name(token);
            if name != "h2c" && (name == "websocket" || allowed.contains(&name)) {
                kept.push(token);
            } else if !token.is_empty() {
                dropped = true;
            }
        }
    }
    if kept.is_empty() {
        headers.remove(header::UPGRADE);
        headers.remove(header::CONNECTION);
        return false;
    }
    if dropped {
        if let Ok(v) = HeaderValue::from_str(&kept.join(", ")) {
            headers.insert(header::UPGRADE, v);
        }
    }
    true
}

/// Whether a 101 response switched to one of the protocols the request offered.
pub fn upgraded_as_asked(asked: Option<&HeaderValue>, response: &HeaderMap) -> bool {
    let Some(asked) = asked.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let offered: Vec<String> = asked.split(',').map(protocol_name).collect();
    response.get_all(header::UPGRADE).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.split(',').all(|t| offered.contains(&protocol_name(t))))
    })
}

/// The GUID RFC 6455 §1.3 appends to a `Sec-WebSocket-Key`.
const WEBSOCKET_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Whether `head` is a WebSocket over HTTP/2 (RFC 8441 §4: `CONNECT` with
/// `:protocol: websocket`).
pub fn is_h2_websocket(head: &http::request::Parts) -> bool {
    head.method == http::Method::CONNECT
        && head.version == http::Version::HTTP_2
        && head
            .extensions
            .get::<hyper::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"))
}

/// Turns an RFC 8441 WebSocket request into the HTTP/1.1 upgrade an upstream understands
/// (RFC 6455 §4.1): `GET` with `Upgrade: websocket`, `Connection: Upgrade` and a fresh
/// `Sec-WebSocket-Key` (an HTTP/2 client sends none). Returns the key, to check the answer.
pub fn h2_websocket_to_upgrade(head: &mut http::request::Parts) -> HeaderValue {
    use base64::Engine as _;
    head.method = http::Method::GET;
    head.extensions.remove::<hyper::ext::Protocol>();
    let key = base64::engine::general_purpose::STANDARD.encode(uuid::Uuid::new_v4().as_bytes());
    let key = HeaderValue::from_str(&key).expect("base64 is a valid header value");
    let h = &mut head.headers;
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::SEC_WEBSOCKET_KEY, key.clone());
    key
}

/// The `Sec-WebSocket-Accept` that answers `key` (RFC 6455 §4.2.2).
pub fn websocket_accept(key: &[u8]) -> String {
    use base64::Engine as _;
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key);
    sha.update(WEBSOCKET_GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// Whether an upstream's `101` carries the `Sec-WebSocket-Accept` that proves it read `key`:
/// Weir made the key, so Weir checks.
pub fn websocket_accepted(key: &HeaderValue, response: &HeaderMap) -> bool {
    let want = websocket_accept(key.as_bytes());
    let mut all = response.get_all(header::SEC_WEBSOCKET_ACCEPT).iter();
    matches!((all.next(), all.next()), (Some(v), None) if v.as_bytes() == want.as_bytes())
}

/// What the proxy knows about how the client reached it.
pub struct Forwarding<'a> {
    /// The TCP peer.
    pub peer: IpAddr,
    /// `peer` as a header value ([`ip_value`]).
    pub peer_value: &'a HeaderValue,
    /// The resolved client IP (see [`client_ip`]).
    pub client: IpAddr,
    /// `http` or `https`.
    pub proto: &'static str,
    /// The Host the client sent.
    pub host: Option<&'a HeaderValue>,
    /// The port the client connected to, as a header value.
    pub port: &'a HeaderValue,
    /// The prefix removed by `strip_path`, if any.
    pub stripped_prefix: Option<&'a str>,
    /// Plugins ran on the request: forwarding headers found now are theirs.
    pub plugins_ran: bool,
}

/// Edge, before any plugin: a client that is not a trusted proxy may not say how it was
/// forwarded, so its forwarding headers (`X-Forwarded-*`, `X-Real-IP`, `Forwarded`) go. What a
/// plugin sets there afterwards is then the plugin's own, and [`set_forwarded`] keeps it.
pub fn remove_untrusted_forwarding(headers: &mut HeaderMap, peer: IpAddr, trusted_list: &[Cidr]) {
    if headers.keys().any(is_forwarding) && !trusted(trusted_list, peer) {
        let names: Vec<HeaderName> = headers
            .keys()
            .filter(|n| is_forwarding(n))
            .cloned()
            .collect();
        for n in names {
            headers.remove(n);
        }
    }
}

/// Sets `X-Forwarded-For/Proto/Host/Port/Prefix` and `X-Real-IP`, keeping incoming values only
/// from trusted proxies.
///
/// From any other peer the client's own are removed and the proxy's go to `added` (written
/// after the request's headers, without map inserts); from a trusted proxy the map is edited.
pub fn set_forwarded(
    headers: &mut HeaderMap,
    added: &mut Added,
    f: &Forwarding<'_>,
    trusted_list: &[Cidr],
) {
    let from_trusted = trusted(trusted_list, f.peer);
    if !from_trusted {
        // The client's own values went at the edge ([`remove_untrusted_forwarding`]): any
        // found now a plugin set, and the plugin's value is the one sent.
        let plugin_set = f.plugins_ran && headers.keys().any(is_forwarding);
        let unset = |n: &HeaderName| !(plugin_set && headers.contains_key(n));
        if unset(&X_FORWARDED_FOR) {
            added.push(X_FORWARDED_FOR, f.peer_value.clone());
        }
        if unset(&X_FORWARDED_PROTO) {
            added.push(X_FORWARDED_PROTO, HeaderValue::from_static(f.proto));
        }
        if let Some(h) = f.host.filter(|_| unset(&X_FORWARDED_HOST)) {
            added.push(X_FORWARDED_HOST, h.clone());
        }
        if unset(&X_FORWARDED_PORT) {
            added.push(X_FORWARDED_PORT, f.port.clone());
        }
        if let Some(v) = f
            .stripped_prefix
            .filter(|_| unset(&X_FORWARDED_PREFIX))
            .and_then(|p| HeaderValue::from_str(p).ok())
        {
            added.push(X_FORWARDED_PREFIX, v);
        }
        // An untrusted peer is the client.
        if unset(&X_REAL_IP) {
            added.push(X_REAL_IP, f.peer_value.clone());
        }
        return;
    }
    let prev: Vec<&str> = if from_trusted {
        headers
            .get_all(X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    } else {
        Vec::new()
    };
    let xff = if prev.is_empty() {
        Some(f.peer_value.clone())
    } else {
        HeaderValue::from_str(&format!("{}, {}", prev.join(", "), f.peer)).ok()
    };
    if let Some(v) = xff {
        headers.insert(X_FORWARDED_FOR, v);
    }
    if !(from_trusted && headers.contains_key(X_FORWARDED_PROTO)) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(f.proto));
    }
    if !(from_trusted && headers.contains_key(X_FORWARDED_HOST)) {
        match f.host {
            Some(h) => {
                headers.insert(X_FORWARDED_HOST, h.clone());
            }
            None => {
                headers.remove(X_FORWARDED_HOST);
            }
        }
    }
    if !(from_trusted && headers.contains_key(X_FORWARDED_PORT)) {
        headers.insert(X_FORWARDED_PORT, f.port.clone());
    }
    match f
        .stripped_prefix
        .and_then(|p| HeaderValue::from_str(p).ok())
    {
        Some(v) => {
            headers.insert(X_FORWARDED_PREFIX, v);
        }
        None if !from_trusted => {
            headers.remove(X_FORWARDED_PREFIX);
        }
        None => {}
    }
    let real_ip = if f.client == f.peer {
        f.peer_value.clone()
    } else {
        ip_value(f.client)
    };
    headers.insert(X_REAL_IP, real_ip);
}

/// An IP address as a header value. IPv4 skips `fmt`, which showed in per-request profiles.
pub fn ip_value(ip: IpAddr) -> HeaderValue {
    match ip {
        IpAddr::V4(v4) => {
            let mut buf = [0u8; 15];
            let mut n = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if octet >= 100 {
                    buf[n] = b'0' + octet / 100;
                    n += 1;
                }
                if octet >= 10 {
                    buf[n] = b'0' + octet / 10 % 10;
                    n += 1;
                }
                buf[n] = b'0' + octet % 10;
                n += 1;
            }
            HeaderValue::from_bytes(&buf[..n]).expect("digits and dots")
        }
        IpAddr::V6(_) => {
            HeaderValue::from_str(&ip.to_string()).expect("an IPv6 address is a header value")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_accept_matches_rfc_6455() {
        assert_eq!(
            websocket_accept(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    fn cidrs(s: &[&str]) -> Vec<Cidr> {
        s.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn ip_values_match_display() {
        for ip in [
            "0.0.0.0",
            "255.255.255.255",
            "10.0.100.9",
            "127.0.0.1",
            "192.168.10.99",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:10.0.0.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_value(ip), ip.to_string().as_str());
        }
    }

    #[test]
    fn cidr_contains() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.0.0.1".parse().unwrap()));
        let c: Cidr = "::1".parse().unwrap();
        assert!(c.contains("::1".parse().unwrap()));
        assert!("1.2.3.4/33".parse::<Cidr>().is_err());
        assert!("0.0.0.0/0"
            .parse::<Cidr>()
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn client_ip_only_trusts_trusted_peers() {
        let mut h = HeaderMap::new();
        h.insert(
            X_FORWARDED_FOR,
            HeaderValue::from_static("1.1.1.1, 10.0.0.5"),
        );
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        assert_eq!(client_ip(peer, &h, &[]), peer);
        assert_eq!(
            client_ip(peer, &h, &cidrs(&["10.0.0.0/8"])),
            "1.1.1.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn only_a_trusted_proxy_says_the_client_used_https() {
        let mut h = HeaderMap::new();
        let peer: IpAddr = "10.0.0.9".parse().unwrap();
        let lb = cidrs(&["10.0.0.0/8"]);
        assert!(!forwarded_https(peer, &h, &lb));
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("HTTPS"));
        assert!(forwarded_https(peer, &h, &lb));
        assert!(!forwarded_https(peer, &h, &[]));
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        assert!(!forwarded_https(peer, &h, &lb));
    }

    #[test]
    fn forwarded_headers() {
        let mut h = HeaderMap::new();
        h.insert(X_FORWARDED_FOR, HeaderValue::from_static("6.6.6.6"));
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        let host = HeaderValue::from_static("example.com");
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let (peer_value, port) = (ip_value(peer), HeaderValue::from(8080u16));
        let mut f = Forwarding {
            peer,
            peer_value: &peer_value,
            client: peer,
            proto: "http",
            host: Some(&host),
            port: &port,
            stripped_prefix: Some("/api"),
            plugins_ran: false,
        };
        h.insert(X_FORWARDED_PREFIX, HeaderValue::from_static("/spoof"));
        let mut added = Added::default();
        remove_untrusted_forwarding(&mut h, peer, &[]);
        set_forwarded(&mut h, &mut added, &f, &[]);
        assert!(!h.contains_key(X_FORWARDED_FOR) && !h.contains_key(X_FORWARDED_PREFIX));
        added.append_to(&mut h);
        let xff: Vec<_> = h.get_all(X_FORWARDED_FOR).iter().collect();
        assert_eq!(
            xff,
            ["127.0.0.1"],
            "spoofed value from an untrusted peer is replaced"
        );
        assert_eq!(h[X_FORWARDED_PROTO], "http");
        assert_eq!(h[X_FORWARDED_HOST], "example.com");
        assert_eq!(h[X_FORWARDED_PORT], "8080");
        assert_eq!(h[X_FORWARDED_PREFIX], "/api");
        assert_eq!(h[X_REAL_IP], "127.0.0.1");

        let mut h = HeaderMap::new();
        h.insert(X_FORWARDED_FOR, HeaderValue::from_static("6.6.6.6"));
        h.append(X_FORWARDED_FOR, HeaderValue::from_static("7.7.7.7"));
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        set_forwarded(&mut h, &mut added, &f, &cidrs(&["127.0.0.0/8"]));
        assert_eq!(
            added.iter().count(),
            0,
            "a trusted peer's headers are edited in place"
        );
        assert_eq!(h[X_FORWARDED_FOR], "6.6.6.6, 7.7.7.7, 127.0.0.1");
        assert_eq!(h[X_FORWARDED_PROTO], "https");

        f.client = "7.7.7.7".parse().unwrap();
        set_forwarded(&mut h, &mut added, &f, &cidrs(&["127.0.0.0/8"]));
        assert_eq!(h[X_REAL_IP], "7.7.7.7");
    }

    #[test]
    fn an_untrusted_clients_forwarding_goes_at_the_edge_and_a_plugins_stays() {
        let peer: IpAddr = "127.0.0.1".parse().unwrap();
        let (peer_value, host, port) = (
            ip_value(peer),
            HeaderValue::from_static("example.com"),
            HeaderValue::from_static("8080"),
        );
        let mut h = HeaderMap::new();
        for n in [
            "x-forwarded-ssl",
            "x-forwarded-client-cert",
            "forwarded",
            "x-real-ip",
            "x_forwarded_for",
            "x-forwarded_proto",
            "x_real_ip",
        ] {
            h.insert(n, HeaderValue::from_static("spoof"));
        }
        h.insert("x-other", HeaderValue::from_static("kept"));
        remove_untrusted_forwarding(&mut h, peer, &[]);
        assert_eq!(h.len(), 1, "only x-other is left: {h:?}");
        // From a trusted proxy they stay.
        let mut t = HeaderMap::new();
        t.insert("forwarded", HeaderValue::from_static("for=1.2.3.4"));
        remove_untrusted_forwarding(&mut t, peer, &cidrs(&["127.0.0.0/8"]));
        assert_eq!(t["forwarded"], "for=1.2.3.4");

        // A plugin then sets two of them: its values are sent, Weir's fill in the rest.
        h.insert(X_FORWARDED_PREFIX, HeaderValue::from_static("/from-plugin"));
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        let f = Forwarding {
            peer,
            peer_value: &peer_value,
            client: peer,
            proto: "http",
            host: Some(&host),
            port: &port,
            stripped_prefix: Some("/api"),
            plugins_ran: true,
        };
        let mut added = Added::default();
        set_forwarded(&mut h, &mut added, &f, &[]);
        added.append_to(&mut h);
        assert_eq!(
            h.get_all(X_FORWARDED_PREFIX).iter().collect::<Vec<_>>(),
            ["/from-plugin"]
        );
        assert_eq!(
            h.get_all(X_FORWARDED_PROTO).iter().collect::<Vec<_>>(),
            ["https"]
        );
        assert_eq!(h[X_FORWARDED_FOR], "127.0.0.1");
        assert_eq!(h[X_FORWARDED_HOST], "example.com");
        assert_eq!(h[X_REAL_IP], "127.0.0.1");
    }

    #[test]
    fn hop_by_hop_leaves_plain_messages_alone() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("a"));
        h.insert("x-one", HeaderValue::from_static("1"));
        let before = h.clone();
        remove_hop_by_hop(&mut h, false);
        assert_eq!(h, before);
        remove_hop_by_hop(&mut h, true);
        assert_eq!(h[header::CONNECTION], "upgrade");
        let mut h = before.clone();
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        remove_hop_by_hop(&mut h, false);
        assert_eq!(h, before);
    }

    #[test]
    fn hop_by_hop() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret, upgrade"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert("x-keep", HeaderValue::from_static("1"));
        assert!(is_upgrade(&h));
        let mut up = h.clone();
        remove_hop_by_hop(&mut h, false);
        assert_eq!(h.len(), 1, "{h:?}");
        remove_hop_by_hop(&mut up, true);
        assert_eq!(up[header::UPGRADE], "websocket");
        assert_eq!(up[header::CONNECTION], "upgrade");
        assert!(!up.contains_key("x-secret"));
    }

    fn req(target: &str, version: http::Version, hosts: &[&str]) -> http::request::Parts {
        let mut b = http::Request::builder().uri(target).version(version);
        for h in hosts {
            b = b.header(header::HOST, *h);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn one_host_per_request_and_the_target_authority_wins() {
        use http::Version;
        let mut r = req("http://public.test/x", Version::HTTP_11, &["admin.test"]);
        one_host(&mut r).unwrap();
        assert_eq!(r.headers[header::HOST], "public.test");
        assert_eq!(r.headers.get_all(header::HOST).iter().count(), 1);
        let mut r = req("http://public.test:8080/x", Version::HTTP_2, &[]);
        one_host(&mut r).unwrap();
        assert_eq!(r.headers[header::HOST], "public.test:8080");
        let mut r = req("/x", Version::HTTP_11, &["a.test:80"]);
        one_host(&mut r).unwrap();
        assert_eq!(r.headers[header::HOST], "a.test:80");
        let mut r = req("/x", Version::HTTP_10, &[]);
        one_host(&mut r).unwrap();
        for (target, version, hosts, why) in [
            ("/x", Version::HTTP_11, &[][..], "missing Host header"),
            (
                "/x",
                Version::HTTP_11,
                &["a.test", "b.test"][..],
                "more than one Host header",
            ),
            (
                "/x",
                Version::HTTP_10,
                &["a.test", "a.test"][..],
                "more than one Host header",
            ),
            (
                "/x",
                Version::HTTP_11,
                &["a.test/admin"][..],
                "invalid Host header",
            ),
            (
                "/x",
                Version::HTTP_11,
                &["u@a.test"][..],
                "invalid Host header",
            ),
            (
                "/x",
                Version::HTTP_11,
                &["a.test b"][..],
                "invalid Host header",
            ),
            (
                "http://u@a.test/x",
                Version::HTTP_11,
                &["a.test"][..],
                "userinfo in the request target",
            ),
        ] {
            let mut r = req(target, version, hosts);
            assert_eq!(one_host(&mut r), Err(why), "{target} {hosts:?}");
        }
        for (target, hosts, routed) in [
            ("/x", &["A.test:8080"][..], "A.test"),
            ("/x", &["[::1]:80"][..], "::1"),
            ("http://[::1]:81/x", &["a"][..], "::1"),
            ("http://b.test./x", &[][..], "b.test"),
        ] {
            let mut r = req(target, Version::HTTP_11, hosts);
            assert_eq!(one_host(&mut r).as_deref(), Ok(routed), "{target}");
        }
    }

    #[test]
    fn only_allowed_upgrades_survive_and_never_h2c() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::UPGRADE, HeaderValue::from_str(v).unwrap());
            h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            h
        };
        let mut h = with("websocket");
        assert!(allow_upgrade(&mut h, &[]));
        assert_eq!(h[header::UPGRADE], "websocket");
        let mut h = with("h2c");
        assert!(!allow_upgrade(&mut h, &["h2c".into()]));
        assert!(!h.contains_key(header::UPGRADE) && !h.contains_key(header::CONNECTION));
        let mut h = with("foo/2, WebSocket");
        assert!(allow_upgrade(&mut h, &[]));
        assert_eq!(h[header::UPGRADE], "WebSocket");
        let mut h = with("foo/2, h2c");
        assert!(allow_upgrade(&mut h, &["foo".into()]));
        assert_eq!(h[header::UPGRADE], "foo/2");

        let asked = HeaderValue::from_static("websocket");
        assert!(upgraded_as_asked(Some(&asked), &with("WebSocket")));
        assert!(!upgraded_as_asked(Some(&asked), &with("h2c")));
        assert!(!upgraded_as_asked(None, &with("websocket")));
        assert!(!upgraded_as_asked(Some(&asked), &HeaderMap::new()));
    }

    #[test]
    fn connection_cannot_name_host_and_h2c_settings_always_go() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("host, upgrade, http2-settings"),
        );
        h.insert(header::HOST, HeaderValue::from_static("a.test"));
        h.insert(
            "http2-settings",
            HeaderValue::from_static("AAMAAABkAAQAAP__"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("h2c"));
        remove_hop_by_hop(&mut h, true);
        assert_eq!(h[header::HOST], "a.test");
        assert!(!h.contains_key("http2-settings"));
    }
}
