//! Hot reload (SIGHUP, the admin listener's `POST /reload`): the config is
//! read again from where it came from, validated as at startup, and
//! swapped in atomically, or refused with the config in effect kept.
//!
//! The proxy state lives in an [`ArcSwap`] that each request loads once:
//! requests in flight finish on the config they started with, and the
//! next request of every open connection gets the new one. What did not
//! change is kept ([`Proxy::rebuild`]): the upstream client and its pools,
//! the group (servers, health state, health checks) of each unchanged
//! upstream, the cache, the metrics. Groups of removed or changed upstreams
//! are retired (their health checks stop). Listeners whose address stays
//! keep their socket (their TLS settings, certificates read again, are
//! swapped); new addresses are bound before anything is swapped; removed
//! ones stop accepting and drain like on shutdown.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use tokio::net::TcpListener;

use crate::config::{Config, ConfigError, ListenerSpec, UpstreamTarget};
use crate::listeners::ListenerSet;
use crate::proxy::{Proxy, ProxyError};

/// Where a reload reads the config from (the file given at startup, or the
/// embedded default): called once per reload.
pub type ConfigSource = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// Why a reload was refused; the config in effect stays.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The config does not read or validate (`file:line:col: key ...: message`).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An `origin = "embedded"` upstream that was not there at startup.
    #[error(
        "upstream {name:?}: a new embedded origin cannot be started by a reload; restart weir to add it"
    )]
    NewEmbedded {
        /// The upstream's name.
        name: String,
    },
    /// An `origin = "embedded"` upstream whose `root` or `test_endpoints`
    /// changed: its origin runs with the settings it started with.
    #[error(
        "upstream {name:?}: the embedded origin's root or test_endpoints changed, which a reload cannot apply; restart weir to change them"
    )]
    ChangedEmbedded {
        /// The upstream's name.
        name: String,
    },
    /// rustls refused a listener's TLS settings.
    #[error("cannot set up TLS on listener {addr}: {source}")]
    Tls {
        /// The listener's address.
        addr: SocketAddr,
        /// What rustls said.
        source: rustls::Error,
    },
    /// A new listener's address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The listener's address.
        addr: SocketAddr,
        /// The bind error.
        source: io::Error,
    },
    /// The proxy could not be built.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
}

impl ReloadError {
    /// The `POST /reload` status: 500 when binding a new listener failed
    /// (the host's doing), 400 for a config that is refused.
    pub fn status(&self) -> u16 {
        match self {
            ReloadError::Bind { .. } => 500,
            _ => 400,
        }
    }

    /// The message with its causes, on one line.
    pub fn message(&self) -> String {
        crate::upstream::error_chain(self)
    }
}

/// What a good reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReloadSummary {
    /// Routes of the new config.
    pub routes: usize,
    /// Upstreams whose group (pools, health state) was kept.
    pub upstreams_kept: usize,
    /// Upstreams new or changed (a new group).
    pub upstreams_new: usize,
    /// Groups retired: upstreams removed or changed.
    pub upstreams_removed: usize,
    /// Listeners bound.
    pub listeners_opened: usize,
    /// Listeners closed.
    pub listeners_closed: usize,
}

impl std::fmt::Display for ReloadSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "config reloaded: {} routes; upstreams kept {}, new {}, removed {}; listeners opened {}, closed {}",
            self.routes,
            self.upstreams_kept,
            self.upstreams_new,
            self.upstreams_removed,
            self.listeners_opened,
            self.listeners_closed
        )
    }
}

/// An embedded origin the binary started for an upstream (the proxy
/// crate does not run origins itself).
#[derive(Debug, Clone)]
pub struct StartedOrigin {
    /// The upstream's name.
    pub upstream: String,
    /// Where the origin listens.
    pub addr: SocketAddr,
    /// What it was started with.
    pub settings: crate::config::EmbeddedOrigin,
}

/// Reloads the config of one running [`crate::Server`] (made by
/// [`crate::Server::enable_reload`]). Reloads run one at a time.
pub struct Reloader {
    source: ConfigSource,
    /// Each embedded origin started at startup, by upstream name.
    embedded: HashMap<String, StartedOrigin>,
    state: Arc<ArcSwap<Proxy>>,
    listeners: Arc<ListenerSet>,
    /// The config in effect (embedded upstreams resolved); its lock
    /// serialises reloads.
    current: tokio::sync::Mutex<Config>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("embedded", &self.embedded)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    pub(crate) fn new(
        source: ConfigSource,
        embedded: Vec<StartedOrigin>,
        state: Arc<ArcSwap<Proxy>>,
        listeners: Arc<ListenerSet>,
        current: Config,
    ) -> Reloader {
        Reloader {
            source,
            embedded: embedded
                .into_iter()
                .map(|o| (o.upstream.clone(), o))
                .collect(),
            state,
            listeners,
            current: tokio::sync::Mutex::new(current),
        }
    }

