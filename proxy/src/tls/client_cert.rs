//! Client certificates: how a handshake asks for and checks them, and what the requests of a
//! connection learn of the one it presented.
//!
//! Two ways of refusing exist, as the two APIs Weir serves ask for them. The Gateway API's
//! `AllowValidOnly` fails the handshake itself. ingress-nginx completes the handshake whatever
//! the client sent and answers each request `400` (its internal `496`, no certificate, and
//! `495`, an invalid one); its upstreams learn the outcome from `ssl-client-verify`. For the
//! second, the handshake takes any certificate (still checking that the client holds its
//! key) and the chain is checked once, right after the handshake, into a [`PeerCert`] the
//! connection keeps.

use std::fmt::Write as _;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::{parse_roots, pem_error, provider};
use crate::config::{ClientRefusal, ClientValidation, ClientValidationMode};

/// What a handshake that asked for a client certificate checked: the certificate served and
/// its validation, compiled. A connection keeps it; a route that asks for a check is served
/// only over a connection whose check is equal to the current table's (so a connection opened
/// before the check was set or changed is not let through).
#[derive(Debug)]
pub struct ClientCheck {
    /// The served certificate's id.
    pub certificate: String,
    /// The check its handshakes make.
    pub validation: ClientValidation,
    chain: ChainCheck,
    /// `match_subject`, compiled.
    subject: Option<regex::Regex>,
}

impl PartialEq for ClientCheck {
    fn eq(&self, other: &ClientCheck) -> bool {
        self.certificate == other.certificate && self.validation == other.validation
    }
}

impl Eq for ClientCheck {}

