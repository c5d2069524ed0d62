//! HTTPRoutes → routes of the table: one route per match of each rule, the rule's filters as
//! plugin entries on those routes (header modifiers as `request-transformer` and
//! `response-transformer`, redirects as `redirect`, `ExtensionRef` as the named Weir
//! `Plugin`), rewrites as route settings, and `backendRefs` as weighted services.
//!
//! Precedence between routes follows the spec: host names first (the router's exact, then
//! wildcard, then host-less tables), then an exact path, the longest prefix, a method, the
//! most header matches, the most query matches (the route `priority`), then the oldest route
//! and `namespace/name` (the order of the table), then rule order.

use std::collections::BTreeSet;

use k8s_openapi::api::networking::v1::ServiceBackendPort;
use weir_crds::gateway::{
    HTTPBackendRef, HTTPRoute, HTTPRouteFilter, HTTPRouteMatch, HTTPRouteRule, HeaderModifier,
    ParentReference, PathModifier,
};
use weir_proxy::config::{
    ClientProtocol, PathKind, PathRule, PluginConfig, Route, RouteMirror, TlsHost, ValueMatch,
    ValueMatchKind, WeightedBackend,
};
use weir_proxy::validate::check_path_rule;

use super::status::{Cond, RouteStatus};
use super::{parent_status, GatewayEval};
use crate::problem::Reason;
use crate::store::{Key, Kind};
use crate::translate::{obj, Translator};

/// The route id prefix of HTTPRoutes (`httproute:namespace/name/r0/m0`).
pub(in crate::translate) const ID_PREFIX: &str = "httproute:";

/// What a rule's filters do besides plugins.
#[derive(Default)]
pub(super) struct Rewrites {
    host: Option<String>,
    path: Option<PathModifier>,
    /// `RequestMirror` filters whose backend could be used.
    mirrors: Vec<RouteMirror>,
    /// Why a mirror's backend cannot be used (`ResolvedRefs: False`; the rule is served
    /// without that mirror).
    pub unresolved: Option<Cond>,
}

/// Where a route attached: its parents that are Weir's, and what its routes serve.
pub(super) struct Attached<'r> {
    /// Each parent that is a Gateway of Weir's, with its `Accepted` condition.
    pub parents: Vec<(&'r ParentReference, Cond)>,
    /// Whether any parent accepted it.
    pub attached: bool,
    /// The host names served (empty: every host).
    pub hosts: Vec<String>,
    /// The listener protocols it is served on.
    pub protocols: Vec<ClientProtocol>,
    /// Host names its routes leave to more specific listeners of the same Gateways.
    pub excluded: Vec<String>,
    /// The Gateways it attached to.
    pub gateways: Vec<Key>,
    /// Whether every listener it attached to terminates TLS (`TLS` listeners in `Terminate`
    /// mode, for TLSRoutes).
    pub terminated: bool,
    /// Its HTTPS host names with the client certificate each listener asks for; empty when
    /// none asks.
    pub tls_hosts: Vec<TlsHost>,
}

impl Attached<'_> {
    /// Sets where a route of the table is served: hosts, protocols, the hosts left to other
    /// listeners and the client certificates asked for.
    pub fn place(&self, r: &mut Route) {
        r.hosts = self.hosts.clone();
        r.protocols = self.protocols.clone();
        r.excluded_hosts = self.excluded.clone();
        r.tls_hosts = self.tls_hosts.clone();
    }

    /// The route's status, each parent with its `Accepted` and the route's `ResolvedRefs`.
    pub fn status(self, generation: Option<i64>, resolved: Cond) -> RouteStatus {
        RouteStatus {
            observed_generation: generation,
            parents: self
                .parents
                .into_iter()
                .map(|(p, accepted)| parent_status(p, vec![accepted, resolved.clone()]))
                .collect(),
        }
    }
}

/// A rule's backends, resolved.
pub(super) struct Backends {
    /// The shares, 500 for those that cannot be used.
    pub entries: Vec<WeightedBackend>,
    /// The first reason a backendRef cannot be used (`ResolvedRefs: False`).
    pub unresolved: Option<Cond>,
    /// Per entry: its backendRef's index and filters.
    pub filters: Vec<(usize, Vec<HTTPRouteFilter>)>,
}

