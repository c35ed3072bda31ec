//! The reverse proxy: what every request shares (routes, upstreams, the
//! pooled client, the cache, mirrors, SSR fetchers, metrics), built once
//! from a config. A request's life, as phases, is in `exchange/`
//! ([`Proxy::handle`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::balance::{AttemptResult, Server, UpstreamGroup};
use crate::cache::Cache;
use crate::config::{Config, ServerSettings, ServerSpec, Upstream, UpstreamTarget, UpstreamUrl};
use crate::headers::{Peer, PeerAddr, Via};
use crate::metrics::{self, Metrics, RouteMetrics};
use crate::mirror::Mirror;
use crate::route::RouteTable;
use crate::ssr::ProxyFetcher;
use crate::upstream::UpstreamClient;

/// Why a [`Proxy`] could not be built from a config.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// An `origin = "embedded"` upstream was not resolved to an address.
    #[error(
        "upstream {name:?} is an embedded origin that was not started (call Config::resolve_embedded first)"
    )]
    UnresolvedEmbedded {
        /// The upstream's name.
        name: String,
    },
    /// The TLS client of an `https://` server could not be made.
    #[error("upstream {name:?}: {source}")]
    UpstreamTls {
        /// The upstream's name.
        name: String,
        /// Why.
        source: crate::upstream::TlsSetupError,
    },
}

/// An upstream with its servers' addresses known.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedUpstream {
    /// The config's name for it.
    pub(crate) name: String,
    /// Its servers, their pools and state, and the balancing policy.
    pub(crate) group: Arc<UpstreamGroup>,
    /// Its definition, which a reload compares to keep the group.
    pub(crate) spec: Upstream,
}

/// What a reloaded proxy shares with the one before it.
struct Shared {
    client: UpstreamClient,
    metrics: Arc<Metrics>,
    cache: Option<Arc<Cache>>,
    tunnels: Arc<crate::tunnel::Tunnels>,
    shutdown_cut: Arc<AtomicBool>,
    /// The fleet in effect before a reload, which moved keys are handed
    /// off from.
    fleet_before: Option<Arc<crate::fleet::Fleet>>,
}

/// A proxy built by [`Proxy::rebuild`], and how its upstreams relate to
/// the previous one's.
#[derive(Debug)]
pub struct Rebuilt {
    /// The new proxy.
    pub proxy: Arc<Proxy>,
    /// Upstreams whose group (pools, health state) was kept.
    pub kept: usize,
    /// Groups made for new or changed upstreams: their health checks are
    /// to be started.
    pub fresh: Vec<Arc<UpstreamGroup>>,
    /// Groups of removed or changed upstreams: to be retired once the new
    /// proxy is in effect.
    pub retired: Vec<Arc<UpstreamGroup>>,
}

/// The servers of `u`, or the error for an unresolved embedded origin.
fn server_specs(u: &Upstream) -> Result<&[ServerSpec], ProxyError> {
    match &u.target {
        UpstreamTarget::Servers(servers) => Ok(servers),
        UpstreamTarget::Embedded(_) => Err(ProxyError::UnresolvedEmbedded {
            name: u.name.clone(),
        }),
    }
}

impl ResolvedUpstream {
    /// A new group for `u`, over `client`'s pools.
    ///
    /// # Errors
    /// [`ProxyError::UpstreamTls`] when the TLS client of a server cannot
    /// be made.
    fn new(
        u: &Upstream,
        client: &UpstreamClient,
        metrics: &Metrics,
    ) -> Result<ResolvedUpstream, ProxyError> {
        Ok(ResolvedUpstream {
            name: u.name.clone(),
            group: Arc::new(group(u, client, metrics)?),
            spec: u.clone(),
        })
    }

    /// The first server's URL: the base of what every server serves.
    pub(crate) fn first_url(&self) -> &UpstreamUrl {
        &self.group.servers[0].url
    }
}

