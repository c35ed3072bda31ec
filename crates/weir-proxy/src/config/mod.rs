//! Weir's configuration: the TOML file, validated into the settings the
//! proxy runs with.
//!
//! [`Config::from_file`] and [`Config::parse`] read and validate; every
//! error in the text names the file, the line and column, and the key
//! ([`ConfigError::Invalid`]). The key reference lives in README.md.

mod cache;
mod duration;
mod error;
mod file;
mod fleet;
mod limits;
mod raw;
mod redis;
mod ring;
mod side;
mod ssr;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(test)]
mod tls_tests;
mod transforms;
mod types;
mod upstream;
mod upstream_tls;
mod validate;

use std::net::SocketAddr;
use std::path::Path;

pub use duration::format as format_duration;
pub use error::{ConfigError, MAX_CONFIG_BYTES};
use file::read_limited;
pub use fleet::{FleetDiscovery, FleetSettings, MIN_SECRET_BYTES};
pub use redis::RedisSettings;
pub use ring::RingHash;
pub use ssr::{DEFAULT_FORWARD_HEADERS, MAX_TEMPLATE_FILE_BYTES};
pub use tls::{MAX_PEM_BYTES, TlsCertificate, TlsSettings};
pub use types::*;
pub use upstream_tls::{ClientCert, UpstreamTls};
pub use validate::strip_port;

impl Config {
    /// Reads and validates the config file at `path`. Relative paths inside
    /// it (an embedded origin's `root`) are relative to the file's directory.
    ///
    /// # Errors
    /// [`ConfigError::Read`] if the file cannot be read,
    /// [`ConfigError::NotAFile`] if `path` (after following symlinks) is not
    /// a regular file, [`ConfigError::TooLarge`] if it is longer than
    /// [`MAX_CONFIG_BYTES`], [`ConfigError::Invalid`] for text that is not
    /// UTF-8, a syntax error, an unknown key, a bad value or a dangling
    /// reference.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let label = path.display().to_string();
        let bytes = read_limited(path, &label)?;
        let text = validate::utf8(&bytes, &label)?;
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Config::parse(text, &label, base)
    }

    /// Validates config `text`. `label` names it in errors; `base_dir`
    /// anchors relative paths.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`], as for [`Config::from_file`].
    pub fn parse(text: &str, label: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        validate::parse(text, label, base_dir)
    }

    /// What is allowed but likely a mistake, one line each (`weir check`
    /// prints them, `weir serve` and a reload log them): today, a route
    /// whose `page_buffer_bytes` is below its `fragment_buffer_bytes`.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.routes {
            let Some(ssr) = &r.ssr else {
                continue;
            };
            let c = &ssr.compose;
            if c.page_buffer_bytes < c.fragment_buffer_bytes {
                out.push(format!(
                    "route prefix={}: page_buffer_bytes ({}) is less than \
                     fragment_buffer_bytes ({}): the page budget, not fragment_buffer_bytes, \
                     bounds what the fragments ahead of the page hold",
                    r.path_prefix, c.page_buffer_bytes, c.fragment_buffer_bytes,
                ));
            }
        }
        if let Some(fleet) = &self.fleet {
            out.extend(fleet_warnings(fleet, &self.routes, &self.listeners));
            let cap = self.client.response_header_timeout;
            if fleet.peer_timeout > cap {
                out.push(format!(
                    "fleet.peer_timeout ({}) is longer than [client] response_header_timeout ({}), \
                     which bounds every response head: forwards wait {} at most",
                    duration::format(fleet.peer_timeout),
                    duration::format(cap),
                    duration::format(cap),
                ));
            }
        }
        let uses_redis = self.routes.iter().any(|r| {
            r.limits
                .rate_limit
                .as_ref()
                .is_some_and(|l| l.scope == RateLimitScope::Redis)
        });
        if self.redis.is_some() && !uses_redis {
            out.push(
                "[redis] is set but no route has a rate limit with scope = \"redis\": it is not used"
                    .to_owned(),
            );
        }
        out
    }

    /// Replaces every [`UpstreamTarget::Embedded`] upstream with the URL that
    /// `start` returns for its settings (the address of a started origin).
    ///
    /// # Errors
    /// The first error `start` returns.
    pub fn resolve_embedded<E>(
        &mut self,
        mut start: impl FnMut(&EmbeddedOrigin) -> Result<SocketAddr, E>,
    ) -> Result<(), E> {
        for upstream in &mut self.upstreams {
            if let UpstreamTarget::Embedded(origin) = &upstream.target {
                let addr = start(origin)?;
                upstream.target =
                    UpstreamTarget::Servers(vec![ServerSpec::one(UpstreamUrl::local(addr))]);
            }
        }
        Ok(())
    }
}

/// What `weir check` and `weir serve` say about a `[fleet]` that is valid
/// but probably not what was meant.
fn fleet_warnings(
    fleet: &FleetSettings,
    routes: &[RouteSpec],
    listeners: &[ListenerSpec],
) -> Vec<String> {
    let mut out = Vec::new();
    if !routes.iter().any(|r| r.cache) {
        out.push("[fleet] is set but no route has `cache = true`: nothing is sharded".to_owned());
    }
    let me = fleet.self_addr;
    let listens = listeners.iter().any(|l| {
        l.address.port() == me.port()
            && (l.address.ip() == me.ip() || l.address.ip().is_unspecified())
    });
    if !listens {
        out.push(format!(
            "fleet.self {me} is not the address of a [[listener]]: peers send this \
             replica's keys there, so it must reach this replica (through NAT or a \
             port mapping, say)"
        ));
    }
    out
}
