//! A route's other backends through the real binary, against `weir echo` upstreams on
//! 127.0.0.1: the canary (by weight, header and cookie), the fallback (for a service without a
//! target to try, and for listed upstream statuses) and `access_log: false`.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use futures::stream::{self, StreamExt};

/// A service per echo: `- {id: <name>, host: 127.0.0.1, port: <port>}` lines.
fn services(list: &[(&str, &Proc)]) -> String {
    list.iter()
        .map(|(id, p)| format!("- {{id: {id}, host: 127.0.0.1, port: {}}}\n", p.port))
        .collect()
}

/// Sends `n` GETs to `path`, 8 at a time; counts the answers by echo name.
async fn spread(w: &Weir, path: &str, n: usize) -> HashMap<String, usize> {
    let c = client();
    let url = w.url(path);
    let names: Vec<String> = stream::iter(0..n)
        .map(|_| {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let r = get(&c, &url, &[]).await;
                match r.echo_name() {
                    Some(name) if r.status == 200 => name,
                    _ => format!("status {}", r.status),
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let mut counts = HashMap::new();
    for name in names {
        *counts.entry(name).or_default() += 1;
    }
    counts
}

/// The echo that answered a GET of `path` with `headers` (`status N` without one).
async fn served_by(w: &Weir, path: &str, headers: &[(&str, &str)]) -> String {
    let r = get(&client(), &w.url(path), headers).await;
    match r.echo_name() {
        Some(name) if r.status == 200 => name,
        _ => format!("status {}", r.status),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_of_weight_20_takes_a_fifth_of_4000_requests_within_3_points() {
    let (main, canary) = (echo("main"), echo("canary"));
    let table = format!(
        "routes: [{{id: r, service: main, canary: {{service: canary, weight: 20}}}}]\n\
         services:\n{}",
        services(&[("main", &main), ("canary", &canary)])
    );
    let w = Weir::start(&table, &["--access-log", "false"]);
    let counts = tokio::time::timeout(Duration::from_secs(120), spread(&w, "/", 4000))
        .await
        .expect("4000 requests within 2 minutes");
    assert_eq!(
        counts.get("main").copied().unwrap_or(0) + counts.get("canary").copied().unwrap_or(0),
        4000,
        "{counts:?}"
    );
    let share = counts.get("canary").copied().unwrap_or(0) as f64 / 4000.0;
    assert!(
        (share - 0.20).abs() <= 0.03,
        "canary share {share}: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_chosen_by_header_or_cookie() {
    let (main, canary) = (echo("main"), echo("canary"));
    let route = |id: &str, canary: &str| {
        format!(
            "- {{id: {id}, paths: [{{path: /{id}}}], service: main, canary: {{service: canary, {canary}}}}}\n"
        )
    };
    let table = format!(
        "routes:\n{}{}{}{}{}services:\n{}",
        route("header", "header: x-canary"),
        route("heavy", "header: x-canary, weight: 100"),
        route("value", "header: x-canary, header_value: beta"),
        route("pattern", "header: x-user, header_pattern: '^(alice|bob)-'"),
        route("cookie", "header: x-canary, cookie: canary"),
        services(&[("main", &main), ("canary", &canary)])
    );
    let w = Weir::start(&table, &["--access-log", "false"]);
    // (path, request headers, the echo that answers)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        // `always` and `never`; other values and no header fall through to the weight (0).
        ("/header", &[("x-canary", "always")], "canary"),
        ("/header", &[("x-canary", "never")], "main"),
        ("/header", &[("x-canary", "sometimes")], "main"),
        ("/header", &[], "main"),
        // `never` wins over weight 100; anything else falls through to it.
        ("/heavy", &[("x-canary", "never")], "main"),
        ("/heavy", &[("x-canary", "sometimes")], "canary"),
        ("/heavy", &[], "canary"),
        // With a value, only that value sends to the canary (`always` is just another value).
        ("/value", &[("x-canary", "beta")], "canary"),
        ("/value", &[("x-canary", "always")], "main"),
        ("/value", &[("x-canary", "beta2")], "main"),
        // A pattern, unanchored unless it says so.
        ("/pattern", &[("x-user", "alice-1")], "canary"),
        ("/pattern", &[("x-user", "bob-")], "canary"),
        ("/pattern", &[("x-user", "x-alice-1")], "main"),
        ("/pattern", &[("x-user", "always")], "main"),
        // The cookie, after the header.
        ("/cookie", &[("cookie", "a=1; canary=always")], "canary"),
        ("/cookie", &[("cookie", "canary=never")], "main"),
        ("/cookie", &[("cookie", "canary=maybe")], "main"),
        (
            "/cookie",
            &[("x-canary", "never"), ("cookie", "canary=always")],
            "main",
        ),
        (
            "/cookie",
            &[("x-canary", "sometimes"), ("cookie", "canary=always")],
            "canary",
        ),
        (
            "/cookie",
            &[("x-canary", "always"), ("cookie", "canary=never")],
            "canary",
        ),
    ];
    for (path, headers, want) in cases {
        // Every time the same: nothing random is left once a header or cookie decided.
        for _ in 0..5 {
            assert_eq!(
                served_by(&w, path, headers).await,
                *want,
                "{path} with {headers:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_takes_requests_when_the_service_has_no_target_to_try() {
    let (default, spare) = (echo("default"), echo("spare"));
    let dir = temp_dir("fallback-unhealthy");
    let fail = dir.join("fail");
    std::fs::write(&fail, "500").unwrap();
    let failing = echo_with("failing", &["--status-file", fail.to_str().unwrap()]);
    let table = format!(
        "routes:\n\
         - {{id: empty, paths: [{{path: /empty}}], service: empty, fallback: {{service: default}}}}\n\
         - {{id: zero, paths: [{{path: /zero}}], service: zero, fallback: {{service: default}}}}\n\
         - {{id: sick, paths: [{{path: /sick}}], service: sick, fallback: {{service: default}}}}\n\
         - {{id: none, paths: [{{path: /none}}], fallback: {{service: default}}}}\n\
         - {{id: plain, paths: [{{path: /plain}}], service: empty}}\n\
         services:\n\
         - {{id: empty, upstream: empty}}\n\
         - {{id: zero, upstream: zero}}\n\
         - {{id: sick, upstream: sick}}\n\
         {}\
         upstreams:\n\
         - {{id: empty, targets: []}}\n\
         - {{id: zero, targets: [{{target: '127.0.0.1:{}', weight: 0}}]}}\n\
         - {{id: sick, targets: [{{target: '127.0.0.1:{}'}}], \
         healthchecks: {{passive: {{failures: 1, unhealthy_statuses: [500], cooldown: 600}}}}}}\n",
        services(&[("default", &default)]),
        spare.port,
        failing.port,
    );
    let w = Weir::start(&table, &["--access-log", "false"]);
    let c = client();

    // The request goes on unchanged: method, path, query, body.
    let r = send(
        &c,
        "POST",
        &w.url("/empty/a/b?q=1"),
        &[("content-type", "text/plain")],
        "hello",
    )
    .await;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["name"], "default");
    assert_eq!(j["method"], "POST");
    assert_eq!(j["path"], "/empty/a/b");
    assert_eq!(j["query"], "q=1");
    assert_eq!(j["body_length"], 5);
    assert_eq!(served_by(&w, "/zero", &[]).await, "default");
    assert_eq!(served_by(&w, "/none", &[]).await, "default");
    // Without a fallback: 503.
    assert_eq!(served_by(&w, "/plain", &[]).await, "status 503");

    // A service whose only target is ejected: its failure is passed on, then the fallback
    // serves.
    assert_eq!(served_by(&w, "/sick", &[]).await, "status 500");
    for _ in 0..3 {
        assert_eq!(served_by(&w, "/sick", &[]).await, "default");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_answers_listed_statuses_and_passes_the_rest() {
    let (main, errors) = (echo("main"), echo("errors"));
    let dir = temp_dir("fallback-statuses");
    let always_503 = dir.join("503");
    std::fs::write(&always_503, "503").unwrap();
    let failing_errors = echo_with(
        "failing-errors",
        &["--status-file", always_503.to_str().unwrap()],
    );
    let dead = free_port();
    let table = format!(
        "routes:\n\
         - {{id: pages, paths: [{{path: /pages}}], service: main, \
         fallback: {{service: errors, statuses: [404, 503], headers: {{X-Namespace: shop, X-Ingress-Name: pages}}}}}}\n\
         - {{id: looping, paths: [{{path: /looping}}], service: main, \
         fallback: {{service: failing-errors, statuses: [404, 503]}}}}\n\
         - {{id: gone, paths: [{{path: /gone}}], service: main, fallback: {{service: dead, statuses: [404]}}}}\n\
         services:\n{}\
         - {{id: dead, host: 127.0.0.1, port: {dead}, retries: 1}}\n",
        services(&[
            ("main", &main),
            ("errors", &errors),
            ("failing-errors", &failing_errors)
        ]),
    );
    let w = Weir::start(&table, &["--access-log", "false"]);
    let c = client();

    // A listed status: the error page's request, and the client gets its answer.
    let r = send(
        &c,
        "POST",
        &w.url("/pages/missing?status=404&x=1"),
        &[
            ("accept", "application/json"),
            ("x-request-id", "req-7"),
            ("x-custom", "kept"),
        ],
        "a body",
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    assert_eq!(j["name"], "errors");
    assert_eq!(j["method"], "POST");
    assert_eq!(j["path"], "/");
    assert_eq!(j["query"], serde_json::Value::Null);
    assert_eq!(j["body_length"], 0);
    let h = &j["headers"];
    assert_eq!(h["content-length"], "0");
    assert_eq!(h["x-code"], "404");
    assert_eq!(h["x-format"], "application/json");
    assert_eq!(h["x-original-uri"], "/pages/missing?status=404&x=1");
    assert_eq!(h["x-request-id"], "req-7");
    assert_eq!(h["x-namespace"], "shop");
    assert_eq!(h["x-ingress-name"], "pages");
    assert_eq!(h["x-custom"], "kept", "the request's own headers go along");
    assert!(h["x-forwarded-for"].is_string(), "{h}");

    // Without Accept, text/html; another listed status.
    let r = get(&c, &w.url("/pages/down?status=503"), &[]).await;
    assert_eq!(r.status, 200);
    let j = r.json();
    assert_eq!(j["name"], "errors");
    assert_eq!(j["headers"]["x-code"], "503");
    assert_eq!(j["headers"]["x-format"], "text/html");

    // Unlisted statuses, and successes, pass through.
    for status in [200, 500, 502] {
        let r = get(&c, &w.url(&format!("/pages/x?status={status}")), &[]).await;
        assert_eq!(r.status, status);
        assert_eq!(r.echo_name().as_deref(), Some("main"));
    }

    // The fallback's own statuses are never replaced (no loop): its 503 is the answer.
    let r = get(&c, &w.url("/looping/x?status=404"), &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.echo_name().as_deref(), Some("failing-errors"));

    // A fallback that cannot answer: the original status, as Weir's own error.
    let r = get(&c, &w.url("/gone/x?status=404"), &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("server"), Some("weir"));
    assert_eq!(r.echo_name(), None);
    assert_eq!(r.json()["message"], "Not Found");

    // Many in a row: every one gets its page, and the replaced answers, read to their end,
    // leave their connections to the next requests (the echo numbers the ones it accepted).
    let counts = spread(&w, "/pages/again?status=404", 200).await;
    assert_eq!(counts.get("errors"), Some(&200), "{counts:?}");
    for _ in 0..20 {
        let r = get(&c, &w.url("/pages/one?status=404"), &[]).await;
        assert_eq!(r.echo_name().as_deref(), Some("errors"));
    }
    let r = get(&c, &w.url("/pages/count"), &[]).await;
    assert_eq!(r.echo_name().as_deref(), Some("main"));
    let opened = r.json()["connection"].as_u64().unwrap();
    assert!(
        opened <= 20,
        "main accepted {opened} connections for 222 requests"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_access_log_writes_no_line_but_is_counted() {
    let e = echo("e");
    let table = format!(
        "routes:\n\
         - {{id: quiet, paths: [{{path: /quiet}}], service: s, access_log: false}}\n\
         - {{id: loud, paths: [{{path: /loud}}], service: s}}\n\
         services:\n{}",
        services(&[("s", &e)])
    );
    let dir = temp_dir("route-access-log");
    let log = dir.join("access.log");
    let out = std::fs::File::create(&log).unwrap();
    let w = Weir::start_with(&table, &[], Stdio::from(out));
    let c = client();
    for _ in 0..3 {
        assert_eq!(get(&c, &w.url("/quiet/a"), &[]).await.status, 200);
    }
    assert_eq!(get(&c, &w.url("/loud/a"), &[]).await.status, 200);
    assert_eq!(get(&c, &w.url("/quiet/b"), &[]).await.status, 200);
    let lines = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    // The loud request was sent after three quiet ones and before one: once it is written,
    // the earlier quiet ones would have been too.
    assert!(
        eventually(Duration::from_secs(5), || lines()
            .iter()
            .any(|l| l["route"] == "loud")),
        "{:?}",
        lines()
    );
    // The last quiet request had its line queued (or not) before the next one is answered.
    assert_eq!(get(&c, &w.url("/loud/b"), &[]).await.status, 200);
    assert!(eventually(Duration::from_secs(5), || lines()
        .iter()
        .filter(|l| l["route"] == "loud")
        .count()
        == 2));
    let all = lines();
    assert!(
        all.iter().all(|l| l["route"] != "quiet"),
        "no line for the quiet route: {all:?}"
    );
    // Counted all the same.
    let want = "weir_requests_total{route=\"quiet\",service=\"s\",status=\"200\"} 4";
    let mut text = String::new();
    for _ in 0..100 {
        text = metrics(&c, &w).await;
        if text.contains(want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(text.contains(want), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}
