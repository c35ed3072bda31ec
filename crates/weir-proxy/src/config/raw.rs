//! The config file as written: serde structs that mirror the TOML keys.
//!
//! Every struct denies unknown keys, so a typo is an error naming the key.
//! Defaults live here, in one place. Fields that later validation may need
//! to point at carry their source span (`Spanned`).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::duration;
use super::tls::RawTls;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default, rename = "listener")]
    pub listeners: Vec<RawListener>,
    #[serde(default)]
    pub client: RawClient,
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<Spanned<RawUpstream>>,
    #[serde(default, rename = "route")]
    pub routes: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub cache: RawCache,
    pub fleet: Option<super::fleet::RawFleet>,
    pub redis: Option<Spanned<super::redis::RawRedis>>,
}

/// `[admin]`: the metrics and health listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAdmin {
    pub enabled: bool,
    #[serde(deserialize_with = "socket_addr")]
    pub address: Spanned<SocketAddr>,
    pub allow_public: bool,
}

/// Where the admin listener binds unless told otherwise: loopback only.
pub(super) const DEFAULT_ADMIN_ADDRESS: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    9901,
));

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            enabled: true,
            address: Spanned::new(0..0, DEFAULT_ADMIN_ADDRESS),
            allow_public: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawServer {
    #[serde(with = "duration")]
    pub header_read_timeout: Duration,
    #[serde(with = "duration")]
    pub body_idle_timeout: Duration,
    #[serde(with = "duration")]
    pub shutdown_grace: Duration,
    pub trusted_proxies: Vec<Spanned<String>>,
    pub via_pseudonym: Spanned<String>,
    pub workers: Option<Spanned<i64>>,
    pub access_log: Option<Spanned<String>>,
    #[serde(with = "duration")]
    pub upgrade_idle_timeout: Duration,
    pub max_request_head_bytes: Option<Spanned<u64>>,
    pub max_request_headers: Option<Spanned<u64>>,
    pub max_uri_bytes: Option<Spanned<u64>>,
    pub max_request_body_bytes: Option<Spanned<u64>>,
    pub request_body_min_rate: Option<Spanned<u64>>,
    #[serde(with = "duration")]
    pub request_body_rate_grace: Duration,
    pub max_connections: Option<Spanned<u64>>,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            header_read_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
            trusted_proxies: Vec::new(),
            via_pseudonym: Spanned::new(0..0, "weir".to_owned()),
            workers: None,
            access_log: None,
            upgrade_idle_timeout: Duration::from_secs(300),
            max_request_head_bytes: None,
            max_request_headers: None,
            max_uri_bytes: None,
            max_request_body_bytes: None,
            request_body_min_rate: None,
            request_body_rate_grace: super::types::BODY_RATE_GRACE,
            max_connections: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
    #[serde(deserialize_with = "socket_addr")]
    pub address: Spanned<SocketAddr>,
    pub tls: Option<Spanned<RawTls>>,
}

