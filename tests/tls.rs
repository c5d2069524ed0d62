//! HTTPS termination (`--tls-listen`): certificates chosen by SNI from the routing table,
//! HTTP/2 by ALPN, `X-Forwarded-Proto: https`, https-only routes, and certificates that change
//! with a config push while bad ones are rejected.

mod common;

use common::tls::{fixture, fixture_der};
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn cert(id: &str, name: &str, snis: &[&str]) -> Value {
    json!({
        "id": id,
        "cert": fixture(&format!("{name}.crt")),
        "key": fixture(&format!("{name}.key")),
        "snis": snis,
    })
}

/// The certificate for a.example.test, under that name.
fn cert_a() -> Value {
    cert("a", "a.example.test", &["a.example.test"])
}

/// `GET path` over TLS with SNI `name`, no ALPN; panics if the handshake fails.
async fn https(port: u16, name: &str, path: &str) -> common::tls::TlsResp {
    common::tls::get(port, name, path, &[])
        .await
        .unwrap_or_else(|e| panic!("https://{name}{path}: {e}"))
}

fn table(echo_port: u16, certificates: Vec<Value>) -> String {
    json!({
        "routes": [
            {"id": "any", "paths": [{"path": "/"}], "service": "s"},
            {"id": "secure", "paths": [{"path": "/secure"}], "service": "s",
             "protocols": ["https"], "https_redirect_status_code": 308},
            {"id": "plain", "paths": [{"path": "/plain"}], "service": "s", "protocols": ["http"]},
        ],
        "services": [{"id": "s", "host": "127.0.0.1", "port": echo_port}],
        "certificates": certificates,
    })
    .to_string()
}

