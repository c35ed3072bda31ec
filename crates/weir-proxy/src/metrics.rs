//! Prometheus metrics: one [`Metrics`] per proxy, scraped from the admin
//! listener's `/metrics` ([`crate::admin`]).
//!
//! Each proxy owns its own `prometheus_client` [`Registry`]; there is no
//! global recorder, so several proxies in one process (tests) keep separate
//! counts.
//!
//! Per-request families are fed from the access log path
//! ([`crate::access_log::AccessRecord`]) when a request ends, so a request
//! is counted exactly once, with the same status and outcome its log line
//! shows. Connection gauges are read at scrape time from the exact counts
//! of [`crate::counted::ConnectionCounts`].
//!
//! | family | type | labels |
//! |---|---|---|
//! | `weir_requests_total` | counter | `route`, `status`, `outcome` |
//! | `weir_request_duration_seconds` | histogram | `route` |
//! | `weir_bytes_in_total` | counter (bytes) | `route` |
//! | `weir_bytes_out_total` | counter (bytes) | `route` |
//! | `weir_client_aborts_total` | counter | `route` |
//! | `weir_upstream_connections` | gauge | `upstream`, `state` (`live`, `idle`) |
//! | `weir_upstream_requests_in_flight` | gauge | `upstream` |
//! | `weir_upstream_connections_opened_total` | counter | — |
//! | `weir_cache_requests_total` | counter | `result` (`hit`, `miss`, `stale`) |
//! | `weir_cache_fills_total` | counter | `result` (`stored`, `abandoned`, `refreshed`, `failed`) |
//! | `weir_share_lag_detaches_total` | counter | `branch` |
//! | `weir_mirror_requests_total` | counter | `outcome` (`ok`, `error`, `timeout`, `detached`, `skipped`) |
//! | `weir_ssr_pages_total` | counter | `result` (`composed`, `redirect`, `failed`) |
//! | `weir_ssr_fragments_total` | counter | `outcome` (`ok`, `fallback`, `inline`, `empty`, `cut`, `skipped`, `cancelled`) |
//! | `weir_ssr_fragment_failures_total` | counter | `kind` (`timeout`, `error`, `status`, `coding`, `loop`, `depth`, `limit`, `no_source`) |

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::counted::ConnectionCounts;
use crate::outcome::{MirrorOutcome, Outcome};

/// The `Content-Type` of [`Metrics::encode`]'s output: the OpenMetrics text
/// format, which Prometheus scrapes natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the request duration histogram, in seconds: 1 ms to 30 s.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The `route` label of requests that matched no route (404, or a request
/// refused before routing).
pub const NO_ROUTE: &str = "-";

/// The `branch` values of `weir_share_lag_detaches_total` listed (at zero)
/// from the start; [`Metrics::share_lag_detach`] accepts others too.
pub const SHARE_BRANCHES: [&str; 3] = ["cache", "mirror", "tap"];

/// A route's `route` label: `host` + `path_prefix` (`example.com/api`), or
/// the bare `path_prefix` (`/api`) for a route that matches any host.
pub fn route_label(host: Option<&str>, path_prefix: &str) -> String {
    match host {
        Some(h) => format!("{h}{path_prefix}"),
        None => path_prefix.to_owned(),
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: Arc<String>,
    status: u16,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: Arc<String>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BranchLabels {
    branch: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MirrorLabels {
    outcome: &'static str,
}

/// What a cache lookup found (`weir_cache_requests_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheResult {
    /// A fresh stored response was served.
    Hit,
    /// Nothing usable was stored; the request went upstream.
    Miss,
    /// A stored response past its freshness was served.
    Stale,
}

impl CacheResult {
    const ALL: [CacheResult; 3] = [CacheResult::Hit, CacheResult::Miss, CacheResult::Stale];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheResult::Hit => "hit",
            CacheResult::Miss => "miss",
            CacheResult::Stale => "stale",
        }
    }
}

/// How a cache fill ended (`weir_cache_fills_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FillResult {
    /// The whole response was stored.
    Stored,
    /// The fill stopped before the end of the response; nothing was stored.
    Abandoned,
    /// A `304` to a revalidation refreshed a stored response in place
    /// (in the request's path or in the background).
    Refreshed,
    /// A background revalidation (`stale-while-revalidate`) stored
    /// nothing: the upstream failed or answered 5xx, a `304` that does not
    /// match the entry, or a response that may not be stored.
    Failed,
}