    /// Reads, validates and swaps in the config; logs the outcome (INFO
    /// `config reloaded`, or the error at ERROR) and counts it in
    /// `weir_config_reloads_total`.
    ///
    /// # Errors
    /// Why the new config was refused; nothing changed then.
    pub async fn reload(&self) -> Result<ReloadSummary, ReloadError> {
        let mut current = self.current.lock().await;
        let result = self.apply(&mut current).await;
        self.state.load().metrics().config_reload(result.is_ok());
        match &result {
            Ok(s) => tracing::info!(
                target: "weir::reload",
                routes = s.routes,
                upstreams_kept = s.upstreams_kept,
                upstreams_new = s.upstreams_new,
                upstreams_removed = s.upstreams_removed,
                listeners_opened = s.listeners_opened,
                listeners_closed = s.listeners_closed,
                "config reloaded"
            ),
            Err(e) => tracing::error!(
                target: "weir::reload",
                "config reload refused, the config in effect stays: {}",
                e.message()
            ),
        }
        result
    }

    async fn apply(&self, current: &mut Config) -> Result<ReloadSummary, ReloadError> {
        let mut config = (self.source)()?;
        self.resolve_embedded(&mut config)?;
        for w in config.warnings() {
            tracing::warn!(target: "weir::reload", "config reload: {w}");
        }
        for key in restart_only(current, &config) {
            tracing::warn!(
                target: "weir::reload",
                key,
                "config reload: {key} changed, which needs a restart to take effect; the rest of the config is applied"
            );
        }
        // Certificates were read again with the config; every TLS
        // listener gets a fresh rustls config.
        let mut tls = Vec::with_capacity(config.listeners.len());
        for spec in &config.listeners {
            tls.push(tls_config(spec).map_err(|source| ReloadError::Tls {
                addr: spec.address,
                source,
            })?);
        }
        let rebuilt = Proxy::rebuild(&config, &self.state.load())?;
        // Bound last: a failure leaves nothing changed.
        let open = self.listeners.addresses();
        let mut bound = Vec::new();
        for (spec, tls) in config.listeners.iter().zip(&tls) {
            if !open.contains(&spec.address) {
                let listener =
                    TcpListener::bind(spec.address)
                        .await
                        .map_err(|source| ReloadError::Bind {
                            addr: spec.address,
                            source,
                        })?;
                bound.push((spec.address, listener, tls.clone()));
            }
        }

        // The swap: from here on every new request gets the new proxy.
        self.state.store(Arc::clone(&rebuilt.proxy));
        rebuilt.proxy.watch_groups();
        for group in &rebuilt.retired {
            group.retire();
        }
        for group in &rebuilt.fresh {
            crate::balance::health::spawn(group, &rebuilt.proxy.client);
        }

        for (spec, tls) in config.listeners.iter().zip(tls) {
            if open.contains(&spec.address) {
                self.listeners.set_tls(spec.address, tls);
            }
        }
        let listeners_opened = bound.len();
        for (address, listener, tls) in bound {
            tracing::info!(target: "weir::reload", "weir listening on {address} (added by reload)");
            self.listeners.open(address, listener, tls);
        }
        let mut listeners_closed = 0;
        let grace = config.server.shutdown_grace;
        for address in open {
            if config.listeners.iter().any(|l| l.address == address) {
                continue;
            }
            if let Some(drain) = self.listeners.close(address).await {
                tracing::info!(target: "weir::reload", connections = drain.count(), "listener {address} closed by reload; its connections finish");
                listeners_closed += 1;
                tokio::spawn(drain.finish(grace));
            }
        }
        let summary = ReloadSummary {
            routes: config.routes.len(),
            upstreams_kept: rebuilt.kept,
            upstreams_new: rebuilt.fresh.len(),
            upstreams_removed: rebuilt.retired.len(),
            listeners_opened,
            listeners_closed,
        };
        *current = config;
        Ok(summary)
    }

    /// Points each embedded upstream at the origin started for it at
    /// startup; a new one, or one with other settings, is refused.
    fn resolve_embedded(&self, config: &mut Config) -> Result<(), ReloadError> {
        let mut names = config
            .upstreams
            .iter()
            .filter(|u| matches!(u.target, UpstreamTarget::Embedded(_)))
            .map(|u| u.name.clone())
            .collect::<Vec<_>>()
            .into_iter();
        config.resolve_embedded(|settings| {
            let name = names.next().unwrap_or_default();
            match self.embedded.get(&name) {
                Some(started) if started.settings == *settings => Ok(started.addr),
                Some(_) => Err(ReloadError::ChangedEmbedded { name }),
                None => Err(ReloadError::NewEmbedded { name }),
            }
        })
    }
}

