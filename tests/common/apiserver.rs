//! A small in-memory Kubernetes API server speaking the real list/watch wire protocol: typed
//! collection paths, `resourceVersion`, `ADDED`/`MODIFIED`/`DELETED` watch events streamed as
//! JSON lines, `410 Gone` for expired resource versions, label and field selectors, create /
//! replace (with optimistic concurrency) / merge-patch / status subresources / delete.
//!
//! It is what the controller's end-to-end tests drive the real kube-rs client against.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};

/// (collection path, e.g. `/api/v1/services`; namespace or ""; name)
type ObjKey = (String, String, String);

#[derive(Clone, Debug)]
struct Change {
    rv: u64,
    collection: String,
    namespace: String,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Inner {
    rv: u64,
    uid: u64,
    objects: BTreeMap<ObjKey, Value>,
    history: Vec<Change>,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted: u64,
    /// Bumped to end every open watch.
    epoch: u64,
    /// Discovery: the kinds served at each optional `group/version` (CRDs installed), such as
    /// the Gateway API's. Absent, the version's discovery document is 404.
    served: BTreeMap<String, Vec<&'static str>>,
}

struct State {
    inner: Mutex<Inner>,
    changes: broadcast::Sender<Change>,
    epochs: tokio::sync::watch::Sender<u64>,
}

/// A running fake API server.
pub struct ApiServer {
    pub port: u16,
    state: Arc<State>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        // Tests drop the server from inside their own runtime.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// (API base path, plural, namespaced) for an apiVersion and kind.
fn resource(api_version: &str, kind: &str) -> (String, String, bool) {
    let base = if api_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{api_version}")
    };
    let (plural, namespaced) = plural(kind);
    (base, plural.to_string(), namespaced)
}

/// Every kind the suites use: (kind, plural resource name, namespaced).
const KINDS: &[(&str, &str, bool)] = &[
    ("Service", "services", true),
    ("Secret", "secrets", true),
    ("Ingress", "ingresses", true),
    ("IngressClass", "ingressclasses", false),
    ("EndpointSlice", "endpointslices", true),
    ("Plugin", "plugins", true),
    ("ClusterPlugin", "clusterplugins", false),
    ("Upstream", "upstreams", true),
    ("Consumer", "consumers", true),
    ("Event", "events", true),
    ("Lease", "leases", true),
    ("Namespace", "namespaces", false),
    ("GatewayClass", "gatewayclasses", false),
    ("Gateway", "gateways", true),
    ("HTTPRoute", "httproutes", true),
    ("GRPCRoute", "grpcroutes", true),
    ("ReferenceGrant", "referencegrants", true),
    ("TLSRoute", "tlsroutes", true),
    ("BackendTLSPolicy", "backendtlspolicies", true),
    ("ConfigMap", "configmaps", true),
    (
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
];

/// The plural resource name and scope of a kind.
pub fn plural(kind: &str) -> (&'static str, bool) {
    KINDS
        .iter()
        .find(|(k, _, _)| *k == kind)
        .map(|(_, p, namespaced)| (*p, *namespaced))
        .unwrap_or_else(|| panic!("unknown kind {kind}"))
}

fn kind_of_plural(plural: &str) -> &'static str {
    KINDS
        .iter()
        .find(|(_, p, _)| *p == plural)
        .map_or("Unknown", |(k, _, _)| k)
}

/// A parsed request path.
struct Target {
    base: String,
    namespace: String,
    plural: String,
    name: Option<String>,
    status: bool,
}

impl Target {
    fn collection(&self) -> String {
        format!("{}/{}", self.base, self.plural)
    }
}

fn parse_path(path: &str) -> Option<Target> {
    let (base, rest) = if let Some(rest) = path.strip_prefix("/api/v1/") {
        ("/api/v1".to_string(), rest)
    } else {
        let rest = path.strip_prefix("/apis/")?;
        let mut it = rest.splitn(3, '/');
        let (g, v, rest) = (it.next()?, it.next()?, it.next()?);
        (format!("/apis/{g}/{v}"), rest)
    };
    let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let (namespace, parts) = match parts.as_slice() {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (ns.to_string(), rest.to_vec()),
        _ => (String::new(), parts),
    };
    let (plural, name, status) = match parts.as_slice() {
        [p] => (p.to_string(), None, false),
        [p, n] => (p.to_string(), Some(n.to_string()), false),
        [p, n, "status"] => (p.to_string(), Some(n.to_string()), true),
        _ => return None,
    };
    Some(Target {
        base,
        namespace,
        plural,
        name,
        status,
    })
}

fn query(uri: &http::Uri) -> BTreeMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn matches_selectors(obj: &Value, q: &BTreeMap<String, String>) -> bool {
    if let Some(sel) = q.get("labelSelector").filter(|s| !s.is_empty()) {
        let labels = obj
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        for term in sel.split(',') {
            let ok = if let Some((k, v)) = term.split_once("!=") {
                labels.get(k).and_then(Value::as_str) != Some(v)
            } else if let Some((k, v)) = term.split_once('=') {
                labels.get(k).and_then(Value::as_str) == Some(v.trim_start_matches('='))
            } else {
                labels.get(term).is_some()
            };
            if !ok {
                return false;
            }
        }
    }
    if let Some(sel) = q.get("fieldSelector").filter(|s| !s.is_empty()) {
        for term in sel.split(',') {
            let Some((k, v)) = term.split_once('=') else {
                return false;
            };
            let v = v.trim_start_matches('=');
            let got = match k {
                "type" => obj.get("type").and_then(Value::as_str),
                "metadata.name" => obj.pointer("/metadata/name").and_then(Value::as_str),
                "metadata.namespace" => obj.pointer("/metadata/namespace").and_then(Value::as_str),
                _ => None,
            };
            if got != Some(v) {
                return false;
            }
        }
    }
    true
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().unwrap();
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn status_response(code: u16, reason: &str, message: &str) -> Response<WatchBody> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code});
    json_response(StatusCode::from_u16(code).unwrap(), &body)
}

