//! Prometheus metrics: one [`Metrics`] per proxy, scraped from the admin
//! listener's `/metrics` ([`crate::admin`]).
//!
//! Each proxy owns its own `prometheus_client` [`Registry`]; there is no
//! global recorder, so several proxies in one process (tests) keep separate
//! counts.
//!
//! The registry is the only counter: every count Weir keeps is a family
//! here, and tests read them through the `*_count` methods. (The exact
//! live upstream connections are kept by [`crate::counted`], one guard per
//! connection, and read into the gauges at scrape time.)
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
//! | `weir_upstream_attempts_total` | counter | `upstream`, `server`, `result` (`ok`, `5xx`, `connect_failed`, `failed`, `timeout`) |
//! | `weir_upstream_ejections_total` | counter | `upstream`, `server` |
//! | `weir_upstream_retries_total` | counter | `upstream`, `result` (`retried`, `budget_exhausted`) |
//! | `weir_upstream_server_available` | gauge | `upstream`, `server` |
//! | `weir_cache_requests_total` | counter | `result` (`hit`, `miss`, `stale`) |
//! | `weir_cache_fills_total` | counter | `result` (`stored`, `abandoned`, `refreshed`, `failed`) |
//! | `weir_cache_collapsed_total` | counter | — |
//! | `weir_cache_not_modified_total` | counter | — |
//! | `weir_cache_background_revalidations_total` | counter | — |
//! | `weir_share_lag_detaches_total` | counter | `branch` |
//! | `weir_mirror_requests_total` | counter | `outcome` (`ok`, `error`, `timeout`, `detached`, `skipped`) |
//! | `weir_ssr_pages_total` | counter | `result` (`composed`, `redirect`, `failed`) |
//! | `weir_ssr_fragments_total` | counter | `outcome` (`ok`, `fallback`, `inline`, `empty`, `cut`, `skipped`, `cancelled`) |
//! | `weir_ssr_fragment_failures_total` | counter | `kind` (`timeout`, `error`, `status`, `coding`, `loop`, `depth`, `limit`, `no_source`) |
//! | `weir_tls_handshake_errors_total` | counter | — |
//! | `weir_config_reloads_total` | counter | `result` (`ok`, `error`) |
//! | `weir_config_last_reload_success_timestamp_seconds` | gauge | — |
//! | `weir_fleet_members` | gauge | — |
//! | `weir_fleet_ring_epoch` | gauge | — |
//! | `weir_fleet_requests_total` | counter | `result` (`forwarded`, `peer_error`, `owner`, `served_for_peer`, `ring_disagreement`, `handoff`, `peek_served`, `bad_token`, `rate_asked`, `rate_answered`, `bounded`, `l1_hit`, `invalidated`) |
//! | `weir_rate_limit_fallbacks_total` | counter | `scope` (`fleet`, `redis`) |

mod connections;
mod fleet;
mod groups;
mod labels;
mod reloads;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use connections::ConnectionCollector;
pub use connections::InFlight;
pub use fleet::{FleetFamilies, FleetResult};
use groups::{AttemptLabels, AvailableCollector, GroupFamilies, RetryLabels, ServerLabels};
pub use groups::{RETRY_RESULTS, ServerStates};
use labels::{
    BranchLabels, KindLabels, MirrorLabels, RequestLabels, ResultLabels, RouteLabels,
    UpstreamLabels,
};
pub use labels::{
    CONTENT_TYPE, CacheResult, DURATION_BUCKETS, FillResult, NO_ROUTE, SHARE_BRANCHES,
    SSR_FAILURE_KINDS, SSR_PAGE_RESULTS, route_label,
};

use crate::counted::ConnectionCounts;
use crate::outcome::{MirrorOutcome, Outcome};

/// A route's `route` label and its per-route samples, found once (at the
/// route's first request, as the samples appear) and kept.
#[derive(Debug)]
pub struct RouteMetrics {
    label: Arc<String>,
    samples: std::sync::OnceLock<RouteSamples>,
}

#[derive(Debug)]
struct RouteSamples {
    duration: Histogram,
    bytes_in: Counter,
    bytes_out: Counter,
}

impl RouteMetrics {
    /// The metrics of the route labelled `label` ([`route_label`], or
    /// [`NO_ROUTE`]).
    pub fn new(label: String) -> RouteMetrics {
        RouteMetrics {
            label: Arc::new(label),
            samples: std::sync::OnceLock::new(),
        }
    }

