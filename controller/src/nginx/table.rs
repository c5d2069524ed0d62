//! The ingress-nginx annotations Weir does not translate, and what it says about each.

use super::Status;

/// Why raw nginx configuration is refused, in every snippet's note.
pub const SNIPPET: &str = "raw nginx configuration is never supported: snippets are what made ingress-nginx unsafe (CVE-2025-1974); a Weir plugin can do what it did";

/// The outcome of an annotation no translation rule consumed: a snippet, a known annotation
/// Weir does not support (or that has no effect in Weir), or an unknown one.
pub fn classify(name: &str) -> (Status, &'static str) {
    if name.ends_with("-snippet") {
        return (Status::Unsupported, SNIPPET);
    }
    let differs = |note| (Status::Differs, note);
    let unsupported = |note| (Status::Unsupported, note);
    match name {
        // Buffering: Weir streams bodies both ways and bounds what it keeps itself.
        "proxy-buffering"
        | "proxy-buffer-size"
        | "proxy-buffers-number"
        | "proxy-busy-buffers-size"
        | "proxy-request-buffering"
        | "client-body-buffer-size"
        | "proxy-max-temp-file-size" => differs(
            "no effect: Weir streams request and response bodies without nginx's buffers or temporary files",
        ),
        "proxy-http-version" => differs(
            "no effect: Weir speaks HTTP/1.1 to HTTP backends (weir.dev/protocol chooses h2c or gRPC)",
        ),
        "enable-rewrite-log" => differs("no effect: Weir has no rewrite log"),
        "preserve-trailing-slash" => differs(
            "no effect: Weir's https redirects keep the path exactly as requested",
        ),
        "affinity-mode" => differs(
            "both modes map onto consistent hashing: adding or removing a pod moves about 1/n of sessions",
        ),
        "session-cookie-change-on-failure" => differs(
            "a session whose pod fails is retried on another pod for that request, but keeps its cookie",
        ),
        "auth-cache-key" | "auth-cache-duration" => differs(
            "no effect: Weir asks the authentication service on every request",
        ),
        "auth-keepalive"
        | "auth-keepalive-share-vars"
        | "auth-keepalive-requests"
        | "auth-keepalive-timeout" => differs(
            "no effect: Weir keeps connections to the authentication service open itself",
        ),
        "enable-global-auth" => differs(
            "no effect: Weir has no global external authentication from a ConfigMap",
        ),
        "ssl-ciphers" | "ssl-prefer-server-ciphers" | "proxy-ssl-ciphers" | "proxy-ssl-protocols" => {
            differs("no effect: rustls offers only its modern cipher suites and TLS 1.2/1.3")
        }
        "global-rate-limit"
        | "global-rate-limit-window"
        | "global-rate-limit-key"
        | "global-rate-limit-ignored-cidrs" => unsupported(
            "removed from ingress-nginx; use Weir's rate-limiting plugin with policy: redis",
        ),
        "connection-proxy-header" => unsupported(
            "Weir manages the Connection header towards upstreams itself",
        ),
        "enable-modsecurity" | "enable-owasp-core-rules" | "modsecurity-transaction-id" => {
            unsupported("ModSecurity (a web application firewall) is not part of Weir")
        }
        "enable-opentelemetry"
        | "opentelemetry-trust-incoming-span"
        | "opentelemetry-operation-name"
        | "enable-opentracing"
        | "opentracing-trust-incoming-span" => unsupported(
            "tracing export is not supported yet; correlation-id propagates a request id",
        ),
        "http2-push-preload" => unsupported("HTTP/2 server push is obsolete and not supported"),
        "client-body-timeout" | "client-header-timeout" => differs(
            "Weir's own client timeouts (--idle-timeout and friends) apply",
        ),
        "denylist-source-range"
        | "whitelist-source-range"
        | "allowlist-source-range"
        | "auth-request-redirect"
        | "auth-always-set-cookie" => {
            unreachable_name()
        }
        "grpc-backend" | "secure-backends" => unsupported(
            "removed from ingress-nginx; use backend-protocol",
        ),
        "influxdb-measurement" | "influxdb-port" | "influxdb-host" | "influxdb-server-name"
        | "enable-influxdb" => unsupported("InfluxDB metrics are not supported; Weir serves /metrics"),
        "load-balance"
        | "upstream-hash-by"
        | "upstream-hash-by-subset"
        | "upstream-hash-by-subset-size"
        | "satisfy"
        | "limit-rate"
        | "limit-rate-after"
        | "custom-headers"
        | "auth-proxy-set-headers" => unreachable_name(),
        _ => unsupported("not an ingress-nginx annotation Weir knows"),
    }
}

/// Names the translation consumes never reach [`classify`]; should one slip through, it is
/// reported rather than lost.
fn unreachable_name() -> (Status, &'static str) {
    (
        Status::Unsupported,
        "not translated in this position (a Weir bug: please report it)",
    )
}

/// Whether an annotation decides who may pass: one that is not applied leaves the Ingress's
/// paths answering 503 unless the Ingress says `weir.dev/unsupported-annotations: serve`.
pub fn guards_access(name: &str) -> bool {
    (name.starts_with("auth-")
        && !matches!(
            name,
            "auth-cache-key"
                | "auth-cache-duration"
                | "auth-keepalive"
                | "auth-keepalive-share-vars"
                | "auth-keepalive-requests"
                | "auth-keepalive-timeout"
                | "auth-always-set-cookie"
                | "auth-snippet"
        ))
        || matches!(
            name,
            "whitelist-source-range" | "allowlist-source-range" | "denylist-source-range"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_never_supported() {
        for s in [
            "configuration-snippet",
            "server-snippet",
            "auth-snippet",
            "stream-snippet",
        ] {
            assert_eq!(classify(s), (Status::Unsupported, SNIPPET), "{s}");
        }
        assert!(!guards_access("auth-snippet"));
    }

    #[test]
    fn unknown_auth_annotations_guard_access() {
        assert!(guards_access("auth-tls-verify-client"));
        assert!(guards_access("auth-something-new"));
        assert!(!guards_access("auth-cache-key"));
        assert!(!guards_access("proxy-buffering"));
        assert_eq!(classify("no-such-thing").0, Status::Unsupported);
        assert_eq!(classify("proxy-buffering").0, Status::Differs);
    }
}
