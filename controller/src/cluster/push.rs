//! Pushing the routing table to proxies' admin APIs: only when the hash changed, retrying with
//! backoff, and again when a proxy reports another hash (it restarted).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::watch;
use weir_proxy::Config;

/// Push outcomes, for metrics.
#[derive(Debug, Default)]
pub struct PushCounters {
    /// Tables accepted by a proxy.
    pub ok: AtomicU64,
    /// Tables a proxy rejected (400).
    pub rejected: AtomicU64,
    /// Pushes that failed to reach a proxy.
    pub failed: AtomicU64,
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn request(
    c: &HttpClient,
    method: &str,
    url: &str,
    body: Bytes,
) -> Result<(u16, Bytes), String> {
    let req = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(Duration::from_secs(30), c.request(req))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// The hash a proxy serves, from `GET /status`.
async fn served_hash(c: &HttpClient, base: &str) -> Option<String> {
    let (status, body) = request(c, "GET", &format!("{base}/status"), Bytes::new())
        .await
        .ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    v.get("hash")?.as_str().map(str::to_string)
}

/// Keeps one proxy (admin base URL, e.g. `http://127.0.0.1:8100`) on the latest table.
pub async fn push_loop(
    base: String,
    mut desired: watch::Receiver<Option<Arc<Config>>>,
    counters: Arc<PushCounters>,
) {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let base = base.trim_end_matches('/').to_string();
    let mut acked: Option<String> = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        let current = desired.borrow_and_update().clone();
        if let Some(config) = current {
            let hash = config.hash.clone().unwrap_or_default();
            if acked.as_deref() != Some(hash.as_str()) {
                let body =
                    Bytes::from(serde_json::to_vec(&*config).expect("a Config always serialises"));
                match request(&client, "POST", &format!("{base}/config"), body).await {
                    Ok((200, _)) => {
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(proxy = %base, %hash, "routing table pushed");
                        acked = Some(hash);
                        backoff = Duration::from_millis(100);
                    }
                    Ok((status, body)) => {
                        // A rejected table will not get better by retrying soon; the next
                        // change (or the periodic check) tries again.
                        counters.rejected.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(proxy = %base, status, body = %String::from_utf8_lossy(&body), "proxy rejected the routing table");
                        acked = Some(hash);
                    }
                    Err(e) => {
                        counters.failed.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(proxy = %base, error = %e, retry_in_ms = backoff.as_millis() as u64, "push failed");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                }
            }
        }
        tokio::select! {
            changed = desired.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(5)) => {
                // A restarted proxy serves another hash (or none): push again.
                let served = served_hash(&client, &base).await;
                if served.is_some() && served != acked {
                    tracing::info!(proxy = %base, served = ?served, "proxy serves another table; pushing again");
                    acked = None;
                }
            }
        }
    }
}
