//! `[redis]`: the Redis server that holds the buckets of rate limits with
//! `scope = "redis"` (see `crate::rate_limit::redis`).

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::duration;
use super::error::{ConfigError, Errors};

/// `[redis]`, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `url`: `redis://[user:password@]host[:port][/db]` (or `rediss://`,
    /// `redis+unix://`), `${VAR}` expanded from the environment.
    pub url: String,
    /// `timeout`: how long one bucket check may take, connecting included,
    /// before the route's own bucket answers instead (default 50 ms).
    pub timeout: Duration,
}

impl std::fmt::Debug for RedisSettings {
    /// Everything but the URL, which may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// `[redis]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedis {
    pub url: Spanned<String>,
    #[serde(
        default = "default_timeout",
        deserialize_with = "duration::at_least_1ms"
    )]
    pub timeout: Duration,
}

fn default_timeout() -> Duration {
    Duration::from_millis(50)
}

/// `[redis]`, checked: `url` (after `${VAR}`) a URL the Redis client takes.
pub(super) fn redis(
    raw: Option<&Spanned<RawRedis>>,
    errors: &Errors<'_>,
) -> Result<Option<RedisSettings>, ConfigError> {
    let Some(raw) = raw.map(Spanned::get_ref) else {
        return Ok(None);
    };
    let url = super::fleet::expand_env_at(&raw.url, "redis.url", errors)?;
    if url.starts_with("rediss://") {
        return Err(errors.at(
            raw.url.span(),
            "redis.url",
            "TLS to Redis (rediss://) is not built in: use redis:// on a trusted network, or a local TLS tunnel",
        ));
    }
    // The client takes more (`valkey://`, `unix://`), which the README
    // does not promise; a space would be part of the host.
    if !(url.starts_with("redis://") || url.starts_with("redis+unix://")) {
        return Err(errors.at(
            raw.url.span(),
            "redis.url",
            "must start with redis:// (or redis+unix:// for a Unix socket), e.g. \"redis://127.0.0.1:6379/0\"",
        ));
    }
    if url.contains(char::is_whitespace) {
        return Err(errors.at(raw.url.span(), "redis.url", "has a space in it"));
    }
    // Parsing opens nothing; the error never repeats the URL's password.
    redis::Client::open(url.as_str()).map_err(|e| {
        errors.at(
            raw.url.span(),
            "redis.url",
            format!(
                "is not a Redis URL (e.g. \"redis://127.0.0.1:6379/0\"): {}",
                e.detail()
                    .unwrap_or("check the host, the port (1 to 65535) and the database (a number)")
            ),
        )
    })?;
    Ok(Some(RedisSettings {
        url,
        timeout: raw.timeout,
    }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    const BASE: &str = "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n\
        [[route]]\npath_prefix = \"/\"\nupstream = \"a\"\n";

    fn parse(extra: &str) -> Result<Config, String> {
        Config::parse(&format!("{BASE}{extra}"), "t.toml", Path::new("."))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_redis_section_takes_a_url_and_a_timeout() {
        let c = parse("[redis]\nurl = \"redis://:pw@127.0.0.1:6390/2\"\ntimeout = \"20ms\"\n")
            .expect("valid");
        let r = c.redis.expect("a [redis]");
        assert_eq!(r.url, "redis://:pw@127.0.0.1:6390/2");
        assert_eq!(r.timeout.as_millis(), 20);
        assert!(!format!("{r:?}").contains("pw"), "Debug hides the password");
    }

    #[test]
    fn a_bad_redis_url_names_the_key_and_line() {
        let e = parse("[redis]\nurl = \"http://127.0.0.1:6379\"\n").expect_err("not redis");
        assert!(e.contains("t.toml:8:") && e.contains("redis.url"), "{e}");
        for (url, says) in [
            ("valkey://127.0.0.1:6379", "must start with redis://"),
            ("unix:///tmp/redis.sock", "must start with redis://"),
            (" redis://127.0.0.1:6379", "must start with redis://"),
            ("redis://127.0.0.1:6379 ", "has a space"),
            ("redis://127.0.0.1:99999", "the port (1 to 65535)"),
            ("redis://127.0.0.1:6379/abc", "the database (a number)"),
        ] {
            let e = parse(&format!("[redis]\nurl = \"{url}\"\n")).expect_err(url);
            assert!(e.contains("redis.url") && e.contains(says), "{url}: {e}");
        }
        let e = parse("[redis]\nurl = \"redis://127.0.0.1:6379\"\ntimeout = \"500us\"\n")
            .expect_err("too short");
        assert!(
            e.contains("t.toml:9:") && e.contains("shorter than 1ms"),
            "{e}"
        );
    }
}
