//! The access plugins through the real binary in standalone mode: `request-size-limiting`,
//! `redirect`, `ip-restriction` and `cors`, each from its documented example
//! (docs/plugins/*.md) plus Plugin manifests for the other cases, checking what the client got
//! and what the upstream received, or that it received nothing.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::manifests::*;
use common::*;

/// An upstream that records the head of every request it receives and answers `200 {}`,
/// closing the connection: proof that a refused request never reached it.
struct Sink {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Sink {
    fn start() -> Sink {
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        let s = scripted(move |_, mut r, mut w| {
            if let Some(head) = read_head(&mut r) {
                seen.lock().unwrap().push(head);
                let _ = w.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
                );
            }
        });
        Sink {
            port: s.port,
            heads,
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// Waits (bounded) until `path` answers `status`: the listener opens before the first
/// translation lands.
async fn ready(c: &HttpClient, m: &Manifests, path: &str, status: u16) -> Resp {
    wait_for_status(c, &m.url(path), status, Duration::from_secs(10)).await
}

/// The status code of a raw HTTP/1.1 answer.
fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A chunked POST of `len` bytes in 8 KiB chunks, on a connection closed after the answer.
fn chunked_post(path: &str, len: usize) -> Vec<u8> {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    let mut left = len;
    while left > 0 {
        let n = left.min(8192);
        req.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        req.extend(std::iter::repeat_n(b'b', n));
        req.extend_from_slice(b"\r\n");
        left -= n;
    }
    req.extend_from_slice(b"0\r\n\r\n");
    req
}

/// Asserts `r` is the 503 of an Ingress that names a Plugin that was not accepted.
fn assert_disabled(r: &Resp) {
    assert_eq!(r.status, 503, "{r:?}");
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("This route is disabled"), "{message}");
    assert_eq!(
        r.echo_name(),
        None,
        "a broken plugin's route never reaches the upstream"
    );
}

const T: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// request-size-limiting

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_size_limiting_refuses_bodies_over_the_limit() {
    let up = echo("up");
    let sink = Sink::start();
    let extra = docs(&[
        service("demo", "sink", sink.port),
        // The documented Plugin (64 KiB) in front of an upstream that records what reaches it.
        ingress("sink", "/sink-upload", "upload-limit", "sink"),
        plugin(
            "need-length",
            "request-size-limiting",
            r#"{"allowed_payload_size": 1, "size_unit": "kilobytes", "require_content_length": true}"#,
        ),
        ingress("strict", "/strict", "need-length", "echo"),
        plugin(
            "broken-limit",
            "request-size-limiting",
            r#"{"allowed_payload_size": 1, "size_unit": "gigabytes"}"#,
        ),
        ingress("broken", "/broken", "broken-limit", "echo"),
        ingress("open", "/open", "", "echo"),
    ]);
    let m = Manifests::start(
        &[
            (
                "example.yaml",
                &doc_example_at("request-size-limiting", up.port),
            ),
            ("extra.yaml", &extra),
        ],
        &[],
    );
    let c = client();
    ready(&c, &m, "/upload", 200).await;
    const LIMIT: usize = 64 * 1024;

    // Within the limit (and exactly at it): the whole body reaches the upstream.
    for len in [60 * 1024, LIMIT] {
        let r = send(&c, "POST", &m.url("/upload/file"), &[], "a".repeat(len)).await;
        assert_eq!(r.status, 200, "{len}: {r:?}");
        let seen = r.json();
        assert_eq!(seen["body_length"], len);
        assert_eq!(seen["method"], "POST");
        assert_eq!(seen["path"], "/upload/file");
    }

    // A declared length over it: 413 naming the limit, from Weir, before the upstream.
    let r = send(
        &c,
        "POST",
        &m.url("/upload/file"),
        &[],
        "a".repeat(LIMIT + 1),
    )
    .await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(
        r.json()["message"],
        "Request size limit exceeded: at most 65536 bytes"
    );
    assert_eq!(r.echo_name(), None);
    let r = send(
        &c,
        "POST",
        &m.url("/sink-upload"),
        &[],
        "a".repeat(LIMIT + 1),
    )
    .await;
    assert_eq!(r.status, 413);
    assert!(sink.heads().is_empty(), "{:?}", sink.heads());
    assert_eq!(get(&c, &m.url("/sink-upload"), &[]).await.status, 200);
    assert_eq!(
        sink.heads().len(),
        1,
        "the sink is reachable: the 413 was the plugin's"
    );

    // A chunked body is counted as it arrives.
    let over = raw(m.proc.port, &chunked_post("/upload/x", 100 * 1024), T);
    assert_eq!(status_of(&over), 413, "{over}");
    assert!(over.contains("at most 65536 bytes"), "{over}");
    let under = raw(m.proc.port, &chunked_post("/upload/x", 10 * 1024), T);
    assert_eq!(status_of(&under), 200, "{under}");
    assert!(under.contains("\"body_length\":10240"), "{under}");

    // require_content_length: a body without a length is refused, one with a length is not.
    let unknown = raw(m.proc.port, &chunked_post("/strict", 10), T);
    assert_eq!(status_of(&unknown), 411, "{unknown}");
    assert!(
        unknown.contains("A valid Content-Length header is required"),
        "{unknown}"
    );
    let r = send(&c, "POST", &m.url("/strict"), &[], "a".repeat(1000)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["body_length"], 1000);
    let r = get(&c, &m.url("/strict"), &[]).await;
    assert_eq!(r.status, 200, "no body needs no length");
    assert_eq!(r.json()["body_length"], 0);
    let r = send(&c, "POST", &m.url("/strict"), &[], "a".repeat(1025)).await;
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json()["message"],
        "Request size limit exceeded: at most 1024 bytes"
    );

