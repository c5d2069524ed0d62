//! `rate-limiting`: Kong's plugin (limits per second … year, `limit_by`, `local` or `redis`
//! policy, `fault_tolerant`, `hide_client_headers`, `error_code`, `error_message`) with Weir's
//! sliding-window, token-bucket (the seed's) and concurrency algorithms.
//!
//! The factory owns what instances share: the `local` counters of the process and one Redis
//! [`Client`] per distinct set of Redis settings, so a push that changes anything else keeps
//! the connections, and a changed password opens new ones.

mod algorithm;
mod config;
mod local;
mod scripts;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{header, HeaderMap, HeaderValue};

use super::{EarlyResponse, Flow, Handled, Plugin, PluginFactory, RequestHead, ResponseHead, Step};
use crate::pipeline::RequestCtx;
use crate::redis::{self, Client};
use algorithm::WindowUsage;
use config::{Algorithm, LimitBy, Limits, Policy};
use local::{Local, LocalPermit};

/// How often a failing Redis is reported in the log (every failure is counted in metrics).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The `rate-limiting` kind.
pub(super) struct Factory {
    shared: Arc<Shared>,
}

struct Shared {
    local: Arc<Local>,
    clients: Mutex<HashMap<redis::Settings, Weak<Client>>>,
    /// Decisions Redis could not make (error or timeout).
    redis_failures: AtomicU64,
    /// Requests refused.
    refused: AtomicU64,
    /// When a Redis failure was last logged.
    last_warning: Mutex<Option<Instant>>,
}

impl Default for Factory {
    fn default() -> Self {
        Factory {
            shared: Arc::new(Shared {
                local: Arc::new(Local::default()),
                clients: Mutex::new(HashMap::new()),
                redis_failures: AtomicU64::new(0),
                refused: AtomicU64::new(0),
                last_warning: Mutex::new(None),
            }),
        }
    }
}

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "rate-limiting"
    }

    fn priority(&self) -> i32 {
        910
    }

    fn secret_fields(&self) -> &'static [&'static str] {
        &["redis.password", "redis_password"]
    }

    fn validate(&self, config: &serde_json::Value) -> Result<(), String> {
        let limits = config::parse(config)?;
        if let Policy::Redis(settings) = &limits.policy {
            // Checks TLS settings without connecting.
            Client::new(settings.clone())?;
        }
        Ok(())
    }

    fn build(&self, config: &serde_json::Value) -> Result<Arc<dyn Plugin>, String> {
        let limits = config::parse(config)?;
        let store = match &limits.policy {
            Policy::Local => Store::Local(self.shared.local.clone()),
            Policy::Redis(settings) => Store::Redis(self.client(settings)?),
        };
        // Counters of different algorithms or window sets never share a key.
        let mut prefix = format!("weir:rl:{}", limits.algorithm.name());
        if let Algorithm::Windows {
            limits: windows, ..
        } = &limits.algorithm
        {
            for (w, _) in windows {
                prefix.push(w.name().as_bytes()[0] as char);
            }
        }
        Ok(Arc::new(RateLimiting {
            args: scripts::Args::new(&limits.algorithm),
            limits,
            store,
            shared: self.shared.clone(),
            prefix,
        }))
    }

    fn configured(&self, _active: &[&serde_json::Value]) {
        let mut clients = self
            .shared
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        clients.retain(|_, c| c.strong_count() > 0);
    }

    fn metrics(&self, out: &mut String) {
        let s = &self.shared;
        let _ = writeln!(
            out,
            "# HELP weir_rate_limiting_redis_failures_total Rate-limit decisions Redis could not make (error or timeout).\n\
             # TYPE weir_rate_limiting_redis_failures_total counter\n\
             weir_rate_limiting_redis_failures_total {}\n\
             # HELP weir_rate_limiting_refused_total Requests refused by rate-limiting.\n\
             # TYPE weir_rate_limiting_refused_total counter\n\
             weir_rate_limiting_refused_total {}",
            s.redis_failures.load(Ordering::Relaxed),
            s.refused.load(Ordering::Relaxed),
        );
    }
}