impl Translator<'_> {
    /// Translates every HTTPRoute with a parent that is Weir's, oldest first.
    pub(super) fn http_routes(&mut self, gateways: &mut [GatewayEval]) {
        let store = self.store;
        let routes = super::oldest_first(self, &store.http_routes);
        for (key, route) in routes {
            self.http_route(gateways, key, route);
        }
    }

    fn http_route(&mut self, gateways: &mut [GatewayEval], key: &Key, route: &HTTPRoute) {
        let spec = &route.spec;
        let kind = Kind::HTTPRoute;
        let Some(a) = self.attach_all(gateways, key, kind, &spec.hostnames, &spec.parent_refs)
        else {
            return;
        };
        self.route_gateways = a.gateways.clone();
        let resolved = if a.attached {
            self.http_rules(key, route, &a)
        } else {
            Cond::yes("ResolvedRefs", "ResolvedRefs")
        };
        let status = a.status(route.metadata.generation, resolved);
        self.gateway_status
            .http_routes
            .insert(key.to_string(), status);
    }

    /// Attaches a route of `kind` to each of its parents; `None` when none is Weir's.
    pub(super) fn attach_all<'r>(
        &self,
        gateways: &mut [GatewayEval],
        key: &Key,
        kind: Kind,
        hostnames: &[String],
        parent_refs: &'r [ParentReference],
    ) -> Option<Attached<'r>> {
        let mut parents = Vec::new();
        // Every host (`None`) or these names, over every listener the route attached to.
        let mut hosts: Option<BTreeSet<String>> = Some(BTreeSet::new());
        let mut any_host = false;
        let mut protocols: Vec<ClientProtocol> = Vec::new();
        let mut tls_hosts: Vec<TlsHost> = Vec::new();
        // (gateway, listener) pairs the route attached to.
        let mut on: BTreeSet<(usize, usize)> = BTreeSet::new();
        for parent in parent_refs {
            let Some((accepted, at)) = self.attach(gateways, key, kind.as_str(), hostnames, parent)
            else {
                continue;
            };
            if let Some(at) = at {
                for (i, names) in at.listeners {
                    on.insert((at.gateway, i));
                    let l = &gateways[at.gateway].listeners[i];
                    if let Some(p) = l.served_as.filter(|p| !protocols.contains(p)) {
                        protocols.push(p);
                    }
                    if l.served_as == Some(ClientProtocol::Https) {
                        let certificate = &l.client_certificate;
                        let entries = match names.is_empty() {
                            true => vec![None],
                            false => names.iter().cloned().map(Some).collect(),
                        };
                        for host in entries {
                            let t = TlsHost {
                                host,
                                client_certificate: certificate.clone(),
                            };
                            if !tls_hosts.contains(&t) {
                                tls_hosts.push(t);
                            }
                        }
                    }
                    if names.is_empty() {
                        any_host = true;
                    } else if let Some(h) = hosts.as_mut() {
                        h.extend(names);
                    }
                }
            }
            parents.push((parent, accepted));
        }
        if parents.is_empty() {
            return None;
        }
        if any_host {
            hosts = None;
        }
        // Only where a listener asks for client certificates does the proxy check.
        if tls_hosts.iter().all(|t| t.client_certificate.is_none()) {
            tls_hosts.clear();
        }
        Some(Attached {
            tls_hosts,
            attached: parents.iter().any(|(_, c)| c.holds()),
            parents,
            hosts: hosts.into_iter().flatten().collect(),
            protocols,
            excluded: isolated_from(gateways, &on),
            terminated: !on.is_empty()
                && on
                    .iter()
                    .all(|&(g, i)| gateways[g].listeners[i].terminates_tls),
            gateways: on
                .iter()
                .map(|&(g, _)| gateways[g].key.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        })
    }

    /// Adds the routes of every rule; returns the route's `ResolvedRefs` condition.
    fn http_rules(&mut self, key: &Key, route: &HTTPRoute, at: &Attached) -> Cond {
        let mut resolved = Cond::yes("ResolvedRefs", "ResolvedRefs");
        let default_rule = Default::default();
        let rules = if route.spec.rules.is_empty() {
            std::slice::from_ref(&default_rule)
        } else {
            route.spec.rules.as_slice()
        };
        for (ri, rule) in rules.iter().enumerate() {
            let mut backends =
                self.http_backends(Kind::HTTPRoute, key, ri, &rule.backend_refs, true);
            if let Some(c) = backends.unresolved.take() {
                if resolved.holds() {
                    resolved = c;
                }
            }
            let (rule_edits, request_timeout) = self.rule_edits(key, ri, rule);
            let default_match = HTTPRouteMatch::default();
            let matches = if rule.matches.is_empty() {
                std::slice::from_ref(&default_match)
            } else {
                rule.matches.as_slice()
            };
            for (mi, m) in matches.iter().enumerate() {
                let id = format!("{ID_PREFIX}{key}/r{ri}/m{mi}");
                let field = format!("spec.rules[{ri}].matches[{mi}]");
                let Some(mut r) = self.http_match(key, &id, &field, m) else {
                    continue;
                };
                at.place(&mut r);
                r.timeout = request_timeout;
                let mut entries = backends.entries.clone();
                let mut edits = rule_edits.clone();
                let mut rule_plugins = Vec::new();
                match self.http_filters(Kind::HTTPRoute, key, ri, &rule.filters, &r, m) {
                    Ok((plugins, mut rewrites)) => {
                        if let Some(c) = rewrites.unresolved.take() {
                            if resolved.holds() {
                                resolved = c;
                            }
                        }
                        self.apply_rewrites(&mut r, &mut edits, rewrites);
                        rule_plugins = plugins;
                    }
                    Err(()) => entries = vec![unusable()],
                }

                self.resolve_entries(
                    Kind::HTTPRoute,
                    key,
                    ri,
                    &mut entries,
                    &backends.filters,
                    &edits,
                    &r,
                    &rule_plugins,
                    Some(m),
                );
                self.config.plugins.extend(rule_plugins);
                set_backends(&mut r, entries);
                self.config.routes.push(r);
            }
        }
        resolved
    }

    /// One match of a rule as a route (without hosts, protocols and backends).
    fn http_match(
        &mut self,
        key: &Key,
        id: &str,
        field: &str,
        m: &HTTPRouteMatch,
    ) -> Option<Route> {
        let me = obj(Kind::HTTPRoute, key);
        let path = m.path.as_ref();
        let value = path
            .and_then(|p| p.value.clone())
            .unwrap_or_else(|| "/".into());
        let (kind, value) = match path
            .and_then(|p| p.type_.as_deref())
            .unwrap_or("PathPrefix")
        {
            "Exact" => (PathKind::Exact, value),
            "PathPrefix" => (PathKind::Prefix, value),
            // The whole path must match, as Envoy-based gateways match it.
            "RegularExpression" => (PathKind::Regex, format!("(?:{value})$")),
            other => {
                self.problem(
                    me,
                    Reason::Unsupported,
                    format!("{field}.path.type"),
                    format!(
                        "path match type {other:?} is not Exact, PathPrefix or \
                         RegularExpression; the match is left out"
                    ),
                );
                return None;
            }
        };
        let rule = PathRule { path: value, kind };
        if let Err(m) = check_path_rule(&rule) {
            self.problem(
                me,
                Reason::InvalidPath,
                format!("{field}.path.value"),
                format!("{m}; the match is left out"),
            );
            return None;
        }
        let header_matches = value_matches(&m.headers, true);
        let query_matches = value_matches(&m.query_params, false);
        let methods: Vec<String> = m.method.iter().cloned().collect();
        // Method, then header count, then query count (the spec's order after the path).
        let priority = (i32::from(!methods.is_empty()) << 20)
            | ((header_matches.len().min(1023) as i32) << 10)
            | query_matches.len().min(1023) as i32;
        Some(new_route(
            key,
            id,
            rule,
            methods,
            header_matches,
            query_matches,
            priority,
        ))
    }

    /// A rule's backendRefs as weighted services; those that cannot be used keep their share
    /// and answer it with 500, as the spec asks. `decrypted` says Weir has the request's
    /// bytes in the clear (every route but a passthrough TLSRoute's): BackendTLSPolicies then
    /// apply to the backends.
    pub(super) fn http_backends(
        &mut self,
        route_kind: Kind,
        key: &Key,
        ri: usize,
        refs: &[HTTPBackendRef],
        decrypted: bool,
    ) -> Backends {
        let me = obj(route_kind, key);
        let mut out = Backends {
            entries: Vec::new(),
            unresolved: None,
            filters: Vec::new(),
        };
        for (bi, b) in refs.iter().enumerate() {
            let field = format!("spec.rules[{ri}].backendRefs[{bi}]");
            let weight = b.weight.unwrap_or(1).max(0) as u32;
            let service = match self.http_backend(route_kind, key, b, decrypted) {
                Ok(id) => Some(id),
                Err((cond, reason, message)) => {
                    self.problem(
                        me.clone(),
                        reason,
                        field,
                        format!("{message}; its share of requests is answered with 500"),
                    );
                    out.unresolved.get_or_insert(cond);
                    None
                }
            };
            if weight > 0 {
                out.entries.push(WeightedBackend { service, weight });
                out.filters.push((bi, b.filters.clone()));
            }
        }
        out
    }

    /// The service id of one backendRef (speaking TLS as a BackendTLSPolicy says, when
    /// `decrypted`), or why it cannot be used.
    fn http_backend(
        &mut self,
        route_kind: Kind,
        key: &Key,
        b: &HTTPBackendRef,
        decrypted: bool,
    ) -> Result<String, (Cond, Reason, String)> {
        let group = b.group.as_deref().unwrap_or("");
        let kind = b.kind.as_deref().unwrap_or("Service");
        if !group.is_empty() || kind != "Service" {
            let m = format!("backendRef kind {group}/{kind} is not a core Service");
            return Err((
                Cond::no("ResolvedRefs", "InvalidKind", m.clone()),
                Reason::UnsupportedBackend,
                m,
            ));
        }
        let ns = b.namespace.as_deref().unwrap_or(&key.namespace);
        if ns != key.namespace
            && !self.granted(
                ("gateway", route_kind.as_str(), &key.namespace),
                ("", "Service", ns, &b.name),
            )
        {
            let m = format!(
                "Service {ns}/{} is in another namespace and no ReferenceGrant there allows HTTPRoutes of {}",
                b.name, key.namespace
            );
            return Err((
                Cond::no("ResolvedRefs", "RefNotPermitted", m.clone()),
                Reason::RefNotPermitted,
                m,
            ));
        }
        let Some(port) = b.port else {
            let m = format!("backendRef to Service {ns}/{} has no port", b.name);
            return Err((
                Cond::no("ResolvedRefs", "BackendNotFound", m.clone()),
                Reason::PortNotFound,
                m,
            ));
        };
        let port = ServiceBackendPort {
            name: None,
            number: Some(port),
        };
        let id = self.backend(ns, &b.name, &port).map_err(|(reason, m)| {
            (
                Cond::no("ResolvedRefs", "BackendNotFound", m.clone()),
                reason,
                m,
            )
        })?;
        // Passed-through TLS is the client's own: a BackendTLSPolicy is for what Weir
        // terminates.
        if !decrypted {
            return Ok(id);
        }
        let port_name = self
            .store
            .services
            .get(&Key::new(ns, b.name.as_str()))
            .and_then(|s| {
                s.spec
                    .as_ref()?
                    .ports
                    .as_ref()?
                    .iter()
                    .find(|p| p.port == port.number.unwrap_or_default())?
                    .name
                    .clone()
            });
        match self.backend_tls(ns, &b.name, port_name.as_deref()) {
            None => Ok(id),
            Some(Ok((policy, tls))) => {
                let edits = ServiceEdits {
                    tls: Some((policy, Box::new(tls))),
                    ..Default::default()
                };
                Ok(self.service_variant(&id, &edits))
            }
            Some(Err(policy)) => {
                let m = format!(
                    "BackendTLSPolicy {policy} for Service {ns}/{} cannot be applied",
                    b.name
                );
                Err((
                    Cond::no("ResolvedRefs", "BackendNotFound", m.clone()),
                    Reason::InvalidBackendTls,
                    m,
                ))
            }
        }
    }

    /// A rule's filters as plugin entries of route `r`, and the rewrites they ask for.
    /// `Err` when a filter cannot be applied: the rule answers 500 rather than skip it.
    pub(super) fn http_filters(
        &mut self,
        route_kind: Kind,
        key: &Key,
        ri: usize,
        filters: &[HTTPRouteFilter],
        r: &Route,
        m: &HTTPRouteMatch,
    ) -> Result<(Vec<PluginConfig>, Rewrites), ()> {
        let me = obj(route_kind, key);
        let mut plugins = Vec::new();
        let mut rewrites = Rewrites::default();
        let entry = |name: &str, config: serde_json::Value| PluginConfig {
            id: format!("{}/{name}", r.id),
            name: name.to_string(),
            config,
            route: Some(r.id.clone()),
            service: None,
            consumer: None,
            namespace: Some(key.namespace.clone()),
            enabled: true,
            priority: None,
        };
        for (fi, f) in filters.iter().enumerate() {
            let field = format!("spec.rules[{ri}].filters[{fi}]");
            let done = match f.type_.as_str() {
                "RequestHeaderModifier" => f.request_header_modifier.as_ref().map(|h| {
                    plugins.push(entry("request-transformer", header_edits(h)));
                }),
                "ResponseHeaderModifier" => f.response_header_modifier.as_ref().map(|h| {
                    plugins.push(entry("response-transformer", header_edits(h)));
                }),
                "RequestRedirect" => f.request_redirect.as_ref().map(|rr| {
                    plugins.push(entry("redirect", redirect_config(rr, m)));
                }),
                "URLRewrite" => f.url_rewrite.as_ref().map(|u| {
                    rewrites.host = u.hostname.clone();
                    rewrites.path = u.path.clone();
                }),
                "CORS" => f.cors.as_ref().map(|c| {
                    plugins.push(entry("cors", cors_config(c)));
                }),
                "RequestMirror" => f.request_mirror.as_ref().map(|m| {
                    match self.mirror(route_kind, key, &field, m) {
                        Ok(mirror) => rewrites.mirrors.push(mirror),
                        Err(cond) => {
                            rewrites.unresolved.get_or_insert(cond);
                        }
                    }
                }),
                "ExtensionRef" => match f.extension_ref.as_ref() {
                    Some(x) if x.group == weir_crds::GROUP && x.kind == "Plugin" => {
                        let pref = super::super::plugins::PluginRef::Namespaced(Key::new(
                            key.namespace.as_str(),
                            x.name.as_str(),
                        ));
                        if !self
                            .store
                            .plugins
                            .contains_key(&Key::new(key.namespace.as_str(), x.name.as_str()))
                        {
                            self.problem(
                                me.clone(),
                                Reason::PluginNotFound,
                                format!("{field}.extensionRef"),
                                format!(
                                    "no Plugin {}/{}; the rule answers 500",
                                    key.namespace, x.name
                                ),
                            );
                            return Err(());
                        }
                        match self.check(&pref) {
                            Ok(p) => {
                                plugins.extend(self.scoped_entries(
                                    &p,
                                    &key.namespace,
                                    Some(&r.id),
                                    None,
                                ));
                                Some(())
                            }
                            Err(why) => {
                                self.problem(
                                    me.clone(),
                                    Reason::PluginNotAccepted,
                                    format!("{field}.extensionRef"),
                                    format!("{why}; the rule answers 500"),
                                );
                                return Err(());
                            }
                        }
                    }
                    Some(x) => {
                        let why = format!(
                            "{}/{} is not a Weir Plugin (group weir.dev, kind Plugin); \
                             the rule answers 500",
                            x.group, x.kind
                        );
                        self.problem(
                            me.clone(),
                            Reason::Unsupported,
                            format!("{field}.extensionRef"),
                            why,
                        );
                        return Err(());
                    }
                    None => None,
                },
                other => {
                    self.problem(
                        me.clone(),
                        Reason::Unsupported,
                        format!("{field}.type"),
                        format!(
                            "filter {other:?} is not served by this version of Weir; \
                             the rule answers 500"
                        ),
                    );
                    return Err(());
                }
            };
            if done.is_none() {
                self.problem(
                    me.clone(),
                    Reason::Unsupported,
                    field,
                    format!(
                        "filter {:?} without its settings; the rule answers 500",
                        f.type_
                    ),
                );
                return Err(());
            }
        }
        Ok((plugins, rewrites))
    }

    /// The services of a match's backends: each a copy with the rule's `edits`, and a copy of
    /// its own for a backendRef with filters, whose plugin entries are added (a backendRef
    /// whose filters cannot be served answers its share with 500).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn resolve_entries(
        &mut self,
        route_kind: Kind,
        key: &Key,
        ri: usize,
        entries: &mut [WeightedBackend],
        filters: &[(usize, Vec<HTTPRouteFilter>)],
        edits: &ServiceEdits,
        r: &Route,
        rule_plugins: &[PluginConfig],
        m: Option<&HTTPRouteMatch>,
    ) {
        for (ei, e) in entries.iter_mut().enumerate() {
            let Some(s) = e.service.clone() else { continue };
            let own = match filters.get(ei) {
                Some((bi, f)) if !f.is_empty() => Some((*bi, f)),
                _ => None,
            };
            let Some((bi, own)) = own else {
                e.service = Some(self.service_variant(&s, edits));
                continue;
            };
            let mut tagged = edits.clone();
            tagged.tag = Some(format!("{key}/r{ri}/b{bi}"));
            let service = self.service_variant(&s, &tagged);
            let field = format!("spec.rules[{ri}].backendRefs[{bi}].filters");
            let filtered = self.backend_filters(
                route_kind,
                key,
                &field,
                own,
                r,
                &service,
                rule_plugins,
                bi,
                m,
            );
            match filtered {
                Ok(plugins) => {
                    self.config.plugins.extend(plugins);
                    e.service = Some(service);
                }
                Err(()) => e.service = None,
            }
        }
    }

    /// The plugin entries of a backendRef's filters, scoped to the route and the backend's own
    /// service copy. A backend's header modifier comes after the rule's, so its entry is the
    /// two merged (the more specific entry replaces the rule's for that backend). `Err` (its
    /// share answers 500) for filter types served only on rules.
    #[allow(clippy::too_many_arguments)]
    fn backend_filters(
        &mut self,
        route_kind: Kind,
        key: &Key,
        field: &str,
        filters: &[HTTPRouteFilter],
        r: &Route,
        service: &str,
        rule_plugins: &[PluginConfig],
        bi: usize,
        m: Option<&HTTPRouteMatch>,
    ) -> Result<Vec<PluginConfig>, ()> {
        let me = obj(route_kind, key);
        let mut edits: Vec<(&str, serde_json::Value)> = Vec::new();
        let mut add = |name: &'static str, config: serde_json::Value| match edits
            .iter_mut()
            .find(|(n, _)| *n == name)
        {
            Some((_, before)) if name.ends_with("-transformer") => {
                *before = merge_header_edits(before, &config)
            }
            // A second redirect or rewrite on one backendRef: the later one is the one served.
            Some((_, before)) => *before = config,
            None => edits.push((name, config)),
        };
        for (fi, f) in filters.iter().enumerate() {
            match (f.type_.as_str(), m) {
                ("RequestHeaderModifier", _) => {
                    if let Some(h) = &f.request_header_modifier {
                        add("request-transformer", header_edits(h));
                    }
                }
                ("ResponseHeaderModifier", _) => {
                    if let Some(h) = &f.response_header_modifier {
                        add("response-transformer", header_edits(h));
                    }
                }
                ("RequestRedirect", Some(m)) => {
                    if let Some(rr) = &f.request_redirect {
                        add("redirect", redirect_config(rr, m));
                    }
                }
                ("URLRewrite", Some(m)) => {
                    let Some(u) = &f.url_rewrite else { continue };
                    if let Some(h) = &u.hostname {
                        let set = weir_crds::gateway::HeaderValue {
                            name: "host".into(),
                            value: h.clone(),
                        };
                        let host = HeaderModifier {
                            set: vec![set],
                            ..Default::default()
                        };
                        add("request-transformer", header_edits(&host));
                    }
                    if let Some(c) = u.path.as_ref().and_then(|p| rewrite_config(p, m)) {
                        add("rewrite", c);
                    }
                }
                (other, _) => {
                    self.problem(
                        me,
                        Reason::Unsupported,
                        format!("{field}[{fi}].type"),
                        format!(
                            "filter {other:?} on a backendRef is not served by this version of \
                             Weir (header modifiers, and on HTTPRoutes redirects and rewrites, \
                             are); this backend's share answers 500"
                        ),
                    );
                    return Err(());
                }
            }
        }
        Ok(edits
            .into_iter()
            .map(|(name, config)| {
                // The backend's entry replaces the rule's of the same plugin for its share:
                // header edits are the two merged, a redirect or rewrite is the backend's.
                let config = match rule_plugins.iter().find(|p| p.name == name) {
                    Some(rule) if name.ends_with("-transformer") => {
                        merge_header_edits(&rule.config, &config)
                    }
                    _ => config,
                };
                PluginConfig {
                    id: format!("{}/b{bi}/{name}", r.id),
                    name: name.to_string(),
                    config,
                    route: Some(r.id.clone()),
                    service: Some(service.to_string()),
                    consumer: None,
                    namespace: Some(key.namespace.clone()),
                    enabled: true,
                    priority: None,
                }
            })
            .collect())
    }

    /// A `RequestMirror` filter's mirror, or the `ResolvedRefs` condition saying why its
    /// backend cannot be used (reported; the rule is served without it).
    fn mirror(
        &mut self,
        route_kind: Kind,
        key: &Key,
        field: &str,
        m: &serde_json::Value,
    ) -> Result<RouteMirror, Cond> {
        let me = obj(route_kind, key);
        let backend: HTTPBackendRef =
            serde_json::from_value(m["backendRef"].clone()).unwrap_or_default();
        let percent = match (m["percent"].as_f64(), m.get("fraction")) {
            (Some(p), _) => p,
            (None, Some(f)) => {
                let n = f["numerator"].as_f64().unwrap_or(0.0);
                let d = f["denominator"].as_f64().unwrap_or(100.0);
                if d > 0.0 {
                    n / d * 100.0
                } else {
                    0.0
                }
            }
            (None, None) => 100.0,
        };
        if !(0.0..=100.0).contains(&percent) {
            let m = format!("the share mirrored, {percent}%, is not between 0 and 100");
            self.problem(
                me,
                Reason::Unsupported,
                field.to_string(),
                format!("{m}; not mirrored"),
            );
            return Err(Cond::no("ResolvedRefs", "UnsupportedValue", m));
        }
        match self.http_backend(route_kind, key, &backend, true) {
            Ok(service) => Ok(RouteMirror {
                service,
                percent,
                host: None,
                body: true,
            }),
            Err((cond, reason, m)) => {
                self.problem(
                    me,
                    reason,
                    format!("{field}.requestMirror.backendRef"),
                    format!("{m}; requests are not mirrored there"),
                );
                Err(cond)
            }
        }
    }

    /// What a rule's `timeouts` and `retry` change about its backends' services; a value Weir
    /// cannot read is reported and left out.
    fn rule_edits(
        &mut self,
        key: &Key,
        ri: usize,
        rule: &HTTPRouteRule,
    ) -> (ServiceEdits, Option<u64>) {
        let me = obj(Kind::HTTPRoute, key);
        let mut edits = ServiceEdits::default();
        let bad = |this: &mut Self, field: String, m: String| {
            this.problem(me.clone(), Reason::Unsupported, field, m);
        };
        // `request` is the route's budget over every try; `backendRequest` each try's wait.
        let mut request = None;
        if let Some(t) = &rule.timeouts {
            for (name, v) in [
                ("request", &t.request),
                ("backendRequest", &t.backend_request),
            ] {
                let Some(text) = v else { continue };
                match duration_ms(text) {
                    // Zero turns the timeout off (the service's own 60 s stays per try).
                    Some(0) => {}
                    Some(ms) if name == "request" => {
                        request = Some(ms.min(weir_proxy::config::MAX_ROUTE_TIMEOUT_MS))
                    }
                    Some(ms) => {
                        edits.read_timeout = Some(ms.min(weir_proxy::config::MAX_ROUTE_TIMEOUT_MS))
                    }
                    None => bad(
                        self,
                        format!("spec.rules[{ri}].timeouts.{name}"),
                        format!("{text:?} is not a duration such as 10s, 500ms or 1m30s; ignored"),
                    ),
                }
            }
        }
        if let Some(r) = &rule.retry {
            edits.retry_timeouts = true;
            edits.retries = r.attempts.map(|a| a.clamp(0, 100) as u32);
            if let Some(text) = &r.backoff {
                match duration_ms(text) {
                    // The proxy waits at most 10 minutes between tries.
                    Some(ms) => edits.retry_backoff = Some(ms.min(600_000)).filter(|&ms| ms > 0),
                    None => bad(
                        self,
                        format!("spec.rules[{ri}].retry.backoff"),
                        format!("{text:?} is not a duration such as 100ms or 1s; ignored"),
                    ),
                }
            }
            for (ci, code) in r.codes.iter().enumerate() {
                match u16::try_from(*code) {
                    Ok(c) if (400..600).contains(&c) => edits.retry_statuses.push(c),
                    _ => bad(
                        self,
                        format!("spec.rules[{ri}].retry.codes[{ci}]"),
                        format!("{code} is not an HTTP error status (400-599); ignored"),
                    ),
                }
            }
            edits.retry_statuses.sort_unstable();
            edits.retry_statuses.dedup();
        }
        (edits, request)
    }

    /// The mirrors of a rule's `RequestMirror` filters.
    pub(super) fn take_mirrors(rewrites: &mut Rewrites) -> Vec<RouteMirror> {
        std::mem::take(&mut rewrites.mirrors)
    }

    /// Applies a URLRewrite to a route, and to its backends through `edits`.
    fn apply_rewrites(&mut self, r: &mut Route, edits: &mut ServiceEdits, w: Rewrites) {
        r.mirrors = w.mirrors;
        if let Some(h) = w.host {
            r.host_header = Some(h);
        }
        let Some(p) = w.path else {
            return;
        };
        match p.type_.as_str() {
            "ReplaceFullPath" => {
                // `$` is the rewrite template's capture marker.
                let path = p.replace_full_path.unwrap_or_else(|| "/".into());
                r.rewrite = Some(path.replace('$', "$$"));
            }
            "ReplacePrefixMatch" => {
                let prefix = p.replace_prefix_match.unwrap_or_else(|| "/".into());
                r.strip_path = true;
                // The prefix is the service's path: each backend gets a copy that carries it.
                edits.path = Some(prefix);
            }
            _ => {}
        }
    }

    /// Service `id` with a rule's `edits`: the service itself when there are none, else a
    /// copy made once per distinct set of edits.
    pub(super) fn service_variant(&mut self, id: &str, edits: &ServiceEdits) -> String {
        if edits.is_empty() {
            return id.to_string();
        }
        let new_id = format!("{id}~{}", edits.suffix());
        if self.service_position(&new_id).is_none() {
            if let Some(i) = self.service_position(id) {
                let mut copy = self.config.services[i].clone();
                copy.id = new_id.clone();
                edits.apply(&mut copy);
                self.config.services.push(copy);
            }
        }
        new_id
    }

    /// Where service `id` is in `config.services`.
    fn service_position(&mut self, id: &str) -> Option<usize> {
        if let Some(&i) = self.service_index.get(id) {
            return Some(i);
        }
        let known = self.service_index.len();
        for (i, s) in self.config.services.iter().enumerate().skip(known) {
            self.service_index.insert(s.id.clone(), i);
        }
        self.service_index.get(id).copied()
    }
}

