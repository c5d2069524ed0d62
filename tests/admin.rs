//! The admin API and the process lifecycle: config pushes (good and bad), readiness, status,
//! metrics, graceful shutdown.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn table(echo_port: u16, path: &str) -> String {
    format!("routes:\n- {{id: r, paths: [{{path: {path}}}], service: s}}\nservices:\n- {{id: s, host: 127.0.0.1, port: {echo_port}}}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_push_is_400_and_the_old_table_keeps_serving() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port, "/old"), &[]);
    let c = client();
    let before = get(&c, &weir.admin_url("/status"), &[]).await.json()["hash"].clone();

    // Semantically invalid: every problem named with entity, id and field.
    let bad = "routes:\n- {id: r, paths: [{path: nope}], service: missing}\n\
               plugins:\n- {id: p, name: no-such-plugin}\n- {id: q, name: request-termination, config: {status_code: 1000}}\n";
    let r = push(&c, &weir, bad).await;
    assert_eq!(r.status, 400);
    let errors = r.json()["errors"].as_array().unwrap().clone();
    let has = |entity: &str, id: &str, field: &str| {
        errors.iter().any(|e| {
            e["entity"] == entity
                && e["id"] == id
                && e["field"].as_str().unwrap().starts_with(field)
        })
    };
    assert!(has("route", "r", "paths[0].path"), "{errors:?}");
    assert!(has("route", "r", "service"), "{errors:?}");
    assert!(has("plugin", "p", "name"), "{errors:?}");
    assert!(has("plugin", "q", "config"), "{errors:?}");
    let q = errors.iter().find(|e| e["id"] == "q").unwrap();
    assert!(
        q["message"].as_str().unwrap().contains("status_code"),
        "{q}"
    );

    // Syntactically invalid: the path of the bad field is named.
    let r = push(&c, &weir, "routes: [{id: r, strip_path: maybe}]").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("routes[0].strip_path"));
    let r = send(&c, "POST", &weir.admin_url("/config"), &[], "{not json").await;
    assert_eq!(r.status, 400);

    // Nothing changed.
    assert_eq!(get(&c, &weir.url("/old"), &[]).await.status, 200);
    let status = get(&c, &weir.admin_url("/status"), &[]).await.json();
    assert_eq!(status["hash"], before);
    assert_eq!(status["routes"], 1);
    let served = get(&c, &weir.admin_url("/config"), &[]).await.json();
    assert_eq!(served["routes"][0]["paths"][0]["path"], "/old");

    // A good push takes effect at once and reports its hash.
    let r = push(&c, &weir, &table(up.port, "/new")).await;
    assert_eq!(r.status, 200);
    let hash = r.json()["hash"].as_str().unwrap().to_string();
    assert_eq!(hash.len(), 64);
    assert_eq!(get(&c, &weir.url("/new"), &[]).await.status, 200);
    assert_eq!(get(&c, &weir.url("/old"), &[]).await.status, 404);
    assert_eq!(
        get(&c, &weir.admin_url("/readyz"), &[]).await.json()["hash"],
        hash.as_str()
    );

    let metrics = metrics(&c, &weir).await;
    assert!(
        metrics.contains("weir_config_failures_total 3"),
        "{metrics}"
    );
    assert!(metrics.contains("weir_config_applies_total 2"), "{metrics}");
    assert!(
        metrics.contains(r#"weir_requests_total{route="r",service="s",status="200"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"weir_requests_total{route="",service="",status="404"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_request_duration_seconds_bucket{route=\"r\",le=\"+Inf\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("weir_upstream_duration_seconds_count{service=\"s\"}"),
        "{metrics}"
    );

    // The latency headers follow the table's switch.
    assert!(get(&c, &weir.url("/new"), &[])
        .await
        .header("x-weir-proxy-latency")
        .is_some());
    let quiet = format!(
        "settings: {{latency_headers: false}}\n{}",
        table(up.port, "/new")
    );
    assert_eq!(push(&c, &weir, &quiet).await.status, 200);
    let r = get(&c, &weir.url("/new"), &[]).await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("x-weir-proxy-latency").is_none() && r.header("x-weir-upstream-latency").is_none()
    );

    assert_eq!(get(&c, &weir.admin_url("/nope"), &[]).await.status, 404);
    assert_eq!(
        send(&c, "DELETE", &weir.admin_url("/config"), &[], "")
            .await
            .status,
        405
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_until_a_first_table() {
    let port = free_port();
    let admin = free_port();
    let _proxy = Proc {
        child: Command::new(WEIR)
            .args([
                "proxy",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--admin-listen",
                &format!("127.0.0.1:{admin}"),
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
        port,
    };
    wait_for_port(admin);
    let c = client();
    let admin_url = |p: &str| format!("http://127.0.0.1:{admin}{p}");
    assert_eq!(get(&c, &admin_url("/healthz"), &[]).await.status, 200);
    assert_eq!(get(&c, &admin_url("/readyz"), &[]).await.status, 503);
    assert_eq!(
        get(&c, &format!("http://127.0.0.1:{port}/"), &[])
            .await
            .status,
        404
    );
    let r = send(&c, "POST", &admin_url("/config"), &[], "{}").await;
    assert_eq!(r.status, 200);
    assert_eq!(get(&c, &admin_url("/readyz"), &[]).await.status, 200);
}

#[test]
fn a_table_file_that_does_not_validate_stops_startup_with_the_errors() {
    let dir = temp_dir("badfile");
    let cfg = dir.join("bad.yaml");
    std::fs::write(&cfg, "routes: [{id: r, service: ghost}]").unwrap();
    let out = Command::new(WEIR)
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("route \"r\": service: no service with id \"ghost\""),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigterm_drains_in_flight_requests_then_exits_zero() {
    let up = echo("up");
    let mut weir = Weir::start(&table(up.port, "/"), &["--shutdown-grace", "10s"]);
    let port = weir.proc.port;
    let slow = std::thread::spawn(move || {
        raw(
            port,
            b"GET /?delay_ms=1500 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
    });
    std::thread::sleep(Duration::from_millis(400));
    let started = Instant::now();
    weir.proc.terminate();

    let answer = slow.join().unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "in-flight request was cut: {answer:?}"
    );
    let status = weir.proc.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
    assert!(started.elapsed() < Duration::from_secs(8));
    // The listener is gone.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn the_status_listener_serves_probes_and_metrics_only_and_reports_draining() {
    let up = echo("up");
    let status_port = free_port();
    let status = format!("127.0.0.1:{status_port}");
    let mut weir = Weir::start(
        &table(up.port, "/"),
        &["--status-listen", &status, "--shutdown-grace", "10s"],
    );
    wait_for_port(status_port);
    let ask = |request: &str| raw(status_port, request.as_bytes(), Duration::from_secs(5));
    let get = |path: &str| {
        ask(&format!(
            "GET {path} HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n"
        ))
    };
    assert!(
        get("/healthz").starts_with("HTTP/1.1 200"),
        "{}",
        get("/healthz")
    );
    assert!(get("/readyz").starts_with("HTTP/1.1 200"));
    let metrics = get("/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200") && metrics.contains("weir_connections_active"));
    // Nothing that reads or changes the routing table.
    for path in ["/config", "/status"] {
        assert!(
            get(path).starts_with("HTTP/1.1 404"),
            "{path}: {}",
            get(path)
        );
    }
    let push =
        ask("POST /config HTTP/1.1\r\nHost: s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
    assert!(push.starts_with("HTTP/1.1 404"), "{push}");
    let post_probe =
        ask("POST /readyz HTTP/1.1\r\nHost: s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(post_probe.starts_with("HTTP/1.1 405"), "{post_probe}");

    // While a request drains after SIGTERM, /readyz says so (a load balancer stops sending).
    let port = weir.proc.port;
    let slow = std::thread::spawn(move || {
        raw(
            port,
            b"GET /?delay_ms=1500 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
    });
    std::thread::sleep(Duration::from_millis(400));
    weir.proc.terminate();
    assert!(
        eventually(Duration::from_secs(1), || get("/readyz")
            .starts_with("HTTP/1.1 503")),
        "readyz while draining: {}",
        get("/readyz")
    );
    assert!(get("/healthz").starts_with("HTTP/1.1 200"));
    assert!(slow.join().unwrap().starts_with("HTTP/1.1 200"));
    assert!(weir.proc.wait_exit(Duration::from_secs(10)).success());
}

/// `--shutdown-delay`: after SIGTERM `/readyz` answers 503 at once while new connections are
/// still accepted and served as usual; once the delay is over the listener closes and the
/// process exits. A second signal cuts the delay short.
#[test]
fn the_shutdown_delay_serves_on_while_readiness_fails() {
    let up = echo("up");
    let mut weir = Weir::start(&table(up.port, "/"), &["--shutdown-delay", "2s"]);
    let port = weir.proc.port;
    let admin = weir.admin;
    let get = |port: u16, path: &str| {
        raw(
            port,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
            Duration::from_secs(5),
        )
    };
    assert!(get(admin, "/readyz").starts_with("HTTP/1.1 200"));
    let started = Instant::now();
    weir.proc.terminate();
    assert!(
        eventually(Duration::from_secs(1), || get(admin, "/readyz")
            .starts_with("HTTP/1.1 503")),
        "readyz during the delay: {}",
        get(admin, "/readyz")
    );
    // A new connection during the delay is served as before.
    let during = get(port, "/during");
    assert!(during.starts_with("HTTP/1.1 200"), "{during}");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "checked within the delay"
    );
    let status = weir.proc.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "stopped only after the delay: {:?}",
        started.elapsed()
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());

    // A second SIGTERM ends the delay at once.
    let mut weir = Weir::start(&table(up.port, "/"), &["--shutdown-delay", "60s"]);
    let admin = weir.admin;
    // Ready means the signal handlers are in place.
    assert!(eventually(Duration::from_secs(5), || get(admin, "/readyz")
        .starts_with("HTTP/1.1 200")));
    weir.proc.terminate();
    assert!(eventually(Duration::from_secs(1), || get(admin, "/readyz")
        .starts_with("HTTP/1.1 503")));
    weir.proc.terminate();
    let status = weir.proc.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status {status:?}");
}

/// A backend or mirror that names the proxy's own admin API is refused at connect time: a
/// client's `POST /config` through the proxy never reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_is_never_an_upstream() {
    let up = echo("up");
    let weir = Weir::start(&table(up.port, "/ok"), &[]);
    let c = client();
    let admin = weir.admin;
    let pointed = format!(
        "{{\"routes\": [{{\"id\": \"r\", \"paths\": [{{\"path\": \"/\"}}], \"service\": \"admin\", \"mirrors\": [{{\"service\": \"admin\"}}]}}],\
          \"services\": [{{\"id\": \"admin\", \"host\": \"127.0.0.1\", \"port\": {admin}, \"retries\": 0}}]}}"
    );
    let r = send(&c, "POST", &weir.admin_url("/config"), &[], pointed).await;
    assert_eq!(r.status, 200, "{r:?}");
    let before = get(&c, &weir.admin_url("/status"), &[]).await.json()["hash"].clone();
    let replace = r#"{"routes": [], "services": []}"#;
    let r = send(&c, "POST", &weir.url("/config"), &[], replace).await;
    assert_eq!(r.status, 502, "{r:?}");
    // Neither the request nor its mirror copy replaced the table.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = get(&c, &weir.admin_url("/status"), &[]).await.json()["hash"].clone();
    assert_eq!(before, after);
}

#[test]
fn a_busy_address_is_named_in_the_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(WEIR)
        .args(["proxy", "--listen", "127.0.0.1:0", "--admin-listen", &addr])
        .stdout(Stdio::null())
        .output()
        .expect("run weir");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("--admin-listen {addr}")), "{err}");
}
