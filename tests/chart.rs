//! The Helm chart (`charts/weir`), rendered by a real helm under several values sets and checked
//! object by object: kinds, RBAC against what the controller reads and writes, ports, probes,
//! security context, and every flag handed to `weir proxy` / `weir controller` against the
//! binary's own `--help`. Also: the chart's CRDs are `weir crds`, every value is documented,
//! and the schema refuses typos.
//!
//! helm comes from `WEIR_HELM`, else `target/tools/helm` (what `scripts/install-helm.sh`
//! installs; `.ci/run` calls it). Without helm these tests fail: they do not skip.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize as _;
use serde_yaml::Value;
use weir_controller::{translate, Kind, Options, Store};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const RELEASE: &str = "edge";
const NS: &str = "weir-system";

fn chart() -> PathBuf {
    Path::new(ROOT).join("charts/weir")
}

fn helm() -> PathBuf {
    if let Some(p) = std::env::var_os("WEIR_HELM") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "WEIR_HELM={} is not a file", p.display());
        return p;
    }
    let p = Path::new(ROOT).join("target/tools/helm");
    assert!(
        p.is_file(),
        "no helm at {}: run scripts/install-helm.sh (as .ci/run does), or set WEIR_HELM to a helm binary",
        p.display()
    );
    p
}

/// A values file, removed when dropped.
struct ValuesFile(PathBuf);

impl ValuesFile {
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ValuesFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes `values` (YAML) to a file of its own.
fn values_file(values: &str) -> ValuesFile {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("weir-chart-values-{}-{n}.yaml", std::process::id()));
    std::fs::write(&path, values).unwrap();
    ValuesFile(path)
}

fn run_helm(args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm())
        .args(args)
        .output()
        .expect("running helm");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{stderr}"))
    }
}

/// The objects of `helm template` with `values`, or helm's error.
fn try_render(values: &str, extra: &[&str]) -> Result<Objects, String> {
    let file = values_file(values);
    let chart = chart();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NS,
        "--values",
        file.path(),
    ];
    args.extend_from_slice(extra);
    // Deterministic whatever helm's own default: a Kubernetes with the preStop sleep action.
    if !extra.contains(&"--kube-version") {
        args.extend_from_slice(&["--kube-version", "1.31.0"]);
    }
    let text = run_helm(&args)?;
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).map_err(|e| format!("helm output is not YAML: {e}"))?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(Objects(objects))
}

fn render(values: &str) -> Objects {
    try_render(values, &[]).unwrap_or_else(|e| panic!("helm template failed:\n{e}"))
}

/// Rendered objects, with lookups.
struct Objects(Vec<Value>);

impl Objects {
    fn kinds(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in &self.0 {
            *m.entry(s(&o["kind"]).to_string()).or_default() += 1;
        }
        m
    }

    fn of_kind<'a>(&'a self, kind: &str) -> impl Iterator<Item = &'a Value> + 'a {
        let kind = kind.to_string();
        self.0.iter().filter(move |o| s(&o["kind"]) == kind)
    }

    fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> = self
            .of_kind(kind)
            .filter(|o| s(&o["metadata"]["name"]) == name)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected one {kind} {name}, found {}",
            found.len()
        );
        found[0]
    }

    fn deployment(&self) -> &Value {
        self.one("Deployment", "edge-weir")
    }

    fn container(&self, name: &str) -> &Value {
        seq(&self.deployment()["spec"]["template"]["spec"]["containers"])
            .iter()
            .find(|c| s(&c["name"]) == name)
            .unwrap_or_else(|| panic!("no container {name}"))
    }

    /// The arguments of a container after its subcommand, as (flag, value) pairs.
    fn flags(&self, container: &str) -> Vec<(String, String)> {
        let args = seq(&self.container(container)["args"]);
        assert_eq!(
            s(&args[0]),
            container,
            "the first argument is the subcommand"
        );
        args[1..]
            .iter()
            .map(|a| {
                let a = s(a);
                let (f, v) = a
                    .split_once('=')
                    .unwrap_or_else(|| panic!("argument {a:?} is not --flag=value"));
                assert!(f.starts_with("--"), "argument {a:?} is not --flag=value");
                (f.to_string(), v.to_string())
            })
            .collect()
    }

    fn flag(&self, container: &str, flag: &str) -> Option<String> {
        let all: Vec<_> = self
            .flags(container)
            .into_iter()
            .filter(|(f, _)| f == flag)
            .map(|(_, v)| v)
            .collect();
        assert!(
            all.len() <= 1,
            "{flag} given {} times to {container}",
            all.len()
        );
        all.into_iter().next()
    }

    /// The container port named `name` (in any container).
    fn container_port(&self, name: &str) -> u16 {
        for c in seq(&self.deployment()["spec"]["template"]["spec"]["containers"]) {
            for p in c["ports"].as_sequence().into_iter().flatten() {
                if s(&p["name"]) == name {
                    return p["containerPort"].as_u64().unwrap() as u16;
                }
            }
        }
        panic!("no container port named {name}")
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

fn seq(v: &Value) -> &Vec<Value> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("not a list: {v:?}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|l| l.iter().map(|x| s(x).to_string()).collect())
        .unwrap_or_default()
}

fn listen_port(addr: &str) -> u16 {
    addr.parse::<SocketAddr>()
        .unwrap_or_else(|e| panic!("{addr:?} is not an address: {e}"))
        .port()
}

// ---------------------------------------------------------------------------------------------
// What the controller reads and writes.
// ---------------------------------------------------------------------------------------------

/// How the controller uses one kind of object.
struct Access {
    /// The Rust type watch.rs and report.rs name.
    type_name: &'static str,
    group: &'static str,
    resource: &'static str,
    cluster_scoped: bool,
    /// The leader patches its `/status` subresource.
    status: bool,
}

/// The one list of what the controller reads and writes, by store kind. The match has no
/// wildcard: a new `Kind` does not compile until it is described here (and then the RBAC
/// tests below fail until the chart grants it). `controller_sources_agree_with_this_list`
/// checks it against controller/src/cluster/*.rs.
fn access(kind: Kind) -> Access {
    let a = |type_name, group, resource, cluster_scoped, status| Access {
        type_name,
        group,
        resource,
        cluster_scoped,
        status,
    };
    match kind {
        Kind::Ingress => a("Ingress", "networking.k8s.io", "ingresses", false, true),
        Kind::IngressClass => a(
            "IngressClass",
            "networking.k8s.io",
            "ingressclasses",
            true,
            false,
        ),
        Kind::Service => a("Service", "", "services", false, false),
        Kind::EndpointSlice => a(
            "EndpointSlice",
            "discovery.k8s.io",
            "endpointslices",
            false,
            false,
        ),
        Kind::Secret => a("Secret", "", "secrets", false, false),
        Kind::Plugin => a("Plugin", "weir.dev", "plugins", false, true),
        Kind::ClusterPlugin => a("ClusterPlugin", "weir.dev", "clusterplugins", true, true),
        Kind::Upstream => a("Upstream", "weir.dev", "upstreams", false, true),
        Kind::Consumer => a("Consumer", "weir.dev", "consumers", false, true),
        Kind::Namespace => a("Namespace", "", "namespaces", true, false),
        Kind::GatewayClass => a("GatewayClass", GW, "gatewayclasses", true, true),
        Kind::Gateway => a("Gateway", GW, "gateways", false, true),
        Kind::HTTPRoute => a("HTTPRoute", GW, "httproutes", false, true),
        Kind::GRPCRoute => a("GRPCRoute", GW, "grpcroutes", false, true),
        Kind::TLSRoute => a("TLSRoute", GW, "tlsroutes", false, true),
        Kind::BackendTLSPolicy => a("BackendTLSPolicy", GW, "backendtlspolicies", false, true),
        Kind::ConfigMap => a("ConfigMap", "", "configmaps", false, false),
        Kind::ReferenceGrant => a("ReferenceGrant", GW, "referencegrants", false, false),
    }
}

const GW: &str = "gateway.networking.k8s.io";

fn kinds() -> Vec<Kind> {
    Store::default().counts().iter().map(|(k, _)| *k).collect()
}

/// Verbs on the leader-election Lease, by the kube `Api` method leader.rs calls.
const LEASE_METHODS: &[(&str, &str)] = &[
    ("get_opt", "get"),
    ("get", "get"),
    ("create", "create"),
    ("replace", "update"),
    ("patch", "patch"),
    ("delete", "delete"),
];

/// Where a permission holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Cluster,
    Namespace(String),
}