fn start(echo_port: u16, certificates: Vec<Value>) -> (Weir, u16) {
    let tls_port = free_port();
    let weir = Weir::start(
        &table(echo_port, certificates),
        &["--tls-listen", &format!("127.0.0.1:{tls_port}")],
    );
    wait_for_port(tls_port);
    (weir, tls_port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_chosen_by_sni() {
    let up = echo("up");
    let (weir, port) = start(
        up.port,
        vec![
            cert_a(),
            cert("wild", "wild.example.test", &["*.example.test"]),
        ],
    );

    let a = https(port, "a.example.test", "/hello").await;
    assert_eq!(a.peer_cert, fixture_der("a.example.test.crt"));
    assert_eq!(a.resp.status, 200);
    let seen = a.resp.json();
    assert_eq!(seen["path"], "/hello");
    assert_eq!(seen["headers"]["x-forwarded-proto"], "https");
    assert_eq!(seen["headers"]["x-forwarded-port"], port.to_string());
    assert_eq!(seen["headers"]["x-forwarded-host"], "a.example.test");

    let b = https(port, "b.example.test", "/").await;
    assert_eq!(b.peer_cert, fixture_der("wild.example.test.crt"));
    assert_eq!(b.resp.status, 200);

    // No certificate for the name and no default one: the handshake fails, nothing else does.
    let none = common::tls::get(port, "other.test", "/", &[]).await;
    let err = none
        .err()
        .expect("handshake without a certificate succeeded");
    // The server closed the connection (no alert, as Envoy does), rather than this client
    // rejecting some certificate.
    assert!(err.contains("eof") && !err.contains("alert"), "{err}");
    let c = client();
    assert_eq!(get(&c, &weir.url("/"), &[]).await.status, 200);
    assert!(metrics(&c, &weir)
        .await
        .lines()
        .any(|l| l.starts_with("weir_tls_handshake_failures_total ") && !l.ends_with(" 0")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_is_negotiated_by_alpn() {
    let up = echo("up");
    let (_weir, port) = start(up.port, vec![cert_a()]);
    let h2 = common::tls::get(port, "a.example.test", "/h2", &["h2", "http/1.1"])
        .await
        .unwrap();
    assert_eq!(h2.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(h2.resp.status, 200);
    assert_eq!(h2.resp.json()["path"], "/h2");
    let h1 = common::tls::get(port, "a.example.test", "/h1", &["http/1.1"])
        .await
        .unwrap();
    assert_eq!(h1.alpn.as_deref(), Some(&b"http/1.1"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_without_snis_is_the_default() {
    let up = echo("up");
    let (_weir, port) = start(
        up.port,
        vec![cert_a(), cert("default", "wild.example.test", &[])],
    );
    let named = https(port, "a.example.test", "/").await;
    assert_eq!(named.peer_cert, fixture_der("a.example.test.crt"));
    // Any other name gets the default (this client only accepts it for a name it covers).
    let covered = https(port, "x.example.test", "/").await;
    assert_eq!(covered.peer_cert, fixture_der("wild.example.test.crt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_only_routes_redirect_plain_http() {
    let up = echo("up");
    let (weir, port) = start(up.port, vec![cert_a()]);
    let c = client();
    let plain = get(
        &c,
        &weir.url("/secure/x?q=1"),
        &[("host", "a.example.test")],
    )
    .await;
    assert_eq!(plain.status, 308);
    assert_eq!(
        plain.header("location"),
        Some("https://a.example.test/secure/x?q=1")
    );
    let tls = https(port, "a.example.test", "/secure/x").await;
    assert_eq!(tls.resp.status, 200);

    // An http-only route does not match over HTTPS (Kong's behaviour); plain HTTP reaches it.
    let tls = https(port, "a.example.test", "/plain").await;
    assert_eq!(tls.resp.status, 404);
    assert_eq!(get(&c, &weir.url("/plain"), &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_follow_pushes_and_bad_ones_are_rejected() {
    let up = echo("up");
    let (weir, port) = start(up.port, vec![]);
    assert!(common::tls::get(port, "a.example.test", "/", &[])
        .await
        .is_err());

    let c = client();
    let good = table(up.port, vec![cert_a()]);
    assert_eq!(push(&c, &weir, &good).await.status, 200);
    let a = https(port, "a.example.test", "/").await;
    assert_eq!(a.resp.status, 200);
    // The admin API shows the certificate but never its private key.
    let served = get(&c, &weir.admin_url("/config"), &[]).await.json();
    assert_eq!(served["certificates"][0]["id"], "a");
    assert_eq!(served["certificates"][0]["key"], "<redacted>");
    assert!(!served.to_string().contains("PRIVATE KEY"));

    // A key that is not the certificate's, a certificate that is not PEM, a bad server name.
    let mut mismatched = cert("mismatch", "a.example.test", &["m.example.test"]);
    mismatched["key"] = fixture("wild.example.test.key").into();
    let mut garbage = cert("garbage", "a.example.test", &["g.example.test"]);
    garbage["cert"] = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".into();
    let bad_sni = cert("badsni", "a.example.test", &["a.*.test"]);
    let bad = table(up.port, vec![mismatched, garbage, bad_sni]);
    let r = push(&c, &weir, &bad).await;
    assert_eq!(r.status, 400);
    let errors = r.json()["errors"].as_array().unwrap().clone();
    let has = |id: &str, field: &str| {
        errors
            .iter()
            .any(|e| e["entity"] == "certificate" && e["id"] == id && e["field"] == field)
    };
    assert!(has("mismatch", "key"), "{errors:?}");
    assert!(has("garbage", "cert"), "{errors:?}");
    assert!(has("badsni", "snis[0]"), "{errors:?}");

    // The old table, with its certificate, is still in service.
    let a = https(port, "a.example.test", "/").await;
    assert_eq!(a.peer_cert, fixture_der("a.example.test.crt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_tls_client_does_not_delay_shutdown() {
    let up = echo("up");
    let (mut weir, port) = start(up.port, vec![cert_a()]);
    // Connected, never says hello: the handshake would wait for --header-read-timeout (60 s),
    // longer than the shutdown grace (30 s).
    let _silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    weir.proc.terminate();
    weir.proc.wait_exit(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_https_connection_ends_with_close_notify() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = echo("up");
    let (_weir, port) = start(up.port, vec![cert_a()]);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("a.example.test").unwrap();
    let mut tls = common::tls::connector(&["http/1.1"])
        .connect(name, tcp)
        .await
        .unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: a.example.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    // rustls reports a close without close_notify as UnexpectedEof (a truncation attack).
    let mut all = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tls.read_to_end(&mut all),
    )
    .await
    .expect("connection not closed within 10 s")
    .expect("closed without close_notify");
    let text = String::from_utf8_lossy(&all);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("connection: close\r\n"), "{text}");
}
