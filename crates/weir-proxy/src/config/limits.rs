//! The request limits of `[server]` and of each route, checked.

use std::time::Duration;

use toml::Spanned;

use super::error::{ConfigError, Errors};

/// Bounds on what one downstream request may be (`[server]`). The statuses
/// are RFC 9110 §15.5 and RFC 6585 §5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most bytes of an HTTP/1.1 request head: request line, fields and the
    /// blank line (`max_request_head_bytes`, default 16 KiB, 8 KiB–1 MiB).
    /// Over HTTP/2 the same number bounds the header list as RFC 9113
    /// §6.5.2 counts it (each field's name and value plus 32 bytes,
    /// pseudo-fields included). Past it: `431`.
    pub max_head_bytes: usize,
    /// Most header field lines of a request (`max_request_headers`,
    /// default 100, 1–10,000). Past it: `431`.
    pub max_headers: usize,
    /// Most bytes of the request target: the path and query
    /// (`max_uri_bytes`, default 8 KiB, 256 B–64 KiB). Past it: `414`.
    pub max_uri_bytes: usize,
    /// Most request body bytes on routes that set no limit of their own
    /// (`max_request_body_bytes`, default none). Past it: `413`, detected
    /// from `Content-Length` before anything is sent upstream, or while
    /// streaming, before the upstream gets more than the limit.
    pub max_body_bytes: Option<u64>,
    /// Least average rate a client must send its request body at, in bytes
    /// per second of the time Weir waits for it (time spent waiting on a
    /// slow upstream does not count) (`request_body_min_rate`, default
    /// 1024; 0: no rate). Checked once `request_body_rate_grace` of waiting
    /// has passed. Below it: `408`.
    pub body_min_rate: u64,
    /// Waiting time before the body rate is checked
    /// (`request_body_rate_grace`, default 10 s).
    pub body_rate_grace: Duration,
    /// Most downstream connections open at once, over all listeners
    /// (`max_connections`, default 10,000, 1–1,000,000). Beyond it, new
    /// connections wait in the listen backlog until one closes.
    pub max_connections: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            max_head_bytes: 16 * 1024,
            max_headers: 100,
            max_uri_bytes: 8 * 1024,
            max_body_bytes: None,
            body_min_rate: 1024,
            body_rate_grace: Duration::from_secs(10),
            max_connections: 10_000,
        }
    }
}

/// A route's own limits (`[[route]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteLimits {
    /// `max_request_body_bytes`: replaces the `[server]` one on this route.
    pub max_body_bytes: Option<u64>,
    /// `max_concurrent_requests`: most requests of this route in flight at
    /// once (until their response body ends); past it `503` at once.
    /// Default none.
    pub max_concurrent_requests: Option<usize>,
}

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
    (min, max): (u64, u64),
    errors: &Errors<'_>,
) -> Result<u64, ConfigError> {
    let n = *v.get_ref();
    if n < min || n > max {
        return Err(errors.at(
            v.span(),
            key,
            format!("{n} is out of range: expected {min} to {max}"),
        ));
    }
    Ok(n)
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

/// Route `i`'s limits, checked.
pub(super) fn route_limits(
    i: usize,
    max_request_body_bytes: Option<&Spanned<u64>>,
    max_concurrent_requests: Option<&Spanned<u64>>,
    errors: &Errors<'_>,
) -> Result<RouteLimits, ConfigError> {
    Ok(RouteLimits {
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
        let e = parse("max_request_head_bytes = -1", "").expect_err("negative");
        assert!(e.contains("max_request_head_bytes"), "{e}");
    }
}
