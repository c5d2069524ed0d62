//! A small Redis client for plugins that keep shared state there (`rate-limiting`).
//!
//! One [`Client`] per distinct set of [`Settings`]; each worker thread that uses it gets its
//! own pipelined connection (commands written back to back, replies matched in order), driven
//! by a task on that worker's runtime, so a decision never crosses threads. Every call is
//! bounded by the settings' `timeout`. A broken connection fails what was in flight and is
//! opened again by the next call; after a failed connect, calls fail at once for a short
//! back-off instead of queueing behind a dead server. Dropping the last handle of a client
//! closes its connections.

pub mod resp;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

pub use resp::Reply;

/// How long calls fail fast after a connection attempt failed.
const BACKOFF: Duration = Duration::from_millis(500);
/// Commands queued per connection before calls are refused (a server that stopped reading).
const QUEUE: usize = 4096;

/// Where and how to connect (Kong's `redis` block).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Settings {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Database number (`SELECT`).
    pub database: u32,
    /// ACL user name (Redis 6+).
    pub username: Option<String>,
    /// Password (`AUTH`).
    pub password: Option<String>,
    /// The longest a call may take, connection included.
    pub timeout: Duration,
    /// Speak TLS.
    pub ssl: bool,
    /// Verify the server's certificate (against the system's CA bundle).
    pub ssl_verify: bool,
    /// SNI and verification name (default: `host`).
    pub server_name: Option<String>,
}

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No answer within the timeout.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The connection could not be opened or broke.
    #[error("connection failed: {0}")]
    Connection(String),
    /// A recent connection attempt failed; not retried yet.
    #[error("unreachable (retrying shortly): {0}")]
    Down(String),
    /// The server answered with an error.
    #[error("server error: {0}")]
    Server(String),
    /// Too many calls waiting on one connection.
    #[error("too many calls in flight")]
    Busy,
}

/// A client for one Redis server and one set of settings.
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Settings,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    links: Mutex<Links>,
}

#[derive(Default)]
struct Links {
    by_thread: HashMap<ThreadId, mpsc::Sender<Call>>,
    /// Until when calls fail fast, and why.
    down: Option<(Instant, String)>,
    /// Connections opened so far (for tests and metrics).
    opened: u64,
}

/// Commands sent together and the number of replies they produce.
struct Call {
    frame: Bytes,
    replies: usize,
    done: oneshot::Sender<Result<Vec<Reply>, Error>>,
}

impl Client {
    /// A client for `settings`; nothing connects before the first call.
    pub fn new(settings: Settings) -> Result<Client, String> {
        let tls = if settings.ssl {
            let name = settings.server_name.as_deref().unwrap_or(&settings.host);
            let server_name = ServerName::try_from(name.to_string())
                .map_err(|_| format!("server_name: {name:?} is not a DNS name or address"))?;
            let config = client_tls_config(settings.ssl_verify)?;
            Some((
                tokio_rustls::TlsConnector::from(Arc::new(config)),
                server_name,
            ))
        } else {
            None
        };
        Ok(Client {
            inner: Arc::new(Inner {
                settings,
                tls,
                links: Mutex::new(Links::default()),
            }),
        })
    }

    /// The settings this client was made for.
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Connections opened so far.
    pub fn connections_opened(&self) -> u64 {
        self.inner.lock().opened
    }

