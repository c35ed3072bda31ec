//! `[[upstream]]`, checked: its servers (`url` or `servers`), `balance`
//! and `hash_key`, `[upstream.health]`, `[upstream.outlier]`,
//! `[upstream.retry]` and `[upstream.tls]` ([`super::upstream_tls`]).

use std::path::Path;
use std::time::Duration;

use http::Uri;
use toml::Spanned;
use weir_http::host;

use super::error::{ConfigError, Errors};
use super::raw::{RawHealth, RawOutlier, RawRetry, RawServerEntry, RawUpstream};
use super::ring::RingHash;
use super::types::{
    Balance, EmbeddedOrigin, HashKey, HealthCheck, OutlierSettings, Protocol, RetrySettings,
    ServerSpec, Upstream, UpstreamTarget, UpstreamUrl,
};
use super::upstream_tls::upstream_tls;

/// Largest `weight`.
const MAX_WEIGHT: i64 = 1000;
/// Most servers in one upstream.
const MAX_SERVERS: usize = 256;
/// Largest sum of weights of a `balance = "hash"` upstream: its ring has
/// at most 262,144 points of 16 bytes (4 MiB), 64 per unit of weight at this total.
const MAX_HASH_WEIGHT: u64 = 4096;
/// Largest `retry_body_bytes`: 64 MiB. Each retryable request in flight
/// may hold this much, so a larger value is a memory hazard, not a setting.
const MAX_RETRY_BODY_BYTES: i64 = 64 << 20;
/// Largest `attempts`.
const MAX_ATTEMPTS: i64 = 10;

/// `upstream[i]`, checked.
pub(super) fn upstream(
    i: usize,
    up: &Spanned<RawUpstream>,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<Upstream, ConfigError> {
    let u = up.get_ref();
    let key = |k: &str| format!("upstream[{i}].{k}");
    let name = u.name.get_ref();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(errors.at(
            u.name.span(),
            key("name"),
            format!("{name:?}: use letters, digits, '-', '_' and '.' only"),
        ));
    }
    let given = [
        u.url.as_ref().map(|v| ("url", v.span())),
        u.servers.as_ref().map(|v| ("servers", v.span())),
        u.origin.as_ref().map(|v| ("origin", v.span())),
    ];
    let mut given = given.into_iter().flatten();
    let first = given.next();
    if let Some((second, span)) = given.next() {
        return Err(errors.at(
            span,
            key(second),
            format!(
                "give one of `url`, `servers` or `origin`, not both `{}` and `{second}`",
                first.map_or("", |f| f.0)
            ),
        ));
    }
    if let Some(root) = u.root.as_ref().filter(|_| u.origin.is_none()) {
        return Err(errors.at(
            root.span(),
            key("root"),
            "`root` applies only to `origin = \"embedded\"`",
        ));
    }
    if let Some(t) = u.test_endpoints.as_ref().filter(|_| u.origin.is_none()) {
        return Err(errors.at(
            t.span(),
            key("test_endpoints"),
            "`test_endpoints` applies only to `origin = \"embedded\"`",
        ));
    }
    let target = if let Some(url) = &u.url {
        let url = parse_url(url.get_ref()).map_err(|m| errors.at(url.span(), key("url"), m))?;
        UpstreamTarget::Servers(vec![ServerSpec::one(url)])
    } else if let Some(servers) = &u.servers {
        UpstreamTarget::Servers(servers_list(i, servers, errors)?)
    } else if let Some(origin) = &u.origin {
        embedded(i, u, origin, base_dir, errors)?
    } else {
        return Err(errors.at(
            up.span(),
            format!("upstream[{i}]"),
            "missing `url` (e.g. \"http://127.0.0.1:3000\"), `servers` or `origin = \"embedded\"`",
        ));
    };
    let tls = match &target {
        UpstreamTarget::Servers(servers) => {
            let https = servers[0].url.scheme == http::uri::Scheme::HTTPS;
            if let Some(other) = servers
                .iter()
                .position(|s| (s.url.scheme == http::uri::Scheme::HTTPS) != https)
            {
                return Err(errors.at(
                    u.servers.as_ref().map_or(0..0, Spanned::span),
                    format!("upstream[{i}].servers[{other}]"),
                    "every server of an upstream has the same scheme: all http:// or all https://",
                ));
            }
            upstream_tls(i, u.tls.as_ref(), https, base_dir, errors)?
        }
        UpstreamTarget::Embedded(_) => upstream_tls(i, u.tls.as_ref(), false, base_dir, errors)?,
    };
    let balance = balance(i, u, errors)?;
    if let (Balance::Hash(..), UpstreamTarget::Servers(servers)) = (&balance, &target) {
        let total: u64 = servers.iter().map(|s| u64::from(s.weight)).sum();
        if total > MAX_HASH_WEIGHT {
            return Err(errors.at(
                u.balance.as_ref().map_or(0..0, Spanned::span),
                key("balance"),
                format!(
                    "the servers' weights sum to {total}; `balance = \"hash\"` allows at most {MAX_HASH_WEIGHT} (a server of weight 1 keeps 64 points of the ring at that total)"
                ),
            ));
        }
    }
    Ok(Upstream {
        name: name.clone(),
        target,
        balance,
        health: u
            .health
            .as_ref()
            .map(|h| health(i, h, errors))
            .transpose()?,
        outlier: outlier(i, &u.outlier, up.span(), errors)?,
        retry: retry(i, &u.retry, errors)?,
        protocol: protocol(i, u, errors)?,
        tls,
    })
}

