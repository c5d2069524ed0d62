//! The translator: a pure function from the object store to the proxy's routing table and the
//! problems found on the way. No client, no I/O, no clock: the same store always gives the same
//! `Config` (and hash), which is what the golden tests check.

pub mod annotations;
mod backend;
mod client_certs;
mod consumers;
pub mod gateway;
mod ingress;
mod mirror;
mod mtls_auth;
mod passthrough;
mod plugins;
mod tls;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceBackendPort;
use weir_proxy::config::{Config, PluginConfig, PluginValidator};

use crate::problem::{ObjectRef, Problem, Reason};
use crate::store::{Key, Kind, Store};

/// Controller-wide settings the translation depends on.
#[derive(Debug, Clone)]
pub struct Options {
    /// The class this controller serves (`--ingress-class`).
    pub ingress_class: String,
    /// A Service port answering requests no Ingress rule matches (`--default-backend`).
    pub default_backend: Option<(Key, ServiceBackendPort)>,
    /// Only these namespaces, when set (`--watch-namespace`).
    pub watch_namespaces: Option<BTreeSet<String>>,
    /// Serve Ingresses whose IngressClass names ingress-nginx's controller
    /// (`--accept-ingress-nginx-class`).
    pub accept_ingress_nginx_class: bool,
    /// ingress-nginx annotations (`--annotations-prefix`).
    pub nginx: crate::nginx::Options,
    /// The Gateway listener port served on the proxy's plain socket (`--gateway-http-port`).
    pub gateway_http_port: u16,
    /// The Gateway listener port served on the proxy's TLS socket (`--gateway-https-port`).
    pub gateway_https_port: u16,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ingress_class: "weir".into(),
            default_backend: None,
            watch_namespaces: None,
            accept_ingress_nginx_class: false,
            nginx: crate::nginx::Options::default(),
            gateway_http_port: 80,
            gateway_https_port: 443,
        }
    }
}

/// The result of one translation.
#[derive(Debug, Clone, Default)]
pub struct Translation {
    /// The routing table, with its hash.
    pub config: Config,
    /// Everything that could not be served as written, sorted.
    pub problems: Vec<Problem>,
    /// The Ingresses this controller serves (their status is ours to write).
    pub owned_ingresses: Vec<Key>,
    /// Weir resources that were checked, with or without problems (for their conditions).
    pub checked: Vec<ObjectRef>,
    /// The status of every Gateway API object that is Weir's.
    pub gateway_api: gateway::status::Status,
}

impl Translation {
    /// Problems about one object.
    pub fn problems_of<'a>(&'a self, obj: &'a ObjectRef) -> impl Iterator<Item = &'a Problem> + 'a {
        self.problems.iter().filter(move |p| &p.object == obj)
    }
}

/// Translates the store.
pub fn translate(store: &Store, opts: &Options, plugins: &dyn PluginValidator) -> Translation {
    let conversion = crate::nginx::convert(store, &opts.nginx);
    let converted = conversion.store.as_ref().unwrap_or(store);
    let mut t = Translator::new(converted, opts, plugins);
    t.run();
    t.nginx_reports(&conversion.reports);
    let mut out = t.finish();
    if !conversion.generated.is_empty() {
        attribute_generated(&mut out, &conversion.generated);
    }
    out
}

