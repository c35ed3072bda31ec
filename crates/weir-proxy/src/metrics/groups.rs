//! The families of upstream groups: attempts and ejections per server,
//! retries per upstream, and whether each server takes requests now (read
//! at scrape time from the groups through [`ServerStates`]).

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;

/// Label values of `weir_upstream_retries_total`'s `result`.
pub const RETRY_RESULTS: [&str; 2] = ["retried", "budget_exhausted"];

/// What the groups tell `/metrics` at each scrape.
pub trait ServerStates: Send + Sync + fmt::Debug {
    /// Calls `f(upstream, server, available)` for every server of every upstream.
    fn each_server(&self, f: &mut dyn FnMut(&str, &str, bool));
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ServerLabels {
    pub(super) upstream: String,
    pub(super) server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct AttemptLabels {
    pub(super) upstream: String,
    pub(super) server: String,
    pub(super) result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RetryLabels {
    pub(super) upstream: String,
    pub(super) result: &'static str,
}

/// The group families, registered once per proxy.
#[derive(Debug, Default)]
pub(super) struct GroupFamilies {
    pub(super) attempts: Family<AttemptLabels, Counter>,
    pub(super) ejections: Family<ServerLabels, Counter>,
    pub(super) retries: Family<RetryLabels, Counter>,
    pub(super) states: SharedStates,
}

/// The groups of the config in effect (replaced on reload; read at scrape
/// time only, never per request).
pub(super) type SharedStates = Arc<RwLock<Option<Arc<dyn ServerStates>>>>;

/// Reads `weir_upstream_server_available` from the groups at scrape time.
#[derive(Debug)]
pub(super) struct AvailableCollector {
    pub(super) states: SharedStates,
}

impl Collector for AvailableCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let current = self
            .states
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(states) = current else {
            return Ok(());
        };
        let mut family = encoder.encode_descriptor(
            "upstream_server_available",
            "1 when the server takes requests now (healthy, not ejected), else 0",
            None,
            MetricType::Gauge,
        )?;
        let mut result = Ok(());
        states.each_server(&mut |upstream, server, available| {
            if result.is_err() {
                return;
            }
            let labels = ServerLabels {
                upstream: upstream.to_owned(),
                server: server.to_owned(),
            };
            result = family
                .encode_family(&labels)
                .and_then(|e| ConstGauge::new(i64::from(available)).encode(e));
        });
        result
    }
}
