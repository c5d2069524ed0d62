//! The plugin framework through the real binary: plugins that wait for I/O, instances kept
//! across pushes, the factory lifecycle, the request_body phase, a request that always logs
//! (499 when its client left), and an access log that never stalls the workers.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::*;

/// A line service that holds every answer until released: each connection sends
/// `PING <token>` and gets `PONG <token>` back once [`Gate::open`] was called.
struct Gate {
    port: u16,
    /// Connections whose PING arrived.
    waiting: Arc<AtomicUsize>,
    open: Arc<(Mutex<bool>, Condvar)>,
    answered: Arc<AtomicUsize>,
}

impl Gate {
    fn start() -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let waiting = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let (w, a, o) = (waiting.clone(), answered.clone(), open.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (w, a, o) = (w.clone(), a.clone(), o.clone());
                std::thread::spawn(move || {
                    stream
                        .set_read_timeout(Some(Duration::from_secs(60)))
                        .unwrap();
                    let mut r = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    w.fetch_add(1, Ordering::SeqCst);
                    let (m, cv) = &*o;
                    let released = cv
                        .wait_timeout_while(m.lock().unwrap(), Duration::from_secs(60), |open| {
                            !*open
                        })
                        .unwrap();
                    drop(released);
                    let token = line.trim_end().strip_prefix("PING ").unwrap_or("");
                    let _ = (&stream).write_all(format!("PONG {token}\n").as_bytes());
                    a.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Gate {
            port,
            waiting,
            open,
            answered,
        }
    }

    fn release(&self) {
        let (m, cv) = &*self.open;
        *m.lock().unwrap() = true;
        cv.notify_all();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_waiting_for_the_network_holds_up_no_other_request() {
    let echo = echo("e");
    let gate = Gate::start();
    let w = Weir::start(
        &format!(
            "routes:\n\
             - {{id: slow, paths: [{{path: /slow}}], service: s}}\n\
             - {{id: fast, paths: [{{path: /fast}}], service: s}}\n\
             services: [{{id: s, host: 127.0.0.1, port: {}}}]\n\
             plugins:\n\
             - {{id: wait, name: test-await, route: slow, config: {{addr: \"127.0.0.1:{}\", token: s3cret-token}}}}\n",
            echo.port, gate.port
        ),
        &[],
    );
    let c = client();

    // 200 requests whose access phase waits on the gate.
    const N: usize = 200;
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..N {
        let (c, url, done) = (c.clone(), w.url("/slow"), done.clone());
        tasks.push(tokio::spawn(async move {
            let r = get(&c, &url, &[]).await;
            done.fetch_add(1, Ordering::SeqCst);
            r
        }));
    }
    assert!(
        eventually(Duration::from_secs(30), || gate
            .waiting
            .load(Ordering::SeqCst)
            == N),
        "only {} of {N} requests reached the plugin's round trip",
        gate.waiting.load(Ordering::SeqCst)
    );

    // Every worker has requests parked in a plugin; another route is still served, and so is
    // the same route's admin view of the table.
    for _ in 0..20 {
        let r = get(&c, &w.url("/fast"), &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["headers"].get("x-test-awaited"), None);
    }
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "no slow request finished early"
    );
    assert_eq!(gate.answered.load(Ordering::SeqCst), 0);

    // The secret field never leaves the proxy.
    let config = get(&c, &w.admin_url("/config"), &[]).await;
    let text = String::from_utf8_lossy(&config.body).into_owned();
    assert!(!text.contains("s3cret-token"), "{text}");
    assert_eq!(config.json()["plugins"][0]["config"]["token"], "<redacted>");
    assert_eq!(
        config.json()["plugins"][0]["config"]["addr"],
        format!("127.0.0.1:{}", gate.port)
    );

    gate.release();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.json()["headers"]["x-test-awaited"], "PONG s3cret-token");
    }
    assert_eq!(gate.answered.load(Ordering::SeqCst), N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_round_trip_fails_answers_500_and_the_route_keeps_serving() {
    let echo = echo("e");
    // Nothing listens there: the plugin's connect fails.
    let w = Weir::start(
        &format!(
            "routes: [{{id: r, paths: [{{path: /}}], service: s}}]\n\
             services: [{{id: s, host: 127.0.0.1, port: {}}}]\n\
             plugins: [{{id: wait, name: test-await, route: r, config: {{addr: \"127.0.0.1:{}\"}}}}]\n",
            echo.port,
            free_port()
        ),
        &[],
    );
    let c = client();
    for _ in 0..3 {
        let r = get(&c, &w.url("/x"), &[]).await;
        assert_eq!(r.status, 500);
        assert_eq!(r.json()["message"], "An unexpected error occurred");
    }
}

fn counters(echo_port: u16, b_tag: &str, extra_route: bool) -> String {
    format!(
        "routes:\n\
         - {{id: a, paths: [{{path: /a}}], service: s}}\n\
         - {{id: b, paths: [{{path: /b}}], service: s}}\n\
         {}\
         services: [{{id: s, host: 127.0.0.1, port: {echo_port}}}]\n\
         plugins:\n\
         - {{id: count-a, name: test-counter, route: a, config: {{tag: a}}}}\n\
         - {{id: count-b, name: test-counter, route: b, config: {{tag: {b_tag}}}}}\n",
        if extra_route {
            "- {id: c, paths: [{path: /c}], service: s}\n"
        } else {
            ""
        }
    )
}

/// `(instance, count)` of the counter plugin that answered.
async fn counted(c: &HttpClient, w: &Weir, path: &str) -> (String, u64) {
    let r = get(c, &w.url(path), &[]).await;
    assert_eq!(r.status, 200);
    (
        r.header("x-test-instance").unwrap().to_string(),
        r.header("x-test-count").unwrap().parse().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_keep_unchanged_plugin_instances_and_their_state() {
    let (e1, e2) = (echo("one"), echo("two"));
    let w = Weir::start(&counters(e1.port, "b", false), &[]);
    let c = client();
    for n in 1..=3 {
        assert_eq!(counted(&c, &w, "/a").await.1, n);
    }
    let (ia, _) = counted(&c, &w, "/a").await;
    let (ib, nb) = counted(&c, &w, "/b").await;
    assert_eq!(nb, 1);
    assert_ne!(ia, ib, "two configurations, two instances");

    // Only the endpoints change (what every EndpointSlice update pushes).
    assert_eq!(
        push(&c, &w, &counters(e2.port, "b", false)).await.status,
        200
    );
    let r = get(&c, &w.url("/a"), &[]).await;
    assert_eq!(
        r.echo_name().as_deref(),
        Some("two"),
        "the new table serves"
    );
    assert_eq!(r.header("x-test-instance"), Some(ia.as_str()));
    assert_eq!(r.header("x-test-count"), Some("5"));
    assert_eq!(counted(&c, &w, "/b").await, (ib.clone(), 2));

    // A route is added: still the same instances.
    assert_eq!(
        push(&c, &w, &counters(e2.port, "b", true)).await.status,
        200
    );
    assert_eq!(counted(&c, &w, "/a").await, (ia.clone(), 6));
    assert_eq!(counted(&c, &w, "/b").await, (ib.clone(), 3));

    // One plugin's configuration changes: that one alone is rebuilt.
    assert_eq!(
        push(&c, &w, &counters(e2.port, "b2", true)).await.status,
        200
    );
    assert_eq!(counted(&c, &w, "/a").await, (ia.clone(), 7));
    let (ib2, nb2) = counted(&c, &w, "/b").await;
    assert_ne!(ib2, ib);
    assert_eq!(nb2, 1, "a new instance starts from nothing");

    // A rejected push changes nothing.
    let bad = counters(e2.port, "b2", true).replace("tag: a", "tag: a, colour: red");
    assert_eq!(push(&c, &w, &bad).await.status, 400);
    assert_eq!(counted(&c, &w, "/a").await, (ia, 8));
}

#[test]
fn factories_are_started_per_worker_told_each_swap_and_stopped() {
    let echo = echo("e");
    let dir = temp_dir("lifecycle");
    let file = dir.join("events");
    let table = |extra: bool| {
        format!(
            "routes:\n\
             - {{id: r, paths: [{{path: /}}], service: s}}\n\
             {}\
             services: [{{id: s, host: 127.0.0.1, port: {}}}]\n\
             plugins: [{{id: life, name: test-lifecycle, config: {{file: \"{}\"}}}}]\n",
            if extra {
                "- {id: r2, paths: [{path: /two}], service: s}\n"
            } else {
                ""
            },
            echo.port,
            file.display()
        )
    };
    let mut w = Weir::start(&table(false), &["--shutdown-grace", "5s"]);
    let events = || std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        eventually(Duration::from_secs(10), || {
            let e = events();
            e.contains("worker 0 started") && e.contains("worker 1 started")
        }),
        "{}",
        events()
    );
    assert!(events().starts_with("configured 1\n"), "{}", events());

    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = client();
    rt.block_on(async {
        assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
        assert_eq!(push(&c, &w, &table(true)).await.status, 200);
    });
    assert!(events().ends_with("configured 1\n"), "{}", events());
    assert_eq!(events().matches("configured").count(), 2, "{}", events());

    w.proc.terminate();
    assert!(w.proc.wait_exit(Duration::from_secs(10)).success());
    assert!(events().ends_with("stopped\n"), "{}", events());
    let _ = std::fs::remove_dir_all(dir);
}

fn access_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_client_that_leaves_before_the_answer_is_logged_once_with_499() {
    let echo = echo("e");
    let dir = temp_dir("499");
    let plugin_log = dir.join("plugins.log");
    let access_log = dir.join("access.log");
    let table = format!(
        "routes: [{{id: slow, paths: [{{path: /slow}}], service: s}}]\n\
         services: [{{id: s, host: 127.0.0.1, port: {}, read_timeout: 20000}}]\n\
         plugins:\n\
         - {{id: one, name: test-phases, route: slow, config: {{tag: one, log_file: \"{log}\"}}}}\n\
         - {{id: two, name: test-phases-2, route: slow, config: {{tag: two, log_file: \"{log}\"}}}}\n",
        echo.port,
        log = plugin_log.display()
    );
    let out = std::fs::File::create(&access_log).unwrap();
    let w = Weir::start_with(&table, &[], Stdio::from(out));

    // A body-less GET (Weir's own HTTP/1.1 loop) and a POST with a body (hyper's), each
    // abandoned while the upstream is still working on it.
    let requests: [&[u8]; 2] = [
        b"GET /slow/get?delay_ms=5000 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST /slow/post?delay_ms=5000 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
    ];
    for req in requests {
        let mut s = TcpStream::connect(("127.0.0.1", w.proc.port)).unwrap();
        s.write_all(req).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
    }

    let of = |path: &str| {
        access_lines(&access_log)
            .into_iter()
            .filter(|l| l["path"] == path)
            .collect::<Vec<_>>()
    };
    for path in ["/slow/get", "/slow/post"] {
        assert!(
            eventually(Duration::from_secs(10), || !of(path).is_empty()),
            "no access-log line for {path}"
        );
    }
    // Well past the upstream's answer: nothing is logged a second time.
    std::thread::sleep(Duration::from_millis(5500));
    for path in ["/slow/get", "/slow/post"] {
        let lines = of(path);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["status"], 499);
        assert_eq!(lines[0]["aborted"], true);
        assert_eq!(lines[0]["route"], "slow");
        assert!(
            lines[0]["latencies"]["total"].as_f64().unwrap() >= 250.0,
            "{lines:?}"
        );
        let plugin_lines: Vec<_> = access_lines(&plugin_log)
            .into_iter()
            .filter(|l| l["path"] == path)
            .collect();
        let mut tags: Vec<_> = plugin_lines
            .iter()
            .map(|l| {
                assert_eq!(l["status"], 499);
                assert_eq!(l["access"], true);
                l["tag"].as_str().unwrap().to_string()
            })
            .collect();
        tags.sort();
        assert_eq!(tags, ["one", "two"], "every collected plugin logged once");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_client_that_leaves_while_a_plugin_waits_is_logged_with_499() {
    let echo = echo("e");
    let gate = Gate::start();
    let dir = temp_dir("499-wait");
    let plugin_log = dir.join("plugins.log");
    let access_log = dir.join("access.log");
    let table = format!(
        "routes: [{{id: r, paths: [{{path: /}}], service: s}}]\n\
         services: [{{id: s, host: 127.0.0.1, port: {}}}]\n\
         plugins:\n\
         - {{id: wait, name: test-await, route: r, config: {{addr: \"127.0.0.1:{}\"}}}}\n\
         - {{id: one, name: test-phases, route: r, config: {{tag: one, log_file: \"{}\"}}}}\n",
        echo.port,
        gate.port,
        plugin_log.display()
    );
    let out = std::fs::File::create(&access_log).unwrap();
    let w = Weir::start_with(&table, &[], Stdio::from(out));
    let mut s = TcpStream::connect(("127.0.0.1", w.proc.port)).unwrap();
    s.write_all(b"GET /waiting HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || gate
        .waiting
        .load(Ordering::SeqCst)
        == 1));
    drop(s);
    assert!(eventually(Duration::from_secs(10), || !access_lines(
        &access_log
    )
    .is_empty()));
    let lines = access_lines(&access_log);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["status"], 499);
    // test-phases (priority 500) comes after test-await (700): collected, its access never ran.
    let plugin_lines = access_lines(&plugin_log);
    assert_eq!(plugin_lines.len(), 1, "{plugin_lines:?}");
    assert_eq!(plugin_lines[0]["status"], 499);
    assert_eq!(plugin_lines[0]["access"], false);
    gate.release();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_whose_stdout_nobody_reads_keeps_serving_and_counts_dropped_lines() {
    let echo = echo("e");
    let table = format!(
        "routes: [{{id: r, paths: [{{path: /}}], service: s}}]\n\
         services: [{{id: s, host: 127.0.0.1, port: {}}}]\n",
        echo.port
    );
    // A pipe nobody reads: it fills (64 KiB), then every write to it blocks.
    let w = Weir::start_with(&table, &["--access-log-queue", "16"], Stdio::piped());
    let c = client();
    let dropped = |m: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix("weir_access_log_dropped_total "))
            .expect("dropped-lines metric")
            .parse()
            .unwrap()
    };
    let path = format!("/{}", "x".repeat(200));
    for _ in 0..1500 {
        assert_eq!(get(&c, &w.url(&path), &[]).await.status, 200);
    }
    let first = dropped(&metrics(&c, &w).await);
    assert!(first > 0, "the pipe is full, lines must have been dropped");
    for _ in 0..300 {
        assert_eq!(get(&c, &w.url(&path), &[]).await.status, 200);
    }
    let second = dropped(&metrics(&c, &w).await);
    assert!(second >= first + 250, "{first} then {second}");
}

/// Requests an upstream received: head and body bytes.
type Seen = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An upstream that records each request and answers 200.
fn recording() -> (Scripted, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let up = scripted(move |_, mut r, mut w| {
        while let Some(head) = read_head(&mut r) {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            let mut body = vec![0; len];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            s.lock().unwrap().push((head, body));
            if w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .is_err()
            {
                return;
            }
        }
    });
    (up, seen)
}

#[test]
fn request_body_plugins_see_every_chunk_and_the_upstream_gets_what_they_left() {
    let (up, seen) = recording();
    let (guarded, _) = recording();
    let w = Weir::start(
        &format!(
            "routes:\n\
             - {{id: upper, paths: [{{path: /upper}}], service: s}}\n\
             - {{id: limit, paths: [{{path: /limit}}], service: g}}\n\
             - {{id: panic, paths: [{{path: /panic}}], service: g}}\n\
             services:\n\
             - {{id: s, host: 127.0.0.1, port: {}}}\n\
             - {{id: g, host: 127.0.0.1, port: {}}}\n\
             plugins:\n\
             - {{id: up, name: test-request-body, route: upper, config: {{upper: true, append: \"!\"}}}}\n\
             - {{id: lim, name: test-request-body, route: limit, config: {{max: 4}}}}\n\
             - {{id: pan, name: test-panic, route: panic, config: {{phase: request_body}}}}\n",
            up.port, guarded.port
        ),
        &[],
    );
    let status = |answer: &str| -> u16 {
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    let t = Duration::from_secs(10);

    // Content-Length body, then a chunked one: the upstream gets the edited bytes with an
    // exact Content-Length, never the client's framing.
    let a = raw(
        w.proc.port,
        b"POST /upper HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
        t,
    );
    assert_eq!(status(&a), 200, "{a}");
    let b = raw(
        w.proc.port,
        b"PUT /upper HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        t,
    );
    assert_eq!(status(&b), 200, "{b}");
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, b"HELLO WORLD!");
    assert!(
        got[0]
            .0
            .to_ascii_lowercase()
            .contains("content-length: 12\r\n"),
        "{}",
        got[0].0
    );
    assert_eq!(got[1].1, b"ABCDE!");
    let head = got[1].0.to_ascii_lowercase();
    assert!(head.contains("content-length: 6\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding"), "{head}");

    // A body-less request goes through the phase too, as an empty last chunk.
    let c = raw(
        w.proc.port,
        b"GET /upper HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        t,
    );
    assert_eq!(status(&c), 200, "{c}");
    // The plugins still see its end (a plugin that requires a body must see it missing).
    assert_eq!(seen.lock().unwrap()[2].1, b"!");

    // A plugin that stops the request on its body: nothing reaches the upstream.
    let d = raw(
        w.proc.port,
        b"POST /limit HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nConnection: close\r\n\r\n0123456789",
        t,
    );
    assert_eq!(status(&d), 413, "{d}");
    assert!(d.contains("body refused by test-request-body"), "{d}");
    let e = raw(
        w.proc.port,
        b"POST /panic HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab",
        t,
    );
    assert_eq!(status(&e), 500, "{e}");
    assert_eq!(guarded.accepted.load(Ordering::SeqCst), 0);

    // A body larger than --max-buffered-body is refused before any plugin edits it.
    let big = format!(
        "POST /upper HTTP/1.1\r\nHost: a\r\nContent-Length: 70000\r\nConnection: close\r\n\r\n{}",
        "x".repeat(70_000)
    );
    drop(w);
    let w = Weir::start(
        &format!(
            "routes: [{{id: upper, paths: [{{path: /upper}}], service: s}}]\n\
             services: [{{id: s, host: 127.0.0.1, port: {}}}]\n\
             plugins: [{{id: up, name: test-request-body, route: upper, config: {{upper: true}}}}]\n",
            up.port
        ),
        &["--max-buffered-body", "65536"],
    );
    let f = raw(w.proc.port, big.as_bytes(), t);
    assert_eq!(status(&f), 413, "{f}");
    assert_eq!(
        seen.lock().unwrap().len(),
        3,
        "nothing more reached the upstream"
    );
}

#[test]
fn the_access_log_carries_the_correlation_id_clients_see_and_the_consumer() {
    let echo = echo("e");
    let dir = temp_dir("cid-log");
    let access_log = dir.join("access.log");
    let table = format!(
        "routes: [{{id: r, paths: [{{path: /}}], service: s}}, {{id: auth, paths: [{{path: /auth}}], service: s}}]\n\
         services: [{{id: s, host: 127.0.0.1, port: {}}}]\n\
         consumers: [{{id: alice, credentials: [{{type: key-auth, id: alice-key, key_sha256: {}}}]}}]\n\
         plugins:\n\
         - {{id: c, name: correlation-id, config: {{header_name: x-request-id, echo_downstream: true}}}}\n\
         - {{id: k, name: key-auth, route: auth}}\n",
        echo.port,
        weir_proxy::config::hash_key("k-1")
    );
    let out = std::fs::File::create(&access_log).unwrap();
    let w = Weir::start_with(&table, &[], Stdio::from(out));
    let answer = raw(
        w.proc.port,
        b"GET /generated HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    let generated = answer
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .expect("the id is echoed")
        .trim()
        .to_string();
    raw(
        w.proc.port,
        b"GET /given HTTP/1.1\r\nHost: a\r\nx-request-id: client-42\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    let id_of = |path: &str| {
        access_lines(&access_log)
            .into_iter()
            .find(|l| l["path"] == path)
            .map(|l| l["correlation_id"].clone())
    };
    assert!(eventually(Duration::from_secs(5), || id_of("/given").is_some()));
    assert_eq!(id_of("/generated").unwrap(), generated.as_str());
    assert_eq!(id_of("/given").unwrap(), "client-42");

    // The consumer an authentication plugin identified; none for a request it refused.
    for (path, key) in [("/auth/in", "k-1"), ("/auth/out", "wrong")] {
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: a\r\napikey: {key}\r\nConnection: close\r\n\r\n");
        raw(w.proc.port, req.as_bytes(), Duration::from_secs(5));
    }
    let line_of = |path: &str| {
        access_lines(&access_log)
            .into_iter()
            .find(|l| l["path"] == path)
    };
    assert!(eventually(Duration::from_secs(5), || line_of("/auth/out").is_some()));
    assert_eq!(line_of("/auth/in").unwrap()["consumer"], "alice");
    let out = line_of("/auth/out").unwrap();
    assert_eq!(out["status"], 401);
    assert!(out.get("consumer").is_none(), "{out}");
    assert!(line_of("/given").unwrap().get("consumer").is_none());
}

/// Whatever the request is doing when its client leaves, it is logged exactly once, by the
/// access log and by every plugin's `log`: with 499 while no response had started (the body
/// read before access, the request_body phase, the upload to the upstream, the wait for its
/// answer, the backoff between tries), and with the status sent (and `aborted`) once one had.
#[test]
fn a_request_cancelled_in_each_phase_is_logged_exactly_once() {
    let echo = echo("e");
    let dir = temp_dir("cancel-phases");
    let plugin_log = dir.join("plugins.log");
    let access_log = dir.join("access.log");
    let table = format!(
        "routes:\n\
         - {{id: body, paths: [{{path: /body}}], service: s}}\n\
         - {{id: upload, paths: [{{path: /upload}}], service: s}}\n\
         - {{id: wait, paths: [{{path: /wait}}], service: s}}\n\
         - {{id: retry, paths: [{{path: /retry}}], service: retrying}}\n\
         - {{id: stream, paths: [{{path: /stream}}], service: s}}\n\
         services:\n\
         - {{id: s, host: 127.0.0.1, port: {port}, read_timeout: 20000}}\n\
         - {{id: retrying, host: 127.0.0.1, port: {port}, retries: 3, retry_on: {{statuses: [503], backoff: 5000}}}}\n\
         plugins:\n\
         - {{id: all, name: test-phases, config: {{tag: all, log_file: \"{log}\"}}}}\n\
         - {{id: reader, name: test-request-body, route: body, config: {{}}}}\n",
        port = echo.port,
        log = plugin_log.display()
    );
    let out = std::fs::File::create(&access_log).unwrap();
    let w = Weir::start_with(&table, &[], Stdio::from(out));

    // (path, request, expected status): each is abandoned mid-way, 300 ms after it was sent.
    let cases: [(&str, &[u8], u64); 5] = [
        // The request_body phase, waiting for the rest of the body.
        (
            "/body",
            b"POST /body HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789",
            499,
        ),
        // The body streaming to the upstream, which waits for the rest of it.
        (
            "/upload",
            b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789",
            499,
        ),
        // Waiting for the upstream's answer.
        (
            "/wait",
            b"GET /wait?delay_ms=5000 HTTP/1.1\r\nHost: a\r\n\r\n",
            499,
        ),
        // The backoff after a 503, before the next try.
        (
            "/retry",
            b"GET /retry?fail=1&key=cancel&status=503 HTTP/1.1\r\nHost: a\r\n\r\n",
            499,
        ),
        // The response body, never read by the client: 200 was sent.
        (
            "/stream",
            b"GET /stream?bytes=1000000000 HTTP/1.1\r\nHost: a\r\n\r\n",
            200,
        ),
    ];
    for (_, req, _) in cases {
        let mut s = TcpStream::connect(("127.0.0.1", w.proc.port)).unwrap();
        s.write_all(req).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
    }

    let of = |log: &std::path::Path, path: &str| {
        access_lines(log)
            .into_iter()
            .filter(|l| l["path"] == path)
            .collect::<Vec<_>>()
    };
    for (path, _, _) in cases {
        assert!(
            eventually(Duration::from_secs(10), || !of(&access_log, path)
                .is_empty()),
            "no access-log line for {path}"
        );
    }
    // Past every backoff and delayed answer: nothing is logged a second time.
    std::thread::sleep(Duration::from_millis(5500));
    for (path, _, status) in cases {
        let lines = of(&access_log, path);
        assert_eq!(lines.len(), 1, "{path}: {lines:?}");
        assert_eq!(lines[0]["status"], status, "{path}: {lines:?}");
        assert_eq!(lines[0]["aborted"], true, "{path}: {lines:?}");
        assert_eq!(lines[0]["route"], &path[1..], "{path}: {lines:?}");
        let plugin_lines = of(&plugin_log, path);
        assert_eq!(plugin_lines.len(), 1, "{path}: {plugin_lines:?}");
        assert_eq!(
            plugin_lines[0]["status"], status,
            "{path}: {plugin_lines:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
