//! Typed parsing of `weir.dev/` annotations, once, with errors naming the annotation.

use std::collections::BTreeMap;

use weir_crds::annotations as a;
use weir_proxy::config::{ClientProtocol, ClientValidationMode, ProxyProtocol, UpstreamProtocol};

/// A malformed annotation: (the annotation key, what was wrong).
pub type AnnotationError = (String, String);

/// What an Ingress's annotations ask for.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct IngressAnnotations {
    /// Plugin names.
    pub plugins: Vec<String>,
    /// `strip-path`.
    pub strip_path: bool,
    /// `preserve-host` (the client's Host is forwarded unless this says `"false"`).
    pub preserve_host: Option<bool>,
    /// `host-header`.
    pub host_header: Option<String>,
    /// `methods`.
    pub methods: Vec<String>,
    /// `headers.<name>`.
    pub headers: BTreeMap<String, Vec<String>>,
    /// `protocols`.
    pub protocols: Vec<ClientProtocol>,
    /// `https-redirect-status-code`.
    pub https_redirect_status_code: Option<u16>,
    /// `rewrite`.
    pub rewrite: Option<String>,
    /// `regex-priority`.
    pub regex_priority: i32,
    /// `upgrade-protocols` (lower-cased).
    pub upgrade_protocols: Vec<String>,
    /// `canary`.
    pub canary: bool,
    /// The `canary-*` settings (read whether or not `canary` is set).
    pub canary_rules: CanaryRules,
    /// `default-backend`: a Service name and maybe a port (number or name).
    pub default_backend: Option<(String, Option<String>)>,
    /// `custom-http-errors`.
    pub custom_http_errors: Vec<u16>,
    /// `access-log`.
    pub access_log: Option<bool>,
    /// `service-upstream`.
    pub service_upstream: bool,
    /// `upstream`: an Upstream resource for this Ingress's backends.
    pub upstream: Option<String>,
    /// `protocol`: towards this Ingress's backends.
    pub protocol: Option<UpstreamProtocol>,
    /// `forwarded-prefix`.
    pub forwarded_prefix: Option<String>,
    /// The `client-certificate-*` settings; `secret` set turns them on.
    pub client_certificate: ClientCertificateAnnotations,
    /// `ssl-passthrough`.
    pub ssl_passthrough: bool,
    /// `ssl-passthrough-proxy-protocol`.
    pub passthrough_proxy_protocol: Option<ProxyProtocol>,
    /// The `mirror-*` settings; `target` set turns them on.
    pub mirror: MirrorAnnotations,
    /// `satisfy: any`.
    pub satisfy_any: bool,
    /// `limit-rate` in bytes a second (0: none).
    pub limit_rate: u64,
    /// `limit-rate-after` in bytes.
    pub limit_rate_after: u64,
}

/// An Ingress's `mirror-*` annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct MirrorAnnotations {
    /// `mirror-target`.
    pub target: Option<MirrorTarget>,
    /// `mirror-host`.
    pub host: Option<String>,
    /// `mirror-request-body` (default true).
    pub body: bool,
}

impl Default for MirrorAnnotations {
    fn default() -> Self {
        MirrorAnnotations {
            target: None,
            host: None,
            body: true,
        }
    }
}

/// Where an Ingress's mirror copies go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorTarget {
    /// Over TLS (`https`).
    pub tls: bool,
    /// Host name or IP address (an IPv6 one without brackets).
    pub host: String,
    /// Port (default 80 or 443).
    pub port: u16,
}

/// Whether `h` can be a mirror copy's `Host` (`weir.dev/mirror-host`, ingress-nginx's
/// `mirror-host`): a header value without path, user or nginx variable.
pub fn is_mirror_host(h: &str) -> bool {
    !h.is_empty() && !h.contains(['/', ' ', '@', '$']) && http::HeaderValue::from_str(h).is_ok()
}

