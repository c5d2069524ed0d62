//! What the proxy says of its targets' health: the `weir_upstream_target_health` gauge in
//! `/metrics` and the state in `GET /upstreams`.

use std::time::{Duration, Instant};

use super::{get, metrics, HttpClient, Weir};

/// The `weir_upstream_target_health` gauge of target 127.0.0.1:`port` (1 healthy, 0 not).
pub async fn health_gauge(c: &HttpClient, w: &Weir, port: u16) -> Option<u8> {
    let text = metrics(c, w).await;
    let needle = format!("target=\"127.0.0.1:{port}\"}} ");
    text.lines()
        .find(|l| l.starts_with("weir_upstream_target_health{") && l.contains(&needle))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The `health` that `GET /upstreams` reports for target 127.0.0.1:`port`, in any upstream.
pub async fn admin_health(c: &HttpClient, w: &Weir, port: u16) -> Option<String> {
    let v = get(c, &w.admin_url("/upstreams"), &[]).await.json();
    let target = format!("127.0.0.1:{port}");
    v["upstreams"]
        .as_array()?
        .iter()
        .flat_map(|u| u["targets"].as_array().cloned().unwrap_or_default())
        .find(|t| t["target"] == target.as_str())
        .and_then(|t| t["health"].as_str().map(str::to_string))
}

/// Waits (at most `limit`) until the gauge of target 127.0.0.1:`port` reads `value`.
pub async fn await_gauge(c: &HttpClient, w: &Weir, port: u16, value: u8, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if health_gauge(c, w, port).await == Some(value) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}