/// A field of `client_validation` that cannot be used, and why.
pub type CheckError = (&'static str, String);

impl ClientCheck {
    /// Compiles certificate `id`'s validation.
    pub fn new(id: &str, v: &ClientValidation) -> Result<ClientCheck, CheckError> {
        let subject = match &v.match_subject {
            Some(re) => Some(
                regex::Regex::new(re)
                    .map_err(|e| ("client_validation.match_subject", e.to_string()))?,
            ),
            None => None,
        };
        Ok(ClientCheck {
            certificate: id.to_string(),
            validation: v.clone(),
            chain: ChainCheck::new(v)?,
            subject,
        })
    }

    /// The verifier of this check's handshakes.
    pub fn verifier(self: &Arc<ClientCheck>) -> Result<Arc<dyn ClientCertVerifier>, CheckError> {
        // rustls's own verifier names the CAs in the CertificateRequest and checks the
        // handshake's signature; the chain is checked here, with CRLs and depth.
        let inner =
            WebPkiClientVerifier::builder_with_provider(self.chain.roots.clone(), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| {
                    (
                        "client_validation.ca",
                        format!("unusable CA certificates: {e}"),
                    )
                })?;
        let at_handshake = self.validation.refusal == ClientRefusal::Handshake;
        Ok(Arc::new(Verifier {
            inner,
            check: self.clone(),
            mandatory: at_handshake && self.validation.mode == ClientValidationMode::Require,
            refuses: at_handshake && self.validation.mode != ClientValidationMode::OptionalNoCa,
        }))
    }

    /// What a connection's handshake presented (`chain`, the client's certificate first),
    /// checked: `None` when it presented none.
    pub fn peer(&self, chain: Option<&[CertificateDer<'_>]>) -> Option<Arc<PeerCert>> {
        let (leaf, intermediates) = chain?.split_first()?;
        let verified = self
            .chain
            .verify(leaf, intermediates, UnixTime::now())
            .map_err(|e| failure(&e));
        let (subject, issuer) = distinguished_names(leaf);
        Some(Arc::new(PeerCert {
            verified,
            subject,
            issuer,
            escaped_pem: self.validation.pass_certificate.then(|| escaped_pem(leaf)),
            chain: chain?.iter().map(|c| c.clone().into_owned()).collect(),
        }))
    }

    /// Whether this check's handshake would have let `peer` (none: no certificate) in: a
    /// connection made under an earlier check of the same certificate keeps being served
    /// only then (a CA rotated, a mode relaxed), and is sent to reconnect otherwise.
    pub fn admits_handshake(&self, peer: Option<&PeerCert>) -> bool {
        let v = &self.validation;
        if v.refusal == ClientRefusal::Http {
            return true;
        }
        match peer {
            None => v.mode != ClientValidationMode::Require,
            Some(p) => p.verified.is_ok() || v.mode == ClientValidationMode::OptionalNoCa,
        }
    }

    /// A request's fate under this check, for a connection that presented `peer`: `Ok` to
    /// serve it (after [`ClientCheck::upstream_headers`]), or the status and message it gets.
    pub fn decide(&self, peer: Option<&PeerCert>) -> Result<(), Refused> {
        let v = &self.validation;
        if v.refusal == ClientRefusal::Http {
            let verified = peer.map(|p| p.verified.is_ok());
            match (v.mode, verified) {
                (ClientValidationMode::Require, None) => return Err(Refused::NoCertificate),
                (ClientValidationMode::Require | ClientValidationMode::Optional, Some(false)) => {
                    return Err(Refused::BadCertificate)
                }
                _ => {}
            }
        }
        if let Some(re) = &self.subject {
            if !peer.is_some_and(|p| re.is_match(&p.subject)) {
                return Err(Refused::Subject);
            }
        }
        Ok(())
    }

    /// The `ssl-client-*` headers this check sends upstream for a connection that presented
    /// `peer` (none unless `upstream_headers`).
    pub fn upstream_headers(&self, peer: Option<&PeerCert>, headers: &mut http::HeaderMap) {
        if !self.validation.upstream_headers {
            return;
        }
        for name in SSL_CLIENT_HEADERS {
            headers.remove(name);
        }
        let mut set = |name: &'static str, value: &str| {
            if let Ok(v) = http::HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        };
        let Some(peer) = peer else {
            set("ssl-client-verify", "NONE");
            return;
        };
        match &peer.verified {
            Ok(()) => set("ssl-client-verify", "SUCCESS"),
            Err(reason) => set("ssl-client-verify", &format!("FAILED:{reason}")),
        }
        set("ssl-client-subject-dn", &peer.subject);
        set("ssl-client-issuer-dn", &peer.issuer);
        if let Some(pem) = &peer.escaped_pem {
            set("ssl-client-cert", pem);
        }
    }
}

/// The headers that carry a client certificate upstream (ingress-nginx's names).
pub const SSL_CLIENT_HEADERS: [&str; 4] = [
    "ssl-client-verify",
    "ssl-client-subject-dn",
    "ssl-client-issuer-dn",
    "ssl-client-cert",
];

/// Why a request is refused by its host's client-certificate check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// None presented where one is required (ingress-nginx's `496`).
    NoCertificate,
    /// One that does not verify (ingress-nginx's `495`).
    BadCertificate,
    /// Its subject does not match `match_subject`.
    Subject,
}

impl Refused {
    /// The status and message ingress-nginx answers with.
    pub fn answer(self) -> (http::StatusCode, &'static str) {
        match self {
            Refused::NoCertificate => (
                http::StatusCode::BAD_REQUEST,
                "No required SSL certificate was sent",
            ),
            Refused::BadCertificate => (http::StatusCode::BAD_REQUEST, "The SSL certificate error"),
            Refused::Subject => (
                http::StatusCode::FORBIDDEN,
                "client certificate unauthorized",
            ),
        }
    }
}

/// What a connection's client certificate is, as its requests are told.
#[derive(Debug)]
pub struct PeerCert {
    /// The chain's check: `Err` with OpenSSL's words for what failed.
    pub verified: Result<(), &'static str>,
    /// The subject's DN (RFC 2253).
    pub subject: String,
    /// The issuer's DN (RFC 2253).
    pub issuer: String,
    /// The certificate as URL-encoded PEM, when the check passes it upstream.
    pub escaped_pem: Option<String>,
    /// The chain as presented, checked again when the certificate's check changes.
    pub chain: Vec<CertificateDer<'static>>,
}