fn json_response(status: StatusCode, v: &Value) -> Response<WatchBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(WatchBody::full(Bytes::from(serde_json::to_vec(v).unwrap())))
        .unwrap()
}

/// A response body that is either complete or fed by a channel (watch streams).
pub struct WatchBody {
    full: Option<Bytes>,
    rx: Option<mpsc::Receiver<Bytes>>,
}

impl WatchBody {
    fn full(b: Bytes) -> WatchBody {
        WatchBody {
            full: Some(b),
            rx: None,
        }
    }
}

impl hyper::body::Body for WatchBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(b) = self.full.take() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match self.rx.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }
}

impl State {
    /// Stores an object version and records the change (caller holds the lock).
    fn commit(&self, inner: &mut Inner, key: ObjKey, mut obj: Value, kind: &'static str) -> Value {
        inner.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        let change = Change {
            rv: inner.rv,
            collection: key.0.clone(),
            namespace: key.1.clone(),
            kind,
            object: obj.clone(),
        };
        if kind == "DELETED" {
            inner.objects.remove(&key);
        } else {
            inner.objects.insert(key, obj.clone());
        }
        inner.history.push(change.clone());
        let _ = self.changes.send(change);
        obj
    }

    fn create(&self, t: &Target, mut obj: Value) -> Result<Value, (u16, String)> {
        let mut inner = self.inner.lock().unwrap();
        let name = match obj.pointer("/metadata/name").and_then(Value::as_str) {
            Some(n) => n.to_string(),
            None => {
                let prefix = obj
                    .pointer("/metadata/generateName")
                    .and_then(Value::as_str)
                    .unwrap_or("obj-")
                    .to_string();
                format!("{prefix}{:x}", inner.rv + 1000)
            }
        };
        let key = (t.collection(), t.namespace.clone(), name.clone());
        if inner.objects.contains_key(&key) {
            return Err((409, format!("{name} already exists")));
        }
        inner.uid += 1;
        let meta = obj["metadata"]
            .as_object_mut()
            .ok_or((400, "no metadata".to_string()))?;
        meta.insert("name".into(), json!(name));
        if !t.namespace.is_empty() {
            meta.insert("namespace".into(), json!(t.namespace));
        }
        meta.insert(
            "uid".into(),
            json!(format!("00000000-0000-0000-0000-{:012}", inner.uid)),
        );
        meta.insert("generation".into(), json!(1));
        meta.entry("creationTimestamp")
            .or_insert(json!("2026-01-01T00:00:00Z"));
        Ok(self.commit(&mut inner, key, obj, "ADDED"))
    }

