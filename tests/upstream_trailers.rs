//! Trailers of a chunked HTTP/1.1 upstream response (RFC 9112 §7.1.2) reach an HTTP/2 client as
//! trailers, without the fields that must never be trailers (RFC 9110 §6.5.1), and the upstream
//! connection goes back to the pool as for a response without them.

mod common;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use common::*;

/// An HTTP/2 client with prior knowledge (h2c), for Weir's plain listener.
fn h2_client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A GET over `client`: status, body and trailers.
async fn get_with_trailers(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
) -> (u16, Bytes, Option<http::HeaderMap>) {
    let req = http::Request::get(url)
        .header("te", "trailers")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("no answer in 10 s")
        .expect("request failed");
    let status = resp.status().as_u16();
    let collected = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .expect("body not whole in 10 s")
        .expect("body failed");
    let trailers = collected.trailers().cloned();
    (status, collected.to_bytes(), trailers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_upstream_trailers_reach_an_h2_client_and_the_connection_is_reused() {
    let up = scripted(|_, mut r, mut w| {
        // Every request on this connection gets the same answer, in pieces: the trailer
        // section is cut in the middle of a field.
        while read_head(&mut r).is_some() {
            w.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\n\
                  trailer: grpc-status, x-checksum\r\ntransfer-encoding: chunked\r\n\r\n\
                  5\r\nhello\r\n6\r\n world\r\n0\r\ngrpc-sta",
            )
            .unwrap();
            std::thread::sleep(Duration::from_millis(30));
            w.write_all(b"tus: 0\r\nContent-Length: 5\r\nX-Checksum:  abc \r\n\r\n")
                .unwrap();
        }
    });
    let weir = Weir::start(
        &format!(
            "routes:\n- {{id: r, service: s}}\nservices:\n- {{id: s, host: 127.0.0.1, port: {}}}\n",
            up.port
        ),
        &["--access-log", "false"],
    );
    let h2 = h2_client();
    for path in ["/first", "/second"] {
        let (status, body, trailers) = get_with_trailers(&h2, &weir.url(path)).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(&body[..], b"hello world", "{path}");
        let trailers = trailers.unwrap_or_else(|| panic!("{path}: no trailers"));
        assert_eq!(trailers.get("grpc-status").unwrap(), "0", "{path}");
        assert_eq!(trailers.get("x-checksum").unwrap(), "abc", "{path}");
        assert!(
            !trailers.contains_key("content-length"),
            "{path}: forbidden trailer forwarded: {trailers:?}"
        );
    }
    assert_eq!(
        up.accepted.load(Ordering::SeqCst),
        1,
        "the upstream connection was not reused"
    );
    let text = metrics(&client(), &weir).await;
    assert!(
        text.contains("weir_upstream_requests_total{connection=\"new\"} 1\n")
            && text.contains("weir_upstream_requests_total{connection=\"reused\"} 1\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_response_without_trailers_ends_without_them() {
    let up = scripted(|_, mut r, mut w| {
        while read_head(&mut r).is_some() {
            // Only a field that must never be a trailer: nothing to forward.
            w.write_all(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                  3\r\nabc\r\n0\r\nconnection: close\r\n\r\n",
            )
            .unwrap();
        }
    });
    let weir = Weir::start(
        &format!(
            "routes:\n- {{id: r, service: s}}\nservices:\n- {{id: s, host: 127.0.0.1, port: {}}}\n",
            up.port
        ),
        &["--access-log", "false"],
    );
    let h2 = h2_client();
    for _ in 0..2 {
        let (status, body, trailers) = get_with_trailers(&h2, &weir.url("/")).await;
        assert_eq!((status, &body[..]), (200, &b"abc"[..]));
        assert!(trailers.is_none(), "{trailers:?}");
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
}

type Answer = http::Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>;

/// An h2c upstream on a free loopback port answering every request with `answer`.
async fn h2c_upstream(
    answer: fn(http::Request<hyper::body::Incoming>) -> futures::future::BoxFuture<'static, Answer>,
) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((io, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| async move {
                    Ok::<_, std::convert::Infallible>(answer(req).await)
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                    .await;
            });
        }
    });
    port
}

/// An h2c upstream that answers every request with JSON of the body and trailers it received.
async fn trailer_echo() -> u16 {
    h2c_upstream(|req| {
        Box::pin(async move {
            let collected = req.into_body().collect().await.unwrap();
            let trailers: serde_json::Map<String, serde_json::Value> = collected
                .trailers()
                .map(|t| {
                    t.iter()
                        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().into()))
                        .collect()
                })
                .unwrap_or_default();
            let body = String::from_utf8(collected.to_bytes().to_vec()).unwrap();
            let json = serde_json::json!({"body": body, "trailers": trailers});
            http::Response::new(Full::new(Bytes::from(json.to_string())).boxed())
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_reach_an_h2_upstream_also_when_a_plugin_reads_the_body() {
    let up = trailer_echo().await;
    let config = format!(
        "routes:\n\
         - {{id: stream, paths: [{{path: /stream}}], service: s}}\n\
         - {{id: read, paths: [{{path: /read}}], service: s}}\n\
         services: [{{id: s, protocol: h2c, host: 127.0.0.1, port: {up}}}]\n\
         plugins: [{{id: upper, name: test-request-body, route: read, config: {{upper: true}}}}]\n"
    );
    let w = Weir::start(&config, &["--access-log", "false"]);
    type Frames = http_body_util::StreamBody<
        futures::stream::Iter<
            std::vec::IntoIter<Result<http_body::Frame<Bytes>, std::convert::Infallible>>,
        >,
    >;
    let client: Client<_, Frames> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    for (path, body) in [("/stream", "abc"), ("/read", "ABC")] {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", "c0ffee".parse().unwrap());
        // Checked in the head, never let in behind the body.
        trailers.insert("x-consumer-id", "forged".parse().unwrap());
        trailers.insert("authorization", "Bearer forged".parse().unwrap());
        let frames = vec![
            Ok(http_body::Frame::data(Bytes::from_static(b"abc"))),
            Ok(http_body::Frame::trailers(trailers)),
        ];
        let req = http::Request::post(w.url(path))
            .body(http_body_util::StreamBody::new(futures::stream::iter(
                frames,
            )))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let got: serde_json::Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(got["body"], body, "{path}: {got}");
        assert_eq!(got["trailers"]["x-checksum"], "c0ffee", "{path}: {got}");
        assert_eq!(
            got["trailers"].as_object().unwrap().len(),
            1,
            "{path}: {got}"
        );
    }
}

/// Sends `request` over HTTP/1.1 and reads until the chunked body's end (`0\r\n…\r\n\r\n`).
fn h1_exchange(port: u16, request: &str) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !(got.ends_with(b"\r\n\r\n") && got.windows(5).any(|w| w == b"\r\n0\r\n")) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_client_that_asks_gets_the_announced_trailers_of_both_upstream_kinds() {
    // HTTP/1.1 upstream announcing x-checksum (and sending a field it did not announce).
    let h1 = scripted(|_, mut r, mut w| {
        while read_head(&mut r).is_some() {
            w.write_all(
                b"HTTP/1.1 200 OK\r\ntrailer: x-checksum\r\ntransfer-encoding: chunked\r\n\r\n\
                  5\r\nhello\r\n0\r\nx-checksum: abc\r\nx-unannounced: 1\r\n\r\n",
            )
            .unwrap();
        }
    });
    // HTTP/2 upstream: a gRPC-like answer whose status rides in trailers, never announced.
    let h2 = h2c_upstream(|_req| {
        Box::pin(async {
            let mut t = http::HeaderMap::new();
            t.insert("grpc-status", "0".parse().unwrap());
            let frames = vec![
                Ok(http_body::Frame::data(Bytes::from_static(b"msg"))),
                Ok(http_body::Frame::trailers(t)),
            ];
            let mut resp = http::Response::new(
                http_body_util::StreamBody::new(futures::stream::iter(frames)).boxed(),
            );
            resp.headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            resp
        })
    })
    .await;
    let config = format!(
        "routes:\n\
         - {{id: a, paths: [{{path: /h1}}], service: h1}}\n\
         - {{id: b, paths: [{{path: /h2}}], service: h2}}\n\
         services:\n\
         - {{id: h1, host: 127.0.0.1, port: {}}}\n\
         - {{id: h2, protocol: h2c, host: 127.0.0.1, port: {h2}}}\n",
        h1.port
    );
    let w = Weir::start(&config, &["--access-log", "false"]);
    let port = w.proc.port;
    let got = tokio::task::spawn_blocking(move || {
        let get = |path: &str, te: &str| {
            h1_exchange(port, &format!("GET {path} HTTP/1.1\r\nhost: t\r\n{te}\r\n"))
        };
        let post = |te: &str| {
            h1_exchange(
                port,
                &format!(
                    "POST /h2 HTTP/1.1\r\nhost: t\r\ncontent-type: application/grpc\r\n{te}content-length: 3\r\n\r\nabc"
                ),
            )
        };
        (
            get("/h1", "te: trailers\r\n"),
            get("/h1", ""),
            get("/h2", "te: trailers\r\n"),
            post("te: trailers\r\n"),
            post(""),
        )
    })
    .await
    .unwrap();
    let (h1_asked, h1_not, h2_asked, grpc_asked, grpc_not) = got;
    assert!(
        h1_asked.contains("\r\n0\r\nx-checksum: abc\r\n\r\n"),
        "{h1_asked}"
    );
    assert!(!h1_asked.contains("x-unannounced"), "{h1_asked}");
    assert!(
        h1_asked
            .to_ascii_lowercase()
            .contains("\r\ntrailer: x-checksum\r\n"),
        "{h1_asked}"
    );
    assert!(
        h1_not.ends_with("\r\n0\r\n\r\n") && !h1_not.contains("x-checksum"),
        "{h1_not}"
    );
    // A GET (Weir's own HTTP/1.1 server) and a POST (hyper's): the same trailers.
    for (what, text) in [("GET", &h2_asked), ("POST", &grpc_asked)] {
        let lower = text.to_ascii_lowercase();
        assert!(
            lower.contains("\r\n0\r\ngrpc-status: 0\r\n\r\n"),
            "{what}: {text}"
        );
        assert!(lower.contains("\r\ntrailer: grpc-status"), "{what}: {text}");
    }
    assert!(!grpc_not.contains("grpc-status"), "{grpc_not}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_http1_request_trailers_reach_an_h2_upstream_without_forbidden_fields() {
    let up = trailer_echo().await;
    let config = format!(
        "routes:\n\
         - {{id: h2c, paths: [{{path: /h2c}}], service: h2c}}\n\
         - {{id: grpc, paths: [{{path: /grpc}}], service: grpc}}\n\
         services:\n\
         - {{id: h2c, protocol: h2c, host: 127.0.0.1, port: {up}}}\n\
         - {{id: grpc, protocol: grpc, host: 127.0.0.1, port: {up}}}\n"
    );
    let w = Weir::start(&config, &["--access-log", "false"]);
    let port = w.proc.port;
    // Allowed trailers, and fields that must never be trailers or that only Weir's
    // authentication may set (checked in the head, never let in behind the body).
    let trailers = "x-checksum: c0ffee\r\n\
                    grpc-custom-bin: AAEC\r\n\
                    content-length: 5\r\n\
                    host: evil.example\r\n\
                    authorization: Bearer forged\r\n\
                    cookie: session=forged\r\n\
                    te: trailers\r\n\
                    content-type: text/evil\r\n\
                    x-consumer-id: forged\r\n\
                    x-credential-identifier: forged\r\n";
    let answers = tokio::task::spawn_blocking(move || {
        ["/h2c", "/grpc"].map(|path| {
            let request = format!(
                "POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/grpc\r\n\
                 transfer-encoding: chunked\r\nconnection: close\r\n\r\n\
                 3\r\nabc\r\n2\r\nde\r\n0\r\n{trailers}\r\n"
            );
            (path, raw(port, request.as_bytes(), Duration::from_secs(10)))
        })
    })
    .await
    .unwrap();
    for (path, answer) in answers {
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{path}: {answer:?}"));
        assert!(head.starts_with("HTTP/1.1 200 "), "{path}: {answer}");
        // The echo's JSON, whatever the framing of the answer.
        let json = &body[body.find('{').unwrap_or_else(|| panic!("{path}: {answer}"))
            ..=body
                .rfind('}')
                .unwrap_or_else(|| panic!("{path}: {answer}"))];
        let got: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(got["body"], "abcde", "{path}: {got}");
        assert_eq!(
            got["trailers"],
            serde_json::json!({"x-checksum": "c0ffee", "grpc-custom-bin": "AAEC"}),
            "{path}: only the allowed trailers arrive"
        );
    }
}