/// An `ip:port` address, with a hint when a host name was written.
fn socket_addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Spanned<SocketAddr>, D::Error> {
    let text = Spanned::<String>::deserialize(d)?;
    let span = text.span();
    text.get_ref().parse::<SocketAddr>().map(|a| Spanned::new(span, a)).map_err(|_| {
        serde::de::Error::custom(format!(
            "{:?} is not an IP address and port; write it like \"127.0.0.1:8080\" or \"[::1]:8080\" (host names are not resolved)",
            text.get_ref()
        ))
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawClient {
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    #[serde(with = "duration")]
    pub response_header_timeout: Duration,
    #[serde(with = "duration")]
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_host: usize,
}

impl Default for RawClient {
    fn default() -> Self {
        RawClient {
            connect_timeout: Duration::from_secs(5),
            response_header_timeout: Duration::from_secs(30),
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 32,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub name: Spanned<String>,
    pub url: Option<Spanned<String>>,
    pub servers: Option<Spanned<Vec<Spanned<RawServerEntry>>>>,
    pub origin: Option<Spanned<String>>,
    pub root: Option<Spanned<String>>,
    pub test_endpoints: Option<Spanned<bool>>,
    pub balance: Option<Spanned<String>>,
    pub hash_key: Option<Spanned<String>>,
    pub hash_ring: Option<Spanned<String>>,
    pub protocol: Option<Spanned<String>>,
    pub health: Option<Spanned<RawHealth>>,
    #[serde(default)]
    pub outlier: RawOutlier,
    #[serde(default)]
    pub retry: RawRetry,
    pub tls: Option<Spanned<super::upstream_tls::RawUpstreamTls>>,
}

/// One entry of `servers`: `"http://host:port"` or
/// `{ url = "...", weight = 2, max_connections = 64 }`.
#[derive(Debug)]
pub(super) struct RawServerEntry {
    pub url: Spanned<String>,
    pub weight: Option<Spanned<i64>>,
    pub max_connections: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServerTable {
    url: Spanned<String>,
    weight: Option<Spanned<i64>>,
    max_connections: Option<Spanned<i64>>,
}

impl<'de> Deserialize<'de> for RawServerEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = RawServerEntry;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a URL string, or a table { url = \"http://host:port\", weight = 1, max_connections = 64 }",
                )
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawServerEntry, E> {
                Ok(RawServerEntry {
                    // The entry's own span is set by the `Spanned` around it.
                    url: Spanned::new(0..0, v.to_owned()),
                    weight: None,
                    max_connections: None,
                })
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RawServerEntry, A::Error> {
                let t =
                    RawServerTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawServerEntry {
                    url: t.url,
                    weight: t.weight,
                    max_connections: t.max_connections,
                })
            }
        }
        d.deserialize_any(Entry)
    }
}

/// `[upstream.health]`: active checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    pub path: Spanned<String>,
    #[serde(default = "default_health_interval", with = "duration")]
    pub interval: Duration,
    #[serde(default = "default_health_timeout", with = "duration")]
    pub timeout: Duration,
    pub expect_status: Option<Spanned<String>>,
    #[serde(default = "default_rise")]
    pub rise: Spanned<i64>,
    #[serde(default = "default_fall")]
    pub fall: Spanned<i64>,
}

fn default_health_interval() -> Duration {
    Duration::from_secs(5)
}

fn default_health_timeout() -> Duration {
    Duration::from_secs(2)
}

fn default_rise() -> Spanned<i64> {
    Spanned::new(0..0, 2)
}

fn default_fall() -> Spanned<i64> {
    Spanned::new(0..0, 3)
}

/// `[upstream.outlier]`: passive ejection.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawOutlier {
    pub consecutive_failures: Spanned<i64>,
    #[serde(with = "duration")]
    pub base_ejection: Duration,
    #[serde(with = "duration")]
    pub max_ejection: Duration,
    pub max_ejected_percent: Spanned<i64>,
    pub failure_statuses: Option<Spanned<String>>,
}

impl Default for RawOutlier {
    fn default() -> Self {
        RawOutlier {
            consecutive_failures: Spanned::new(0..0, 5),
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(300),
            max_ejected_percent: Spanned::new(0..0, 50),
            failure_statuses: None,
        }
    }
}

/// `[upstream.retry]`: when a failed attempt is tried again.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRetry {
    pub attempts: Spanned<i64>,
    pub retry_body_bytes: Spanned<i64>,
    pub budget_percent: Spanned<i64>,
    pub min_retries_per_second: Spanned<i64>,
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry {
            attempts: Spanned::new(0..0, 2),
            retry_body_bytes: Spanned::new(0..0, 64 << 10),
            budget_percent: Spanned::new(0..0, 20),
            min_retries_per_second: Spanned::new(0..0, 10),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub host: Option<Spanned<String>>,
    #[serde(default = "default_path_prefix")]
    pub path_prefix: Spanned<String>,
    #[serde(default)]
    pub strip_prefix: bool,
    pub upstream: Spanned<String>,
    #[serde(default)]
    pub host_header: super::types::HostHeader,
    /// Stage names, in body order.
    #[serde(default = "no_transforms")]
    pub transforms: Spanned<Vec<Spanned<String>>>,
    pub compress: Option<Spanned<weir_transform::compress::CompressSettings>>,
    pub html_rewrite: Option<Spanned<weir_transform::html::HtmlRewriteSettings>>,
    pub coalesce: Option<Spanned<weir_transform::chain::CoalesceSettings>>,
    pub msgpack_json: Option<Spanned<weir_transform::msgpack::MsgpackJsonSettings>>,
    pub mirror: Option<Spanned<RawMirror>>,
    pub body_log: Option<Spanned<RawBodyLog>>,
    /// `cache = true`: responses on this route go through the response cache.
    #[serde(default)]
    pub cache: bool,
    /// `[route.ssr]`: SSR fragment composition.
    pub ssr: Option<Spanned<super::ssr::RawSsr>>,
    /// `upgrade = ["websocket"]`: the `Upgrade` tokens forwarded as a tunnel.
    #[serde(default)]
    pub upgrade: Vec<Spanned<String>>,
    /// Replaces `[server] max_request_body_bytes` on this route.
    pub max_request_body_bytes: Option<Spanned<u64>>,
    /// Most requests of this route in flight at once.
    pub max_concurrent_requests: Option<Spanned<u64>>,
    /// `[route.rate_limit]`.
    pub rate_limit: Option<Spanned<RawRateLimit>>,
}

/// `[route.rate_limit]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRateLimit {
    pub requests_per_second: Spanned<u64>,
    pub burst: Option<Spanned<u64>>,
    pub key: Option<Spanned<String>>,
    pub scope: Option<Spanned<String>>,
}

