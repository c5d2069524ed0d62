//! Host-name targets through the real binary and Weir's own resolver, asking a test DNS server
//! on a loopback UDP port (`--dns-resolver`): every address of an answer is used, an answer
//! lives for its record TTL and then moves requests to the new address (on new connections),
//! a failed connection (refused, or timed out) looks the name up again but not on every
//! failure, an ExternalName Service resolves through it, and a name that does not exist is a
//! 502 that is not asked again per request.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::manifests::{wait_for_status, Manifests};
use common::*;

const A: u16 = 1;

/// What the test DNS server knows: a name's A records and their TTL.
type Zone = HashMap<String, (Vec<Ipv4Addr>, u32)>;

/// A DNS server on 127.0.0.1 answering A queries from a zone the test changes, AAAA queries
/// of its names with no records, and anything else with NXDOMAIN; it counts the questions.
struct Dns {
    addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    /// Questions per (name, type).
    asked: Arc<Mutex<HashMap<(String, u16), usize>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Dns {
    fn start() -> Dns {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let zone = Arc::new(Mutex::new(Zone::new()));
        let asked = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (zone, asked, stop) = (zone.clone(), asked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    if let Some(reply) = answer(&buf[..n], &zone, &asked) {
                        let _ = socket.send_to(&reply, from);
                    }
                }
            })
        };
        Dns {
            addr,
            zone,
            asked,
            stop,
            thread: Some(thread),
        }
    }

    /// Makes `name` answer `addrs` with `ttl` seconds.
    fn set(&self, name: &str, addrs: &[&str], ttl: u32) {
        let addrs = addrs.iter().map(|a| a.parse().unwrap()).collect();
        self.zone
            .lock()
            .unwrap()
            .insert(name.to_string(), (addrs, ttl));
    }

    /// A questions asked for `name` so far.
    fn asked(&self, name: &str) -> usize {
        let asked = self.asked.lock().unwrap();
        asked.get(&(name.to_string(), A)).copied().unwrap_or(0)
    }

    /// The `--dns-resolver` flag for this server.
    fn flag(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reply to one query, built by hand from its bytes (names in queries are uncompressed).
fn answer(
    q: &[u8],
    zone: &Mutex<Zone>,
    asked: &Mutex<HashMap<(String, u16), usize>>,
) -> Option<Vec<u8>> {
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*q.get(pos)?);
        if len == 0 {
            pos += 1;
            break;
        }
        labels.push(String::from_utf8_lossy(q.get(pos + 1..pos + 1 + len)?).to_lowercase());
        pos += 1 + len;
    }
    let qtype = u16::from_be_bytes([*q.get(pos)?, *q.get(pos + 1)?]);
    let question = q.get(12..pos + 4)?;
    let name = labels.join(".");
    *asked
        .lock()
        .unwrap()
        .entry((name.clone(), qtype))
        .or_default() += 1;
    let known = zone.lock().unwrap().get(&name).cloned();
    let (rcode, records) = match (known, qtype) {
        (Some((addrs, ttl)), A) => (0, addrs.into_iter().map(|a| (a, ttl)).collect()),
        (Some(_), _) => (0, Vec::new()),
        (None, _) => (3, Vec::new()),
    };
    let mut m = q[..2].to_vec();
    m.extend_from_slice(&(0x8180u16 | rcode).to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, records.len() as u8, 0, 0, 0, 0]);
    m.extend_from_slice(question);
    for (addr, ttl) in records {
        m.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1]);
        m.extend_from_slice(&ttl.to_be_bytes());
        m.extend_from_slice(&[0, 4]);
        m.extend_from_slice(&addr.octets());
    }
    Some(m)
}

