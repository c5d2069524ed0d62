//! `weir.dev/mirror-*` → a mirror service and the mirror entry of each of the Ingress's
//! routes: a copy of every request goes to the target, its answer thrown away.

use weir_proxy::config::{self, RouteMirror, ServiceTls, UpstreamProtocol};

use super::annotations::MirrorAnnotations;
use super::Translator;
use crate::store::Key;

impl Translator<'_> {
    /// The mirror of an Ingress's routes, its service added to the table; `None` without a
    /// `mirror-target`.
    pub(super) fn ingress_mirror(
        &mut self,
        key: &Key,
        m: &MirrorAnnotations,
    ) -> Option<RouteMirror> {
        let target = m.target.as_ref()?;
        let id = format!("mirror:{key}");
        let (protocol, tls) = if target.tls {
            (
                UpstreamProtocol::Https,
                Some(Box::new(ServiceTls::default())),
            )
        } else {
            (UpstreamProtocol::Http, None)
        };
        self.config.services.push(config::Service {
            id: id.clone(),
            protocol,
            host: Some(target.host.clone()),
            port: Some(target.port),
            // A copy is sent once: a failed one is counted, not retried.
            retries: 0,
            tls,
            ..super::backend::default_service()
        });
        Some(RouteMirror {
            service: id,
            percent: 100.0,
            host: Some(m.host.clone().unwrap_or_else(|| {
                // An IPv6 address is bracketed in a Host header.
                if target.host.contains(':') {
                    format!("[{}]", target.host)
                } else {
                    target.host.clone()
                }
            })),
            body: m.body,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Store;
    use crate::translate::{translate, Options};

    /// The mirror entries of the routes of an Ingress mirroring to `target`.
    fn mirrors(target: &str, host: Option<&str>) -> Vec<(String, Option<String>, Option<u16>)> {
        let host = host.map_or(String::new(), |h| {
            format!("\n    weir.dev/mirror-host: {h}")
        });
        let yaml = format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: m\n  \
             namespace: demo\n  annotations:\n    weir.dev/mirror-target: \"{target}\"{host}\n\
             spec:\n  ingressClassName: weir\n  rules:\n  - host: a.example.com\n    http:\n      \
             paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: web, port: \
             {{number: 80}}}}}}}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, \
             namespace: demo}}\nspec:\n  ports: [{{port: 80}}]\n"
        );
        let t = translate(
            &Store::from_manifests(&yaml),
            &Options::default(),
            &weir_proxy::Registry::builtin(),
        );
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let c = &t.config;
        c.routes
            .iter()
            .flat_map(|r| &r.mirrors)
            .map(|m| {
                let s = c.services.iter().find(|s| s.id == m.service).unwrap();
                (s.host.clone().unwrap_or_default(), m.host.clone(), s.port)
            })
            .collect()
    }

    #[test]
    fn copies_name_their_target_as_a_host_header_does() {
        let v6 = mirrors("http://[2001:db8::7]:8081", None);
        assert_eq!(
            v6,
            [(
                "2001:db8::7".into(),
                Some("[2001:db8::7]".into()),
                Some(8081)
            )]
        );
        let named = mirrors("https://Shadow.example.com", None);
        assert_eq!(
            named,
            [(
                "shadow.example.com".into(),
                Some("shadow.example.com".into()),
                Some(443)
            )]
        );
        let set = mirrors("http://10.0.0.9", Some("copy.internal"));
        assert_eq!(
            set,
            [("10.0.0.9".into(), Some("copy.internal".into()), Some(80))]
        );
    }
}
