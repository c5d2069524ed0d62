//! gRPC through the real binary with a second implementation, tonic (Rust), next to gRPC's C
//! core (tests/grpc.rs): a tonic client and a tonic server, no generated code (a raw-bytes
//! codec), every call kind over h2c and TLS; tonic against grpcio across Weir both ways; and
//! Weir's own failures as tonic sees them.
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

// ---- The tonic server: service `weir.test.Echo`, the methods peer.py serves. ----

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

/// Fail: INVALID_ARGUMENT "bad thing" with trailing metadata `x-reason: test`.
struct Fail;
impl tonic::server::UnaryService<Bytes> for Fail {
    type Response = Bytes;
    type Future = Answer<Bytes>;
    fn call(&mut self, _: tonic::Request<Bytes>) -> Self::Future {
        let mut md = MetadataMap::new();
        md.insert("x-reason", "test".parse().unwrap());
        Box::pin(async move {
            Err(Status::with_metadata(
                Code::InvalidArgument,
                "bad thing",
                md,
            ))
        })
    }
}

async fn dispatch(
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<tonic::body::Body>, std::convert::Infallible> {
    let mut grpc = tonic::server::Grpc::new(Raw);
    Ok(match req.uri().path() {
        "/weir.test.Echo/Unary" => grpc.unary(Unary, req).await,
        "/weir.test.Echo/ServerStream" => grpc.server_streaming(ServerStream, req).await,
        "/weir.test.Echo/ClientStream" => grpc.client_streaming(ClientStream, req).await,
        "/weir.test.Echo/Bidi" => grpc.streaming(Bidi, req).await,
        "/weir.test.Echo/Fail" => grpc.unary(Fail, req).await,
        _ => Status::unimplemented("no such method").into_http(),
    })
}

/// The tonic server on a free loopback port (h2c, hyper's HTTP/2 server), on a thread of its
/// own; stopped, its connections with it, when dropped.
struct TonicServer {
    port: u16,
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
                        tokio::spawn(async move {
                            let h2 = hyper::server::conn::http2::Builder::new(
                                hyper_util::rt::TokioExecutor::new(),
                            );
                            let service = hyper::service::service_fn(dispatch);
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
            stop: Some(stop),
            thread: Some(thread),
        }
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
    assert_eq!(got["Bidi"]["value"], json!(["echo:x", "echo:y"]));
    assert_eq!(got["Fail"]["code"], "INVALID_ARGUMENT", "{}", got["Fail"]);

    // gRPC's C core serving TLS: tonic's calls arrive, statuses and trailers intact.
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