/// Problems about objects the ingress-nginx conversion generated land on the Ingress they
/// come from (the generated objects do not exist in the cluster), which alone is reported.
fn attribute_generated(t: &mut Translation, generated: &BTreeMap<(Kind, Key), Key>) {
    let source = |o: &ObjectRef| -> Option<Key> {
        let ns = o.namespace.as_deref()?;
        generated
            .get(&(o.kind, Key::new(ns, o.name.as_str())))
            .cloned()
    };
    // Objects generated for an Ingress this controller does not serve (another class) are
    // checked too; what is wrong with them is not ours to report.
    let owned: BTreeSet<Key> = t.owned_ingresses.iter().cloned().collect();
    t.problems
        .retain(|p| source(&p.object).is_none_or(|ingress| owned.contains(&ingress)));
    for p in &mut t.problems {
        if let Some(ingress) = source(&p.object) {
            p.field = format!(
                "(generated {} {}) {}",
                p.object.kind.as_str(),
                p.object.name,
                p.field
            );
            p.object = obj(Kind::Ingress, &ingress);
        }
    }
    t.problems.sort();
    t.problems.dedup();
    t.checked.retain(|o| source(o).is_none());
    t.owned_ingresses
        .retain(|k| !generated.contains_key(&(Kind::Ingress, k.clone())));
}

/// Shared state of one translation.
struct Translator<'a> {
    store: &'a Store,
    opts: &'a Options,
    validator: &'a dyn PluginValidator,
    config: Config,
    problems: Vec<Problem>,
    /// EndpointSlices by (namespace, service name), in key order.
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
    /// Backends already built: (namespace, service, port) → the proxy service id, or the
    /// failure already reported on the Service.
    /// (The fourth part names the Ingress whose overrides the service has, if any.)
    backends: BTreeMap<(String, String, i32, String), Result<String, backend::BackendError>>,
    /// Plugin resources already checked: reference → resolved plugin or why not.
    plugin_cache: BTreeMap<plugins::PluginRef, Result<plugins::Resolved, String>>,
    /// Plugins that served Consumers name, by plugin id: the resource and those consumers (at
    /// least one; a Consumer that is left out names nothing here).
    consumer_scopes: BTreeMap<String, (plugins::PluginRef, Vec<Key>)>,
    /// (host, path kind, path) → the Ingress serving it.
    claimed: HashMap<(String, &'static str, String), Key>,
    /// (lower-cased host, path as written) → the first route serving it: what a canary
    /// Ingress joins (as ingress-nginx matches canaries, whatever the path type).
    served_paths: HashMap<(String, String), String>,
    owned: Vec<Key>,
    /// Upstreams by the Service their `spec.targetRef` names ((namespace, service name)), in
    /// key order: the first configures it.
    upstreams_by_target: HashMap<(&'a str, &'a str), Vec<&'a Key>>,
    checked: BTreeSet<ObjectRef>,
    /// Set when a global ClusterPlugin that decides who may pass (authentication, `acl`,
    /// `ip-restriction`) is not accepted: every route answers 503 rather than serve without it.
    global_broken: Option<&'static str>,
    /// The Gateway API status computed on the way.
    gateway_status: gateway::status::Status,
    /// Positions in `config.services` by id, of the first `indexed` services (services are
    /// only appended while Gateway API routes are translated, so the index is extended, never
    /// rebuilt).
    service_index: HashMap<String, usize>,
    /// The Gateways the Gateway API route being translated attached to (the ancestors of the
    /// BackendTLSPolicies its backends meet).
    route_gateways: Vec<Key>,
    /// BackendTLSPolicies already reported.
    checked_policies: BTreeSet<Key>,
    /// The client certificate each Gateway presents to TLS backends (`spec.tls.backend`).
    backend_client_certs: BTreeMap<Key, weir_proxy::config::ClientCertificate>,
    /// BackendTLSPolicies that lose a conflict (computed once, on first use).
    tls_conflicts: Option<BTreeSet<Key>>,
    /// Ingress hosts that ask for client certificates, with their certificate entries.
    protected_hosts: client_certs::ProtectedHosts,
}

