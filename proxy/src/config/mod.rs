//! The routing-table contract between the controller and the proxy.
//!
//! A [`Config`] is plain data: routes, services, upstreams, plugins and consumers that refer to
//! each other by `id`. It is what `POST /config` accepts and `--config FILE` loads (JSON or
//! YAML). [`Config::validate`] checks it once at the edge; everything downstream (compile,
//! router, pipeline) may assume a valid table. `docs/config.md` documents every field.
//!
//! This module depends on nothing else in the proxy, so the controller can build a `Config`
//! without pulling in the data plane.

mod errors;
mod secrets;
mod upstream;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use errors::{ConfigError, PluginValidator, MAX_BACKEND_WEIGHT, MAX_ROUTE_TIMEOUT_MS};
pub use secrets::{mark_secret_fields, redact_plugin_config, REDACTED};
pub use upstream::{
    ActiveHealthcheck, Algorithm, Alpn, ClientCertificate, HashBy, HashFallback, HashOn,
    Healthchecks, PassiveHealthcheck, ProbeKind, RetryOn, SameSite, ServiceTls, Target, Upstream,
};

/// The version of the routing-table format this proxy understands.
pub const CONFIG_VERSION: u32 = 1;

/// A complete routing table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Format version; must be [`CONFIG_VERSION`].
    #[serde(default = "default_version")]
    pub version: u32,
    /// Table-wide switches.
    #[serde(default)]
    pub settings: Settings,
    /// Request matchers, each pointing at a service.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// Where matched requests go.
    #[serde(default)]
    pub services: Vec<Service>,
    /// Named groups of targets that services can balance over.
    #[serde(default)]
    pub upstreams: Vec<Upstream>,
    /// Plugin instances and their scope.
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
    /// Consumers that plugins can be scoped to once a request is authenticated.
    #[serde(default)]
    pub consumers: Vec<Consumer>,
    /// TLS certificates for the proxy's listeners (served from a later release).
    #[serde(default)]
    pub certificates: Vec<Certificate>,
    /// TLS connections handed on untouched by server name (passthrough), on the TLS listener.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_routes: Vec<TlsRoute>,
    /// Content hash of everything above; filled in by [`Config::with_hash`], ignored on input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

fn default_version() -> u32 {
    CONFIG_VERSION
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: CONFIG_VERSION,
            settings: Settings::default(),
            routes: Vec::new(),
            services: Vec::new(),
            upstreams: Vec::new(),
            plugins: Vec::new(),
            consumers: Vec::new(),
            certificates: Vec::new(),
            tls_routes: Vec::new(),
            hash: None,
        }
    }
}

/// Table-wide switches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Add `X-Weir-Proxy-Latency` and `X-Weir-Upstream-Latency` to proxied responses.
    #[serde(default = "yes")]
    pub latency_headers: bool,
    /// Collapse `//` into `/` when normalising request paths before routing.
    #[serde(default = "yes")]
    pub merge_slashes: bool,
    /// Add `X-Weir-Upstream-Tries` (how many tries the answer took) to proxied responses.
    #[serde(default)]
    pub upstream_tries_header: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            latency_headers: true,
            merge_slashes: true,
            upstream_tries_header: false,
        }
    }
}

fn yes() -> bool {
    true
}

