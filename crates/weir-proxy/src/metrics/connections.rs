//! The connection gauges, read at scrape time, and the in-flight guard.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};

use super::labels::UpstreamLabels;
use crate::counted::ConnectionCounts;

/// Holds one request in `weir_upstream_requests_in_flight` while it lives.
#[derive(Debug)]
pub struct InFlight {
    pub(super) gauge: Gauge,
}

impl InFlight {
    /// Counts one more request in `gauge` until the guard is dropped.
    pub fn hold(gauge: &Gauge) -> InFlight {
        gauge.inc();
        InFlight {
            gauge: gauge.clone(),
        }
    }
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
pub(super) struct ConnectionCollector {
    pub(super) connections: Arc<ConnectionCounts>,
    pub(super) upstreams: Vec<String>,
    pub(super) in_flight: Family<UpstreamLabels, Gauge>,
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
