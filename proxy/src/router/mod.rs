//! Route matching, compiled once per routing table.
//!
//! Hosts are looked up in hash maps (exact, then one-label wildcard, then host-less routes);
//! within a host table, exact paths in a hash map, regexes in priority order, and prefixes in a
//! trie of path elements. A lookup therefore costs a few hash probes per path element, whatever
//! the number of routes. When a host table has no matching path the next, less specific host
//! table is tried, as in Kong and Traefik.

mod normalize;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use regex::Regex;

use crate::config::{ClientProtocol, PathKind, Route, ValueMatch, ValueMatchKind};

pub use normalize::{
    has_escaped_slash, normalize_path, normalize_request_path, with_params_len, without_params,
    BadPath, EscapedSlashes,
};

/// FNV-1a: short keys (host names, path elements) hash much faster than with SipHash, and
/// routing keys come from the operator's configuration, not from clients.
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FnvMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// The result of a successful lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteMatch {
    /// Index of the route in the table it was compiled from.
    pub route: usize,
    /// Length of the request path's matched prefix (what `strip_path` removes).
    pub matched_len: usize,
}

/// What a request offers to be matched on.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// Host without port, any case.
    pub host: &'a str,
    /// The normalised path.
    pub path: &'a str,
    /// The request method.
    pub method: &'a Method,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The raw query string (without `?`), as the client sent it.
    pub query: Option<&'a str>,
    /// The protocol the client used.
    pub protocol: ClientProtocol,
}

/// Extra conditions of one route besides host and path.
#[derive(Debug, Default)]
struct Conditions {
    methods: Vec<Method>,
    headers: Vec<(HeaderName, Vec<HeaderValue>)>,
    /// `header_matches` then `query_matches`: one (empty) slice to skip for the routes that
    /// have none, so they cost what they did before these existed.
    values: Box<[ValueCondition]>,
}

impl Conditions {
    fn matches(&self, req: &RequestView<'_>) -> bool {
        (self.methods.is_empty() || self.methods.contains(req.method))
            && self.headers.iter().all(|(name, values)| {
                req.headers.get_all(name).iter().any(|got| {
                    values
                        .iter()
                        .any(|want| got.as_bytes().eq_ignore_ascii_case(want.as_bytes()))
                })
            })
            && self.values.iter().all(|c| c.holds(req))
    }

    /// Each method list, header rule, header match and query match counts one (excluded
    /// hosts narrow where a route applies, not what it asks of a request).
    fn count(&self) -> usize {
        let values = self
            .values
            .iter()
            .filter(|c| !matches!(c, ValueCondition::NotHost(_)))
            .count();
        usize::from(!self.methods.is_empty()) + self.headers.len() + values
    }
}

/// One `header_matches` or `query_matches` entry, or the route's `excluded_hosts`, compiled.
#[derive(Debug)]
enum ValueCondition {
    /// A request header: any one of its field lines must pass.
    Header(HeaderName, ValueTest),
    /// A query parameter, by its percent-decoded name: its first occurrence must pass.
    Query(Box<[u8]>, ValueTest),
    /// The request's host is none of these (lower case; a `*.` name covers any depth).
    NotHost(Box<[Box<str>]>),
}

/// How a header or parameter value is compared.
#[derive(Debug)]
enum ValueTest {
    /// The whole value, byte for byte.
    Exact(Box<[u8]>),
    /// Anchored at both ends ([`value_regex`]); bytes, so values that are not UTF-8 (obs-text
    /// in a header, an escaped byte in a query) are matched as they are, not rejected.
    Regex(regex::bytes::Regex),
}

impl ValueTest {
    fn new(m: &ValueMatch) -> Result<ValueTest, String> {
        Ok(match m.kind {
            ValueMatchKind::Exact => ValueTest::Exact(m.value.as_bytes().into()),
            ValueMatchKind::Regex => ValueTest::Regex(value_regex(&m.value)?),
        })
    }

    fn passes(&self, value: &[u8]) -> bool {
        match self {
            ValueTest::Exact(want) => value == &want[..],
            ValueTest::Regex(re) => re.is_match(value),
        }
    }
}

