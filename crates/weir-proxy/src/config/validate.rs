//! From TOML text to a validated [`Config`], with errors that point at the
//! file, line, column and key.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::Path;

use http::Uri;
use ipnet::IpNet;
use toml::Spanned;

use super::raw::{RawConfig, RawUpstream};
use super::{
    ClientSettings, Config, ConfigError, RouteSpec, ServerSettings, Upstream, UpstreamTarget,
    UpstreamUrl,
};

/// The listener used when the file declares none.
const DEFAULT_LISTENER: &str = "127.0.0.1:8080";

struct Errors<'a> {
    text: &'a str,
    label: &'a str,
}

impl Errors<'_> {
    fn at(
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
        if !prefix.starts_with('/') || prefix.contains(['?', '#']) {
            return Err(errors.at(
                r.path_prefix.span(),
                format!("route[{i}].path_prefix"),
                format!("{prefix:?} must start with '/' and hold no query or fragment"),
            ));
        }
        let host = match &r.host {
            Some(h) => {
                let lower = h.get_ref().to_ascii_lowercase();
                if lower.is_empty()
                    || lower.parse::<http::uri::Authority>().is_err()
                    || lower.contains(['/', '@'])
                {
                    return Err(errors.at(
                        h.span(),
                        format!("route[{i}].host"),
                        format!("{:?} is not a host name", h.get_ref()),
                    ));
                }
                Some(strip_port(&lower).to_owned())
            }
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
        routes.push(RouteSpec {
            host,
            path_prefix,
            strip_prefix: r.strip_prefix,
            upstream: index,
            host_header: r.host_header,
        });
    }

    Ok(Config {
        source: label.to_owned(),
        server,
        listeners,
        client,
        upstreams,
        routes,
    })
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

fn parse_url(text: &str) -> Result<UpstreamUrl, String> {
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

/// RFC 9110 §5.6.2 `token`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `host` without a trailing `:port` (IPv6 literals keep their brackets).
pub fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i)
            if !host[i..].contains(']') && host[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            &host[..i]
        }
        _ => host,
    }
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

    #[test]
    fn strip_port_keeps_ipv6_brackets() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("example.com"), "example.com");
    }
}