/// A request matcher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Unique id, used in errors, logs and metrics.
    pub id: String,
    /// Host names (`example.com`, `*.example.com`); empty matches any host.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Path rules; empty matches every path.
    #[serde(default)]
    pub paths: Vec<PathRule>,
    /// HTTP methods; empty matches every method.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Header name to accepted values (any one must equal, case-insensitively).
    #[serde(default)]
    pub headers: BTreeMap<String, Vec<String>>,
    /// Accepted client protocols; empty means both `http` and `https`.
    #[serde(default)]
    pub protocols: Vec<ClientProtocol>,
    /// Status used to redirect plain-HTTP requests to a route that only accepts `https`.
    #[serde(default = "default_https_redirect")]
    pub https_redirect_status_code: u16,
    /// Remove the matched path prefix before forwarding.
    #[serde(default)]
    pub strip_path: bool,
    /// Forward the client's `Host` header instead of the upstream's.
    #[serde(default)]
    pub preserve_host: bool,
    /// Order among routes matching the same request (higher first).
    #[serde(default)]
    pub priority: i32,
    /// The `Host` header sent upstream (wins over `preserve_host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_header: Option<String>,
    /// The upstream path, replacing the request path (strip_path and the service path do not
    /// apply); `$1`…`$9` insert capture groups of the matching `Regex` rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<String>,
    /// The service matched requests go to; a route without one must be answered by a plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Protocols a client may switch to with `Upgrade` besides `websocket` (`h2c` never).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrade_protocols: Vec<String>,
    /// The namespace the route belongs to: plugins scoped to a consumer of another namespace
    /// never run on it. Unset: consumer-scoped plugins of every namespace may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A second service that takes some of the route's requests, by header, cookie or weight
    /// (ingress-nginx's canary); the route's plugins run whichever service serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Box<Canary>>,
    /// Where requests go when the route's service has no target to try, and which upstream
    /// statuses it answers instead (ingress-nginx's `default-backend` and `custom-http-errors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Box<Fallback>>,
    /// Whether requests on this route are written to the access log.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub access_log: bool,
    /// The `X-Forwarded-Prefix` sent upstream, in place of the prefix `strip_path` removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_prefix: Option<String>,
    /// Header conditions besides `headers`, each of which must hold (the Gateway API's
    /// `HTTPHeaderMatch`: the name any case, the value exact and case-sensitive, or a regex).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub header_matches: Vec<ValueMatch>,
    /// Query-parameter conditions, each of which must hold (names and values case-sensitive).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_matches: Vec<ValueMatch>,
    /// Services that share the route's requests by weight (the Gateway API's `backendRefs`),
    /// instead of `service`. An entry without a service answers its share with 500.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<WeightedBackend>,
    /// A `*.` host of this route also covers names several labels deep (`*.example.com`
    /// matches `a.b.example.com`), as Gateway API host names do; otherwise one label, as an
    /// Ingress's do.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deep_wildcards: bool,
    /// Hosts this route does not serve even where its own hosts cover them (exact names or
    /// `*.` names, several labels deep): the names of more specific listeners of its Gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_hosts: Vec<String>,
    /// Services that get a copy of the route's requests, whose answers are thrown away.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<RouteMirror>,
    /// Milliseconds from the request's arrival until the answer's head, over every try (a
    /// budget retries share); past it, `504`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// The status answered when no try got an answer from the upstream (refused, reset before
    /// the answer's head); 502 unless set. Timeouts stay 504.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_error_status: Option<u16>,
    /// For requests over TLS: the hosts the route is served for and the client certificates
    /// each asks for (a Gateway listener's, an Ingress host's). When set, a request over TLS
    /// is served only if one entry covering its host asks for nothing, or asks for the
    /// client-certificate check of the certificate the connection's handshake was made with;
    /// otherwise it gets `421`. Unset: any connection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_hosts: Vec<TlsHost>,
    /// Whether the route's source-address rules and its authentication must both allow a
    /// request (`all`), or either one (`any`), as nginx's `satisfy`.
    #[serde(default, skip_serializing_if = "Satisfy::is_all")]
    pub satisfy: Satisfy,
    /// Paces the answers' bodies to the client (nginx's `limit_rate`); unset, as fast as the
    /// client reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_rate: Option<ResponseRate>,
}

/// Which of a route's access rules must allow a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Satisfy {
    /// Every rule: source ranges and authentication.
    #[default]
    All,
    /// Either the source-address rules (`ip-restriction`) or the authentication plugins.
    Any,
}

impl Satisfy {
    fn is_all(&self) -> bool {
        *self == Satisfy::All
    }
}

/// A bandwidth limit on an answer's body, per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseRate {
    /// Bytes per second once `after_bytes` went out.
    pub bytes_per_second: u64,
    /// Bytes sent at full speed first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub after_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A host a route is served for over TLS, and the client certificate it asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsHost {
    /// A host as in the route's `hosts` (`*.` as the route's `deep_wildcards` says); absent,
    /// every host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The id of a certificate with `client_validation`: the connection must have been
    /// made with it, as its validation stands now. Absent: no client certificate asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
}