impl Factory {
    /// The client for `settings`: the one in use, or a new one.
    fn client(&self, settings: &redis::Settings) -> Result<Arc<Client>, String> {
        let mut clients = self
            .shared
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(settings).and_then(Weak::upgrade) {
            return Ok(c);
        }
        let c = Arc::new(Client::new(settings.clone())?);
        clients.insert(settings.clone(), Arc::downgrade(&c));
        Ok(c)
    }
}

/// Where an instance's counters live.
enum Store {
    Local(Arc<Local>),
    Redis(Arc<Client>),
}

struct RateLimiting {
    limits: Limits,
    store: Store,
    shared: Arc<Shared>,
    /// `weir:rl:<algorithm>[<windows>]`, the start of every key.
    prefix: String,
    /// The Redis script's constant arguments.
    args: scripts::Args,
}

/// What an algorithm decided, before it becomes headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Window algorithms (the usage of each window is reported beside it).
    Windows {
        /// Whether the request may pass.
        allowed: bool,
    },
    /// Token bucket.
    Bucket {
        /// Whether the request may pass.
        allowed: bool,
        /// Tokens left.
        tokens: f64,
    },
    /// Concurrency.
    InFlight {
        /// Whether the request may pass.
        allowed: bool,
        /// Requests in flight, this one included when allowed.
        in_flight: u64,
    },
}

impl Outcome {
    fn allowed(&self) -> bool {
        match *self {
            Outcome::Windows { allowed }
            | Outcome::Bucket { allowed, .. }
            | Outcome::InFlight { allowed, .. } => allowed,
        }
    }
}

/// The rate-limit headers of one request, kept in its context from `access` to
/// `header_filter`.
#[derive(Clone, Debug, Default)]
struct RateHeaders {
    limit: u64,
    remaining: u64,
    /// Seconds; `None` where no reset time applies (concurrency).
    reset: Option<u64>,
    /// Kong's per-window headers.
    windows: Vec<(config::Window, u64, u64)>,
}

impl RateHeaders {
    fn write(&self, headers: &mut HeaderMap) {
        headers.insert("ratelimit-limit", HeaderValue::from(self.limit));
        headers.insert("ratelimit-remaining", HeaderValue::from(self.remaining));
        if let Some(reset) = self.reset {
            headers.insert("ratelimit-reset", HeaderValue::from(reset));
        }
        for (w, limit, remaining) in &self.windows {
            let (l, r) = w.headers();
            headers.insert(l, HeaderValue::from(*limit));
            headers.insert(r, HeaderValue::from(*remaining));
        }
    }
}

/// Headers and, for a refusal, the seconds to wait, from a decision.
fn headers_for(
    algorithm: &Algorithm,
    outcome: Outcome,
    usage: &[WindowUsage],
) -> (RateHeaders, u64) {
    match (algorithm, outcome) {
        (Algorithm::TokenBucket { rate, burst, cost }, Outcome::Bucket { tokens, .. }) => {
            let wait = ((cost - tokens) / rate).max(0.0).ceil() as u64;
            let h = RateHeaders {
                limit: *burst as u64,
                remaining: tokens.floor().max(0.0) as u64,
                reset: Some(((burst - tokens) / rate).max(0.0).ceil() as u64),
                windows: Vec::new(),
            };
            (h, wait.max(1))
        }
        (Algorithm::Concurrency { max }, Outcome::InFlight { in_flight, .. }) => {
            let h = RateHeaders {
                limit: *max,
                remaining: max.saturating_sub(in_flight),
                reset: None,
                windows: Vec::new(),
            };
            (h, 1)
        }
        (_, _) => {
            // Kong reports the window with the fewest requests left (the longer on a tie).
            let tightest = usage
                .iter()
                .min_by_key(|u| (u.remaining(), std::cmp::Reverse(u.window.seconds())))
                .copied();
            let wait = usage
                .iter()
                .filter(|u| u.remaining() == 0)
                .map(|u| u.reset.ceil() as u64)
                .max()
                .unwrap_or(1);
            let h = RateHeaders {
                limit: tightest.map_or(0, |u| u.limit),
                remaining: tightest.map_or(0, |u| u.remaining()),
                reset: Some(tightest.map_or(0, |u| u.reset.ceil() as u64)),
                windows: usage
                    .iter()
                    .map(|u| (u.window, u.limit, u.remaining()))
                    .collect(),
            };
            (h, wait.max(1))
        }
    }
}