    fn replace(&self, t: &Target, mut obj: Value) -> Result<Value, (u16, String)> {
        let mut inner = self.inner.lock().unwrap();
        let key = (t.collection(), t.namespace.clone(), t.name.clone().unwrap());
        let Some(old) = inner.objects.get(&key).cloned() else {
            return Err((404, "not found".into()));
        };
        if let Some(rv) = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            if Some(rv)
                != old
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
            {
                return Err((
                    409,
                    "the object has been modified; please apply your changes to the latest version"
                        .into(),
                ));
            }
        }
        for f in ["uid", "creationTimestamp", "namespace", "name"] {
            obj["metadata"][f] = old["metadata"][f].clone();
        }
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        obj["metadata"]["generation"] = json!(if obj.get("spec") != old.get("spec") {
            generation + 1
        } else {
            generation
        });
        if t.status {
            let mut merged = old.clone();
            merged["status"] = obj["status"].clone();
            obj = merged;
        } else if let Some(s) = old.get("status") {
            obj["status"] = s.clone();
        }
        Ok(self.commit(&mut inner, key, obj, "MODIFIED"))
    }

    fn patch(&self, t: &Target, patch: Value) -> Result<Value, (u16, String)> {
        let mut inner = self.inner.lock().unwrap();
        let key = (t.collection(), t.namespace.clone(), t.name.clone().unwrap());
        let Some(old) = inner.objects.get(&key).cloned() else {
            return Err((404, "not found".into()));
        };
        let mut obj = old.clone();
        if t.status {
            if let Some(s) = patch.get("status") {
                merge(&mut obj["status"], s);
            }
        } else {
            merge(&mut obj, &patch);
            for f in [
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "resourceVersion",
            ] {
                obj["metadata"][f] = old["metadata"][f].clone();
            }
            if obj.get("spec") != old.get("spec") {
                let generation = old
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                obj["metadata"]["generation"] = json!(generation + 1);
            }
        }
        Ok(self.commit(&mut inner, key, obj, "MODIFIED"))
    }

    fn delete(&self, t: &Target) -> Result<Value, (u16, String)> {
        let mut inner = self.inner.lock().unwrap();
        let key = (t.collection(), t.namespace.clone(), t.name.clone().unwrap());
        let Some(old) = inner.objects.get(&key).cloned() else {
            return Err((404, "not found".into()));
        };
        Ok(self.commit(&mut inner, key, old, "DELETED"))
    }
}

fn in_scope(t: &Target, collection: &str, namespace: &str) -> bool {
    collection == t.collection() && (t.namespace.is_empty() || t.namespace == namespace)
}

