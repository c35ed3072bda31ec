//! The validated settings Weir runs with: what [`Config`] holds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use http::uri::{Authority, Scheme};
use ipnet::IpNet;
use serde::Deserialize;

use super::tls::TlsSettings;

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the config came from (a path, or a label for an embedded config).
    pub source: String,
    /// Downstream-side settings.
    pub server: ServerSettings,
    /// Where to accept connections, and how. At least one.
    pub listeners: Vec<ListenerSpec>,
    /// Upstream-client settings.
    pub client: ClientSettings,
    /// Upstreams by name, in file order.
    pub upstreams: Vec<Upstream>,
    /// Routes, in file order. Matching is by host, then longest path prefix.
    pub routes: Vec<RouteSpec>,
    /// The admin listener (`/metrics`, `/healthz`); `None` when
    /// `[admin] enabled = false`.
    pub admin: Option<AdminSettings>,
    /// `[cache]`: the response cache of the routes with `cache = true`.
    pub cache: CacheSettings,
    /// `[fleet]`: this replica's peers, among which cacheable requests are
    /// sharded by key (`None`: no fleet, every replica caches for itself).
    pub fleet: Option<super::fleet::FleetSettings>,
    /// `[redis]`: the server that holds the buckets of rate limits with
    /// `scope = "redis"`.
    pub redis: Option<super::redis::RedisSettings>,
}

/// A `[[listener]]`: an address, and TLS if the listener terminates it.
#[derive(Debug, Clone)]
pub struct ListenerSpec {
    /// The address to bind.
    pub address: SocketAddr,
    /// `tls`: the certificates to serve; `None` for cleartext HTTP/1.1 and
    /// HTTP/2 (prior knowledge).
    pub tls: Option<TlsSettings>,
}

/// `[cache]`: the in-memory response cache (RFC 9111), shared by every
/// route that sets `cache = true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// Total bytes of stored bodies and headers (`max_bytes`, default
    /// 64 MiB, at least 1); the least useful entries are evicted beyond it.
    pub max_bytes: u64,
    /// Largest body stored, in bytes (`max_object_bytes`, default 8 MiB,
    /// 1..=`max_bytes`); a larger body is streamed to the client and not stored.
    pub max_object_bytes: u64,
    /// How far, in chunks, the cache writer may fall behind the client
    /// before the fill is abandoned (`fill_hwm`, default 64, 1..=4096).
    pub fill_hwm: usize,
    /// How long a request waits for another request's in-flight fill of the
    /// same key to deliver a cacheable head before it goes upstream itself
    /// (`collapse_wait`, default 5 s).
    pub collapse_wait: Duration,
    /// Whether a fill goes on to the end after the client that started it
    /// went away (`fill_on_client_abort`, default false: it is abandoned).
    pub fill_on_client_abort: bool,
}

/// `[admin]`: where `/metrics` and `/healthz` are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// The address to bind (`address`, default `127.0.0.1:9901`). A
    /// loopback address unless the file also says `allow_public = true`.
    pub address: SocketAddr,
}

/// `[server]`: how Weir treats downstream clients.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// A client must send a whole request head within this time after the
    /// connection opens or goes idle (`header_read_timeout`, default 10 s).
    pub header_read_timeout: Duration,
    /// Longest pause between two reads of a body, in either direction,
    /// before the transfer is aborted (`body_idle_timeout`, default 60 s).
    pub body_idle_timeout: Duration,
    /// On SIGINT/SIGTERM, how long in-flight requests may run on after Weir
    /// stops accepting (`shutdown_grace`, default 10 s).
    pub shutdown_grace: Duration,
    /// Peers whose `X-Forwarded-*` headers are kept and appended to
    /// (`trusted_proxies`, CIDRs or addresses; default none).
    pub trusted_proxies: Vec<IpNet>,
    /// The name Weir gives itself in `Via` (`via_pseudonym`, default `weir`;
    /// RFC 9110 §7.6.3).
    pub via_pseudonym: String,
    /// Runtime worker threads that run connections and requests (`workers`,
    /// 1..=[`MAX_WORKERS`]; default: the CPUs this process may run on, as
    /// `std::thread::available_parallelism` reports them).
    pub workers: usize,
    /// Where the access log goes (`access_log`, default `"stderr"`).
    pub access_log: AccessLogTarget,
    /// An upgraded connection (a WebSocket tunnel, RFC 9110 §7.8) on which
    /// no byte moves either way for this long is closed on both sides
    /// (`upgrade_idle_timeout`, default 300 s).
    pub upgrade_idle_timeout: Duration,
    /// The request limits (`max_request_head_bytes` and the rest).
    pub limits: RequestLimits,
}

