//! From TOML text to a validated [`Config`], with errors that point at the
//! file, line, column and key.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::Path;

use ipnet::IpNet;
use weir_http::token::is_token;

// The proxy's request phases use it as `config::strip_port`.
pub use weir_http::host::strip_port;

use super::cache::cache_settings;
use super::error::{ConfigError, Errors};
use super::raw::{RawAdmin, RawConfig};
use super::side::{route_body_log, route_mirror};
use super::tls::listener_tls;
use super::transforms::route_transforms;
use super::types::{
    AccessLogTarget, AdminSettings, ClientSettings, Config, ListenerSpec, MAX_WORKERS, RouteSpec,
    ServerSettings, default_workers,
};
use super::upstream::upstream;

/// `[server] access_log`: `"stderr"`, `"off"`, or a file path relative to
/// `base_dir`. A path is refused when serve could not open it for sure (a
/// directory, a missing parent directory), and so is anything that looks
/// like a keyword but is not one (`"OFF"`, `" off"`), which would make a
/// file of that name.
fn access_log(value: &str, base_dir: &Path) -> Result<AccessLogTarget, String> {
    match value {
        "stderr" => return Ok(AccessLogTarget::Stderr),
        "off" => return Ok(AccessLogTarget::Off),
        "" => return Err("empty: use \"stderr\", \"off\" or a file path".to_owned()),
        _ => {}
    }
    let word = value.trim();
    if word.eq_ignore_ascii_case("stderr") || word.eq_ignore_ascii_case("off") {
        return Err(format!(
            "{value:?}: write \"{}\" exactly (it would be taken as a file name)",
            word.to_ascii_lowercase()
        ));
    }
    if word != value || value.chars().any(char::is_control) {
        return Err(format!(
            "{value:?}: a file path with surrounding white space or control characters"
        ));
    }
    let path = base_dir.join(value);
    if path.is_dir() {
        return Err(format!("{} is a directory", path.display()));
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => Err(format!(
            "the directory of {} does not exist",
            path.display()
        )),
        _ => Ok(AccessLogTarget::File(path)),
    }
}

/// The listener used when the file declares none.
const DEFAULT_LISTENER: &str = "127.0.0.1:8080";

/// `bytes` as text, or an error pointing at the first byte that is not UTF-8.
pub(super) fn utf8<'a>(bytes: &'a [u8], label: &str) -> Result<&'a str, ConfigError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let valid = &bytes[..e.valid_up_to()];
        // The prefix is valid UTF-8 by construction.
        let text = std::str::from_utf8(valid).unwrap_or_default();
        let errors = Errors { text, label };
        errors.at(
            text.len()..text.len(),
            "",
            format!(
                "the file is not valid UTF-8 (byte 0x{:02x} at offset {}); save it as UTF-8",
                bytes[e.valid_up_to()],
                e.valid_up_to()
            ),
        )
    })
}

