//! A Gateway's listeners: which are served (on which of the proxy's sockets), their
//! certificates, which routes they allow, and their status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use weir_crds::gateway::{Gateway, Listener, ObjectReference, RouteGroupKind, GROUP};
use weir_proxy::config::{Certificate, ClientCertificate, ClientProtocol, ClientValidation};

use super::frontend_tls::FrontendEval;
use super::status::{Cond, GatewayStatus, ListenerStatus};
use crate::store::Key;
use crate::translate::tls::{read_pair, TLS_TYPE};
use crate::translate::Translator;

/// Where a listener takes routes from.
#[derive(Debug, Clone)]
pub(super) enum From {
    All,
    Same,
    Selector(LabelSelector),
}

/// A listener, evaluated.
#[derive(Debug)]
pub(super) struct ListenerEval {
    pub name: String,
    pub port: i32,
    pub hostname: Option<String>,
    /// The Gateway's namespace.
    pub namespace: String,
    /// The route kinds that may attach.
    pub kinds: Vec<RouteGroupKind>,
    pub from: From,
    /// The proxy socket that serves it, when it is served.
    pub served_as: Option<ClientProtocol>,
    /// A `TLS` listener that terminates (TLSRoutes get the decrypted bytes).
    pub terminates_tls: bool,
    /// Whether a certificate of its own is served for its host name (a served `HTTPS` or
    /// terminating `TLS` listener with a usable certificate).
    pub has_certificate: bool,
    /// The id of its certificate when that asks for client certificates.
    pub client_certificate: Option<String>,
    pub accepted: Cond,
    pub resolved: Cond,
    pub conflicted: Cond,
    pub attached_routes: i32,
}

impl ListenerEval {
    /// Whether routes attach to it: served, and not in conflict with another listener.
    pub fn usable(&self) -> bool {
        self.accepted.holds() && !self.conflicted.holds()
    }
}

/// The route kinds a protocol carries (those Weir serves).
fn kinds_for(protocol: &str) -> &'static [&'static str] {
    match protocol {
        "HTTP" | "HTTPS" => &["HTTPRoute", "GRPCRoute"],
        "TLS" => &["TLSRoute"],
        _ => &[],
    }
}