/// What a rule changes about its backends' services: the upstream path prefix of a
/// `ReplacePrefixMatch` rewrite, `timeouts` and `retry`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct ServiceEdits {
    /// Prepended to the forwarded path.
    path: Option<String>,
    /// Milliseconds to wait for the response (`timeouts`).
    read_timeout: Option<u64>,
    /// Tries after the first (`retry.attempts`).
    retries: Option<u32>,
    /// Statuses retried (`retry.codes`).
    retry_statuses: Vec<u16>,
    /// A try that timed out is retried (any `retry`: the spec retries backend timeouts).
    retry_timeouts: bool,
    /// Milliseconds between tries (`retry.backoff`).
    retry_backoff: Option<u64>,
    /// The backend is spoken to in gRPC (a GRPCRoute's), over TLS when the service has TLS.
    grpc: bool,
    /// A copy of its own for one backendRef (whose filters are scoped to it): changes only
    /// the id.
    tag: Option<String>,
    /// TLS towards the backend, from the BackendTLSPolicy named (`namespace/name`).
    tls: Option<(String, Box<weir_proxy::config::ServiceTls>)>,
}

impl ServiceEdits {
    /// Only speaking gRPC to the backend (a GRPCRoute's backends).
    pub fn grpc() -> ServiceEdits {
        ServiceEdits {
            grpc: true,
            ..Default::default()
        }
    }