/// The reverse proxy: routes, upstreams, the upstream client and the
/// header settings. Shared by every connection (`Arc<Proxy>`).
#[derive(Debug)]
pub struct Proxy {
    pub(crate) routes: RouteTable,
    pub(crate) upstreams: Vec<ResolvedUpstream>,
    pub(crate) client: UpstreamClient,
    pub(crate) settings: ServerSettings,
    /// Set when shutdown cut requests short, so their log lines say so.
    pub(crate) shutdown_cut: Arc<AtomicBool>,
    /// Each route's mirror, by route index.
    pub(crate) mirrors: Vec<Option<Mirror>>,
    pub(crate) metrics: Arc<Metrics>,
    /// The `route` label of each route, by index; then [`metrics::NO_ROUTE`].
    pub(crate) route_labels: Vec<Arc<RouteMetrics>>,
    /// The response cache, when a route sets `cache = true`.
    pub(crate) cache: Option<Arc<Cache>>,
    /// Each route's SSR fragment fetcher, by route index (`None`: the
    /// route composes nothing).
    pub(crate) fetchers: Vec<Option<Arc<ProxyFetcher>>>,
    /// Counts SSR fragment outcomes into `metrics`.
    pub(crate) ssr_observer: Arc<crate::ssr::MetricsObserver>,
    /// Weir's `Via` entries (`via_pseudonym`), made once.
    pub(crate) via: Via,
    /// Every live tunnel (upgraded exchange), for shutdown.
    pub(crate) tunnels: Arc<crate::tunnel::Tunnels>,
    /// `[fleet]`: the peers cacheable requests are sharded among.
    pub(crate) fleet: Option<Arc<crate::fleet::Fleet>>,
    /// `[fleet] l1_bytes`: this replica's L1 of the answers it relays from
    /// key owners (see [`Cache::l1`]).
    pub(crate) l1: Option<Arc<Cache>>,
    /// `[redis]`: the buckets of `scope = "redis"` rate limits.
    pub(crate) redis: Option<Arc<crate::rate_limit::redis::RedisBuckets>>,
}

/// A downstream connection's peer, as every request on it sees it: worked
/// out once per connection ([`Proxy::downstream`]).
#[derive(Debug, Clone)]
pub struct Downstream {
    /// The TCP peer.
    pub addr: SocketAddr,
    /// Its address as `X-Forwarded-For` writes it.
    pub peer: PeerAddr,
    /// Whether it is one of `trusted_proxies`.
    pub trusted: bool,
    /// Whether the connection came over TLS (`X-Forwarded-Proto: https`).
    pub tls: bool,
    /// The tunnels the connection carries (its idle deadline is off while
    /// it has one).
    pub(crate) tunnels: Arc<crate::io::ConnTunnels>,
}

impl Proxy {
    /// Builds the proxy for a validated config whose embedded upstreams are resolved.
    ///
    /// # Errors
    /// [`ProxyError::UnresolvedEmbedded`] if an upstream is still `Embedded`.
    pub fn new(config: &Config) -> Result<Arc<Proxy>, ProxyError> {
        let client = UpstreamClient::new(&config.client);
        let mut authorities = Vec::new();
        for u in &config.upstreams {
            authorities.extend(server_specs(u)?.iter().map(|s| s.url.authority.to_string()));
        }
        authorities.sort();
        authorities.dedup();
        let metrics = Arc::new(Metrics::new(Arc::clone(client.connections()), authorities));
        let upstreams = config
            .upstreams
            .iter()
            .map(|u| ResolvedUpstream::new(u, &client, &metrics))
            .collect::<Result<_, ProxyError>>()?;
        let shared = Shared {
            client,
            metrics,
            cache: None,
            tunnels: Arc::default(),
            shutdown_cut: Arc::new(AtomicBool::new(false)),
            fleet_before: None,
        };
        let proxy = Proxy::assemble(config, upstreams, shared);
        proxy.watch_groups();
        Ok(Arc::new(proxy))
    }

    /// Points `weir_upstream_server_available` at this proxy's groups
    /// (done by [`Proxy::new`]; after a reload, once the proxy is in effect).
    pub fn watch_groups(&self) {
        self.metrics.watch_groups(Arc::new(crate::balance::Groups(
            self.upstreams
                .iter()
                .map(|u| Arc::clone(&u.group))
                .collect(),
        )));
    }

    /// Builds the proxy of a reloaded `config` (validated, embedded
    /// upstreams resolved) beside `previous`, the one in effect: the
    /// upstream client and its pools, the metrics, the tunnels and the
    /// cache are shared, and the group of each upstream whose definition is
    /// unchanged (same name, equal config) is reused as it is (its
    /// connections, health state and health checks go on).
    ///
    /// # Errors
    /// [`ProxyError::UnresolvedEmbedded`] if an upstream is still `Embedded`.
    pub fn rebuild(config: &Config, previous: &Proxy) -> Result<Rebuilt, ProxyError> {
        let (mut upstreams, mut fresh) = (Vec::new(), Vec::new());
        for u in &config.upstreams {
            server_specs(u)?;
            match previous.upstreams.iter().find(|old| old.spec == *u) {
                Some(old) => upstreams.push(old.clone()),
                None => {
                    let new = ResolvedUpstream::new(u, &previous.client, &previous.metrics)?;
                    fresh.push(Arc::clone(&new.group));
                    upstreams.push(new);
                }
            }
        }
        let retired = previous
            .upstreams
            .iter()
            .filter(|old| !upstreams.iter().any(|u| Arc::ptr_eq(&u.group, &old.group)))
            .map(|old| Arc::clone(&old.group))
            .collect();
        let shared = Shared {
            client: previous.client.clone(),
            metrics: Arc::clone(&previous.metrics),
            cache: previous.cache.clone(),
            tunnels: Arc::clone(&previous.tunnels),
            shutdown_cut: Arc::clone(&previous.shutdown_cut),
            fleet_before: previous.fleet.clone(),
        };
        let kept = upstreams.len() - fresh.len();
        Ok(Rebuilt {
            proxy: Arc::new(Proxy::assemble(config, upstreams, shared)),
            kept,
            fresh,
            retired,
        })
    }

