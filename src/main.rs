//! The `weir` binary: a thin CLI over the proxy (and, later, the controller) crates.

mod alloc;
mod echo;
mod migrate;
mod probe;
mod version;

#[global_allocator]
static ALLOCATOR: alloc::Mimalloc = alloc::Mimalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use k8s_openapi::api::networking::v1::ServiceBackendPort;
use weir_controller::cluster::{ControllerOptions, Publish};
use weir_controller::standalone::Standalone;
use weir_controller::{Key, Options};
use weir_proxy::router::EscapedSlashes;
use weir_proxy::server::{Cidr, Http2Options};
use weir_proxy::{Config, Proxy, ProxyOptions, Registry};

#[derive(Parser)]
#[command(
    name = "weir",
    version = version::LINE,
    about = "Kubernetes ingress controller and API gateway"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy (data plane) with its admin API.
    Proxy(ProxyCommand),
    /// Serve a folder of Kubernetes manifests: translator and proxy in one process.
    Standalone(StandaloneArgs),
    /// Watch the Kubernetes API and push routing tables to proxies.
    Controller(ControllerCommand),
    /// Print Weir's CustomResourceDefinitions as YAML.
    Crds,
    /// Run a small echo upstream (quick start, examples, tests).
    Echo(EchoArgs),
    /// Report what ingress-nginx Ingresses become in Weir (exit code 1 when something would
    /// not carry over), and write the Weir-native objects with --emit.
    Migrate(migrate::MigrateArgs),
    /// Print the version, the commit and the build date.
    Version(version::VersionArgs),
    /// GET a URL and exit 0 when the status is the expected one (the chart's `helm test`).
    Probe(probe::ProbeArgs),
}

#[derive(Args)]
struct ProxyCommand {
    /// A routing table (JSON or YAML) to load at start.
    #[arg(long, env = "WEIR_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    proxy: ProxyArgs,
}

#[derive(Args)]
struct ControllerCommand {
    #[command(flatten)]
    controller: ControllerArgs,
    /// Admin API base URL of a proxy to push routing tables to (repeatable or comma-separated).
    #[arg(
        long = "proxy-admin",
        env = "WEIR_PROXY_ADMIN",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8100"
    )]
    proxy_admin: Vec<String>,
    /// Copy this Service's load-balancer addresses into Ingress status: `namespace/name`.
    #[arg(long, env = "WEIR_PUBLISH_SERVICE", value_parser = parse_key)]
    publish_service: Option<Key>,
    /// Fixed addresses (IPs or host names) for Ingress status (comma-separated).
    #[arg(long, env = "WEIR_PUBLISH_STATUS_ADDRESS", value_delimiter = ',')]
    publish_status_address: Vec<String>,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "WEIR_ELECTION_NAMESPACE")]
    election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "WEIR_ELECTION_ID",
        default_value = "weir-controller-leader"
    )]
    election_id: String,
    /// Address of the controller's /metrics.
    #[arg(long, env = "WEIR_METRICS_LISTEN", default_value = "127.0.0.1:8101")]
    metrics_listen: SocketAddr,
}

/// `namespace/name`.
fn parse_key(s: &str) -> Result<Key, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(Key::new(ns, name))
        }
        _ => Err(format!("{s:?} is not namespace/name")),
    }
}

#[derive(Args)]
struct StandaloneArgs {
    /// Folder of manifests (multi-document YAML or JSON), re-read when it changes.
    dir: PathBuf,
    #[command(flatten)]
    controller: ControllerArgs,
    #[command(flatten)]
    proxy: ProxyArgs,
}

