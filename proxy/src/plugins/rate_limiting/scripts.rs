//! The `redis` policy: each decision is one Lua script run atomically on the server with
//! EVALSHA (sent again with SCRIPT LOAD after a NOSCRIPT), on the server's clock (`TIME`), so
//! proxies whose clocks disagree still share one limit. The arithmetic is `algorithm.rs`'s.

use std::sync::LazyLock;

use super::algorithm::WindowUsage;
use super::config::Algorithm;
use super::Outcome;
use crate::redis::{Client, Error, Reply};

/// A Lua script and its SHA-1 (what EVALSHA names it by).
pub struct Script {
    text: &'static str,
    sha: String,
}

impl Script {
    fn new(text: &'static str) -> Script {
        Script {
            text,
            sha: sha1_smol::Sha1::from(text).digest().to_string(),
        }
    }
}

/// Fixed and sliding windows. KEYS: one per window; ARGV: sliding (0/1), cost, then a size
/// (seconds) and a limit per window. Returns allowed, then per window the count in
/// thousandths and the milliseconds until the window ends.
static WINDOWS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
-- Writes after TIME need effects replication before Redis 5 (a no-op since).
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local sliding = ARGV[1] == '1'
local cost = tonumber(ARGV[2])
local used, current, sizes = {}, {}, {}
local allowed = 1
for i = 1, #KEYS do
  local size = tonumber(ARGV[1 + 2 * i])
  local limit = tonumber(ARGV[2 + 2 * i])
  local id = math.floor(now / size)
  sizes[i] = size
  current[i] = KEYS[i] .. ':' .. string.format('%d', id)
  local count = tonumber(redis.call('GET', current[i]) or '0')
  if sliding then
    local prev = tonumber(redis.call('GET', KEYS[i] .. ':' .. string.format('%d', id - 1)) or '0')
    count = count + math.floor(prev * (1 - (now - id * size) / size))
  end
  used[i] = count
  if count + cost > limit then allowed = 0 end
end
local out = {allowed}
for i = 1, #KEYS do
  if allowed == 1 then
    redis.call('INCRBY', current[i], cost)
    redis.call('PEXPIRE', current[i], math.ceil(sizes[i] * 2000))
    used[i] = used[i] + cost
  end
  local id = math.floor(now / sizes[i])
  out[#out + 1] = math.floor(used[i] * 1000)
  out[#out + 1] = math.ceil(((id + 1) * sizes[i] - now) * 1000)
end
return out
"#,
    )
});

/// The seed's token bucket. KEYS: tokens, timestamp; ARGV: rate, burst, cost. Returns
/// allowed and the tokens left in thousandths.
static BUCKET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
-- Writes after TIME need effects replication before Redis 5 (a no-op since).
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ttl = math.max(1, math.ceil(burst / rate * 2))
local tokens = tonumber(redis.call('GET', KEYS[1]))
if tokens == nil then tokens = burst end
local last = tonumber(redis.call('GET', KEYS[2]))
if last == nil then last = now end
local filled = math.min(burst, tokens + math.max(0, now - last) * rate)
local allowed = 0
if filled >= cost then
  filled = filled - cost
  allowed = 1
end
redis.call('SET', KEYS[1], string.format('%.6f', filled), 'EX', ttl)
redis.call('SET', KEYS[2], string.format('%.6f', math.max(now, last)), 'EX', ttl)
return {allowed, math.floor(filled * 1000)}
"#,
    )
});

/// Takes an in-flight slot. KEYS: the set of slots; ARGV: max, how long a slot may be held
/// (seconds: slots of a proxy that died are dropped after that), this request's token.
/// Returns allowed and the slots held.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
-- Writes after TIME need effects replication before Redis 5 (a no-op since).
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1])
local hold = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - hold)
local held = redis.call('ZCARD', KEYS[1])
if held < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('EXPIRE', KEYS[1], hold)
  return {1, held + 1}
end
return {0, held}
"#,
    )
});

/// Gives an in-flight slot back. KEYS: the set; ARGV: the token.
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new("return redis.call('ZREM', KEYS[1], ARGV[1])"));

/// The longest an in-flight slot is held in Redis when its proxy never gives it back.
pub const SLOT_HOLD_SECONDS: u64 = 3600;