impl MirrorTarget {
    /// Parses `http://host[:port]` or `https://host[:port]` (a trailing `/` allowed).
    pub fn parse(url: &str) -> Result<MirrorTarget, String> {
        let bad = || format!("{url:?} is not http://host[:port] or https://host[:port]");
        let uri: http::Uri = url.parse().map_err(|_| bad())?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad()),
        };
        let authority = uri.authority().ok_or_else(bad)?;
        let path = uri.path_and_query().map_or("", |p| p.as_str());
        if !matches!(path, "" | "/") || authority.as_str().contains('@') {
            return Err(format!(
                "{url:?} has a path, query or user: the copy keeps the request's own path and query"
            ));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(bad());
        }
        Ok(MirrorTarget {
            tls,
            host: host.to_ascii_lowercase(),
            port: authority.port_u16().unwrap_or(if tls { 443 } else { 80 }),
        })
    }
}

/// An Ingress's `client-certificate-*` annotations.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ClientCertificateAnnotations {
    /// `client-certificate-secret`.
    pub secret: Option<String>,
    /// `client-certificate-mode`.
    pub mode: ClientValidationMode,
    /// `client-certificate-verify-depth`.
    pub verify_depth: Option<u8>,
    /// `client-certificate-error-page`.
    pub error_page: Option<String>,
    /// `client-certificate-pass-to-upstream`.
    pub pass_to_upstream: bool,
    /// `client-certificate-match-subject`.
    pub match_subject: Option<String>,
}

/// A canary Ingress's rules.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CanaryRules {
    /// `canary-weight`.
    pub weight: Option<u32>,
    /// `canary-weight-total`.
    pub weight_total: Option<u32>,
    /// `canary-by-header`.
    pub header: Option<String>,
    /// `canary-by-header-value`.
    pub header_value: Option<String>,
    /// `canary-by-header-pattern`.
    pub header_pattern: Option<String>,
    /// `canary-by-cookie`.
    pub cookie: Option<String>,
}

/// What a Service's annotations ask for.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ServiceAnnotations {
    /// Plugin names.
    pub plugins: Vec<String>,
    /// `upstream`: an Upstream resource name.
    pub upstream: Option<String>,
    /// `protocol`.
    pub protocol: Option<UpstreamProtocol>,
    /// `connect-timeout` (ms).
    pub connect_timeout: Option<u64>,
    /// `read-timeout` (ms).
    pub read_timeout: Option<u64>,
    /// `write-timeout` (ms).
    pub write_timeout: Option<u64>,
    /// `retries`.
    pub retries: Option<u32>,
    /// `path`.
    pub path: Option<String>,
}

/// What a Consumer's annotations ask for.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConsumerAnnotations {
    /// Plugin names: consumer-scoped plugins.
    pub plugins: Vec<String>,
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// An nginx size (`8m`, `512k`, `1g`, `100`) in bytes.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, mult) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// A size annotation (`limit-rate`, …).
fn size(key: &str, v: &str) -> Result<u64, AnnotationError> {
    parse_size(v).ok_or_else(|| {
        let m = format!(
            "{:?} is not a size (bytes, or a number with k, m or g)",
            v.trim()
        );
        (key.to_string(), m)
    })
}

fn boolean(key: &str, v: &str) -> Result<bool, AnnotationError> {
    match v.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err((
            key.into(),
            format!("{other:?} is not \"true\" or \"false\""),
        )),
    }
}

fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    key: &str,
    v: &str,
    min: T,
    max: T,
) -> Result<T, AnnotationError> {
    match v.trim().parse::<T>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        _ => Err((
            key.into(),
            format!("{v:?} is not a whole number between {min} and {max}"),
        )),
    }
}

fn plugin_names(key: &str, v: &str) -> Result<Vec<String>, AnnotationError> {
    let names = list(v);
    for n in &names {
        let ok = !n.is_empty()
            && n.len() <= 253
            && n.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !ok {
            return Err((key.into(), format!("{n:?} is not a resource name")));
        }
    }
    Ok(names)
}

