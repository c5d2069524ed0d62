//! Where the controller's end-to-end suite runs: the in-process fake API server (default), or a
//! real cluster when `WEIR_E2E_KUBECONFIG` names a kubeconfig.
//!
//! A real API server refuses loopback EndpointSlice addresses, so for a real cluster the echo
//! upstreams run in a network namespace this suite creates (`ip netns` and a veth pair with
//! private addresses on both ends, needs root) and everything is torn down afterwards. The
//! suite's manifests are written for namespace `default` and address 127.0.0.1; the real
//! variant rewrites both.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use super::apiserver::{plural, ApiServer};
use super::{free_port, Proc, WEIR};

const NETNS: &str = "weir-e2e";
const HOST_IF: &str = "weir-e2e-h";
const NS_IF: &str = "weir-e2e-n";
const HOST_IP: &str = "10.213.77.1";
const UPSTREAM_IP: &str = "10.213.77.2";

pub enum Cluster {
    Fake(ApiServer),
    Real {
        client: kube::Client,
        namespace: String,
        kubeconfig: PathBuf,
    },
}

fn api_for(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let (plural, namespaced) = plural(kind);
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    if namespaced {
        Api::namespaced_with(client.clone(), namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    }
}

fn run(cmd: &[&str]) {
    let status = Command::new(cmd[0]).args(&cmd[1..]).status().expect(cmd[0]);
    assert!(status.success(), "{cmd:?} failed");
}

impl Cluster {
    /// The fake API server, or the real cluster named by `WEIR_E2E_KUBECONFIG`.
    pub async fn start() -> Cluster {
        let Ok(path) = std::env::var("WEIR_E2E_KUBECONFIG") else {
            return Cluster::Fake(ApiServer::start());
        };
        let kubeconfig = PathBuf::from(path);
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).expect("WEIR_E2E_KUBECONFIG"),
            &Default::default(),
        )
        .await
        .expect("kubeconfig");
        let client = kube::Client::try_from(config).expect("client");
        let namespace = format!("weir-e2e-{}", std::process::id());
        let c = Cluster::Real {
            client,
            namespace: namespace.clone(),
            kubeconfig,
        };
        // The upstreams' network namespace.
        let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
        let _ = Command::new("ip").args(["link", "del", HOST_IF]).status();
        run(&["ip", "netns", "add", NETNS]);
        run(&[
            "ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF,
        ]);
        run(&["ip", "link", "set", NS_IF, "netns", NETNS]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{HOST_IP}/30"),
            "dev",
            HOST_IF,
        ]);
        run(&["ip", "link", "set", HOST_IF, "up"]);
        run(&[
            "ip",
            "netns",
            "exec",
            NETNS,
            "ip",
            "addr",
            "add",
            &format!("{UPSTREAM_IP}/30"),
            "dev",
            NS_IF,
        ]);
        run(&[
            "ip", "netns", "exec", NETNS, "ip", "link", "set", NS_IF, "up",
        ]);
        run(&[
            "ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up",
        ]);
        // The test namespace and Weir's CRDs.
        c.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {namespace}}}\n"
        ))
        .await;
        c.apply(&weir_crds::crds_yaml()).await;
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        c
    }

    /// The namespace the suite's objects live in.
    pub fn namespace(&self) -> &str {
        match self {
            Cluster::Fake(_) => "default",
            Cluster::Real { namespace, .. } => namespace,
        }
    }

    /// A kubeconfig for the controller.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> PathBuf {
        match self {
            Cluster::Fake(api) => api.kubeconfig(dir),
            Cluster::Real { kubeconfig, .. } => kubeconfig.clone(),
        }
    }

    /// Starts a `weir echo` reachable at the address the manifests name (see [`Cluster::adapt`]).
    pub fn echo(&self, name: &str) -> Proc {
        match self {
            Cluster::Fake(_) => super::echo(name),
            Cluster::Real { .. } => {
                let port = free_port();
                let child = Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        NETNS,
                        WEIR,
                        "echo",
                        "--listen",
                        &format!("{UPSTREAM_IP}:{port}"),
                        "--name",
                        name,
                    ])
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while std::net::TcpStream::connect((UPSTREAM_IP, port)).is_err() {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "echo in {NETNS} did not start"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Proc { child, port }
            }
        }
    }

    /// The suite's manifests, moved to the test namespace and the upstreams' address.
    fn adapt(&self, yaml: &str) -> String {
        match self {
            Cluster::Fake(_) => yaml.to_string(),
            Cluster::Real { namespace, .. } => yaml
                .replace("namespace: default", &format!("namespace: {namespace}"))
                .replace("127.0.0.1", UPSTREAM_IP),
        }
    }

    pub async fn apply(&self, yaml: &str) {
        let yaml = self.adapt(yaml);
        match self {
            Cluster::Fake(api) => api.apply(&yaml),
            Cluster::Real { client, .. } => {
                for doc in serde_yaml::Deserializer::from_str(&yaml) {
                    let v: Value = serde::Deserialize::deserialize(doc).unwrap();
                    if v.is_null() {
                        continue;
                    }
                    let (api_version, kind) = (
                        v["apiVersion"].as_str().unwrap(),
                        v["kind"].as_str().unwrap(),
                    );
                    let ns = v
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or("default");
                    let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap();
                    let api = api_for(client, api_version, kind, ns);
                    api.patch(
                        name,
                        &PatchParams::apply("weir-e2e").force(),
                        &Patch::Apply(&v),
                    )
                    .await
                    .unwrap();
                }
            }
        }
    }

    pub async fn delete(&self, api_version: &str, kind: &str, name: &str) {
        match self {
            Cluster::Fake(api) => api.delete(api_version, kind, "default", name),
            Cluster::Real {
                client, namespace, ..
            } => {
                api_for(client, api_version, kind, namespace)
                    .delete(name, &DeleteParams::default())
                    .await
                    .unwrap();
            }
        }
    }

    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        match self {
            Cluster::Fake(api) => api.get(api_version, kind, "default", name),
            Cluster::Real {
                client, namespace, ..
            } => {
                let o = api_for(client, api_version, kind, namespace)
                    .get_opt(name)
                    .await
                    .expect("get from the cluster")?;
                serde_json::to_value(o).ok()
            }
        }
    }

    /// events.k8s.io Events in the test namespace.
    pub async fn events(&self) -> Vec<Value> {
        match self {
            Cluster::Fake(api) => api.events(),
            Cluster::Real {
                client, namespace, ..
            } => {
                let api: Api<k8s_openapi::api::events::v1::Event> =
                    Api::namespaced(client.clone(), namespace);
                let list = api
                    .list(&Default::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default();
                list.into_iter()
                    .filter_map(|e| serde_json::to_value(e).ok())
                    .collect()
            }
        }
    }

    /// Forces watch expiry (fake only: a real server compacts on its own schedule).
    pub fn expire_watches(&self) -> bool {
        match self {
            Cluster::Fake(api) => {
                api.expire_watches();
                true
            }
            Cluster::Real { .. } => false,
        }
    }

    /// Deletes what the suite created.
    pub async fn cleanup(&self) {
        if let Cluster::Real {
            client, namespace, ..
        } = self
        {
            let api = api_for(client, "v1", "Namespace", "");
            let _ = api.delete(namespace, &DeleteParams::default()).await;
            let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
            let _ = Command::new("ip").args(["link", "del", HOST_IF]).status();
        }
    }
}