/// The CAs, revocation lists and depth a client's chain is checked against.
#[derive(Debug)]
pub(crate) struct ChainCheck {
    roots: Arc<RootCertStore>,
    crls: Vec<webpki::CertRevocationList<'static>>,
    /// Most intermediates between the client's certificate and a CA.
    max_intermediates: Option<usize>,
    /// A certificate of the chain that no list speaks for is refused (else let through).
    unknown_status: webpki::UnknownStatusPolicy,
    /// Without partial chains: the subjects of the self-signed CAs, the only ones a chain may
    /// end at (a CA in `roots` that is an intermediate only completes a chain with one).
    full_chain_anchors: Option<Vec<Vec<u8>>>,
    /// Without partial chains: the CAs of the list that are not self-signed, offered as
    /// intermediates, so a client that sends only its certificate still reaches a root.
    listed_intermediates: Vec<CertificateDer<'static>>,
}

impl ChainCheck {
    fn new(v: &ClientValidation) -> Result<ChainCheck, CheckError> {
        let field = |f: &'static str| match f {
            "ca" => "client_validation.ca",
            "crl" => "client_validation.crl",
            _ => "client_validation.verify_depth",
        };
        ChainCheck::from_pem(&v.ca, v.crl.as_deref(), v.verify_depth, true, true)
            .map_err(|(f, m)| (field(f), m))
    }

    /// A check of chains against the CAs of `ca` (PEM) and the lists of `crl`; `strict`
    /// refuses a certificate no list speaks for; `partial` lets a chain end at any CA of `ca`,
    /// not only at a self-signed one. Errors name `ca`, `crl` or `verify_depth`.
    pub(crate) fn from_pem(
        ca: &str,
        crl: Option<&str>,
        verify_depth: Option<u8>,
        strict: bool,
        partial: bool,
    ) -> Result<ChainCheck, CheckError> {
        let roots = Arc::new(parse_roots(ca).map_err(|m| ("ca", m))?);
        let mut crls = Vec::new();
        if let Some(pem) = crl {
            let field = "crl";
            for (i, der) in CertificateRevocationListDer::pem_slice_iter(pem.as_bytes()).enumerate()
            {
                let der = der.map_err(|e| (field, format!("not a PEM CRL: {}", pem_error(&e))))?;
                let crl = webpki::OwnedCertRevocationList::from_der(der.as_ref())
                    .map_err(|e| (field, format!("CRL {} is unusable: {e}", i + 1)))?;
                crls.push(crl.into());
            }
            if crls.is_empty() {
                return Err((field, "no `BEGIN X509 CRL` block".into()));
            }
        }
        let max_intermediates = match verify_depth {
            Some(0) => {
                return Err((
                    "verify_depth",
                    "0 would accept no chain: at least 1 (signed by a CA of `ca` itself)".into(),
                ))
            }
            Some(d) => Some(usize::from(d) - 1),
            None => None,
        };
        let mut full_chain_anchors = None;
        let mut listed_intermediates = Vec::new();
        if !partial {
            let mut anchors = Vec::new();
            for der in CertificateDer::pem_slice_iter(ca.as_bytes()).flatten() {
                let Ok((_, c)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
                    continue;
                };
                if c.subject().as_raw() == c.issuer().as_raw() {
                    anchors.push(c.subject().as_raw().to_vec());
                } else {
                    listed_intermediates.push(der.clone());
                }
            }
            full_chain_anchors = Some(anchors);
        }
        Ok(ChainCheck {
            roots,
            crls,
            max_intermediates,
            unknown_status: if strict {
                webpki::UnknownStatusPolicy::Deny
            } else {
                webpki::UnknownStatusPolicy::Allow
            },
            full_chain_anchors,
            listed_intermediates,
        })
    }

    /// Checks a client's chain (its certificate, then what it sent above it) at `now`.
    pub(crate) fn verify(
        &self,
        leaf: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), webpki::Error> {
        let cert = webpki::EndEntityCert::try_from(leaf)?;
        let within = |path: &webpki::VerifiedPath<'_>| {
            if let Some(m) = self.max_intermediates {
                if path.intermediate_certificates().count() > m {
                    return Err(webpki::Error::MaximumPathDepthExceeded);
                }
            }
            if let Some(anchors) = &self.full_chain_anchors {
                // webpki keeps the anchor's subject without its SEQUENCE header.
                let subject = der_sequence(path.anchor().subject.as_ref());
                if !anchors.contains(&subject) {
                    return Err(webpki::Error::UnknownIssuer);
                }
            }
            Ok(())
        };
        let with_listed;
        let intermediates = if self.listed_intermediates.is_empty() {
            intermediates
        } else {
            with_listed = [intermediates, &self.listed_intermediates[..]].concat();
            &with_listed[..]
        };
        let crls: Vec<&webpki::CertRevocationList<'_>> = self.crls.iter().collect();
        // As nginx checks with `ssl_crl`: every certificate of the chain, and (strict) a
        // certificate no list speaks for is not accepted.
        let revocation = webpki::RevocationOptionsBuilder::new(&crls).ok().map(|b| {
            b.with_depth(webpki::RevocationCheckDepth::Chain)
                .with_status_policy(self.unknown_status)
                .with_expiration_policy(webpki::ExpirationPolicy::Ignore)
                .build()
        });
        cert.verify_for_usage(
            provider().signature_verification_algorithms.all,
            &self.roots.roots,
            intermediates,
            now,
            webpki::KeyUsage::client_auth(),
            revocation,
            Some(&within),
        )
        .map(drop)
    }
}