/// TLS routing by server name: connections whose ClientHello names one of `hosts` go to a
/// target of one of `backends`, as they are (passthrough) or, with `terminate`, decrypted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsRoute {
    /// Unique id.
    pub id: String,
    /// Server names: exact, or `*.` covering names of any depth under it; empty, every
    /// connection that names a server (after the routes with names).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Services sharing the connections by weight; an entry without a service (or no entry)
    /// closes its share.
    #[serde(default)]
    pub backends: Vec<WeightedBackend>,
    /// Weir ends TLS itself (with the table's certificate for the name) and the backend gets
    /// the decrypted bytes, instead of the connection as it came.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminate: bool,
    /// A `*.` host covers names one label deep only (`*.example.com` matches
    /// `a.example.com`, not `a.b.example.com`), as an Ingress's hosts do; otherwise any depth.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub single_label_wildcards: bool,
    /// The PROXY protocol header sent to the backend before the client's bytes, carrying
    /// the client's address; absent, none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
}

/// A version of HAProxy's PROXY protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    /// The text header (`PROXY TCP4 …\r\n`).
    V1,
    /// The binary header.
    V2,
}

/// A service that gets a copy of a share of a route's requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteMirror {
    /// The service's id.
    pub service: String,
    /// The share of requests copied, 0 to 100.
    #[serde(default = "hundred")]
    pub percent: f64,
    /// The copy's `Host` header; absent, as the route sends its requests' to the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The copy carries the request's body; `false` sends it without one.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub body: bool,
}

fn hundred() -> f64 {
    100.0
}

/// A condition on a named request value (a header or a query parameter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueMatch {
    /// The header or parameter name.
    pub name: String,
    /// The value, or the pattern for `Regex`.
    pub value: String,
    /// How `value` is compared.
    #[serde(default)]
    pub kind: ValueMatchKind,
}

/// How a [`ValueMatch`] compares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ValueMatchKind {
    /// The whole value, case-sensitively.
    #[default]
    Exact,
    /// A regular expression that must match the whole value.
    Regex,
}

/// One of a route's weighted services.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedBackend {
    /// The service id; unset, the share is answered with 500 (a backend that cannot be used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The share of requests, relative to the other entries' (0 takes none).
    #[serde(default = "default_backend_weight")]
    pub weight: u32,
}

fn default_backend_weight() -> u32 {
    1
}

fn is_true(b: &bool) -> bool {
    *b
}

/// A canary backend of a route. Checked in order: the header (`always` or a match sends the
/// request to the canary, `never` keeps it off; any other value falls through), the cookie
/// (`always` / `never`, anything else falls through), then the weight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Canary {
    /// The canary's service id.
    pub service: String,
    /// Requests sent to the canary out of `weight_total`, when no header or cookie decided.
    #[serde(default)]
    pub weight: u32,
    /// The whole the weight is a part of (at least 1, at least `weight`).
    #[serde(default = "default_weight_total")]
    pub weight_total: u32,
    /// The request header that chooses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The `header` value that sends a request to the canary (instead of `always`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_value: Option<String>,
    /// A regular expression (unanchored) that a `header` value sending a request to the canary
    /// matches; used when `header_value` is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_pattern: Option<String>,
    /// The cookie that chooses (`always` or `never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
}

fn default_weight_total() -> u32 {
    100
}

/// A route's fallback service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    /// The fallback's service id: it gets the request when the route's service has no target
    /// that may be tried (none, or none healthy).
    pub service: String,
    /// Upstream statuses that are not passed on: the fallback service is asked instead, with
    /// the same method, path `/`, no body, and `X-Code`, `X-Format`, `X-Original-URI`,
    /// `X-Request-ID` and `headers`; its answer is the client's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<u16>,
    /// Headers set on requests for error pages (`X-Namespace`, `X-Ingress-Name`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

fn default_https_redirect() -> u16 {
    426
}

/// One path rule of a route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRule {
    /// The path (`/api`) or, for `Regex`, the pattern (anchored at the start).
    pub path: String,
    /// How `path` is compared with the request path.
    #[serde(default)]
    pub kind: PathKind,
}

/// How a path rule compares with the request path (Kubernetes Ingress semantics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PathKind {
    /// The whole path, case-sensitively; `/foo` does not match `/foo/`.
    Exact,
    /// By `/`-separated element: `/foo` matches `/foo`, `/foo/` and `/foo/bar`, never `/foobar`.
    #[default]
    Prefix,
    /// A regular expression anchored at the start of the path.
    Regex,
}

/// A client-facing protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientProtocol {
    /// Plain HTTP (HTTP/1.1 or h2c).
    Http,
    /// HTTP over TLS.
    Https,
}

