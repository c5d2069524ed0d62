//! gRPC through the real binary with a second implementation, tonic (Rust), next to gRPC's C
//! core (tests/grpc.rs): a tonic client and a tonic server, no generated code (a raw-bytes
//! codec), every call kind over h2c and TLS; tonic against grpcio across Weir both ways; TLS
//! upstreams of both; gRPC-Web answered by tonic; and Weir's own failures as tonic sees them
//! (no route, no healthy target, a dead upstream, its deadline and read timeout, key-auth's
//! refusal).
//!
//! The grpcio half needs `python3` with `grpcio`, as tests/grpc.rs does.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use common::grpc::*;
use common::*;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::{json, Value};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
use tonic::metadata::MetadataMap;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
/// Bound on any one call, and on connecting.
const LIMIT: Duration = Duration::from_secs(10);

// ---- A codec that passes message bytes through untouched. ----

#[derive(Clone, Copy, Default)]
struct Raw;
struct RawEncoder;
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

// ---- The tonic server: service `weir.test.Echo`, the methods peer.py serves, StreamFail, and
// a health-check path that answers 503. ----

type Answer<T> = BoxFuture<'static, Result<tonic::Response<T>, Status>>;
type Messages = BoxStream<'static, Result<Bytes, Status>>;

/// Unary: echoes the request as peer.py does, `{"echo": ..., "metadata": {...}}`.
struct Unary;
impl tonic::server::UnaryService<Bytes> for Unary {
    type Response = Bytes;
    type Future = Answer<Bytes>;
    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let metadata: serde_json::Map<String, Value> = req
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), Value::from(v.to_str().ok()?))))
            .collect();
        let echo = String::from_utf8_lossy(req.get_ref()).into_owned();
        let body = json!({"echo": echo, "metadata": metadata}).to_string();
        Box::pin(async move { Ok(tonic::Response::new(Bytes::from(body))) })
    }
}

/// ServerStream: the request as a count n; n messages "0".."n-1".
struct ServerStream;
impl tonic::server::ServerStreamingService<Bytes> for ServerStream {
    type Response = Bytes;
    type ResponseStream = Messages;
    type Future = Answer<Messages>;
    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        Box::pin(async move {
            let n: u32 = std::str::from_utf8(req.get_ref())
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Status::invalid_argument("not a count"))?;
            let out = futures::stream::iter((0..n).map(|i| Ok(Bytes::from(i.to_string()))));
            Ok(tonic::Response::new(out.boxed()))
        })
    }
}

/// ClientStream: joins the requests with ",".
struct ClientStream;
impl tonic::server::ClientStreamingService<Bytes> for ClientStream {
    type Response = Bytes;
    type Future = Answer<Bytes>;
    fn call(&mut self, req: tonic::Request<Streaming<Bytes>>) -> Self::Future {
        Box::pin(async move {
            let mut stream = req.into_inner();
            let mut parts = Vec::new();
            while let Some(m) = stream.message().await? {
                parts.push(m);
            }
            Ok(tonic::Response::new(Bytes::from(parts.join(&b","[..]))))
        })
    }
}

/// Bidi: answers each request with "echo:<request>" as it arrives.
struct Bidi;
impl tonic::server::StreamingService<Bytes> for Bidi {
    type Response = Bytes;
    type ResponseStream = Messages;
    type Future = Answer<Messages>;
    fn call(&mut self, req: tonic::Request<Streaming<Bytes>>) -> Self::Future {
        let out = req
            .into_inner()
            .map(|m| m.map(|m| Bytes::from([&b"echo:"[..], &m].concat())))
            .boxed();
        Box::pin(async move { Ok(tonic::Response::new(out)) })
    }
}

/// INVALID_ARGUMENT "bad thing" with trailing metadata `x-reason: test`.
fn bad_thing() -> Status {
    let mut md = MetadataMap::new();
    md.insert("x-reason", "test".parse().unwrap());
    Status::with_metadata(Code::InvalidArgument, "bad thing", md)
}

/// Fail: [`bad_thing`] before any message (tonic answers it trailers-only).
struct Fail;
impl tonic::server::UnaryService<Bytes> for Fail {
    type Response = Bytes;
    type Future = Answer<Bytes>;
    fn call(&mut self, _: tonic::Request<Bytes>) -> Self::Future {
        Box::pin(async move { Err(bad_thing()) })
    }
}

/// StreamFail: one message, "partial", then [`bad_thing`] (in trailers, after the message).
struct StreamFail;
impl tonic::server::ServerStreamingService<Bytes> for StreamFail {
    type Response = Bytes;
    type ResponseStream = Messages;
    type Future = Answer<Messages>;
    fn call(&mut self, _: tonic::Request<Bytes>) -> Self::Future {
        let out = futures::stream::iter([Ok(Bytes::from("partial")), Err(bad_thing())]);
        Box::pin(async move { Ok(tonic::Response::new(out.boxed())) })
    }
}

/// How long Slow takes.
const SLOW: Duration = Duration::from_secs(2);

/// Slow: answers the request as it came, after [`SLOW`].
struct Slow;
impl tonic::server::UnaryService<Bytes> for Slow {
    type Response = Bytes;
    type Future = Answer<Bytes>;
    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        Box::pin(async move {
            tokio::time::sleep(SLOW).await;
            Ok(tonic::Response::new(req.into_inner()))
        })
    }
}

/// Ticker's pace: a message at once, then one every [`TICK`] until [`TICKS`] more were sent
/// (about 3 s in all).
const TICK: Duration = Duration::from_millis(200);
const TICKS: u32 = 15;

/// How one Ticker call ended: the messages it handed to the stream, whether the stream went
/// away before the last one (the call cancelled), and when that was seen.
#[derive(Clone, Debug)]
struct Ticked {
    sent: u32,
    cancelled: bool,
    at: std::time::Instant,
}

/// Every Ticker call a [`TonicServer`] finished, in order.
type Ticks = std::sync::Arc<std::sync::Mutex<Vec<Ticked>>>;