/// Runs a script by its SHA-1, loading it first if the server does not know it.
async fn eval(
    client: &Client,
    script: &Script,
    keys: &[&[u8]],
    args: &[&[u8]],
) -> Result<Vec<Reply>, Error> {
    let nkeys = keys.len().to_string();
    let mut cmd: Vec<&[u8]> = Vec::with_capacity(3 + keys.len() + args.len());
    cmd.extend([&b"EVALSHA"[..], script.sha.as_bytes(), nkeys.as_bytes()]);
    cmd.extend_from_slice(keys);
    cmd.extend_from_slice(args);
    let mut replies = client.call(&[&cmd]).await?;
    let mut reply = replies.pop();
    if matches!(&reply, Some(Reply::Error(e)) if e.starts_with("NOSCRIPT")) {
        // A restarted or flushed server: load it and run it in the same round trip.
        let load: [&[u8]; 3] = [b"SCRIPT", b"LOAD", script.text.as_bytes()];
        reply = client.call(&[&load, &cmd]).await?.pop();
    }
    match reply {
        Some(Reply::Array(items)) => Ok(items),
        Some(Reply::Integer(n)) => Ok(vec![Reply::Integer(n)]),
        Some(Reply::Error(e)) => Err(Error::Server(e)),
        other => Err(Error::Server(format!("unexpected reply {other:?}"))),
    }
}

fn int(items: &[Reply], i: usize) -> Result<i64, Error> {
    match items.get(i) {
        Some(Reply::Integer(n)) => Ok(*n),
        other => Err(Error::Server(format!("unexpected script result {other:?}"))),
    }
}

/// The arguments of an algorithm's script that do not change from request to request,
/// formatted once when the plugin is built.
pub struct Args(Vec<String>);

impl Args {
    /// The constant arguments of `algorithm`'s script.
    pub fn new(algorithm: &Algorithm) -> Args {
        Args(match algorithm {
            Algorithm::Windows { limits, sliding } => {
                let mut args = vec![(*sliding as u8).to_string(), "1".into()];
                for (w, limit) in limits {
                    args.push(w.seconds().to_string());
                    args.push(limit.to_string());
                }
                args
            }
            Algorithm::TokenBucket { rate, burst, cost } => {
                vec![rate.to_string(), burst.to_string(), cost.to_string()]
            }
            Algorithm::Concurrency { max } => vec![max.to_string(), SLOT_HOLD_SECONDS.to_string()],
        })
    }

    fn with<'a>(&'a self, extra: &'a [&'a str]) -> Vec<&'a [u8]> {
        self.0
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
            .map(str::as_bytes)
            .collect()
    }
}

/// Decides one request for `key` on the server.
pub async fn decide(
    client: &Client,
    algorithm: &Algorithm,
    args: &Args,
    key: &str,
    token: &str,
    usage: &mut Vec<WindowUsage>,
) -> Result<Outcome, Error> {
    match algorithm {
        Algorithm::Windows { limits, .. } => {
            let keys: Vec<String> = limits
                .iter()
                .map(|(w, _)| format!("{key}:{}", w.name()))
                .collect();
            let k: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let items = eval(client, &WINDOWS, &k, &args.with(&[])).await?;
            usage.clear();
            for (i, &(window, limit)) in limits.iter().enumerate() {
                usage.push(WindowUsage {
                    window,
                    limit,
                    used: int(&items, 1 + 2 * i)? as f64 / 1000.0,
                    reset: int(&items, 2 + 2 * i)? as f64 / 1000.0,
                });
            }
            Ok(Outcome::Windows {
                allowed: int(&items, 0)? == 1,
            })
        }
        Algorithm::TokenBucket { .. } => {
            let (tokens_key, at_key) = (format!("{key}:tokens"), format!("{key}:ts"));
            let keys = [tokens_key.as_bytes(), at_key.as_bytes()];
            let items = eval(client, &BUCKET, &keys, &args.with(&[])).await?;
            Ok(Outcome::Bucket {
                allowed: int(&items, 0)? == 1,
                tokens: int(&items, 1)? as f64 / 1000.0,
            })
        }
        Algorithm::Concurrency { .. } => {
            let set = format!("{key}:inflight");
            let items = eval(client, &ACQUIRE, &[set.as_bytes()], &args.with(&[token])).await?;
            Ok(Outcome::InFlight {
                allowed: int(&items, 0)? == 1,
                in_flight: int(&items, 1)?.max(0) as u64,
            })
        }
    }
}

/// Gives back the in-flight slot `token` of `key`.
pub async fn release(client: &Client, key: &str, token: &str) -> Result<(), Error> {
    let set = format!("{key}:inflight");
    eval(client, &RELEASE, &[set.as_bytes()], &[token.as_bytes()])
        .await
        .map(drop)
}