    /// The label.
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// One finished request, as [`Metrics::record_request`] counts it.
#[derive(Debug, Clone)]
pub struct RequestSample<'a> {
    /// Its route's metrics.
    pub route: &'a RouteMetrics,
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

/// A proxy's metrics. Shared (`Arc`) by the proxy, its access records,
/// the cache, the mirrors and the admin listener.
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
    cache_collapsed: Counter,
    cache_not_modified: Counter,
    cache_background: Counter,
    tls_handshake_errors: Counter,
    /// Downstream connections open now (`weir_downstream_connections`).
    pub downstream_open: Gauge,
    /// Connections that waited for a slot of `max_connections`.
    pub downstream_waits: Counter,
    share_lag_detaches: Family<BranchLabels, Counter>,
    mirror_requests: Family<MirrorLabels, Counter>,
    ssr_pages: Family<ResultLabels, Counter>,
    ssr_fragments: Family<MirrorLabels, Counter>,
    ssr_failures: Family<KindLabels, Counter>,
    groups: GroupFamilies,
    reloads: reloads::ReloadFamilies,
    fleet: fleet::FleetFamilies,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Registers a counter family as `weir_<name>_total`, with a sample at
/// zero for each of `known` (label values known up front).
fn counters<L>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    known: impl IntoIterator<Item = L>,
) -> Family<L, Counter>
where
    L: prometheus_client::encoding::EncodeLabelSet
        + Clone
        + std::hash::Hash
        + Eq
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let family = Family::<L, Counter>::default();
    registry.register(name, help, family.clone());
    for labels in known {
        drop(family.get_or_create(&labels));
    }
    family
}

/// Registers one counter without labels as `weir_<name>_total`.
fn counter(registry: &mut Registry, name: &str, help: &str) -> Counter {
    let counter = Counter::default();
    registry.register(name, help, counter.clone());
    counter
}

fn results(values: impl IntoIterator<Item = &'static str>) -> impl Iterator<Item = ResultLabels> {
    values.into_iter().map(|result| ResultLabels { result })
}

