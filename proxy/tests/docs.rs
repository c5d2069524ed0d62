//! The routing-table example in docs/config.md is a valid table.

use weir_proxy::compile::Runtime;
use weir_proxy::{Config, Registry};

#[test]
fn the_documented_example_compiles() {
    let doc = include_str!("../../docs/config.md");
    let start = doc.find("```yaml\n").expect("a ```yaml block") + "```yaml\n".len();
    let end = start + doc[start..].find("```").expect("closing fence");
    let config = Config::parse(&doc.as_bytes()[start..end]).expect("parses");
    assert!(config.routes.len() >= 4 && !config.plugins.is_empty());
    if let Err(errors) = Runtime::compile(config, &Registry::builtin()) {
        panic!("docs/config.md example is invalid: {errors:#?}");
    }
}

#[test]
fn the_example_table_compiles() {
    let text = include_str!("../../examples/proxy/weir.yaml");
    let config = Config::parse(text.as_bytes()).expect("parses");
    if let Err(errors) = Runtime::compile(config, &Registry::builtin()) {
        panic!("examples/proxy/weir.yaml is invalid: {errors:#?}");
    }
}