impl Translator<'_> {
    /// Evaluates a Gateway's listeners, adding the certificates of the served HTTPS ones.
    pub(super) fn listeners(&mut self, key: &Key, gw: &Gateway) -> Vec<ListenerEval> {
        // Client certificate validation is set per port: evaluated (and reported) once each.
        let mut frontends: BTreeMap<i32, FrontendEval> = BTreeMap::new();
        if let Some(f) = gw.spec.tls.as_ref().and_then(|t| t.frontend.as_ref()) {
            for l in gw.spec.listeners.iter().filter(|l| l.protocol == "HTTPS") {
                if let std::collections::btree_map::Entry::Vacant(e) = frontends.entry(l.port) {
                    e.insert(self.frontend_validation(key, f, l.port));
                }
            }
        }
        let mut out: Vec<ListenerEval> = gw
            .spec
            .listeners
            .iter()
            .map(|l| {
                let frontend = frontends.get(&l.port).filter(|_| l.protocol == "HTTPS");
                self.listener(key, l, frontend)
            })
            .collect();
        // Two served listeners on one port with the same host name cannot be told apart.
        let mut seen: BTreeMap<(i32, String), Vec<usize>> = BTreeMap::new();
        for (i, l) in out.iter().enumerate() {
            if l.accepted.holds() {
                let host = l.hostname.clone().unwrap_or_default();
                seen.entry((l.port, host)).or_default().push(i);
            }
        }
        for ((port, host), idx) in seen {
            if idx.len() > 1 {
                for i in idx {
                    out[i].conflicted = Cond::yes_because(
                        "Conflicted",
                        "HostnameConflict",
                        format!(
                            "another listener on port {port} has the host name {:?}",
                            if host.is_empty() { "*" } else { host.as_str() }
                        ),
                    );
                }
            }
        }
        out
    }

    fn listener(
        &mut self,
        key: &Key,
        l: &Listener,
        frontend: Option<&FrontendEval>,
    ) -> ListenerEval {
        let mut eval = ListenerEval {
            name: l.name.clone(),
            port: l.port,
            hostname: l.hostname.clone().filter(|h| !h.is_empty()),
            namespace: key.namespace.clone(),
            kinds: Vec::new(),
            from: From::Same,
            served_as: None,
            terminates_tls: false,
            has_certificate: false,
            client_certificate: None,
            accepted: Cond::yes("Accepted", "Accepted"),
            resolved: Cond::yes("ResolvedRefs", "ResolvedRefs"),
            conflicted: Cond::no("Conflicted", "NoConflicts", ""),
            attached_routes: 0,
        };
        let mode = l.tls.as_ref().and_then(|t| t.mode.as_deref());
        let (socket, wanted) = match (l.protocol.as_str(), mode) {
            ("HTTP", _) => (ClientProtocol::Http, self.opts.gateway_http_port),
            ("HTTPS", _) => (ClientProtocol::Https, self.opts.gateway_https_port),
            // TLS shares the TLS socket: connections are told apart by server name.
            ("TLS", Some("Passthrough")) => (ClientProtocol::Https, self.opts.gateway_https_port),
            ("TLS", None | Some("Terminate")) => {
                eval.terminates_tls = true;
                (ClientProtocol::Https, self.opts.gateway_https_port)
            }
            (other, _) => {
                let m = format!(
                    "protocol {other:?} (tls.mode {:?}) is not served by Weir (HTTP, HTTPS and \
                     TLS are)",
                    mode.unwrap_or_default()
                );
                eval.accepted = Cond::no("Accepted", "UnsupportedProtocol", m);
                eval.resolved = self.route_kinds(l, &mut eval.kinds);
                return eval;
            }
        };
        if i32::from(wanted) != l.port {
            eval.accepted = Cond::no(
                "Accepted",
                "PortUnavailable",
                format!(
                    "Weir serves {} listeners on port {wanted} only (--gateway-{}-port)",
                    l.protocol,
                    if socket == ClientProtocol::Http {
                        "http"
                    } else {
                        "https"
                    }
                ),
            );
        }
        eval.resolved = self.route_kinds(l, &mut eval.kinds);
        if let Some(ns) = l
            .allowed_routes
            .as_ref()
            .and_then(|a| a.namespaces.as_ref())
        {
            eval.from = match ns.from.as_deref() {
                Some("All") => From::All,
                Some("Selector") => From::Selector(ns.selector.clone().unwrap_or_default()),
                _ => From::Same,
            };
        }
        if let Some(f) = frontend {
            // Unusable CAs outweigh the port (the suite reads `NoValidCACertificate` on
            // listeners of any port).
            if let Some(c) = &f.accepted {
                eval.accepted = c.clone();
            }
            if let Some(c) = &f.resolved {
                eval.resolved = c.clone();
            }
        }
        if l.protocol == "HTTPS" || eval.terminates_tls {
            let validation = frontend.and_then(|f| f.validation.clone());
            let serve = eval.accepted.holds();
            match self.listener_certificate(key, l, serve, validation) {
                Ok(id) => {
                    eval.has_certificate = serve;
                    eval.client_certificate = id;
                }
                // A certificate problem outweighs route kinds.
                Err(cond) => eval.resolved = cond,
            }
        }
        if eval.accepted.holds() {
            eval.served_as = Some(socket);
        }
        eval
    }

    /// The route kinds a listener allows, into `kinds`; `ResolvedRefs` false when it names a
    /// kind Weir does not serve on that protocol.
    fn route_kinds(&self, l: &Listener, kinds: &mut Vec<RouteGroupKind>) -> Cond {
        let supported = kinds_for(&l.protocol);
        let asked = l
            .allowed_routes
            .as_ref()
            .map(|a| a.kinds.as_slice())
            .unwrap_or(&[]);
        if asked.is_empty() {
            kinds.extend(supported.iter().map(|k| RouteGroupKind {
                group: Some(GROUP.into()),
                kind: k.to_string(),
            }));
            return Cond::yes("ResolvedRefs", "ResolvedRefs");
        }
        let mut bad = Vec::new();
        for k in asked {
            let group = k.group.as_deref().unwrap_or(GROUP);
            if group == GROUP && supported.contains(&k.kind.as_str()) {
                kinds.push(RouteGroupKind {
                    group: Some(GROUP.into()),
                    kind: k.kind.clone(),
                });
            } else {
                bad.push(format!("{group}/{}", k.kind));
            }
        }
        if bad.is_empty() {
            Cond::yes("ResolvedRefs", "ResolvedRefs")
        } else {
            Cond::no(
                "ResolvedRefs",
                "InvalidRouteKinds",
                format!(
                    "route kinds not served on {} listeners: {}",
                    l.protocol,
                    bad.join(", ")
                ),
            )
        }
    }

    /// Adds the certificate of an HTTPS listener (when `serve`), asking clients for theirs as
    /// `validation` says, or says why there is none. Returns the certificate's id when it
    /// asks for client certificates.
    fn listener_certificate(
        &mut self,
        key: &Key,
        l: &Listener,
        serve: bool,
        validation: Option<ClientValidation>,
    ) -> Result<Option<String>, Cond> {
        let bad = |m: String| Cond::no("ResolvedRefs", "InvalidCertificateRef", m);
        let tls = l.tls.as_ref();
        if tls
            .and_then(|t| t.mode.as_deref())
            .is_some_and(|m| m != "Terminate")
        {
            return Err(bad("this listener terminates TLS (mode Terminate)".into()));
        }
        let refs: &[ObjectReference] = tls.map(|t| t.certificate_refs.as_slice()).unwrap_or(&[]);
        let Some(r) = refs.first() else {
            return Err(bad(
                "a listener that terminates TLS needs tls.certificateRefs".into(),
            ));
        };
        let ns = self
            .gateway_ref(key, r, "Secret", "certificateRefs[0]")
            .map_err(|e| match e {
                RefError::WrongKind(m) => bad(m),
                RefError::NotPermitted(m) => Cond::no("ResolvedRefs", "RefNotPermitted", m),
            })?;
        let skey = Key::new(ns, r.name.as_str());
        let pair = match self.store.secrets.get(&skey) {
            None => Err(format!("Secret {skey} not found")),
            Some(s) if s.type_.as_deref() != Some(TLS_TYPE) => {
                Err(format!("Secret {skey} is not of type {TLS_TYPE}"))
            }
            Some(s) => read_pair(s).map_err(|m| format!("Secret {skey} {m}")),
        };
        let (cert, key_pem) = pair.map_err(bad)?;
        if !serve {
            return Ok(None);
        }
        // One entry per listener host name, even where listeners share a Secret: the proxy
        // answers 421 to a request whose Host belongs to another entry than its SNI
        // (GatewayHTTPSListenerDetectMisdirectedRequests).
        let (mut id, snis) = match &l.hostname {
            Some(h) if !h.is_empty() => {
                let h = h.to_ascii_lowercase();
                (format!("{skey}#{h}"), vec![h])
            }
            _ => (format!("{skey}#default"), Vec::new()),
        };
        // Client certificates are a Gateway's setting: its entry is its own.
        let asks = validation.is_some();
        if asks {
            id = format!("{id}@{key}");
        }
        match self.config.certificates.iter_mut().find(|c| c.id == id) {
            Some(c) => {
                for h in snis {
                    if !c.snis.contains(&h) {
                        c.snis.push(h);
                    }
                }
            }
            None => self.config.certificates.push(Certificate {
                id: id.clone(),
                cert,
                key: key_pem,
                snis,
                client_validation: validation,
            }),
        }
        Ok(asks.then_some(id))
    }

    /// The Gateway's `spec.tls.backend.clientCertificateRef`: `None` when there is none, else
    /// its `ResolvedRefs` condition; a usable certificate is kept for the BackendTLSPolicies
    /// of the Gateway's routes. A bad reference is reported, and the Gateway stays accepted.
    pub(super) fn backend_client_certificate(&mut self, key: &Key, gw: &Gateway) -> Option<Cond> {
        let r = gw
            .spec
            .tls
            .as_ref()?
            .backend
            .as_ref()?
            .client_certificate_ref
            .as_ref()?;
        let cond = match self.gateway_client_certificate(key, r) {
            Ok(cert) => {
                self.backend_client_certs.insert(key.clone(), cert);
                Cond::yes("ResolvedRefs", "ResolvedRefs")
            }
            Err((reason, m)) => {
                self.problem(
                    crate::translate::obj(crate::store::Kind::Gateway, key),
                    crate::problem::Reason::InvalidBackendTls,
                    "spec.tls.backend.clientCertificateRef",
                    format!("{m}; backends are spoken to without a client certificate"),
                );
                Cond::no("ResolvedRefs", reason, m)
            }
        };
        Some(cond)
    }

    /// Reads the client certificate Secret `r` names for Gateway `key`.
    fn gateway_client_certificate(
        &self,
        key: &Key,
        r: &ObjectReference,
    ) -> Result<ClientCertificate, (&'static str, String)> {
        let bad = |m: String| ("InvalidClientCertificateRef", m);
        let ns = self
            .gateway_ref(key, r, "Secret", "clientCertificateRef")
            .map_err(|e| match e {
                RefError::WrongKind(m) => bad(m),
                RefError::NotPermitted(m) => ("RefNotPermitted", m),
            })?;
        let (cert, key_pem) = self.client_certificate(ns, &r.name).map_err(bad)?;
        Ok(ClientCertificate { cert, key: key_pem })
    }

    /// The namespace of the core object of kind `kind` (a Secret, a ConfigMap) that Gateway
    /// `key`'s reference `r` (named `field` in messages) names, once it is of that kind and
    /// the Gateway may read it (its own namespace, or another one's by ReferenceGrant).
    pub(super) fn gateway_ref<'r>(
        &self,
        key: &'r Key,
        r: &'r ObjectReference,
        kind: &str,
        field: &str,
    ) -> Result<&'r str, RefError> {
        let group = r.group.as_deref().unwrap_or("");
        let asked = r.kind.as_deref().unwrap_or(kind);
        if !group.is_empty() || asked != kind {
            return Err(RefError::WrongKind(format!(
                "{field} is a {group}/{asked}; only core {kind}s are read"
            )));
        }
        let ns = r.namespace.as_deref().unwrap_or(&key.namespace);
        if ns != key.namespace
            && !self.granted(
                ("gateway", "Gateway", &key.namespace),
                ("", kind, ns, &r.name),
            )
        {
            return Err(RefError::NotPermitted(format!(
                "{kind} {ns}/{} is in another namespace and no ReferenceGrant there allows \
                 Gateways of {}",
                r.name, key.namespace
            )));
        }
        Ok(ns)
    }

    /// Whether a ReferenceGrant in the target's namespace lets objects of `from` (group short
    /// name `gateway` for the Gateway API's, kind, namespace) refer to `to` (group, kind,
    /// namespace, name).
    pub(super) fn granted(&self, from: (&str, &str, &str), to: (&str, &str, &str, &str)) -> bool {
        let from_group = if from.0 == "gateway" { GROUP } else { from.0 };
        let (to_group, to_kind, to_ns, to_name) = to;
        self.store
            .reference_grants
            .iter()
            .filter(|(k, _)| k.namespace == to_ns)
            .any(|(_, g)| {
                g.spec
                    .from
                    .iter()
                    .any(|f| f.group == from_group && f.kind == from.1 && f.namespace == from.2)
                    && g.spec.to.iter().any(|t| {
                        t.group == to_group
                            && t.kind == to_kind
                            && t.name.as_deref().is_none_or(|n| n == to_name)
                    })
            })
    }
}