    /// The proxy of `config` over `upstreams` and what it shares with an
    /// earlier one.
    fn assemble(config: &Config, upstreams: Vec<ResolvedUpstream>, shared: Shared) -> Proxy {
        let Shared {
            client,
            metrics,
            cache,
            tunnels,
            shutdown_cut,
            fleet_before,
        } = shared;
        let route_labels = config
            .routes
            .iter()
            .map(|r| metrics::route_label(r.host.as_deref(), &r.path_prefix))
            .chain([metrics::NO_ROUTE.to_owned()])
            .map(|label| Arc::new(RouteMetrics::new(label)))
            .collect();
        let mirrors = mirrors(config, &upstreams, &metrics);
        let cache = config
            .routes
            .iter()
            .any(|r| r.cache || r.ssr.as_ref().is_some_and(|s| s.cache_fragments))
            .then(|| cache.unwrap_or_else(|| Cache::new(&config.cache, Arc::clone(&metrics))));
        let fetchers = fetchers(config, &upstreams, &client, cache.as_ref());
        // The secret was checked to be visible ASCII, so `new` cannot fail.
        let fleet = config.fleet.as_ref().and_then(|settings| {
            let fleet =
                crate::fleet::Fleet::after(settings, Arc::clone(&metrics), fleet_before.as_deref())
                    .ok()?;
            fleet.start_discovery(&settings.discovery);
            Some(fleet)
        });
        if fleet.is_none() {
            metrics.fleet().set_members(0, 0);
        }
        // The URL was checked to be one the client takes.
        let redis = config.redis.as_ref().and_then(|settings| {
            crate::rate_limit::redis::RedisBuckets::new(settings)
                .map(Arc::new)
                .inspect_err(|e| tracing::error!("[redis] url: {e}"))
                .ok()
        });
        // Its own registry, unexported: an L1 hit is counted as the fleet's
        // `l1_hit`, not as a hit of the shared cache.
        let l1 = config
            .fleet
            .as_ref()
            .filter(|f| f.l1_bytes > 0 && cache.is_some())
            .map(|f| {
                let settings = crate::config::CacheSettings {
                    max_bytes: f.l1_bytes,
                    max_object_bytes: config.cache.max_object_bytes.min(f.l1_bytes),
                    ..config.cache.clone()
                };
                Cache::l1(
                    &settings,
                    f.l1_ttl,
                    Arc::new(Metrics::new(Arc::default(), Vec::new())),
                )
            });
        Proxy {
            fleet,
            l1,
            redis,
            fetchers,
            ssr_observer: Arc::new(crate::ssr::MetricsObserver(Arc::clone(&metrics))),
            routes: RouteTable::new(&config.routes),
            mirrors,
            upstreams,
            cache,
            client,
            metrics,
            route_labels,
            settings: config.server.clone(),
            shutdown_cut,
            via: Via::new(&config.server.via_pseudonym),
            tunnels,
        }
    }

    /// Starts the active health checks of every upstream that has them;
    /// each check task ends when the proxy is dropped. Call once, on the
    /// runtime that serves the proxy.
    pub fn start_health_checks(&self) {
        for u in &self.upstreams {
            crate::balance::health::spawn(&u.group, &self.client);
        }
    }

    /// Live upstream connection counts.
    pub fn upstream_connections(&self) -> &Arc<crate::counted::ConnectionCounts> {
        self.client.connections()
    }

    /// Every live tunnel: shutdown waits for them, then closes them.
    pub fn tunnels(&self) -> &Arc<crate::tunnel::Tunnels> {
        &self.tunnels
    }

    /// The proxy's metrics (served on the admin listener's `/metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The `route` label of route `index`, or of no route.
    pub(crate) fn route_label(&self, index: Option<usize>) -> Arc<RouteMetrics> {
        let last = self.route_labels.len() - 1;
        Arc::clone(&self.route_labels[index.map_or(last, |i| i.min(last))])
    }