impl Metrics {
    /// Registers every family. `connections` is read at each scrape for the
    /// connection gauges; `upstreams` (authorities, `host:port`) are listed
    /// with zero values before their first connection.
    pub fn new(connections: Arc<ConnectionCounts>, upstreams: Vec<String>) -> Metrics {
        let mut registry = Registry::with_prefix("weir");
        let r = &mut registry;
        let requests = counters(
            r,
            "requests",
            "Requests finished, by route, status sent and outcome (as in the access log)",
            std::iter::empty(),
        );
        let duration: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        r.register_with_unit(
            "request_duration",
            "Time from the request head's arrival to the end of the response",
            Unit::Seconds,
            duration.clone(),
        );
        let bytes_in = counters(
            r,
            "bytes_in",
            "Request body bytes forwarded upstream",
            std::iter::empty(),
        );
        let bytes_out = counters(
            r,
            "bytes_out",
            "Response body bytes sent to clients",
            std::iter::empty(),
        );
        let client_aborts = counters(
            r,
            "client_aborts",
            "Requests whose client went away before the end of the response",
            std::iter::empty(),
        );
        let in_flight = Family::<UpstreamLabels, Gauge>::default();
        r.register(
            "upstream_requests_in_flight",
            "Requests sent to the upstream whose response has not ended yet",
            in_flight.clone(),
        );
        for upstream in &upstreams {
            drop(in_flight.get_or_create(&UpstreamLabels {
                upstream: upstream.clone(),
            }));
        }
        r.register_collector(Box::new(ConnectionCollector {
            connections,
            upstreams,
            in_flight: in_flight.clone(),
        }));
        let groups = GroupFamilies::default();
        r.register(
            "upstream_attempts",
            "Attempts sent to upstream servers, by how they ended",
            groups.attempts.clone(),
        );
        r.register(
            "upstream_ejections",
            "Times a server was ejected for failing requests in a row",
            groups.ejections.clone(),
        );
        r.register(
            "upstream_retries",
            "Failed attempts tried again on another server, and those the retry budget refused",
            groups.retries.clone(),
        );
        let downstream_open = Gauge::default();
        r.register(
            "downstream_connections",
            "Downstream connections open now",
            downstream_open.clone(),
        );
        let downstream_waits = counter(
            r,
            "downstream_connection_waits",
            "Connections that waited in the backlog because max_connections were open",
        );
        r.register_collector(Box::new(AvailableCollector {
            states: Arc::clone(&groups.states),
        }));
        let reloads = reloads::ReloadFamilies::register(r);
        let fleet = fleet::FleetFamilies::register(r);
        Metrics {
            reloads,
            fleet,
            requests,
            duration,
            bytes_in,
            bytes_out,
            client_aborts,
            in_flight,
            cache_requests: counters(
                r,
                "cache_requests",
                "Cacheable requests, by where their answer came from",
                results(CacheResult::ALL.map(CacheResult::as_str)),
            ),
            cache_fills: counters(
                r,
                "cache_fills",
                "Cache fills, by how they ended",
                results(FillResult::ALL.map(FillResult::as_str)),
            ),
            cache_collapsed: counter(
                r,
                "cache_collapsed",
                "Cache hits read from another request's fill (also counted as hits)",
            ),
            cache_not_modified: counter(
                r,
                "cache_not_modified",
                "304 answers the cache made to a client's own conditional request",
            ),
            cache_background: counter(
                r,
                "cache_background_revalidations",
                "Background revalidations started (stale-while-revalidate)",
            ),
            tls_handshake_errors: counter(
                r,
                "tls_handshake_errors",
                "TLS handshakes on listeners that failed or timed out",
            ),
            share_lag_detaches: counters(
                r,
                "share_lag_detaches",
                "Branches of a shared body cut loose for falling too far behind",
                SHARE_BRANCHES.map(|b| BranchLabels {
                    branch: b.to_owned(),
                }),
            ),
            mirror_requests: counters(
                r,
                "mirror_requests",
                "Mirrored requests, by outcome",
                MirrorOutcome::ALL.map(|o| MirrorLabels {
                    outcome: o.as_str(),
                }),
            ),
            ssr_pages: counters(
                r,
                "ssr_pages",
                "SSR pages, by what the composition decided (composed, the primary's redirect, failed)",
                results(SSR_PAGE_RESULTS),
            ),
            ssr_fragments: counters(
                r,
                "ssr_fragments",
                "SSR fragments, by how their slot was filled",
                weir_ssr::FragmentOutcome::ALL.map(|o| MirrorLabels {
                    outcome: o.as_str(),
                }),
            ),
            ssr_failures: counters(
                r,
                "ssr_fragment_failures",
                "SSR fragments that fell back or were cut, by the kind of their last failure",
                SSR_FAILURE_KINDS.map(|kind| KindLabels { kind }),
            ),
            groups,
            downstream_open,
            downstream_waits,
            registry,
        }
    }

    /// The `weir_fleet_*` families.
    pub fn fleet(&self) -> &FleetFamilies {
        &self.fleet
    }

    /// Counts one finished request. Called once per request, by the access
    /// log record.
    pub fn record_request(&self, s: &RequestSample<'_>) {
        let route = s.route;
        self.requests
            .get_or_create(&RequestLabels {
                route: Arc::clone(&route.label),
                status: s.status,
                outcome: s.outcome.as_str(),
            })
            .inc();
        let samples = route.samples.get_or_init(|| {
            let labels = RouteLabels {
                route: Arc::clone(&route.label),
            };
            RouteSamples {
                duration: self.duration.get_or_create_owned(&labels),
                bytes_in: self.bytes_in.get_or_create_owned(&labels),
                bytes_out: self.bytes_out.get_or_create_owned(&labels),
            }
        });
        samples.duration.observe(s.duration.as_secs_f64());
        samples.bytes_in.inc_by(s.bytes_in);
        samples.bytes_out.inc_by(s.bytes_out);
        if s.outcome == Outcome::ClientAborted {
            self.client_aborts
                .get_or_create(&RouteLabels {
                    route: Arc::clone(&route.label),
                })
                .inc();
        }
    }

    /// Marks a request to `upstream` (its authority, `host:port`) as in
    /// flight until the returned guard is dropped (when its response ends).
    pub fn upstream_request(&self, upstream: &str) -> InFlight {
        InFlight::hold(&self.in_flight_gauge(upstream))
    }

    /// The `weir_upstream_requests_in_flight` sample of `upstream`, to hold
    /// requests with [`InFlight::hold`] without looking it up each time.
    pub fn in_flight_gauge(&self, upstream: &str) -> Gauge {
        self.in_flight.get_or_create_owned(&UpstreamLabels {
            upstream: upstream.to_owned(),
        })
    }

