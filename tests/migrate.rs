//! `weir migrate` through the real binary, on the ingress-nginx corpus of the translator's
//! golden tests (controller/tests/golden/*-nginx-*): the text report line by line against
//! tests/migrate/expected.txt (`WEIR_BLESS=1` rewrites it; review the diff), the JSON report,
//! the exit codes, and `--emit`: the Weir-native objects it writes translate to the same
//! routing table as the annotated originals.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::WEIR;
use weir_controller::{translate, Options, Store};
use weir_proxy::Registry;

/// The corpus: one folder per fixture, each holding only its manifests (`input.yaml`).
fn corpus() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("controller/tests/golden");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.to_string_lossy().contains("-nginx-"))
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 10, "the ingress-nginx corpus is missing");
    let tmp = std::env::temp_dir().join(format!("weir-migrate-{}", std::process::id()));
    dirs.iter()
        .map(|d| {
            let name = d.file_name().unwrap().to_string_lossy().to_string();
            let folder = tmp.join(&name).join("manifests");
            std::fs::create_dir_all(&folder).unwrap();
            std::fs::copy(d.join("input.yaml"), folder.join("input.yaml")).unwrap();
            if d.join("options.yaml").exists() {
                std::fs::copy(d.join("options.yaml"), folder.join("../options.yaml")).unwrap();
            }
            (name, folder)
        })
        .collect()
}

/// A fixture's `options.yaml` (the controller flags its golden test uses).
fn fixture_options(dir: &Path) -> serde_json::Value {
    std::fs::read_to_string(dir.join("../options.yaml"))
        .map(|t| serde_yaml::from_str(&t).unwrap())
        .unwrap_or_default()
}

/// The controller options of a fixture.
fn options(dir: &Path) -> Options {
    let f = fixture_options(dir);
    let mut o = Options::default();
    if let Some(c) = f["ingress_class"].as_str() {
        o.ingress_class = c.into();
    }
    o.accept_ingress_nginx_class = f["accept_ingress_nginx_class"].as_bool().unwrap_or(false);
    if let Some(p) = f["annotations_prefix"].as_str() {
        o.nginx.prefix = p.into();
    }
    o
}

/// `weir migrate`'s flags for a fixture.
fn flags(dir: &Path) -> Vec<String> {
    match fixture_options(dir)["annotations_prefix"].as_str() {
        Some(p) => vec!["--annotations-prefix".into(), p.into()],
        None => vec![],
    }
}

fn migrate(dir: &Path, extra: &[String]) -> Output {
    Command::new(WEIR)
        .arg("migrate")
        .arg(dir)
        .args(extra)
        .output()
        .expect("run weir migrate")
}

#[test]
fn the_report_says_what_becomes_of_every_annotation() {
    let mut all = String::new();
    for (name, dir) in corpus() {
        let out = migrate(&dir, &flags(&dir));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let code = out.status.code().unwrap();
        // Exit code 1 exactly when some Ingress does not carry over.
        let expect = if stdout.contains(", 0 do not;") { 0 } else { 1 };
        assert_eq!(code, expect, "{name}: exit code\n{stdout}");
        all.push_str(&format!("## {name} (exit {code})\n{stdout}\n"));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/migrate/expected.txt");
    if std::env::var("WEIR_BLESS").is_ok() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &all).unwrap();
    }
    let expected = std::fs::read_to_string(&path).expect("tests/migrate/expected.txt");
    for (i, (a, e)) in all.lines().zip(expected.lines()).enumerate() {
        assert_eq!(
            a,
            e,
            "report line {} differs (WEIR_BLESS=1 to accept)",
            i + 1
        );
    }
    assert_eq!(
        all.lines().count(),
        expected.lines().count(),
        "report length"
    );

    // Spot checks that the expectations say what the issue asks for.
    assert!(all.contains("unsupported  nginx.ingress.kubernetes.io/configuration-snippet"));
    assert!(all.contains("CVE-2025-1974"));
    assert!(all.contains("=> its paths answer 503"));
    assert!(all.contains("differs      nginx.ingress.kubernetes.io/affinity: cookie —"));
    assert!(all.contains("applied      nginx.ingress.kubernetes.io/rewrite-target: /$2"));
    assert!(all.contains("weir: weir.dev/rewrite: /$2"));
}