/// `[route.mirror]`: a shadow upstream that gets a copy of each request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMirror {
    pub upstream: Spanned<String>,
    #[serde(with = "duration", default = "default_mirror_timeout")]
    pub timeout: Duration,
    #[serde(default = "default_mirror_hwm")]
    pub hwm: Spanned<usize>,
    #[serde(default = "default_mirror_in_flight")]
    pub max_in_flight: Spanned<usize>,
}

fn default_mirror_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_mirror_hwm() -> Spanned<usize> {
    Spanned::new(0..0, 16)
}

fn default_mirror_in_flight() -> Spanned<usize> {
    Spanned::new(0..0, 64)
}

/// `[route.body_log]`: log the first bytes of request and response bodies.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBodyLog {
    pub request_bytes: usize,
    pub response_bytes: usize,
}

impl Default for RawBodyLog {
    fn default() -> Self {
        RawBodyLog {
            request_bytes: 1024,
            response_bytes: 1024,
        }
    }
}

fn no_transforms() -> Spanned<Vec<Spanned<String>>> {
    Spanned::new(0..0, Vec::new())
}

fn default_path_prefix() -> Spanned<String> {
    Spanned::new(0..0, "/".to_owned())
}

/// `[cache]`: the response cache shared by the routes that opt in.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawCache {
    pub max_bytes: Spanned<u64>,
    pub max_object_bytes: Spanned<u64>,
    pub fill_hwm: Spanned<usize>,
    #[serde(with = "duration")]
    pub collapse_wait: Duration,
    pub fill_on_client_abort: bool,
}

impl Default for RawCache {
    fn default() -> Self {
        RawCache {
            max_bytes: Spanned::new(0..0, 64 << 20),
            max_object_bytes: Spanned::new(0..0, 8 << 20),
            fill_hwm: Spanned::new(0..0, 64),
            collapse_wait: Duration::from_secs(5),
            fill_on_client_abort: false,
        }
    }
}