/// The discovery document of `/apis/group/version`, when that version is served.
fn discovery(state: &State, path: &str) -> Option<Response<WatchBody>> {
    let gv = path.strip_prefix("/apis/")?.trim_end_matches('/');
    if gv.matches('/').count() != 1 {
        return None;
    }
    let inner = state.inner.lock().unwrap();
    let Some(kinds) = inner.served.get(gv) else {
        return Some(status_response(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    let resources: Vec<Value> = kinds
        .iter()
        .map(|k| {
            let (plural, namespaced) = plural(k);
            json!({"name": plural, "singularName": k.to_lowercase(), "namespaced": namespaced,
                "kind": k, "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]})
        })
        .collect();
    let doc = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources});
    Some(json_response(StatusCode::OK, &doc))
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<WatchBody> {
    if let Some(r) = discovery(&state, req.uri().path()) {
        return r;
    }
    let Some(t) = parse_path(req.uri().path()) else {
        return status_response(404, "NotFound", "unknown path");
    };
    let q = query(req.uri());
    let method = req.method().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let parsed = || -> Result<Value, (u16, String)> {
        if body.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&body)
            .or_else(|_| serde_yaml::from_slice(&body))
            .map_err(|e| (400, e.to_string()))
    };
    let reply = |r: Result<Value, (u16, String)>, ok: StatusCode| match r {
        Ok(v) => json_response(ok, &v),
        Err((code, m)) => status_response(
            code,
            if code == 404 {
                "NotFound"
            } else if code == 409 {
                "Conflict"
            } else {
                "BadRequest"
            },
            &m,
        ),
    };
    match (method, &t.name) {
        (Method::GET, Some(name)) => {
            let inner = state.inner.lock().unwrap();
            match inner
                .objects
                .get(&(t.collection(), t.namespace.clone(), name.clone()))
            {
                Some(v) => json_response(StatusCode::OK, v),
                None => status_response(404, "NotFound", &format!("{} {name} not found", t.plural)),
            }
        }
        (Method::GET, None) if matches!(q.get("watch").map(String::as_str), Some("true" | "1")) => {
            watch(state, t, q)
        }
        (Method::GET, None) => {
            let inner = state.inner.lock().unwrap();
            let items: Vec<Value> = inner
                .objects
                .iter()
                .filter(|((c, ns, _), v)| in_scope(&t, c, ns) && matches_selectors(v, &q))
                .map(|(_, v)| v.clone())
                .collect();
            let api_version = t
                .base
                .trim_start_matches("/apis/")
                .trim_start_matches("/api/")
                .to_string();
            let list = json!({
                "apiVersion": api_version,
                "kind": format!("{}List", kind_of_plural(&t.plural)),
                "metadata": {"resourceVersion": inner.rv.to_string()},
                "items": items,
            });
            json_response(StatusCode::OK, &list)
        }
        (Method::POST, None) => match parsed() {
            Ok(v) => reply(state.create(&t, v), StatusCode::CREATED),
            Err(e) => reply(Err(e), StatusCode::OK),
        },
        (Method::PUT, Some(_)) => match parsed() {
            Ok(v) => reply(state.replace(&t, v), StatusCode::OK),
            Err(e) => reply(Err(e), StatusCode::OK),
        },
        (Method::PATCH, Some(_)) => match parsed() {
            Ok(v) => reply(state.patch(&t, v), StatusCode::OK),
            Err(e) => reply(Err(e), StatusCode::OK),
        },
        (Method::DELETE, Some(_)) => reply(state.delete(&t), StatusCode::OK),
        _ => status_response(405, "MethodNotAllowed", "method not allowed"),
    }
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

fn watch(state: Arc<State>, t: Target, q: BTreeMap<String, String>) -> Response<WatchBody> {
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = Duration::from_secs(
        q.get("timeoutSeconds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(290)
            .min(290),
    );
    // Subscribe before reading the backlog so nothing falls in between.
    let mut live = state.changes.subscribe();
    let mut epochs = state.epochs.subscribe();
    let backlog: Result<Vec<(&'static str, Value)>, ()> = {
        let inner = state.inner.lock().unwrap();
        if from != 0 && from < inner.compacted {
            Err(())
        } else if from == 0 {
            Ok(inner
                .objects
                .iter()
                .filter(|((c, ns, _), v)| in_scope(&t, c, ns) && matches_selectors(v, &q))
                .map(|(_, v)| ("ADDED", v.clone()))
                .collect())
        } else {
            Ok(inner
                .history
                .iter()
                .filter(|c| {
                    c.rv > from
                        && in_scope(&t, &c.collection, &c.namespace)
                        && matches_selectors(&c.object, &q)
                })
                .map(|c| (c.kind, c.object.clone()))
                .collect())
        }
    };
    let last_sent = match &backlog {
        Ok(_) => state.inner.lock().unwrap().rv.max(from),
        Err(_) => 0,
    };
    tokio::spawn(async move {
        let backlog = match backlog {
            Ok(b) => b,
            Err(()) => {
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("too old resource version: {from}"), "reason": "Expired", "code": 410});
                let _ = tx.send(event_line("ERROR", &status)).await;
                return;
            }
        };
        for (kind, obj) in backlog {
            if tx.send(event_line(kind, &obj)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                change = live.recv() => match change {
                    Ok(c) if c.rv > last_sent && in_scope(&t, &c.collection, &c.namespace) && matches_selectors(&c.object, &q) => {
                        if tx.send(event_line(c.kind, &c.object)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                },
                _ = epochs.changed() => return,
                _ = &mut deadline => return,
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(WatchBody {
            full: None,
            rx: Some(rx),
        })
        .unwrap()
}

impl ApiServer {
    /// Starts on a free loopback port, on its own runtime.
    pub fn start() -> ApiServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (changes, _) = broadcast::channel(4096);
        let (epochs, _) = tokio::sync::watch::channel(0);
        let state = Arc::new(State {
            inner: Mutex::new(Inner::default()),
            changes,
            epochs,
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let st = state.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(handle(st, req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        ApiServer {
            port,
            state,
            runtime: Some(runtime),
        }
    }

    /// Writes a kubeconfig pointing at this server.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://127.0.0.1:{}\"}}\n\
             users:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake, namespace: default}}\n\
             current-context: fake\n",
            self.port
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    fn target_of(obj: &Value) -> Target {
        let api_version = obj["apiVersion"].as_str().expect("apiVersion");
        let kind = obj["kind"].as_str().expect("kind");
        let (base, plural, namespaced) = resource(api_version, kind);
        let namespace = if namespaced {
            obj.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string()
        } else {
            String::new()
        };
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        Target {
            base,
            namespace,
            plural,
            name,
            status: false,
        }
    }

    /// Creates or replaces every object of a multi-document YAML text.
    pub fn apply(&self, yaml: &str) {
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            if v.is_null() {
                continue;
            }
            let t = Self::target_of(&v);
            let exists = {
                let inner = self.state.inner.lock().unwrap();
                inner.objects.contains_key(&(
                    t.collection(),
                    t.namespace.clone(),
                    t.name.clone().unwrap(),
                ))
            };
            let r = if exists {
                self.state.replace(&t, v)
            } else {
                self.state.create(&t, v)
            };
            r.unwrap();
        }
    }

    /// Deletes an object.
    pub fn delete(&self, api_version: &str, kind: &str, namespace: &str, name: &str) {
        let (base, plural, namespaced) = resource(api_version, kind);
        let t = Target {
            base,
            namespace: if namespaced {
                namespace.into()
            } else {
                String::new()
            },
            plural,
            name: Some(name.into()),
            status: false,
        };
        self.state.delete(&t).unwrap();
    }

    /// Reads an object.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let (base, plural, namespaced) = resource(api_version, kind);
        let ns = if namespaced {
            namespace.to_string()
        } else {
            String::new()
        };
        self.state
            .inner
            .lock()
            .unwrap()
            .objects
            .get(&(format!("{base}/{plural}"), ns, name.to_string()))
            .cloned()
    }

    /// Serves `kinds` at `group_version` in discovery, as installing their CRDs would.
    pub fn serve_api(&self, group_version: &str, kinds: &[&'static str]) {
        let mut inner = self.state.inner.lock().unwrap();
        inner
            .served
            .insert(group_version.to_string(), kinds.to_vec());
    }

    /// Every events.k8s.io Event created so far.
    pub fn events(&self) -> Vec<Value> {
        let inner = self.state.inner.lock().unwrap();
        inner
            .objects
            .iter()
            .filter(|((c, _, _), _)| c.ends_with("/events"))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Ends every open watch and forgets the history: clients must relist (they get 410 Gone
    /// when they try to resume from their last resourceVersion).
    pub fn expire_watches(&self) {
        {
            let mut inner = self.state.inner.lock().unwrap();
            // Every version a client has seen is now too old; a fresh list is not.
            inner.rv += 1;
            inner.compacted = inner.rv;
            inner.history.clear();
            inner.epoch += 1;
        }
        self.state.epochs.send_modify(|e| *e += 1);
    }
}