    /// Sends the commands (each an argument list) in one write and returns their replies in
    /// order, within the timeout. A reply that is a Redis error is returned as a
    /// [`Reply::Error`], not an [`Error`].
    pub async fn call(&self, commands: &[&[&[u8]]]) -> Result<Vec<Reply>, Error> {
        let mut frame = BytesMut::new();
        for c in commands {
            resp::encode(&mut frame, c);
        }
        let timeout = self.inner.settings.timeout;
        let (done, answer) = oneshot::channel();
        let call = Call {
            frame: frame.freeze(),
            replies: commands.len(),
            done,
        };
        self.inner.link()?.try_send(call).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Error::Busy,
            mpsc::error::TrySendError::Closed(_) => Error::Connection("closed".into()),
        })?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::Connection("closed".into())),
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This thread's connection, opened (its task spawned) when there is none.
    fn link(self: &Arc<Self>) -> Result<mpsc::Sender<Call>, Error> {
        let me = std::thread::current().id();
        let mut links = self.lock();
        if let Some(tx) = links.by_thread.get(&me) {
            if !tx.is_closed() {
                return Ok(tx.clone());
            }
        }
        if let Some((until, why)) = &links.down {
            if Instant::now() < *until {
                return Err(Error::Down(why.clone()));
            }
            links.down = None;
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        links.by_thread.insert(me, tx.clone());
        links.opened += 1;
        drop(links);
        // The task holds the client weakly: when the last handle goes, so does the connection.
        tokio::spawn(drive(Arc::downgrade(self), rx));
        Ok(tx)
    }

    fn mark_down(&self, why: &Error) {
        self.lock().down = Some((Instant::now() + BACKOFF, why.to_string()));
    }

    async fn connect(&self) -> Result<Box<dyn Stream>, Error> {
        let s = &self.settings;
        let tcp = tokio::net::TcpStream::connect((s.host.as_str(), s.port))
            .await
            .map_err(|e| Error::Connection(format!("{}:{}: {e}", s.host, s.port)))?;
        let _ = tcp.set_nodelay(true);
        // A peer that vanished without a word (failover, a NAT that forgot us) is noticed.
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(15))
            .with_interval(Duration::from_secs(5));
        let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive);
        let mut stream: Box<dyn Stream> = match &self.tls {
            Some((connector, name)) => Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| Error::Connection(format!("TLS: {e}")))?,
            ),
            None => Box::new(tcp),
        };
        // Authenticate, select the database and name the connection, in one round trip.
        let mut frame = BytesMut::new();
        let mut expected = 0;
        if let Some(password) = &s.password {
            match &s.username {
                Some(user) => {
                    resp::encode(&mut frame, &[b"AUTH", user.as_bytes(), password.as_bytes()])
                }
                None => resp::encode(&mut frame, &[b"AUTH", password.as_bytes()]),
            }
            expected += 1;
        }
        if s.database != 0 {
            resp::encode(&mut frame, &[b"SELECT", s.database.to_string().as_bytes()]);
            expected += 1;
        }
        // Last, and its answer ignored: an ACL user without @connection may not name itself.
        resp::encode(&mut frame, &[b"CLIENT", b"SETNAME", b"weir"]);
        expected += 1;
        stream
            .write_all(&frame)
            .await
            .map_err(|e| Error::Connection(e.to_string()))?;
        let mut buf = BytesMut::with_capacity(512);
        let mut got = 0;
        while got < expected {
            match resp::parse(&mut buf).map_err(|e| Error::Connection(e.to_string()))? {
                Some(Reply::Error(_)) if got + 1 == expected => got += 1,
                Some(Reply::Error(e)) => {
                    // Redis's own words (WRONGPASS, NOAUTH, …) never contain the password.
                    return Err(Error::Server(format!("handshake: {e}")));
                }
                Some(_) => got += 1,
                None => {
                    let n = stream
                        .read_buf(&mut buf)
                        .await
                        .map_err(|e| Error::Connection(e.to_string()))?;
                    if n == 0 {
                        return Err(Error::Connection("closed during handshake".into()));
                    }
                }
            }
        }
        Ok(stream)
    }
}