/// `weir echo` named `name` on `ip:port`.
fn echo_at(ip: &str, port: u16, name: &str) -> Proc {
    let child = Command::new(WEIR)
        .args(["echo", "--listen", &format!("{ip}:{port}"), "--name", name])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn weir echo");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((ip, port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "echo {name} not up on {ip}:{port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Proc { child, port }
}

/// Echo upstreams `one` on 127.0.0.1 and `two` on 127.0.0.2, on the same port (both
/// loopback on Linux), so that one host name and port reaches either by its address.
fn upstreams() -> (u16, Proc, Proc) {
    let port = free_port();
    let one = echo_at("127.0.0.1", port, "one");
    let two = echo_at("127.0.0.2", port, "two");
    (port, one, two)
}

/// A proxy sending everything to `host:port`, asking `dns`.
fn proxy(host: &str, port: u16, dns: &Dns) -> Weir {
    proxy_with(host, port, dns, 5000)
}

/// [`proxy`] with a connect timeout of `connect_ms`.
fn proxy_with(host: &str, port: u16, dns: &Dns, connect_ms: u64) -> Weir {
    Weir::start_logged(
        &format!(
            "routes:\n- {{id: r, service: s}}\n\
             services:\n- {{id: s, host: {host}, port: {port}, connect_timeout: {connect_ms}}}\n"
        ),
        &["--dns-resolver", &dns.flag()],
    )
}

/// Which upstream answered each of `n` requests (`None`: not an upstream's answer).
async fn answers(c: &HttpClient, w: &Weir, n: usize) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = get(c, &w.url("/"), &[]).await;
        out.push((r.status == 200).then(|| r.echo_name()).flatten());
    }
    out
}

#[tokio::test]
async fn every_address_of_a_name_is_used() {
    let (port, _one, _two) = upstreams();
    let dns = Dns::start();
    dns.set("both.weir.test", &["127.0.0.1", "127.0.0.2"], 60);
    let w = proxy("both.weir.test", port, &dns);
    let c = client();
    let got = answers(&c, &w, 10).await;
    let seen: HashSet<String> = got.iter().flatten().cloned().collect();
    assert_eq!(got.iter().flatten().count(), 10, "{got:?}");
    assert_eq!(
        seen,
        HashSet::from(["one".to_string(), "two".to_string()]),
        "{got:?}"
    );
    // One question for all of them: the answer lives for its 60 s.
    assert_eq!(dns.asked("both.weir.test"), 1);
}