    fn is_empty(&self) -> bool {
        *self == ServiceEdits::default()
    }

    /// The part of the copy's id that says what differs (ids are compared, so one copy serves
    /// every rule with the same edits).
    fn suffix(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.path {
            parts.push(p.clone());
        }
        if let Some(t) = self.read_timeout {
            parts.push(format!("timeout={t}ms"));
        }
        if self.retries.is_some() || !self.retry_statuses.is_empty() || self.retry_timeouts {
            let codes: Vec<String> = self.retry_statuses.iter().map(u16::to_string).collect();
            parts.push(format!(
                "retry={}:{}",
                self.retries.map_or("default".into(), |r| r.to_string()),
                codes.join(",")
            ));
            if let Some(b) = self.retry_backoff {
                parts.push(format!("backoff={b}ms"));
            }
        }
        if let Some((policy, _)) = &self.tls {
            parts.push(format!("tls={policy}"));
        }
        if self.grpc {
            parts.push("grpc".into());
        }
        if let Some(t) = &self.tag {
            parts.push(format!("for={t}"));
        }
        parts.join("~")
    }

    fn apply(&self, s: &mut weir_proxy::config::Service) {
        if let Some(p) = &self.path {
            s.path = Some(p.clone());
        }
        if let Some(t) = self.read_timeout {
            s.read_timeout = t;
        }
        if let Some(r) = self.retries {
            s.retries = r;
        }
        if !self.retry_statuses.is_empty() {
            s.retry_on.statuses = self.retry_statuses.clone();
        }
        if self.retry_timeouts {
            s.retry_on.timeouts = true;
        }
        if let Some(b) = self.retry_backoff {
            s.retry_on.backoff = b;
        }
        if let Some((_, tls)) = &self.tls {
            use weir_proxy::config::{Alpn, UpstreamProtocol as P};
            let mut tls = (**tls).clone();
            s.protocol = match s.protocol {
                P::Http | P::Https => P::Https,
                P::H2c => {
                    tls.alpn = Some(Alpn::H2);
                    P::Https
                }
                P::Grpc | P::Grpcs => P::Grpcs,
            };
            s.tls = Some(Box::new(tls));
        }
        if self.grpc {
            use weir_proxy::config::UpstreamProtocol as P;
            s.protocol = match s.protocol {
                P::Https | P::Grpcs => P::Grpcs,
                P::Http | P::H2c | P::Grpc => P::Grpc,
            };
        }
    }
}

