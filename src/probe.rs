//! `weir probe URL`: one HTTP GET, exit code 0 when the answer is the one expected.
//!
//! The image is distroless (no shell, no curl), so the chart's `helm test` Pod runs the image's
//! own binary to check that the proxy answers; the same command serves as an exec probe.

use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use http::{header, Request, Uri};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;

#[derive(Args)]
pub struct ProbeArgs {
    /// `http://HOST[:PORT]/PATH` to GET (plain HTTP/1.1; HOST may be a name or an address).
    url: Uri,
    /// The status that counts as success (default: any 2xx or 3xx).
    #[arg(long, conflicts_with = "any_status")]
    status: Option<u16>,
    /// Any HTTP answer counts as success: only a failure to connect or to read a response
    /// head fails ("is something serving HTTP there?").
    #[arg(long)]
    any_status: bool,
    /// The `Host` header to send (default: the URL's authority).
    #[arg(long)]
    host: Option<String>,
    /// Seconds the whole probe may take.
    #[arg(long, default_value_t = 5)]
    timeout_seconds: u64,
}

/// Runs the probe; prints `GET URL -> STATUS` and returns whether it succeeded.
pub fn run(args: ProbeArgs) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let url = args.url.to_string();
    let limit = Duration::from_secs(args.timeout_seconds);
    let status = runtime
        .block_on(async { tokio::time::timeout(limit, get(&args)).await })
        .with_context(|| format!("GET {url}: no answer within {limit:?}"))?
        .with_context(|| format!("GET {url}"))?;
    let ok = if args.any_status {
        true
    } else if let Some(want) = args.status {
        status == want
    } else {
        (200..400).contains(&status)
    };
    println!(
        "GET {url} -> {status}{}",
        if ok { "" } else { " (not the expected status)" }
    );
    Ok(ok)
}

async fn get(args: &ProbeArgs) -> anyhow::Result<u16> {
    if args.url.scheme_str() != Some("http") {
        bail!("only http:// URLs are probed");
    }
    let authority = args.url.authority().context("the URL has no host")?;
    let port = authority.port_u16().unwrap_or(80);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let path = args
        .url
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let request = Request::get(path)
        .header(
            header::HOST,
            args.host.as_deref().unwrap_or(authority.as_str()),
        )
        .header(
            header::USER_AGENT,
            concat!("weir-probe/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::<bytes::Bytes>::new())?;
    let response = sender.send_request(request).await?;
    Ok(response.status().as_u16())
}
