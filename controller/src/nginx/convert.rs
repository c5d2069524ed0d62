//! One Ingress's ingress-nginx annotations → Weir-native objects, with ingress-nginx's
//! documented semantics and defaults.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use weir_crds::annotations as a;
use weir_crds::{
    Algorithm, HashBy, HashOn, Plugin, PluginSpec, RetryOn, SameSite, Timeouts, Upstream,
    UpstreamSpec, UpstreamTls,
};

use super::table::{classify, guards_access};
use super::{Converted, Options, Outcome, Report, Status, GENERATED_FROM};
use crate::store::{Key, Store};

/// ingress-nginx's `cors-allow-methods` default.
const CORS_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
/// ingress-nginx's `cors-allow-headers` default.
const CORS_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";

/// Converts one Ingress; the report has an outcome for every annotation under the prefix.
pub fn convert_ingress(
    key: &Key,
    ing: &Ingress,
    store: &Store,
    opts: &Options,
) -> (Converted, Report) {
    let prefix = format!("{}/", opts.prefix);
    let all = ing.metadata.annotations.clone().unwrap_or_default();
    let rest: BTreeMap<String, String> = all
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|s| (s.to_string(), v.clone())))
        .collect();
    let mut c = Conv {
        key,
        ing,
        store,
        prefix,
        rest,
        outcomes: Vec::new(),
        weir: BTreeMap::new(),
        plugins: Vec::new(),
        upstream: UpstreamSpec::default(),
        secrets: Vec::new(),
        extra: Vec::new(),
        spec: ing.spec.clone().unwrap_or_default(),
        guard_failed: Vec::new(),
        plugin_names: Vec::new(),
    };
    c.run();
    c.finish(&all)
}

/// The conversion of one Ingress in progress.
struct Conv<'a> {
    key: &'a Key,
    ing: &'a Ingress,
    store: &'a Store,
    /// `<prefix>/`.
    prefix: String,
    /// Annotations under the prefix not handled yet, by their short name.
    rest: BTreeMap<String, String>,
    outcomes: Vec<Outcome>,
    /// `weir.dev/*` annotations the Ingress gets.
    weir: BTreeMap<String, String>,
    plugins: Vec<Plugin>,
    /// Names of generated plugins, in the order they go into `weir.dev/plugins`.
    plugin_names: Vec<String>,
    upstream: UpstreamSpec,
    secrets: Vec<Secret>,
    extra: Vec<Ingress>,
    spec: IngressSpec,
    /// Annotations guarding access that could not be applied.
    guard_failed: Vec<String>,
}

