//! Phase semantics through the real binary, observed with the test plugins
//! (compiled into test builds by the `test-plugins` feature) and the two built-in plugins.

mod common;

use std::time::Duration;

use common::*;

fn table(echo_port: u16, log: &str) -> String {
    format!(
        r#"
routes:
- {{id: stop, paths: [{{path: /stop}}], service: s}}
- {{id: panic-access, paths: [{{path: /panic/access}}], service: s}}
- {{id: panic-header, paths: [{{path: /panic/header}}], service: s}}
- {{id: panic-body, paths: [{{path: /panic/body}}], service: s}}
- {{id: panic-log, paths: [{{path: /panic/log}}], service: s}}
- {{id: error-access, paths: [{{path: /error/access}}], service: s}}
- {{id: body, paths: [{{path: /body}}], service: s}}
- {{id: cid, paths: [{{path: /cid}}], service: s}}
- {{id: term, paths: [{{path: /term}}], service: s}}
- {{id: term-trigger, paths: [{{path: /trigger}}], service: s}}
- {{id: term-body, paths: [{{path: /term-body}}], service: s}}
- {{id: plain, paths: [{{path: /plain}}], service: s}}
services:
- {{id: s, host: 127.0.0.1, port: {echo_port}}}
plugins:
- {{id: global, name: test-phases, config: {{tag: global, log_file: "{log}"}}}}
- {{id: first, name: test-phases, route: stop, priority: 300, config: {{tag: first, log_file: "{log}"}}}}
- {{id: stopper, name: test-phases-2, route: stop, priority: 200, config: {{tag: stopper, respond: 409, log_file: "{log}"}}}}
- {{id: last, name: test-phases-3, route: stop, priority: 100, config: {{tag: last, log_file: "{log}"}}}}
- {{id: pa, name: test-panic, route: panic-access, config: {{phase: access}}}}
- {{id: ph, name: test-panic, route: panic-header, config: {{phase: header_filter}}}}
- {{id: pb, name: test-panic, route: panic-body, config: {{phase: body_filter}}}}
- {{id: pl, name: test-panic, route: panic-log, config: {{phase: log}}}}
- {{id: ea, name: test-panic, route: error-access, config: {{phase: access, error: true}}}}
- {{id: after-panic, name: test-phases-2, route: panic-access, priority: 1, config: {{tag: after-panic, log_file: "{log}"}}}}
- {{id: bf, name: test-body, route: body, config: {{prefix: "len="}}}}
- {{id: c, name: correlation-id, route: cid, config: {{header_name: X-Req, echo_downstream: true}}}}
- {{id: t, name: request-termination, route: term, config: {{status_code: 418, message: teapot}}}}
- {{id: tt, name: request-termination, route: term-trigger, config: {{status_code: 403, trigger: x-stop}}}}
- {{id: tb, name: request-termination, route: term-body, config: {{status_code: 200, body: "<h1>down</h1>", content_type: text/html}}}}
"#
    )
}

