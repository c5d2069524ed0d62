//! Shared helpers for the end-to-end tests: start the real `weir` binary (proxy and echo
//! upstreams) on free loopback ports, send real HTTP requests, and stop everything on drop.

#![allow(dead_code)]

pub mod ca;
pub mod grpc;
pub mod health;
pub mod manifests;
pub mod recorder;
pub mod redis;
pub mod tls;
pub mod ws;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// A loopback port nobody listens on right now.
///
/// Chosen below Linux's ephemeral range (32768–60999): a port from `bind(0)` is free only
/// until the kernel hands the same number to another test's `bind(0)` or outgoing connection,
/// which happened between the moment a test released it and the moment Weir bound it. Tests
/// run as separate processes, so the start is spread by process id and time.
pub fn free_port() -> u16 {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let seed = std::process::id().wrapping_mul(2_654_435_761) ^ nanos;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed) as u32;
        let port = (LOW + seed.wrapping_add(n.wrapping_mul(7_919)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until something accepts connections on `port` (bounded).
pub fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listening on 127.0.0.1:{port} after 20s");
}

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub port: u16,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM (what Kubernetes sends a stopping pod).
    pub fn terminate(&self) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -TERM {}", self.pid());
    }

    /// Waits for the process to exit; fails the test after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(started.elapsed() < limit, "still running after {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Starts `weir echo` named `name` on a free port.
pub fn echo(name: &str) -> Proc {
    echo_with(name, &[])
}

/// Starts `weir echo` named `name` on a free port with extra flags (`--delay-ms`,
/// `--status-file`).
pub fn echo_with(name: &str, extra: &[&str]) -> Proc {
    let port = free_port();
    let child = Command::new(WEIR)
        .args([
            "echo",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--name",
            name,
        ])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn weir echo");
    wait_for_port(port);
    Proc { child, port }
}

/// A running `weir proxy` with its admin port.
pub struct Weir {
    pub proc: Proc,
    pub admin: u16,
    pub dir: PathBuf,
    /// Where the log is kept ([`Weir::start_logged`]).
    pub log_dir: Option<PathBuf>,
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "weir-test-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Weir {
    /// Starts the proxy with `config` (YAML or JSON) and extra flags; waits until ready.
    pub fn start(config: &str, extra: &[&str]) -> Weir {
        Weir::start_with(config, extra, Stdio::null())
    }

    pub fn start_with(config: &str, extra: &[&str], stdout: Stdio) -> Weir {
        Weir::start_full(config, extra, stdout, Stdio::inherit())
    }

    /// Starts the proxy with its log (stderr) kept in a file, read by [`Weir::log`].
    pub fn start_logged(config: &str, extra: &[&str]) -> Weir {
        let dir = temp_dir("proxy-log");
        let file = std::fs::File::create(dir.join("stderr.log")).unwrap();
        let mut w = Weir::start_full(config, extra, Stdio::null(), Stdio::from(file));
        w.log_dir = Some(dir);
        w
    }

    /// The log of a proxy started with [`Weir::start_logged`].
    pub fn log(&self) -> String {
        let dir = self.log_dir.as_ref().expect("started with start_logged");
        std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
    }

    fn start_full(config: &str, extra: &[&str], stdout: Stdio, stderr: Stdio) -> Weir {
        let dir = temp_dir("proxy");
        let cfg = dir.join("config.yaml");
        std::fs::write(&cfg, config).unwrap();
        let port = free_port();
        let admin = free_port();
        let mut args = vec![
            "proxy".to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--admin-listen".into(),
            format!("127.0.0.1:{admin}"),
            "--config".into(),
            cfg.display().to_string(),
        ];
        // Two workers unless the test asks for another number.
        if !extra.contains(&"--worker-threads") {
            args.extend(["--worker-threads".into(), "2".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new(WEIR)
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("spawn weir proxy");
        let w = Weir {
            proc: Proc { child, port },
            admin,
            dir,
            log_dir: None,
        };
        wait_for_port(port);
        wait_for_port(admin);
        w
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.proc.port)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin)
    }

    /// Peak resident set size of the proxy process, in bytes (VmHWM).
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.proc.pid())).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .expect("VmHWM");
        let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    }
}

impl Drop for Weir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(d) = &self.log_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A response with its body read to the end.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The echo upstream's name, when the request reached one.
    pub fn echo_name(&self) -> Option<String> {
        self.header("x-echo-name").map(str::to_string)
    }
}

pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends one request; `headers` are (name, value) pairs; `Host` may be among them.
pub async fn send(
    c: &HttpClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Resp {
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(body.into())).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(30), c.request(req))
        .await
        .expect("request timed out")
        .expect("request failed");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

pub async fn get(c: &HttpClient, url: &str, headers: &[(&str, &str)]) -> Resp {
    send(c, "GET", url, headers, Bytes::new()).await
}

/// Pushes a routing table to the admin API.
pub async fn push(c: &HttpClient, w: &Weir, config: &str) -> Resp {
    send(
        c,
        "POST",
        &w.admin_url("/config"),
        &[("content-type", "application/yaml")],
        config.to_string(),
    )
    .await
}

/// The proxy's Prometheus text from the admin API.
pub async fn metrics(c: &HttpClient, w: &Weir) -> String {
    String::from_utf8(get(c, &w.admin_url("/metrics"), &[]).await.body.to_vec()).unwrap()
}

/// Writes raw bytes to the proxy and reads until the peer closes or `timeout` passes.
pub fn raw(port: u16, request: &[u8], timeout: Duration) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls `f` until it returns true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

pub fn addr(p: &Proc) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], p.port))
}
pub mod apiserver;
pub mod cluster;

/// An upstream that hands each accepted connection, numbered from 0, to `script`.
pub struct Scripted {
    /// Where it listens (127.0.0.1).
    pub port: u16,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
}

/// Starts a scripted upstream; each connection gets a 20 s read timeout.
pub fn scripted<F>(script: F) -> Scripted
where
    F: Fn(usize, BufReader<TcpStream>, TcpStream) + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let script = Arc::new(script);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            let n = count.fetch_add(1, Ordering::SeqCst);
            let script = script.clone();
            std::thread::spawn(move || {
                let w = stream.try_clone().unwrap();
                script(n, BufReader::new(stream), w)
            });
        }
    });
    Scripted { port, accepted }
}

/// Reads a message head (request or response) through its empty line; `None` when the peer
/// closed first.
pub fn read_head(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            return Some(head);
        }
    }
}
