//! TLS termination: the routing table's certificates, chosen by SNI at each handshake.
//!
//! Certificates belong to the routing table, so a config push changes them for the next
//! handshake without a restart; connections already open keep the certificate they got.
//! A certificate with `client_validation` gets a server configuration of its own, chosen
//! after the ClientHello, that asks for a client certificate (mutual TLS).

pub mod client_cert;
pub mod client_hello;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, NoClientAuth, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use crate::config::Certificate;
pub use client_cert::{ClientCheck, PeerCert};

/// The crypto provider every TLS object of the proxy is built with (ring).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Parses a certificate's PEM chain and key and checks that they belong together.
///
/// On error, returns the offending field (`cert` or `key`) and what is wrong with it.
pub fn parse_certificate(c: &Certificate) -> Result<CertifiedKey, (&'static str, String)> {
    parse_cert_and_key(&c.cert, &c.key)
}

/// Parses a PEM certificate chain and its PEM key (a served or a client certificate) and
/// checks that they belong together.
///
/// On error, returns the offending part (`cert` or `key`) and what is wrong with it.
pub fn parse_cert_and_key(cert: &str, key: &str) -> Result<CertifiedKey, (&'static str, String)> {
    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            (
                "cert",
                format!("not a PEM certificate chain: {}", pem_error(&e)),
            )
        })?;
    if chain.is_empty() {
        return Err(("cert", "no `BEGIN CERTIFICATE` block".to_string()));
    }
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| {
        (
            "key",
            format!(
                "not a PEM private key (PKCS#8, PKCS#1 or SEC1): {}",
                pem_error(&e)
            ),
        )
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => (
            "key",
            "does not match the certificate's public key".to_string(),
        ),
        rustls::Error::General(m) => ("key", format!("unusable private key: {m}")),
        e => ("cert", format!("unusable certificate: {e}")),
    })
}

/// What is wrong with a PEM text, in words that never quote it: the parser's own messages
/// carry the offending line, which for a key with lost newlines is the whole key.
pub fn pem_error(e: &pem::Error) -> &'static str {
    match e {
        pem::Error::MissingSectionEnd { .. } => {
            "a BEGIN line without its END line (were the newlines lost?)"
        }
        pem::Error::IllegalSectionStart { .. } => "a malformed BEGIN line",
        pem::Error::Base64Decode(_) => "the text between BEGIN and END is not base64",
        pem::Error::NoItemsFound => "no PEM block of the expected kind",
        pem::Error::SectionTooLarge => "a PEM block larger than 256 MB",
        _ => "unreadable PEM",
    }
}

/// One served certificate, with the server configuration of its handshakes when they ask for
/// a client certificate.
struct Served {
    key: Arc<CertifiedKey>,
    /// `Some` for a certificate with `client_validation`: its own configuration, built once
    /// per table, whose verifier checks the client's certificate.
    mutual: Option<(Arc<ServerConfig>, Arc<ClientCheck>)>,
}

/// The certificates of one routing table, indexed by server name.
#[derive(Default)]
pub struct CertStore {
    exact: HashMap<String, Arc<Served>>,
    /// `*.example.com` stored as `example.com`: matches exactly one more label.
    wildcard: HashMap<String, Arc<Served>>,
    /// A certificate without `snis`: served when nothing else matches (or no SNI was sent).
    default: Option<Arc<Served>>,
    /// The checks of certificates with `client_validation`, by certificate id.
    checks: HashMap<String, Arc<ClientCheck>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("exact", &self.exact.len())
            .field("wildcard", &self.wildcard.len())
            .field("default", &self.default.is_some())
            .finish()
    }
}

