//! GRPCRoutes → routes of the table. A gRPC call is an HTTP/2 `POST` to
//! `/package.Service/Method`, so a method match is a path rule: service and method exact is
//! an exact path, a service alone a prefix of whole elements (`/pkg.Svc/…`), a method alone
//! or any `RegularExpression` a regex over both elements. Filters are the HTTPRoute ones the
//! spec allows (header modifiers, `ExtensionRef`); backends are spoken to in gRPC (h2c, or
//! over TLS when their Service asks for TLS) whatever their Service says.
//!
//! Precedence between matches follows the spec where the router can: an exact service and
//! method before a service alone, then the most header matches.

use weir_crds::gateway::{GRPCMethodMatch, GRPCRoute, HTTPRouteMatch};
use weir_proxy::config::{PathKind, PathRule};
use weir_proxy::validate::check_path_rule;

use super::http_route::{new_route, set_backends, unusable, value_matches, ServiceEdits};
use super::status::Cond;
use super::GatewayEval;
use crate::problem::Reason;
use crate::store::{Key, Kind};
use crate::translate::{obj, Translator};

/// The route id prefix of GRPCRoutes (`grpcroute:namespace/name/r0/m0`).
pub(in crate::translate) const ID_PREFIX: &str = "grpcroute:";

/// The filter types a GRPCRoute may carry (the rest are HTTPRoute-only).
const FILTERS: [&str; 4] = [
    "RequestHeaderModifier",
    "ResponseHeaderModifier",
    "RequestMirror",
    "ExtensionRef",
];

impl Translator<'_> {
    /// Translates every GRPCRoute with a parent that is Weir's, oldest first.
    pub(super) fn grpc_routes(&mut self, gateways: &mut [GatewayEval]) {
        let store = self.store;
        let routes = super::oldest_first(self, &store.grpc_routes);
        for (key, route) in routes {
            self.grpc_route(gateways, key, route);
        }
    }

    fn grpc_route(&mut self, gateways: &mut [GatewayEval], key: &Key, route: &GRPCRoute) {
        let spec = &route.spec;
        let kind = Kind::GRPCRoute;
        let Some(a) = self.attach_all(gateways, key, kind, &spec.hostnames, &spec.parent_refs)
        else {
            return;
        };
        self.route_gateways = a.gateways.clone();
        let resolved = if a.attached {
            self.grpc_rules(key, route, &a)
        } else {
            Cond::yes("ResolvedRefs", "ResolvedRefs")
        };
        let status = a.status(route.metadata.generation, resolved);
        self.gateway_status
            .grpc_routes
            .insert(key.to_string(), status);
    }

    /// Adds the routes of every rule; returns the route's `ResolvedRefs` condition.
    fn grpc_rules(
        &mut self,
        key: &Key,
        route: &GRPCRoute,
        at: &super::http_route::Attached<'_>,
    ) -> Cond {
        let me = obj(Kind::GRPCRoute, key);
        let mut resolved = Cond::yes("ResolvedRefs", "ResolvedRefs");
        let default_rule = Default::default();
        let rules = if route.spec.rules.is_empty() {
            std::slice::from_ref(&default_rule)
        } else {
            route.spec.rules.as_slice()
        };
        let edits = ServiceEdits::grpc();
        for (ri, rule) in rules.iter().enumerate() {
            let mut backends =
                self.http_backends(Kind::GRPCRoute, key, ri, &rule.backend_refs, true);
            if let Some(c) = backends.unresolved.take() {
                if resolved.holds() {
                    resolved = c;
                }
            }
            let default_match = Default::default();
            let matches = if rule.matches.is_empty() {
                std::slice::from_ref(&default_match)
            } else {
                rule.matches.as_slice()
            };
            // Filters the spec gives HTTPRoutes only make the rule answer 500, as any filter
            // that cannot be applied does.
            let foreign = rule
                .filters
                .iter()
                .position(|f| !FILTERS.contains(&f.type_.as_str()));
            if let Some(fi) = foreign {
                self.problem(
                    me.clone(),
                    Reason::Unsupported,
                    format!("spec.rules[{ri}].filters[{fi}].type"),
                    format!(
                        "filter {:?} is not one a GRPCRoute may carry ({}); the rule answers 500",
                        rule.filters[fi].type_,
                        FILTERS.join(", ")
                    ),
                );
            }
            for (mi, m) in matches.iter().enumerate() {
                let id = format!("{ID_PREFIX}{key}/r{ri}/m{mi}");
                let field = format!("spec.rules[{ri}].matches[{mi}].method");
                let path = match m.method.as_ref().map_or(Ok(prefix("/")), grpc_path) {
                    Ok(p) => p,
                    Err(why) => {
                        self.problem(
                            me.clone(),
                            Reason::InvalidPath,
                            field,
                            format!("{why}; the match is left out"),
                        );
                        continue;
                    }
                };
                let header_matches = value_matches(&m.headers, true);
                let priority = specificity(m.method.as_ref(), header_matches.len());
                let mut r = new_route(
                    key,
                    &id,
                    path,
                    Vec::new(),
                    header_matches,
                    Vec::new(),
                    priority,
                );
                at.place(&mut r);
                let mut entries = backends.entries.clone();
                let filters = self.http_filters(
                    Kind::GRPCRoute,
                    key,
                    ri,
                    &rule.filters,
                    &r,
                    &HTTPRouteMatch::default(),
                );
                let mut rule_plugins = Vec::new();
                match filters {
                    Ok((plugins, mut rewrites)) if foreign.is_none() => {
                        if let Some(c) = rewrites.unresolved.take() {
                            if resolved.holds() {
                                resolved = c;
                            }
                        }
                        // Copies are gRPC calls too.
                        r.mirrors = Self::take_mirrors(&mut rewrites)
                            .into_iter()
                            .map(|mut m| {
                                m.service = self.service_variant(&m.service, &edits);
                                m
                            })
                            .collect();
                        rule_plugins = plugins;
                    }
                    _ => entries = vec![unusable()],
                }
                self.resolve_entries(
                    Kind::GRPCRoute,
                    key,
                    ri,
                    &mut entries,
                    &backends.filters,
                    &edits,
                    &r,
                    &rule_plugins,
                    None,
                );
                self.config.plugins.extend(rule_plugins);
                set_backends(&mut r, entries);
                self.config.routes.push(r);
            }
        }
        resolved
    }
}

