//! Ingresses (networking.k8s.io/v1) → routes, per the Kubernetes spec.
//!
//! Class: `spec.ingressClassName` naming an IngressClass of this controller (or, with no such
//! object, equal to `--ingress-class`), the legacy `kubernetes.io/ingress.class` annotation,
//! or no class at all when this controller's IngressClass is the cluster default.
//!
//! Paths: `Exact` and `Prefix` as specified; `ImplementationSpecific` is `Prefix`, or a regex
//! when the path starts with `/~` (`/~/api/v[0-9]+` is the regex `/api/v[0-9]+`).
//!
//! Conflicts (same host, path type and path in two Ingresses): the oldest Ingress wins, then
//! namespace/name order; the other gets a `Conflict` problem for that path.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, ServiceBackendPort};
use weir_crds::annotations as a;
use weir_proxy::config::{
    PathKind, PathRule, PluginConfig, ResponseRate, Route, RouteMirror, Satisfy,
};
use weir_proxy::validate::check_host;

use super::annotations::{self, IngressAnnotations};
use super::backend::Overrides;
use super::{obj, Translator};
use crate::problem::Reason;
use crate::store::{Key, Kind};

/// A path as Weir routes it, from an Ingress path and its type.
fn path_rule(path: &str, path_type: &str) -> Result<PathRule, String> {
    let (kind, path) = match path_type {
        "Exact" => (PathKind::Exact, path.to_string()),
        "Prefix" => (PathKind::Prefix, path.to_string()),
        "ImplementationSpecific" => match path.strip_prefix("/~") {
            Some(re) => (PathKind::Regex, re.to_string()),
            None => (PathKind::Prefix, path.to_string()),
        },
        other => {
            return Err(format!(
                "unknown pathType {other:?} (Exact, Prefix or ImplementationSpecific)"
            ))
        }
    };
    let rule = PathRule { path, kind };
    // The proxy's own check, so the two never disagree.
    weir_proxy::validate::check_path_rule(&rule).map_err(|m| match rule.kind {
        PathKind::Regex => m.replacen("invalid regex", "invalid regex after \"/~\"", 1),
        _ => m,
    })?;
    Ok(rule)
}

/// A path as a canary names it: without the regex marker (`/~`, and the `(?i)` that
/// ingress-nginx's regex paths get), so that a canary joins its main Ingress whichever of the
/// two has regex paths.
fn as_written(path: &str) -> String {
    let p = path.strip_prefix("/~").unwrap_or(path);
    p.strip_prefix("(?i)").unwrap_or(p).to_string()
}

/// A `request-termination` entry that makes a route answer 503 with the reason.
pub(super) fn disabled_entry(route: &str, why: &str) -> PluginConfig {
    PluginConfig {
        id: format!("{route}/disabled"),
        name: "request-termination".into(),
        config: serde_json::json!({
            "status_code": 503,
            "message": format!(
                "This route is disabled: {why}. The reasons are in the Ingress's events and conditions (kubectl describe ingress), or in Weir's log in standalone mode."
            ),
        }),
        route: Some(route.to_string()),
        service: None,
        consumer: None,
        namespace: None,
        enabled: true,
        priority: Some(i32::MAX),
    }
}

/// What every route of one Ingress shares.
struct RouteContext<'a> {
    key: &'a Key,
    ann: &'a IngressAnnotations,
    plugins: &'a [super::plugins::Resolved],
    /// Why the Ingress's routes answer 503, if they do.
    disabled: Option<&'static str>,
    /// What the Ingress changes about its backends.
    overrides: Overrides,
    /// The fallback service (`weir.dev/default-backend`) and the statuses it answers.
    fallback: Option<(String, Vec<u16>)>,
    /// Where copies of the requests go (`weir.dev/mirror-target`).
    mirror: Option<RouteMirror>,
}

fn kind_name(k: PathKind) -> &'static str {
    match k {
        PathKind::Exact => "Exact",
        PathKind::Prefix => "Prefix",
        PathKind::Regex => "Regex",
    }
}

