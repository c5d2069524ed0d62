//! The `rate-limiting` configuration: Kong's keys (`second` … `year`, `limit_by`, `policy`,
//! `redis`, `fault_tolerant`, …) plus Weir's `algorithm`, `rate`, `burst`, `cost` and
//! `max_in_flight`, parsed once into typed settings.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, StatusCode};
use serde::Deserialize;

use crate::plugins::ip_restriction::IpSet;
use crate::plugins::parse_config;
use crate::redis;

/// A counting window of the window algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// One second.
    Second,
    /// One minute.
    Minute,
    /// One hour.
    Hour,
    /// One day.
    Day,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Window {
    /// Every window, shortest first.
    pub const ALL: [Window; 6] = [
        Window::Second,
        Window::Minute,
        Window::Hour,
        Window::Day,
        Window::Month,
        Window::Year,
    ];

    /// Its length. Months and years are fixed lengths aligned to the Unix epoch (Kong uses
    /// calendar months and years).
    pub fn seconds(self) -> u64 {
        match self {
            Window::Second => 1,
            Window::Minute => 60,
            Window::Hour => 3600,
            Window::Day => 86_400,
            Window::Month => 30 * 86_400,
            Window::Year => 365 * 86_400,
        }
    }

    /// The config key and the lower-case name in keys.
    pub fn name(self) -> &'static str {
        match self {
            Window::Second => "second",
            Window::Minute => "minute",
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Month => "month",
            Window::Year => "year",
        }
    }

    /// `X-RateLimit-Limit-<Window>` and `X-RateLimit-Remaining-<Window>`.
    pub fn headers(self) -> (HeaderName, HeaderName) {
        let (limit, remaining) = match self {
            Window::Second => ("x-ratelimit-limit-second", "x-ratelimit-remaining-second"),
            Window::Minute => ("x-ratelimit-limit-minute", "x-ratelimit-remaining-minute"),
            Window::Hour => ("x-ratelimit-limit-hour", "x-ratelimit-remaining-hour"),
            Window::Day => ("x-ratelimit-limit-day", "x-ratelimit-remaining-day"),
            Window::Month => ("x-ratelimit-limit-month", "x-ratelimit-remaining-month"),
            Window::Year => ("x-ratelimit-limit-year", "x-ratelimit-remaining-year"),
        };
        (
            HeaderName::from_static(limit),
            HeaderName::from_static(remaining),
        )
    }
}

/// What is counted.
#[derive(Debug, Clone, PartialEq)]
pub enum Algorithm {
    /// Per-window counters (`fixed-window`), or the weighted estimate over the current and the
    /// previous window (`sliding-window`).
    Windows {
        /// The configured windows and their limits, shortest first.
        limits: Vec<(Window, u64)>,
        /// Sliding rather than fixed.
        sliding: bool,
    },
    /// `rate` tokens a second into a bucket of `burst`; a request takes `cost`.
    TokenBucket {
        /// Tokens added per second.
        rate: f64,
        /// Capacity.
        burst: f64,
        /// Tokens a request takes.
        cost: f64,
    },
    /// At most `max` requests in flight at once.
    Concurrency {
        /// `max_in_flight`.
        max: u64,
    },
}

impl Algorithm {
    /// The config value.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Windows { sliding: false, .. } => "fixed-window",
            Algorithm::Windows { sliding: true, .. } => "sliding-window",
            Algorithm::TokenBucket { .. } => "token-bucket",
            Algorithm::Concurrency { .. } => "concurrency",
        }
    }
}

/// Whom a limit applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitBy {
    /// The authenticated consumer.
    Consumer,
    /// The authenticated credential.
    Credential,
    /// The client IP (behind trusted proxies).
    Ip,
    /// A request header's value.
    Header(HeaderName),
    /// Requests to exactly this path share one limit.
    Path(String),
    /// The matched route.
    Route,
    /// The matched route's service.
    Service,
}

/// Where the counters live.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// In this proxy process, shared by its workers.
    Local,
    /// In Redis, shared by every proxy that uses the same server.
    Redis(redis::Settings),
}

