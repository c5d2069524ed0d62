//! Validation of a parsed routing table ([`Config::validate`]): every problem found, each
//! naming the entity and field. It lives above the modules whose parsers it runs (router
//! patterns, certificates, credentials, upstream TLS, canary patterns), so that the table's
//! types (`config`) need none of them and a table that validates cannot fail to compile.

use std::collections::{HashMap, HashSet};

use crate::config::{
    Config, ConfigError, PathKind, PluginValidator, UpstreamProtocol, MAX_BACKEND_WEIGHT,
    MAX_ROUTE_TIMEOUT_MS,
};

/// Largest `hash_on.subset_size`: a subset is walked on every pick.
const MAX_SUBSET_SIZE: u32 = 256;

struct Errors(Vec<ConfigError>);

impl Errors {
    fn push(
        &mut self,
        entity: &'static str,
        id: &str,
        field: impl Into<String>,
        msg: impl Into<String>,
    ) {
        self.0.push(ConfigError {
            entity,
            id: id.to_string(),
            field: field.into(),
            message: msg.into(),
        });
    }
}

impl Config {
    /// Credential ids unique, formats valid, and no two credentials a plugin could see at once
    /// (same namespace, or one without a namespace) proving the same thing.
    fn validate_credentials(&self, errs: &mut Errors) {
        let mut cred_ids = HashSet::new();
        // (kind, what identifies it) → the namespaces and consumers that have it.
        type Owners<'a> = Vec<(Option<&'a str>, &'a str)>;
        let mut claims: HashMap<(&str, &str), Owners<'_>> = HashMap::new();
        for c in &self.consumers {
            for (i, cred) in c.credentials.iter().enumerate() {
                let field = |f: &str| format!("credentials[{i}].{f}");
                if cred.id().is_empty() || !cred_ids.insert(cred.id()) {
                    errs.push(
                        "consumer",
                        &c.id,
                        field("id"),
                        "empty or duplicate credential id",
                    );
                }
                if let Err((f, m)) = crate::consumers::check_credential(cred) {
                    errs.push("consumer", &c.id, field(f), m);
                    continue;
                }
                let (what, claim) = match cred {
                    crate::config::Credential::KeyAuth { key_sha256, .. } => {
                        ("key_sha256", key_sha256)
                    }
                    crate::config::Credential::BasicAuth { username, .. } => ("username", username),
                    crate::config::Credential::Jwt { key, .. } => ("key", key),
                };
                let kind = cred.kind();
                let ns = c.namespace.as_deref();
                let owners = claims.entry((kind, claim.as_str())).or_default();
                let clash = owners
                    .iter()
                    .find(|(n, _)| crate::config::namespaces_meet(*n, ns));
                match clash {
                    Some((_, owner)) => errs.push(
                        "consumer",
                        &c.id,
                        field(what),
                        format!("consumer {owner:?} already has this {kind} credential"),
                    ),
                    None => owners.push((ns, &c.id)),
                }
            }
        }
    }
}

/// Collects the ids of one entity kind, reporting empty and duplicate ones.
fn ids<'a>(
    errs: &mut Errors,
    entity: &'static str,
    all: impl Iterator<Item = &'a str>,
) -> HashSet<&'a str> {
    let mut seen = HashSet::new();
    for id in all {
        if id.is_empty() {
            errs.push(entity, id, "id", "must not be empty");
        } else if !seen.insert(id) {
            errs.push(entity, id, "id", "duplicate id");
        }
    }
    seen
}

fn statuses(
    errs: &mut Errors,
    entity: &'static str,
    id: &str,
    field: &str,
    list: &[u16],
    range: std::ops::RangeInclusive<u16>,
) {
    for (i, code) in list.iter().enumerate() {
        if !range.contains(code) {
            errs.push(
                entity,
                id,
                format!("{field}[{i}]"),
                format!(
                    "{code} is not a status between {} and {}",
                    range.start(),
                    range.end()
                ),
            );
        }
    }
}

/// A service's retry and TLS settings.
fn check_service_balancing(s: &crate::config::Service, errs: &mut Errors) {
    statuses(
        errs,
        "service",
        &s.id,
        "retry_on.statuses",
        &s.retry_on.statuses,
        400..=599,
    );
    if s.retry_on.backoff > 600_000 {
        errs.push(
            "service",
            &s.id,
            "retry_on.backoff",
            format!("{} ms is more than 10 minutes", s.retry_on.backoff),
        );
    }
    if s.retry_on.timeout > MAX_ROUTE_TIMEOUT_MS {
        errs.push(
            "service",
            &s.id,
            "retry_on.timeout",
            format!("{} ms is more than a day", s.retry_on.timeout),
        );
    }
    let Some(tls) = &s.tls else { return };
    if !matches!(
        s.protocol,
        UpstreamProtocol::Https | UpstreamProtocol::Grpcs
    ) {
        errs.push(
            "service",
            &s.id,
            "tls",
            "applies only to protocol https or grpcs",
        );
    }
    if let Some(sni) = &tls.sni {
        if !is_dns_name(sni) {
            errs.push(
                "service",
                &s.id,
                "tls.sni",
                format!("{sni:?} is not a DNS name"),
            );
        }
    }
    if tls.alpn == Some(crate::config::Alpn::Http11) && s.protocol == UpstreamProtocol::Grpcs {
        errs.push("service", &s.id, "tls.alpn", "gRPC needs h2");
    }
    // The PEMs, built as compiling builds them.
    if let Err((field, m)) = crate::upstream::check_service_tls(s, false) {
        errs.push("service", &s.id, field, m);
    }
}

