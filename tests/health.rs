//! Active health probes through the real binary, against real upstreams on 127.0.0.1 that
//! record every probe: over TLS (a CA made in the test), over HTTP/2 with prior knowledge
//! (h2c) and over TLS with ALPN `h2`; the `Host` and path they carry, and a failing probe
//! taking the target out and passing ones bringing it back (`/metrics`, `GET /upstreams`,
//! the log, and where traffic goes).

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::ca::{block, Ca};
use common::health::{admin_health, await_gauge};
use common::*;
use http_body_util::Full;
use rcgen::ExtendedKeyUsagePurpose;

/// A request an upstream received.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    /// The `Host` header.
    host: Option<String>,
    /// The request target's authority (HTTP/2's `:authority`).
    authority: Option<String>,
    user_agent: Option<String>,
    version: http::Version,
    /// The SNI the TLS connection was opened with.
    sni: Option<String>,
}

/// An upstream that records every request and answers `probe_status` to `probe_path`, 200 to
/// anything else.
struct Recording {
    port: u16,
    got: Arc<Mutex<Vec<Got>>>,
    probe_status: Arc<AtomicU16>,
}

impl Recording {
    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    fn count(&self, path: &str) -> usize {
        self.got().iter().filter(|g| g.path == path).count()
    }

    /// Waits (bounded) for a request to `path` and returns the first one.
    fn first(&self, path: &str) -> Got {
        assert!(
            eventually(Duration::from_secs(10), || self.count(path) > 0),
            "no request to {path} within 10 s: {:?}",
            self.got()
        );
        self.got().into_iter().find(|g| g.path == path).unwrap()
    }
}

/// Starts a recording upstream: TLS with `tls` (HTTP/2 when ALPN agreed on `h2`), plain TCP
/// otherwise, HTTP/2 with prior knowledge when `h2c`.
async fn recording(
    tls: Option<rustls::ServerConfig>,
    h2c: bool,
    probe_path: &'static str,
) -> Recording {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let probe_status = Arc::new(AtomicU16::new(200));
    let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
    let (log, status) = (got.clone(), probe_status.clone());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, log, status) = (acceptor.clone(), log.clone(), status.clone());
            tokio::spawn(async move {
                let (io, sni, h2) = match acceptor {
                    None => (Io::Plain(tcp), None, h2c),
                    Some(a) => {
                        let Ok(tls) = a.accept(tcp).await else {
                            return;
                        };
                        let (_, conn) = tls.get_ref();
                        let sni = conn.server_name().map(str::to_string);
                        let h2 = conn.alpn_protocol() == Some(b"h2");
                        (Io::Tls(Box::new(tls)), sni, h2)
                    }
                };
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let header = |n: &str| {
                            req.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string)
                        };
                        let g = Got {
                            path: req.uri().path().to_string(),
                            host: header("host"),
                            authority: req.uri().authority().map(|a| a.to_string()),
                            user_agent: header("user-agent"),
                            version: req.version(),
                            sni: sni.clone(),
                        };
                        let code = if g.path == probe_path {
                            status.load(Ordering::SeqCst)
                        } else {
                            200
                        };
                        log.lock().unwrap().push(g);
                        let mut resp = http::Response::new(Full::new(Bytes::from_static(b"ok")));
                        *resp.status_mut() = http::StatusCode::from_u16(code).unwrap();
                        async move { Ok::<_, Infallible>(resp) }
                    });
                let io = hyper_util::rt::TokioIo::new(io);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, service)
                    .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    Recording {
        port,
        got,
        probe_status,
    }
}

/// A plain or TLS server-side stream.
enum Io {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>),
}