/// How Kubernetes objects are translated.
#[derive(Args)]
struct ControllerArgs {
    /// The Ingress class served (IngressClass name or legacy annotation value).
    #[arg(long, env = "WEIR_INGRESS_CLASS", default_value = "weir")]
    ingress_class: String,
    /// A Service port answering requests no Ingress rule matches: `namespace/name:port`.
    #[arg(long, env = "WEIR_DEFAULT_BACKEND", value_parser = parse_backend)]
    default_backend: Option<(Key, ServiceBackendPort)>,
    /// Only serve Ingresses (and read objects) of these namespaces (repeatable or comma-separated).
    #[arg(long, env = "WEIR_WATCH_NAMESPACE", value_delimiter = ',')]
    watch_namespace: Vec<String>,
    /// Also serve Ingresses whose IngressClass names ingress-nginx's controller
    /// (`k8s.io/ingress-nginx`): with `--ingress-class nginx`, Weir serves ingress-nginx's own
    /// class (or a copy of it) beside ingress-nginx for a side-by-side cutover.
    #[arg(
        long,
        env = "WEIR_ACCEPT_INGRESS_NGINX_CLASS",
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    accept_ingress_nginx_class: bool,
    /// The prefix of the ingress-nginx annotations Weir translates (ingress-nginx's
    /// `--annotations-prefix`); empty turns the translation off.
    #[arg(long, env = "WEIR_ANNOTATIONS_PREFIX", default_value = weir_controller::nginx::DEFAULT_PREFIX)]
    annotations_prefix: String,
    /// The Gateway listener port (protocol `HTTP`) served on the proxy's `--listen` socket:
    /// the port of the Service in front of it. Listeners on other ports are not served.
    #[arg(long, env = "WEIR_GATEWAY_HTTP_PORT", default_value_t = 80)]
    gateway_http_port: u16,
    /// The Gateway listener port (protocol `HTTPS`) served on the proxy's `--tls-listen`
    /// socket.
    #[arg(long, env = "WEIR_GATEWAY_HTTPS_PORT", default_value_t = 443)]
    gateway_https_port: u16,
}

impl ControllerArgs {
    fn options(&self) -> Options {
        Options {
            ingress_class: self.ingress_class.clone(),
            default_backend: self.default_backend.clone(),
            watch_namespaces: (!self.watch_namespace.is_empty())
                .then(|| self.watch_namespace.iter().cloned().collect()),
            accept_ingress_nginx_class: self.accept_ingress_nginx_class,
            nginx: weir_controller::nginx::Options {
                prefix: self.annotations_prefix.trim_end_matches('/').to_string(),
            },
            gateway_http_port: self.gateway_http_port,
            gateway_https_port: self.gateway_https_port,
        }
    }
}

