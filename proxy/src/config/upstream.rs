//! The balancer's part of the contract: upstreams (targets, algorithm, hashing, health checks)
//! and a service's retry and TLS settings.

use serde::{Deserialize, Serialize};

/// A named group of targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// Unique id.
    pub id: String,
    /// How a target is chosen for each request.
    #[serde(default)]
    pub algorithm: Algorithm,
    /// The input of `consistent-hashing` (boxed, as the optional parts below: tables of
    /// thousands of upstreams mostly leave them out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_on: Option<Box<HashOn>>,
    /// The targets; an empty list answers 503.
    #[serde(default)]
    pub targets: Vec<Target>,
    /// Passive and active health checks.
    #[serde(default, skip_serializing_if = "Healthchecks::is_off")]
    pub healthchecks: Healthchecks,
}

/// Load-balancing algorithm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Smooth weighted round-robin.
    #[default]
    RoundRobin,
    /// Fewest requests in flight, relative to the weight.
    LeastConnections,
    /// A ring of targets keyed by `hash_on`: one key keeps its target.
    ConsistentHashing,
    /// Lowest latency × load of two targets picked at random.
    PeakEwma,
}

/// One target of an upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// `ip:port`, `[ipv6]:port` or `hostname:port`.
    pub target: String,
    /// Relative share of requests; 0 takes the target out of rotation.
    #[serde(default = "default_weight")]
    pub weight: u32,
}

fn default_weight() -> u32 {
    100
}

/// What consistent hashing hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashOn {
    /// The input.
    pub by: HashBy,
    /// Header, cookie or query-argument name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The input used when the first is absent from a request (`ip`, `header`, `path`,
    /// `query-arg`); without one such requests are spread round-robin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<HashFallback>,
    /// `Path` of the cookie the proxy sets when `by: cookie` finds none.
    #[serde(default = "default_cookie_path")]
    pub cookie_path: String,
    /// `Max-Age` of that cookie in seconds; 0 for a session cookie.
    #[serde(default)]
    pub cookie_ttl: u64,
    /// `SameSite` of that cookie; unset: no attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_same_site: Option<SameSite>,
    /// With `cookie_same_site: None`: the attribute is left out for browsers that mishandle
    /// it (ingress-nginx's `session-cookie-conditional-samesite-none`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cookie_same_site_none_if_supported: bool,
    /// Whether that cookie is marked `Secure`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cookie_secure: bool,
    /// Hash onto subsets of this many targets instead of single targets: a key's requests
    /// take its subset's members in turn (ingress-nginx's `upstream-hash-by-subset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset_size: Option<u32>,
}

/// A cookie's `SameSite` attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SameSite {
    /// `SameSite=Strict`.
    Strict,
    /// `SameSite=Lax`.
    Lax,
    /// `SameSite=None` (browsers require `Secure` with it).
    None,
}

fn default_cookie_path() -> String {
    "/".to_string()
}

/// The second input of consistent hashing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashFallback {
    /// The input (not `cookie`: a fallback never sets one).
    pub by: HashBy,
    /// Header or query-argument name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Kinds of consistent-hashing input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HashBy {
    /// The client's address.
    Ip,
    /// A request header (`name`).
    Header,
    /// A cookie (`name`), set by the proxy when absent.
    Cookie,
    /// The request path (without the query).
    Path,
    /// A query argument (`name`).
    QueryArg,
}

impl HashBy {
    /// The name in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            HashBy::Ip => "ip",
            HashBy::Header => "header",
            HashBy::Cookie => "cookie",
            HashBy::Path => "path",
            HashBy::QueryArg => "query-arg",
        }
    }
}

/// Health checks of an upstream's targets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Healthchecks {
    /// Failures counted from real traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passive: Option<Box<PassiveHealthcheck>>,
    /// Periodic probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<Box<ActiveHealthcheck>>,
    /// When every target is unhealthy, use them all instead of answering 503.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub panic: bool,
}

impl Healthchecks {
    /// Whether no check is configured.
    pub fn is_off(&self) -> bool {
        self.passive.is_none() && self.active.is_none() && !self.panic
    }
}

/// Thresholds of passive checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassiveHealthcheck {
    /// Consecutive connection failures and `unhealthy_statuses` answers that eject a target;
    /// 0 counts none.
    #[serde(default = "default_failures")]
    pub failures: u32,
    /// Consecutive timeouts that eject a target; 0 counts none.
    #[serde(default = "default_failures")]
    pub timeouts: u32,
    /// Response statuses counted as failures.
    #[serde(default = "default_unhealthy_statuses")]
    pub unhealthy_statuses: Vec<u16>,
    /// Seconds an ejected target stays out when no active check can bring it back.
    #[serde(default = "default_cooldown")]
    pub cooldown: u64,
}

