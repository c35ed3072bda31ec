//! Rate-limit buckets in Redis (`scope = "redis"`, `[redis]`): one key per
//! bucket, shared by every replica that uses the same server.
//!
//! A bucket is GCRA, as `governor` runs it in process: the key holds the
//! bucket's theoretical arrival time in µs of the server's clock (`TIME`),
//! so replicas' clocks never matter. One Lua script reads and advances it
//! atomically (EVALSHA, sent again with its body after a `NOSCRIPT`). The
//! key expires when the bucket would be full again.
//!
//! A check that fails (no connection, an error, no answer within
//! `[redis] timeout`) is reported to the caller, which uses the route's
//! own bucket instead; Redis is then left alone for [`BACKOFF`], so an
//! outage costs one timeout per second, not one per request.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::Rate;
use crate::config::RedisSettings;

/// How long Redis is left alone after a failed check.
pub const BACKOFF: Duration = Duration::from_secs(1);

/// The most often a failure is logged: once per this many ms.
const LOG_EVERY_MS: u64 = 10_000;

/// KEYS[1]: the bucket. ARGV[1]: µs between two tokens; ARGV[2]: burst.
/// Returns 0 when a token was taken, else the µs until one is.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local next_tat = tat + interval
local allow_at = next_tat - interval * burst
if allow_at > now then
  return math.ceil(allow_at - now)
end
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1)
return 0
";

/// Why a check got no answer from Redis.
#[derive(Debug, thiserror::Error)]
pub enum RedisCheckError {
    /// Within [`BACKOFF`] of an earlier failure: Redis was not asked.
    #[error("Redis failed less than {}s ago", BACKOFF.as_secs())]
    BackingOff,
    /// No answer within `[redis] timeout`.
    #[error("no answer from Redis within {0:?}")]
    Timeout(Duration),
    /// The client's error (connection refused, an error reply, …).
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The buckets of one `[redis]` server.
pub struct RedisBuckets {
    client: redis::Client,
    timeout: Duration,
    manager: OnceLock<ConnectionManager>,
    script: redis::Script,
    started: Instant,
    /// Ms since `started` until which Redis is not asked.
    down_until: AtomicU64,
    /// When a failure was last logged (ms since `started`, plus 1; 0: never).
    logged: AtomicU64,
}

impl std::fmt::Debug for RedisBuckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBuckets")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RedisBuckets {
    /// The buckets on the server `settings` names. Connects on the first
    /// check, not now.
    ///
    /// # Errors
    /// The URL is not one the client takes (config validation checked it).
    pub fn new(settings: &RedisSettings) -> Result<RedisBuckets, redis::RedisError> {
        Ok(RedisBuckets {
            client: redis::Client::open(settings.url.as_str())?,
            timeout: settings.timeout,
            manager: OnceLock::new(),
            script: redis::Script::new(GCRA),
            started: Instant::now(),
            down_until: AtomicU64::new(0),
            logged: AtomicU64::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Takes a token from bucket `id` of `rate`: `Ok(Err(seconds))` when
    /// it is empty, with the `Retry-After` (≥ 1).
    ///
    /// # Errors
    /// [`RedisCheckError`]: Redis did not answer; the caller checks its
    /// own bucket. Logged at most every 10 s.
    pub async fn check(&self, rate: Rate, id: &[u8]) -> Result<Result<(), u64>, RedisCheckError> {
        if self.down_until.load(Ordering::Relaxed) > self.now_ms() {
            return Err(RedisCheckError::BackingOff);
        }
        let result = match tokio::time::timeout(self.timeout, self.run(rate, id)).await {
            Ok(Ok(wait_us)) => Ok(wait_us),
            Ok(Err(e)) => Err(RedisCheckError::Redis(e)),
            Err(_) => Err(RedisCheckError::Timeout(self.timeout)),
        };
        match result {
            Ok(0) => Ok(Ok(())),
            Ok(wait_us) => Ok(Err(super::wait_seconds(Duration::from_micros(wait_us)))),
            Err(e) => {
                let now = self.now_ms();
                self.down_until.store(
                    now.saturating_add(BACKOFF.as_millis() as u64),
                    Ordering::Relaxed,
                );
                let last = self.logged.load(Ordering::Relaxed);
                if (last == 0 || now.saturating_add(1).saturating_sub(last) >= LOG_EVERY_MS)
                    && self
                        .logged
                        .compare_exchange(
                            last,
                            now.saturating_add(1),
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                {
                    // One line: the client's parse errors span several.
                    let why = e
                        .to_string()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ");
                    tracing::warn!(
                        target: "weir::rate_limit",
                        "rate limit checked on this replica's own bucket: {why} \
                         (Redis is left alone for {}s; logged at most every 10 s)",
                        BACKOFF.as_secs()
                    );
                }
                Err(e)
            }
        }
    }

    async fn run(&self, rate: Rate, id: &[u8]) -> Result<u64, redis::RedisError> {
        let mut con = match self.manager.get() {
            Some(m) => m.clone(),
            None => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout))
                    .set_number_of_retries(0);
                let m = ConnectionManager::new_lazy_with_config(self.client.clone(), config)?;
                self.manager.get_or_init(|| m).clone()
            }
        };
        let mut key = Vec::with_capacity(32 + id.len());
        key.extend_from_slice(format!("weir:rl:{}:{}:", rate.per_second, rate.burst).as_bytes());
        key.extend_from_slice(id);
        let interval_us = 1_000_000 / u64::from(rate.per_second.max(1));
        self.script
            .key(key)
            .arg(interval_us.max(1))
            .arg(rate.burst)
            .invoke_async(&mut con)
            .await
    }
}
