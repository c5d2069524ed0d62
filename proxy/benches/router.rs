//! Router lookup time against the number of routes (100 … 100,000) and the path depth.
//!
//! `cargo bench -p weir-proxy --bench router`. The target: sub-microsecond at 10k routes,
//! growing with path depth, not with route count.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use http::{HeaderMap, Method};
use std::hint::black_box;
use weir_proxy::config::{ClientProtocol, PathKind, PathRule, Route};
use weir_proxy::router::{Lookup, RequestView, Router};

/// `n` routes spread over 100 hosts, each with a distinct three-element prefix, plus a few
/// exact, regex and host-less routes like a real table has.
fn routes(n: usize) -> Vec<Route> {
    (0..n)
        .map(|i| Route {
            id: format!("r{i}"),
            hosts: vec![format!("h{}.example.com", i % 100)],
            paths: vec![PathRule {
                path: format!("/svc{i}/api/v1"),
                kind: if i % 50 == 0 {
                    PathKind::Exact
                } else {
                    PathKind::Prefix
                },
            }],
            methods: vec![],
            headers: Default::default(),
            protocols: vec![],
            https_redirect_status_code: 426,
            strip_path: false,
            preserve_host: false,
            priority: 0,
            host_header: None,
            rewrite: None,
            upgrade_protocols: Vec::new(),
            namespace: None,
            service: None,
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
        .collect()
}

fn lookup(c: &mut Criterion) {
    let headers = HeaderMap::new();
    let mut group = c.benchmark_group("router_lookup");
    for n in [100usize, 1_000, 10_000, 100_000] {
        let router = Router::new(&routes(n), true).unwrap();
        let i = n / 2 + 1;
        let host = format!("h{}.example.com", i % 100);
        let path = format!("/svc{i}/api/v1/users/42");
        group.bench_with_input(BenchmarkId::new("routes", n), &n, |b, _| {
            b.iter(|| {
                let view = RequestView {
                    host: black_box(&host),
                    path: black_box(&path),
                    method: &Method::GET,
                    headers: &headers,
                    query: None,
                    protocol: ClientProtocol::Http,
                };
                assert!(matches!(router.lookup(&view), Lookup::Matched(_)));
            })
        });
    }
    let router = Router::new(&routes(10_000), true).unwrap();
    for depth in [1usize, 4, 16] {
        let host = "h1.example.com".to_string();
        let path = format!("/svc1/api/v1{}", "/x".repeat(depth));
        group.bench_with_input(BenchmarkId::new("depth_at_10k", depth), &depth, |b, _| {
            b.iter(|| {
                let view = RequestView {
                    host: black_box(&host),
                    path: black_box(&path),
                    method: &Method::GET,
                    headers: &headers,
                    query: None,
                    protocol: ClientProtocol::Http,
                };
                black_box(router.lookup(&view))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
