//! gRPC through the real binary with gRPC's C core on both ends (Python `grpcio`, driven by
//! tests/grpc/peer.py): unary, server-streaming, client-streaming and bidirectional calls over
//! h2c and over TLS from the client, trailers and statuses intact, and Weir's own failures
//! (dead upstream, no route, deadline, a plugin's refusal) answered as gRPC statuses.
//!
//! Needs `python3` with `grpcio` (`.ci/run` installs it); without it these tests fail.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::grpc::*;
use common::*;
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// The routing table: the Echo service on `server`, a dead service, a refused one.
fn table(server: u16) -> String {
    let cert = std::fs::read_to_string(format!("{FIXTURES}/a.example.test.crt")).unwrap();
    let key = std::fs::read_to_string(format!("{FIXTURES}/a.example.test.key")).unwrap();
    json!({
        "routes": [
            {"id": "echo", "paths": [{"path": "/weir.test.Echo"}], "service": "echo"},
            {"id": "dead", "paths": [{"path": "/dead.Echo"}], "service": "dead"},
            {"id": "refused", "paths": [{"path": "/refused.Echo"}], "service": "echo"},
            {"id": "web", "hosts": ["web.test"], "paths": [{"path": "/weir.test.Echo"}], "service": "echo"},
        ],
        "services": [
            {"id": "echo", "protocol": "grpc", "host": "127.0.0.1", "port": server},
            {"id": "dead", "protocol": "grpc", "host": "127.0.0.1", "port": free_port(), "retries": 0},
        ],
        "plugins": [{"id": "no", "name": "request-termination", "route": "refused",
                     "config": {"status_code": 403, "message": "not for you"}},
                    {"id": "web", "name": "grpc-web", "route": "web", "config": {}}],
        "certificates": [{"id": "a", "cert": cert, "key": key, "snis": ["a.example.test"]}],
    })
    .to_string()
}

#[test]
fn every_kind_of_call_over_h2c_and_tls() {
    let server = grpc_server();
    let tls = free_port();
    let w = Weir::start(
        &table(server.port),
        &["--tls-listen", &format!("127.0.0.1:{tls}")],
    );
    wait_for_port(tls);
    let plain = format!("127.0.0.1:{}", w.proc.port);
    assert_all_calls(&grpc_client(&["call", &plain]));
    let secure = format!("127.0.0.1:{tls}");
    let ca = format!("{FIXTURES}/ca.crt");
    assert_all_calls(&grpc_client(&[
        "call",
        &secure,
        "--tls",
        &ca,
        "a.example.test",
    ]));
}