/// The keys a running server cannot change (they shape the runtime, the
/// log setup, the admin listener, the upstream client or the connection
/// builders), that differ between `old` and `new`.
pub fn restart_only(old: &Config, new: &Config) -> Vec<&'static str> {
    let (o, n) = (&old.server, &new.server);
    [
        (o.workers != n.workers, "[server] workers"),
        (o.access_log != n.access_log, "[server] access_log"),
        (
            o.header_read_timeout != n.header_read_timeout,
            "[server] header_read_timeout",
        ),
        (
            o.limits.max_connections != n.limits.max_connections,
            "[server] max_connections",
        ),
        (
            o.limits.max_head_bytes != n.limits.max_head_bytes,
            "[server] max_request_head_bytes",
        ),
        (
            o.limits.max_headers != n.limits.max_headers,
            "[server] max_request_headers",
        ),
        (old.admin != new.admin, "[admin]"),
        (old.client != new.client, "[client]"),
        (old.cache != new.cache, "[cache]"),
    ]
    .into_iter()
    .filter_map(|(changed, key)| changed.then_some(key))
    .collect()
}

/// The rustls config of a TLS listener (`None` for cleartext).
fn tls_config(spec: &ListenerSpec) -> Result<Option<Arc<ServerConfig>>, rustls::Error> {
    spec.tls.as_ref().map(crate::tls::server_config).transpose()
}

/// Binds a listener of the startup config, with its TLS config; the
/// errors name the address.
pub(crate) async fn bind_listener(
    spec: &ListenerSpec,
) -> io::Result<(TcpListener, Option<Arc<ServerConfig>>)> {
    let addr = spec.address;
    let tls = tls_config(spec)
        .map_err(|e| io::Error::other(format!("cannot set up TLS on listener {addr}: {e}")))?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    Ok((listener, tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(upstreams: &str, server: &str) -> Config {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[server]\n{server}\n\n{upstreams}\n\
             [[route]]\npath_prefix = \"/\"\nupstream = \"a\"\n"
        );
        Config::parse(&text, "t.toml", std::path::Path::new(".")).expect("valid")
    }

    fn upstream(name: &str, port: u16) -> String {
        format!("[[upstream]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:{port}\"\n\n")
    }

    #[test]
    fn restart_only_names_the_changed_keys() {
        let a = upstream("a", 1);
        let old = parse(&a, "workers = 2");
        assert!(restart_only(&old, &old.clone()).is_empty());
        let new = parse(
            &a,
            "workers = 3\naccess_log = \"off\"\nvia_pseudonym = \"edge\"",
        );
        assert_eq!(
            restart_only(&old, &new),
            ["[server] workers", "[server] access_log"]
        );
    }

    #[test]
    fn rebuild_keeps_the_groups_of_unchanged_upstreams() {
        let old = parse(&(upstream("a", 1) + &upstream("b", 2)), "");
        let proxy = Proxy::new(&old).expect("proxy");
        // b changes its server, c is new, a stays.
        let new = parse(
            &(upstream("a", 1) + &upstream("b", 3) + &upstream("c", 4)),
            "",
        );
        let rebuilt = Proxy::rebuild(&new, &proxy).expect("rebuild");
        assert_eq!(rebuilt.kept, 1);
        assert_eq!(rebuilt.fresh.len(), 2);
        assert_eq!(rebuilt.retired.len(), 1);
        assert_eq!(rebuilt.retired[0].name, "b");
        assert!(Arc::ptr_eq(
            &rebuilt.proxy.upstreams[0].group,
            &proxy.upstreams[0].group
        ));
        assert!(Arc::ptr_eq(rebuilt.proxy.metrics(), proxy.metrics()));
        let retired = rebuilt.retired[0].retired();
        assert!(!*retired.borrow());
        rebuilt.retired[0].retire();
        assert!(*retired.borrow());
    }

    #[test]
    fn bind_failures_answer_500_and_config_errors_400() {
        let bind = ReloadError::Bind {
            addr: ([127, 0, 0, 1], 1).into(),
            source: io::Error::from(io::ErrorKind::AddrInUse),
        };
        assert_eq!(bind.status(), 500);
        let embedded = ReloadError::NewEmbedded { name: "x".into() };
        assert_eq!(embedded.status(), 400);
        assert!(embedded.message().contains("restart"));
    }
}
