//! Ingress backends → the proxy's services and upstreams: Service ports resolved by number or
//! name, targets from the ready endpoints of every EndpointSlice of the Service (terminating
//! but serving ones only when nothing else is left), ExternalName Services as DNS targets, and
//! the Service's annotations and Upstream resource applied: balancing, retries, health checks
//! and TLS towards the targets.
//!
//! An Upstream's balancing settings are checked with the proxy's own validation (on a table of
//! one service and its upstream), so that a problem lands on the Upstream under its CRD field
//! name. What the proxy would reject is turned off (consistent hashing falls back to
//! round-robin; a health check or `retryOn` is ignored). Anything wrong with the TLS settings
//! fails closed instead: the Service's routes answer 503 rather than speak TLS that is not
//! what was asked for.

use k8s_openapi::api::core::v1::{Secret, Service, ServicePort};
use k8s_openapi::api::networking::v1::ServiceBackendPort;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use weir_crds::{Upstream, UpstreamSpec};
use weir_proxy::config::{self, Config, ConfigError, Target, UpstreamProtocol};

use super::annotations;
use super::tls::TLS_TYPE;
use super::{obj, secret_text, Translator};
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

/// What an Ingress changes about its own backends (`weir.dev/upstream`, `weir.dev/protocol`,
/// `weir.dev/service-upstream` on the Ingress): they get a proxy service of their own.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Overrides {
    /// The Ingress (`namespace/name`), which names the service and takes the problems.
    pub ingress: Key,
    /// An Upstream resource in place of the Service's.
    pub upstream: Option<String>,
    /// The protocol in place of the Service's.
    pub protocol: Option<UpstreamProtocol>,
    /// The Service's cluster IP as the one target.
    pub service_upstream: bool,
}

impl Overrides {
    /// Whether the Ingress changes anything.
    pub fn any(&self) -> bool {
        self.upstream.is_some() || self.protocol.is_some() || self.service_upstream
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
        self.backend_for(namespace, service, port, None)
    }