/// Whether `name` is a DNS host name (letters, digits, `-`, `_`, dots; no IP literal).
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.parse::<std::net::IpAddr>().is_err()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// One upstream: targets, hashing input and health checks.
fn check_upstream(u: &crate::config::Upstream, errs: &mut Errors) {
    for (i, t) in u.targets.iter().enumerate() {
        if let Err(m) = crate::config::parse_target(&t.target) {
            errs.push("upstream", &u.id, format!("targets[{i}].target"), m);
        }
        if t.weight > 65_535 {
            errs.push(
                "upstream",
                &u.id,
                format!("targets[{i}].weight"),
                "must be between 0 and 65535",
            );
        }
    }
    check_upstream_balancing(u, errs);
}

/// An upstream's hashing input and health checks.
fn check_upstream_balancing(u: &crate::config::Upstream, errs: &mut Errors) {
    use crate::config::{Algorithm, HashBy};
    let named = |errs: &mut Errors, field: &str, by: HashBy, name: &Option<String>| {
        let needs = matches!(by, HashBy::Header | HashBy::Cookie | HashBy::QueryArg);
        match name {
            None if needs => errs.push(
                "upstream",
                &u.id,
                field,
                format!("required with by: {}", by.as_str()),
            ),
            Some(_) if !needs => errs.push(
                "upstream",
                &u.id,
                field,
                format!("not used with by: {}", by.as_str()),
            ),
            Some(n)
                if by == HashBy::Header && http::HeaderName::from_bytes(n.as_bytes()).is_err() =>
            {
                errs.push(
                    "upstream",
                    &u.id,
                    field,
                    format!("{n:?} is not a header name"),
                )
            }
            Some(n) if n.is_empty() || !n.bytes().all(is_token_byte) => errs.push(
                "upstream",
                &u.id,
                field,
                format!("{n:?} is not a cookie or argument name"),
            ),
            _ => {}
        }
    };
    match (&u.hash_on, u.algorithm) {
        (Some(_), a) if a != Algorithm::ConsistentHashing => errs.push(
            "upstream",
            &u.id,
            "hash_on",
            "used only with algorithm: consistent-hashing",
        ),
        (None, Algorithm::ConsistentHashing) => errs.push(
            "upstream",
            &u.id,
            "hash_on",
            "required with algorithm: consistent-hashing",
        ),
        _ => {}
    }
    if let Some(h) = &u.hash_on {
        named(errs, "hash_on.name", h.by, &h.name);
        if h.subset_size
            .is_some_and(|n| !(1..=MAX_SUBSET_SIZE).contains(&n))
        {
            let m = format!("must be 1..={MAX_SUBSET_SIZE}");
            errs.push("upstream", &u.id, "hash_on.subset_size", m);
        }
        if let Some(f) = &h.fallback {
            if f.by == HashBy::Cookie {
                errs.push("upstream", &u.id, "hash_on.fallback.by", "cannot be cookie");
            } else {
                named(errs, "hash_on.fallback.name", f.by, &f.name);
            }
        }
        if !h.cookie_path.starts_with('/')
            || !h
                .cookie_path
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b';')
        {
            errs.push(
                "upstream",
                &u.id,
                "hash_on.cookie_path",
                format!("{:?} is not a cookie path", h.cookie_path),
            );
        }
    }
    let hc = &u.healthchecks;
    if let Some(p) = &hc.passive {
        statuses(
            errs,
            "upstream",
            &u.id,
            "healthchecks.passive.unhealthy_statuses",
            &p.unhealthy_statuses,
            100..=599,
        );
        if p.cooldown == 0 || p.cooldown > 604_800 {
            errs.push(
                "upstream",
                &u.id,
                "healthchecks.passive.cooldown",
                "must be between 1 second and 604800 (a week)",
            );
        }
    }
    if let Some(a) = &hc.active {
        let field = |f: &str| format!("healthchecks.active.{f}");
        statuses(
            errs,
            "upstream",
            &u.id,
            &field("healthy_statuses"),
            &a.healthy_statuses,
            100..=599,
        );
        if !a.path.starts_with('/') || !a.path.bytes().all(|b| b.is_ascii_graphic()) {
            errs.push(
                "upstream",
                &u.id,
                field("path"),
                format!("{:?} is not an absolute path", a.path),
            );
        }
        if let Some(h) = &a.host {
            if h.is_empty() || !h.bytes().all(|b| b.is_ascii_graphic()) {
                errs.push(
                    "upstream",
                    &u.id,
                    field("host"),
                    format!("{h:?} is not a host"),
                );
            }
        }
        if a.interval < 100 {
            errs.push(
                "upstream",
                &u.id,
                field("interval"),
                "must be at least 100 milliseconds",
            );
        }
        if a.timeout == 0 {
            errs.push(
                "upstream",
                &u.id,
                field("timeout"),
                "must be at least 1 millisecond",
            );
        }
        for (f, v) in [
            ("healthy_threshold", a.healthy_threshold),
            ("unhealthy_threshold", a.unhealthy_threshold),
        ] {
            if v == 0 {
                errs.push("upstream", &u.id, field(f), "must be at least 1");
            }
        }
    }
}

