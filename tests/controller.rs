//! `weir controller` end to end: the real binary and the real kube-rs client against an API
//! server speaking the Kubernetes list/watch protocol (tests/common/apiserver.rs), pushing to a
//! real `weir proxy` in front of real upstreams. Each change must be served within 2 s.
//!
//! With `WEIR_E2E_KUBECONFIG` set, the same suite runs against that real cluster instead
//! (tests/common/cluster.rs; needs root for the upstreams' network namespace).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::*;

fn slice(name: &str, service: &str, port: u16) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: {name}, namespace: default, labels: {{kubernetes.io/service-name: {service}}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: {port}}}]\nendpoints:\n- addresses: [127.0.0.1]\n  conditions: {{ready: true}}\n"
    )
}

fn ingress(name: &str, path: &str, service: &str, plugins: Option<&str>) -> String {
    let ann = plugins.map_or(String::new(), |p| {
        format!(", annotations: {{weir.dev/plugins: {p}}}")
    });
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: {name}, namespace: default{ann}}}\n\
         spec:\n  ingressClassName: weir\n  rules:\n  - http:\n      paths:\n      - {{path: {path}, pathType: Prefix, backend: {{service: {{name: {service}, port: {{name: http}}}}}}}}\n"
    )
}

fn plugin(name: &str, status: u16) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Plugin\nmetadata: {{name: {name}, namespace: default}}\n\
         spec: {{plugin: request-termination, config: {{status_code: {status}, message: guarded}}}}\n"
    )
}

const BASE: &str = "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: weir}\nspec: {controller: weir.dev/ingress-controller}\n---\n\
    apiVersion: v1\nkind: Service\nmetadata: {name: echo, namespace: default}\nspec: {ports: [{name: http, port: 80}]}\n";

