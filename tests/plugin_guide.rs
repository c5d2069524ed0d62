//! docs/plugins/writing.md: its example plugin is the real file, and its example manifest,
//! served in standalone mode, does what the guide says.

mod common;

use std::process::{Command, Stdio};

use common::*;

const GUIDE: &str = include_str!("../docs/plugins/writing.md");
const EXAMPLE: &str = include_str!("../proxy/src/plugins/example.rs");

/// The body of the first fenced block with this language after `after`.
fn block<'a>(doc: &'a str, lang: &str, after: &str) -> &'a str {
    let from = doc.find(after).expect("section") + after.len();
    let fence = format!("```{lang}\n");
    let start = from + doc[from..].find(&fence).expect("block") + fence.len();
    let end = start + doc[start..].find("```").expect("closing fence");
    &doc[start..end]
}

#[test]
fn the_guide_quotes_the_example_plugin_whole() {
    assert_eq!(
        block(GUIDE, "rust", "## A complete plugin"),
        EXAMPLE,
        "docs/plugins/writing.md must quote proxy/src/plugins/example.rs unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guide_example_manifest_runs_the_example_plugin() {
    let echo = echo("e");
    let dir = temp_dir("guide");
    let plugin = block(GUIDE, "yaml", "Configured like any other plugin:");
    std::fs::write(dir.join("plugin.yaml"), plugin).unwrap();
    std::fs::write(
        dir.join("app.yaml"),
        format!(
            "apiVersion: networking.k8s.io/v1\n\
             kind: IngressClass\n\
             metadata: {{name: weir}}\n\
             spec: {{controller: weir.dev/ingress-controller}}\n\
             ---\n\
             apiVersion: v1\n\
             kind: Service\n\
             metadata: {{name: app, namespace: default}}\n\
             spec:\n  ports: [{{name: http, port: 80}}]\n\
             ---\n\
             apiVersion: discovery.k8s.io/v1\n\
             kind: EndpointSlice\n\
             metadata:\n  name: app\n  namespace: default\n  labels: {{kubernetes.io/service-name: app}}\n\
             addressType: IPv4\n\
             ports: [{{name: http, port: {}}}]\n\
             endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]\n\
             ---\n\
             apiVersion: networking.k8s.io/v1\n\
             kind: Ingress\n\
             metadata:\n  name: app\n  namespace: default\n  annotations: {{weir.dev/plugins: require-team}}\n\
             spec:\n  ingressClassName: weir\n  rules:\n  - http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend: {{service: {{name: app, port: {{number: 80}}}}}}\n",
            echo.port
        ),
    )
    .unwrap();
    let port = free_port();
    let child = Command::new(WEIR)
        .args(["standalone", dir.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--worker-threads", "1"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _proc = Proc { child, port };
    wait_for_port(port);
    let c = client();
    let url = format!("http://127.0.0.1:{port}/x");

    let refused = get(&c, &url, &[]).await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    assert_eq!(refused.json()["message"], "missing header x-team");
    assert_eq!(refused.echo_name(), None, "refused before the upstream");

    let passed = get(&c, &url, &[("x-team", "payments")]).await;
    assert_eq!(passed.status, 200);
    assert_eq!(passed.header("x-checked-header"), Some("x-team"));
    assert_eq!(passed.json()["headers"]["x-team"], "payments");
    let _ = std::fs::remove_dir_all(dir);
}
