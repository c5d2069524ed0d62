//! The admin API (127.0.0.1 by default): routing-table pushes, status, health and metrics.
//!
//! | method | path | answer |
//! |---|---|---|
//! | `POST` | `/config` | validates, compiles and swaps: 200 `{"hash"}`, or 400 `{"errors"}` (old table kept) |
//! | `GET` | `/config` | the table in service |
//! | `GET` | `/status` | hash, counts, uptime, connections |
//! | `GET` | `/healthz` | 200 while the process runs |
//! | `GET` | `/readyz` | 200 once a first table was applied, 503 before |
//! | `GET` | `/metrics` | Prometheus text |
//!
//! The status listener (`--status-listen`, for probes and scraping on a pod's address) answers
//! only `GET /healthz`, `/readyz` (503 also while shutting down) and `/metrics`.

use std::convert::Infallible;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;

use crate::config::Config;
use crate::pipeline::ProxyBody;
use crate::server::Proxy;

/// Accepts admin connections until the task is aborted. With `read_only` (the status
/// listener, `--status-listen`) only `GET /healthz`, `/readyz` and `/metrics` are answered,
/// and `/readyz` is 503 once the proxy is shutting down.
pub(crate) async fn serve(
    proxy: Proxy,
    listener: tokio::net::TcpListener,
    read_only: bool,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                continue;
            }
        };
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let proxy = proxy.clone();
                async move {
                    let resp = if read_only {
                        status_route(&proxy, req)
                    } else {
                        route(&proxy, req).await
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response<ProxyBody> {
    let bytes = serde_json::to_vec_pretty(&body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(ProxyBody::bytes(bytes))
        .expect("static parts are valid")
}

async fn route(proxy: &Proxy, req: Request<Incoming>) -> Response<ProxyBody> {
    let shared = proxy.shared();
    match (req.method(), req.uri().path()) {
        (&Method::POST, "/config") => {
            let limit = shared.opts.admin_max_body;
            let body = match Limited::new(req.into_body(), limit).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    let (status, msg) = if e.is::<http_body_util::LengthLimitError>() {
                        (
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!("routing table larger than {limit} bytes"),
                        )
                    } else {
                        (
                            StatusCode::BAD_REQUEST,
                            format!("reading the body failed: {e}"),
                        )
                    };
                    shared
                        .metrics
                        .config_failures
                        .fetch_add(1, Ordering::Relaxed);
                    return json_response(
                        status,
                        json!({ "errors": [{ "entity": "config", "id": "", "field": "", "message": msg }] }),
                    );
                }
            };
            apply(proxy, &body)
        }
        (&Method::GET, "/config") => {
            let rt = shared.runtime.load();
            match serde_json::to_value(&*rt.config) {
                Ok(mut v) => {
                    // Private keys never leave the proxy, even over the loopback admin API.
                    if let Some(certs) = v["certificates"].as_array_mut() {
                        for c in certs {
                            c["key"] = json!(crate::config::REDACTED);
                        }
                    }
                    if let Some(services) = v["services"].as_array_mut() {
                        for s in services {
                            if let Some(c) = s.pointer_mut("/tls/client_certificate") {
                                c["key"] = json!(crate::config::REDACTED);
                            }
                        }
                    }
                    // Nor do credentials, even hashed.
                    if let Some(consumers) = v["consumers"].as_array_mut() {
                        for (shown, c) in consumers.iter_mut().zip(&rt.config.consumers) {
                            if !c.credentials.is_empty() {
                                let hidden: Vec<_> =
                                    c.credentials.iter().map(|c| c.redacted()).collect();
                                shown["credentials"] = json!(hidden);
                            }
                        }
                    }
                    // Nor do the secret fields of plugin configurations.
                    if let Some(plugins) = v["plugins"].as_array_mut() {
                        for p in plugins {
                            let name = p["name"].as_str().unwrap_or_default().to_string();
                            if let Some(config) = p.get_mut("config") {
                                crate::config::redact_plugin_config(&name, config);
                            }
                        }
                    }
                    json_response(StatusCode::OK, v)
                }
                Err(e) => json_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({ "message": e.to_string() }),
                ),
            }
        }
        (&Method::GET, "/status") => {
            let rt = shared.runtime.load();
            json_response(
                StatusCode::OK,
                json!({
                    "hash": &*rt.hash,
                    "ready": shared.ready.load(Ordering::Acquire),
                    "routes": rt.config.routes.len(),
                    "services": rt.config.services.len(),
                    "upstreams": rt.config.upstreams.len(),
                    "plugins": rt.config.plugins.len(),
                    "uptime_seconds": shared.started.elapsed().as_secs(),
                    "connections": shared.connections.load(Ordering::Relaxed),
                    "worker_threads": shared.opts.worker_threads,
                }),
            )
        }
        (&Method::GET, "/upstreams") => {
            let rt = shared.runtime.load();
            json_response(StatusCode::OK, json!({ "upstreams": upstreams(&rt) }))
        }
        (&Method::GET, "/controller-status") => {
            let status = shared.controller_status.load_full();
            json_response(StatusCode::OK, (*status).clone())
        }
        (&Method::GET, "/healthz") => json_response(StatusCode::OK, json!({ "status": "ok" })),
        (&Method::GET, "/readyz") => readyz(proxy),
        (&Method::GET, "/metrics") => metrics(proxy),
        (
            _,
            "/config" | "/status" | "/upstreams" | "/controller-status" | "/healthz" | "/readyz"
            | "/metrics",
        ) => json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({ "message": "method not allowed" }),
        ),
        _ => json_response(StatusCode::NOT_FOUND, json!({ "message": "not found" })),
    }
}