/// A Gateway API duration (`1h`, `500ms`, `1m30s`: up to four numbers of at most 5 digits,
/// each with `h`, `m`, `s` or `ms`) in milliseconds.
pub(super) fn duration_ms(text: &str) -> Option<u64> {
    let mut rest = text;
    let mut total: u64 = 0;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else {
            return None;
        };
        total += n * unit;
        rest = &rest[len..];
        parts += 1;
    }
    (1..=4).contains(&parts).then_some(total)
}

/// Listener isolation: the host names of listeners more specific than one a route attached
/// to (same Gateway, same socket), which the route must not serve: a request for
/// `a.example.com` belongs to a listener `a.example.com` alone, not also to `*.example.com` or
/// to a listener without a host name. Names that cover a listener the route is itself on are
/// left out, so a route on several listeners of one Gateway serves each one's names.
fn isolated_from(gateways: &[GatewayEval], on: &BTreeSet<(usize, usize)>) -> Vec<String> {
    use super::hostnames::covers;
    let mut excluded: BTreeSet<String> = BTreeSet::new();
    let narrower = |wide: Option<&str>, name: &str| match wide {
        None => true,
        Some(w) => covers(w, name),
    };
    for &(g, i) in on {
        let listeners = &gateways[g].listeners;
        let mine = &listeners[i];
        for (j, other) in listeners.iter().enumerate() {
            let Some(name) = other.hostname.as_deref() else {
                continue;
            };
            if j != i
                && !on.contains(&(g, j))
                && other.usable()
                && other.served_as == mine.served_as
                && narrower(mine.hostname.as_deref(), name)
            {
                excluded.insert(name.to_string());
            }
        }
    }
    excluded.retain(|e| {
        !on.iter().any(|&(g, i)| {
            let l = &gateways[g].listeners[i];
            l.hostname
                .as_deref()
                .is_some_and(|h| h == e || covers(e, h))
        })
    });
    excluded.into_iter().collect()
}