/// Where matched requests are forwarded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Unique id.
    pub id: String,
    /// Protocol spoken to the upstream.
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// A host name or IP to connect to (with `port`), when `upstream` is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Port for `host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The id of an [`Upstream`] to balance over, instead of `host`/`port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// A path prefix prepended to the forwarded path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Milliseconds to establish a connection to a target.
    #[serde(default = "default_timeout")]
    pub connect_timeout: u64,
    /// Milliseconds to wait for the response headers, and between two reads of its body.
    #[serde(default = "default_timeout")]
    pub read_timeout: u64,
    /// Milliseconds between two successful writes of the request body to the upstream.
    #[serde(default = "default_timeout")]
    pub write_timeout: u64,
    /// How many times a failed try is retried, each on another target while there is one.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Failures retried besides connections that could not be made (idempotent requests only).
    #[serde(default, skip_serializing_if = "RetryOn::is_default")]
    pub retry_on: RetryOn,
    /// TLS towards the targets, for `https` and `grpcs` (boxed: most services have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<Box<ServiceTls>>,
}

fn default_timeout() -> u64 {
    60_000
}

fn default_retries() -> u32 {
    5
}

/// The protocol spoken to an upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamProtocol {
    /// HTTP/1.1.
    #[default]
    Http,
    /// HTTP/1.1 over TLS.
    Https,
    /// HTTP/2 without TLS (prior knowledge).
    H2c,
    /// gRPC over h2c.
    Grpc,
    /// gRPC over TLS.
    Grpcs,
}

/// A target's address (`host:port`, IPv6 bracketed) and the `Host` header that names it.
pub fn target_address(host: &str, port: u16) -> (std::sync::Arc<str>, http::HeaderValue) {
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let addr = format!("{bracketed}:{port}");
    let host_header = if port == 80 { bracketed } else { addr.clone() };
    (
        addr.into(),
        http::HeaderValue::from_str(&host_header)
            .unwrap_or_else(|_| http::HeaderValue::from_static("localhost")),
    )
}

/// Splits a target into host and port: `ip:port`, `[ipv6]:port` or `hostname:port`.
pub fn parse_target(s: &str) -> Result<(&str, u16), String> {
    let bad = || format!("{s:?} is not host:port, [ipv6]:port or ip:port");
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
        h.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
        (h, p)
    } else {
        s.rsplit_once(':').ok_or_else(bad)?
    };
    if host.is_empty() || host.contains(['/', ' ']) || (host.contains(':') && !s.starts_with('[')) {
        return Err(bad());
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(bad)?;
    Ok((host, port))
}

/// A plugin instance and its scope.
///
/// With none of `route`, `service` and `consumer` set the plugin is global. `Debug` shows the
/// configuration with its kind's secret fields redacted.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    /// Unique id.
    pub id: String,
    /// Registered plugin name (`correlation-id`, `request-termination`, …).
    pub name: String,
    /// Plugin-specific configuration, validated by the plugin.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// Limit to one route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Limit to one service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Limit to one consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The namespace of the resource the plugin came from: an authentication plugin finds only
    /// consumers of the same namespace (or without one). Unset: every consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A disabled plugin is validated but never runs.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Overrides the plugin's default priority (higher runs first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

impl PluginConfig {
    /// Whether the plugin applies to every route.
    pub fn is_global(&self) -> bool {
        self.route.is_none() && self.service.is_none() && self.consumer.is_none()
    }
}

/// Whether something of namespace `a` and something of namespace `b` see each other: the same
/// namespace, or either without one (the one rule for consumers, plugins and routes).
pub fn namespaces_meet(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// Plugins that cannot be scoped to a consumer (Kong's `no_consumer`): they decide who the
/// consumer is, or whether it may pass, so a consumer-scoped copy could replace a route's.
pub const NOT_CONSUMER_SCOPED: [&str; 6] = [
    "key-auth",
    "basic-auth",
    "jwt",
    "mtls-auth",
    "acl",
    "forward-auth",
];

/// A consumer of the API, identified by an authentication plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Consumer {
    /// Unique id.
    pub id: String,
    /// Human-readable name, sent upstream by authentication plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// An id from another system, sent upstream as `X-Consumer-Custom-ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_id: Option<String>,
    /// Visibility: only plugins of the same `namespace` (and plugins without one) find this
    /// consumer. Unset: every plugin does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// ACL groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// How the consumer proves who it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
}