/// Why `new` cannot be beside `earlier`: it lists an `https://` server
/// that an earlier upstream lists too with other TLS settings (a server has
/// one pool of connections, so one way of speaking TLS to it).
pub(super) fn tls_conflict(new: &Upstream, earlier: &[Upstream]) -> Option<String> {
    let (UpstreamTarget::Servers(servers), Some(tls)) = (&new.target, &new.tls) else {
        return None;
    };
    for other in earlier {
        let (UpstreamTarget::Servers(theirs), Some(their_tls)) = (&other.target, &other.tls) else {
            continue;
        };
        if tls.same_as(their_tls) {
            continue;
        }
        if let Some(s) = servers
            .iter()
            .find(|s| theirs.iter().any(|t| t.url.authority == s.url.authority))
        {
            return Some(format!(
                "https://{} is also a server of upstream {:?}, whose [upstream.tls] differs; \
                 give both the same settings",
                s.url.authority, other.name
            ));
        }
    }
    None
}

/// `protocol`: `"http1"` (default), `"h2c"` (or its alias `"h2"`: HTTP/2,
/// over TLS for https:// servers) or `"auto"`; an embedded origin speaks
/// HTTP/1.1 only.
fn protocol(i: usize, u: &RawUpstream, errors: &Errors<'_>) -> Result<Protocol, ConfigError> {
    let Some(p) = &u.protocol else {
        return Ok(Protocol::Http1);
    };
    let key = format!("upstream[{i}].protocol");
    let protocol = match p.get_ref().as_str() {
        "http1" => Protocol::Http1,
        "h2c" | "h2" => Protocol::H2c,
        "auto" => Protocol::Auto,
        other => {
            return Err(errors.at(
                p.span(),
                key,
                format!(
                    "unknown protocol {other:?}; use \"http1\", \"h2c\" (alias \"h2\") or \"auto\""
                ),
            ));
        }
    };
    if protocol != Protocol::Http1 && u.origin.is_some() {
        return Err(errors.at(p.span(), key, "the embedded origin speaks HTTP/1.1 only"));
    }
    Ok(protocol)
}

