//! From TOML text to a validated [`Config`], with errors that point at the
//! file, line, column and key.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::ops::Range;
use std::path::Path;

use http::Uri;
use ipnet::IpNet;
use toml::Spanned;
use weir_http::host;
use weir_http::token::is_token;

// The proxy's request phases use it as `config::strip_port`.
pub use weir_http::host::strip_port;

use super::cache::cache_settings;
use super::raw::{RawAdmin, RawConfig, RawUpstream};
use super::side::{route_body_log, route_mirror};
use super::transforms::route_transforms;
use super::{
    AdminSettings, ClientSettings, Config, ConfigError, MAX_WORKERS, RouteSpec, ServerSettings,
    Upstream, UpstreamTarget, UpstreamUrl, default_workers,
};

/// The listener used when the file declares none.
const DEFAULT_LISTENER: &str = "127.0.0.1:8080";

pub(super) struct Errors<'a> {
    text: &'a str,
    label: &'a str,
}

impl Errors<'_> {
    pub(super) fn at(
        &self,
        span: Range<usize>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = line_col(self.text, span.start);
        ConfigError::Invalid {
            file: self.label.to_owned(),
            line,
            column,
            key: key.into(),
            message: message.into(),
        }
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

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
    };

    let listeners = if raw.listeners.is_empty() {
        vec![
            DEFAULT_LISTENER
                .parse::<SocketAddr>()
                .map_err(|e| errors.at(0..0, "listener", format!("bad default listener: {e}")))?,
        ]
    } else {
        let mut seen = HashSet::new();
        for (i, l) in raw.listeners.iter().enumerate() {
            if !seen.insert(*l.address.get_ref()) {
                return Err(errors.at(
                    l.address.span(),
                    format!("listener[{i}].address"),
                    format!("{} is already a listener", l.address.get_ref()),
                ));
            }
        }
        raw.listeners.iter().map(|l| *l.address.get_ref()).collect()
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
        upstreams.push(upstream);
    }

    if raw.routes.is_empty() {
        return Err(errors.at(
            0..0,
            "route",
            "no [[route]] declared: Weir would answer every request with 404",
        ));
    }
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
    })
}

/// `[admin]`, checked: loopback only unless `allow_public`, and not one of
/// the proxy's own listeners.
fn admin(
    raw: &RawAdmin,
    listeners: &[SocketAddr],
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
    if address.port() != 0 && listeners.contains(&address) {
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
    errors.at(e.span().unwrap_or(0..0), key, message)
}

fn upstream(
    i: usize,
    up: &Spanned<RawUpstream>,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<Upstream, ConfigError> {
    let u = up.get_ref();
    let name = u.name.get_ref();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(errors.at(
            u.name.span(),
            format!("upstream[{i}].name"),
            format!("{name:?}: use letters, digits, '-', '_' and '.' only"),
        ));
    }
    let target = match (&u.url, &u.origin) {
        (Some(url), None) => {
            if let Some(root) = &u.root {
                return Err(errors.at(
                    root.span(),
                    format!("upstream[{i}].root"),
                    "`root` applies only to `origin = \"embedded\"`",
                ));
            }
            UpstreamTarget::Url(
                parse_url(url.get_ref())
                    .map_err(|m| errors.at(url.span(), format!("upstream[{i}].url"), m))?,
            )
        }
        (None, Some(origin)) if origin.get_ref() == "embedded" => {
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
            UpstreamTarget::Embedded { root }
        }
        (None, Some(origin)) => {
            return Err(errors.at(
                origin.span(),
                format!("upstream[{i}].origin"),
                format!(
                    "unknown origin {:?}; the only one is \"embedded\"",
                    origin.get_ref()
                ),
            ));
        }
        (Some(_), Some(origin)) => {
            return Err(errors.at(
                origin.span(),
                format!("upstream[{i}].origin"),
                "give either `url` or `origin`, not both",
            ));
        }
        (None, None) => {
            return Err(errors.at(
                up.span(),
                format!("upstream[{i}]"),
                "missing `url` (e.g. \"http://127.0.0.1:3000\") or `origin = \"embedded\"`",
            ));
        }
    };
    Ok(Upstream {
        name: name.clone(),
        target,
    })
}

/// Why `prefix` can never match a request, if it cannot.
///
/// The router matches the raw path after dot-segment removal
/// ([`crate::route::normalize_path`]), so a prefix holding a `.` or `..`
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
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(format!(
                "scheme {other:?} is not supported for upstreams yet; use http://"
            ));
        }
        None => {
            return Err(format!(
                "{text:?} has no scheme; write it like \"http://127.0.0.1:3000\""
            ));
        }
    }
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
    let base_path = uri.path().trim_end_matches('/').to_owned();
    Ok(UpstreamUrl {
        scheme: http::uri::Scheme::HTTP,
        authority,
        base_path,
    })
}