impl tokio::io::AsyncRead for Io {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Io {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Io::Tls(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// One route to a service of `protocol` (with `tls`, YAML flow, or none) balancing over an
/// upstream whose only target is 127.0.0.1:`port`, probed with `active` (YAML flow fields).
fn probed_table(protocol: &str, tls: Option<&str>, port: u16, active: &str) -> String {
    let tls = tls.map(|t| format!("\n  tls: {t}")).unwrap_or_default();
    format!(
        "routes: [{{id: r, service: s}}]\n\
         services:\n- id: s\n  protocol: {protocol}\n  upstream: u\n  retries: 0{tls}\n\
         upstreams:\n- id: u\n  targets: [{{target: '127.0.0.1:{port}'}}]\n  \
         healthchecks: {{active: {{{active}, interval: 100, timeout: 1000, \
         healthy_threshold: 2, unhealthy_threshold: 2}}}}\n"
    )
}

/// TLS settings trusting `ca`, with SNI `backend.test` and `alpn`, as YAML (block style,
/// under a `tls:` key indented 2).
fn tls_settings(ca: &Ca, alpn: &str) -> String {
    format!(
        "\n    sni: backend.test\n    alpn: {alpn}\n    ca_certificates: {}",
        block(&ca.pem(), 6)
    )
}

/// The probes reach `up` at `path`; failing ones take the target out (gauge 0, `GET
/// /upstreams` unhealthy, traffic answered 503 without reaching it, logged), passing ones bring
/// it back (gauge 1, traffic reaches it again).
async fn probes_take_the_target_out_and_bring_it_back(w: &Weir, up: &Recording, path: &str) {
    let c = client();
    assert!(
        await_gauge(&c, w, up.port, 1, Duration::from_secs(5)).await,
        "healthy at first"
    );
    let r = get(&c, &w.url("/traffic"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(up.count("/traffic"), 1);

    up.probe_status.store(503, Ordering::SeqCst);
    let failing_since = Instant::now();
    assert!(
        await_gauge(&c, w, up.port, 0, Duration::from_secs(10)).await,
        "failing probes did not eject the target: {:?}",
        up.got()
    );
    // Two failed probes at 100 ms intervals.
    assert!(failing_since.elapsed() >= Duration::from_millis(100));
    assert_eq!(
        admin_health(&c, w, up.port).await.as_deref(),
        Some("unhealthy")
    );
    let r = get(&c, &w.url("/traffic"), &[]).await;
    assert_eq!(r.status, 503, "the only target is out: {r:?}");
    assert_eq!(up.count("/traffic"), 1, "no traffic reached the target");

    up.probe_status.store(200, Ordering::SeqCst);
    assert!(
        await_gauge(&c, w, up.port, 1, Duration::from_secs(10)).await,
        "passing probes did not bring the target back"
    );
    assert_eq!(
        admin_health(&c, w, up.port).await.as_deref(),
        Some("healthy")
    );
    let r = get(&c, &w.url("/traffic"), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(up.count("/traffic"), 2);
    // Two that failed, two that passed, at least.
    assert!(up.count(path) >= 4, "{} probes", up.count(path));

    let target = format!("127.0.0.1:{}", up.port);
    let log = w.log();
    assert!(
        log.lines()
            .any(|l| l.contains("upstream target is unhealthy")
                && l.contains(&target)
                && l.contains("2 failed probes (active check), last: status 503")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("upstream target is healthy again")
                && l.contains(&target)
                && l.contains("2 healthy probes (active check)")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_probes_carry_the_configured_host_and_path_and_move_the_target() {
    let ca = Ca::new("probe CA");
    let leaf = ca.leaf(&["backend.test"], ExtendedKeyUsagePurpose::ServerAuth);
    let up = recording(Some(leaf.server_config(&[b"http/1.1"])), false, "/healthz").await;
    let w = Weir::start_logged(
        &probed_table(
            "https",
            Some(&tls_settings(&ca, "http/1.1")),
            up.port,
            "type: https, path: /healthz, host: probe.example",
        ),
        &["--access-log", "false"],
    );
    let probe = up.first("/healthz");
    assert_eq!(probe.host.as_deref(), Some("probe.example"), "{probe:?}");
    assert_eq!(
        probe.user_agent.as_deref(),
        Some("weir-health-check"),
        "{probe:?}"
    );
    assert_eq!(probe.version, http::Version::HTTP_11, "{probe:?}");
    assert_eq!(
        probe.sni.as_deref(),
        Some("backend.test"),
        "probed over TLS with the service's settings: {probe:?}"
    );
    probes_take_the_target_out_and_bring_it_back(&w, &up, "/healthz").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_probes_speak_http2_with_the_configured_host_and_path() {
    let up = recording(None, true, "/grpc.health.v1.Health/Check").await;
    let w = Weir::start_logged(
        &probed_table(
            "h2c",
            None,
            up.port,
            "path: /grpc.health.v1.Health/Check, host: probe.example",
        ),
        &["--access-log", "false"],
    );
    let probe = up.first("/grpc.health.v1.Health/Check");
    assert_eq!(probe.version, http::Version::HTTP_2, "{probe:?}");
    // HTTP/2 names the host in `:authority`, with no `Host` that could differ (RFC 9113).
    assert_eq!(
        probe.authority.as_deref(),
        Some("probe.example"),
        "{probe:?}"
    );
    assert_eq!(probe.host, None, "{probe:?}");
    assert_eq!(
        probe.user_agent.as_deref(),
        Some("weir-health-check"),
        "{probe:?}"
    );
    assert_eq!(probe.sni, None, "plain TCP");
    probes_take_the_target_out_and_bring_it_back(&w, &up, "/grpc.health.v1.Health/Check").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_over_tls_with_alpn_h2_use_http2_and_default_to_the_targets_host() {
    let ca = Ca::new("probe CA");
    let leaf = ca.leaf(&["backend.test"], ExtendedKeyUsagePurpose::ServerAuth);
    let up = recording(Some(leaf.server_config(&[b"h2"])), false, "/ready").await;
    let w = Weir::start_logged(
        &probed_table(
            "https",
            Some(&tls_settings(&ca, "h2")),
            up.port,
            "path: /ready",
        ),
        &["--access-log", "false"],
    );
    let probe = up.first("/ready");
    assert_eq!(probe.version, http::Version::HTTP_2, "{probe:?}");
    assert_eq!(probe.sni.as_deref(), Some("backend.test"), "{probe:?}");
    // Without `host`, the target's own `host:port`.
    let target = format!("127.0.0.1:{}", up.port);
    assert_eq!(probe.host, None, "{probe:?}");
    assert_eq!(
        probe.authority.as_deref(),
        Some(target.as_str()),
        "{probe:?}"
    );
    probes_take_the_target_out_and_bring_it_back(&w, &up, "/ready").await;
}
