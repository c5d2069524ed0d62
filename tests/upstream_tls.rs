//! Upstream TLS through the real binary: a CA made here (rcgen), HTTPS upstreams on
//! 127.0.0.1 that check SNI and require client certificates, a wrong CA refused with a clear
//! log line, HTTP/2 by ALPN, and connections never shared between different TLS settings.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::ca::{block, Ca, Leaf};
use common::*;
use http_body_util::Full;
use rcgen::ExtendedKeyUsagePurpose;
use rustls::pki_types::PrivateKeyDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// An HTTPS upstream: answers every request with JSON naming the SNI it was reached by,
/// whether a client certificate was shown, the connection's number and the path.
struct Upstream {
    port: u16,
    connections: Arc<AtomicUsize>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

async fn https_upstream(server: &Leaf, client_ca: Option<&Ca>, alpn: &[&[u8]]) -> Upstream {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(ca.issuer.der().clone()).unwrap();
            builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                    .build()
                    .unwrap(),
            )
        }
    };
    let key = PrivateKeyDer::try_from(server.key_der.clone()).unwrap();
    let mut config = builder
        .with_single_cert(vec![server.der.clone()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let n = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let (_, conn) = tls.get_ref();
                let sni = conn.server_name().map(str::to_string);
                let client_cert = conn.peer_certificates().is_some_and(|c| !c.is_empty());
                let h2 = conn.alpn_protocol() == Some(b"h2");
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let body = serde_json::json!({
                            "sni": sni,
                            "client_cert": client_cert,
                            "connection": n,
                            "path": req.uri().path(),
                            "version": format!("{:?}", req.version()),
                        });
                        async move {
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(
                                body.to_string(),
                            ))))
                        }
                    });
                let io = hyper_util::rt::TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, service)
                    .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    Upstream { port, connections }
}

/// A table with one route per `(path, service YAML)`.
fn table(services: &[(&str, String)]) -> String {
    let mut routes = String::new();
    let mut svcs = String::new();
    for (i, (path, svc)) in services.iter().enumerate() {
        routes.push_str(&format!(
            "- {{id: r{i}, paths: [{{path: {path}}}], service: s{i}}}\n"
        ));
        svcs.push_str(&format!("- id: s{i}\n{svc}\n"));
    }
    format!("routes:\n{routes}services:\n{svcs}")
}

