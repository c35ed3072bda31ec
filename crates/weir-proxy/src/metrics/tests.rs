//! Tests of the families and their counts.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::counted::ConnectionCounts;
use crate::outcome::{MirrorOutcome, Outcome};

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
    let route = RouteMetrics::new(route_label(Some("example.com"), "/api"));
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
        text.contains("weir_upstream_connections{upstream=\"127.0.0.1:3000\",state=\"idle\"} 0"),
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