pub(super) fn parse(text: &str, label: &str, base_dir: &Path) -> Result<Config, ConfigError> {
    let errors = Errors { text, label };
    let raw = deserialize(text, &errors)?;

    let server = ServerSettings {
        header_read_timeout: raw.server.header_read_timeout,
        body_idle_timeout: raw.server.body_idle_timeout,
        shutdown_grace: raw.server.shutdown_grace,
        trusted_proxies: raw
            .server
            .trusted_proxies
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                parse_net(entry.get_ref()).ok_or_else(|| {
                    errors.at(
                        entry.span(),
                        format!("server.trusted_proxies[{i}]"),
                        format!("{:?} is not an IP address or CIDR block", entry.get_ref()),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        via_pseudonym: {
            let via = &raw.server.via_pseudonym;
            if !is_token(via.get_ref()) {
                return Err(errors.at(
                    via.span(),
                    "server.via_pseudonym",
                    format!(
                        "{:?} is not an HTTP token (RFC 9110 §5.6.2): letters, digits and !#$%&'*+-.^_`|~ only",
                        via.get_ref()
                    ),
                ));
            }
            via.get_ref().clone()
        },
        workers: match &raw.server.workers {
            None => default_workers(),
            Some(w) => usize::try_from(*w.get_ref())
                .ok()
                .filter(|n| (1..=MAX_WORKERS).contains(n))
                .ok_or_else(|| {
                    errors.at(
                        w.span(),
                        "server.workers",
                        format!(
                            "{} worker threads: must be 1 to {MAX_WORKERS} (leave it out for one per CPU)",
                            w.get_ref()
                        ),
                    )
                })?,
        },
        access_log: match &raw.server.access_log {
            None => AccessLogTarget::Stderr,
            Some(a) => access_log(a.get_ref(), base_dir)
                .map_err(|why| errors.at(a.span(), "server.access_log", why))?,
        },
        upgrade_idle_timeout: raw.server.upgrade_idle_timeout,
        limits: super::limits::request_limits(
            &super::limits::RawLimits {
                max_request_head_bytes: raw.server.max_request_head_bytes.as_ref(),
                max_request_headers: raw.server.max_request_headers.as_ref(),
                max_uri_bytes: raw.server.max_uri_bytes.as_ref(),
                max_request_body_bytes: raw.server.max_request_body_bytes.as_ref(),
                request_body_min_rate: raw.server.request_body_min_rate.as_ref(),
                request_body_rate_grace: raw.server.request_body_rate_grace,
                max_connections: raw.server.max_connections.as_ref(),
            },
            &errors,
        )?,
    };

    let listeners = if raw.listeners.is_empty() {
        vec![ListenerSpec {
            address: DEFAULT_LISTENER
                .parse::<SocketAddr>()
                .map_err(|e| errors.at(0..0, "listener", format!("bad default listener: {e}")))?,
            tls: None,
        }]
    } else {
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(raw.listeners.len());
        for (i, l) in raw.listeners.iter().enumerate() {
            if !seen.insert(*l.address.get_ref()) {
                return Err(errors.at(
                    l.address.span(),
                    format!("listener[{i}].address"),
                    format!("{} is already a listener", l.address.get_ref()),
                ));
            }
            let tls = match &l.tls {
                Some(tls) => Some(listener_tls(i, tls, base_dir, &errors)?),
                None => None,
            };
            out.push(ListenerSpec {
                address: *l.address.get_ref(),
                tls,
            });
        }
        out
    };

    let client = ClientSettings {
        connect_timeout: raw.client.connect_timeout,
        response_header_timeout: raw.client.response_header_timeout,
        pool_idle_timeout: raw.client.pool_idle_timeout,
        pool_max_idle_per_host: raw.client.pool_max_idle_per_host,
    };

    let mut upstreams = Vec::with_capacity(raw.upstreams.len());
    let mut names = HashSet::new();
    for (i, up) in raw.upstreams.iter().enumerate() {
        let upstream = upstream(i, up, base_dir, &errors)?;
        if !names.insert(upstream.name.clone()) {
            return Err(errors.at(
                up.get_ref().name.span(),
                format!("upstream[{i}].name"),
                format!("upstream {:?} is declared twice", upstream.name),
            ));
        }
        if let Some(why) = super::upstream::tls_conflict(&upstream, &upstreams) {
            let span = up.get_ref().tls.as_ref().map_or(up.span(), |t| t.span());
            return Err(errors.at(span, format!("upstream[{i}].tls"), why));
        }
        upstreams.push(upstream);
    }

    if raw.routes.is_empty() {
        return Err(errors.at(
            0..0,
            "route",
            "no [[route]] declared: Weir would answer every request with 404",
        ));
    }
    // Before the routes: a rate limit's scope needs its store.
    let fleet = super::fleet::fleet(raw.fleet.as_ref(), base_dir, &errors)?;
    let redis = super::redis::redis(raw.redis.as_ref(), &errors)?;
    let stores = super::limits::SharedStores {
        fleet: fleet.is_some(),
        redis: redis.is_some(),
    };
    let mut routes = Vec::with_capacity(raw.routes.len());
    let mut seen = HashSet::new();
    for (i, route) in raw.routes.iter().enumerate() {
        let r = route.get_ref();
        let prefix = r.path_prefix.get_ref();
        check_path_prefix(prefix)
            .map_err(|m| errors.at(r.path_prefix.span(), format!("route[{i}].path_prefix"), m))?;
        let host = match &r.host {
            Some(h) => Some(
                route_host(h.get_ref())
                    .map_err(|m| errors.at(h.span(), format!("route[{i}].host"), m))?,
            ),
            None => None,
        };
        let name = r.upstream.get_ref();
        let Some(index) = upstreams.iter().position(|u| &u.name == name) else {
            let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
            return Err(errors.at(
                r.upstream.span(),
                format!("route[{i}].upstream"),
                format!(
                    "no upstream named {name:?} (declared: {})",
                    known.join(", ")
                ),
            ));
        };
        // Trailing slashes are not significant for segment matching.
        let path_prefix = if prefix.len() > 1 {
            prefix.trim_end_matches('/').to_owned()
        } else {
            prefix.clone()
        };
        let path_prefix = if path_prefix.is_empty() {
            "/".to_owned()
        } else {
            path_prefix
        };
        if !seen.insert((host.clone(), path_prefix.clone())) {
            return Err(errors.at(
                route.span(),
                format!("route[{i}]"),
                format!(
                    "a route for host {} and path prefix {path_prefix:?} is already declared",
                    host.as_deref().unwrap_or("(any)")
                ),
            ));
        }
        let transforms = route_transforms(i, r, &errors)?;
        let mirror = route_mirror(i, r, &upstreams, &errors)?;
        let body_log = route_body_log(i, r, &errors)?;
        let ssr = super::ssr::route_ssr(i, r.ssr.as_ref(), &upstreams, index, base_dir, &errors)?;
        if r.cache
            && let Some(raw) = &r.ssr
        {
            return Err(errors.at(
                raw.span(),
                format!("route[{i}].ssr"),
                "a route with `cache = true` cannot compose templates: a composed page is \
                 not stored; cache the fragments with `cache_fragments = true` instead",
            ));
        }
        let upgrade = route_upgrade(i, &r.upgrade, &errors)?;
        let mut limits = super::limits::route_limits(
            i,
            r.max_request_body_bytes.as_ref(),
            r.max_concurrent_requests.as_ref(),
            r.rate_limit.as_ref(),
            stores,
            &errors,
        )?;
        limits.max_body_bytes = limits.max_body_bytes.or(server.limits.max_body_bytes);
        routes.push(RouteSpec {
            host,
            path_prefix,
            strip_prefix: r.strip_prefix,
            upstream: index,
            host_header: r.host_header,
            transforms,
            mirror,
            body_log,
            cache: r.cache,
            ssr,
            upgrade,
            limits,
        });
    }

    let admin = admin(&raw.admin, &listeners, &errors)?;
    let cache = cache_settings(&raw.cache, &errors)?;

    Ok(Config {
        source: label.to_owned(),
        cache,
        server,
        listeners,
        client,
        upstreams,
        routes,
        admin,
        fleet,
        redis,
    })
}

/// A route's `upgrade` list: HTTP tokens (RFC 9110 §7.8: a protocol name
/// is a token, optionally `/version`), lower-cased, each listed once.
fn route_upgrade(
    i: usize,
    raw: &[toml::Spanned<String>],
    errors: &Errors<'_>,
) -> Result<Vec<String>, ConfigError> {
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for (j, entry) in raw.iter().enumerate() {
        let text = entry.get_ref();
        let key = || format!("route[{i}].upgrade[{j}]");
        let valid =
            !text.is_empty() && text.split('/').count() <= 2 && text.split('/').all(is_token);
        if !valid {
            return Err(errors.at(
                entry.span(),
                key(),
                format!("{text:?} is not an Upgrade protocol name (an HTTP token, such as \"websocket\")"),
            ));
        }
        let lower = text.to_ascii_lowercase();
        if lower == "h2c" || lower.starts_with("h2c/") {
            return Err(errors.at(
                entry.span(),
                key(),
                "h2c cannot be tunnelled: its HTTP2-Settings field is for one hop only \
                 (RFC 9110 §7.6.1), and Weir serves HTTP/2 to clients itself",
            ));
        }
        if out.contains(&lower) {
            return Err(errors.at(entry.span(), key(), format!("{text:?} is listed twice")));
        }
        out.push(lower);
    }
    Ok(out)
}

/// `[admin]`, checked: loopback only unless `allow_public`, and not one of
/// the proxy's own listeners.
fn admin(
    raw: &RawAdmin,
    listeners: &[ListenerSpec],
    errors: &Errors<'_>,
) -> Result<Option<AdminSettings>, ConfigError> {
    if !raw.enabled {
        return Ok(None);
    }
    let address = *raw.address.get_ref();
    if !address.ip().to_canonical().is_loopback() && !raw.allow_public {
        return Err(errors.at(
            raw.address.span(),
            "admin.address",
            format!(
                "{address} is not a loopback address: the admin listener serves metrics that \
                 name every route and upstream, and takes no credentials, so by default it is \
                 reachable from this host only. Bind it to 127.0.0.1 or [::1], or add \
                 `allow_public = true` under [admin] to serve it on {address} on purpose"
            ),
        ));
    }
    if address.port() != 0 && listeners.iter().any(|l| l.address == address) {
        return Err(errors.at(
            raw.address.span(),
            "admin.address",
            format!("{address} is already a [[listener]]; give the admin listener its own port"),
        ));
    }
    Ok(Some(AdminSettings { address }))
}

fn deserialize(text: &str, errors: &Errors<'_>) -> Result<RawConfig, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(&e, String::new(), errors))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        // `Spanned` wrappers show up as a private segment of the path.
        let key = e
            .path()
            .to_string()
            .replace(".$__serde_spanned_private_value", "")
            .replace("$__serde_spanned_private_value.", "");
        toml_error(e.inner(), key, errors)
    })
}

fn toml_error(e: &toml::de::Error, key: String, errors: &Errors<'_>) -> ConfigError {
    let key = if key == "." { String::new() } else { key };
    let mut message = e.message().trim_end().to_owned();
    // `[listener]` where `[[listener]]` was meant.
    if let Some(table) = ["listener", "upstream", "route"]
        .into_iter()
        .find(|t| *t == key)
        && message.contains("expected a sequence")
    {
        message.push_str(&format!(
            "; declare each one under its own [[{table}]] header"
        ));
    }
    let span = e.span().unwrap_or(0..0);
    if message == "duplicate key"
        && let Some((name, table)) = duplicated(errors.text, span.start)
    {
        let table = table.map_or(String::new(), |t| format!(" in {t}"));
        message = format!("`{name}` is set twice{table}; keep one");
    }
    errors.at(span, key, message)
}

/// The key written at byte `at` of `text` (a duplicate the TOML parser
/// pointed at), and the header of the table it is in, if any.
fn duplicated(text: &str, at: usize) -> Option<(&str, Option<&str>)> {
    let rest = text.get(at..)?;
    let end = rest.find(['=', ']', '\n', '#']).unwrap_or(rest.len());
    let name = rest[..end].trim().trim_start_matches('[').trim();
    if name.is_empty() {
        return None;
    }
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.split('#').next().unwrap_or(l).trim());
    Some((name, table))
}