impl<'a> Translator<'a> {
    fn new(store: &'a Store, opts: &'a Options, validator: &'a dyn PluginValidator) -> Self {
        let mut slices: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
        for (key, slice) in &store.endpoint_slices {
            let labels = slice.metadata.labels.as_ref();
            if let Some(svc) = labels.and_then(|l| l.get("kubernetes.io/service-name")) {
                slices
                    .entry((key.namespace.as_str(), svc.as_str()))
                    .or_default()
                    .push(slice);
            }
        }
        let mut upstreams_by_target: HashMap<(&str, &str), Vec<&Key>> = HashMap::new();
        for (key, u) in &store.upstreams {
            if let Some(t) = &u.spec.target_ref {
                upstreams_by_target
                    .entry((key.namespace.as_str(), t.name.as_str()))
                    .or_default()
                    .push(key);
            }
        }
        Translator {
            store,
            opts,
            validator,
            config: Config::default(),
            problems: Vec::new(),
            slices,
            backends: BTreeMap::new(),
            plugin_cache: BTreeMap::new(),
            consumer_scopes: BTreeMap::new(),
            claimed: HashMap::new(),
            served_paths: HashMap::new(),
            owned: Vec::new(),
            upstreams_by_target,
            checked: BTreeSet::new(),
            global_broken: None,
            gateway_status: Default::default(),
            service_index: HashMap::new(),
            route_gateways: Vec::new(),
            checked_policies: BTreeSet::new(),
            backend_client_certs: BTreeMap::new(),
            tls_conflicts: None,
            protected_hosts: Default::default(),
        }
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.opts
            .watch_namespaces
            .as_ref()
            .is_none_or(|set| set.contains(namespace))
    }

    fn problem(
        &mut self,
        object: ObjectRef,
        reason: Reason,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.problems.push(Problem {
            object,
            reason,
            field: field.into(),
            message: message.into(),
        });
    }

    /// Reports what is wrong with `object`'s annotations, `parsed` by [`annotations`]: each one
    /// Weir does not know is ignored (`kind` names the object: "an Ingress", …), each one it
    /// could not read has its message followed by `consequence`. Returns the annotations, or
    /// `None` when some were invalid.
    fn read_annotations<T>(
        &mut self,
        object: &ObjectRef,
        kind: &str,
        parsed: annotations::Parsed<T>,
        consequence: &str,
    ) -> Option<T> {
        let (ann, unknown) = parsed;
        for k in unknown {
            self.problem(
                object.clone(),
                Reason::UnknownAnnotation,
                format!("metadata.annotations[{k:?}]"),
                format!("not {kind} annotation Weir knows; ignored"),
            );
        }
        match ann {
            Ok(a) => Some(a),
            Err(errors) => {
                for (k, m) in errors {
                    self.problem(
                        object.clone(),
                        Reason::InvalidAnnotation,
                        format!("metadata.annotations[{k:?}]"),
                        format!("{m}{consequence}"),
                    );
                }
                None
            }
        }
    }

    /// Reports every ingress-nginx annotation of a served Ingress that does not carry over.
    fn nginx_reports(&mut self, reports: &[crate::nginx::Report]) {
        use crate::nginx::Status;
        let owned: BTreeSet<Key> = self.owned.iter().cloned().collect();
        for r in reports {
            if !owned.contains(&r.ingress) {
                continue;
            }
            let me = obj(Kind::Ingress, &r.ingress);
            let consequence = match &r.disabled {
                Some(_) => "; the Ingress's paths answer 503",
                None => "; the Ingress is served without it",
            };
            for o in r.outcomes.iter().filter(|o| !o.status.carries_over()) {
                let reason = match o.status {
                    Status::Invalid => Reason::InvalidAnnotation,
                    _ => Reason::UnsupportedAnnotation,
                };
                let field = format!("metadata.annotations[{:?}]", o.annotation);
                self.problem(
                    me.clone(),
                    reason,
                    field,
                    format!("{}{consequence}", o.note),
                );
            }
        }
    }

    fn run(&mut self) {
        self.check_all_plugins();
        self.global_plugins();
        // Before the routes: they need to know which plugins are consumer-scoped.
        self.consumers();
        self.ingresses();
        self.gateway_api();
        self.controller_default_backend();
        self.check_upstreams();
    }

