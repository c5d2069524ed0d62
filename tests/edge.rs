//! The edge, as an attacker probes it: the host Weir routes on is the host the upstream gets,
//! upgrades go only where allowed, a client cannot delete proxy-added headers, path forms a
//! backend reads differently cannot reach another route, and framing faults land on the right
//! side. Each test asserts what the upstream received, not only what the client saw.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(10);

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The JSON body of a raw answer (the echo upstream's report).
fn json_body(answer: &str) -> serde_json::Value {
    let body = &answer[answer.find("\r\n\r\n").expect("a head") + 4..];
    let start = body
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {answer}"));
    let end = body.rfind('}').unwrap();
    serde_json::from_str(&body[start..=end]).unwrap()
}

/// Two routes by host: `public.test` reaches the echo upstream with the client's Host (as
/// Ingresses do), `admin.test` is closed by a route-scoped plugin.
fn hosts_table(echo: u16) -> String {
    format!(
        "routes:\n\
         - {{id: public, hosts: [public.test], preserve_host: true, service: s}}\n\
         - {{id: admin, hosts: [admin.test], preserve_host: true, service: s}}\n\
         services: [{{id: s, host: 127.0.0.1, port: {echo}}}]\n\
         plugins:\n\
         - {{id: closed, name: request-termination, route: admin, config: {{status_code: 403, message: admin only}}}}\n"
    )
}

#[test]
fn the_absolute_form_authority_is_the_host_routed_on_and_forwarded() {
    let echo = echo("e");
    let w = Weir::start(&hosts_table(echo.port), &[]);
    for req in [
        // Weir's own HTTP/1.1 loop, then hyper's (a body moves the connection there).
        &b"GET http://public.test/x HTTP/1.1\r\nHost: admin.test\r\nConnection: close\r\n\r\n"[..],
        b"POST http://public.test/x HTTP/1.1\r\nHost: admin.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab",
    ] {
        let a = raw(w.proc.port, req, T);
        assert_eq!(status(&a), 200, "{a}");
        let got = json_body(&a);
        assert_eq!(got["host"], "public.test", "{got}");
        assert_eq!(got["headers"]["host"], "public.test", "{got}");
        assert_eq!(got["headers"]["x-forwarded-host"], "public.test", "{got}");
        assert!(!a.contains("admin.test"), "{a}");
    }
    // The other way round, the closed route's plugin is not bypassed.
    for req in [
        &b"GET http://admin.test/x HTTP/1.1\r\nHost: public.test\r\nConnection: close\r\n\r\n"[..],
        b"POST http://admin.test/x HTTP/1.1\r\nHost: public.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nab",
    ] {
        let a = raw(w.proc.port, req, T);
        assert_eq!(status(&a), 403, "{a}");
    }
    // Userinfo in the target is refused rather than forwarded as a Host.
    let a = raw(
        w.proc.port,
        b"GET http://admin.test@public.test/x HTTP/1.1\r\nHost: public.test\r\nConnection: close\r\n\r\n",
        T,
    );
    assert_eq!(status(&a), 400, "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_h2c_the_authority_wins_over_a_host_header() {
    let echo = echo("e");
    let w = Weir::start(&hosts_table(echo.port), &[]);
    let req = |uri: &str, host: &str| {
        http::Request::builder()
            .uri(uri)
            .header("host", host)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap()
    };
    // Build the h2 request by hand so :authority and host differ.
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", w.proc.port))
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for (authority, host, want) in [
        ("public.test", "admin.test", 200),
        ("admin.test", "public.test", 403),
    ] {
        let mut r = req(&format!("http://{authority}/x"), host);
        *r.version_mut() = http::Version::HTTP_2;
        let resp = send.send_request(r).await.unwrap();
        let st = resp.status().as_u16();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(st, want, "{authority}: {body:?}");
        if want == 200 {
            let got: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(got["host"], "public.test", "{got}");
            assert_eq!(got["headers"]["x-forwarded-host"], "public.test", "{got}");
        }
    }
}

#[test]
fn a_duplicate_or_missing_host_is_answered_400() {
    let up = scripted(|_, mut r, mut w| {
        while read_head(&mut r).is_some() {
            let _ = w.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        }
    });
    let w = Weir::start(
        &format!(
            "routes: [{{id: any, service: s}}]\nservices: [{{id: s, host: 127.0.0.1, port: {}}}]\n",
            up.port
        ),
        &[],
    );
    for req in [
        &b"GET /x HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\nConnection: close\r\n\r\n"[..],
        b"POST /x HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\nContent-Length: 1\r\nConnection: close\r\n\r\na",
        b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nConnection: close\r\n\r\na",
        b"GET /x HTTP/1.1\r\nHost: a.test/admin\r\nConnection: close\r\n\r\n",
        b"GET /x HTTP/1.1\r\nHost: admin.internal,x\r\nConnection: close\r\n\r\n",
        b"GET /x HTTP/1.0\r\nHost: a.test\r\nHost: a.test\r\n\r\n",
    ] {
        let a = raw(w.proc.port, req, T);
        assert_eq!(status(&a), 400, "{}: {a}", String::from_utf8_lossy(req));
    }
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        0,
        "nothing was forwarded"
    );
    // HTTP/1.0 may leave Host out.
    let a = raw(w.proc.port, b"GET /x HTTP/1.0\r\n\r\n", T);
    assert_eq!(status(&a), 200, "{a}");
}

/// An upstream that switches to any protocol it is asked for (and then echoes raw bytes), and
/// otherwise answers 200 with the request head it got.
fn switching_upstream(switch_to: Option<&'static str>) -> (Scripted, Arc<Mutex<Vec<String>>>) {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let up = scripted(move |_, mut r, mut w| {
        while let Some(head) = read_head(&mut r) {
            seen.lock().unwrap().push(head.clone());
            let asked = head.lines().find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("upgrade: ")
                    .map(str::to_string)
            });
            match asked {
                Some(proto) => {
                    let to = switch_to.map_or(proto, str::to_string);
                    let _ = write!(
                        w,
                        "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: {to}\r\n\r\n"
                    );
                    // Whatever comes now is a tunnel: answer every line.
                    let mut line = String::new();
                    while r.read_line(&mut line).unwrap_or(0) > 0 {
                        let _ = write!(w, "TUNNEL {line}");
                        line.clear();
                    }
                    return;
                }
                None => {
                    let body = head.replace("\r\n", "|");
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            }
        }
    });
    (up, heads)
}

