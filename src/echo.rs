//! `weir echo`: a small upstream for the quick start, the examples and the tests.
//!
//! Every request is answered with JSON describing what arrived (method, path, raw query, host,
//! headers, body length, protocol, the server's name and listen address). Query parameters:
//! `status=N` sets the status, `fail=N&key=K` answers the first N requests of key K with that
//! status (and `delay_ms`) and the ones after with 200 at once (a backend that recovers, for
//! retries; with `reset=1` the first N get no answer at all: their connection is closed once
//! the request is read, a connection error), `delay_ms=N` waits before answering, `bytes=N` streams N bytes
//! of body instead of JSON, `sse=N` answers `text/event-stream` with N server-sent events
//! `interval_ms=M` apart (default 1000; the first at once, each flushed on its own, each
//! carrying its number and the Unix time in milliseconds it was sent:
//! `id: 1\ndata: {"n":1,"of":N,"sent_unix_ms":T}\n\n`). WebSocket upgrades get an echo of
//! every message; the text message `close` is answered instead with a close frame (1000) from
//! the server, which then waits for the client's. A gRPC call (`content-type:
//! application/grpc…`) gets its request body back as the response body, the request's headers
//! as JSON in the response header `x-echo-request-headers`, then `grpc-status: 0`
//! in trailers. `connection` numbers the TCP connections
//! accepted, so a client can tell whether its peer reuses them. A request header
//! `X-Echo-Set-Header: Name:value,...` makes those headers part of the response.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type EchoBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

struct Echo {
    name: String,
    listen: SocketAddr,
    behaviour: Behaviour,
    /// Requests seen per `key` of `fail=N&key=K`.
    failures: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

/// How every answer of this echo behaves, besides what a request's query asks.
#[derive(Default)]
pub struct Behaviour {
    /// Added to every answer's wait.
    pub delay: Duration,
    /// While it exists, the status every request gets (its content).
    pub status_file: Option<std::path::PathBuf>,
}

/// Serves until the process is stopped.
pub fn run(
    listen: SocketAddr,
    name: String,
    threads: usize,
    behaviour: Behaviour,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let echo = Arc::new(Echo {
            name,
            listen: listener.local_addr()?,
            behaviour,
            failures: Default::default(),
        });
        tracing::info!(listen = %echo.listen, name = %echo.name, "weir echo started");
        let mut connections = 0u64;
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let echo = echo.clone();
            connections += 1;
            let connection = connections;
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let echo = echo.clone();
                    // An error makes hyper close the connection without an answer.
                    async move { echo.handle(req, connection).await.ok_or(Reset) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

/// A request answered by closing its connection (`fail=N&key=K&reset=1`).
#[derive(Debug)]
struct Reset;

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection closed without an answer, as asked")
    }
}

impl std::error::Error for Reset {}

fn query_param<T: std::str::FromStr>(query: Option<&str>, key: &str) -> Option<T> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
}

fn headers_json(headers: &HeaderMap) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for name in headers.keys() {
        let values: Vec<serde_json::Value> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned().into())
            .collect();
        let v = if values.len() == 1 {
            values[0].clone()
        } else {
            values.into()
        };
        map.insert(name.as_str().to_string(), v);
    }
    map.into()
}

impl Echo {
    /// `None`: close the connection without an answer (a failing request of
    /// `fail=N&key=K&reset=1`).
    async fn handle(
        &self,
        mut req: Request<Incoming>,
        connection: u64,
    ) -> Option<Response<EchoBody>> {
        let q = req.uri().query();
        if query_param::<u8>(q, "reset") == Some(1) {
            if let (Some(n), Some(key)) = (
                query_param::<u64>(q, "fail"),
                query_param::<String>(q, "key"),
            ) {
                if self.count(key) <= n {
                    // Read the request whole first: the failure is the missing answer.
                    while let Some(Ok(_)) = req.body_mut().frame().await {}
                    return None;
                }
            }
        }
        Some(self.answer(req, connection).await)
    }

    /// Counts a request of `key` (of `fail=N&key=K`); returns how many there were.
    fn count(&self, key: String) -> u64 {
        let mut seen = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= 10_000 {
            seen.clear(); // a demo tool: bounded, not exact
        }
        let count = seen.entry(key).or_default();
        *count += 1;
        *count
    }