#[test]
fn json_output_holds_the_same_outcomes() {
    for (name, dir) in corpus() {
        let text = String::from_utf8(migrate(&dir, &flags(&dir)).stdout).unwrap();
        let mut args = flags(&dir);
        args.extend(["--output".into(), "json".into()]);
        let out = migrate(&dir, &args);
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
        let carries = doc["carries_over"].as_bool().unwrap();
        assert_eq!(
            out.status.code(),
            Some(if carries { 0 } else { 1 }),
            "{name}"
        );
        for ing in doc["ingresses"].as_array().unwrap() {
            assert!(text.contains(&format!("Ingress {}", ing["ingress"].as_str().unwrap())));
            for o in ing["outcomes"].as_array().unwrap() {
                let line = format!(
                    "{:<12} {}: {}",
                    o["status"].as_str().unwrap(),
                    o["annotation"].as_str().unwrap(),
                    o["value"].as_str().unwrap().trim()
                );
                assert!(
                    text.contains(&line),
                    "{name}: {line:?} not in the text report"
                );
            }
        }
    }
}

#[test]
fn emitted_objects_translate_to_the_same_table() {
    for (name, dir) in corpus() {
        let emit = dir.parent().unwrap().join("emitted");
        let mut args = flags(&dir);
        args.extend(["--emit".into(), emit.to_string_lossy().to_string()]);
        let out = migrate(&dir, &args);
        assert!(out.status.code().unwrap() < 2, "{name}: {:?}", out);

        let opts = options(&dir);
        let input = std::fs::read_to_string(dir.join("input.yaml")).unwrap();
        let mut original = Store::default();
        for o in Store::parse_manifests(&input).unwrap() {
            original.insert(o);
        }
        // The cluster after the switch: the same objects, the annotated Ingresses replaced by
        // what --emit wrote, and no ingress-nginx translation at all.
        let mut switched = original.clone();
        for (key, ing) in &original.ingresses {
            if weir_controller::nginx::applies(ing, &original, &opts.nginx) {
                switched.ingresses.remove(key);
            }
        }
        for file in std::fs::read_dir(&emit).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            for o in Store::parse_manifests(&text).unwrap() {
                switched.insert(o);
            }
        }
        let registry = Registry::builtin();
        let before = translate(&original, &opts, &registry).config;
        let mut native = opts.clone();
        native.nginx.prefix = String::new();
        let after = translate(&switched, &native, &registry).config;
        assert_eq!(
            before.hash, after.hash,
            "{name}: the emitted objects translate to another routing table"
        );
        assert!(
            !before.routes.is_empty() || name.contains("not-accepted"),
            "{name}: nothing translated"
        );
    }
}

/// `--to gateway-api`: what it emits, with the rest of the cluster, is a Gateway the
/// translator accepts, whose HTTPRoutes all attach and serve every host and path the Ingress
/// served; the exit code says whether everything carried over.
#[test]
fn gateway_api_emission_is_served_for_every_ingress_path() {
    let mut carried = 0;
    for (name, dir) in corpus() {
        let emit = dir.parent().unwrap().join("emitted-gateway-api");
        let mut args = flags(&dir);
        args.extend([
            "--to".into(),
            "gateway-api".into(),
            "--emit".into(),
            emit.to_string_lossy().to_string(),
        ]);
        let out = migrate(&dir, &args);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let code = out.status.code().unwrap();
        assert!(code < 2, "{name}: {out:?}");
        assert_eq!(
            code == 0,
            text.contains(" 0 do not"),
            "{name}: the exit code follows the report:\n{text}"
        );
        carried += usize::from(code == 0);

        let opts = options(&dir);
        let input = std::fs::read_to_string(dir.join("input.yaml")).unwrap();
        let mut original = Store::default();
        for o in Store::parse_manifests(&input).unwrap() {
            original.insert(o);
        }
        let mut switched = original.clone();
        let converted: Vec<_> = original
            .ingresses
            .iter()
            .filter(|(_, ing)| weir_controller::nginx::applies(ing, &original, &opts.nginx))
            .map(|(k, ing)| (k.clone(), ing.clone()))
            .collect();
        for (key, _) in &converted {
            switched.ingresses.remove(key);
        }
        for file in std::fs::read_dir(&emit).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            for o in Store::parse_manifests(&text).unwrap() {
                switched.insert(o);
            }
        }
        let registry = Registry::builtin();
        let mut native = opts.clone();
        native.nginx.prefix = String::new();
        let t = translate(&switched, &native, &registry);
        for (key, status) in &t.gateway_api.http_routes {
            for p in &status.parents {
                let accepted = p.conditions.iter().find(|c| c.type_ == "Accepted").unwrap();
                assert!(accepted.holds(), "{name}: HTTPRoute {key}: {accepted:?}");
            }
        }
        // Every host and path of the converted Ingresses has a route of an HTTPRoute.
        for (key, ing) in &converted {
            for rule in ing.spec.iter().flat_map(|s| s.rules.iter().flatten()) {
                for p in rule.http.iter().flat_map(|h| h.paths.iter()) {
                    let path = p.path.clone().unwrap_or_else(|| "/".into());
                    // A regex path is served as a RegularExpression match holding it.
                    let pattern = path.trim_start_matches("/~");
                    let served = t.config.routes.iter().any(|r| {
                        r.id.starts_with("httproute:")
                            && r.paths.iter().any(|rule| {
                                rule.path == path
                                    || (rule.kind == weir_proxy::config::PathKind::Regex
                                        && rule.path.contains(pattern))
                            })
                            && rule.host.as_ref().is_none_or(|h| r.hosts.contains(h))
                    });
                    assert!(served, "{name}: Ingress {key} path {path} has no HTTPRoute");
                }
            }
        }
    }
    assert!(carried > 0, "no fixture carried over whole");
}

