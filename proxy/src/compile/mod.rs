//! Config → runtime: everything a request needs, resolved once per routing table.
//!
//! The runtime is immutable; the server swaps the whole of it atomically, so a request sees
//! either the old table or the new one, never a mix.

pub mod backends;
pub mod canary;
pub mod fallback;
pub mod mirror;
pub mod passthrough;
pub mod tls_hosts;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use http::{HeaderValue, StatusCode};

use crate::balancer::hash_on::HashInput;
use crate::balancer::{self, Balancer, Load, Target};
use crate::config::{
    parse_target, Algorithm, Config, ConfigError, PluginConfig, ProbeKind, ResponseRate, RetryOn,
    Satisfy, Service, Settings, Upstream, UpstreamProtocol,
};
use crate::consumers::Directory;
use crate::health::{probe::Probe, Checks, Kept, TargetHealth, HEALTH};
use crate::pipeline::RouteChain;
use crate::plugins::{PluginInstance, Registry, Staged};
use crate::router::Router;
use crate::tls::CertStore;
use crate::upstream::{tls_error, tls_settings, PoolKey, TlsClient, TlsSettings};
use backends::Backends;
use canary::CompiledCanary;
use fallback::CompiledFallback;
use mirror::CompiledMirror;
use passthrough::Passthrough;
use tls_hosts::TlsHosts;

/// A compiled routing table.
pub struct Runtime {
    /// The table's content hash.
    pub hash: Arc<str>,
    /// The table as it was received (for `GET /config`).
    pub config: Arc<Config>,
    /// Host/path matching.
    pub router: Arc<Router>,
    /// Routes, in the order of `config.routes` (the router's indices).
    pub routes: Arc<[CompiledRoute]>,
    /// Services, referenced by index from routes. Each is shared with the next table when
    /// neither it nor its upstream changed.
    pub services: Vec<Arc<CompiledService>>,
    /// Global plugins (rewrite phase, and requests that match no route).
    pub global: Arc<[PluginInstance]>,
    /// Table-wide switches.
    pub settings: Settings,
    /// TLS certificates by server name.
    pub certs: Arc<CertStore>,
    /// The plugin instances of this table (handed to the registry when it goes into service).
    pub plugins: Arc<Staged>,
    /// Consumers and credentials, indexed for the authentication plugins.
    pub consumers: Arc<Directory>,
    /// TLS passthrough routes by server name.
    pub passthrough: Arc<Passthrough>,
}

/// A route, ready for requests.
pub struct CompiledRoute {
    /// Route id.
    pub id: Arc<str>,
    /// Remove the matched prefix before forwarding.
    pub strip_path: bool,
    /// Forward the client's Host header.
    pub preserve_host: bool,
    /// Status for redirects to https.
    pub https_redirect: StatusCode,
    /// Index into [`Runtime::services`].
    pub service: Option<usize>,
    /// The route's plugins.
    pub chain: RouteChain,
    /// Fixed `Host` header for the upstream.
    pub host_header: Option<HeaderValue>,
    /// Upstream path template and the route's regex rules for its `$n` captures.
    pub rewrite: Option<(String, Vec<regex::Regex>)>,
    /// `Upgrade` protocols allowed besides `websocket`, lower-cased.
    pub upgrade_protocols: Vec<String>,
    /// The canary that may serve the route's requests instead of `service`. `chain` runs
    /// whichever serves: it is resolved for `service` only (plugins scoped to `service` run for
    /// the canary's requests too, plugins scoped only to the canary's service do not).
    pub canary: Option<Box<CompiledCanary>>,
    /// Where requests go when `service` has no target to try, and who answers instead of
    /// the upstream for some statuses.
    pub fallback: Option<Box<CompiledFallback>>,
    /// Whether the route's requests are written to the access log.
    pub access_log: bool,
    /// Services sharing the route's requests by weight, each with its plugin chain (instead
    /// of `service` and `chain`).
    pub backends: Option<Box<Backends>>,
    /// `X-Forwarded-Prefix` for the upstream (wins over the stripped prefix).
    pub forwarded_prefix: Option<Box<str>>,
    /// Services that get a copy of the route's requests.
    pub mirrors: Box<[CompiledMirror]>,
    /// The budget for the answer's head, over every try.
    pub timeout: Option<Duration>,
    /// Answered when no try got an answer from the upstream.
    pub upstream_error: StatusCode,
    /// Over TLS, the hosts served and the client-certificate checks they ask for; `None`,
    /// any connection.
    pub tls_hosts: Option<Box<TlsHosts>>,
    /// The pace of the answers' bodies.
    pub response_rate: Option<ResponseRate>,
}