/// RFC 9110 token characters (cookie and query-argument names are kept to these).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Config {
    /// Checks the upstreams alone: enough for a table that differs from a valid one only in
    /// them ([`Config::differs_only_in_upstreams`]).
    pub fn validate_upstreams(&self) -> Result<(), Vec<ConfigError>> {
        let mut errs = Errors(Vec::new());
        for u in &self.upstreams {
            check_upstream(u, &mut errs);
        }
        if errs.0.is_empty() {
            Ok(())
        } else {
            Err(errs.0)
        }
    }

    /// Checks references, syntax and plugin configs; returns every problem found.
    pub fn validate(&self, plugins: &dyn PluginValidator) -> Result<(), Vec<ConfigError>> {
        let mut errs = Errors(Vec::new());
        if self.version != crate::config::CONFIG_VERSION {
            errs.push(
                "config",
                "",
                "version",
                format!(
                    "unsupported version {}, expected {}",
                    self.version,
                    crate::config::CONFIG_VERSION
                ),
            );
        }
        let route_ids = ids(
            &mut errs,
            "route",
            self.routes.iter().map(|r| r.id.as_str()),
        );
        let service_ids = ids(
            &mut errs,
            "service",
            self.services.iter().map(|s| s.id.as_str()),
        );
        let upstream_ids = ids(
            &mut errs,
            "upstream",
            self.upstreams.iter().map(|u| u.id.as_str()),
        );
        let consumer_ids = ids(
            &mut errs,
            "consumer",
            self.consumers.iter().map(|c| c.id.as_str()),
        );
        ids(
            &mut errs,
            "plugin",
            self.plugins.iter().map(|p| p.id.as_str()),
        );
        ids(
            &mut errs,
            "certificate",
            self.certificates.iter().map(|c| c.id.as_str()),
        );

        let mut tls_ids: HashSet<&str> = HashSet::new();
        for t in &self.tls_routes {
            if !tls_ids.insert(t.id.as_str()) {
                errs.push("tls_route", &t.id, "id", "duplicate id");
            }
            for (i, h) in t.hosts.iter().enumerate() {
                if let Err(m) = check_host(h) {
                    errs.push("tls_route", &t.id, format!("hosts[{i}]"), m);
                }
            }
            for (i, b) in t.backends.iter().enumerate() {
                if let Some(sid) = &b.service {
                    if !service_ids.contains(sid.as_str()) {
                        errs.push(
                            "tls_route",
                            &t.id,
                            format!("backends[{i}].service"),
                            format!("no service with id {sid:?}"),
                        );
                    }
                }
                if b.weight > MAX_BACKEND_WEIGHT {
                    errs.push(
                        "tls_route",
                        &t.id,
                        format!("backends[{i}].weight"),
                        format!("{} is more than {MAX_BACKEND_WEIGHT}", b.weight),
                    );
                }
            }
        }

        for r in &self.routes {
            for (i, h) in r.hosts.iter().enumerate() {
                if let Err(m) = check_host(h) {
                    errs.push("route", &r.id, format!("hosts[{i}]"), m);
                }
            }
            for (i, h) in r.excluded_hosts.iter().enumerate() {
                if let Err(m) = check_host(h) {
                    errs.push("route", &r.id, format!("excluded_hosts[{i}]"), m);
                }
            }
            for (i, t) in r.tls_hosts.iter().enumerate() {
                if let Some(Err(m)) = t.host.as_deref().map(check_host) {
                    errs.push("route", &r.id, format!("tls_hosts[{i}].host"), m);
                }
                let Some(id) = t.client_certificate.as_deref() else {
                    continue;
                };
                let m = match self.certificates.iter().find(|c| c.id == id) {
                    Some(c) if c.client_validation.is_some() => continue,
                    Some(_) => format!("certificate {id:?} has no client_validation"),
                    None => format!("no certificate with id {id:?}"),
                };
                let field = format!("tls_hosts[{i}].client_certificate");
                errs.push("route", &r.id, field, m);
            }
            for (i, p) in r.paths.iter().enumerate() {
                if let Err(m) = check_path_rule(p) {
                    errs.push("route", &r.id, format!("paths[{i}].path"), m);
                }
            }
            for (i, m) in r.methods.iter().enumerate() {
                if m.is_empty()
                    || !m.bytes().all(|b| {
                        b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                    })
                {
                    errs.push(
                        "route",
                        &r.id,
                        format!("methods[{i}]"),
                        format!("{m:?} is not an upper-case HTTP method"),
                    );
                }
            }
            for (name, values) in &r.headers {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    errs.push(
                        "route",
                        &r.id,
                        format!("headers.{name}"),
                        "not a valid header name",
                    );
                } else if name.eq_ignore_ascii_case("host") {
                    errs.push(
                        "route",
                        &r.id,
                        format!("headers.{name}"),
                        "match hosts with `hosts`, not a header rule",
                    );
                }
                if values.is_empty() {
                    errs.push(
                        "route",
                        &r.id,
                        format!("headers.{name}"),
                        "needs at least one value",
                    );
                }
                for (i, v) in values.iter().enumerate() {
                    if http::HeaderValue::from_str(v).is_err() {
                        errs.push(
                            "route",
                            &r.id,
                            format!("headers.{name}[{i}]"),
                            format!("{v:?} is not a valid header value"),
                        );
                    }
                }
            }
            for (field, list, header) in [
                ("header_matches", &r.header_matches, true),
                ("query_matches", &r.query_matches, false),
            ] {
                for (i, m) in list.iter().enumerate() {
                    if header && http::HeaderName::from_bytes(m.name.as_bytes()).is_err() {
                        errs.push(
                            "route",
                            &r.id,
                            format!("{field}[{i}].name"),
                            format!("{:?} is not a valid header name", m.name),
                        );
                    } else if m.name.is_empty() {
                        errs.push("route", &r.id, format!("{field}[{i}].name"), "empty");
                    }
                    if m.kind == crate::config::ValueMatchKind::Regex {
                        if let Err(e) = crate::router::value_regex(&m.value) {
                            errs.push("route", &r.id, format!("{field}[{i}].value"), e);
                        }
                    }
                }
            }
            if !r.backends.is_empty() {
                if r.service.is_some() {
                    errs.push(
                        "route",
                        &r.id,
                        "backends",
                        "a route has `service` or `backends`, not both",
                    );
                }
                if r.canary.is_some() {
                    errs.push(
                        "route",
                        &r.id,
                        "backends",
                        "a route with `backends` has no canary",
                    );
                }
                for (i, b) in r.backends.iter().enumerate() {
                    if let Some(sid) = &b.service {
                        if !service_ids.contains(sid.as_str()) {
                            errs.push(
                                "route",
                                &r.id,
                                format!("backends[{i}].service"),
                                format!("no service with id {sid:?}"),
                            );
                        }
                    }
                    if b.weight > MAX_BACKEND_WEIGHT {
                        errs.push(
                            "route",
                            &r.id,
                            format!("backends[{i}].weight"),
                            format!("{} is more than {MAX_BACKEND_WEIGHT}", b.weight),
                        );
                    }
                }
            }
            if let Some(s) = r.upstream_error_status.filter(|s| !(500..=599).contains(s)) {
                errs.push(
                    "route",
                    &r.id,
                    "upstream_error_status",
                    format!("{s} is not a server error status (500 to 599)"),
                );
            }
            match r.timeout {
                Some(0) => errs.push("route", &r.id, "timeout", "must be at least 1 millisecond"),
                Some(t) if t > MAX_ROUTE_TIMEOUT_MS => errs.push(
                    "route",
                    &r.id,
                    "timeout",
                    format!("{t} ms is more than a day"),
                ),
                _ => {}
            }
            if r.response_rate.is_some_and(|p| p.bytes_per_second == 0) {
                let m = "must be at least 1 (leave response_rate out for no limit)";
                errs.push("route", &r.id, "response_rate.bytes_per_second", m);
            }
            for (i, m) in r.mirrors.iter().enumerate() {
                if !service_ids.contains(m.service.as_str()) {
                    errs.push(
                        "route",
                        &r.id,
                        format!("mirrors[{i}].service"),
                        format!("no service with id {:?}", m.service),
                    );
                }
                if !(0.0..=100.0).contains(&m.percent) {
                    errs.push(
                        "route",
                        &r.id,
                        format!("mirrors[{i}].percent"),
                        format!("{} is not between 0 and 100", m.percent),
                    );
                }
                if let Some(h) = &m.host {
                    if h.is_empty() || http::HeaderValue::from_str(h).is_err() {
                        errs.push(
                            "route",
                            &r.id,
                            format!("mirrors[{i}].host"),
                            format!("{h:?} is not a valid Host header value"),
                        );
                    }
                }
            }
            if !matches!(r.https_redirect_status_code, 301 | 302 | 307 | 308 | 426) {
                errs.push(
                    "route",
                    &r.id,
                    "https_redirect_status_code",
                    format!(
                        "{} is not one of 301, 302, 307, 308, 426",
                        r.https_redirect_status_code
                    ),
                );
            }
            if let Some(h) = &r.host_header {
                if h.is_empty() || http::HeaderValue::from_str(h).is_err() {
                    errs.push(
                        "route",
                        &r.id,
                        "host_header",
                        format!("{h:?} is not a valid Host header value"),
                    );
                }
            }
            for (i, token) in r.upgrade_protocols.iter().enumerate() {
                let field = format!("upgrade_protocols[{i}]");
                if token.eq_ignore_ascii_case("h2c") {
                    errs.push(
                        "route",
                        &r.id,
                        field,
                        "h2c is never allowed (it would tunnel past routing and plugins)",
                    );
                } else if token.is_empty()
                    || !token
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
                {
                    errs.push(
                        "route",
                        &r.id,
                        field,
                        format!("{token:?} is not a protocol name (an HTTP token)"),
                    );
                }
            }
            if let Some(rw) = &r.rewrite {
                if !rw.starts_with('/') || rw.contains(['?', '#', ' ']) {
                    errs.push(
                        "route",
                        &r.id,
                        "rewrite",
                        format!("{rw:?} must be a path starting with \"/\" (no query)"),
                    );
                }
            }
            if let Some(s) = &r.service {
                if !service_ids.contains(s.as_str()) {
                    errs.push(
                        "route",
                        &r.id,
                        "service",
                        format!("no service with id {s:?}"),
                    );
                }
            }
            if let Some(c) = &r.canary {
                let mut bad = |field: &str, m: String| {
                    errs.push("route", &r.id, format!("canary.{field}"), m);
                };
                if r.service.is_none() {
                    bad("service", "a canary needs the route's own `service`".into());
                }
                if !service_ids.contains(c.service.as_str()) {
                    bad("service", format!("no service with id {:?}", c.service));
                }
                if c.weight_total == 0 {
                    bad("weight_total", "must be at least 1".into());
                } else if c.weight > c.weight_total {
                    bad(
                        "weight",
                        format!(
                            "{} is more than weight_total ({})",
                            c.weight, c.weight_total
                        ),
                    );
                }
                if let Some(h) = &c.header {
                    if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                        bad("header", format!("{h:?} is not a header name"));
                    }
                }
                for (field, set) in [
                    ("header_value", c.header_value.is_some()),
                    ("header_pattern", c.header_pattern.is_some()),
                ] {
                    if set && c.header.is_none() {
                        bad(field, "used only with `header`".into());
                    }
                }
                if let Some(v) = &c.header_value {
                    if v.is_empty() || http::HeaderValue::from_str(v).is_err() {
                        bad("header_value", format!("{v:?} is not a header value"));
                    }
                }
                if let Some(p) = &c.header_pattern {
                    if let Err(m) = header_pattern(p) {
                        bad("header_pattern", m);
                    }
                }
                if let Some(name) = &c.cookie {
                    if !is_cookie_name(name) {
                        bad("cookie", format!("{name:?} is not a cookie name"));
                    }
                }
            }
            if let Some(f) = &r.fallback {
                if !service_ids.contains(f.service.as_str()) {
                    errs.push(
                        "route",
                        &r.id,
                        "fallback.service",
                        format!("no service with id {:?}", f.service),
                    );
                }
                statuses(
                    &mut errs,
                    "route",
                    &r.id,
                    "fallback.statuses",
                    &f.statuses,
                    400..=599,
                );
                for (name, value) in &f.headers {
                    let field = format!("fallback.headers.{name}");
                    match http::HeaderName::from_bytes(name.as_bytes()) {
                        Err(_) => errs.push("route", &r.id, field, "not a valid header name"),
                        // Framing, hop-by-hop and Host are the proxy's to set.
                        Ok(n)
                            if matches!(
                                n.as_str(),
                                "host"
                                    | "content-length"
                                    | "transfer-encoding"
                                    | "connection"
                                    | "upgrade"
                                    | "te"
                                    | "keep-alive"
                                    | "proxy-connection"
                            ) =>
                        {
                            errs.push("route", &r.id, field, format!("{n} is set by the proxy"))
                        }
                        Ok(_) if http::HeaderValue::from_str(value).is_err() => errs.push(
                            "route",
                            &r.id,
                            field,
                            format!("{value:?} is not a valid header value"),
                        ),
                        Ok(_) => {}
                    }
                }
            }
        }

        for s in &self.services {
            match (&s.host, &s.upstream) {
                (Some(_), Some(_)) => errs.push(
                    "service",
                    &s.id,
                    "upstream",
                    "set either `host` and `port` or `upstream`, not both",
                ),
                (None, None) => errs.push(
                    "service",
                    &s.id,
                    "host",
                    "needs `host` and `port`, or `upstream`",
                ),
                (Some(h), None) => {
                    if h.is_empty()
                        || h.contains(['/', ' ', ':']) && h.parse::<std::net::Ipv6Addr>().is_err()
                    {
                        errs.push(
                            "service",
                            &s.id,
                            "host",
                            format!("{h:?} is not a host name or IP address"),
                        );
                    }
                    match s.port {
                        None => errs.push("service", &s.id, "port", "required with `host`"),
                        Some(0) => {
                            errs.push("service", &s.id, "port", "must be between 1 and 65535")
                        }
                        Some(_) => {}
                    }
                }
                (None, Some(u)) => {
                    if !upstream_ids.contains(u.as_str()) {
                        errs.push(
                            "service",
                            &s.id,
                            "upstream",
                            format!("no upstream with id {u:?}"),
                        );
                    }
                }
            }
            if let Some(p) = &s.path {
                if !p.starts_with('/') {
                    errs.push(
                        "service",
                        &s.id,
                        "path",
                        format!("{p:?} must start with \"/\""),
                    );
                }
            }
            for (field, v) in [
                ("connect_timeout", s.connect_timeout),
                ("read_timeout", s.read_timeout),
                ("write_timeout", s.write_timeout),
            ] {
                if v == 0 {
                    errs.push("service", &s.id, field, "must be at least 1 millisecond");
                } else if v > MAX_ROUTE_TIMEOUT_MS {
                    // Past a day a timeout is a mistake, and near u64::MAX it would overflow
                    // the clock arithmetic.
                    errs.push(
                        "service",
                        &s.id,
                        field,
                        format!("{v} ms is more than a day"),
                    );
                }
            }
            check_service_balancing(s, &mut errs);
        }

        for u in &self.upstreams {
            check_upstream(u, &mut errs);
        }

        // (name, route, service, consumer) → the first plugin id with that exact scope.
        type Scope<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);
        let mut scopes: HashMap<Scope<'_>, &str> = HashMap::new();
        for p in &self.plugins {
            match plugins.check(&p.name, &p.config) {
                Ok(()) => {}
                Err(None) => errs.push(
                    "plugin",
                    &p.id,
                    "name",
                    format!("unknown plugin {:?}", p.name),
                ),
                Err(Some(m)) => errs.push("plugin", &p.id, "config", m),
            }
            if p.consumer.is_some() && crate::config::NOT_CONSUMER_SCOPED.contains(&p.name.as_str())
            {
                errs.push(
                    "plugin",
                    &p.id,
                    "consumer",
                    format!(
                        "{:?} cannot be scoped to a consumer: it decides who the consumer is or whether it may pass",
                        p.name
                    ),
                );
            }
            for (field, target, known) in [
                ("route", &p.route, &route_ids),
                ("service", &p.service, &service_ids),
                ("consumer", &p.consumer, &consumer_ids),
            ] {
                if let Some(t) = target {
                    if !known.contains(t.as_str()) {
                        errs.push("plugin", &p.id, field, format!("no {field} with id {t:?}"));
                    }
                }
            }
            let scope = (
                p.name.as_str(),
                p.route.as_deref(),
                p.service.as_deref(),
                p.consumer.as_deref(),
            );
            if let Some(other) = scopes.insert(scope, &p.id) {
                errs.push(
                    "plugin",
                    &p.id,
                    "name",
                    format!(
                        "plugin {:?} {:?} already has this exact scope",
                        other, p.name
                    ),
                );
            }
        }

        self.validate_credentials(&mut errs);

        for c in &self.certificates {
            for (i, h) in c.snis.iter().enumerate() {
                if let Err(m) = check_host(h) {
                    errs.push("certificate", &c.id, format!("snis[{i}]"), m);
                }
            }
            if let Err((field, m)) = crate::tls::parse_certificate(c) {
                errs.push("certificate", &c.id, field, m);
            }
            if let Some(v) = &c.client_validation {
                if let Err((field, m)) = crate::tls::ClientCheck::new(&c.id, v) {
                    errs.push("certificate", &c.id, field, m);
                }
                if let Some(page) = &v.error_page {
                    if page.parse::<http::Uri>().is_err() || page.is_empty() {
                        let m = format!("{page:?} is not a URL");
                        errs.push("certificate", &c.id, "client_validation.error_page", m);
                    }
                }
            }
        }

        if errs.0.is_empty() {
            Ok(())
        } else {
            Err(errs.0)
        }
    }
}

