//! Upstream TLS against rustls servers on 127.0.0.1, with certificates made by rcgen for each
//! test: verification, SNI, client certificates, ALPN, verify depth, and the pool key.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{checkout, Added, Alpn, ConnectError, PoolKey, TlsClient, TlsSettings, UpstreamBody};
use crate::tls::provider;

const NAME: &str = "upstream.test";
const TIMEOUT: Duration = Duration::from_secs(5);

/// A CA that signs certificates.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(cn: &str) -> Ca {
        Ca::signed(cn, None)
    }

    /// A CA, self-signed or signed by `parent` (an intermediate).
    fn signed(cn: &str, parent: Option<&Ca>) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let issuer = match parent {
            None => CertifiedIssuer::self_signed(params, key).unwrap(),
            Some(p) => CertifiedIssuer::signed_by(params, key, &*p.issuer).unwrap(),
        };
        Ca { issuer }
    }

    fn pem(&self) -> Arc<str> {
        self.issuer.pem().into()
    }

    fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// A leaf certificate for `names` with the given extended key usage.
    fn leaf(&self, names: &[&str], eku: ExtendedKeyUsagePurpose) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, "leaf");
        params.extended_key_usages = vec![eku];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &*self.issuer).unwrap();
        Leaf {
            der: cert.der().clone(),
            pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        }
    }

    fn server(&self, names: &[&str]) -> Leaf {
        self.leaf(names, ExtendedKeyUsagePurpose::ServerAuth)
    }
}

/// A certificate and its key, in both encodings.
struct Leaf {
    der: CertificateDer<'static>,
    pem: String,
    key_der: Vec<u8>,
    key_pem: String,
}

impl Leaf {
    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::try_from(self.key_der.clone()).unwrap()
    }
}

/// How the test server behaves once the handshake is done.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Answers every HTTP/1.1 request `200 ok`, keeping the connection.
    Http,
    /// Answers one request, then closes (with close_notify).
    CloseAfterOne,
    /// Answers one request with a body that ends with the connection, closed without
    /// close_notify (as many servers do).
    Unclean,
    /// Answers `101` followed by `hello`, then echoes.
    Upgrade,
    /// Speaks HTTP/2 (hyper's server), answering `200 h2`.
    H2,
}

/// What the server saw of one handshake.
#[derive(Debug)]
struct Seen {
    sni: Option<String>,
    alpn: Option<Vec<u8>>,
}

struct Server {
    addr: SocketAddr,
    /// One entry per handshake: what was seen, or why it failed.
    seen: mpsc::UnboundedReceiver<Result<Seen, String>>,
}

impl Server {
    async fn next(&mut self) -> Result<Seen, String> {
        tokio::time::timeout(TIMEOUT, self.seen.recv())
            .await
            .expect("no handshake")
            .expect("server gone")
    }

    fn target(&self) -> Arc<str> {
        self.addr.to_string().into()
    }
}

/// The test server's configuration: `chain` and its key, optionally requiring client
/// certificates from `client_ca`, offering `alpn`.
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<&Ca>,
    alpn: &[&[u8]],
) -> ServerConfig {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(ca.der()).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    config
}

async fn serve(config: ServerConfig, mode: Mode) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (tx, seen) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let conn = tls.get_ref().1;
                let _ = tx.send(Ok(Seen {
                    sni: conn.server_name().map(str::to_string),
                    alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
                }));
                if mode == Mode::H2 {
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(Bytes::from_static(b"h2")),
                        ))
                    });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
                    return;
                }
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 64 * 1024];
                loop {
                    // One request head, and a body of its Content-Length if any (counted).
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let length = head
                        .split("\r\n")
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map(|n| n.parse::<usize>().unwrap());
                    buf.drain(..end);
                    if let Some(length) = length {
                        while buf.len() < length {
                            match tls.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let count = length.to_string();
                        buf.drain(..length);
                        let res = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{count}",
                            count.len()
                        );
                        if tls.write_all(res.as_bytes()).await.is_err() {
                            return;
                        }
                        let _ = tls.flush().await;
                        continue;
                    }
                    if mode == Mode::Upgrade {
                        let head = b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\n\
                                     upgrade: echo\r\n\r\nhello";
                        tls.write_all(head).await.unwrap();
                        tls.flush().await.unwrap();
                        while let Ok(n @ 1..) = tls.read(&mut chunk).await {
                            tls.write_all(&chunk[..n]).await.unwrap();
                            tls.flush().await.unwrap();
                        }
                        return;
                    }
                    if mode == Mode::Unclean {
                        let res = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nbye";
                        let _ = tls.write_all(res).await;
                        let _ = tls.flush().await;
                        // Dropped: TCP closes, no close_notify.
                        return;
                    }
                    let res = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if tls.write_all(res).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                    if mode == Mode::CloseAfterOne {
                        let _ = tls.shutdown().await;
                        return;
                    }
                }
            });
        }
    });
    Server { addr, seen }
}