#[test]
fn weirs_own_failures_are_grpc_statuses() {
    let server = grpc_server();
    let log = temp_dir("grpc-log").join("access.log");
    let w = Weir::start_with(
        &table(server.port),
        &[],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let target = format!("127.0.0.1:{}", w.proc.port);
    let one = |method: &str, extra: &[&str]| {
        let mut args = vec!["one", target.as_str(), method];
        args.extend_from_slice(extra);
        grpc_client(&args).remove(method).unwrap()
    };
    // Paths of other services: peer.py's `one` calls /weir.test.Echo/<method>, so these
    // go through a second client below.
    let r = one("Unary", &[]);
    assert_eq!(r["code"], "OK", "{r}");
    // The upstream's own error status, logged as the upstream sent it.
    let r = one("Fail", &[]);
    assert_eq!(
        (r["code"].as_str(), r["details"].as_str()),
        (Some("INVALID_ARGUMENT"), Some("bad thing")),
        "{r}"
    );

    // The upstream's answer takes 2 s; the client allows 300 ms.
    let r = one("Slow", &["--timeout", "0.3"]);
    assert_eq!(r["code"], "DEADLINE_EXCEEDED", "{r}");
    // Weir itself keeps the deadline: a client that does not cancel (a bare HTTP/2 request
    // with `grpc-timeout`) gets DEADLINE_EXCEEDED from Weir at 300 ms.
    let started = Instant::now();
    let (status, headers) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bare_h2_call(
            w.proc.port,
            "/weir.test.Echo/Slow",
            &[("grpc-timeout", "300m")],
        ));
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(headers.get("grpc-status").unwrap(), "4", "{headers:?}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(1500),
        "{took:?}"
    );

    let other = |path: &str| {
        let out = Command::new("python3")
            .args([
                "-c",
                "import grpc, json, sys\n\
                 ch = grpc.insecure_channel(sys.argv[1])\n\
                 try:\n    ch.unary_unary(sys.argv[2])(b'x', timeout=10); print(json.dumps({'code': 'OK'}))\n\
                 except grpc.RpcError as e:\n    print(json.dumps({'code': e.code().name, 'details': e.details()}))",
                &target,
                path,
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let r = other("/dead.Echo/Call");
    assert_eq!(r["code"], "UNAVAILABLE", "{r}");
    let r = other("/nowhere.Svc/Call");
    assert_eq!(
        (r["code"].as_str(), r["details"].as_str()),
        (
            Some("UNIMPLEMENTED"),
            Some("no Route matched with those values")
        )
    );
    let r = other("/refused.Echo/Call");
    assert_eq!(
        (r["code"].as_str(), r["details"].as_str()),
        (Some("PERMISSION_DENIED"), Some("not for you"))
    );

    // The access log carries each call's gRPC status.
    let want = [
        ("/weir.test.Echo/Unary", 0),
        ("/weir.test.Echo/Fail", 3),
        ("/weir.test.Echo/Slow", 4),
        ("/dead.Echo/Call", 14),
        ("/nowhere.Svc/Call", 12),
        ("/refused.Echo/Call", 7),
    ];
    let found = eventually(Duration::from_secs(5), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        want.iter().all(|(path, status)| {
            lines
                .iter()
                .any(|l| l["path"] == *path && l["grpc_status"] == *status)
        })
    });
    assert!(
        found,
        "access log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_web_calls_reach_a_grpc_server() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let server = grpc_server();
    let w = Weir::start(&table(server.port), &[]);
    let c = client();
    let url = |m: &str| w.url(&format!("/weir.test.Echo/{m}"));

    // Binary mode over HTTP/1.1, as a browser's grpc-web client sends it.
    let r = send(
        &c,
        "POST",
        &url("Unary"),
        &[
            ("host", "web.test"),
            ("content-type", "application/grpc-web+proto"),
            ("x-grpc-web", "1"),
        ],
        grpc_message(b"hello"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/grpc-web+proto"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let f = grpc_frames(&r.body);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].0, 0);
    let echoed: Value = serde_json::from_slice(&f[0].1).unwrap();
    assert_eq!(echoed["echo"], "hello");
    assert_eq!(f[1].0, 0x80, "the trailers travel as the last frame");
    let trailers = String::from_utf8(f[1].1.clone()).unwrap();
    assert!(trailers.contains("grpc-status:0\r\n"), "{trailers}");
    assert!(trailers.contains("x-trailer:unary\r\n"), "{trailers}");

    // Text mode: base64 both ways, the trailer frame included.
    let r = send(
        &c,
        "POST",
        &url("Unary"),
        &[
            ("host", "web.test"),
            ("content-type", "application/grpc-web-text"),
        ],
        b64.encode(grpc_message(b"text")),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("content-type"),
        Some("application/grpc-web-text+proto")
    );
    // Each chunk is its own padded base64 segment.
    let decoded = grpc_web_text_decode(&r.body);
    let f = grpc_frames(&decoded);
    assert_eq!(f.len(), 2, "{f:?}");
    let echoed: Value = serde_json::from_slice(&f[0].1).unwrap();
    assert_eq!(echoed["echo"], "text");
    assert_eq!(f[1].0, 0x80);
    assert!(String::from_utf8_lossy(&f[1].1).contains("grpc-status:0\r\n"));

    // An error answered trailers-only keeps its status in the head, as gRPC-Web allows.
    let r = send(
        &c,
        "POST",
        &url("Fail"),
        &[
            ("host", "web.test"),
            ("content-type", "application/grpc-web+proto"),
        ],
        grpc_message(b""),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("grpc-status"), Some("3"));
    assert_eq!(r.header("grpc-message"), Some("bad thing"));
    assert_eq!(r.header("x-reason"), Some("test"));
    assert!(r.body.is_empty());

    // Plain gRPC clients share the route: streaming calls stream, a trailers-only error
    // stays one.
    let plain = format!("127.0.0.1:{}", w.proc.port);
    assert_all_calls(&grpc_client(&["call", &plain, "--authority", "web.test"]));

    // A browser's preflight is answered by Weir.
    let r = send(
        &c,
        "OPTIONS",
        &url("Unary"),
        &[
            ("host", "web.test"),
            ("origin", "https://app.example"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "content-type,x-grpc-web,x-tenant",
            ),
        ],
        "",
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type,x-grpc-web,x-tenant")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_grpc_web_example_serves_a_browser_call() {
    let server = grpc_server();
    let (_w, f) = documented_grpc_web_call(server.port).await;
    let echoed: Value = serde_json::from_slice(&f[0].1).unwrap();
    assert_eq!(echoed["echo"], "from the docs");
    assert!(String::from_utf8_lossy(&f[1].1).contains("grpc-status:0\r\n"));
}