/// Checks a route path rule as the router reads it: a literal path starts with `/` and has
/// no `?`, `#`, space or control character; a regex compiles as the router anchors it. The
/// controller checks Ingress paths with this same function.
pub fn check_path_rule(p: &crate::config::PathRule) -> Result<(), String> {
    match p.kind {
        PathKind::Exact | PathKind::Prefix => {
            if !p.path.starts_with('/') {
                Err(format!("{:?} must start with \"/\"", p.path))
            } else if p.path.contains(['?', '#', ' ']) || p.path.chars().any(char::is_control) {
                Err(format!(
                    "{:?} contains characters not allowed in a path (?, #, spaces, control characters)",
                    p.path
                ))
            } else {
                Ok(())
            }
        }
        PathKind::Regex => crate::router::anchored_regex(&p.path)
            .map(drop)
            .map_err(|e| format!("invalid regex: {e}")),
    }
}

/// Checks a route host: a DNS name (labels of letters, digits, `-` and `_`), optionally
/// with one leading `*.` label. The controller checks Ingress hosts with this same function.
pub fn check_host(h: &str) -> Result<(), String> {
    let name = h.strip_prefix("*.").unwrap_or(h);
    if name.is_empty() || name.len() > 253 {
        return Err(format!("{h:?} is not a valid host"));
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !label.starts_with('-');
        if !ok {
            return Err(format!(
                "{h:?} is not a valid host (DNS labels, optionally one leading \"*.\"; no ports, no other wildcards)"
            ));
        }
    }
    Ok(())
}