    /// The proxy service id for a Service port as an Ingress with `overrides` uses it.
    pub(super) fn backend_for(
        &mut self,
        namespace: &str,
        service: &str,
        port: &ServiceBackendPort,
        overrides: Option<&Overrides>,
    ) -> Result<String, BackendError> {
        let overrides = overrides.filter(|o| o.any());
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
        let by = overrides.map(|o| o.ingress.to_string()).unwrap_or_default();
        let cache_key = (namespace.to_string(), service.to_string(), number, by);
        if let Some(done) = self.backends.get(&cache_key) {
            return done.clone();
        }
        let built = self.build_backend(&key, svc, sport, number, external, overrides);
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
        overrides: Option<&Overrides>,
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
        let upstream = match overrides.and_then(|o| o.upstream.as_deref().map(|u| (o, u))) {
            Some((o, name)) => self.named_upstream(&o.ingress, Kind::Ingress, name),
            None => self.upstream_for(key, ann.upstream.as_deref()),
        }
        .map(|u| (Key::of(&u), u));
        let up_spec = upstream.as_ref().map(|(_, u)| &u.spec);
        let protocol = overrides
            .and_then(|o| o.protocol)
            .or(ann.protocol)
            .or_else(|| sport.and_then(|p| app_protocol(p.app_protocol.as_deref()?)))
            .unwrap_or(UpstreamProtocol::Http);
        let secure = matches!(protocol, UpstreamProtocol::Https | UpstreamProtocol::Grpcs);

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
        let cluster_ip = svc
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref())
            .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok());
        let targets = match (&external, overrides.is_some_and(|o| o.service_upstream)) {
            (Some(host), _) => vec![Target {
                target: format!("{host}:{number}"),
                weight: 100,
            }],
            (None, true) => match cluster_ip {
                Some(ip) => {
                    let ip: std::net::IpAddr = ip.parse().expect("checked above");
                    vec![Target {
                        target: std::net::SocketAddr::new(ip, number as u16).to_string(),
                        weight: 100,
                    }]
                }
                None => {
                    let m = format!(
                        "Service {key} has no cluster IP (headless?), so weir.dev/service-upstream cannot send to it; its endpoints are used"
                    );
                    let o = overrides.expect("service_upstream set");
                    self.problem(
                        obj(Kind::Ingress, &o.ingress),
                        Reason::InvalidAnnotation,
                        format!(
                            "metadata.annotations[{:?}]",
                            weir_crds::annotations::SERVICE_UPSTREAM
                        ),
                        m,
                    );
                    self.targets(key, sport)
                }
            },
            (None, false) => self.targets(key, sport),
        };
        let id = match overrides {
            Some(o) => format!("{}/{}:{number}@{}", key.namespace, key.name, o.ingress.name),
            None => format!("{}/{}:{number}", key.namespace, key.name),
        };
        let timeouts = up_spec.and_then(|u| u.timeouts.clone()).unwrap_or_default();
        let default = default_service();

        // Balancing, health checks and retries; what the proxy would reject is turned off.
        let mut balancing = balancing(up_spec, secure);
        if let Some((ukey, _)) = &upstream {
            let upstream_ref = obj(Kind::Upstream, ukey);
            for (field, m) in self.check_balancing(&mut balancing) {
                self.problem(upstream_ref.clone(), Reason::InvalidUpstream, field, m);
            }
            let https_probe = balancing
                .healthchecks
                .active
                .as_ref()
                .is_some_and(|a| a.kind == config::ProbeKind::Https);
            if https_probe && !secure {
                let m = format!(
                    "https probes need weir.dev/protocol https or grpcs, and Service {key} speaks {}; active health checks are off for it",
                    protocol_name(protocol)
                );
                self.problem(
                    upstream_ref,
                    Reason::InvalidUpstream,
                    "spec.healthchecks.active.type",
                    m,
                );
                balancing.healthchecks.active = None;
            }
        }

        // TLS towards the targets; anything wrong keeps the Service out (fail closed).
        let tls = if secure {
            match self.service_tls(key, protocol, upstream.as_ref(), external.is_some()) {
                Ok(tls) => Some(tls),
                Err(reason) => {
                    let why = match &upstream {
                        Some((ukey, _)) => format!(
                            "Service {key}: the TLS settings of Upstream {ukey} cannot be used"
                        ),
                        None => format!("Service {key}: its TLS settings cannot be used"),
                    };
                    return Err((reason, why));
                }
            }
        } else {
            // Fail closed: TLS was asked for, and plain text would not be what was meant.
            if let Some((ukey, _)) = upstream.as_ref().filter(|(_, u)| u.spec.tls.is_some()) {
                let m = format!(
                    "applies only to Services with weir.dev/protocol https or grpcs, and Service {key} speaks {}; routes to this Service answer 503",
                    protocol_name(protocol)
                );
                self.problem(
                    obj(Kind::Upstream, ukey),
                    Reason::InvalidUpstream,
                    "spec.tls",
                    m,
                );
                return Err((
                    Reason::InvalidUpstream,
                    format!("Service {key} speaks plain text but Upstream {ukey} asks for TLS"),
                ));
            }
            None
        };

        let service = config::Service {
            id: id.clone(),
            protocol,
            upstream: Some(id.clone()),
            path: ann.path.clone(),
            // The proxy takes at most a day (an Upstream's fields have no bound of their own).
            connect_timeout: ann
                .connect_timeout
                .or(timeouts.connect)
                .unwrap_or(default.connect_timeout)
                .min(config::MAX_ROUTE_TIMEOUT_MS),
            read_timeout: ann
                .read_timeout
                .or(timeouts.read)
                .unwrap_or(default.read_timeout)
                .min(config::MAX_ROUTE_TIMEOUT_MS),
            write_timeout: ann
                .write_timeout
                .or(timeouts.write)
                .unwrap_or(default.write_timeout)
                .min(config::MAX_ROUTE_TIMEOUT_MS),
            retries: ann
                .retries
                .or(up_spec.and_then(|u| u.retries))
                .unwrap_or(default.retries),
            retry_on: balancing.retry_on,
            tls: tls.map(Box::new),
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
            algorithm: balancing.algorithm,
            hash_on: balancing.hash_on.map(Box::new),
            targets,
            healthchecks: balancing.healthchecks,
        });
        for p in &plugins {
            let entries = self.scoped_entries(p, &key.namespace, None, Some(&id));
            self.config.plugins.extend(entries);
        }
        Ok(id)
    }

    /// The TLS settings of a Service's targets (`https`, `grpcs`): its Upstream's `spec.tls`
    /// with the Secrets read and checked the way the proxy loads them, and the Service's DNS
    /// name as the default SNI (targets are pod addresses; an ExternalName Service's targets
    /// are its `externalName`, which the proxy sends itself). Every problem is reported (on
    /// the Upstream); `Err` carries the reason for the paths that use the Service.
    fn service_tls(
        &mut self,
        key: &Key,
        protocol: UpstreamProtocol,
        upstream: Option<&(Key, Upstream)>,
        external: bool,
    ) -> Result<config::ServiceTls, Reason> {
        let spec = upstream
            .and_then(|(_, u)| u.spec.tls.clone())
            .unwrap_or_default();
        let consequence = format!("; routes to Service {key} answer 503");
        let mut tls = config::ServiceTls {
            verify: spec.verify.unwrap_or(true),
            verify_depth: spec.verify_depth,
            sni: spec
                .sni
                .clone()
                .or_else(|| (!external).then(|| format!("{}.{}.svc", key.name, key.namespace))),
            alpn: spec.alpn.map(|a| match a {
                weir_crds::Alpn::Http11 => config::Alpn::Http11,
                weir_crds::Alpn::H2 => config::Alpn::H2,
            }),
            ..Default::default()
        };
        let mut unusable: Vec<(&str, String)> = Vec::new();
        // Without verification there is nothing to trust, so the CA bundle is not read.
        if let Some(name) = spec.ca_secret.as_deref().filter(|_| tls.verify) {
            match self.ca_bundle(&key.namespace, name) {
                Ok(pem) => tls.ca_certificates = Some(pem),
                Err(m) => unusable.push(("spec.tls.caSecret", m)),
            }
        }
        if let Some(name) = spec.client_certificate_secret.as_deref() {
            match self.client_certificate(&key.namespace, name) {
                Ok((cert, key)) => {
                    tls.client_certificate = Some(config::ClientCertificate { cert, key })
                }
                Err(m) => unusable.push(("spec.tls.clientCertificateSecret", m)),
            }
        }
        if !unusable.is_empty() {
            // (Only an Upstream names Secrets.)
            if let Some((ukey, _)) = upstream {
                for (field, m) in unusable {
                    let o = obj(Kind::Upstream, ukey);
                    self.problem(o, Reason::InvalidSecret, field, format!("{m}{consequence}"));
                }
            }
            return Err(Reason::InvalidSecret);
        }
        // The rest (SNI, ALPN against the protocol) as the proxy validates it.
        let probe = config::Service {
            id: "s".into(),
            protocol,
            tls: Some(Box::new(tls.clone())),
            ..default_service()
        };
        let rejected: Vec<ConfigError> = self
            .rejected(probe, None)
            .into_iter()
            .filter(|e| e.field.starts_with("tls"))
            .collect();
        if rejected.is_empty() {
            return Ok(tls);
        }
        for e in rejected {
            let (o, field) = match upstream {
                Some((ukey, _)) => (obj(Kind::Upstream, ukey), crd_field(&e.field)),
                None => (
                    obj(Kind::Service, key),
                    format!(
                        "metadata.annotations[{:?}]",
                        weir_crds::annotations::PROTOCOL
                    ),
                ),
            };
            let m = format!("{}{consequence}", e.message);
            self.problem(o, Reason::InvalidUpstream, field, m);
        }
        Err(Reason::InvalidUpstream)
    }

    /// The PEM CA bundle of an Upstream's `spec.tls.caSecret`, checked the way the proxy
    /// loads it. The Secret must be one a cluster's controller watches (type
    /// `kubernetes.io/tls`, or labelled `weir.dev/credential: "true"`), so that standalone
    /// mode and a cluster agree. Messages never quote the Secret.
    pub(super) fn ca_bundle(&self, namespace: &str, name: &str) -> Result<String, String> {
        let skey = Key::new(namespace, name);
        let label = format!(
            "{}={:?}",
            weir_crds::CREDENTIAL_LABEL,
            weir_crds::CONFIG_SECRET_LABEL_VALUE
        );
        let Some(secret) = self.store.secrets.get(&skey) else {
            return Err(format!(
                "Secret {skey} not found (a CA Secret must be of type {TLS_TYPE} or labelled {label})"
            ));
        };
        if secret.type_.as_deref() != Some(TLS_TYPE) && !labelled(secret) {
            return Err(format!(
                "Secret {skey} is neither of type {TLS_TYPE} nor labelled {label}"
            ));
        }
        let pem = secret_text(secret, CA_KEY)
            .ok_or_else(|| format!("Secret {skey} has no readable {CA_KEY}"))?;
        check_ca_bundle(&pem).map_err(|m| format!("Secret {skey} {CA_KEY}: {m}"))?;
        Ok(pem)
    }

    /// The client certificate chain and key of an Upstream's
    /// `spec.tls.clientCertificateSecret`, or a Gateway's `spec.tls.backend` (a
    /// `kubernetes.io/tls` Secret).
    pub(super) fn client_certificate(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(String, String), String> {
        let skey = Key::new(namespace, name);
        match self.store.secrets.get(&skey) {
            None => Err(format!("Secret {skey} not found")),
            Some(s) if s.type_.as_deref() != Some(TLS_TYPE) => {
                Err(format!("Secret {skey} is not of type {TLS_TYPE}"))
            }
            Some(s) => super::tls::read_pair(s).map_err(|m| format!("Secret {skey} {m}")),
        }
    }

    /// Checks an Upstream's balancing settings with the proxy's validation, turns off what it
    /// rejects, and returns each problem as (CRD field, message saying what happens instead).
    fn check_balancing(&self, b: &mut Balancing) -> Vec<(String, String)> {
        let probe = config::Service {
            id: "s".into(),
            upstream: Some("u".into()),
            retry_on: b.retry_on.clone(),
            ..default_service()
        };
        let upstream = config::Upstream {
            id: "u".into(),
            algorithm: b.algorithm,
            hash_on: b.hash_on.clone().map(Box::new),
            targets: Vec::new(),
            healthchecks: b.healthchecks.clone(),
        };
        let mut out = Vec::new();
        let (mut hash_on, mut passive, mut active, mut retry_on) = (false, false, false, false);
        for e in self.rejected(probe, Some(upstream)) {
            let f = e.field.as_str();
            let then = if f.starts_with("hash_on") {
                hash_on = true;
                if b.algorithm == config::Algorithm::ConsistentHashing {
                    "round-robin is used"
                } else {
                    "ignored"
                }
            } else if f.starts_with("healthchecks.passive") {
                passive = true;
                "passive health checks are off"
            } else if f.starts_with("healthchecks.active") {
                active = true;
                "active health checks are off"
            } else if f.starts_with("retry_on") {
                retry_on = true;
                "retryOn is ignored"
            } else {
                // Not an Upstream setting: the finished table's check reports it.
                continue;
            };
            out.push((crd_field(f), format!("{}; {then}", e.message)));
        }
        if hash_on {
            b.hash_on = None;
            if b.algorithm == config::Algorithm::ConsistentHashing {
                b.algorithm = config::Algorithm::RoundRobin;
            }
        }
        if passive {
            b.healthchecks.passive = None;
        }
        if active {
            b.healthchecks.active = None;
        }
        if retry_on {
            b.retry_on = config::RetryOn::default();
        }
        out
    }

    /// What the proxy's validation says about a table of one service (and its upstream).
    fn rejected(
        &self,
        service: config::Service,
        upstream: Option<config::Upstream>,
    ) -> Vec<ConfigError> {
        let table = Config {
            services: vec![service],
            upstreams: upstream.into_iter().collect(),
            ..Config::default()
        };
        table.validate(self.validator).err().unwrap_or_default()
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
            return self.named_upstream(key, Kind::Service, name);
        }
        let store = self.store;
        let mut targeting = self
            .upstreams_by_target
            .get(&(key.namespace.as_str(), key.name.as_str()))
            .into_iter()
            .flatten()
            .filter_map(|k| Some((*k, store.upstreams.get(*k)?)));
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

    /// The Upstream `name` in `by`'s namespace, which `by` (a Service or an Ingress) names in
    /// its `weir.dev/upstream` annotation; reported on `by` when missing.
    fn named_upstream(&mut self, by: &Key, kind: Kind, name: &str) -> Option<Upstream> {
        let ukey = Key::new(by.namespace.as_str(), name);
        match self.store.upstreams.get(&ukey) {
            Some(u) => Some(u.clone()),
            None => {
                self.problem(
                    obj(kind, by),
                    Reason::InvalidUpstream,
                    format!(
                        "metadata.annotations[{:?}]",
                        weir_crds::annotations::UPSTREAM
                    ),
                    format!("Upstream {ukey} not found; using defaults"),
                );
                None
            }
        }
    }

    /// Reports Upstream resources that target nothing or whose balancing settings the proxy
    /// would reject (TLS settings are checked for each Service that uses the Upstream).
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
            // Also when no served Service uses it (the same problems when one does).
            let mut b = balancing(Some(&u.spec), false);
            for (field, m) in self.check_balancing(&mut b) {
                self.problem(me.clone(), Reason::InvalidUpstream, field, m);
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
                    canary: None,
                    fallback: None,
                    access_log: true,
                    forwarded_prefix: None,
                    header_matches: Vec::new(),
                    query_matches: Vec::new(),
                    backends: Vec::new(),
                    deep_wildcards: false,
                    excluded_hosts: Vec::new(),
                    mirrors: Vec::new(),
                    timeout: None,
                    upstream_error_status: None,
                    tls_hosts: Vec::new(),
                    satisfy: Default::default(),
                    response_rate: None,
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

/// Secret key of an Upstream's CA bundle.
const CA_KEY: &str = "ca.crt";

/// Whether a Secret carries `weir.dev/credential: "true"`.
fn labelled(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(weir_crds::CREDENTIAL_LABEL))
        .is_some_and(|v| v == weir_crds::CONFIG_SECRET_LABEL_VALUE)
}

/// Checks a PEM CA bundle as the proxy loads it (every block a certificate a root store
/// accepts); messages never quote the PEM.
fn check_ca_bundle(pem: &str) -> Result<(), String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "not a PEM certificate bundle: {}",
                weir_proxy::tls::pem_error(&e)
            )
        })?;
    if certs.is_empty() {
        return Err("no `BEGIN CERTIFICATE` block".into());
    }
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            let why = match e {
                // (Its display form speaks of a peer, and this is a CA.)
                rustls::Error::InvalidCertificate(c) => format!("{c:?}"),
                e => e.to_string(),
            };
            format!("certificate {} is unusable: {why}", i + 1)
        })?;
    }
    Ok(())
}

