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
use crate::translate::annotations::parse_size;

mod access;
mod auth;
mod backends;
mod balancing;
mod limits;
mod mirror;
mod paths;
mod redirects;
mod responses;
mod tls;

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

    /// The header → value data of the ConfigMap an annotation names (`name` or
    /// `namespace/name`, the Ingress's own namespace only), checked as headers to set: every
    /// name a header name, every value a non-empty header value without nginx variables.
    fn header_config_map(&self, value: &str) -> Result<BTreeMap<String, String>, String> {
        let (ns, name) = match value.trim().split_once('/') {
            Some((ns, n)) => (ns.to_string(), n.to_string()),
            None => (self.key.namespace.clone(), value.trim().to_string()),
        };
        if ns != self.key.namespace {
            return Err("names a ConfigMap in another namespace; Weir reads an Ingress's ConfigMaps from its own namespace (copy it there)".into());
        }
        let cm = self
            .store
            .config_maps
            .get(&Key::new(ns.as_str(), name.as_str()))
            .ok_or_else(|| format!("ConfigMap {ns}/{name} not found"))?;
        let data = cm.data.clone().unwrap_or_default();
        if data.is_empty() {
            return Err(format!("ConfigMap {ns}/{name} has no data"));
        }
        for (k, v) in &data {
            if !header_name_ok(k) {
                return Err(format!("ConfigMap {ns}/{name}: {k:?} is not a header name"));
            }
            if v.contains('$') {
                return Err(format!(
                    "ConfigMap {ns}/{name}: {k}: nginx variables ($...) are not expanded"
                ));
            }
            if v.trim().is_empty() || http::HeaderValue::from_str(v.trim()).is_err() {
                return Err(format!(
                    "ConfigMap {ns}/{name}: {k}: {v:?} is not a non-empty header value"
                ));
            }
        }
        Ok(data
            .into_iter()
            .map(|(k, v)| (k, v.trim().to_string()))
            .collect())
    }

    /// The error the plugin `kind` would report for `config` (the proxy's own check), so a
    /// generated plugin that would not load is reported on the annotation it came from.
    fn plugin_config_error(kind: &str, config: &serde_json::Value) -> Option<String> {
        static REGISTRY: std::sync::OnceLock<weir_proxy::Registry> = std::sync::OnceLock::new();
        let registry = REGISTRY.get_or_init(weir_proxy::Registry::builtin);
        let factory = registry.get(kind).expect("a built-in plugin kind");
        factory.validate(config).err()
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
        self.ssl_passthrough();
        self.client_certificates();
        self.mirror();
        self.limits();
        self.access();
        self.auth();
        self.backends();
        self.cookies();
        self.custom_headers();
        self.redirect_rewrites();
        let names: Vec<String> = self.rest.keys().cloned().collect();
        for n in names {
            let v = self.take(&n).unwrap_or_default();
            let (status, note) = classify(&n);
            self.record(&n, &v, status, note);
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
        if disabled.is_some() {
            let name = format!("{}-nginx-disabled", self.key.name);
            let config = json!({
                "status_code": 503,
                // Which annotations is for the operator (Events, log, weir migrate), not for
                // every client.
                "message": "This route is disabled: an ingress-nginx annotation of its Ingress is not applied. The reasons are in the Ingress's events (kubectl describe ingress), or in Weir's log in standalone mode.",
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