    /// `connection` numbers the TCP connections this echo accepted (shows connection reuse).
    async fn answer(&self, mut req: Request<Incoming>, connection: u64) -> Response<EchoBody> {
        if req
            .headers()
            .get(header::UPGRADE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"))
        {
            return websocket(&mut req);
        }
        let query = req.uri().query().map(str::to_string);
        let q = query.as_deref();
        let forced = self
            .behaviour
            .status_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|s| s.trim().parse::<u16>().ok());
        let mut status = forced
            .or_else(|| query_param::<u16>(q, "status"))
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        // A recovered request of `fail=N&key=K` answers at once.
        let mut recovered = false;
        if let (Some(n), Some(key)) = (
            query_param::<u64>(q, "fail"),
            query_param::<String>(q, "key"),
        ) {
            if self.count(key) > n {
                status = StatusCode::OK;
                recovered = true;
            }
        }
        let (parts, mut body) = req.into_parts();
        let grpc = parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        let mut body_length = 0u64;
        let mut kept = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => {
                    let data = f.data_ref().map_or(&[][..], |d| &d[..]);
                    body_length += data.len() as u64;
                    if grpc {
                        kept.extend_from_slice(data);
                    }
                }
                Err(_) => break,
            }
        }
        let asked = if recovered {
            0
        } else {
            query_param::<u64>(q, "delay_ms").unwrap_or(0)
        };
        let delay = self.behaviour.delay + Duration::from_millis(asked);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut resp = Response::builder()
            .status(status)
            .header("x-echo-name", &self.name);
        // `X-Echo-Set-Header: Name:value,Other:value` adds those response headers (as the
        // Gateway API suite's echo server does).
        for v in parts.headers.get_all("x-echo-set-header") {
            for pair in v.to_str().unwrap_or_default().split(',') {
                let Some((name, value)) = pair.split_once(':') else {
                    continue;
                };
                let name = http::HeaderName::from_bytes(name.trim().as_bytes());
                let value = http::HeaderValue::from_str(value.trim());
                if let (Ok(name), Ok(value)) = (name, value) {
                    resp = resp.header(name, value);
                }
            }
        }
        if let Some(n) = query_param::<u64>(q, "sse") {
            let interval = query_param::<u64>(q, "interval_ms").unwrap_or(1000);
            let body = Events {
                total: n,
                sent: 0,
                interval: Duration::from_millis(interval),
                wait: None,
            };
            return resp
                .header(header::CONTENT_TYPE, "text/event-stream")
                .header(header::CACHE_CONTROL, "no-cache")
                .body(BodyExt::boxed(body))
                .expect("valid response");
        }
        if grpc {
            // A gRPC call: its messages come back as they were sent, and the status follows
            // in trailers, as a gRPC server answers.
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let body = DataThenTrailers {
                data: Some(kept.freeze()),
                trailers: Some(trailers),
            };
            // JSON escapes control characters; a value with other bytes is left out.
            let seen = headers_json(&parts.headers).to_string();
            if let Ok(v) = http::HeaderValue::from_str(&seen) {
                resp = resp.header("x-echo-request-headers", v);
            }
            return resp
                .header(header::CONTENT_TYPE, "application/grpc")
                .body(BodyExt::boxed(body))
                .expect("valid response");
        }
        if let Some(n) = query_param::<u64>(q, "bytes") {
            resp = resp.header(header::CONTENT_TYPE, "application/octet-stream");
            let body = Chunks {
                left: n,
                chunk: Bytes::from(vec![b'x'; 64 * 1024]),
            };
            return resp.body(BodyExt::boxed(body)).expect("valid response");
        }
        let info = serde_json::json!({
            "name": self.name,
            "listen": self.listen.to_string(),
            "connection": connection,
            "method": parts.method.as_str(),
            "path": parts.uri.path(),
            "query": q,
            // HTTP/2 requests name it in `:authority`.
            "host": parts.headers.get(header::HOST).and_then(|h| h.to_str().ok()).or(parts.uri.authority().map(|a| a.as_str())),
            "headers": headers_json(&parts.headers),
            "body_length": body_length,
            "protocol": format!("{:?}", parts.version),
        });
        let mut bytes = serde_json::to_vec(&info).unwrap_or_default();
        bytes.push(b'\n');
        resp.header(header::CONTENT_TYPE, "application/json")
            .body(BodyExt::boxed(Full::new(Bytes::from(bytes))))
            .expect("valid response")
    }
}

/// One data frame, then trailers.
struct DataThenTrailers {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for DataThenTrailers {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let frame = match self.data.take().filter(|d| !d.is_empty()) {
            Some(d) => Some(Frame::data(d)),
            None => self.trailers.take().map(Frame::trailers),
        };
        std::task::Poll::Ready(frame.map(Ok))
    }
}