/// Go's `strconv.ParseBool`, which ingress-nginx reads booleans with.
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// An nginx size (`8m`, `512k`, `1g`, `100`) in bytes.
fn parse_size(v: &str) -> Option<u64> {
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

/// Whole seconds (ingress-nginx's timeouts), as milliseconds.
fn parse_seconds(v: &str) -> Option<u64> {
    let v = v.trim();
    let v = v.strip_suffix('s').unwrap_or(v);
    match v.parse::<u64>() {
        Ok(n) if (1..=3600).contains(&n) => Some(n * 1000),
        _ => None,
    }
}

fn split_list(v: &str) -> Vec<String> {
    v.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn header_name_ok(h: &str) -> bool {
    http::HeaderName::from_bytes(h.as_bytes()).is_ok()
}

/// A CIDR or address list for ip-restriction: every entry checked here, so a bad one is
/// named on the annotation.
fn cidrs(v: &str) -> Result<Vec<String>, String> {
    let list: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    for e in &list {
        let (addr, bits) = match e.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (e.as_str(), None),
        };
        let ip: std::net::IpAddr = addr
            .parse()
            .map_err(|_| format!("{e:?} is not an IP address or CIDR"))?;
        if let Some(b) = bits {
            let max = if ip.is_ipv4() { 32 } else { 128 };
            match b.parse::<u8>() {
                Ok(n) if n <= max => {}
                _ => return Err(format!("{e:?} has an invalid prefix length")),
            }
        }
    }
    if list.is_empty() {
        return Err("no address or CIDR given".into());
    }
    Ok(list)
}

/// A CORS origin as Weir's cors plugin takes it: exact, `*`, or for `https://*.example.com`
/// an anchored regular expression.
fn cors_origin(o: &str) -> Result<String, String> {
    if o == "*" {
        return Ok(o.into());
    }
    let (scheme, rest) = o
        .split_once("://")
        .ok_or_else(|| format!("{o:?} is not an origin (scheme://host[:port])"))?;
    if scheme.is_empty() || rest.contains('/') {
        return Err(format!("{o:?} is not an origin (scheme://host[:port])"));
    }
    match rest.strip_prefix("*.") {
        Some(domain) => Ok(format!(
            "{}://[^./]+\\.{}",
            regex::escape(scheme),
            regex::escape(domain)
        )),
        None => Ok(o.into()),
    }
}

impl Conv<'_> {
    fn full(&self, short: &str) -> String {
        format!("{}{short}", self.prefix)
    }

    fn take(&mut self, short: &str) -> Option<String> {
        self.rest.remove(short)
    }

    fn record(&mut self, short: &str, value: &str, status: Status, note: impl Into<String>) {
        let note = note.into();
        if !status.carries_over() && guards_access(short) {
            self.guard_failed
                .push(format!("{} ({})", self.full(short), status.as_str()));
        }
        self.outcomes.push(Outcome {
            annotation: self.full(short),
            value: value.to_string(),
            status,
            note,
        });
    }

    fn applied(&mut self, short: &str, value: &str) {
        self.record(short, value, Status::Applied, "");
    }

    /// A generated Plugin attached to the Ingress.
    fn plugin(&mut self, what: &str, kind: &str, config: serde_json::Value) -> String {
        let name = format!("{}-nginx-{what}", self.key.name);
        self.plugin_names.push(name.clone());
        self.plugins
            .push(self.generated_plugin(&name, kind, Some(config), None));
        name
    }

    fn generated_plugin(
        &self,
        name: &str,
        kind: &str,
        config: Option<serde_json::Value>,
        priority: Option<i32>,
    ) -> Plugin {
        let mut p = Plugin::new(
            name,
            PluginSpec {
                plugin: kind.into(),
                config,
                config_from: None,
                disabled: false,
                priority,
            },
        );
        p.metadata = self.meta(name);
        p
    }

    fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(self.key.namespace.clone()),
            labels: Some(BTreeMap::from([(
                GENERATED_FROM.to_string(),
                "ingress-nginx".to_string(),
            )])),
            ..ObjectMeta::default()
        }
    }

    fn run(&mut self) {
        let canary = match self.take("canary") {
            Some(v) => match parse_bool(&v) {
                Some(b) => {
                    self.applied("canary", &v);
                    b
                }
                None => {
                    self.record("canary", &v, Status::Invalid, "not a boolean");
                    false
                }
            },
            None => false,
        };
        self.canary(canary);
        self.balancing();
        if canary {
            // As ingress-nginx: a canary takes every other setting from its main Ingress.
            let names: Vec<String> = self.rest.keys().cloned().collect();
            for n in names {
                let v = self.take(&n).unwrap_or_default();
                if n.ends_with("-snippet") {
                    self.record(&n, &v, Status::Unsupported, super::table::SNIPPET);
                } else {
                    let m = "ignored on a canary Ingress, as ingress-nginx ignores it: the main Ingress's settings apply";
                    self.record(&n, &v, Status::Applied, m);
                }
            }
        }
        self.paths();
        self.redirects();
        self.tls();
        self.limits();
        self.access();
        self.auth();
        self.backends();
        let names: Vec<String> = self.rest.keys().cloned().collect();
        for n in names {
            let v = self.take(&n).unwrap_or_default();
            let (status, note) = classify(&n);
            self.record(&n, &v, status, note);
        }
    }

    fn canary(&mut self, canary: bool) {
        let keys = [
            ("canary-weight", a::CANARY_WEIGHT),
            ("canary-weight-total", a::CANARY_WEIGHT_TOTAL),
            ("canary-by-header", a::CANARY_BY_HEADER),
            ("canary-by-header-value", a::CANARY_BY_HEADER_VALUE),
            ("canary-by-header-pattern", a::CANARY_BY_HEADER_PATTERN),
            ("canary-by-cookie", a::CANARY_BY_COOKIE),
        ];
        for (short, weir) in keys {
            let Some(v) = self.take(short) else { continue };
            if !canary {
                let m = "ignored without canary: \"true\", as ingress-nginx ignores it";
                self.record(short, &v, Status::Applied, m);
                continue;
            }
            // Checked as the native annotation is, so the two never disagree.
            let one = BTreeMap::from([(weir.to_string(), v.trim().to_string())]);
            let (parsed, _) = crate::translate::annotations::ingress(&one);
            if let Err(errors) = parsed {
                let m = errors
                    .into_iter()
                    .map(|(_, m)| m)
                    .collect::<Vec<_>>()
                    .join("; ");
                self.record(
                    short,
                    &v,
                    Status::Invalid,
                    format!("{m}; the canary rule is not used"),
                );
                continue;
            }
            self.weir.insert(weir.into(), v.trim().to_string());
            self.applied(short, &v);
        }
        if canary {
            self.weir.insert(a::CANARY.into(), "true".into());
        }
    }

    /// `use-regex`, `rewrite-target`, `x-forwarded-prefix`, `upstream-vhost`, `server-alias`.
    fn paths(&mut self) {
        let use_regex = self.take("use-regex");
        let rewrite = self.take("rewrite-target");
        let mut regex = false;
        if let Some(v) = &use_regex {
            match parse_bool(v) {
                Some(true) => {
                    regex = true;
                    let m = "only this Ingress's paths become regular expressions (ingress-nginx makes every path of the host one); patterns are Rust regex syntax: no look-around or back-references";
                    self.record("use-regex", v, Status::Differs, m);
                }
                Some(false) => self.applied("use-regex", v),
                None => self.record("use-regex", v, Status::Invalid, "not a boolean"),
            }
        }
        if let Some(v) = &rewrite {
            let t = v.trim();
            let b = t.as_bytes();
            // `$1`…`$9` only: nginx variables ($host, …) are not expanded.
            let groups_only = b.iter().enumerate().all(|(i, &c)| {
                c != b'$' || b.get(i + 1).is_some_and(|d| (b'1'..=b'9').contains(d))
            });
            if t.starts_with('/') && !t.contains(['?', '#', ' ']) && groups_only {
                self.weir.insert(a::REWRITE.into(), t.to_string());
                if t.contains('$') {
                    // Capture groups need the paths as regexes, as ingress-nginx makes them.
                    regex = true;
                    self.applied("rewrite-target", v);
                } else if regex {
                    self.applied("rewrite-target", v);
                } else {
                    let m = "the paths stay Ingress path matches (by path segment, case-sensitive), where ingress-nginx matches ^<path> as a case-insensitive regex";
                    self.record("rewrite-target", v, Status::Differs, m);
                }
            } else {
                let m = "Weir takes a path starting with / with $1…$9 capture groups only (no nginx variables, query or fragment); the path is forwarded unchanged";
                self.record("rewrite-target", v, Status::Unsupported, m);
            }
        }
        if regex {
            // ingress-nginx's regex locations: `~* ^<path>`, case-insensitive, open-ended,
            // longest first.
            let mut bad = Vec::new();
            for rule in self.spec.rules.iter_mut().flatten() {
                let Some(http) = rule.http.as_mut() else {
                    continue;
                };
                for p in http.paths.iter_mut() {
                    if p.path_type == "Exact" {
                        continue;
                    }
                    let path = p.path.clone().unwrap_or_else(|| "/".into());
                    let path = path.strip_prefix("/~").unwrap_or(&path).to_string();
                    if regex::Regex::new(&path).is_err() {
                        bad.push(path.clone());
                    }
                    p.path = Some(format!("/~(?i){path}"));
                    p.path_type = "ImplementationSpecific".into();
                }
                http.paths
                    .sort_by_key(|p| std::cmp::Reverse(p.path.as_deref().map_or(0, str::len)));
            }
            if !bad.is_empty() {
                let key = if use_regex.is_some() {
                    "use-regex"
                } else {
                    "rewrite-target"
                };
                if let Some(o) = self
                    .outcomes
                    .iter_mut()
                    .find(|o| o.annotation.ends_with(key))
                {
                    o.status = Status::Unsupported;
                    o.note = format!(
                        "{} not a regular expression Weir can run (Rust regex syntax: no look-around or back-references); the path is not served",
                        bad.iter().map(|b| format!("{b:?}")).collect::<Vec<_>>().join(", ") + if bad.len() == 1 { " is" } else { " are" }
                    );
                }
            }
        }
        if let Some(v) = self.take("x-forwarded-prefix") {
            let t = v.trim();
            if http::HeaderValue::from_str(t).is_ok() && !t.is_empty() {
                self.weir.insert(a::FORWARDED_PREFIX.into(), t.to_string());
                self.applied("x-forwarded-prefix", &v);
            } else {
                self.record(
                    "x-forwarded-prefix",
                    &v,
                    Status::Invalid,
                    "not a header value",
                );
            }
        }
        if let Some(v) = self.take("upstream-vhost") {
            let t = v.trim();
            if !t.is_empty() && !t.contains('$') && http::HeaderValue::from_str(t).is_ok() {
                self.weir.insert(a::HOST_HEADER.into(), t.to_string());
                self.applied("upstream-vhost", &v);
            } else {
                let m = "Weir takes a fixed host name (no nginx variables)";
                self.record("upstream-vhost", &v, Status::Unsupported, m);
            }
        }
        if let Some(v) = self.take("server-alias") {
            let aliases = split_list(&v);
            let bad = aliases
                .iter()
                .find(|h| weir_proxy::config::check_host(h).is_err());
            match bad {
                Some(h) => {
                    let m = format!("{h:?} is not a host name; no alias is served");
                    self.record("server-alias", &v, Status::Invalid, m);
                }
                None if aliases.is_empty() => {
                    self.record("server-alias", &v, Status::Invalid, "no host name given")
                }
                None => {
                    let rules: Vec<IngressRule> = self.spec.rules.clone().unwrap_or_default();
                    let with_host: Vec<&IngressRule> =
                        rules.iter().filter(|r| r.host.is_some()).collect();
                    let mut added = Vec::new();
                    for alias in &aliases {
                        for r in &with_host {
                            added.push(IngressRule {
                                host: Some(alias.clone()),
                                http: r.http.clone(),
                            });
                        }
                    }
                    if added.is_empty() {
                        let m = "the Ingress has no rule with a host to alias";
                        self.record("server-alias", &v, Status::Invalid, m);
                    } else {
                        self.spec.rules.get_or_insert_with(Vec::new).extend(added);
                        self.applied("server-alias", &v);
                    }
                }
            }
        }
    }

    /// `permanent-redirect`, `temporal-redirect`, `app-root`, `from-to-www-redirect`.
    fn redirects(&mut self) {
        let permanent = self.take("permanent-redirect");
        let permanent_code = self.take("permanent-redirect-code");
        let temporal = self.take("temporal-redirect");
        let temporal_code = self.take("temporal-redirect-code");
        let target_ok = |u: &str| {
            let u = u.trim();
            (u.starts_with("http://") || u.starts_with("https://") || u.starts_with('/'))
                && !u.contains(char::is_whitespace)
                && !u.contains('$')
        };
        let code = |v: &Option<String>, default: u16| -> Result<u16, String> {
            match v {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u16>() {
                    Ok(c) if [301, 302, 303, 307, 308].contains(&c) => Ok(c),
                    _ => Err(format!("{v:?} is not one of 301, 302, 303, 307, 308")),
                },
            }
        };
        // Each target with its code; permanent-redirect wins over temporal-redirect.
        let mut redirect: Option<(String, u16)> = None;
        for (target_key, target, code_key, code_value, default) in [
            (
                "permanent-redirect",
                &permanent,
                "permanent-redirect-code",
                &permanent_code,
                301,
            ),
            (
                "temporal-redirect",
                &temporal,
                "temporal-redirect-code",
                &temporal_code,
                302,
            ),
        ] {
            let parsed_code = code(code_value, default);
            if let (Some(cv), Err(m)) = (code_value, &parsed_code) {
                self.record(code_key, cv, Status::Invalid, m.clone());
            }
            let Some(v) = target else {
                if let (Some(cv), Ok(_)) = (code_value, &parsed_code) {
                    let m = format!("no effect without {target_key}");
                    self.record(code_key, cv, Status::Applied, m);
                }
                continue;
            };
            if redirect.is_some() {
                let m = "permanent-redirect wins, as in ingress-nginx";
                self.record(target_key, v, Status::Applied, m);
                if let (Some(cv), Ok(_)) = (code_value, &parsed_code) {
                    self.record(code_key, cv, Status::Applied, m);
                }
                continue;
            }
            match (target_ok(v), parsed_code) {
                (true, Ok(c)) => {
                    redirect = Some((v.trim().to_string(), c));
                    self.applied(target_key, v);
                    if let Some(cv) = code_value {
                        self.applied(code_key, cv);
                    }
                }
                (false, code) => {
                    let m = "not an http(s) URL or path (nginx variables are not expanded)";
                    self.record(target_key, v, Status::Invalid, m);
                    if let (Some(cv), Ok(_)) = (code_value, code) {
                        self.record(code_key, cv, Status::Applied, "its redirect is invalid");
                    }
                }
                (true, Err(_)) => {
                    self.record(target_key, v, Status::Invalid, "its code is invalid")
                }
            }
        }
        if let Some((location, status)) = redirect {
            let config = json!({"location": location, "status_code": status});
            self.plugin("redirect", "redirect", config);
        }

        if let Some(v) = self.take("app-root") {
            let t = v.trim();
            if t.starts_with('/') && !t.contains(['?', '#', ' ', '$']) {
                let name = format!("{}-app-root", self.key.name);
                let plugin = format!("{}-nginx-app-root", self.key.name);
                let config = json!({"location": t, "status_code": 302});
                self.plugins
                    .push(self.generated_plugin(&plugin, "redirect", Some(config), None));
                let hosts: Vec<Option<String>> = self.hosts();
                self.extra_ingress(&name, &plugin, hosts, "/", "Exact");
                self.applied("app-root", &v);
            } else {
                self.record(
                    "app-root",
                    &v,
                    Status::Invalid,
                    "not a path starting with /",
                );
            }
        }

        if let Some(v) = self.take("from-to-www-redirect") {
            match parse_bool(&v) {
                Some(true) => {
                    let hosts: Vec<String> = self.hosts().into_iter().flatten().collect();
                    let tls_hosts: Vec<String> = self
                        .spec
                        .tls
                        .iter()
                        .flatten()
                        .flat_map(|t| t.hosts.clone().unwrap_or_default())
                        .collect();
                    for (i, h) in hosts.iter().enumerate() {
                        let other = match h.strip_prefix("www.") {
                            Some(bare) => bare.to_string(),
                            None => format!("www.{h}"),
                        };
                        if hosts.contains(&other) || h.starts_with('*') {
                            continue;
                        }
                        let scheme = if tls_hosts.contains(h) {
                            "https"
                        } else {
                            "http"
                        };
                        let plugin = format!("{}-nginx-www-redirect-{i}", self.key.name);
                        let config = json!({
                            "location": format!("{scheme}://{h}"),
                            "status_code": 308,
                            "keep_incoming_path": true,
                            "keep_incoming_query": true,
                        });
                        self.plugins.push(self.generated_plugin(
                            &plugin,
                            "redirect",
                            Some(config),
                            None,
                        ));
                        let name = format!("{}-www-redirect-{i}", self.key.name);
                        self.extra_ingress(&name, &plugin, vec![Some(other)], "/", "Prefix");
                    }
                    let m = "redirects to https:// when the Ingress has TLS for the host, else http:// (ingress-nginx keeps the request's scheme)";
                    self.record("from-to-www-redirect", &v, Status::Differs, m);
                }
                Some(false) => self.applied("from-to-www-redirect", &v),
                None => self.record("from-to-www-redirect", &v, Status::Invalid, "not a boolean"),
            }
        }
    }

    /// The hosts of the Ingress's rules (`None` for a rule without one), without repeats.
    fn hosts(&self) -> Vec<Option<String>> {
        let mut hosts: Vec<Option<String>> = Vec::new();
        for r in self.spec.rules.iter().flatten() {
            if !hosts.contains(&r.host) {
                hosts.push(r.host.clone());
            }
        }
        hosts
    }

    /// The first backend of the Ingress (what an extra redirect Ingress names; its plugin
    /// answers before the backend is asked).
    fn first_backend(&self) -> Option<IngressBackend> {
        self.spec
            .rules
            .iter()
            .flatten()
            .flat_map(|r| r.http.iter().flat_map(|h| h.paths.iter()))
            .map(|p| p.backend.clone())
            .next()
            .or_else(|| self.spec.default_backend.clone())
    }

    fn extra_ingress(
        &mut self,
        name: &str,
        plugin: &str,
        hosts: Vec<Option<String>>,
        path: &str,
        path_type: &str,
    ) {
        let Some(backend) = self.first_backend() else {
            return;
        };
        let mut meta = self.meta(name);
        let mut annotations = BTreeMap::new();
        annotations.insert(a::PLUGINS.into(), plugin.into());
        if let Some(class) = self
            .ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|m| m.get(a::INGRESS_CLASS))
        {
            annotations.insert(a::INGRESS_CLASS.into(), class.clone());
        }
        meta.annotations = Some(annotations);
        let rules = hosts
            .into_iter()
            .map(|host| IngressRule {
                host,
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some(path.into()),
                        path_type: path_type.into(),
                        backend: backend.clone(),
                    }],
                }),
            })
            .collect();
        self.extra.push(Ingress {
            metadata: meta,
            spec: Some(IngressSpec {
                ingress_class_name: self.spec.ingress_class_name.clone(),
                rules: Some(rules),
                ..IngressSpec::default()
            }),
            status: None,
        });
    }

    /// `ssl-redirect`, `force-ssl-redirect`, `backend-protocol`, `proxy-ssl-*`.
    fn tls(&mut self) {
        let has_tls = self.spec.tls.as_ref().is_some_and(|t| !t.is_empty());
        let mut redirect = has_tls;
        if let Some(v) = self.take("ssl-redirect") {
            match parse_bool(&v) {
                Some(b) => {
                    redirect = b && has_tls;
                    let m = if b && !has_tls {
                        "no effect: the Ingress has no TLS section (force-ssl-redirect redirects without one)"
                    } else {
                        ""
                    };
                    self.record("ssl-redirect", &v, Status::Applied, m);
                }
                None => self.record("ssl-redirect", &v, Status::Invalid, "not a boolean"),
            }
        }
        if let Some(v) = self.take("force-ssl-redirect") {
            match parse_bool(&v) {
                Some(b) => {
                    redirect |= b;
                    self.applied("force-ssl-redirect", &v);
                }
                None => self.record("force-ssl-redirect", &v, Status::Invalid, "not a boolean"),
            }
        }
        // Written out either way, so that converting the emitted Ingress again (it keeps its
        // class) changes nothing; a user's own weir.dev/protocols is left alone.
        let own = self
            .ing
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|m| m.contains_key(a::PROTOCOLS));
        if !own {
            if redirect {
                self.weir.insert(a::PROTOCOLS.into(), "https".into());
                self.weir
                    .insert(a::HTTPS_REDIRECT_STATUS_CODE.into(), "308".into());
            } else if has_tls {
                self.weir.insert(a::PROTOCOLS.into(), "http,https".into());
            }
        }

        let mut secure = false;
        if let Some(v) = self.take("backend-protocol") {
            let p = match v.trim().to_ascii_uppercase().as_str() {
                "HTTP" => Some("http"),
                "HTTPS" => Some("https"),
                "GRPC" => Some("grpc"),
                "GRPCS" => Some("grpcs"),
                _ => None,
            };
            match p {
                Some(p) => {
                    secure = matches!(p, "https" | "grpcs");
                    self.weir.insert(a::PROTOCOL.into(), p.into());
                    self.applied("backend-protocol", &v);
                }
                None => {
                    let m = "Weir speaks HTTP, HTTPS, GRPC and GRPCS to backends (not AUTO_HTTP, AJP or FCGI); HTTP is used";
                    self.record("backend-protocol", &v, Status::Unsupported, m);
                }
            }
        }
        let ssl_keys = [
            "proxy-ssl-secret",
            "proxy-ssl-verify",
            "proxy-ssl-name",
            "proxy-ssl-server-name",
            "proxy-ssl-verify-depth",
        ];
        let ssl: BTreeMap<&str, String> = ssl_keys
            .iter()
            .filter_map(|k| self.take(k).map(|v| (*k, v)))
            .collect();
        if !secure {
            for (k, v) in &ssl {
                let m = "no effect: the backend protocol is not HTTPS or GRPCS";
                self.record(k, v, Status::Applied, m);
            }
            return;
        }
        // ingress-nginx does not verify backends unless told to.
        let mut tls = UpstreamTls {
            verify: Some(false),
            ..UpstreamTls::default()
        };
        let mut failed = false;
        if let Some(v) = ssl.get("proxy-ssl-verify") {
            match v.trim() {
                "on" => {
                    tls.verify = Some(true);
                    self.applied("proxy-ssl-verify", v);
                }
                "off" => self.applied("proxy-ssl-verify", v),
                _ => {
                    self.record(
                        "proxy-ssl-verify",
                        v,
                        Status::Invalid,
                        "not \"on\" or \"off\"",
                    );
                    failed = true;
                }
            }
        }
        if let Some(v) = ssl.get("proxy-ssl-secret") {
            let (ns, name) = match v.trim().split_once('/') {
                Some((ns, name)) => (ns.to_string(), name.to_string()),
                None => (self.key.namespace.clone(), v.trim().to_string()),
            };
            if ns != self.key.namespace {
                let m = "Weir reads backend TLS Secrets from the Ingress's own namespace; copy the Secret there";
                self.record("proxy-ssl-secret", v, Status::Unsupported, m);
                failed = true;
            } else {
                let secret = self
                    .store
                    .secrets
                    .get(&Key::new(ns.as_str(), name.as_str()));
                let has = |k: &str| {
                    secret.is_some_and(|s| {
                        s.data.as_ref().is_some_and(|d| d.contains_key(k))
                            || s.string_data.as_ref().is_some_and(|d| d.contains_key(k))
                    })
                };
                match secret {
                    None => {
                        let m = format!("Secret {ns}/{name} not found (Weir reads TLS Secrets and Secrets labelled weir.dev/credential: \"true\")");
                        self.record("proxy-ssl-secret", v, Status::Invalid, m);
                        failed = true;
                    }
                    Some(_) => {
                        if has("ca.crt") && tls.verify == Some(true) {
                            tls.ca_secret = Some(name.clone());
                        }
                        if has("tls.crt") && has("tls.key") {
                            tls.client_certificate_secret = Some(name.clone());
                        }
                        self.applied("proxy-ssl-secret", v);
                    }
                }
            }
        }
        let server_name = match ssl.get("proxy-ssl-server-name") {
            Some(v) => match v.trim() {
                "on" => {
                    self.applied("proxy-ssl-server-name", v);
                    true
                }
                "off" => {
                    let m = "Weir always sends SNI (proxy-ssl-name, else the Service's DNS name)";
                    self.record("proxy-ssl-server-name", v, Status::Differs, m);
                    false
                }
                _ => {
                    let m = "not \"on\" or \"off\"";
                    self.record("proxy-ssl-server-name", v, Status::Invalid, m);
                    failed = true;
                    false
                }
            },
            None => false,
        };
        if let Some(v) = ssl.get("proxy-ssl-name") {
            let t = v.trim();
            if weir_proxy::config::check_host(t).is_ok() && !t.contains('$') {
                tls.sni = Some(t.to_string());
                if server_name {
                    self.applied("proxy-ssl-name", v);
                } else {
                    let m = "also sent in SNI, as if proxy-ssl-server-name were on";
                    self.record("proxy-ssl-name", v, Status::Differs, m);
                }
            } else {
                self.record("proxy-ssl-name", v, Status::Invalid, "not a host name");
                failed = true;
            }
        }
        if let Some(v) = ssl.get("proxy-ssl-verify-depth") {
            match v.trim().parse::<u8>() {
                Ok(d) if d <= 10 => {
                    tls.verify_depth = Some(d);
                    self.applied("proxy-ssl-verify-depth", v);
                }
                _ => {
                    let m = "not a number from 0 to 10";
                    self.record("proxy-ssl-verify-depth", v, Status::Invalid, m);
                    failed = true;
                }
            }
        }
        if failed {
            // Fail closed: TLS that is not what was asked for is not spoken.
            self.guard_failed.push(format!(
                "{}proxy-ssl-* (backend TLS cannot be set up as asked)",
                self.prefix
            ));
        }
        self.upstream.tls = Some(tls);
    }

    /// Body size, timeouts, retries and rate limits.
    fn limits(&mut self) {
        if let Some(v) = self.take("proxy-body-size") {
            match parse_size(&v) {
                Some(0) => {
                    self.record("proxy-body-size", &v, Status::Applied, "0: no limit");
                }
                Some(bytes) => {
                    let config = json!({"allowed_payload_size": bytes, "size_unit": "bytes"});
                    self.plugin("body-size", "request-size-limiting", config);
                    self.applied("proxy-body-size", &v);
                }
                None => self.record(
                    "proxy-body-size",
                    &v,
                    Status::Invalid,
                    "not a size (8m, 512k, 1g, 100)",
                ),
            }
        }
        let mut timeouts = Timeouts::default();
        for (short, slot) in [
            ("proxy-connect-timeout", 0),
            ("proxy-send-timeout", 1),
            ("proxy-read-timeout", 2),
        ] {
            let Some(v) = self.take(short) else { continue };
            match parse_seconds(&v) {
                Some(ms) => {
                    match slot {
                        0 => timeouts.connect = Some(ms),
                        1 => timeouts.write = Some(ms),
                        _ => timeouts.read = Some(ms),
                    }
                    self.applied(short, &v);
                }
                None => self.record(
                    short,
                    &v,
                    Status::Invalid,
                    "not a whole number of seconds from 1 to 3600",
                ),
            }
        }
        if timeouts != Timeouts::default() {
            self.upstream.timeouts = Some(timeouts);
        }

        let next = self.take("proxy-next-upstream");
        let tries = self.take("proxy-next-upstream-tries");
        let mut retries: Option<u32> = None;
        if let Some(v) = &next {
            let mut on = RetryOn::default();
            let mut notes = Vec::new();
            let mut off = false;
            let mut bad = None;
            for w in v.split_whitespace() {
                match w {
                    "error" => {}
                    "timeout" => on.timeouts = true,
                    "invalid_header" => notes.push("invalid_header: a malformed answer counts as a connection error, which Weir always retries"),
                    "non_idempotent" => notes.push("non_idempotent: Weir never sends a non-idempotent request twice once a backend has seen it"),
                    "off" => off = true,
                    w => match w.strip_prefix("http_").and_then(|c| c.parse::<u16>().ok()) {
                        Some(c) if (400..=599).contains(&c) => on.statuses.push(c),
                        _ => bad = Some(w.to_string()),
                    },
                }
            }
            if !v.split_whitespace().any(|w| w == "error") && !off {
                notes.push("connection failures are always retried");
            }
            match bad {
                Some(w) => self.record(
                    "proxy-next-upstream",
                    v,
                    Status::Invalid,
                    format!("{w:?} is not a proxy_next_upstream condition"),
                ),
                None => {
                    if off {
                        retries = Some(0);
                    } else {
                        on.statuses.sort_unstable();
                        on.statuses.dedup();
                        self.upstream.retry_on = Some(on);
                        retries = Some(2); // ingress-nginx's 3 tries
                    }
                    if notes.is_empty() {
                        self.applied("proxy-next-upstream", v);
                    } else {
                        self.record("proxy-next-upstream", v, Status::Differs, notes.join("; "));
                    }
                }
            }
        }
        if let Some(v) = &tries {
            match v.trim().parse::<u32>() {
                Ok(0) => {
                    retries = retries.or(Some(2)).map(|r| if r == 0 { 0 } else { 32 });
                    let m = "0 (unlimited in nginx) becomes 32 retries, Weir's most";
                    self.record("proxy-next-upstream-tries", v, Status::Differs, m);
                }
                Ok(n) => {
                    if retries != Some(0) {
                        retries = Some((n - 1).min(32));
                    }
                    self.applied("proxy-next-upstream-tries", v);
                }
                Err(_) => self.record(
                    "proxy-next-upstream-tries",
                    v,
                    Status::Invalid,
                    "not a whole number",
                ),
            }
        }
        if let Some(r) = retries {
            self.upstream.retries = Some(r);
        }

        // limit-rps / limit-rpm / limit-connections with ingress-nginx's burst and status.
        let mult = self.take("limit-burst-multiplier");
        let whitelist = self.take("limit-whitelist");
        let burst_mult = match &mult {
            Some(v) => match v.trim().parse::<u32>() {
                Ok(m) if m >= 1 => Some(m),
                _ => {
                    self.record(
                        "limit-burst-multiplier",
                        v,
                        Status::Invalid,
                        "not a whole number from 1",
                    );
                    None
                }
            },
            None => Some(5),
        };
        let exempt = match &whitelist {
            Some(v) => match cidrs(v) {
                Ok(list) => Some(list),
                Err(m) => {
                    self.record("limit-whitelist", v, Status::Invalid, m);
                    None
                }
            },
            None => None,
        };
        // One rate-limiting plugin per route: with both limits, the stricter one is enforced.
        let mut rates: Vec<(&str, String, f64, u32)> = Vec::new();
        for (short, per_second) in [("limit-rps", 1.0f64), ("limit-rpm", 1.0 / 60.0)] {
            let Some(v) = self.take(short) else { continue };
            match (v.trim().parse::<u32>(), burst_mult) {
                (Ok(n), Some(m)) if n >= 1 => {
                    rates.push((short, v, f64::from(n) * per_second, n.saturating_mul(m)))
                }
                (Ok(_), None) => {
                    let m = "limit-burst-multiplier is invalid";
                    self.record(short, &v, Status::Invalid, m)
                }
                _ => self.record(short, &v, Status::Invalid, "not a whole number from 1"),
            }
        }
        let mut any_limit = false;
        let strict = rates.iter().min_by(|a, b| a.2.total_cmp(&b.2)).map(|r| r.0);
        for (short, v, rate, burst) in &rates {
            if Some(*short) != strict {
                let m = format!(
                    "Weir runs one rate limit per route: {}, the stricter, is enforced and this one is not",
                    strict.unwrap_or_default()
                );
                self.record(short, v, Status::Unsupported, m);
                continue;
            }
            let mut config = json!({
                "algorithm": "token-bucket",
                "rate": rate,
                "burst": f64::from(*burst),
                "limit_by": "ip",
                "error_code": 503,
                "hide_client_headers": true,
            });
            if let Some(list) = &exempt {
                config["exempt"] = json!(list);
            }
            self.plugin("rate-limit", "rate-limiting", config);
            self.applied(short, v);
            any_limit = true;
        }
        if let Some(v) = self.take("limit-connections") {
            match v.trim().parse::<u32>() {
                Ok(_) if any_limit => {
                    let m = "Weir runs one rate limit per route, and limit-rps or limit-rpm is enforced; this one is not";
                    self.record("limit-connections", &v, Status::Unsupported, m);
                }
                Ok(n) if n >= 1 => {
                    let mut config = json!({
                        "algorithm": "concurrency",
                        "max_in_flight": n,
                        "limit_by": "ip",
                        "error_code": 503,
                        "hide_client_headers": true,
                    });
                    if let Some(list) = &exempt {
                        config["exempt"] = json!(list);
                    }
                    self.plugin("limit-connections", "rate-limiting", config);
                    self.applied("limit-connections", &v);
                    any_limit = true;
                }
                _ => self.record(
                    "limit-connections",
                    &v,
                    Status::Invalid,
                    "not a whole number from 1",
                ),
            }
        }
        if let (Some(v), Some(_)) = (&mult, burst_mult) {
            let m = if any_limit {
                ""
            } else {
                "no effect without limit-rps or limit-rpm"
            };
            self.record("limit-burst-multiplier", v, Status::Applied, m);
        }
        if let (Some(v), Some(_)) = (&whitelist, &exempt) {
            let m = if any_limit {
                ""
            } else {
                "no effect without a limit"
            };
            self.record("limit-whitelist", v, Status::Applied, m);
        }
    }

    /// Source ranges and CORS.
    fn access(&mut self) {
        let mut allow: Option<Vec<String>> = None;
        for short in ["whitelist-source-range", "allowlist-source-range"] {
            let Some(v) = self.take(short) else { continue };
            match cidrs(&v) {
                Ok(list) => {
                    allow.get_or_insert_with(Vec::new).extend(list);
                    self.applied(short, &v);
                }
                Err(m) => self.record(short, &v, Status::Invalid, m),
            }
        }
        let mut deny = None;
        if let Some(v) = self.take("denylist-source-range") {
            match cidrs(&v) {
                Ok(list) => {
                    deny = Some(list);
                    self.applied("denylist-source-range", &v);
                }
                Err(m) => self.record("denylist-source-range", &v, Status::Invalid, m),
            }
        }
        if allow.is_some() || deny.is_some() {
            let mut config = json!({});
            if let Some(a) = allow {
                config["allow"] = json!(a);
            }
            if let Some(d) = deny {
                config["deny"] = json!(d);
            }
            self.plugin("source-range", "ip-restriction", config);
        }

        let enable = self.take("enable-cors");
        let keys = [
            "cors-allow-origin",
            "cors-allow-methods",
            "cors-allow-headers",
            "cors-expose-headers",
            "cors-allow-credentials",
            "cors-max-age",
        ];
        let cors: BTreeMap<&str, String> = keys
            .iter()
            .filter_map(|k| self.take(k).map(|v| (*k, v)))
            .collect();
        let on = match &enable {
            Some(v) => match parse_bool(v) {
                Some(b) => b,
                None => {
                    self.record("enable-cors", v, Status::Invalid, "not a boolean");
                    false
                }
            },
            None => false,
        };
        if !on {
            if let Some(v) = &enable {
                if parse_bool(v).is_some() {
                    self.applied("enable-cors", v);
                }
            }
            for (k, v) in &cors {
                self.record(
                    k,
                    v,
                    Status::Applied,
                    "no effect without enable-cors: \"true\"",
                );
            }
            return;
        }
        let mut errors: Vec<(&str, String)> = Vec::new();
        let origins: Vec<String> = match cors.get("cors-allow-origin") {
            Some(v) => {
                let mut out = Vec::new();
                for o in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    match cors_origin(o) {
                        Ok(x) => out.push(x),
                        Err(m) => errors.push(("cors-allow-origin", m)),
                    }
                }
                out
            }
            None => vec!["*".into()],
        };
        let methods: Vec<String> = cors
            .get("cors-allow-methods")
            .map(String::as_str)
            .unwrap_or(CORS_METHODS)
            .split(',')
            .map(|m| m.trim().to_ascii_uppercase())
            .filter(|m| !m.is_empty())
            .collect();
        let known = [
            "GET", "HEAD", "PUT", "PATCH", "POST", "DELETE", "OPTIONS", "TRACE", "CONNECT",
        ];
        if let Some(m) = methods.iter().find(|m| !known.contains(&m.as_str())) {
            errors.push(("cors-allow-methods", format!("{m:?} is not an HTTP method")));
        }
        let header_list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        let headers = header_list(
            cors.get("cors-allow-headers")
                .map(String::as_str)
                .unwrap_or(CORS_HEADERS),
        );
        let expose = cors
            .get("cors-expose-headers")
            .map(|v| header_list(v))
            .unwrap_or_default();
        for (k, list) in [
            ("cors-allow-headers", &headers),
            ("cors-expose-headers", &expose),
        ] {
            if let Some(h) = list
                .iter()
                .find(|h| !header_name_ok(h) && h.as_str() != "*")
            {
                errors.push((k, format!("{h:?} is not a header name")));
            }
        }
        let credentials = match cors.get("cors-allow-credentials") {
            Some(v) => parse_bool(v).unwrap_or_else(|| {
                errors.push(("cors-allow-credentials", "not a boolean".into()));
                true
            }),
            None => true,
        };
        let max_age = match cors.get("cors-max-age") {
            Some(v) => v.trim().parse::<u64>().unwrap_or_else(|_| {
                errors.push(("cors-max-age", "not a whole number of seconds".into()));
                1_728_000
            }),
            None => 1_728_000,
        };
        if !errors.is_empty() {
            self.record(
                "enable-cors",
                enable.as_deref().unwrap_or(""),
                Status::Invalid,
                "a cors-* annotation is invalid; CORS is not applied",
            );
            for (k, v) in &cors {
                match errors.iter().find(|(ek, _)| ek == k) {
                    Some((_, m)) => self.record(k, v, Status::Invalid, m.clone()),
                    None => self.record(k, v, Status::Invalid, "CORS is not applied"),
                }
            }
            return;
        }
        let mut config = json!({
            "origins": origins,
            "methods": methods,
            "headers": headers,
            "credentials": credentials,
            "max_age": max_age,
        });
        if !expose.is_empty() {
            config["exposed_headers"] = json!(expose);
        }
        self.plugin("cors", "cors", config);
        self.applied("enable-cors", enable.as_deref().unwrap_or(""));
        for (k, v) in &cors {
            self.applied(k, v);
        }
    }

    /// `auth-type: basic` and `auth-url` (external authentication).
    fn auth(&mut self) {
        let auth_type = self.take("auth-type");
        let secret = self.take("auth-secret");
        let secret_type = self.take("auth-secret-type");
        let realm = self.take("auth-realm");
        match auth_type.as_deref().map(str::trim) {
            Some("basic") => {
                let v = auth_type.clone().unwrap_or_default();
                match self.htpasswd(secret.as_deref(), secret_type.as_deref()) {
                    Ok(lines) => {
                        let mut config = json!({"htpasswd": lines});
                        if let Some(r) = &realm {
                            config["realm"] = json!(r);
                        }
                        self.basic_auth_plugin(config);
                        self.applied("auth-type", &v);
                        if let Some(s) = &secret {
                            let m = "the Secret must be labelled weir.dev/credential: \"true\" (Weir reads only labelled and TLS Secrets in a cluster)";
                            self.record("auth-secret", s, Status::Differs, m);
                        }
                        if let Some(t) = &secret_type {
                            self.applied("auth-secret-type", t);
                        }
                        if let Some(r) = &realm {
                            self.applied("auth-realm", r);
                        }
                    }
                    Err((field, m)) => {
                        self.record(
                            "auth-type",
                            &v,
                            Status::Invalid,
                            format!("{} {m}", self.full(field)),
                        );
                        for (k, val) in [
                            ("auth-secret", &secret),
                            ("auth-secret-type", &secret_type),
                            ("auth-realm", &realm),
                        ] {
                            if let Some(val) = val {
                                let st = if k == field {
                                    Status::Invalid
                                } else {
                                    Status::Applied
                                };
                                let note = if k == field { m.clone() } else { String::new() };
                                self.record(k, val, st, note);
                            }
                        }
                    }
                }
            }
            Some(other) => {
                let v = auth_type.clone().unwrap_or_default();
                let m = if other == "digest" {
                    "digest authentication is not supported"
                } else {
                    "not basic or digest"
                };
                self.record("auth-type", &v, Status::Unsupported, m);
                for (k, val) in [
                    ("auth-secret", &secret),
                    ("auth-secret-type", &secret_type),
                    ("auth-realm", &realm),
                ] {
                    if let Some(val) = val {
                        self.record(
                            k,
                            val,
                            Status::Unsupported,
                            "its auth-type is not supported",
                        );
                    }
                }
            }
            None => {
                for (k, val) in [
                    ("auth-secret", &secret),
                    ("auth-secret-type", &secret_type),
                    ("auth-realm", &realm),
                ] {
                    if let Some(val) = val {
                        self.record(k, val, Status::Applied, "no effect without auth-type");
                    }
                }
            }
        }

        let url = self.take("auth-url");
        let method = self.take("auth-method");
        let response_headers = self.take("auth-response-headers");
        let signin = self.take("auth-signin");
        let signin_param = self.take("auth-signin-redirect-param");
        let Some(u) = url else {
            for (k, val) in [
                ("auth-method", &method),
                ("auth-response-headers", &response_headers),
                ("auth-signin", &signin),
                ("auth-signin-redirect-param", &signin_param),
            ] {
                if let Some(val) = val {
                    self.record(k, val, Status::Applied, "no effect without auth-url");
                }
            }
            return;
        };
        let t = u.trim();
        let mut errors: Vec<(&str, String)> = Vec::new();
        if !(t.starts_with("http://") || t.starts_with("https://"))
            || t.contains(char::is_whitespace)
        {
            errors.push(("auth-url", "not an http(s) URL".into()));
        } else if t.contains('$') {
            errors.push(("auth-url", "nginx variables ($host, …) are not expanded; name the authentication service's URL".into()));
        }
        let mut config = json!({"url": t});
        if let Some(m) = &method {
            let m = m.trim().to_ascii_uppercase();
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                errors.push(("auth-method", "not an HTTP method".into()));
            }
            config["method"] = json!(m);
        }
        if let Some(h) = &response_headers {
            let list: Vec<String> = h
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(bad) = list.iter().find(|x| !header_name_ok(x)) {
                errors.push((
                    "auth-response-headers",
                    format!("{bad:?} is not a header name"),
                ));
            }
            config["response_headers"] = json!(list);
        }
        if let Some(s) = &signin {
            let s = s.trim();
            if !(s.starts_with("http://") || s.starts_with("https://")) || s.contains('$') {
                errors.push((
                    "auth-signin",
                    "not an http(s) URL (nginx variables are not expanded)".into(),
                ));
            }
            config["signin"] = json!(s);
        }
        if let Some(p) = &signin_param {
            config["signin_redirect_param"] = json!(p.trim());
        }
        let all = [
            ("auth-url", Some(u.clone())),
            ("auth-method", method),
            ("auth-response-headers", response_headers),
            ("auth-signin", signin),
            ("auth-signin-redirect-param", signin_param),
        ];
        if errors.is_empty() {
            self.plugin("forward-auth", "forward-auth", config);
            for (k, v) in all {
                if let Some(v) = v {
                    self.applied(k, &v);
                }
            }
        } else {
            for (k, v) in all {
                if let Some(v) = v {
                    match errors.iter().find(|(ek, _)| *ek == k) {
                        Some((_, m)) => self.record(k, &v, Status::Invalid, m.clone()),
                        None => self.record(k, &v, Status::Invalid, "auth-url cannot be applied"),
                    }
                }
            }
        }
    }

    /// The htpasswd lines of an `auth-secret` (`auth-file`: key `auth`; `auth-map`: user →
    /// hash), or (annotation, why).
    fn htpasswd(
        &self,
        secret: Option<&str>,
        kind: Option<&str>,
    ) -> Result<Vec<String>, (&'static str, String)> {
        let Some(s) = secret else {
            return Err(("auth-secret", "is missing".into()));
        };
        let (ns, name) = match s.trim().split_once('/') {
            Some((ns, n)) => (ns.to_string(), n.to_string()),
            None => (self.key.namespace.clone(), s.trim().to_string()),
        };
        if ns != self.key.namespace {
            return Err((
                "auth-secret",
                "names a Secret in another namespace, which Weir does not read for an Ingress"
                    .into(),
            ));
        }
        let Some(secret) = self
            .store
            .secrets
            .get(&Key::new(ns.as_str(), name.as_str()))
        else {
            return Err(("auth-secret", format!("Secret {ns}/{name} not found (it must carry the label weir.dev/credential: \"true\")")));
        };
        let mut entries: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in secret.data.iter().flatten() {
            if let Ok(text) = String::from_utf8(v.0.clone()) {
                entries.insert(k.clone(), text);
            }
        }
        for (k, v) in secret.string_data.iter().flatten() {
            entries.insert(k.clone(), v.clone());
        }
        let lines: Vec<String> = match kind.map(str::trim).unwrap_or("auth-file") {
            "auth-file" => {
                let text = entries.get("auth").ok_or((
                    "auth-secret",
                    format!("Secret {ns}/{name} has no key \"auth\" (auth-file format)"),
                ))?;
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string)
                    .collect()
            }
            "auth-map" => entries
                .iter()
                .map(|(user, hash)| format!("{user}:{}", hash.trim()))
                .collect(),
            other => {
                return Err((
                    "auth-secret-type",
                    format!("{other:?} is not auth-file or auth-map"),
                ))
            }
        };
        if lines.is_empty() {
            return Err(("auth-secret", format!("Secret {ns}/{name} holds no user")));
        }
        Ok(lines)
    }

    /// basic-auth with the credentials in a generated configuration Secret, so that no
    /// password hash appears in a Plugin.
    fn basic_auth_plugin(&mut self, config: serde_json::Value) {
        let name = format!("{}-nginx-basic-auth", self.key.name);
        let mut meta = self.meta(&name);
        meta.labels.get_or_insert_with(BTreeMap::new).insert(
            weir_crds::CREDENTIAL_LABEL.into(),
            weir_crds::CONFIG_SECRET_LABEL_VALUE.into(),
        );
        self.secrets.push(Secret {
            metadata: meta,
            string_data: Some(BTreeMap::from([(
                "config".to_string(),
                serde_json::to_string(&config).unwrap_or_default(),
            )])),
            type_: Some("Opaque".into()),
            ..Secret::default()
        });
        let mut p = self.generated_plugin(&name, "basic-auth", None, None);
        p.spec.config_from = Some(weir_crds::ConfigFrom {
            secret_key_ref: weir_crds::SecretKeyRef {
                name: name.clone(),
                key: "config".into(),
            },
        });
        self.plugins.push(p);
        self.plugin_names.push(name);
    }

    /// `load-balance`, `upstream-hash-by`, `affinity` and the session cookie.
    fn balancing(&mut self) {
        let affinity = self.take("affinity");
        let cookie_keys = [
            "session-cookie-name",
            "session-cookie-path",
            "session-cookie-max-age",
            "session-cookie-expires",
            "session-cookie-samesite",
            "session-cookie-secure",
        ];
        let cookie: BTreeMap<&str, String> = cookie_keys
            .iter()
            .filter_map(|k| self.take(k).map(|v| (*k, v)))
            .collect();
        let hash_by = self.take("upstream-hash-by");
        let lb = self.take("load-balance");
        let mut decided = false;
        match affinity.as_deref().map(str::trim) {
            Some("cookie") => {
                let v = affinity.clone().unwrap_or_default();
                let mut h = HashOn {
                    by: HashBy::Cookie,
                    name: Some(
                        cookie
                            .get("session-cookie-name")
                            .map(|s| s.trim().to_string())
                            .unwrap_or_else(|| "INGRESSCOOKIE".into()),
                    ),
                    fallback: None,
                    cookie_path: None,
                    cookie_ttl: None,
                    cookie_same_site: None,
                    cookie_secure: false,
                };
                let mut bad: Vec<(&str, &str)> = Vec::new();
                if let Some(p) = cookie.get("session-cookie-path") {
                    if p.trim().starts_with('/') && !p.contains([';', ' ']) {
                        h.cookie_path = Some(p.trim().into());
                    } else {
                        bad.push(("session-cookie-path", "not a path"));
                    }
                }
                let secs = |k: &str| cookie.get(k).map(|v| v.trim().parse::<u64>());
                match (
                    secs("session-cookie-max-age"),
                    secs("session-cookie-expires"),
                ) {
                    (Some(Ok(n)), _) | (None, Some(Ok(n))) => h.cookie_ttl = Some(n),
                    (Some(Err(_)), _) => {
                        bad.push(("session-cookie-max-age", "not a whole number of seconds"))
                    }
                    (None, Some(Err(_))) => {
                        bad.push(("session-cookie-expires", "not a whole number of seconds"))
                    }
                    (None, None) => {}
                }
                if let Some(s) = cookie.get("session-cookie-samesite") {
                    match s.trim() {
                        "Strict" | "strict" => h.cookie_same_site = Some(SameSite::Strict),
                        "Lax" | "lax" => h.cookie_same_site = Some(SameSite::Lax),
                        "None" | "none" => h.cookie_same_site = Some(SameSite::None),
                        _ => bad.push(("session-cookie-samesite", "not Strict, Lax or None")),
                    }
                }
                if let Some(s) = cookie.get("session-cookie-secure") {
                    match parse_bool(s) {
                        Some(b) => h.cookie_secure = b,
                        None => bad.push(("session-cookie-secure", "not a boolean")),
                    }
                }
                if h.cookie_same_site == Some(SameSite::None) {
                    h.cookie_secure = true;
                }
                if let Some(n) = &h.name {
                    if n.is_empty()
                        || !n
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    {
                        bad.push(("session-cookie-name", "not a cookie name"));
                    }
                }
                for (k, val) in &cookie {
                    match bad.iter().find(|(bk, _)| bk == k) {
                        Some((_, m)) => self.record(k, val, Status::Invalid, *m),
                        None if *k == "session-cookie-max-age"
                            && cookie.contains_key("session-cookie-expires") =>
                        {
                            self.applied(k, val)
                        }
                        None if *k == "session-cookie-expires" => {
                            let m = if cookie.contains_key("session-cookie-max-age") {
                                "Max-Age is set from session-cookie-max-age; no Expires attribute"
                            } else {
                                "sent as Max-Age rather than Expires"
                            };
                            self.record(k, val, Status::Differs, m)
                        }
                        None => self.applied(k, val),
                    }
                }
                if bad.is_empty() {
                    self.upstream.algorithm = Some(Algorithm::ConsistentHashing);
                    self.upstream.hash_on = Some(h);
                    let m = "the cookie holds a random key hashed onto the pods (consistent hashing) rather than naming a pod";
                    self.record("affinity", &v, Status::Differs, m);
                    decided = true;
                } else {
                    self.record(
                        "affinity",
                        &v,
                        Status::Invalid,
                        "a session-cookie-* annotation is invalid",
                    );
                }
            }
            Some(_) => {
                let v = affinity.clone().unwrap_or_default();
                self.record(
                    "affinity",
                    &v,
                    Status::Invalid,
                    "only \"cookie\" affinity exists",
                );
                for (k, val) in &cookie {
                    self.record(k, val, Status::Invalid, "affinity is invalid");
                }
            }
            None => {
                for (k, val) in &cookie {
                    self.record(
                        k,
                        val,
                        Status::Applied,
                        "no effect without affinity: cookie",
                    );
                }
            }
        }
        if let Some(v) = &hash_by {
            if decided {
                self.record(
                    "upstream-hash-by",
                    v,
                    Status::Applied,
                    "affinity wins, as in ingress-nginx",
                );
            } else {
                let t = v.trim();
                let by = |by, name: Option<&str>| HashOn {
                    by,
                    name: name.map(str::to_string),
                    fallback: None,
                    cookie_path: None,
                    cookie_ttl: None,
                    cookie_same_site: None,
                    cookie_secure: false,
                };
                let (h, note) = match t {
                    "$remote_addr" | "$binary_remote_addr" => (Some(by(HashBy::Ip, None)), ""),
                    "$uri" | "$document_uri" => (Some(by(HashBy::Path, None)), ""),
                    "$request_uri" => (
                        Some(by(HashBy::Path, None)),
                        "hashes the path without the query string",
                    ),
                    _ => {
                        if let Some(h) = t.strip_prefix("$http_") {
                            (Some(by(HashBy::Header, Some(&h.replace('_', "-")))), "")
                        } else if let Some(c) = t.strip_prefix("$cookie_") {
                            (
                                Some(by(HashBy::Cookie, Some(c))),
                                "Weir sets the cookie (a random key) when a request has none",
                            )
                        } else if let Some(q) = t.strip_prefix("$arg_") {
                            (Some(by(HashBy::QueryArg, Some(q))), "")
                        } else {
                            (None, "")
                        }
                    }
                };
                match h {
                    Some(h)
                        if h.name.as_deref().is_none_or(|n| {
                            !n.is_empty()
                                && n.bytes()
                                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                        }) =>
                    {
                        self.upstream.algorithm = Some(Algorithm::ConsistentHashing);
                        self.upstream.hash_on = Some(h);
                        decided = true;
                        if note.is_empty() {
                            self.applied("upstream-hash-by", v);
                        } else {
                            self.record("upstream-hash-by", v, Status::Differs, note);
                        }
                    }
                    _ => {
                        let m = "Weir hashes one of $remote_addr, $uri, $request_uri, $http_<name>, $cookie_<name> or $arg_<name>, not combinations; round-robin is used";
                        self.record("upstream-hash-by", v, Status::Unsupported, m);
                    }
                }
            }
        }
        if let Some(v) = &lb {
            let alg = match v.trim() {
                "round_robin" => Some(Algorithm::RoundRobin),
                "ewma" => Some(Algorithm::PeakEwma),
                _ => None,
            };
            match alg {
                Some(_) if decided => self.record(
                    "load-balance",
                    v,
                    Status::Applied,
                    "affinity or upstream-hash-by wins, as in ingress-nginx",
                ),
                Some(alg) => {
                    self.upstream.algorithm = Some(alg);
                    self.applied("load-balance", v);
                }
                None => {
                    let m = "Weir balances with round_robin or ewma (and least-connections natively); round-robin is used";
                    self.record("load-balance", v, Status::Unsupported, m);
                }
            }
        }
    }

    /// `default-backend`, `custom-http-errors`, `service-upstream`, `enable-access-log`.
    fn backends(&mut self) {
        if let Some(v) = self.take("default-backend") {
            let t = v.trim();
            let ok = !t.is_empty()
                && t.len() <= 63
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if ok {
                self.weir.insert(a::DEFAULT_BACKEND.into(), t.into());
                let m = "the Service's first port is used";
                self.record("default-backend", &v, Status::Differs, m);
            } else {
                self.record("default-backend", &v, Status::Invalid, "not a Service name");
            }
        }
        if let Some(v) = self.take("custom-http-errors") {
            let codes: Result<Vec<u16>, _> =
                v.split(',').map(|c| c.trim().parse::<u16>()).collect();
            match codes {
                Ok(c) if !c.is_empty() && c.iter().all(|c| (400..=599).contains(c)) => {
                    let list: Vec<String> = c.iter().map(u16::to_string).collect();
                    self.weir
                        .insert(a::CUSTOM_HTTP_ERRORS.into(), list.join(","));
                    self.applied("custom-http-errors", &v);
                }
                _ => self.record(
                    "custom-http-errors",
                    &v,
                    Status::Invalid,
                    "not a list of statuses from 400 to 599",
                ),
            }
        }
        if let Some(v) = self.take("service-upstream") {
            match parse_bool(&v) {
                Some(b) => {
                    if b {
                        self.weir.insert(a::SERVICE_UPSTREAM.into(), "true".into());
                    }
                    self.applied("service-upstream", &v);
                }
                None => self.record("service-upstream", &v, Status::Invalid, "not a boolean"),
            }
        }
        if let Some(v) = self.take("enable-access-log") {
            match parse_bool(&v) {
                Some(b) => {
                    if !b {
                        self.weir.insert(a::ACCESS_LOG.into(), "false".into());
                    }
                    self.applied("enable-access-log", &v);
                }
                None => self.record("enable-access-log", &v, Status::Invalid, "not a boolean"),
            }
        }
    }

    fn finish(mut self, all: &BTreeMap<String, String>) -> (Converted, Report) {
        self.outcomes
            .sort_by(|a, b| a.annotation.cmp(&b.annotation));
        let mode = all
            .get(a::UNSUPPORTED_ANNOTATIONS)
            .map(|v| v.trim().to_string());
        let not_applied: Vec<String> = self
            .outcomes
            .iter()
            .filter(|o| !o.status.carries_over())
            .map(|o| o.annotation.clone())
            .collect();
        let disabled = match mode.as_deref() {
            Some("serve") => None,
            Some("disable") if !not_applied.is_empty() => Some(format!(
                "weir.dev/unsupported-annotations is \"disable\" and {} not applied",
                not_applied.join(", ")
            )),
            _ if !self.guard_failed.is_empty() => Some(format!(
                "{} guards access and is not applied (fail closed; weir.dev/unsupported-annotations: serve serves the Ingress without it)",
                self.guard_failed.join(", ")
            )),
            _ => None,
        };
        let mut plugin_names = self.plugin_names.clone();
        if let Some(why) = &disabled {
            let name = format!("{}-nginx-disabled", self.key.name);
            let config = json!({
                "status_code": 503,
                "message": format!("This route is disabled: {why}."),
            });
            let p = self.generated_plugin(
                &name,
                "request-termination",
                Some(config),
                Some(1_000_000_000),
            );
            self.plugins.push(p);
            plugin_names.insert(0, name.clone());
            for extra in &mut self.extra {
                let ann = extra.metadata.annotations.get_or_insert_with(BTreeMap::new);
                let existing = ann.get(a::PLUGINS).cloned().unwrap_or_default();
                ann.insert(a::PLUGINS.into(), format!("{name},{existing}"));
            }
        }

        // The Ingress itself: the prefix's annotations replaced by Weir's.
        let mut annotations: BTreeMap<String, String> = all
            .iter()
            .filter(|(k, _)| !k.starts_with(&self.prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut names: Vec<String> = annotations
            .get(a::PLUGINS)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        names.extend(plugin_names);
        if !names.is_empty() {
            annotations.insert(a::PLUGINS.into(), names.join(","));
        }
        let mut upstreams = Vec::new();
        if self.upstream != UpstreamSpec::default() {
            let name = format!("{}-nginx", self.key.name);
            let mut u = Upstream::new(&name, self.upstream.clone());
            u.metadata = self.meta(&name);
            upstreams.push(u);
            annotations.insert(a::UPSTREAM.into(), name);
        }
        for (k, v) in std::mem::take(&mut self.weir) {
            annotations.insert(k, v);
        }
        let mut ingress = self.ing.clone();
        ingress.metadata.annotations = Some(annotations);
        ingress.spec = Some(self.spec.clone());
        ingress.status = None;
        let mut ingresses = vec![ingress];
        ingresses.extend(std::mem::take(&mut self.extra));
        let report = Report {
            ingress: self.key.clone(),
            outcomes: self.outcomes,
            disabled,
        };
        (
            Converted {
                ingresses,
                plugins: self.plugins,
                upstreams,
                secrets: self.secrets,
            },
            report,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_seconds() {
        assert_eq!(parse_size("8m"), Some(8 << 20));
        assert_eq!(parse_size("512K"), Some(512 << 10));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1.5m"), None);
        assert_eq!(parse_size("m"), None);
        assert_eq!(parse_seconds("30"), Some(30_000));
        assert_eq!(parse_seconds("0"), None);
    }

    #[test]
    fn cors_origins() {
        assert_eq!(cors_origin("*").unwrap(), "*");
        assert_eq!(
            cors_origin("https://a.example.com").unwrap(),
            "https://a.example.com"
        );
        assert_eq!(
            cors_origin("https://*.example.com").unwrap(),
            "https://[^./]+\\.example\\.com"
        );
        assert!(cors_origin("example.com").is_err());
    }

    #[test]
    fn booleans_as_go_reads_them() {
        assert_eq!(parse_bool("True"), Some(true));
        assert_eq!(parse_bool("0"), Some(false));
        assert_eq!(parse_bool("yes"), None);
    }
}