/// A service, ready for requests.
pub struct CompiledService {
    /// Service id.
    pub id: Arc<str>,
    /// Path prefix prepended upstream.
    pub path: Option<String>,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Response-head and between-reads timeout.
    pub read_timeout: Duration,
    /// Between-writes timeout for the request body.
    pub write_timeout: Duration,
    /// Tries after the first.
    pub retries: u32,
    /// What is retried besides connection failures.
    pub retry_on: RetryOn,
    /// Speak HTTP/2 (with prior knowledge, or by ALPN over TLS).
    pub h2: bool,
    /// TLS towards the targets.
    pub tls: Option<Arc<TlsClient>>,
    /// The upstream (or, without one, the service) whose targets these are: what health and
    /// load are kept under.
    pub upstream: Arc<str>,
    /// The targets and the algorithm that picks among them.
    pub balancer: Balancer,
    /// The pool key of each target, by the balancer's index.
    pub keys: Vec<PoolKey>,
    /// The upstream's health checks; `None` when nothing is checked.
    pub checks: Option<Arc<Checks>>,
    /// Each target's health, by the balancer's index (empty without checks).
    pub health: Vec<Arc<TargetHealth>>,
    /// The input of consistent hashing.
    pub hash: Option<HashInput>,
    /// TLS for `type: https` probes: the service's settings, offering only HTTP/1.1.
    pub probe_tls: Option<Arc<TlsClient>>,
    /// The algorithm weighs requests in flight and latency (least-connections, peak-EWMA):
    /// only then are they counted.
    pub counts_load: bool,
    /// Whether each target has a non-zero weight, by the balancer's index (empty without
    /// checks, where only [`Balancer::is_empty`] matters).
    pub weighted: Box<[bool]>,
    /// The gate of copies mirrored to this service (shared with its earlier compilations).
    pub mirror_gate: Arc<mirror::MirrorGate>,
}

impl CompiledService {
    /// Whether the balancer could pick a target now: one with a non-zero weight that is
    /// healthy, or any in panic mode. (A route's fallback takes the request otherwise.)
    pub fn has_target_to_try(&self) -> bool {
        if self.balancer.is_empty() {
            return false;
        }
        match &self.checks {
            Some(c) if !c.panic => self
                .health
                .iter()
                .zip(self.weighted.iter())
                .any(|(h, weighted)| *weighted && c.is_healthy(h)),
            _ => true,
        }
    }
}

impl Runtime {
    /// An empty table: every request gets 404.
    pub fn empty() -> Runtime {
        let config = Config::default().with_hash();
        Runtime {
            hash: config.hash.clone().unwrap_or_default().into(),
            config: Arc::new(config),
            router: Arc::default(),
            routes: Arc::from(Vec::new()),
            services: Vec::new(),
            global: Arc::from(Vec::new()),
            settings: Settings::default(),
            certs: Arc::default(),
            plugins: Arc::default(),
            consumers: Arc::default(),
            passthrough: Arc::default(),
        }
    }

    /// The table that follows `current` for `config`. When only upstreams changed (an
    /// endpoint change), routes, plugins, consumers and certificates are `current`'s, and only
    /// the services whose upstream changed are built again: the targets' health and load, and
    /// their pooled connections, carry over. Anything else is a full [`Runtime::compile`].
    pub fn next(
        current: &Runtime,
        config: Config,
        registry: &Registry,
    ) -> Result<Runtime, Vec<ConfigError>> {
        if !config.differs_only_in_upstreams(&current.config) {
            return Runtime::compile(config, registry);
        }
        config.validate_upstreams()?;
        let config = config.with_hash();
        let upstreams: HashMap<&str, &Upstream> = config
            .upstreams
            .iter()
            .map(|u| (u.id.as_str(), u))
            .collect();
        let old: HashMap<&str, &Upstream> = current
            .config
            .upstreams
            .iter()
            .map(|u| (u.id.as_str(), u))
            .collect();
        let mut tls_clients = TlsClients::default();
        let mut services = Vec::with_capacity(config.services.len());
        for (s, before) in config.services.iter().zip(&current.services) {
            let unchanged = match s.upstream.as_deref() {
                Some(u) => old.get(u) == upstreams.get(u),
                None => true,
            };
            if unchanged {
                services.push(before.clone());
                continue;
            }
            let service = compile_service(s, &upstreams, &mut tls_clients).map_err(|(f, m)| {
                vec![ConfigError {
                    entity: "service",
                    id: s.id.clone(),
                    field: f,
                    message: m,
                }]
            })?;
            services.push(Arc::new(service));
        }
        Ok(Runtime {
            hash: config.hash.clone().unwrap_or_default().into(),
            config: Arc::new(config),
            router: current.router.clone(),
            routes: current.routes.clone(),
            services,
            global: current.global.clone(),
            settings: current.settings.clone(),
            certs: current.certs.clone(),
            plugins: current.plugins.clone(),
            consumers: current.consumers.clone(),
            passthrough: current.passthrough.clone(),
        })
    }