/// A validated `rate-limiting` configuration.
#[derive(Debug, Clone)]
pub struct Limits {
    /// What is counted.
    pub algorithm: Algorithm,
    /// Whom it applies to.
    pub limit_by: LimitBy,
    /// Where counters live.
    pub policy: Policy,
    /// Allow requests when Redis fails (else 503).
    pub fault_tolerant: bool,
    /// Send no rate-limit headers.
    pub hide_client_headers: bool,
    /// The status of a refusal.
    pub error_code: StatusCode,
    /// The message of a refusal.
    pub error_message: String,
    /// Client addresses never limited nor counted (`exempt`).
    pub exempt: Arc<IpSet>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conf {
    #[serde(default)]
    algorithm: Option<String>,
    second: Option<f64>,
    minute: Option<f64>,
    hour: Option<f64>,
    day: Option<f64>,
    month: Option<f64>,
    year: Option<f64>,
    rate: Option<f64>,
    burst: Option<f64>,
    cost: Option<f64>,
    max_in_flight: Option<u64>,
    #[serde(default)]
    limit_by: Option<String>,
    header_name: Option<String>,
    path: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    redis: RedisConf,
    // Kong's older flat keys, still in many KongPlugin manifests.
    redis_host: Option<String>,
    redis_port: Option<u16>,
    redis_password: Option<String>,
    redis_username: Option<String>,
    redis_database: Option<u32>,
    redis_timeout: Option<u64>,
    redis_ssl: Option<bool>,
    redis_ssl_verify: Option<bool>,
    redis_server_name: Option<String>,
    #[serde(default = "yes")]
    fault_tolerant: bool,
    #[serde(default)]
    hide_client_headers: bool,
    #[serde(default = "default_error_code")]
    error_code: u16,
    #[serde(default)]
    error_message: Option<String>,
    /// Client IPs and CIDRs never limited (ingress-nginx's `limit-whitelist`).
    #[serde(default)]
    exempt: Option<Vec<String>>,
    /// Kong's asynchronous counter sync; Weir always counts synchronously.
    #[serde(default)]
    #[allow(dead_code)]
    sync_rate: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RedisConf {
    host: Option<String>,
    port: Option<u16>,
    database: Option<u32>,
    username: Option<String>,
    password: Option<String>,
    timeout: Option<u64>,
    ssl: Option<bool>,
    ssl_verify: Option<bool>,
    server_name: Option<String>,
}

fn yes() -> bool {
    true
}

fn default_error_code() -> u16 {
    429
}

/// The message of a refusal unless `error_message` says otherwise (Kong's).
pub const DEFAULT_MESSAGE: &str = "API rate limit exceeded";

/// Parses and checks a configuration; errors start with the field.
pub fn parse(config: &serde_json::Value) -> Result<Limits, String> {
    let c: Conf = parse_config(config)?;
    let windows: Vec<(Window, Option<f64>)> = Window::ALL
        .into_iter()
        .zip([c.second, c.minute, c.hour, c.day, c.month, c.year])
        .collect();
    let configured: Vec<(Window, f64)> = windows
        .iter()
        .filter_map(|(w, v)| v.map(|v| (*w, v)))
        .collect();
    let algorithm_name = c.algorithm.as_deref().unwrap_or("fixed-window");
    let only = |allowed: &[&str]| -> Result<(), String> {
        let present = [
            ("rate", c.rate.is_some()),
            ("burst", c.burst.is_some()),
            ("cost", c.cost.is_some()),
            ("max_in_flight", c.max_in_flight.is_some()),
        ];
        for (key, set) in present {
            if set && !allowed.contains(&key) {
                return Err(format!("{key}: not used by algorithm {algorithm_name:?}"));
            }
        }
        if !allowed.contains(&"windows") {
            if let Some((w, _)) = configured.first() {
                return Err(format!(
                    "{}: window limits are for the fixed-window and sliding-window algorithms, not {algorithm_name:?}",
                    w.name()
                ));
            }
        }
        Ok(())
    };
    let algorithm = match algorithm_name {
        "fixed-window" | "sliding-window" => {
            only(&["windows"])?;
            if configured.is_empty() {
                return Err(
                    "second: set at least one of second, minute, hour, day, month, year".into(),
                );
            }
            let mut limits = Vec::new();
            for (w, v) in &configured {
                if !(v.is_finite() && *v >= 1.0 && v.fract() == 0.0) {
                    return Err(format!("{}: {v} is not a whole number of at least 1", w.name()));
                }
                // Kong's rule: a longer window cannot allow less than a shorter one.
                if let Some((shorter, lim)) = limits.last() {
                    if (*v as u64) < *lim {
                        return Err(format!(
                            "{}: the limit for {} ({v}) cannot be lower than the limit for {} ({lim})",
                            w.name(),
                            w.name(),
                            Window::name(*shorter)
                        ));
                    }
                }
                limits.push((*w, *v as u64));
            }
            Algorithm::Windows {
                limits,
                sliding: algorithm_name == "sliding-window",
            }
        }
        "token-bucket" => {
            only(&["rate", "burst", "cost"])?;
            let rate = c.rate.ok_or("rate: required by the token-bucket algorithm")?;
            if !(rate.is_finite() && rate > 0.0) {
                return Err(format!("rate: {rate} is not a positive number"));
            }
            let burst = c.burst.ok_or("burst: required by the token-bucket algorithm")?;
            if !(burst.is_finite() && burst >= 1.0) {
                return Err(format!("burst: {burst} is not a number of at least 1"));
            }
            let cost = c.cost.unwrap_or(1.0);
            if !(cost.is_finite() && cost > 0.0) {
                return Err(format!("cost: {cost} is not a positive number"));
            }
            if cost > burst {
                return Err(format!(
                    "cost: {cost} is more than the burst ({burst}): no request could pass"
                ));
            }
            Algorithm::TokenBucket { rate, burst, cost }
        }
        "concurrency" => {
            only(&["max_in_flight"])?;
            let max = c
                .max_in_flight
                .ok_or("max_in_flight: required by the concurrency algorithm")?;
            if max == 0 {
                return Err("max_in_flight: must be at least 1".into());
            }
            Algorithm::Concurrency { max }
        }
        other => {
            return Err(format!(
                "algorithm: {other:?} is not one of fixed-window, sliding-window, token-bucket, concurrency"
            ))
        }
    };
    let limit_by = match c.limit_by.as_deref().unwrap_or("consumer") {
        "consumer" => LimitBy::Consumer,
        "credential" => LimitBy::Credential,
        "ip" => LimitBy::Ip,
        "route" => LimitBy::Route,
        "service" => LimitBy::Service,
        "header" => {
            let name = c
                .header_name
                .as_deref()
                .ok_or("header_name: required when limit_by is header")?;
            LimitBy::Header(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("header_name: {name:?} is not a header name"))?,
            )
        }
        "path" => {
            let path = c
                .path
                .clone()
                .ok_or("path: required when limit_by is path")?;
            if !path.starts_with('/') {
                return Err(format!("path: {path:?} does not start with /"));
            }
            LimitBy::Path(path)
        }
        other => {
            return Err(format!(
                "limit_by: {other:?} is not one of consumer, credential, ip, header, path, route, service"
            ))
        }
    };
    if c.header_name.is_some() && !matches!(limit_by, LimitBy::Header(_)) {
        return Err("header_name: only used when limit_by is header".into());
    }
    if c.path.is_some() && !matches!(limit_by, LimitBy::Path(_)) {
        return Err("path: only used when limit_by is path".into());
    }
    let policy =
        match c.policy.as_deref().unwrap_or("local") {
            "local" => Policy::Local,
            "redis" => Policy::Redis(redis_settings(&c)?),
            "cluster" => return Err(
                "policy: \"cluster\" (Kong's database) does not exist in Weir: use local or redis"
                    .into(),
            ),
            other => return Err(format!("policy: {other:?} is not one of local, redis")),
        };
    let error_code = StatusCode::from_u16(c.error_code)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error())
        .ok_or_else(|| format!("error_code: {} is not between 400 and 599", c.error_code))?;
    let exempt = IpSet::parse("exempt", c.exempt.as_deref().unwrap_or_default())?;
    Ok(Limits {
        algorithm,
        limit_by,
        policy,
        fault_tolerant: c.fault_tolerant,
        hide_client_headers: c.hide_client_headers,
        error_code,
        error_message: c.error_message.unwrap_or_else(|| DEFAULT_MESSAGE.into()),
        exempt: Arc::new(exempt),
    })
}