/// `namespace/name:port` (port by number or name).
fn parse_backend(s: &str) -> Result<(Key, ServiceBackendPort), String> {
    let bad = || format!("{s:?} is not namespace/name:port");
    let (svc, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let (ns, name) = svc.split_once('/').ok_or_else(bad)?;
    if ns.is_empty() || name.is_empty() || port.is_empty() {
        return Err(bad());
    }
    let port = match port.parse::<i32>() {
        Ok(n) => ServiceBackendPort {
            number: Some(n),
            name: None,
        },
        Err(_) => ServiceBackendPort {
            number: None,
            name: Some(port.to_string()),
        },
    };
    Ok((Key::new(ns, name), port))
}

/// Flags of the proxy; every flag can also be set by the environment variable shown.
#[derive(Args)]
struct ProxyArgs {
    /// Address for client traffic.
    #[arg(long, env = "WEIR_LISTEN", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Address for HTTPS traffic, served with the routing table's certificates (none by default).
    #[arg(long, env = "WEIR_TLS_LISTEN")]
    tls_listen: Option<SocketAddr>,
    /// Address of the admin API (keep it on loopback unless it is protected otherwise).
    #[arg(long, env = "WEIR_ADMIN_LISTEN", default_value = "127.0.0.1:8100")]
    admin_listen: SocketAddr,
    /// Address of a read-only status listener serving only GET /healthz, /readyz (503 while shutting down) and /metrics, for probes and scraping (e.g. 0.0.0.0:8102 in a pod, beside the controller's metrics on 8101); the admin API stays on loopback.
    #[arg(long, env = "WEIR_STATUS_LISTEN")]
    status_listen: Option<SocketAddr>,
    /// Worker threads, each with its own listener and runtime (default: one per core).
    #[arg(long, env = "WEIR_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Print a JSON access-log line per request on stdout.
    #[arg(long, env = "WEIR_ACCESS_LOG", default_value_t = true, action = clap::ArgAction::Set)]
    access_log: bool,
    /// Access-log lines that may wait to be written (in all workers' buffers); when stdout falls behind, more are dropped (and counted in weir_access_log_dropped_total).
    #[arg(long, env = "WEIR_ACCESS_LOG_QUEUE", default_value_t = 16_384)]
    access_log_queue: usize,
    /// Comma-separated IPs/CIDRs whose X-Forwarded-* headers are trusted.
    #[arg(long, env = "WEIR_TRUSTED_PROXIES", value_delimiter = ',')]
    trusted_proxies: Vec<Cidr>,
    /// Client connections open at once; more are closed on accept.
    #[arg(long, env = "WEIR_MAX_CONNECTIONS", default_value_t = 16_384)]
    max_connections: usize,
    /// Time a connection may go without a request: from accept or the previous response to a complete request head (also the TLS handshake's limit).
    #[arg(long, env = "WEIR_HEADER_READ_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    header_read_timeout: Duration,
    /// Idle time after which a keep-alive client connection is closed.
    #[arg(long, env = "WEIR_KEEPALIVE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    keepalive_timeout: Duration,
    /// Largest request head in bytes (431 above).
    #[arg(long, env = "WEIR_MAX_HEADER_BYTES", default_value_t = 65_536)]
    max_header_bytes: usize,
    /// Most request headers (431 above).
    #[arg(long, env = "WEIR_MAX_HEADERS", default_value_t = 100)]
    max_headers: usize,
    /// Largest request body in bytes, 0 for no limit (413 above).
    #[arg(long, env = "WEIR_MAX_BODY_SIZE", default_value_t = 0)]
    max_body_size: u64,
    /// Largest request body in bytes held in memory for plugins that read request bodies (413 above).
    #[arg(long, env = "WEIR_MAX_BUFFERED_BODY", default_value_t = 8 * 1024 * 1024)]
    max_buffered_body: u64,
    /// Largest request body in bytes kept so that a service's `retry_on` can send an idempotent request again; larger bodies stream upstream once.
    #[arg(long, env = "WEIR_MAX_RETRY_BODY", default_value_t = 64 * 1024)]
    max_retry_body: u64,
    /// Idle HTTP/1.1 connections kept per upstream (target and TLS settings) and worker.
    #[arg(long, env = "WEIR_UPSTREAM_KEEPALIVE", default_value_t = 256)]
    upstream_keepalive: usize,
    /// How long an idle upstream connection is kept before it is closed.
    #[arg(long, env = "WEIR_UPSTREAM_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    upstream_idle_timeout: Duration,
    /// How long the addresses a target's host name (an ExternalName Service) resolved to are used before they are looked up again, replacing the records' TTLs (default: the records' TTL, at least 1s); a failed connection looks them up sooner.
    #[arg(long, env = "WEIR_DNS_TTL", value_parser = parse_duration)]
    dns_ttl: Option<Duration>,
    /// Nameservers asked for targets' host names, `ip` or `ip:port` (port 53), comma-separated, in place of those of /etc/resolv.conf.
    #[arg(long, env = "WEIR_DNS_RESOLVER", value_delimiter = ',', value_parser = weir_proxy::upstream::parse_dns_resolver)]
    dns_resolver: Vec<std::net::SocketAddr>,
    /// What `%2F`, `%5C` and `\` in request paths get: reject (400), keep, unescape-and-redirect (307 to the decoded path), unescape-and-forward.
    #[arg(long, env = "WEIR_ESCAPED_SLASHES", default_value = "reject")]
    escaped_slashes: EscapedSlashes,
    /// Time in-flight requests get to finish after SIGTERM.
    #[arg(long, env = "WEIR_SHUTDOWN_GRACE", default_value = "30s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Time Weir goes on accepting and serving as usual after SIGTERM, with /readyz answering 503, so that load balancers and kube-proxy stop sending before the listeners close (then --shutdown-grace applies).
    #[arg(long, env = "WEIR_SHUTDOWN_DELAY", default_value = "0s", value_parser = parse_duration)]
    shutdown_delay: Duration,
    /// An upgraded connection (WebSocket, over HTTP/1.1 or HTTP/2) with no byte in either direction for this long is closed; 0 for no limit.
    #[arg(long, env = "WEIR_TUNNEL_IDLE_TIMEOUT", default_value = "1h", value_parser = parse_duration)]
    tunnel_idle_timeout: Duration,
    #[command(flatten)]
    h2: H2Args,
}

/// Limits of HTTP/2 client connections (h2c and TLS with ALPN `h2`).
#[derive(Args)]
struct H2Args {
    /// HTTP/2 streams a client may have open at once on one connection; more are refused (REFUSED_STREAM).
    #[arg(long, env = "WEIR_H2_MAX_CONCURRENT_STREAMS", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    h2_max_concurrent_streams: u32,
    /// Bytes of request body an HTTP/2 client may send ahead on one stream (65535 to 2147483647).
    #[arg(long, env = "WEIR_H2_INITIAL_STREAM_WINDOW", default_value_t = 1024 * 1024, value_parser = parse_h2_window)]
    h2_initial_stream_window: u32,
    /// Bytes of request bodies an HTTP/2 client may send ahead on one connection (65535 to 2147483647).
    #[arg(long, env = "WEIR_H2_INITIAL_CONNECTION_WINDOW", default_value_t = 2 * 1024 * 1024, value_parser = parse_h2_window)]
    h2_initial_connection_window: u32,
    /// Largest HTTP/2 request header list in bytes (names, values and 32 bytes a field; 431 above; default: --max-header-bytes).
    #[arg(long, env = "WEIR_H2_MAX_HEADER_LIST_SIZE", value_parser = clap::value_parser!(u32).range(1024..))]
    h2_max_header_list_size: Option<u32>,
    /// HTTP/2 streams reset by the client before they started that may wait at once; one more closes the connection (rapid-reset protection).
    #[arg(long, env = "WEIR_H2_MAX_PENDING_RESET_STREAMS", default_value_t = 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    h2_max_pending_reset_streams: usize,
    /// HTTP/2 streams the proxy may reset for a client's errors on one connection; one more closes it.
    #[arg(long, env = "WEIR_H2_MAX_LOCAL_RESET_STREAMS", default_value_t = 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    h2_max_local_reset_streams: usize,
    /// HTTP/2 streams a client may reset after they started (their upstream request sent), on one connection while they are more than half of its streams; one more closes it (rapid-reset protection).
    #[arg(long, env = "WEIR_H2_MAX_CANCELLED_STREAMS", default_value_t = 100, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    h2_max_cancelled_streams: usize,
    /// Interval of HTTP/2 PING frames that check a client connection is alive (none by default).
    #[arg(long, env = "WEIR_H2_PING_INTERVAL", value_parser = parse_positive_duration)]
    h2_ping_interval: Option<Duration>,
    /// Time an HTTP/2 PING has to be answered before the connection is closed.
    #[arg(long, env = "WEIR_H2_PING_TIMEOUT", default_value = "20s", value_parser = parse_positive_duration)]
    h2_ping_timeout: Duration,
}

impl H2Args {
    fn options(&self) -> Http2Options {
        Http2Options {
            max_concurrent_streams: self.h2_max_concurrent_streams,
            initial_stream_window: self.h2_initial_stream_window,
            initial_connection_window: self.h2_initial_connection_window,
            max_header_list_size: self.h2_max_header_list_size,
            max_pending_reset_streams: self.h2_max_pending_reset_streams,
            max_local_reset_streams: self.h2_max_local_reset_streams,
            max_cancelled_streams: self.h2_max_cancelled_streams,
            ping_interval: self.h2_ping_interval,
            ping_timeout: self.h2_ping_timeout,
        }
    }
}

/// An HTTP/2 flow-control window in bytes: from the protocol's initial 65535 to 2^31 - 1.
fn parse_h2_window(s: &str) -> Result<u32, String> {
    let (min, max) = (Http2Options::MIN_WINDOW, Http2Options::MAX_WINDOW);
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes"))?;
    if n < u64::from(min) || n > u64::from(max) {
        return Err(format!(
            "{n} is not between {min} (HTTP/2's initial window) and {max} (its largest)"
        ));
    }
    Ok(n as u32)
}

/// A duration above zero.
fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be above zero"));
    }
    Ok(d)
}