impl CertStore {
    /// Indexes validated certificates; for a name listed twice the first certificate wins.
    pub fn new(certs: &[Certificate]) -> Result<CertStore, (usize, &'static str, String)> {
        let mut store = CertStore::default();
        for (i, c) in certs.iter().enumerate() {
            let key = Arc::new(parse_certificate(c).map_err(|(f, m)| (i, f, m))?);
            let mutual = match &c.client_validation {
                None => None,
                Some(v) => {
                    let check = Arc::new(ClientCheck::new(&c.id, v).map_err(|(f, m)| (i, f, m))?);
                    let verifier = check.verifier().map_err(|(f, m)| (i, f, m))?;
                    let resolver = Resolver({
                        let key = key.clone();
                        move |_: Option<&str>| Some(key.clone())
                    });
                    let config = Arc::new(server_config_with(verifier, Arc::new(resolver)));
                    store.checks.insert(c.id.clone(), check.clone());
                    Some((config, check))
                }
            };
            let served = Arc::new(Served { key, mutual });
            if c.snis.is_empty() && store.default.is_none() {
                store.default = Some(served.clone());
            }
            for sni in &c.snis {
                let sni = sni.to_ascii_lowercase();
                let (map, name) = match sni.strip_prefix("*.") {
                    Some(suffix) => (&mut store.wildcard, suffix.to_string()),
                    None => (&mut store.exact, sni),
                };
                map.entry(name).or_insert_with(|| served.clone());
            }
        }
        Ok(store)
    }

    /// Whether the table has no certificates at all.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.default.is_none()
    }

    /// The certificate for a server name: exact match, then `*.` wildcard, then the default.
    pub fn find(&self, server_name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        self.served(server_name).map(|s| s.key.clone())
    }

    /// The server configuration of a handshake for `server_name` when its certificate asks
    /// for a client certificate, with what that handshake checks; `None` means the shared
    /// configuration (no client certificate asked for).
    pub fn mutual_config(
        &self,
        server_name: Option<&str>,
    ) -> Option<(Arc<ServerConfig>, Arc<ClientCheck>)> {
        self.served(server_name).and_then(|s| s.mutual.clone())
    }

    /// The check of the certificate with id `certificate`, when it asks for client
    /// certificates.
    pub fn client_check(&self, certificate: &str) -> Option<&Arc<ClientCheck>> {
        self.checks.get(certificate)
    }

    fn served(&self, server_name: Option<&str>) -> Option<&Arc<Served>> {
        self.find_named(server_name).or(self.default.as_ref())
    }

    fn find_named(&self, server_name: Option<&str>) -> Option<&Arc<Served>> {
        let found = server_name.and_then(|name| {
            let lower;
            let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                lower = name.to_ascii_lowercase();
                lower.as_str()
            } else {
                name
            };
            let name = name.trim_end_matches('.');
            self.exact.get(name).or_else(|| {
                let (_, suffix) = name.split_once('.')?;
                self.wildcard.get(suffix)
            })
        });
        found
    }
}

/// The trusted CAs of a PEM bundle (at least one certificate).
pub fn parse_roots(pem: &str) -> Result<RootCertStore, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate bundle: {}", pem_error(&e)))?;
    if certs.is_empty() {
        return Err("no `BEGIN CERTIFICATE` block".into());
    }
    let mut roots = RootCertStore::empty();
    for (i, cert) in certs.into_iter().enumerate() {
        roots
            .add(cert)
            .map_err(|e| format!("certificate {} is unusable: {e}", i + 1))?;
    }
    Ok(roots)
}

/// Chooses a certificate per handshake from whatever the current routing table holds.
pub struct Resolver<F>(pub F);

impl<F> std::fmt::Debug for Resolver<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

impl<F> ResolvesServerCert for Resolver<F>
where
    F: Fn(Option<&str>) -> Option<Arc<CertifiedKey>> + Send + Sync,
{
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        (self.0)(hello.server_name())
    }
}

/// A server configuration that takes its certificates from `resolve` and offers h2 and HTTP/1.1.
pub fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> ServerConfig {
    server_config_with(Arc::new(NoClientAuth), resolver)
}