/// Where the access log (the `weir::access` lines) goes: `[server]
/// access_log`. Weir only produces the lines; the binary's log setup
/// routes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    /// With the other logs on stderr, filtered by `--log-level` like them
    /// (`"stderr"`, the default).
    Stderr,
    /// Nowhere (`"off"`): no line is formatted or written. Requests are
    /// still counted in `/metrics`.
    Off,
    /// Appended to this file (any other value, relative to the config
    /// file's directory), whatever `--log-level` says. A background thread
    /// writes it, so a request never waits for the disk unless the
    /// thread falls more than 128,000 lines behind.
    File(PathBuf),
}

/// The largest `[server] workers` accepted.
pub const MAX_WORKERS: usize = 1024;

/// The default of `[server] workers`: the CPUs this process may run on
/// (its affinity mask and cgroup quota counted), 1 when that is unknown.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// `[client]`: how Weir talks to upstreams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    /// TCP connect deadline (`connect_timeout`, default 5 s); exceeded → 504.
    pub connect_timeout: Duration,
    /// Deadline for the upstream's response head, from when the request is
    /// sent (`response_header_timeout`, default 30 s); exceeded → 504.
    pub response_header_timeout: Duration,
    /// Idle pooled connections are closed after this (`pool_idle_timeout`, default 90 s).
    pub pool_idle_timeout: Duration,
    /// Idle connections kept per upstream host (`pool_max_idle_per_host`, default 32).
    pub pool_max_idle_per_host: usize,
}

/// `[[upstream]]`: a named group of servers requests are forwarded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The name routes refer to.
    pub name: String,
    /// Where it is.
    pub target: UpstreamTarget,
    /// How a server is chosen for a request (`balance`, default round robin).
    pub balance: Balance,
    /// `[upstream.health]`: active checks; `None`: servers are healthy
    /// unless passive ejection says otherwise.
    pub health: Option<HealthCheck>,
    /// `[upstream.outlier]`: passive ejection.
    pub outlier: OutlierSettings,
    /// `[upstream.retry]`: when a failed attempt is tried again.
    pub retry: RetrySettings,
    /// `protocol`: the HTTP version spoken to its servers (default `http1`).
    pub protocol: Protocol,
    /// How its servers are reached over TLS: `Some` exactly when they are
    /// `https://` URLs (`[upstream.tls]`, or the defaults without it).
    pub tls: Option<super::upstream_tls::UpstreamTls>,
}

/// `protocol`: the HTTP version Weir speaks to an upstream's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// `"http1"` (default): HTTP/1.1, a pool of connections per server.
    #[default]
    Http1,
    /// `"h2c"` (alias `"h2"`): HTTP/2, one multiplexed connection per
    /// server: over cleartext TCP with prior knowledge (RFC 9113 §3.3) to
    /// `http://` servers, over TLS with ALPN `h2` (§3.2) to `https://` ones.
    H2c,
    /// `"auto"`: HTTP/2 for a request that came over HTTP/2 or is gRPC
    /// (`Content-Type: application/grpc…`, whatever version it came in),
    /// HTTP/1.1 for every other request. The servers must speak both.
    Auto,
}

impl Protocol {
    /// Whether a request that came as `received` (a gRPC call when
    /// `grpc`) goes to this upstream over HTTP/2.
    pub fn speaks_h2(self, received: http::Version, grpc: bool) -> bool {
        match self {
            Protocol::Http1 => false,
            Protocol::H2c => true,
            Protocol::Auto => received == http::Version::HTTP_2 || grpc,
        }
    }
}

/// One server of an upstream (`url`, or an entry of `servers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// Its URL; every server of an upstream has the same base path.
    pub url: UpstreamUrl,
    /// Its share of requests relative to the others (`weight`, 1..=1000,
    /// default 1).
    pub weight: u32,
    /// Requests in flight to it at most (`max_connections`); a server at
    /// its limit is skipped. `None`: no limit.
    pub max_connections: Option<u32>,
}

impl ServerSpec {
    /// `url` with weight 1 and no limit.
    pub fn one(url: UpstreamUrl) -> ServerSpec {
        ServerSpec {
            url,
            weight: 1,
            max_connections: None,
        }
    }
}

