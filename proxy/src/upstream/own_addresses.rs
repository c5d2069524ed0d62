//! Addresses the proxy never connects to as an upstream: its own admin API. Whoever may
//! write an Ingress, a Service or a plugin URL could otherwise point a backend, a mirror or
//! an auth subrequest at `127.0.0.1:<admin port>` and have a client's `POST /config` replace
//! the routing table.

use std::net::SocketAddr;
use std::sync::OnceLock;

static OWN: OnceLock<Vec<SocketAddr>> = OnceLock::new();

/// Records the proxy's own listeners that no upstream connection may reach (once, at start).
pub fn forbid(addrs: Vec<SocketAddr>) {
    let _ = OWN.set(addrs);
}

/// Whether `addr` reaches one of the forbidden listeners: the same address and port, or, for
/// a listener on an unspecified address, a loopback or unspecified one on its port.
pub fn is_own(addr: SocketAddr) -> bool {
    OWN.get().is_some_and(|own| reaches(own, addr))
}

fn reaches(own: &[SocketAddr], addr: SocketAddr) -> bool {
    let ip = addr.ip().to_canonical();
    own.iter().any(|o| {
        o.port() == addr.port()
            && (o.ip().to_canonical() == ip
                || (o.ip().is_unspecified() && (ip.is_loopback() || ip.is_unspecified())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_listener_is_never_an_upstream() {
        let on_loopback: Vec<SocketAddr> = vec!["127.0.0.1:8100".parse().unwrap()];
        let yes = |a: &str| reaches(&on_loopback, a.parse().unwrap());
        assert!(yes("127.0.0.1:8100"));
        assert!(yes("[::ffff:127.0.0.1]:8100"));
        assert!(!yes("127.0.0.1:8101"));
        assert!(
            !yes("127.0.0.2:8100"),
            "another loopback address is another socket"
        );
        let anywhere: Vec<SocketAddr> = vec!["0.0.0.0:8100".parse().unwrap()];
        assert!(reaches(&anywhere, "127.0.0.9:8100".parse().unwrap()));
        assert!(reaches(&anywhere, "[::1]:8100".parse().unwrap()));
        assert!(reaches(&anywhere, "0.0.0.0:8100".parse().unwrap()));
        assert!(!reaches(&anywhere, "10.0.0.1:8100".parse().unwrap()));
    }
}
