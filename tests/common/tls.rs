//! An HTTPS client for the tests: trusts only the test CA, reports the certificate served.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;

use super::Resp;

/// The test certificates (`tests/fixtures/tls/`): PEM text of `NAME.crt` or `NAME.key`.
pub fn fixture(file: &str) -> String {
    let path = format!("{}/tests/fixtures/tls/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The DER of the first certificate in a PEM fixture.
pub fn fixture_der(file: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(fixture(file).as_bytes()).expect("PEM certificate")
}

/// What an HTTPS exchange showed: the certificate served, the ALPN protocol and the response.
pub struct TlsResp {
    pub peer_cert: CertificateDer<'static>,
    pub alpn: Option<Vec<u8>>,
    pub resp: Resp,
}

/// A TLS client trusting the fixtures' CA, offering `alpn`.
pub fn connector(alpn: &[&str]) -> tokio_rustls::TlsConnector {
    connector_trusting(fixture_der("ca.crt"), alpn)
}

/// A TLS client trusting `ca`, offering `alpn`.
pub fn connector_trusting(
    ca: CertificateDer<'static>,
    alpn: &[&str],
) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A TLS client trusting `ca` that presents `client` (a certificate chain and its key, PEM)
/// when the server asks for a certificate, or no certificate, and sends a server name (SNI)
/// when `sni`; the flag it returns says whether a server asked for a certificate.
pub fn connector_presenting(
    ca: CertificateDer<'static>,
    client: Option<(&str, &str)>,
    sni: bool,
) -> (tokio_rustls::TlsConnector, Arc<AtomicBool>) {
    connector_presenting_alpn(ca, client, sni, &[])
}

/// [`connector_presenting`] offering `alpn`.
pub fn connector_presenting_alpn(
    ca: CertificateDer<'static>,
    client: Option<(&str, &str)>,
    sni: bool,
    alpn: &[&str],
) -> (tokio_rustls::TlsConnector, Arc<AtomicBool>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = client.map(|(cert, key)| {
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        Arc::new(CertifiedKey::from_der(chain, key, &provider).unwrap())
    });
    let asked = Arc::new(AtomicBool::new(false));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(Presenting {
            key,
            asked: asked.clone(),
        }));
    config.enable_sni = sni;
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    (tokio_rustls::TlsConnector::from(Arc::new(config)), asked)
}

/// Presents its certificate whatever CAs the server names, noting that it was asked.
#[derive(Debug)]
struct Presenting {
    key: Option<Arc<CertifiedKey>>,
    asked: Arc<AtomicBool>,
}

impl rustls::client::ResolvesClientCert for Presenting {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::SeqCst);
        self.key.clone()
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// `GET path` over TLS to 127.0.0.1:`port` with SNI and Host `server_name`, offering `alpn`.
///
/// `Err` carries the handshake error (for example, no certificate for that name).
pub async fn get(
    port: u16,
    server_name: &str,
    path: &str,
    alpn: &[&str],
) -> Result<TlsResp, String> {
    get_with_host(port, server_name, server_name, path, alpn).await
}

/// [`get`] with another `Host` (`:authority`) than the server name of the handshake.
pub async fn get_with_host(
    port: u16,
    server_name: &str,
    host: &str,
    path: &str,
    alpn: &[&str],
) -> Result<TlsResp, String> {
    exchange(&connector(alpn), port, server_name, host, path).await
}

/// A TLS connection to 127.0.0.1:`port` through `connector`, with server name
/// `server_name` (bounded wait); `Err` says why the handshake failed.
pub async fn handshake(
    connector: &tokio_rustls::TlsConnector,
    port: u16,
    server_name: &str,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// [`get_with_host`] through `connector`.
pub async fn exchange(
    connector: &tokio_rustls::TlsConnector,
    port: u16,
    server_name: &str,
    host: &str,
    path: &str,
) -> Result<TlsResp, String> {
    let tls = handshake(connector, port, server_name).await?;
    let (_, session) = tls.get_ref();
    let peer_cert = session.peer_certificates().expect("server certificate")[0]
        .clone()
        .into_owned();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let req = http::Request::get(path)
        .header("host", host)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let io = TokioIo::new(tls);
    let resp = if alpn.as_deref() == Some(b"h2") {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = req;
        *req.uri_mut() = format!("https://{host}{path}").parse().unwrap();
        send.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| e.to_string())?
    };
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(TlsResp {
        peer_cert,
        alpn,
        resp: Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        },
    })
}

/// What a test TLS backend ([`tls_backend`]) saw of one connection.
pub struct BackendSaw<'a> {
    /// The server name the client sent.
    pub sni: Option<&'a str>,
    /// The path of its first request.
    pub path: &'a str,
    /// A PROXY protocol v1 line sent before the TLS handshake, without its CRLF.
    pub proxy_line: Option<&'a str>,
}

/// A TLS backend on 127.0.0.1 serving `config`: it reads a PROXY protocol v1 line when the
/// connection starts with one, ends TLS, and answers the first request 200 with the body
/// `answer` makes of what it saw. Returns its port.
pub fn tls_backend(
    config: rustls::ServerConfig,
    answer: impl Fn(&BackendSaw<'_>) -> String + Send + Sync + Copy + 'static,
) -> u16 {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        while let Ok((mut tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let mut first = [0u8; 5];
                let _ = tcp.peek(&mut first).await;
                let mut line = Vec::new();
                if &first == b"PROXY" {
                    while !line.ends_with(b"\r\n") && line.len() < 120 {
                        let Ok(b) = tcp.read_u8().await else { return };
                        line.push(b);
                    }
                }
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let n = tls.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let line = String::from_utf8_lossy(&line).trim_end().to_string();
                let body = answer(&BackendSaw {
                    sni: tls.get_ref().1.server_name(),
                    path: head.split(' ').nth(1).unwrap_or_default(),
                    proxy_line: (!line.is_empty()).then_some(line.as_str()),
                });
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}