    // A malformed configuration disables its Ingress only; routes without it are untouched.
    assert_disabled(&get(&c, &m.url("/broken"), &[]).await);
    let r = send(&c, "POST", &m.url("/open"), &[], "a".repeat(LIMIT * 2)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body_length"], LIMIT * 2);
}

// ---------------------------------------------------------------------------------------------
// redirect

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_answers_without_the_upstream() {
    let up = echo("up");
    let sink = Sink::start();
    let extra = docs(&[
        service("demo", "sink", sink.port),
        ingress("moved-sink", "/gone", "moved", "sink"),
        ingress("sink-open", "/sink-open", "", "sink"),
        plugin(
            "temporary",
            "redirect",
            r#"{"status_code": 307, "location": "/new?from=tmp", "keep_incoming_query": true}"#,
        ),
        ingress("tmp", "/tmp", "temporary", "echo"),
        plugin(
            "broken-redirect",
            "redirect",
            r#"{"location": "new.example.com/no-scheme"}"#,
        ),
        ingress("broken", "/broken", "broken-redirect", "echo"),
        ingress("open", "/open", "", "echo"),
    ]);
    let m = Manifests::start(
        &[
            ("example.yaml", &doc_example_at("redirect", up.port)),
            ("extra.yaml", &extra),
        ],
        &[],
    );
    let c = client();
    ready(&c, &m, "/old", 301).await;

    // The documented example: path and query carried to the new host.
    let r = get(&c, &m.url("/old/docs?page=2"), &[]).await;
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("https://new.example.com/old/docs?page=2")
    );
    assert_eq!(r.json()["message"], "redirecting");
    assert_eq!(r.echo_name(), None);
    let r = get(&c, &m.url("/old"), &[]).await;
    assert_eq!(r.header("location"), Some("https://new.example.com/old"));

    // Every method, and the upstream never sees any of it.
    for method in ["GET", "POST", "DELETE"] {
        let r = send(&c, method, &m.url("/gone/x?a=1"), &[], "body").await;
        assert_eq!(r.status, 301, "{method}");
        assert_eq!(
            r.header("location"),
            Some("https://new.example.com/gone/x?a=1")
        );
    }
    assert!(sink.heads().is_empty(), "{:?}", sink.heads());
    assert_eq!(get(&c, &m.url("/sink-open"), &[]).await.status, 200);
    assert_eq!(sink.heads().len(), 1);

    // A path location, 307, the incoming query after the location's own.
    let r = send(&c, "POST", &m.url("/tmp/a?x=1&y=2"), &[], "body").await;
    assert_eq!(r.status, 307);
    assert_eq!(r.header("location"), Some("/new?from=tmp&x=1&y=2"));
    let r = get(&c, &m.url("/tmp"), &[]).await;
    assert_eq!(r.header("location"), Some("/new?from=tmp"));

