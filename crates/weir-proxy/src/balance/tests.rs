//! Policies over many picks: the distribution each promises, what a new
//! server moves on the hash ring, and when passive ejection takes a server
//! out and lets it back.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue};

use super::{AttemptResult, PickKey, Server, UpstreamGroup};
use crate::config::{
    Balance, ClientSettings, HashKey, OutlierSettings, RetrySettings, UpstreamUrl,
};
use crate::upstream::UpstreamClient;

const PICKS: usize = 10_000;

fn client() -> UpstreamClient {
    UpstreamClient::new(&ClientSettings {
        connect_timeout: Duration::from_secs(1),
        response_header_timeout: Duration::from_secs(1),
        pool_idle_timeout: Duration::from_secs(1),
        pool_max_idle_per_host: 1,
    })
}

fn outlier(consecutive_failures: u32, max_ejected_percent: u32) -> OutlierSettings {
    OutlierSettings {
        consecutive_failures,
        base_ejection: Duration::from_millis(50),
        max_ejection: Duration::from_secs(1),
        max_ejected_percent,
        failure_statuses: vec![(500, 599)],
    }
}

fn group(weights: &[u32], balance: Balance, outlier: OutlierSettings) -> UpstreamGroup {
    let client = client();
    let servers = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let url = UpstreamUrl::local(format!("127.0.0.1:{}", 9000 + i).parse().expect("addr"));
            Arc::new(Server::new(
                url.clone(),
                client
                    .pool(&url.scheme, &url.authority, None)
                    .expect("pool"),
                w,
                None,
                Default::default(),
                Default::default(),
                Default::default(),
            ))
        })
        .collect();
    UpstreamGroup::new(
        "g".to_owned(),
        servers,
        &balance,
        outlier,
        RetrySettings {
            attempts: 2,
            body_bytes: 0,
            budget_percent: 20,
            min_per_second: 10,
        },
        None,
        Default::default(),
    )
}

/// A group balancing by the hash of field `name`.
fn hashed(weights: &[u32], name: &http::HeaderName, outlier: OutlierSettings) -> UpstreamGroup {
    group(
        weights,
        Balance::Hash(HashKey::Header(name.clone()), crate::config::RingHash::Weir),
        outlier,
    )
}

fn key(headers: &HeaderMap) -> PickKey<'_> {
    PickKey {
        headers,
        client: IpAddr::V4(Ipv4Addr::LOCALHOST),
        host: None,
    }
}

fn counts(g: &UpstreamGroup, picks: usize) -> Vec<usize> {
    let headers = HeaderMap::new();
    let mut out = vec![0; g.servers.len()];
    for _ in 0..picks {
        out[g.pick(&key(&headers), &[]).expect("a server")] += 1;
    }
    out
}

#[test]
fn round_robin_is_exact_with_equal_weights_and_by_weight_otherwise() {
    let g = group(&[1, 1, 1], Balance::RoundRobin, outlier(5, 50));
    let c = counts(&g, PICKS - 1);
    assert!(c.iter().all(|&n| n == 3333), "{c:?}");
    let g = group(&[1, 3], Balance::RoundRobin, outlier(5, 50));
    assert_eq!(counts(&g, PICKS), vec![2500, 7500]);
    // Smooth: the heavy server never gets more than 3 in a row.
    let headers = HeaderMap::new();
    let seq: Vec<usize> = (0..8)
        .map(|_| g.pick(&key(&headers), &[]).expect("pick"))
        .collect();
    assert!(seq.windows(4).all(|w| w.contains(&0)), "{seq:?}");
}

#[test]
fn a_retry_takes_the_next_server_and_leaves_the_rotation_alone() {
    let headers = HeaderMap::new();
    let g = group(&[1, 1, 1], Balance::RoundRobin, outlier(5, 50));
    let mut firsts = vec![0; 3];
    for _ in 0..300 {
        let first = g.pick(&key(&headers), &[]).expect("first");
        firsts[first] += 1;
        let retry = g.pick(&key(&headers), &[first]).expect("retry");
        assert_eq!(retry, (first + 1) % 3);
    }
    assert_eq!(firsts, vec![100, 100, 100]);
    // Weighted too: first attempts keep their 1:3 share.
    let g = group(&[1, 3], Balance::RoundRobin, outlier(5, 50));
    let mut firsts = vec![0; 2];
    for _ in 0..400 {
        let first = g.pick(&key(&headers), &[]).expect("first");
        firsts[first] += 1;
        assert_eq!(g.pick(&key(&headers), &[first]), Some(1 - first));
    }
    assert_eq!(firsts, vec![100, 300]);
}