/// A `CORS` filter as the `cors` plugin's configuration. Origins with a `*` host label
/// (`https://*.example.com`) become anchored regexes over one or more labels; `*` in
/// `allowMethods` is the plugin's `["*"]` (the preflight's method is allowed back), in
/// `allowHeaders` the plugin's default (the preflight's headers are allowed back); `maxAge`
/// defaults to the spec's 5 seconds.
fn cors_config(c: &serde_json::Value) -> serde_json::Value {
    let list = |key: &str| -> Vec<String> {
        c[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let origins: Vec<String> = list("allowOrigins")
        .into_iter()
        .map(|o| {
            if o == "*" || !o.contains('*') {
                return o;
            }
            let mut re = String::with_capacity(o.len() + 32);
            for ch in o.chars() {
                match ch {
                    '*' => re.push_str("[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*"),
                    c if "\\.+?()|[]{}^$".contains(c) => {
                        re.push('\\');
                        re.push(c);
                    }
                    c => re.push(c),
                }
            }
            re
        })
        .collect();
    let mut out = serde_json::json!({
        "origins": origins,
        "credentials": c["allowCredentials"].as_bool().unwrap_or(false),
        "max_age": c["maxAge"].as_u64().unwrap_or(5),
    });
    let methods = list("allowMethods");
    if methods.iter().any(|m| m == "*") {
        out["methods"] = serde_json::json!(["*"]);
    } else if !methods.is_empty() {
        out["methods"] = methods.into();
    }
    for (from, to) in [
        ("allowHeaders", "headers"),
        ("exposeHeaders", "exposed_headers"),
    ] {
        let names = list(from);
        if !names.is_empty() && !names.iter().any(|h| h == "*") {
            out[to] = names.into();
        }
    }
    out
}

/// A route of the table for one match of a Gateway API rule (without hosts, protocols and
/// backends).
pub(super) fn new_route(
    key: &Key,
    id: &str,
    path: PathRule,
    methods: Vec<String>,
    header_matches: Vec<ValueMatch>,
    query_matches: Vec<ValueMatch>,
    priority: i32,
) -> Route {
    Route {
        id: id.to_string(),
        hosts: Vec::new(),
        paths: vec![path],
        methods,
        headers: Default::default(),
        protocols: Vec::new(),
        https_redirect_status_code: 426,
        strip_path: false,
        // Backends get the client's Host unless a URLRewrite names another.
        preserve_host: true,
        priority,
        host_header: None,
        rewrite: None,
        service: None,
        upgrade_protocols: Vec::new(),
        namespace: Some(key.namespace.clone()),
        canary: None,
        fallback: None,
        access_log: true,
        forwarded_prefix: None,
        header_matches,
        query_matches,
        backends: Vec::new(),
        // Gateway API host names: `*.` covers any depth.
        deep_wildcards: true,
        excluded_hosts: Vec::new(),
        mirrors: Vec::new(),
        timeout: None,
        // Envoy-based gateways answer 503 when the backend cannot be reached, and the
        // conformance suite (HTTPRouteRetryConnectionError) accepts 500 or 503 only.
        upstream_error_status: Some(503),
        tls_hosts: Vec::new(),
        satisfy: Default::default(),
        response_rate: None,
    }
}

/// A share of requests answered with 500.
pub(super) fn unusable() -> WeightedBackend {
    WeightedBackend {
        service: None,
        weight: 1,
    }
}

/// Sets a route's backends: one service directly (the same route an Ingress makes), several
/// by weight, none usable as one 500 share.
pub(super) fn set_backends(r: &mut Route, entries: Vec<WeightedBackend>) {
    let mut entries: Vec<WeightedBackend> = entries.into_iter().filter(|e| e.weight > 0).collect();
    if entries.is_empty() {
        entries.push(unusable());
    }
    if let [only] = entries.as_slice() {
        if only.service.is_some() {
            r.service = only.service.clone();
            return;
        }
    }
    r.backends = entries;
}

/// The path prefix a match routes on, for `ReplacePrefixMatch` (`/` when it has none).
/// A `RequestRedirect` filter as the `redirect` plugin's configuration; `m` is the match it
/// applies to (a `ReplacePrefixMatch` replaces that match's prefix).
fn redirect_config(
    rr: &weir_crds::gateway::RequestRedirect,
    m: &HTTPRouteMatch,
) -> serde_json::Value {
    let mut c = serde_json::json!({
        "status_code": rr.status_code.unwrap_or(302),
    });
    if let Some(s) = &rr.scheme {
        c["scheme"] = s.to_ascii_lowercase().into();
    }
    if let Some(h) = &rr.hostname {
        c["hostname"] = h.clone().into();
    }
    if let Some(p) = rr.port {
        c["port"] = p.into();
    }
    match rr.path.as_ref().map(|p| p.type_.as_str()) {
        Some("ReplaceFullPath") => {
            c["path"] = rr
                .path
                .as_ref()
                .and_then(|p| p.replace_full_path.clone())
                .unwrap_or_else(|| "/".into())
                .into();
        }
        Some("ReplacePrefixMatch") => {
            c["replace_prefix"] = rr
                .path
                .as_ref()
                .and_then(|p| p.replace_prefix_match.clone())
                .unwrap_or_else(|| "/".into())
                .into();
            c["matched_prefix"] = matched_prefix(m).into();
        }
        _ => {}
    }
    if c.as_object().is_some_and(|o| o.len() == 1) {
        // Only a status: the request's own URL. The plugin asks for at least
        // one part (an empty one is a loop by mistake), so replace `/` by `/`.
        c["replace_prefix"] = "/".into();
        c["matched_prefix"] = "/".into();
    }
    c
}

/// A backendRef's `URLRewrite` path as the `rewrite` plugin's configuration (a rule's is
/// served by the route itself, which every backend shares).
fn rewrite_config(
    p: &weir_crds::gateway::PathModifier,
    m: &HTTPRouteMatch,
) -> Option<serde_json::Value> {
    match p.type_.as_str() {
        "ReplaceFullPath" => Some(serde_json::json!({
            "uri": p.replace_full_path.clone().unwrap_or_else(|| "/".into()),
        })),
        "ReplacePrefixMatch" => Some(serde_json::json!({
            "replace_prefix": p.replace_prefix_match.clone().unwrap_or_else(|| "/".into()),
            "matched_prefix": matched_prefix(m),
        })),
        _ => None,
    }
}

fn matched_prefix(m: &HTTPRouteMatch) -> String {
    m.path
        .as_ref()
        .and_then(|p| p.value.clone())
        .unwrap_or_else(|| "/".into())
}

/// Header or query conditions; for headers (names any case) only the first of a name counts,
/// as the spec says.
pub(super) fn value_matches(
    list: &[weir_crds::gateway::ValueMatch],
    headers: bool,
) -> Vec<ValueMatch> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for v in list {
        let name = if headers {
            v.name.to_ascii_lowercase()
        } else {
            v.name.clone()
        };
        if !seen.insert(name.clone()) {
            continue;
        }
        let kind = match v.type_.as_deref() {
            Some("RegularExpression") => ValueMatchKind::Regex,
            _ => ValueMatchKind::Exact,
        };
        out.push(ValueMatch {
            name,
            value: v.value.clone(),
            kind,
        });
    }
    out
}

/// A header modifier as a transformer configuration (Kong's keys): `set` removes then adds,
/// `add` appends a value, `remove` removes.
/// Two header modifiers' `request-transformer` (or `response-transformer`) configurations
/// as one that does `first` then `then`: the plugin removes, then adds, then appends, so
/// what `then` removes or sets drops `first`'s edits of that name, and `then`'s go last.
fn merge_header_edits(first: &serde_json::Value, then: &serde_json::Value) -> serde_json::Value {
    let list = |v: &serde_json::Value, k: &str| -> Vec<String> {
        v[k]["headers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    // What `then` removes or replaces drops `first`'s edits of that name.
    let replaced: BTreeSet<String> = ["remove", "replace"]
        .iter()
        .flat_map(|k| list(then, k))
        .map(|e| e.split(':').next().unwrap_or(&e).to_ascii_lowercase())
        .collect();
    let kept = |entry: &String| {
        let name = entry.split(':').next().unwrap_or(entry);
        !replaced.contains(&name.to_ascii_lowercase())
    };
    let mut c = serde_json::Map::new();
    for k in ["remove", "add", "append", "replace"] {
        let mut all: Vec<String> = list(first, k).into_iter().filter(|e| kept(e)).collect();
        all.extend(list(then, k));
        if !all.is_empty() {
            c.insert(k.into(), serde_json::json!({ "headers": all }));
        }
    }
    serde_json::Value::Object(c)
}

fn header_edits(h: &HeaderModifier) -> serde_json::Value {
    let pair = |v: &weir_crds::gateway::HeaderValue| format!("{}:{}", v.name, v.value);
    // `Host` cannot be removed (the transformer refuses it), only replaced: every request
    // has one by the time plugins run.
    let (host, set): (Vec<_>, Vec<_>) = h
        .set
        .iter()
        .partition(|v| v.name.eq_ignore_ascii_case("host"));
    let mut remove: Vec<String> = h.remove.clone();
    remove.extend(set.iter().map(|v| v.name.clone()));
    let mut c = serde_json::Map::new();
    if !remove.is_empty() {
        c.insert("remove".into(), serde_json::json!({ "headers": remove }));
    }
    if !set.is_empty() {
        let set: Vec<String> = set.into_iter().map(pair).collect();
        c.insert("add".into(), serde_json::json!({ "headers": set }));
    }
    if !host.is_empty() {
        let host: Vec<String> = host.into_iter().map(pair).collect();
        c.insert("replace".into(), serde_json::json!({ "headers": host }));
    }
    if !h.add.is_empty() {
        let add: Vec<String> = h.add.iter().map(pair).collect();
        c.insert("append".into(), serde_json::json!({ "headers": add }));
    }
    serde_json::Value::Object(c)
}

#[cfg(test)]
mod tests {
    use super::{duration_ms, header_edits, merge_header_edits};
    use serde_json::json;

    #[test]
    fn a_backends_header_edits_come_after_the_rules() {
        let rule = json!({"remove": {"headers": ["a", "b"]}, "add": {"headers": ["b:1"]},
            "append": {"headers": ["c:1", "d:1"]}});
        // The backend sets `B` and `c`, removes `d`, appends `e`.
        let backend = json!({"remove": {"headers": ["B", "c", "d"]}, "add": {"headers": ["B:2", "c:2"]},
            "append": {"headers": ["e:2"]}});
        assert_eq!(
            merge_header_edits(&rule, &backend),
            json!({"remove": {"headers": ["a", "B", "c", "d"]}, "add": {"headers": ["B:2", "c:2"]},
                "append": {"headers": ["e:2"]}})
        );
        // Appends after the rule's set keep both.
        let append = json!({"append": {"headers": ["b:2"]}});
        assert_eq!(
            merge_header_edits(&rule, &append)["append"],
            json!({"headers": ["c:1", "d:1", "b:2"]})
        );
        assert_eq!(
            merge_header_edits(&rule, &append)["add"],
            json!({"headers": ["b:1"]})
        );
    }

    #[test]
    fn host_is_replaced_never_removed() {
        let set = |pairs: &[(&str, &str)]| {
            let m: weir_crds::gateway::HeaderModifier = serde_json::from_value(json!({
                "set": pairs.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>()
            }))
            .unwrap();
            header_edits(&m)
        };
        let rule = set(&[("Host", "a.test"), ("x-a", "1")]);
        assert_eq!(
            rule,
            json!({"remove": {"headers": ["x-a"]}, "add": {"headers": ["x-a:1"]},
                "replace": {"headers": ["Host:a.test"]}})
        );
        // A backend's host replaces the rule's; the rule's other edits stay.
        let merged = merge_header_edits(&rule, &set(&[("host", "b.test")]));
        assert_eq!(merged["replace"], json!({"headers": ["host:b.test"]}));
        assert_eq!(merged["add"], json!({"headers": ["x-a:1"]}));
    }

    #[test]
    fn gateway_api_durations_read_as_the_spec_writes_them() {
        for (text, ms) in [
            ("0s", 0),
            ("500ms", 500),
            ("10s", 10_000),
            ("1m30s", 90_000),
            ("1h", 3_600_000),
            ("1h1m1s1ms", 3_661_001),
            ("99999ms", 99_999),
        ] {
            assert_eq!(duration_ms(text), Some(ms), "{text}");
        }
        for bad in [
            "",
            "10",
            "s",
            "1.5s",
            "100000ms",
            "1h1m1s1ms1ms",
            "-1s",
            "1d",
            "1 s",
        ] {
            assert_eq!(duration_ms(bad), None, "{bad}");
        }
    }
}