#[derive(Args)]
struct EchoArgs {
    /// Address to listen on.
    #[arg(long, env = "WEIR_ECHO_LISTEN", default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Name reported in every answer (tells upstreams apart).
    #[arg(long, env = "WEIR_ECHO_NAME", default_value = "echo")]
    name: String,
    /// Worker threads.
    #[arg(long, env = "WEIR_ECHO_WORKER_THREADS", default_value_t = 1)]
    worker_threads: usize,
    /// Milliseconds every answer waits (on top of a request's `delay_ms`): a slow upstream.
    #[arg(long, env = "WEIR_ECHO_DELAY_MS", default_value_t = 0)]
    delay_ms: u64,
    /// While this file exists, every request is answered with the status it holds (e.g.
    /// `500`): an upstream that starts and stops failing.
    #[arg(long, env = "WEIR_ECHO_STATUS_FILE")]
    status_file: Option<std::path::PathBuf>,
}

/// `250ms`, `10s`, `2m`, or a plain number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(
        s.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len()),
    );
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 10s or 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is too long a duration"))
}

fn main() -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Proxy(args) => run_proxy(args),
        Command::Standalone(args) => run_standalone(args),
        Command::Controller(args) => run_controller(args),
        Command::Crds => {
            print!("{}", weir_crds::crds_yaml());
            Ok(())
        }
        Command::Migrate(args) => std::process::exit(migrate::run(args)),
        Command::Version(args) => {
            version::run(args);
            Ok(())
        }
        Command::Probe(args) => match probe::run(args) {
            Ok(true) => Ok(()),
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("weir probe: {e:#}");
                std::process::exit(2)
            }
        },
        Command::Echo(args) => echo::run(
            args.listen,
            args.name,
            args.worker_threads,
            echo::Behaviour {
                delay: Duration::from_millis(args.delay_ms),
                status_file: args.status_file,
            },
        ),
    }
}

