//! `request-transformer` and `response-transformer` through the real binary in standalone mode:
//! each from its documented example (docs/plugins/*.md) plus Plugin manifests for the other
//! cases, checking what the upstream received (headers, query, path, body bytes and length)
//! and what the client got, and that a malformed configuration fails closed.

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use serde_json::{json, Value};

use common::manifests::*;
use common::*;

const T: Duration = Duration::from_secs(10);

/// Waits (bounded) until `path` answers `status`: the listener opens before the first
/// translation lands.
async fn ready(c: &HttpClient, m: &Manifests, path: &str, status: u16) -> Resp {
    wait_for_status(c, &m.url(path), status, T).await
}

/// Asserts the client got a well-framed body: a `Content-Length`, if any, is its length.
fn assert_framed(r: &Resp) {
    if let Some(n) = r.header("content-length") {
        assert_eq!(n.parse::<usize>().unwrap(), r.body.len(), "{r:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// An upstream that shows the request body it received, or sends it back as the response.

/// Starts the mirror upstream on a free loopback port (on the test's runtime).
///
/// It answers JSON describing the request: `method`, `path`, `query`, `headers` (name → list of
/// values) and `body` (the bytes, as text; when they are not UTF-8, also `body_hex`, exactly).
/// With `x-reply-type: T` it answers the request body itself with `Content-Type: T` instead;
/// `x-reply-encoding: E` adds `Content-Encoding: E`, and `x-reply-split` sends the body in two
/// parts 50 ms apart, without a length.
async fn mirror() -> u16 {
    mirror_counted().await.0
}

/// [`mirror`], and the number of requests it has received.
async fn mirror_counted() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { Ok::<_, Infallible>(mirror_answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (port, count)
}

/// Lower-case hex of `b`.
fn hex(b: &[u8]) -> String {
    b.iter().map(|c| format!("{c:02x}")).collect()
}

/// A body sent as the frames a channel delivers.
struct Frames(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

type MirrorBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn mirror_answer(req: http::Request<Incoming>) -> http::Response<MirrorBody> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let h = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
    let mut resp = http::Response::builder().header("x-mirror", "1");
    if let Some(ty) = h("x-reply-type") {
        resp = resp.header("content-type", ty);
        if let Some(e) = h("x-reply-encoding") {
            resp = resp.header("content-encoding", e);
        }
        if h("x-reply-split").is_some() {
            let (tx, rx) = tokio::sync::mpsc::channel(2);
            let half = body.len() / 2;
            let (a, b) = (body.slice(..half), body.slice(half..));
            tokio::spawn(async move {
                let _ = tx.send(a).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(b).await;
            });
            return resp.body(BodyExt::boxed(Frames(rx))).unwrap();
        }
        return resp
            .body(BodyExt::boxed(http_body_util::Full::new(body)))
            .unwrap();
    }
    let mut headers = serde_json::Map::new();
    for name in parts.headers.keys() {
        let values: Vec<Value> = parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into())
            .collect();
        headers.insert(name.to_string(), values.into());
    }
    let mut info = json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    if std::str::from_utf8(&body).is_err() {
        info["body_hex"] = hex(&body).into();
    }
    resp.header("content-type", "application/json")
        .body(BodyExt::boxed(http_body_util::Full::new(Bytes::from(
            info.to_string(),
        ))))
        .unwrap()
}

/// The one value of header `name` the mirror saw.
fn seen_header<'a>(seen: &'a Value, name: &str) -> Option<&'a str> {
    let v = seen["headers"][name].as_array()?;
    assert_eq!(v.len(), 1, "{name}: {v:?}");
    v[0].as_str()
}

// ---------------------------------------------------------------------------------------------
// request-transformer

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_transformer_example_reshapes_headers_query_and_path() {
    let up = echo("up");
    let m = Manifests::start(
        &[(
            "10-example.yaml",
            &doc_example_at("request-transformer", up.port),
        )],
        &[],
    );
    let c = client();
    ready(&c, &m, "/search", 200).await;

    let r = get(
        &c,
        &m.url("/search/more?q=rust&api_key=k1&page=2"),
        &[("x-debug", "1"), ("x-user", "ann"), ("x-route", "client")],
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = r.json();
    assert_eq!(seen["path"], "/v2/search", "replace.uri is the whole path");
    assert_eq!(seen["query"], "search=rust&page=2&version=2");
    let headers = &seen["headers"];
    assert!(headers.get("x-debug").is_none(), "{headers}");
    assert!(headers.get("x-user").is_none(), "{headers}");
    assert_eq!(headers["x-authenticated-user"], "ann");
    assert_eq!(headers["x-gateway"], "weir");
    assert_eq!(headers["x-route"], json!(["client", "search"]));

    // What is already there is not added again; what is absent is not renamed or removed.
    let r = get(
        &c,
        &m.url("/search?version=1&q"),
        &[("x-gateway", "client")],
    )
    .await;
    let seen = r.json();
    assert_eq!(seen["query"], "version=1&search");
    assert_eq!(seen["headers"]["x-gateway"], "client");
    assert_eq!(seen["headers"]["x-route"], "search");
    assert!(seen["headers"].get("x-authenticated-user").is_none());

    // Without a query string the added parameter makes one.
    let seen = get(&c, &m.url("/search"), &[]).await.json();
    assert_eq!(
        (&seen["path"], &seen["query"]),
        (&json!("/v2/search"), &json!("version=2"))
    );

    // The edited JSON body arrives with its new length (the example's body as documented).
    let r = send(
        &c,
        "POST",
        &m.url("/search?q=rust&api_key=k1"),
        &[("content-type", "application/json")],
        r#"{"q":"rust","password":"hunter2"}"#,
    )
    .await;
    let seen = r.json();
    assert_eq!(seen["body_length"], r#"{"channel":"web","q":"rust"}"#.len());
    assert_eq!(seen["headers"]["content-length"], "28");
    assert_eq!(seen["query"], "search=rust&version=2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_transformer_edits_json_and_form_bodies() {
    let port = mirror().await;
    let m = Manifests::start(
        &[(
            "10-example.yaml",
            &doc_example_at("request-transformer", port),
        )],
        &[],
    );
    let c = client();
    ready(&c, &m, "/search", 200).await;
    let post = |ct: &'static str, body: &'static str| {
        let (c, url) = (c.clone(), m.url("/search"));
        async move {
            let headers: Vec<(&str, &str)> = match ct {
                "" => vec![],
                ct => vec![("content-type", ct)],
            };
            let r = send(&c, "POST", &url, &headers, body).await;
            assert_eq!(r.status, 200, "{r:?}");
            r.json()
        }
    };

    // JSON: the documented example, byte for byte, with an exact Content-Length.
    let seen = post("application/json", r#"{"q":"rust","password":"hunter2"}"#).await;
    assert_eq!(seen["body"], r#"{"channel":"web","q":"rust"}"#);
    assert_eq!(seen_header(&seen, "content-length"), Some("28"));
    assert!(seen["headers"].get("transfer-encoding").is_none());

    // A form: untouched fields keep their encoding and order, new ones are appended.
    let seen = post(
        "application/x-www-form-urlencoded; charset=utf-8",
        "q=rust+lang&password=x&page=%32",
    )
    .await;
    assert_eq!(seen["body"], "q=rust+lang&page=%32&channel=web");
    assert_eq!(seen_header(&seen, "content-length"), Some("32"));

    // An empty JSON body becomes an object with the added field, as in Kong.
    let seen = post("application/json", "").await;
    assert_eq!(seen["body"], r#"{"channel":"web"}"#);

    // Not a JSON object, another type, or no type: forwarded byte for byte.
    for (ct, body) in [
        ("application/json", r#"{"password": "x""#),
        ("application/json", r#"["password"]"#),
        ("text/plain", "password=x"),
        ("", r#"{"password":"x"}"#),
    ] {
        let seen = post(ct, body).await;
        assert_eq!(seen["body"], body, "{ct}");
        assert_eq!(
            seen_header(&seen, "content-length"),
            Some(&*body.len().to_string())
        );
    }

    // (Content-coded bodies: request_transformer_refuses_content_coded_bodies.)

    // A chunked body is read whole, edited, and sent with its length.
    let body = r#"{"password":"x","q":"chunked"}"#;
    let (a, b) = body.split_at(10);
    let request = format!(
        "POST /search HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let answer = raw(m.proc.port, request.as_bytes(), T);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let seen: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(seen["body"], r#"{"channel":"web","q":"chunked"}"#);
    assert_eq!(seen_header(&seen, "content-length"), Some("31"));
    assert!(seen["headers"].get("transfer-encoding").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_transformer_refuses_content_coded_bodies() {
    let (port, received) = mirror_counted().await;
    // The example (body keys: remove password, add channel), and a route whose transformer has
    // no body keys.
    let extra = docs(&[
        plugin(
            "headers-only",
            "request-transformer",
            json!({"add": {"headers": ["x-a:1"]}}),
        ),
        ingress("plain", "/plain", "headers-only", "echo"),
    ]);
    let m = Manifests::start(
        &[
            (
                "10-example.yaml",
                &doc_example_at("request-transformer", port),
            ),
            ("20-plain.yaml", &extra),
        ],
        &[],
    );
    let c = client();
    ready(&c, &m, "/search", 200).await;
    ready(&c, &m, "/plain", 200).await;
    let before = received.load(Ordering::SeqCst);
    let body = r#"{"q":"rust","password":"hunter2"}"#;

    // A JSON or form body with any coding but identity, known or not (upstreams such as Flask
    // ignore the header and parse the body): 415, before the body is read, upstream untouched.
    for (ct, ce) in [
        ("application/json", "x"),
        ("application/json", "gzip"),
        ("application/x-www-form-urlencoded; charset=utf-8", "gzip"),
        ("application/json", "identity, br"),
    ] {
        let r = send(
            &c,
            "POST",
            &m.url("/search"),
            &[("content-type", ct), ("content-encoding", ce)],
            body,
        )
        .await;
        assert_eq!(r.status, 415, "{ct} / {ce}: {r:?}");
        assert_eq!(r.header("x-mirror"), None, "{r:?}");
        assert_eq!(r.header("accept-encoding"), Some("identity"));
        let message = r.json()["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains("cannot be transformed"), "{message}");
    }
    // Chunked (no length to judge by in access): refused at the first byte.
    let (a, b) = body.split_at(10);
    let request = format!(
        "POST /search HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Encoding: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let answer = raw(m.proc.port, request.as_bytes(), T);
    assert!(answer.starts_with("HTTP/1.1 415"), "{answer}");
    assert!(answer.contains("cannot be transformed"), "{answer}");
    assert_eq!(
        received.load(Ordering::SeqCst),
        before,
        "the upstream saw none of the refused requests"
    );

    // `identity` is no coding: edited as usual.
    let r = send(
        &c,
        "POST",
        &m.url("/search"),
        &[
            ("content-type", "application/json"),
            ("content-encoding", "identity"),
        ],
        body,
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["body"], r#"{"channel":"web","q":"rust"}"#);
    // A coded body of a type the plugin does not edit, a coded body without content, and one on
    // a route without body keys: forwarded as they are.
    for (path, ct, body) in [
        ("/search", "text/plain", body),
        ("/search", "application/json", ""),
        ("/plain", "application/json", body),
    ] {
        let r = send(
            &c,
            "POST",
            &m.url(path),
            &[("content-type", ct), ("content-encoding", "gzip")],
            body,
        )
        .await;
        assert_eq!(r.status, 200, "{path} {ct}: {r:?}");
        let seen = r.json();
        assert_eq!(seen["body"], body, "{path} {ct}");
        assert_eq!(seen_header(&seen, "content-encoding"), Some("gzip"));
    }
    assert_eq!(received.load(Ordering::SeqCst), before + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_transformer_edits_forms_that_are_not_utf8() {
    let port = mirror().await;
    let m = Manifests::start(
        &[(
            "10-example.yaml",
            &doc_example_at("request-transformer", port),
        )],
        &[],
    );
    let c = client();
    ready(&c, &m, "/search", 200).await;
    // One byte that is not UTF-8 used to let the whole form through unedited.
    for (sent, expected) in [
        (
            &b"q=caf\xe9&password=hunter2"[..],
            &b"q=caf\xe9&channel=web"[..],
        ),
        (
            b"k\xff=%FF\xfe&password=hunter2&q=a+b%20",
            b"k\xff=%FF\xfe&q=a+b%20&channel=web",
        ),
        (b"pass%77ord=\xff&\xc3", b"\xc3&channel=web"),
    ] {
        let r = send(
            &c,
            "POST",
            &m.url("/search"),
            &[("content-type", "application/x-www-form-urlencoded")],
            sent.to_vec(),
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        let seen = r.json();
        assert_eq!(seen["body_hex"], hex(expected), "{seen}");
        assert_eq!(
            seen_header(&seen, "content-length"),
            Some(&*expected.len().to_string())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_transformer_sets_method_and_host_and_streams_bodies_without_body_keys() {
    let up = echo("up");
    let files = docs(&[
        service("demo", "echo", up.port),
        plugin(
            "to-internal",
            "request-transformer",
            json!({
                "http_method": "put",
                "replace": {"headers": ["host:internal.test"]},
                "remove": {"querystring": ["token"]},
            }),
        ),
        plugin(
            "body-edits",
            "request-transformer",
            json!({"add": {"body": ["a:1"]}}),
        ),
        ingress("internal", "/internal", "to-internal", "echo"),
        ingress("edited", "/edited", "body-edits", "echo"),
    ]);
    let m = Manifests::start(
        &[("10-demo.yaml", &files)],
        &["--max-buffered-body", "65536"],
    );
    let c = client();
    ready(&c, &m, "/internal", 200).await;

    // A body over --max-buffered-body still streams: this route has no body keys.
    let big = vec![b'x'; 100_000];
    let r = send(
        &c,
        "POST",
        &m.url("/internal/x?token=t&keep=1"),
        &[
            ("host", "public.test"),
            ("content-type", "application/json"),
        ],
        big.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = r.json();
    assert_eq!(seen["method"], "PUT");
    assert_eq!(seen["host"], "internal.test");
    // The upstream still learns which host the client asked for (as Kong does).
    assert_eq!(seen["headers"]["x-forwarded-host"], "public.test");
    assert_eq!(seen["query"], "keep=1");
    assert_eq!(seen["path"], "/internal/x");
    assert_eq!(seen["body_length"], 100_000);

    // With body keys the body is held for the plugin: over the limit it is refused.
    let r = send(
        &c,
        "POST",
        &m.url("/edited"),
        &[("content-type", "application/json")],
        big,
    )
    .await;
    assert_eq!(r.status, 413, "{r:?}");
    let r = send(
        &c,
        "POST",
        &m.url("/edited"),
        &[("content-type", "application/json")],
        "{}",
    )
    .await;
    assert_eq!(r.json()["body_length"], r#"{"a":"1"}"#.len());
}

// ---------------------------------------------------------------------------------------------
// response-transformer

/// A client's forwarding headers are gone before plugins run; what a plugin sets there is what
/// the upstream gets (not replaced by Weir's own), and Weir fills in the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_a_plugin_sets_reach_the_upstream_and_a_clients_do_not() {
    let port = mirror().await;
    let files = docs(&[
        service("demo", "echo", port),
        plugin(
            "prefixed",
            "request-transformer",
            json!({"add": {"headers": ["x-forwarded-prefix:/shop", "x-forwarded-proto:https"]}}),
        ),
        ingress("prefixed", "/prefixed", "prefixed", "echo"),
        ingress("plain", "/plain", "", "echo"),
    ]);
    let m = Manifests::start(&[("10-demo.yaml", &files)], &[]);
    let c = client();
    ready(&c, &m, "/plain", 200).await;
    let spoofed = [
        ("x-forwarded-prefix", "/spoof"),
        ("x-forwarded-proto", "gopher"),
        ("x-forwarded-ssl", "on"),
        ("x-forwarded-client-cert", "Hash=spoof"),
        ("forwarded", "for=6.6.6.6;proto=https"),
        ("x-real-ip", "6.6.6.6"),
        ("x-forwarded-for", "6.6.6.6"),
    ];
    for path in ["/prefixed/a", "/plain/a"] {
        let r = get(&c, &m.url(path), &spoofed).await;
        assert_eq!(r.status, 200, "{r:?}");
        let seen = r.json();
        let plugin = path.starts_with("/prefixed");
        assert_eq!(
            seen_header(&seen, "x-forwarded-prefix"),
            plugin.then_some("/shop"),
            "{path}: {seen}"
        );
        let proto = if plugin { "https" } else { "http" };
        assert_eq!(
            seen_header(&seen, "x-forwarded-proto"),
            Some(proto),
            "{path}"
        );
        assert_eq!(
            seen_header(&seen, "x-forwarded-for"),
            Some("127.0.0.1"),
            "{path}"
        );
        assert_eq!(seen_header(&seen, "x-real-ip"), Some("127.0.0.1"), "{path}");
        for gone in ["x-forwarded-ssl", "x-forwarded-client-cert", "forwarded"] {
            assert!(
                seen["headers"].get(gone).is_none(),
                "{path}: {gone} in {seen}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_transformer_example_reshapes_the_answer() {
    let up = echo("echo-1");
    let m = Manifests::start(
        &[(
            "10-example.yaml",
            &doc_example_at("response-transformer", up.port),
        )],
        &[],
    );
    let c = client();
    let r = ready(&c, &m, "/api/users?id=7", 200).await;
    assert_framed(&r);
    assert_eq!(r.header("x-served-by"), Some("echo-1"));
    assert_eq!(r.header("x-echo-name"), None);
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(
        r.header("content-length"),
        None,
        "the length went with the edits"
    );
    let body = r.json();
    assert!(
        body.get("listen").is_none() && body.get("connection").is_none(),
        "{body}"
    );
    assert!(body.get("name").is_none(), "{body}");
    assert_eq!(body["upstream"], "echo-1");
    assert_eq!(body["api_version"], 2);
    assert_eq!(body["deprecated"], false);
    assert_eq!(body["docs"], "https://example.com/api");
    assert_eq!(body["path"], "/api/users");
    assert_eq!(body["query"], "id=7");

    // A non-JSON answer on the same route keeps its body and length; the headers still change.
    let r = get(&c, &m.url("/api/blob?bytes=200000"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 200_000);
    assert_eq!(r.header("content-length"), Some("200000"));
    assert_eq!(r.header("x-served-by"), Some("echo-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_transformer_edits_only_json_objects() {
    let port = mirror().await;
    let files = docs(&[
        service("demo", "mirror", port),
        plugin(
            "answers",
            "response-transformer",
            json!({
                "remove": {"json": ["secret"], "headers": ["x-mirror"]},
                "replace": {"json": ["count:10"], "json_types": ["number"]},
                "append": {"json": ["tags:new"], "headers": ["x-seen:1"]},
            }),
        ),
        ingress("reply", "/reply", "answers", "mirror"),
    ]);
    let m = Manifests::start(&[("10-demo.yaml", &files)], &[]);
    let c = client();
    ready(&c, &m, "/reply", 200).await;
    let reply =
        |ty: &'static str, body: &'static str, extra: &'static [(&'static str, &'static str)]| {
            let (c, url) = (c.clone(), m.url("/reply"));
            async move {
                let mut headers = vec![("x-reply-type", ty)];
                headers.extend_from_slice(extra);
                let r = send(&c, "POST", &url, &headers, body).await;
                assert_eq!(r.status, 200, "{r:?}");
                assert_framed(&r);
                assert_eq!(r.header("x-mirror"), None);
                assert_eq!(r.header("x-seen"), Some("1"));
                r
            }
        };

    // An object, sent by the upstream in two parts without a length: edited as a whole.
    let body = r#"{"secret":"s","count":1,"tags":"old","id":"abc"}"#;
    let r = reply(
        "application/json; charset=utf-8",
        body,
        &[("x-reply-split", "1")],
    )
    .await;
    assert_eq!(
        r.json(),
        json!({"count": 10, "tags": ["old", "new"], "id": "abc"})
    );
    // With a length from the upstream too.
    let r = reply("application/json", body, &[]).await;
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.body, r#"{"count":10,"id":"abc","tags":["old","new"]}"#);

    // Not an object: the same bytes (the length was dropped with the headers).
    for body in [r#"{"secret": "#, r#"[{"secret":1}]"#, ""] {
        let r = reply("application/json", body, &[("x-reply-split", "1")]).await;
        assert_eq!(r.body, body);
    }
    // Not JSON, or content-coded: streamed untouched, with the upstream's length.
    let r = reply("text/plain", body, &[]).await;
    assert_eq!(r.body, body);
    assert_eq!(r.header("content-length"), Some(&*body.len().to_string()));
    let r = reply("application/json", body, &[("x-reply-encoding", "gzip")]).await;
    assert_eq!(r.body, body);
    assert_eq!(r.header("content-length"), Some(&*body.len().to_string()));

    // The connection stays usable after edited answers: framing was right every time.
    for _ in 0..3 {
        let r = reply("application/json", r#"{"secret":1}"#, &[]).await;
        assert_eq!(r.json(), json!({"tags": ["new"]}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_transformers_on_one_route() {
    let port = mirror().await;
    let files = docs(&[
        service("demo", "mirror", port),
        plugin(
            "req",
            "request-transformer",
            json!({"add": {"body": ["from:weir"], "headers": ["x-added:1"]}}),
        ),
        plugin(
            "resp",
            "response-transformer",
            json!({"remove": {"json": ["headers"]}, "add": {"json": ["ok:true"], "json_types": ["boolean"]}}),
        ),
        ingress("both", "/both", "req,resp", "mirror"),
    ]);
    let m = Manifests::start(&[("10-demo.yaml", &files)], &[]);
    let c = client();
    ready(&c, &m, "/both", 200).await;
    let r = send(
        &c,
        "POST",
        &m.url("/both/x?a=1"),
        &[("content-type", "application/json")],
        r#"{"n":1}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_framed(&r);
    assert_eq!(
        r.json(),
        json!({
            "method": "POST",
            "path": "/both/x",
            "query": "a=1",
            "body": r#"{"from":"weir","n":1}"#,
            "ok": true,
        })
    );
}

// ---------------------------------------------------------------------------------------------
// Malformed configurations

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_configurations_fail_closed_and_say_why() {
    let up = echo("up");
    let broken = [
        (
            "bad-name",
            "request-transformer",
            json!({"add": {"headers": ["x-a:1", "x y:1"]}}),
            &["add.headers[1]", "is not a header name"][..],
        ),
        (
            "framing",
            "request-transformer",
            json!({"add": {"headers": ["content-length:5"]}}),
            &["add.headers[0]", "managed by Weir"][..],
        ),
        (
            "template",
            "request-transformer",
            json!({"replace": {"querystring": ["q:$(headers.x)"]}}),
            &["replace.querystring[0]", "templates"][..],
        ),
        (
            "bad-uri",
            "request-transformer",
            json!({"replace": {"uri": "no-slash"}}),
            &["replace.uri", "is not a path"][..],
        ),
        (
            "bad-number",
            "response-transformer",
            json!({"add": {"json": ["n:many"], "json_types": ["number"]}}),
            &["add.json[0]", "is not a number"][..],
        ),
        (
            "unknown-key",
            "response-transformer",
            json!({"add": {"body": ["a:1"]}}),
            &["unknown field `body`"][..],
        ),
    ];
    let mut parts = vec![
        service("demo", "echo", up.port),
        plugin(
            "fine",
            "response-transformer",
            json!({"add": {"headers": ["x-fine:1"]}}),
        ),
        ingress("fine", "/fine", "fine", "echo"),
    ];
    for (name, kind, config, _) in &broken {
        parts.push(plugin(name, kind, config.clone()));
        parts.push(ingress(name, &format!("/{name}"), name, "echo"));
    }
    let (m, log) = start_logged(&[("10-demo.yaml", &docs(&parts))]);
    let c = client();
    let r = ready(&c, &m, "/fine", 200).await;
    assert_eq!(r.header("x-fine"), Some("1"));
    for (name, _, _, why) in &broken {
        let r = get(&c, &m.url(&format!("/{name}")), &[]).await;
        assert_eq!(r.status, 503, "{name}: {r:?}");
        let message = r.json()["message"].as_str().unwrap_or_default().to_string();
        assert!(
            message.contains("This route is disabled"),
            "{name}: {message}"
        );
        assert_eq!(
            r.echo_name(),
            None,
            "{name}: a broken plugin's route never reaches the upstream"
        );
        // The reason, naming the field, is reported (logged in standalone mode, like an Event).
        let found = eventually(T, || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .any(|l| l.contains(name) && why.iter().all(|w| l.contains(w)))
        });
        assert!(
            found,
            "{name}: no problem naming {why:?} in the log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
}

/// `Manifests::start`, with the process's log (stderr) kept in a file.
fn start_logged(files: &[(&str, &str)]) -> (Manifests, std::path::PathBuf) {
    let dir = temp_dir("manifests");
    std::fs::write(dir.join("00-ingressclass.yaml"), INGRESS_CLASS).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let log = std::env::temp_dir().join(format!(
        "weir-transformer-{}-{}.log",
        std::process::id(),
        free_port()
    ));
    let port = free_port();
    let admin = free_port();
    let child = Command::new(WEIR)
        .arg("standalone")
        .arg(&dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--worker-threads", "2"])
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn weir standalone");
    wait_for_port(port);
    wait_for_port(admin);
    (
        Manifests {
            proc: Proc { child, port },
            admin,
            dir,
        },
        log,
    )
}