impl ValueCondition {
    fn holds(&self, req: &RequestView<'_>) -> bool {
        match self {
            ValueCondition::Header(name, test) => req
                .headers
                .get_all(name)
                .iter()
                .any(|v| test.passes(v.as_bytes())),
            ValueCondition::Query(name, test) => {
                match req.query.and_then(|q| first_param(q, name)) {
                    None => false,
                    Some(raw) => match test {
                        // Compared while decoding: nothing allocated.
                        ValueTest::Exact(want) => decoded_eq(raw, want),
                        ValueTest::Regex(re) => re.is_match(&percent_decode(raw)),
                    },
                }
            }
            ValueCondition::NotHost(names) => !names.iter().any(|n| host_covers(n, req.host)),
        }
    }
}

/// Whether host name `pattern` (lower case; `*.suffix` covers names of any depth under
/// `suffix`) covers `host` (any case).
fn host_covers(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(dot_suffix) => {
            host.len() > dot_suffix.len()
                && host.is_char_boundary(host.len() - dot_suffix.len())
                && host[host.len() - dot_suffix.len()..].eq_ignore_ascii_case(dot_suffix)
        }
        None => host.eq_ignore_ascii_case(pattern),
    }
}

/// The raw value of the first parameter of `query` whose percent-decoded name is `name`
/// (`a` alone has the empty value).
fn first_param<'q>(query: &'q str, name: &[u8]) -> Option<&'q [u8]> {
    query
        .as_bytes()
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .find_map(|pair| {
            let (n, v) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &pair[pair.len()..]),
            };
            decoded_eq(n, name).then_some(v)
        })
}

/// Decodes one byte of a query component at `raw[*i]` (`%XX`, `+` for a space; a malformed
/// escape stays as it is) and moves `i` past it.
fn next_decoded(raw: &[u8], i: &mut usize) -> u8 {
    let b = raw[*i];
    *i += 1;
    match b {
        b'+' => b' ',
        b'%' => match (raw.get(*i).and_then(hex), raw.get(*i + 1).and_then(hex)) {
            (Some(h), Some(l)) => {
                *i += 2;
                h << 4 | l
            }
            _ => b'%',
        },
        b => b,
    }
}

fn hex(c: &u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Whether the query component `raw`, decoded, is `want`.
fn decoded_eq(raw: &[u8], want: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < raw.len() {
        if j == want.len() || next_decoded(raw, &mut i) != want[j] {
            return false;
        }
        j += 1;
    }
    j == want.len()
}

/// A query component decoded; borrowed when it has nothing to decode.
fn percent_decode(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !raw.iter().any(|&b| b == b'%' || b == b'+') {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        out.push(next_decoded(raw, &mut i));
    }
    std::borrow::Cow::Owned(out)
}

/// Longest `Regex` value of a header or query match accepted, in bytes.
pub const MAX_VALUE_PATTERN_LEN: usize = 1024;

/// Most memory a compiled value pattern may take.
const VALUE_PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Compiles the `Regex` value of a header or query match as the router matches it: the whole
/// value (`^(?:pattern)$`), bounded in length and size. Validation uses the same function.
pub fn value_regex(pattern: &str) -> Result<regex::bytes::Regex, String> {
    if pattern.len() > MAX_VALUE_PATTERN_LEN {
        return Err(format!(
            "longer than {MAX_VALUE_PATTERN_LEN} bytes ({} bytes)",
            pattern.len()
        ));
    }
    // The pattern must stand on its own: `x)|(.*` would otherwise close the anchoring group
    // and match any value.
    if let Err(e) = regex_syntax::ast::parse::Parser::new().parse(pattern) {
        return Err(format!("invalid regex: {e}"));
    }
    regex::bytes::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(VALUE_PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid regex: {e}"))
}

/// The compiled `header_matches` and `query_matches` of a validated route.
fn value_conditions(route: &Route) -> Result<Box<[ValueCondition]>, regex::Error> {
    let test = |m: &ValueMatch| ValueTest::new(m).map_err(regex::Error::Syntax);
    let headers = route.header_matches.iter().filter_map(|m| {
        let name = HeaderName::from_bytes(m.name.as_bytes()).ok()?;
        Some(test(m).map(|t| ValueCondition::Header(name, t)))
    });
    let queries = route
        .query_matches
        .iter()
        .map(|m| test(m).map(|t| ValueCondition::Query(m.name.as_bytes().into(), t)));
    let excluded = (!route.excluded_hosts.is_empty()).then(|| {
        let names = route
            .excluded_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase().into())
            .collect();
        Ok(ValueCondition::NotHost(names))
    });
    headers.chain(queries).chain(excluded).collect()
}

/// A route at one place in a host table, ordered by priority, specificity, then declaration.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    route: usize,
    priority: i32,
    specificity: usize,
    /// Bytes of the request path this rule consumes (for `strip_path`); unused for regexes.
    len: usize,
}