/// (scope, API group, resource, verb, resource name if limited to one).
type Perm = (Scope, String, String, String, Option<String>);

fn perm(scope: &Scope, group: &str, resource: &str, verb: &str, name: Option<&str>) -> Perm {
    (
        scope.clone(),
        group.into(),
        resource.into(),
        verb.into(),
        name.map(Into::into),
    )
}

/// What the controller needs, in namespaced mode when `namespaces` is set.
fn needed(namespaces: Option<&[&str]>, election_id: &str) -> BTreeSet<Perm> {
    let mut out = BTreeSet::new();
    let scopes = |cluster_scoped: bool| -> Vec<Scope> {
        match namespaces {
            Some(list) if !cluster_scoped => list
                .iter()
                .map(|n| Scope::Namespace(n.to_string()))
                .collect(),
            _ => vec![Scope::Cluster],
        }
    };
    for kind in kinds() {
        let a = access(kind);
        for scope in scopes(a.cluster_scoped) {
            for verb in ["list", "watch"] {
                out.insert(perm(&scope, a.group, a.resource, verb, None));
            }
            if a.status {
                let sub = format!("{}/status", a.resource);
                out.insert(perm(&scope, a.group, &sub, "patch", None));
            }
        }
    }
    // kube-runtime's Recorder creates Events (events.k8s.io/v1) in the namespace of the object,
    // "default" for cluster-scoped ones, and patches them when they repeat.
    let mut event_scopes = scopes(false);
    if namespaces.is_some() {
        event_scopes.push(Scope::Namespace("default".into()));
    }
    for scope in event_scopes {
        for verb in ["create", "patch"] {
            out.insert(perm(&scope, "events.k8s.io", "events", verb, None));
        }
    }
    let lease = Scope::Namespace(NS.into());
    out.insert(perm(
        &lease,
        "coordination.k8s.io",
        "leases",
        "create",
        None,
    ));
    for verb in ["get", "update"] {
        out.insert(perm(
            &lease,
            "coordination.k8s.io",
            "leases",
            verb,
            Some(election_id),
        ));
    }
    out
}

/// What the rendered RBAC objects grant the chart's ServiceAccount.
fn granted(o: &Objects) -> BTreeSet<Perm> {
    let sa = s(&o.deployment()["spec"]["template"]["spec"]["serviceAccountName"]).to_string();
    o.one("ServiceAccount", &sa);
    let is_ours = |binding: &Value| {
        seq(&binding["subjects"]).iter().any(|x| {
            s(&x["kind"]) == "ServiceAccount" && s(&x["name"]) == sa && s(&x["namespace"]) == NS
        })
    };
    let rules_of = |kind: &str, name: &str, ns: Option<&str>| -> Vec<Value> {
        let role = o
            .of_kind(kind)
            .find(|r| {
                s(&r["metadata"]["name"]) == name
                    && ns.is_none_or(|n| r["metadata"]["namespace"].as_str() == Some(n))
            })
            .unwrap_or_else(|| {
                panic!("a binding names {kind} {name} ({ns:?}), which is not rendered")
            });
        seq(&role["rules"]).clone()
    };
    let mut out = BTreeSet::new();
    let mut add = |scope: Scope, rules: Vec<Value>| {
        for rule in rules {
            let names = strings(&rule["resourceNames"]);
            for g in strings(&rule["apiGroups"]) {
                for r in strings(&rule["resources"]) {
                    for v in strings(&rule["verbs"]) {
                        if names.is_empty() {
                            out.insert(perm(&scope, &g, &r, &v, None));
                        }
                        for n in &names {
                            out.insert(perm(&scope, &g, &r, &v, Some(n)));
                        }
                    }
                }
            }
        }
    };
    for b in o.of_kind("ClusterRoleBinding").filter(|b| is_ours(b)) {
        assert_eq!(s(&b["roleRef"]["kind"]), "ClusterRole");
        add(
            Scope::Cluster,
            rules_of("ClusterRole", s(&b["roleRef"]["name"]), None),
        );
    }
    for b in o.of_kind("RoleBinding").filter(|b| is_ours(b)) {
        let ns = s(&b["metadata"]["namespace"]);
        let role_kind = s(&b["roleRef"]["kind"]);
        let ns_filter = (role_kind == "Role").then_some(ns);
        add(
            Scope::Namespace(ns.into()),
            rules_of(role_kind, s(&b["roleRef"]["name"]), ns_filter),
        );
    }
    out
}