/// `balance`: how a server is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Balance {
    /// `"round_robin"` (default): in turn, by weight (smooth weighted round
    /// robin: a server of weight 3 gets 3 of every 4 requests beside one of
    /// weight 1, spread out).
    RoundRobin,
    /// `"least_outstanding"`: of two servers chosen at random, the one with
    /// fewer requests in flight per unit of weight (the power of two choices).
    LeastOutstanding,
    /// `"hash"`: consistent hashing of `hash_key` on a ring with 1,024
    /// points per unit of weight (weights summing to at most 4,096), so
    /// that adding a server moves only its share of keys. A request without
    /// the key is balanced round robin. `hash_ring = "ketama"` makes it
    /// nginx's ring instead (see [`super::RingHash`]).
    Hash(HashKey, super::ring::RingHash),
}

/// `hash_key`: what a `balance = "hash"` upstream hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// `"header:<name>"`: the first value of a request field.
    Header(http::HeaderName),
    /// `"cookie:<name>"`: a cookie's value.
    Cookie(String),
    /// `"client_addr"`: the client's IP address (the TCP peer's, or the
    /// right-most untrusted `X-Forwarded-For` entry behind trusted proxies).
    ClientAddr,
}

/// `[upstream.health]`: an active check of each server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// The path (and query) requested with `GET`, origin form.
    pub path: String,
    /// Time between checks of one server (`interval`, default 5 s).
    pub interval: Duration,
    /// Deadline of one check, connect to the end of the body (`timeout`,
    /// default 2 s).
    pub timeout: Duration,
    /// Statuses that pass (`expect_status`, e.g. `"200,204,300-399"`;
    /// default 200-399), as inclusive ranges.
    pub expect: Vec<(u16, u16)>,
    /// Passing checks in a row that make an unhealthy server healthy (`rise`, default 2).
    pub rise: u32,
    /// Failing checks in a row that make a healthy server unhealthy (`fall`, default 3).
    pub fall: u32,
}

/// `[upstream.outlier]`: passive ejection of servers that fail requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlierSettings {
    /// Connect failures or 5xx answers in a row that eject a server
    /// (`consecutive_failures`, default 5; 0 turns ejection off).
    pub consecutive_failures: u32,
    /// How long the first ejection lasts (`base_ejection`, default 10 s);
    /// each further ejection of the same server doubles it.
    pub base_ejection: Duration,
    /// The longest ejection (`max_ejection`, default 5 min).
    pub max_ejection: Duration,
    /// At most this share of an upstream's servers is ejected at once
    /// (`max_ejected_percent`, 0..=100, default 50); at least one server
    /// always stays in.
    pub max_ejected_percent: u32,
    /// The answer statuses that count as failures (`failure_statuses`,
    /// default `"500-599"`), as inclusive ranges. `"502-504"` counts only
    /// what a gateway sees of a broken server, as Envoy's
    /// `consecutive_gateway_failure` does, so that an application's own
    /// 500s (to bad input, say) never eject it.
    pub failure_statuses: Vec<(u16, u16)>,
}

impl OutlierSettings {
    /// Whether an answer with `status` counts toward ejection.
    pub fn counts(&self, status: http::StatusCode) -> bool {
        let code = status.as_u16();
        self.failure_statuses
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&code))
    }
}

/// `[upstream.retry]`: safe retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySettings {
    /// Tries per request at most, the first included (`attempts`, 1..=10,
    /// default 2; 1 turns retries off).
    pub attempts: u32,
    /// The largest request body, in bytes, kept for a retry
    /// (`retry_body_bytes`, default 64 KiB): a body with a declared
    /// `Content-Length` up to this is replayed on a retry; a larger or
    /// chunked one is not retried once it started going out. 0: never kept.
    pub body_bytes: u64,
    /// Retries allowed beside each 100 requests (`budget_percent`, default 20).
    pub budget_percent: u32,
    /// Retries per second allowed whatever the budget (`min_retries_per_second`, default 10).
    pub min_per_second: u32,
}

/// Where an upstream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamTarget {
    /// HTTP servers (`url = "http://host:port/base"`, or `servers`); at
    /// least one.
    Servers(Vec<ServerSpec>),
    /// Weir's built-in origin, started in-process (`origin = "embedded"`).
    /// Resolved to [`UpstreamTarget::Servers`] by
    /// [`Config::resolve_embedded`] before the proxy starts.
    Embedded(EmbeddedOrigin),
}