#[test]
fn unreadable_input_is_exit_code_2() {
    let out = Command::new(WEIR)
        .args(["migrate", "/nonexistent/weir-migrate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a folder"));
    let out = Command::new(WEIR).arg("migrate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `--kubeconfig`: the Ingresses, IngressClasses and the Secrets Weir reads (labelled or TLS)
/// come from the API server, through the same list calls a cluster answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_the_cluster_named_by_a_kubeconfig() {
    let cluster = common::cluster::Cluster::start().await;
    let ns = cluster.namespace().to_string();
    cluster
        .apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: users, namespace: {ns}, labels: {{weir.dev/credential: \"true\"}}}}\n\
             stringData: {{auth: \"alice:{{SHA}}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\"}}\n"
        ))
        .await;
    cluster
        .apply(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: guarded\n  namespace: {ns}\n  annotations:\n\
             \x20   nginx.ingress.kubernetes.io/auth-type: basic\n    nginx.ingress.kubernetes.io/auth-secret: users\n\
             \x20   nginx.ingress.kubernetes.io/server-snippet: \"return 200;\"\n\
             spec:\n  ingressClassName: weir\n  rules:\n  - http:\n      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: echo, port: {{number: 80}}}}}}}}\n"
        ))
        .await;
    let dir = std::env::temp_dir().join(format!("weir-migrate-kube-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = cluster.kubeconfig(&dir);
    let out = Command::new(WEIR)
        .arg("migrate")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .expect("run weir migrate");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&format!("Ingress {ns}/guarded")), "{text}");
    // The Secret was read: basic auth carries over, the snippet does not.
    assert!(
        text.contains("applied      nginx.ingress.kubernetes.io/auth-type: basic"),
        "{text}"
    );
    assert!(
        text.contains("unsupported  nginx.ingress.kubernetes.io/server-snippet"),
        "{text}"
    );
    assert!(
        text.contains("weir: Plugin guarded-nginx-basic-auth (basic-auth)"),
        "{text}"
    );
    assert!(!text.contains("=> its paths answer 503"), "{text}");
}

/// `--ingress-class`: only the Ingresses of the named classes are reported (and emitted); an
/// Ingress without a class belongs to the default IngressClass.
#[test]
fn ingress_class_selects_the_ingresses_reported() {
    let dir = std::env::temp_dir().join(format!("weir-migrate-class-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ingress = |name: &str, class: Option<&str>| {
        let class = class.map_or(String::new(), |c| format!("  ingressClassName: {c}\n"));
        format!(
            "---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: shop\n  \
             annotations: {{nginx.ingress.kubernetes.io/proxy-body-size: 2m}}\nspec:\n{class}  rules:\n  - host: {name}.example\n    \
             http:\n      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}\n"
        )
    };
    let manifests = [
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: nginx\n  \
         annotations: {ingressclass.kubernetes.io/is-default-class: \"true\"}\nspec: {controller: k8s.io/ingress-nginx}\n"
            .to_string(),
        "---\napiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: internal}\nspec: {controller: k8s.io/ingress-nginx}\n"
            .to_string(),
        ingress("public", Some("nginx")),
        ingress("private", Some("internal")),
        ingress("unclassed", None),
    ]
    .concat();
    std::fs::write(dir.join("all.yaml"), manifests).unwrap();
    let reported = |extra: &[&str]| -> Vec<String> {
        let out = Command::new(WEIR)
            .arg("migrate")
            .arg(&dir)
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {text}");
        ["public", "private", "unclassed"]
            .iter()
            .filter(|n| text.contains(&format!("Ingress shop/{n}")))
            .map(|n| n.to_string())
            .collect()
    };
    assert_eq!(reported(&[]), ["public", "private", "unclassed"]);
    assert_eq!(
        reported(&["--ingress-class", "nginx"]),
        ["public", "unclassed"]
    );
    assert_eq!(reported(&["--ingress-class", "internal"]), ["private"]);
    assert_eq!(
        reported(&["--ingress-class", "internal,nginx"]),
        ["public", "private", "unclassed"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
