//! TLS towards upstream targets (services with `https` or `grpcs`).
//!
//! A [`TlsClient`] is built once per distinct set of settings when the routing table is
//! compiled (parsing PEMs and root stores costs milliseconds) and shared by every worker; it
//! joins the pool key, so connections made with different settings are never exchanged.
//! Its equality and hash come from a digest of the settings taken at construction, so a pool
//! lookup hashes eight bytes rather than PEM texts.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::io;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore,
    SignatureScheme,
};
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;

use super::pool::ConnectError;
use super::stream::Stream;
use crate::tls::{parse_cert_and_key, provider, AcceptAnyServerCert};

/// The application protocol offered in the handshake (ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alpn {
    /// `http/1.1`; a server that picks none is fine too.
    Http11,
    /// `h2` alone: HTTP/2 is spoken (gRPC needs it), so a server that does not pick it is refused.
    H2,
}

/// How connections to a service's targets are secured; hashable so that the routing table's
/// compiler can build one [`TlsClient`] per distinct settings.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TlsSettings {
    /// Server name sent (SNI) and verified. `None`: the target's host; for an IP address no
    /// SNI is sent and the certificate must name the address.
    pub sni: Option<Arc<str>>,
    /// Verify the target's certificate (chain to a trusted CA, name, validity dates).
    pub verify: bool,
    /// Most intermediate certificates between the target's certificate and a trusted root
    /// (OpenSSL's verify depth); `None`: no limit beyond rustls's own.
    pub verify_depth: Option<u8>,
    /// PEM bundle of the trusted CAs. `None`: the public web's roots (Mozilla's list, built
    /// into the binary so that no image needs a CA bundle).
    pub ca_pem: Option<Arc<str>>,
    /// PEM certificate chain and PEM key shown to targets that ask for a client certificate.
    pub client_cert: Option<(Arc<str>, Arc<str>)>,
    /// The protocol offered; must agree with the pool key's `h2`.
    pub alpn: Alpn,
    /// Names the certificate may carry instead of the server name (any one will do); empty,
    /// the server name itself.
    pub names: Vec<Arc<str>>,
}

/// Without the PEMs: debug output ends up in logs, and the client key is a secret.
impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("sni", &self.sni)
            .field("verify", &self.verify)
            .field("verify_depth", &self.verify_depth)
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_cert", &self.client_cert.is_some())
            .field("alpn", &self.alpn)
            .field("names", &self.names)
            .finish()
    }
}

/// A rustls client configuration for one set of [`TlsSettings`]; compared and hashed by its
/// settings, so that it can be part of a pool key.
pub struct TlsClient {
    settings: TlsSettings,
    /// SHA-256 of every setting: equal digests mean equal settings.
    digest: [u8; 32],
    /// `settings.sni` parsed.
    server_name: Option<ServerName<'static>>,
    config: Arc<ClientConfig>,
}

impl TlsClient {
    /// Builds the configuration for `settings`; the error names the offending field
    /// (`sni`, `ca_certificates`, `client_certificate.cert`, `client_certificate.key`).
    pub fn new(settings: TlsSettings) -> Result<TlsClient, String> {
        let server_name = match &settings.sni {
            Some(sni) => Some(
                ServerName::try_from(sni.to_string())
                    .map_err(|_| format!("sni: {sni:?} is not a DNS name or an IP address"))?,
            ),
            None => None,
        };
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?;
        let builder = if settings.verify {
            let roots = match &settings.ca_pem {
                Some(pem) => Arc::new(
                    crate::tls::parse_roots(pem).map_err(|e| format!("ca_certificates: {e}"))?,
                ),
                None => public_roots(),
            };
            let webpki = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
                .build()
                .map_err(|e| format!("ca_certificates: {e}"))?;
            let verifier: Arc<dyn ServerCertVerifier> = match settings.verify_depth {
                None => webpki,
                Some(max) => Arc::new(DepthLimited {
                    inner: webpki,
                    roots: roots.clone(),
                    max,
                }),
            };
            let verifier = if settings.names.is_empty() {
                verifier
            } else {
                let mut names = Vec::new();
                let mut uris = Vec::new();
                for n in &settings.names {
                    if n.contains("://") {
                        uris.push(check_san_uri(n)?);
                        continue;
                    }
                    names.push(ServerName::try_from(n.to_string()).map_err(|_| {
                        format!(
                            "subject_alt_names: {n:?} is not a DNS name, an IP address or a URI"
                        )
                    })?);
                }
                Arc::new(AnyName {
                    inner: verifier,
                    names,
                    uris,
                    roots,
                    max: settings.verify_depth,
                })
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(verifier)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert))
        };
        let mut config = match &settings.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let key = parse_cert_and_key(cert, key)
                    .map_err(|(part, e)| format!("client_certificate.{part}: {e}"))?;
                builder.with_client_cert_resolver(Arc::new(ClientCert(Arc::new(key))))
            }
        };
        config.alpn_protocols = vec![match settings.alpn {
            Alpn::Http11 => b"http/1.1".to_vec(),
            Alpn::H2 => b"h2".to_vec(),
        }];
        Ok(TlsClient {
            digest: digest(&settings),
            settings,
            server_name,
            config: Arc::new(config),
        })
    }

    /// Does the handshake on a connected socket to `target` (`host:port`); `h2` says HTTP/2
    /// will be spoken, which the server must have agreed to.
    pub async fn handshake(
        &self,
        target: &Arc<str>,
        tcp: TcpStream,
        h2: bool,
    ) -> Result<Stream, ConnectError> {
        let fail = |reason: String| ConnectError::Tls(target.clone(), reason);
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => target_name(target).ok_or_else(|| {
                fail("the target's host is not a valid server name (set `sni`)".into())
            })?,
        };
        let tls = tokio_rustls::TlsConnector::from(self.config.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| fail(reason(&e)))?;
        let agreed_h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        if h2 && !agreed_h2 {
            return Err(fail("the server did not agree to HTTP/2 (ALPN h2)".into()));
        }
        if agreed_h2 && !h2 {
            return Err(fail(
                "the server chose HTTP/2 (ALPN h2) for HTTP/1.1".into(),
            ));
        }
        Ok(Stream::Tls(Box::new(tls)))
    }
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