/// The routing table's defaults for a service (what a service without settings gets).
pub(super) fn default_service() -> config::Service {
    config::Service {
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
        retry_on: config::RetryOn::default(),
        tls: None,
    }
}

/// The protocol a Service port's `appProtocol` names, for the values Kubernetes defines
/// (`kubernetes.io/h2c`, `kubernetes.io/ws`, `kubernetes.io/wss`); others (free-form names
/// such as `http` or `grpc`, which ingress controllers read differently) leave the default.
/// WebSockets start as HTTP/1.1, so `ws` is plain HTTP and `wss` HTTPS.
fn app_protocol(value: &str) -> Option<UpstreamProtocol> {
    match value {
        "kubernetes.io/h2c" => Some(UpstreamProtocol::H2c),
        "kubernetes.io/ws" => Some(UpstreamProtocol::Http),
        "kubernetes.io/wss" => Some(UpstreamProtocol::Https),
        _ => None,
    }
}

/// The `weir.dev/protocol` value of a protocol.
fn protocol_name(p: UpstreamProtocol) -> &'static str {
    match p {
        UpstreamProtocol::Http => "http",
        UpstreamProtocol::Https => "https",
        UpstreamProtocol::H2c => "h2c",
        UpstreamProtocol::Grpc => "grpc",
        UpstreamProtocol::Grpcs => "grpcs",
    }
}

