//! Every ```yaml example in docs/annotations.md, docs/crds.md, docs/consumers.md and
//! docs/plugins/*.md translates without problems (and into something: routes, plugins or
//! consumers).

use std::path::Path;

use weir_controller::{translate, Options, Store};
use weir_proxy::compile::Runtime;
use weir_proxy::Registry;

const DEFAULT_CLASS: &str = "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: weir
  annotations: {ingressclass.kubernetes.io/is-default-class: \"true\"}
spec:
  controller: weir.dev/ingress-controller
";

/// The Secrets holding PEM that examples name without spelling it out: `demo/partner-ca`
/// (a client CA) and `demo/partners-example-com` (a served certificate).
fn pem_secrets() -> String {
    let fixture = |f: &str| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/tls")
            .join(f);
        let pem = std::fs::read_to_string(path).unwrap();
        pem.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: partner-ca, namespace: demo, labels: {{weir.dev/credential: \"true\"}}}}
stringData:
  ca.crt: |
{}---
apiVersion: v1
kind: Secret
metadata: {{name: partners-example-com, namespace: demo}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{}  tls.key: |
{}",
        fixture("ca.crt"),
        fixture("a.example.test.crt"),
        fixture("a.example.test.key")
    )
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

#[test]
fn documented_examples_translate_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    let registry = Registry::builtin();
    let mut checked = 0;
    let mut files = vec![
        "annotations.md".to_string(),
        "crds.md".to_string(),
        "consumers.md".to_string(),
    ];
    let mut plugin_docs: Vec<String> = std::fs::read_dir(root.join("plugins"))
        .expect("docs/plugins")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // The authors' guide configures a test-only plugin; the index has no manifests.
        .filter(|n| n.ends_with(".md") && n != "writing.md" && n != "README.md")
        .map(|n| format!("plugins/{n}"))
        .collect();
    plugin_docs.sort();
    files.extend(plugin_docs);
    for file in &files {
        let Ok(doc) = std::fs::read_to_string(root.join(file)) else {
            panic!("docs/{file} is missing");
        };
        for (i, block) in yaml_blocks(&doc).iter().enumerate() {
            let objects = Store::parse_manifests(block)
                .unwrap_or_else(|e| panic!("docs/{file} example {}: {e}", i + 1));
            let mut store = Store::default();
            objects.into_iter().for_each(|o| store.insert(o));
            // As a cluster (or the quick start) has it: `weir` is the default class, so the
            // plugin examples need no `ingressClassName`.
            Store::parse_manifests(DEFAULT_CLASS)
                .unwrap()
                .into_iter()
                .for_each(|o| store.insert(o));
            Store::parse_manifests(&pem_secrets())
                .unwrap()
                .into_iter()
                .for_each(|o| store.insert(o));
            let t = translate(&store, &Options::default(), &registry);
            let problems: Vec<String> = t.problems.iter().map(|p| p.to_string()).collect();
            assert!(
                problems.is_empty(),
                "docs/{file} example {}: {problems:#?}\n{block}",
                i + 1
            );
            assert!(
                !t.config.routes.is_empty()
                    || !t.config.plugins.is_empty()
                    || !t.config.consumers.is_empty(),
                "docs/{file} example {} produces nothing:\n{block}",
                i + 1
            );
            Runtime::compile(t.config, &registry)
                .unwrap_or_else(|e| panic!("docs/{file} example {}: {e:?}", i + 1));
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} documented examples");
}

#[test]
fn the_quickstart_translates_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/quickstart");
    let mut m = weir_controller::manifests::ManifestDir::new(dir);
    let scan = m.scan();
    assert!(scan.errors.is_empty(), "{:?}", scan.errors);
    let t = translate(&m.store(), &Options::default(), &Registry::builtin());
    assert!(t.problems.is_empty(), "{:#?}", t.problems);
    assert_eq!(t.config.routes.len(), 3);
    assert_eq!(t.config.certificates.len(), 1);
    assert_eq!(t.config.certificates[0].snis, ["a.example.test"]);
}

/// The Consumer examples of docs/crds.md do what the page says.
#[test]
fn the_consumer_examples_do_what_crds_md_says() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/crds.md"))
            .unwrap();
    let registry = Registry::builtin();
    let translate_block = |needle: &str| {
        let block = yaml_blocks(&doc)
            .into_iter()
            .find(|b| b.contains(needle))
            .unwrap_or_else(|| panic!("no example with {needle:?}"));
        let mut store = Store::default();
        for text in [block.as_str(), DEFAULT_CLASS] {
            Store::parse_manifests(text)
                .unwrap()
                .into_iter()
                .for_each(|o| store.insert(o));
        }
        translate(&store, &Options::default(), &registry)
    };

    let t = translate_block("name: alice-jwt");
    let alice = &t.config.consumers[0];
    assert_eq!(alice.id, "demo/alice");
    assert_eq!(alice.namespace.as_deref(), Some("demo"));
    assert_eq!(alice.groups, ["staff", "beta"]);
    let kinds: Vec<&str> = alice.credentials.iter().map(|c| c.kind()).collect();
    assert_eq!(kinds, ["key-auth", "basic-auth", "jwt"]);

    let t = translate_block("name: partner-limit");
    let scopes: Vec<_> = t
        .config
        .plugins
        .iter()
        .map(|p| (p.consumer.as_deref(), p.route.as_deref()))
        .collect();
    assert_eq!(scopes, [(Some("demo/partner"), None)]);

    let t = translate_block("name: reports-limit");
    let scopes: Vec<_> = t
        .config
        .plugins
        .iter()
        .map(|p| (p.consumer.as_deref(), p.route.as_deref()))
        .collect();
    assert_eq!(scopes, [(Some("demo/partner"), Some("demo/reports/r0/p0"))]);
}