/// A server with a certificate for `upstream.test` (and 127.0.0.1) signed by `ca`.
async fn serve_signed_by(ca: &Ca, mode: Mode, alpn: &[&[u8]]) -> Server {
    let leaf = ca.server(&[NAME, "127.0.0.1"]);
    serve(
        server_config(vec![leaf.der.clone()], leaf.key(), None, alpn),
        mode,
    )
    .await
}

fn settings(ca: Option<&Ca>) -> TlsSettings {
    TlsSettings {
        sni: Some(NAME.into()),
        verify: true,
        verify_depth: None,
        ca_pem: ca.map(Ca::pem),
        client_cert: None,
        alpn: Alpn::Http11,
        names: Vec::new(),
    }
}

fn key(server: &Server, settings: TlsSettings) -> PoolKey {
    PoolKey {
        target: server.target(),
        h2: settings.alpn == Alpn::H2,
        tls: Some(Arc::new(TlsClient::new(settings).unwrap())),
    }
}

/// Checks out a connection for `key`, sends `GET /` and reads the body to its end (which
/// returns an HTTP/1.1 connection to the pool). Returns whether the connection was reused.
async fn get(key: &PoolKey) -> Result<(bool, Bytes), String> {
    let conn = checkout(key, TIMEOUT).await.map_err(|e| e.to_string())?;
    let reused = conn.reused;
    let uri = if key.h2 {
        format!("https://{NAME}/")
    } else {
        "/".to_string()
    };
    let mut req = http::Request::get(uri)
        .header(http::header::HOST, NAME)
        .body(UpstreamBody::empty())
        .unwrap();
    if key.h2 {
        *req.version_mut() = http::Version::HTTP_2;
        req.headers_mut().remove(http::header::HOST);
    }
    let res = conn
        .send(req, &Added::default(), TIMEOUT)
        .await
        .map_err(|e| e.error.to_string())?;
    assert_eq!(res.status(), 200);
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((reused, body))
}

fn tls_error(r: Result<(bool, Bytes), String>) -> String {
    match r {
        Err(e) => e,
        Ok(_) => panic!("the handshake succeeded"),
    }
}

#[tokio::test]
async fn verified_handshake_sends_sni_and_round_trips() {
    let ca = Ca::new("Weir test CA");
    let mut server = serve_signed_by(&ca, Mode::Http, &[b"http/1.1"]).await;
    let key = key(&server, settings(Some(&ca)));
    let (reused, body) = get(&key).await.unwrap();
    assert!(!reused);
    assert_eq!(&body[..], b"ok");
    let seen = server.next().await.unwrap();
    assert_eq!(seen.sni.as_deref(), Some(NAME));
    assert_eq!(seen.alpn.as_deref(), Some(&b"http/1.1"[..]));
    // The connection went back to the pool and carries the next request.
    let (reused, _) = get(&key).await.unwrap();
    assert!(reused, "a TLS connection was not pooled");
}

#[tokio::test]
async fn ip_target_without_sni_is_verified_against_the_address() {
    let ca = Ca::new("Weir test CA");
    let mut server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let key = key(
        &server,
        TlsSettings {
            sni: None,
            ..settings(Some(&ca))
        },
    );
    get(&key).await.unwrap();
    // No SNI for an IP address (RFC 6066), and the certificate matched 127.0.0.1.
    assert_eq!(server.next().await.unwrap().sni, None);
}

#[tokio::test]
async fn wrong_ca_is_refused_with_rustls_reason() {
    let ca = Ca::new("Weir test CA");
    let other = Ca::new("Another CA");
    let mut server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let key = key(&server, settings(Some(&other)));
    let e = checkout(&key, TIMEOUT)
        .await
        .err()
        .expect("handshake succeeded");
    assert!(matches!(e, ConnectError::Tls(..)), "{e:?}");
    let message = e.to_string();
    let expected = format!("TLS handshake with {} failed: ", server.addr);
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert!(server.next().await.is_err(), "the server saw a handshake");
}