    fn finish(mut self) -> Translation {
        self.drop_unused_backends();
        self.drop_what_the_proxy_rejects();
        self.problems.sort();
        self.problems.dedup();
        let config = std::mem::take(&mut self.config).with_hash();
        Translation {
            config,
            problems: self.problems,
            owned_ingresses: self.owned,
            checked: self.checked.into_iter().collect(),
            gateway_api: self.gateway_status,
        }
    }
}

impl Translator<'_> {
    /// Services no route or plugin entry uses (the backends of disabled paths, checked only to
    /// report their problems too), and upstreams no service uses, stay out of the table.
    fn drop_unused_backends(&mut self) {
        let c = &mut self.config;
        let used: BTreeSet<String> = c
            .routes
            .iter()
            .flat_map(|r| {
                let canary = r.canary.as_ref().map(|x| x.service.clone());
                let fallback = r.fallback.as_ref().map(|x| x.service.clone());
                let weighted = r.backends.iter().filter_map(|b| b.service.clone());
                let mirrors = r.mirrors.iter().map(|m| m.service.clone());
                r.service
                    .clone()
                    .into_iter()
                    .chain(canary)
                    .chain(fallback)
                    .chain(weighted)
                    .chain(mirrors)
            })
            .chain(c.plugins.iter().filter_map(|p| p.service.clone()))
            .chain(
                c.tls_routes
                    .iter()
                    .flat_map(|t| t.backends.iter().filter_map(|b| b.service.clone())),
            )
            .collect();
        c.services.retain(|s| used.contains(&s.id));
        let used: BTreeSet<String> = c
            .services
            .iter()
            .filter_map(|s| s.upstream.clone())
            .collect();
        c.upstreams.retain(|u| used.contains(&u.id));
    }

    /// A safety net: whatever the proxy's validation still rejects is left out (with the
    /// objects that depend on it) and reported, so one object can never block every push.
    fn drop_what_the_proxy_rejects(&mut self) {
        for _ in 0..8 {
            let Err(errors) = self.config.validate(self.validator) else {
                return;
            };
            for e in errors {
                let id = e.id.clone();
                let c = &mut self.config;
                let routes_of_service = |c: &Config, service: &str| -> Vec<String> {
                    c.routes
                        .iter()
                        .filter(|r| {
                            r.service.as_deref() == Some(service)
                                || r.backends
                                    .iter()
                                    .any(|b| b.service.as_deref() == Some(service))
                        })
                        .map(|r| r.id.clone())
                        .collect()
                };
                // Routes are disabled (503) rather than removed, so nothing falls through.
                let mut disable: Vec<String> = Vec::new();
                match e.entity {
                    "route" => {
                        c.routes.retain(|r| r.id != id);
                        c.plugins.retain(|p| p.route.as_deref() != Some(&id));
                    }
                    "service" => {
                        disable = routes_of_service(c, &id);
                        c.services.retain(|s| s.id != id);
                        c.plugins.retain(|p| p.service.as_deref() != Some(&id));
                    }
                    "upstream" => {
                        let services: Vec<String> = c
                            .services
                            .iter()
                            .filter(|s| s.upstream.as_deref() == Some(&id))
                            .map(|s| s.id.clone())
                            .collect();
                        for s in &services {
                            disable.extend(routes_of_service(c, s));
                        }
                        c.upstreams.retain(|u| u.id != id);
                        c.services.retain(|s| !services.contains(&s.id));
                        c.plugins
                            .retain(|p| !p.service.as_ref().is_some_and(|s| services.contains(s)));
                    }
                    "plugin" => {
                        let mut consumer = None;
                        if let Some(p) = c.plugins.iter().find(|p| p.id == id) {
                            match (&p.route, &p.service) {
                                (Some(r), _) => disable.push(r.clone()),
                                (None, Some(s)) => disable = routes_of_service(c, s),
                                // A consumer is not served without its own plugin.
                                (None, None) => consumer = p.consumer.clone(),
                            }
                        }
                        c.plugins.retain(|p| p.id != id);
                        if let Some(consumer) = consumer {
                            remove_consumer(c, &consumer);
                        }
                    }
                    "consumer" => remove_consumer(c, &id),
                    "certificate" => c.certificates.retain(|x| x.id != id),
                    _ => {}
                }
                for route in disable {
                    if let Some(r) = c.routes.iter_mut().find(|r| r.id == route) {
                        r.service = None;
                    }
                    c.plugins.retain(|p| p.route.as_deref() != Some(&route));
                    c.plugins.push(ingress::disabled_entry(
                        &route,
                        "the proxy rejected part of its configuration",
                    ));
                }
                let object = source_of(e.entity, &id);
                let m = format!("rejected by the proxy: {}; left out", e.message);
                self.problem(
                    object,
                    Reason::RejectedByProxy,
                    format!("{} {id}: {}", e.entity, e.field),
                    m,
                );
            }
        }
    }
}

