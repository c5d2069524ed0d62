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

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use weir_crds::annotations as a;
use weir_proxy::config::{check_host, PathKind, PathRule, PluginConfig, Route};

use super::annotations::{self, IngressAnnotations};
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
    weir_proxy::config::check_path_rule(&rule).map_err(|m| match rule.kind {
        PathKind::Regex => m.replacen("invalid regex", "invalid regex after \"/~\"", 1),
        _ => m,
    })?;
    Ok(rule)
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
            ic.spec.as_ref().and_then(|s| s.controller.as_deref())
                == Some(weir_crds::CONTROLLER_NAME)
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
        for (key, ing) in owned {
            self.owned.push(key.clone());
            self.ingress(key, ing);
        }
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
        let ctx = RouteContext {
            key,
            ann: &ann,
            plugins: &plugins,
            disabled,
        };
        self.tls(key, ing);
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
                match self.backend(&key.namespace, &s.name, &port) {
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
            fallback: None,
            access_log: true,
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