/// One credential of a consumer. `Debug` and `GET /config` never show the secret parts.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Credential {
    /// An API key (`key-auth`), stored as the hex SHA-256 of the key.
    KeyAuth {
        /// Unique id among all credentials (sent upstream as `X-Credential-Identifier`).
        id: String,
        /// Lower-case hex SHA-256 of the key.
        key_sha256: String,
    },
    /// A username and password (`basic-auth`), the password stored salted and hashed.
    BasicAuth {
        /// Unique id among all credentials.
        id: String,
        /// The user name the client sends.
        username: String,
        /// `sha256$<salt hex>$<hex SHA-256 of salt bytes followed by the password>`.
        password_hash: String,
    },
    /// A JWT issuer's key (`jwt`).
    Jwt {
        /// Unique id among all credentials.
        id: String,
        /// The value of the token's `key_claim_name` claim (`iss` by default) that selects
        /// this credential.
        key: String,
        /// The algorithm tokens must be signed with.
        algorithm: JwtAlgorithm,
        /// The HMAC secret (`HS*`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<String>,
        /// The PEM public key (`RS*`, `ES*`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rsa_public_key: Option<String>,
    },
}

impl Credential {
    /// The credential's id.
    pub fn id(&self) -> &str {
        match self {
            Credential::KeyAuth { id, .. }
            | Credential::BasicAuth { id, .. }
            | Credential::Jwt { id, .. } => id,
        }
    }

    /// The plugin that checks it (`key-auth`, `basic-auth`, `jwt`).
    pub fn kind(&self) -> &'static str {
        match self {
            Credential::KeyAuth { .. } => "key-auth",
            Credential::BasicAuth { .. } => "basic-auth",
            Credential::Jwt { .. } => "jwt",
        }
    }

    /// The same credential with its secret parts replaced by `<redacted>`.
    pub fn redacted(&self) -> Credential {
        let hidden = || secrets::REDACTED.to_string();
        match self.clone() {
            Credential::KeyAuth { id, .. } => Credential::KeyAuth {
                id,
                key_sha256: hidden(),
            },
            Credential::BasicAuth { id, username, .. } => Credential::BasicAuth {
                id,
                username,
                password_hash: hidden(),
            },
            Credential::Jwt {
                id,
                key,
                algorithm,
                secret,
                rsa_public_key,
            } => Credential::Jwt {
                id,
                key,
                algorithm,
                secret: secret.map(|_| hidden()),
                rsa_public_key,
            },
        }
    }
}

/// Without the secrets: debug output ends up in logs.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.redacted() {
            Credential::KeyAuth { id, key_sha256 } => f
                .debug_struct("KeyAuth")
                .field("id", &id)
                .field("key_sha256", &key_sha256)
                .finish(),
            Credential::BasicAuth {
                id,
                username,
                password_hash,
            } => f
                .debug_struct("BasicAuth")
                .field("id", &id)
                .field("username", &username)
                .field("password_hash", &password_hash)
                .finish(),
            Credential::Jwt {
                id,
                key,
                algorithm,
                secret,
                ..
            } => f
                .debug_struct("Jwt")
                .field("id", &id)
                .field("key", &key)
                .field("algorithm", &algorithm)
                .field("secret", &secret)
                .finish_non_exhaustive(),
        }
    }
}

/// A JWT signature algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JwtAlgorithm {
    /// HMAC with SHA-256.
    HS256,
    /// HMAC with SHA-384.
    HS384,
    /// HMAC with SHA-512.
    HS512,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// ECDSA P-256 with SHA-256.
    ES256,
    /// ECDSA P-384 with SHA-384.
    ES384,
}

impl JwtAlgorithm {
    /// Every algorithm, in this order.
    pub const ALL: [JwtAlgorithm; 8] = [
        JwtAlgorithm::HS256,
        JwtAlgorithm::HS384,
        JwtAlgorithm::HS512,
        JwtAlgorithm::RS256,
        JwtAlgorithm::RS384,
        JwtAlgorithm::RS512,
        JwtAlgorithm::ES256,
        JwtAlgorithm::ES384,
    ];