    /// The `weir_upstream_attempts_total` sample of one server and result,
    /// resolved once per server.
    pub fn attempt_counter(&self, upstream: &str, server: &str, result: &'static str) -> Counter {
        self.groups.attempts.get_or_create_owned(&AttemptLabels {
            upstream: upstream.to_owned(),
            server: server.to_owned(),
            result,
        })
    }

    /// The `weir_upstream_ejections_total` sample of one server.
    pub fn ejection_counter(&self, upstream: &str, server: &str) -> Counter {
        self.groups.ejections.get_or_create_owned(&ServerLabels {
            upstream: upstream.to_owned(),
            server: server.to_owned(),
        })
    }

    /// The `weir_upstream_retries_total` sample of one upstream and result
    /// (one of [`RETRY_RESULTS`]).
    pub fn retry_counter(&self, upstream: &str, result: &'static str) -> Counter {
        self.groups.retries.get_or_create_owned(&RetryLabels {
            upstream: upstream.to_owned(),
            result,
        })
    }

    /// Where `weir_upstream_server_available` is read from; a reload
    /// calls it again with its groups, and the last call wins.
    pub fn watch_groups(&self, states: Arc<dyn ServerStates>) {
        let mut current = self
            .groups
            .states
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Some(states);
    }

    /// Counts a config reload (`weir_config_reloads_total`); a good one
    /// also sets `weir_config_last_reload_success_timestamp_seconds`.
    pub fn config_reload(&self, ok: bool) {
        self.reloads.record(ok);
    }

    /// `weir_config_reloads_total{result="ok"}` (or `"error"` when `!ok`).
    pub fn config_reload_count(&self, ok: bool) -> u64 {
        self.reloads.count(ok)
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

    /// Counts a cache hit read from another request's fill.
    pub fn cache_collapsed(&self) {
        self.cache_collapsed.inc();
    }

    /// Counts a `304` the cache made for a client's own conditional.
    pub fn cache_not_modified(&self) {
        self.cache_not_modified.inc();
    }

    /// Counts a background revalidation started.
    pub fn cache_background_revalidation(&self) {
        self.cache_background.inc();
    }

    /// Counts a failed (or timed-out) TLS handshake on a listener.
    pub fn tls_handshake_error(&self) {
        self.tls_handshake_errors.inc();
    }

    /// `weir_tls_handshake_errors_total` now.
    pub fn tls_handshake_error_count(&self) -> u64 {
        self.tls_handshake_errors.get()
    }

    /// `weir_cache_requests_total{result}` now.
    pub fn cache_request_count(&self, result: CacheResult) -> u64 {
        count(
            &self.cache_requests,
            &ResultLabels {
                result: result.as_str(),
            },
        )
    }

    /// `weir_cache_fills_total{result}` now.
    pub fn cache_fill_count(&self, result: FillResult) -> u64 {
        count(
            &self.cache_fills,
            &ResultLabels {
                result: result.as_str(),
            },
        )
    }

    /// `weir_cache_collapsed_total` now.
    pub fn cache_collapsed_count(&self) -> u64 {
        self.cache_collapsed.get()
    }

    /// `weir_cache_not_modified_total` now.
    pub fn cache_not_modified_count(&self) -> u64 {
        self.cache_not_modified.get()
    }

    /// `weir_cache_background_revalidations_total` now.
    pub fn cache_background_revalidation_count(&self) -> u64 {
        self.cache_background.get()
    }

    /// `weir_share_lag_detaches_total{branch}` now.
    pub fn share_lag_detach_count(&self, branch: &str) -> u64 {
        count(
            &self.share_lag_detaches,
            &BranchLabels {
                branch: branch.to_owned(),
            },
        )
    }

    /// `weir_mirror_requests_total{outcome}` now.
    pub fn mirror_request_count(&self, outcome: MirrorOutcome) -> u64 {
        count(
            &self.mirror_requests,
            &MirrorLabels {
                outcome: outcome.as_str(),
            },
        )
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

/// The value of `labels` in `family`, 0 when it has none yet.
fn count<L>(family: &Family<L, Counter>, labels: &L) -> u64
where
    L: Clone + std::hash::Hash + Eq,
{
    family.get(labels).map_or(0, |c| c.get())
}
