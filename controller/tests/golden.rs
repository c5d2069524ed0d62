//! Golden tests of the translator: each folder under tests/golden/ holds `input.yaml`
//! (manifests), optionally `options.yaml` (controller flags), and `expected.yaml` (the routing
//! table and the problems). `WEIR_BLESS=1` rewrites the expectations; review the diff.

use std::collections::BTreeSet;
use std::path::Path;

use weir_controller::{translate, Key, Options, Store};
use weir_proxy::compile::Runtime;
use weir_proxy::Registry;

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FixtureOptions {
    #[serde(default)]
    ingress_class: Option<String>,
    /// `namespace/name:port`
    #[serde(default)]
    default_backend: Option<String>,
    #[serde(default)]
    watch_namespaces: Option<Vec<String>>,
    #[serde(default)]
    accept_ingress_nginx_class: bool,
    #[serde(default)]
    annotations_prefix: Option<String>,
}

fn options(dir: &Path) -> Options {
    let mut o = Options::default();
    let Ok(text) = std::fs::read_to_string(dir.join("options.yaml")) else {
        return o;
    };
    let f: FixtureOptions = serde_yaml::from_str(&text).expect("options.yaml");
    if let Some(c) = f.ingress_class {
        o.ingress_class = c;
    }
    if let Some(b) = f.default_backend {
        let (svc, port) = b.rsplit_once(':').expect("ns/name:port");
        let (ns, name) = svc.split_once('/').expect("ns/name");
        let port = k8s_openapi::api::networking::v1::ServiceBackendPort {
            number: port.parse().ok(),
            name: None,
        };
        o.default_backend = Some((Key::new(ns, name), port));
    }
    o.accept_ingress_nginx_class = f.accept_ingress_nginx_class;
    if let Some(p) = f.annotations_prefix {
        o.nginx.prefix = p;
    }
    o.watch_namespaces = f
        .watch_namespaces
        .map(|v| v.into_iter().collect::<BTreeSet<_>>());
    o
}

/// The translation of a fixture, as the text `expected.yaml` holds.
fn render(dir: &Path) -> String {
    let input = std::fs::read_to_string(dir.join("input.yaml")).expect("input.yaml");
    let mut store = Store::default();
    for obj in Store::parse_manifests(&input).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        store.insert(obj);
    }
    let registry = Registry::builtin();
    let t = translate(&store, &options(dir), &registry);
    // Whatever the translator produces must be a table the proxy accepts.
    if let Err(errors) = Runtime::compile(t.config.clone(), &registry) {
        panic!(
            "{}: the proxy rejects the translated table: {errors:#?}",
            dir.display()
        );
    }
    let mut config = t.config.clone();
    config.hash = None;
    let opts = options(dir);
    let conversion = weir_controller::nginx::convert(&store, &opts.nginx);
    if conversion.store.is_some() {
        assert_emitted_translates_the_same(dir, &store, &opts, &t.config);
    }
    let mut doc = serde_json::json!({
        "problems": t.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        "owned_ingresses": t.owned_ingresses.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
        "config": config,
    });
    if !conversion.reports.is_empty() {
        doc["ingress_nginx"] = serde_json::to_value(&conversion.reports).unwrap();
    }
    serde_yaml::to_string(&doc).unwrap()
}

/// What `weir migrate --emit` writes (the converted Ingresses and the generated objects, in
/// place of the annotated Ingresses), read back from manifests, translates to the same
/// routing table as the annotated originals.
fn assert_emitted_translates_the_same(
    dir: &Path,
    store: &Store,
    opts: &Options,
    original: &weir_proxy::config::Config,
) {
    let mut emitted = store.clone();
    let mut docs = Vec::new();
    for (key, ing) in &store.ingresses {
        if weir_controller::nginx::applies(ing, store, &opts.nginx) {
            emitted.ingresses.remove(key);
            let (c, _) = weir_controller::nginx::convert_ingress(key, ing, store, &opts.nginx);
            docs.extend(c.manifests());
        }
    }
    let text: String = docs
        .iter()
        .map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap()))
        .collect();
    for obj in Store::parse_manifests(&text).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        emitted.insert(obj);
    }
    // Translated with the conversion off: the emitted objects must stand on their own.
    let mut native = opts.clone();
    native.nginx.prefix = String::new();
    let registry = Registry::builtin();
    let again = translate(&emitted, &native, &registry);
    let (mut a, mut b) = (original.clone(), again.config.clone());
    a.hash = None;
    b.hash = None;
    assert_eq!(
        serde_yaml::to_string(&a).unwrap(),
        serde_yaml::to_string(&b).unwrap(),
        "{}: the emitted Weir-native objects translate to another table",
        dir.display()
    );
}

#[test]
fn golden_fixtures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let bless = std::env::var("WEIR_BLESS").is_ok();
    let mut failures = Vec::new();
    for dir in &dirs {
        let actual = render(dir);
        let expected_path = dir.join("expected.yaml");
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if actual != expected {
            if bless {
                std::fs::write(&expected_path, &actual).unwrap();
            } else {
                let first = actual
                    .lines()
                    .zip(expected.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                failures.push(format!(
                    "{}: differs from expected.yaml at line {}\n  expected: {:?}\n  actual:   {:?}",
                    dir.file_name().unwrap().to_string_lossy(),
                    first + 1,
                    expected.lines().nth(first).unwrap_or("<end>"),
                    actual.lines().nth(first).unwrap_or("<end>"),
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden fixtures differ (WEIR_BLESS=1 to accept):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(dirs.len() >= 40, "only {} golden fixtures", dirs.len());
}

#[test]
fn translation_is_deterministic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for e in std::fs::read_dir(&root).unwrap() {
        let dir = e.unwrap().path();
        if dir.is_dir() {
            assert_eq!(render(&dir), render(&dir), "{}", dir.display());
        }
    }
}