fn prefix(p: &str) -> PathRule {
    PathRule {
        path: p.to_string(),
        kind: PathKind::Prefix,
    }
}

/// The path rule of a method match, or why it cannot be served.
fn grpc_path(m: &GRPCMethodMatch) -> Result<PathRule, String> {
    let service = m.service.as_deref().filter(|s| !s.is_empty());
    let method = m.method.as_deref().filter(|s| !s.is_empty());
    let rule = match m.type_.as_deref().unwrap_or("Exact") {
        "Exact" => {
            for (what, v) in [("service", service), ("method", method)] {
                if let Some(v) = v {
                    if !v
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                    {
                        return Err(format!(
                            "{what} {v:?} is not a gRPC name (letters, digits, `.`, `_`, `-`)"
                        ));
                    }
                }
            }
            match (service, method) {
                (Some(s), Some(me)) => PathRule {
                    path: format!("/{s}/{me}"),
                    kind: PathKind::Exact,
                },
                (Some(s), None) => prefix(&format!("/{s}")),
                (None, Some(me)) => PathRule {
                    path: format!("/[^/]+/{}$", regex_escape(me)),
                    kind: PathKind::Regex,
                },
                (None, None) => prefix("/"),
            }
        }
        "RegularExpression" => PathRule {
            path: format!(
                "/(?:{})/(?:{})$",
                service.unwrap_or("[^/]+"),
                method.unwrap_or("[^/]+")
            ),
            kind: PathKind::Regex,
        },
        other => return Err(format!("type {other:?} is not Exact or RegularExpression")),
    };
    check_path_rule(&rule)?;
    Ok(rule)
}

/// `.` and the other regex metacharacters a gRPC name may hold, escaped.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The route priority: an exact service, then an exact method, then the header count.
fn specificity(m: Option<&GRPCMethodMatch>, headers: usize) -> i32 {
    let exact = m.is_some_and(|m| m.type_.as_deref().unwrap_or("Exact") == "Exact");
    let has = |v: Option<&String>| exact && v.is_some_and(|s| !s.is_empty());
    (i32::from(has(m.and_then(|m| m.service.as_ref()))) << 21)
        | (i32::from(has(m.and_then(|m| m.method.as_ref()))) << 20)
        | headers.min(1023) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(type_: Option<&str>, service: Option<&str>, method: Option<&str>) -> GRPCMethodMatch {
        GRPCMethodMatch {
            type_: type_.map(Into::into),
            service: service.map(Into::into),
            method: method.map(Into::into),
        }
    }

    #[test]
    fn method_matches_become_path_rules() {
        let cases = [
            (
                m(None, Some("pkg.Echo"), Some("Say")),
                PathKind::Exact,
                "/pkg.Echo/Say",
            ),
            (
                m(Some("Exact"), Some("pkg.Echo"), None),
                PathKind::Prefix,
                "/pkg.Echo",
            ),
            (m(None, None, Some("Say")), PathKind::Regex, "/[^/]+/Say$"),
            (m(None, None, None), PathKind::Prefix, "/"),
            (
                m(Some("RegularExpression"), Some(r"pkg\..*"), None),
                PathKind::Regex,
                r"/(?:pkg\..*)/(?:[^/]+)$",
            ),
        ];
        for (input, kind, path) in cases {
            let rule = grpc_path(&input).unwrap();
            assert_eq!((rule.kind, rule.path.as_str()), (kind, path), "{input:?}");
        }
        for bad in [
            m(None, Some("pkg/Echo"), None),
            m(None, None, Some("a b")),
            m(Some("Prefix"), Some("x"), None),
            m(Some("RegularExpression"), Some("("), None),
        ] {
            assert!(grpc_path(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn exact_service_and_method_outrank_a_service_alone_then_headers_count() {
        let both = specificity(Some(&m(None, Some("s"), Some("m"))), 0);
        let service = specificity(Some(&m(None, Some("s"), None)), 5);
        let regex = specificity(Some(&m(Some("RegularExpression"), Some("s"), None)), 1);
        assert!(both > service && service > regex);
        assert_eq!(specificity(None, 2), 2);
    }
}