/// Why `prefix` can never match a request, if it cannot.
///
/// The router matches the raw path after dot-segment removal
/// ([`crate::path::normalize_path`]), so a prefix holding a `.` or `..`
/// segment (also written `%2e`) matches nothing. An encoded slash or a
/// backslash is not a segment boundary to the router but may be one to the
/// upstream, so the route would not cover what it seems to.
fn check_path_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') || prefix.contains(['?', '#']) {
        return Err(format!(
            "{prefix:?} must start with '/' and hold no query or fragment"
        ));
    }
    let lower = prefix.to_ascii_lowercase();
    if lower
        .split('/')
        .map(|seg| seg.replace("%2e", "."))
        .any(|seg| seg == "." || seg == "..")
    {
        return Err(format!(
            "{prefix:?} holds a '.' or '..' segment (perhaps written %2e); request paths are matched after those are removed, so this prefix could never match; write the path it resolves to"
        ));
    }
    if prefix.contains('\\') || lower.contains("%2f") || lower.contains("%5c") {
        return Err(format!(
            "{prefix:?} holds a backslash or an encoded slash (%2F, %5C); the router splits paths only at '/', so write segments with plain '/'"
        ));
    }
    Ok(())
}

/// A route's `host` as matched: lower-case, without port or trailing dot.
///
/// Letters, digits, `-`, `_` and `.` only, or a bracketed IPv6 literal.
fn route_host(text: &str) -> Result<String, String> {
    let bad = |why: &str| format!("{text:?} is not a host name: {why}");
    let lower = text.to_ascii_lowercase();
    if lower.is_empty() {
        return Err(bad("it is empty"));
    }
    if lower.contains('@') {
        return Err(bad("user info ('user@') is not part of a host"));
    }
    if lower.parse::<http::uri::Authority>().is_err() {
        return Err(bad("write it like \"example.com\" or \"[::1]\""));
    }
    let host = strip_port(&lower);
    if let Some(inner) = host.strip_prefix('[') {
        return match inner.strip_suffix(']').map(str::parse::<Ipv6Addr>) {
            Some(Ok(_)) => Ok(host.to_owned()),
            _ => Err(bad("not a valid IPv6 literal")),
        };
    }
    // `example.com.` is the same (fully qualified) name as `example.com`.
    let host = host.strip_suffix('.').unwrap_or(host);
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(*c)))
    {
        return Err(bad(&format!(
            "{c:?} is not allowed; use letters, digits, '-', '_' and '.' only"
        )));
    }
    if host.split('.').any(str::is_empty) {
        return Err(bad("it has an empty label"));
    }
    Ok(host.to_owned())
}

fn parse_net(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}