#[tokio::test]
async fn requests_move_to_the_new_address_when_the_ttl_runs_out() {
    let (port, _one, _two) = upstreams();
    let dns = Dns::start();
    dns.set("move.weir.test", &["127.0.0.1"], 1);
    let w = proxy("move.weir.test", port, &dns);
    let c = client();
    let before = answers(&c, &w, 5).await;
    assert!(
        before.iter().all(|a| a.as_deref() == Some("one")),
        "{before:?}"
    );

    dns.set("move.weir.test", &["127.0.0.2"], 1);
    let switched = Instant::now();
    // Within the record's 1 s (and some slack for a loaded machine), never later.
    loop {
        let r = get(&c, &w.url("/"), &[]).await;
        assert_eq!(r.status, 200);
        if r.echo_name().as_deref() == Some("two") {
            break;
        }
        assert!(
            switched.elapsed() < Duration::from_secs(5),
            "still sent to the old address 5 s after the answer changed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The connections pooled to 127.0.0.1 are not used for the name any more: every request
    // reaches the new address.
    let after = answers(&c, &w, 10).await;
    assert!(
        after.iter().all(|a| a.as_deref() == Some("two")),
        "{after:?}"
    );
    assert!(dns.asked("move.weir.test") >= 2);
}

#[tokio::test]
async fn a_failed_connection_looks_the_name_up_again() {
    let (port, _one, _two) = upstreams();
    let dns = Dns::start();
    // Nothing listens on 127.0.0.3; the TTL is long, so only a failure can ask again.
    dns.set("dead.weir.test", &["127.0.0.3", "127.0.0.1"], 300);
    dns.set("live.weir.test", &["127.0.0.1"], 300);

    let live = proxy("live.weir.test", port, &dns);
    let c = client();
    let got = answers(&c, &live, 5).await;
    assert!(got.iter().all(|a| a.as_deref() == Some("one")), "{got:?}");
    assert_eq!(
        dns.asked("live.weir.test"),
        1,
        "asked again without a failure"
    );

    let dead = proxy("dead.weir.test", port, &dns);
    // The first connection goes to 127.0.0.3 and is refused; the retry takes the next
    // address (a failure right after the lookup does not ask again).
    let r = get(&c, &dead.url("/"), &[]).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.echo_name().as_deref(), Some("one"));
    assert_eq!(dns.asked("dead.weir.test"), 1);
    // A second on, the next refusal looks the name up again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = get(&c, &dead.url("/"), &[]).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.echo_name().as_deref(), Some("one"));
    assert_eq!(dns.asked("dead.weir.test"), 2);
}

#[tokio::test]
async fn a_refusing_address_does_not_make_requests_ask_again_each_time() {
    let (port, _one, _two) = upstreams();
    let dns = Dns::start();
    // Half the connections go to 127.0.0.3, which refuses them.
    dns.set("half.weir.test", &["127.0.0.3", "127.0.0.1"], 300);
    let w = proxy("half.weir.test", port, &dns);
    let c = client();
    let first = Instant::now();
    for i in 0..50 {
        let r = get(&c, &w.url("/"), &[]).await;
        // Every request succeeds: its retry goes to the other address.
        assert_eq!(
            r.status,
            200,
            "request {i}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.echo_name().as_deref(), Some("one"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // At most one question per second of failures (not one per refused connection).
    let asked = dns.asked("half.weir.test");
    let allowed = 2 + first.elapsed().as_secs() as usize;
    assert!(
        (1..=allowed).contains(&asked),
        "{asked} questions in {:?}",
        first.elapsed()
    );
}

/// A listener on `addr` whose accept queue is full, so that the kernel drops further SYNs
/// (connections to it time out), and the connections that fill it.
fn black_hole(addr: SocketAddr) -> (tokio::net::TcpListener, Vec<TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(addr).unwrap();
    let listener = socket.listen(0).unwrap();
    let mut filling = Vec::new();
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => filling.push(s),
            Err(_) => break,
        }
        assert!(filling.len() < 64, "the accept queue does not fill");
    }
    (listener, filling)
}

#[tokio::test]
async fn a_connection_that_times_out_looks_the_name_up_again() {
    let (port, _one, _two) = upstreams();
    let (_hole, _filling) = black_hole(SocketAddr::from(([127, 0, 0, 4], port)));
    let dns = Dns::start();
    dns.set("syn.weir.test", &["127.0.0.4", "127.0.0.1"], 300);
    let w = proxy_with("syn.weir.test", port, &dns, 300);
    let c = client();
    // 127.0.0.4 drops the SYN: the connect times out, the retry takes 127.0.0.1.
    let r = get(&c, &w.url("/"), &[]).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(dns.asked("syn.weir.test"), 1);
    // A second on, the timeout looks the name up again, as a refusal does.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = get(&c, &w.url("/"), &[]).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(dns.asked("syn.weir.test"), 2);
}

#[tokio::test]
async fn an_externalname_service_resolves_through_the_resolver() {
    let (port, _one, _two) = upstreams();
    let dns = Dns::start();
    dns.set("external.weir.test", &["127.0.0.2"], 30);
    let manifests = format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: external, namespace: demo}}
spec:
  rules:
  - http:
      paths:
      - path: /ext
        pathType: Prefix
        backend:
          service: {{name: external, port: {{number: {port}}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: external, namespace: demo}}
spec:
  type: ExternalName
  externalName: external.weir.test
  ports: [{{port: {port}}}]
"
    );
    let m = Manifests::start(
        &[("external.yaml", &manifests)],
        &["--dns-resolver", &dns.flag()],
    );
    let c = client();
    let r = wait_for_status(&c, &m.url("/ext"), 200, Duration::from_secs(20)).await;
    assert_eq!(r.echo_name().as_deref(), Some("two"));
    assert!(dns.asked("external.weir.test") >= 1);
}

#[tokio::test]
async fn a_name_that_does_not_exist_is_a_502_and_is_not_asked_per_request() {
    let (port, _one, _two) = upstreams();
    let dns = Dns::start();
    let w = proxy("nx.weir.test", port, &dns);
    let c = client();
    let first = Instant::now();
    for _ in 0..10 {
        let r = get(&c, &w.url("/"), &[]).await;
        assert!(
            r.status == 502 || r.status == 503,
            "{}: {:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    // Ten requests (each with its retries) ask at most once per second of negative caching.
    let asked = dns.asked("nx.weir.test");
    let allowed = 1 + first.elapsed().as_secs() as usize;
    assert!(
        (1..=allowed).contains(&asked),
        "{asked} questions in {:?}",
        first.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(5), || w.log().contains("nx.weir.test")),
        "no log line names the host: {}",
        w.log()
    );
    let log = w.log();
    let line = log
        .lines()
        .find(|l| l.contains("nx.weir.test"))
        .unwrap_or_default();
    assert!(line.contains("cannot resolve"), "{line}");
}