fn server_config_with(
    verifier: Arc<dyn ClientCertVerifier>,
    resolver: Arc<dyn ResolvesServerCert>,
) -> ServerConfig {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// A server certificate verifier that accepts any certificate, for `verify: false`: the
/// handshake's signatures are still checked (with the provider's algorithms), so the peer must
/// at least hold the key of the certificate it shows.
#[derive(Debug)]
pub struct AcceptAnyServerCert;

impl rustls::client::danger::ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT_A: &str = include_str!("../../tests/fixtures/tls/a.example.test.crt");
    const KEY_A: &str = include_str!("../../tests/fixtures/tls/a.example.test.key");
    const CERT_WILD: &str = include_str!("../../tests/fixtures/tls/wild.example.test.crt");
    const KEY_WILD: &str = include_str!("../../tests/fixtures/tls/wild.example.test.key");

    fn cert(id: &str, cert: &str, key: &str, snis: &[&str]) -> Certificate {
        Certificate {
            id: id.into(),
            cert: cert.into(),
            key: key.into(),
            snis: snis.iter().map(|s| s.to_string()).collect(),
            client_validation: None,
        }
    }

    #[test]
    fn parses_and_rejects() {
        assert!(parse_certificate(&cert("a", CERT_A, KEY_A, &[])).is_ok());
        let mismatch = parse_certificate(&cert("a", CERT_A, KEY_WILD, &[])).unwrap_err();
        assert_eq!(mismatch.0, "key");
        assert!(mismatch.1.contains("does not match"), "{}", mismatch.1);
        let no_cert = parse_certificate(&cert("a", "hello", KEY_A, &[])).unwrap_err();
        assert_eq!(no_cert.0, "cert");
        let no_key = parse_certificate(&cert("a", CERT_A, CERT_A, &[])).unwrap_err();
        assert_eq!(no_key.0, "key");
        // A key whose newlines were lost (a folded YAML scalar): the message must not quote it.
        for mangled in [KEY_A.replace('\n', " "), KEY_A.replace('\n', "\\n")] {
            let e = parse_certificate(&cert("a", CERT_A, &mangled, &[])).unwrap_err();
            assert_eq!(e.0, "key");
            for line in KEY_A.lines().filter(|l| !l.starts_with("-----")) {
                assert!(!e.1.contains(&line[..16]), "leaks the key: {}", e.1);
            }
            assert!(!e.1.contains("[4"), "leaks bytes: {}", e.1);
        }
    }

    #[test]
    fn chooses_by_server_name() {
        let store = CertStore::new(&[
            cert("a", CERT_A, KEY_A, &["a.example.test"]),
            cert("w", CERT_WILD, KEY_WILD, &["*.example.test"]),
        ])
        .unwrap();
        let a = store.find(Some("a.example.test")).unwrap();
        let w = store.find(Some("b.example.test")).unwrap();
        assert!(!Arc::ptr_eq(&a, &w));
        assert!(Arc::ptr_eq(
            &a,
            &store.find(Some("A.Example.Test.")).unwrap()
        ));
        // A wildcard covers exactly one label.
        assert!(store.find(Some("x.b.example.test")).is_none());
        assert!(store.find(Some("example.test")).is_none());
        assert!(store.find(None).is_none());
    }

    #[test]
    fn default_certificate_and_first_wins() {
        let store = CertStore::new(&[
            cert("a", CERT_A, KEY_A, &["same.example.test"]),
            cert("w", CERT_WILD, KEY_WILD, &["same.example.test"]),
            cert("d", CERT_WILD, KEY_WILD, &[]),
        ])
        .unwrap();
        let first = store.find(Some("same.example.test")).unwrap();
        let a_only = CertStore::new(&[cert("a", CERT_A, KEY_A, &[])]).unwrap();
        assert_eq!(first.cert, a_only.find(None).unwrap().cert);
        let d = store.find(Some("other.test")).unwrap();
        assert_eq!(d.cert[0], store.find(None).unwrap().cert[0]);
        assert_ne!(d.cert[0], first.cert[0]);
    }

    #[test]
    fn certificates_asking_for_client_certificates_get_their_own_configuration() {
        let mut mutual = cert("m", CERT_A, KEY_A, &["a.example.test"]);
        mutual.client_validation = Some(crate::config::ClientValidation {
            ca: CERT_WILD.into(),
            ..Default::default()
        });
        let store = CertStore::new(&[
            mutual.clone(),
            cert("w", CERT_WILD, KEY_WILD, &["*.example.test"]),
        ])
        .unwrap();
        let (_, check) = store.mutual_config(Some("a.example.test")).unwrap();
        assert!(Arc::ptr_eq(&check, store.client_check("m").unwrap()));
        assert_eq!(
            check.validation,
            *mutual.client_validation.as_ref().unwrap()
        );
        assert!(store.mutual_config(Some("b.example.test")).is_none());
        assert!(store.mutual_config(None).is_none());
        assert!(store.client_check("w").is_none());

        mutual.client_validation.as_mut().unwrap().ca = "not a pem".into();
        let Err((i, field, m)) = CertStore::new(&[mutual]) else {
            panic!("a CA that is not PEM is refused");
        };
        assert_eq!((i, field), (0, "client_validation.ca"));
        assert!(m.contains("BEGIN CERTIFICATE"), "{m}");
    }
}
