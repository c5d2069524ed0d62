//! A certificate authority made in the test (rcgen) and the certificates it signs, for
//! upstreams reached over TLS.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Ca {
    pub issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM and DER.
pub struct Leaf {
    pub der: CertificateDer<'static>,
    pub pem: String,
    pub key_der: Vec<u8>,
    pub key_pem: String,
}

/// A CA certificate's parameters: common name `cn`, signing certificates and CRLs.
fn ca_params(cn: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

impl Ca {
    pub fn new(cn: &str) -> Ca {
        Ca {
            issuer: CertifiedIssuer::self_signed(ca_params(cn), KeyPair::generate().unwrap())
                .unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate with `params` that this CA signs, and its new key.
    fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &*self.issuer).unwrap();
        Leaf {
            der: cert.der().clone(),
            pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        }
    }

    /// An intermediate CA that this one signs.
    pub fn intermediate(&self, cn: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        Ca {
            issuer: CertifiedIssuer::signed_by(ca_params(cn), key, &*self.issuer).unwrap(),
        }
    }

    /// A client certificate with common name `cn` and serial `serial`, valid now or, when
    /// `expired`, only in 2000.
    pub fn client(&self, cn: &str, serial: u64, expired: bool) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(rcgen::SerialNumber::from(serial));
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2000, 12, 31);
        }
        self.sign(params)
    }

    /// This CA's revocation list (PEM), revoking the certificates with serials `serials`.
    pub fn crl(&self, serials: &[u64]) -> String {
        rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2020, 1, 1),
            next_update: rcgen::date_time_ymd(2100, 1, 1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from(*s),
                    revocation_time: rcgen::date_time_ymd(2020, 1, 1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&self.issuer)
        .unwrap()
        .pem()
        .unwrap()
    }

    /// A certificate for `names`, for the purpose `eku`.
    pub fn leaf(&self, names: &[&str], eku: ExtendedKeyUsagePurpose) -> Leaf {
        self.leaf_with_uris(names, &[], eku)
    }

    /// A certificate for `names` and the URI names `uris`, for the purpose `eku`.
    pub fn leaf_with_uris(
        &self,
        names: &[&str],
        uris: &[&str],
        eku: ExtendedKeyUsagePurpose,
    ) -> Leaf {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        for u in uris {
            let uri = rcgen::string::Ia5String::try_from(u.to_string()).unwrap();
            params.subject_alt_names.push(rcgen::SanType::URI(uri));
        }
        params.distinguished_name.push(DnType::CommonName, "leaf");
        params.extended_key_usages = vec![eku];
        self.sign(params)
    }
}

impl Leaf {
    /// A rustls server configuration serving this certificate, without client authentication,
    /// agreeing to `alpn`.
    pub fn server_config(&self, alpn: &[&[u8]]) -> rustls::ServerConfig {
        self.server_config_for(alpn, None)
    }

    /// The same, requiring a client certificate signed by `clients` when given.
    pub fn server_config_for(&self, alpn: &[&[u8]], clients: Option<&Ca>) -> rustls::ServerConfig {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::try_from(self.key_der.clone()).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match clients {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca.issuer.der().clone()).unwrap();
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    std::sync::Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(vec![self.der.clone()], key)
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        config
    }
}

/// YAML for a PEM, indented as a block scalar at `indent` spaces.
pub fn block(pem: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let lines: Vec<String> = pem.lines().map(|l| format!("{pad}{l}")).collect();
    format!("|\n{}", lines.join("\n"))
}