fn assert_rbac(o: &Objects, namespaces: Option<&[&str]>) {
    let election_id = o
        .flag("controller", "--election-id")
        .expect("--election-id");
    assert_eq!(
        o.flag("controller", "--election-namespace").as_deref(),
        Some("$(POD_NAMESPACE)")
    );
    let want = needed(namespaces, &election_id);
    let got = granted(o);
    let missing: Vec<_> = want.difference(&got).collect();
    let extra: Vec<_> = got.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the chart's RBAC differs from what the controller uses\nmissing: {missing:#?}\nnot used by the controller: {extra:#?}"
    );
}

/// The generic arguments of `prefix<…>` in `src`, e.g. `spawn::<Ingress>` -> "Ingress".
fn generic_args(src: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find(prefix) {
        let after = &rest[i + prefix.len()..];
        let end = after.find('>').expect("closing >");
        out.push(after[..end].trim().to_string());
        rest = &after[end..];
    }
    out
}

fn cluster_source(file: &str) -> String {
    let path = Path::new(ROOT).join("controller/src/cluster").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The one list above against the controller's code: every watcher of watch.rs (its type and
/// whether it is cluster-wide), every typed `Api` of report.rs (status writes), the Lease
/// methods of leader.rs, and no typed `Api` anywhere else. When this fails, update `access`,
/// `LEASE_METHODS` and charts/weir/templates/rbac.yaml together.
#[test]
fn controller_sources_agree_with_this_list() {
    let by_type: BTreeMap<&str, Access> = kinds()
        .into_iter()
        .map(|k| {
            let a = access(k);
            (a.type_name, a)
        })
        .collect();

    let watch = cluster_source("watch.rs");
    let mut namespaced = generic_args(&watch, "spawn::<");
    // Watched at whichever version the API server serves (ReferenceGrant).
    namespaced.extend(generic_args(&watch, "spawn_versioned::<"));
    let cluster = generic_args(&watch, "spawn_cluster::<");
    assert!(
        !namespaced.is_empty() && !cluster.is_empty(),
        "watch.rs changed shape"
    );
    for (types, cluster_scoped) in [(&namespaced, false), (&cluster, true)] {
        for t in types {
            let a = by_type.get(t.as_str()).unwrap_or_else(|| {
                panic!("watch.rs watches {t}, which tests/chart.rs's `access` does not know: describe it there and grant it in the chart")
            });
            assert_eq!(
                a.cluster_scoped,
                cluster_scoped,
                "watch.rs watches {t} {}",
                if cluster_scoped {
                    "cluster-wide"
                } else {
                    "per namespace"
                }
            );
        }
    }
    let watched: BTreeSet<&str> = namespaced
        .iter()
        .chain(&cluster)
        .map(String::as_str)
        .collect();
    let described: BTreeSet<&str> = by_type.keys().copied().collect();
    assert_eq!(
        watched, described,
        "watched types vs tests/chart.rs's `access`"
    );

    let report = cluster_source("report/mod.rs") + &cluster_source("report/gateway.rs");
    let mut status: BTreeSet<String> = generic_args(&report, "Api::<").into_iter().collect();
    status.extend(generic_args(&report, "Api<"));
    // Written at the version the kind is served at: named by `served_api::<K>`.
    status.extend(generic_args(&report, "served_api::<"));
    status.remove("DynamicObject");
    let want_status: BTreeSet<String> = by_type
        .values()
        .filter(|a| a.status)
        .map(|a| a.type_name.to_string())
        .collect();
    assert_eq!(status, want_status, "report.rs's status writes vs `access`");
    for write in [
        ".patch(",
        ".replace(",
        ".replace_status(",
        ".create(",
        ".delete(",
    ] {
        assert!(
            !report.contains(write),
            "report.rs calls {write}: the chart grants only patch on /status there"
        );
    }
    assert!(
        report.contains(".patch_status(") && report.contains("Recorder"),
        "report.rs no longer patches status or records Events: update the chart and this test"
    );

    let leader = cluster_source("leader.rs");
    assert_eq!(
        generic_args(&leader, "Api<")
            .into_iter()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["Lease".to_string()])
    );
    let mut verbs = BTreeSet::new();
    let mut rest = leader.as_str();
    while let Some(i) = rest.find("api.") {
        let after = &rest[i + 4..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if after[name.len()..].starts_with('(') {
            let verb = LEASE_METHODS
                .iter()
                .find(|(m, _)| *m == name)
                .unwrap_or_else(|| panic!("leader.rs calls api.{name}(): add it to LEASE_METHODS and the chart's Lease Role"))
                .1;
            verbs.insert(verb);
        }
        rest = after;
    }
    assert_eq!(
        verbs,
        BTreeSet::from(["create", "get", "update"]),
        "Lease verbs of leader.rs (the chart's Role grants create, get and update)"
    );

    for entry in std::fs::read_dir(Path::new(ROOT).join("controller/src/cluster")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        if ["watch.rs", "report", "leader.rs"].contains(&file.as_str()) {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        assert!(
            !src.contains("Api::<") && !src.contains("Api<") && !src.contains("kube::Api"),
            "{file} uses the Kubernetes API: describe what it reads or writes in tests/chart.rs and grant it in the chart"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The binary's flags.
// ---------------------------------------------------------------------------------------------

/// The long flags `weir <sub> --help` lists.
fn accepted_flags(sub: &str) -> BTreeSet<String> {
    let out = Command::new(WEIR)
        .args([sub, "--help"])
        .output()
        .expect("weir --help");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.split(['=', '<']).next().unwrap().to_string())
        .collect()
}

/// Every flag the chart passes is one the binary accepts.
fn assert_flags_accepted(o: &Objects) {
    for sub in ["proxy", "controller"] {
        let accepted = accepted_flags(sub);
        let own = if sub == "proxy" {
            "--listen"
        } else {
            "--proxy-admin"
        };
        assert!(
            accepted.contains(own),
            "`weir {sub} --help` lists no {own}: {accepted:?}"
        );
        for (flag, value) in o.flags(sub) {
            assert!(
                accepted.contains(&flag),
                "the chart passes {flag}={value} to `weir {sub}`, which does not accept it (accepted: {accepted:?})"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The values sets.
// ---------------------------------------------------------------------------------------------

#[test]
fn lint_strict_passes_for_every_values_set() {
    let chart = chart();
    for values in [
        "{}",
        "watchNamespaces: [weir-system, team-a]",
        "autoscaling: {enabled: true}",
        "service: {type: NodePort}",
        "metrics: {serviceMonitor: {enabled: true}}",
    ] {
        let file = values_file(values);
        run_helm(&[
            "lint",
            "--strict",
            chart.to_str().unwrap(),
            "--namespace",
            NS,
            "--values",
            file.path(),
        ])
        .unwrap_or_else(|e| panic!("helm lint --strict with {values}:\n{e}"));
    }
}

#[test]
fn defaults() {
    let o = render("{}");
    let kinds = o.kinds();
    let want: BTreeMap<String, usize> = [
        ("ServiceAccount", 1),
        ("ClusterRole", 1),
        ("ClusterRoleBinding", 1),
        ("Role", 1),
        ("RoleBinding", 1),
        ("Service", 2),
        ("Deployment", 1),
        ("IngressClass", 1),
        // The `helm test` hook (helm_test_pod_probes_a_running_proxy).
        ("Pod", 1),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(kinds, want);
    for o in &o.0 {
        let cluster_scoped =
            ["ClusterRole", "ClusterRoleBinding", "IngressClass"].contains(&s(&o["kind"]));
        assert_eq!(
            o["metadata"]["namespace"].as_str(),
            (!cluster_scoped).then_some(NS),
            "namespace of {} {}",
            s(&o["kind"]),
            s(&o["metadata"]["name"])
        );
    }

    assert_rbac(&o, None);
    assert_flags_accepted(&o);

    // The pod: proxy and controller from the same image.
    let d = o.deployment();
    assert_eq!(d["spec"]["replicas"].as_u64(), Some(1));
    let pod = &d["spec"]["template"]["spec"];
    let proxy = o.container("proxy");
    let controller = o.container("controller");
    assert_eq!(
        s(&proxy["image"]),
        format!("weir:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(proxy["image"], controller["image"]);
    assert_eq!(seq(&pod["containers"]).len(), 2);

    // Listeners: traffic, status and metrics on the pod's address; admin on loopback only.
    // The ingress-nginx conversion on with its usual prefix; ingress-nginx's class not served.
    assert_eq!(
        o.flag("controller", "--annotations-prefix").as_deref(),
        Some("nginx.ingress.kubernetes.io")
    );
    assert_eq!(o.flag("controller", "--accept-ingress-nginx-class"), None);
    assert_eq!(o.flag("proxy", "--dns-resolver"), None);
    let listen = o.flag("proxy", "--listen").unwrap();
    let tls = o.flag("proxy", "--tls-listen").unwrap();
    let status = o.flag("proxy", "--status-listen").unwrap();
    let admin = o.flag("proxy", "--admin-listen").unwrap();
    let metrics = o.flag("controller", "--metrics-listen").unwrap();
    for a in [&listen, &tls, &status, &metrics] {
        assert!(a.starts_with("0.0.0.0:"), "{a} is not on the pod's address");
    }
    assert!(admin.starts_with("127.0.0.1:"), "admin API on {admin}");
    assert_eq!(o.container_port("http"), listen_port(&listen));
    assert_eq!(o.container_port("https"), listen_port(&tls));
    assert_eq!(o.container_port("status"), listen_port(&status));
    assert_eq!(o.container_port("metrics"), listen_port(&metrics));
    let admin_port = listen_port(&admin);
    for c in seq(&pod["containers"]) {
        for p in c["ports"].as_sequence().into_iter().flatten() {
            assert_ne!(
                p["containerPort"].as_u64(),
                Some(admin_port as u64),
                "admin port declared"
            );
        }
    }

    // The controller pushes to the proxy of its pod, elects in the pod's namespace, publishes
    // the chart's Service.
    assert_eq!(
        o.flag("controller", "--proxy-admin").unwrap(),
        format!("http://127.0.0.1:{admin_port}")
    );
    let env: BTreeMap<&str, &Value> = seq(&controller["env"])
        .iter()
        .map(|e| (s(&e["name"]), e))
        .collect();
    assert_eq!(
        s(&env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"]),
        "metadata.namespace"
    );
    assert_eq!(
        s(&env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]),
        "metadata.name"
    );
    assert_eq!(
        o.flag("controller", "--publish-service").unwrap(),
        format!("{NS}/edge-weir")
    );
    assert_eq!(o.flag("controller", "--ingress-class").unwrap(), "weir");
    assert_eq!(
        o.flag("controller", "--election-id").unwrap(),
        "edge-weir-leader"
    );
    assert_eq!(o.flag("controller", "--watch-namespace"), None);

    // Probes: the proxy's on its status listener, the controller's on its metrics listener.
    let probe = |c: &Value, which: &str, path: &str, port: &str| {
        let p = &c[which]["httpGet"];
        assert_eq!(s(&p["path"]), path, "{which} of {}", s(&c["name"]));
        assert_eq!(s(&p["port"]), port, "{which} of {}", s(&c["name"]));
    };
    probe(proxy, "readinessProbe", "/readyz", "status");
    probe(proxy, "livenessProbe", "/healthz", "status");
    probe(controller, "readinessProbe", "/healthz", "metrics");
    probe(controller, "livenessProbe", "/healthz", "metrics");

    // A rolling update drops nothing: a preStop pause, then SIGTERM and a drain of
    // --shutdown-grace, all within the termination grace period.
    let pause = proxy["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .expect("preStop sleep");
    let grace = o.flag("proxy", "--shutdown-grace").unwrap();
    let grace: u64 = grace.strip_suffix('s').unwrap().parse().unwrap();
    let period = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        pause > 0 && period > pause + grace,
        "{pause} + {grace} >= {period}"
    );
    let strategy = &d["spec"]["strategy"]["rollingUpdate"];
    assert_eq!(strategy["maxUnavailable"].as_u64(), Some(0));

    // Security: non-root, read-only root, no escalation, no capabilities, RuntimeDefault.
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(65532));
    assert_eq!(
        s(&pod["securityContext"]["seccompProfile"]["type"]),
        "RuntimeDefault"
    );
    for c in [proxy, controller] {
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
        assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
        assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    }

    // The proxy Service: LoadBalancer, HTTP and HTTPS, never the admin port.
    let svc = o.one("Service", "edge-weir");
    assert_eq!(s(&svc["spec"]["type"]), "LoadBalancer");
    let ports: Vec<(String, u64, String)> = seq(&svc["spec"]["ports"])
        .iter()
        .map(|p| {
            (
                s(&p["name"]).to_string(),
                p["port"].as_u64().unwrap(),
                s(&p["targetPort"]).to_string(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("http".to_string(), 80, "http".to_string()),
            ("https".to_string(), 443, "https".to_string())
        ]
    );
    assert!(svc["spec"]["externalTrafficPolicy"].is_null());
    let selector = &svc["spec"]["selector"];
    let labels = &d["spec"]["template"]["metadata"]["labels"];
    for (k, v) in selector.as_mapping().unwrap() {
        assert_eq!(&labels[k], v, "Service selector {k:?}");
    }

    // Metrics: a Service with both metrics ports; Prometheus annotations on the pod.
    let m = o.one("Service", "edge-weir-metrics");
    let mports: BTreeMap<&str, (u64, &str)> = seq(&m["spec"]["ports"])
        .iter()
        .map(|p| {
            (
                s(&p["name"]),
                (p["port"].as_u64().unwrap(), s(&p["targetPort"])),
            )
        })
        .collect();
    assert_eq!(
        mports,
        BTreeMap::from([
            ("metrics-proxy", (listen_port(&status) as u64, "status")),
            (
                "metrics-controller",
                (listen_port(&metrics) as u64, "metrics")
            ),
        ])
    );
    for svc in o.of_kind("Service") {
        for p in seq(&svc["spec"]["ports"]) {
            assert_ne!(p["port"].as_u64(), Some(admin_port as u64));
            assert_ne!(p["targetPort"].as_u64(), Some(admin_port as u64));
        }
    }
    let ann = &d["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(s(&ann["prometheus.io/scrape"]), "true");
    assert_eq!(
        s(&ann["prometheus.io/port"]),
        listen_port(&status).to_string()
    );
    assert_eq!(s(&ann["prometheus.io/path"]), "/metrics");

    // The IngressClass.
    let class = o.one("IngressClass", "weir");
    assert_eq!(
        s(&class["spec"]["controller"]),
        "weir.dev/ingress-controller"
    );
    assert!(class["metadata"]["annotations"].is_null());
}

#[test]
fn gateway_class() {
    assert_eq!(
        render("{}").of_kind("GatewayClass").count(),
        0,
        "off by default: the CRDs may be missing"
    );
    let o = render("gatewayClass: {create: true, name: edge}");
    let class = o.one("GatewayClass", "edge");
    assert_eq!(s(&class["apiVersion"]), "gateway.networking.k8s.io/v1");
    assert_eq!(
        s(&class["spec"]["controllerName"]),
        weir_crds::gateway::CONTROLLER_NAME
    );
    let refused = try_render("gatewayClass: {create: true, name: Not_A_Name}", &[])
        .err()
        .unwrap();
    assert!(refused.contains("gatewayClass"), "{refused}");
}

#[test]
fn namespaced_mode() {
    let o = render("watchNamespaces: [weir-system, team-a]");
    assert_rbac(&o, Some(&[NS, "team-a"]));
    assert_flags_accepted(&o);
    assert_eq!(
        o.flag("controller", "--watch-namespace").unwrap(),
        "weir-system,team-a"
    );
    // Only IngressClasses, ClusterPlugins, GatewayClasses and Namespaces (read for Gateway
    // listeners' namespace selectors) stay cluster-wide.
    let cr = o.one("ClusterRole", "edge-weir");
    let resources: BTreeSet<String> = seq(&cr["rules"])
        .iter()
        .flat_map(|r| strings(&r["resources"]))
        .collect();
    assert_eq!(
        resources,
        BTreeSet::from([
            "ingressclasses".to_string(),
            "clusterplugins".into(),
            "clusterplugins/status".into(),
            "gatewayclasses".into(),
            "gatewayclasses/status".into(),
            "namespaces".into(),
        ])
    );

    // The release namespace must be watched to publish the chart's own Service…
    let err = try_render("watchNamespaces: [team-a]", &[])
        .err()
        .expect("refused");
    assert!(
        err.contains("does not include the release namespace"),
        "{err}"
    );
    // …unless status addresses are fixed.
    let o = render(
        "watchNamespaces: [team-a]\ncontroller: {publishService: {enabled: false}, publishStatusAddresses: [203.0.113.7]}",
    );
    assert_rbac(&o, Some(&["team-a"]));
    assert_flags_accepted(&o);
    assert_eq!(o.flag("controller", "--publish-service"), None);
    assert_eq!(
        o.flag("controller", "--publish-status-address").unwrap(),
        "203.0.113.7"
    );
}

#[test]
fn autoscaling() {
    let o = render("autoscaling: {enabled: true, minReplicas: 3, maxReplicas: 7}\npodDisruptionBudget: {enabled: true}");
    let hpa = o.one("HorizontalPodAutoscaler", "edge-weir");
    assert_eq!(s(&hpa["apiVersion"]), "autoscaling/v2");
    assert_eq!(s(&hpa["spec"]["scaleTargetRef"]["kind"]), "Deployment");
    assert_eq!(s(&hpa["spec"]["scaleTargetRef"]["name"]), "edge-weir");
    assert_eq!(hpa["spec"]["minReplicas"].as_u64(), Some(3));
    assert_eq!(hpa["spec"]["maxReplicas"].as_u64(), Some(7));
    let metric = &seq(&hpa["spec"]["metrics"])[0]["resource"];
    assert_eq!(s(&metric["name"]), "cpu");
    assert_eq!(metric["target"]["averageUtilization"].as_u64(), Some(80));
    assert!(
        o.deployment()["spec"]["replicas"].is_null(),
        "replicas are the HPA's"
    );
    let pdb = o.one("PodDisruptionBudget", "edge-weir");
    assert_eq!(pdb["spec"]["minAvailable"].as_u64(), Some(1));
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        o.deployment()["spec"]["selector"]["matchLabels"]
    );
    assert_rbac(&o, None);
    assert_flags_accepted(&o);
}

#[test]
fn node_port() {
    let o = render(
        "service: {type: NodePort, externalTrafficPolicy: Local, http: {nodePort: 30080}, https: {nodePort: 30443}}",
    );
    let svc = o.one("Service", "edge-weir");
    assert_eq!(s(&svc["spec"]["type"]), "NodePort");
    assert_eq!(s(&svc["spec"]["externalTrafficPolicy"]), "Local");
    let node_ports: Vec<u64> = seq(&svc["spec"]["ports"])
        .iter()
        .map(|p| p["nodePort"].as_u64().unwrap())
        .collect();
    assert_eq!(node_ports, [30080, 30443]);
    assert_flags_accepted(&o);

    let o = render("service: {type: ClusterIP, https: {enabled: false}}\nproxy: {tls: false}");
    let svc = o.one("Service", "edge-weir");
    assert_eq!(s(&svc["spec"]["type"]), "ClusterIP");
    assert_eq!(seq(&svc["spec"]["ports"]).len(), 1);
    assert_eq!(o.flag("proxy", "--tls-listen"), None);
    let err = try_render(
        "service: {type: ClusterIP, externalTrafficPolicy: Local}",
        &[],
    )
    .err()
    .expect("refused");
    assert!(err.contains("externalTrafficPolicy"), "{err}");
}

#[test]
fn service_monitor() {
    let o = render("metrics: {serviceMonitor: {enabled: true, labels: {release: prom}}}");
    let sm = o.one("ServiceMonitor", "edge-weir");
    assert_eq!(s(&sm["apiVersion"]), "monitoring.coreos.com/v1");
    assert_eq!(s(&sm["metadata"]["labels"]["release"]), "prom");
    let metrics = o.one("Service", "edge-weir-metrics");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&metrics["metadata"]["labels"][k], v, "selector {k:?}");
    }
    // The proxy Service must not be selected too (it would be scraped on its traffic ports).
    let proxy_svc = o.one("Service", "edge-weir");
    assert!(sm["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .unwrap()
        .iter()
        .any(|(k, v)| &proxy_svc["metadata"]["labels"][k] != v));
    let ports: Vec<&str> = seq(&sm["spec"]["endpoints"])
        .iter()
        .map(|e| {
            assert_eq!(s(&e["path"]), "/metrics");
            s(&e["port"])
        })
        .collect();
    let service_ports: Vec<&str> = seq(&metrics["spec"]["ports"])
        .iter()
        .map(|p| s(&p["name"]))
        .collect();
    assert_eq!(ports, service_ports);
    assert!(
        o.deployment()["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"]
            .is_null(),
        "no prometheus.io annotations with a ServiceMonitor"
    );
    assert_flags_accepted(&o);
}

#[test]
fn every_option_renders_flags_the_binary_accepts() {
    let o = render(
        r#"
ingressClass: {name: edge, default: true}
controller:
  defaultBackend: web/fallback:http
  electionId: edge-lease
  acceptIngressNginxClass: true
  annotationsPrefix: ingress.example.com
  publishService: {pathOverride: other/lb}
proxy:
  workerThreads: 4
  accessLog: false
  trustedProxies: [10.0.0.0/8, 192.0.2.1]
  dnsResolvers: [10.96.0.10, "10.96.0.11:5353"]
  dnsTtl: 30s
  headerReadTimeout: 20s
  keepaliveTimeout: 75s
  maxBodySize: 10485760
  shutdownGraceSeconds: 20
  preStopSleepSeconds: 5
  extraArgs: ["--max-connections=50000"]
terminationGracePeriodSeconds: 60
listenAddress: "[::]"
image: {repository: registry.example/weir, digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
"#,
    );
    assert_flags_accepted(&o);
    let flags = o.flags("proxy");
    for want in [
        ("--worker-threads", "4"),
        ("--access-log", "false"),
        ("--trusted-proxies", "10.0.0.0/8,192.0.2.1"),
        ("--dns-resolver", "10.96.0.10,10.96.0.11:5353"),
        ("--dns-ttl", "30s"),
        ("--header-read-timeout", "20s"),
        ("--keepalive-timeout", "75s"),
        ("--max-body-size", "10485760"),
        ("--shutdown-grace", "20s"),
        ("--max-connections", "50000"),
        ("--listen", "[::]:8080"),
    ] {
        assert!(
            flags.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} not in {flags:?}"
        );
    }
    for (f, v) in &flags {
        if f.ends_with("-listen") || f == "--listen" {
            v.parse::<SocketAddr>()
                .unwrap_or_else(|e| panic!("{f}={v}: {e}"));
        }
    }
    assert_eq!(
        o.flag("controller", "--default-backend").unwrap(),
        "web/fallback:http"
    );
    assert_eq!(
        o.flag("controller", "--publish-service").unwrap(),
        "other/lb"
    );
    assert_eq!(o.flag("controller", "--ingress-class").unwrap(), "edge");
    assert_eq!(
        o.flag("controller", "--accept-ingress-nginx-class")
            .as_deref(),
        Some("true")
    );
    assert_eq!(
        o.flag("controller", "--annotations-prefix").as_deref(),
        Some("ingress.example.com")
    );
    let class = o.one("IngressClass", "edge");
    assert_eq!(
        s(&class["metadata"]["annotations"]["ingressclass.kubernetes.io/is-default-class"]),
        "true"
    );
    let pod = &o.deployment()["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"].as_u64(), Some(60));
    assert_eq!(
        s(&o.container("proxy")["image"]),
        "registry.example/weir@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );

    // A grace period that would cut the drain short is refused.
    let err = try_render("terminationGracePeriodSeconds: 30", &[])
        .err()
        .expect("refused");
    assert!(err.contains("terminationGracePeriodSeconds"), "{err}");
}

#[test]
fn before_kubernetes_1_30_the_pause_runs_the_image_sleep() {
    let o = try_render("{}", &["--kube-version", "1.24.0"]).unwrap();
    let pre = &o.container("proxy")["lifecycle"]["preStop"];
    assert!(pre["sleep"].is_null());
    assert_eq!(strings(&pre["exec"]["command"]), ["/usr/bin/sleep", "10"]);
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("COPY --from=build /usr/bin/sleep /usr/bin/sleep"),
        "the image must ship /usr/bin/sleep for the chart's preStop on Kubernetes < 1.30"
    );
    // The image's user is the chart's runAsUser.
    assert!(dockerfile.contains("USER 65532:65532"));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["/usr/bin/weir"]"#));
}

#[test]
fn the_schema_refuses_bad_values() {
    for (values, expect) in [
        ("proxy: {workerThred: 2}", "workerThred"),
        ("replicaCount: many", "replicaCount"),
        ("service: {type: Nodeport}", "/service/type"),
        ("watchNamespaces: [Team_A]", "/watchNamespaces/0"),
        ("imagee: {tag: x}", "imagee"),
        (
            "proxy: {headerReadTimeout: 10 seconds}",
            "headerReadTimeout",
        ),
        ("controller: {extraArgs: [proxy]}", "extraArgs"),
        ("redis: {rateLimits: {x: {policy: local}}}", "rateLimits"),
    ] {
        match try_render(values, &[]) {
            Ok(_) => panic!("{values} was accepted"),
            Err(e) => assert!(
                e.contains(expect),
                "{values}: error does not name {expect}:\n{e}"
            ),
        }
    }
}

#[test]
fn redis_rate_limits_translate_without_problems() {
    let o = render(
        "redis: {host: redis.weir-system.svc, password: s3cret, rateLimits: {per-client: {minute: 100, limit_by: ip}, api-bucket: {algorithm: token-bucket, rate: 10, burst: 20}}}",
    );
    let secret = o.one("Secret", "edge-weir-rate-limits");
    assert_eq!(
        s(&secret["metadata"]["labels"]["weir.dev/credential"]),
        "true"
    );
    let plugin = o.one("ClusterPlugin", "per-client");
    assert!(
        !serde_yaml::to_string(plugin).unwrap().contains("s3cret"),
        "no credential in the ClusterPlugin"
    );

    // The controller's own translator reads them (as standalone mode would) without a problem.
    let text: String =
        o.0.iter()
            .filter(|x| ["Secret", "ClusterPlugin"].contains(&s(&x["kind"])))
            .map(|x| format!("---\n{}", serde_yaml::to_string(x).unwrap()))
            .collect();
    let mut store = Store::default();
    for obj in Store::parse_manifests(&text).unwrap() {
        store.insert(obj);
    }
    let t = translate(
        &store,
        &Options::default(),
        &weir_proxy::Registry::builtin(),
    );
    let problems: Vec<String> = t.problems.iter().map(|p| p.to_string()).collect();
    assert!(problems.is_empty(), "{problems:#?}");
    let checked: BTreeSet<String> = t.checked.iter().map(|c| c.name.clone()).collect();
    assert_eq!(
        checked,
        BTreeSet::from(["per-client".to_string(), "api-bucket".into()])
    );
}

#[test]
fn crds_are_weir_crds() {
    let out = Command::new(WEIR).arg("crds").output().unwrap();
    assert!(out.status.success());
    let dir = chart().join("crds");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        files,
        ["weir.dev.yaml"],
        "charts/weir/crds/ holds only weir.dev.yaml"
    );
    let committed = std::fs::read(dir.join("weir.dev.yaml")).unwrap();
    assert!(
        committed == out.stdout,
        "charts/weir/crds/weir.dev.yaml differs from `weir crds`: run `cargo run -- crds > charts/weir/crds/weir.dev.yaml`"
    );
}

#[test]
fn chart_version_is_the_workspace_version() {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(s(&chart["appVersion"]), env!("CARGO_PKG_VERSION"));
}

/// Paths (`a.b.c`) of the values the schema describes: objects with `properties` and no
/// `description` are groups of values, anything else is a value.
fn schema_leaves(node: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in node["properties"].as_object().into_iter().flatten() {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        // A described object (resources, probes, updateStrategy) is one value.
        let group = v["properties"].is_object()
            && v["additionalProperties"] == false
            && v["description"].is_null();
        if group {
            schema_leaves(v, &path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_value_is_commented_and_in_the_readme() {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    let mut leaves = Vec::new();
    schema_leaves(&schema, "", &mut leaves);
    leaves.retain(|l| l != "global");
    assert!(leaves.len() > 50, "{leaves:?}");

    // values.schema.json: every value typed (a `type`, or `oneOf` alternatives that each have
    // one) and described.
    for leaf in &leaves {
        let node = leaf.split('.').fold(&schema, |n, k| &n["properties"][k]);
        let typed = node["type"].is_string()
            || node["type"].is_array()
            || node["oneOf"]
                .as_array()
                .is_some_and(|alts| alts.iter().all(|a| a["type"].is_string()));
        assert!(typed, "values.schema.json: {leaf} has no type: {node}");
        assert!(
            node["description"].as_str().is_some_and(|d| !d.is_empty()),
            "values.schema.json: {leaf} has no description: {node}"
        );
    }

    // values.yaml: every leaf is there, with a comment right above it.
    let values = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut commented: BTreeMap<String, bool> = BTreeMap::new();
    let mut previous = "";
    for line in values.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if let Some((key, _)) = t.split_once(':') {
            if !t.starts_with('#')
                && !t.starts_with('-')
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                while stack.last().is_some_and(|(i, _)| *i >= indent) {
                    stack.pop();
                }
                stack.push((indent, key.to_string()));
                let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
                commented.insert(path.join("."), previous.trim_start().starts_with('#'));
            }
        }
        if !t.is_empty() {
            previous = line;
        }
    }
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    for leaf in &leaves {
        assert_eq!(
            commented.get(leaf),
            Some(&true),
            "values.yaml: {leaf} is missing or has no comment right above it"
        );
        assert!(
            readme.contains(&format!("| `{leaf}` |")),
            "charts/weir/README.md: no row for `{leaf}` in the values table"
        );
    }
}

fn yaml_blocks(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(start) = rest.find("```yaml\n") {
        let body = &rest[start + "```yaml\n".len()..];
        let end = body.find("\n```").expect("unclosed ```yaml block");
        out.push(body[..end].to_string());
        rest = &body[end..];
    }
    out
}

/// docs/install.md: every `my-values.yaml` snippet renders with the chart, and the manifests
/// translate with no problem but the one the page leaves to the reader (the TLS Secret, made
/// with `kubectl create secret tls`).
#[test]
fn install_guide_examples_work() {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/install.md")).unwrap();
    let (mut values, mut manifests) = (0, 0);
    let mut store = Store::default();
    for o in Store::parse_manifests(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: weir}\nspec: {controller: weir.dev/ingress-controller}\n",
    )
    .unwrap()
    {
        store.insert(o);
    }
    for block in yaml_blocks(&doc) {
        if block.starts_with("# my-values.yaml") {
            let o = try_render(&block, &[])
                .unwrap_or_else(|e| panic!("docs/install.md values:\n{block}\n{e}"));
            assert_flags_accepted(&o);
            values += 1;
        } else {
            for o in Store::parse_manifests(&block)
                .unwrap_or_else(|e| panic!("docs/install.md manifest:\n{block}\n{e}"))
            {
                store.insert(o);
            }
            manifests += 1;
        }
    }
    assert!(
        values >= 4 && manifests >= 3,
        "{values} values, {manifests} manifests"
    );
    let t = translate(
        &store,
        &Options::default(),
        &weir_proxy::Registry::builtin(),
    );
    let problems: Vec<String> = t
        .problems
        .iter()
        .filter(|p| !(p.field == "spec.tls[0].secretName" && p.message.contains("echo-tls")))
        .map(|p| p.to_string())
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(!t.config.routes.is_empty());
    let checked: BTreeSet<&str> = t.checked.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(checked, BTreeSet::from(["request-id", "twenty-a-minute"]));
}

/// docs/migrate-from-ingress-nginx.md: every `my-values.yaml` snippet renders, with flags the
/// binary accepts.
#[test]
fn migration_guide_values_render() {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/migrate-from-ingress-nginx.md"))
        .unwrap();
    let mut rendered = 0;
    for block in yaml_blocks(&doc) {
        if block.starts_with("# my-values.yaml") {
            let o = try_render(&block, &[]).unwrap_or_else(|e| {
                panic!("docs/migrate-from-ingress-nginx.md values:\n{block}\n{e}")
            });
            assert_flags_accepted(&o);
            if block.contains("acceptIngressNginxClass: true") {
                assert_eq!(
                    o.flag("controller", "--accept-ingress-nginx-class")
                        .as_deref(),
                    Some("true")
                );
            }
            rendered += 1;
        }
    }
    assert!(
        rendered >= 1,
        "no my-values.yaml snippet in the migration guide"
    );
}

/// A value documented in values.yaml, as helm-docs reads them: a `# --` comment right above a
/// key describes it (the comment lines that follow continue the description); a key without
/// one is a group and only its children are values.
struct Documented {
    path: String,
    default: Value,
    description: String,
}

fn documented_values(values: &str) -> Vec<Documented> {
    let tree: Value = serde_yaml::from_str(values).unwrap();
    let mut out = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut description: Option<Vec<String>> = None;
    for line in values.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if let Some(first) = t.strip_prefix("# --") {
            description = Some(vec![first.trim().to_string()]);
            continue;
        }
        if let Some(more) = t.strip_prefix('#') {
            if let Some(d) = description.as_mut() {
                d.push(more.trim().to_string());
            }
            continue;
        }
        let key = t.split_once(':').map(|(k, _)| k).filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
        let Some(key) = key else {
            description = None;
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_string()));
        let Some(text) = description.take() else {
            continue;
        };
        let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
        out.push(Documented {
            default: path.iter().fold(&tree, |node, k| &node[*k]).clone(),
            path: path.join("."),
            description: text.join(" ").trim().to_string(),
        });
    }
    out
}

/// The README's values table (helm-docs' columns).
fn values_table(values: &[Documented]) -> String {
    let mut out = String::from("| Key | Default | Description |\n|---|---|---|\n");
    for v in values {
        let json = serde_json::to_string(&v.default).unwrap();
        let default = if json.len() <= 60 {
            format!("`{json}`")
        } else {
            "see values.yaml".to_string()
        };
        out.push_str(&format!(
            "| `{}` | {default} | {} |\n",
            v.path,
            v.description.replace('|', "\\|")
        ));
    }
    out
}

const TABLE_BEGIN: &str =
    "<!-- values table: generated from values.yaml by tests/chart.rs (WEIR_BLESS=1 rewrites it) -->\n";
const TABLE_END: &str = "<!-- end of values table -->\n";

#[test]
fn readme_values_table_is_generated_from_values_yaml() {
    let values = documented_values(&std::fs::read_to_string(chart().join("values.yaml")).unwrap());
    let table = values_table(&values);
    let path = chart().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let begin = readme
        .find(TABLE_BEGIN)
        .expect("README.md: no values-table marker")
        + TABLE_BEGIN.len();
    let end = readme[begin..]
        .find(TABLE_END)
        .expect("README.md: no end marker")
        + begin;
    if readme[begin..end] != table {
        if std::env::var("WEIR_BLESS").is_ok() {
            std::fs::write(
                &path,
                format!("{}{table}{}", &readme[..begin], &readme[end..]),
            )
            .unwrap();
            return;
        }
        panic!(
            "charts/weir/README.md's values table is stale: run `WEIR_BLESS=1 cargo nextest run \
             --test chart readme` and review the diff"
        );
    }
    assert!(values.len() > 50, "{table}");
    assert!(
        !table.contains("|  |"),
        "a value with an empty description:\n{table}"
    );

    // values.schema.json describes each value with the same words (editors show them).
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    for v in &values {
        let node = v.path.split('.').fold(&schema, |n, k| &n["properties"][k]);
        assert_eq!(
            node["description"].as_str(),
            Some(v.description.as_str()),
            "values.schema.json: the description of {} is not values.yaml's comment",
            v.path
        );
    }
}

/// `helm test`: the hook Pod's containers run `weir probe` against the chart's Services. Here
/// their exact arguments run against a live proxy, the Service addresses mapped to its loopback
/// ports: they pass while it serves and fail once it has stopped.
#[test]
fn helm_test_pod_probes_a_running_proxy() {
    let o = render("");
    let pod = o.one("Pod", "edge-weir-test-proxy-answers");
    assert_eq!(s(&pod["metadata"]["annotations"]["helm.sh/hook"]), "test");
    assert_eq!(s(&pod["spec"]["restartPolicy"]), "Never");
    let containers = seq(&pod["spec"]["containers"]);
    assert_eq!(containers.len(), 2, "{containers:?}");
    for c in containers {
        assert_eq!(s(&c["image"]), s(&o.container("proxy")["image"]));
        assert_eq!(
            c["securityContext"],
            o.container("proxy")["securityContext"]
        );
    }

    let status = common::free_port();
    let weir = common::Weir::start("{}", &["--status-listen", &format!("127.0.0.1:{status}")]);
    common::wait_for_port(status);
    let local = |url: &str| {
        url.replace(
            "http://edge-weir-metrics.weir-system.svc:8102/",
            &format!("http://127.0.0.1:{status}/"),
        )
        .replace("http://edge-weir.weir-system.svc:80/", &weir.url("/"))
    };
    let probe = |args: &Vec<String>| {
        let out = Command::new(WEIR).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let runs: Vec<Vec<String>> = containers
        .iter()
        .map(|c| strings(&c["args"]).iter().map(|a| local(a)).collect())
        .collect();
    for args in &runs {
        assert!(
            !args.iter().any(|a| a.contains(".svc")),
            "unmapped Service address: {args:?}"
        );
        let (code, text) = probe(args);
        assert_eq!(code, Some(0), "{args:?}: {text}");
    }
    // The proxy's 404 for `/` (no route) is an answer; /readyz must be 200.
    assert!(
        probe(&runs[1]).1.contains("-> 404"),
        "{:?}",
        probe(&runs[1])
    );
    let (code, text) = probe(&vec!["probe".into(), weir.url("/"), "--status=200".into()]);
    assert_eq!(code, Some(1), "a 404 where 200 is expected fails: {text}");

    drop(weir);
    for args in &runs {
        let (code, text) = probe(args);
        assert_eq!(code, Some(2), "{args:?} after the proxy stopped: {text}");
        assert!(text.contains("weir probe: GET"), "{text}");
    }

    let off = render("tests:\n  enabled: false\n");
    assert_eq!(off.of_kind("Pod").count(), 0);
}