#[test]
fn h2c_and_unlisted_upgrades_are_never_tunnelled() {
    let (up, heads) = switching_upstream(None);
    let w = Weir::start(
        &format!(
            "routes:\n\
             - {{id: plain, paths: [{{path: /plain}}], service: s}}\n\
             - {{id: custom, paths: [{{path: /custom}}], service: s, upgrade_protocols: [x-custom]}}\n\
             services: [{{id: s, host: 127.0.0.1, port: {}}}]\n",
            up.port
        ),
        &[],
    );
    // h2c (with its settings), and a protocol the route does not list: a plain request.
    for (req, path) in [
        (
            &b"GET /plain HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\nGET /admin/secret HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n"[..],
            "/plain",
        ),
        (
            b"GET /plain HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: x-custom\r\n\r\nGET /admin/secret HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n",
            "/plain",
        ),
        (
            b"GET /custom HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\nGET /admin/secret HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n",
            "/custom",
        ),
    ] {
        heads.lock().unwrap().clear();
        let a = raw(w.proc.port, req, T);
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
        assert!(!a.contains("TUNNEL"), "{a}");
        let got = heads.lock().unwrap().clone();
        let first = got[0].to_ascii_lowercase();
        assert!(first.starts_with(&format!("get {path} ")), "{first}");
        for gone in ["upgrade:", "http2-settings", "connection: upgrade"] {
            assert!(!first.contains(gone), "{gone} forwarded: {first}");
        }
        // The pipelined request after it went through routing (no route: 404), never upstream.
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(a.contains("404"), "{a}");
    }
    // A protocol the route lists is switched to.
    let mut s = TcpStream::connect(("127.0.0.1", w.proc.port)).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.write_all(
        b"GET /custom HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: x-custom\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let head = read_head(&mut r).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(b"hello\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "TUNNEL hello\n");
}