/// Ticker: messages "0", "1", ... "[`TICKS`]", the first at once, then one every [`TICK`];
/// records in [`Ticks`] how the call ended, and stops as soon as its stream is dropped
/// (what hyper does when the stream is reset).
struct Ticker(Ticks);
impl tonic::server::ServerStreamingService<Bytes> for Ticker {
    type Response = Bytes;
    type ResponseStream = Messages;
    type Future = Answer<Messages>;
    fn call(&mut self, _: tonic::Request<Bytes>) -> Self::Future {
        let ticks = self.0.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Status>>(1);
        tokio::spawn(async move {
            let mut sent = 0;
            let cancelled = loop {
                if tx.send(Ok(Bytes::from(sent.to_string()))).await.is_err() {
                    break true;
                }
                sent += 1;
                if sent > TICKS {
                    break false;
                }
                tokio::select! {
                    _ = tx.closed() => break true,
                    _ = tokio::time::sleep(TICK) => {}
                }
            };
            ticks.lock().unwrap().push(Ticked {
                sent,
                cancelled,
                at: std::time::Instant::now(),
            });
        });
        let out =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        Box::pin(async move { Ok(tonic::Response::new(out.boxed())) })
    }
}

async fn dispatch(
    req: http::Request<hyper::body::Incoming>,
    ticks: Ticks,
) -> Result<http::Response<tonic::body::Body>, std::convert::Infallible> {
    let mut grpc = tonic::server::Grpc::new(Raw);
    Ok(match req.uri().path() {
        "/weir.test.Echo/Unary" => grpc.unary(Unary, req).await,
        "/weir.test.Echo/ServerStream" => grpc.server_streaming(ServerStream, req).await,
        "/weir.test.Echo/ClientStream" => grpc.client_streaming(ClientStream, req).await,
        "/weir.test.Echo/Bidi" => grpc.streaming(Bidi, req).await,
        "/weir.test.Echo/Fail" => grpc.unary(Fail, req).await,
        "/weir.test.Echo/StreamFail" => grpc.server_streaming(StreamFail, req).await,
        "/weir.test.Echo/Slow" => grpc.unary(Slow, req).await,
        "/weir.test.Echo/Ticker" => grpc.server_streaming(Ticker(ticks), req).await,
        // The health-check path: this server says it is out of service.
        "/healthz" => http::Response::builder()
            .status(503)
            .body(tonic::body::Body::empty())
            .unwrap(),
        _ => Status::unimplemented("no such method").into_http(),
    })
}

/// What a [`TonicServer`] received: each request's path and headers, in order.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, http::HeaderMap)>>>;

/// The tonic server on a free loopback port (h2c, hyper's HTTP/2 server), on a thread of its
/// own; stopped, its connections with it, when dropped. It records every request it gets, and
/// how each Ticker call ended.
struct TonicServer {
    port: u16,
    seen: Seen,
    ticks: Ticks,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TonicServer {
    fn start() -> TonicServer {
        TonicServer::serve(None)
    }

    /// Over TLS with the fixtures' `a.example.test` certificate, offering only `h2`.
    fn start_tls() -> TonicServer {
        use rustls::pki_types::pem::PemObject;
        let chain = vec![tls::fixture_der("a.example.test.crt")];
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(
            tls::fixture("a.example.test.key").as_bytes(),
        )
        .unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        TonicServer::serve(Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(
            config,
        ))))
    }

    fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> TonicServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let seen = Seen::default();
        let record = seen.clone();
        let ticks = Ticks::default();
        let ticked = ticks.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let accept = async {
                    loop {
                        let Ok((io, _)) = listener.accept().await else {
                            continue;
                        };
                        let tls = tls.clone();
                        let record = record.clone();
                        let ticked = ticked.clone();
                        tokio::spawn(async move {
                            let h2 = hyper::server::conn::http2::Builder::new(
                                hyper_util::rt::TokioExecutor::new(),
                            );
                            let service = hyper::service::service_fn(
                                move |req: http::Request<hyper::body::Incoming>| {
                                    record.lock().unwrap().push((
                                        req.uri().path().to_string(),
                                        req.headers().clone(),
                                    ));
                                    dispatch(req, ticked.clone())
                                },
                            );
                            let _ = match tls {
                                None => {
                                    h2.serve_connection(hyper_util::rt::TokioIo::new(io), service)
                                        .await
                                }
                                Some(tls) => {
                                    let Ok(io) = tls.accept(io).await else { return };
                                    h2.serve_connection(hyper_util::rt::TokioIo::new(io), service)
                                        .await
                                }
                            };
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime here drops every connection task.
        });
        TonicServer {
            port,
            seen,
            ticks,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The requests received so far: (path, headers).
    fn seen(&self) -> Vec<(String, http::HeaderMap)> {
        self.seen.lock().unwrap().clone()
    }

    /// The Ticker calls ended so far.
    fn ticks(&self) -> Vec<Ticked> {
        self.ticks.lock().unwrap().clone()
    }

    /// The paths of the requests received so far.
    fn paths(&self) -> Vec<String> {
        self.seen().into_iter().map(|(p, _)| p).collect()
    }
}

impl Drop for TonicServer {
    fn drop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        let _ = self.thread.take().unwrap().join();
    }
}

// ---- The tonic client. ----

async fn connect(endpoint: Endpoint) -> Channel {
    let endpoint = endpoint.connect_timeout(LIMIT).timeout(LIMIT);
    tokio::time::timeout(LIMIT, endpoint.connect())
        .await
        .expect("no connection in 10 s")
        .expect("connect")
}

/// A channel to Weir's plain listener (h2c, prior knowledge).
async fn h2c(port: u16) -> Channel {
    connect(Endpoint::from_shared(format!("http://127.0.0.1:{port}")).unwrap()).await
}

/// A channel to Weir's TLS listener, trusting the fixtures' CA, for `a.example.test`.
async fn tls(port: u16) -> Channel {
    let ca = std::fs::read(format!("{FIXTURES}/ca.crt")).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("a.example.test");
    let endpoint = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap();
    connect(endpoint).await
}

/// A tonic client over a plain hyper HTTP/2 client to Weir's plain listener: unlike a
/// [`Channel`], it never enforces a call's `grpc-timeout` itself (it only sends it), so a
/// DEADLINE_EXCEEDED it reports came from the other side.
type Unenforced = tonic::client::Grpc<
    hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        tonic::body::Body,
    >,
>;

fn unenforced(port: u16) -> Unenforced {
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http();
    tonic::client::Grpc::with_origin(http, format!("http://127.0.0.1:{port}").parse().unwrap())
}

/// One unary call of `p` over [`unenforced`] with `grpc-timeout` set to `timeout`; its
/// outcome and how long it took (the wait bounded at 10 s here, not by the deadline).
async fn unenforced_call(port: u16, p: &'static str, timeout: Duration) -> (Outcome, Duration) {
    let mut g = unenforced(port);
    g.ready().await.expect("client ready");
    let mut req = tonic::Request::new(Bytes::from("slow"));
    req.set_timeout(timeout);
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(LIMIT, g.unary(req, path(p), Raw))
        .await
        .expect("no answer in 10 s");
    (single(r), started.elapsed())
}

/// A unary call of `p` over `ch` carrying the metadata `md` (name, value).
async fn unary_with(ch: &Channel, p: &'static str, md: &[(&'static str, &str)]) -> Outcome {
    let mut g = tonic::client::Grpc::new(ch.clone());
    g.ready().await.expect("channel ready");
    let mut req = tonic::Request::new(Bytes::from("hello"));
    for (k, v) in md {
        req.metadata_mut().insert(*k, v.parse().unwrap());
    }
    single(
        tokio::time::timeout(LIMIT, g.unary(req, path(p), Raw))
            .await
            .expect("no answer in 10 s"),
    )
}