impl PartialEq for TlsClient {
    fn eq(&self, other: &Self) -> bool {
        // Usually the very same client (one per distinct settings per routing table).
        std::ptr::eq(self, other) || self.digest == other.digest
    }
}

impl Eq for TlsClient {}

impl Hash for TlsClient {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut head = [0u8; 8];
        head.copy_from_slice(&self.digest[..8]);
        state.write_u64(u64::from_le_bytes(head));
    }
}

/// A digest of every setting, each field tagged and length-prefixed so that no two
/// different settings write the same bytes.
fn digest(s: &TlsSettings) -> [u8; 32] {
    fn text(h: &mut Sha256, t: Option<&str>) {
        match t {
            None => h.update([0]),
            Some(t) => {
                h.update([1]);
                h.update((t.len() as u64).to_le_bytes());
                h.update(t.as_bytes());
            }
        }
    }
    let mut h = Sha256::new();
    text(&mut h, s.sni.as_deref());
    h.update([
        u8::from(s.verify),
        u8::from(s.verify_depth.is_some()),
        s.verify_depth.unwrap_or(0),
        match s.alpn {
            Alpn::Http11 => 0,
            Alpn::H2 => 1,
        },
    ]);
    text(&mut h, s.ca_pem.as_deref());
    text(&mut h, s.client_cert.as_ref().map(|c| &*c.0));
    text(&mut h, s.client_cert.as_ref().map(|c| &*c.1));
    h.update((s.names.len() as u64).to_le_bytes());
    for n in &s.names {
        text(&mut h, Some(n));
    }
    h.finalize().into()
}

/// The server name of a `host:port` target: a DNS name, or an IP address (then no SNI).
fn target_name(target: &str) -> Option<ServerName<'static>> {
    let (host, _) = target.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_string()).ok()
}

/// What went wrong in a handshake, in rustls's words.
fn reason(e: &io::Error) -> String {
    let rustls = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
    match rustls {
        // Shown as the error itself, not as rustls's debug form of a wrapped error.
        Some(rustls::Error::InvalidCertificate(CertificateError::Other(o))) => {
            format!("invalid peer certificate: {o}")
        }
        Some(r) => r.to_string(),
        None => e.to_string(),
    }
}

/// The public web's roots, parsed once per process.
fn public_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(
                webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned(),
            );
            Arc::new(roots)
        })
        .clone()
}

/// The client certificate, shown whenever a server asks.
struct ClientCert(Arc<CertifiedKey>);

impl fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientCert")
    }
}

impl ResolvesClientCert for ClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A `subject_alt_names` entry that is a URI (`spiffe://trust-domain/workload`): one
/// absolute URI without spaces, compared byte for byte with the certificate's URI names.
pub fn check_san_uri(n: &str) -> Result<String, String> {
    let scheme_ok = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    };
    let ok = !n.chars().any(|c| c.is_whitespace() || c.is_control())
        && n.split_once("://")
            .is_some_and(|(scheme, rest)| scheme_ok(scheme) && !rest.is_empty())
        && n.parse::<http::Uri>().is_ok();
    if ok {
        Ok(n.to_string())
    } else {
        Err(format!("subject_alt_names: {n:?} is not an absolute URI"))
    }
}

/// Verification against a list of accepted names instead of the server name sent (a
/// BackendTLSPolicy's `subjectAltNames`): the chain as always, and any one name (DNS names and
/// IP addresses as webpki checks them, URIs among the certificate's URI names).
#[derive(Debug)]
struct AnyName {
    inner: Arc<dyn ServerCertVerifier>,
    names: Vec<ServerName<'static>>,
    uris: Vec<String>,
    /// For the chain of a certificate accepted by URI (webpki checks it without a name).
    roots: Arc<RootCertStore>,
    /// Most intermediates allowed (`verify_depth`).
    max: Option<u8>,
}