/// Takes a consumer out of the table with its plugin entries. Its route+consumer and
/// service+consumer entries replaced the route's or service's plain entry (pairing): when the
/// last consumer paired on a route or service goes, the plain entry comes back, so taking a
/// consumer out never takes a plugin off a route for everyone else.
fn remove_consumer(c: &mut Config, consumer: &str) {
    c.consumers.retain(|x| x.id != consumer);
    let (gone, kept): (Vec<PluginConfig>, Vec<PluginConfig>) = std::mem::take(&mut c.plugins)
        .into_iter()
        .partition(|p| p.consumer.as_deref() == Some(consumer));
    c.plugins = kept;
    let suffix = format!("~{consumer}");
    for p in gone {
        if p.route.is_none() && p.service.is_none() {
            continue;
        }
        // `<plugin>@<route or service>~<consumer>` replaced `<plugin>@<route or service>`.
        let Some(plain) = p.id.strip_suffix(&suffix) else {
            continue;
        };
        let others = format!("{plain}~");
        if c.plugins
            .iter()
            .any(|q| q.id == plain || q.id.starts_with(&others))
        {
            continue;
        }
        c.plugins.push(PluginConfig {
            id: plain.to_string(),
            consumer: None,
            ..p
        });
    }
}

/// The object a routing-table entity came from, from the translator's id conventions:
/// routes `ns/ingress/…`, services and upstreams `ns/service:port`, plugins `ns/plugin@scope`
/// or `cluster/plugin[@scope]` (a scope may end in `~ns/consumer`), consumers `ns/consumer`,
/// certificates `ns/secret[#default]`.
fn source_of(entity: &str, id: &str) -> ObjectRef {
    // Routes and their plugin entries of HTTPRoutes and GRPCRoutes:
    // `httproute:ns/name/r0/m0[/plugin]`, `grpcroute:…`.
    for (prefix, kind) in [
        (gateway::HTTP_ROUTE_ID_PREFIX, Kind::HTTPRoute),
        (gateway::GRPC_ROUTE_ID_PREFIX, Kind::GRPCRoute),
        (gateway::TLS_ROUTE_ID_PREFIX, Kind::TLSRoute),
    ] {
        let Some(rest) = id.strip_prefix(prefix) else {
            continue;
        };
        if matches!(entity, "route" | "tls_route") || (entity == "plugin" && !rest.contains('@')) {
            let mut parts = rest.split('/');
            let ns = parts.next().unwrap_or_default().to_string();
            let name = parts.next().unwrap_or_default().to_string();
            return ObjectRef {
                kind,
                namespace: Some(ns),
                name,
            };
        }
    }
    let (first, rest) = id.split_once('/').unwrap_or(("", id));
    let second = rest
        .split(['/', ':', '@', '#'])
        .next()
        .unwrap_or(rest)
        .to_string();
    let (kind, namespace) = match entity {
        "route" => (Kind::Ingress, Some(first.to_string())),
        // (A scoped entry has an `@`; its consumer may well be called `disabled`.)
        "plugin" if id.ends_with("/disabled") && !id.contains('@') => {
            (Kind::Ingress, Some(first.to_string()))
        }
        // Global ClusterPlugin entries carry no scope.
        "plugin" if first == "cluster" => (Kind::ClusterPlugin, None),
        "plugin" if !id.contains('@') => (Kind::Ingress, Some(first.to_string())),
        "plugin" => (Kind::Plugin, Some(first.to_string())),
        "certificate" => (Kind::Secret, Some(first.to_string())),
        "consumer" => (Kind::Consumer, Some(first.to_string())),
        _ => (Kind::Service, Some(first.to_string())),
    };
    ObjectRef {
        kind,
        namespace,
        name: second,
    }
}

