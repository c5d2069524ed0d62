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
    /// `made` may be served: some entry covering the host asks for nothing, or for exactly
    /// that check. A check changed since the handshake (another CA, another mode) is not it.
    pub fn admit(&self, host: &str, made: Option<&Arc<ClientCheck>>) -> bool {
        self.hosts.iter().any(|t| {
            let covers = match t.host.as_deref() {
                None => true,
                Some(pattern) => covers(pattern, host, self.deep),
            };
            covers
                && match (&t.check, made) {
                    (None, _) => true,
                    (Some(want), Some(made)) => Arc::ptr_eq(want, made) || **want == **made,
                    (Some(_), None) => false,
                }
        })
    }
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

    fn check(id: &str, ca: &str) -> Arc<ClientCheck> {
        Arc::new(ClientCheck {
            certificate: id.into(),
            validation: ClientValidation {
                ca: ca.into(),
                mode: ClientValidationMode::Require,
            },
        })
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
        let a = check("a", "CA 1");
        let table = hosts(
            &[(Some("*.example.com"), Some(&a)), (Some("open.test"), None)],
            true,
        );
        // The handshake of the protected certificate, as this table has it.
        assert!(table.admit("x.example.com", Some(&a)));
        // An equal check from the table before (rebuilt at each push) still counts.
        assert!(table.admit("x.example.com", Some(&check("a", "CA 1"))));
        // No check, another certificate's, or the same certificate's before its CA changed.
        assert!(!table.admit("x.example.com", None));
        assert!(!table.admit("x.example.com", Some(&check("b", "CA 1"))));
        assert!(!table.admit("x.example.com", Some(&check("a", "CA 0"))));
        // A host no entry covers is not served over TLS.
        assert!(!table.admit("other.test", Some(&a)));
        // Another listener's unprotected host.
        assert!(table.admit("open.test", None));
    }

    #[test]
    fn one_open_entry_covering_the_host_is_enough() {
        let a = check("a", "CA");
        let table = hosts(&[(Some("*.example.com"), Some(&a)), (None, None)], false);
        assert!(table.admit("x.example.com", None));
        let only_protected = hosts(&[(None, Some(&a))], false);
        assert!(!only_protected.admit("x.example.com", None));
        assert!(only_protected.admit("", Some(&a)));
    }
}