fn parse_net(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match Config::parse(text, "test.toml", Path::new(".")) {
            Ok(_) => panic!("config was accepted:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    const OK: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n[[route]]\nupstream = \"app\"\n";

    #[test]
    fn minimal_config_is_valid_with_defaults() {
        let c = Config::parse(OK, "t", Path::new(".")).expect("valid");
        assert_eq!(
            c.listeners,
            vec!["127.0.0.1:8080".parse::<SocketAddr>().expect("addr")]
        );
        assert_eq!(c.routes[0].path_prefix, "/");
        assert_eq!(c.server.via_pseudonym, "weir");
        assert_eq!(c.client.pool_max_idle_per_host, 32);
        assert_eq!(
            c.admin.map(|a| a.address.to_string()).as_deref(),
            Some("127.0.0.1:9901")
        );
    }

    #[test]
    fn workers_default_to_the_cpus_and_take_1_to_1024() {
        let c = Config::parse(OK, "t", Path::new(".")).expect("valid");
        assert_eq!(c.server.workers, default_workers());
        assert!(c.server.workers >= 1);
        for n in [1, 3, 1024] {
            let c = Config::parse(
                &format!("[server]\nworkers = {n}\n{OK}"),
                "t",
                Path::new("."),
            )
            .expect("valid");
            assert_eq!(c.server.workers, n);
        }
        for bad in ["0", "-1", "1025", "\"2\"", "1.5"] {
            let e = err(&format!("[server]\nworkers = {bad}\n{OK}"));
            assert!(
                e.starts_with("test.toml:2:") && e.contains("server.workers"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn admin_on_a_public_address_needs_allow_public() {
        for addr in ["0.0.0.0:9901", "192.0.2.7:9901", "[::]:9901"] {
            let e = err(&format!("{OK}\n[admin]\naddress = \"{addr}\"\n"));
            assert!(
                e.starts_with("test.toml:9:")
                    && e.contains("admin.address")
                    && e.contains("not a loopback address")
                    && e.contains("allow_public = true"),
                "{addr}: {e}"
            );
            let c = Config::parse(
                &format!("{OK}\n[admin]\naddress = \"{addr}\"\nallow_public = true\n"),
                "t",
                Path::new("."),
            )
            .expect(addr);
            assert_eq!(c.admin.expect("enabled").address.to_string(), addr);
        }
        for addr in [
            "127.0.0.1:0",
            "127.3.4.5:9",
            "[::1]:9901",
            "[::ffff:127.0.0.1]:9",
        ] {
            Config::parse(
                &format!("{OK}\n[admin]\naddress = \"{addr}\"\n"),
                "t",
                Path::new("."),
            )
            .expect(addr);
        }
    }

    #[test]
    fn admin_bad_address_or_key_names_the_key() {
        let e = err(&format!("{OK}\n[admin]\naddress = \"localhost:9901\"\n"));
        assert!(
            e.starts_with("test.toml:9:")
                && e.contains("admin.address")
                && e.contains("127.0.0.1:8080"),
            "{e}"
        );
        let e = err(&format!("{OK}\n[admin]\nenabled = \"yes\"\n"));
        assert!(
            e.starts_with("test.toml:9:") && e.contains("admin.enabled"),
            "{e}"
        );
        let e = err(&format!("{OK}\n[admin]\nadress = \"127.0.0.1:1\"\n"));
        assert!(e.starts_with("test.toml:9:") && e.contains("adress"), "{e}");
        let e = err(&format!(
            "[[listener]]\naddress = \"127.0.0.1:9000\"\n{OK}\n[admin]\naddress = \"127.0.0.1:9000\"\n"
        ));
        assert!(
            e.contains("admin.address") && e.contains("already a [[listener]]"),
            "{e}"
        );
    }

    #[test]
    fn admin_can_be_disabled() {
        let c = Config::parse(
            &format!("{OK}\n[admin]\nenabled = false\naddress = \"0.0.0.0:1\"\n"),
            "t",
            Path::new("."),
        )
        .expect("valid");
        assert!(c.admin.is_none());
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let e = err(
            "[client]\nconect_timeout = \"1s\"\n[[upstream]]\nname=\"a\"\nurl=\"http://x\"\n[[route]]\nupstream=\"a\"\n",
        );
        assert!(e.starts_with("test.toml:2:"), "{e}");
        assert!(e.contains("conect_timeout"), "{e}");
    }

    #[test]
    fn bad_duration_names_the_key() {
        let e = err(
            "[client]\nconnect_timeout = \"5 parsecs\"\n[[upstream]]\nname=\"a\"\nurl=\"http://x\"\n[[route]]\nupstream=\"a\"\n",
        );
        assert!(e.starts_with("test.toml:2:"), "{e}");
        assert!(e.contains("client.connect_timeout"), "{e}");
    }

    #[test]
    fn dangling_upstream_reference_points_at_the_route() {
        let e = err(&format!(
            "{OK}\n[[route]]\npath_prefix = \"/x\"\nupstream = \"nope\"\n"
        ));
        assert!(e.starts_with("test.toml:10:"), "{e}");
        assert!(e.contains("route[1].upstream"), "{e}");
        assert!(e.contains("declared: app"), "{e}");
    }

    #[test]
    fn https_upstream_is_refused_with_a_reason() {
        let e = err("[[upstream]]\nname=\"a\"\nurl=\"https://x\"\n[[route]]\nupstream=\"a\"\n");
        assert!(
            e.contains("upstream[0].url") && e.contains("not supported"),
            "{e}"
        );
    }

    #[test]
    fn syntax_error_has_a_line() {
        let e = err("[[upstream]\nname = 1\n");
        assert!(e.starts_with("test.toml:1:"), "{e}");
        assert!(!e.contains("key"), "{e}");
    }

    #[test]
    fn single_bracket_table_gets_a_hint() {
        let e = err("[listener]\naddress = \"127.0.0.1:1\"\n");
        assert!(e.contains("[[listener]]"), "{e}");
    }

    #[test]
    fn listener_address_must_be_an_ip_and_unique() {
        let e = err(&format!("[[listener]]\naddress = \"localhost:80\"\n{OK}"));
        assert!(
            e.contains("listener[0].address") && e.contains("127.0.0.1:8080"),
            "{e}"
        );
        let e = err(&format!(
            "[[listener]]\naddress = \"127.0.0.1:9\"\n[[listener]]\naddress = \"127.0.0.1:9\"\n{OK}"
        ));
        assert!(
            e.starts_with("test.toml:4:") && e.contains("already a listener"),
            "{e}"
        );
    }

    fn with_url(url: &str) -> String {
        format!("[[upstream]]\nname=\"a\"\nurl=\"{url}\"\n[[route]]\nupstream=\"a\"\n")
    }

    fn with_route(line: &str) -> String {
        format!("{OK}\n[[route]]\nupstream = \"app\"\n{line}\n")
    }

    #[test]
    fn duration_longer_than_seven_days_is_rejected_naming_the_key() {
        let e = err(&format!(
            "[server]\nbody_idle_timeout = \"500000000000y\"\n{OK}"
        ));
        assert!(e.starts_with("test.toml:2:"), "{e}");
        assert!(e.contains("server.body_idle_timeout"), "{e}");
        assert!(
            e.contains("duration \"500000000000y\" is longer than the maximum of 7 days"),
            "{e}"
        );
        let e = err(&format!("[client]\nconnect_timeout = \"7days 1ns\"\n{OK}"));
        assert!(
            e.contains("client.connect_timeout") && e.contains("maximum of 7 days"),
            "{e}"
        );
    }

    #[test]
    fn seven_days_is_the_longest_accepted_duration() {
        let c = Config::parse(
            &format!("[client]\npool_idle_timeout = \"7d\"\n{OK}"),
            "t",
            Path::new("."),
        )
        .expect("valid");
        assert_eq!(c.client.pool_idle_timeout, super::super::duration::MAX);
    }

    #[test]
    fn upstream_url_port_out_of_range_or_zero_is_rejected() {
        for url in [
            "http://127.0.0.1:99999",
            "http://127.0.0.1:65536",
            "http://127.0.0.1:0",
            "http://127.0.0.1:",
            "http://[::1]:70000",
        ] {
            let e = err(&with_url(url));
            assert!(
                e.starts_with("test.toml:3:")
                    && e.contains("upstream[0].url")
                    && e.contains("port"),
                "{url}: {e}"
            );
        }
        for url in ["http://127.0.0.1:65535", "http://[::1]:1", "http://[::1]"] {
            Config::parse(&with_url(url), "t", Path::new(".")).expect(url);
        }
    }

    #[test]
    fn upstream_url_with_fragment_is_rejected() {
        for url in ["http://x/#frag", "http://x#", "http://x/base#a"] {
            let e = err(&with_url(url));
            assert!(
                e.contains("upstream[0].url") && e.contains("fragment"),
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn path_prefix_with_dot_segments_is_rejected() {
        for prefix in [
            "/a/../b",
            "/a/./b",
            "/..",
            "/a/.",
            "/a/%2e%2E/b",
            "/a/%2E",
            "/a/.%2e/",
        ] {
            let e = err(&with_route(&format!("path_prefix = \"{prefix}\"")));
            assert!(
                e.starts_with("test.toml:10:")
                    && e.contains("route[1].path_prefix")
                    && e.contains("could never match"),
                "{prefix}: {e}"
            );
        }
        // Dots inside a segment are ordinary characters.
        for prefix in ["/a.b", "/...", "/.well-known", "/v1..2"] {
            Config::parse(
                &with_route(&format!("path_prefix = \"{prefix}\"")),
                "t",
                Path::new("."),
            )
            .expect(prefix);
        }
    }

    #[test]
    fn path_prefix_with_encoded_slash_or_backslash_is_rejected() {
        for prefix in ["/a%2fb", "/a%2Fb", "/a%5cb", "/a%5Cb", r"/a\\b"] {
            let e = err(&with_route(&format!("path_prefix = \"{prefix}\"")));
            assert!(
                e.contains("route[1].path_prefix") && e.contains("slash"),
                "{prefix}: {e}"
            );
        }
    }

    #[test]
    fn route_host_trailing_dot_is_stripped() {
        let c = Config::parse(&with_route("host = \"Example.COM.\""), "t", Path::new("."))
            .expect("valid");
        assert_eq!(c.routes[1].host.as_deref(), Some("example.com"));
        let c = Config::parse(
            &with_route("host = \"example.com.:8080\""),
            "t",
            Path::new("."),
        )
        .expect("valid");
        assert_eq!(c.routes[1].host.as_deref(), Some("example.com"));
        // The same host with and without the dot is a duplicate route.
        let e = err(&format!(
            "{}\n[[route]]\nupstream = \"app\"\nhost = \"example.com\"\n",
            with_route("host = \"example.com.\"")
        ));
        assert!(e.contains("already declared"), "{e}");
    }

    #[test]
    fn route_host_with_space_comma_userinfo_or_slash_is_rejected() {
        for host in [
            "a b",
            "a,b",
            "user@a",
            "a/b",
            "",
            ".",
            "a..b",
            "example.com..",
            "[::1",
            "[nope]",
            "a;b",
            "caf\u{e9}.example",
        ] {
            let e = err(&with_route(&format!("host = \"{host}\"")));
            assert!(
                e.starts_with("test.toml:10:")
                    && e.contains("route[1].host")
                    && e.contains("is not a host name"),
                "{host:?}: {e}"
            );
        }
        for (host, want) in [
            ("127.0.0.1", "127.0.0.1"),
            ("[::1]:80", "[::1]"),
            ("my_host-1.example", "my_host-1.example"),
        ] {
            let c = Config::parse(
                &with_route(&format!("host = \"{host}\"")),
                "t",
                Path::new("."),
            )
            .expect(host);
            assert_eq!(c.routes[1].host.as_deref(), Some(want));
        }
    }

    #[test]
    fn format_duration_prints_one_unit_that_parses_back() {
        use std::time::Duration;
        for (d, want) in [
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(600), "600s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_micros(1500), "1500us"),
            (Duration::from_nanos(7), "7ns"),
            (super::super::duration::MAX, "604800s"),
        ] {
            let text = crate::config::format_duration(d);
            assert_eq!(text, want);
            assert_eq!(humantime::parse_duration(&text).expect(want), d);
        }
    }

    /// A scratch directory for one test, removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("weir-config-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create scratch dir");
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn from_file_refuses_directories_fifos_and_devices() {
        let dir = Scratch::new("not-a-file");
        let e = Config::from_file(&dir.0).expect_err("a directory");
        assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        #[cfg(unix)]
        {
            let dev_zero = Path::new("/dev/zero");
            if dev_zero.exists() {
                let e = Config::from_file(dev_zero).expect_err("/dev/zero");
                assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
            }
            let fifo = dir.0.join("fifo");
            let made = std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .is_ok_and(|s| s.success());
            if made {
                let e = Config::from_file(&fifo).expect_err("a FIFO");
                assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
                // A symlink is followed to what it names.
                let link = dir.0.join("link");
                std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
                let e = Config::from_file(&link).expect_err("a link to a FIFO");
                assert!(matches!(e, ConfigError::NotAFile { .. }), "{e}");
            }
        }
        let e = Config::from_file(&dir.0.join("missing.toml")).expect_err("missing");
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    }

    #[test]
    fn from_file_refuses_a_file_over_one_mib() {
        let dir = Scratch::new("too-large");
        let path = dir.0.join("big.toml");
        let mut text = OK.to_owned();
        text.push_str(&"#".repeat((1 << 20) - OK.len()));
        std::fs::write(&path, &text).expect("write");
        Config::from_file(&path).expect("exactly 1 MiB is read");
        text.push('\n');
        std::fs::write(&path, &text).expect("write");
        let e = Config::from_file(&path).expect_err("over 1 MiB");
        assert!(
            matches!(
                e,
                ConfigError::TooLarge {
                    limit_bytes: 1_048_576,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("1048576 bytes"), "{e}");
    }

    #[test]
    fn from_file_names_the_line_of_non_utf8_text() {
        let dir = Scratch::new("non-utf8");
        let path = dir.0.join("latin1.toml");
        let mut bytes = OK.as_bytes().to_vec();
        bytes.extend_from_slice(b"# caf\xe9\n");
        std::fs::write(&path, &bytes).expect("write");
        let e = Config::from_file(&path).expect_err("not UTF-8");
        let text = e.to_string();
        assert!(
            matches!(
                e,
                ConfigError::Invalid {
                    line: 7,
                    column: 6,
                    ..
                }
            ),
            "{text}"
        );
        assert!(
            text.contains("not valid UTF-8") && text.contains("0xe9"),
            "{text}"
        );
    }

    #[test]
    fn strip_port_keeps_ipv6_brackets() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("example.com"), "example.com");
    }
}
