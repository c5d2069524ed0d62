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
