//! Config → runtime: everything a request needs, resolved once per routing table.
//!
//! The runtime is immutable; the server swaps the whole of it atomically, so a request sees
//! either the old table or the new one, never a mix.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, StatusCode};

use crate::balancer::{Balancer, Target};
use crate::config::{parse_target, Config, ConfigError, PluginConfig, Settings, UpstreamProtocol};
use crate::consumers::Directory;
use crate::pipeline::RouteChain;
use crate::plugins::{PluginInstance, Registry, Staged};
use crate::router::Router;
use crate::tls::CertStore;

/// A compiled routing table.
pub struct Runtime {
    /// The table's content hash.
    pub hash: Arc<str>,
    /// The table as it was received (for `GET /config`).
    pub config: Arc<Config>,
    /// Host/path matching.
    pub router: Router,
    /// Routes, in the order of `config.routes` (the router's indices).
    pub routes: Vec<CompiledRoute>,
    /// Services, referenced by index from routes.
    pub services: Vec<CompiledService>,
    /// Global plugins (rewrite phase, and requests that match no route).
    pub global: Arc<[PluginInstance]>,
    /// Table-wide switches.
    pub settings: Settings,
    /// TLS certificates by server name.
    pub certs: CertStore,
    /// The plugin instances of this table (handed to the registry when it goes into service).
    pub plugins: Staged,
    /// Consumers and credentials, indexed for the authentication plugins.
    pub consumers: Arc<Directory>,
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
    /// Connection retries.
    pub retries: u32,
    /// Speak HTTP/2 with prior knowledge.
    pub h2: bool,
    /// The targets.
    pub balancer: Balancer,
}

impl Runtime {
    /// An empty table: every request gets 404.
    pub fn empty() -> Runtime {
        let config = Config::default().with_hash();
        Runtime {
            hash: config.hash.clone().unwrap_or_default().into(),
            config: Arc::new(config),
            router: Router::default(),
            routes: Vec::new(),
            services: Vec::new(),
            global: Arc::from(Vec::new()),
            settings: Settings::default(),
            certs: CertStore::default(),
            plugins: Staged::default(),
            consumers: Arc::default(),
        }
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

        let upstreams: HashMap<&str, &crate::config::Upstream> = config
            .upstreams
            .iter()
            .map(|u| (u.id.as_str(), u))
            .collect();
        let mut services = Vec::with_capacity(config.services.len());
        let mut service_index = HashMap::new();
        for (i, s) in config.services.iter().enumerate() {
            service_index.insert(s.id.as_str(), i);
            let targets: Vec<(Target, u32)> = match (&s.upstream, &s.host) {
                (Some(u), _) => upstreams[u.as_str()]
                    .targets
                    .iter()
                    .map(|t| {
                        let (host, port) = parse_target(&t.target).expect("validated");
                        (target(host, port), t.weight)
                    })
                    .collect(),
                (None, Some(h)) => vec![(target(h, s.port.expect("validated")), 1)],
                (None, None) => Vec::new(),
            };
            services.push(CompiledService {
                id: s.id.as_str().into(),
                path: s.path.clone(),
                connect_timeout: Duration::from_millis(s.connect_timeout),
                read_timeout: Duration::from_millis(s.read_timeout),
                write_timeout: Duration::from_millis(s.write_timeout),
                retries: s.retries,
                h2: matches!(s.protocol, UpstreamProtocol::H2c | UpstreamProtocol::Grpc),
                balancer: Balancer::new(targets),
            });
        }

        // Each consumer's own plugin entries: a route gets a list for a consumer only when one
        // of them applies to it (otherwise the consumer runs the route's list), so a table with
        // many consumers and routes stays small.
        let mut consumer_plugins: BTreeMap<&str, Vec<&PluginConfig>> = BTreeMap::new();
        for (p, _) in &instances {
            if let Some(c) = p.consumer.as_deref() {
                consumer_plugins.entry(c).or_default().push(p);
            }
        }
        let routes = config
            .routes
            .iter()
            .map(|r| {
                let service = r.service.as_deref().map(|s| service_index[s]);
                let scope = Scope {
                    route: &r.id,
                    service: r.service.as_deref(),
                    consumer: None,
                    namespace: r.namespace.as_deref(),
                };
                let base = resolve_chain(&instances, &scope);
                let by_consumer = consumer_plugins
                    .iter()
                    .filter_map(|(c, own)| {
                        let scope = Scope {
                            consumer: Some(c),
                            ..scope
                        };
                        own.iter()
                            .any(|p| specificity(p, &scope).is_some())
                            .then(|| (Arc::from(*c), resolve_chain(&instances, &scope)))
                    })
                    .collect();
                CompiledRoute {
                    id: r.id.as_str().into(),
                    strip_path: r.strip_path,
                    preserve_host: r.preserve_host,
                    https_redirect: StatusCode::from_u16(r.https_redirect_status_code)
                        .expect("validated"),
                    service,
                    chain: RouteChain { base, by_consumer },
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
                }
            })
            .collect();

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
            router,
            routes,
            services,
            global,
            certs,
            plugins: staged,
            consumers,
        })
    }
}

fn target(host: &str, port: u16) -> Target {
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let addr = format!("{bracketed}:{port}");
    let host_header = if port == 80 { bracketed } else { addr.clone() };
    Target {
        host_header: HeaderValue::from_str(&host_header)
            .unwrap_or_else(|_| HeaderValue::from_static("localhost")),
        addr: addr.into(),
    }
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

fn resolve_chain(
    instances: &[(&PluginConfig, PluginInstance)],
    scope: &Scope<'_>,
) -> Arc<[PluginInstance]> {
    let mut best: HashMap<&str, (u8, &PluginInstance)> = HashMap::new();
    for (cfg, inst) in instances {
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
    fn targets_and_host_headers() {
        let t = target("::1", 8080);
        assert_eq!(&*t.addr, "[::1]:8080");
        let t = target("example.org", 80);
        assert_eq!(t.host_header, "example.org");
    }
}
