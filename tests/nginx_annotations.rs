//! ingress-nginx annotations (`nginx.ingress.kubernetes.io/*`) through the real binary in
//! standalone mode: one test per annotation family, each on a folder of manifests with
//! Ingresses annotated as for ingress-nginx, `weir echo` upstreams (which report the path,
//! query and headers they received) or recording upstreams (which show that a refused request
//! never reached them), checking what the client got and what the upstream received.
//!
//! controller/src/nginx/convert.rs is the specification of what each annotation becomes.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::manifests::{docs, service, Manifests};
use common::recorder::{response, Server};
use common::*;

/// Bound on every wait.
const T: Duration = Duration::from_secs(30);

/// The namespace of every object.
const NS: &str = "demo";

/// The annotation prefix.
const NGINX: &str = "nginx.ingress.kubernetes.io/";

// ---------------------------------------------------------------------------------------------
// Manifests

/// A YAML double-quoted scalar (JSON strings are valid YAML).
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// An Ingress of class `weir` for `host` with `annotations` (short names get the ingress-nginx
/// prefix; names with a `/` are taken as they are), `paths` as (path, pathType, Service), and
/// a TLS section for the host from Secret `tls` when given.
fn ingress_at(
    name: &str,
    host: &str,
    annotations: &[(&str, &str)],
    paths: &[(&str, &str, &str)],
    tls: Option<&str>,
) -> String {
    let mut out = format!("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: {NS}\n");
    if !annotations.is_empty() {
        out.push_str("  annotations:\n");
        for (k, v) in annotations {
            let key = if k.contains('/') {
                k.to_string()
            } else {
                format!("{NGINX}{k}")
            };
            out.push_str(&format!("    {key}: {}\n", q(v)));
        }
    }
    out.push_str("spec:\n  ingressClassName: weir\n");
    if let Some(secret) = tls {
        out.push_str(&format!(
            "  tls:\n  - hosts: [{host}]\n    secretName: {secret}\n"
        ));
    }
    out.push_str(&format!(
        "  rules:\n  - host: {host}\n    http:\n      paths:\n"
    ));
    for (path, kind, svc) in paths {
        out.push_str(&format!(
            "      - {{path: {}, pathType: {kind}, backend: {{service: {{name: {svc}, port: {{number: 80}}}}}}}}\n",
            q(path)
        ));
    }
    out
}

/// An Ingress for `host` sending everything (`/`, Prefix) to `svc`.
fn nginx(name: &str, host: &str, annotations: &[(&str, &str)], svc: &str) -> String {
    ingress_at(name, host, annotations, &[("/", "Prefix", svc)], None)
}

/// A Service whose endpoints are 127.0.0.1 on each of `ports` (one EndpointSlice each).
fn service_many(name: &str, ports: &[u16]) -> String {
    let mut out = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec:\n  ports: [{{name: http, port: 80, targetPort: http}}]\n"
    );
    for (i, port) in ports.iter().enumerate() {
        out.push_str(&format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-{i}\n  \
             namespace: {NS}\n  labels: {{kubernetes.io/service-name: {name}}}\naddressType: IPv4\n\
             ports: [{{name: http, port: {port}}}]\nendpoints:\n- addresses: [127.0.0.1]\n  conditions: {{ready: true}}\n"
        ));
    }
    out
}

/// `text` as a YAML literal block under a key indented by 2 (its lines indented by 4).
fn block(text: &str) -> String {
    let mut out = String::from("|\n");
    for line in text.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A `kubernetes.io/tls` Secret.
fn tls_secret(name: &str, cert_pem: &str, key_pem: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {NS}}}\ntype: kubernetes.io/tls\n\
         stringData:\n  tls.crt: {}  tls.key: {}",
        block(cert_pem),
        block(key_pem)
    )
}

// ---------------------------------------------------------------------------------------------
// Standalone with its log kept

/// `weir standalone` on a folder of manifests, its log (stderr) kept in a file.
struct Served {
    m: Manifests,
    log_dir: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.log_dir);
    }
}

impl std::ops::Deref for Served {
    type Target = Manifests;
    fn deref(&self) -> &Manifests {
        &self.m
    }
}