/// Longest `header_pattern` accepted, in bytes.
pub const MAX_PATTERN_LEN: usize = 1024;

/// Most memory a compiled `header_pattern` may take.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a `header_pattern` as the proxy matches it (unanchored, bounded in size).
/// The canary compiles with the same function.
pub fn header_pattern(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(format!(
            "longer than {MAX_PATTERN_LEN} bytes ({} bytes)",
            pattern.len()
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid regex: {e}"))
}

/// Whether `name` may name a cookie (an RFC 6265 token).
pub fn is_cookie_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::*;

    #[test]
    fn timeouts_past_a_day_are_refused_before_any_clock_arithmetic() {
        let table = |extra: &str| {
            format!(
                "services:\n- {{id: s, host: h, port: 1{extra}}}\nroutes:\n- {{id: r, service: s, timeout: 86400001}}\n"
            )
        };
        let errors = Config::parse(table(", read_timeout: 18446744073709551615").as_bytes())
            .unwrap()
            .validate(&crate::Registry::builtin())
            .unwrap_err();
        let fields: Vec<String> = errors.iter().map(|e| e.field.clone()).collect();
        assert!(fields.contains(&"read_timeout".to_string()), "{fields:?}");
        assert!(fields.contains(&"timeout".to_string()), "{fields:?}");
    }

    #[test]
    fn an_upstream_error_status_is_a_server_error() {
        let check = |status: u16| {
            let yaml = format!(
                "services:\n- {{id: s, host: h, port: 1}}\nroutes:\n- {{id: r, service: s, upstream_error_status: {status}}}\n"
            );
            Config::parse(yaml.as_bytes())
                .unwrap()
                .validate(&crate::Registry::builtin())
                .map_err(|errors| errors.iter().map(|e| e.field.clone()).collect::<Vec<_>>())
        };
        assert!(check(503).is_ok());
        assert!(check(500).is_ok());
        for bad in [200, 404, 499, 600, 0] {
            assert_eq!(check(bad).unwrap_err(), ["upstream_error_status"], "{bad}");
        }
    }
    use crate::config::Config;

    struct OnlyEcho;
    impl PluginValidator for OnlyEcho {
        fn check(&self, name: &str, config: &serde_json::Value) -> Result<(), Option<String>> {
            match name {
                "echo" if config.get("bad").is_some() => Err(Some("bad: not allowed".into())),
                "echo" => Ok(()),
                _ => Err(None),
            }
        }
    }

    fn errors(yaml: &str) -> Vec<String> {
        let cfg = Config::parse(yaml.as_bytes()).unwrap();
        match cfg.validate(&OnlyEcho) {
            Ok(()) => vec![],
            Err(e) => e.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn a_valid_table_passes() {
        let e = errors(
            "routes: [{id: r, hosts: [a.example.com, '*.example.com'], paths: [{path: /a}, {path: '^/v[0-9]+', kind: Regex}], methods: [GET], service: s}]\n\
             services: [{id: s, upstream: u}]\nupstreams: [{id: u, targets: [{target: '127.0.0.1:80'}, {target: '[::1]:81'}]}]\n\
             plugins: [{id: p, name: echo, route: r}]\n",
        );
        assert!(e.is_empty(), "{e:?}");
    }

    #[test]
    fn every_problem_is_reported_with_entity_and_field() {
        let e = errors(
            "routes:\n\
             - {id: r, hosts: ['a.*.com'], paths: [{path: nope}, {path: '(', kind: Regex}], methods: [get], service: missing}\n\
             - {id: r}\n\
             services: [{id: s, host: h}, {id: t, upstream: u2}]\n\
             upstreams: [{id: u, targets: [{target: 'nohost'}]}]\n\
             plugins: [{id: p, name: nosuch}, {id: q, name: echo, config: {bad: 1}}, {id: x, name: echo, route: zz}]\n",
        );
        let want = [
            "route \"r\": id: duplicate id",
            "route \"r\": hosts[0]",
            "route \"r\": paths[0].path",
            "route \"r\": paths[1].path: invalid regex",
            "route \"r\": methods[0]",
            "route \"r\": service: no service with id \"missing\"",
            "service \"s\": port: required",
            "service \"t\": upstream: no upstream with id \"u2\"",
            "upstream \"u\": targets[0].target",
            "plugin \"p\": name: unknown plugin \"nosuch\"",
            "plugin \"q\": config: bad: not allowed",
            "plugin \"x\": route: no route with id \"zz\"",
        ];
        for w in want {
            assert!(e.iter().any(|l| l.contains(w)), "missing {w:?} in {e:#?}");
        }
    }

    #[test]
    fn tls_hosts_name_a_certificate_that_asks_for_client_certificates() {
        let e = errors(
            "routes:\n\
             - {id: r, hosts: [a.example.com], tls_hosts: [{host: 'a.*.com'}, {host: a.example.com, client_certificate: plain}, {client_certificate: missing}]}\n\
             certificates: [{id: plain, cert: x, key: y, snis: [a.example.com]}]\n",
        );
        let want = [
            "route \"r\": tls_hosts[0].host",
            "route \"r\": tls_hosts[1].client_certificate: certificate \"plain\" has no client_validation",
            "route \"r\": tls_hosts[2].client_certificate: no certificate with id \"missing\"",
        ];
        for w in want {
            assert!(e.iter().any(|l| l.contains(w)), "missing {w:?} in {e:#?}");
        }
    }

    #[test]
    fn balancing_problems_name_their_field() {
        let e = errors(
            "services:\n\
             - {id: a, upstream: u, retry_on: {statuses: [200]}}\n\
             - {id: b, host: h, port: 1, tls: {sni: '10.0.0.1'}}\n\
             - {id: c, protocol: grpcs, host: h, port: 1, tls: {alpn: http/1.1}}\n\
             - {id: d, protocol: https, host: h, port: 1, tls: {ca_certificates: 'not a pem'}}\n\
             upstreams:\n\
             - {id: u, algorithm: consistent-hashing, hash_on: {by: header, fallback: {by: cookie, name: c}, cookie_path: x}}\n\
             - {id: v, hash_on: {by: ip, name: x}, healthchecks: {passive: {cooldown: 0, unhealthy_statuses: [99]}, \
             active: {path: nope, interval: 5, timeout: 0, healthy_threshold: 0, healthy_statuses: [600]}}}\n\
             - {id: w, algorithm: consistent-hashing}\n",
        );
        let want = [
            "service \"a\": retry_on.statuses[0]: 200 is not a status between 400 and 599",
            "service \"b\": tls: applies only to protocol https or grpcs",
            "service \"b\": tls.sni: \"10.0.0.1\" is not a DNS name",
            "service \"c\": tls.alpn: gRPC needs h2",
            "service \"d\": tls.ca_certificates",
            "upstream \"u\": hash_on.name: required with by: header",
            "upstream \"u\": hash_on.fallback.by: cannot be cookie",
            "upstream \"u\": hash_on.cookie_path",
            "upstream \"v\": hash_on: used only with algorithm: consistent-hashing",
            "upstream \"v\": hash_on.name: not used with by: ip",
            "upstream \"v\": healthchecks.passive.unhealthy_statuses[0]",
            "upstream \"v\": healthchecks.passive.cooldown",
            "upstream \"v\": healthchecks.active.healthy_statuses[0]",
            "upstream \"v\": healthchecks.active.path",
            "upstream \"v\": healthchecks.active.interval",
            "upstream \"v\": healthchecks.active.timeout",
            "upstream \"v\": healthchecks.active.healthy_threshold",
            "upstream \"w\": hash_on: required with algorithm: consistent-hashing",
        ];
        for w in want {
            assert!(e.iter().any(|l| l.contains(w)), "missing {w:?} in {e:#?}");
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }

    #[test]
    fn canary_and_fallback_problems_name_their_field() {
        let e = errors(
            "routes:\n\
             - {id: a, service: s, canary: {service: nope, weight: 101, header: 'bad header', header_pattern: '(', cookie: 'a=b'}, \
             fallback: {service: gone, statuses: [404, 200], headers: {'a b': x, Host: h, X-Ok: \"bad\\u0001\"}}}\n\
             - {id: b, canary: {service: s, weight_total: 0, header_value: x}}\n\
             - {id: c, service: s, canary: {service: s, header: x-canary, header_value: beta, cookie: c, weight: 5, weight_total: 10}, \
             fallback: {service: s, statuses: [503], headers: {X-Namespace: shop}}, access_log: false}\n\
             services: [{id: s, host: h, port: 1}]\n",
        );
        let want = [
            "route \"a\": canary.service: no service with id \"nope\"",
            "route \"a\": canary.weight: 101 is more than weight_total (100)",
            "route \"a\": canary.header: \"bad header\" is not a header name",
            "route \"a\": canary.header_pattern: invalid regex",
            "route \"a\": canary.cookie: \"a=b\" is not a cookie name",
            "route \"a\": fallback.service: no service with id \"gone\"",
            "route \"a\": fallback.statuses[1]: 200 is not a status between 400 and 599",
            "route \"a\": fallback.headers.a b: not a valid header name",
            "route \"a\": fallback.headers.Host: host is set by the proxy",
            "route \"a\": fallback.headers.X-Ok: ",
            "route \"b\": canary.service: a canary needs the route's own `service`",
            "route \"b\": canary.weight_total: must be at least 1",
            "route \"b\": canary.header_value: used only with `header`",
        ];
        for w in want {
            assert!(e.iter().any(|l| l.contains(w)), "missing {w:?} in {e:#?}");
        }
        assert_eq!(e.len(), want.len(), "route c is valid: {e:#?}");
    }

    #[test]
    fn host_rules() {
        assert!(check_host("example.com").is_ok());
        assert!(check_host("*.example.com").is_ok());
        assert!(check_host("*.*.example.com").is_err());
        assert!(check_host("example.com:80").is_err());
        assert!(check_host("").is_err());
        // Where the controller's own copy once differed from the proxy's: `_` is allowed
        // (Kubernetes Service-style names), non-ASCII is not.
        assert!(check_host("a_b.example.com").is_ok());
        assert!(check_host("bücher.example").is_err());
    }

    #[test]
    fn path_rules_refuse_every_control_character() {
        let rule = |path: &str| crate::config::PathRule {
            path: path.into(),
            kind: PathKind::Prefix,
        };
        assert!(check_path_rule(&rule("/a/b")).is_ok());
        // ASCII and Unicode (C1) control characters alike.
        for bad in ["/a\x7fb", "/a\u{85}b", "/a\tb", "/a b", "/a?b", "a"] {
            assert!(check_path_rule(&rule(bad)).is_err(), "{bad:?}");
        }
    }
}