/// `n` bytes in 64 KiB frames, produced as the client reads them.
struct Chunks {
    left: u64,
    chunk: Bytes,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.left.min(self.chunk.len() as u64) as usize;
        self.left -= n as u64;
        std::task::Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n)))))
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// `total` server-sent events, `interval` apart, each its own frame (so flushed on its own).
struct Events {
    total: u64,
    sent: u64,
    interval: Duration,
    /// The pause before the next event.
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl http_body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.sent == self.total {
            return std::task::Poll::Ready(None);
        }
        if let Some(wait) = self.wait.as_mut() {
            std::task::ready!(std::future::Future::poll(wait.as_mut(), cx));
            self.wait = None;
        }
        self.sent += 1;
        let sent_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let event = format!(
            "id: {n}\ndata: {{\"n\":{n},\"of\":{of},\"sent_unix_ms\":{sent_unix_ms}}}\n\n",
            n = self.sent,
            of = self.total,
        );
        if self.sent < self.total {
            let interval = self.interval;
            self.wait = Some(Box::pin(tokio::time::sleep(interval)));
        }
        std::task::Poll::Ready(Some(Ok(Frame::data(Bytes::from(event)))))
    }

    fn is_end_stream(&self) -> bool {
        self.sent == self.total
    }
}

fn websocket(req: &mut Request<Incoming>) -> Response<EchoBody> {
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        return Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(BodyExt::boxed(Full::new(Bytes::from_static(
                b"missing Sec-WebSocket-Key\n",
            ))))
            .expect("valid response");
    };
    let accept = weir_proxy::server::headers::websocket_accept(key.as_bytes());
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            let _ = ws_echo(TokioIo::new(upgraded)).await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header("sec-websocket-accept", accept)
        .body(BodyExt::boxed(Full::new(Bytes::new())))
        .expect("valid response")
}

/// Echoes WebSocket frames (unmasked, same opcode and FIN bit) until a close frame; the text
/// message `close` makes the server close first (close frame 1000 "bye", then it waits for the
/// client's close frame, at most 10 s).
async fn ws_echo<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut s: S,
) -> std::io::Result<()> {
    const MAX_PAYLOAD: u64 = 16 * 1024 * 1024;
    loop {
        let mut h = [0u8; 2];
        s.read_exact(&mut h).await?;
        let opcode = h[0] & 0x0f;
        let masked = h[1] & 0x80 != 0;
        let len = match h[1] & 0x7f {
            126 => s.read_u16().await? as u64,
            127 => s.read_u64().await?,
            n => n as u64,
        };
        if len > MAX_PAYLOAD {
            return Ok(());
        }
        let mut mask = [0u8; 4];
        if masked {
            s.read_exact(&mut mask).await?;
        }
        let mut payload = vec![0u8; len as usize];
        s.read_exact(&mut payload).await?;
        if masked {
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= mask[i % 4];
            }
        }
        if opcode == 0x1 && h[0] & 0x80 != 0 && payload == b"close" {
            s.write_all(&[0x88, 5, 0x03, 0xe8, b'b', b'y', b'e'])
                .await?;
            s.flush().await?;
            return match tokio::time::timeout(Duration::from_secs(10), ws_await_close(&mut s)).await
            {
                Ok(Ok(())) => s.shutdown().await,
                Ok(Err(e)) => Err(e),
                Err(_) => Ok(()),
            };
        }
        let reply_first = match opcode {
            0x9 => 0x80 | 0xA,
            0xA => continue,
            _ => h[0],
        };
        let mut frame = vec![reply_first];
        match len {
            0..=125 => frame.push(len as u8),
            126..=65535 => {
                frame.push(126);
                frame.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                frame.push(127);
                frame.extend_from_slice(&len.to_be_bytes());
            }
        }
        frame.extend_from_slice(&payload);
        s.write_all(&frame).await?;
        if opcode == 0x8 {
            return s.shutdown().await;
        }
    }
}

/// Reads and drops frames until the peer's close frame (after the server sent its own).
async fn ws_await_close<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> std::io::Result<()> {
    loop {
        let mut h = [0u8; 2];
        s.read_exact(&mut h).await?;
        let len = match h[1] & 0x7f {
            126 => s.read_u16().await? as u64,
            127 => s.read_u64().await?,
            n => n as u64,
        } + if h[1] & 0x80 != 0 { 4 } else { 0 };
        let skipped = tokio::io::copy(&mut (&mut *s).take(len), &mut tokio::io::sink()).await?;
        if skipped < len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if h[0] & 0x0f == 0x8 {
            return Ok(());
        }
    }
}