#[test]
fn least_outstanding_spreads_evenly_and_avoids_the_busy_server() {
    let g = group(&[1, 1, 1], Balance::LeastOutstanding, outlier(5, 50));
    let c = counts(&g, PICKS);
    // Idle servers tie and the first of the two random choices wins: each
    // gets a third, within 5 %.
    assert!(
        c.iter().all(|&n| n.abs_diff(PICKS / 3) < PICKS / 20),
        "{c:?}"
    );
    // Server 0 busy with 10 requests: it loses every comparison it is in.
    g.servers[0].in_flight.set(10);
    let c = counts(&g, PICKS);
    assert_eq!(c[0], 0, "{c:?}");
}

#[test]
fn hashing_keeps_a_key_on_one_server_and_moves_about_a_share_when_one_is_added() {
    let name = http::HeaderName::from_static("x-user");
    let three = hashed(&[1, 1, 1], &name, outlier(5, 50));
    let four = hashed(&[1, 1, 1, 1], &name, outlier(5, 50));
    let owner = |g: &UpstreamGroup, user: usize| {
        let mut headers = HeaderMap::new();
        headers.insert(
            &name,
            HeaderValue::from_str(&format!("user-{user}")).expect("value"),
        );
        g.pick(&key(&headers), &[]).expect("pick")
    };
    let mut per_server = HashMap::new();
    let mut moved = 0;
    for user in 0..PICKS {
        let before = owner(&three, user);
        assert_eq!(before, owner(&three, user), "stable");
        *per_server.entry(before).or_insert(0usize) += 1;
        let after = owner(&four, user);
        if after != before {
            // A key only ever moves to the new server.
            assert_eq!(after, 3, "user {user} moved between old servers");
            moved += 1;
        }
    }
    // Each of three servers holds a third of the keys, within 20 %.
    for (&s, &n) in &per_server {
        assert!(
            n.abs_diff(PICKS / 3) < PICKS / 3 / 5,
            "server {s}: {n} keys"
        );
    }
    // The fourth takes about a quarter: at most 1/4 + 5 %.
    assert!(moved <= PICKS / 4 + PICKS / 20, "{moved} keys moved");
    assert!(moved >= PICKS / 4 - PICKS / 20, "{moved} keys moved");
}

#[test]
fn a_hashed_key_skips_its_owner_when_it_is_out() {
    let name = http::HeaderName::from_static("x-user");
    let g = hashed(&[1, 1, 1], &name, outlier(1, 50));
    let mut headers = HeaderMap::new();
    headers.insert(&name, HeaderValue::from_static("alice"));
    let owner = g.pick(&key(&headers), &[]).expect("pick");
    assert!(g.record(owner, AttemptResult::ConnectFailed), "ejected");
    let other = g.pick(&key(&headers), &[]).expect("another");
    assert_ne!(other, owner);
    // Without the key: round robin over the servers still in.
    let none = HeaderMap::new();
    let c: Vec<usize> = (0..4)
        .map(|_| g.pick(&key(&none), &[]).expect("pick"))
        .collect();
    assert!(!c.contains(&owner), "{c:?}");
}

#[test]
fn ejection_after_failures_in_a_row_is_capped_and_ends() {
    let g = group(&[1, 1, 1, 1], Balance::RoundRobin, outlier(3, 50));
    // Two failures, a success: the count starts again.
    assert!(!g.record(0, AttemptResult::ServerError));
    assert!(!g.record(0, AttemptResult::Timeout));
    assert!(!g.record(0, AttemptResult::Ok));
    assert!(!g.record(0, AttemptResult::Failed));
    assert!(!g.record(0, AttemptResult::Failed));
    assert!(g.record(0, AttemptResult::Failed), "third in a row ejects");
    assert!(!g.is_available(0));
    for _ in 0..3 {
        g.record(1, AttemptResult::ConnectFailed);
    }
    assert!(!g.is_available(1));
    // Half of four are out: a third server is not ejected.
    for _ in 0..10 {
        assert!(!g.record(2, AttemptResult::ConnectFailed));
    }
    assert!(g.is_available(2));
    let c = counts(&g, 100);
    assert_eq!((c[0], c[1]), (0, 0), "{c:?}");
    // The first ejection lasts base_ejection (50 ms).
    std::thread::sleep(Duration::from_millis(80));
    assert!(g.is_available(0) && g.is_available(1));
}

#[test]
fn one_server_always_stays_in_and_tried_servers_are_skipped() {
    let g = group(&[1, 1], Balance::RoundRobin, outlier(1, 100));
    assert!(g.record(0, AttemptResult::ConnectFailed));
    assert!(
        !g.record(1, AttemptResult::ConnectFailed),
        "the last one stays"
    );
    let headers = HeaderMap::new();
    assert_eq!(g.pick(&key(&headers), &[]), Some(1));
    assert_eq!(g.pick(&key(&headers), &[1]), None);
}