fn path(p: &'static str) -> http::uri::PathAndQuery {
    http::uri::PathAndQuery::from_static(p)
}

/// One finished call: its messages (as text), the status, and the response's metadata
/// (headers, then trailers for streams; a status's own metadata on failure).
#[derive(Debug)]
struct Outcome {
    values: Vec<String>,
    code: Code,
    message: String,
    metadata: MetadataMap,
}

fn text(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn failed(s: Status) -> Outcome {
    Outcome {
        values: vec![],
        code: s.code(),
        message: s.message().to_string(),
        metadata: s.metadata().clone(),
    }
}

fn single(r: Result<tonic::Response<Bytes>, Status>) -> Outcome {
    match r {
        Ok(r) => Outcome {
            values: vec![text(r.get_ref())],
            code: Code::Ok,
            message: String::new(),
            metadata: r.metadata().clone(),
        },
        Err(s) => failed(s),
    }
}

async fn stream(r: Result<tonic::Response<Streaming<Bytes>>, Status>) -> Outcome {
    let r = match r {
        Ok(r) => r,
        Err(s) => return failed(s),
    };
    let mut metadata = r.metadata().clone();
    let mut s = r.into_inner();
    let mut values = Vec::new();
    loop {
        match s.message().await {
            Ok(Some(m)) => values.push(text(&m)),
            Ok(None) => break,
            Err(e) => return failed(e),
        }
    }
    if let Ok(Some(t)) = s.trailers().await {
        let mut h = metadata.into_headers();
        h.extend(t.into_headers());
        metadata = MetadataMap::from_headers(h);
    }
    Outcome {
        values,
        code: Code::Ok,
        message: String::new(),
        metadata,
    }
}

/// One unary call of `p` carrying `body`.
async fn unary(ch: &Channel, p: &'static str, body: &'static str) -> Outcome {
    let mut g = tonic::client::Grpc::new(ch.clone());
    g.ready().await.expect("channel ready");
    let call = g.unary(tonic::Request::new(Bytes::from(body)), path(p), Raw);
    single(
        tokio::time::timeout(LIMIT, call)
            .await
            .expect("no answer in 10 s"),
    )
}

/// Every call kind of `weir.test.Echo`, by method name.
async fn tonic_calls(ch: &Channel) -> BTreeMap<&'static str, Outcome> {
    let mut out = BTreeMap::new();
    out.insert("Unary", unary(ch, "/weir.test.Echo/Unary", "hello").await);

    let mut g = tonic::client::Grpc::new(ch.clone());
    g.ready().await.expect("channel ready");
    let call = async {
        let r = g
            .server_streaming(
                tonic::Request::new(Bytes::from("5")),
                path("/weir.test.Echo/ServerStream"),
                Raw,
            )
            .await;
        stream(r).await
    };
    out.insert(
        "ServerStream",
        tokio::time::timeout(LIMIT, call).await.unwrap(),
    );

    g.ready().await.expect("channel ready");
    let msgs = futures::stream::iter(["a", "b", "c"].map(Bytes::from));
    let call = g.client_streaming(
        tonic::Request::new(msgs),
        path("/weir.test.Echo/ClientStream"),
        Raw,
    );
    out.insert(
        "ClientStream",
        single(tokio::time::timeout(LIMIT, call).await.unwrap()),
    );

    g.ready().await.expect("channel ready");
    let msgs = futures::stream::iter(["x", "y"].map(Bytes::from));
    let call = async {
        let r = g
            .streaming(tonic::Request::new(msgs), path("/weir.test.Echo/Bidi"), Raw)
            .await;
        stream(r).await
    };
    out.insert("Bidi", tokio::time::timeout(LIMIT, call).await.unwrap());

    out.insert("Fail", unary(ch, "/weir.test.Echo/Fail", "").await);
    out
}

/// What every server (tonic's or grpcio's) answers the same way, seen by the tonic client.
fn assert_tonic_calls(got: &BTreeMap<&str, Outcome>) {
    let unary = &got["Unary"];
    assert_eq!(unary.code, Code::Ok, "{unary:?}");
    let echoed: Value = serde_json::from_str(&unary.values[0]).unwrap();
    assert_eq!(echoed["echo"], "hello", "{echoed}");
    assert_eq!(echoed["metadata"]["via"], "2 weir", "it went through Weir");
    assert!(
        echoed["metadata"]["user-agent"]
            .as_str()
            .is_some_and(|ua| ua.contains("tonic")),
        "the server saw tonic's request: {echoed}"
    );

    let s = &got["ServerStream"];
    assert_eq!(s.code, Code::Ok, "{s:?}");
    assert_eq!(s.values, ["0", "1", "2", "3", "4"]);
    let c = &got["ClientStream"];
    assert_eq!(
        (c.code, c.values.as_slice()),
        (Code::Ok, &["a,b,c".to_string()][..]),
        "{c:?}"
    );
    let b = &got["Bidi"];
    assert_eq!(b.code, Code::Ok, "{b:?}");
    assert_eq!(b.values, ["echo:x", "echo:y"]);

    // The upstream's error status arrives intact, its trailing metadata with it.
    let f = &got["Fail"];
    assert_eq!(
        (f.code, f.message.as_str()),
        (Code::InvalidArgument, "bad thing"),
        "{f:?}"
    );
    assert_eq!(
        f.metadata.get("x-reason").and_then(|v| v.to_str().ok()),
        Some("test"),
        "{f:?}"
    );
}