/// Every upstream's (or host-and-port service's) targets with their health and load, once
/// each even when several services share an upstream.
fn upstreams(rt: &crate::compile::Runtime) -> Vec<serde_json::Value> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for s in rt
        .services
        .iter()
        .filter(|s| seen.insert(s.upstream.clone()))
    {
        let targets: Vec<_> = s
            .balancer
            .targets()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let health = match (&s.checks, s.health.get(i)) {
                    (Some(c), Some(h)) if !c.is_healthy(h) => "unhealthy",
                    (Some(_), Some(_)) => "healthy",
                    _ => "unchecked",
                };
                json!({
                    "target": &*t.addr,
                    "health": health,
                    "in_flight": t.load.in_flight(),
                })
            })
            .collect();
        out.push(json!({
            "id": &*s.upstream,
            "algorithm": format!("{:?}", s.balancer.algorithm()),
            "targets": targets,
        }));
    }
    out
}

/// `weir_upstream_target_health`: 1 or 0 per checked target.
fn health_gauges(rt: &crate::compile::Runtime, out: &mut String) {
    use std::fmt::Write;
    let mut seen = std::collections::HashSet::new();
    let mut header = false;
    for s in &rt.services {
        let Some(c) = &s.checks else { continue };
        for h in &s.health {
            if !seen.insert((h.upstream.clone(), h.target.clone())) {
                continue;
            }
            if !header {
                out.push_str("# HELP weir_upstream_target_health Whether a health-checked upstream target is in rotation (1) or ejected (0).\n# TYPE weir_upstream_target_health gauge\n");
                header = true;
            }
            let _ = writeln!(
                out,
                "weir_upstream_target_health{{upstream=\"{}\",target=\"{}\"}} {}",
                crate::metrics::escape(&h.upstream),
                crate::metrics::escape(&h.target),
                u8::from(c.is_healthy(h))
            );
        }
    }
}

/// 200 once a first table was applied, 503 before and once the proxy is shutting down.
fn readyz(proxy: &Proxy) -> Response<ProxyBody> {
    let shared = proxy.shared();
    if shared.unready.load(Ordering::Relaxed) {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "shutting down" }),
        )
    } else if shared.ready.load(Ordering::Acquire) {
        json_response(
            StatusCode::OK,
            json!({ "status": "ready", "hash": &*shared.runtime.load().hash }),
        )
    } else {
        json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "status": "no routing table yet" }),
        )
    }
}

/// The Prometheus text of the proxy and its plugins.
fn metrics(proxy: &Proxy) -> Response<ProxyBody> {
    let shared = proxy.shared();
    let gauges = [(
        "weir_connections_active",
        "Client connections open now.",
        shared.connections.load(Ordering::Relaxed) as f64,
    )];
    let mut text = shared.metrics.render(&gauges);
    health_gauges(&shared.runtime.load(), &mut text);
    shared.registry.metrics(&mut text);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
        .body(ProxyBody::bytes(text))
        .expect("static parts are valid")
}

/// The status listener: probes and metrics, nothing that reads or changes the table.
fn status_route(proxy: &Proxy, req: Request<Incoming>) -> Response<ProxyBody> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => json_response(StatusCode::OK, json!({ "status": "ok" })),
        (&Method::GET, "/readyz") => readyz(proxy),
        (&Method::GET, "/metrics") => metrics(proxy),
        (_, "/healthz" | "/readyz" | "/metrics") => json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({ "message": "method not allowed" }),
        ),
        _ => json_response(StatusCode::NOT_FOUND, json!({ "message": "not found" })),
    }
}

fn apply(proxy: &Proxy, body: &Bytes) -> Response<ProxyBody> {
    let config = match Config::parse(body) {
        Ok(c) => c,
        Err(e) => {
            proxy
                .shared()
                .metrics
                .config_failures
                .fetch_add(1, Ordering::Relaxed);
            return json_response(
                StatusCode::BAD_REQUEST,
                json!({ "errors": [{ "entity": "config", "id": "", "field": "", "message": e.to_string() }] }),
            );
        }
    };
    match proxy.apply(config) {
        Ok(hash) => json_response(StatusCode::OK, json!({ "hash": &*hash })),
        Err(errors) => json_response(StatusCode::BAD_REQUEST, json!({ "errors": errors })),
    }
}