fn sort_candidates(c: &mut [Candidate]) {
    c.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(b.specificity.cmp(&a.specificity))
            .then(a.route.cmp(&b.route))
    });
}

#[derive(Debug, Default)]
struct TrieNode {
    children: FnvMap<Box<str>, u32>,
    routes: Vec<Candidate>,
}

/// The routes of one host (or of the wildcard suffix, or of no host).
#[derive(Debug, Default)]
struct HostTable {
    exact: FnvMap<Box<str>, Vec<Candidate>>,
    regex: Vec<(Regex, Candidate)>,
    trie: Vec<TrieNode>,
}

impl HostTable {
    /// `path` starts with `/` and has no trailing `/` (empty for the root).
    fn insert_prefix(&mut self, path: &str, cand: Candidate) {
        if self.trie.is_empty() {
            self.trie.push(TrieNode::default());
        }
        let mut node = 0usize;
        let segments = path
            .get(1..)
            .filter(|p| !p.is_empty())
            .map(|p| p.split('/'));
        for seg in segments.into_iter().flatten() {
            node = match self.trie[node].children.get(seg) {
                Some(&n) => n as usize,
                None => {
                    let n = self.trie.len();
                    self.trie.push(TrieNode::default());
                    self.trie[node].children.insert(seg.into(), n as u32);
                    n
                }
            };
        }
        self.trie[node].routes.push(cand);
    }

    fn finish(&mut self) {
        for c in self.exact.values_mut() {
            sort_candidates(c);
        }
        self.regex.sort_by(|a, b| {
            b.1.priority
                .cmp(&a.1.priority)
                .then(a.1.route.cmp(&b.1.route))
        });
        for n in &mut self.trie {
            sort_candidates(&mut n.routes);
        }
    }

    fn lookup(&self, req: &RequestView<'_>, conds: &[Conditions]) -> Option<RouteMatch> {
        let ok = |c: &Candidate| conds[c.route].matches(req);
        if let Some(cands) = self.exact.get(req.path) {
            if let Some(c) = cands.iter().find(|c| ok(c)) {
                return Some(RouteMatch {
                    route: c.route,
                    matched_len: req.path.len(),
                });
            }
        }
        for (re, c) in &self.regex {
            if let Some(m) = re.find(req.path) {
                if ok(c) {
                    return Some(RouteMatch {
                        route: c.route,
                        matched_len: m.end(),
                    });
                }
            }
        }
        if self.trie.is_empty() {
            return None;
        }
        self.walk(0, req.path.strip_prefix('/').unwrap_or(req.path), &ok)
    }

    /// Deepest prefix first; recursion depth is bounded by the deepest configured rule.
    fn walk(&self, node: usize, rest: &str, ok: &dyn Fn(&Candidate) -> bool) -> Option<RouteMatch> {
        let n = &self.trie[node];
        if !rest.is_empty() && !n.children.is_empty() {
            let (seg, tail) = rest.split_once('/').unwrap_or((rest, ""));
            if let Some(&child) = n.children.get(seg) {
                if let Some(m) = self.walk(child as usize, tail, ok) {
                    return Some(m);
                }
            }
        }
        n.routes.iter().find(|c| ok(c)).map(|c| RouteMatch {
            route: c.route,
            matched_len: c.len,
        })
    }
}

