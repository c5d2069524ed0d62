//! The proxy's top-level modules form layers: each names (`crate::<module>`, outside its
//! tests) only modules below it, and the routing table's types (`config`) name none.
//!
//! `cargo test -p weir-proxy --test layers -- --nocapture` prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every top-level module of `proxy/src` and the modules its non-test code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lib.rs")
        .map(|n| n.trim_end_matches(".rs").to_owned())
        .collect();
    let mut graph = BTreeMap::new();
    for m in &modules {
        let mut files = Vec::new();
        collect(&src.join(m), &mut files);
        let file = src.join(format!("{m}.rs"));
        if file.exists() {
            files.push(file);
        }
        let mut named = BTreeSet::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for target in names(code) {
                if &target != m && modules.contains(&target) {
                    named.insert(target);
                }
            }
        }
        graph.insert(m.clone(), named);
    }
    graph
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The modules named as `crate::name` or inside `crate::{a, b::c}`.
fn names(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + 7..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for part in inner.split(',') {
                out.insert(ident(part.trim()));
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

/// The modules on a cycle, if any (depth-first search for a back edge).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut c = path[at..].to_vec();
            c.push(m.to_owned());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for next in &graph[m] {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_proxys_modules_form_layers_without_cycles() {
    let graph = graph();
    for (m, named) in &graph {
        println!(
            "{m} -> {}",
            named.iter().cloned().collect::<Vec<_>>().join(" ")
        );
    }
    assert!(graph.len() > 15, "the walk found the modules: {graph:?}");
    assert!(
        graph["server"].contains("pipeline"),
        "the walk finds imports"
    );
    assert_eq!(
        cycle(&graph),
        None,
        "modules that import each other in a circle"
    );
    assert!(
        graph["config"].is_empty(),
        "the routing table's types name no other module: {:?}",
        graph["config"]
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .iter()
        .map(|(m, n)| (m.to_string(), BTreeSet::from([n.to_string()])))
        .collect();
    assert_eq!(cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(
        names("use crate::{config::X, router};\nlet a = crate::pipeline::Y;"),
        BTreeSet::from(["config".into(), "router".into(), "pipeline".into()])
    );
}