#[tokio::test]
async fn name_mismatch_is_refused() {
    let ca = Ca::new("Weir test CA");
    let server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let key = key(
        &server,
        TlsSettings {
            sni: Some("other.test".into()),
            ..settings(Some(&ca))
        },
    );
    let e = tls_error(get(&key).await);
    assert!(e.contains("not valid for name"), "{e}");
}

#[tokio::test]
async fn verify_off_accepts_an_unknown_ca() {
    let ca = Ca::new("Weir test CA");
    let other = Ca::new("Another CA");
    let mut server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let key = key(
        &server,
        TlsSettings {
            verify: false,
            sni: Some("any.name.test".into()),
            ..settings(Some(&other))
        },
    );
    let (_, body) = get(&key).await.unwrap();
    assert_eq!(&body[..], b"ok");
    assert_eq!(
        server.next().await.unwrap().sni.as_deref(),
        Some("any.name.test")
    );
}

#[tokio::test]
async fn public_roots_refuse_a_private_ca() {
    // No `ca_pem`: the built-in public roots, which know nothing of a test CA.
    let ca = Ca::new("Weir test CA");
    let server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let key = key(&server, settings(None));
    let e = tls_error(get(&key).await);
    assert!(e.contains("UnknownIssuer"), "{e}");
}

#[tokio::test]
async fn client_certificate_is_shown_when_required() {
    let ca = Ca::new("Weir test CA");
    let leaf = ca.server(&[NAME]);
    let config = server_config(vec![leaf.der.clone()], leaf.key(), Some(&ca), &[]);
    let mut server = serve(config, Mode::Http).await;
    let client = ca.leaf(&[], ExtendedKeyUsagePurpose::ClientAuth);

    let with = key(
        &server,
        TlsSettings {
            client_cert: Some((client.pem.into(), client.key_pem.into())),
            ..settings(Some(&ca))
        },
    );
    let (_, body) = get(&with).await.unwrap();
    assert_eq!(&body[..], b"ok");
    server.next().await.unwrap();

    // Without one the server refuses the handshake. With TLS 1.3 the client has finished its
    // part before the server judges it, so the refusal may only show on the first exchange.
    let without = key(&server, settings(Some(&ca)));
    assert!(get(&without).await.is_err(), "served without a certificate");
    let refused = server.next().await.unwrap_err();
    assert!(refused.contains("no certificates"), "{refused}");
}

#[tokio::test]
async fn keys_differing_only_in_tls_never_share_connections() {
    let ca = Ca::new("Weir test CA");
    let mut server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let verified = key(&server, settings(Some(&ca)));
    let unverified = key(
        &server,
        TlsSettings {
            verify: false,
            ..settings(Some(&ca))
        },
    );
    assert_eq!(verified.target, unverified.target);
    assert_ne!(verified, unverified);

    assert!(!get(&verified).await.unwrap().0);
    // One idle connection to this target now, made with the other settings: not taken.
    assert!(
        !get(&unverified).await.unwrap().0,
        "shared across TLS settings"
    );
    assert!(get(&verified).await.unwrap().0);
    assert!(get(&unverified).await.unwrap().0);
    // Two handshakes in all.
    server.next().await.unwrap();
    server.next().await.unwrap();
    assert!(server.seen.try_recv().is_err());

    // The same settings built again (another routing table) are the same key.
    let rebuilt = key(&server, settings(Some(&ca)));
    assert!(!Arc::ptr_eq(
        rebuilt.tls.as_ref().unwrap(),
        verified.tls.as_ref().unwrap()
    ));
    assert_eq!(rebuilt, verified);
    assert!(get(&rebuilt).await.unwrap().0);
}

