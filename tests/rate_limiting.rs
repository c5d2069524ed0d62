//! `rate-limiting` through the real binary: the documented example, Kong's headers, limits
//! shared by two proxies through a real `redis-server` (token bucket and sliding window within
//! 2% of what the algorithm allows), Redis going away and coming back, an exact concurrency
//! limit with clients that give up, and Redis connections kept across pushes but rebuilt when
//! the password changes.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::manifests::*;
use common::redis::Redis;
use common::*;

/// Service `echo` at `port`, a `rate-limiting` Plugin with `config` (YAML, indented for a
/// mapping under `config:`), and an Ingress for `/` using it.
fn limited(port: u16, config: &str) -> String {
    let config: String = config.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "{}---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {{name: limit, namespace: demo}}
spec:
  plugin: rate-limiting
  config:
{config}---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: limited
  namespace: demo
  annotations: {{weir.dev/plugins: limit}}
spec:
  rules:
  - http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: echo, port: {{name: http}}}}}}}}
",
        service("demo", "echo", port)
    )
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_example_allows_five_a_minute_with_kongs_headers() {
    let e = echo("e");
    let example = doc_example_at("rate-limiting", e.port);
    let w = Manifests::start(&[("10-example.yaml", &example)], &[]);
    let c = client();
    // Stay inside one minute window: wait out its last seconds if needed.
    let into_minute = unix_now() % 60.0;
    if into_minute > 55.0 {
        tokio::time::sleep(Duration::from_secs_f64(60.5 - into_minute)).await;
    }
    for i in 0..5u64 {
        let r = get(&c, &w.url("/x"), &[]).await;
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.echo_name().as_deref(), Some("e"));
        assert_eq!(r.header("x-ratelimit-limit-minute"), Some("5"));
        assert_eq!(
            r.header("x-ratelimit-remaining-minute"),
            Some((4 - i).to_string().as_str())
        );
        assert_eq!(r.header("ratelimit-limit"), Some("5"));
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some((4 - i).to_string().as_str())
        );
        let reset: u64 = r.header("ratelimit-reset").unwrap().parse().unwrap();
        assert!((1..=60).contains(&reset), "{reset}");
    }
    let r = get(&c, &w.url("/x"), &[]).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["message"], "API rate limit exceeded");
    assert_eq!(
        r.echo_name(),
        None,
        "a refused request never reaches the upstream"
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(r.header("ratelimit-remaining"), Some("0"));
    let m = String::from_utf8(get(&c, &w.admin_url("/metrics"), &[]).await.body.to_vec()).unwrap();
    assert!(m.contains("weir_rate_limiting_refused_total 1"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_by_header_with_custom_answers_and_hidden_headers() {
    let e = echo("e");
    let w = Manifests::start(
        &[(
            "10.yaml",
            &limited(
                e.port,
                // A bucket that never refills within the test: no window boundary to cross.
                "algorithm: token-bucket\nrate: 0.0001\nburst: 2\nlimit_by: header\nheader_name: x-tenant\nhide_client_headers: true\nerror_code: 503\nerror_message: slow down",
            ),
        )],
        &[],
    );
    let c = client();
    for tenant in ["a", "b"] {
        for _ in 0..2 {
            let r = get(&c, &w.url("/"), &[("x-tenant", tenant)]).await;
            assert_eq!(r.status, 200);
            assert_eq!(r.header("ratelimit-limit"), None, "hidden");
        }
        let r = get(&c, &w.url("/"), &[("x-tenant", tenant)]).await;
        assert_eq!(
            (r.status, r.json()["message"].as_str()),
            (503, Some("slow down"))
        );
        assert!(r.header("retry-after").is_some());
    }
    // Without the header, the client IP is the key: a budget of its own.
    assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_config_is_refused_and_its_ingress_fails_closed() {
    let e = echo("e");
    let w = Manifests::start(
        &[(
            "10.yaml",
            &limited(
                e.port,
                "algorithm: token-bucket\nrate: 10\nburst: 5\ncost: 6",
            ),
        )],
        &[],
    );
    let c = client();
    let r = get(&c, &w.url("/"), &[]).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.echo_name(), None);
    // Fixed: served and limited.
    w.write(
        "10.yaml",
        &limited(
            e.port,
            "algorithm: token-bucket\nrate: 1\nburst: 2\nlimit_by: ip",
        ),
    );
    wait_for_status(&c, &w.url("/"), 200, Duration::from_secs(5)).await;
    let mut refused = 0;
    for _ in 0..5 {
        if get(&c, &w.url("/"), &[]).await.status == 429 {
            refused += 1;
        }
    }
    assert!(refused >= 2, "{refused}");
}

/// Sends requests from `clients` tasks spread over `urls` for `run`, and returns the number
/// answered 200, the number answered 429, and the time from the first to the last request.
async fn saturate(urls: Vec<String>, clients: usize, run: Duration) -> (u64, u64, Duration, f64) {
    let ok = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let first = unix_now();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let url = urls[i % urls.len()].clone();
        let (ok, refused) = (ok.clone(), refused.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            let mut last = started;
            while started.elapsed() < run {
                last = Instant::now();
                match get(&c, &url, &[]).await.status {
                    200 => ok.fetch_add(1, Ordering::Relaxed),
                    429 => refused.fetch_add(1, Ordering::Relaxed),
                    s => panic!("unexpected status {s}"),
                };
            }
            last
        }));
    }
    let mut last = started;
    for t in tasks {
        last = last.max(t.await.unwrap());
    }
    (
        ok.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        last - started,
        first,
    )
}