/// `content` as a DER SEQUENCE (tag, length, content).
fn der_sequence(content: &[u8]) -> Vec<u8> {
    let n = content.len();
    let mut out = vec![0x30];
    match n {
        0..=127 => out.push(n as u8),
        128..=255 => out.extend([0x81, n as u8]),
        _ => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(content);
    out
}

/// The first common name (CN) of a certificate's subject.
pub(crate) fn common_name(der: &CertificateDer<'_>) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// OpenSSL's words for a failed check, as nginx puts them in `ssl-client-verify`.
pub(crate) fn failure(e: &webpki::Error) -> &'static str {
    use webpki::Error as E;
    match e {
        E::UnknownIssuer => "unable to get local issuer certificate",
        E::CertExpired { .. } => "certificate has expired",
        E::CertNotValidYet { .. } => "certificate is not yet valid",
        E::CertRevoked => "certificate revoked",
        E::UnknownRevocationStatus => "unable to get certificate CRL",
        E::MaximumPathDepthExceeded => "certificate chain too long",
        E::InvalidSignatureForPublicKey => "certificate signature failure",
        E::RequiredEkuNotFoundContext(_) => "unsupported certificate purpose",
        _ => "certificate verify error",
    }
}

/// The handshake's side of a [`ClientCheck`].
#[derive(Debug)]
struct Verifier {
    inner: Arc<dyn ClientCertVerifier>,
    check: Arc<ClientCheck>,
    /// A handshake without a certificate fails.
    mandatory: bool,
    /// A handshake with a certificate that does not verify fails.
    refuses: bool,
}

impl ClientCertVerifier for Verifier {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.refuses {
            self.check
                .chain
                .verify(end_entity, intermediates, now)
                .map_err(|e| rustls::Error::General(failure(&e).into()))?;
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The subject and issuer DNs of a certificate, as nginx's `$ssl_client_s_dn` and
/// `$ssl_client_i_dn` write them (RFC 2253); empty when it cannot be read.
fn distinguished_names(der: &CertificateDer<'_>) -> (String, String) {
    match x509_parser::parse_x509_certificate(der.as_ref()) {
        Ok((_, cert)) => (rfc2253(cert.subject()), rfc2253(cert.issuer())),
        Err(_) => (String::new(), String::new()),
    }
}

/// A name in RFC 2253 form: the last RDN first, `,` between RDNs, `+` within one.
fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let mut out = String::new();
    let rdns: Vec<_> = name.iter_rdn().collect();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, atv) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = atv.attr_type().to_id_string();
            match short_name(&oid) {
                Some(n) => out.push_str(n),
                None => out.push_str(&oid),
            }
            out.push('=');
            match atv.as_str() {
                Ok(v) => escape_dn_value(&mut out, v),
                Err(_) => {
                    // Not a string: `#` and the value's DER in hex (RFC 2253 §2.4).
                    out.push('#');
                    for b in atv.attr_value().as_bytes() {
                        let _ = write!(out, "{b:02x}");
                    }
                }
            }
        }
    }
    out
}