fn default_failures() -> u32 {
    5
}

fn default_unhealthy_statuses() -> Vec<u16> {
    vec![500, 502, 503, 504]
}

fn default_cooldown() -> u64 {
    30
}

/// Periodic probes of every target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveHealthcheck {
    /// Probe over `http` or `https` (with the service's TLS settings).
    #[serde(default, rename = "type")]
    pub kind: ProbeKind,
    /// Path probed with `GET`.
    #[serde(default = "default_probe_path")]
    pub path: String,
    /// `Host` header of probes (default the target's `host:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Milliseconds between two probes of a target.
    #[serde(default = "default_interval")]
    pub interval: u64,
    /// Milliseconds a probe may take.
    #[serde(default = "default_probe_timeout")]
    pub timeout: u64,
    /// Consecutive healthy answers that bring a target back.
    #[serde(default = "default_healthy_threshold")]
    pub healthy_threshold: u32,
    /// Consecutive failed probes that eject a target.
    #[serde(default = "default_unhealthy_threshold")]
    pub unhealthy_threshold: u32,
    /// Statuses counted as healthy; any other status is a failure.
    #[serde(default = "default_healthy_statuses")]
    pub healthy_statuses: Vec<u16>,
}

fn default_probe_path() -> String {
    "/".to_string()
}

fn default_interval() -> u64 {
    5_000
}

fn default_probe_timeout() -> u64 {
    1_000
}

fn default_healthy_threshold() -> u32 {
    2
}

fn default_unhealthy_threshold() -> u32 {
    3
}

fn default_healthy_statuses() -> Vec<u16> {
    vec![
        200, 201, 202, 203, 204, 205, 206, 300, 301, 302, 303, 304, 307, 308,
    ]
}

/// The protocol of active probes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    /// Plain HTTP/1.1.
    #[default]
    Http,
    /// HTTP/1.1 over TLS.
    Https,
}

/// Which failures, beyond a connection that could not be made, are tried again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryOn {
    /// Retry when the upstream did not answer within `read_timeout`.
    #[serde(default)]
    pub timeouts: bool,
    /// Retry when the upstream answered one of these statuses.
    #[serde(default)]
    pub statuses: Vec<u16>,
    /// Milliseconds to wait before each retry (0: at once).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backoff: u64,
    /// Milliseconds from the first try's start after which no retry starts (nginx's
    /// `proxy_next_upstream_timeout`); the try under way goes on. 0: no limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RetryOn {
    /// Whether anything beyond connection failures is retried.
    pub fn is_off(&self) -> bool {
        !self.timeouts && self.statuses.is_empty()
    }

    /// Whether nothing is set (left out of a serialized table).
    pub fn is_default(&self) -> bool {
        self.is_off() && self.backoff == 0 && self.timeout == 0
    }
}

/// TLS towards a service's targets (`protocol: https` or `grpcs`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceTls {
    /// Verify the target's certificate chain and name.
    #[serde(default = "yes")]
    pub verify: bool,
    /// Most intermediate certificates accepted in a target's chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_depth: Option<u8>,
    /// PEM CA bundle the targets' certificates must chain to (default: the public web roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificates: Option<String>,
    /// Server name sent (SNI) and verified (default: the service's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// Client certificate for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
    /// Application protocol offered: `http/1.1` (default for `https`) or `h2` (for `grpcs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpn: Option<Alpn>,
    /// Names the target's certificate may carry instead of the server name: any one will do
    /// (DNS names, IP addresses, or URIs such as `spiffe://domain/workload`, matched exactly
    /// against the certificate's URI names); empty, the server name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_names: Vec<String>,
}

impl Default for ServiceTls {
    fn default() -> Self {
        ServiceTls {
            verify: true,
            verify_depth: None,
            ca_certificates: None,
            sni: None,
            client_certificate: None,
            alpn: None,
            subject_alt_names: Vec::new(),
        }
    }
}

/// Without the client key: debug output ends up in logs.
impl std::fmt::Debug for ServiceTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceTls")
            .field("verify", &self.verify)
            .field("verify_depth", &self.verify_depth)
            .field("sni", &self.sni)
            .field("alpn", &self.alpn)
            .field("client_certificate", &self.client_certificate.is_some())
            .finish_non_exhaustive()
    }
}

fn yes() -> bool {
    true
}

/// A PEM client certificate chain and its key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCertificate {
    /// PEM certificate chain.
    pub cert: String,
    /// PEM private key.
    pub key: String,
}

/// An ALPN protocol offered to upstreams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Alpn {
    /// HTTP/1.1.
    #[serde(rename = "http/1.1")]
    Http11,
    /// HTTP/2.
    #[serde(rename = "h2")]
    H2,
}