#[test]
fn an_upstream_that_switches_to_another_protocol_than_asked_is_a_502() {
    let (up, _) = switching_upstream(Some("h2c"));
    let w = Weir::start(
        &format!(
            "routes: [{{id: r, service: s}}]\nservices: [{{id: s, host: 127.0.0.1, port: {}}}]\n",
            up.port
        ),
        &[],
    );
    let a = raw(
        w.proc.port,
        b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nPING\n",
        T,
    );
    assert_eq!(status(&a), 502, "{a}");
    assert!(!a.contains("TUNNEL"), "{a}");
}

#[test]
fn a_client_cannot_name_proxy_added_headers_in_connection() {
    let echo = echo("e");
    let w = Weir::start(
        &format!(
            "routes: [{{id: r, service: s, preserve_host: true}}]\n\
             services: [{{id: s, host: 127.0.0.1, port: {}}}]\n\
             plugins: [{{id: cid, name: correlation-id, config: {{header_name: x-request-id}}}}]\n",
            echo.port
        ),
        &[],
    );
    for req in [
        &b"GET /x HTTP/1.1\r\nHost: a.test\r\nConnection: x-request-id, host, x-forwarded-for\r\n\r\n"[..],
        b"POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nConnection: x-request-id, host, close\r\n\r\na",
    ] {
        let a = raw(w.proc.port, req, T);
        assert_eq!(status(&a), 200, "{a}");
        let got = json_body(&a);
        let id = got["headers"]["x-request-id"].as_str().unwrap_or_default();
        assert!(id.contains('#'), "the plugin's id reached the upstream: {got}");
        assert_eq!(got["host"], "a.test", "{got}");
        assert_eq!(got["headers"]["x-forwarded-for"], "127.0.0.1", "{got}");
    }
    // A client's own x-request-id it named as hop-by-hop is dropped before the plugin runs.
    let a = raw(
        w.proc.port,
        b"GET /x HTTP/1.1\r\nHost: a.test\r\nX-Request-ID: mine\r\nConnection: x-request-id, close\r\n\r\n",
        T,
    );
    let got = json_body(&a);
    assert_ne!(got["headers"]["x-request-id"], "mine", "{got}");
}

#[test]
fn a_malformed_chunk_in_a_request_body_is_the_clients_400() {
    let up = scripted(|_, mut r, _w| {
        read_head(&mut r);
        let mut sink = Vec::new();
        let _ = r.read_to_end(&mut sink);
    });
    let w = Weir::start(
        &format!(
            "routes: [{{id: r, service: s}}]\nservices: [{{id: s, host: 127.0.0.1, port: {}}}]\n",
            up.port
        ),
        &[],
    );
    for body in [
        &b"3\r\nabc\r\nZZ\r\n"[..],
        b"3\r\nabcXY",
        b"3\r\nabc\r\n0\r\nbad trailer\r\n\r\n",
    ] {
        let mut req = b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        req.extend_from_slice(body);
        let a = raw(w.proc.port, &req, T);
        assert_eq!(status(&a), 400, "{}: {a}", String::from_utf8_lossy(body));
    }
}

#[test]
fn a_bare_lf_ending_an_upstream_chunked_body_does_not_hang() {
    let up = scripted(|_, mut r, mut w| {
        while read_head(&mut r).is_some() {
            let _ = w.write_all(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\n",
            );
        }
    });
    let w = Weir::start(
        &format!(
            "routes: [{{id: r, service: s}}]\nservices: [{{id: s, host: 127.0.0.1, port: {}, read_timeout: 60000}}]\n",
            up.port
        ),
        &[],
    );
    // The answer completes (its last chunk arrives) well before the upstream's read timeout;
    // the client's own read limit below is far shorter than that timeout.
    let a = raw(
        w.proc.port,
        b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        T,
    );
    assert_eq!(status(&a), 200, "{a}");
    assert!(a.ends_with("3\r\nabc\r\n0\r\n\r\n"), "{a:?}");
}