fn path(key: &str, v: &str) -> Result<String, AnnotationError> {
    if v.starts_with('/') && !v.contains(['?', '#', ' ']) {
        Ok(v.to_string())
    } else {
        Err((
            key.into(),
            format!("{v:?} must be a path starting with \"/\""),
        ))
    }
}

fn upstream_name(key: &str, v: &str) -> Result<String, AnnotationError> {
    let names = plugin_names(key, v)?;
    match <[String; 1]>::try_from(names) {
        Ok([name]) => Ok(name),
        Err(_) => Err((key.into(), format!("{v:?} must name exactly one Upstream"))),
    }
}

fn protocol(key: &str, v: &str) -> Result<UpstreamProtocol, AnnotationError> {
    Ok(match v.trim() {
        "http" => UpstreamProtocol::Http,
        "https" => UpstreamProtocol::Https,
        "h2c" => UpstreamProtocol::H2c,
        "grpc" => UpstreamProtocol::Grpc,
        "grpcs" => UpstreamProtocol::Grpcs,
        other => {
            return Err((
                key.into(),
                format!("{other:?} is not one of http, https, h2c, grpc, grpcs"),
            ))
        }
    })
}

fn header_name(key: &str, v: &str) -> Result<String, AnnotationError> {
    let h = v.trim();
    match http::HeaderName::from_bytes(h.as_bytes()) {
        Ok(_) if !h.eq_ignore_ascii_case("host") => Ok(h.to_ascii_lowercase()),
        _ => Err((
            key.into(),
            format!("{h:?} is not a header name that can be matched"),
        )),
    }
}

fn header_value(key: &str, v: &str) -> Result<String, AnnotationError> {
    match http::HeaderValue::from_str(v) {
        Ok(_) if !v.is_empty() => Ok(v.to_string()),
        _ => Err((key.into(), format!("{v:?} is not a header value"))),
    }
}

/// The names in an object's `weir.dev/plugins` annotation, read leniently whatever its other
/// annotations say: what it asks for, which decides how plugins that Consumers name are scoped.
pub fn plugin_names_of(annotations: Option<&BTreeMap<String, String>>) -> Vec<String> {
    annotations
        .and_then(|m| m.get(a::PLUGINS))
        .map(|v| list(v))
        .unwrap_or_default()
}

/// Parsed annotations (or every malformed one), and the unknown `weir.dev/` keys.
pub type Parsed<T> = (Result<T, Vec<AnnotationError>>, Vec<String>);

