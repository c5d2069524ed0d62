//! Which TLS connections may reach a route: the client-certificate checks of its hosts.
//!
//! Requests are routed by Host, and the certificate store by SNI; the two can disagree (a
//! Host other than the SNI, an HTTP/2 connection reused for another name, a wildcard route of
//! one listener reached through another listener's more specific certificate). A route whose
//! hosts came from a listener that asks for client certificates therefore says so itself,
//! and is served only over a connection whose handshake made that check.

use std::sync::Arc;

use crate::config::TlsHost;
use crate::tls::{CertStore, ClientCheck};

/// A host a route is served for over TLS, with the check a connection must have made.
#[derive(Debug)]
pub struct CompiledTlsHost {
    /// Lower-cased host (`*.` suffix kept); `None`, every host.
    host: Option<Box<str>>,
    /// The handshake's check, as the table has it; `None`, no client certificate asked for.
    check: Option<Arc<ClientCheck>>,
}

/// The TLS hosts of one route.
#[derive(Debug)]
pub struct TlsHosts {
    hosts: Box<[CompiledTlsHost]>,
    /// `*.` covers names several labels deep (the route's `deep_wildcards`).
    deep: bool,
}

impl TlsHosts {
    /// Compiles a route's `tls_hosts` (validated: each certificate named has a check);
    /// `None` when the route has none.
    pub fn new(hosts: &[TlsHost], deep: bool, certs: &CertStore) -> Option<Box<TlsHosts>> {
        if hosts.is_empty() {
            return None;
        }
        let hosts = hosts
            .iter()
            .map(|t| CompiledTlsHost {
                host: t.host.as_deref().map(|h| h.to_ascii_lowercase().into()),
                check: t
                    .client_certificate
                    .as_deref()
                    .and_then(|id| certs.client_check(id).cloned()),
            })
            .collect();
        Some(Box::new(TlsHosts { hosts, deep }))
    }

    /// Whether a request for `host` (without port) over a connection whose handshake made
    /// `made` may be served: some entry covering the host asks for exactly that check, or
    /// for a later check of the same certificate, or for nothing.
    pub fn admit(&self, host: &str, made: Option<&Arc<ClientCheck>>) -> Admit<'_> {
        // The connection's own check first: its requests get what it decides (headers).
        let mut open = false;
        let mut rechecked = None;
        for t in &self.hosts {
            let covers = match t.host.as_deref() {
                None => true,
                Some(pattern) => covers(pattern, host, self.deep),
            };
            match (covers, &t.check, made) {
                (false, _, _) => {}
                (true, None, _) => open = true,
                (true, Some(want), Some(made)) if Arc::ptr_eq(want, made) || **want == **made => {
                    return Admit::Checked(want);
                }
                (true, Some(want), Some(made)) if want.certificate == made.certificate => {
                    rechecked = Some(want);
                }
                _ => {}
            }
        }
        match (rechecked, open) {
            (Some(want), _) => Admit::Rechecked(want),
            (None, true) => Admit::Open,
            (None, false) => Admit::Misdirected,
        }
    }
}