fn embedded(
    i: usize,
    u: &RawUpstream,
    origin: &Spanned<String>,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<UpstreamTarget, ConfigError> {
    if origin.get_ref() != "embedded" {
        return Err(errors.at(
            origin.span(),
            format!("upstream[{i}].origin"),
            format!(
                "unknown origin {:?}; the only one is \"embedded\"",
                origin.get_ref()
            ),
        ));
    }
    let root = u.root.as_ref().map_or("fixtures", |r| r.get_ref().as_str());
    let root = base_dir.join(root);
    if !root.is_dir() {
        let span = u.root.as_ref().map_or(origin.span(), |r| r.span());
        let shown = std::path::absolute(&root).unwrap_or(root);
        return Err(errors.at(
            span,
            format!("upstream[{i}].root"),
            format!(
                "{} is not a directory (a relative root is relative to the config file's directory)",
                shown.display()
            ),
        ));
    }
    Ok(UpstreamTarget::Embedded(EmbeddedOrigin {
        root,
        test_endpoints: u.test_endpoints.as_ref().is_none_or(|t| *t.get_ref()),
    }))
}

/// `servers`: at least one, at most [`MAX_SERVERS`], no two alike, one base path.
fn servers_list(
    i: usize,
    servers: &Spanned<Vec<Spanned<RawServerEntry>>>,
    errors: &Errors<'_>,
) -> Result<Vec<ServerSpec>, ConfigError> {
    let list = servers.get_ref();
    if list.is_empty() || list.len() > MAX_SERVERS {
        return Err(errors.at(
            servers.span(),
            format!("upstream[{i}].servers"),
            format!("list from 1 to {MAX_SERVERS} servers"),
        ));
    }
    let mut out: Vec<ServerSpec> = Vec::with_capacity(list.len());
    for (j, entry) in list.iter().enumerate() {
        let e = entry.get_ref();
        let key = |k: &str| format!("upstream[{i}].servers[{j}]{k}");
        let url_span = if e.url.span() == (0..0) {
            entry.span()
        } else {
            e.url.span()
        };
        let url =
            parse_url(e.url.get_ref()).map_err(|m| errors.at(url_span.clone(), key(""), m))?;
        if let Some(dup) = out.iter().find(|s| same_server(&s.url, &url)) {
            return Err(errors.at(
                url_span,
                key(""),
                format!("{} is listed twice", dup.url.authority),
            ));
        }
        if let Some(first) = out.first()
            && first.url.base_path != url.base_path
        {
            return Err(errors.at(
                url_span,
                key(""),
                format!(
                    "base path {:?} differs from the first server's {:?}; every server of an upstream serves the same paths",
                    url.base_path, first.url.base_path
                ),
            ));
        }
        let weight = match &e.weight {
            Some(w) => in_range(w, 1, MAX_WEIGHT, key(".weight"), errors)? as u32,
            None => 1,
        };
        let max_connections = e
            .max_connections
            .as_ref()
            .map(|m| in_range(m, 1, i64::from(u32::MAX), key(".max_connections"), errors))
            .transpose()?
            .map(|m| m as u32);
        out.push(ServerSpec {
            url,
            weight,
            max_connections,
        });
    }
    Ok(out)
}

fn balance(i: usize, u: &RawUpstream, errors: &Errors<'_>) -> Result<Balance, ConfigError> {
    let name = u
        .balance
        .as_ref()
        .map_or("round_robin", |b| b.get_ref().as_str());
    let span = u.balance.as_ref().map_or(0..0, Spanned::span);
    let balance = match name {
        "round_robin" => Balance::RoundRobin,
        "least_outstanding" => Balance::LeastOutstanding,
        "hash" => {
            let Some(k) = &u.hash_key else {
                return Err(errors.at(
                    span,
                    format!("upstream[{i}].hash_key"),
                    "`balance = \"hash\"` needs `hash_key`: \"header:<name>\", \"cookie:<name>\" or \"client_addr\"",
                ));
            };
            let ring = match &u.hash_ring {
                None => RingHash::Weir,
                Some(r) => RingHash::parse(r.get_ref())
                    .map_err(|m| errors.at(r.span(), format!("upstream[{i}].hash_ring"), m))?,
            };
            Balance::Hash(
                hash_key(k.get_ref())
                    .map_err(|m| errors.at(k.span(), format!("upstream[{i}].hash_key"), m))?,
                ring,
            )
        }
        other => {
            return Err(errors.at(
                span,
                format!("upstream[{i}].balance"),
                format!(
                    "unknown policy {other:?}; use \"round_robin\", \"least_outstanding\" or \"hash\""
                ),
            ));
        }
    };
    for (field, name) in [(&u.hash_key, "hash_key"), (&u.hash_ring, "hash_ring")] {
        if let (Some(k), false) = (field, matches!(balance, Balance::Hash(..))) {
            return Err(errors.at(
                k.span(),
                format!("upstream[{i}].{name}"),
                format!("`{name}` applies only to `balance = \"hash\"`"),
            ));
        }
    }
    Ok(balance)
}

pub(super) fn hash_key(text: &str) -> Result<HashKey, String> {
    if text == "client_addr" {
        return Ok(HashKey::ClientAddr);
    }
    if let Some(name) = text.strip_prefix("header:") {
        return http::HeaderName::from_bytes(name.as_bytes())
            .map(HashKey::Header)
            .map_err(|_| format!("{name:?} is not a header field name"));
    }
    if let Some(name) = text.strip_prefix("cookie:") {
        if name.is_empty() || !weir_http::token::is_token(name) {
            return Err(format!("{name:?} is not a cookie name"));
        }
        return Ok(HashKey::Cookie(name.to_owned()));
    }
    Err(format!(
        "{text:?}: use \"header:<name>\", \"cookie:<name>\" or \"client_addr\""
    ))
}

fn health(
    i: usize,
    table: &Spanned<RawHealth>,
    errors: &Errors<'_>,
) -> Result<HealthCheck, ConfigError> {
    let h = table.get_ref();
    let key = |k: &str| format!("upstream[{i}].health.{k}");
    let path = h.path.get_ref();
    if !path.starts_with('/')
        || path.contains('#')
        || path.parse::<http::uri::PathAndQuery>().is_err()
    {
        // A fragment is no part of a request target (RFC 9112 §3.2).
        return Err(errors.at(
            h.path.span(),
            key("path"),
            format!(
                "{path:?}: give a path starting with '/' (a query may follow, a #fragment may not)"
            ),
        ));
    }
    let expect = match &h.expect_status {
        Some(e) => {
            statuses(e.get_ref()).map_err(|m| errors.at(e.span(), key("expect_status"), m))?
        }
        None => vec![(200, 399)],
    };
    positive(h.interval, &key("interval"), table.span(), errors)?;
    positive(h.timeout, &key("timeout"), table.span(), errors)?;
    Ok(HealthCheck {
        path: path.clone(),
        interval: h.interval,
        timeout: h.timeout,
        expect,
        rise: in_range(&h.rise, 1, 100, key("rise"), errors)? as u32,
        fall: in_range(&h.fall, 1, 100, key("fall"), errors)? as u32,
    })
}

/// `"200,204,300-399"` as inclusive ranges of statuses 200..=599: a
/// check's answer is a final response, never a 1xx (RFC 9110 §15.2).
fn statuses(text: &str) -> Result<Vec<(u16, u16)>, String> {
    let code = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (200..=599).contains(c))
            .ok_or_else(|| {
                format!(
                    "{:?} is not a status from 200 to 599 (1xx answers are never final)",
                    s.trim()
                )
            })
    };
    text.split(',')
        .map(|part| match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (code(lo)?, code(hi)?);
                if lo > hi {
                    return Err(format!("{lo}-{hi}: the range is empty"));
                }
                Ok((lo, hi))
            }
            None => code(part).map(|c| (c, c)),
        })
        .collect()
}

