//! Unit tests of the fleet: owners, joins, handoff, back-off, admission,
//! DNS discovery.

use super::*;

fn fleet(self_addr: &str, peers: &[&str]) -> Arc<Fleet> {
    bounded_fleet(self_addr, peers, None)
}

fn bounded_fleet(self_addr: &str, peers: &[&str], balance_factor: Option<u32>) -> Arc<Fleet> {
    Fleet::new(&settings(self_addr, peers, balance_factor), metrics()).expect("fleet")
}

fn settings(self_addr: &str, peers: &[&str], balance_factor: Option<u32>) -> FleetSettings {
    FleetSettings {
        self_addr: self_addr.parse().expect("addr"),
        discovery: FleetDiscovery::Static(peers.iter().map(|p| p.parse().expect("addr")).collect()),
        secret: "0123456789abcdef0123".to_owned(),
        peer_timeout: Duration::from_secs(1),
        rate_timeout: Duration::from_millis(100),
        ring: RingHash::Ketama,
        balance_factor,
        l1_bytes: 0,
        l1_ttl: Duration::from_secs(5),
    }
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new(Arc::default(), Vec::new()))
}

/// The address a test request comes from.
fn peer() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 9], 40000))
}

const PEERS: [&str; 3] = ["127.0.0.1:8080", "127.0.0.2:8080", "127.0.0.3:8080"];

#[test]
fn every_replica_agrees_on_every_owner_and_each_owns_about_a_third() {
    let fleets: Vec<_> = PEERS.iter().map(|p| fleet(p, &PEERS)).collect();
    assert!(fleets.windows(2).all(|w| w[0].epoch() == w[1].epoch()));
    let mut owned = [0usize; 3];
    for k in 0..3000 {
        let key = format!("GET http://example.com/k/{k}");
        // The owner as each replica names it.
        let named: Vec<SocketAddr> = fleets
            .iter()
            .map(|f| match f.owner(&key) {
                Owner::Here => f.self_addr(),
                Owner::Peer { addr, .. } => addr,
            })
            .collect();
        assert!(named.windows(2).all(|w| w[0] == w[1]), "{key}: {named:?}");
        let i = PEERS
            .iter()
            .position(|p| p.parse::<SocketAddr>().ok() == Some(named[0]))
            .expect("a member");
        owned[i] += 1;
    }
    for n in owned {
        assert!((800..=1200).contains(&n), "shares {owned:?}");
    }
}

/// The bound on load: 125 % of the average forwards in flight per
/// member. An owner at the bound is passed over for the next member on
/// the ring; once its forwards end, it owns its keys again. A rate-limit
/// bucket's owner is never passed over.
#[test]
fn an_owner_at_the_bound_is_passed_over_until_its_forwards_end() {
    let f = bounded_fleet(PEERS[0], &PEERS, Some(125));
    let key = (0..)
        .map(|k| format!("GET http://example.com/hot/{k}"))
        .find(|k| matches!(f.owner(k), Owner::Peer { .. }))
        .expect("a key another member owns");
    let Owner::Peer { addr: owner, .. } = f.owner(&key) else {
        unreachable!("found above")
    };
    let mut held = Vec::new();
    let mut passed_over_at = None;
    for n in 1..=20 {
        held.push(f.forwarding(owner).expect("a member"));
        let now = f.owner(&key);
        if now
            != (Owner::Peer {
                addr: owner,
                epoch: f.epoch(),
            })
        {
            passed_over_at = Some((n, now));
            break;
        }
    }
    // With n in flight, all to the owner, the bound for one more is
    // ceil(1.25 (n + 1) / 3): 1 at n = 1, which the owner has reached.
    let (n, next) = passed_over_at.expect("the owner is passed over");
    assert_eq!(n, 1);
    assert_ne!(
        next,
        Owner::Peer {
            addr: owner,
            epoch: f.epoch()
        }
    );
    assert_eq!(
        f.rate_owner(key.as_bytes()),
        Some(Owner::Peer {
            addr: owner,
            epoch: f.epoch()
        })
    );
    drop(held);
    assert_eq!(
        f.owner(&key),
        Owner::Peer {
            addr: owner,
            epoch: f.epoch()
        }
    );
    // Without a bound, the owner keeps its keys however busy.
    let unbounded = fleet(PEERS[0], &PEERS);
    let _busy: Vec<_> = (0..20)
        .filter_map(|_| unbounded.forwarding(owner))
        .collect();
    assert_eq!(
        unbounded.owner(&key),
        Owner::Peer {
            addr: owner,
            epoch: unbounded.epoch()
        }
    );
}