    /// Marks that the shutdown grace period is over: requests still running
    /// are being cut, and their access log lines say `outcome=shutdown`.
    pub fn mark_shutdown_cut(&self) {
        self.shutdown_cut.store(true, Ordering::Relaxed);
    }

    /// What every request of a connection from `addr` needs of its peer;
    /// `tls` when the listener terminated TLS for it.
    pub fn downstream(&self, addr: SocketAddr, tls: bool) -> Downstream {
        Downstream {
            addr,
            peer: PeerAddr::new(addr.ip()),
            trusted: self.is_trusted(addr),
            tls,
            tunnels: Arc::default(),
        }
    }

    /// The downstream peer as `X-Forwarded-*` describe it: the
    /// connection's peer, and the host the client asked for.
    pub(crate) fn forwarded_peer<'a>(
        downstream: &'a Downstream,
        host: Option<&'a str>,
    ) -> Peer<'a> {
        Peer {
            addr: &downstream.peer,
            trusted: downstream.trusted,
            proto: if downstream.tls { "https" } else { "http" },
            host,
        }
    }

    /// Whether `peer` is one of `trusted_proxies`.
    pub(crate) fn is_trusted(&self, peer: SocketAddr) -> bool {
        let ip = peer.ip().to_canonical();
        self.settings
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&ip))
    }
}

/// Each route's mirror, by route index.
fn mirrors(
    config: &Config,
    upstreams: &[ResolvedUpstream],
    metrics: &Arc<Metrics>,
) -> Vec<Option<Mirror>> {
    config
        .routes
        .iter()
        .map(|r| {
            let m = r.mirror.as_ref()?;
            let up = upstreams.get(m.upstream)?;
            Some(Mirror::new(
                up.name.clone(),
                up.first_url().clone(),
                m.clone(),
                Arc::clone(metrics),
            ))
        })
        .collect()
}

/// Each SSR route's fragment fetcher, by route index: over the shared
/// client, to the upstreams its `fragment_upstreams` allow, through the
/// cache when it says `cache_fragments`.
fn fetchers(
    config: &Config,
    upstreams: &[ResolvedUpstream],
    client: &UpstreamClient,
    cache: Option<&Arc<Cache>>,
) -> Vec<Option<Arc<ProxyFetcher>>> {
    config
        .routes
        .iter()
        .map(|r| {
            let s = r.ssr.as_ref()?;
            let allowed: Arc<[UpstreamUrl]> = s
                .fragment_upstreams
                .iter()
                .filter_map(|&i| upstreams.get(i))
                .flat_map(|u| u.group.servers.iter().map(|s| s.url.clone()))
                .collect();
            Some(Arc::new(ProxyFetcher::new(
                client.clone(),
                allowed,
                config.server.body_idle_timeout,
                Via::new(&config.server.via_pseudonym),
                cache.filter(|_| s.cache_fragments).cloned(),
            )))
        })
        .collect()
}

/// The group of upstream `u` (servers resolved): a pool and metric handles
/// per server.
///
/// # Errors
/// [`ProxyError::UpstreamTls`] when the TLS client of a server cannot be made.
pub(crate) fn group(
    u: &Upstream,
    client: &UpstreamClient,
    metrics: &Metrics,
) -> Result<UpstreamGroup, ProxyError> {
    let specs: &[ServerSpec] = match &u.target {
        UpstreamTarget::Servers(servers) => servers,
        UpstreamTarget::Embedded(_) => &[],
    };
    let servers = specs
        .iter()
        .map(|spec| {
            let authority = spec.url.authority.as_str();
            let pool = client
                .pool(&spec.url.scheme, &spec.url.authority, u.tls.as_ref())
                .map_err(|source| ProxyError::UpstreamTls {
                    name: u.name.clone(),
                    source,
                })?;
            Ok(Arc::new(Server::new(
                spec.url.clone(),
                pool,
                spec.weight,
                spec.max_connections,
                metrics.in_flight_gauge(authority),
                AttemptResult::ALL.map(|r| metrics.attempt_counter(&u.name, authority, r.as_str())),
                metrics.ejection_counter(&u.name, authority),
            )))
        })
        .collect::<Result<_, ProxyError>>()?;
    let mut group = UpstreamGroup::new(
        u.name.clone(),
        servers,
        &u.balance,
        u.outlier.clone(),
        u.retry.clone(),
        u.health.clone(),
        crate::metrics::RETRY_RESULTS.map(|r| metrics.retry_counter(&u.name, r)),
    );
    group.protocol = u.protocol;
    Ok(group)
}