    /// The name in a token's `alg` header.
    pub fn as_str(self) -> &'static str {
        match self {
            JwtAlgorithm::HS256 => "HS256",
            JwtAlgorithm::HS384 => "HS384",
            JwtAlgorithm::HS512 => "HS512",
            JwtAlgorithm::RS256 => "RS256",
            JwtAlgorithm::RS384 => "RS384",
            JwtAlgorithm::RS512 => "RS512",
            JwtAlgorithm::ES256 => "ES256",
            JwtAlgorithm::ES384 => "ES384",
        }
    }

    /// Whether the algorithm takes an HMAC secret (else a public key).
    pub fn is_hmac(self) -> bool {
        matches!(
            self,
            JwtAlgorithm::HS256 | JwtAlgorithm::HS384 | JwtAlgorithm::HS512
        )
    }
}

/// The `password_hash` of a basic-auth credential: `sha256$<salt hex>$<hex digest>`.
pub fn hash_password(salt: &[u8], password: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(password.as_bytes());
    format!("sha256${}${}", hex(salt), hex(&h.finalize()))
}

/// The `key_sha256` of a key-auth credential.
pub fn hash_key(key: &str) -> String {
    hex(&Sha256::digest(key.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A TLS certificate and the server names it serves.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Certificate {
    /// Unique id.
    pub id: String,
    /// PEM certificate chain.
    pub cert: String,
    /// PEM private key.
    pub key: String,
    /// Server names (exact or `*.` wildcard).
    #[serde(default)]
    pub snis: Vec<String>,
    /// Client certificates asked for in the handshakes this certificate serves (mutual TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_validation: Option<ClientValidation>,
}

/// How the handshakes of one served certificate ask for and check client certificates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientValidation {
    /// PEM CA certificates a client certificate must chain to.
    pub ca: String,
    /// What a handshake without a valid client certificate gets.
    #[serde(default)]
    pub mode: ClientValidationMode,
    /// PEM certificate revocation lists: a certificate they revoke is invalid, and so is one
    /// whose issuer has no list here (ingress-nginx's `ca.crl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crl: Option<String>,
    /// The longest chain above the client's certificate: 1, signed by one of `ca` itself; 2,
    /// through one intermediate; … (ingress-nginx's `auth-tls-verify-depth`). Absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_depth: Option<u8>,
    /// Where a missing or invalid certificate is refused, as `mode` says.
    #[serde(default, skip_serializing_if = "ClientRefusal::is_handshake")]
    pub refusal: ClientRefusal,
    /// Requests get `ssl-client-verify`, `ssl-client-subject-dn` and `ssl-client-issuer-dn`
    /// for the upstream (whatever the client sent under those names is dropped).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub upstream_headers: bool,
    /// Requests also get `ssl-client-cert`: the client's certificate, URL-encoded PEM.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pass_certificate: bool,
    /// A regex the client certificate's subject DN (RFC 2253, `CN=…,O=…`) must match; other
    /// requests, and requests without a certificate, get `403` (ingress-nginx's
    /// `auth-tls-match-cn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_subject: Option<String>,
    /// With `refusal: http`, where a refused request is redirected (`302`) instead of `400`
    /// (ingress-nginx's `auth-tls-error-page`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_page: Option<String>,
}

/// Where a client certificate that `mode` does not accept is refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientRefusal {
    /// The TLS handshake fails; no HTTP answer is given (the Gateway API's).
    #[default]
    Handshake,
    /// The handshake completes and each request gets `400` (ingress-nginx's: its `496` for no
    /// certificate and `495` for an invalid one, answered as `400`).
    Http,
}

impl ClientRefusal {
    fn is_handshake(&self) -> bool {
        *self == ClientRefusal::Handshake
    }
}

/// Whether a client certificate is required, and whether it must be valid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientValidationMode {
    /// A certificate chaining to `ca` is required; without one the handshake fails
    /// (ingress-nginx `auth-tls-verify-client: on`, the Gateway API's `AllowValidOnly`).
    #[default]
    Require,
    /// Asked for: a client may send none, but one it sends must be valid (ingress-nginx
    /// `optional`).
    Optional,
    /// Asked for, and never refused: none, or one that does not chain to `ca`, is accepted
    /// (ingress-nginx `optional_no_ca`, the Gateway API's `AllowInsecureFallback`).
    OptionalNoCa,
}

/// Without the key: debug output ends up in logs.
impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("id", &self.id)
            .field("snis", &self.snis)
            .field("key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A routing table that failed to parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid routing table: {0}")]
pub struct ParseError(String);

