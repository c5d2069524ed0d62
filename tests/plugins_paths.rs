//! `context-path` and `rewrite` through the real binary with Plugin manifests: the documented
//! examples, the seed's cases (the rewrite wins; a path not under the context path), and what
//! the upstream actually received for each request.

mod common;

use std::time::Duration;

use common::manifests::*;
use common::*;

/// A Plugin `name` of kind `plugin` with `config` (a YAML flow mapping).
fn plugin(name: &str, kind: &str, config: &str) -> String {
    format!(
        "---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {{name: {name}, namespace: demo}}
spec:
  plugin: {kind}
  config: {config}
"
    )
}

/// An Ingress `name` for `path` (Prefix) to service `echo` with the plugins `plugins`.
fn ingress(name: &str, path: &str, plugins: &str, strip: bool) -> String {
    format!(
        "---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: demo
  annotations: {{weir.dev/plugins: \"{plugins}\", weir.dev/strip-path: \"{strip}\"}}
spec:
  rules:
  - http:
      paths:
      - {{path: {path}, pathType: Prefix, backend: {{service: {{name: echo, port: {{name: http}}}}}}}}
"
    )
}

/// What the echo upstream received: (path, query).
async fn upstream_saw(c: &HttpClient, url: &str) -> (String, String) {
    let r = get(c, url, &[]).await;
    assert_eq!(r.status, 200, "{url}: {r:?}");
    let j = r.json();
    (
        j["path"].as_str().unwrap().to_string(),
        j["query"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_examples() {
    let e = echo("e");
    let c = client();

    let w = Manifests::start(&[("10.yaml", &doc_example_at("context-path", e.port))], &[]);
    assert_eq!(
        upstream_saw(&c, &w.url("/api/orders?page=2")).await,
        ("/v2/orders".into(), "page=2".into())
    );
    let r = get(&c, &w.url("/shop"), &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["message"],
        "the request path is not under the context path /api"
    );
    assert_eq!(r.echo_name(), None);
    drop(w);

    let w = Manifests::start(&[("10.yaml", &doc_example_at("rewrite", e.port))], &[]);
    assert_eq!(
        upstream_saw(&c, &w.url("/users/42/profile?fields=name")).await,
        ("/v2/profiles/42".into(), "fields=name".into())
    );
    assert_eq!(
        upstream_saw(&c, &w.url("/users/42")).await,
        ("/users/42".into(), String::new())
    );
    drop(w);

    // The second example: replace_prefix.
    let second = doc_example("rewrite", 1).replace("port: 9001", &format!("port: {}", e.port));
    let w = Manifests::start(&[("10.yaml", &second)], &[]);
    assert_eq!(
        upstream_saw(&c, &w.url("/legacy/orders?page=2")).await,
        ("/app/orders".into(), "page=2".into())
    );
    assert_eq!(
        upstream_saw(&c, &w.url("/legacy")).await,
        ("/app".into(), String::new())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_context_path_and_rewrite_matrix() {
    let e = echo("e");
    let manifests = [
        service("demo", "echo", e.port),
        plugin("ctx", "context-path", "{context_path: /api}"),
        plugin(
            "ctx-v2",
            "context-path",
            "{context_path: /shop/, add_prefix: /v2}",
        ),
        plugin("fixed", "rewrite", "{uri: /rewritten}"),
        plugin(
            "fixed-noquery",
            "rewrite",
            "{uri: /rewritten, keep_query: false}",
        ),
        plugin(
            "v1-to-v2",
            "rewrite",
            "{regex: '^/v1/(.*)$', replace: '/v2/$1'}",
        ),
        // Context path alone, on a catch-all Ingress (its own 404 for other paths).
        ingress("ctx", "/", "ctx", false),
        ingress("ctx-v2", "/shop", "ctx-v2", false),
        // The seed's rule: with both, the rewrite URI wins.
        ingress("both", "/both", "ctx-both,fixed", false),
        plugin("ctx-both", "context-path", "{context_path: /both}"),
        // The regex works on context-path's result.
        ingress("chain", "/chain", "ctx-chain,v1-to-v2", false),
        plugin("ctx-chain", "context-path", "{context_path: /chain}"),
        ingress("noquery", "/noquery", "fixed-noquery", false),
        // A rewrite on a strip-path route replaces the strip.
        ingress("stripped", "/stripped", "v1-to-v2", true),
        plugin(
            "profile",
            "rewrite",
            "{regex: '^/u/(.+)[.]json$', replace: '/users/$1/profile'}",
        ),
        ingress("profile", "/u", "profile", false),
    ]
    .concat();
    let w = Manifests::start(&[("10.yaml", &manifests)], &[]);
    let c = client();
    let saw = |p: &str| {
        let (c, url) = (c.clone(), w.url(p));
        async move { upstream_saw(&c, &url).await }
    };
    let pair = |p: &str, q: &str| (p.to_string(), q.to_string());

    // context-path, by path element.
    assert_eq!(saw("/api/x/y?a=1&b=2").await, pair("/x/y", "a=1&b=2"));
    assert_eq!(saw("/api").await, pair("/", ""));
    assert_eq!(saw("/api/").await, pair("/", ""));
    assert_eq!(saw("/api/api/x").await, pair("/api/x", ""));
    // Normalised before the plugin sees it: the upstream gets what was routed.
    assert_eq!(saw("/api/./a/../b").await, pair("/b", ""));
    for outside in ["/apix", "/other/api/x", "/x/../apix/y"] {
        let r = get(&c, &w.url(outside), &[]).await;
        assert_eq!(r.status, 404, "{outside}");
        assert_eq!(r.echo_name(), None, "{outside} reached the upstream");
        assert!(r.json()["message"].as_str().unwrap().contains("/api"));
    }
    // A dot segment cannot climb out of the context path.
    let r = get(&c, &w.url("/api/../admin"), &[]).await;
    assert_eq!(r.status, 404, "{r:?}");
    // add_prefix, and a trailing slash in context_path.
    assert_eq!(saw("/shop/cart?id=3").await, pair("/v2/cart", "id=3"));
    assert_eq!(saw("/shop").await, pair("/v2", ""));

    // Both: rewrite wins; a path not under the context path is refused before the rewrite.
    assert_eq!(saw("/both/anything?q=1").await, pair("/rewritten", "q=1"));
    assert_eq!(saw("/both").await, pair("/rewritten", ""));
    assert_eq!(get(&c, &w.url("/bothx"), &[]).await.status, 404);
    // The regex sees the context-path result.
    assert_eq!(saw("/chain/v1/items/9").await, pair("/v2/items/9", ""));
    assert_eq!(saw("/chain/v3/items").await, pair("/v3/items", ""));
    // A capture that is a dot segment once placed: refused, never sent.
    assert_eq!(saw("/u/7.json").await, pair("/users/7/profile", ""));
    let r = get(&c, &w.url("/u/...json"), &[]).await;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(r.echo_name(), None);
    // keep_query: false.
    assert_eq!(saw("/noquery/x?secret=1").await, pair("/rewritten", ""));
    // The regex works on the full routed path; when it does not match, strip-path applies.
    assert_eq!(saw("/stripped/v1/z").await, pair("/v1/z", ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_configs_are_refused_and_their_ingresses_fail_closed() {
    let e = echo("e");
    let manifests = [
        service("demo", "echo", e.port),
        plugin("bad-ctx", "context-path", "{context_path: api}"),
        plugin(
            "bad-rewrite",
            "rewrite",
            "{regex: '^/(a)$', replace: '/$2'}",
        ),
        plugin("good", "rewrite", "{uri: /fine}"),
        ingress("bad-ctx", "/a", "bad-ctx", false),
        ingress("bad-rewrite", "/b", "bad-rewrite", false),
        ingress("good", "/c", "good", false),
    ]
    .concat();
    let w = Manifests::start(&[("10.yaml", &manifests)], &[]);
    let c = client();
    for path in ["/a/x", "/b/x"] {
        let r = get(&c, &w.url(path), &[]).await;
        assert_eq!(r.status, 503, "{path}: {r:?}");
        assert_eq!(r.echo_name(), None);
    }
    assert_eq!(upstream_saw(&c, &w.url("/c/x")).await.0, "/fine");
    // Mended, it serves.
    w.write(
        "10.yaml",
        &manifests.replace("{context_path: api}", "{context_path: /a}"),
    );
    let r = wait_for_status(&c, &w.url("/a/x"), 200, Duration::from_secs(5)).await;
    assert_eq!(r.json()["path"], "/x");
}
