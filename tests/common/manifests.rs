//! Standalone mode on a folder of manifests: the way the plugin tests run Weir with `Plugin`
//! resources and annotated Ingresses, and load the example manifests of `docs/plugins/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// The IngressClass every manifest folder gets (default class, so examples need no class).
pub const INGRESS_CLASS: &str = "\
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: weir
  annotations:
    ingressclass.kubernetes.io/is-default-class: \"true\"
spec:
  controller: weir.dev/ingress-controller
";

/// The `n`th (from 0) ```yaml block of `docs/plugins/<doc>.md`.
pub fn doc_example(doc: &str, n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/plugins/{doc}.md"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rest = text.as_str();
    let mut blocks = Vec::new();
    while let Some(start) = rest.find("```yaml\n") {
        let body = &rest[start + "```yaml\n".len()..];
        let end = body.find("\n```").expect("unclosed ```yaml block");
        blocks.push(body[..end].to_string());
        rest = &body[end..];
    }
    blocks
        .get(n)
        .unwrap_or_else(|| panic!("docs/plugins/{doc}.md has no example #{n}"))
        .clone()
}

/// The first ```yaml block of `docs/plugins/<doc>.md` with its EndpointSlice port (9001)
/// pointed at `port`.
pub fn doc_example_at(doc: &str, port: u16) -> String {
    let text = doc_example(doc, 0);
    assert!(
        text.contains("port: 9001"),
        "{doc}: example has no port 9001"
    );
    text.replace("port: 9001", &format!("port: {port}"))
}

/// A `Service` named `name` in `namespace` whose one endpoint is 127.0.0.1:`port`.
pub fn service(namespace: &str, name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  ports: [{{name: http, port: 80, targetPort: http}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: {namespace}
  labels: {{kubernetes.io/service-name: {name}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints:
- addresses: [127.0.0.1]
  conditions: {{ready: true}}
"
    )
}

/// A `Plugin` in namespace `demo`; `config` is JSON (a YAML flow mapping): a `&str` or a
/// `serde_json::Value`.
pub fn plugin(name: &str, kind: &str, config: impl std::fmt::Display) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {{name: {name}, namespace: demo}}
spec:
  plugin: {kind}
  config: {config}
"
    )
}

/// An Ingress in namespace `demo` sending the prefix `path` to `service`, with `plugins` (a
/// comma-separated list, or empty for none).
pub fn ingress(name: &str, path: &str, plugins: &str, service: &str) -> String {
    let annotations = match plugins {
        "" => String::new(),
        p => format!("\n  annotations: {{weir.dev/plugins: \"{p}\"}}"),
    };
    format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: demo{annotations}
spec:
  rules:
  - http:
      paths:
      - path: {path}
        pathType: Prefix
        backend:
          service: {{name: {service}, port: {{number: 80}}}}
"
    )
}

/// Joins manifests into one multi-document file.
pub fn docs(parts: &[String]) -> String {
    parts.join("---\n")
}

/// A running `weir standalone` on a temporary folder of manifests.
pub struct Manifests {
    pub proc: Proc,
    pub admin: u16,
    pub dir: PathBuf,
}

impl Drop for Manifests {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Manifests {
    /// Writes `files` (name, YAML) plus the IngressClass into a fresh folder and runs
    /// `weir standalone` on it with `extra` flags; returns once the proxy listens.
    pub fn start(files: &[(&str, &str)], extra: &[&str]) -> Manifests {
        Manifests::start_with_env(files, extra, &[])
    }

    /// [`Manifests::start`] with extra environment variables for the proxy.
    pub fn start_with_env(
        files: &[(&str, &str)],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Manifests {
        Manifests::launch(files, extra, env, Stdio::inherit())
    }

    /// [`Manifests::start_with_env`] with the process's stderr (its log) sent to `stderr`.
    pub fn launch(
        files: &[(&str, &str)],
        extra: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Manifests {
        let dir = temp_dir("manifests");
        std::fs::write(dir.join("00-ingressclass.yaml"), INGRESS_CLASS).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let port = free_port();
        let admin = free_port();
        let child = Command::new(WEIR)
            .arg("standalone")
            .arg(&dir)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(["--worker-threads", "2"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn weir standalone");
        // Owned at once, so a failed wait still stops the process.
        let m = Manifests {
            proc: Proc { child, port },
            admin,
            dir,
        };
        wait_for_port(port);
        wait_for_port(admin);
        m
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.proc.port)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin)
    }

    /// Replaces (or adds) one manifest file; standalone mode picks it up within a second or so.
    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).unwrap();
    }

    /// The routing table in service, as `GET /config` shows it (secrets redacted).
    pub async fn config(&self, c: &HttpClient) -> serde_json::Value {
        get(c, &self.admin_url("/config"), &[]).await.json()
    }
}

/// Sends GET `url` until it answers `want` (bounded by `limit`); returns the last response.
pub async fn wait_for_status(c: &HttpClient, url: &str, want: u16, limit: Duration) -> Resp {
    let started = Instant::now();
    loop {
        let r = get(c, url, &[]).await;
        if r.status == want {
            return r;
        }
        assert!(
            started.elapsed() < limit,
            "{url}: still {} ({:?}), wanted {want} after {limit:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