/// Why a Gateway's reference to a Secret or a ConfigMap cannot be read.
pub(super) enum RefError {
    /// Not a core object of the kind asked for.
    WrongKind(String),
    /// In another namespace, without a ReferenceGrant.
    NotPermitted(String),
}

/// Whether a label selector selects `labels` (`matchLabels` and `matchExpressions`).
pub(super) fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = sel.match_expressions.iter().flatten().all(|e| {
        let got = labels.get(&e.key);
        let values = e.values.as_deref().unwrap_or(&[]);
        match e.operator.as_str() {
            "In" => got.is_some_and(|g| values.contains(g)),
            "NotIn" => got.is_none_or(|g| !values.contains(g)),
            "Exists" => got.is_some(),
            "DoesNotExist" => got.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// A Gateway's status from its evaluated listeners.
pub(super) fn gateway_status(generation: Option<i64>, listeners: &[ListenerEval]) -> GatewayStatus {
    let valid = listeners
        .iter()
        .filter(|l| l.usable() && l.resolved.holds())
        .count();
    let accepted = if valid == listeners.len() {
        Cond::yes("Accepted", "Accepted")
    } else if valid > 0 {
        Cond::yes_because(
            "Accepted",
            "ListenersNotValid",
            "some listeners are not valid; the others are served",
        )
    } else {
        Cond::no("Accepted", "ListenersNotValid", "no listener is valid")
    };
    let programmed = if valid > 0 {
        Cond::yes("Programmed", "Programmed")
    } else {
        Cond::no("Programmed", "Invalid", "no listener is served")
    };
    GatewayStatus {
        observed_generation: generation,
        conditions: vec![accepted, programmed],
        listeners: listeners
            .iter()
            .map(|l| {
                let programmed = if l.usable() && l.resolved.holds() {
                    Cond::yes("Programmed", "Programmed")
                } else {
                    Cond::no("Programmed", "Invalid", "the listener is not served")
                };
                ListenerStatus {
                    name: l.name.clone(),
                    supported_kinds: l.kinds.clone(),
                    attached_routes: l.attached_routes,
                    conditions: vec![
                        l.accepted.clone(),
                        programmed,
                        l.resolved.clone(),
                        l.conflicted.clone(),
                    ],
                }
            })
            .collect(),
    }
}