/// Whether a request may be served over its connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit<'a> {
    /// An entry covering its host asks for no client certificate.
    Open,
    /// An entry covering its host asks for the check the connection's handshake made: the
    /// request is served as that check decides.
    Checked(&'a Arc<ClientCheck>),
    /// An entry covering its host asks for a check of the certificate the connection's
    /// handshake was made with, changed since (a rotated CA, another mode): the connection's
    /// certificate is checked again under it, and the request decided by that.
    Rechecked(&'a Arc<ClientCheck>),
    /// No entry admits it over this connection (`421`).
    Misdirected,
}

/// Whether a route host (`a.example.com`, `*.example.com`) covers a request's host, any case.
fn covers(pattern: &str, host: &str, deep: bool) -> bool {
    let host = host.trim_end_matches('.');
    match pattern.strip_prefix("*.") {
        None => pattern.eq_ignore_ascii_case(host),
        Some(suffix) => {
            let Some(split) = host.len().checked_sub(suffix.len() + 1) else {
                return false;
            };
            // Bytes, not chars: a split inside a multi-byte character must not panic.
            let (label, rest) = host.as_bytes().split_at(split);
            rest[0] == b'.'
                && rest[1..].eq_ignore_ascii_case(suffix.as_bytes())
                && !label.is_empty()
                && (deep || !label.contains(&b'.'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClientValidation, ClientValidationMode};

    const CA_1: &str = include_str!("../../../tests/fixtures/tls/ca.crt");
    const CA_2: &str = include_str!("../../../tests/fixtures/tls/wild.example.test.crt");

    fn check(id: &str, ca: &str) -> Arc<ClientCheck> {
        let v = ClientValidation {
            ca: ca.into(),
            mode: ClientValidationMode::Require,
            ..Default::default()
        };
        Arc::new(ClientCheck::new(id, &v).unwrap())
    }

    fn hosts(entries: &[(Option<&str>, Option<&Arc<ClientCheck>>)], deep: bool) -> TlsHosts {
        TlsHosts {
            hosts: entries
                .iter()
                .map(|(h, c)| CompiledTlsHost {
                    host: h.map(Box::from),
                    check: c.cloned(),
                })
                .collect(),
            deep,
        }
    }

    #[test]
    fn host_patterns_cover_as_routes_do() {
        assert!(covers("a.example.com", "A.Example.com", false));
        assert!(covers("a.example.com", "a.example.com.", false));
        assert!(covers("*.example.com", "x.example.com", false));
        assert!(!covers("*.example.com", "x.y.example.com", false));
        assert!(covers("*.example.com", "x.y.example.com", true));
        assert!(!covers("*.example.com", "example.com", true));
        assert!(!covers("*.example.com", ".example.com", true));
        assert!(!covers("*.example.com", "xexample.com", true));
        assert!(!covers("*.example.com", "", true));
        assert!(!covers("*.example.com", "é.example.co", true));
    }

    #[test]
    fn a_protected_host_needs_the_check_its_certificate_makes() {
        let a = check("a", CA_1);
        let table = hosts(
            &[(Some("*.example.com"), Some(&a)), (Some("open.test"), None)],
            true,
        );
        // The handshake of the protected certificate, as this table has it.
        assert_eq!(table.admit("x.example.com", Some(&a)), Admit::Checked(&a));
        // An equal check from the table before (rebuilt at each push) still counts.
        assert!(matches!(
            table.admit("x.example.com", Some(&check("a", CA_1))),
            Admit::Checked(_)
        ));
        // No check, or another certificate's.
        assert_eq!(table.admit("x.example.com", None), Admit::Misdirected);
        assert_eq!(
            table.admit("x.example.com", Some(&check("b", CA_1))),
            Admit::Misdirected
        );
        // The same certificate's before its CA changed: checked again under the new one.
        assert_eq!(
            table.admit("x.example.com", Some(&check("a", CA_2))),
            Admit::Rechecked(&a)
        );
        // A host no entry covers is not served over TLS.
        assert_eq!(table.admit("other.test", Some(&a)), Admit::Misdirected);
        // Another listener's unprotected host.
        assert_eq!(table.admit("open.test", None), Admit::Open);
    }

    #[test]
    fn one_open_entry_covering_the_host_is_enough() {
        let a = check("a", CA_1);
        let table = hosts(&[(Some("*.example.com"), Some(&a)), (None, None)], false);
        assert_eq!(table.admit("x.example.com", None), Admit::Open);
        assert_eq!(table.admit("x.example.com", Some(&a)), Admit::Checked(&a));
        let only_protected = hosts(&[(None, Some(&a))], false);
        assert_eq!(
            only_protected.admit("x.example.com", None),
            Admit::Misdirected
        );
        assert_eq!(only_protected.admit("", Some(&a)), Admit::Checked(&a));
    }
}