/// The settings of an `origin = "embedded"` upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedOrigin {
    /// The directory of static files (`root`, default `fixtures`),
    /// relative to the config file's directory when written relative.
    pub root: PathBuf,
    /// `test_endpoints` (default `true`): whether the origin's test and
    /// load-test endpoints answer; `false` leaves the static files and
    /// the `/fragment` markup the SSR demo needs.
    pub test_endpoints: bool,
}

/// An upstream's base URL: `http://authority/base-path` or `https://…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Host and port.
    pub authority: Authority,
    /// Prepended to every forwarded path; empty or starting with `/`, never ending with `/`.
    pub base_path: String,
}

impl UpstreamUrl {
    /// The absolute URI of a request forwarded here: the base path, then
    /// `forward_path` (the route's path after any prefix strip, starting
    /// with `/`), then `?query`. The one place an upstream URI is built.
    ///
    /// Returns `None` when the result is not a valid URI (a path or query
    /// with bytes a URI cannot hold).
    pub fn request_uri(&self, forward_path: &str, query: Option<&str>) -> Option<http::Uri> {
        let mut path = String::with_capacity(
            self.base_path.len() + forward_path.len() + query.map_or(0, |q| q.len() + 1),
        );
        path.push_str(&self.base_path);
        path.push_str(forward_path);
        if let Some(q) = query {
            path.push('?');
            path.push_str(q);
        }
        let path = http::uri::PathAndQuery::try_from(path).ok()?;
        http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
            .ok()
    }

    /// The URL of Weir's embedded origin listening on `addr`.
    pub fn local(addr: SocketAddr) -> Self {
        UpstreamUrl {
            scheme: Scheme::HTTP,
            // A SocketAddr always formats as a valid authority.
            authority: Authority::try_from(addr.to_string().as_str())
                .unwrap_or_else(|_| Authority::from_static("127.0.0.1")),
            base_path: String::new(),
        }
    }
}

impl std::fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.base_path)
    }
}

/// `[[route]]`: which requests go to which upstream.
#[derive(Debug, Clone)]
pub struct RouteSpec {
    /// Exact host to match, lower-case, without port; `None` matches any host.
    pub host: Option<String>,
    /// Path prefix to match, starting with `/`. Matches whole segments:
    /// `/api` matches `/api` and `/api/x`, not `/apix`.
    pub path_prefix: String,
    /// Remove the prefix before forwarding.
    pub strip_prefix: bool,
    /// Index into [`Config::upstreams`].
    pub upstream: usize,
    /// What to send as `Host`.
    pub host_header: HostHeader,
    /// The response transforms (`transforms` and the `[route.<stage>]`
    /// tables), checked; empty when the route lists none.
    pub transforms: weir_transform::chain::ChainSpec,
    /// `[route.mirror]`: a shadow upstream that gets a copy of each request.
    pub mirror: Option<MirrorSpec>,
    /// `[route.body_log]`: log the first bytes of bodies.
    pub body_log: Option<BodyLogSpec>,
    /// `cache = true`: GET responses are served from and stored in the
    /// response cache ([`CacheSettings`]). Default false.
    pub cache: bool,
    /// `[route.ssr]`: responses are templates composed from fragments.
    pub ssr: Option<SsrSpec>,
    /// `upgrade`: the protocols (`Upgrade` tokens, RFC 9110 §7.8; lower-case)
    /// a client may switch to through this route, e.g. `["websocket"]`.
    /// Empty (the default): `Upgrade` is removed like any hop-by-hop field.
    pub upgrade: Vec<String>,
    /// The route's limits: `max_request_body_bytes` (the route's, else
    /// `[server]`'s) and `max_concurrent_requests`.
    pub limits: RouteLimits,
}

/// A route's `[route.ssr]`, validated.
#[derive(Debug, Clone)]
pub struct SsrSpec {
    /// The template the route answers with, read when the config was
    /// loaded; `None`: templates come from the upstream.
    pub template_file: Option<TemplateFile>,
    /// Which upstream responses are templates.
    pub detect: TemplateDetect,
    /// Deadlines, caps and limits of the composition.
    pub compose: std::sync::Arc<weir_ssr::ComposeSettings>,
    /// Client request fields forwarded to fragment requests (besides
    /// `traceparent`, `tracestate` and `x-request-id`, always forwarded).
    pub forward_headers: Vec<http::HeaderName>,
    /// Whether the client's `Cookie` goes to fragment requests too.
    pub forward_cookies: bool,
    /// Whether fragment responses go through the response cache (stored
    /// when their fields allow it, RFC 9111).
    pub cache_fragments: bool,
    /// Indices into [`Config::upstreams`] of the upstreams fragment `src`s
    /// may name (the route's own always among them).
    pub fragment_upstreams: Vec<usize>,
}