impl Config {
    /// Parses JSON, or YAML when the text does not start with `{`.
    pub fn parse(text: &[u8]) -> Result<Config, ParseError> {
        let first = text.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'{') {
            let de = &mut serde_json::Deserializer::from_slice(text);
            serde_path_to_error::deserialize(de).map_err(|e| ParseError(path_error(e)))
        } else {
            let de = serde_yaml::Deserializer::from_slice(text);
            serde_path_to_error::deserialize(de).map_err(|e| ParseError(path_error(e)))
        }
    }

    /// The hex SHA-256 of the table's canonical JSON, excluding `hash` itself.
    pub fn content_hash(&self) -> String {
        if self.hash.is_none() {
            return self.digest();
        }
        let mut unhashed = self.clone();
        unhashed.hash = None;
        unhashed.digest()
    }

    /// Returns the table with `hash` set to [`Config::content_hash`].
    pub fn with_hash(mut self) -> Config {
        // Without a copy of the table (10,000 routes are megabytes).
        self.hash = None;
        self.hash = Some(self.digest());
        self
    }

    /// SHA-256 of the table's JSON, hashed as it is written (no buffer of the whole table).
    fn digest(&self) -> String {
        struct Hashing(Sha256);
        impl std::io::Write for Hashing {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.update(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut h = std::io::BufWriter::with_capacity(64 * 1024, Hashing(Sha256::new()));
        serde_json::to_writer(&mut h, self).expect("a Config always serialises");
        let h = h
            .into_inner()
            .unwrap_or_else(|_| unreachable!("hashing never fails"));
        hex(&h.0.finalize())
    }

    /// Whether `self` and `other` differ at most in their upstreams' targets, algorithms,
    /// hashing and health checks (the same upstream ids, everything else equal): what an
    /// endpoint change is.
    pub fn differs_only_in_upstreams(&self, other: &Config) -> bool {
        self.version == other.version
            && self.settings == other.settings
            && self.upstreams.len() == other.upstreams.len()
            && self
                .upstreams
                .iter()
                .zip(&other.upstreams)
                .all(|(a, b)| a.id == b.id)
            && self.services == other.services
            && self.certificates == other.certificates
            && self.consumers == other.consumers
            && self.plugins == other.plugins
            && self.routes == other.routes
            && self.tls_routes == other.tls_routes
    }
}

/// A deserialisation error with the path of the field it is about (`routes[1].paths: …`).
pub fn path_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> String {
    let path = e.path().to_string();
    if path == "." {
        e.inner().to_string()
    } else {
        format!("{path}: {}", e.inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_json_and_yaml_alike() {
        let json = br#"{"routes":[{"id":"r","paths":[{"path":"/a"}],"service":"s"}],
            "services":[{"id":"s","host":"127.0.0.1","port":80}]}"#;
        let yaml = b"routes:\n- id: r\n  paths: [{path: /a}]\n  service: s\nservices:\n- {id: s, host: 127.0.0.1, port: 80}\n";
        let a = Config::parse(json).unwrap();
        let b = Config::parse(yaml).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.routes[0].paths[0].kind, PathKind::Prefix);
        assert_eq!(a.services[0].connect_timeout, 60_000);
        assert_eq!(a.content_hash(), b.content_hash());
    }

    #[test]
    fn parse_errors_name_the_field() {
        let err = Config::parse(br#"{"routes":[{"id":"r","strip_path":"yes"}]}"#).unwrap_err();
        assert!(err.to_string().contains("routes[0].strip_path"), "{err}");
        let err = Config::parse(br#"{"routes":[{"id":"r","colour":1}]}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `colour`"), "{err}");
    }

    #[test]
    fn targets() {
        assert_eq!(parse_target("127.0.0.1:80"), Ok(("127.0.0.1", 80)));
        assert_eq!(parse_target("[::1]:8080"), Ok(("::1", 8080)));
        assert_eq!(parse_target("svc.local:9"), Ok(("svc.local", 9)));
        for bad in ["nohost", ":80", "a:0", "a:x", "::1:80", "[zz]:1"] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hash_ignores_the_hash_field_and_tracks_content() {
        let a = Config::default().with_hash();
        let mut b = a.clone();
        b.hash = Some("anything".into());
        assert_eq!(a.content_hash(), b.content_hash());
        b.settings.merge_slashes = false;
        assert_ne!(a.content_hash(), b.content_hash());
    }
}