fn within_2_percent(allowed: u64, expected: f64) {
    let off = (allowed as f64 - expected).abs() / expected;
    assert!(
        off <= 0.02,
        "allowed {allowed}, expected {expected:.1} ({:.1}% off)",
        off * 100.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_proxies_share_a_token_bucket_through_redis() {
    let redis = Redis::start(&[]);
    let e = echo("e");
    let config = format!(
        "algorithm: token-bucket\nrate: 10\nburst: 20\nlimit_by: ip\npolicy: redis\nredis: {{host: 127.0.0.1, port: {}, timeout: 500}}",
        redis.port
    );
    let manifests = limited(e.port, &config);
    let a = Manifests::start(&[("10.yaml", &manifests)], &[]);
    let b = Manifests::start(&[("10.yaml", &manifests)], &[]);
    let (ok, refused, elapsed, _) =
        saturate(vec![a.url("/"), b.url("/")], 8, Duration::from_secs(5)).await;
    let expected = 20.0 + 10.0 * elapsed.as_secs_f64();
    eprintln!(
        "token bucket: {ok} allowed, {refused} refused in {elapsed:?}; expected {expected:.1}"
    );
    assert!(refused > ok, "the clients saturated the limit");
    within_2_percent(ok, expected);
    // Both proxies counted on the server.
    let m = String::from_utf8(
        get(&client(), &a.admin_url("/metrics"), &[])
            .await
            .body
            .to_vec(),
    )
    .unwrap();
    assert!(
        m.contains("weir_rate_limiting_redis_failures_total 0"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_proxies_share_a_sliding_window_through_redis() {
    let redis = Redis::start(&[]);
    let e = echo("e");
    let limit = 40.0;
    let config = format!(
        "algorithm: sliding-window\nsecond: {limit}\nlimit_by: ip\npolicy: redis\nredis: {{host: 127.0.0.1, port: {}, timeout: 500}}",
        redis.port
    );
    let manifests = limited(e.port, &config);
    let a = Manifests::start(&[("10.yaml", &manifests)], &[]);
    let b = Manifests::start(&[("10.yaml", &manifests)], &[]);
    let (ok, refused, elapsed, first) =
        saturate(vec![a.url("/"), b.url("/")], 8, Duration::from_secs(5)).await;
    // Saturated from a point `phase` into a one-second window, the weighted sliding window
    // allows the limit at once and then the limit per second: limit × (elapsed + phase).
    let phase = first.fract();
    let expected = limit * (elapsed.as_secs_f64() + phase);
    eprintln!(
        "sliding window: {ok} allowed, {refused} refused in {elapsed:?} from phase {phase:.3}; expected {expected:.1}"
    );
    assert!(refused > ok);
    within_2_percent(ok, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_going_away_fails_open_or_closed_and_limiting_comes_back() {
    let mut redis = Redis::start(&[]);
    let e = echo("e");
    let redis_block = format!("redis: {{host: 127.0.0.1, port: {}}}", redis.port);
    let open = limited(
        e.port,
        &format!("second: 3\nlimit_by: ip\npolicy: redis\n{redis_block}"),
    );
    let closed = format!(
        "---\napiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {{name: strict, namespace: demo}}
spec:
  plugin: rate-limiting
  config: {{second: 3, limit_by: ip, policy: redis, fault_tolerant: false, {redis_block}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: strict
  namespace: demo
  annotations: {{weir.dev/plugins: strict}}
spec:
  rules:
  - http:
      paths:
      - {{path: /strict, pathType: Prefix, backend: {{service: {{name: echo, port: {{name: http}}}}}}}}
"
    );
    let w = Manifests::start(&[("10.yaml", &open), ("20.yaml", &closed)], &[]);
    let c = client();
    let burst = |path: &'static str| {
        let (c, url) = (c.clone(), w.url(path));
        async move {
            let mut statuses = Vec::new();
            for _ in 0..8 {
                statuses.push(get(&c, &url, &[]).await.status);
            }
            statuses
        }
    };
    assert!(burst("/").await.contains(&429), "limited while Redis is up");

    redis.kill();
    let statuses = burst("/").await;
    assert!(
        statuses.iter().all(|s| *s == 200),
        "fail-open: {statuses:?}"
    );
    let statuses = burst("/strict").await;
    assert!(
        statuses.iter().all(|s| *s == 503),
        "fault_tolerant: false: {statuses:?}"
    );
    let failures = |m: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix("weir_rate_limiting_redis_failures_total "))
            .unwrap()
            .parse()
            .unwrap()
    };
    let m = String::from_utf8(get(&c, &w.admin_url("/metrics"), &[]).await.body.to_vec()).unwrap();
    assert!(failures(&m) >= 16, "{m}");

    // Back (empty, without the scripts): limiting resumes without a restart.
    redis.restart();
    let started = Instant::now();
    loop {
        if burst("/").await.contains(&429) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "limiting did not resume"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(burst("/strict").await.contains(&429));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrency_limit_holds_exactly_also_when_clients_give_up() {
    let e = echo("e");
    let w = Manifests::start(
        &[(
            "10.yaml",
            &limited(
                e.port,
                "algorithm: concurrency\nmax_in_flight: 10\nlimit_by: ip",
            ),
        )],
        &[],
    );
    // 50 at once against a slow upstream: exactly 10 pass.
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let url = w.url("/slow?delay_ms=3000");
        tasks.push(tokio::spawn(async move {
            let r = get(&client(), &url, &[]).await;
            (r.status, r.header("ratelimit-limit").map(str::to_string))
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    let ok = statuses.iter().filter(|(s, _)| *s == 200).count();
    let refused = statuses.iter().filter(|(s, _)| *s == 429).count();
    assert_eq!((ok, refused), (10, 40), "{statuses:?}");
    assert!(statuses.iter().all(|(_, l)| l.as_deref() == Some("10")));

    // Ten clients that give up while their requests are in flight give their slots back.
    quitters_give_slots_back(&w, 10).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let url = w.url("/slow?delay_ms=300");
        tasks.push(tokio::spawn(async move {
            get(&client(), &url, &[]).await.status
        }));
    }
    for t in tasks {
        assert_eq!(
            t.await.unwrap(),
            200,
            "a slot of a client that left was not given back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_connections_survive_pushes_and_follow_a_new_password() {
    let redis = Redis::start(&["--requirepass", "first"]);
    let e = echo("e");
    // Pushed routing tables (proxy mode): 100 pushes that change only the endpoints.
    let table = |weight: u32| {
        format!(
            r#"{{"routes": [{{"id": "r", "paths": [{{"path": "/"}}], "service": "s"}}],
"services": [{{"id": "s", "upstream": "u"}}],
"upstreams": [{{"id": "u", "targets": [{{"target": "127.0.0.1:{}", "weight": {weight}}}]}}],
"plugins": [{{"id": "rl", "name": "rate-limiting", "route": "r",
  "config": {{"second": 1000, "limit_by": "ip", "policy": "redis",
             "redis": {{"host": "127.0.0.1", "port": {}, "password": "first"}}}}}}]}}"#,
            e.port, redis.port
        )
    };
    let w = Weir::start(&table(100), &[]);
    let c = client();
    // Each of the two workers opens its own connection when it first decides: new client
    // connections (spread over the workers by the kernel) until both have.
    let mut warm = 0;
    while redis.weir_connection_ids(Some("first")).len() < 2 {
        assert_eq!(get(&client(), &w.url("/"), &[]).await.status, 200);
        warm += 1;
        assert!(warm < 500, "the second worker never decided");
    }
    let before = redis.weir_connection_ids(Some("first"));
    assert_eq!(before.len(), 2, "{before:?}");
    for i in 0..100 {
        let r = push(&c, &w, &table(100 + i)).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(get(&c, &w.url("/"), &[]).await.status, 200);
    }
    for _ in 0..20 {
        assert_eq!(get(&client(), &w.url("/"), &[]).await.status, 200);
    }
    assert_eq!(
        redis.weir_connection_ids(Some("first")),
        before,
        "100 endpoint-only pushes kept the connections"
    );
    drop(w);

    // Standalone mode with the configuration in a Secret: a new password reconnects.
    let secret = |password: &str| {
        format!(
            "apiVersion: v1
kind: Secret
metadata:
  name: limits
  namespace: demo
  labels: {{weir.dev/credential: \"true\"}}
stringData:
  config: |
    second: 3
    limit_by: ip
    policy: redis
    fault_tolerant: false
    redis: {{host: 127.0.0.1, port: {}, password: {password}}}
",
            redis.port
        )
    };
    let rest = format!(
        "{}---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {{name: limit, namespace: demo}}
spec:
  plugin: rate-limiting
  configFrom: {{secretKeyRef: {{name: limits, key: config}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: limited
  namespace: demo
  annotations: {{weir.dev/plugins: limit}}
spec:
  rules:
  - http:
      paths:
      - {{path: /, pathType: Prefix, backend: {{service: {{name: echo, port: {{name: http}}}}}}}}
",
        service("demo", "echo", e.port)
    );
    let w = Manifests::start(&[("10.yaml", &secret("first")), ("20.yaml", &rest)], &[]);
    wait_for_status(&c, &w.url("/"), 200, Duration::from_secs(5)).await;
    let old = redis.weir_connection_ids(Some("first"));
    assert!(!old.is_empty());
    // The password is not in what the admin API shows.
    let shown = w.config(&c).await.to_string();
    assert!(!shown.contains("first"), "{shown}");

    assert_eq!(
        redis.command(Some("first"), &["CONFIG", "SET", "requirepass", "second"]),
        "+OK"
    );
    w.write("10.yaml", &secret("second"));
    let started = Instant::now();
    loop {
        let r = get(&c, &w.url("/"), &[]).await;
        let now = redis.weir_connection_ids(Some("second"));
        if matches!(r.status, 200 | 429)
            && !now.is_empty()
            && now.iter().all(|id| !old.contains(id))
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no reconnection with the new password: {} {now:?} (old {old:?})",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Limiting works on the new connection (fault_tolerant is off: a failure would be 503).
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(get(&c, &w.url("/"), &[]).await.status);
    }
    assert!(
        statuses.contains(&429) && !statuses.contains(&503),
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_verifies_the_server_name() {
    let tls_port = free_port();
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let cert = format!("{fixtures}/a.example.test.crt");
    let key = format!("{fixtures}/a.example.test.key");
    let redis = Redis::start(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-auth-clients",
        "no",
    ]);
    wait_for_port(tls_port);
    let e = echo("e");
    // Three routes: verified against the test CA, a name the certificate does not carry, and
    // verification off. fault_tolerant is off so a failed handshake shows as 503.
    let plugin = |name: &str, redis_block: &str| {
        format!(
            "---
apiVersion: weir.dev/v1alpha1
kind: Plugin
metadata: {{name: {name}, namespace: demo}}
spec:
  plugin: rate-limiting
  config: {{second: 2, limit_by: ip, policy: redis, fault_tolerant: false,
           redis: {{host: 127.0.0.1, port: {tls_port}, timeout: 500, ssl: true, {redis_block}}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: {name}
  namespace: demo
  annotations: {{weir.dev/plugins: {name}}}
spec:
  rules:
  - http:
      paths:
      - {{path: /{name}, pathType: Prefix, backend: {{service: {{name: echo, port: {{name: http}}}}}}}}
"
        )
    };
    let manifests = [
        service("demo", "echo", e.port),
        plugin("verified", "ssl_verify: true, server_name: a.example.test"),
        plugin(
            "wrong-name",
            "ssl_verify: true, server_name: b.example.test",
        ),
        plugin("unverified", "ssl_verify: false"),
    ]
    .concat();
    let ca = format!("{fixtures}/ca.crt");
    let w = Manifests::start_with_env(&[("10.yaml", &manifests)], &[], &[("SSL_CERT_FILE", &ca)]);
    let c = client();
    for (path, want) in [
        ("/verified", [200, 200, 429]),
        ("/unverified", [200, 200, 429]),
        ("/wrong-name", [503, 503, 503]),
    ] {
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(get(&c, &w.url(path), &[]).await.status);
        }
        assert_eq!(got, want, "{path}");
    }
    // The plain-port view: the TLS clients are there, named.
    assert!(redis.weir_connections(None) >= 2);
}

/// `n` clients take every slot with slow requests (an extra request is refused while they
/// hold them), then hang up; afterwards `n` new slow requests all pass.
async fn quitters_give_slots_back(w: &Manifests, n: usize) {
    // Redis slots of the requests before are given back just after their responses went out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let port = w.proc.port;
    let (hold, release) = std::sync::mpsc::channel::<()>();
    let release = Arc::new(std::sync::Mutex::new(release));
    let quitters: Vec<_> = (0..n)
        .map(|_| {
            let release = release.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.write_all(b"GET /slow?delay_ms=10000 HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                // Hold the request until the test has seen the slots taken.
                let _ = release
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(10));
                drop(s);
            })
        })
        .collect();
    let c = client();
    // Probing only once the quitters are in (a probe holding a slot as they arrive would
    // turn one of them away).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    loop {
        // Until every quitter holds a slot: then one more is refused.
        if get(&c, &w.url("/slow?delay_ms=1"), &[]).await.status == 429 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the quitters never held the slots"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(hold);
    for q in quitters {
        q.join().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut tasks = Vec::new();
    for _ in 0..n {
        let url = w.url("/slow?delay_ms=300");
        tasks.push(tokio::spawn(async move {
            get(&client(), &url, &[]).await.status
        }));
    }
    for t in tasks {
        assert_eq!(
            t.await.unwrap(),
            200,
            "a slot of a client that left was not given back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrency_limit_in_redis_holds_and_gets_slots_back() {
    let redis = Redis::start(&[]);
    let e = echo("e");
    let config = format!(
        "algorithm: concurrency\nmax_in_flight: 5\nlimit_by: ip\npolicy: redis\nredis: {{host: 127.0.0.1, port: {}, timeout: 500}}",
        redis.port
    );
    let w = Manifests::start(&[("10.yaml", &limited(e.port, &config))], &[]);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let url = w.url("/slow?delay_ms=2000");
        tasks.push(tokio::spawn(async move {
            get(&client(), &url, &[]).await.status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    statuses.sort();
    assert_eq!(statuses, [[200; 5].as_slice(), &[429; 15]].concat());
    quitters_give_slots_back(&w, 5).await;
    // Nothing left behind on the server once the requests are over.
    let started = Instant::now();
    loop {
        let keys = redis.command(None, &["DBSIZE"]);
        let held = redis.command(None, &["EVAL", "local n = 0 for _, k in ipairs(redis.call('KEYS', 'weir:rl:*')) do n = n + redis.call('ZCARD', k) end return n", "0"]);
        if held == ":0" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slots still held: {held} ({keys})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_by_path_shares_one_budget_for_the_path_as_routed() {
    let e = echo("e");
    let w = Manifests::start(
        &[(
            "10.yaml",
            &limited(
                e.port,
                "algorithm: token-bucket\nrate: 0.0001\nburst: 1\nlimit_by: path\npath: /login",
            ),
        )],
        &[],
    );
    let c = client();
    let r = get(&c, &w.url("/login"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/login");
    // `;x` parameters do not make a new key: the path is compared as routed.
    let r = get(&c, &w.url("/login;x"), &[]).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(
        r.echo_name(),
        None,
        "a refused request never reaches the upstream"
    );
    // Other paths fall back to the client IP: a budget of their own.
    assert_eq!(get(&c, &w.url("/other"), &[]).await.status, 200);
}