/// peer.py's client (each call bounded at 10 s) against `target`; its JSON lines by call.
async fn grpcio_client(target: String) -> BTreeMap<String, Value> {
    tokio::task::spawn_blocking(move || grpc_client(&["call", &target, "--timeout", "10"]))
        .await
        .unwrap()
}

/// The routing table: the Echo service on `server`, a dead service, and the TLS certificate.
fn table(server: u16) -> String {
    let cert = std::fs::read_to_string(format!("{FIXTURES}/a.example.test.crt")).unwrap();
    let key = std::fs::read_to_string(format!("{FIXTURES}/a.example.test.key")).unwrap();
    json!({
        "routes": [
            {"id": "echo", "paths": [{"path": "/weir.test.Echo"}], "service": "echo"},
            {"id": "dead", "paths": [{"path": "/dead.Echo"}], "service": "dead"},
        ],
        "services": [
            {"id": "echo", "protocol": "grpc", "host": "127.0.0.1", "port": server},
            {"id": "dead", "protocol": "grpc", "host": "127.0.0.1", "port": free_port(), "retries": 0},
        ],
        "certificates": [{"id": "a", "cert": cert, "key": key, "snis": ["a.example.test"]}],
    })
    .to_string()
}

/// The table of [`table`] with the Echo service reached over TLS (`grpcs`), verified with the
/// fixtures' CA for `a.example.test`.
fn table_grpcs(server: u16) -> String {
    let mut t: Value = serde_json::from_str(&table(server)).unwrap();
    t["services"][0]["protocol"] = json!("grpcs");
    t["services"][0]["tls"] = json!({
        "ca_certificates": tls::fixture("ca.crt"),
        "sni": "a.example.test",
    });
    t.to_string()
}