/// A template file read at load time.
#[derive(Debug, Clone)]
pub struct TemplateFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its bytes (at most [`MAX_TEMPLATE_FILE_BYTES`](super::MAX_TEMPLATE_FILE_BYTES)).
    pub bytes: bytes::Bytes,
}

/// `[route.ssr] detect`: which upstream responses are templates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TemplateDetect {
    /// `text/html` responses that carry `X-Weir-Template: 1` (the default).
    #[default]
    Header,
    /// Every `text/html` response.
    Html,
}

/// `[route.mirror]`: where and how a route's requests are copied.
///
/// The copy goes out in the background; its response is read and thrown
/// away. Its request body is a *secondary* branch of the client's body
/// (weir-stream `share()`): it never slows the primary request, and it is
/// detached (the mirror request aborted) if it falls more than `hwm`
/// chunks (or 1 MiB) behind.
#[derive(Debug, Clone)]
pub struct MirrorSpec {
    /// Index into [`Config::upstreams`] of the shadow upstream.
    pub upstream: usize,
    /// Whole-exchange deadline for one mirror request (`timeout`, default 5 s).
    pub timeout: Duration,
    /// How far, in chunks, the mirror's body may fall behind the primary's
    /// before it is detached (`hwm`, default 16, 1..=1024).
    pub hwm: usize,
    /// Mirror requests in flight at once for this route; beyond it,
    /// requests are not mirrored (`max_in_flight`, default 64, at least 1).
    pub max_in_flight: usize,
}

/// `[route.body_log]`: how much of each body to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLogSpec {
    /// First bytes of the request body to log (`request_bytes`, default 1024; 0: none).
    pub request_bytes: usize,
    /// First bytes of the response body to log (`response_bytes`, default 1024; 0: none).
    pub response_bytes: usize,
}

/// What a route sends upstream as `Host`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostHeader {
    /// The client's `Host` (or HTTP/2 `:authority`), unchanged (default).
    #[default]
    Preserve,
    /// The upstream URL's authority.
    Upstream,
}

/// `request_body_rate_grace` when left out.
pub(super) const BODY_RATE_GRACE: Duration = Duration::from_secs(10);

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
            body_rate_grace: BODY_RATE_GRACE,
            max_connections: 10_000,
        }
    }
}

/// `[route.rate_limit]`: a token bucket per key (GCRA).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitSpec {
    /// Tokens added per second, per key (`requests_per_second`, 1–1,000,000).
    pub requests_per_second: u32,
    /// Bucket size: requests a key may send at once (`burst`, default
    /// `requests_per_second`, 1–1,000,000).
    pub burst: u32,
    /// What a bucket belongs to (`key`, default `"client_addr"`; also
    /// `"header:<name>"`, `"cookie:<name>"`).
    pub key: HashKey,
    /// Where the buckets live (`scope`, default `"replica"`).
    pub scope: RateLimitScope,
}

/// Where a rate limit's buckets live (`[route.rate_limit] scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RateLimitScope {
    /// `"replica"`: in this process; N replicas admit N times the rate.
    #[default]
    Replica,
    /// `"fleet"`: each key's bucket lives on the key's owner on the
    /// `[fleet]` ring, which every other replica asks (needs `[fleet]`).
    Fleet,
    /// `"redis"`: each key's bucket is a Redis key (needs `[redis]`).
    Redis,
}

/// A route's own limits (`[[route]]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteLimits {
    /// `max_request_body_bytes`: replaces the `[server]` one on this route.
    pub max_body_bytes: Option<u64>,
    /// `max_concurrent_requests`: most requests of this route in flight at
    /// once (until their response body ends); past it `503` at once.
    /// Default none.
    pub max_concurrent_requests: Option<usize>,
    /// `[route.rate_limit]`: past it `429` with `Retry-After`.
    pub rate_limit: Option<RateLimitSpec>,
}