impl FillResult {
    const ALL: [FillResult; 4] = [
        FillResult::Stored,
        FillResult::Abandoned,
        FillResult::Refreshed,
        FillResult::Failed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FillResult::Stored => "stored",
            FillResult::Abandoned => "abandoned",
            FillResult::Refreshed => "refreshed",
            FillResult::Failed => "failed",
        }
    }
}

/// One finished request, as [`Metrics::record_request`] counts it.
#[derive(Debug, Clone)]
pub struct RequestSample<'a> {
    /// The route label ([`route_label`], or [`NO_ROUTE`]).
    pub route: &'a Arc<String>,
    /// The status sent to the client; `0` when the client left before any
    /// response head was sent.
    pub status: u16,
    /// How it ended, as the access log says.
    pub outcome: Outcome,
    /// Request body bytes forwarded upstream.
    pub bytes_in: u64,
    /// Response body bytes sent to the client.
    pub bytes_out: u64,
    /// From the request head's arrival to the end of the response.
    pub duration: Duration,
}

/// A proxy's metrics. Shared (`Arc`) by the proxy, its access records and
/// the admin listener.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    bytes_in: Family<RouteLabels, Counter>,
    bytes_out: Family<RouteLabels, Counter>,
    client_aborts: Family<RouteLabels, Counter>,
    in_flight: Family<UpstreamLabels, Gauge>,
    cache_requests: Family<ResultLabels, Counter>,
    cache_fills: Family<ResultLabels, Counter>,
    share_lag_detaches: Family<BranchLabels, Counter>,
    mirror_requests: Family<MirrorLabels, Counter>,
    ssr_pages: Family<ResultLabels, Counter>,
    ssr_fragments: Family<MirrorLabels, Counter>,
    ssr_failures: Family<KindLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The `result` values of `weir_ssr_pages_total`.
pub const SSR_PAGE_RESULTS: [&str; 3] = ["composed", "redirect", "failed"];