/// A Secret key as UTF-8 text: `stringData` (what a manifest folder holds before an API
/// server folds it into `data`, overriding the same key there), else `data`.
fn secret_text(secret: &k8s_openapi::api::core::v1::Secret, key: &str) -> Option<String> {
    match secret.string_data.as_ref().and_then(|d| d.get(key)) {
        Some(text) => Some(text.clone()),
        None => String::from_utf8(secret.data.as_ref()?.get(key)?.0.clone()).ok(),
    }
}

/// A PEM file of tests/fixtures/tls, indented as a YAML block scalar's lines (4 spaces).
#[cfg(test)]
pub(crate) fn fixture_pem(file: &str) -> String {
    let path = format!(
        "{}/../tests/fixtures/tls/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().map(|l| format!("    {l}\n")).collect()
}

/// A `kubernetes.io/tls` Secret `namespace/name` holding the a.example.test fixture pair.
#[cfg(test)]
pub(crate) fn fixture_tls_secret(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        fixture_pem("a.example.test.crt"),
        fixture_pem("a.example.test.key")
    )
}

/// An object reference for problems.
fn obj(kind: Kind, key: &Key) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: Some(key.namespace.clone()),
        name: key.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn problems_of_generated_objects_land_on_their_served_ingress_only() {
        let problem = |kind, name: &str| Problem {
            object: ObjectRef {
                kind,
                namespace: Some("shop".into()),
                name: name.into(),
            },
            reason: Reason::InvalidPluginConfig,
            field: "spec.config".into(),
            message: "bad".into(),
        };
        let mut t = Translation {
            problems: vec![
                problem(Kind::Plugin, "ours-nginx-cors"),
                problem(Kind::Plugin, "theirs-nginx-cors"),
                problem(Kind::Plugin, "hand-written"),
            ],
            owned_ingresses: vec![Key::new("shop", "ours")],
            ..Translation::default()
        };
        let generated = BTreeMap::from([
            (
                (Kind::Plugin, Key::new("shop", "ours-nginx-cors")),
                Key::new("shop", "ours"),
            ),
            (
                (Kind::Plugin, Key::new("shop", "theirs-nginx-cors")),
                Key::new("shop", "theirs"),
            ),
        ]);
        attribute_generated(&mut t, &generated);
        let seen: Vec<String> = t.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            seen,
            [
                "Ingress shop/ours: (generated Plugin ours-nginx-cors) spec.config: InvalidPluginConfig: bad",
                "Plugin shop/hand-written: spec.config: InvalidPluginConfig: bad",
            ]
        );
    }

    #[test]
    fn sources_of_entity_ids() {
        let cases = [
            (
                "route",
                "shop/web/r0/p0",
                Kind::Ingress,
                Some("shop"),
                "web",
            ),
            (
                "service",
                "shop/api:8080",
                Kind::Service,
                Some("shop"),
                "api",
            ),
            (
                "upstream",
                "shop/api:http",
                Kind::Service,
                Some("shop"),
                "api",
            ),
            (
                "plugin",
                "shop/auth@shop/web/r0/p0",
                Kind::Plugin,
                Some("shop"),
                "auth",
            ),
            (
                "plugin",
                "cluster/cors@shop/api:80",
                Kind::ClusterPlugin,
                None,
                "cors",
            ),
            ("plugin", "cluster/cors", Kind::ClusterPlugin, None, "cors"),
            (
                "plugin",
                "shop/web/r0/p0/disabled",
                Kind::Ingress,
                Some("shop"),
                "web",
            ),
            ("certificate", "shop/tls", Kind::Secret, Some("shop"), "tls"),
            (
                "plugin",
                "shop/gold@~shop/alice",
                Kind::Plugin,
                Some("shop"),
                "gold",
            ),
            (
                "plugin",
                "cluster/gold@shop/web/r0/p0~shop/alice",
                Kind::ClusterPlugin,
                None,
                "gold",
            ),
            (
                "plugin",
                "shop/tag@~shop/disabled",
                Kind::Plugin,
                Some("shop"),
                "tag",
            ),
            (
                "consumer",
                "shop/alice",
                Kind::Consumer,
                Some("shop"),
                "alice",
            ),
            (
                "certificate",
                "shop/tls#default",
                Kind::Secret,
                Some("shop"),
                "tls",
            ),
        ];
        for (entity, id, kind, namespace, name) in cases {
            let o = source_of(entity, id);
            assert_eq!(
                (o.kind, o.namespace.as_deref(), o.name.as_str()),
                (kind, namespace, name),
                "{entity} {id}"
            );
        }
    }

    /// Accepts each plugin config the first time, rejects it afterwards: stands in for a gap
    /// between the translator's checks and the proxy's validation.
    struct Fickle(Cell<u32>);
    impl PluginValidator for Fickle {
        fn check(&self, _name: &str, config: &serde_json::Value) -> Result<(), Option<String>> {
            if config.get("status_code").is_some() {
                return Ok(()); // the 503 entries the safety net adds
            }
            self.0.set(self.0.get() + 1);
            if self.0.get() == 1 {
                Ok(())
            } else {
                Err(Some("changed its mind".into()))
            }
        }
    }

    #[test]
    fn what_the_proxy_rejects_disables_the_route_instead_of_opening_it() {
        let yaml = "apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {name: auth, namespace: default}\nspec: {plugin: request-termination}\n---\n\
            apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, namespace: default, annotations: {weir.dev/plugins: auth}}\n\
            spec:\n  ingressClassName: weir\n  rules:\n  - http:\n      paths:\n      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}\n---\n\
            apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: {ports: [{port: 80}]}\n";
        let store = Store::from_manifests(yaml);
        let t = translate(&store, &Options::default(), &Fickle(Cell::new(0)));
        let route = t
            .config
            .routes
            .iter()
            .find(|r| r.id == "default/web/r0/p0")
            .expect("route kept");
        assert!(
            route.service.is_none(),
            "disabled, not served without its plugin"
        );
        assert!(t
            .config
            .plugins
            .iter()
            .any(|p| p.id == "default/web/r0/p0/disabled"));
        let p = t
            .problems
            .iter()
            .find(|p| p.reason == Reason::RejectedByProxy)
            .expect("reported");
        assert_eq!(p.object.to_string(), "Plugin default/auth");
    }

    #[test]
    fn a_consumer_is_not_served_without_a_plugin_the_proxy_rejects() {
        let yaml = "apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {name: tag, namespace: default}\nspec: {plugin: correlation-id}\n---\n\
            apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: alice, namespace: default, annotations: {weir.dev/plugins: tag}}\nspec: {}\n---\n\
            apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: bob, namespace: default}\nspec: {}\n";
        let store = Store::from_manifests(yaml);
        let t = translate(&store, &Options::default(), &Fickle(Cell::new(0)));
        let ids: Vec<&str> = t.config.consumers.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["default/bob"], "alice is left out with her plugin");
        assert!(t.config.plugins.is_empty());
        let p = t
            .problems
            .iter()
            .find(|p| p.reason == Reason::RejectedByProxy)
            .expect("reported");
        assert_eq!(p.object.to_string(), "Plugin default/tag");
        assert_eq!(p.field, "plugin default/tag@~default/alice: config");
    }

    /// Rejects every `name` entry after the translator's own check of the resource.
    struct RejectsLater {
        name: &'static str,
        seen: Cell<u32>,
        registry: weir_proxy::Registry,
    }
    impl PluginValidator for RejectsLater {
        fn check(&self, name: &str, config: &serde_json::Value) -> Result<(), Option<String>> {
            if name == self.name {
                self.seen.set(self.seen.get() + 1);
                if self.seen.get() > 1 {
                    return Err(Some("changed its mind".into()));
                }
            }
            self.registry.check(name, config)
        }
    }

    #[test]
    fn a_consumer_the_proxy_rejects_gives_the_routes_their_plugin_back() {
        let base = "apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {name: vip, namespace: shop}\nspec: {plugin: rate-limiting, config: {minute: 10, policy: local}}\n---\n\
            apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {name: tag, namespace: shop}\nspec: {plugin: correlation-id}\n---\n\
            apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {name: svc-vip, namespace: shop}\nspec: {plugin: request-size-limiting, config: {allowed_payload_size: 1}}\n---\n\
            apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: alice, namespace: shop, annotations: {weir.dev/plugins: 'vip, tag, svc-vip'}}\nspec: {}\n---\n\
            apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, namespace: shop, annotations: {weir.dev/plugins: vip}}\n\
            spec:\n  ingressClassName: weir\n  rules:\n  - http:\n      paths:\n      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}\n---\n\
            apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop, annotations: {weir.dev/plugins: svc-vip}}\nspec: {ports: [{port: 80}]}\n---\n";
        let bob = "apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: bob, namespace: shop, annotations: {weir.dev/plugins: vip}}\nspec: {}\n";
        let run = |yaml: &str| {
            let store = Store::from_manifests(yaml);
            let v = RejectsLater {
                name: "correlation-id",
                seen: Cell::new(0),
                registry: weir_proxy::Registry::builtin(),
            };
            let t = translate(&store, &Options::default(), &v);
            let mut ids: Vec<String> = t.config.plugins.iter().map(|p| p.id.clone()).collect();
            ids.sort();
            let consumers: Vec<String> = t.config.consumers.iter().map(|c| c.id.clone()).collect();
            (t, ids, consumers)
        };

        // Alice's own "tag" is rejected: she goes, with her route+consumer and
        // service+consumer entries, and the route and the Service get their plain entries back.
        let (t, ids, consumers) = run(base);
        assert!(consumers.is_empty());
        assert_eq!(ids, ["shop/svc-vip@shop/web:80", "shop/vip@shop/web/r0/p0"]);
        let route = &t.config.routes[0];
        assert_eq!(
            route.service.as_deref(),
            Some("shop/web:80"),
            "still served"
        );
        let p = t
            .problems
            .iter()
            .find(|p| p.reason == Reason::RejectedByProxy)
            .expect("reported");
        assert_eq!(p.field, "plugin shop/tag@~shop/alice: config");
        let restored = t
            .config
            .plugins
            .iter()
            .find(|p| p.id == "shop/vip@shop/web/r0/p0")
            .unwrap();
        assert_eq!(
            (
                restored.route.as_deref(),
                restored.consumer.as_deref(),
                restored.namespace.as_deref()
            ),
            (Some("shop/web/r0/p0"), None, Some("shop"))
        );

        // Bob stays paired with the route: no plain entry while a paired consumer is left.
        let (_, ids, consumers) = run(&format!("{base}{bob}"));
        assert_eq!(consumers, ["shop/bob"]);
        assert_eq!(
            ids,
            [
                "shop/svc-vip@shop/web:80",
                "shop/vip@shop/web/r0/p0~shop/bob"
            ]
        );
    }
}