    /// Validates and compiles a table.
    pub fn compile(config: Config, registry: &Registry) -> Result<Runtime, Vec<ConfigError>> {
        config.validate(registry)?;
        let config = config.with_hash();
        let internal = |entity: &'static str, id: &str, field: &str, message: String| {
            vec![ConfigError {
                entity,
                id: id.to_string(),
                field: field.to_string(),
                message,
            }]
        };

        let certs = CertStore::new(&config.certificates).map_err(|(i, field, m)| {
            internal("certificate", &config.certificates[i].id, field, m)
        })?;
        let router = Router::new(&config.routes, config.settings.merge_slashes)
            .map_err(|e| internal("config", "", "routes", e.to_string()))?;

        let mut staged = Staged::default();
        let mut instances: Vec<(&PluginConfig, PluginInstance)> = Vec::new();
        for p in config.plugins.iter().filter(|p| p.enabled) {
            let inst = registry
                .instantiate(p, &mut staged)
                .map_err(|m| internal("plugin", &p.id, "config", m))?;
            instances.push((p, inst));
        }

        let upstreams: HashMap<&str, &Upstream> = config
            .upstreams
            .iter()
            .map(|u| (u.id.as_str(), u))
            .collect();
        let mut services = Vec::with_capacity(config.services.len());
        let mut service_index = HashMap::new();
        let mut tls_clients = TlsClients::default();
        for (i, s) in config.services.iter().enumerate() {
            service_index.insert(s.id.as_str(), i);
            let service = compile_service(s, &upstreams, &mut tls_clients)
                .map_err(|(field, m)| internal("service", &s.id, &field, m))?;
            services.push(Arc::new(service));
        }
        let passthrough = Arc::new(Passthrough::new(&config.tls_routes, &service_index));