/// Compiles a Regex path rule the way the router matches it: anchored at the start of the
/// path. Validation uses the same function, so a pattern that only breaks once wrapped (a
/// `(?x)` comment swallowing the group) is rejected up front.
///
/// Compiling costs about half a millisecond per pattern, and one table needs each pattern
/// several times (the controller's checks, the proxy's validation, the router, rewrites), as
/// does every later table: compiled patterns are kept and shared (a clone shares the compiled
/// program and brings its own match caches). Bounded: the cache starts over when full.
pub fn anchored_regex(pattern: &str) -> Result<Regex, regex::Error> {
    const MAX_CACHED: usize = 1 << 16;
    static COMPILED: std::sync::Mutex<Option<HashMap<String, Regex>>> = std::sync::Mutex::new(None);
    let cached = |f: &mut dyn FnMut(&mut HashMap<String, Regex>)| {
        // A panic elsewhere while the lock was held leaves a map that is still valid.
        let mut guard = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
        f(guard.get_or_insert_with(HashMap::new));
    };
    let mut hit = None;
    cached(&mut |m| hit = m.get(pattern).cloned());
    if let Some(re) = hit {
        return Ok(re);
    }
    // The pattern must stand on its own: `x)|(.*` would otherwise close the anchoring group
    // and match anywhere.
    if let Err(e) = regex_syntax::ast::parse::Parser::new().parse(pattern) {
        return Err(regex::Error::Syntax(e.to_string()));
    }
    // Compiled outside the lock: other threads' compiles are not held up.
    let re = Regex::new(&format!("^(?:{pattern})"))?;
    cached(&mut |m| {
        if m.len() >= MAX_CACHED {
            m.clear();
        }
        m.insert(pattern.to_owned(), re.clone());
    });
    Ok(re)
}

/// The compiled router of one routing table.
#[derive(Debug, Default)]
pub struct Router {
    exact_hosts: FnvMap<Box<str>, HostTable>,
    wildcard_hosts: FnvMap<Box<str>, HostTable>,
    /// `*.` hosts of routes with `deep_wildcards`, by suffix.
    deep_wildcard_hosts: FnvMap<Box<str>, HostTable>,
    any_host: HostTable,
    conditions: Vec<Conditions>,
    protocols: Vec<Vec<ClientProtocol>>,
}

/// A route whose protocol does not accept the client's (the caller redirects to https).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// A route matched.
    Matched(RouteMatch),
    /// A route matched on host and path but accepts only another protocol.
    WrongProtocol(RouteMatch),
    /// Nothing matched.
    NotFound,
}