#[test]
fn a_join_moves_about_a_quarter_of_the_keys_and_only_to_the_new_member() {
    let three = fleet(PEERS[0], &PEERS);
    let four = fleet(PEERS[0], &[PEERS[0], PEERS[1], PEERS[2], "127.0.0.4:8080"]);
    assert_ne!(three.epoch(), four.epoch());
    let owner = |f: &Fleet, key: &str| match f.owner(key) {
        Owner::Here => f.self_addr(),
        Owner::Peer { addr, .. } => addr,
    };
    let mut moved = 0;
    for k in 0..4000 {
        let key = format!("k{k}");
        let (before, after) = (owner(&three, &key), owner(&four, &key));
        if before != after {
            moved += 1;
            assert_eq!(after.to_string(), "127.0.0.4:8080");
        }
    }
    assert!((800..=1200).contains(&moved), "moved {moved} of 4000");
}

#[test]
fn admit_checks_the_token_and_always_strips_the_fields() {
    let f = fleet(PEERS[0], &PEERS);
    let mut h = HeaderMap::new();
    f.mark(&mut h, f.epoch());
    assert_eq!(f.admit(&mut h, peer()), Admitted::Peer);
    assert!(h.is_empty(), "stripped");
    f.mark(&mut h, f.epoch());
    h.insert(PEEK, HeaderValue::from_static("1"));
    assert_eq!(f.admit(&mut h, peer()), Admitted::Peek);
    assert!(h.is_empty(), "stripped");

    let mut h = HeaderMap::new();
    h.insert(PEER_TOKEN, HeaderValue::from_static("0123456789abcdef0124"));
    h.insert(RING_EPOCH, HeaderValue::from_static("00"));
    h.insert(PEEK, HeaderValue::from_static("1"));
    assert_eq!(
        f.admit(&mut h, peer()),
        Admitted::BadToken,
        "a wrong token is refused"
    );
    assert!(h.is_empty(), "stripped anyway");
    assert_eq!(f.admit(&mut HeaderMap::new(), peer()), Admitted::Client);
}