fn redis_settings(c: &Conf) -> Result<redis::Settings, String> {
    let r = &c.redis;
    let host = r
        .host
        .clone()
        .or_else(|| c.redis_host.clone())
        .ok_or("redis.host: required when policy is redis")?;
    if host.is_empty() || host.contains(|ch: char| ch.is_whitespace() || ch == '/') {
        return Err(format!(
            "redis.host: {host:?} is not a host name or address"
        ));
    }
    let timeout = r.timeout.or(c.redis_timeout).unwrap_or(50);
    if timeout == 0 {
        return Err("redis.timeout: must be at least 1 (milliseconds)".into());
    }
    let port = r.port.or(c.redis_port).unwrap_or(6379);
    if port == 0 {
        return Err("redis.port: 0 is not a port".into());
    }
    Ok(redis::Settings {
        host,
        port,
        database: r.database.or(c.redis_database).unwrap_or(0),
        username: r.username.clone().or_else(|| c.redis_username.clone()),
        password: r.password.clone().or_else(|| c.redis_password.clone()),
        timeout: Duration::from_millis(timeout),
        ssl: r.ssl.or(c.redis_ssl).unwrap_or(false),
        ssl_verify: r.ssl_verify.or(c.redis_ssl_verify).unwrap_or(false),
        server_name: r
            .server_name
            .clone()
            .or_else(|| c.redis_server_name.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: serde_json::Value) -> String {
        parse(&v).expect_err("should be refused")
    }

    #[test]
    fn kong_configs_carry_over() {
        let l = parse(&json!({"minute": 5, "hour": 100, "policy": "local"})).unwrap();
        assert_eq!(
            l.algorithm,
            Algorithm::Windows {
                limits: vec![(Window::Minute, 5), (Window::Hour, 100)],
                sliding: false
            }
        );
        assert_eq!(l.limit_by, LimitBy::Consumer);
        assert_eq!(l.error_code, StatusCode::TOO_MANY_REQUESTS);
        assert!(l.fault_tolerant);
        // The flat redis_* keys of older Kong versions.
        let l = parse(&json!({"second": 1, "policy": "redis", "redis_host": "r", "redis_port": 7000, "redis_password": "p", "sync_rate": -1})).unwrap();
        let Policy::Redis(s) = l.policy else { panic!() };
        assert_eq!((s.host.as_str(), s.port), ("r", 7000));
        assert_eq!(s.password.as_deref(), Some("p"));
        assert_eq!(s.timeout, Duration::from_millis(50));
    }

    #[test]
    fn weirs_algorithms() {
        let l = parse(&json!({"algorithm": "token-bucket", "rate": 10, "burst": 20})).unwrap();
        assert_eq!(
            l.algorithm,
            Algorithm::TokenBucket {
                rate: 10.0,
                burst: 20.0,
                cost: 1.0
            }
        );
        let l = parse(&json!({"algorithm": "concurrency", "max_in_flight": 3, "limit_by": "header", "header_name": "x-tenant"})).unwrap();
        assert_eq!(l.algorithm, Algorithm::Concurrency { max: 3 });
        assert_eq!(
            l.limit_by,
            LimitBy::Header(HeaderName::from_static("x-tenant"))
        );
    }

    #[test]
    fn errors_name_the_field() {
        for (config, field) in [
            (json!({}), "second:"),
            (json!({"minute": 0}), "minute:"),
            (json!({"minute": 1.5}), "minute:"),
            (json!({"second": 10, "minute": 5}), "minute:"),
            (json!({"algorithm": "leaky"}), "algorithm:"),
            (json!({"algorithm": "token-bucket", "burst": 5}), "rate:"),
            (json!({"algorithm": "token-bucket", "rate": 5}), "burst:"),
            (
                json!({"algorithm": "token-bucket", "rate": 5, "burst": 2, "cost": 3}),
                "cost:",
            ),
            (
                json!({"algorithm": "token-bucket", "rate": 5, "burst": 2, "minute": 3}),
                "minute:",
            ),
            (json!({"algorithm": "concurrency"}), "max_in_flight:"),
            (json!({"second": 1, "rate": 3}), "rate:"),
            (json!({"second": 1, "limit_by": "header"}), "header_name:"),
            (
                json!({"second": 1, "limit_by": "header", "header_name": "a b"}),
                "header_name:",
            ),
            (
                json!({"second": 1, "limit_by": "path", "path": "x"}),
                "path:",
            ),
            (json!({"second": 1, "limit_by": "planet"}), "limit_by:"),
            (json!({"second": 1, "policy": "redis"}), "redis.host:"),
            (json!({"second": 1, "policy": "cluster"}), "policy:"),
            (
                json!({"second": 1, "policy": "redis", "redis": {"host": "r", "timeout": 0}}),
                "redis.timeout:",
            ),
            (
                json!({"second": 1, "policy": "redis", "redis": {"host": "r", "colour": 1}}),
                "redis.colour",
            ),
            (json!({"second": 1, "error_code": 200}), "error_code:"),
            (json!({"second": "ten"}), "second:"),
            (
                json!({"second": 1, "exempt": ["10.0.0.1", "10.0.0.0/40"]}),
                "exempt[1]:",
            ),
            (
                json!({"second": 1, "exempt": ["::1", "fe80::/8", "nope"]}),
                "exempt[2]:",
            ),
            (json!({"second": 1, "exempt": "127.0.0.1"}), "exempt:"),
        ] {
            let e = err(config.clone());
            assert!(e.starts_with(field) || e.contains(field), "{config}: {e}");
        }
    }

    #[test]
    fn exempt_addresses_and_networks() {
        let l = parse(&json!({"second": 1})).unwrap();
        assert!(l.exempt.is_empty());
        let l =
            parse(&json!({"second": 1, "exempt": ["127.0.0.1", "10.0.0.0/8", "2001:db8::/32"]}))
                .unwrap();
        for (ip, exempt) in [
            ("127.0.0.1", true),
            ("127.0.0.2", false),
            ("10.200.3.4", true),
            ("11.0.0.1", false),
            ("::ffff:10.1.1.1", true),
            ("2001:db8::7", true),
            ("2001:db9::7", false),
            ("::1", false),
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            assert_eq!(l.exempt.contains(ip), exempt, "{ip}");
        }
        let e = err(json!({"second": 1, "exempt": ["127.0.0.1", "1.2.3"]}));
        assert_eq!(e, r#"exempt[1]: "1.2.3" is not an address or CIDR"#);
    }
}