impl Router {
    /// Compiles validated routes; regexes are assumed to compile (checked by validation).
    ///
    /// Exact and Prefix rule paths are normalised like request paths (`merge_slashes` as in
    /// the table's settings), so `/a/./b` or `/%7Euser` match what clients send.
    pub fn new(routes: &[Route], merge_slashes: bool) -> Result<Router, regex::Error> {
        let mut r = Router::default();
        for (idx, route) in routes.iter().enumerate() {
            let conds = Conditions {
                methods: route
                    .methods
                    .iter()
                    .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
                    .collect(),
                headers: route
                    .headers
                    .iter()
                    .filter_map(|(k, vs)| {
                        let name = HeaderName::from_bytes(k.as_bytes()).ok()?;
                        let values = vs
                            .iter()
                            .filter_map(|v| HeaderValue::from_str(v).ok())
                            .collect();
                        Some((name, values))
                    })
                    .collect(),
                values: value_conditions(route)?,
            };
            let specificity = conds.count();
            r.conditions.push(conds);
            r.protocols.push(route.protocols.clone());

            let mut tables: Vec<&mut HostTable> = Vec::new();
            if route.hosts.is_empty() {
                tables.push(&mut r.any_host);
            } else {
                // Two passes keep the borrow checker happy with two maps.
                let mut exact: Vec<Box<str>> = Vec::new();
                let mut wild: Vec<Box<str>> = Vec::new();
                for h in &route.hosts {
                    let h = h.to_ascii_lowercase();
                    match h.strip_prefix("*.") {
                        Some(suffix) => wild.push(suffix.into()),
                        None => exact.push(h.into()),
                    }
                }
                for h in exact {
                    r.exact_hosts.entry(h).or_default();
                }
                let wildcards = if route.deep_wildcards {
                    &mut r.deep_wildcard_hosts
                } else {
                    &mut r.wildcard_hosts
                };
                for h in wild {
                    wildcards.entry(h).or_default();
                }
                for (h, t) in r.exact_hosts.iter_mut() {
                    if route.hosts.iter().any(|rh| rh.eq_ignore_ascii_case(h)) {
                        tables.push(t);
                    }
                }
                let wildcards = if route.deep_wildcards {
                    &mut r.deep_wildcard_hosts
                } else {
                    &mut r.wildcard_hosts
                };
                for (h, t) in wildcards.iter_mut() {
                    if route.hosts.iter().any(|rh| {
                        rh.strip_prefix("*.")
                            .is_some_and(|s| s.eq_ignore_ascii_case(h))
                    }) {
                        tables.push(t);
                    }
                }
            }

            let default_rule = [crate::config::PathRule {
                path: "/".into(),
                kind: PathKind::Prefix,
            }];
            let rules = if route.paths.is_empty() {
                &default_rule[..]
            } else {
                &route.paths[..]
            };
            for table in tables {
                for rule in rules {
                    let mut cand = Candidate {
                        route: idx,
                        priority: route.priority,
                        specificity,
                        len: 0,
                    };
                    match rule.kind {
                        PathKind::Exact => {
                            let path = normalize_path(&rule.path, merge_slashes)
                                .map_or_else(|_| rule.path.clone(), |p| p.into_owned());
                            cand.len = path.len();
                            table.exact.entry(path.into()).or_default().push(cand);
                        }
                        PathKind::Prefix => {
                            let path = normalize_path(&rule.path, merge_slashes)
                                .map_or_else(|_| rule.path.clone(), |p| p.into_owned());
                            let trimmed = path.trim_end_matches('/');
                            cand.len = trimmed.len();
                            table.insert_prefix(trimmed, cand);
                        }
                        PathKind::Regex => {
                            let re = anchored_regex(&rule.path)?;
                            table.regex.push((re, cand));
                        }
                    }
                }
            }
        }
        r.any_host.finish();
        for t in r
            .exact_hosts
            .values_mut()
            .chain(r.wildcard_hosts.values_mut())
            .chain(r.deep_wildcard_hosts.values_mut())
        {
            t.finish();
        }
        Ok(r)
    }

    /// Finds the route for a request: exact host, then wildcard hosts from the longest suffix
    /// (one label deep, then any depth, at each length), then host-less routes.
    pub fn lookup(&self, req: &RequestView<'_>) -> Lookup {
        let lower;
        let host = if req.host.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = req.host.to_ascii_lowercase();
            lower.as_str()
        } else {
            req.host
        };
        let found = self
            .exact_hosts
            .get(host)
            .and_then(|t| t.lookup(req, &self.conditions))
            .or_else(|| {
                let (_, suffix) = host.split_once('.')?;
                let one_label = self
                    .wildcard_hosts
                    .get(suffix)
                    .and_then(|t| t.lookup(req, &self.conditions));
                if one_label.is_some() || self.deep_wildcard_hosts.is_empty() {
                    return one_label;
                }
                let mut rest = suffix;
                loop {
                    if let Some(m) = self
                        .deep_wildcard_hosts
                        .get(rest)
                        .and_then(|t| t.lookup(req, &self.conditions))
                    {
                        return Some(m);
                    }
                    rest = rest.split_once('.')?.1;
                }
            })
            .or_else(|| self.any_host.lookup(req, &self.conditions));
        match found {
            None => Lookup::NotFound,
            Some(m) => {
                let protos = &self.protocols[m.route];
                if protos.is_empty() || protos.contains(&req.protocol) {
                    Lookup::Matched(m)
                } else {
                    Lookup::WrongProtocol(m)
                }
            }
        }
    }
}