// ---- The tests. ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_and_grpcio_through_weir_to_tls_upstreams_of_both() {
    // A tonic server over TLS: every call kind from tonic, and grpcio's unary.
    let server = TonicServer::start_tls();
    let w = Weir::start(&table_grpcs(server.port), &[]);
    assert_tonic_calls(&tonic_calls(&h2c(w.proc.port).await).await);
    let got = grpcio_client(format!("127.0.0.1:{}", w.proc.port)).await;
    assert_eq!(got["Unary"]["code"], "OK", "{}", got["Unary"]);
    let echoed = &got["Unary"]["value"];
    assert_eq!(
        (&echoed["echo"], &echoed["metadata"]["via"]),
        (&json!("hello"), &json!("2 weir")),
        "{echoed}"
    );
    assert_eq!(got["ServerStream"]["code"], "OK", "{}", got["ServerStream"]);
    assert_eq!(
        got["ServerStream"]["value"],
        json!(["0", "1", "2", "3", "4"])
    );
    assert_eq!(got["ClientStream"]["code"], "OK", "{}", got["ClientStream"]);
    assert_eq!(got["ClientStream"]["value"], "a,b,c");
    assert_eq!(got["Bidi"]["code"], "OK", "{}", got["Bidi"]);
    assert_eq!(got["Bidi"]["value"], json!(["echo:x", "echo:y"]));
    let fail = &got["Fail"];
    assert_eq!(
        (
            &fail["code"],
            &fail["details"],
            &fail["trailers"]["x-reason"]
        ),
        (
            &json!("INVALID_ARGUMENT"),
            &json!("bad thing"),
            &json!("test")
        ),
        "{fail}"
    );
    // Every call went to the TLS server through Weir, once each.
    let mut paths = server.paths();
    paths.sort();
    let mut want: Vec<String> = ["Unary", "ServerStream", "ClientStream", "Bidi", "Fail"]
        .repeat(2)
        .iter()
        .map(|m| format!("/weir.test.Echo/{m}"))
        .collect();
    want.sort();
    assert_eq!(paths, want, "tonic's five calls and grpcio's five");

    // gRPC's C core serving TLS: tonic's calls arrive, statuses and trailers intact ...
    let server = grpc_server_tls();
    let w = Weir::start(&table_grpcs(server.port), &[]);
    let got = tonic_calls(&h2c(w.proc.port).await).await;
    assert_tonic_calls(&got);
    assert_eq!(
        got["Unary"]
            .metadata
            .get("x-trailer")
            .and_then(|v| v.to_str().ok()),
        Some("unary")
    );
    // ... and so do grpcio's: gRPC's C core on both ends, over TLS to the upstream.
    assert_all_calls(&grpcio_client(format!("127.0.0.1:{}", w.proc.port)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_client_to_tonic_server_over_h2c_and_tls() {
    let server = TonicServer::start();
    let tls_port = free_port();
    let w = Weir::start(
        &table(server.port),
        &["--tls-listen", &format!("127.0.0.1:{tls_port}")],
    );
    wait_for_port(tls_port);

    assert_tonic_calls(&tonic_calls(&h2c(w.proc.port).await).await);
    assert_tonic_calls(&tonic_calls(&tls(tls_port).await).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_client_to_grpc_server() {
    let server = grpc_server();
    let w = Weir::start(&table(server.port), &[]);
    let got = tonic_calls(&h2c(w.proc.port).await).await;
    assert_tonic_calls(&got);
    // grpcio's Unary also sends trailing metadata of its own after the message; it reaches
    // tonic (which merges a unary call's trailers into the response's metadata).
    assert_eq!(
        got["Unary"]
            .metadata
            .get("x-trailer")
            .and_then(|v| v.to_str().ok()),
        Some("unary"),
        "{:?}",
        got["Unary"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcio_client_to_tonic_server() {
    let server = TonicServer::start();
    let w = Weir::start(&table(server.port), &[]);
    let got = grpcio_client(format!("127.0.0.1:{}", w.proc.port)).await;

    let unary = &got["Unary"];
    assert_eq!(unary["code"], "OK", "{unary}");
    assert_eq!(unary["value"]["echo"], "hello");
    assert_eq!(
        unary["value"]["metadata"]["via"], "2 weir",
        "it went through Weir"
    );
    assert!(
        unary["value"]["metadata"]["user-agent"]
            .as_str()
            .is_some_and(|ua| ua.contains("grpc-python")),
        "the server saw grpcio's request: {unary}"
    );
    assert_eq!(got["ServerStream"]["code"], "OK", "{}", got["ServerStream"]);
    assert_eq!(
        got["ServerStream"]["value"],
        json!(["0", "1", "2", "3", "4"])
    );
    assert_eq!(got["ClientStream"]["code"], "OK", "{}", got["ClientStream"]);
    assert_eq!(got["ClientStream"]["value"], "a,b,c");
    assert_eq!(got["Bidi"]["code"], "OK", "{}", got["Bidi"]);
    assert_eq!(got["Bidi"]["value"], json!(["echo:x", "echo:y"]));
    let fail = &got["Fail"];
    assert_eq!(fail["code"], "INVALID_ARGUMENT", "{fail}");
    assert_eq!(fail["details"], "bad thing");
    assert_eq!(fail["trailers"]["x-reason"], "test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weirs_own_failures_reach_tonic_as_statuses() {
    let server = TonicServer::start();
    let w = Weir::start(&table(server.port), &[]);
    let ch = h2c(w.proc.port).await;

    let ok = unary(&ch, "/weir.test.Echo/Unary", "up").await;
    assert_eq!(ok.code, Code::Ok, "{ok:?}");

    let dead = unary(&ch, "/dead.Echo/Call", "x").await;
    assert_eq!(dead.code, Code::Unavailable, "{dead:?}");

    let nowhere = unary(&ch, "/nowhere.Svc/Call", "x").await;
    assert_eq!(
        (nowhere.code, nowhere.message.as_str()),
        (Code::Unimplemented, "no Route matched with those values"),
        "{nowhere:?}"
    );

    // The tonic server's own answer for a method it lacks is told apart from Weir's.
    let missing = unary(&ch, "/weir.test.Echo/Nope", "x").await;
    assert_eq!(
        (missing.code, missing.message.as_str()),
        (Code::Unimplemented, "no such method"),
        "{missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_grpc_timeout_is_deadline_exceeded_from_weir() {
    let server = TonicServer::start();
    let w = Weir::start(&table(server.port), &[]);
    let port = w.proc.port;

    // tonic's client with a 300 ms deadline, on a transport that does not keep it itself:
    // only Weir can end the call at 300 ms (Slow answers after 2 s).
    let (slow, took) =
        unenforced_call(port, "/weir.test.Echo/Slow", Duration::from_millis(300)).await;
    assert_eq!(
        (slow.code, slow.message.as_str()),
        (Code::DeadlineExceeded, "The upstream server is timing out"),
        "{slow:?}"
    );
    assert_within(took, 290, 1500);

    // The same deadline from a bare HTTP/2 call: trailers-only (checked by the helper).
    let started = std::time::Instant::now();
    let (status, head) = bare_h2_call(
        port,
        "/weir.test.Echo/Slow",
        &[
            ("grpc-timeout", "300m"),
            ("content-type", "application/grpc+proto"),
        ],
    )
    .await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{head:?}");
    assert_eq!(head.get("grpc-status").unwrap(), "4", "{head:?}");
    assert_eq!(
        head.get("grpc-message").unwrap(),
        "The upstream server is timing out",
        "{head:?}"
    );
    assert_eq!(
        head.get("content-type").unwrap(),
        "application/grpc+proto",
        "the call's own content type: {head:?}"
    );
    assert_within(took, 290, 1500);

    // Both calls reached the server with their deadline, which Weir passed on.
    let seen = server.seen();
    let slow: Vec<_> = seen
        .iter()
        .filter(|(p, _)| p == "/weir.test.Echo/Slow")
        .map(|(_, h)| h.get("grpc-timeout").and_then(|v| v.to_str().ok()))
        .collect();
    assert_eq!(slow.len(), 2, "{seen:?}");
    assert_eq!(slow[0], Some("300000u"), "tonic's grpc-timeout: {seen:?}");
    assert_eq!(slow[1], Some("300m"), "{seen:?}");

    // A deadline longer than the answer takes is no failure.
    let (ok, _) = unenforced_call(port, "/weir.test.Echo/Slow", Duration::from_secs(5)).await;
    assert_eq!(
        (ok.code, ok.values.as_slice()),
        (Code::Ok, &["slow".to_string()][..]),
        "{ok:?}"
    );
}

/// One Ticker call over [`unenforced`] with the metadata `grpc-timeout: <timeout>` (sent,
/// never kept by this client): the messages that arrived before the stream ended, then its
/// status (code, message, and the trailers' metadata when it ended well), and when it ended.
async fn unenforced_ticker(port: u16, timeout: &str) -> (Outcome, Duration) {
    let mut g = unenforced(port);
    g.ready().await.expect("client ready");
    let mut req = tonic::Request::new(Bytes::from("tick"));
    req.metadata_mut()
        .insert("grpc-timeout", timeout.parse().unwrap());
    let started = std::time::Instant::now();
    let call = async {
        let r = match g
            .server_streaming(req, path("/weir.test.Echo/Ticker"), Raw)
            .await
        {
            Ok(r) => r,
            Err(s) => return failed(s),
        };
        let mut s = r.into_inner();
        let mut values = Vec::new();
        loop {
            match s.message().await {
                Ok(Some(m)) => values.push(text(&m)),
                Ok(None) => break,
                Err(e) => {
                    return Outcome {
                        values,
                        ..failed(e)
                    }
                }
            }
        }
        let metadata = s.trailers().await.ok().flatten().unwrap_or_default();
        Outcome {
            values,
            code: Code::Ok,
            message: String::new(),
            metadata,
        }
    };
    let out = tokio::time::timeout(LIMIT, call)
        .await
        .expect("no end in 10 s");
    (out, started.elapsed())
}

/// Waits (5 s at most) until the server has seen `n` Ticker calls end; returns them.
async fn ticks_ended(server: &TonicServer, n: usize) -> Vec<Ticked> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ticks = server.ticks();
        if ticks.len() >= n || std::time::Instant::now() >= deadline {
            return ticks;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_timeout_ends_a_streaming_answer_mid_stream_with_deadline_exceeded() {
    const TICKER: &str = "/weir.test.Echo/Ticker";
    let server = TonicServer::start();
    let log = temp_dir("grpc-tonic-log").join("access.log");
    let w = Weir::start_with(
        &table(server.port),
        &[],
        std::process::Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let port = w.proc.port;
    // Ticker answers at once and sends a message every 200 ms for 3 s; the call allows 700 ms,
    // and this client never keeps the deadline itself: only Weir can end the stream early.
    let all: Vec<String> = (0..=TICKS).map(|i| i.to_string()).collect();

    // On the wire: a normal head (200, no status: not trailers-only), the first messages as
    // they come, then DEADLINE_EXCEEDED in trailers once 700 ms have passed.
    let started = std::time::Instant::now();
    let r = bare_h2_stream(port, TICKER, &[("grpc-timeout", "700m")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.head.get("grpc-status"),
        None,
        "a status in the head: {r:?}"
    );
    assert_eq!(
        r.head.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/grpc"),
        "{r:?}"
    );
    assert!(
        r.head_at < Duration::from_millis(500),
        "the head came when the stream started: {r:?}"
    );
    let got: Vec<String> = r
        .messages
        .iter()
        .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
        .collect();
    assert!(got.len() >= 2, "the first messages arrive: {r:?}");
    assert_eq!(got, all[..got.len()], "in order, none lost: {r:?}");
    assert!(
        got.len() < all.len(),
        "the stream went on past its deadline: {r:?}"
    );
    assert!(r.rest.is_empty(), "a cut message: {r:?}");
    assert_eq!(r.error, None, "the stream was cut, not ended: {r:?}");
    let trailers = r.trailers.as_ref().expect("the stream ends with trailers");
    assert_eq!(
        trailers.get("grpc-status").and_then(|v| v.to_str().ok()),
        Some("4"),
        "{r:?}"
    );
    assert_eq!(
        trailers.get("grpc-message").and_then(|v| v.to_str().ok()),
        Some("Deadline Exceeded"),
        "{r:?}"
    );
    assert!(
        r.ended >= Duration::from_millis(650) && r.ended < Duration::from_secs(2),
        "ended after {:?}: {r:?}",
        r.ended
    );
    // The upstream's stream was dropped at the deadline: Ticker saw its stream go away long
    // before its 3 s were up.
    let ticks = ticks_ended(&server, 1).await;
    assert_eq!(
        ticks.len(),
        1,
        "Ticker's call did not end in 5 s: {ticks:?}"
    );
    assert!(ticks[0].cancelled, "{ticks:?}");
    assert!(ticks[0].sent <= TICKS, "{ticks:?}");
    let cancelled_after = ticks[0].at.duration_since(started);
    assert!(
        cancelled_after < Duration::from_secs(2),
        "the upstream saw the cancel after {cancelled_after:?}: {ticks:?}"
    );

    // tonic's client sees the messages, then DEADLINE_EXCEEDED with Weir's message.
    let (r, took) = unenforced_ticker(port, "700m").await;
    assert_eq!(
        (r.code, r.message.as_str()),
        (Code::DeadlineExceeded, "Deadline Exceeded"),
        "after {took:?}: {r:?}"
    );
    assert!(r.values.len() >= 2, "{r:?}");
    assert_eq!(r.values, all[..r.values.len()], "{r:?}");
    assert!(r.values.len() < all.len(), "{r:?}");
    assert_within(took, 650, 2000);
    let ticks = ticks_ended(&server, 2).await;
    assert_eq!(ticks.len(), 2, "{ticks:?}");
    assert!(ticks[1].cancelled && ticks[1].sent <= TICKS, "{ticks:?}");

    // A deadline longer than the stream takes: every message, then OK.
    let (r, took) = unenforced_ticker(port, "5S").await;
    assert_eq!(r.code, Code::Ok, "after {took:?}: {r:?}");
    assert_eq!(r.values, all, "{r:?}");
    assert_eq!(
        r.metadata.get("grpc-status").and_then(|v| v.to_str().ok()),
        Some("0"),
        "{r:?}"
    );
    let ticks = ticks_ended(&server, 3).await;
    assert_eq!(ticks.len(), 3, "{ticks:?}");
    assert!(
        !ticks[2].cancelled && ticks[2].sent == TICKS + 1,
        "{ticks:?}"
    );

    // Each call went upstream once, with its deadline.
    let timeouts: Vec<_> = server
        .seen()
        .iter()
        .filter(|(p, _)| p == TICKER)
        .map(|(_, h)| {
            h.get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        timeouts,
        [Some("700m".into()), Some("700m".into()), Some("5S".into())],
        "{:?}",
        server.seen()
    );

    // The access log: the two cut calls with status 4, the whole one with 0.
    let mut statuses = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        statuses = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["path"] == TICKER)
            .map(|l| l["grpc_status"].clone())
            .collect();
        if statuses.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        statuses,
        [json!(4), json!(4), json!(0)],
        "access log: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_web_calls_answered_by_a_tonic_server() {
    use base64::Engine as _;
    let server = TonicServer::start();
    let mut t: Value = serde_json::from_str(&table(server.port)).unwrap();
    t["routes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "web", "hosts": ["web.test"], "paths": [{"path": "/weir.test.Echo"}], "service": "echo"}));
    t["plugins"] = json!([{"id": "web", "name": "grpc-web", "route": "web", "config": {}}]);
    let w = Weir::start(&t.to_string(), &[]);
    let c = client();
    let call = |method: &str, content_type: &'static str, body: Vec<u8>| {
        let url = w.url(&format!("/weir.test.Echo/{method}"));
        let c = c.clone();
        async move {
            send(
                &c,
                "POST",
                &url,
                &[
                    ("host", "web.test"),
                    ("content-type", content_type),
                    ("x-grpc-web", "1"),
                ],
                body,
            )
            .await
        }
    };

    // Binary mode: the message, then the trailers as the last frame.
    let r = call(
        "Unary",
        "application/grpc-web+proto",
        grpc_message(b"hello"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/grpc-web+proto"));
    let f = grpc_frames(&r.body);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].0, 0, "{f:?}");
    let echoed: Value = serde_json::from_slice(&f[0].1).unwrap();
    assert_eq!(echoed["echo"], "hello", "{echoed}");
    // The tonic server got gRPC, not gRPC-Web, and through Weir.
    assert_eq!(
        echoed["metadata"]["content-type"], "application/grpc+proto",
        "{echoed}"
    );
    assert_eq!(echoed["metadata"]["te"], "trailers", "{echoed}");
    assert_eq!(echoed["metadata"]["via"], "1.1 weir", "{echoed}");
    assert_eq!(f[1].0, 0x80, "the trailer frame: {f:?}");
    assert_eq!(grpc_web_trailers(&f[1].1)["grpc-status"], "0", "{f:?}");

    // Text mode: base64 both ways.
    let b64 = base64::engine::general_purpose::STANDARD;
    let r = call(
        "Unary",
        "application/grpc-web-text",
        b64.encode(grpc_message(b"text")).into_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("content-type"),
        Some("application/grpc-web-text+proto")
    );
    let f = grpc_frames(&grpc_web_text_decode(&r.body));
    assert_eq!(f.len(), 2, "{f:?}");
    let echoed: Value = serde_json::from_slice(&f[0].1).unwrap();
    assert_eq!(echoed["echo"], "text", "{echoed}");
    assert_eq!(f[1].0, 0x80, "{f:?}");
    assert_eq!(grpc_web_trailers(&f[1].1)["grpc-status"], "0", "{f:?}");

    // A server stream: every message, then the status.
    let r = call(
        "ServerStream",
        "application/grpc-web+proto",
        grpc_message(b"3"),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let f = grpc_frames(&r.body);
    let msgs: Vec<_> = f
        .iter()
        .filter(|(flag, _)| *flag == 0)
        .map(|(_, m)| m.clone())
        .collect();
    assert_eq!(msgs, [b"0".to_vec(), b"1".to_vec(), b"2".to_vec()], "{f:?}");
    assert_eq!(f.len(), 4, "{f:?}");
    assert_eq!(f[3].0, 0x80, "{f:?}");
    assert_eq!(grpc_web_trailers(&f[3].1)["grpc-status"], "0", "{f:?}");

    // tonic's error after a message travels in the trailer frame, in both modes.
    let r = call(
        "StreamFail",
        "application/grpc-web+proto",
        grpc_message(b""),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("grpc-status"), None, "not trailers-only: {r:?}");
    let binary = grpc_frames(&r.body);
    let r = call(
        "StreamFail",
        "application/grpc-web-text",
        b64.encode(grpc_message(b"")).into_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let text = grpc_frames(&grpc_web_text_decode(&r.body));
    for f in [binary, text] {
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!((f[0].0, f[0].1.as_slice()), (0, &b"partial"[..]), "{f:?}");
        assert_eq!(f[1].0, 0x80, "{f:?}");
        let trailers = grpc_web_trailers(&f[1].1);
        assert_eq!(trailers["grpc-status"], "3", "{trailers:?}");
        // As tonic sent it (percent-encoding the space, as gRPC allows).
        assert_eq!(trailers["grpc-message"], "bad%20thing", "{trailers:?}");
        assert_eq!(trailers["x-reason"], "test", "{trailers:?}");
    }

    // tonic's error before any message (trailers-only) keeps its status in the head.
    let r = call("Fail", "application/grpc-web+proto", grpc_message(b"")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("grpc-status"), Some("3"), "{r:?}");
    assert_eq!(r.header("grpc-message"), Some("bad%20thing"), "{r:?}");
    assert_eq!(r.header("x-reason"), Some("test"), "{r:?}");
    assert!(r.body.is_empty(), "{r:?}");

    // The documented example, pointed at the tonic server.
    let (_m, f) = documented_grpc_web_call(server.port).await;
    assert_eq!(f.len(), 2, "{f:?}");
    let echoed: Value = serde_json::from_slice(&f[0].1).unwrap();
    assert_eq!(echoed["echo"], "from the docs", "{echoed}");
    assert_eq!(grpc_web_trailers(&f[1].1)["grpc-status"], "0", "{f:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_auth_refusal_is_unauthenticated_and_never_reaches_the_upstream() {
    let server = TonicServer::start();
    let table = json!({
        "routes": [{"id": "locked", "paths": [{"path": "/weir.test.Echo"}], "service": "echo"}],
        "services": [{"id": "echo", "protocol": "grpc", "host": "127.0.0.1", "port": server.port}],
        "consumers": [{"id": "alice", "username": "alice", "credentials": [
            {"type": "key-auth", "id": "alice-key", "key_sha256": weir_proxy::config::hash_key("k-1")},
        ]}],
        "plugins": [{"id": "auth", "name": "key-auth", "route": "locked", "config": {"realm": "grpc"}}],
    });
    let w = Weir::start(&table.to_string(), &[]);
    let port = w.proc.port;
    let ch = h2c(port).await;

    // tonic: no key, a wrong key.
    for (md, message) in [
        (vec![], "No API key found in request"),
        (
            vec![("apikey", "wrong")],
            "Invalid authentication credentials",
        ),
    ] {
        let r = unary_with(&ch, "/weir.test.Echo/Unary", &md).await;
        assert_eq!(
            (r.code, r.message.as_str()),
            (Code::Unauthenticated, message),
            "{md:?}: {r:?}"
        );
        assert_eq!(
            r.metadata
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Key realm=\"grpc\""),
            "the plugin's challenge stays: {r:?}"
        );
    }
    // Trailers-only, seen on the wire.
    let (status, head) = bare_h2_call(port, "/weir.test.Echo/Unary", &[]).await;
    assert_eq!(status, 200, "{head:?}");
    assert_eq!(head.get("grpc-status").unwrap(), "16", "{head:?}");
    assert_eq!(
        head.get("grpc-message").unwrap(),
        "No API key found in request",
        "{head:?}"
    );
    // grpcio without a key.
    let target = format!("127.0.0.1:{port}");
    let t = target.clone();
    let refused = tokio::task::spawn_blocking(move || {
        grpc_client(&["one", &t, "Unary"]).remove("Unary").unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        (refused["code"].as_str(), refused["details"].as_str()),
        (Some("UNAUTHENTICATED"), Some("No API key found in request")),
        "{refused}"
    );
    assert!(
        server.paths().is_empty(),
        "a refused call reached the upstream: {:?}",
        server.paths()
    );

    // With the key, both clients get through as alice.
    let ok = unary_with(&ch, "/weir.test.Echo/Unary", &[("apikey", "k-1")]).await;
    assert_eq!(ok.code, Code::Ok, "{ok:?}");
    let echoed: Value = serde_json::from_str(&ok.values[0]).unwrap();
    assert_eq!(echoed["echo"], "hello", "{echoed}");
    assert_eq!(echoed["metadata"]["x-consumer-id"], "alice", "{echoed}");
    assert_eq!(
        echoed["metadata"]["x-credential-identifier"], "alice-key",
        "{echoed}"
    );
    let passed = tokio::task::spawn_blocking(move || {
        grpc_client(&["one", &target, "Unary", "--metadata", "apikey=k-1"])
            .remove("Unary")
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(passed["code"], "OK", "{passed}");
    let echoed: Value = serde_json::from_str(passed["value"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["echo"], "1", "{echoed}");
    assert_eq!(echoed["metadata"]["x-consumer-id"], "alice", "{echoed}");
    assert_eq!(
        server.paths(),
        ["/weir.test.Echo/Unary", "/weir.test.Echo/Unary"],
        "only the two calls with the key reached the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_healthy_target_is_unavailable_and_the_call_goes_nowhere() {
    // Up, but answering its health check 503: ejected by the active check.
    let sick = TonicServer::start();
    let table = json!({
        "routes": [
            {"id": "sick", "paths": [{"path": "/sick.Echo"}], "service": "sick"},
            {"id": "empty", "paths": [{"path": "/empty.Echo"}], "service": "empty"},
        ],
        "services": [
            {"id": "sick", "protocol": "grpc", "upstream": "sick"},
            {"id": "empty", "protocol": "grpc", "upstream": "empty"},
        ],
        "upstreams": [
            {"id": "sick", "targets": [{"target": format!("127.0.0.1:{}", sick.port)}],
             "healthchecks": {"active": {"path": "/healthz", "interval": 100,
                                         "unhealthy_threshold": 1}}},
            {"id": "empty", "targets": []},
        ],
    });
    let w = Weir::start(&table.to_string(), &[]);
    let port = w.proc.port;
    let c = client();
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let up = get(&c, &w.admin_url("/upstreams"), &[]).await.json();
        let sick_up = up["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["id"] == "sick")
            .cloned();
        if sick_up
            .as_ref()
            .is_some_and(|u| u["targets"][0]["health"] == "unhealthy")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the target was not ejected in 10 s: {up}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every target ejected, and no target at all: UNAVAILABLE with Weir's message, for
    // tonic and on the wire (trailers-only, checked by the helper).
    let ch = h2c(port).await;
    for p in ["/sick.Echo/Unary", "/empty.Echo/Unary"] {
        let r = unary(&ch, p, "x").await;
        assert_eq!(
            (r.code, r.message.as_str()),
            (Code::Unavailable, "no healthy upstream targets"),
            "{p}: {r:?}"
        );
        let (status, head) = bare_h2_call(port, p, &[]).await;
        assert_eq!(status, 200, "{p}: {head:?}");
        assert_eq!(head.get("grpc-status").unwrap(), "14", "{p}: {head:?}");
        assert_eq!(
            head.get("grpc-message").unwrap(),
            "no healthy upstream targets",
            "{p}: {head:?}"
        );
    }
    let probed = sick.paths();
    assert!(
        !probed.is_empty() && probed.iter().all(|p| p == "/healthz"),
        "the ejected target got only probes: {probed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weirs_own_read_timeout_is_unavailable_unless_the_calls_deadline_passed() {
    let server = TonicServer::start();
    let table = json!({
        "routes": [{"id": "echo", "paths": [{"path": "/weir.test.Echo"}], "service": "impatient"}],
        "services": [{"id": "impatient", "protocol": "grpc", "host": "127.0.0.1",
                      "port": server.port, "read_timeout": 300}],
    });
    let w = Weir::start(&table.to_string(), &[]);
    let port = w.proc.port;
    let ch = h2c(port).await;
    // A call the upstream answers in time passes.
    let ok = unary(&ch, "/weir.test.Echo/Unary", "quick").await;
    assert_eq!(ok.code, Code::Ok, "{ok:?}");

    // Weir's own read timeout (300 ms) ends the call before Slow answers (2 s): 504, which is
    // UNAVAILABLE, since the call's own deadline had not passed: a call without a deadline ...
    let started = std::time::Instant::now();
    let r = unary(&ch, "/weir.test.Echo/Slow", "x").await;
    let took = started.elapsed();
    assert_eq!(
        (r.code, r.message.as_str()),
        (Code::Unavailable, "The upstream server is timing out"),
        "no deadline, after {took:?}: {r:?}"
    );
    assert_within(took, 290, 1500);
    // ... and one whose deadline is later than the read timeout ...
    let (r, took) = unenforced_call(port, "/weir.test.Echo/Slow", Duration::from_secs(5)).await;
    assert_eq!(
        (r.code, r.message.as_str()),
        (Code::Unavailable, "The upstream server is timing out"),
        "5 s deadline, after {took:?}: {r:?}"
    );
    assert_within(took, 290, 1500);
    // ... while a deadline sooner than the read timeout is DEADLINE_EXCEEDED.
    let (r, took) = unenforced_call(port, "/weir.test.Echo/Slow", Duration::from_millis(100)).await;
    assert_eq!(
        (r.code, r.message.as_str()),
        (Code::DeadlineExceeded, "The upstream server is timing out"),
        "{r:?}"
    );
    assert_within(took, 90, 290);
    assert_eq!(
        server.paths(),
        [
            "/weir.test.Echo/Unary",
            "/weir.test.Echo/Slow",
            "/weir.test.Echo/Slow",
            "/weir.test.Echo/Slow"
        ],
        "each call was tried once"
    );
}

/// Asserts that a call took at least `min_ms` and less than `max_ms` milliseconds.
#[track_caller]
fn assert_within(took: Duration, min_ms: u64, max_ms: u64) {
    assert!(
        took >= Duration::from_millis(min_ms) && took < Duration::from_millis(max_ms),
        "took {took:?}, expected {min_ms}..{max_ms} ms"
    );
}
