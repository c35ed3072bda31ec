//! The request limits of `[server]` and of each route, checked.

use std::time::Duration;

use toml::Spanned;

use super::error::{ConfigError, Errors};
use super::types::{RateLimitScope, RateLimitSpec, RequestLimits, RouteLimits};

/// The `[server]` limit keys as written.
#[derive(Debug)]
pub(super) struct RawLimits<'a> {
    pub max_request_head_bytes: Option<&'a Spanned<u64>>,
    pub max_request_headers: Option<&'a Spanned<u64>>,
    pub max_uri_bytes: Option<&'a Spanned<u64>>,
    pub max_request_body_bytes: Option<&'a Spanned<u64>>,
    pub request_body_min_rate: Option<&'a Spanned<u64>>,
    pub request_body_rate_grace: Duration,
    pub max_connections: Option<&'a Spanned<u64>>,
}

/// `v` (at `key`) when it is within `min..=max`.
fn within(
    v: &Spanned<u64>,
    key: &str,
    range: (u64, u64),
    errors: &Errors<'_>,
) -> Result<u64, ConfigError> {
    errors.within(v, || key.to_owned(), range)
}

/// `usize` of a value already checked to be at most `max`.
fn small(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `[server]`'s limits, checked.
pub(super) fn request_limits(
    raw: &RawLimits<'_>,
    errors: &Errors<'_>,
) -> Result<RequestLimits, ConfigError> {
    let d = RequestLimits::default();
    let get = |v: Option<&Spanned<u64>>, key: &str, range: (u64, u64), default: u64| match v {
        Some(v) => within(v, &format!("server.{key}"), range, errors),
        None => Ok(default),
    };
    Ok(RequestLimits {
        max_head_bytes: small(get(
            raw.max_request_head_bytes,
            "max_request_head_bytes",
            (8 * 1024, 1 << 20),
            d.max_head_bytes as u64,
        )?),
        max_headers: small(get(
            raw.max_request_headers,
            "max_request_headers",
            (1, 10_000),
            d.max_headers as u64,
        )?),
        max_uri_bytes: small(get(
            raw.max_uri_bytes,
            "max_uri_bytes",
            (256, 64 * 1024),
            d.max_uri_bytes as u64,
        )?),
        max_body_bytes: raw
            .max_request_body_bytes
            .map(|v| within(v, "server.max_request_body_bytes", (0, u64::MAX), errors))
            .transpose()?,
        body_min_rate: get(
            raw.request_body_min_rate,
            "request_body_min_rate",
            (0, 1 << 30),
            d.body_min_rate,
        )?,
        body_rate_grace: raw.request_body_rate_grace,
        max_connections: small(get(
            raw.max_connections,
            "max_connections",
            (1, 1_000_000),
            d.max_connections as u64,
        )?),
    })
}

/// Which shared stores of rate-limit buckets the config has.
#[derive(Debug, Clone, Copy)]
pub(super) struct SharedStores {
    /// `[fleet]`: for `scope = "fleet"`.
    pub fleet: bool,
    /// `[redis]`: for `scope = "redis"`.
    pub redis: bool,
}

/// Route `i`'s limits, checked.
pub(super) fn route_limits(
    i: usize,
    max_request_body_bytes: Option<&Spanned<u64>>,
    max_concurrent_requests: Option<&Spanned<u64>>,
    rate_limit: Option<&Spanned<super::raw::RawRateLimit>>,
    stores: SharedStores,
    errors: &Errors<'_>,
) -> Result<RouteLimits, ConfigError> {
    Ok(RouteLimits {
        rate_limit: rate_limit
            .map(|r| route_rate_limit(i, r.get_ref(), stores, errors))
            .transpose()?,
        max_body_bytes: max_request_body_bytes
            .map(|v| {
                within(
                    v,
                    &format!("route[{i}].max_request_body_bytes"),
                    (0, u64::MAX),
                    errors,
                )
            })
            .transpose()?,
        max_concurrent_requests: max_concurrent_requests
            .map(|v| {
                within(
                    v,
                    &format!("route[{i}].max_concurrent_requests"),
                    (1, 1_000_000),
                    errors,
                )
                .map(small)
            })
            .transpose()?,
    })
}

/// `[route.rate_limit]` of route `i`, checked.
fn route_rate_limit(
    i: usize,
    r: &super::raw::RawRateLimit,
    stores: SharedStores,
    errors: &Errors<'_>,
) -> Result<RateLimitSpec, ConfigError> {
    let key = |k: &str| format!("route[{i}].rate_limit.{k}");
    let range = (1, 1_000_000);
    let per_second = within(
        &r.requests_per_second,
        &key("requests_per_second"),
        range,
        errors,
    )?;
    let burst = match &r.burst {
        Some(b) => within(b, &key("burst"), range, errors)?,
        None => per_second,
    };
    let hash_key = match &r.key {
        None => super::types::HashKey::ClientAddr,
        Some(k) => super::upstream::hash_key(k.get_ref())
            .map_err(|why| errors.at(k.span(), key("key"), why))?,
    };
    let scope = match &r.scope {
        None => RateLimitScope::Replica,
        Some(s) => {
            let (scope, has_store, store) = match s.get_ref().as_str() {
                "replica" => (RateLimitScope::Replica, true, ""),
                "fleet" => (RateLimitScope::Fleet, stores.fleet, "[fleet]"),
                "redis" => (RateLimitScope::Redis, stores.redis, "[redis]"),
                other => {
                    return Err(errors.at(
                        s.span(),
                        key("scope"),
                        format!(
                            "unknown scope {other:?}: expected \"replica\", \"fleet\" or \"redis\""
                        ),
                    ));
                }
            };
            if !has_store {
                return Err(errors.at(
                    s.span(),
                    key("scope"),
                    format!(
                        "scope {:?} keeps its buckets in {store}, which this config does not have",
                        s.get_ref()
                    ),
                ));
            }
            scope
        }
    };
    Ok(RateLimitSpec {
        requests_per_second: u32::try_from(per_second).unwrap_or(u32::MAX),
        burst: u32::try_from(burst).unwrap_or(u32::MAX),
        key: hash_key,
        scope,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    fn parse(server: &str, route: &str) -> Result<Config, String> {
        let text = format!(
            "[server]\n{server}\n[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n\
             [[route]]\nupstream = \"a\"\n{route}\n"
        );
        Config::parse(&text, "t.toml", Path::new(".")).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_a_route_limit_over_the_server_one() {
        let c = parse("max_request_body_bytes = 10", "").expect("valid");
        assert_eq!(c.server.limits.max_head_bytes, 16 * 1024);
        assert_eq!(c.server.limits.max_headers, 100);
        assert_eq!(c.server.limits.max_uri_bytes, 8 * 1024);
        assert_eq!(c.server.limits.max_connections, 10_000);
        assert_eq!(c.routes[0].limits.max_body_bytes, Some(10));
        let c = parse("max_request_body_bytes = 10", "max_request_body_bytes = 20").expect("valid");
        assert_eq!(c.routes[0].limits.max_body_bytes, Some(20));
        assert_eq!(c.routes[0].limits.max_concurrent_requests, None);
    }

    #[test]
    fn out_of_range_limits_name_file_line_and_key() {
        for (server, key) in [
            (
                "max_request_head_bytes = 100",
                "server.max_request_head_bytes",
            ),
            ("max_request_headers = 0", "server.max_request_headers"),
            ("max_uri_bytes = 10", "server.max_uri_bytes"),
            ("max_connections = 0", "server.max_connections"),
        ] {
            let e = parse(server, "").expect_err(server);
            assert!(e.starts_with("t.toml:2:") && e.contains(key), "{e}");
        }
        let e = parse("", "max_concurrent_requests = 0").expect_err("zero");
        assert!(e.contains("route[0].max_concurrent_requests"), "{e}");
        let e = parse("", "[route.rate_limit]\nrequests_per_second = 0").expect_err("zero");
        assert!(e.contains("route[0].rate_limit.requests_per_second"), "{e}");
        let e = parse(
            "",
            "[route.rate_limit]\nrequests_per_second = 5\nkey = \"ip\"",
        )
        .expect_err("bad key");
        assert!(
            e.contains("route[0].rate_limit.key") && e.contains("t.toml:10:"),
            "{e}"
        );
        let c = parse("", "[route.rate_limit]\nrequests_per_second = 5").expect("valid");
        let r = c.routes[0].limits.rate_limit.as_ref().expect("a limit");
        assert_eq!((r.requests_per_second, r.burst), (5, 5));
        let e = parse("max_request_head_bytes = -1", "").expect_err("negative");
        assert!(e.contains("max_request_head_bytes"), "{e}");
    }

    #[test]
    fn a_shared_scope_needs_its_store() {
        let limit = |scope: &str| {
            format!("[route.rate_limit]\nrequests_per_second = 5\nscope = \"{scope}\"")
        };
        let c = parse("", &limit("replica")).expect("valid");
        let r = c.routes[0].limits.rate_limit.as_ref().expect("a limit");
        assert_eq!(r.scope, crate::config::RateLimitScope::Replica);
        for (scope, store) in [("fleet", "[fleet]"), ("redis", "[redis]")] {
            let e = parse("", &limit(scope)).expect_err(scope);
            assert!(
                e.contains("route[0].rate_limit.scope")
                    && e.contains("t.toml:10:")
                    && e.contains(store),
                "{e}"
            );
        }
        let e = parse("", &limit("cluster")).expect_err("unknown");
        assert!(e.contains("unknown scope \"cluster\""), "{e}");
        let redis = format!(
            "{}\n[redis]\nurl = \"redis://127.0.0.1:6379\"",
            limit("redis")
        );
        let c = parse("", &redis).expect("valid with [redis]");
        let r = c.routes[0].limits.rate_limit.as_ref().expect("a limit");
        assert_eq!(r.scope, crate::config::RateLimitScope::Redis);
    }
}
