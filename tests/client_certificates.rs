//! Client certificates checked as ingress-nginx checks them (`client_validation` with
//! `refusal: http`): the handshake takes any certificate, each request of a protected host is
//! answered `400` (or redirected to the error page) when its connection's certificate is
//! missing or invalid for the mode, the upstream is told what was presented in the
//! `ssl-client-*` headers (never what the client claims), and a request for a protected host
//! over a connection made for another name gets `421`, over HTTP/1.1 and HTTP/2.

mod common;

use common::ca::{Ca, Leaf};
use common::*;
use rcgen::ExtendedKeyUsagePurpose::ServerAuth;
use serde_json::{json, Value};

const SECURE: &str = "secure.example.test";
const OPEN: &str = "open.example.test";

/// The CAs and certificates of these tests.
struct Pki {
    server_ca: Ca,
    server: Leaf,
    client_ca: Ca,
    good: Leaf,
    /// Signed by an intermediate of the client CA (PEM chain: certificate, intermediate).
    deep: Leaf,
    foreign: Leaf,
    expired: Leaf,
    revoked: Leaf,
    crl: String,
}

impl Pki {
    fn new() -> Pki {
        let server_ca = Ca::new("server CA");
        let server = server_ca.leaf(&[SECURE, OPEN], ServerAuth);
        let client_ca = Ca::new("client CA");
        let mid = client_ca.intermediate("client intermediate");
        let mut deep = mid.client("deep", 5, false);
        deep.pem.push_str(&mid.pem());
        Pki {
            good: client_ca.client("good", 1, false),
            foreign: Ca::new("other CA").client("foreign", 2, false),
            expired: client_ca.client("expired", 3, true),
            revoked: client_ca.client("revoked", 4, false),
            crl: client_ca.crl(&[4]),
            deep,
            server_ca,
            server,
            client_ca,
        }
    }

    /// The table: `SECURE` asks for client certificates as `validation` says (its CA, unless
    /// given, and the server certificate filled in), `OPEN` for none; both route to
    /// `echo_port`.
    fn table(&self, echo_port: u16, validation: Value) -> String {
        let mut validation = validation;
        if validation.get("ca").is_none() {
            validation["ca"] = json!(self.client_ca.pem());
        }
        json!({
            "routes": [
                {"id": "secure", "hosts": [SECURE], "service": "s",
                 "tls_hosts": [{"host": SECURE, "client_certificate": "secure"}]},
                {"id": "open", "hosts": [OPEN], "service": "s"},
            ],
            "services": [{"id": "s", "host": "127.0.0.1", "port": echo_port}],
            "certificates": [
                {"id": "secure", "cert": self.server.pem, "key": self.server.key_pem,
                 "snis": [SECURE], "client_validation": validation},
                {"id": "open", "cert": self.server.pem, "key": self.server.key_pem,
                 "snis": [OPEN]},
            ],
        })
        .to_string()
    }

    /// A connection with server name `sni`, presenting `client`, offering `alpn`.
    async fn connect(&self, port: u16, sni: &str, client: Option<&Leaf>, alpn: &[&str]) -> Conn {
        let (connector, _) = common::tls::connector_presenting_alpn(
            self.server_ca.issuer.der().clone(),
            client.map(|c| (c.pem.as_str(), c.key_pem.as_str())),
            true,
            alpn,
        );
        let tls = common::tls::handshake(&connector, port, sni).await.unwrap();
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = hyper_util::rt::TokioIo::new(tls);
        if h2 {
            let exec = hyper_util::rt::TokioExecutor::new();
            let (send, conn) = hyper::client::conn::http2::handshake(exec, io)
                .await
                .unwrap();
            tokio::spawn(conn);
            Conn::H2(send)
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Conn::H1(send)
        }
    }
}

type Body = http_body_util::Empty<bytes::Bytes>;

