//! The config reload families: `weir_config_reloads_total{result}` (`ok`,
//! `error`) and `weir_config_last_reload_success_timestamp_seconds`.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::labels::ResultLabels;

/// Label values of `weir_config_reloads_total`'s `result`.
const RESULTS: [&str; 2] = ["ok", "error"];

/// The reload counters, registered once per proxy (reloads keep them).
#[derive(Debug)]
pub(super) struct ReloadFamilies {
    results: Family<ResultLabels, Counter>,
    last_ok: Gauge,
}

impl ReloadFamilies {
    /// Registers both families, with `ok` and `error` at zero.
    pub(super) fn register(registry: &mut Registry) -> ReloadFamilies {
        let results = Family::<ResultLabels, Counter>::default();
        registry.register(
            "config_reloads",
            "Config reloads (SIGHUP, POST /reload), by result",
            results.clone(),
        );
        for result in RESULTS {
            drop(results.get_or_create(&ResultLabels { result }));
        }
        let last_ok = Gauge::default();
        registry.register_with_unit(
            "config_last_reload_success_timestamp",
            "Unix time of the last successful config reload (0: none yet)",
            Unit::Seconds,
            last_ok.clone(),
        );
        ReloadFamilies { results, last_ok }
    }

    /// Counts one reload; a good one also sets the timestamp to now.
    pub(super) fn record(&self, ok: bool) {
        let result = RESULTS[usize::from(!ok)];
        self.results.get_or_create(&ResultLabels { result }).inc();
        if ok {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            self.last_ok.set(now);
        }
    }

    /// How many reloads ended with `ok`.
    pub(super) fn count(&self, ok: bool) -> u64 {
        let result = RESULTS[usize::from(!ok)];
        self.results.get_or_create(&ResultLabels { result }).get()
    }
}