/// A routing-table field (`healthchecks.passive.unhealthy_statuses[1]`) as the Upstream's
/// (`spec.healthchecks.passive.unhealthyStatuses[1]`).
fn crd_field(field: &str) -> String {
    let mut out = String::from("spec.");
    let mut upper = false;
    for c in field.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// An Upstream's balancing settings, as the routing table has them.
#[derive(Debug, Default)]
struct Balancing {
    algorithm: config::Algorithm,
    hash_on: Option<config::HashOn>,
    healthchecks: config::Healthchecks,
    retry_on: config::RetryOn,
}

/// The proxy's own defaults for a settings object (what it reads from `value`).
fn proxy_defaults<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("the routing table's defaults deserialise")
}

/// An Upstream's balancing settings for the routing table (the defaults without one):
/// intervals and probe timeouts go from seconds to milliseconds, unset fields take the proxy's
/// defaults, and probes default to `https` for a Service spoken to over TLS (`secure`).
fn balancing(spec: Option<&UpstreamSpec>, secure: bool) -> Balancing {
    let Some(spec) = spec else {
        return Balancing::default();
    };
    let algorithm = match spec.algorithm {
        None | Some(weir_crds::Algorithm::RoundRobin) => config::Algorithm::RoundRobin,
        Some(weir_crds::Algorithm::LeastConnections) => config::Algorithm::LeastConnections,
        Some(weir_crds::Algorithm::ConsistentHashing) => config::Algorithm::ConsistentHashing,
        Some(weir_crds::Algorithm::PeakEwma) => config::Algorithm::PeakEwma,
    };
    let by = |b: weir_crds::HashBy| match b {
        weir_crds::HashBy::Ip => config::HashBy::Ip,
        weir_crds::HashBy::Header => config::HashBy::Header,
        weir_crds::HashBy::Cookie => config::HashBy::Cookie,
        weir_crds::HashBy::Path => config::HashBy::Path,
        weir_crds::HashBy::QueryArg => config::HashBy::QueryArg,
    };
    let hash_on = spec.hash_on.as_ref().map(|h| {
        let d: config::HashOn = proxy_defaults(serde_json::json!({"by": "ip"}));
        config::HashOn {
            by: by(h.by),
            name: h.name.clone(),
            fallback: h.fallback.as_ref().map(|f| config::HashFallback {
                by: by(f.by),
                name: f.name.clone(),
            }),
            cookie_path: h.cookie_path.clone().unwrap_or(d.cookie_path),
            cookie_ttl: h.cookie_ttl.unwrap_or(d.cookie_ttl),
            cookie_same_site: h.cookie_same_site.map(|s| match s {
                weir_crds::SameSite::Strict => config::SameSite::Strict,
                weir_crds::SameSite::Lax => config::SameSite::Lax,
                weir_crds::SameSite::None => config::SameSite::None,
            }),
            cookie_same_site_none_if_supported: h.cookie_same_site_none_if_supported,
            cookie_secure: h.cookie_secure,
            subset_size: h.subset_size,
        }
    });
    let hc = spec.healthchecks.clone().unwrap_or_default();
    let passive = hc.passive.map(|p| {
        let d: config::PassiveHealthcheck = proxy_defaults(serde_json::json!({}));
        config::PassiveHealthcheck {
            failures: p.failures.unwrap_or(d.failures),
            timeouts: p.timeouts.unwrap_or(d.timeouts),
            unhealthy_statuses: p.unhealthy_statuses.unwrap_or(d.unhealthy_statuses),
            cooldown: p.cooldown.unwrap_or(d.cooldown),
        }
    });
    let seconds = |s: u32| u64::from(s) * 1000;
    let active = hc.active.map(|a| {
        let d: config::ActiveHealthcheck = proxy_defaults(serde_json::json!({}));
        config::ActiveHealthcheck {
            kind: match a.type_ {
                Some(weir_crds::ProbeType::Http) => config::ProbeKind::Http,
                Some(weir_crds::ProbeType::Https) => config::ProbeKind::Https,
                None if secure => config::ProbeKind::Https,
                None => d.kind,
            },
            path: a.path.unwrap_or(d.path),
            host: a.host,
            interval: a.interval.map(seconds).unwrap_or(d.interval),
            timeout: a.timeout.map(seconds).unwrap_or(d.timeout),
            healthy_threshold: a.healthy_threshold.unwrap_or(d.healthy_threshold),
            unhealthy_threshold: a.unhealthy_threshold.unwrap_or(d.unhealthy_threshold),
            healthy_statuses: a.healthy_statuses.unwrap_or(d.healthy_statuses),
        }
    });
    let retry_on = spec
        .retry_on
        .as_ref()
        .map(|r| config::RetryOn {
            timeouts: r.timeouts,
            statuses: r.statuses.clone(),
            backoff: 0,
            timeout: r.timeout.unwrap_or(0),
        })
        .unwrap_or_default();
    Balancing {
        algorithm,
        hash_on,
        healthchecks: config::Healthchecks {
            passive: passive.map(Box::new),
            active: active.map(Box::new),
            panic: hc.panic,
        },
        retry_on,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::translate::{translate, Options};

    #[test]
    fn routing_table_fields_become_crd_fields() {
        for (table, crd) in [
            ("hash_on", "spec.hashOn"),
            ("hash_on.cookie_path", "spec.hashOn.cookiePath"),
            ("hash_on.fallback.name", "spec.hashOn.fallback.name"),
            (
                "healthchecks.passive.unhealthy_statuses[1]",
                "spec.healthchecks.passive.unhealthyStatuses[1]",
            ),
            (
                "healthchecks.active.healthy_threshold",
                "spec.healthchecks.active.healthyThreshold",
            ),
            ("retry_on.statuses[0]", "spec.retryOn.statuses[0]"),
            ("tls.verify_depth", "spec.tls.verifyDepth"),
        ] {
            assert_eq!(crd_field(table), crd);
        }
    }

    #[test]
    fn the_proxy_defaults_fill_what_an_upstream_leaves_out() {
        let spec: UpstreamSpec = serde_yaml::from_str(
            "{healthchecks: {passive: {failures: 0}, active: {interval: 7}}, hashOn: {by: ip}}",
        )
        .unwrap();
        let b = balancing(Some(&spec), true);
        let p = b.healthchecks.passive.unwrap();
        assert_eq!((p.failures, p.timeouts, p.cooldown), (0, 5, 30));
        let a = b.healthchecks.active.unwrap();
        assert_eq!((a.interval, a.timeout), (7_000, 1_000));
        assert_eq!(
            a.kind,
            config::ProbeKind::Https,
            "TLS Services probe over TLS"
        );
        assert_eq!(b.hash_on.unwrap().cookie_path, "/");
        assert_eq!(b.algorithm, config::Algorithm::RoundRobin);
    }

    /// No problem about an Upstream's Secrets quotes them, whatever they hold.
    #[test]
    fn tls_problems_never_show_what_a_secret_holds() {
        let cases = [
            // (Secret, its type and labels, data, the Upstream's tls, what the problem says)
            ("garbled", "labels: {weir.dev/credential: \"true\"}", "{ca.crt: SECRET-01}", "caSecret", "no `BEGIN CERTIFICATE` block"),
            ("bad-b64", "labels: {weir.dev/credential: \"true\"}", "{ca.crt: \"-----BEGIN CERTIFICATE-----\\nSECRET-02!\\n-----END CERTIFICATE-----\\n\"}", "caSecret", "ca.crt: not a PEM certificate bundle"),
            ("no-end", "labels: {weir.dev/credential: \"true\"}", "{ca.crt: \"-----BEGIN CERTIFICATE-----\\nSECRET-03\\n\"}", "caSecret", "ca.crt: not a PEM certificate bundle"),
            ("bad-key", "type: kubernetes.io/tls", "{tls.crt: SECRET-04, tls.key: SECRET-05}", "clientCertificateSecret", "tls.crt: "),
        ];
        let mut yaml = String::new();
        for (i, (name, meta, data, field, _)) in cases.iter().enumerate() {
            let (meta_labels, type_line) = match meta.strip_prefix("type: ") {
                Some(t) => (String::new(), format!("type: {t}\n")),
                None => (format!(", {meta}"), String::new()),
            };
            yaml.push_str(&format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: ns{meta_labels}}}\n{type_line}stringData: {data}\n---\n\
                 apiVersion: weir.dev/v1alpha1\nkind: Upstream\nmetadata: {{name: s{i}, namespace: ns}}\nspec: {{targetRef: {{name: s{i}}}, tls: {{{field}: {name}}}}}\n---\n\
                 apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: ns, annotations: {{weir.dev/protocol: https}}}}\nspec: {{ports: [{{port: 443}}]}}\n---\n\
                 apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: s{i}, namespace: ns}}\n\
                 spec: {{ingressClassName: weir, rules: [{{http: {{paths: [{{path: /s{i}, pathType: Prefix, backend: {{service: {{name: s{i}, port: {{number: 443}}}}}}}}]}}}}]}}\n---\n"
            ));
        }
        let store = Store::from_manifests(&yaml);
        let t = translate(
            &store,
            &Options::default(),
            &weir_proxy::Registry::builtin(),
        );
        assert!(t.config.services.is_empty(), "every Service fails closed");
        for (i, (name, _, _, field, expected)) in cases.iter().enumerate() {
            let p = t
                .problems
                .iter()
                .find(|p| p.object.name == format!("s{i}") && p.object.kind == Kind::Upstream)
                .unwrap_or_else(|| panic!("{name} is reported: {:#?}", t.problems));
            assert_eq!(p.reason, Reason::InvalidSecret, "{p}");
            assert_eq!(p.field, format!("spec.tls.{field}"), "{p}");
            assert!(p.message.contains(expected), "{p}");
        }
        for p in &t.problems {
            assert!(!p.to_string().contains("SECRET"), "{p}");
        }
    }
}
