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
/// Ingress: `"true"` makes this Ingress a canary of the Ingress serving the same host and
/// path: it takes no paths of its own, its backend gets some of their requests.
pub const CANARY: &str = "weir.dev/canary";
/// Canary Ingress: requests sent to the canary out of `canary-weight-total`.
pub const CANARY_WEIGHT: &str = "weir.dev/canary-weight";
/// Canary Ingress: the whole `canary-weight` is a part of (default 100).
pub const CANARY_WEIGHT_TOTAL: &str = "weir.dev/canary-weight-total";
/// Canary Ingress: the request header that chooses (`always` / `never`).
pub const CANARY_BY_HEADER: &str = "weir.dev/canary-by-header";
/// Canary Ingress: the header value that chooses the canary instead of `always`.
pub const CANARY_BY_HEADER_VALUE: &str = "weir.dev/canary-by-header-value";
/// Canary Ingress: a regular expression header values choosing the canary match.
pub const CANARY_BY_HEADER_PATTERN: &str = "weir.dev/canary-by-header-pattern";
/// Canary Ingress: the cookie that chooses (`always` / `never`).
pub const CANARY_BY_COOKIE: &str = "weir.dev/canary-by-cookie";
/// Ingress: a Service (`name` or `name:port`, same namespace) answering when the backend has
/// no endpoint, and for `custom-http-errors`.
pub const DEFAULT_BACKEND: &str = "weir.dev/default-backend";
/// Ingress: comma-separated upstream statuses answered by the default backend instead.
pub const CUSTOM_HTTP_ERRORS: &str = "weir.dev/custom-http-errors";
/// Ingress: `"false"` keeps the Ingress's requests out of the access log.
pub const ACCESS_LOG: &str = "weir.dev/access-log";
/// Ingress: the `X-Forwarded-Prefix` header sent upstream.
pub const FORWARDED_PREFIX: &str = "weir.dev/forwarded-prefix";
/// Ingress: `"true"` sends requests to the Service's cluster IP instead of its endpoints.
pub const SERVICE_UPSTREAM: &str = "weir.dev/service-upstream";
/// Ingress: a Secret of its namespace (type `kubernetes.io/tls`, or labelled
/// `weir.dev/credential: "true"`) whose `ca.crt` signs the client certificates its TLS hosts
/// ask for, and whose `ca.crl`, when present, revokes some.
pub const CLIENT_CERTIFICATE_SECRET: &str = "weir.dev/client-certificate-secret";
/// Ingress: `require` (default), `optional` or `optional_no_ca`: which requests without a
/// valid client certificate get `400`.
pub const CLIENT_CERTIFICATE_MODE: &str = "weir.dev/client-certificate-mode";
/// Ingress: the longest chain above a client certificate (default 1: signed by the CA).
pub const CLIENT_CERTIFICATE_VERIFY_DEPTH: &str = "weir.dev/client-certificate-verify-depth";
/// Ingress: a URL refused requests are redirected to instead of `400`.
pub const CLIENT_CERTIFICATE_ERROR_PAGE: &str = "weir.dev/client-certificate-error-page";
/// Ingress: `"true"` sends the client certificate upstream in `ssl-client-cert`.
pub const CLIENT_CERTIFICATE_PASS_TO_UPSTREAM: &str =
    "weir.dev/client-certificate-pass-to-upstream";
/// Ingress: a regex the client certificate's subject DN must match (else `403`).
pub const CLIENT_CERTIFICATE_MATCH_SUBJECT: &str = "weir.dev/client-certificate-match-subject";
/// Ingress: `"true"` hands TLS connections for its hosts, undecrypted, to the backend of
/// each rule's `/` path (routing by the ClientHello's server name).
pub const SSL_PASSTHROUGH: &str = "weir.dev/ssl-passthrough";
/// Ingress with `ssl-passthrough`: `v1` or `v2`, the PROXY protocol header its backends get
/// before the client's bytes.
pub const SSL_PASSTHROUGH_PROXY_PROTOCOL: &str = "weir.dev/ssl-passthrough-proxy-protocol";
/// Ingress: `http://host[:port]` or `https://host[:port]`, where a copy of each request goes
/// (its answer thrown away).
pub const MIRROR_TARGET: &str = "weir.dev/mirror-target";
/// Ingress with `mirror-target`: the copies' `Host` header (default: the target's host).
pub const MIRROR_HOST: &str = "weir.dev/mirror-host";
/// Ingress with `mirror-target`: `"false"` sends the copies without the request's body.
pub const MIRROR_REQUEST_BODY: &str = "weir.dev/mirror-request-body";
/// Ingress: `any` lets a request in when either its source ranges (an `ip-restriction`
/// plugin) or its authentication plugins allow it; `all` (the default) needs both.
pub const SATISFY: &str = "weir.dev/satisfy";
/// Ingress: the most bytes a second each answer's body is sent at (`512k`, `1m`, or bytes;
/// `0`, no limit), as nginx's `limit_rate`.
pub const LIMIT_RATE: &str = "weir.dev/limit-rate";
/// Ingress with `limit-rate`: how much of each answer's body goes at full speed first
/// (`1m`, `512k`, or bytes).
pub const LIMIT_RATE_AFTER: &str = "weir.dev/limit-rate-after";
/// Ingress with ingress-nginx annotations: `serve` (default) serves it without the ones Weir
/// does not support; `disable` makes its paths answer 503 instead.
pub const UNSUPPORTED_ANNOTATIONS: &str = "weir.dev/unsupported-annotations";

/// Service, or Ingress (for its own backends, replacing the Service's): the Upstream resource
/// (same namespace) configuring the backend.
pub const UPSTREAM: &str = "weir.dev/upstream";
/// Service, or Ingress (for its own backends): protocol towards the pods (`http`, `https`, `h2c`, `grpc`, `grpcs`).
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