        // Each consumer's own plugin entries: a route gets a list for a consumer only when one
        // of them applies to it (otherwise the consumer runs the route's list), so a table with
        // many consumers and routes stays small.
        let mut consumer_plugins: BTreeMap<&str, Vec<&PluginConfig>> = BTreeMap::new();
        for (p, _) in &instances {
            if let Some(c) = p.consumer.as_deref() {
                consumer_plugins.entry(c).or_default().push(p);
            }
        }
        let candidates = Candidates::new(&instances);
        let routes: Arc<[CompiledRoute]> = config
            .routes
            .iter()
            .map(|r| {
                let service = match r.service.as_deref() {
                    Some(s) => Some(*service_index.get(s).ok_or_else(|| {
                        internal(
                            "route",
                            &r.id,
                            "service",
                            format!("no service with id {s:?}"),
                        )
                    })?),
                    None => None,
                };
                let index = |field: &str, s: &str| {
                    service_index.get(s).copied().ok_or_else(|| {
                        internal("route", &r.id, field, format!("no service with id {s:?}"))
                    })
                };
                let canary = match r.canary.as_deref() {
                    Some(c) => {
                        let i = index("canary.service", &c.service)?;
                        let compiled = CompiledCanary::new(c, i)
                            .map_err(|(f, m)| internal("route", &r.id, f, m))?;
                        Some(Box::new(compiled))
                    }
                    None => None,
                };
                let fallback = match r.fallback.as_deref() {
                    Some(f) => {
                        let i = index("fallback.service", &f.service)?;
                        let compiled = CompiledFallback::new(f, i)
                            .map_err(|(f, m)| internal("route", &r.id, &f, m))?;
                        Some(Box::new(compiled))
                    }
                    None => None,
                };
                let https_redirect =
                    StatusCode::from_u16(r.https_redirect_status_code).map_err(|e| {
                        internal("route", &r.id, "https_redirect_status_code", e.to_string())
                    })?;
                // The plugins of the route with those of `service`.
                let chain_for = |service: Option<&str>| {
                    let scope = Scope {
                        route: &r.id,
                        service,
                        consumer: None,
                        namespace: r.namespace.as_deref(),
                    };
                    let base = resolve_chain(&instances, &candidates, &scope);
                    let by_consumer = consumer_plugins
                        .iter()
                        .filter_map(|(c, own)| {
                            let scope = Scope {
                                consumer: Some(c),
                                ..scope
                            };
                            own.iter()
                                .any(|p| specificity(p, &scope).is_some())
                                .then(|| {
                                    (
                                        Arc::from(*c),
                                        resolve_chain(&instances, &candidates, &scope),
                                    )
                                })
                        })
                        .collect();
                    RouteChain {
                        base,
                        by_consumer,
                        satisfy_any: r.satisfy == Satisfy::Any,
                    }
                };
                let backends = if r.backends.is_empty() {
                    None
                } else {
                    let mut list = Vec::with_capacity(r.backends.len());
                    for (i, b) in r.backends.iter().enumerate() {
                        let service = match b.service.as_deref() {
                            Some(s) => Some(index(&format!("backends[{i}].service"), s)?),
                            None => None,
                        };
                        list.push((service, chain_for(b.service.as_deref()), b.weight));
                    }
                    // No weight at all: the route answers 500, as with no usable backend.
                    Some(Box::new(Backends::new(list).unwrap_or_else(|| {
                        Backends::new(vec![(None, RouteChain::default(), 1)])
                            .expect("one weighted entry")
                    })))
                };
                let mirrors = r
                    .mirrors
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        Ok::<_, Vec<ConfigError>>(CompiledMirror {
                            service: index(&format!("mirrors[{i}].service"), &m.service)?,
                            per_million: (m.percent * 10_000.0).round() as u32,
                            // Checked by validation.
                            host: m
                                .host
                                .as_deref()
                                .and_then(|h| HeaderValue::from_str(h).ok()),
                            body: m.body,
                        })
                    })
                    .collect::<Result<Box<[_]>, _>>()?;
                let upstream_error = r
                    .upstream_error_status
                    .and_then(|s| StatusCode::from_u16(s).ok())
                    .unwrap_or(StatusCode::BAD_GATEWAY);
                Ok(CompiledRoute {
                    tls_hosts: TlsHosts::new(&r.tls_hosts, r.deep_wildcards, &certs),
                    response_rate: r.response_rate,
                    mirrors,
                    upstream_error,
                    timeout: r.timeout.map(Duration::from_millis),
                    id: r.id.as_str().into(),
                    strip_path: r.strip_path,
                    preserve_host: r.preserve_host,
                    https_redirect,
                    service,
                    canary,
                    fallback,
                    access_log: r.access_log,
                    forwarded_prefix: r.forwarded_prefix.as_deref().map(Box::from),
                    chain: chain_for(r.service.as_deref()),
                    backends,
                    upgrade_protocols: r
                        .upgrade_protocols
                        .iter()
                        .map(|t| t.to_ascii_lowercase())
                        .collect(),
                    host_header: r
                        .host_header
                        .as_deref()
                        .and_then(|h| HeaderValue::from_str(h).ok()),
                    rewrite: r.rewrite.as_ref().map(|rw| {
                        let regexes = r
                            .paths
                            .iter()
                            .filter(|p| p.kind == crate::config::PathKind::Regex)
                            .filter_map(|p| crate::router::anchored_regex(&p.path).ok())
                            .collect();
                        (rw.clone(), regexes)
                    }),
                })
            })
            .collect::<Result<_, Vec<ConfigError>>>()?;

        let authenticates = instances.iter().any(|(_, i)| i.plugin.authenticates());
        let consumers = Arc::new(Directory::new(&config.consumers, authenticates));
        let global = sorted(
            instances
                .iter()
                .filter(|(p, _)| p.is_global())
                .map(|(_, i)| i.clone())
                .collect(),
        );
        Ok(Runtime {
            hash: config.hash.clone().unwrap_or_default().into(),
            settings: config.settings.clone(),
            config: Arc::new(config),
            router: Arc::new(router),
            routes,
            services,
            global,
            certs: Arc::new(certs),
            plugins: Arc::new(staged),
            consumers,
            passthrough,
        })
    }
}

/// Per-target load statistics, kept across tables like health.
static LOAD: Kept<Load> = Kept::new();

/// TLS clients by their settings: services with the same settings share one (and its
/// parsed certificates).
#[derive(Default)]
struct TlsClients(HashMap<TlsSettings, Arc<TlsClient>>);

impl TlsClients {
    /// The client for a service's `tls` (defaults without one), offering h2 or HTTP/1.1.
    fn get(&mut self, s: &Service, h2: bool) -> Result<Arc<TlsClient>, (String, String)> {
        let settings = tls_settings(s, h2);
        if let Some(c) = self.0.get(&settings) {
            return Ok(c.clone());
        }
        let client = Arc::new(TlsClient::new(settings.clone()).map_err(|m| tls_error(&m))?);
        self.0.insert(settings, client.clone());
        Ok(client)
    }
}