    // Routes without the plugin go to the upstream as before.
    let r = get(&c, &m.url("/open/x?q=1"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["path"], "/open/x");
    assert_eq!(r.json()["query"], "q=1");

    // A location without a scheme is refused, and its Ingress fails closed.
    assert_disabled(&get(&c, &m.url("/broken"), &[]).await);
}

// ---------------------------------------------------------------------------------------------
// ip-restriction

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_restriction_allows_and_denies_the_peer_address() {
    let up = echo("up");
    let sink = Sink::start();
    let extra = docs(&[
        service("demo", "sink", sink.port),
        plugin(
            "no-loopback",
            "ip-restriction",
            r#"{"deny": ["127.0.0.0/8"]}"#,
        ),
        ingress("blocked", "/blocked", "no-loopback", "sink"),
        plugin(
            "mapped",
            "ip-restriction",
            r#"{"deny": ["::ffff:127.0.0.1"], "status": 451, "message": "not from here"}"#,
        ),
        ingress("mapped", "/mapped", "mapped", "echo"),
        plugin(
            "v6-only",
            "ip-restriction",
            r#"{"allow": ["::1", "fd00::/8"]}"#,
        ),
        ingress("v6", "/v6", "v6-only", "echo"),
        plugin(
            "broken-ip",
            "ip-restriction",
            r#"{"allow": ["10.0.0.1", "::1", "10.0.0.0/33"]}"#,
        ),
        ingress("broken", "/broken", "broken-ip", "echo"),
        plugin("empty-ip", "ip-restriction", r#"{"allow": [], "deny": []}"#),
        ingress("empty", "/empty", "empty-ip", "echo"),
    ]);
    let m = Manifests::start(
        &[
            ("example.yaml", &doc_example_at("ip-restriction", up.port)),
            ("extra.yaml", &extra),
        ],
        &[],
    );
    let c = client();
    ready(&c, &m, "/internal", 200).await;

    // 127.0.0.1 is in the documented allow list. Without trusted proxies a client cannot
    // claim another address: X-Forwarded-For from it changes nothing.
    for xff in [None, Some("10.66.0.1"), Some("8.8.8.8")] {
        let headers: Vec<(&str, &str)> = xff.map(|v| ("x-forwarded-for", v)).into_iter().collect();
        let r = get(&c, &m.url("/internal/x"), &headers).await;
        assert_eq!(r.status, 200, "{xff:?}: {r:?}");
        let seen = r.json();
        assert_eq!(seen["path"], "/internal/x");
        assert_eq!(seen["headers"]["x-forwarded-for"], "127.0.0.1");
    }

    // Denied: the configured answer, and nothing reaches the upstream.
    let r = get(&c, &m.url("/blocked"), &[]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["message"], "Your IP address is not allowed");
    assert!(sink.heads().is_empty(), "{:?}", sink.heads());

    // An IPv4-mapped rule matches the IPv4 client; status and message as configured.
    let r = get(&c, &m.url("/mapped"), &[]).await;
    assert_eq!(r.status, 451);
    assert_eq!(r.json()["message"], "not from here");
    assert_eq!(r.echo_name(), None);

    // An IPv6-only allow list refuses an IPv4 client.
    assert_eq!(get(&c, &m.url("/v6"), &[]).await.status, 403);

    // Malformed lists: the Ingresses using them fail closed.
    assert_disabled(&get(&c, &m.url("/broken"), &[]).await);
    assert_disabled(&get(&c, &m.url("/empty"), &[]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_restriction_judges_the_client_behind_a_trusted_proxy() {
    let up = echo("up");
    let m = Manifests::start(
        &[("example.yaml", &doc_example_at("ip-restriction", up.port))],
        &["--trusted-proxies", "127.0.0.1/32"],
    );
    let c = client();
    ready(&c, &m, "/internal", 200).await;
    let url = m.url("/internal/x");

    // The documented lists: 10/8, 192.168/16, 127.0.0.1 and fd00::/8, except 10.66/16.
    for (client, allowed) in [
        ("10.1.2.3", true),
        ("192.168.7.7", true),
        ("::ffff:10.1.2.3", true),
        ("fd00::5", true),
        ("10.66.1.1", false),
        ("::ffff:10.66.1.1", false),
        ("8.8.8.8", false),
        ("2001:db8::1", false),
        ("127.0.0.2", false),
    ] {
        let r = get(&c, &url, &[("x-forwarded-for", client)]).await;
        if allowed {
            assert_eq!(r.status, 200, "{client}: {r:?}");
            let xff = r.json()["headers"]["x-forwarded-for"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(xff.starts_with(client), "{client}: upstream saw {xff}");
        } else {
            assert_eq!(r.status, 403, "{client}: {r:?}");
            assert_eq!(r.json()["message"], "Your IP address is not allowed");
            assert_eq!(r.echo_name(), None, "{client}");
        }
    }
    // Trusted hops are skipped, from the right: the first untrusted one is the client.
    let r = get(&c, &url, &[("x-forwarded-for", "10.66.0.9, 127.0.0.1")]).await;
    assert_eq!(r.status, 403);
    let r = get(&c, &url, &[("x-forwarded-for", "8.8.8.8, 10.1.2.3")]).await;
    assert_eq!(r.status, 200, "the nearest untrusted hop decides");
}

// ---------------------------------------------------------------------------------------------
// cors

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_answers_preflights_and_marks_allowed_origins() {
    let up = echo("up");
    let sink = Sink::start();
    let extra = docs(&[
        service("demo", "sink", sink.port),
        ingress("cors-sink", "/cors-sink", "api-cors", "sink"),
        plugin(
            "pass-preflight",
            "cors",
            r#"{"origins": ["*"], "preflight_continue": true}"#,
        ),
        ingress("pass", "/pass", "pass-preflight", "echo"),
        plugin(
            "loopback-denied",
            "ip-restriction",
            r#"{"deny": ["127.0.0.1"]}"#,
        ),
        ingress("guarded", "/guarded", "api-cors,loopback-denied", "echo"),
        plugin(
            "broken-cors",
            "cors",
            r#"{"origins": ["https://(unclosed"]}"#,
        ),
        ingress("broken", "/broken", "broken-cors", "echo"),
    ]);
    let m = Manifests::start(
        &[
            ("example.yaml", &doc_example_at("cors", up.port)),
            ("extra.yaml", &extra),
        ],
        &[],
    );
    let c = client();
    ready(&c, &m, "/api", 200).await;
    let url = m.url("/api/items");
    let app = "https://app.example.com";

    // Allowed origins, exact and by regex: forwarded, answered with the CORS headers.
    for origin in [app, "https://pr-12.preview.example.com"] {
        let r = get(&c, &url, &[("origin", origin)]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.echo_name().as_deref(), Some("up"));
        assert_eq!(
            r.json()["headers"]["origin"],
            origin,
            "the upstream sees it"
        );
        assert_eq!(r.header("access-control-allow-origin"), Some(origin));
        assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
        assert_eq!(
            r.header("access-control-expose-headers"),
            Some("X-Total-Count")
        );
        assert_eq!(r.header("vary"), Some("Origin"));
    }

    // Other origins: still forwarded (as in Kong), but without CORS headers.
    for origin in [
        "https://evil.example.com",
        "https://app.example.com.evil.net",
        "https://x.preview.example.com.evil.net",
        "http://app.example.com",
    ] {
        let r = get(&c, &url, &[("origin", origin)]).await;
        assert_eq!(r.status, 200, "{origin}");
        assert_eq!(r.json()["headers"]["origin"], origin);
        assert_eq!(r.header("access-control-allow-origin"), None, "{origin}");
        assert_eq!(
            r.header("access-control-allow-credentials"),
            None,
            "{origin}"
        );
        assert_eq!(r.header("vary"), Some("Origin"), "{origin}");
    }

    // A preflight is answered by Weir, with the configured headers.
    let preflight = |origin: &'static str| {
        [
            ("origin", origin),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", "content-type,x-token"),
        ]
    };
    let r = send(&c, "OPTIONS", &url, &preflight(app), "").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo_name(), None, "answered without the upstream");
    assert!(r.body.is_empty());
    assert_eq!(r.header("access-control-allow-origin"), Some(app));
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET,POST,DELETE")
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type,x-token")
    );
    assert_eq!(r.header("access-control-max-age"), Some("3600"));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    let r = send(
        &c,
        "OPTIONS",
        &url,
        &preflight("https://evil.example.com"),
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.echo_name(), None);
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(r.header("access-control-allow-methods"), None);

    // Neither preflight reached an upstream; a normal request does, with its Origin.
    let r = send(&c, "OPTIONS", &m.url("/cors-sink"), &preflight(app), "").await;
    assert_eq!(r.header("access-control-allow-origin"), Some(app));
    let r = send(
        &c,
        "OPTIONS",
        &m.url("/cors-sink"),
        &preflight("https://x.test"),
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(sink.heads().is_empty(), "{:?}", sink.heads());
    let r = get(&c, &m.url("/cors-sink"), &[("origin", app)]).await;
    assert_eq!(r.header("access-control-allow-origin"), Some(app));
    let heads = sink.heads();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains("origin: https://app.example.com"),
        "{}",
        heads[0]
    );

    // preflight_continue: the upstream answers preflights, without CORS headers added;
    // other requests get `*`.
    let r = send(&c, "OPTIONS", &m.url("/pass"), &preflight(app), "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["method"], "OPTIONS");
    assert_eq!(r.json()["headers"]["access-control-request-method"], "POST");
    assert_eq!(r.header("access-control-allow-origin"), None);
    let r = get(&c, &m.url("/pass"), &[("origin", app)]).await;
    assert_eq!(r.echo_name().as_deref(), Some("up"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("vary"), None);

    // cors runs first: a later plugin's refusal carries the headers, so a page can read it.
    let r = get(&c, &m.url("/guarded"), &[("origin", app)]).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("access-control-allow-origin"), Some(app));
    assert_eq!(r.echo_name(), None);

    // A regex that does not compile: the Plugin is refused and its Ingress fails closed.
    assert_disabled(&get(&c, &m.url("/broken"), &[("origin", app)]).await);
}
