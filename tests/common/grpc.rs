//! gRPC's C core (Python `grpcio`, driven by tests/grpc/peer.py) as a server and a client for
//! the gRPC tests, and what the gRPC tests share besides: a bare HTTP/2 call that enforces no
//! deadline itself, and gRPC / gRPC-Web framing. Without `python3` and `grpcio` those tests
//! fail, they never skip.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::*;

/// tests/grpc/peer.py.
pub const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/peer.py");

/// A grpcio server for `weir.test.Echo` on a free port, killed when dropped.
pub fn grpc_server() -> Proc {
    grpc_server_with(&[])
}

/// A grpcio server serving over TLS with the fixtures' `a.example.test` certificate.
pub fn grpc_server_tls() -> Proc {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let cert = format!("{dir}/a.example.test.crt");
    let key = format!("{dir}/a.example.test.key");
    grpc_server_with(&["--tls", &cert, &key])
}

fn grpc_server_with(extra: &[&str]) -> Proc {
    let port = free_port();
    let mut child = Command::new("python3")
        .args([PEER, "serve", &port.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 is needed for the gRPC tests");
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim(),
        "ready",
        "the gRPC server did not start (is grpcio installed? python3 -m pip install grpcio)"
    );
    wait_for_port(port);
    Proc { child, port }
}

/// Runs peer.py as a client with `args`; returns its JSON lines by call name.
pub fn grpc_client(args: &[&str]) -> BTreeMap<String, Value> {
    let out = Command::new("python3")
        .arg(PEER)
        .args(args)
        .output()
        .expect("python3 is needed for the gRPC tests");
    assert!(
        out.status.success(),
        "peer.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["call"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

/// Every call kind peer.py's `call` makes, as a grpcio server answers it through Weir:
/// messages, statuses, trailing metadata, and the `via` Weir added.
pub fn assert_all_calls(got: &BTreeMap<String, Value>) {
    use serde_json::json;
    let unary = &got["Unary"];
    assert_eq!(unary["code"], "OK", "{unary}");
    assert_eq!(unary["value"]["echo"], "hello");
    assert_eq!(
        unary["trailers"]["x-trailer"], "unary",
        "trailers reach the client"
    );
    assert_eq!(
        unary["value"]["metadata"]["via"], "2 weir",
        "it went through Weir"
    );
    assert_eq!(
        got["ServerStream"]["value"],
        json!(["0", "1", "2", "3", "4"])
    );
    assert_eq!(got["ServerStream"]["code"], "OK");
    assert_eq!(got["ClientStream"]["value"], "a,b,c");
    assert_eq!(got["Bidi"]["value"], json!(["echo:x", "echo:y"]));
    // An error status from the upstream arrives intact, with its trailing metadata.
    let fail = &got["Fail"];
    assert_eq!(fail["code"], "INVALID_ARGUMENT", "{fail}");
    assert_eq!(fail["details"], "bad thing");
    assert_eq!(fail["trailers"]["x-reason"], "test");
}

/// One gRPC call over HTTP/2 by hand (hyper, prior knowledge) with `headers` set, and no
/// deadline of its own: a `grpc-timeout` among `headers` is only sent, never enforced here, so
/// a DEADLINE_EXCEEDED can only come from the other side. Expects a trailers-only answer
/// (END_STREAM on the head, no body) within 10 s; returns its status and head, where
/// `grpc-status` is.
pub async fn bare_h2_call(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap) {
    use http_body::Body as _;
    let resp = bare_h2_send(port, path, headers).await;
    // A trailers-only answer: END_STREAM rides on the head, no body frame follows.
    assert!(
        resp.body().is_end_stream(),
        "a body follows the head: {resp:?}"
    );
    (resp.status().as_u16(), resp.headers().clone())
}

/// Sends the call of [`bare_h2_call`] (one 1-byte message, `headers` replacing the defaults)
/// and waits at most 10 s for the response head.
pub async fn bare_h2_send(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> http::Response<hyper::body::Incoming> {
    use http_body_util::Full;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    // One length-prefixed message: no compression, 1 byte.
    let mut req = http::Request::post(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(grpc_message(b"x"))))
        .unwrap();
    // `headers` replace those above.
    for (k, v) in headers {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("no answer in 10 s")
        .expect("request failed")
}

/// A streamed answer to [`bare_h2_stream`], as it came off the wire, each time measured from
/// when the call was sent.
#[derive(Debug)]
pub struct BareStream {
    pub status: u16,
    pub head: http::HeaderMap,
    /// When the head arrived.
    pub head_at: Duration,
    /// Each gRPC message (flag 0 or 1) as it was completed: when, and its payload.
    pub messages: Vec<(Duration, Vec<u8>)>,
    /// The trailers, if the stream ended with them.
    pub trailers: Option<http::HeaderMap>,
    /// The body's error, if it ended in one (a reset) instead.
    pub error: Option<String>,
    /// Bytes left after the last whole message (a cut message).
    pub rest: Vec<u8>,
    /// When the stream ended (trailers, END_STREAM on data, or an error).
    pub ended: Duration,
}

/// The call of [`bare_h2_call`] (no deadline of its own: a `grpc-timeout` among `headers` is
/// only sent), for an answer that streams: reads the body frame by frame until the stream
/// ends, the whole call bounded at 10 s.
pub async fn bare_h2_stream(port: u16, path: &str, headers: &[(&str, &str)]) -> BareStream {
    use http_body_util::BodyExt as _;
    let started = std::time::Instant::now();
    let resp = bare_h2_send(port, path, headers).await;
    let head_at = started.elapsed();
    let (parts, mut body) = resp.into_parts();
    let mut out = BareStream {
        status: parts.status.as_u16(),
        head: parts.headers,
        head_at,
        messages: Vec::new(),
        trailers: None,
        error: None,
        rest: Vec::new(),
        ended: Duration::ZERO,
    };
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(f) => f,
                Err(e) => {
                    out.error = Some(e.to_string());
                    break;
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    out.rest.extend_from_slice(&data);
                    while out.rest.len() >= 5 {
                        let len = u32::from_be_bytes([
                            out.rest[1],
                            out.rest[2],
                            out.rest[3],
                            out.rest[4],
                        ]) as usize;
                        if out.rest.len() < 5 + len {
                            break;
                        }
                        let m: Vec<u8> = out.rest.drain(..5 + len).skip(5).collect();
                        out.messages.push((started.elapsed(), m));
                    }
                }
                Err(frame) => {
                    out.trailers = frame.into_trailers().ok();
                }
            }
        }
        out.ended = started.elapsed();
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the stream did not end in 10 s");
    out
}

/// One length-prefixed gRPC(-Web) message frame (not compressed) carrying `payload`.
pub fn grpc_message(payload: &[u8]) -> Vec<u8> {
    let mut m = vec![0];
    m.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    m.extend_from_slice(payload);
    m
}

/// Splits a gRPC(-Web) body into its frames: (flag, payload); fails on a cut frame.
pub fn grpc_frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        assert!(body.len() >= 5 + len, "a cut frame: {body:?}");
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    assert!(body.is_empty(), "bytes after the last frame: {body:?}");
    out
}

/// A gRPC-Web trailer frame's payload (`name:value\r\n` lines) as a map; fails unless every
/// line is one field ended by CRLF.
pub fn grpc_web_trailers(payload: &[u8]) -> BTreeMap<String, String> {
    let text = std::str::from_utf8(payload).expect("trailers are text");
    assert!(text.ends_with("\r\n"), "{text:?}");
    text.split_terminator("\r\n")
        .map(|l| {
            let (k, v) = l
                .split_once(':')
                .unwrap_or_else(|| panic!("{l:?} in {text:?}"));
            (k.to_string(), v.trim().to_string())
        })
        .collect()
}

/// A gRPC-Web text body decoded: each chunk is its own padded base64 segment, so they are
/// decoded one by one.
pub fn grpc_web_text_decode(body: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut decoded = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let end = match rest.iter().position(|b| *b == b'=') {
            Some(i) => i + rest[i..].iter().take_while(|b| **b == b'=').count(),
            None => rest.len(),
        };
        decoded.extend(
            b64.decode(&rest[..end])
                .unwrap_or_else(|e| panic!("{e}: {body:?}")),
        );
        rest = &rest[end..];
    }
    decoded
}

/// The grpc-web plugin's documented example (docs/plugins/grpc-web.md) pointed at a gRPC
/// server on `port`, served by `weir standalone`, and the browser call it documents (binary
/// mode, `Unary` of "from the docs"), checked for the CORS answer. Returns the running Weir
/// (keep it alive) and the answer's gRPC-Web frames.
pub async fn documented_grpc_web_call(
    port: u16,
) -> (super::manifests::Manifests, Vec<(u8, Vec<u8>)>) {
    let example = super::manifests::doc_example_at("grpc-web", port)
        // The example's method prefix, pointed at the test server's service.
        .replace("/helloworld.Greeter", "/weir.test.Echo");
    let w = super::manifests::Manifests::start(&[("10.yaml", &example)], &[]);
    let r = send(
        &client(),
        "POST",
        &w.url("/weir.test.Echo/Unary"),
        &[
            ("host", "api.example.com"),
            ("content-type", "application/grpc-web+proto"),
        ],
        grpc_message(b"from the docs"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example.com")
    );
    (w, grpc_frames(&r.body))
}