/// An in-flight slot held in Redis, given back when the request ends.
struct RedisPermit {
    client: Arc<Client>,
    key: String,
    token: String,
}

impl Drop for RedisPermit {
    fn drop(&mut self) {
        let (client, key, token) = (
            self.client.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.token),
        );
        // The request's context is dropped on its worker, inside the runtime; if it ever is
        // not, the slot expires on the server instead.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = scripts::release(&client, &key, &token).await {
                    tracing::debug!(error = %e, "rate-limiting: in-flight slot not given back");
                }
            });
        }
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

impl RateLimiting {
    /// The counter key of this request: the algorithm, the scope (route, or service for
    /// `limit_by: service`) and whom it limits.
    fn key(&self, ctx: &RequestCtx, req: &RequestHead) -> String {
        let l = &self.limits;
        let ip = || format!("ip:{}", ctx.client_ip);
        let who = match &l.limit_by {
            LimitBy::Consumer => ctx
                .consumer
                .as_ref()
                .map_or_else(ip, |c| format!("consumer:{c}")),
            LimitBy::Credential => ctx
                .credential
                .as_ref()
                .map_or_else(ip, |c| format!("credential:{c}")),
            LimitBy::Ip => ip(),
            // Hashed: a key of bounded size whatever the client sends.
            LimitBy::Header(name) => match req.headers.get(name) {
                Some(v) => format!("header:{}", sha1_smol::Sha1::from(v.as_bytes()).digest()),
                None => ip(),
            },
            // Compared as routed: `/login;x` is `/login`.
            LimitBy::Path(path)
                if crate::router::without_params(req.uri.path())
                    .is_ok_and(|p| p == path.as_str()) =>
            {
                format!("path:{path}")
            }
            LimitBy::Path(_) => ip(),
            LimitBy::Route => String::from("route"),
            LimitBy::Service => String::from("service"),
        };
        let scope = match &l.limit_by {
            LimitBy::Service => ctx.service.as_deref().unwrap_or("-"),
            _ => ctx.route.as_deref().unwrap_or("-"),
        };
        format!("{}:{scope}:{who}", self.prefix)
    }

    /// Turns a decision into the request's headers and, for a refusal, the answer.
    fn conclude(&self, ctx: &mut RequestCtx, outcome: Outcome, usage: &[WindowUsage]) -> Flow {
        let (headers, wait) = headers_for(&self.limits.algorithm, outcome, usage);
        if !self.limits.hide_client_headers {
            ctx.slots.insert(headers);
        }
        if outcome.allowed() {
            return Flow::Continue;
        }
        self.shared.refused.fetch_add(1, Ordering::Relaxed);
        let mut answer = EarlyResponse::message(self.limits.error_code, &self.limits.error_message);
        answer
            .headers
            .insert(header::RETRY_AFTER, HeaderValue::from(wait));
        Flow::Respond(answer)
    }

    /// Redis failed: allowed (and logged now and then) or 503.
    fn redis_failed(&self, e: &redis::Error, client: &Client) -> Flow {
        self.shared.redis_failures.fetch_add(1, Ordering::Relaxed);
        let due = {
            let mut last = self
                .shared
                .last_warning
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|t| t.elapsed() >= WARN_EVERY);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        let s = client.settings();
        if due {
            tracing::warn!(
                redis = %format!("{}:{}", s.host, s.port),
                error = %e,
                fault_tolerant = self.limits.fault_tolerant,
                "rate-limiting: Redis could not decide; {}",
                if self.limits.fault_tolerant { "requests are allowed" } else { "requests get 503" }
            );
        }
        if self.limits.fault_tolerant {
            Flow::Continue
        } else {
            Flow::Respond(EarlyResponse::message(
                http::StatusCode::SERVICE_UNAVAILABLE,
                "rate limiting is unavailable",
            ))
        }
    }
}