fn registry() -> Registry {
    Registry::builtin()
}

fn run_proxy(cmd: ProxyCommand) -> anyhow::Result<()> {
    let proxy = Proxy::new(cmd.proxy.options()?, registry());
    if let Some(path) = &cmd.config {
        let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let config = Config::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
        if let Err(errors) = proxy.apply(config) {
            let list: Vec<String> = errors.iter().map(|e| format!("  - {e}")).collect();
            anyhow::bail!(
                "{} is not a valid routing table:\n{}",
                path.display(),
                list.join("\n")
            );
        }
    }
    proxy.serve().context("serving")?;
    Ok(())
}

fn run_standalone(args: StandaloneArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.dir.is_dir(),
        "{} is not a folder of manifests",
        args.dir.display()
    );
    let proxy = Proxy::new(args.proxy.options()?, registry());
    let mut source = Standalone::new(args.dir.clone(), args.controller.options(), proxy.clone());
    source.sync();
    std::thread::Builder::new()
        .name("weir-manifests".into())
        .spawn(move || source.run())?;
    proxy.serve().context("serving")?;
    Ok(())
}

fn run_controller(args: ControllerCommand) -> anyhow::Result<()> {
    let publish = match (args.publish_service, args.publish_status_address.is_empty()) {
        (Some(_), false) => {
            anyhow::bail!("use --publish-service or --publish-status-address, not both")
        }
        (Some(svc), true) => Publish::Service(svc),
        (None, false) => Publish::Addresses(args.publish_status_address),
        (None, true) => Publish::Nothing,
    };
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let opts = ControllerOptions {
        translate: args.controller.options(),
        proxies: args.proxy_admin,
        publish,
        election_namespace: args
            .election_namespace
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into()),
        election_name: args.election_id,
        identity,
        metrics_listen: Some(args.metrics_listen),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| anyhow::anyhow!("connecting to the Kubernetes API: {}", distinct_causes(&e)))?;
        tracing::info!(proxies = ?opts.proxies, class = %opts.translate.ingress_class, "weir controller started");
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        let shutdown = async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            tracing::info!("shutting down");
        };
        weir_controller::cluster::run(client, opts, registry(), shutdown).await;
        anyhow::Ok(())
    })
}