/// Waits until `f` holds, failing after `limit`; returns how long it took.
async fn within<F, Fut>(limit: Duration, what: &str, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if f().await {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "{what}: not seen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_follows_the_cluster() {
    let cluster = Cluster::start().await;
    let a = cluster.echo("a");
    let b = cluster.echo("b");
    cluster.apply(BASE).await;
    cluster.apply(&slice("echo-1", "echo", a.port)).await;
    cluster.apply(&ingress("app", "/a", "echo", None)).await;

    let weir = Weir::start("{}", &[]);
    let dir = temp_dir("controller");
    let kubeconfig = cluster.kubeconfig(&dir);
    let metrics = free_port();
    let mut controller = Proc {
        child: Command::new(WEIR)
            .args([
                "controller",
                "--proxy-admin",
                &format!("http://127.0.0.1:{}", weir.admin),
            ])
            .args([
                "--publish-status-address",
                "192.0.2.10",
                "--metrics-listen",
                &format!("127.0.0.1:{metrics}"),
            ])
            .args([
                "--watch-namespace",
                cluster.namespace(),
                "--election-namespace",
                cluster.namespace(),
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        port: metrics,
    };
    let c = client();
    let message = |path: &'static str| {
        let c = c.clone();
        let url = weir.url(path);
        async move {
            get(&c, &url, &[]).await.json()["message"]
                .as_str()
                .unwrap_or("")
                .to_string()
        }
    };
    let status = |path: &'static str| {
        let c = c.clone();
        let url = weir.url(path);
        async move { get(&c, &url, &[]).await.status }
    };
    let name_at = |path: &'static str| {
        let c = c.clone();
        let url = weir.url(path);
        async move { get(&c, &url, &[]).await.echo_name() }
    };
    let regarding = |events: &[serde_json::Value], name: &str, reason: &str| {
        events
            .iter()
            .any(|e| e.pointer("/regarding/name") == Some(&name.into()) && e["reason"] == reason)
    };

    // Start-up: list, translate, push.
    within(Duration::from_secs(15), "first table", || async {
        status("/a").await == 200
    })
    .await;
    assert_eq!(name_at("/a").await.as_deref(), Some("a"));

    // A new Ingress.
    cluster.apply(&ingress("second", "/b", "echo", None)).await;
    within(Duration::from_secs(2), "new Ingress", || async {
        status("/b").await == 200
    })
    .await;

    // An EndpointSlice change moves traffic.
    cluster.apply(&slice("echo-1", "echo", b.port)).await;
    within(Duration::from_secs(2), "new endpoints", || async {
        name_at("/a").await.as_deref() == Some("b")
    })
    .await;

    // A bad Plugin: Event and Accepted=False on it, its Ingress answers 503, the rest served.
    cluster.apply(&plugin("guard", 1000)).await;
    cluster
        .apply(&ingress("guarded", "/guarded", "echo", Some("guard")))
        .await;
    within(Duration::from_secs(2), "Accepted=False", || async {
        cluster
            .get("weir.dev/v1alpha1", "Plugin", "guard")
            .await
            .and_then(|p| p.pointer("/status/conditions/0").cloned())
            .is_some_and(|c| {
                c["type"] == "Accepted"
                    && c["status"] == "False"
                    && c["reason"] == "InvalidPluginConfig"
            })
    })
    .await;
    within(Duration::from_secs(2), "Events", || async {
        let events = cluster.events().await;
        regarding(&events, "guard", "InvalidPluginConfig")
            && regarding(&events, "guarded", "PluginNotAccepted")
    })
    .await;
    let events = cluster.events().await;
    let ev = events
        .iter()
        .find(|e| e.pointer("/regarding/name") == Some(&"guard".into()))
        .unwrap();
    assert_eq!(ev["type"], "Warning");
    assert!(ev["note"].as_str().unwrap().contains("status_code"), "{ev}");
    // Status and Events are written before the table reaches the proxy, so wait for it.
    within(Duration::from_secs(2), "guarded route disabled", || async {
        status("/guarded").await == 503
    })
    .await;
    assert!(message("/guarded").await.contains("This route is disabled"));
    assert_eq!(status("/a").await, 200);

    // Fixing it brings the Ingress in, with the plugin.
    cluster.apply(&plugin("guard", 503)).await;
    within(Duration::from_secs(2), "fixed plugin", || async {
        message("/guarded").await == "guarded"
    })
    .await;
    within(Duration::from_secs(2), "Accepted=True", || async {
        cluster
            .get("weir.dev/v1alpha1", "Plugin", "guard")
            .await
            .and_then(|p| p.pointer("/status/conditions/0/status").cloned())
            .is_some_and(|s| s == "True")
    })
    .await;

    // Consumers and their credential Secrets (watched by label): a good one reaches the proxy
    // (redacted on GET /config), a bad one is reported on the Consumer without the Secret's
    // contents.
    cluster
        .apply(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: alice-key, namespace: default, labels: {weir.dev/credential: key-auth}}\n\
             stringData: {key: alice-key-value-0042}\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {name: bob-key, namespace: default, labels: {weir.dev/credential: key-auth}}\n\
             stringData: {apikey: bob-key-value-0043}\n---\n\
             apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: alice, namespace: default}\nspec: {credentials: [alice-key], groups: [staff]}\n---\n\
             apiVersion: weir.dev/v1alpha1\nkind: Consumer\nmetadata: {name: bob, namespace: default}\nspec: {credentials: [bob-key]}\n",
        )
        .await;
    let ns = cluster.namespace().to_string();
    within(Duration::from_secs(2), "consumers pushed", || async {
        let config = get(&c, &weir.admin_url("/config"), &[]).await.json();
        let consumers = config["consumers"].as_array().cloned().unwrap_or_default();
        let id = |c: &serde_json::Value| c["id"].as_str().unwrap_or("").to_string();
        consumers.len() == 2
            && id(&consumers[0]) == format!("{ns}/alice")
            && consumers[0]["credentials"][0]["id"] == format!("{ns}/alice-key")
            && consumers[1]["credentials"]
                .as_array()
                .is_none_or(|c| c.is_empty())
    })
    .await;
    let condition = |name: &'static str| {
        let cluster = &cluster;
        async move {
            cluster
                .get("weir.dev/v1alpha1", "Consumer", name)
                .await
                .and_then(|p| p.pointer("/status/conditions/0").cloned())
                .unwrap_or_default()
        }
    };
    within(Duration::from_secs(2), "Consumer conditions", || async {
        let (a, b) = (condition("alice").await, condition("bob").await);
        a["status"] == "True" && b["status"] == "False" && b["reason"] == "InvalidSecret"
    })
    .await;
    within(Duration::from_secs(2), "Consumer Event", || async {
        regarding(&cluster.events().await, "bob", "InvalidSecret")
    })
    .await;
    let events = serde_json::to_string(&cluster.events().await).unwrap();
    let bob = condition("bob").await.to_string();
    assert!(bob.contains("has no key \\\"key\\\""), "{bob}");
    for text in [&events, &bob] {
        assert!(
            !text.contains("-value-004"),
            "Secret contents leaked: {text}"
        );
    }

    // Deleting an Ingress removes its routes.
    cluster
        .delete("networking.k8s.io/v1", "Ingress", "second")
        .await;
    within(Duration::from_secs(2), "deleted Ingress", || async {
        status("/b").await == 404
    })
    .await;

    // Ingress status from --publish-status-address.
    within(Duration::from_secs(5), "Ingress status", || async {
        cluster
            .get("networking.k8s.io/v1", "Ingress", "app")
            .await
            .and_then(|i| i.pointer("/status/loadBalancer/ingress/0/ip").cloned())
            .is_some_and(|ip| ip == "192.0.2.10")
    })
    .await;

    // Watches expire (410 Gone on resume): the controller relists and keeps following.
    let limit = if cluster.expire_watches() {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(2)
    };
    cluster.apply(&ingress("third", "/c", "echo", None)).await;
    within(limit, "change after relist", || async {
        status("/c").await == 200
    })
    .await;

    // A deleted Service: its paths answer 503, with an Event on the Ingress.
    cluster.delete("v1", "Service", "echo").await;
    within(Duration::from_secs(2), "deleted Service", || async {
        status("/a").await == 503
    })
    .await;
    within(Duration::from_secs(2), "ServiceNotFound event", || async {
        regarding(&cluster.events().await, "app", "ServiceNotFound")
    })
    .await;

    // Controller metrics.
    let m = String::from_utf8(
        get(&c, &format!("http://127.0.0.1:{metrics}/metrics"), &[])
            .await
            .body
            .to_vec(),
    )
    .unwrap();
    assert!(
        m.contains("weir_controller_pushes_total{result=\"ok\"}"),
        "{m}"
    );
    assert!(
        m.contains("weir_controller_objects{kind=\"Ingress\"} 3"),
        "{m}"
    );

    // SIGTERM: the controller exits and gives the leader lease up, so that a standby replica
    // takes over at once instead of waiting for the lease to expire.
    let holder = || async {
        cluster
            .get("coordination.k8s.io/v1", "Lease", "weir-controller-leader")
            .await
            .and_then(|l| l.pointer("/spec/holderIdentity").cloned())
    };
    assert!(holder().await.is_some(), "the controller holds the lease");
    controller.terminate();
    controller.wait_exit(Duration::from_secs(5));
    assert_eq!(holder().await, None, "lease released on shutdown");
    cluster.cleanup().await;
    let _ = std::fs::remove_dir_all(dir);
}
