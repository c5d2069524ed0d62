//! The balancer phase through the real binary, against real upstreams on 127.0.0.1: the
//! algorithms, retries (and what is never replayed), passive and active health checks, the
//! tries in the access log, and connection reuse.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::health::{admin_health, health_gauge};
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
    let ports: Vec<(u16, u32)> = list.iter().map(|(p, w)| (p.port, *w)).collect();
    targets_at(&ports)
}

/// `targets:` of 127.0.0.1 at these (port, weight) pairs.
fn targets_at(list: &[(u16, u32)]) -> String {
    let t: Vec<String> = list
        .iter()
        .map(|(port, w)| format!("{{target: '127.0.0.1:{port}', weight: {w}}}"))
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

/// (method, body bytes) of each request an upstream received.
type Seen = Arc<Mutex<Vec<(String, usize)>>>;

/// What an upstream made by [`behaving`] does with each request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Reads the body, then answers with this status.
    Answer(u16),
    /// Reads the body, waits this many milliseconds, then answers with this status.
    AnswerAfter(u16, u64),
    /// Reads the body, then never answers: holds the connection until the proxy gives up.
    Stall,
    /// Reads this many bytes of the body (fewer if the body is shorter), then closes the
    /// connection without answering.
    CutAfter(usize),
}

/// An upstream that answers every request with `status` after reading its body, counting
/// requests and the body bytes of each.
fn counting(status: u16) -> (Scripted, Seen) {
    behaving(Behaviour::Answer(status))
}

/// An upstream that records (method, body bytes read) of every request and acts as `b` says.
fn behaving(b: Behaviour) -> (Scripted, Seen) {
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
        if let Behaviour::CutAfter(n) = b {
            // The raw bytes after the head (chunk framing included), then a reset.
            let n = if chunked { n } else { n.min(len) };
            let mut part = vec![0; n];
            let got = r.read_exact(&mut part).map_or(0, |()| n);
            log.lock().unwrap().push((method, got));
            return;
        }
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
        match b {
            Behaviour::AnswerAfter(status, ms) => {
                std::thread::sleep(Duration::from_millis(ms));
                let _ = write!(w, "HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nno");
            }
            Behaviour::Answer(status) => {
                let _ = write!(w, "HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nno");
            }
            // Until the proxy closes its end (the scripted read timeout bounds it).
            _ => {
                let _ = r.read(&mut [0; 1]);
                return;
            }
        }
    });
    (up, seen)
}

/// How many requests of `method` an upstream received.
fn total(s: &Seen, method: &str) -> usize {
    s.lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == method)
        .count()
}

/// `retry_on.timeout` (nginx's `proxy_next_upstream_timeout`): no retry starts once it has
/// passed since the first try; the last answer is the client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_retry_starts_after_the_retry_timeout() {
    let (slow, seen) = behaving(Behaviour::AnswerAfter(503, 500));
    let up = format!("targets: [{{target: '127.0.0.1:{}'}}]", slow.port);
    let c = client();
    // Each answer takes 500 ms: tries start at 0, 500, 1000 ms…; a 250 ms budget lets the
    // first one only, 1250 ms three (a quarter of a second either way).
    for (timeout, tries) in [(250, 1), (1250, 3)] {
        let extra = format!(", retries: 4, retry_on: {{statuses: [503], timeout: {timeout}}}");
        let w = Weir::start(&table(&up, &extra), &[]);
        seen.lock().unwrap().clear();
        let r = get(&c, &w.url("/"), &[]).await;
        assert_eq!(r.status, 503, "the upstream's own answer");
        assert_eq!(total(&seen, "GET"), tries, "timeout {timeout} ms");
    }
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
    assert_eq!(
        admin_health(&c, &w, flaky.port).await.as_deref(),
        Some("unhealthy")
    );

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

/// The weight of the first target in tests that need each request's first try on it: smooth
/// weighted round-robin over weights 100:1 picks the first target 50 times before the second,
/// and a retry goes to the target not tried yet.
const FIRST: u32 = 100;

