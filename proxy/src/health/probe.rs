//! Active health checks: a `GET` to every target of an upstream with `healthchecks.active`,
//! each on its own interval, the answers counted by [`Checks::probed`].
//!
//! Probes run on their own thread, one loop per target, for the routing table in service;
//! when a table is swapped in, the loops of the old one end and the new table's begin (the
//! counters live in the kept [`TargetHealth`], so a swap does not reset them).

use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderValue, Method, Request};

use super::{Checks, TargetHealth};
use crate::upstream::{self, Added, PoolKey, UpstreamBody};

/// One target to probe.
pub struct Probe {
    /// Its upstream's settings.
    pub checks: Arc<Checks>,
    /// Where the answers are counted.
    pub health: Arc<TargetHealth>,
    /// How to connect (TLS settings included for `type: https`).
    pub key: PoolKey,
    /// The `Host` header sent.
    pub host: HeaderValue,
}

const USER_AGENT: HeaderValue = HeaderValue::from_static("weir-health-check");

impl Probe {
    /// Probes forever, at the configured interval.
    pub async fn run(self) {
        let Some(active) = &self.checks.active else {
            return;
        };
        let mut tick = tokio::time::interval(super::interval(active));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let timeout = Duration::from_millis(active.timeout);
            let result = match tokio::time::timeout(timeout, self.once(&active.path, timeout)).await
            {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {} ms", active.timeout)),
            };
            tracing::debug!(target = %self.health.target, ?result, "health probe");
            self.checks.probed(&self.health, result);
        }
    }

    /// One probe: the status the target answered, or why there was none.
    async fn once(&self, path: &str, timeout: Duration) -> Result<u16, String> {
        let conn = upstream::checkout(&self.key, timeout)
            .await
            .map_err(|e| e.to_string())?;
        let mut req = Request::new(UpstreamBody::empty());
        *req.method_mut() = Method::GET;
        let uri = if self.key.h2 {
            // HTTP/2 carries the scheme and the host (`:authority`, not `Host`) in the request
            // line.
            let scheme = if self.key.tls.is_some() {
                "https"
            } else {
                "http"
            };
            *req.version_mut() = http::Version::HTTP_2;
            let host = self.host.to_str().unwrap_or(&self.key.target);
            format!("{scheme}://{host}{path}")
        } else {
            path.to_string()
        };
        *req.uri_mut() = uri
            .parse()
            .map_err(|_| format!("bad probe path {path:?}"))?;
        let h = req.headers_mut();
        if !self.key.h2 {
            h.insert(header::HOST, self.host.clone());
        }
        h.insert(header::USER_AGENT, USER_AGENT);
        // The connection is not kept: a probe must find out whether a new one can be made.
        // (HTTP/2 has no `Connection`; its connection is shared with the pool.)
        if !self.key.h2 {
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        match conn.send(req, &Added::default(), timeout).await {
            Ok(res) => Ok(res.status().as_u16()),
            Err(e) => Err(e.error.to_string()),
        }
    }
}

/// Runs every probe until the future is dropped.
pub async fn run_all(probes: Vec<Probe>) {
    let mut set = tokio::task::JoinSet::new();
    for p in probes {
        set.spawn(p.run());
    }
    while set.join_next().await.is_some() {}
}