#[test]
fn the_retry_budget_allows_the_floor_then_a_share_of_requests() {
    let g = group(&[1, 1], Balance::RoundRobin, outlier(5, 50));
    // min_retries_per_second = 10: ten at once, then none without requests.
    assert!((0..10).all(|_| g.withdraw()));
    assert!(!g.withdraw());
    // 20 % of 50 requests: ten more.
    for _ in 0..50 {
        g.deposit();
    }
    assert_eq!((0..20).filter(|_| g.withdraw()).count(), 10);
}

#[test]
fn with_a_server_out_round_robin_shares_its_turns_evenly() {
    let g = group(&[1, 1, 1], Balance::RoundRobin, outlier(0, 50));
    g.servers[0]
        .healthy
        .store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(counts(&g, 600), [0, 300, 300]);
}

#[test]
fn the_last_available_server_is_never_ejected_when_the_others_are_unhealthy() {
    let g = group(&[1, 1, 1], Balance::RoundRobin, outlier(2, 50));
    for s in &g.servers[..2] {
        s.healthy.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    for _ in 0..10 {
        assert!(
            !g.record(2, AttemptResult::ServerError),
            "the last one went"
        );
    }
    assert!(g.is_available(2));
}

#[test]
fn a_host_key_reads_the_requests_host_over_http2_too() {
    let g = hashed(&[1, 1, 1], &http::header::HOST, outlier(0, 50));
    let headers = HeaderMap::new();
    let pick = |host: &'static str| {
        g.pick(
            &PickKey {
                headers: &headers,
                client: IpAddr::V4(Ipv4Addr::LOCALHOST),
                host: Some(host),
            },
            &[],
        )
    };
    // No Host field (HTTP/2): the same authority sticks to one server.
    for host in ["a.test", "b.test", "c.test:8080"] {
        let first = pick(host);
        assert!((0..20).all(|_| pick(host) == first), "{host} moved");
    }
}

/// What `Server::note` reports, which the group logs: the ejection's
/// length (doubling), a capped ejection once per streak, and an ended
/// ejection once.
#[test]
fn notes_say_how_long_an_ejection_lasts_when_the_cap_held_and_when_it_ended() {
    use super::server::Noted;
    let g = group(&[1, 1], Balance::RoundRobin, outlier(2, 50));
    let (s, o, epoch) = (&g.servers[0], &g.outlier, g.epoch);
    assert_eq!(
        s.note(AttemptResult::Failed, o, epoch, || true),
        Noted::Counted
    );
    assert_eq!(
        s.note(AttemptResult::Failed, o, epoch, || true),
        Noted::Ejected(Duration::from_millis(50))
    );
    assert!(!s.take_ended_ejection(epoch), "still ejected");
    std::thread::sleep(Duration::from_millis(70));
    assert!(s.take_ended_ejection(epoch));
    assert!(!s.take_ended_ejection(epoch), "logged once");
    s.note(AttemptResult::Failed, o, epoch, || true);
    assert_eq!(
        s.note(AttemptResult::Failed, o, epoch, || true),
        Noted::Ejected(Duration::from_millis(100)),
        "the second ejection doubles"
    );

    let t = &g.servers[1];
    t.note(AttemptResult::Failed, o, epoch, || false);
    assert_eq!(
        t.note(AttemptResult::Failed, o, epoch, || false),
        Noted::Capped
    );
    assert_eq!(
        t.note(AttemptResult::Failed, o, epoch, || false),
        Noted::Counted,
        "the cap is reported once per streak"
    );
}

/// An empty header value is no key: such requests go round robin, not
/// all to the server that owns the empty string.
#[test]
fn an_empty_hash_header_is_no_key() {
    let name = http::HeaderName::from_static("x-user");
    let g = hashed(&[1, 1, 1], &name, outlier(0, 50));
    let mut headers = HeaderMap::new();
    headers.insert(&name, HeaderValue::from_static(""));
    let mut seen = [0usize; 3];
    for _ in 0..30 {
        seen[g.pick(&key(&headers), &[]).expect("pick")] += 1;
    }
    assert_eq!(seen, [10, 10, 10]);
}

/// With `failure_statuses = "502-504"`, an application's 500s end the
/// failure streak instead of ejecting the server; 503s eject it.
#[test]
fn only_failure_statuses_count_toward_ejection() {
    let mut o = outlier(2, 50);
    o.failure_statuses = vec![(502, 504)];
    let g = group(&[1, 1], Balance::RoundRobin, o);
    for _ in 0..5 {
        assert!(!g.record_server_error(0, http::StatusCode::INTERNAL_SERVER_ERROR));
    }
    assert!(g.is_available(0));
    assert!(!g.record_server_error(0, http::StatusCode::SERVICE_UNAVAILABLE));
    assert!(g.record_server_error(0, http::StatusCode::GATEWAY_TIMEOUT));
    assert!(!g.is_available(0));
}