impl AnyName {
    /// The chain verified as for any name, then one of `uris` among the certificate's.
    fn verify_uri(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let bad = |e: CertificateError| rustls::Error::InvalidCertificate(e);
        verify_chain(end_entity, intermediates, &self.roots, now, self.max).map_err(|e| {
            bad(match e {
                webpki::Error::UnknownIssuer => CertificateError::UnknownIssuer,
                webpki::Error::CertExpired { .. } => CertificateError::Expired,
                webpki::Error::CertNotValidYet { .. } => CertificateError::NotValidYet,
                other => CertificateError::Other(OtherError(Arc::new(other))),
            })
        })?;
        if certificate_uris(end_entity)
            .iter()
            .any(|u| self.uris.iter().any(|want| want == u))
        {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(bad(CertificateError::NotValidForName))
        }
    }
}

/// webpki's verification of a server certificate's chain to `roots`, whatever its names,
/// through at most `max` intermediates when given.
fn verify_chain(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    roots: &RootCertStore,
    now: UnixTime,
    max: Option<u8>,
) -> Result<(), webpki::Error> {
    let cert = webpki::EndEntityCert::try_from(end_entity)?;
    let max = max.map(usize::from);
    let within = |path: &webpki::VerifiedPath<'_>| match max {
        Some(m) if path.intermediate_certificates().count() > m => {
            Err(webpki::Error::MaximumPathDepthExceeded)
        }
        _ => Ok(()),
    };
    cert.verify_for_usage(
        provider().signature_verification_algorithms.all,
        &roots.roots,
        intermediates,
        now,
        webpki::KeyUsage::server_auth(),
        None,
        Some(&within),
    )
    .map(drop)
}

/// The URI names of a certificate's subject alternative names (none when it cannot be read:
/// webpki has already accepted its chain, so that only means no names).
fn certificate_uris(der: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return Vec::new();
    };
    match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::URI(u) => Some(u.to_string()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut last = None;
        for name in &self.names {
            match self
                .inner
                .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
            {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(e),
            }
        }
        if !self.uris.is_empty() {
            match self.verify_uri(end_entity, intermediates, now) {
                Ok(v) => return Ok(v),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// Full verification, then a limit on the intermediates the chain goes through.
#[derive(Debug)]
struct DepthLimited {
    inner: Arc<WebPkiServerVerifier>,
    roots: Arc<RootCertStore>,
    /// Most intermediates allowed.
    max: u8,
}

/// A chain verified only through more intermediates than `verify_depth` allows.
#[derive(Debug)]
struct TooDeep {
    max: u8,
}

impl fmt::Display for TooDeep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the chain needs more than the {} intermediate certificate(s) verify_depth allows",
            self.max
        )
    }
}

impl std::error::Error for TooDeep {}

impl ServerCertVerifier for DepthLimited {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let max = usize::from(self.max);
        // A chain presented no longer than allowed cannot go through more.
        if intermediates.len() <= max {
            return Ok(verified);
        }
        // A longer one may still verify through fewer (a server may send its root too, or
        // spare cross-signed certificates): the path is built again, and only paths within the
        // limit are accepted, as OpenSSL counts its verified chain.
        let too_deep = || {
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
                TooDeep { max: self.max },
            ))))
        };
        verify_chain(end_entity, intermediates, &self.roots, now, Some(self.max))
            .map(|_| verified)
            .map_err(|_| too_deep())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// The TLS settings of a service's `tls` (the defaults without one), offering h2 or HTTP/1.1.
pub fn tls_settings(s: &crate::config::Service, h2: bool) -> TlsSettings {
    let t = s.tls.clone().unwrap_or_default();
    TlsSettings {
        sni: t.sni.as_deref().map(Arc::from),
        verify: t.verify,
        verify_depth: t.verify_depth,
        ca_pem: t.ca_certificates.as_deref().map(Arc::from),
        client_cert: t
            .client_certificate
            .map(|c| (Arc::from(c.cert), Arc::from(c.key))),
        alpn: if h2 { Alpn::H2 } else { Alpn::Http11 },
        names: t
            .subject_alt_names
            .iter()
            .map(|n| Arc::from(n.as_str()))
            .collect(),
    }
}

/// Checks that a service's TLS settings build (PEMs parse, the key fits the certificate):
/// the same construction compiling does, so a table that passes cannot fail there.
pub fn check_service_tls(s: &crate::config::Service, h2: bool) -> Result<(), (String, String)> {
    TlsClient::new(tls_settings(s, h2))
        .map(drop)
        .map_err(|m| tls_error(&m))
}

/// `TlsClient::new`'s `field: message` as (`tls.field`, message).
pub(crate) fn tls_error(m: &str) -> (String, String) {
    match m.split_once(": ") {
        Some((field, rest)) if !field.contains(' ') => (format!("tls.{field}"), rest.to_string()),
        _ => ("tls".to_string(), m.to_string()),
    }
}