impl ProxyArgs {
    fn options(&self) -> anyhow::Result<ProxyOptions> {
        let defaults = ProxyOptions::default();
        let http2 = self.h2.options();
        http2.validate().map_err(anyhow::Error::msg)?;
        Ok(ProxyOptions {
            listen: self.listen,
            tls_listen: self.tls_listen,
            admin_listen: self.admin_listen,
            status_listen: self.status_listen,
            worker_threads: self
                .worker_threads
                .unwrap_or(defaults.worker_threads)
                .max(1),
            trusted_proxies: self.trusted_proxies.clone(),
            max_connections: self.max_connections,
            header_read_timeout: self.header_read_timeout,
            keepalive_timeout: self.keepalive_timeout,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
            max_body_size: self.max_body_size,
            max_buffered_body: self.max_buffered_body,
            max_retry_body: self.max_retry_body,
            upstream_keepalive: self.upstream_keepalive,
            upstream_idle_timeout: self.upstream_idle_timeout,
            dns_ttl: self.dns_ttl,
            dns_resolvers: self.dns_resolver.clone(),
            escaped_slashes: self.escaped_slashes,
            access_log: self.access_log,
            access_log_queue: self.access_log_queue,
            shutdown_grace: self.shutdown_grace,
            shutdown_delay: self.shutdown_delay,
            tunnel_idle_timeout: self.tunnel_idle_timeout,
            http2,
            ..defaults
        })
    }
}

/// An error and its causes on one line, each cause shown only when the message before it does
/// not already contain it (kube's errors repeat their source in their own text).
fn distinct_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        // Refused, not a panic.
        assert!(parse_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn backends() {
        let (k, p) = parse_backend("default/web:80").unwrap();
        assert_eq!(
            (k.to_string(), p.number),
            ("default/web".to_string(), Some(80))
        );
        assert_eq!(
            parse_backend("ns/web:http").unwrap().1.name.as_deref(),
            Some("http")
        );
        assert!(parse_backend("web:80").is_err());
    }

    #[test]
    fn h2_windows() {
        assert_eq!(parse_h2_window("65535"), Ok(65_535));
        assert_eq!(parse_h2_window("2147483647"), Ok(2_147_483_647));
        assert!(parse_h2_window("65534").is_err());
        assert!(parse_h2_window("2147483648").is_err());
        assert!(parse_h2_window("1MiB").is_err());
        assert!(parse_positive_duration("0s").is_err());
        assert_eq!(parse_positive_duration("5s"), Ok(Duration::from_secs(5)));
    }

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let e = E(
            "failed to infer config: no kubeconfig (No such file)",
            Some(Box::new(E(
                "no kubeconfig (No such file)",
                Some(Box::new(E(
                    "No such file",
                    Some(Box::new(E("os error 2", None))),
                ))),
            ))),
        );
        assert_eq!(
            distinct_causes(&e),
            "failed to infer config: no kubeconfig (No such file): os error 2"
        );
    }
}