impl Served {
    /// Writes `manifests` (one file) and the IngressClass into a fresh folder and serves it
    /// with `extra` flags; returns once the proxy listens.
    fn start(manifests: &str, extra: &[&str]) -> Served {
        let log_dir = temp_dir("nginx-log");
        let log = std::fs::File::create(log_dir.join("stderr.log")).unwrap();
        let m = Manifests::launch(&[("10-test.yaml", manifests)], extra, &[], Stdio::from(log));
        Served { m, log_dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_dir.join("stderr.log")).unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// `method path` with `Host: host` and `headers`.
async fn call(
    c: &HttpClient,
    s: &Served,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Resp {
    let mut h = vec![("host", host)];
    h.extend_from_slice(headers);
    send(c, method, &s.url(path), &h, body).await
}

async fn get_at(
    c: &HttpClient,
    s: &Served,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Resp {
    call(c, s, "GET", host, path, headers, Bytes::new()).await
}

/// Sends GET `path` to `host` until it answers `want` (bounded): the listener opens before
/// the first translation lands. Returns that answer.
async fn ready(c: &HttpClient, s: &Served, host: &str, path: &str, want: u16) -> Resp {
    let started = Instant::now();
    loop {
        let r = get_at(c, s, host, path, &[]).await;
        if r.status == want {
            return r;
        }
        assert!(
            started.elapsed() < T,
            "{host}{path}: still {} ({:?}), wanted {want}; log:\n{}",
            r.status,
            String::from_utf8_lossy(&r.body),
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// What an echo upstream reported receiving: path and query.
fn echoed(r: &Resp) -> (String, Option<String>) {
    let j = r.json();
    (
        j["path"].as_str().unwrap_or_default().to_string(),
        j["query"].as_str().map(str::to_string),
    )
}

/// Decodes `%XX` escapes (and nothing else).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        if let (b'%', Some(Ok(v))) = (b[i], hex.map(|h| u8::from_str_radix(h, 16))) {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

// ---------------------------------------------------------------------------------------------
// A recording upstream (and authentication service)

/// An upstream answering `200 ok` to everything, with `x-upstream: <name>`.
fn upstream(name: &'static str) -> Server {
    Server::start(move |_| response(200, &format!("x-upstream: {name}\r\n"), "ok"))
}

// ---------------------------------------------------------------------------------------------
// 1. rewrite-target

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_target_rewrites_the_upstream_path_with_capture_groups() {
    let api = echo("api");
    let web = echo("web");
    let host = "rw.test";
    let manifests = docs(&[
        service(NS, "api", api.port),
        service(NS, "web", web.port),
        ingress_at(
            "rewrite",
            host,
            &[("rewrite-target", "/$2"), ("x-forwarded-prefix", "/api")],
            &[("/api(/|$)(.*)", "ImplementationSpecific", "api")],
            None,
        ),
        // Everything else on the host, without ingress-nginx annotations.
        ingress_at("rest", host, &[], &[("/", "Prefix", "web")], None),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, host, "/api/ready", 200).await;

    let r = get_at(&c, &s, host, "/api/users/7?x=1", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo_name().as_deref(), Some("api"));
    assert_eq!(echoed(&r), ("/users/7".into(), Some("x=1".into())));
    assert_eq!(r.json()["host"], host, "the Host goes on unchanged");
    // x-forwarded-prefix: the upstream gets the configured value, whatever the client sent.
    let r = get_at(
        &c,
        &s,
        host,
        "/api/users/7",
        &[("x-forwarded-prefix", "/forged")],
    )
    .await;
    assert_eq!(r.json()["headers"]["x-forwarded-prefix"], "/api", "{r:?}");

    // `~*`: case-insensitive.
    let r = get_at(&c, &s, host, "/API/users", &[]).await;
    assert_eq!(r.echo_name().as_deref(), Some("api"), "{r:?}");
    assert_eq!(echoed(&r), ("/users".into(), None));

    // `$` ends the first group: /api alone becomes /.
    let r = get_at(&c, &s, host, "/api", &[]).await;
    assert_eq!(r.echo_name().as_deref(), Some("api"), "{r:?}");
    assert_eq!(echoed(&r).0, "/");

    // /apix is not /api followed by / or the end: the other route, path untouched.
    let r = get_at(&c, &s, host, "/apix/users?y=2", &[]).await;
    assert_eq!(r.echo_name().as_deref(), Some("web"), "{r:?}");
    assert_eq!(echoed(&r), ("/apix/users".into(), Some("y=2".into())));
}

// ---------------------------------------------------------------------------------------------
// 2. redirects

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_annotations_answer_without_the_upstream() {
    let web = echo("web");
    let manifests = docs(&[
        service(NS, "web", web.port),
        nginx(
            "moved",
            "moved.test",
            &[("permanent-redirect", "https://new.example.com/landing")],
            "web",
        ),
        nginx(
            "moved-308",
            "moved308.test",
            &[
                ("permanent-redirect", "https://new.example.com/"),
                ("permanent-redirect-code", "308"),
            ],
            "web",
        ),
        nginx(
            "temp",
            "temp.test",
            &[("temporal-redirect", "https://maintenance.example.com/")],
            "web",
        ),
        nginx("root", "root.test", &[("app-root", "/app")], "web"),
        nginx(
            "www",
            "brand.test",
            &[("from-to-www-redirect", "true")],
            "web",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "root.test", "/other", 200).await;

    let cases = [
        ("moved.test", 301, "https://new.example.com/landing"),
        ("moved308.test", 308, "https://new.example.com/"),
        ("temp.test", 302, "https://maintenance.example.com/"),
    ];
    for (host, status, location) in cases {
        for method in ["GET", "POST"] {
            let r = call(&c, &s, method, host, "/some/page?q=1", &[], "x").await;
            assert_eq!(r.status, status, "{method} {host}: {r:?}");
            assert_eq!(r.header("location"), Some(location), "{host}");
            assert_eq!(r.echo_name(), None, "{host}: answered without the upstream");
        }
    }

    // app-root: only / itself is sent to the app; everything else is served.
    let r = get_at(&c, &s, "root.test", "/", &[]).await;
    assert_eq!(r.status, 302, "{r:?}");
    assert_eq!(r.header("location"), Some("/app"));
    assert_eq!(r.echo_name(), None);
    for path in ["/other", "/app", "/app/page"] {
        let r = get_at(&c, &s, "root.test", path, &[]).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(r.echo_name().as_deref(), Some("web"));
        assert_eq!(echoed(&r).0, path);
    }

    // from-to-www-redirect: www.<host> goes to <host>, path and query kept; <host> is served.
    let r = get_at(&c, &s, "www.brand.test", "/shop/item?id=3&x=y", &[]).await;
    assert_eq!(r.status, 308, "{r:?}");
    assert_eq!(
        r.header("location"),
        Some("http://brand.test/shop/item?id=3&x=y")
    );
    assert_eq!(r.echo_name(), None);
    let r = get_at(&c, &s, "www.brand.test", "/", &[]).await;
    assert_eq!(
        (r.status, r.header("location")),
        (308, Some("http://brand.test/"))
    );
    let r = get_at(&c, &s, "brand.test", "/shop/item?id=3", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo_name().as_deref(), Some("web"));
}

// ---------------------------------------------------------------------------------------------
// 3. ssl-redirect

/// A CA and a certificate for `names` it signed: (CA certificate DER, leaf PEM, key PEM).
fn certificate(names: &[&str]) -> (rustls::pki_types::CertificateDer<'static>, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "nginx-annotations test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut leaf = CertificateParams::new(names).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "leaf");
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &*issuer).unwrap();
    (issuer.der().clone(), cert.pem(), key.serialize_pem())
}

/// `GET path` over HTTPS to 127.0.0.1:`port` with SNI and Host `host`, trusting `ca` only.
async fn https_get(
    port: u16,
    ca: &rustls::pki_types::CertificateDer<'static>,
    host: &str,
    path: &str,
) -> Resp {
    use http_body_util::{BodyExt, Full};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let tls = tokio::time::timeout(T, connector.connect(name, tcp))
        .await
        .expect("handshake timed out")
        .expect("handshake");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", host)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(T, sender.send_request(req))
        .await
        .expect("request timed out")
        .expect("request");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_redirect_sends_plain_http_to_https() {
    let web = echo("web");
    let (ca, cert, key) = certificate(&["secure.test", "open.test"]);
    let manifests = docs(&[
        service(NS, "web", web.port),
        tls_secret("site-tls", &cert, &key),
        // A TLS section and no annotation: ssl-redirect is on by default.
        ingress_at(
            "secure",
            "secure.test",
            &[],
            &[("/", "Prefix", "web")],
            Some("site-tls"),
        ),
        ingress_at(
            "open",
            "open.test",
            &[("ssl-redirect", "false")],
            &[("/", "Prefix", "web")],
            Some("site-tls"),
        ),
        nginx(
            "forced",
            "forced.test",
            &[("force-ssl-redirect", "true")],
            "web",
        ),
        nginx("plain", "plain.test", &[("ssl-redirect", "true")], "web"),
    ]);
    // Every Ingress of ingress-nginx's class, served as on a cutover: ingress-nginx's defaults
    // apply to the Ingress without annotations too.
    let manifests = format!(
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {{name: nginx}}\n\
         spec: {{controller: k8s.io/ingress-nginx}}\n---\n{}",
        manifests.replace("ingressClassName: weir", "ingressClassName: nginx")
    );
    let tls_port = free_port();
    let s = Served::start(
        &manifests,
        &[
            "--tls-listen",
            &format!("127.0.0.1:{tls_port}"),
            "--ingress-class",
            "nginx",
            "--accept-ingress-nginx-class",
        ],
    );
    wait_for_port(tls_port);
    let c = client();
    ready(&c, &s, "open.test", "/", 200).await;

    let r = get_at(&c, &s, "secure.test", "/account/orders?page=2", &[]).await;
    assert_eq!(r.status, 308, "{r:?}");
    assert_eq!(
        r.header("location"),
        Some("https://secure.test/account/orders?page=2")
    );
    assert_eq!(r.echo_name(), None);
    let r = call(&c, &s, "POST", "secure.test", "/form", &[], "a=1").await;
    assert_eq!(r.status, 308, "a 308 keeps the method: {r:?}");

    // Over HTTPS the same Ingress is served, with the certificate of its Secret.
    let r = https_get(tls_port, &ca, "secure.test", "/account/orders?page=2").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo_name().as_deref(), Some("web"));
    assert_eq!(
        echoed(&r),
        ("/account/orders".into(), Some("page=2".into()))
    );
    assert_eq!(r.json()["headers"]["x-forwarded-proto"], "https");

    // ssl-redirect: "false": served over plain HTTP too.
    let r = get_at(&c, &s, "open.test", "/x", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.echo_name().as_deref(), Some("web"));
    let r = https_get(tls_port, &ca, "open.test", "/x").await;
    assert_eq!(r.status, 200, "{r:?}");

    // force-ssl-redirect without a TLS section: redirected all the same.
    let r = get_at(&c, &s, "forced.test", "/p?q=1", &[]).await;
    assert_eq!(r.status, 308, "{r:?}");
    assert_eq!(r.header("location"), Some("https://forced.test/p?q=1"));
    assert_eq!(r.echo_name(), None);

    // ssl-redirect: "true" without a TLS section has nothing to redirect to.
    let r = get_at(&c, &s, "plain.test", "/p", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
}

/// `auth-tls-*`: the Ingress's TLS host asks for client certificates signed by the Secret's
/// CA; a request without one, or with another CA's, gets ingress-nginx's 400; a good one is
/// served and the upstream reads it in the `ssl-client-*` headers (never what the client
/// claims); another host on the same Secret asks for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_tls_checks_client_certificates() {
    use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
    let web = echo("web");
    let server_ca = common::ca::Ca::new("server CA");
    let server = server_ca.leaf(&["mtls.test", "open.test"], ServerAuth);
    let client_ca = common::ca::Ca::new("client CA");
    let good = client_ca.client("partner", 1, false);
    let foreign = common::ca::Ca::new("other CA").client("stranger", 2, false);
    let ca_secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: client-ca, namespace: {NS}, \
         labels: {{weir.dev/credential: \"true\"}}}}\nstringData:\n  ca.crt: {}",
        block(&client_ca.pem())
    );
    let manifests = docs(&[
        service(NS, "web", web.port),
        tls_secret("site-tls", &server.pem, &server.key_pem),
        ca_secret,
        ingress_at(
            "mtls",
            "mtls.test",
            &[
                ("auth-tls-secret", &format!("{NS}/client-ca")),
                ("auth-tls-verify-client", "on"),
                ("auth-tls-pass-certificate-to-upstream", "true"),
                // Plain HTTP is not served unchecked, even so.
                ("ssl-redirect", "false"),
            ],
            &[("/", "Prefix", "web")],
            Some("site-tls"),
        ),
        ingress_at(
            "open",
            "open.test",
            &[],
            &[("/", "Prefix", "web")],
            Some("site-tls"),
        ),
    ]);
    let tls_port = free_port();
    let s = Served::start(
        &manifests,
        &["--tls-listen", &format!("127.0.0.1:{tls_port}")],
    );
    wait_for_port(tls_port);
    let c = client();
    ready(&c, &s, "open.test", "/", 200).await;

    let call = |client: Option<&common::ca::Leaf>, host: &'static str| {
        let (connector, asked) = common::tls::connector_presenting(
            server_ca.issuer.der().clone(),
            client.map(|l| (l.pem.as_str(), l.key_pem.as_str())),
            true,
        );
        async move {
            let r = common::tls::exchange(&connector, tls_port, host, host, "/orders")
                .await
                .unwrap();
            (r.resp, asked.load(std::sync::atomic::Ordering::SeqCst))
        }
    };
    // The translation lands after the listener opens: wait for the host's own certificate.
    let started = Instant::now();
    while !call(None, "mtls.test").await.1 {
        assert!(
            started.elapsed() < T,
            "never asked for a client certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (r, _) = call(Some(&good), "mtls.test").await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = &r.json()["headers"];
    assert_eq!(seen["ssl-client-verify"], "SUCCESS");
    assert_eq!(seen["ssl-client-subject-dn"], "CN=partner");
    assert_eq!(seen["ssl-client-issuer-dn"], "CN=client CA");
    let pem = percent_decode(seen["ssl-client-cert"].as_str().unwrap());
    assert_eq!(pem.trim(), good.pem.trim());

    for (what, client, message) in [
        (
            "no certificate",
            None,
            "No required SSL certificate was sent",
        ),
        ("another CA's", Some(&foreign), "The SSL certificate error"),
    ] {
        let (r, asked) = call(client, "mtls.test").await;
        assert!(asked, "{what}");
        assert_eq!(r.status, 400, "{what}: {r:?}");
        assert_eq!(r.json()["message"], message, "{what}");
        assert_eq!(r.echo_name(), None, "{what}");
    }
    // Plain HTTP carries no certificate: sent to HTTPS (426 Upgrade Required).
    let r = get_at(&c, &s, "mtls.test", "/orders", &[]).await;
    assert_eq!(r.status, 426, "{r:?}");
    assert_eq!(r.echo_name(), None);

    let (r, asked) = call(None, "open.test").await;
    assert!(!asked, "the other host asks for no certificate");
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.json()["headers"].get("ssl-client-verify").is_none());
}

// ---------------------------------------------------------------------------------------------
// 4. proxy-body-size

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_body_size_refuses_larger_bodies_before_the_upstream() {
    let up = upstream("small");
    let manifests = docs(&[
        service(NS, "small", up.port),
        nginx("small", "small.test", &[("proxy-body-size", "1k")], "small"),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "small.test", "/", 200).await;
    let before = up.count();

    // Over the limit, with a Content-Length: refused, never forwarded.
    let big = vec![b'b'; 2048];
    let r = call(&c, &s, "POST", "small.test", "/upload", &[], big).await;
    assert_eq!(r.status, 413, "{r:?}");
    assert_eq!(r.header("x-upstream"), None);
    assert_eq!(up.count(), before, "the upstream saw the refused request");

    // The same with chunked coding (no length known in advance).
    let mut raw_req = b"POST /upload HTTP/1.1\r\nHost: small.test\r\nConnection: close\r\n\
        Transfer-Encoding: chunked\r\n\r\n"
        .to_vec();
    for _ in 0..4 {
        raw_req.extend_from_slice(b"200\r\n");
        raw_req.extend(std::iter::repeat_n(b'c', 512));
        raw_req.extend_from_slice(b"\r\n");
    }
    raw_req.extend_from_slice(b"0\r\n\r\n");
    let answer = raw(s.proc.port, &raw_req, T);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(
        up.count(),
        before,
        "the upstream saw the refused chunked request: {:?}",
        up.seen().last().map(|x| x.head.clone())
    );

    // Exactly at the limit and under it: forwarded whole.
    for len in [512usize, 1024] {
        let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let r = call(&c, &s, "POST", "small.test", "/upload", &[], body.clone()).await;
        assert_eq!(r.status, 200, "{len} bytes: {r:?}");
        let seen = up.last();
        assert_eq!(seen.request_line(), "POST /upload HTTP/1.1");
        assert!(
            seen.body == body,
            "{len}: the upstream got {} bytes",
            seen.body.len()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 5. source ranges

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_ranges_allow_and_deny_the_client_address() {
    let up = upstream("ranges");
    let manifests = docs(&[
        service(NS, "ranges", up.port),
        nginx(
            "ten",
            "ten.test",
            &[("whitelist-source-range", "10.0.0.0/8")],
            "ranges",
        ),
        nginx(
            "loopback",
            "loopback.test",
            &[("whitelist-source-range", "10.0.0.0/8, 127.0.0.1/32")],
            "ranges",
        ),
        nginx(
            "denied",
            "denied.test",
            &[("denylist-source-range", "127.0.0.1")],
            "ranges",
        ),
        nginx(
            "other-denied",
            "other-denied.test",
            &[("denylist-source-range", "192.168.0.0/16")],
            "ranges",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "loopback.test", "/", 200).await;

    for host in ["ten.test", "denied.test"] {
        let before = up.count();
        let r = get_at(&c, &s, host, "/secret", &[("x-forwarded-for", "10.1.2.3")]).await;
        assert_eq!(r.status, 403, "{host}: {r:?}");
        assert_eq!(r.header("x-upstream"), None);
        assert_eq!(up.count(), before, "{host}: the upstream saw it");
    }
    for host in ["loopback.test", "other-denied.test"] {
        let r = get_at(&c, &s, host, "/secret", &[]).await;
        assert_eq!(r.status, 200, "{host}: {r:?}");
        assert_eq!(r.header("x-upstream"), Some("ranges"));
        let seen = up.last();
        assert_eq!(seen.request_line(), "GET /secret HTTP/1.1");
        assert_eq!(seen.header("host").as_deref(), Some(host));
    }
}

// ---------------------------------------------------------------------------------------------
// 6. CORS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_cors_answers_preflights_with_ingress_nginx_defaults() {
    let up = upstream("cors");
    let manifests = docs(&[
        service(NS, "cors", up.port),
        nginx("cors", "cors.test", &[("enable-cors", "true")], "cors"),
        nginx(
            "cors-one",
            "cors-one.test",
            &[
                ("enable-cors", "true"),
                ("cors-allow-origin", "https://good.example"),
            ],
            "cors",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "cors.test", "/", 200).await;
    let origin = "https://app.example";
    let preflight = |origin: &'static str| {
        [
            ("origin", origin),
            ("access-control-request-method", "PUT"),
            ("access-control-request-headers", "content-type"),
        ]
    };

    // The preflight is answered by Weir with ingress-nginx's default lists.
    let before = up.count();
    let r = call(
        &c,
        &s,
        "OPTIONS",
        "cors.test",
        "/api/items",
        &preflight(origin),
        "",
    )
    .await;
    // ingress-nginx answers 204, Weir's cors plugin 200: both are successful preflights.
    assert!(matches!(r.status, 200 | 204), "{r:?}");
    assert!(r.body.is_empty());
    // Credentials are allowed by default, so the origin is sent back rather than `*`.
    assert_eq!(r.header("access-control-allow-origin"), Some(origin));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET,PUT,POST,DELETE,PATCH,OPTIONS")
    );
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization")
    );
    assert_eq!(r.header("access-control-max-age"), Some("1728000"));
    assert_eq!(r.header("x-upstream"), None);
    assert_eq!(up.count(), before, "the preflight reached the upstream");

    // A simple request goes through and gets the CORS headers.
    let r = get_at(&c, &s, "cors.test", "/api/items", &[("origin", origin)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-upstream"), Some("cors"));
    assert_eq!(r.header("access-control-allow-origin"), Some(origin));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(up.last().header("origin").as_deref(), Some(origin));

    // One allowed origin: another gets no permission, in the preflight or the request.
    let good = "https://good.example";
    let r = call(
        &c,
        &s,
        "OPTIONS",
        "cors-one.test",
        "/x",
        &preflight(good),
        "",
    )
    .await;
    assert_eq!(r.header("access-control-allow-origin"), Some(good), "{r:?}");
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET,PUT,POST,DELETE,PATCH,OPTIONS")
    );
    let evil = "https://evil.example";
    let r = call(
        &c,
        &s,
        "OPTIONS",
        "cors-one.test",
        "/x",
        &preflight(evil),
        "",
    )
    .await;
    assert_eq!(r.header("access-control-allow-origin"), None, "{r:?}");
    assert_eq!(r.header("access-control-allow-methods"), None, "{r:?}");
    let r = get_at(&c, &s, "cors-one.test", "/x", &[("origin", evil)]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("access-control-allow-origin"), None, "{r:?}");
    let r = get_at(&c, &s, "cors-one.test", "/x", &[("origin", good)]).await;
    assert_eq!(r.header("access-control-allow-origin"), Some(good), "{r:?}");
}

// ---------------------------------------------------------------------------------------------
// 7. basic auth

/// htpasswd lines made with Apache's `htpasswd`: alice (`-m`, apr1 MD5), bob (`-B -C 5`,
/// bcrypt), carol (`-s`, SHA-1).
const HTPASSWD: &str = "alice:$apr1$SnAXTe0A$DZt6g9.ZbsS5Hm6nf3/PO/
bob:$2y$05$tbJjN36JOKtQMJ0TxGGtlOs4aLlJNaGGW9d4Nd0fjRUxyhfAH45Cm
carol:{SHA}FIOVHSnLL3QkTpKtwhYrQVvufT8=
";

/// `Basic` credentials for `user:password`.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_checks_the_htpasswd_secret() {
    let up = upstream("private");
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: basic-users\n  namespace: {NS}\n  \
         labels: {{weir.dev/credential: \"true\"}}\nstringData:\n  auth: {}",
        block(HTPASSWD)
    );
    let realm = "Weir test - private";
    let manifests = docs(&[
        service(NS, "private", up.port),
        secret,
        nginx(
            "private",
            "private.test",
            &[
                ("auth-type", "basic"),
                ("auth-secret", "basic-users"),
                ("auth-realm", realm),
            ],
            "private",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    let r = ready(&c, &s, "private.test", "/", 401).await;
    assert_eq!(
        r.header("www-authenticate"),
        Some(format!("Basic realm=\"{realm}\"").as_str()),
        "{r:?}"
    );
    assert_eq!(up.count(), 0);

    let refused = [
        basic("alice", "wrong"),
        basic("bob", "wonder-land"),
        basic("carol", "C4ROL"),
        basic("mallory", "wonder-land"),
        "Basic not-base64!".to_string(),
    ];
    for auth in &refused {
        let r = get_at(&c, &s, "private.test", "/data", &[("authorization", auth)]).await;
        assert_eq!(r.status, 401, "{auth}: {r:?}");
        assert!(
            r.header("www-authenticate")
                .is_some_and(|v| v.starts_with("Basic realm=")),
            "{r:?}"
        );
        assert_eq!(r.header("x-upstream"), None);
    }
    assert_eq!(up.count(), 0, "a refused request reached the upstream");

    for (user, password) in [
        ("alice", "wonder-land"),
        ("bob", "b0b-secret"),
        ("carol", "c4rol"),
    ] {
        let auth = basic(user, password);
        let r = get_at(
            &c,
            &s,
            "private.test",
            "/data?u=1",
            &[("authorization", &auth)],
        )
        .await;
        assert_eq!(r.status, 200, "{user}: {r:?}");
        assert_eq!(r.header("x-upstream"), Some("private"));
        let seen = up.last();
        assert_eq!(seen.request_line(), "GET /data?u=1 HTTP/1.1");
        // As with nginx's auth_basic, the credentials go on to the upstream.
        assert_eq!(seen.all("authorization"), [auth]);
    }
    assert_eq!(up.count(), 3);
}

// ---------------------------------------------------------------------------------------------
// 8. external authentication (auth-url)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_url_asks_the_authentication_service() {
    let auth = Server::start(|req| match req.header("authorization").as_deref() {
        Some("Bearer good") => response(200, "x-user: alice\r\nx-other: hidden\r\n", ""),
        _ => response(401, "www-authenticate: Bearer realm=\"t\"\r\n", "no"),
    });
    let up = upstream("app");
    let url = format!("http://127.0.0.1:{}/verify", auth.port);
    let signin = "https://login.example/start";
    let manifests = docs(&[
        service(NS, "app", up.port),
        nginx(
            "fa",
            "fa.test",
            &[("auth-url", &url), ("auth-response-headers", "X-User")],
            "app",
        ),
        nginx(
            "fa-signin",
            "signin.test",
            &[("auth-url", &url), ("auth-signin", signin)],
            "app",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "fa.test", "/", 401).await;

    // Allowed: the service's X-User replaces the client's; its other headers stay behind.
    let r = get_at(
        &c,
        &s,
        "fa.test",
        "/private?a=1",
        &[("authorization", "Bearer good"), ("x-user", "mallory")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-upstream"), Some("app"));
    let seen = up.last();
    assert_eq!(seen.request_line(), "GET /private?a=1 HTTP/1.1");
    assert_eq!(seen.all("x-user"), ["alice"], "{}", seen.head);
    assert!(seen.all("x-other").is_empty(), "{}", seen.head);
    let sub = auth.last();
    assert!(
        sub.request_line().starts_with("GET /verify"),
        "{}",
        sub.head
    );
    assert_eq!(sub.all("authorization"), ["Bearer good"]);
    assert_eq!(
        sub.all("x-original-url"),
        ["http://fa.test/private?a=1"],
        "{}",
        sub.head
    );

    // Refused: the service's 401 goes to the client; the upstream never sees the request.
    let before = up.count();
    for token in [None, Some("Bearer bad")] {
        let headers: Vec<(&str, &str)> = token.map(|t| ("authorization", t)).into_iter().collect();
        let r = get_at(&c, &s, "fa.test", "/private", &headers).await;
        assert_eq!(r.status, 401, "{token:?}: {r:?}");
        assert_eq!(r.header("x-upstream"), None);
    }
    assert_eq!(up.count(), before, "a refused request reached the upstream");

    // auth-signin: a 401 becomes a redirect to sign in, with where to come back in `rd`.
    let r = get_at(&c, &s, "signin.test", "/page/one?a=1&b=2", &[]).await;
    assert_eq!(r.status, 302, "{r:?}");
    let location = r.header("location").expect("Location").to_string();
    let (base, rd) = location
        .split_once("?rd=")
        .unwrap_or_else(|| panic!("no rd parameter: {location}"));
    assert_eq!(base, signin);
    assert_eq!(percent_decode(rd), "http://signin.test/page/one?a=1&b=2");
    assert_eq!(up.count(), before);
    let r = get_at(
        &c,
        &s,
        "signin.test",
        "/page/one",
        &[("authorization", "Bearer good")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
}

/// `auth-request-redirect` sets the subrequest's `X-Auth-Request-Redirect`; the service's
/// cookies reach the client with a successful answer, and with every answer under
/// `auth-always-set-cookie`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_service_cookies_and_redirect_reach_where_ingress_nginx_sends_them() {
    let auth = Server::start(|_| {
        response(
            200,
            "set-cookie: session=abc; Path=/\r\nset-cookie: seen=1\r\n",
            "",
        )
    });
    let up = Server::start(|req| {
        let status = if req.request_line().contains("/missing") {
            404
        } else {
            200
        };
        response(status, "set-cookie: app=1\r\n", "app")
    });
    let url = format!("http://127.0.0.1:{}/verify", auth.port);
    let manifests = docs(&[
        service(NS, "app", up.port),
        nginx(
            "cookies",
            "cookies.test",
            &[
                ("auth-url", &url),
                ("auth-request-redirect", "https://cookies.test/after-login"),
            ],
            "app",
        ),
        nginx(
            "always",
            "always.test",
            &[("auth-url", &url), ("auth-always-set-cookie", "true")],
            "app",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "always.test", "/", 200).await;
    let cookies = |r: &Resp| -> Vec<String> {
        r.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    };

    let r = get_at(&c, &s, "cookies.test", "/orders?id=1", &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(cookies(&r), ["app=1", "session=abc; Path=/", "seen=1"]);
    assert_eq!(
        auth.last().all("x-auth-request-redirect"),
        ["https://cookies.test/after-login"]
    );
    // Not with an unsuccessful answer, unless always.
    let r = get_at(&c, &s, "cookies.test", "/missing", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(cookies(&r), ["app=1"]);
    let r = get_at(&c, &s, "always.test", "/missing?x=1", &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(cookies(&r), ["app=1", "session=abc; Path=/", "seen=1"]);
    // Without auth-request-redirect, the request's own path and query.
    assert_eq!(auth.last().all("x-auth-request-redirect"), ["/missing?x=1"]);
}

// ---------------------------------------------------------------------------------------------
// 9. limit-rps

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_rps_answers_503_beyond_the_burst_except_for_the_whitelist() {
    let limited = upstream("limited");
    let exempt = upstream("exempt");
    let manifests = docs(&[
        service(NS, "limited", limited.port),
        service(NS, "exempt", exempt.port),
        nginx("ready", "ready.test", &[], "exempt"),
        nginx(
            "limited",
            "limited.test",
            &[("limit-rps", "1"), ("limit-burst-multiplier", "1")],
            "limited",
        ),
        nginx(
            "exempt",
            "exempt.test",
            &[
                ("limit-rps", "1"),
                ("limit-burst-multiplier", "1"),
                ("limit-whitelist", "127.0.0.1"),
            ],
            "exempt",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    // Ready on another Ingress of the same folder: the limits' buckets stay full.
    ready(&c, &s, "ready.test", "/", 200).await;

    let burst = |host: &'static str| {
        let c = c.clone();
        let s = &s;
        async move {
            let all = (0..10).map(|_| {
                let c = c.clone();
                async move { get_at(&c, s, host, "/", &[]).await }
            });
            futures::future::join_all(all).await
        }
    };

    let answers = burst("limited.test").await;
    let ok = answers.iter().filter(|r| r.status == 200).count();
    let limited_count = answers.iter().filter(|r| r.status == 503).count();
    assert_eq!(
        ok + limited_count,
        10,
        "only 200 and 503: {:?}",
        answers.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert!(ok >= 1, "nothing got through");
    assert!(limited_count >= 1, "nothing was limited");
    assert_eq!(
        limited.count(),
        ok,
        "a limited request reached the upstream"
    );
    for r in answers.iter().filter(|r| r.status == 503) {
        assert_eq!(r.header("x-upstream"), None);
        assert!(
            r.headers
                .keys()
                .all(|k| !k.as_str().starts_with("x-ratelimit")),
            "{r:?}"
        );
    }

    let before = exempt.count();
    let answers = burst("exempt.test").await;
    assert!(
        answers.iter().all(|r| r.status == 200),
        "{:?}",
        answers.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(exempt.count(), before + 10);
}

// ---------------------------------------------------------------------------------------------
// 10. cookie affinity

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_affinity_keeps_a_client_on_one_upstream() {
    let ups = [echo("a"), echo("b"), echo("c")];
    let ports: Vec<u16> = ups.iter().map(|u| u.port).collect();
    let manifests = docs(&[
        service_many("sticky", &ports),
        nginx(
            "sticky",
            "sticky.test",
            &[
                ("affinity", "cookie"),
                ("session-cookie-name", "route"),
                ("session-cookie-path", "/"),
                ("session-cookie-max-age", "3600"),
                ("session-cookie-samesite", "Lax"),
            ],
            "sticky",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    let first = ready(&c, &s, "sticky.test", "/", 200).await;

    let set = first
        .header("set-cookie")
        .unwrap_or_else(|| panic!("no Set-Cookie: {first:?}"))
        .to_string();
    let (pair, attributes) = set.split_once(';').expect("attributes");
    let value = pair
        .strip_prefix("route=")
        .unwrap_or_else(|| panic!("{set}"));
    assert!(!value.is_empty(), "{set}");
    assert_eq!(
        attributes, " Path=/; Max-Age=3600; SameSite=Lax; HttpOnly",
        "{set}"
    );
    let home = first.echo_name().expect("echo");

    // The cookie keeps the client on the upstream that first answered it.
    for i in 0..50 {
        let r = get_at(
            &c,
            &s,
            "sticky.test",
            &format!("/page/{i}"),
            &[("cookie", pair)],
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.echo_name().as_deref(), Some(home.as_str()), "request {i}");
        assert_eq!(r.header("set-cookie"), None, "the cookie is not set again");
    }

    // Other cookies spread over the upstreams.
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..100 {
        let cookie = format!("route=client-{i}");
        let r = get_at(&c, &s, "sticky.test", "/", &[("cookie", &cookie)]).await;
        *seen.entry(r.echo_name().expect("echo")).or_default() += 1;
    }
    assert_eq!(seen.len(), 3, "100 cookies over 3 upstreams: {seen:?}");
}

// ---------------------------------------------------------------------------------------------
// 11. canary

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_takes_its_weight_and_obeys_the_header() {
    let stable = echo("stable");
    let canary = echo("canary");
    let manifests = docs(&[
        service(NS, "stable", stable.port),
        service(NS, "canary", canary.port),
        nginx("main", "shop.test", &[], "stable"),
        nginx(
            "main-canary",
            "shop.test",
            &[
                ("canary", "true"),
                ("canary-weight", "20"),
                ("canary-by-header", "X-Canary"),
            ],
            "canary",
        ),
        nginx("versioned", "versions.test", &[], "stable"),
        nginx(
            "versioned-canary",
            "versions.test",
            &[
                ("canary", "true"),
                ("canary-by-header", "X-Version"),
                ("canary-by-header-value", "v2"),
            ],
            "canary",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "shop.test", "/", 200).await;
    ready(&c, &s, "versions.test", "/", 200).await;

    // 4,000 requests, 8 at a time: about 20% to the canary.
    let started = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let c = c.clone();
            let url = s.url("/item");
            tokio::spawn(async move {
                let mut to_canary = 0usize;
                for _ in 0..500 {
                    let r = get(&c, &url, &[("host", "shop.test")]).await;
                    assert_eq!(r.status, 200, "{r:?}");
                    match r.echo_name().as_deref() {
                        Some("canary") => to_canary += 1,
                        Some("stable") => {}
                        other => panic!("answered by {other:?}"),
                    }
                }
                to_canary
            })
        })
        .collect();
    let mut to_canary = 0;
    for t in tasks {
        to_canary += t.await.unwrap();
    }
    let share = to_canary as f64 / 4000.0 * 100.0;
    assert!(
        (17.0..=23.0).contains(&share),
        "{to_canary} of 4000 to the canary ({share:.1}%), in {:?}",
        started.elapsed()
    );

    // The header overrides the weight: always and never.
    for (value, want) in [("always", "canary"), ("never", "stable")] {
        for _ in 0..50 {
            let r = get_at(&c, &s, "shop.test", "/item", &[("x-canary", value)]).await;
            assert_eq!(r.echo_name().as_deref(), Some(want), "X-Canary: {value}");
        }
    }

    // canary-by-header-value: only that value; `always` means nothing then; no weight.
    for (header, want) in [
        (Some("v2"), "canary"),
        (Some("v1"), "stable"),
        (Some("always"), "stable"),
        (None, "stable"),
    ] {
        let headers: Vec<(&str, &str)> = header.map(|v| ("x-version", v)).into_iter().collect();
        for _ in 0..20 {
            let r = get_at(&c, &s, "versions.test", "/", &headers).await;
            assert_eq!(
                r.echo_name().as_deref(),
                Some(want),
                "X-Version: {header:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 12. unsupported annotations

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_access_annotations_fail_closed() {
    let up = upstream("guarded");
    let manifests = docs(&[
        service(NS, "guarded", up.port),
        nginx(
            "mtls",
            "mtls.test",
            &[("auth-tls-secret", "elsewhere/client-ca")],
            "guarded",
        ),
        nginx(
            "mtls-served",
            "mtls-served.test",
            &[
                ("auth-tls-secret", "elsewhere/client-ca"),
                ("weir.dev/unsupported-annotations", "serve"),
            ],
            "guarded",
        ),
        nginx(
            "snippet",
            "snippet.test",
            &[(
                "configuration-snippet",
                "more_set_headers \"X-Snippet: yes\";",
            )],
            "guarded",
        ),
        nginx("plain", "plain.test", &[], "guarded"),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "plain.test", "/", 200).await;

    // A client CA of another namespace is not read: the Ingress answers 503 rather than serve
    // without the check.
    let before = up.count();
    let r = get_at(&c, &s, "mtls.test", "/account", &[]).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.header("x-upstream"), None);
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    // Which annotation is the operator's to read (Events, log), not every client's.
    assert!(
        message.starts_with("This route is disabled") && !message.contains("auth-tls"),
        "the 503 says where to look, not what: {message}"
    );
    assert_eq!(
        up.count(),
        before,
        "the disabled Ingress reached the upstream"
    );

    // Told to serve without it: served.
    let r = get_at(&c, &s, "mtls-served.test", "/account", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-upstream"), Some("guarded"));

    // A snippet is never applied, but guards nothing: the rest of the Ingress is served.
    let r = get_at(&c, &s, "snippet.test", "/x", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("x-snippet"), None);

    // The log names each annotation that was not applied.
    let named = eventually(T, || {
        let log = s.log();
        log.contains("auth-tls-secret") && log.contains("configuration-snippet")
    });
    assert!(named, "log:\n{}", s.log());
    let log = s.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("auth-tls-secret"))
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("503")),
        "no line says the paths answer 503:\n{log}"
    );
    assert!(
        lines.iter().any(|l| l.contains("served without it")),
        "no line says mtls-served is served:\n{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// 13. host and backend annotations, as the upstream sees them

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_backend_annotations_reach_the_upstream() {
    let api = echo("api");
    let direct = echo("direct");
    let pages = echo("pages");
    // A Service whose cluster IP is loopback and whose port is the echo's own, with no
    // EndpointSlice: only `service-upstream` can reach it.
    let cluster_ip_only = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: cip, namespace: {NS}}}\n\
         spec:\n  clusterIP: 127.0.0.1\n  ports: [{{name: http, port: {p}, targetPort: {p}}}]\n",
        p = direct.port
    );
    let shop = Server::start(|_| {
        response(
            302,
            "location: http://shop.internal:8080/login?next=%2Fcart\r\n\
             set-cookie: sid=1; Path=/cart; Domain=shop.internal; HttpOnly\r\n\
             set-cookie: pref=dark; Path=/other\r\n",
            "ok",
        )
    });
    let manifests = docs(&[
        service(NS, "api", api.port),
        service(NS, "pages", pages.port),
        service(NS, "shop", shop.port),
        nginx(
            "cookies",
            "www.shop.test",
            &[
                ("proxy-cookie-path", "/cart /shop/cart"),
                ("proxy-cookie-domain", "shop.internal www.shop.test"),
                ("proxy-redirect-from", "http://shop.internal:8080/"),
                ("proxy-redirect-to", "https://www.shop.test/"),
            ],
            "shop",
        ),
        cluster_ip_only,
        nginx(
            "vhost",
            "vhost.test",
            &[
                ("upstream-vhost", "internal.example"),
                ("server-alias", "alias.test, www.alias.test"),
            ],
            "api",
        ),
        ingress_at(
            "direct",
            "direct.test",
            &[("service-upstream", "true")],
            &[],
            None,
        )
        .replace(
            "      paths:\n",
            &format!(
                "      paths:\n      - {{path: /, pathType: Prefix, backend: {{service: {{name: cip, port: {{number: {}}}}}}}}}\n",
                direct.port
            ),
        ),
        nginx(
            "errors",
            "errors.test",
            &[("custom-http-errors", "404,503"), ("default-backend", "pages")],
            "api",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "vhost.test", "/", 200).await;

    // upstream-vhost: the Host sent upstream; the client's stays in X-Forwarded-Host. The
    // aliases are routed like the host itself.
    for host in ["vhost.test", "alias.test", "www.alias.test"] {
        let r = get_at(&c, &s, host, "/who", &[]).await;
        assert_eq!(r.status, 200, "{host}: {r:?}");
        assert_eq!(r.echo_name().as_deref(), Some("api"), "{host}");
        let seen = r.json();
        assert_eq!(seen["host"], "internal.example", "{host}: {seen}");
        assert_eq!(seen["headers"]["x-forwarded-host"], host, "{host}: {seen}");
    }
    // Not an alias: no route.
    assert_eq!(
        get_at(&c, &s, "other.alias.test", "/who", &[]).await.status,
        404
    );

    // service-upstream: the cluster IP and port, though the Service has no endpoints.
    let r = ready(&c, &s, "direct.test", "/x", 200).await;
    assert_eq!(r.echo_name().as_deref(), Some("direct"), "{r:?}");
    assert_eq!(echoed(&r).0, "/x");

    // custom-http-errors: the upstream's 404 is replaced by the default backend's page, which
    // learns what happened from the X- headers; other statuses pass.
    let r = get_at(
        &c,
        &s,
        "errors.test",
        "/missing?status=404",
        &[("accept", "text/plain")],
    )
    .await;
    assert_eq!(r.echo_name().as_deref(), Some("pages"), "{r:?}");
    let seen = r.json();
    assert_eq!(seen["path"], "/", "{seen}");
    let h = &seen["headers"];
    assert_eq!(h["x-code"], "404", "{seen}");
    assert_eq!(h["x-format"], "text/plain", "{seen}");
    assert_eq!(h["x-original-uri"], "/missing?status=404", "{seen}");
    assert_eq!(h["x-namespace"], NS, "{seen}");
    assert_eq!(h["x-ingress-name"], "errors", "{seen}");
    assert_eq!(h["x-service-name"], "api", "{seen}");
    assert_eq!(h["x-service-port"], "80", "{seen}");
    let r = get_at(&c, &s, "errors.test", "/teapot?status=418", &[]).await;
    assert_eq!(r.status, 418, "{r:?}");
    assert_eq!(r.echo_name().as_deref(), Some("api"), "{r:?}");

    // proxy-redirect-from/-to: the upstream's redirect names the public address.
    let r = ready(&c, &s, "www.shop.test", "/cart", 302).await;
    assert_eq!(
        r.header("location"),
        Some("https://www.shop.test/login?next=%2Fcart"),
        "{r:?}"
    );
    // proxy-cookie-path and -domain: the browser gets cookies for the path and host it asked
    // for; a cookie no rule matches is passed as it was.
    let cookies: Vec<&str> = r
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        cookies,
        [
            "sid=1; Path=/shop/cart; Domain=www.shop.test; HttpOnly",
            "pref=dark; Path=/other"
        ],
        "{r:?}"
    );
}

/// A TLS backend on 127.0.0.1 serving `leaf` itself, answering `NAME proxy=LINE` (the PROXY
/// protocol line it was sent, `-` without one).
fn passthrough_backend(leaf: &common::ca::Leaf, name: &'static str) -> u16 {
    let config = leaf.server_config_for(&[], None);
    common::tls::tls_backend(config, move |saw| {
        format!("{name} proxy={}", saw.proxy_line.unwrap_or("-"))
    })
}

/// `ssl-passthrough`: TLS connections for a passed-through host reach the backend's own
/// certificate and TLS (the client verifies the backend, not Weir), beside a host Weir
/// terminates on the same socket; the PROXY protocol line is sent when asked for; a
/// ClientHello that never completes is closed after --header-read-timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_passthrough_hands_tls_connections_to_the_backend() {
    use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let web = echo("web");
    let weir_ca = common::ca::Ca::new("Weir's CA");
    let site = weir_ca.leaf(&["web.test"], ServerAuth);
    let backend_ca = common::ca::Ca::new("backend CA");
    let argo_leaf = backend_ca.leaf(&["argo.test", "vault.test"], ServerAuth);
    let argo = passthrough_backend(&argo_leaf, "argo");
    let vault = passthrough_backend(&argo_leaf, "vault");
    let manifests = docs(&[
        service(NS, "web", web.port),
        service(NS, "argo", argo),
        service(NS, "vault", vault),
        tls_secret("site-tls", &site.pem, &site.key_pem),
        ingress_at(
            "web",
            "web.test",
            &[],
            &[("/", "Prefix", "web")],
            Some("site-tls"),
        ),
        nginx("argo", "argo.test", &[("ssl-passthrough", "true")], "argo"),
        nginx(
            "vault",
            "vault.test",
            &[
                ("ssl-passthrough", "true"),
                ("weir.dev/ssl-passthrough-proxy-protocol", "v1"),
            ],
            "vault",
        ),
    ]);
    let tls_port = free_port();
    let s = Served::start(
        &manifests,
        &[
            "--tls-listen",
            &format!("127.0.0.1:{tls_port}"),
            "--header-read-timeout",
            "1s",
        ],
    );
    wait_for_port(tls_port);
    let trusting_backend = common::tls::connector_trusting(backend_ca.issuer.der().clone(), &[]);
    let trusting_weir = common::tls::connector_trusting(weir_ca.issuer.der().clone(), &[]);
    // The translation lands after the listener opens.
    let started = Instant::now();
    let r = loop {
        match common::tls::exchange(&trusting_backend, tls_port, "argo.test", "argo.test", "/")
            .await
        {
            Ok(r) => break r,
            Err(e) => assert!(
                started.elapsed() < T,
                "argo.test never passed through: {e}; log:\n{}",
                s.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(r.resp.status, 200);
    assert_eq!(String::from_utf8_lossy(&r.resp.body), "argo proxy=-");
    assert_eq!(
        r.peer_cert.as_ref(),
        argo_leaf.der.as_ref(),
        "the backend's certificate"
    );
    // Weir's certificate is not what the client meets there.
    let e = common::tls::exchange(&trusting_weir, tls_port, "argo.test", "argo.test", "/").await;
    assert!(e.is_err(), "{:?}", e.map(|r| r.resp));

    // The PROXY protocol line names the client's and Weir's ends.
    let r = common::tls::exchange(&trusting_backend, tls_port, "vault.test", "vault.test", "/")
        .await
        .unwrap();
    let body = String::from_utf8_lossy(&r.resp.body).to_string();
    let want = "vault proxy=PROXY TCP4 127.0.0.1 127.0.0.1 ";
    assert!(body.starts_with(want), "{body}");
    assert!(body.ends_with(&format!(" {tls_port}")), "{body}");

    // The terminated host on the same socket, and a name no Ingress passes through, are
    // Weir's.
    let r = common::tls::exchange(&trusting_weir, tls_port, "web.test", "web.test", "/x")
        .await
        .unwrap();
    assert_eq!(r.resp.status, 200);
    assert_eq!(r.resp.json()["path"], "/x");
    assert_eq!(r.peer_cert.as_ref(), site.der.as_ref());
    let e = common::tls::handshake(&trusting_backend, tls_port, "other.test").await;
    assert!(e.is_err(), "an unknown name is not passed through");

    // A ClientHello that never completes: a record header announcing 512 bytes, then
    // silence. The connection is closed after --header-read-timeout (1 s), not held.
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", tls_port))
        .await
        .unwrap();
    tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "closed, not answered: {read:?}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(800),
        "closed only after the timeout: {waited:?}"
    );
    // Not handed to the TLS handshake either, which would wait a second timeout (2 s).
    assert!(
        waited < Duration::from_millis(1900),
        "not held past the timeout: {waited:?}"
    );
}

/// `mirror-*`: the mirror gets a copy of each request (path and query as the upstream got
/// them, `mirror-host` as Host, the body unless `mirror-request-body: off`), the client never
/// waits for a slow or dead mirror, and each copy is counted in /metrics by outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_annotations_copy_requests() {
    let web = echo("web");
    let mirror = Server::start(|_| response(500, "", "the mirror's answer"));
    let slow = Server::start(|_| {
        std::thread::sleep(Duration::from_secs(3));
        response(200, "", "late")
    });
    let dead = free_port();
    let target = |port: u16| format!("http://127.0.0.1:{port}");
    let manifests = docs(&[
        service(NS, "web", web.port),
        nginx(
            "shop",
            "shop.test",
            &[
                (
                    "mirror-target",
                    &format!("{}$request_uri", target(mirror.port)),
                ),
                ("mirror-host", "copy.test"),
            ],
            "web",
        ),
        nginx(
            "quiet",
            "quiet.test",
            &[
                ("mirror-target", &target(mirror.port)),
                ("mirror-request-body", "off"),
            ],
            "web",
        ),
        nginx(
            "slow",
            "slow.test",
            &[("mirror-target", &target(slow.port))],
            "web",
        ),
        nginx(
            "dead",
            "dead.test",
            &[("mirror-target", &target(dead))],
            "web",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "dead.test", "/", 200).await;
    let copy_of = |line: &str| {
        let line = line.to_string();
        (0..250)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(20));
                mirror.seen().into_iter().find(|r| r.request_line() == line)
            })
            .unwrap_or_else(|| panic!("no copy {line:?} reached the mirror"))
    };

    let r = call(
        &c,
        &s,
        "POST",
        "shop.test",
        "/orders?x=1",
        &[],
        &b"payload"[..],
    )
    .await;
    assert_eq!(r.status, 200, "the upstream's answer, not the mirror's");
    assert_eq!(echoed(&r), ("/orders".to_string(), Some("x=1".to_string())));
    let seen = copy_of("POST /orders?x=1 HTTP/1.1");
    assert_eq!(seen.header("host").as_deref(), Some("copy.test"));
    assert_eq!(seen.body, b"payload");

    let r = call(&c, &s, "POST", "quiet.test", "/q", &[], &b"secret"[..]).await;
    assert_eq!(r.status, 200);
    let seen = copy_of("POST /q HTTP/1.1");
    assert_eq!(
        seen.header("host").as_deref(),
        Some("127.0.0.1"),
        "the target's host by default"
    );
    assert!(seen.body.is_empty(), "no body: {:?}", seen.body);
    assert!(
        matches!(seen.header("content-length").as_deref(), None | Some("0")),
        "{}",
        seen.head
    );

    for host in ["slow.test", "dead.test"] {
        let started = Instant::now();
        let r = get_at(&c, &s, host, "/", &[]).await;
        assert_eq!(r.status, 200);
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{host}: the mirror held the client up for {:?}",
            started.elapsed()
        );
    }
    let started = Instant::now();
    loop {
        let m = get(&c, &s.admin_url("/metrics"), &[]).await;
        let m = String::from_utf8_lossy(&m.body);
        let line = |service: &str, outcome: &str| {
            format!("weir_mirror_requests_total{{service=\"mirror:demo/{service}\",outcome=\"{outcome}\"}} ")
        };
        // dead.test was also asked while the table loaded: its count is at least 2.
        let counted = m.contains(&line("dead", "failed"))
            && !m.contains(&line("dead", "answered"))
            && m.contains(&format!("{}1\n", line("shop", "answered")))
            && m.contains(&format!("{}1\n", line("slow", "answered")));
        if counted {
            break;
        }
        assert!(started.elapsed() < T, "copies not counted:\n{m}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// 16. satisfy, ConfigMaps of headers, limit-rate, hashing onto subsets

/// A ConfigMap of `NS` with `data`.
fn config_map(name: &str, data: &[(&str, &str)]) -> String {
    let mut out = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {NS}}}\ndata:\n"
    );
    for (k, v) in data {
        out.push_str(&format!("  {k}: {}\n", q(v)));
    }
    out
}

/// `satisfy: any` lets in a client that either its address or its credentials admit (the
/// auth service is not even asked when the address does), and answers the service's 401 when
/// neither does; `satisfy: all` needs both. `auth-proxy-set-headers` adds its ConfigMap's
/// headers to the authorization request, `custom-headers` its ConfigMap's to every answer
/// (over the upstream's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn satisfy_any_and_configmap_headers() {
    let auth = Server::start(|req| match req.header("authorization").as_deref() {
        Some("Bearer good") => response(200, "", ""),
        _ => response(401, "www-authenticate: Bearer realm=\"t\"\r\n", "no"),
    });
    let up = Server::start(|_| response(200, "x-frame-options: SAMEORIGIN\r\n", "ok"));
    let url = format!("http://127.0.0.1:{}/verify", auth.port);
    let guarded = |name: &str, host: &str, range: &'static str, satisfy: Option<&'static str>| {
        let mut a = vec![
            ("whitelist-source-range", range),
            ("auth-url", url.as_str()),
            ("auth-proxy-set-headers", "auth-headers"),
            ("custom-headers", "response-headers"),
        ];
        a.extend(satisfy.map(|s| ("satisfy", s)));
        nginx(name, host, &a, "app")
    };
    let manifests = docs(&[
        service(NS, "app", up.port),
        config_map(
            "auth-headers",
            &[("X-Using-Weir", "true"), ("X-Tenant", "demo")],
        ),
        config_map("response-headers", &[("X-Frame-Options", "DENY")]),
        guarded("near", "near.test", "127.0.0.1/32", Some("any")),
        guarded("far", "far.test", "10.0.0.0/8", Some("any")),
        guarded("both", "both.test", "10.0.0.0/8", Some("all")),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "near.test", "/", 200).await;
    let good = [("authorization", "Bearer good")];

    // The address admits: no credentials needed, the auth service not asked.
    let asked = auth.count();
    let r = get_at(&c, &s, "near.test", "/in", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(up.last().request_line(), "GET /in HTTP/1.1");
    assert_eq!(auth.count(), asked, "the auth service was asked");
    // The upstream's X-Frame-Options is replaced, not doubled.
    let frame: Vec<_> = r.headers.get_all("x-frame-options").iter().collect();
    assert_eq!(frame, ["DENY"], "{r:?}");

    // The address does not: the credentials decide, with the service's 401 when they fail.
    let before = up.count();
    let r = get_at(&c, &s, "far.test", "/in", &[]).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"t\""));
    assert_eq!(up.count(), before, "a refused request reached the upstream");
    let r = get_at(&c, &s, "far.test", "/in", &good).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(up.last().request_line(), "GET /in HTTP/1.1");
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    let sub = auth.last();
    assert_eq!(sub.all("x-using-weir"), ["true"], "{}", sub.head);
    assert_eq!(sub.all("x-tenant"), ["demo"], "{}", sub.head);
    assert_eq!(sub.all("authorization"), ["Bearer good"]);

    // satisfy: all — good credentials from a refused address stay out.
    let before = up.count();
    let r = get_at(&c, &s, "both.test", "/in", &good).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(up.count(), before, "a refused request reached the upstream");
}

/// `limit-rate` (kilobytes a second) paces an answer's body after `limit-rate-after`
/// kilobytes, every byte arriving; `upstream-hash-by-subset` keeps one key's requests on its
/// subset of pods while other keys reach every pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_rate_paces_answers_and_subsets_keep_keys_on_a_few_pods() {
    let big = "x".repeat(40 * 1024);
    let body = big.clone();
    let up = Server::start(move |_| response(200, "x-upstream: big\r\n", &body));
    let ups = [echo("a"), echo("b"), echo("c"), echo("d")];
    let ports: Vec<u16> = ups.iter().map(|u| u.port).collect();
    let manifests = docs(&[
        service(NS, "big", up.port),
        service_many("pods", &ports),
        nginx(
            "slow",
            "slow.test",
            &[("limit-rate", "32"), ("limit-rate-after", "8")],
            "big",
        ),
        nginx(
            "subsets",
            "subsets.test",
            &[
                ("upstream-hash-by", "$arg_user"),
                ("upstream-hash-by-subset", "true"),
                ("upstream-hash-by-subset-size", "2"),
            ],
            "pods",
        ),
    ]);
    let s = Served::start(&manifests, &[]);
    let c = client();
    ready(&c, &s, "subsets.test", "/", 200).await;

    // 8 KiB free, then 32 KiB at 32 KiB a second: at least a second (a lower bound, which
    // pacing guarantees however fast the machine; how close to it is for the benchmarks).
    let started = Instant::now();
    let r = get_at(&c, &s, "slow.test", "/file", &[]).await;
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body.len(), big.len());
    assert!(r.body.iter().all(|b| *b == b'x'));
    assert!(
        took >= Duration::from_millis(950),
        "paced body took {took:?}"
    );

    // One key: exactly two pods, both used.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..12 {
        let r = get_at(&c, &s, "subsets.test", "/?user=alice", &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        seen.insert(r.echo_name().expect("echo"));
    }
    assert_eq!(seen.len(), 2, "alice's requests: {seen:?}");
    // Many keys: every pod.
    let mut all = std::collections::BTreeSet::new();
    for i in 0..60 {
        let r = get_at(&c, &s, "subsets.test", &format!("/?user=u{i}"), &[]).await;
        all.insert(r.echo_name().expect("echo"));
    }
    assert_eq!(all.len(), 4, "{all:?}");
}
