//! The balancer phase through the real binary, against real upstreams on 127.0.0.1: the
//! algorithms, retries (and what is never replayed), passive and active health checks, the
//! tries in the access log, and connection reuse.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::stream::{self, StreamExt};

/// One route to service `s` balancing over upstream `u` with these settings.
fn table(upstream: &str, service_extra: &str) -> String {
    format!(
        "routes: [{{id: r, service: s}}]\n\
         services: [{{id: s, upstream: u{service_extra}}}]\n\
         upstreams:\n- {{id: u, {upstream}}}\n"
    )
}

fn targets(list: &[(&Proc, u32)]) -> String {
    let t: Vec<String> = list
        .iter()
        .map(|(p, w)| format!("{{target: '127.0.0.1:{}', weight: {w}}}", p.port))
        .collect();
    format!("targets: [{}]", t.join(", "))
}

/// Sends `n` GETs, `concurrency` at a time, each with the headers `headers(i)` gives; counts
/// the answers by echo name (`status N` for answers without one).
async fn spread(
    w: &Weir,
    n: usize,
    concurrency: usize,
    headers: impl Fn(usize) -> Vec<(String, String)>,
) -> HashMap<String, usize> {
    let c = client();
    let url = w.url("/");
    let results: Vec<String> = stream::iter(0..n)
        .map(|i| {
            let (c, url, h) = (c.clone(), url.clone(), headers(i));
            async move {
                let h: Vec<(&str, &str)> =
                    h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let r = get(&c, &url, &h).await;
                match r.echo_name() {
                    Some(name) if r.status == 200 => name,
                    _ => format!("status {}", r.status),
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut counts = HashMap::new();
    for r in results {
        *counts.entry(r).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_round_robin_keeps_a_1_to_3_split_within_3_percent() {
    let (a, b) = (echo("a"), echo("b"));
    let w = Weir::start(
        &table(&targets(&[(&a, 1), (&b, 3)]), ""),
        &["--access-log", "false"],
    );
    let counts = spread(&w, 4000, 8, |_| vec![]).await;
    let share = counts.get("a").copied().unwrap_or(0) as f64 / 4000.0;
    assert!(
        (share - 0.25).abs() <= 0.03,
        "a's share {share}: {counts:?}"
    );
    assert_eq!(
        counts.values().sum::<usize>(),
        counts["a"] + counts["b"],
        "{counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_connections_sends_fewer_requests_to_a_slow_target() {
    let fast = echo("fast");
    let slow = echo_with("slow", &["--delay-ms", "100"]);
    let up = format!(
        "algorithm: least-connections, {}",
        targets(&[(&fast, 100), (&slow, 100)])
    );
    let w = Weir::start(&table(&up, ""), &["--access-log", "false"]);
    let counts = spread(&w, 400, 8, |_| vec![]).await;
    let (f, s) = (counts["fast"], counts.get("slow").copied().unwrap_or(0));
    assert_eq!(f + s, 400, "{counts:?}");
    assert!(f >= 3 * s, "fast {f} vs slow {s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_ewma_prefers_a_5ms_target_over_a_50ms_one_by_4_to_1() {
    let fast = echo_with("fast", &["--delay-ms", "5"]);
    let slow = echo_with("slow", &["--delay-ms", "50"]);
    let up = format!(
        "algorithm: peak-ewma, {}",
        targets(&[(&fast, 100), (&slow, 100)])
    );
    let w = Weir::start(&table(&up, ""), &["--access-log", "false"]);
    let counts = spread(&w, 500, 4, |_| vec![]).await;
    let (f, s) = (counts["fast"], counts.get("slow").copied().unwrap_or(0));
    assert_eq!(f + s, 500, "{counts:?}");
    assert!(f >= 4 * s, "fast {f} vs slow {s}");
}

/// For each of `keys`, the target that answered it (by the `x-user` header).
async fn placement(w: &Weir, keys: usize) -> Vec<String> {
    let c = client();
    let url = w.url("/");
    stream::iter(0..keys)
        .map(|i| {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let key = format!("user-{i}");
                let r = get(&c, &url, &[("x-user", &key)]).await;
                assert_eq!(r.status, 200);
                r.echo_name().unwrap()
            }
        })
        .buffered(16)
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hashing_keeps_keys_and_moves_few_when_a_target_goes() {
    let ups: Vec<Proc> = (0..10).map(|i| echo(&format!("t{i}"))).collect();
    let all: Vec<(&Proc, u32)> = ups.iter().map(|p| (p, 100)).collect();
    let up = |t: &[(&Proc, u32)]| {
        format!(
            "algorithm: consistent-hashing, hash_on: {{by: header, name: x-user}}, {}",
            targets(t)
        )
    };
    let w = Weir::start(&table(&up(&all), ""), &["--access-log", "false"]);
    let before = placement(&w, 10_000).await;
    // The same key always lands on the same target.
    let again = placement(&w, 500).await;
    assert_eq!(
        &before[..500],
        &again[..],
        "a key changed target without a change"
    );
    let mut used: Vec<&String> = before.iter().collect();
    used.sort();
    used.dedup();
    assert_eq!(used.len(), 10, "every target gets keys");

    // Remove t3.
    let c = client();
    let fewer: Vec<(&Proc, u32)> = all
        .iter()
        .copied()
        .filter(|(p, _)| p.port != ups[3].port)
        .collect();
    assert_eq!(push(&c, &w, &table(&up(&fewer), "")).await.status, 200);
    let after = placement(&w, 10_000).await;
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    assert!(moved <= 1_500, "{moved} of 10,000 keys moved");
    for (b, a) in before.iter().zip(&after) {
        if b != "t3" {
            assert_eq!(b, a, "a key not on the removed target moved");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_hashing_sets_a_cookie_then_honours_it() {
    let ups: Vec<Proc> = (0..4).map(|i| echo(&format!("t{i}"))).collect();
    let all: Vec<(&Proc, u32)> = ups.iter().map(|p| (p, 100)).collect();
    let up = format!(
        "algorithm: consistent-hashing, hash_on: {{by: cookie, name: sticky, cookie_path: /, cookie_ttl: 600}}, {}",
        targets(&all)
    );
    let w = Weir::start(&table(&up, ""), &["--access-log", "false"]);
    let c = client();
    let first = get(&c, &w.url("/"), &[]).await;
    let set = first
        .header("set-cookie")
        .expect("a cookie is set")
        .to_string();
    assert!(set.starts_with("sticky="), "{set}");
    assert!(
        set.contains("; Path=/") && set.contains("; Max-Age=600"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_string();
    let target = first.echo_name().unwrap();
    for _ in 0..20 {
        let r = get(&c, &w.url("/"), &[("cookie", &cookie)]).await;
        assert_eq!(r.echo_name().unwrap(), target);
        assert!(
            r.header("set-cookie").is_none(),
            "the cookie is not set again"
        );
    }
    // Different new clients are spread (not all on one target).
    let mut seen = std::collections::HashSet::new();
    for _ in 0..40 {
        seen.insert(get(&c, &w.url("/"), &[]).await.echo_name().unwrap());
    }
    assert!(seen.len() >= 2, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_target_of_three_costs_no_client_an_error() {
    let (a, b) = (echo("a"), echo("b"));
    let dead = free_port();
    let up = format!(
        "targets: [{{target: '127.0.0.1:{}'}}, {{target: '127.0.0.1:{dead}'}}, {{target: '127.0.0.1:{}'}}]",
        a.port, b.port
    );
    let w = Weir::start_logged(&table(&up, ", retries: 2"), &[]);
    let counts = spread(&w, 1000, 8, |_| vec![]).await;
    assert_eq!(
        counts.get("a").copied().unwrap_or(0) + counts.get("b").copied().unwrap_or(0),
        1000,
        "{counts:?}"
    );
    // Every try is in the access log: the failed one with its reason, the answer after it.
    let log = w.log();
    assert!(
        log.contains(&format!("127.0.0.1:{dead}")),
        "the failed target is logged"
    );
}

/// An upstream that answers every request with `status` after reading its body, counting
/// requests and the body bytes of each.
/// (method, body bytes) of each request an upstream received.
type Seen = Arc<Mutex<Vec<(String, usize)>>>;

fn counting(status: u16) -> (Scripted, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let up = scripted(move |_, mut r, mut w| loop {
        let Some(head) = read_head(&mut r) else {
            return;
        };
        let method = head.split(' ').next().unwrap_or("").to_string();
        let lower = head.to_ascii_lowercase();
        let len: usize = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let chunked = lower.contains("transfer-encoding: chunked");
        let mut got = 0;
        if chunked {
            loop {
                let mut size = String::new();
                r.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk).unwrap();
                got += n;
                if n == 0 {
                    break;
                }
            }
        } else {
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            got = len;
        }
        log.lock().unwrap().push((method, got));
        let _ = write!(w, "HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nno");
    });
    (up, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_statuses_are_retried_for_idempotent_requests_and_a_large_upload_never_replayed() {
    let (one, seen_one) = counting(503);
    let (two, seen_two) = counting(503);
    let up = format!(
        "targets: [{{target: '127.0.0.1:{}'}}, {{target: '127.0.0.1:{}'}}]",
        one.port, two.port
    );
    let w = Weir::start_logged(
        &table(&up, ", retries: 2, retry_on: {statuses: [503]}"),
        &["--max-retry-body", "1024"],
    );
    let c = client();
    let total = |s: &Seen, m: &str| s.lock().unwrap().iter().filter(|(x, _)| x == m).count();

    // A GET is tried three times (retries: 2), on both targets, and the last answer passes.
    let r = get(&c, &w.url("/"), &[]).await;
    assert_eq!(r.status, 503);
    assert_eq!(total(&seen_one, "GET") + total(&seen_two, "GET"), 3);
    assert!(
        total(&seen_one, "GET") >= 1 && total(&seen_two, "GET") >= 1,
        "another target each time while there is one"
    );

    // A small PUT is kept and sent again whole.
    let r = send(&c, "PUT", &w.url("/"), &[], vec![b'x'; 600]).await;
    assert_eq!(r.status, 503);
    let puts: Vec<usize> = seen_one
        .lock()
        .unwrap()
        .iter()
        .chain(seen_two.lock().unwrap().iter())
        .filter(|(m, _)| m == "PUT")
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(puts, vec![600; 3], "each replay carries the whole body");

    // A POST is never replayed once sent, nor a PUT larger than --max-retry-body.
    let r = send(&c, "POST", &w.url("/"), &[], vec![b'y'; 100]).await;
    assert_eq!(r.status, 503);
    assert_eq!(total(&seen_one, "POST") + total(&seen_two, "POST"), 1);
    let r = send(&c, "POST", &w.url("/"), &[], vec![b'p'; 4 * 1024 * 1024]).await;
    assert_eq!(r.status, 503);
    assert_eq!(
        total(&seen_one, "POST") + total(&seen_two, "POST"),
        2,
        "the large POST went once"
    );
    let r = send(&c, "PUT", &w.url("/"), &[], vec![b'z'; 4 * 1024 * 1024]).await;
    assert_eq!(r.status, 503);
    let big: Vec<usize> = seen_one
        .lock()
        .unwrap()
        .iter()
        .chain(seen_two.lock().unwrap().iter())
        .filter(|(m, n)| m == "PUT" && *n > 600)
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(
        big,
        vec![4 * 1024 * 1024],
        "the large upload reached the upstream once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_and_header_show_every_try() {
    let a = echo("a");
    let dead = free_port();
    let config = format!(
        "settings: {{upstream_tries_header: true}}\n{}",
        table(
            &format!("algorithm: round-robin, targets: [{{target: '127.0.0.1:{dead}'}}, {{target: '127.0.0.1:{}'}}]", a.port),
            ", retries: 1"
        )
    );
    let log_dir = temp_dir("tries-log");
    let out = std::fs::File::create(log_dir.join("access.log")).unwrap();
    let w = Weir::start_with(&config, &[], std::process::Stdio::from(out));
    let c = client();
    let mut two = None;
    for _ in 0..4 {
        let r = get(&c, &w.url("/"), &[]).await;
        assert_eq!(r.status, 200);
        if r.header("x-weir-upstream-tries") == Some("2") {
            two = Some(r);
        }
    }
    assert!(two.is_some(), "a request went to the dead target first");
    let found = eventually(Duration::from_secs(5), || {
        let log = std::fs::read_to_string(log_dir.join("access.log")).unwrap();
        log.lines().any(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let tries = v["upstream_tries"].as_array();
            tries.is_some_and(|t| {
                t.len() == 2
                    && t[0]["target"] == format!("127.0.0.1:{dead}")
                    && t[0]["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("connect"))
                    && t[1]["status"] == 200
                    && t[1]["ms"].is_number()
            }) && v["tries"] == 2
        })
    });
    assert!(
        found,
        "{}",
        std::fs::read_to_string(log_dir.join("access.log")).unwrap()
    );
    let _ = std::fs::remove_dir_all(log_dir);
}

/// Reads the `weir_upstream_target_health` gauge of `target`.
async fn health_gauge(c: &HttpClient, w: &Weir, target: u16) -> Option<u8> {
    let text = metrics(c, w).await;
    let needle = format!("target=\"127.0.0.1:{target}\"}} ");
    text.lines()
        .find(|l| l.starts_with("weir_upstream_target_health{") && l.contains(&needle))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_target_is_ejected_by_passive_checks_and_brought_back_by_probes() {
    let dir = temp_dir("health");
    let fail = dir.join("fail");
    let good = echo("good");
    let flaky = echo_with("flaky", &["--status-file", fail.to_str().unwrap()]);
    let up = format!(
        "{}, healthchecks: {{passive: {{failures: 3, unhealthy_statuses: [500]}}, \
         active: {{path: /health, interval: 200, healthy_threshold: 2, unhealthy_threshold: 100}}}}",
        targets(&[(&good, 100), (&flaky, 100)])
    );
    let w = Weir::start_logged(&table(&up, ""), &["--access-log", "false"]);
    let c = client();
    assert_eq!(health_gauge(&c, &w, flaky.port).await, Some(1));

    std::fs::write(&fail, "500").unwrap();
    let mut failures = 0;
    for _ in 0..40 {
        if get(&c, &w.url("/"), &[]).await.status == 500 {
            failures += 1;
        }
    }
    assert_eq!(
        failures, 3,
        "three failures eject it, then only the good target answers"
    );
    assert_eq!(health_gauge(&c, &w, flaky.port).await, Some(0));
    let upstreams = get(&c, &w.admin_url("/upstreams"), &[]).await.json();
    let flaky_state = upstreams["upstreams"][0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == format!("127.0.0.1:{}", flaky.port))
        .unwrap()
        .clone();
    assert_eq!(flaky_state["health"], "unhealthy");

    std::fs::remove_file(&fail).unwrap();
    let back = {
        let mut ok = false;
        for _ in 0..50 {
            if health_gauge(&c, &w, flaky.port).await == Some(1) {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ok
    };
    assert!(back, "active probes did not bring it back");
    let counts = spread(&w, 20, 1, |_| vec![]).await;
    assert_eq!(counts.get("flaky"), Some(&10), "{counts:?}");
    let log = w.log();
    assert!(
        log.contains("upstream target is unhealthy")
            && log.contains("3 consecutive failures (passive check)"),
        "{log}"
    );
    assert!(
        log.contains("upstream target is healthy again")
            && log.contains("healthy probes (active check)"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_target_unhealthy_503_or_panic_mode() {
    let dir = temp_dir("panic");
    let fail = dir.join("fail");
    std::fs::write(&fail, "500").unwrap();
    let a = echo_with("a", &["--status-file", fail.to_str().unwrap()]);
    for (panic, expect) in [(false, 503), (true, 500)] {
        let up = format!(
            "{}, healthchecks: {{passive: {{failures: 1, unhealthy_statuses: [500], cooldown: 600}}, panic: {panic}}}",
            targets(&[(&a, 100)])
        );
        let w = Weir::start(&table(&up, ""), &["--access-log", "false"]);
        let c = client();
        assert_eq!(
            get(&c, &w.url("/"), &[]).await.status,
            500,
            "the failure that ejects it"
        );
        for _ in 0..3 {
            assert_eq!(
                get(&c, &w.url("/"), &[]).await.status,
                expect,
                "panic: {panic}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sequential_requests_reuse_a_handful_of_connections() {
    let up = scripted(|_, mut r, mut w| {
        while read_head(&mut r).is_some() {
            if write!(w, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err() {
                return;
            }
        }
    });
    let w = Weir::start(
        &format!(
            "routes: [{{id: r, service: s}}]\nservices: [{{id: s, host: 127.0.0.1, port: {}}}]\n",
            up.port
        ),
        &["--access-log", "false"],
    );
    let c = client();
    for _ in 0..1000 {
        assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    }
    let n = up.accepted.load(Ordering::SeqCst);
    assert!(
        n <= 4,
        "{n} upstream connections for 1,000 sequential requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_can_choose_the_target_and_read_the_tries() {
    let (a, b, canary) = (echo("a"), echo("b"), echo("canary"));
    let dead = free_port();
    let config = format!(
        "{}plugins: [{{id: t, name: test-set-target}}]\n",
        table(
            &format!(
                "targets: [{{target: '127.0.0.1:{dead}'}}, {{target: '127.0.0.1:{}'}}, {{target: '127.0.0.1:{}'}}]",
                a.port, b.port
            ),
            ", retries: 2"
        )
    );
    let w = Weir::start(&config, &["--access-log", "false"]);
    let c = client();
    let port = canary.port.to_string();
    for _ in 0..5 {
        let r = get(&c, &w.url("/"), &[("x-test-target", &port)]).await;
        assert_eq!(r.echo_name().as_deref(), Some("canary"));
        assert_eq!(r.header("x-test-tries"), Some("1"));
        assert_eq!(
            r.header("x-test-targets"),
            Some(format!("127.0.0.1:{port}").as_str())
        );
    }
    // Balanced requests: the plugin sees the dead target's failed try before the answer.
    let mut saw_retry = false;
    for _ in 0..6 {
        let r = get(&c, &w.url("/"), &[]).await;
        assert!(matches!(r.echo_name().as_deref(), Some("a" | "b")));
        if r.header("x-test-tries") == Some("2") {
            let targets = r.header("x-test-targets").unwrap();
            assert!(
                targets.starts_with(&format!("127.0.0.1:{dead},")),
                "{targets}"
            );
            saw_retry = true;
        }
    }
    assert!(saw_retry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_short_deadline_does_not_eject_the_target() {
    let slow = echo_with("slow", &["--delay-ms", "200"]);
    let up = format!(
        "{}, healthchecks: {{passive: {{timeouts: 1, cooldown: 600}}}}",
        targets(&[(&slow, 100)])
    );
    let w = Weir::start(&table(&up, ", retries: 0"), &["--access-log", "false"]);
    let c = client();
    // A gRPC call that gives up after 1 ms: Weir answers DEADLINE_EXCEEDED itself...
    for _ in 0..3 {
        let r = send(
            &c,
            "POST",
            &w.url("/"),
            &[("content-type", "application/grpc"), ("grpc-timeout", "1m")],
            vec![0u8, 0, 0, 0, 0],
        )
        .await;
        assert_eq!(r.header("grpc-status"), Some("4"), "{r:?}");
    }
    // ...and the target, which did nothing wrong, stays in rotation.
    let r = get(&c, &w.url("/"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(health_gauge(&c, &w, slow.port).await, Some(1));
}