/// The host a request is addressed to, without the port: the URI authority, else `Host`.
pub fn request_host<'a>(uri: &'a http::Uri, headers: &'a HeaderMap) -> &'a str {
    let raw = match uri.host() {
        Some(h) => h,
        None => headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or(""),
    };
    strip_port(raw)
}

/// A Host value without its port and trailing dot (`[::1]:80` → `::1`).
pub fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        return rest.split(']').next().unwrap_or(rest);
    }
    // Scan back over the port's digits only, not the whole name.
    let b = host.as_bytes();
    let digits = b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    let host = match b.len().checked_sub(digits + 1) {
        Some(colon) if b[colon] == b':' => &host[..colon],
        _ => host,
    };
    host.trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn router(yaml: &str) -> (Router, Vec<String>) {
        let cfg = Config::parse(yaml.as_bytes()).unwrap();
        let ids = cfg.routes.iter().map(|r| r.id.clone()).collect();
        (Router::new(&cfg.routes, true).unwrap(), ids)
    }

    fn find(r: &(Router, Vec<String>), host: &str, path: &str) -> Option<(String, usize)> {
        find_with(r, host, path, &Method::GET, &HeaderMap::new())
    }

    fn find_with(
        r: &(Router, Vec<String>),
        host: &str,
        path: &str,
        m: &Method,
        h: &HeaderMap,
    ) -> Option<(String, usize)> {
        let view = RequestView {
            host,
            path,
            method: m,
            headers: h,
            query: None,
            protocol: ClientProtocol::Http,
        };
        match r.0.lookup(&view) {
            Lookup::Matched(m) => Some((r.1[m.route].clone(), m.matched_len)),
            _ => None,
        }
    }

    fn id(r: &(Router, Vec<String>), host: &str, path: &str) -> Option<String> {
        find(r, host, path).map(|x| x.0)
    }

    #[test]
    fn a_pattern_cannot_close_its_anchoring_group() {
        assert!(anchored_regex("/x)|(.*").is_err());
        assert!(anchored_regex("(/x").is_err());
        let re = anchored_regex("/a|/b").unwrap();
        assert!(
            re.is_match("/b/c") && !re.is_match("/c/b"),
            "anchored as a whole"
        );
    }

    #[test]
    fn deep_wildcards_cover_any_depth_and_the_longest_suffix_wins() {
        let r = router(
            "routes:
- {id: ingress, hosts: ['*.example.com'], paths: [{path: /i}]}
- {id: gw, hosts: ['*.example.com'], deep_wildcards: true}
- {id: gw-foo, hosts: ['*.foo.example.com'], deep_wildcards: true}
- {id: any}",
        );
        // One label: the Ingress's wildcard, then the Gateway's.
        assert_eq!(id(&r, "a.example.com", "/i"), Some("ingress".into()));
        assert_eq!(id(&r, "a.example.com", "/x"), Some("gw".into()));
        // Several labels: only the deep ones; the longest suffix first.
        assert_eq!(id(&r, "a.b.example.com", "/i"), Some("gw".into()));
        assert_eq!(id(&r, "x.y.foo.example.com", "/"), Some("gw-foo".into()));
        assert_eq!(id(&r, "A.Foo.Example.com", "/"), Some("gw-foo".into()));
        assert_eq!(id(&r, "example.com", "/"), Some("any".into()));
    }

    #[test]
    fn excluded_hosts_leave_a_request_to_other_routes() {
        let r = router(
            "routes:
- {id: catch-all, excluded_hosts: ['*.example.com', abc.other.org]}
- {id: wild, hosts: ['*.example.com'], deep_wildcards: true, excluded_hosts: [abc.foo.example.com]}",
        );
        assert_eq!(id(&r, "bar.org", "/"), Some("catch-all".into()));
        assert_eq!(id(&r, "abc.other.org", "/"), None);
        assert_eq!(id(&r, "ABC.other.org", "/"), None);
        assert_eq!(id(&r, "x.example.com", "/"), Some("wild".into()));
        assert_eq!(
            id(&r, "abc.foo.example.com", "/"),
            None,
            "neither serves it"
        );
        assert_eq!(id(&r, "xabc.foo.example.com", "/"), Some("wild".into()));
        assert!(!host_covers("*.example.com", "example.com"));
        assert!(!host_covers("*.example.com", "badexample.com"));
        assert!(host_covers("*.example.com", "a.b.EXAMPLE.com"));
    }

    #[test]
    fn prefix_matches_by_element() {
        let r =
            router("routes: [{id: foo, paths: [{path: /foo}]}, {id: bar, paths: [{path: /bar/}]}]");
        assert_eq!(id(&r, "x", "/foo"), Some("foo".into()));
        assert_eq!(id(&r, "x", "/foo/"), Some("foo".into()));
        assert_eq!(id(&r, "x", "/foo/bar"), Some("foo".into()));
        assert_eq!(id(&r, "x", "/foobar"), None);
        assert_eq!(
            id(&r, "x", "/bar"),
            Some("bar".into()),
            "trailing slash in the rule is ignored"
        );
        assert_eq!(id(&r, "x", "/bar/baz"), Some("bar".into()));
        assert_eq!(find(&r, "x", "/foo/bar"), Some(("foo".into(), 4)));
    }

    #[test]
    fn exact_beats_prefix_and_longer_prefix_wins() {
        let r = router(
            "routes: [{id: root, paths: [{path: /}]}, {id: a, paths: [{path: /a}]}, {id: ab, paths: [{path: /a/b}]},\
             {id: exact, paths: [{path: /a/b, kind: Exact}]}]",
        );
        assert_eq!(id(&r, "h", "/a/b"), Some("exact".into()));
        assert_eq!(
            id(&r, "h", "/a/b/"),
            Some("ab".into()),
            "Exact is slash-sensitive"
        );
        assert_eq!(id(&r, "h", "/a/b/c"), Some("ab".into()));
        assert_eq!(id(&r, "h", "/a/c"), Some("a".into()));
        assert_eq!(id(&r, "h", "/z"), Some("root".into()));
        assert_eq!(id(&r, "h", "/"), Some("root".into()));
    }

    #[test]
    fn rule_paths_are_normalised_like_requests() {
        let r = router(
            "routes: [{id: e, paths: [{path: '/a/./b', kind: Exact}]}, {id: p, paths: [{path: '/%7Euser//x/'}]}]",
        );
        assert_eq!(id(&r, "h", "/a/b"), Some("e".into()));
        assert_eq!(find(&r, "h", "/~user/x/y"), Some(("p".into(), 8)));
    }

    #[test]
    fn exact_is_case_sensitive() {
        let r = router("routes: [{id: e, paths: [{path: /Foo, kind: Exact}]}]");
        assert_eq!(id(&r, "h", "/Foo"), Some("e".into()));
        assert_eq!(id(&r, "h", "/foo"), None);
    }

    #[test]
    fn hosts_exact_wildcard_any() {
        let r = router(
            "routes: [{id: any, paths: [{path: /}]}, {id: wild, hosts: ['*.example.com']},\
             {id: exact, hosts: [api.example.com]}, {id: deep, hosts: [example.com], paths: [{path: /only}]}]",
        );
        assert_eq!(id(&r, "api.example.com", "/"), Some("exact".into()));
        assert_eq!(id(&r, "API.Example.COM", "/"), Some("exact".into()));
        assert_eq!(id(&r, "www.example.com", "/"), Some("wild".into()));
        assert_eq!(
            id(&r, "a.b.example.com", "/"),
            Some("any".into()),
            "wildcard covers one label"
        );
        assert_eq!(id(&r, "example.com", "/only"), Some("deep".into()));
        assert_eq!(
            id(&r, "example.com", "/other"),
            Some("any".into()),
            "falls through to host-less"
        );
        assert_eq!(id(&r, "other.org", "/"), Some("any".into()));
    }

    #[test]
    fn compiled_patterns_are_shared_and_errors_are_not_kept() {
        let a = anchored_regex("/v[0-9]+/(x|y)").unwrap();
        let b = anchored_regex("/v[0-9]+/(x|y)").unwrap();
        assert_eq!(a.as_str(), "^(?:/v[0-9]+/(x|y))");
        assert!(b.is_match("/v2/y") && !b.is_match("/a/v2/y"));
        assert!(anchored_regex("/v[").is_err());
        assert!(anchored_regex("/v[").is_err());
    }

    #[test]
    fn regex_by_priority_then_declaration() {
        let r = router(
            "routes: [{id: p, paths: [{path: /v1}]}, {id: r1, paths: [{path: '/v[0-9]+/x', kind: Regex}]},\
             {id: r2, priority: 5, paths: [{path: '/v1/x', kind: Regex}]}, {id: r3, paths: [{path: '/v[0-9]+/', kind: Regex}]}]",
        );
        assert_eq!(id(&r, "h", "/v1/x"), Some("r2".into()));
        assert_eq!(id(&r, "h", "/v2/x"), Some("r1".into()));
        assert_eq!(id(&r, "h", "/v2/y"), Some("r3".into()));
        assert_eq!(id(&r, "h", "/a/v2/x"), None, "anchored at the start");
        assert_eq!(find(&r, "h", "/v2/x/tail"), Some(("r1".into(), 5)));
        assert_eq!(id(&r, "h", "/v1"), Some("p".into()));
    }

    #[test]
    fn methods_and_headers_are_extra_conditions() {
        let r = router(
            "routes: [{id: plain, paths: [{path: /}]}, {id: post, methods: [POST], paths: [{path: /}]},\
             {id: hdr, headers: {x-version: [v2, V3]}, paths: [{path: /}]}]",
        );
        let mut h = HeaderMap::new();
        assert_eq!(
            find_with(&r, "h", "/", &Method::GET, &h).unwrap().0,
            "plain"
        );
        assert_eq!(
            find_with(&r, "h", "/", &Method::POST, &h).unwrap().0,
            "post"
        );
        h.insert("x-version", HeaderValue::from_static("v3"));
        assert_eq!(find_with(&r, "h", "/", &Method::GET, &h).unwrap().0, "hdr");
        h.insert("x-version", HeaderValue::from_static("v9"));
        assert_eq!(
            find_with(&r, "h", "/", &Method::GET, &h).unwrap().0,
            "plain"
        );
    }

    #[test]
    fn no_routes_no_match() {
        let r = router("routes: []");
        assert_eq!(id(&r, "h", "/"), None);
    }

    #[test]
    fn protocols() {
        let r = router("routes: [{id: s, protocols: [https]}]");
        let h = HeaderMap::new();
        let view = RequestView {
            host: "h",
            path: "/",
            method: &Method::GET,
            headers: &h,
            query: None,
            protocol: ClientProtocol::Http,
        };
        assert!(matches!(r.0.lookup(&view), Lookup::WrongProtocol(_)));
    }

    #[test]
    fn host_extraction() {
        let h = HeaderMap::new();
        assert_eq!(
            request_host(&"http://Example.com:8080/x".parse().unwrap(), &h),
            "Example.com"
        );
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("a.example.com:80"));
        assert_eq!(request_host(&"/x".parse().unwrap(), &h), "a.example.com");
        h.insert("host", HeaderValue::from_static("[::1]:80"));
        assert_eq!(request_host(&"/x".parse().unwrap(), &h), "::1");
        h.insert("host", HeaderValue::from_static("example.com."));
        assert_eq!(request_host(&"/x".parse().unwrap(), &h), "example.com");
        // Only a colon followed by digits (or nothing) to the end is a port.
        for (raw, host) in [
            ("example.com:", "example.com"),
            ("example.com.:8080", "example.com"),
            ("a:b:80", "a:b"),
            ("host:abc", "host:abc"),
            ("8080", "8080"),
            (":80", ""),
        ] {
            assert_eq!(strip_port(raw), host, "{raw}");
        }
    }
}