/// A service YAML body (indented under `- id:`) for an HTTPS upstream on `port`.
fn https_service(port: u16, tls: &str) -> String {
    format!("  protocol: https\n  host: 127.0.0.1\n  port: {port}\n  retries: 0\n  tls:\n{tls}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_and_client_certificate_reach_the_upstream_and_connections_are_reused() {
    let ca = Ca::new("test CA");
    let server = ca.leaf(&["backend.test"], ExtendedKeyUsagePurpose::ServerAuth);
    let client_leaf = ca.leaf(&["weir"], ExtendedKeyUsagePurpose::ClientAuth);
    let up = https_upstream(&server, Some(&ca), &[b"http/1.1"]).await;
    let tls = format!(
        "    sni: backend.test\n    ca_certificates: {}\n    client_certificate:\n      cert: {}\n      key: {}\n",
        block(&ca.pem(), 6),
        block(&client_leaf.pem, 8),
        block(&client_leaf.key_pem, 8)
    );
    let without = format!(
        "    sni: backend.test\n    ca_certificates: {}\n",
        block(&ca.pem(), 6)
    );
    let w = Weir::start(
        &table(&[
            ("/mtls", https_service(up.port, &tls)),
            ("/plain", https_service(up.port, &without)),
        ]),
        &["--access-log", "false"],
    );
    let c = client();
    for _ in 0..50 {
        let r = get(&c, &w.url("/mtls/x"), &[]).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let v = r.json();
        assert_eq!(v["sni"], "backend.test");
        assert_eq!(v["client_cert"], true);
        assert_eq!(v["path"], "/mtls/x");
    }
    let opened = up.connections.load(Ordering::SeqCst);
    assert!(
        opened <= 4,
        "{opened} TLS connections for 50 sequential requests"
    );

    // Without a client certificate the upstream refuses the handshake: 502.
    let r = get(&c, &w.url("/plain"), &[]).await;
    assert_eq!(r.status, 502);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_gives_502_and_a_log_line_naming_the_target_and_the_reason() {
    let ca = Ca::new("test CA");
    let other = Ca::new("another CA");
    let server = ca.leaf(&["backend.test"], ExtendedKeyUsagePurpose::ServerAuth);
    let up = https_upstream(&server, None, &[b"http/1.1"]).await;
    let wrong = format!(
        "    sni: backend.test\n    ca_certificates: {}\n",
        block(&other.pem(), 6)
    );
    let off = format!(
        "    sni: backend.test\n    verify: false\n    ca_certificates: {}\n",
        block(&other.pem(), 6)
    );
    let w = Weir::start_logged(
        &table(&[
            ("/wrong", https_service(up.port, &wrong)),
            ("/off", https_service(up.port, &off)),
        ]),
        &["--access-log", "false"],
    );
    let c = client();
    assert_eq!(get(&c, &w.url("/wrong"), &[]).await.status, 502);
    let log = w.log();
    let line = log
        .lines()
        .find(|l| l.contains("upstream try failed"))
        .unwrap_or_else(|| panic!("no log line: {log}"));
    assert!(line.contains(&format!("127.0.0.1:{}", up.port)), "{line}");
    assert!(line.contains("UnknownIssuer"), "{line}");

    // verify: false accepts the same upstream.
    let r = get(&c, &w.url("/off"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["sni"], "backend.test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_tls_settings_to_one_address_never_share_a_connection() {
    let ca = Ca::new("test CA");
    let server = ca.leaf(
        &["one.test", "two.test"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let up = https_upstream(&server, None, &[b"http/1.1"]).await;
    let tls = |sni: &str| {
        format!(
            "    sni: {sni}\n    ca_certificates: {}\n",
            block(&ca.pem(), 6)
        )
    };
    let w = Weir::start(
        &table(&[
            ("/one", https_service(up.port, &tls("one.test"))),
            ("/two", https_service(up.port, &tls("two.test"))),
        ]),
        &["--access-log", "false"],
    );
    let c = client();
    let mut by_connection: std::collections::HashMap<u64, String> = Default::default();
    for i in 0..40 {
        let (path, sni) = if i % 2 == 0 {
            ("/one", "one.test")
        } else {
            ("/two", "two.test")
        };
        let r = get(&c, &w.url(path), &[]).await;
        assert_eq!(r.status, 200);
        let v = r.json();
        assert_eq!(
            v["sni"], sni,
            "{path} went over a connection made for another SNI"
        );
        let conn = v["connection"].as_u64().unwrap();
        let first = by_connection.entry(conn).or_insert_with(|| sni.to_string());
        assert_eq!(first, sni, "connection {conn} carried both");
    }
    assert!(
        by_connection.len() >= 2 && by_connection.len() <= 8,
        "{by_connection:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_h2_speaks_http2_to_the_upstream() {
    let ca = Ca::new("test CA");
    let server = ca.leaf(&["backend.test"], ExtendedKeyUsagePurpose::ServerAuth);
    let up = https_upstream(&server, None, &[b"h2"]).await;
    let tls = format!(
        "    sni: backend.test\n    alpn: h2\n    ca_certificates: {}\n",
        block(&ca.pem(), 6)
    );
    let w = Weir::start(
        &table(&[("/", https_service(up.port, &tls))]),
        &["--access-log", "false"],
    );
    let c = client();
    for _ in 0..10 {
        let r = get(&c, &w.url("/h"), &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["version"], "HTTP/2.0");
    }
    assert!(
        up.connections.load(Ordering::SeqCst) <= 2,
        "h2 connections are shared"
    );
}