impl Plugin for RateLimiting {
    fn access<'a>(&'a self, ctx: &'a mut RequestCtx, req: &'a mut RequestHead) -> Handled<'a> {
        // Exempt clients are neither limited nor counted, and get no rate-limit headers.
        if self.limits.exempt.contains(ctx.client_ip) {
            return Flow::Continue.into();
        }
        let key = self.key(ctx, req);
        match &self.store {
            Store::Local(local) => {
                let mut usage = Vec::new();
                let outcome = local.decide(&self.limits.algorithm, &key, now(), &mut usage);
                if outcome.allowed()
                    && matches!(self.limits.algorithm, Algorithm::Concurrency { .. })
                {
                    ctx.slots.insert(Arc::new(LocalPermit {
                        local: local.clone(),
                        key,
                    }));
                }
                self.conclude(ctx, outcome, &usage).into()
            }
            Store::Redis(client) => Step::wait(async move {
                let mut usage = Vec::new();
                // The slot's guard exists before the slot is asked for: a decision that times
                // out, or a client that leaves mid-call, still gives back whatever Redis took
                // (the release is idempotent and follows the acquire on the same connection).
                let mut permit = matches!(self.limits.algorithm, Algorithm::Concurrency { .. })
                    .then(|| RedisPermit {
                        client: client.clone(),
                        key: key.clone(),
                        token: format!("{:x}-{:x}", ctx.request_id, rand_token()),
                    });
                let token = permit.as_ref().map_or("", |p| p.token.as_str()).to_owned();
                // One deadline for the whole decision, a NOSCRIPT reload included.
                let timeout = client.settings().timeout;
                let decided = tokio::time::timeout(
                    timeout,
                    scripts::decide(
                        client,
                        &self.limits.algorithm,
                        &self.args,
                        &key,
                        &token,
                        &mut usage,
                    ),
                )
                .await
                .unwrap_or(Err(redis::Error::Timeout(timeout)));
                match decided {
                    Ok(outcome) => {
                        if outcome.allowed() {
                            if let Some(p) = permit.take() {
                                ctx.slots.insert(Arc::new(p));
                            }
                        }
                        Ok(self.conclude(ctx, outcome, &usage))
                    }
                    Err(e) => Ok(self.redis_failed(&e, client)),
                }
            }),
        }
    }

    fn header_filter(
        &self,
        ctx: &mut RequestCtx,
        resp: &mut ResponseHead,
    ) -> Result<(), super::PluginError> {
        if let Some(h) = ctx.slots.get::<RateHeaders>() {
            h.write(&mut resp.headers);
        }
        Ok(())
    }
}

/// A token that tells one request's in-flight slot from another's across proxies.
fn rand_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now().to_bits());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Runs `access` for a client at `ip`: whether it passed, and whether it got rate-limit
    /// headers.
    fn request(p: &dyn Plugin, ip: &str) -> (bool, bool) {
        let mut ctx = RequestCtx::new(ip.parse().unwrap(), 1, Arc::from(Vec::new()));
        let mut req = http::Request::get("/").body(()).unwrap().into_parts().0;
        let passed = match p.access(&mut ctx, &mut req) {
            Step::Ready(Ok(Flow::Continue)) => true,
            Step::Ready(Ok(Flow::Respond(r))) => {
                assert_eq!(r.status, 429);
                false
            }
            _ => panic!("the local policy decides at once"),
        };
        (passed, ctx.slots.get::<RateHeaders>().is_some())
    }

    #[test]
    fn exempt_clients_are_neither_limited_nor_counted() {
        let factory = Factory::default();
        // A bucket that does not refill within the test: one request per client.
        let p = factory
            .build(&json!({
                "algorithm": "token-bucket", "rate": 0.0001, "burst": 1, "limit_by": "route",
                "exempt": ["127.0.0.1", "2001:db8::/32"],
            }))
            .unwrap();
        for _ in 0..5 {
            assert_eq!(request(&*p, "127.0.0.1"), (true, false));
            assert_eq!(request(&*p, "::ffff:127.0.0.1"), (true, false));
            assert_eq!(request(&*p, "2001:db8::5"), (true, false));
        }
        // The exempt requests took nothing from the limit the others share (`limit_by: route`).
        assert_eq!(request(&*p, "127.0.0.2"), (true, true));
        assert_eq!(request(&*p, "2001:db9::5"), (false, true));
        assert_eq!(request(&*p, "127.0.0.1"), (true, false));
    }
}