/// The `kind` values of `weir_ssr_fragment_failures_total`.
pub const SSR_FAILURE_KINDS: [&str; 8] = [
    "timeout",
    "error",
    "status",
    "coding",
    "loop",
    "depth",
    "limit",
    "no_source",
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

impl Metrics {
    /// Registers every family. `connections` is read at each scrape for the
    /// connection gauges; `upstreams` (authorities, `host:port`) are listed
    /// with zero values before their first connection.
    pub fn new(connections: Arc<ConnectionCounts>, upstreams: Vec<String>) -> Metrics {
        let mut registry = Registry::with_prefix("weir");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests finished, by route, status sent and outcome (as in the access log)",
            requests.clone(),
        );
        let duration: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        registry.register_with_unit(
            "request_duration",
            "Time from the request head's arrival to the end of the response",
            Unit::Seconds,
            duration.clone(),
        );
        let bytes_in = Family::<RouteLabels, Counter>::default();
        registry.register(
            "bytes_in",
            "Request body bytes forwarded upstream",
            bytes_in.clone(),
        );
        let bytes_out = Family::<RouteLabels, Counter>::default();
        registry.register(
            "bytes_out",
            "Response body bytes sent to clients",
            bytes_out.clone(),
        );
        let client_aborts = Family::<RouteLabels, Counter>::default();
        registry.register(
            "client_aborts",
            "Requests whose client went away before the end of the response",
            client_aborts.clone(),
        );
        let in_flight = Family::<UpstreamLabels, Gauge>::default();
        registry.register(
            "upstream_requests_in_flight",
            "Requests sent to the upstream whose response has not ended yet",
            in_flight.clone(),
        );
        for upstream in &upstreams {
            drop(in_flight.get_or_create(&UpstreamLabels {
                upstream: upstream.clone(),
            }));
        }
        registry.register_collector(Box::new(ConnectionCollector {
            connections,
            upstreams,
            in_flight: in_flight.clone(),
        }));

        let cache_requests = Family::<ResultLabels, Counter>::default();
        registry.register(
            "cache_requests",
            "Cache lookups, by what they found",
            cache_requests.clone(),
        );
        for r in CacheResult::ALL {
            drop(cache_requests.get_or_create(&ResultLabels { result: r.as_str() }));
        }
        let cache_fills = Family::<ResultLabels, Counter>::default();
        registry.register(
            "cache_fills",
            "Cache fills, by how they ended",
            cache_fills.clone(),
        );
        for r in FillResult::ALL {
            drop(cache_fills.get_or_create(&ResultLabels { result: r.as_str() }));
        }
        let share_lag_detaches = Family::<BranchLabels, Counter>::default();
        registry.register(
            "share_lag_detaches",
            "Branches of a shared body cut loose for falling too far behind",
            share_lag_detaches.clone(),
        );
        for branch in SHARE_BRANCHES {
            drop(share_lag_detaches.get_or_create(&BranchLabels {
                branch: branch.to_owned(),
            }));
        }
        let mirror_requests = Family::<MirrorLabels, Counter>::default();
        registry.register(
            "mirror_requests",
            "Mirrored requests, by outcome",
            mirror_requests.clone(),
        );
        for o in MirrorOutcome::ALL {
            drop(mirror_requests.get_or_create(&MirrorLabels {
                outcome: o.as_str(),
            }));
        }

        let ssr_pages = Family::<ResultLabels, Counter>::default();
        registry.register(
            "ssr_pages",
            "SSR pages, by what the composition decided (composed, the primary's redirect, failed)",
            ssr_pages.clone(),
        );
        for r in SSR_PAGE_RESULTS {
            drop(ssr_pages.get_or_create(&ResultLabels { result: r }));
        }
        let ssr_fragments = Family::<MirrorLabels, Counter>::default();
        registry.register(
            "ssr_fragments",
            "SSR fragments, by how their slot was filled",
            ssr_fragments.clone(),
        );
        for o in weir_ssr::FragmentOutcome::ALL {
            drop(ssr_fragments.get_or_create(&MirrorLabels {
                outcome: o.as_str(),
            }));
        }
        let ssr_failures = Family::<KindLabels, Counter>::default();
        registry.register(
            "ssr_fragment_failures",
            "SSR fragments that fell back or were cut, by the kind of their last failure",
            ssr_failures.clone(),
        );
        for kind in SSR_FAILURE_KINDS {
            drop(ssr_failures.get_or_create(&KindLabels { kind }));
        }

        Metrics {
            ssr_pages,
            ssr_fragments,
            ssr_failures,
            registry,
            requests,
            duration,
            bytes_in,
            bytes_out,
            client_aborts,
            in_flight,
            cache_requests,
            cache_fills,
            share_lag_detaches,
            mirror_requests,
        }
    }

    /// Counts one finished request. Called once per request, by the access
    /// log record.
    pub fn record_request(&self, s: &RequestSample<'_>) {
        let route = RouteLabels {
            route: Arc::clone(s.route),
        };
        self.requests
            .get_or_create(&RequestLabels {
                route: Arc::clone(s.route),
                status: s.status,
                outcome: s.outcome.as_str(),
            })
            .inc();
        self.duration
            .get_or_create(&route)
            .observe(s.duration.as_secs_f64());
        self.bytes_in.get_or_create(&route).inc_by(s.bytes_in);
        self.bytes_out.get_or_create(&route).inc_by(s.bytes_out);
        if s.outcome == Outcome::ClientAborted {
            self.client_aborts.get_or_create(&route).inc();
        }
    }

    /// Marks a request to `upstream` (its authority, `host:port`) as in
    /// flight until the returned guard is dropped (when its response ends).
    pub fn upstream_request(&self, upstream: &str) -> InFlight {
        let gauge = self.in_flight.get_or_create_owned(&UpstreamLabels {
            upstream: upstream.to_owned(),
        });
        gauge.inc();
        InFlight { gauge }
    }

    /// Counts a cache lookup.
    pub fn cache_request(&self, result: CacheResult) {
        self.cache_requests
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }

    /// Counts a finished cache fill.
    pub fn cache_fill(&self, result: FillResult) {
        self.cache_fills
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }

    /// Counts a shared-body branch detached for lagging; `branch` names it
    /// (e.g. `client`, `cache`, `mirror`).
    pub fn share_lag_detach(&self, branch: &str) {
        self.share_lag_detaches
            .get_or_create(&BranchLabels {
                branch: branch.to_owned(),
            })
            .inc();
    }

    /// Counts a finished mirrored request.
    pub fn mirror_request(&self, outcome: MirrorOutcome) {
        self.mirror_requests
            .get_or_create(&MirrorLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Counts an SSR page by what its composition decided
    /// ([`SSR_PAGE_RESULTS`]).
    pub fn ssr_page(&self, result: &'static str) {
        self.ssr_pages.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts a finished SSR fragment, and the failure on its way if any.
    pub fn ssr_fragment(
        &self,
        outcome: weir_ssr::FragmentOutcome,
        failure: Option<&weir_ssr::Failure>,
    ) {
        self.ssr_fragments
            .get_or_create(&MirrorLabels {
                outcome: outcome.as_str(),
            })
            .inc();
        if let Some(f) = failure {
            self.ssr_failures
                .get_or_create(&KindLabels { kind: f.kind() })
                .inc();
        }
    }

    /// Every family in the OpenMetrics text format ([`CONTENT_TYPE`]),
    /// ending with `# EOF`.
    ///
    /// # Errors
    /// Only a formatting error, which writing to a `String` never gives.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::with_capacity(8 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Holds one request in `weir_upstream_requests_in_flight` while it lives.
#[derive(Debug)]
pub struct InFlight {
    gauge: Gauge,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Reads the connection counts at scrape time.
///
/// `idle = max(0, live - in_flight)`: an approximation, since a connection
/// is released a moment before or after the response that used it ends
/// (and a request still waiting for a connection counts as in flight).
#[derive(Debug)]
struct ConnectionCollector {
    connections: Arc<ConnectionCounts>,
    upstreams: Vec<String>,
    in_flight: Family<UpstreamLabels, Gauge>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    upstream: String,
    state: &'static str,
}

impl Collector for ConnectionCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let mut live: BTreeMap<String, u64> =
            self.upstreams.iter().map(|u| (u.clone(), 0)).collect();
        live.extend(self.connections.live_by_authority());

        let mut family = encoder.encode_descriptor(
            "upstream_connections",
            "Upstream connections open now (live), and those of them not serving a request (idle, approximate: live minus in-flight requests)",
            None,
            MetricType::Gauge,
        )?;
        for (upstream, live) in &live {
            let busy = self
                .in_flight
                .get(&UpstreamLabels {
                    upstream: upstream.clone(),
                })
                .map_or(0, |g| g.get().max(0) as u64);
            for (state, value) in [("live", *live), ("idle", live.saturating_sub(busy))] {
                let labels = ConnectionLabels {
                    upstream: upstream.clone(),
                    state,
                };
                ConstGauge::new(value as i64).encode(family.encode_family(&labels)?)?;
            }
        }

        let opened = ConstCounter::new(self.connections.opened());
        opened.encode(encoder.encode_descriptor(
            "upstream_connections_opened",
            "Upstream connections opened since the start",
            None,
            opened.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new(
            Arc::new(ConnectionCounts::default()),
            vec!["127.0.0.1:3000".to_owned()],
        )
    }

    /// Families whose label values are known up front are listed at zero
    /// before anything happens (per-route ones appear with their first
    /// request: a family with no sample is not written).
    #[test]
    fn known_label_values_are_listed_at_zero_from_the_start() {
        let text = metrics().encode().expect("encode");
        for family in [
            "weir_upstream_connections",
            "weir_upstream_requests_in_flight",
            "weir_upstream_connections_opened_total",
            "weir_cache_requests_total",
            "weir_cache_fills_total",
            "weir_share_lag_detaches_total",
            "weir_mirror_requests_total",
        ] {
            let family = family.trim_end_matches("_total");
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family}\n{text}"
            );
        }
        for sample in [
            "weir_cache_requests_total{result=\"hit\"} 0",
            "weir_cache_requests_total{result=\"stale\"} 0",
            "weir_cache_fills_total{result=\"abandoned\"} 0",
            "weir_mirror_requests_total{outcome=\"detached\"} 0",
            "weir_share_lag_detaches_total{branch=\"tap\"} 0",
            "weir_upstream_connections{upstream=\"127.0.0.1:3000\",state=\"live\"} 0",
            "weir_upstream_connections{upstream=\"127.0.0.1:3000\",state=\"idle\"} 0",
            "weir_upstream_requests_in_flight{upstream=\"127.0.0.1:3000\"} 0",
            "weir_upstream_connections_opened_total 0",
        ] {
            assert!(text.contains(sample), "{sample}\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_request_is_counted_with_its_labels_bytes_and_duration() {
        let m = metrics();
        let route = Arc::new(route_label(Some("example.com"), "/api"));
        for (status, outcome) in [
            (200, Outcome::Ok),
            (200, Outcome::Ok),
            (200, Outcome::ClientAborted),
        ] {
            m.record_request(&RequestSample {
                route: &route,
                status,
                outcome,
                bytes_in: 5,
                bytes_out: 100,
                duration: Duration::from_millis(3),
            });
        }
        let text = m.encode().expect("encode");
        for sample in [
            "weir_requests_total{route=\"example.com/api\",status=\"200\",outcome=\"ok\"} 2",
            "weir_requests_total{route=\"example.com/api\",status=\"200\",outcome=\"client_aborted\"} 1",
            "weir_bytes_in_total{route=\"example.com/api\"} 15",
            "weir_bytes_out_total{route=\"example.com/api\"} 300",
            "weir_client_aborts_total{route=\"example.com/api\"} 1",
            "weir_request_duration_seconds_count{route=\"example.com/api\"} 3",
            "weir_request_duration_seconds_bucket{le=\"0.0025\",route=\"example.com/api\"} 0",
            "weir_request_duration_seconds_bucket{le=\"0.005\",route=\"example.com/api\"} 3",
            "# TYPE weir_requests counter",
            "# TYPE weir_request_duration_seconds histogram",
            "# TYPE weir_bytes_out counter",
        ] {
            assert!(text.contains(sample), "{sample}\n{text}");
        }
    }

    #[test]
    fn in_flight_guard_counts_until_dropped_and_idle_is_live_minus_busy() {
        let m = metrics();
        let a = m.upstream_request("127.0.0.1:3000");
        let b = m.upstream_request("127.0.0.1:3000");
        let text = m.encode().expect("encode");
        assert!(
            text.contains("weir_upstream_requests_in_flight{upstream=\"127.0.0.1:3000\"} 2"),
            "{text}"
        );
        // No live connection: idle never goes below zero.
        assert!(
            text.contains(
                "weir_upstream_connections{upstream=\"127.0.0.1:3000\",state=\"idle\"} 0"
            ),
            "{text}"
        );
        drop((a, b));
        let text = m.encode().expect("encode");
        assert!(
            text.contains("weir_upstream_requests_in_flight{upstream=\"127.0.0.1:3000\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn later_features_have_counters_to_increment() {
        let m = metrics();
        m.cache_request(CacheResult::Hit);
        m.cache_request(CacheResult::Miss);
        m.cache_request(CacheResult::Hit);
        m.cache_fill(FillResult::Abandoned);
        m.share_lag_detach("mirror");
        m.mirror_request(MirrorOutcome::Timeout);
        let text = m.encode().expect("encode");
        for sample in [
            "weir_cache_requests_total{result=\"hit\"} 2",
            "weir_cache_requests_total{result=\"miss\"} 1",
            "weir_cache_fills_total{result=\"abandoned\"} 1",
            "weir_cache_fills_total{result=\"stored\"} 0",
            "weir_share_lag_detaches_total{branch=\"mirror\"} 1",
            "weir_mirror_requests_total{outcome=\"timeout\"} 1",
            "weir_mirror_requests_total{outcome=\"ok\"} 0",
        ] {
            assert!(text.contains(sample), "{sample}\n{text}");
        }
    }

    #[test]
    fn two_proxies_keep_separate_counts() {
        let (a, b) = (metrics(), metrics());
        a.mirror_request(MirrorOutcome::Ok);
        assert!(
            b.encode()
                .expect("encode")
                .contains("weir_mirror_requests_total{outcome=\"ok\"} 0")
        );
    }
}
