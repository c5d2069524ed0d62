//! Translate and compile 10,000 Ingresses (each with its Service and EndpointSlice), and swap
//! the result into a proxy; then the same for 10,000 HTTPRoutes on one Gateway.
//! `cargo bench -p weir-controller --bench translate`.
//!
//! Target: translate + compile under 1 s and under 300 MB of RSS, for each.

use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use weir_controller::{translate, Options, Store};
use weir_proxy::compile::Runtime;
use weir_proxy::{Proxy, ProxyOptions, Registry};

/// `n` Ingresses over 100 hosts, each with its own Service and a 3-endpoint slice.
pub fn manifests(n: usize) -> String {
    let mut out = String::with_capacity(n * 900);
    out.push_str("apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {name: rid, namespace: default}\nspec: {plugin: correlation-id}\n---\n");
    for i in 0..n {
        let host = i % 100;
        out.push_str(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: app-{i}, namespace: default{}}}\n\
             spec:\n  ingressClassName: weir\n  rules:\n  - host: h{host}.example.com\n    http:\n      paths:\n\
             \x20     - {{path: /svc{i}/api, pathType: Prefix, backend: {{service: {{name: svc-{i}, port: {{number: 80}}}}}}}}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{i}, namespace: default}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: svc-{i}-x, namespace: default, labels: {{kubernetes.io/service-name: svc-{i}}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints:\n\
             - {{addresses: [10.1.{a}.{b}]}}\n- {{addresses: [10.2.{a}.{b}]}}\n- {{addresses: [10.3.{a}.{b}]}}\n---\n",
            if i % 10 == 0 { ", annotations: {weir.dev/plugins: rid}" } else { "" },
            a = i / 250,
            b = i % 250,
        ));
    }
    out
}

/// One Gateway and `n` HTTPRoutes over 100 hosts, each with its own Service and a 3-endpoint
/// slice; every 10th adds a header filter, every 7th rewrites its path prefix, every 5th
/// splits by weight with its neighbour's Service.
pub fn http_route_manifests(n: usize) -> String {
    let mut out = String::with_capacity(n * 1100);
    out.push_str(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: weir}\n\
         spec: {controllerName: weir.dev/gateway-controller}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: default}\n\
         spec:\n  gatewayClassName: weir\n  listeners: [{name: http, port: 80, protocol: HTTP}]\n---\n",
    );
    for i in 0..n {
        let host = i % 100;
        let filter = if i % 10 == 0 {
            "\n    filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-route, value: r}]}}]"
        } else if i % 7 == 0 {
            "\n    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}]"
        } else {
            ""
        };
        let backends = if i % 5 == 0 && i > 0 {
            format!(
                "[{{name: svc-{i}, port: 80, weight: 90}}, {{name: svc-{}, port: 80, weight: 10}}]",
                i - 1
            )
        } else {
            format!("[{{name: svc-{i}, port: 80}}]")
        };
        out.push_str(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: app-{i}, namespace: default}}\n\
             spec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [h{host}.example.com]\n  rules:\n\
             \x20 - matches: [{{path: {{type: PathPrefix, value: /svc{i}/api}}}}]{filter}\n    backendRefs: {backends}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{i}, namespace: default}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: svc-{i}-x, namespace: default, labels: {{kubernetes.io/service-name: svc-{i}}}}}\n\
             addressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints:\n\
             - {{addresses: [10.1.{a}.{b}]}}\n- {{addresses: [10.2.{a}.{b}]}}\n- {{addresses: [10.3.{a}.{b}]}}\n---\n",
            a = i / 250,
            b = i % 250,
        ));
    }
    out
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// Translates and compiles once, checks the result (10,000 routes, no problem) and prints
/// the times and the peak RSS so far.
fn timed_pass(
    what: &str,
    store: &Store,
    opts: &Options,
    registry: &Registry,
) -> weir_controller::Translation {
    let t0 = Instant::now();
    let t = translate(store, opts, registry);
    let translated = t0.elapsed();
    let rt = Runtime::compile(t.config.clone(), registry).unwrap();
    let total = t0.elapsed();
    assert_eq!(rt.routes.len(), 10_000);
    assert!(
        t.problems.is_empty(),
        "{:?}",
        &t.problems[..3.min(t.problems.len())]
    );
    eprintln!(
        "{what}: translate {:.0} ms, + compile = {:.0} ms, peak RSS {:.0} MB",
        translated.as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3,
        rss_mb()
    );
    t
}

fn bench(c: &mut Criterion) {
    let mut store = Store::default();
    for o in Store::parse_manifests(&manifests(10_000)).unwrap() {
        store.insert(o);
    }
    let registry = Registry::builtin();
    let opts = Options::default();

    // One timed pass, printed for the record (and the note).
    let t = timed_pass("10k Ingresses", &store, &opts, &registry);

    let mut g = c.benchmark_group("ingresses_10k");
    g.sample_size(10);
    g.bench_function("translate", |b| {
        b.iter(|| translate(&store, &opts, &registry))
    });
    g.bench_function("compile", |b| {
        b.iter(|| Runtime::compile(t.config.clone(), &registry).unwrap())
    });
    g.bench_function("translate_and_compile", |b| {
        b.iter(|| Runtime::compile(translate(&store, &opts, &registry).config, &registry).unwrap())
    });
    let proxy = Proxy::new(ProxyOptions::default(), Registry::builtin());
    g.bench_function("apply_swap", |b| {
        b.iter(|| proxy.apply(t.config.clone()).unwrap())
    });
    g.finish();
    drop(store);

    let mut store = Store::default();
    for o in Store::parse_manifests(&http_route_manifests(10_000)).unwrap() {
        store.insert(o);
    }
    timed_pass("10k HTTPRoutes", &store, &opts, &registry);
    let mut g = c.benchmark_group("httproutes_10k");
    g.sample_size(10);
    g.bench_function("translate_and_compile", |b| {
        b.iter(|| Runtime::compile(translate(&store, &opts, &registry).config, &registry).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
