//! The label sets of the families, and the label values known up front.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;

/// The `Content-Type` of [`Metrics::encode`](super::Metrics::encode)'s output: the OpenMetrics text
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
/// from the start; [`Metrics::share_lag_detach`](super::Metrics::share_lag_detach) accepts others too.
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
pub(super) struct RequestLabels {
    pub(super) route: Arc<String>,
    pub(super) status: u16,
    pub(super) outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RouteLabels {
    pub(super) route: Arc<String>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpstreamLabels {
    pub(super) upstream: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BranchLabels {
    pub(super) branch: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct MirrorLabels {
    pub(super) outcome: &'static str,
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
    pub(crate) const ALL: [CacheResult; 3] =
        [CacheResult::Hit, CacheResult::Miss, CacheResult::Stale];

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
    pub(crate) const ALL: [FillResult; 4] = [
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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabels {
    pub(super) kind: &'static str,
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
