//! Ingress backends → the proxy's services and upstreams: Service ports resolved by number or
//! name, targets from the ready endpoints of every EndpointSlice of the Service (terminating
//! but serving ones only when nothing else is left), ExternalName Services as DNS targets, and
//! the Service's annotations and Upstream resource applied.

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::networking::v1::ServiceBackendPort;
use weir_crds::{Algorithm, Upstream};
use weir_proxy::config::{self, Target, UpstreamProtocol};

use super::annotations;
use super::{obj, Translator};
use crate::problem::{ObjectRef, Reason};
use crate::store::{Key, Kind};

/// Why a backend could not be served; the caller reports it on the referring object.
pub(super) type BackendError = (Reason, String);

fn port_text(p: &ServiceBackendPort) -> String {
    match (&p.name, p.number) {
        (Some(n), _) => format!("{n:?}"),
        (None, Some(n)) => n.to_string(),
        (None, None) => "(none)".into(),
    }
}

impl Translator<'_> {
    /// The proxy service id for a Service port, building it on first use.
    pub(super) fn backend(
        &mut self,
        namespace: &str,
        service: &str,
        port: &ServiceBackendPort,
    ) -> Result<String, BackendError> {
        let key = Key::new(namespace, service);
        let Some(svc) = self.store.services.get(&key) else {
            return Err((Reason::ServiceNotFound, format!("Service {key} not found")));
        };
        let spec = svc.spec.as_ref();
        let external = spec
            .and_then(|s| s.external_name.clone())
            .filter(|_| spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName"));
        let ports = spec
            .and_then(|s| s.ports.as_ref())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let sport: Option<&ServicePort> = match (&port.name, port.number) {
            (Some(name), _) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str())),
            (None, Some(n)) => ports.iter().find(|p| p.port == n),
            (None, None) => None,
        };
        let number = match (sport, port.number, &external) {
            (Some(p), _, _) => p.port,
            // An ExternalName Service need not list its ports.
            (None, Some(n), Some(_)) => n,
            _ => {
                return Err((
                    Reason::PortNotFound,
                    format!("Service {key} has no port {}", port_text(port)),
                ))
            }
        };
        let cache_key = (namespace.to_string(), service.to_string(), number);
        if let Some(done) = self.backends.get(&cache_key) {
            return done.clone();
        }
        let built = self.build_backend(&key, svc, sport, number, external);
        self.backends.insert(cache_key, built.clone());
        built
    }

    fn build_backend(
        &mut self,
        key: &Key,
        svc: &Service,
        sport: Option<&ServicePort>,
        number: i32,
        external: Option<String>,
    ) -> Result<String, BackendError> {
        let service_ref = obj(Kind::Service, key);
        let empty = Default::default();
        let parsed = annotations::service(svc.metadata.annotations.as_ref().unwrap_or(&empty));
        let consequence = "; routes to this Service answer 503";
        let ann = match self.read_annotations(&service_ref, "a Service", parsed, consequence) {
            Some(a) => a,
            None => {
                return Err((
                    Reason::InvalidAnnotation,
                    format!("Service {key} has invalid annotations"),
                ));
            }
        };
        let upstream = self.upstream_for(key, ann.upstream.as_deref());
        let up_spec = upstream.as_ref().map(|u| &u.spec);
        let protocol = ann.protocol.unwrap_or(UpstreamProtocol::Http);
        if matches!(protocol, UpstreamProtocol::Https | UpstreamProtocol::Grpcs) {
            self.problem(
                service_ref.clone(),
                Reason::Unsupported,
                format!("metadata.annotations[{:?}]", weir_crds::annotations::PROTOCOL),
                "upstream TLS (https, grpcs) is not supported by this proxy version; routes to this Service answer 503",
            );
            return Err((
                Reason::Unsupported,
                format!("Service {key} asks for upstream TLS"),
            ));
        }

        if let Some(host) = &external {
            let dns = !host.is_empty()
                && host.split('.').all(|l| {
                    !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            if !dns {
                let m = format!(
                    "externalName {host:?} is not a DNS name; routes to this Service answer 503"
                );
                self.problem(
                    service_ref,
                    Reason::UnsupportedBackend,
                    "spec.externalName",
                    m,
                );
                return Err((
                    Reason::UnsupportedBackend,
                    format!("Service {key} has an invalid externalName"),
                ));
            }
        }
        let targets = match &external {
            Some(host) => vec![Target {
                target: format!("{host}:{number}"),
                weight: 100,
            }],
            None => self.targets(key, sport),
        };
        let id = format!("{}/{}:{number}", key.namespace, key.name);
        let timeouts = up_spec.and_then(|u| u.timeouts.clone()).unwrap_or_default();
        let default = config::Service {
            id: String::new(),
            protocol: UpstreamProtocol::Http,
            host: None,
            port: None,
            upstream: None,
            path: None,
            connect_timeout: 60_000,
            read_timeout: 60_000,
            write_timeout: 60_000,
            retries: 5,
        };
        let service = config::Service {
            id: id.clone(),
            protocol,
            upstream: Some(id.clone()),
            path: ann.path.clone(),
            connect_timeout: ann
                .connect_timeout
                .or(timeouts.connect)
                .unwrap_or(default.connect_timeout),
            read_timeout: ann
                .read_timeout
                .or(timeouts.read)
                .unwrap_or(default.read_timeout),
            write_timeout: ann
                .write_timeout
                .or(timeouts.write)
                .unwrap_or(default.write_timeout),
            retries: ann
                .retries
                .or(up_spec.and_then(|u| u.retries))
                .unwrap_or(default.retries),
            ..default
        };

        // Service-scoped plugins; a broken one keeps the Service out (fail closed).
        let plugins = match self.resolve_names(&key.namespace, &ann.plugins) {
            Ok(p) => p,
            Err((reason, m)) => {
                self.problem(
                    service_ref,
                    reason,
                    format!(
                        "metadata.annotations[{:?}]",
                        weir_crds::annotations::PLUGINS
                    ),
                    format!("{m}; routes to this Service answer 503"),
                );
                return Err((reason, format!("Service {key}: {m}")));
            }
        };
        self.config.services.push(service);
        self.config.upstreams.push(config::Upstream {
            id: id.clone(),
            algorithm: config::Algorithm::RoundRobin,
            targets,
        });
        for p in &plugins {
            let entries = self.scoped_entries(p, &key.namespace, None, Some(&id));
            self.config.plugins.extend(entries);
        }
        Ok(id)
    }

    /// Ready endpoint addresses of every slice of the Service, for its port.
    fn targets(&self, key: &Key, sport: Option<&ServicePort>) -> Vec<Target> {
        let port_name = sport.and_then(|p| p.name.as_deref()).unwrap_or("");
        let mut ready = Vec::new();
        let mut terminating = Vec::new();
        let slices = self
            .slices
            .get(&(key.namespace.as_str(), key.name.as_str()));
        for slice in slices.into_iter().flatten() {
            let ports = slice.ports.as_deref().unwrap_or(&[]);
            let Some(port) = ports
                .iter()
                .find(|p| p.name.as_deref().unwrap_or("") == port_name)
                .and_then(|p| p.port)
            else {
                continue;
            };
            let v6 = slice.address_type == "IPv6";
            for ep in slice.endpoints.iter().flatten() {
                let c = ep.conditions.as_ref();
                // Per the API, an unknown readiness means ready.
                let is_ready = c.and_then(|c| c.ready).unwrap_or(true);
                let serving = c.and_then(|c| c.serving).unwrap_or(is_ready);
                let is_terminating = c.and_then(|c| c.terminating).unwrap_or(false);
                for addr in &ep.addresses {
                    let target = if v6 || addr.contains(':') {
                        format!("[{addr}]:{port}")
                    } else {
                        format!("{addr}:{port}")
                    };
                    if is_ready {
                        ready.push(target);
                    } else if serving && is_terminating {
                        terminating.push(target);
                    }
                }
            }
        }
        let mut chosen = if ready.is_empty() { terminating } else { ready };
        chosen.sort();
        chosen.dedup();
        chosen
            .into_iter()
            .map(|target| Target {
                target,
                weight: 100,
            })
            .collect()
    }

    /// The Upstream resource for a Service: named by annotation, else the one whose
    /// `targetRef` names the Service.
    fn upstream_for(&mut self, key: &Key, named: Option<&str>) -> Option<Upstream> {
        if let Some(name) = named {
            let ukey = Key::new(key.namespace.as_str(), name);
            return match self.store.upstreams.get(&ukey) {
                Some(u) => Some(u.clone()),
                None => {
                    self.problem(
                        obj(Kind::Service, key),
                        Reason::InvalidUpstream,
                        format!(
                            "metadata.annotations[{:?}]",
                            weir_crds::annotations::UPSTREAM
                        ),
                        format!("Upstream {ukey} not found; using defaults"),
                    );
                    None
                }
            };
        }
        let mut targeting = self.store.upstreams.iter().filter(|(k, u)| {
            k.namespace == key.namespace
                && u.spec
                    .target_ref
                    .as_ref()
                    .is_some_and(|t| t.name == key.name)
        });
        let first = targeting.next().map(|(k, u)| (k.clone(), u.clone()));
        let others: Vec<Key> = targeting.map(|(k, _)| k.clone()).collect();
        if let Some((winner, _)) = &first {
            for k in others {
                let m = format!(
                    "Upstream {winner} already configures Service {key}; this one is not used"
                );
                self.problem(
                    obj(Kind::Upstream, &k),
                    Reason::Conflict,
                    "spec.targetRef.name",
                    m,
                );
            }
        }
        first.map(|(_, u)| u)
    }

    /// Reports Upstream resources that target nothing or ask for what the proxy cannot do.
    pub(super) fn check_upstreams(&mut self) {
        let upstreams: Vec<(Key, Upstream)> = self
            .store
            .upstreams
            .iter()
            .filter(|(k, _)| self.in_scope(&k.namespace))
            .map(|(k, u)| (k.clone(), u.clone()))
            .collect();
        for (key, u) in upstreams {
            let me = obj(Kind::Upstream, &key);
            self.checked.insert(me.clone());
            if let Some(t) = &u.spec.target_ref {
                if !self
                    .store
                    .services
                    .contains_key(&Key::new(key.namespace.as_str(), t.name.as_str()))
                {
                    self.problem(
                        me.clone(),
                        Reason::ServiceNotFound,
                        "spec.targetRef.name",
                        format!("Service {}/{} not found", key.namespace, t.name),
                    );
                }
            }
            let unsupported: Vec<(&str, String)> = [
                u.spec
                    .algorithm
                    .filter(|a| *a != Algorithm::RoundRobin)
                    .map(|a| ("spec.algorithm", format!("{a:?} is not implemented by this proxy version; round-robin is used"))),
                u.spec.hash_on.as_ref().map(|_| ("spec.hashOn", "consistent hashing is not implemented by this proxy version; ignored".to_string())),
                u.spec.healthchecks.as_ref().map(|_| ("spec.healthchecks", "health checks are not implemented by this proxy version; ignored".to_string())),
                u.spec.tls.as_ref().map(|_| ("spec.tls", "upstream TLS is not implemented by this proxy version; ignored".to_string())),
            ]
            .into_iter()
            .flatten()
            .collect();
            for (field, m) in unsupported {
                self.problem(me.clone(), Reason::Unsupported, field, m);
            }
        }
    }

    /// `--default-backend`: the Service answering requests no rule matches.
    pub(super) fn controller_default_backend(&mut self) {
        let Some((key, port)) = self.opts.default_backend.clone() else {
            return;
        };
        match self.backend(&key.namespace, &key.name, &port) {
            Ok(service) => {
                if let Some(why) = self.global_broken {
                    let entry = super::ingress::disabled_entry("weir/default-backend", why);
                    self.config.plugins.push(entry);
                }
                self.config.routes.push(config::Route {
                    id: "weir/default-backend".into(),
                    hosts: vec![],
                    paths: vec![config::PathRule {
                        path: "/".into(),
                        kind: config::PathKind::Prefix,
                    }],
                    methods: vec![],
                    headers: Default::default(),
                    protocols: vec![],
                    https_redirect_status_code: 426,
                    strip_path: false,
                    preserve_host: true,
                    priority: -2,
                    host_header: None,
                    rewrite: None,
                    upgrade_protocols: Vec::new(),
                    namespace: Some(key.namespace.clone()),
                    service: Some(service),
                })
            }
            Err((reason, m)) => {
                let o = ObjectRef {
                    kind: Kind::Service,
                    namespace: Some(key.namespace.clone()),
                    name: key.name.clone(),
                };
                self.problem(
                    o,
                    reason,
                    "--default-backend",
                    format!("{m}; the controller default backend is not served"),
                );
            }
        }
    }
}