/// A byte stream to the server: TCP or TLS over TCP.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// One connection's task: connects, then writes queued calls and matches replies in order
/// until every handle is gone or the connection breaks.
async fn drive(client: std::sync::Weak<Inner>, mut calls: mpsc::Receiver<Call>) {
    let connected = {
        let Some(inner) = client.upgrade() else {
            return;
        };
        // The connection may take longer than one call's timeout (a TLS handshake far away):
        // callers give up at their timeout, the connection is kept for the next ones.
        let limit = (inner.settings.timeout * 5).max(Duration::from_secs(1));
        match tokio::time::timeout(limit, inner.connect()).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Connection(format!(
                "connect timed out after {limit:?}"
            ))),
        }
    };
    let stream = match connected {
        Ok(s) => s,
        Err(e) => {
            if let Some(inner) = client.upgrade() {
                inner.mark_down(&e);
            }
            calls.close();
            while let Ok(call) = calls.try_recv() {
                let _ = call.done.send(Err(e.clone()));
            }
            return;
        }
    };
    // A server that stops answering (while the connection stays up) is given up after this
    // long without a reply to the oldest call, so the next call opens a new connection.
    let stall = client.upgrade().map_or(Duration::from_secs(1), |c| {
        (c.settings.timeout * 10).max(Duration::from_secs(1))
    });
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut waiting = Waiting::new();
    let mut rbuf = BytesMut::with_capacity(4096);
    let mut wbuf = BytesMut::with_capacity(4096);
    let failure = loop {
        let oldest = waiting.front().map(|w| w.sent + stall);
        tokio::select! {
            call = calls.recv() => {
                let Some(call) = call else { break None };
                let now = Instant::now();
                wbuf.extend_from_slice(&call.frame);
                waiting.push_back(Waiter::new(call, now));
                // Whatever else is queued goes out in the same write.
                while wbuf.len() < 64 * 1024 {
                    let Ok(call) = calls.try_recv() else { break };
                    wbuf.extend_from_slice(&call.frame);
                    waiting.push_back(Waiter::new(call, now));
                }
                if let Err(e) = wr.write_all(&wbuf).await {
                    break Some(Error::Connection(e.to_string()));
                }
                wbuf.clear();
            }
            read = rd.read_buf(&mut rbuf) => {
                match read {
                    Ok(0) => break Some(Error::Connection("closed by the server".into())),
                    Err(e) => break Some(Error::Connection(e.to_string())),
                    Ok(_) => {}
                }
                if let Err(e) = deliver(&mut rbuf, &mut waiting) {
                    break Some(e);
                }
            }
            () = sleep_until(oldest) => {
                break Some(Error::Connection(format!("no reply for {stall:?}")));
            }
        }
    };
    let e = failure.unwrap_or_else(|| Error::Connection("client closed".into()));
    calls.close();
    for w in waiting.drain(..) {
        let _ = w.done.send(Err(e.clone()));
    }
    while let Ok(call) = calls.try_recv() {
        let _ = call.done.send(Err(e.clone()));
    }
}

/// A call written to the server, waiting for its replies.
struct Waiter {
    want: usize,
    got: Vec<Reply>,
    done: oneshot::Sender<Result<Vec<Reply>, Error>>,
    sent: Instant,
}

impl Waiter {
    fn new(call: Call, sent: Instant) -> Waiter {
        Waiter {
            want: call.replies,
            got: Vec::with_capacity(call.replies),
            done: call.done,
            sent,
        }
    }
}

type Waiting = VecDeque<Waiter>;

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Hands every complete reply in `buf` to the call it answers.
fn deliver(buf: &mut BytesMut, waiting: &mut Waiting) -> Result<(), Error> {
    while let Some(reply) = resp::parse(buf).map_err(|e| Error::Connection(e.to_string()))? {
        let Some(front) = waiting.front_mut() else {
            return Err(Error::Connection("a reply nobody asked for".into()));
        };
        front.got.push(reply);
        if front.got.len() == front.want {
            let w = waiting.pop_front().expect("front exists");
            // The caller may have given up (timeout); its reply is dropped.
            let _ = w.done.send(Ok(w.got));
        }
    }
    Ok(())
}

/// TLS to Redis: the system's CA bundle, or no verification when `verify` is off.
fn client_tls_config(verify: bool) -> Result<rustls::ClientConfig, String> {
    let builder = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("ssl: {e}"))?;
    let config = if verify {
        let mut roots = rustls::RootCertStore::empty();
        for cert in system_roots()? {
            let _ = roots.add(cert);
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::tls::AcceptAnyServerCert))
            .with_no_client_auth()
    };
    Ok(config)
}

/// The system's CA certificates: `SSL_CERT_FILE`, or the usual bundle locations.
fn system_roots() -> Result<Vec<CertificateDer<'static>>, String> {
    let candidates = std::env::var("SSL_CERT_FILE").into_iter().chain(
        [
            "/etc/ssl/certs/ca-certificates.crt",
            "/etc/pki/tls/certs/ca-bundle.crt",
            "/etc/ssl/cert.pem",
        ]
        .map(String::from),
    );
    for path in candidates {
        if let Ok(iter) = CertificateDer::pem_file_iter(&path) {
            let certs: Vec<_> = iter.filter_map(Result::ok).collect();
            if !certs.is_empty() {
                return Ok(certs);
            }
        }
    }
    Err("ssl_verify: no CA bundle found (set SSL_CERT_FILE)".into())
}
