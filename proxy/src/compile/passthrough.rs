//! The TLS routes of a table, compiled: by server name (exact, wildcard, any), each with its
//! backends and whether Weir terminates its connections. Serving them is `server::passthrough`.

use std::collections::HashMap;
use std::sync::Arc;

use super::backends::Backends;
use crate::config::TlsRoute;

/// The passthrough routes of a table, by server name.
#[derive(Default)]
pub struct Passthrough {
    exact: HashMap<Box<str>, usize>,
    /// `*.suffix` names by suffix; any depth under it.
    wildcard: HashMap<Box<str>, usize>,
    /// The first route without names: any server name.
    any: Option<usize>,
    /// Each route's id, its backends (`None`: every share closes), and whether Weir
    /// terminates its connections.
    routes: Vec<(Arc<str>, Option<Backends>, bool)>,
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
            p.routes
                .push((r.id.as_str().into(), Backends::new(list), r.terminate));
        }
        p
    }

    /// Whether any route is configured (else connections are terminated without a peek).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The route for a server name (its id, backends and whether Weir terminates it).
    pub fn find(&self, name: &str) -> Option<(&Arc<str>, Option<&Backends>, bool)> {
        let (id, backends, terminate) = &self.routes[self.index(name)?];
        Some((id, backends.as_ref(), *terminate))
    }

    /// The route for a server name: exact, then the longest wildcard suffix.
    fn index(&self, name: &str) -> Option<usize> {
        let lower = name.to_ascii_lowercase();
        if let Some(&i) = self.exact.get(lower.as_str()) {
            return Some(i);
        }
        let mut rest = lower.as_str();
        while let Some((_, suffix)) = rest.split_once('.') {
            if let Some(&i) = self.wildcard.get(suffix) {
                return Some(i);
            }
            rest = suffix;
        }
        self.any
    }
}

impl Passthrough {
    /// After Weir's handshake: the route (id and service chosen) that takes a connection
    /// naming `name` decrypted, if a terminating route serves that name.
    pub fn terminated(&self, name: &str) -> Option<(Arc<str>, Option<usize>)> {
        let (id, backends, terminate) = self.find(name)?;
        terminate.then(|| (id.clone(), backends.and_then(|b| b.choose().service)))
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
        ]))
        .unwrap();
        let p = Passthrough::new(&routes, &HashMap::new());
        let id = |n: &str| p.find(n).map(|(id, _, _)| id.to_string());
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
    }
}