/// A service: its targets (from its upstream, or its own host and port), balancer, health
/// checks and TLS client. Errors name the field.
fn compile_service(
    s: &Service,
    upstreams: &HashMap<&str, &Upstream>,
    tls_clients: &mut TlsClients,
) -> Result<CompiledService, (String, String)> {
    let upstream = match s.upstream.as_deref() {
        Some(u) => Some(
            *upstreams
                .get(u)
                .ok_or_else(|| ("upstream".to_string(), format!("no upstream with id {u:?}")))?,
        ),
        None => None,
    };
    let owner: Arc<str> = match upstream {
        Some(u) => u.id.as_str().into(),
        None => s.id.as_str().into(),
    };
    let algorithm = match upstream.map(|u| u.algorithm) {
        None | Some(Algorithm::RoundRobin) => balancer::Algorithm::RoundRobin,
        Some(Algorithm::LeastConnections) => balancer::Algorithm::LeastConnections,
        Some(Algorithm::ConsistentHashing) => {
            match upstream.and_then(|u| u.hash_on.as_ref()?.subset_size) {
                Some(size) => balancer::Algorithm::HashSubsets(size),
                None => balancer::Algorithm::ConsistentHashing,
            }
        }
        Some(Algorithm::PeakEwma) => balancer::Algorithm::PeakEwma,
    };
    let counts_load = matches!(
        algorithm,
        balancer::Algorithm::LeastConnections | balancer::Algorithm::PeakEwma
    );
    let mut targets: Vec<(Target, u32)> = Vec::new();
    match (upstream, &s.host) {
        (Some(u), _) => {
            for t in &u.targets {
                let (host, port) =
                    parse_target(&t.target).map_err(|m| ("upstream".to_string(), m))?;
                targets.push((target(&owner, host, port, counts_load), t.weight));
            }
        }
        (None, Some(h)) => {
            let port = s
                .port
                .ok_or(("port".to_string(), "required with `host`".to_string()))?;
            targets.push((target(&owner, h, port, counts_load), 1));
        }
        (None, None) => {}
    }
    let h2 = matches!(
        s.protocol,
        UpstreamProtocol::H2c | UpstreamProtocol::Grpc | UpstreamProtocol::Grpcs
    ) || s
        .tls
        .as_ref()
        .is_some_and(|t| t.alpn == Some(crate::config::Alpn::H2));
    let secure = matches!(
        s.protocol,
        UpstreamProtocol::Https | UpstreamProtocol::Grpcs
    );
    let tls = secure.then(|| tls_clients.get(s, h2)).transpose()?;
    let wants_https_probe = upstream
        .and_then(|u| u.healthchecks.active.as_ref())
        .is_some_and(|a| a.kind == ProbeKind::Https);
    let probe_tls = (wants_https_probe && tls.is_none())
        .then(|| tls_clients.get(s, false))
        .transpose()?;
    let keys = targets
        .iter()
        .map(|(t, _)| PoolKey {
            target: t.addr.clone(),
            h2,
            tls: tls.clone(),
        })
        .collect();
    let checks = upstream.and_then(|u| Checks::new(&u.healthchecks));
    let weighted = match &checks {
        Some(_) => targets.iter().map(|(_, w)| *w > 0).collect(),
        None => Box::default(),
    };
    let health = match &checks {
        Some(_) => targets
            .iter()
            .map(|(t, _)| {
                HEALTH.get(&owner, &t.addr, || {
                    TargetHealth::new(owner.clone(), t.addr.clone())
                })
            })
            .collect(),
        None => Vec::new(),
    };
    Ok(CompiledService {
        id: s.id.as_str().into(),
        path: s.path.clone(),
        connect_timeout: Duration::from_millis(s.connect_timeout),
        read_timeout: Duration::from_millis(s.read_timeout),
        write_timeout: Duration::from_millis(s.write_timeout),
        retries: s.retries,
        retry_on: s.retry_on.clone(),
        h2,
        tls,
        upstream: owner,
        balancer: Balancer::new(targets, algorithm),
        keys,
        checks,
        health,
        hash: upstream
            .and_then(|u| u.hash_on.as_deref())
            .map(HashInput::new),
        probe_tls,
        counts_load,
        weighted,
        mirror_gate: mirror::gate(&s.id),
    })
}

impl Runtime {
    /// The active health probes of this table: one per target of each upstream with active
    /// checks (once, however many services share the upstream).
    pub fn probes(&self) -> Vec<Probe> {
        let mut seen = std::collections::HashSet::new();
        let mut probes = Vec::new();
        for s in &self.services {
            let (Some(checks), Some(active)) =
                (&s.checks, s.checks.as_ref().and_then(|c| c.active.as_ref()))
            else {
                continue;
            };
            for (i, health) in s.health.iter().enumerate() {
                if !seen.insert((s.upstream.clone(), health.target.clone())) {
                    continue;
                }
                // A TLS service is probed as its traffic goes (TLS, and HTTP/2 where it
                // speaks it); `type: https` asks for TLS on a plain service too.
                let (tls, h2) = match (&s.tls, active.kind) {
                    (Some(tls), _) => (Some(tls.clone()), s.h2),
                    (None, ProbeKind::Https) => (s.probe_tls.clone(), false),
                    (None, ProbeKind::Http) => (None, s.h2),
                };
                let host = match &active.host {
                    Some(h) => HeaderValue::from_str(h).ok(),
                    None => None,
                }
                .unwrap_or_else(|| s.balancer.target(i).host_header.clone());
                probes.push(Probe {
                    checks: checks.clone(),
                    health: health.clone(),
                    key: PoolKey {
                        target: health.target.clone(),
                        h2,
                        tls,
                    },
                    host,
                });
            }
        }
        probes
    }
}