/// The access log (stdout) of a proxy started with [`logged_stdout`], one JSON value a line.
fn access_lines(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("access.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Starts the proxy with its access log (stdout) in a file of a new directory, returned.
fn logged_stdout(config: &str, extra: &[&str]) -> (Weir, std::path::PathBuf) {
    let dir = temp_dir("access-log");
    let out = std::fs::File::create(dir.join("access.log")).unwrap();
    (
        Weir::start_with(config, extra, std::process::Stdio::from(out)),
        dir,
    )
}

/// The access log line of the request to `path`, waiting (bounded) for it.
fn access_line(dir: &std::path::Path, path: &str) -> serde_json::Value {
    let mut found = None;
    eventually(Duration::from_secs(5), || {
        found = access_lines(dir).into_iter().find(|l| l["path"] == path);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("no access log line for {path}: {:?}", access_lines(dir)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_on_timeouts_retries_idempotent_requests_on_another_target() {
    let (stalls, stalled) = behaving(Behaviour::Stall);
    let (answers, answered) = counting(200);
    let config = format!(
        "settings: {{upstream_tries_header: true}}\n{}",
        table(
            &targets_at(&[(stalls.port, FIRST), (answers.port, 1)]),
            ", retries: 1, read_timeout: 300, retry_on: {timeouts: true}"
        )
    );
    let (w, log_dir) = logged_stdout(&config, &[]);
    let c = client();

    // A GET: the first target says nothing within 300 ms, the second answers.
    let began = Instant::now();
    let r = get(&c, &w.url("/get"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(began.elapsed() >= Duration::from_millis(300));
    assert_eq!(r.header("x-weir-upstream-tries"), Some("2"));
    assert_eq!((total(&stalled, "GET"), total(&answered, "GET")), (1, 1));

    // A PUT with a small body is kept, and sent whole to the second target.
    let r = send(&c, "PUT", &w.url("/put"), &[], vec![b'x'; 100]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-weir-upstream-tries"), Some("2"));
    assert_eq!(total(&stalled, "PUT"), 1);
    assert_eq!(
        answered
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| m == "PUT")
            .collect::<Vec<_>>(),
        vec![&("PUT".to_string(), 100)]
    );

    // The access log: the GET's timeout, then its answer.
    let line = access_line(&log_dir, "/get");
    assert_eq!(line["tries"], 2, "{line}");
    let tries = line["upstream_tries"].as_array().expect("upstream_tries");
    assert_eq!(tries.len(), 2, "{line}");
    assert_eq!(tries[0]["target"], format!("127.0.0.1:{}", stalls.port));
    assert_eq!(tries[0]["error"], "upstream timed out", "{line}");
    assert!(tries[0]["ms"].as_f64().unwrap() >= 290.0, "{line}");
    assert_eq!(tries[1]["target"], format!("127.0.0.1:{}", answers.port));
    assert_eq!(tries[1]["status"], 200, "{line}");
    let _ = std::fs::remove_dir_all(log_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_on_timeouts_never_retries_a_post_which_gets_504_after_the_read_timeout() {
    let (stalls, stalled) = behaving(Behaviour::Stall);
    let (answers, answered) = counting(200);
    // The write timeout (3 s) bounds pauses in sending the body; once the body is sent whole
    // only the read timeout (300 ms) applies.
    let w = Weir::start(
        &table(
            &targets_at(&[(stalls.port, FIRST), (answers.port, 1)]),
            ", retries: 1, read_timeout: 300, write_timeout: 3000, retry_on: {timeouts: true}",
        ),
        &["--access-log", "false"],
    );
    let c = client();
    let began = Instant::now();
    let r = send(&c, "POST", &w.url("/post"), &[], vec![b'y'; 100]).await;
    let took = began.elapsed();
    // The POST may have been acted on: not sent again, and the second target never sees it.
    assert_eq!((total(&stalled, "POST"), total(&answered, "POST")), (1, 0));
    assert_eq!(
        stalled.lock().unwrap()[0],
        ("POST".to_string(), 100),
        "the body reached the upstream whole"
    );
    assert_eq!(r.status, 504, "{r:?}");
    assert!(
        took < Duration::from_millis(2000),
        "504 after {took:?}: the 300 ms read timeout did not apply once the body was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_timeouts_in_retry_on_a_timed_out_get_is_not_retried() {
    for retry_on in ["", ", retry_on: {statuses: [503]}"] {
        let (stalls, stalled) = behaving(Behaviour::Stall);
        let (answers, answered) = counting(200);
        let w = Weir::start(
            &table(
                &targets_at(&[(stalls.port, FIRST), (answers.port, 1)]),
                &format!(", retries: 1, read_timeout: 300{retry_on}"),
            ),
            &["--access-log", "false"],
        );
        let c = client();
        let r = get(&c, &w.url("/"), &[]).await;
        assert_eq!(r.status, 504, "retry_on {retry_on:?}: {r:?}");
        assert_eq!(
            (total(&stalled, "GET"), total(&answered, "GET")),
            (1, 0),
            "retry_on {retry_on:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_keeps_the_tries_of_a_request_that_failed() {
    let (dead_a, dead_b) = (free_port(), free_port());
    let (stalls, stalled) = behaving(Behaviour::Stall);
    let config = format!(
        "routes:\n- {{id: dead, paths: [{{path: /dead}}], service: dead}}\n\
         - {{id: slow, paths: [{{path: /slow}}], service: slow}}\n\
         services:\n- {{id: dead, upstream: dead, retries: 1}}\n\
         - {{id: slow, host: 127.0.0.1, port: {}, retries: 1, read_timeout: 300}}\n\
         upstreams:\n- {{id: dead, {}}}\n",
        stalls.port,
        targets_at(&[(dead_a, 100), (dead_b, 100)])
    );
    let (w, log_dir) = logged_stdout(&config, &[]);
    let c = client();
    assert_eq!(get(&c, &w.url("/dead"), &[]).await.status, 502);
    assert_eq!(get(&c, &w.url("/slow"), &[]).await.status, 504);
    assert_eq!(total(&stalled, "GET"), 1);

    // Both targets were tried, and failed to connect.
    let line = access_line(&log_dir, "/dead");
    assert_eq!(line["tries"], 2, "{line}");
    let tries = line["upstream_tries"].as_array();
    let mut tried: Vec<String> = tries
        .unwrap_or_else(|| panic!("no upstream_tries: {line}"))
        .iter()
        .map(|t| t["target"].as_str().unwrap().to_string())
        .collect();
    tried.sort();
    let mut expected = vec![format!("127.0.0.1:{dead_a}"), format!("127.0.0.1:{dead_b}")];
    expected.sort();
    assert_eq!(tried, expected, "{line}");
    // The one try of the timed-out request.
    let line = access_line(&log_dir, "/slow");
    assert_eq!(line["tries"], 1, "{line}");
    assert_eq!(line["target"], format!("127.0.0.1:{}", stalls.port));
    let _ = std::fs::remove_dir_all(log_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_phase_reads_every_try_of_a_failover() {
    let a = echo("a");
    let (dead, dead_a, dead_b) = (free_port(), free_port(), free_port());
    let dir = temp_dir("log-tries");
    let file = dir.join("tries.jsonl");
    let config = format!(
        "routes:\n- {{id: r, paths: [{{path: /}}], service: s}}\n\
         - {{id: dead, paths: [{{path: /dead}}], service: dead}}\n\
         services:\n- {{id: s, upstream: u, retries: 1}}\n- {{id: dead, upstream: dead, retries: 1}}\n\
         upstreams:\n- {{id: u, {}}}\n- {{id: dead, {}}}\n\
         plugins: [{{id: t, name: test-log-tries, config: {{log_file: '{}'}}}}]\n",
        targets_at(&[(dead, 100), (a.port, 100)]),
        targets_at(&[(dead_a, 100), (dead_b, 100)]),
        file.display()
    );
    let w = Weir::start(&config, &["--access-log", "false"]);
    let c = client();
    for i in 0..4 {
        assert_eq!(get(&c, &w.url(&format!("/r{i}")), &[]).await.status, 200);
    }
    assert_eq!(get(&c, &w.url("/dead"), &[]).await.status, 502);
    let read = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(5), || read().len() == 5),
        "{:?}",
        read()
    );
    let lines = read();
    let (live, dead_target) = (format!("127.0.0.1:{}", a.port), format!("127.0.0.1:{dead}"));
    let mut failovers = 0;
    for l in lines.iter().filter(|l| l["path"] != "/dead") {
        assert_eq!(l["status"], 200, "{l}");
        let tries = l["tries"].as_array().unwrap();
        assert_eq!(l["count"], tries.len(), "{l}");
        match tries.len() {
            // Straight to the live target.
            1 => {
                assert_eq!(tries[0]["target"], live.as_str(), "{l}");
                assert_eq!(tries[0]["status"], 200, "{l}");
                assert!(tries[0].get("error").is_none(), "{l}");
            }
            // The dead target first, then the live one.
            2 => {
                failovers += 1;
                assert_eq!(tries[0]["target"], dead_target.as_str(), "{l}");
                let error = tries[0]["error"].as_str().unwrap_or_default();
                assert!(error.contains("connect"), "{l}");
                assert!(tries[0].get("status").is_none(), "{l}");
                assert_eq!(tries[1]["target"], live.as_str(), "{l}");
                assert_eq!(tries[1]["status"], 200, "{l}");
                assert!(tries[1].get("error").is_none(), "{l}");
            }
            n => panic!("{n} tries: {l}"),
        }
    }
    assert!(failovers >= 1, "no request went to the dead target first");
    // Every try failed: the log phase still sees both.
    let l = lines.iter().find(|l| l["path"] == "/dead").unwrap();
    assert_eq!(l["status"], 502, "{l}");
    let tries = l["tries"].as_array().unwrap();
    assert_eq!(tries.len(), 2, "{l}");
    assert!(
        tries
            .iter()
            .all(|t| t["error"].as_str().is_some_and(|e| e.contains("connect"))),
        "{l}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// An upstream answering 200 to every request (after 300 ms for `GET /slow`), with the number
/// of its connections open now.
fn keepalive_upstream() -> (Scripted, Arc<AtomicUsize>) {
    let open = Arc::new(AtomicUsize::new(0));
    let gauge = open.clone();
    let up = scripted(move |_, mut r, mut w| {
        gauge.fetch_add(1, Ordering::SeqCst);
        while let Some(head) = read_head(&mut r) {
            if head.starts_with("GET /slow ") {
                std::thread::sleep(Duration::from_millis(300));
            }
            if write!(w, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err() {
                break;
            }
        }
        gauge.fetch_sub(1, Ordering::SeqCst);
    });
    (up, open)
}

/// One route to 127.0.0.1:`port`.
fn direct(port: u16) -> String {
    format!(
        "routes: [{{id: r, service: s}}]\nservices: [{{id: s, host: 127.0.0.1, port: {port}}}]\n"
    )
}

/// `n` concurrent `GET /slow` over `n` new client connections, each answered 200.
async fn burst(w: &Weir, n: usize) {
    let c = client();
    let url = w.url("/slow");
    let answers = futures::future::join_all((0..n).map(|_| get(&c, &url, &[]))).await;
    assert!(answers.iter().all(|r| r.status == 200), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_keepalive_keeps_at_most_n_idle_connections_per_target() {
    let (up, open) = keepalive_upstream();
    let w = Weir::start(
        &direct(up.port),
        &[
            "--access-log",
            "false",
            "--worker-threads",
            "1",
            "--upstream-keepalive",
            "2",
        ],
    );
    let accepted = || up.accepted.load(Ordering::SeqCst);
    let open_now = || open.load(Ordering::SeqCst);
    burst(&w, 8).await;
    assert_eq!(
        accepted(),
        8,
        "eight requests at once took eight connections"
    );
    assert!(
        eventually(Duration::from_secs(5), || open_now() == 2),
        "{} connections still open, 2 kept",
        open_now()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(open_now(), 2, "the two kept stay open");

    // The two kept are reused: sequential requests open no connection.
    let c = client();
    for _ in 0..10 {
        assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    }
    assert_eq!(accepted(), 8);
    // Another burst takes both and opens six.
    burst(&w, 8).await;
    assert_eq!(accepted(), 14);
    assert!(
        eventually(Duration::from_secs(5), || open_now() == 2),
        "{} open",
        open_now()
    );

    // With the default (256), all eight of a burst stay.
    let (up, open) = keepalive_upstream();
    let w = Weir::start(
        &direct(up.port),
        &["--access-log", "false", "--worker-threads", "1"],
    );
    burst(&w, 8).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (
            up.accepted.load(Ordering::SeqCst),
            open.load(Ordering::SeqCst)
        ),
        (8, 8)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_connection_idle_past_the_idle_timeout_is_closed_and_not_reused() {
    let (up, open) = keepalive_upstream();
    let w = Weir::start(
        &direct(up.port),
        &[
            "--access-log",
            "false",
            "--worker-threads",
            "1",
            "--upstream-idle-timeout",
            "300ms",
        ],
    );
    let c = client();
    let accepted = || up.accepted.load(Ordering::SeqCst);
    assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    // Used again within the timeout: reused.
    assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    assert_eq!(accepted(), 1);
    let idle_since = Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || open.load(Ordering::SeqCst) == 0),
        "the idle connection was not closed"
    );
    let idle = idle_since.elapsed();
    assert!(
        idle >= Duration::from_millis(200),
        "closed after {idle:?} idle, before the 300 ms timeout"
    );
    assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    assert_eq!(
        accepted(),
        2,
        "a new connection after the idle one was closed"
    );

    // With the default timeout (60 s), a connection idle for a second is reused.
    let (up, open) = keepalive_upstream();
    let w = Weir::start(
        &direct(up.port),
        &["--access-log", "false", "--worker-threads", "1"],
    );
    assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    assert_eq!(
        (
            up.accepted.load(Ordering::SeqCst),
            open.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_ejection_and_pooled_connections_survive_table_swaps() {
    let good = recorder::Server::start(|_| recorder::response(200, "", "good"));
    let bad = recorder::Server::start(|_| recorder::response(500, "", "bad"));
    let (other1, other2) = (echo("other1"), echo("other2"));
    let config = |other: &Proc, new_route: bool| {
        format!(
            "routes:\n- {{id: r, paths: [{{path: /}}], service: s}}\n\
             - {{id: o, paths: [{{path: /other}}], service: o}}\n{}\
             services:\n- {{id: s, upstream: u, retries: 0}}\n- {{id: o, upstream: o}}\n\
             upstreams:\n- {{id: u, {}, healthchecks: {{passive: {{failures: 1, \
             unhealthy_statuses: [500], cooldown: 600}}}}}}\n- {{id: o, {}}}\n",
            if new_route {
                "- {id: new, paths: [{path: /new}], service: o}\n"
            } else {
                ""
            },
            targets_at(&[(good.port, 100), (bad.port, 100)]),
            targets(&[(other, 100)]),
        )
    };
    let w = Weir::start(
        &config(&other1, false),
        &["--access-log", "false", "--worker-threads", "1"],
    );
    let c = client();
    // Round-robin: one of the first two requests reaches the failing target; one failure
    // ejects it.
    let mut statuses = vec![
        get(&c, &w.url("/"), &[]).await.status,
        get(&c, &w.url("/"), &[]).await.status,
    ];
    statuses.sort();
    assert_eq!(statuses, [200, 500]);
    assert_eq!(bad.count(), 1);
    assert_eq!(health_gauge(&c, &w, bad.port).await, Some(0));
    let connections = good.accepted.load(Ordering::SeqCst);
    assert_eq!(connections, 1);

    // Only the good target gets traffic, over the connection it already has.
    let only_good = |when: &'static str| {
        let (c, w, good, bad) = (&c, &w, &good, &bad);
        async move {
            let before = good.count();
            for _ in 0..6 {
                let r = get(c, &w.url("/"), &[]).await;
                assert_eq!((r.status, &r.body[..]), (200, &b"good"[..]), "{when}");
            }
            assert_eq!(good.count(), before + 6, "{when}");
            assert_eq!(bad.count(), 1, "{when}: the ejected target got traffic");
            assert_eq!(health_gauge(c, w, bad.port).await, Some(0), "{when}");
            assert_eq!(
                good.accepted.load(Ordering::SeqCst),
                connections,
                "{when}: the pooled connection was not reused"
            );
        }
    };
    only_good("before any push").await;

    // An endpoint change of another upstream.
    assert_eq!(push(&c, &w, &config(&other2, false)).await.status, 200);
    only_good("after an endpoint change").await;
    let r = get(&c, &w.url("/other"), &[]).await;
    assert_eq!(r.echo_name().as_deref(), Some("other2"), "the push applied");

    // A route change (the whole table compiled again).
    assert_eq!(push(&c, &w, &config(&other2, true)).await.status, 200);
    only_good("after a route change").await;
    let r = get(&c, &w.url("/new"), &[]).await;
    assert_eq!(r.echo_name().as_deref(), Some("other2"), "the push applied");
}

/// Sends `PUT /upload` with a chunked body of `chunks` chunks of `size` bytes over a new
/// connection (every step bounded by a 10 s timeout); returns the response's status line, empty
/// when the connection was cut before one arrived.
fn chunked_put(port: u16, chunks: usize, size: usize) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = write!(
        s,
        "PUT /upload HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let chunk = vec![b'c'; size];
    for _ in 0..chunks {
        let sent = write!(s, "{size:x}\r\n")
            .and_then(|()| s.write_all(&chunk))
            .and_then(|()| s.write_all(b"\r\n"));
        if sent.is_err() {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_upload_cut_mid_body_is_never_replayed_but_a_small_kept_one_is() {
    let (cuts, cut) = behaving(Behaviour::CutAfter(100));
    let (answers, answered) = counting(200);
    let w = Weir::start_logged(
        &table(
            &targets_at(&[(cuts.port, FIRST), (answers.port, 1)]),
            ", retries: 1, retry_on: {statuses: [503]}",
        ),
        &["--access-log", "false"],
    );
    let port = w.proc.port;
    // 4 MiB sent chunked: streamed upstream as it arrives, never kept.
    let status = tokio::task::spawn_blocking(move || chunked_put(port, 64, 64 * 1024))
        .await
        .unwrap();
    assert!(
        status.is_empty() || status.starts_with("HTTP/1.1 502"),
        "{status:?}"
    );
    assert_eq!(
        cut.lock().unwrap().clone(),
        vec![("PUT".to_string(), 100)],
        "the first target saw the upload once"
    );
    assert_eq!(
        total(&answered, "PUT"),
        0,
        "the cut streamed upload was sent again"
    );

    // A small PUT with a Content-Length is kept: the same failure is retried, body whole.
    let c = client();
    let r = send(&c, "PUT", &w.url("/small"), &[], vec![b'k'; 600]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(total(&cut, "PUT"), 2);
    assert_eq!(
        answered.lock().unwrap().clone(),
        vec![("PUT".to_string(), 600)]
    );
}