#[tokio::test]
async fn settings_that_differ_make_different_clients() {
    let ca = Ca::new("Weir test CA");
    let client = ca.leaf(&[], ExtendedKeyUsagePurpose::ClientAuth);
    let base = settings(Some(&ca));
    let variants = [
        TlsSettings {
            sni: Some("other.test".into()),
            ..base.clone()
        },
        TlsSettings {
            verify: false,
            ..base.clone()
        },
        TlsSettings {
            verify_depth: Some(0),
            ..base.clone()
        },
        TlsSettings {
            verify_depth: Some(1),
            ..base.clone()
        },
        TlsSettings {
            ca_pem: None,
            ..base.clone()
        },
        TlsSettings {
            client_cert: Some((client.pem.into(), client.key_pem.into())),
            ..base.clone()
        },
        TlsSettings {
            alpn: Alpn::H2,
            ..base.clone()
        },
        base,
    ];
    let clients: Vec<TlsClient> = variants
        .iter()
        .map(|s| TlsClient::new(s.clone()).unwrap())
        .collect();
    for (i, a) in clients.iter().enumerate() {
        for (j, b) in clients.iter().enumerate() {
            assert_eq!(a == b, i == j, "{i} vs {j}");
        }
    }
}

#[tokio::test]
async fn alpn_h2_speaks_http2_over_tls() {
    let ca = Ca::new("Weir test CA");
    let mut server = serve_signed_by(&ca, Mode::H2, &[b"h2", b"http/1.1"]).await;
    let key = key(
        &server,
        TlsSettings {
            alpn: Alpn::H2,
            ..settings(Some(&ca))
        },
    );
    assert!(key.h2);
    let (_, body) = get(&key).await.unwrap();
    assert_eq!(&body[..], b"h2");
    assert_eq!(
        server.next().await.unwrap().alpn.as_deref(),
        Some(&b"h2"[..])
    );
    // HTTP/2 connections are shared: the next request rides the same one.
    assert!(get(&key).await.unwrap().0);
}

#[tokio::test]
async fn alpn_h2_refuses_a_server_that_does_not_pick_it() {
    let ca = Ca::new("Weir test CA");
    // A server without ALPN answers nothing: HTTP/2 cannot be assumed.
    let server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let h2 = TlsSettings {
        alpn: Alpn::H2,
        ..settings(Some(&ca))
    };
    let e = tls_error(get(&key(&server, h2.clone())).await);
    assert!(e.contains("did not agree to HTTP/2"), "{e}");
    // A server offering only HTTP/1.1 refuses the handshake itself.
    let server = serve_signed_by(&ca, Mode::Http, &[b"http/1.1"]).await;
    let e = tls_error(get(&key(&server, h2)).await);
    assert!(e.starts_with("TLS handshake with"), "{e}");
}

#[tokio::test]
async fn verify_depth_counts_intermediates() {
    let root = Ca::new("Weir test root");
    let intermediate = Ca::signed("Weir test intermediate", Some(&root));
    let leaf = intermediate.server(&[NAME]);
    let chain = vec![leaf.der.clone(), intermediate.der()];
    let server = serve(server_config(chain, leaf.key(), None, &[]), Mode::Http).await;
    let depth = |d: Option<u8>| {
        key(
            &server,
            TlsSettings {
                verify_depth: d,
                ..settings(Some(&root))
            },
        )
    };
    let e = tls_error(get(&depth(Some(0))).await);
    assert!(e.contains("verify_depth"), "{e}");
    assert!(e.starts_with("TLS handshake with"), "{e}");
    get(&depth(Some(1))).await.unwrap();
    get(&depth(None)).await.unwrap();

    // A server that sends its root along presents two certificates but the verified chain
    // goes through one intermediate: depth 1 still accepts it, as OpenSSL does.
    let chain = vec![leaf.der.clone(), intermediate.der(), root.der()];
    let server = serve(server_config(chain, leaf.key(), None, &[]), Mode::Http).await;
    let key = key(
        &server,
        TlsSettings {
            verify_depth: Some(1),
            ..settings(Some(&root))
        },
    );
    get(&key).await.unwrap();
}

#[tokio::test]
async fn idle_tls_connection_closed_by_the_upstream_is_not_reused() {
    let ca = Ca::new("Weir test CA");
    let mut server = serve_signed_by(&ca, Mode::CloseAfterOne, &[]).await;
    let key = key(&server, settings(Some(&ca)));
    assert!(!get(&key).await.unwrap().0);
    server.next().await.unwrap();
    // Let the close_notify and FIN arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (reused, _) = get(&key).await.unwrap();
    assert!(!reused, "took a connection the upstream had closed");
}