/// A target; its load statistics are kept across tables when the algorithm weighs them, and
/// shared (never read) otherwise: a 10,000-service table then makes no per-target state.
fn target(owner: &Arc<str>, host: &str, port: u16, counts_load: bool) -> Target {
    static UNCOUNTED: LazyLock<Arc<Load>> = LazyLock::new(Arc::default);
    let (addr, host_header) = crate::config::target_address(host, port);
    Target {
        load: if counts_load {
            LOAD.get(owner, &addr, Load::default)
        } else {
            UNCOUNTED.clone()
        },
        addr,
        host_header,
    }
}

/// Forgets the kept per-target state of targets no table holds any more.
pub fn prune_kept_state() {
    LOAD.prune();
    HEALTH.prune();
}

#[derive(Clone, Copy)]
struct Scope<'a> {
    route: &'a str,
    service: Option<&'a str>,
    consumer: Option<&'a str>,
    /// The route's namespace.
    namespace: Option<&'a str>,
}

/// How specific a plugin's scope is for a request in `scope`, or `None` if it does not apply.
///
/// Most specific wins, one instance per plugin name: route+service+consumer, route+consumer,
/// service+consumer, route+service, consumer, route, service, global.
fn specificity(p: &PluginConfig, scope: &Scope<'_>) -> Option<u8> {
    let route = match &p.route {
        Some(r) if r == scope.route => true,
        Some(_) => return None,
        None => false,
    };
    let service = match &p.service {
        Some(s) if Some(s.as_str()) == scope.service => true,
        Some(_) => return None,
        None => false,
    };
    let consumer = match &p.consumer {
        // A consumer's plugins from one namespace never override another namespace's routes.
        Some(_) if !crate::config::namespaces_meet(p.namespace.as_deref(), scope.namespace) => {
            return None
        }
        Some(c) if Some(c.as_str()) == scope.consumer => true,
        Some(_) => return None,
        None => false,
    };
    Some(match (consumer, route, service) {
        (true, true, true) => 8,
        (true, true, false) => 7,
        (true, false, true) => 6,
        (false, true, true) => 5,
        (true, false, false) => 4,
        (false, true, false) => 3,
        (false, false, true) => 2,
        (false, false, false) => 1,
    })
}

/// Which plugin entries may apply to a route, found by its id and its service's: a table of
/// 10,000 routes each with its own plugins would otherwise compare every route with every
/// entry (seconds of compiling).
struct Candidates<'a> {
    by_route: HashMap<&'a str, Vec<usize>>,
    by_service: HashMap<&'a str, Vec<usize>>,
    /// Entries for no route and no service (global and consumer-only ones).
    unscoped: Vec<usize>,
}