impl Translator<'_> {
    /// Whether this controller serves the Ingress: its class is `--ingress-class`, and the
    /// IngressClass of that name (if there is one) names this controller.
    pub(super) fn owns(&self, ing: &Ingress) -> bool {
        let ours = self.store.ingress_classes.get(&self.opts.ingress_class);
        let ours_ok = ours.is_none_or(|ic| {
            let controller = ic.spec.as_ref().and_then(|s| s.controller.as_deref());
            controller == Some(weir_crds::CONTROLLER_NAME)
                || (self.opts.accept_ingress_nginx_class
                    && controller == Some(crate::nginx::CONTROLLER))
        });
        let annotation = ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|m| m.get(a::INGRESS_CLASS));
        let class = annotation.map(String::as_str).or_else(|| {
            ing.spec
                .as_ref()
                .and_then(|s| s.ingress_class_name.as_deref())
        });
        match class {
            Some(class) => class == self.opts.ingress_class && ours_ok,
            // No class: adopted when our IngressClass is the cluster default.
            None => ours.is_some_and(|ic| {
                ours_ok
                    && ic
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|m| m.get(a::DEFAULT_CLASS))
                        .map(String::as_str)
                        == Some("true")
            }),
        }
    }

    pub(super) fn ingresses(&mut self) {
        let store = self.store;
        let mut owned: Vec<(&Key, &Ingress)> = store
            .ingresses
            .iter()
            .filter(|(k, i)| self.in_scope(&k.namespace) && self.owns(i))
            .collect();
        // Oldest first, then namespace/name: who wins a conflict.
        owned.sort_by(|(ka, a), (kb, b)| {
            // An Ingress without a creation time (hand-written manifests) counts as newest.
            let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (ta.is_none(), ta).cmp(&(tb.is_none(), tb)).then(ka.cmp(kb))
        });
        // Canaries after the Ingresses whose paths they share.
        let is_canary = |i: &Ingress| {
            let empty = BTreeMap::new();
            let (parsed, _) =
                annotations::ingress(i.metadata.annotations.as_ref().unwrap_or(&empty));
            parsed.is_ok_and(|a| a.canary)
        };
        let (canaries, mains): (Vec<_>, Vec<_>) =
            owned.into_iter().partition(|(_, i)| is_canary(i));
        for (key, ing) in mains {
            self.owned.push(key.clone());
            self.ingress(key, ing);
        }
        for (key, ing) in canaries {
            self.owned.push(key.clone());
            self.canary(key, ing);
        }
        self.bind_protected_routes();
    }

    /// A canary Ingress: its backends join the routes other Ingresses serve for the same host
    /// and path.
    fn canary(&mut self, key: &Key, ing: &Ingress) {
        let me = obj(Kind::Ingress, key);
        let empty = BTreeMap::new();
        let parsed = annotations::ingress(ing.metadata.annotations.as_ref().unwrap_or(&empty));
        let consequence = "; the canary is not used";
        let Some(ann) = self.read_annotations(&me, "an Ingress", parsed, consequence) else {
            return;
        };
        let field = |k: &str| format!("metadata.annotations[{k:?}]");
        if !ann.plugins.is_empty() {
            // A canary shares its main route's plugins; a canary its conversion disabled
            // (ingress-nginx annotations that guard access and are not applied) takes nothing.
            if ann.plugins.iter().any(|p| p.ends_with("-nginx-disabled")) {
                let m = "the canary's own annotations disable it; it takes no requests";
                self.problem(me, Reason::PluginNotAccepted, field(a::PLUGINS), m);
                return;
            }
            let m = "a canary runs the plugins of the route it joins; its own are not used";
            self.problem(me.clone(), Reason::Unsupported, field(a::PLUGINS), m);
        }
        let mut ann = ann;
        let r = &mut ann.canary_rules;
        if r.header.is_none() && (r.header_value.is_some() || r.header_pattern.is_some()) {
            let k = if r.header_value.is_some() {
                a::CANARY_BY_HEADER_VALUE
            } else {
                a::CANARY_BY_HEADER_PATTERN
            };
            let m = "needs weir.dev/canary-by-header naming the header; not used";
            self.problem(me.clone(), Reason::InvalidAnnotation, field(k), m);
            r.header_value = None;
            r.header_pattern = None;
        }
        let overrides = Overrides {
            ingress: key.clone(),
            upstream: ann.upstream.clone(),
            protocol: ann.protocol,
            service_upstream: ann.service_upstream,
        };
        let Some(spec) = ing.spec.as_ref() else {
            return;
        };
        for (ri, rule) in spec.rules.iter().flatten().enumerate() {
            let host = rule.host.clone().unwrap_or_default().to_ascii_lowercase();
            let Some(http) = &rule.http else { continue };
            for (pi, p) in http.paths.iter().enumerate() {
                let field = format!("spec.rules[{ri}].http.paths[{pi}]");
                let path = p.path.clone().unwrap_or_else(|| "/".into());
                let Some(route_id) = self
                    .served_paths
                    .get(&(host.clone(), as_written(&path)))
                    .cloned()
                else {
                    let m = format!(
                        "no Ingress serves {path} on host {:?}, so this canary path has nothing to join; not used",
                        if host.is_empty() { "*" } else { &host }
                    );
                    self.problem(me.clone(), Reason::Conflict, format!("{field}.path"), m);
                    continue;
                };
                let Some(s) = &p.backend.service else {
                    let m = "a canary backend needs a service; not used";
                    self.problem(
                        me.clone(),
                        Reason::UnsupportedBackend,
                        format!("{field}.backend"),
                        m,
                    );
                    continue;
                };
                let port = s.port.clone().unwrap_or_default();
                let service =
                    match self.backend_for(&key.namespace, &s.name, &port, Some(&overrides)) {
                        Ok(id) => id,
                        Err((reason, m)) => {
                            let m = format!("{m}; the canary is not used");
                            self.problem(me.clone(), reason, format!("{field}.backend.service"), m);
                            continue;
                        }
                    };
                let Some(route) = self.config.routes.iter_mut().find(|r| r.id == route_id) else {
                    continue;
                };
                if route.service.is_none() {
                    continue; // the main path answers 503 anyway
                }
                if route.canary.is_some() {
                    let m = format!(
                        "{path} on host {:?} already has a canary; this one is not used",
                        if host.is_empty() { "*" } else { &host }
                    );
                    self.problem(me.clone(), Reason::Conflict, format!("{field}.path"), m);
                    continue;
                }
                let r = &ann.canary_rules;
                route.canary = Some(Box::new(weir_proxy::config::Canary {
                    service,
                    weight: r.weight.unwrap_or(0),
                    weight_total: r.weight_total.unwrap_or(100),
                    header: r.header.clone(),
                    header_value: r.header_value.clone(),
                    header_pattern: r.header_pattern.clone(),
                    cookie: r.cookie.clone(),
                }));
                if r.weight.unwrap_or(0) > r.weight_total.unwrap_or(100) {
                    if let Some(c) = route.canary.as_mut() {
                        c.weight = c.weight_total;
                    }
                }
            }
        }
    }

    /// The fallback of an Ingress's routes: `weir.dev/default-backend` (else, for
    /// `weir.dev/custom-http-errors`, the controller's `--default-backend`).
    fn fallback_of(&mut self, key: &Key, ann: &IngressAnnotations) -> Option<(String, Vec<u16>)> {
        let me = obj(Kind::Ingress, key);
        let field = |k: &str| format!("metadata.annotations[{k:?}]");
        let service = match &ann.default_backend {
            Some((name, port)) => {
                let port = match port {
                    Some(p) => match p.parse::<i32>() {
                        Ok(n) => ServiceBackendPort {
                            number: Some(n),
                            name: None,
                        },
                        Err(_) => ServiceBackendPort {
                            number: None,
                            name: Some(p.clone()),
                        },
                    },
                    None => {
                        let svc = self
                            .store
                            .services
                            .get(&Key::new(key.namespace.as_str(), name.as_str()));
                        let first = svc
                            .and_then(|s| s.spec.as_ref())
                            .and_then(|s| s.ports.as_ref())
                            .and_then(|p| p.first())
                            .map(|p| p.port);
                        ServiceBackendPort {
                            number: first,
                            name: None,
                        }
                    }
                };
                match self.backend(&key.namespace, name, &port) {
                    Ok(id) => id,
                    Err((reason, m)) => {
                        let m = format!("{m}; no default backend for this Ingress");
                        self.problem(me, reason, field(a::DEFAULT_BACKEND), m);
                        return None;
                    }
                }
            }
            None if ann.custom_http_errors.is_empty() => return None,
            None => match self.opts.default_backend.clone() {
                Some((k, port)) => match self.backend(&k.namespace, &k.name, &port) {
                    Ok(id) => id,
                    Err(_) => return None, // reported by the controller's default backend
                },
                None => {
                    let m = "needs weir.dev/default-backend or the controller's --default-backend; not applied";
                    self.problem(
                        me,
                        Reason::InvalidAnnotation,
                        field(a::CUSTOM_HTTP_ERRORS),
                        m,
                    );
                    return None;
                }
            },
        };
        Some((service, ann.custom_http_errors.clone()))
    }

    fn ingress(&mut self, key: &Key, ing: &Ingress) {
        let me = obj(Kind::Ingress, key);
        let empty = BTreeMap::new();
        let parsed = annotations::ingress(ing.metadata.annotations.as_ref().unwrap_or(&empty));
        // A broken Ingress keeps its paths, answering 503: removing them would let requests
        // fall through to a shorter prefix, maybe the same backend without its plugins.
        let mut disabled = None;
        let consequence = "; the Ingress's paths answer 503";
        let ann = match self.read_annotations(&me, "an Ingress", parsed, consequence) {
            Some(a) => a,
            None => {
                disabled = Some("its Ingress has invalid annotations");
                // The plugins it names are still checked, so that every problem shows at once.
                IngressAnnotations {
                    plugins: annotations::plugin_names_of(ing.metadata.annotations.as_ref()),
                    ..IngressAnnotations::default()
                }
            }
        };
        let plugins = match self.resolve_names(&key.namespace, &ann.plugins) {
            Ok(p) => p,
            Err((reason, m)) => {
                self.problem(
                    me.clone(),
                    reason,
                    format!("metadata.annotations[{:?}]", a::PLUGINS),
                    format!("{m}; the Ingress's paths answer 503"),
                );
                disabled = disabled.or(Some("a plugin its Ingress names is not accepted"));
                Vec::new()
            }
        };
        let validation = self.client_validation(key, &ann.client_certificate);
        if let Some(Err(())) = validation {
            disabled = disabled.or(Some(
                "its Ingress's client-certificate Secret cannot be used",
            ));
        }
        let overrides = Overrides {
            ingress: key.clone(),
            upstream: ann.upstream.clone(),
            protocol: ann.protocol,
            service_upstream: ann.service_upstream,
        };
        let fallback = self.fallback_of(key, &ann);
        let mirror = self.ingress_mirror(key, &ann.mirror);
        let ctx = RouteContext {
            key,
            ann: &ann,
            plugins: &plugins,
            disabled,
            overrides,
            fallback,
            mirror,
        };
        self.tls(key, ing);
        // A disabled Ingress's TLS connections are terminated, to be answered 503.
        if ann.ssl_passthrough && disabled.is_none() {
            self.ssl_passthrough(key, ing, &ann);
        }
        match &validation {
            Some(Ok(v)) => self.protect_hosts(key, ing, v),
            Some(Err(())) => {}
            None => self.ask_for_client_certificates(key, ing, &plugins),
        }
        let Some(spec) = ing.spec.as_ref() else {
            return;
        };

        if let Some(backend) = &spec.default_backend {
            let claim = (String::new(), "DefaultBackend", String::new());
            match self.claimed.get(&claim) {
                Some(winner) => {
                    let m = format!("Ingress {winner} already provides the default backend; this one is not used");
                    self.problem(me.clone(), Reason::Conflict, "spec.defaultBackend", m);
                }
                None => {
                    let rule = PathRule {
                        path: "/".into(),
                        kind: PathKind::Prefix,
                    };
                    let id = format!("{key}/default-backend");
                    self.add_route(&ctx, id, None, rule, backend, "spec.defaultBackend", -1);
                    self.claimed.insert(claim, key.clone());
                }
            }
        }

        for (ri, rule) in spec.rules.iter().flatten().enumerate() {
            let host = rule.host.clone().filter(|h| !h.is_empty());
            if let Some(h) = &host {
                if let Err(m) = check_host(h) {
                    self.problem(
                        me.clone(),
                        Reason::InvalidHost,
                        format!("spec.rules[{ri}].host"),
                        format!("{m}; this rule is not served"),
                    );
                    continue;
                }
            }
            let Some(http) = &rule.http else { continue };
            for (pi, p) in http.paths.iter().enumerate() {
                let field = format!("spec.rules[{ri}].http.paths[{pi}]");
                let raw = p.path.clone().unwrap_or_else(|| "/".into());
                let path = match path_rule(&raw, &p.path_type) {
                    Ok(r) => r,
                    Err(m) => {
                        self.problem(
                            me.clone(),
                            Reason::InvalidPath,
                            format!("{field}.path"),
                            format!("{m}; this path is not served"),
                        );
                        continue;
                    }
                };
                // A trailing slash does not change a Prefix rule, so it does not avoid a conflict.
                let claimed_path = match path.kind {
                    PathKind::Prefix if path.path.len() > 1 => {
                        path.path.trim_end_matches('/').to_string()
                    }
                    _ => path.path.clone(),
                };
                let claim = (
                    host.clone().unwrap_or_default().to_ascii_lowercase(),
                    kind_name(path.kind),
                    claimed_path,
                );
                if let Some(winner) = self.claimed.get(&claim) {
                    let m = format!(
                        "{} {} on host {:?} is already served by Ingress {winner}; this path is not served",
                        kind_name(path.kind),
                        path.path,
                        host.as_deref().unwrap_or("*")
                    );
                    self.problem(me.clone(), Reason::Conflict, format!("{field}.path"), m);
                    continue;
                }
                let id = format!("{key}/r{ri}/p{pi}");
                self.served_paths
                    .entry((
                        host.clone().unwrap_or_default().to_ascii_lowercase(),
                        as_written(&raw),
                    ))
                    .or_insert_with(|| id.clone());
                let priority = if path.kind == PathKind::Regex {
                    ann.regex_priority
                } else {
                    0
                };
                self.add_route(
                    &ctx,
                    id,
                    host.clone(),
                    path,
                    &p.backend,
                    &format!("{field}.backend"),
                    priority,
                );
                self.claimed.insert(claim, key.clone());
            }
        }
    }

    /// Adds one route and its plugin entries. A route whose Ingress or backend is broken is
    /// still added, answered with 503 by a `request-termination` entry.
    #[allow(clippy::too_many_arguments)]
    fn add_route(
        &mut self,
        ctx: &RouteContext<'_>,
        id: String,
        host: Option<String>,
        path: PathRule,
        backend: &IngressBackend,
        field: &str,
        priority: i32,
    ) {
        let (key, ann) = (ctx.key, ctx.ann);
        let me = obj(Kind::Ingress, key);
        let mut disabled = ctx.disabled.or(self.global_broken);
        let service = match (&backend.service, &backend.resource) {
            // Checked also for a path that is disabled already, so that every problem shows at
            // once.
            (Some(s), _) => {
                let port = s.port.clone().unwrap_or_default();
                match self.backend_for(&key.namespace, &s.name, &port, Some(&ctx.overrides)) {
                    Ok(id) if disabled.is_none() => Some(id),
                    Ok(_) => None,
                    Err((reason, m)) => {
                        self.problem(
                            me,
                            reason,
                            format!("{field}.service"),
                            format!("{m}; this path answers 503"),
                        );
                        disabled = disabled.or(Some("its backend cannot be served"));
                        None
                    }
                }
            }
            (None, Some(_)) => {
                self.problem(
                    me,
                    Reason::UnsupportedBackend,
                    format!("{field}.resource"),
                    "resource backends are not supported; this path answers 503",
                );
                disabled = Some("resource backends are not supported");
                None
            }
            (None, None) => {
                self.problem(
                    me,
                    Reason::UnsupportedBackend,
                    field.to_string(),
                    "a backend needs a service; this path answers 503",
                );
                disabled = Some("its backend names no service");
                None
            }
        };
        let plugins = if disabled.is_some() {
            &[][..]
        } else {
            ctx.plugins
        };
        if let Some(why) = disabled {
            self.config.plugins.push(disabled_entry(&id, why));
        }
        for p in plugins {
            let entries = self.scoped_entries(p, &key.namespace, Some(&id), None);
            self.config.plugins.extend(entries);
        }
        self.config.routes.push(Route {
            id,
            hosts: host.into_iter().collect(),
            paths: vec![path],
            methods: ann.methods.clone(),
            headers: ann.headers.clone(),
            protocols: ann.protocols.clone(),
            https_redirect_status_code: ann.https_redirect_status_code.unwrap_or(426),
            strip_path: ann.strip_path,
            preserve_host: ann.preserve_host.unwrap_or(true),
            priority,
            host_header: ann.host_header.clone(),
            rewrite: ann.rewrite.clone(),
            upgrade_protocols: ann.upgrade_protocols.clone(),
            namespace: Some(key.namespace.clone()),
            service,
            canary: None,
            fallback: match (&ctx.fallback, &backend.service) {
                (Some((service, statuses)), Some(s)) if disabled.is_none() => {
                    let port = s.port.as_ref().map(|p| match (&p.name, p.number) {
                        (Some(n), _) => n.clone(),
                        (None, Some(n)) => n.to_string(),
                        (None, None) => String::new(),
                    });
                    let headers = [
                        ("X-Namespace", key.namespace.clone()),
                        ("X-Ingress-Name", key.name.clone()),
                        ("X-Service-Name", s.name.clone()),
                        ("X-Service-Port", port.unwrap_or_default()),
                    ];
                    Some(Box::new(weir_proxy::config::Fallback {
                        service: service.clone(),
                        statuses: statuses.clone(),
                        headers: headers
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect(),
                    }))
                }
                _ => None,
            },
            access_log: ann.access_log.unwrap_or(true),
            forwarded_prefix: ann.forwarded_prefix.clone(),
            header_matches: Vec::new(),
            query_matches: Vec::new(),
            backends: Vec::new(),
            deep_wildcards: false,
            excluded_hosts: Vec::new(),
            mirrors: ctx
                .mirror
                .iter()
                .filter(|_| disabled.is_none())
                .cloned()
                .collect(),
            timeout: None,
            upstream_error_status: None,
            tls_hosts: Vec::new(),
            satisfy: if ann.satisfy_any {
                Satisfy::Any
            } else {
                Satisfy::All
            },
            response_rate: (ann.limit_rate > 0).then_some(ResponseRate {
                bytes_per_second: ann.limit_rate,
                after_bytes: ann.limit_rate_after,
            }),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_types() {
        assert_eq!(path_rule("/a", "Exact").unwrap().kind, PathKind::Exact);
        assert_eq!(
            path_rule("/a", "ImplementationSpecific").unwrap().kind,
            PathKind::Prefix
        );
        let r = path_rule("/~/v[0-9]+/x", "ImplementationSpecific").unwrap();
        assert_eq!((r.kind, r.path.as_str()), (PathKind::Regex, "/v[0-9]+/x"));
        assert!(path_rule("/~/v[", "ImplementationSpecific").is_err());
        assert!(path_rule("a", "Prefix").is_err());
        assert!(path_rule("/a", "Fuzzy").is_err());
    }
}