fn paths_table(echo: u16) -> String {
    format!(
        "routes:\n\
         - {{id: admin, paths: [{{path: /admin}}], service: s}}\n\
         - {{id: api, paths: [{{path: /api}}], strip_path: true, service: s}}\n\
         - {{id: rest, paths: [{{path: /}}], service: s}}\n\
         services: [{{id: s, host: 127.0.0.1, port: {echo}}}]\n\
         plugins: [{{id: closed, name: request-termination, route: admin, config: {{status_code: 403}}}}]\n"
    )
}

fn get_path(port: u16, path: &str) -> String {
    raw(
        port,
        format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
        T,
    )
}

#[test]
fn path_forms_a_backend_reads_differently_cannot_reach_another_route() {
    let echo = echo("e");
    let w = Weir::start(&paths_table(echo.port), &[]);
    // Path parameters are ignored by matching: the closed route is not bypassed.
    for path in [
        "/admin;x/secret",
        "/admin;jsessionid=1",
        "/ADMIN/../admin;a=b/x",
    ] {
        let a = get_path(w.proc.port, path);
        assert_eq!(status(&a), 403, "{path}: {a}");
    }
    // Encoded slashes, backslashes, and parameters on dot segments are refused by default.
    for path in [
        "/admin%2Fsecret",
        "/admin%2fsecret",
        "/x%5C..%5Cadmin",
        "/x\\..\\admin",
        "/x/..;/admin",
        "/x/.;y/admin",
        "/;x/admin/secret",
    ] {
        let a = get_path(w.proc.port, path);
        assert_eq!(status(&a), 400, "{path}: {a}");
    }
    // Parameters travel to the upstream; a stripped prefix takes its segment's parameters along.
    let a = get_path(w.proc.port, "/public;jsessionid=1/x?q=1");
    assert_eq!(status(&a), 200, "{a}");
    assert_eq!(json_body(&a)["path"], "/public;jsessionid=1/x");
    let a = get_path(w.proc.port, "/api;v=2/items;page=3");
    assert_eq!(status(&a), 200, "{a}");
    assert_eq!(json_body(&a)["path"], "/items;page=3");
}

#[test]
fn the_escaped_slashes_policy_can_keep_decode_or_redirect() {
    let echo = echo("e");
    let keep = Weir::start(&paths_table(echo.port), &["--escaped-slashes", "keep"]);
    let a = get_path(keep.proc.port, "/admin%2fsecret");
    assert_eq!(status(&a), 200, "one segment, the catch-all: {a}");
    assert_eq!(json_body(&a)["path"], "/admin%2Fsecret");

    let forward = Weir::start(
        &paths_table(echo.port),
        &["--escaped-slashes", "unescape-and-forward"],
    );
    assert_eq!(status(&get_path(forward.proc.port, "/admin%2Fsecret")), 403);
    assert_eq!(status(&get_path(forward.proc.port, "/x\\..\\admin")), 403);
    let a = get_path(forward.proc.port, "/public%2Fx");
    assert_eq!(json_body(&a)["path"], "/public/x");

    let redirect = Weir::start(
        &paths_table(echo.port),
        &["--escaped-slashes", "unescape-and-redirect"],
    );
    let a = get_path(redirect.proc.port, "/x%2F..%2Fadmin?a=1");
    assert_eq!(status(&a), 307, "{a}");
    assert!(
        a.to_ascii_lowercase().contains("location: /admin?a=1\r\n"),
        "{a}"
    );
}

#[test]
fn connection_cannot_change_the_client_ip_behind_a_trusted_proxy() {
    let echo = echo("e");
    let w = Weir::start(
        &format!(
            "routes: [{{id: r, service: s}}]\nservices: [{{id: s, host: 127.0.0.1, port: {}}}]\n",
            echo.port
        ),
        &["--trusted-proxies", "127.0.0.1"],
    );
    let a = raw(
        w.proc.port,
        b"GET /x HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\nConnection: x-forwarded-for, close\r\n\r\n",
        T,
    );
    assert_eq!(status(&a), 200, "{a}");
    assert_eq!(json_body(&a)["headers"]["x-real-ip"], "203.0.113.9", "{a}");
}
