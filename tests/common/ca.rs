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

impl Ca {
    pub fn new(cn: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
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
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &*self.issuer).unwrap();
        Leaf {
            der: cert.der().clone(),
            pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        }
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