/// Runs `apply` on every `weir.dev/` annotation; it returns `Ok(false)` for keys it does not know.
fn parse_all<T: Default>(
    annotations: &BTreeMap<String, String>,
    mut apply: impl FnMut(&mut T, &str, &str) -> Result<bool, AnnotationError>,
) -> Parsed<T> {
    let mut out = T::default();
    let mut errors = Vec::new();
    let mut unknown = Vec::new();
    for (key, v) in annotations.iter().filter(|(k, _)| k.starts_with(a::PREFIX)) {
        match apply(&mut out, key, v) {
            Ok(true) => {}
            Ok(false) => unknown.push(key.into()),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        (Ok(out), unknown)
    } else {
        (Err(errors), unknown)
    }
}

/// Parses an Ingress's annotations; every problem is returned, unknown `weir.dev/` keys too
/// (those in the second list, which do not stop the Ingress from being served).
pub fn ingress(annotations: &BTreeMap<String, String>) -> Parsed<IngressAnnotations> {
    parse_all(annotations, |out: &mut IngressAnnotations, key, v| {
        match key {
            a::PLUGINS => out.plugins = plugin_names(key, v)?,
            a::STRIP_PATH => out.strip_path = boolean(key, v)?,
            a::PRESERVE_HOST => out.preserve_host = Some(boolean(key, v)?),
            a::HOST_HEADER => {
                let h = v.trim();
                if h.is_empty() || http::HeaderValue::from_str(h).is_err() {
                    return Err((key.into(), format!("{v:?} is not a valid Host header")));
                }
                out.host_header = Some(h.to_string());
            }
            a::METHODS => {
                let methods: Vec<String> = list(v)
                    .into_iter()
                    .map(|m| m.to_ascii_uppercase())
                    .collect();
                if let Some(bad) = methods.iter().find(|m| {
                    !m.bytes()
                        .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
                }) {
                    return Err((key.into(), format!("{bad:?} is not an HTTP method")));
                }
                out.methods = methods;
            }
            a::PROTOCOLS => {
                let mut protos = Vec::new();
                for p in list(v) {
                    protos.push(match p.as_str() {
                        "http" => ClientProtocol::Http,
                        "https" => ClientProtocol::Https,
                        other => {
                            return Err((key.into(), format!("{other:?} is not http or https")))
                        }
                    });
                }
                out.protocols = protos;
            }
            a::HTTPS_REDIRECT_STATUS_CODE => {
                let code = number::<u16>(key, v, 300, 599)?;
                if ![301, 302, 307, 308, 426].contains(&code) {
                    return Err((
                        key.into(),
                        format!("{code} is not one of 301, 302, 307, 308, 426"),
                    ));
                }
                out.https_redirect_status_code = Some(code);
            }
            a::REWRITE => out.rewrite = Some(path(key, v.trim())?),
            a::REGEX_PRIORITY => out.regex_priority = number::<i32>(key, v, -1_000_000, 1_000_000)?,
            a::UPGRADE_PROTOCOLS => {
                let tokens: Vec<String> = list(v).iter().map(|t| t.to_ascii_lowercase()).collect();
                if let Some(bad) = tokens.iter().find(|t| {
                    t.as_str() == "h2c"
                        || !t
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
                }) {
                    let why = if bad == "h2c" {
                        "h2c is never allowed (it would tunnel past routing and plugins)"
                            .to_string()
                    } else {
                        format!("{bad:?} is not a protocol name")
                    };
                    return Err((key.into(), why));
                }
                out.upgrade_protocols = tokens;
            }
            a::CLIENT_CERTIFICATE_SECRET => {
                let names = plugin_names(key, v)?;
                match <[String; 1]>::try_from(names) {
                    Ok([name]) => out.client_certificate.secret = Some(name),
                    Err(_) => {
                        return Err((
                            key.into(),
                            format!(
                                "{v:?} must name exactly one Secret of the Ingress's namespace"
                            ),
                        ))
                    }
                }
            }
            a::CLIENT_CERTIFICATE_MODE => {
                out.client_certificate.mode = match v.trim() {
                    "require" => ClientValidationMode::Require,
                    "optional" => ClientValidationMode::Optional,
                    "optional_no_ca" => ClientValidationMode::OptionalNoCa,
                    other => {
                        return Err((
                            key.into(),
                            format!("{other:?} is not one of require, optional, optional_no_ca"),
                        ))
                    }
                }
            }
            a::CLIENT_CERTIFICATE_VERIFY_DEPTH => {
                out.client_certificate.verify_depth = Some(number(key, v, 1, 16)?)
            }
            a::CLIENT_CERTIFICATE_ERROR_PAGE => {
                let url = v.trim();
                let ok = url.parse::<http::Uri>().is_ok_and(|u| u.scheme().is_some())
                    || url.starts_with('/');
                if !ok || http::HeaderValue::from_str(url).is_err() {
                    return Err((key.into(), format!("{url:?} is not a URL or a path")));
                }
                out.client_certificate.error_page = Some(url.to_string());
            }
            a::CLIENT_CERTIFICATE_PASS_TO_UPSTREAM => {
                out.client_certificate.pass_to_upstream = boolean(key, v)?
            }
            a::CLIENT_CERTIFICATE_MATCH_SUBJECT => {
                let re = v.trim();
                if let Err(e) = regex::RegexBuilder::new(re).size_limit(1 << 20).build() {
                    return Err((
                        key.into(),
                        format!("{re:?} is not a regular expression: {e}"),
                    ));
                }
                out.client_certificate.match_subject = Some(re.to_string());
            }
            a::SSL_PASSTHROUGH => out.ssl_passthrough = boolean(key, v)?,
            a::SSL_PASSTHROUGH_PROXY_PROTOCOL => {
                out.passthrough_proxy_protocol = Some(match v.trim() {
                    "v1" => ProxyProtocol::V1,
                    "v2" => ProxyProtocol::V2,
                    other => return Err((key.into(), format!("{other:?} is not v1 or v2"))),
                })
            }
            a::MIRROR_TARGET => {
                out.mirror.target =
                    Some(MirrorTarget::parse(v.trim()).map_err(|m| (key.into(), m))?)
            }
            a::MIRROR_HOST => {
                let h = v.trim();
                if !is_mirror_host(h) {
                    return Err((key.into(), format!("{h:?} is not a host name")));
                }
                out.mirror.host = Some(h.to_string());
            }
            a::MIRROR_REQUEST_BODY => out.mirror.body = boolean(key, v)?,
            a::SATISFY => {
                out.satisfy_any = match v.trim() {
                    "all" => false,
                    "any" => true,
                    other => return Err((key.into(), format!("{other:?} is not all or any"))),
                }
            }
            a::LIMIT_RATE => out.limit_rate = size(key, v)?,
            a::LIMIT_RATE_AFTER => out.limit_rate_after = size(key, v)?,
            a::CANARY => out.canary = boolean(key, v)?,
            a::CANARY_WEIGHT => out.canary_rules.weight = Some(number(key, v, 0, 1_000_000)?),
            a::CANARY_WEIGHT_TOTAL => {
                out.canary_rules.weight_total = Some(number(key, v, 1, 1_000_000)?)
            }
            a::CANARY_BY_HEADER => out.canary_rules.header = Some(header_name(key, v)?),
            a::CANARY_BY_HEADER_VALUE => {
                out.canary_rules.header_value = Some(header_value(key, v.trim())?)
            }
            a::CANARY_BY_HEADER_PATTERN => {
                let re = v.trim();
                if re.len() > 1024 {
                    return Err((key.into(), "longer than 1024 bytes".into()));
                }
                if let Err(e) = regex::RegexBuilder::new(re).size_limit(1 << 20).build() {
                    return Err((
                        key.into(),
                        format!("{re:?} is not a regular expression: {e}"),
                    ));
                }
                out.canary_rules.header_pattern = Some(re.to_string());
            }
            a::CANARY_BY_COOKIE => {
                let c = v.trim();
                let ok = !c.is_empty()
                    && c.bytes()
                        .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b));
                if !ok {
                    return Err((key.into(), format!("{c:?} is not a cookie name")));
                }
                out.canary_rules.cookie = Some(c.to_string());
            }
            a::DEFAULT_BACKEND => {
                let (name, port) = match v.trim().split_once(':') {
                    Some((n, p)) => (n, Some(p)),
                    None => (v.trim(), None),
                };
                let dns = |s: &str| {
                    !s.is_empty()
                        && s.len() <= 63
                        && s.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                };
                if !dns(name) || port.is_some_and(|p| !dns(p)) {
                    return Err((
                        key.into(),
                        format!("{v:?} is not a Service name, or name:port"),
                    ));
                }
                out.default_backend = Some((name.to_string(), port.map(str::to_string)));
            }
            a::CUSTOM_HTTP_ERRORS => {
                let mut codes = Vec::new();
                for c in list(v) {
                    codes.push(number::<u16>(key, &c, 400, 599)?);
                }
                codes.sort_unstable();
                codes.dedup();
                out.custom_http_errors = codes;
            }
            a::ACCESS_LOG => out.access_log = Some(boolean(key, v)?),
            a::FORWARDED_PREFIX => {
                out.forwarded_prefix = Some(header_value(key, v.trim())?);
            }
            a::SERVICE_UPSTREAM => out.service_upstream = boolean(key, v)?,
            a::UPSTREAM => out.upstream = Some(upstream_name(key, v)?),
            a::PROTOCOL => out.protocol = Some(protocol(key, v)?),
            a::UNSUPPORTED_ANNOTATIONS => {
                if !matches!(v.trim(), "serve" | "disable") {
                    return Err((key.into(), format!("{v:?} is not \"serve\" or \"disable\"")));
                }
            }
            k if k.starts_with(a::HEADERS_PREFIX) => {
                let name = &k[a::HEADERS_PREFIX.len()..];
                if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                    || name.eq_ignore_ascii_case("host")
                {
                    return Err((
                        key.into(),
                        format!("{name:?} is not a header name that can be matched"),
                    ));
                }
                let values = list(v);
                if values.is_empty()
                    || values
                        .iter()
                        .any(|x| http::HeaderValue::from_str(x).is_err())
                {
                    return Err((
                        key.into(),
                        format!("{v:?} is not a comma-separated list of header values"),
                    ));
                }
                out.headers.insert(name.to_ascii_lowercase(), values);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })
}

/// Parses a Service's annotations.
pub fn service(annotations: &BTreeMap<String, String>) -> Parsed<ServiceAnnotations> {
    parse_all(annotations, |out: &mut ServiceAnnotations, key, v| {
        match key {
            a::PLUGINS => out.plugins = plugin_names(key, v)?,
            a::UPSTREAM => out.upstream = Some(upstream_name(key, v)?),
            a::PROTOCOL => out.protocol = Some(protocol(key, v)?),
            a::CONNECT_TIMEOUT => out.connect_timeout = Some(number(key, v, 1, 86_400_000)?),
            a::READ_TIMEOUT => out.read_timeout = Some(number(key, v, 1, 86_400_000)?),
            a::WRITE_TIMEOUT => out.write_timeout = Some(number(key, v, 1, 86_400_000)?),
            a::RETRIES => out.retries = Some(number(key, v, 0, 32)?),
            a::PATH => out.path = Some(path(key, v.trim())?),
            _ => return Ok(false),
        }
        Ok(true)
    })
}

/// Parses a Consumer's annotations (only `weir.dev/plugins` applies to Consumers).
pub fn consumer(annotations: &BTreeMap<String, String>) -> Parsed<ConsumerAnnotations> {
    parse_all(annotations, |out: &mut ConsumerAnnotations, key, v| {
        match key {
            a::PLUGINS => out.plugins = plugin_names(key, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn ingress_annotations() {
        let (r, unknown) = ingress(&map(&[
            ("weir.dev/plugins", "rl, auth"),
            ("weir.dev/strip-path", "true"),
            ("weir.dev/methods", "get,POST"),
            ("weir.dev/headers.X-Version", "v1,v2"),
            ("weir.dev/protocols", "https"),
            ("weir.dev/https-redirect-status-code", "308"),
            ("weir.dev/regex-priority", "7"),
            ("weir.dev/retries", "3"),
            ("other.io/x", "y"),
        ]));
        let r = r.unwrap();
        assert_eq!(r.plugins, ["rl", "auth"]);
        assert!(r.strip_path);
        assert_eq!(r.methods, ["GET", "POST"]);
        assert_eq!(r.headers["x-version"], ["v1", "v2"]);
        assert_eq!(r.protocols, [ClientProtocol::Https]);
        assert_eq!(r.https_redirect_status_code, Some(308));
        assert_eq!(r.regex_priority, 7);
        assert_eq!(unknown, ["weir.dev/retries"]);
    }

    #[test]
    fn mirror_targets_are_a_scheme_a_host_and_maybe_a_port() {
        let t = MirrorTarget::parse("https://Mirror.example.com").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port),
            (true, "mirror.example.com", 443)
        );
        let t = MirrorTarget::parse("http://127.0.0.1:8081/").unwrap();
        assert_eq!((t.tls, t.host.as_str(), t.port), (false, "127.0.0.1", 8081));
        let t = MirrorTarget::parse("http://[::1]:9").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9));
        for bad in [
            "mirror.example.com",
            "ftp://m.example.com",
            "https://m.example.com/copy",
            "https://m.example.com?q=1",
            "https://user@m.example.com",
            "https://",
        ] {
            assert!(MirrorTarget::parse(bad).is_err(), "{bad}");
        }
        let (r, _) = ingress(&map(&[
            ("weir.dev/mirror-target", "https://m.example.com:8443"),
            ("weir.dev/mirror-host", "copy.example.com"),
            ("weir.dev/mirror-request-body", "false"),
            ("weir.dev/ssl-passthrough", "true"),
            ("weir.dev/ssl-passthrough-proxy-protocol", "v2"),
        ]));
        let r = r.unwrap();
        assert_eq!(r.mirror.target.map(|t| t.port), Some(8443));
        assert_eq!(r.mirror.host.as_deref(), Some("copy.example.com"));
        assert!(!r.mirror.body);
        assert!(r.ssl_passthrough);
        assert_eq!(r.passthrough_proxy_protocol, Some(ProxyProtocol::V2));
        let (r, _) = ingress(&map(&[
            ("weir.dev/ssl-passthrough-proxy-protocol", "v3"),
            ("weir.dev/mirror-host", "a b"),
        ]));
        assert_eq!(r.unwrap_err().len(), 2);
    }

    #[test]
    fn satisfy_and_limit_rate() {
        let (r, _) = ingress(&map(&[
            ("weir.dev/satisfy", "any"),
            ("weir.dev/limit-rate", "512k"),
            ("weir.dev/limit-rate-after", "1m"),
        ]));
        let r = r.unwrap();
        assert!(r.satisfy_any);
        assert_eq!((r.limit_rate, r.limit_rate_after), (512 << 10, 1 << 20));
        let (r, _) = ingress(&map(&[("weir.dev/satisfy", "all")]));
        assert!(!r.unwrap().satisfy_any);
        let (r, _) = ingress(&map(&[
            ("weir.dev/satisfy", "either"),
            ("weir.dev/limit-rate", "1.5k"),
            ("weir.dev/limit-rate-after", "-1"),
        ]));
        let errs = r.unwrap_err();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs
            .iter()
            .any(|(k, m)| k == "weir.dev/satisfy" && m.contains("all or any")));
    }

    #[test]
    fn every_bad_value_is_named() {
        let (r, _) = ingress(&map(&[
            ("weir.dev/strip-path", "yes"),
            ("weir.dev/https-redirect-status-code", "300"),
            ("weir.dev/rewrite", "no-slash"),
            ("weir.dev/headers.host", "a"),
        ]));
        let errs = r.unwrap_err();
        let keys: Vec<&str> = errs.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            keys,
            [
                "weir.dev/headers.host",
                "weir.dev/https-redirect-status-code",
                "weir.dev/rewrite",
                "weir.dev/strip-path"
            ]
        );
    }

    #[test]
    fn service_annotations() {
        let (r, _) = service(&map(&[
            ("weir.dev/protocol", "h2c"),
            ("weir.dev/read-timeout", "500"),
            ("weir.dev/path", "/v1"),
        ]));
        let r = r.unwrap();
        assert_eq!(r.protocol, Some(UpstreamProtocol::H2c));
        assert_eq!(r.read_timeout, Some(500));
        let (r, _) = service(&map(&[
            ("weir.dev/retries", "99"),
            ("weir.dev/protocol", "ftp"),
        ]));
        assert_eq!(r.unwrap_err().len(), 2);
    }

    #[test]
    fn consumer_annotations() {
        let (r, unknown) = consumer(&map(&[
            ("weir.dev/plugins", "gold-limit, ban"),
            ("weir.dev/strip-path", "true"),
        ]));
        assert_eq!(r.unwrap().plugins, ["gold-limit", "ban"]);
        assert_eq!(unknown, ["weir.dev/strip-path"]);
        let (r, _) = consumer(&map(&[("weir.dev/plugins", "Bad_Name")]));
        assert_eq!(r.unwrap_err()[0].0, "weir.dev/plugins");
    }
}