impl<'a> Candidates<'a> {
    fn new(instances: &[(&'a PluginConfig, PluginInstance)]) -> Candidates<'a> {
        let mut c = Candidates {
            by_route: HashMap::new(),
            by_service: HashMap::new(),
            unscoped: Vec::new(),
        };
        for (i, (p, _)) in instances.iter().enumerate() {
            match (&p.route, &p.service) {
                (Some(r), _) => c.by_route.entry(r.as_str()).or_default().push(i),
                (None, Some(s)) => c.by_service.entry(s.as_str()).or_default().push(i),
                (None, None) => c.unscoped.push(i),
            }
        }
        c
    }

    /// Indexes of the entries that may apply to `scope`, in table order (the first of equally
    /// specific entries wins).
    fn of(&self, scope: &Scope<'_>) -> Vec<usize> {
        let none = Vec::new();
        let route = self.by_route.get(scope.route).unwrap_or(&none);
        let service = scope
            .service
            .and_then(|s| self.by_service.get(s))
            .unwrap_or(&none);
        let mut all = Vec::with_capacity(route.len() + service.len() + self.unscoped.len());
        all.extend_from_slice(route);
        all.extend_from_slice(service);
        all.extend_from_slice(&self.unscoped);
        all.sort_unstable();
        all
    }
}

fn resolve_chain(
    instances: &[(&PluginConfig, PluginInstance)],
    candidates: &Candidates<'_>,
    scope: &Scope<'_>,
) -> Arc<[PluginInstance]> {
    let mut best: HashMap<&str, (u8, &PluginInstance)> = HashMap::new();
    for i in candidates.of(scope) {
        let (cfg, inst) = &instances[i];
        if let Some(rank) = specificity(cfg, scope) {
            let slot = best.entry(inst.name).or_insert((rank, inst));
            if rank > slot.0 {
                *slot = (rank, inst);
            }
        }
    }
    sorted(best.into_values().map(|(_, i)| i.clone()).collect())
}

fn sorted(mut v: Vec<PluginInstance>) -> Arc<[PluginInstance]> {
    v.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
    v.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime(yaml: &str) -> Runtime {
        let cfg = Config::parse(yaml.as_bytes()).unwrap();
        Runtime::compile(cfg, &Registry::builtin()).unwrap()
    }

    fn ids(chain: &[PluginInstance]) -> Vec<String> {
        chain.iter().map(|p| p.id.to_string()).collect()
    }

    #[test]
    fn precedence_most_specific_scope_wins_per_name() {
        let rt = runtime(
            "routes: [{id: r, service: s}, {id: other, service: s}]\n\
             services: [{id: s, host: 127.0.0.1, port: 1}]\n\
             consumers: [{id: alice}]\n\
             plugins:\n\
             - {id: g, name: correlation-id}\n\
             - {id: svc, name: correlation-id, service: s}\n\
             - {id: rt, name: correlation-id, route: r}\n\
             - {id: cons, name: correlation-id, consumer: alice}\n\
             - {id: rc, name: correlation-id, route: r, consumer: alice}\n\
             - {id: term, name: request-termination, route: other}\n\
             - {id: off, name: test-phases, config: {tag: x}, enabled: false}\n",
        );
        assert_eq!(ids(&rt.routes[0].chain.base), ["rt"]);
        assert_eq!(
            ids(&rt.routes[1].chain.base),
            ["svc", "term"],
            "priority order: correlation-id first"
        );
        assert_eq!(ids(&rt.routes[0].chain.by_consumer["alice"]), ["rc"]);
        assert_eq!(
            ids(&rt.routes[1].chain.by_consumer["alice"]),
            ["cons", "term"]
        );
        assert_eq!(ids(&rt.global), ["g"]);
    }

    #[test]
    fn consumer_plugins_stay_in_their_namespace_and_auth_plugins_are_never_consumer_scoped() {
        let rt = runtime(
            "routes: [{id: a1, namespace: a}, {id: b1, namespace: b}, {id: any}]\n\
             consumers: [{id: b/bob, namespace: b}]\n\
             plugins:\n\
             - {id: rt, name: correlation-id, route: a1, namespace: a}\n\
             - {id: bob, name: correlation-id, consumer: b/bob, namespace: b}\n",
        );
        // Bob's plugin never replaces namespace a's on a's route (a cluster-wide
        // authentication plugin could let him in there): that route keeps no list for him, so
        // he runs its own. On b's route, and a route without a namespace, it applies.
        assert!(!rt.routes[0].chain.by_consumer.contains_key("b/bob"));
        assert_eq!(ids(&rt.routes[1].chain.by_consumer["b/bob"]), ["bob"]);
        assert_eq!(ids(&rt.routes[2].chain.by_consumer["b/bob"]), ["bob"]);

        let cfg = Config::parse(
            b"consumers: [{id: c}]\nplugins: [{id: k, name: key-auth, consumer: c}, {id: l, name: acl, consumer: c, config: {allow: [x]}}]",
        )
        .unwrap();
        let errs = Runtime::compile(cfg, &Registry::builtin()).err().unwrap();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().all(|e| e.field == "consumer"), "{errs:?}");
    }

    #[test]
    fn priority_override() {
        let rt = runtime(
            "routes: [{id: r}]\nplugins:\n- {id: a, name: correlation-id}\n- {id: b, name: request-termination, priority: 200000}\n",
        );
        assert_eq!(ids(&rt.routes[0].chain.base), ["b", "a"]);
    }

    #[test]
    fn invalid_tables_are_rejected_with_every_error() {
        let cfg = Config::parse(b"routes: [{id: r, service: nope}]\nplugins: [{id: p, name: request-termination, config: {status_code: 1000}}]").unwrap();
        let errs = Runtime::compile(cfg, &Registry::builtin()).err().unwrap();
        assert_eq!(errs.len(), 2, "{errs:?}");
    }

    #[test]
    fn an_endpoint_change_rebuilds_only_the_changed_upstreams_services() {
        let table = |b_targets: &str| {
            format!(
                "routes: [{{id: ra, service: a}}, {{id: rb, service: b}}]\n\
                 services: [{{id: a, upstream: ua}}, {{id: b, upstream: ub}}]\n\
                 upstreams:\n\
                 - {{id: ua, targets: [{{target: '10.0.0.1:80'}}]}}\n\
                 - {{id: ub, algorithm: least-connections, healthchecks: {{passive: {{failures: 1}}}}, targets: [{b_targets}]}}\n\
                 plugins: [{{id: p, name: correlation-id}}]\n"
            )
        };
        let registry = Registry::builtin();
        let parse = |t: &str| Config::parse(t.as_bytes()).unwrap();
        let first = Runtime::compile(parse(&table("{target: '10.0.0.2:80'}")), &registry).unwrap();
        let kept = first.services[1].health[0].clone();
        let next = Runtime::next(
            &first,
            parse(&table("{target: '10.0.0.2:80'}, {target: '10.0.0.3:80'}")),
            &registry,
        )
        .unwrap();
        assert!(Arc::ptr_eq(&first.router, &next.router));
        assert!(Arc::ptr_eq(&first.routes, &next.routes));
        assert!(Arc::ptr_eq(&first.plugins, &next.plugins));
        assert!(Arc::ptr_eq(&first.certs, &next.certs));
        assert!(
            Arc::ptr_eq(&first.services[0], &next.services[0]),
            "ua did not change"
        );
        assert!(!Arc::ptr_eq(&first.services[1], &next.services[1]));
        assert_eq!(next.services[1].balancer.targets().len(), 2);
        assert!(
            Arc::ptr_eq(&kept, &next.services[1].health[0]),
            "the unchanged target keeps its health"
        );
        assert!(Arc::ptr_eq(
            &first.services[1].balancer.target(0).load,
            &next.services[1].balancer.target(0).load
        ));
        assert_ne!(first.hash, next.hash);
        assert_eq!(next.hash.as_ref(), next.config.content_hash());

        // A bad target is refused on the fast path too, naming it.
        let errs = Runtime::next(&first, parse(&table("{target: 'nope'}")), &registry)
            .err()
            .unwrap();
        assert_eq!(errs[0].field, "targets[0].target");
        // Anything else changing is a full compile.
        let other = table("{target: '10.0.0.2:80'}").replace("id: p,", "id: q,");
        let full = Runtime::next(&first, parse(&other), &registry).unwrap();
        assert!(!Arc::ptr_eq(&first.routes, &full.routes));
    }

    #[test]
    fn canary_fallback_and_access_log_are_compiled() {
        let rt = runtime(
            "routes:\n\
             - {id: r, service: a, canary: {service: b, weight: 5, header: X-Canary}, \
             fallback: {service: c, statuses: [404]}, access_log: false}\n\
             - {id: plain, service: a}\n\
             services: [{id: a, host: 127.0.0.1, port: 1}, {id: b, host: 127.0.0.1, port: 2}, {id: c, upstream: u}]\n\
             upstreams: [{id: u, targets: [{target: '127.0.0.1:3', weight: 0}]}]\n",
        );
        let r = &rt.routes[0];
        let canary = r.canary.as_deref().unwrap();
        assert_eq!(
            (canary.service, canary.weight, canary.weight_total),
            (1, 5, 100)
        );
        assert_eq!(canary.header.as_ref().unwrap(), "x-canary");
        let fallback = r.fallback.as_deref().unwrap();
        assert_eq!(fallback.service, 2);
        assert!(fallback.intercepts(404) && !fallback.intercepts(500));
        assert!(!r.access_log);
        let plain = &rt.routes[1];
        assert!(plain.canary.is_none() && plain.fallback.is_none() && plain.access_log);
        assert!(rt.services[0].has_target_to_try());
        assert!(
            !rt.services[2].has_target_to_try(),
            "a weight-0 target is never tried"
        );
    }

    #[test]
    fn only_healthy_weighted_targets_are_there_to_try() {
        let table = |panic: bool| {
            format!(
                "services: [{{id: s, upstream: u-try-{panic}}}]\n\
                 upstreams: [{{id: u-try-{panic}, healthchecks: {{passive: {{failures: 1}}, panic: {panic}}}, \
                 targets: [{{target: '127.0.0.1:1'}}, {{target: '127.0.0.1:2', weight: 0}}]}}]\n"
            )
        };
        for panic in [false, true] {
            let rt = runtime(&table(panic));
            let s = &rt.services[0];
            assert!(s.has_target_to_try());
            let checks = s.checks.as_deref().unwrap();
            checks.report(&s.health[0], crate::health::Outcome::ConnectFailure);
            // The weight-0 target is healthy, but never picked.
            assert_eq!(s.has_target_to_try(), panic, "panic: {panic}");
        }
    }

    #[test]
    fn targets_and_host_headers() {
        let (addr, _) = crate::config::target_address("::1", 8080);
        assert_eq!(&*addr, "[::1]:8080");
        let (_, host) = crate::config::target_address("example.org", 80);
        assert_eq!(host, "example.org");
    }
}