#[test]
fn a_failed_peer_is_skipped_for_the_backoff() {
    let f = fleet(PEERS[0], &PEERS);
    let key = (0..100)
        .map(|k| format!("k{k}"))
        .find(|k| matches!(f.owner(k), Owner::Peer { .. }))
        .expect("a key another replica owns");
    let Owner::Peer { addr, .. } = f.owner(&key) else {
        unreachable!("found above");
    };
    // Timeouts: only the third in a row skips it.
    f.peer_failed(addr, Lane::Forward, true);
    f.peer_failed(addr, Lane::Forward, true);
    assert_ne!(f.owner(&key), Owner::Here, "two slow answers");
    f.peer_answered(addr, Lane::Forward);
    f.peer_failed(addr, Lane::Forward, true);
    f.peer_failed(addr, Lane::Forward, true);
    assert_ne!(f.owner(&key), Owner::Here, "counted again from the answer");
    f.peer_failed(addr, Lane::Forward, true);
    assert_eq!(f.owner(&key), Owner::Here, "the third in a row");
    f.peer_failed(addr, Lane::Forward, false);
    assert_eq!(f.owner(&key), Owner::Here);
    assert!(
        matches!(f.rate_owner(key.as_bytes()), Some(Owner::Peer { addr: a, .. }) if a == addr),
        "failed forwards leave rate-limit asks alone"
    );
    // Rate-limit asks count their own failures.
    f.peer_failed(addr, Lane::Rate, true);
    f.peer_failed(addr, Lane::Rate, true);
    assert!(f.rate_owner(key.as_bytes()).is_some(), "two slow asks");
    f.peer_failed(addr, Lane::Rate, true);
    assert_eq!(
        f.rate_owner(key.as_bytes()),
        None,
        "a rate-limit ask is not made: the route's own bucket decides"
    );
    assert!(
        matches!(f.ring_owner(key.as_bytes()), Owner::Peer { addr: a, .. } if a == addr),
        "an invalidation still goes to the owner, which holds the entry"
    );
    // Broken bodies: three in a row, with no clean one between.
    let g = fleet(PEERS[0], &PEERS);
    assert!(!g.peer_body_ended(addr, false));
    assert!(!g.peer_body_ended(addr, false));
    assert!(!g.peer_body_ended(addr, true), "a clean body");
    assert!(!g.peer_body_ended(addr, false));
    assert!(!g.peer_body_ended(addr, false));
    assert_ne!(g.owner(&key), Owner::Here, "two in a row");
    assert!(g.peer_body_ended(addr, false), "the third in a row");
    assert_eq!(g.owner(&key), Owner::Here);
    assert!(g.rate_owner(key.as_bytes()).is_some(), "forwards only");
    // A reload keeps the back-off, and so does a change of members.
    let reloaded =
        Fleet::after(&settings(PEERS[0], &PEERS, None), metrics(), Some(&f)).expect("fleet");
    assert_eq!(
        reloaded.owner(&key),
        Owner::Here,
        "still skipped after a reload"
    );
    let mut more: Vec<SocketAddr> = PEERS.iter().map(|p| p.parse().expect("addr")).collect();
    more.push("127.0.0.9:8080".parse().expect("addr"));
    reloaded.set_members(more);
    assert!(
        !matches!(reloaded.owner(&key), Owner::Peer { addr: a, .. } if a == addr),
        "still skipped after the members changed"
    );
}

#[tokio::test]
async fn dns_discovery_follows_the_name_and_keeps_self() {
    let settings = FleetSettings {
        self_addr: "10.9.9.9:8080".parse().expect("addr"),
        discovery: FleetDiscovery::Dns {
            name: "localhost:8080".into(),
            refresh: Duration::from_millis(20),
        },
        secret: "0123456789abcdef0123".to_owned(),
        peer_timeout: Duration::from_secs(1),
        rate_timeout: Duration::from_millis(100),
        ring: RingHash::Ketama,
        balance_factor: None,
        l1_bytes: 0,
        l1_ttl: Duration::from_secs(5),
    };
    let metrics = Arc::new(Metrics::new(Arc::default(), Vec::new()));
    let f = Fleet::new(&settings, metrics).expect("fleet");
    assert_eq!(
        f.members(),
        vec![settings.self_addr],
        "alone until resolved"
    );
    f.start_discovery(&settings.discovery);
    let started = Instant::now();
    while f.members().len() < 2 && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let members = f.members();
    assert!(members.contains(&settings.self_addr), "{members:?}");
    assert!(
        members
            .iter()
            .any(|a| a.ip().is_loopback() && a.port() == 8080),
        "{members:?}"
    );
    // The task holds the fleet only while it applies an answer: dropped
    // here, it is gone even after the task ran a few more rounds.
    let weak = Arc::downgrade(&f);
    drop(f);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(weak.upgrade().is_none());
}