/// A kept-alive client connection.
enum Conn {
    H1(hyper::client::conn::http1::SendRequest<Body>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

impl Conn {
    /// `GET /` for `host` with `headers`: the status, the `Location`, and the headers the
    /// upstream received (Weir's JSON answer when it answered itself).
    async fn get(&mut self, host: &str, headers: &[(&str, &str)]) -> (u16, String, Value) {
        use http_body_util::BodyExt;
        let mut req = http::Request::get(format!("https://{host}/"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        // The connection takes the next request once it has finished with the last.
        let resp = match self {
            Conn::H1(send) => {
                send.ready().await.unwrap();
                let req = req.header("host", host).body(Body::new()).unwrap();
                let mut req = req;
                *req.uri_mut() = "/".parse().unwrap();
                send.send_request(req).await.unwrap()
            }
            Conn::H2(send) => {
                send.ready().await.unwrap();
                send.send_request(req.body(Body::new()).unwrap())
                    .await
                    .unwrap()
            }
        };
        let status = resp.status().as_u16();
        let location = resp
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        // The echo's view of the request, else Weir's own answer.
        let upstream = match serde_json::from_slice::<Value>(&body) {
            Ok(v) if v["headers"].is_object() => v["headers"].clone(),
            Ok(v) => v,
            Err(_) => json!({"body": String::from_utf8_lossy(&body)}),
        };
        (status, location, upstream)
    }
}

fn start(pki: &Pki, echo_port: u16, validation: Value) -> (Weir, u16) {
    let tls_port = free_port();
    let weir = Weir::start(
        &pki.table(echo_port, validation),
        &["--tls-listen", &format!("127.0.0.1:{tls_port}")],
    );
    wait_for_port(tls_port);
    (weir, tls_port)
}

/// `auth-tls-verify-client: on`: every certificate that is missing, from another CA,
/// expired, revoked by the CRL, or deeper than `verify_depth` allows gets `400` with
/// ingress-nginx's message; a good one is served, and the upstream gets its DNs and the
/// URL-encoded PEM, never the values the client sent under those names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_refuses_every_certificate_that_does_not_verify_with_400() {
    let pki = Pki::new();
    let up = echo("up");
    let validation = json!({
        "mode": "require", "refusal": "http", "crl": pki.crl, "verify_depth": 1,
        "upstream_headers": true, "pass_certificate": true,
    });
    let (_weir, port) = start(&pki, up.port, validation);
    let forged = [
        ("ssl-client-verify", "SUCCESS"),
        ("ssl-client-subject-dn", "CN=admin"),
    ];

    let mut c = pki.connect(port, SECURE, Some(&pki.good), &[]).await;
    let (status, _, seen) = c.get(SECURE, &forged).await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(seen["ssl-client-verify"], "SUCCESS");
    assert_eq!(seen["ssl-client-subject-dn"], "CN=good");
    assert_eq!(seen["ssl-client-issuer-dn"], "CN=client CA");
    let pem = seen["ssl-client-cert"].as_str().unwrap();
    let decoded: String = {
        let mut out = Vec::new();
        let b = pem.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                out.push(u8::from_str_radix(&pem[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    };
    assert_eq!(decoded.trim(), pki.good.pem.trim());

    for (what, client, message) in [
        ("none", None, "No required SSL certificate was sent"),
        (
            "another CA's",
            Some(&pki.foreign),
            "The SSL certificate error",
        ),
        ("expired", Some(&pki.expired), "The SSL certificate error"),
        ("revoked", Some(&pki.revoked), "The SSL certificate error"),
        ("too deep", Some(&pki.deep), "The SSL certificate error"),
    ] {
        let mut c = pki.connect(port, SECURE, client, &[]).await;
        let (status, _, seen) = c.get(SECURE, &forged).await;
        assert_eq!(status, 400, "{what}: {seen}");
        assert_eq!(seen["message"], message, "{what}: {seen}");
    }
}

/// `optional` serves a connection without a certificate (the upstream reads `NONE`) and
/// refuses an invalid one; `optional_no_ca` serves both and tells the upstream why the
/// certificate failed; a chain through an intermediate is served where the depth allows it;
/// with an error page the refusal is a redirect there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_modes_and_the_error_page() {
    let pki = Pki::new();
    let up = echo("up");
    let c = client();
    let (weir, port) = start(
        &pki,
        up.port,
        json!({"mode": "optional", "refusal": "http", "upstream_headers": true}),
    );
    let forged = [("ssl-client-verify", "SUCCESS")];
    let (status, _, seen) = pki
        .connect(port, SECURE, None, &[])
        .await
        .get(SECURE, &forged)
        .await;
    assert_eq!((status, &seen["ssl-client-verify"]), (200, &json!("NONE")));
    let mut foreign = pki.connect(port, SECURE, Some(&pki.foreign), &[]).await;
    assert_eq!(foreign.get(SECURE, &[]).await.0, 400);

    let table = pki.table(
        up.port,
        json!({"mode": "optional_no_ca", "refusal": "http", "upstream_headers": true,
               "verify_depth": 2}),
    );
    assert_eq!(push(&c, &weir, &table).await.status, 200);
    let mut foreign = pki.connect(port, SECURE, Some(&pki.foreign), &[]).await;
    let (status, _, seen) = foreign.get(SECURE, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        seen["ssl-client-verify"],
        "FAILED:unable to get local issuer certificate"
    );
    let mut deep = pki.connect(port, SECURE, Some(&pki.deep), &[]).await;
    let (status, _, seen) = deep.get(SECURE, &[]).await;
    assert_eq!(
        (status, &seen["ssl-client-verify"]),
        (200, &json!("SUCCESS"))
    );

    let table = pki.table(
        up.port,
        json!({"mode": "require", "refusal": "http",
               "error_page": "https://login.example.test/cert-help"}),
    );
    assert_eq!(push(&c, &weir, &table).await.status, 200);
    let mut none = pki.connect(port, SECURE, None, &[]).await;
    let (status, location, _) = none.get(SECURE, &[]).await;
    assert_eq!(
        (status, location.as_str()),
        (302, "https://login.example.test/cert-help")
    );
}

/// A request for the protected host over a connection made for the open one (its Host
/// another than its SNI over HTTP/1.1, a reused connection over HTTP/2) gets `421` and never
/// reaches the upstream; the open host is served on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_made_for_another_host_gets_421() {
    let pki = Pki::new();
    let up = echo("up");
    let (_weir, port) = start(&pki, up.port, json!({"mode": "require", "refusal": "http"}));
    for alpn in [&["http/1.1"][..], &["h2"]] {
        let mut c = pki.connect(port, OPEN, None, alpn).await;
        assert_eq!(c.get(OPEN, &[]).await.0, 200, "{alpn:?}");
        let (status, _, seen) = c.get(SECURE, &[]).await;
        assert_eq!(status, 421, "{alpn:?}: {seen}");
        // Even with a certificate: it was not checked for this host.
        let mut c = pki.connect(port, OPEN, Some(&pki.good), alpn).await;
        assert_eq!(c.get(SECURE, &[]).await.0, 421, "{alpn:?}");
    }
    let mut c = pki.connect(port, SECURE, Some(&pki.good), &["h2"]).await;
    assert_eq!(c.get(SECURE, &[]).await.0, 200);
}

/// A push that rotates the CA keeps serving kept-alive connections whose certificate the new
/// CAs still accept (no 421, no reconnect); one the new CAs refuse gets the refusal of the
/// new settings: `400` where refusals are answered at HTTP, `421` (a new handshake, which
/// refuses it) where the handshake refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_ca_keeps_the_connections_it_still_accepts() {
    let pki = Pki::new();
    let up = echo("up");
    let c = client();
    let next_ca = Ca::new("next client CA");
    for refusal in ["http", "handshake"] {
        let validation = |ca: String| json!({"mode": "require", "refusal": refusal, "ca": ca});
        let (weir, port) = start(&pki, up.port, validation(pki.client_ca.pem()));
        let mut kept = pki.connect(port, SECURE, Some(&pki.good), &[]).await;
        assert_eq!(kept.get(SECURE, &[]).await.0, 200, "{refusal}");

        // Both CAs while clients move over: the kept connection goes on.
        let both = format!("{}{}", pki.client_ca.pem(), next_ca.pem());
        let table = pki.table(up.port, validation(both));
        assert_eq!(push(&c, &weir, &table).await.status, 200);
        assert_eq!(kept.get(SECURE, &[]).await.0, 200, "{refusal}");

        // The old CA gone: its certificates are refused.
        let table = pki.table(up.port, validation(next_ca.pem()));
        assert_eq!(push(&c, &weir, &table).await.status, 200);
        let want = if refusal == "http" { 400 } else { 421 };
        assert_eq!(kept.get(SECURE, &[]).await.0, want, "{refusal}");
    }
}
