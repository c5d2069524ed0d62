//! The TLS routes of a table, compiled: by server name (exact, wildcard, any), each with its
//! backends and whether Weir terminates its connections. Serving them is `server::passthrough`.

use std::collections::HashMap;
use std::sync::Arc;

use super::backends::Backends;
use crate::config::{ProxyProtocol, TlsRoute};

/// The passthrough routes of a table, by server name.
#[derive(Default)]
pub struct Passthrough {
    exact: HashMap<Box<str>, usize>,
    /// `*.suffix` names by suffix; any depth under it unless the route says one label.
    wildcard: HashMap<Box<str>, usize>,
    /// The first route without names: any server name.
    any: Option<usize>,
    routes: Vec<PassRoute>,
}

/// One TLS route, compiled.
pub struct PassRoute {
    /// The route's id.
    pub id: Arc<str>,
    /// Its backends; `None`: every share closes.
    pub backends: Option<Backends>,
    /// Weir terminates its connections.
    pub terminate: bool,
    /// Its `*.` names cover one label only.
    single_label: bool,
    /// The PROXY protocol header its backends get first.
    pub proxy_protocol: Option<ProxyProtocol>,
}

impl Passthrough {
    /// Compiles validated routes; `service_index` maps service ids to their positions.
    pub fn new(routes: &[TlsRoute], service_index: &HashMap<&str, usize>) -> Passthrough {
        let mut p = Passthrough::default();
        for (i, r) in routes.iter().enumerate() {
            if r.hosts.is_empty() {
                p.any.get_or_insert(i);
            }
            for h in &r.hosts {
                let h = h.to_ascii_lowercase();
                let map = match h.strip_prefix("*.") {
                    Some(suffix) => p.wildcard.entry(suffix.into()),
                    None => p.exact.entry(h.into()),
                };
                // The first route naming a host keeps it.
                map.or_insert(i);
            }
            let list = r
                .backends
                .iter()
                .map(|b| {
                    let service = b
                        .service
                        .as_deref()
                        .and_then(|s| service_index.get(s).copied());
                    (service, Default::default(), b.weight)
                })
                .collect();
            p.routes.push(PassRoute {
                id: r.id.as_str().into(),
                backends: Backends::new(list),
                terminate: r.terminate,
                single_label: r.single_label_wildcards,
                proxy_protocol: r.proxy_protocol,
            });
        }
        p
    }

    /// Whether any route is configured (else connections are terminated without a peek).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The route for a server name.
    pub fn find(&self, name: &str) -> Option<&PassRoute> {
        Some(&self.routes[self.index(name)?])
    }

    /// The route for a server name: exact, then the longest wildcard suffix.
    fn index(&self, name: &str) -> Option<usize> {
        let lower = name.to_ascii_lowercase();
        if let Some(&i) = self.exact.get(lower.as_str()) {
            return Some(i);
        }
        let mut rest = lower.as_str();
        let mut first = true;
        while let Some((_, suffix)) = rest.split_once('.') {
            if let Some(&i) = self.wildcard.get(suffix) {
                if first || !self.routes[i].single_label {
                    return Some(i);
                }
            }
            first = false;
            rest = suffix;
        }
        self.any
    }
}

impl PassRoute {
    /// The service this connection's share goes to (`None`: a share that closes).
    pub fn choose_service(&self) -> Option<usize> {
        self.backends.as_ref().and_then(|b| b.choose().service)
    }
}

impl Passthrough {
    /// After Weir's handshake: the route (id and service chosen) that takes a connection
    /// naming `name` decrypted, if a terminating route serves that name.
    pub fn terminated(&self, name: &str) -> Option<(&PassRoute, Option<usize>)> {
        let r = self.find(name)?;
        r.terminate.then(|| (r, r.choose_service()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_find_their_route_exact_first_then_the_longest_wildcard() {
        let routes: Vec<TlsRoute> = serde_json::from_value(serde_json::json!([
            {"id": "a", "hosts": ["*.example.com"]},
            {"id": "b", "hosts": ["*.foo.example.com", "exact.example.com"]},
            {"id": "c", "hosts": ["exact.example.com"]},
            {"id": "d"},
            {"id": "e", "hosts": ["*.shallow.example.com"], "single_label_wildcards": true},
        ]))
        .unwrap();
        let p = Passthrough::new(&routes, &HashMap::new());
        let id = |n: &str| p.find(n).map(|r| r.id.to_string());
        assert!(
            p.terminated("x.example.com").is_none(),
            "passthrough routes"
        );
        assert_eq!(id("x.example.com").as_deref(), Some("a"));
        assert_eq!(id("x.y.example.com").as_deref(), Some("a"));
        assert_eq!(id("x.foo.example.com").as_deref(), Some("b"));
        assert_eq!(
            id("EXACT.example.com").as_deref(),
            Some("b"),
            "first route keeps it"
        );
        assert_eq!(
            id("example.com").as_deref(),
            Some("d"),
            "the route without names"
        );
        assert_eq!(id("other.org").as_deref(), Some("d"));
        assert_eq!(id("x.shallow.example.com").as_deref(), Some("e"));
        assert_eq!(
            id("x.y.shallow.example.com").as_deref(),
            Some("a"),
            "one label only: a deeper name falls to the next wildcard"
        );
    }
}