fn outlier(
    i: usize,
    o: &RawOutlier,
    span: std::ops::Range<usize>,
    errors: &Errors<'_>,
) -> Result<OutlierSettings, ConfigError> {
    let key = |k: &str| format!("upstream[{i}].outlier.{k}");
    positive(o.base_ejection, &key("base_ejection"), span.clone(), errors)?;
    if o.max_ejection < o.base_ejection {
        return Err(errors.at(
            span,
            key("max_ejection"),
            "must be at least `base_ejection`",
        ));
    }
    Ok(OutlierSettings {
        consecutive_failures: in_range(
            &o.consecutive_failures,
            0,
            1000,
            key("consecutive_failures"),
            errors,
        )? as u32,
        base_ejection: o.base_ejection,
        max_ejection: o.max_ejection,
        max_ejected_percent: in_range(
            &o.max_ejected_percent,
            0,
            100,
            key("max_ejected_percent"),
            errors,
        )? as u32,
        failure_statuses: match &o.failure_statuses {
            Some(f) => statuses(f.get_ref())
                .map_err(|m| errors.at(f.span(), key("failure_statuses"), m))?,
            None => vec![(500, 599)],
        },
    })
}

fn retry(i: usize, r: &RawRetry, errors: &Errors<'_>) -> Result<RetrySettings, ConfigError> {
    let key = |k: &str| format!("upstream[{i}].retry.{k}");
    Ok(RetrySettings {
        attempts: in_range(&r.attempts, 1, MAX_ATTEMPTS, key("attempts"), errors)? as u32,
        body_bytes: in_range(
            &r.retry_body_bytes,
            0,
            MAX_RETRY_BODY_BYTES,
            key("retry_body_bytes"),
            errors,
        )? as u64,
        budget_percent: in_range(&r.budget_percent, 0, 100, key("budget_percent"), errors)? as u32,
        min_per_second: in_range(
            &r.min_retries_per_second,
            0,
            100_000,
            key("min_retries_per_second"),
            errors,
        )? as u32,
    })
}