#[tokio::test]
async fn large_request_body_goes_out_whole_over_tls() {
    // Several megabytes: more than rustls buffers and the socket takes at once, so the
    // upload's writes are partial and what TLS holds back must be flushed.
    let ca = Ca::new("Weir test CA");
    let server = serve_signed_by(&ca, Mode::Http, &[]).await;
    let key = key(&server, settings(Some(&ca)));
    for round in 0..2 {
        let conn = checkout(&key, TIMEOUT).await.unwrap();
        assert_eq!(conn.reused, round == 1);
        let body = Bytes::from(vec![b'x'; 4 << 20]);
        let req = http::Request::post("/")
            .header(http::header::HOST, NAME)
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(UpstreamBody::full(body))
            .unwrap();
        // Bytes held back would leave both ends waiting: bounded, it fails instead.
        let exchange = async {
            let res = conn.send(req, &Added::default(), TIMEOUT).await;
            let res = res.map_err(|e| e.error.to_string()).unwrap();
            res.into_body().collect().await.unwrap().to_bytes()
        };
        let got = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .expect("the upload stalled");
        assert_eq!(&got[..], (4usize << 20).to_string().as_bytes());
    }
}

#[tokio::test]
async fn body_ended_by_an_unclean_close_is_whole() {
    let ca = Ca::new("Weir test CA");
    let server = serve_signed_by(&ca, Mode::Unclean, &[]).await;
    let key = key(&server, settings(Some(&ca)));
    let (_, body) = get(&key).await.unwrap();
    assert_eq!(&body[..], b"bye");
}

#[tokio::test]
async fn upgraded_tls_connection_tunnels() {
    let ca = Ca::new("Weir test CA");
    let server = serve_signed_by(&ca, Mode::Upgrade, &[]).await;
    let key = key(&server, settings(Some(&ca)));
    let conn = checkout(&key, TIMEOUT).await.unwrap();
    let req = http::Request::get("/")
        .header(http::header::HOST, NAME)
        .header(http::header::CONNECTION, "upgrade")
        .header(http::header::UPGRADE, "echo")
        .body(UpstreamBody::empty())
        .unwrap();
    let mut res = conn
        .send(req, &Added::default(), TIMEOUT)
        .await
        .map_err(|e| e.error.to_string())
        .unwrap();
    assert_eq!(res.status(), 101);
    let mut up = res
        .body_mut()
        .take_upgraded()
        .expect("no upgraded connection");
    let mut got = up.read_ahead.to_vec();
    let mut buf = [0u8; 64];
    while got.len() < 5 {
        let n = up.stream.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(&got[..], b"hello");
    up.stream.write_all(b"ping").await.unwrap();
    up.stream.flush().await.unwrap();
    let mut echo = [0u8; 4];
    up.stream.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"ping");
}

#[test]
fn bad_settings_name_the_field() {
    let ca = Ca::new("Weir test CA");
    let client = ca.leaf(&[], ExtendedKeyUsagePurpose::ClientAuth);
    let other = ca.leaf(&[], ExtendedKeyUsagePurpose::ClientAuth);
    let err = |s: TlsSettings| TlsClient::new(s).expect_err("accepted");
    let base = settings(Some(&ca));
    let e = err(TlsSettings {
        sni: Some("not a name".into()),
        ..base.clone()
    });
    assert!(e.starts_with("sni: "), "{e}");
    let e = err(TlsSettings {
        ca_pem: Some("hello".into()),
        ..base.clone()
    });
    assert!(e.starts_with("ca_certificates: "), "{e}");
    let e = err(TlsSettings {
        client_cert: Some((client.pem.clone().into(), other.key_pem.clone().into())),
        ..base.clone()
    });
    assert!(e.starts_with("client_certificate.key: "), "{e}");
    let e = err(TlsSettings {
        client_cert: Some(("nope".into(), client.key_pem.clone().into())),
        ..base.clone()
    });
    assert!(e.starts_with("client_certificate.cert: "), "{e}");
    for bad in ["not a name", "spiffe://a b/c", "://nothing"] {
        let e = err(TlsSettings {
            names: vec![bad.into()],
            ..base.clone()
        });
        assert!(e.starts_with("subject_alt_names: "), "{bad}: {e}");
    }
    assert!(TlsClient::new(TlsSettings {
        names: vec!["spiffe://a.example/w".into(), "b.example".into()],
        ..base.clone()
    })
    .is_ok());
    // Debug output (logs) never shows a PEM, the client key least of all.
    let with_key = TlsSettings {
        client_cert: Some((client.pem.into(), client.key_pem.clone().into())),
        ..base
    };
    let shown = format!("{:?}", TlsClient::new(with_key).unwrap());
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    assert!(!shown.contains("BEGIN"), "{shown}");
}