/// OpenSSL's short names of the attribute types certificates use.
fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.4" => "SN",
        "2.5.4.5" => "serialNumber",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "street",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "title",
        "2.5.4.42" => "GN",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// A DN value escaped as OpenSSL's RFC 2253 printing escapes it: `,+"\<>;` with a backslash,
/// a leading `#` or space and a trailing space too, control and non-ASCII bytes as `\XX`.
fn escape_dn_value(out: &mut String, v: &str) {
    let last = v.len().saturating_sub(1);
    for (i, b) in v.bytes().enumerate() {
        match b {
            b',' | b'+' | b'"' | b'\\' | b'<' | b'>' | b';' => {
                out.push('\\');
                out.push(b as char);
            }
            b'#' if i == 0 => out.push_str("\\#"),
            b' ' if i == 0 || i == last => out.push_str("\\ "),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{b:02X}");
            }
        }
    }
}

/// A certificate as PEM, URL-encoded as nginx's `$ssl_client_escaped_cert` (everything but
/// letters, digits and `-._~` as `%XX`).
fn escaped_pem(der: &CertificateDer<'_>) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    let mut out = String::with_capacity(pem.len() * 3 / 2);
    for b in pem.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, SerialNumber,
    };

    pub(crate) type Issuer = CertifiedIssuer<'static, KeyPair>;

    /// A CA named `cn`, self-signed or signed by `parent`.
    pub(crate) fn ca(cn: &str, parent: Option<&Issuer>) -> Issuer {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        match parent {
            None => CertifiedIssuer::self_signed(params, key).unwrap(),
            Some(p) => CertifiedIssuer::signed_by(params, key, p).unwrap(),
        }
    }

    /// A client certificate from `issuer` with serial `serial`; expired when `expired`.
    pub(crate) fn client(
        issuer: &Issuer,
        cn: &str,
        serial: u64,
        expired: bool,
    ) -> CertificateDer<'static> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Acme, Inc.");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(SerialNumber::from(serial));
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        params.signed_by(&key, issuer).unwrap().der().clone()
    }

    /// `issuer`'s CRL revoking `serials`.
    pub(crate) fn crl(issuer: &Issuer, serials: &[u64]) -> String {
        rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2020, 1, 1),
            next_update: rcgen::date_time_ymd(2100, 1, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: SerialNumber::from(*s),
                    revocation_time: rcgen::date_time_ymd(2020, 1, 1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(issuer)
        .unwrap()
        .pem()
        .unwrap()
    }

    fn check(v: ClientValidation) -> Arc<ClientCheck> {
        Arc::new(ClientCheck::new("c", &v).unwrap())
    }

    fn verdict(c: &ClientCheck, chain: &[CertificateDer<'static>]) -> Result<(), &'static str> {
        c.peer(Some(chain)).unwrap().verified
    }

    #[test]
    fn chains_are_checked_as_nginx_checks_them() {
        let root = ca("Root CA", None);
        let other = ca("Other CA", None);
        let mid = ca("Intermediate CA", Some(&root));
        let direct = client(&root, "direct", 1, false);
        let revoked = client(&root, "revoked", 2, false);
        let through_mid = client(&mid, "through", 3, false);
        let v = |depth, crl| ClientValidation {
            ca: root.pem(),
            verify_depth: depth,
            crl,
            ..Default::default()
        };

        let c = check(v(None, None));
        assert_eq!(verdict(&c, std::slice::from_ref(&direct)), Ok(()));
        assert_eq!(
            verdict(&c, &[through_mid.clone(), mid.der().clone()]),
            Ok(())
        );
        let foreign = client(&other, "foreign", 4, false);
        assert_eq!(
            verdict(&c, &[foreign]),
            Err("unable to get local issuer certificate")
        );
        let expired = client(&root, "old", 5, true);
        assert_eq!(verdict(&c, &[expired]), Err("certificate has expired"));
        // The intermediate not sent: no path to the CA.
        assert_eq!(
            verdict(&c, std::slice::from_ref(&through_mid)),
            Err("unable to get local issuer certificate")
        );

        // Depth 1: signed by the CA itself only; 2: one intermediate.
        let c = check(v(Some(1), None));
        assert_eq!(verdict(&c, std::slice::from_ref(&direct)), Ok(()));
        let chain = [through_mid.clone(), mid.der().clone()];
        assert_eq!(verdict(&c, &chain), Err("certificate chain too long"));
        assert_eq!(verdict(&check(v(Some(2), None)), &chain), Ok(()));
        let zero = ClientCheck::new("c", &v(Some(0), None)).unwrap_err();
        assert_eq!(zero.0, "client_validation.verify_depth");

        // A CRL revokes by serial; a chain through an issuer no CRL covers is not accepted.
        let c = check(v(None, Some(crl(&root, &[2]))));
        assert_eq!(verdict(&c, std::slice::from_ref(&direct)), Ok(()));
        assert_eq!(verdict(&c, &[revoked]), Err("certificate revoked"));
        assert_eq!(verdict(&c, &chain), Err("unable to get certificate CRL"));
        let bad = ClientCheck::new("c", &v(None, Some("not a crl".into()))).unwrap_err();
        assert_eq!(bad.0, "client_validation.crl");
    }

    #[test]
    fn the_handshake_refuses_only_where_the_gateway_api_asks_it_to() {
        let root = ca("Root CA", None);
        let foreign = client(&ca("Other", None), "x", 1, false);
        let now = UnixTime::now();
        for (refusal, mode, mandatory, takes_foreign) in [
            (
                ClientRefusal::Handshake,
                ClientValidationMode::Require,
                true,
                false,
            ),
            (
                ClientRefusal::Handshake,
                ClientValidationMode::Optional,
                false,
                false,
            ),
            (
                ClientRefusal::Handshake,
                ClientValidationMode::OptionalNoCa,
                false,
                true,
            ),
            (
                ClientRefusal::Http,
                ClientValidationMode::Require,
                false,
                true,
            ),
            (
                ClientRefusal::Http,
                ClientValidationMode::Optional,
                false,
                true,
            ),
        ] {
            let c = check(ClientValidation {
                ca: root.pem(),
                mode,
                refusal,
                ..Default::default()
            });
            let verifier = c.verifier().unwrap();
            let what = format!("{refusal:?} {mode:?}");
            assert!(verifier.offer_client_auth(), "{what}");
            assert_eq!(verifier.client_auth_mandatory(), mandatory, "{what}");
            assert!(!verifier.root_hint_subjects().is_empty(), "{what}");
            let took = verifier.verify_client_cert(&foreign, &[], now).is_ok();
            assert_eq!(took, takes_foreign, "{what}");
        }
    }

    #[test]
    fn requests_are_refused_as_ingress_nginx_refuses_them() {
        let root = ca("Root CA", None);
        let good = client(&root, "good", 1, false);
        let bad = client(&ca("Other", None), "bad", 2, false);
        let at_http = |mode| {
            check(ClientValidation {
                ca: root.pem(),
                mode,
                refusal: ClientRefusal::Http,
                ..Default::default()
            })
        };
        use ClientValidationMode::*;
        use Refused::*;
        for (mode, none, valid, invalid) in [
            (Require, Err(NoCertificate), Ok(()), Err(BadCertificate)),
            (Optional, Ok(()), Ok(()), Err(BadCertificate)),
            (OptionalNoCa, Ok(()), Ok(()), Ok(())),
        ] {
            let c = at_http(mode);
            assert_eq!(c.decide(None), none, "{mode:?}");
            let p = c.peer(Some(std::slice::from_ref(&good))).unwrap();
            assert_eq!(c.decide(Some(&p)), valid, "{mode:?}");
            let p = c.peer(Some(std::slice::from_ref(&bad))).unwrap();
            assert_eq!(c.decide(Some(&p)), invalid, "{mode:?}");
        }
        // The handshake has refused already: nothing is left to refuse.
        let c = check(ClientValidation {
            ca: root.pem(),
            ..Default::default()
        });
        assert_eq!(c.decide(None), Ok(()));

        let c = check(ClientValidation {
            ca: root.pem(),
            mode: OptionalNoCa,
            match_subject: Some("CN=good(,|$)".into()),
            ..Default::default()
        });
        let p = c.peer(Some(std::slice::from_ref(&good))).unwrap();
        assert_eq!(c.decide(Some(&p)), Ok(()));
        let p = c.peer(Some(std::slice::from_ref(&bad))).unwrap();
        assert_eq!(c.decide(Some(&p)), Err(Subject));
        assert_eq!(c.decide(None), Err(Subject));
    }

    #[test]
    fn a_later_check_admits_what_its_handshake_would_have() {
        let root = ca("Root CA", None);
        let good = client(&root, "good", 1, false);
        let foreign = client(&ca("Other", None), "x", 2, false);
        use ClientValidationMode::*;
        for (refusal, mode, none, valid, invalid) in [
            (ClientRefusal::Handshake, Require, false, true, false),
            (ClientRefusal::Handshake, Optional, true, true, false),
            (ClientRefusal::Handshake, OptionalNoCa, true, true, true),
            // Refused at HTTP: every connection is let in, and each request decided.
            (ClientRefusal::Http, Require, true, true, true),
        ] {
            let c = check(ClientValidation {
                ca: root.pem(),
                mode,
                refusal,
                ..Default::default()
            });
            let what = format!("{refusal:?} {mode:?}");
            assert_eq!(c.admits_handshake(None), none, "{what}");
            let p = c.peer(Some(std::slice::from_ref(&good))).unwrap();
            assert_eq!(c.admits_handshake(Some(&p)), valid, "{what}");
            let p = c.peer(Some(std::slice::from_ref(&foreign))).unwrap();
            assert_eq!(c.admits_handshake(Some(&p)), invalid, "{what}");
        }
    }

    #[test]
    fn upstream_headers_say_what_was_presented_and_replace_the_clients() {
        let root = ca("Root CA", None);
        let good = client(&root, "good", 1, false);
        let c = check(ClientValidation {
            ca: root.pem(),
            mode: ClientValidationMode::OptionalNoCa,
            upstream_headers: true,
            pass_certificate: true,
            ..Default::default()
        });
        let mut headers = http::HeaderMap::new();
        headers.insert("ssl-client-verify", "SUCCESS".parse().unwrap());
        headers.insert("ssl-client-cert", "forged".parse().unwrap());
        c.upstream_headers(None, &mut headers);
        assert_eq!(headers["ssl-client-verify"], "NONE");
        assert!(headers.get("ssl-client-cert").is_none());

        let p = c.peer(Some(std::slice::from_ref(&good))).unwrap();
        c.upstream_headers(Some(&p), &mut headers);
        assert_eq!(headers["ssl-client-verify"], "SUCCESS");
        // The certificate lists CN, then O: RFC 2253 writes the last first.
        assert_eq!(headers["ssl-client-subject-dn"], "O=Acme\\, Inc.,CN=good");
        assert_eq!(headers["ssl-client-issuer-dn"], "CN=Root CA");
        let pem = headers["ssl-client-cert"].to_str().unwrap();
        assert!(pem.starts_with("-----BEGIN%20CERTIFICATE-----%0A"), "{pem}");
        assert!(pem.ends_with("-----END%20CERTIFICATE-----%0A"), "{pem}");
        assert!(!pem.contains(['+', '/', '=', '\n']), "{pem}");

        let foreign = client(&ca("Other", None), "x", 2, false);
        let p = c.peer(Some(std::slice::from_ref(&foreign))).unwrap();
        c.upstream_headers(Some(&p), &mut headers);
        assert_eq!(
            headers["ssl-client-verify"],
            "FAILED:unable to get local issuer certificate"
        );
    }

    #[test]
    fn dn_values_are_escaped_as_rfc_2253_says() {
        let mut out = String::new();
        escape_dn_value(&mut out, "#a, b+c\"d\\e<f>g;h ");
        assert_eq!(out, "\\#a\\, b\\+c\\\"d\\\\e\\<f\\>g\\;h\\ ");
        out.clear();
        escape_dn_value(&mut out, " é\n");
        assert_eq!(out, "\\ \\C3\\A9\\0A");
    }
}