fn in_range(
    v: &Spanned<i64>,
    min: i64,
    max: i64,
    key: String,
    errors: &Errors<'_>,
) -> Result<i64, ConfigError> {
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

/// Durations carry no span of their own: an error points at `span`, the table.
fn positive(
    d: Duration,
    key: &str,
    span: std::ops::Range<usize>,
    errors: &Errors<'_>,
) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(errors.at(span, key, "must be longer than 0 s"));
    }
    Ok(())
}

/// Whether two URLs name one server: the same host (an IP address
/// compared as an address, so `[::1]` is `[0:0::1]` and
/// `[::ffff:127.0.0.1]` is `127.0.0.1`; a name without regard to case or
/// a final dot) and port (80 or 443 when not written).
fn same_server(a: &UpstreamUrl, b: &UpstreamUrl) -> bool {
    let key = |u: &UpstreamUrl| {
        let host = u.authority.host();
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let host = bare.parse::<std::net::IpAddr>().map_or_else(
            |_| bare.trim_end_matches('.').to_ascii_lowercase(),
            |ip| ip.to_canonical().to_string(),
        );
        let default = if u.scheme == http::uri::Scheme::HTTPS {
            443
        } else {
            80
        };
        (host, u.authority.port_u16().unwrap_or(default))
    };
    key(a) == key(b)
}

fn parse_url(text: &str) -> Result<UpstreamUrl, String> {
    // The http crate drops a fragment without a word; refuse it instead.
    if text.contains('#') {
        return Err(format!(
            "{text:?}: an upstream URL cannot carry a fragment ('#')"
        ));
    }
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => http::uri::Scheme::HTTP,
        Some("https") => http::uri::Scheme::HTTPS,
        Some(other) => {
            return Err(format!(
                "scheme {other:?} is not supported for upstreams; use http:// or https://"
            ));
        }
        None => {
            return Err(format!(
                "{text:?} has no scheme; write it like \"http://127.0.0.1:3000\""
            ));
        }
    };
    let Some(authority) = uri.authority().cloned() else {
        return Err(format!("{text:?} has no host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "{text:?}: user info in upstream URLs is not supported"
        ));
    }
    if let Some(port) = host::port(authority.as_str()) {
        match port.parse::<u16>() {
            Ok(0) => return Err(format!("{text:?}: port 0 is not a port to connect to")),
            Ok(_) => {}
            Err(_) => {
                return Err(format!(
                    "{text:?}: port {port:?} is not a number from 1 to 65535"
                ));
            }
        }
    }
    if uri.query().is_some() {
        return Err(format!("{text:?}: an upstream URL cannot carry a query"));
    }
    let host = authority.host();
    let last_label = host.trim_end_matches('.').rsplit('.').next().unwrap_or("");
    let numeric = !last_label.is_empty()
        && (last_label.bytes().all(|b| b.is_ascii_digit())
            || last_label.to_ascii_lowercase().starts_with("0x"));
    if !host.starts_with('[') && numeric && host.parse::<std::net::Ipv4Addr>().is_err() {
        // No top-level domain is numeric (RFC 3696 §2), so this is an
        // IPv4 address in a short, octal or hex form (`127.1`,
        // `2130706433`, `0x7f000001`) that resolvers accept: one server
        // could hide under several spellings.
        return Err(format!(
            "{text:?}: write an IPv4 address as four decimal numbers (like 127.0.0.1)"
        ));
    }
    let base_path = uri.path().trim_end_matches('/').to_owned();
    Ok(UpstreamUrl {
        scheme,
        authority,
        base_path,
    })
}

#[cfg(test)]
#[path = "upstream_tests.rs"]
mod tests;