#[test]
fn after_a_join_the_new_owner_peeks_at_the_previous_owner_of_moved_keys_only() {
    let four = [PEERS[0], PEERS[1], PEERS[2], "127.0.0.4:8080"];
    let old = fleet("127.0.0.1:8080", &PEERS[..]);
    let settings = FleetSettings {
        self_addr: "127.0.0.4:8080".parse().expect("addr"),
        discovery: FleetDiscovery::Static(four.iter().map(|p| p.parse().expect("a")).collect()),
        secret: "0123456789abcdef0123".to_owned(),
        peer_timeout: Duration::from_secs(1),
        rate_timeout: Duration::from_millis(100),
        ring: RingHash::Ketama,
        balance_factor: None,
        l1_bytes: 0,
        l1_ttl: Duration::from_secs(5),
    };
    let metrics = Arc::new(Metrics::new(Arc::default(), Vec::new()));
    let new = Fleet::after(&settings, metrics, Some(&old)).expect("fleet");
    let old_owner = |key: &str| match old.owner(key) {
        Owner::Here => old.self_addr(),
        Owner::Peer { addr, .. } => addr,
    };
    let (mut moved, mut kept) = (0, 0);
    for k in 0..2000 {
        let key = format!("k{k}");
        match new.owner(&key) {
            // Moved to the new member: peek at the old owner.
            Owner::Here => {
                moved += 1;
                assert_eq!(new.previous_owner(&key), Some(old_owner(&key)));
            }
            Owner::Peer { .. } => kept += 1,
        }
    }
    assert!((350..=650).contains(&moved), "moved {moved}, kept {kept}"); // A previous owner that failed is skipped for the back-off.
    let key = (0..2000)
        .map(|k| format!("k{k}"))
        .find(|k| new.previous_owner(k).is_some())
        .expect("a moved key");
    let prev = new.previous_owner(&key).expect("asked");
    new.peer_failed(prev, Lane::Forward, false);
    assert!((0..2000).all(|k| new.previous_owner(&format!("k{k}")) != Some(prev)));
}

#[test]
fn a_reload_long_after_a_back_off_ended_still_hands_off_from_that_peer() {
    let mut old = fleet(PEERS[0], &PEERS);
    // This replica has run for two minutes.
    let started = Instant::now()
        .checked_sub(Duration::from_secs(120))
        .expect("an instant two minutes ago");
    Arc::get_mut(&mut old).expect("one handle").started = started;
    let gone: SocketAddr = PEERS[2].parse().expect("addr");
    let two = fleet(PEERS[0], &PEERS[..2]);
    let key = (0..500)
        .map(|k| format!("k{k}"))
        .find(|k| {
            matches!(old.owner(k), Owner::Peer { addr, .. } if addr == gone)
                && two.owner(k) == Owner::Here
        })
        .expect("a key the third replica owns and this one gets without it");
    // It was skipped once, a minute ago; the back-off has long ended.
    old.peer_failed(gone, Lane::Forward, false);
    let members = old.members.load();
    let i = members.addrs.binary_search(&gone).expect("a member");
    members.down_until[i][Lane::Forward as usize].store(old.now_ms() - 60_000, Ordering::Relaxed);
    assert!(matches!(old.owner(&key), Owner::Peer { addr, .. } if addr == gone));

    // It leaves the ring by a reload: its keys are handed off from it.
    let new = Fleet::after(
        &settings(PEERS[0], &PEERS[..2], None),
        metrics(),
        Some(&old),
    )
    .expect("fleet");
    assert_eq!(new.owner(&key), Owner::Here);
    assert_eq!(
        new.previous_owner(&key),
        Some(gone),
        "peek at the replica that left"
    );
    // A second reload with the same members keeps the handoff window.
    let again = Fleet::after(
        &settings(PEERS[0], &PEERS[..2], None),
        metrics(),
        Some(&new),
    )
    .expect("fleet");
    assert_eq!(again.previous_owner(&key), Some(gone));
}

#[test]
fn set_members_adds_self_and_ignores_an_unchanged_list() {
    let f = fleet(PEERS[0], &PEERS);
    let epoch = f.epoch();
    f.set_members(vec![
        PEERS[2].parse().expect("a"),
        PEERS[1].parse().expect("b"),
    ]);
    assert_eq!(f.epoch(), epoch, "the same three");
    f.set_members(vec![PEERS[1].parse().expect("b")]);
    assert_eq!(f.members().len(), 2);
    assert_ne!(f.epoch(), epoch);
}
