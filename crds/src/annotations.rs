//! Annotation keys, all under `weir.dev/` (documented in docs/annotations.md).

/// Prefix of every Weir annotation.
pub const PREFIX: &str = "weir.dev/";

/// Ingress, Service and Consumer: comma-separated Plugin (same namespace) or ClusterPlugin names.
pub const PLUGINS: &str = "weir.dev/plugins";
/// Ingress: `"true"` removes the matched path prefix before forwarding.
pub const STRIP_PATH: &str = "weir.dev/strip-path";
/// Ingress: `"true"` forwards the client's Host header.
pub const PRESERVE_HOST: &str = "weir.dev/preserve-host";
/// Ingress: a fixed Host header for the upstream.
pub const HOST_HEADER: &str = "weir.dev/host-header";
/// Ingress: comma-separated HTTP methods the routes accept.
pub const METHODS: &str = "weir.dev/methods";
/// Ingress: prefix of `weir.dev/headers.<name>: v1,v2` header-match annotations.
pub const HEADERS_PREFIX: &str = "weir.dev/headers.";
/// Ingress: comma-separated client protocols (`http`, `https`).
pub const PROTOCOLS: &str = "weir.dev/protocols";
/// Ingress: status for redirects to https (301, 302, 307, 308, 426).
pub const HTTPS_REDIRECT_STATUS_CODE: &str = "weir.dev/https-redirect-status-code";
/// Ingress: the upstream path, `$1`… from regex paths.
pub const REWRITE: &str = "weir.dev/rewrite";
/// Ingress: comma-separated protocols clients may switch to with `Upgrade`, besides
/// `websocket` (`h2c` is never allowed).
pub const UPGRADE_PROTOCOLS: &str = "weir.dev/upgrade-protocols";
/// Ingress: priority among regex routes (higher first).
pub const REGEX_PRIORITY: &str = "weir.dev/regex-priority";

/// Service: the Upstream resource (same namespace) configuring this Service.
pub const UPSTREAM: &str = "weir.dev/upstream";
/// Service: protocol towards the pods (`http`, `https`, `h2c`, `grpc`, `grpcs`).
pub const PROTOCOL: &str = "weir.dev/protocol";
/// Service: connect timeout in milliseconds.
pub const CONNECT_TIMEOUT: &str = "weir.dev/connect-timeout";
/// Service: read timeout in milliseconds.
pub const READ_TIMEOUT: &str = "weir.dev/read-timeout";
/// Service: write timeout in milliseconds.
pub const WRITE_TIMEOUT: &str = "weir.dev/write-timeout";
/// Service: connection retries.
pub const RETRIES: &str = "weir.dev/retries";
/// Service: path prefix prepended upstream.
pub const PATH: &str = "weir.dev/path";

/// The legacy Ingress class annotation.
pub const INGRESS_CLASS: &str = "kubernetes.io/ingress.class";
/// IngressClass annotation marking the cluster's default class.
pub const DEFAULT_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";