fn log_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits until `n` log lines for `path` exist (log runs after the last byte was sent).
fn lines_for(log: &std::path::Path, path: &str, n: usize) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    eventually(Duration::from_secs(5), || {
        out = log_lines(log)
            .into_iter()
            .filter(|l| l["path"] == path)
            .collect();
        out.len() >= n
    });
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_exit_skips_later_access_but_every_plugin_logs() {
    let up = echo("up");
    let dir = temp_dir("phases");
    let log = dir.join("log.jsonl");
    let weir = Weir::start(&table(up.port, &log.display().to_string()), &[]);
    let c = client();

    let r = get(&c, &weir.url("/stop"), &[]).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["message"], "stopped by stopper");
    assert!(r.echo_name().is_none(), "the upstream was not called");
    // header_filter ran for every collected plugin, in priority order.
    let hf: Vec<&str> = r
        .headers
        .get_all("x-test-header-filter")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(hf, ["first", "stopper", "last"]);

    let lines = lines_for(&log, "/stop", 3);
    let by_tag = |t: &str| {
        lines
            .iter()
            .find(|l| l["tag"] == t)
            .unwrap_or_else(|| panic!("no log line for {t}: {lines:?}"))
            .clone()
    };
    assert_eq!(by_tag("first")["access"], true);
    assert_eq!(by_tag("stopper")["access"], true);
    assert_eq!(
        by_tag("last")["access"],
        false,
        "access after the short-circuit is skipped"
    );
    assert_eq!(by_tag("last")["status"], 409, "but its log handler ran");
    // The route's `test-phases` instance replaces the global one of the same name.
    assert!(
        lines.iter().all(|l| l["tag"] != "global"),
        "route-scoped test-phases replaces the global one: {lines:?}"
    );

    // Rewrite runs global plugins only, before routing; access of the global plugin runs
    // on routes without an override.
    let r = get(&c, &weir.url("/plain"), &[]).await.json();
    assert_eq!(r["headers"]["x-test-rewrite"], "global");
    assert_eq!(r["headers"]["x-test-access"], "global");
    // No route: the global plugins still get header_filter and log.
    let r = get(&c, &weir.url("/missing"), &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-test-header-filter"), Some("global"));
    let lines = lines_for(&log, "/missing", 1);
    assert_eq!(lines[0]["status"], 404);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_plugin_gives_500_and_the_next_request_is_fine() {
    let up = echo("up");
    let dir = temp_dir("panic");
    let log = dir.join("log.jsonl");
    let weir = Weir::start(&table(up.port, &log.display().to_string()), &[]);
    let c = client();

    for _ in 0..3 {
        let r = get(&c, &weir.url("/panic/access"), &[]).await;
        assert_eq!(r.status, 500);
        assert_eq!(r.json()["message"], "An unexpected error occurred");
        assert_eq!(get(&c, &weir.url("/plain"), &[]).await.status, 200);
    }
    // The chain survives: a plugin after the panicking one still logs.
    let lines = lines_for(&log, "/panic/access", 3);
    assert!(lines
        .iter()
        .any(|l| l["tag"] == "after-panic" && l["status"] == 500 && l["access"] == false));

    assert_eq!(get(&c, &weir.url("/error/access"), &[]).await.status, 500);
    // Failures in later phases are logged and the response goes through.
    let r = get(&c, &weir.url("/panic/header"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.echo_name().as_deref(), Some("up"));
    let r = get(&c, &weir.url("/panic/body?bytes=1000"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 1000);
    assert_eq!(get(&c, &weir.url("/panic/log"), &[]).await.status, 200);
    assert_eq!(get(&c, &weir.url("/plain"), &[]).await.status, 200);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_filter_can_replace_the_whole_body() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port, "/dev/null"), &[]);
    let c = client();
    let r = get(&c, &weir.url("/body?bytes=300000"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"len=300000");
    assert!(r.header("content-length").is_none_or(|l| l == "10"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlation_id_and_request_termination() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port, "/dev/null"), &[]);
    let c = client();

    // correlation-id: generated (uuid#counter), sent upstream, echoed downstream.
    let a = get(&c, &weir.url("/cid"), &[]).await;
    let b = get(&c, &weir.url("/cid"), &[]).await;
    let ida = a.header("x-req").unwrap().to_string();
    let idb = b.header("x-req").unwrap().to_string();
    assert_eq!(a.json()["headers"]["x-req"], ida.as_str());
    assert_ne!(ida, idb);
    assert!(ida.contains('#'), "{ida}");
    // A client-supplied id is kept.
    let r = get(&c, &weir.url("/cid"), &[("x-req", "abc-123")]).await;
    assert_eq!(r.header("x-req"), Some("abc-123"));
    assert_eq!(r.json()["headers"]["x-req"], "abc-123");

    // request-termination: message, trigger, body with content type.
    let r = get(&c, &weir.url("/term"), &[]).await;
    assert_eq!(r.status, 418);
    assert_eq!(r.json()["message"], "teapot");
    assert!(r.echo_name().is_none());
    assert_eq!(get(&c, &weir.url("/trigger"), &[]).await.status, 200);
    let r = get(&c, &weir.url("/trigger"), &[("x-stop", "1")]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["message"], "Forbidden");
    assert_eq!(get(&c, &weir.url("/trigger?x-stop"), &[]).await.status, 403);
    let r = get(&c, &weir.url("/term-body"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(&r.body[..], b"<h1>down</h1>");
}
