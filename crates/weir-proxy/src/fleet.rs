//! A fleet of replicas sharing one cache by consistent hashing
//! (`[fleet]`).
//!
//! Every replica knows the same members: a fixed list, or the addresses
//! a name resolves to (a Kubernetes headless Service), refreshed. It puts
//! them on a consistent-hash ring (the one `balance = "ring"` uses). The replica
//! that owns a cacheable request's key on that ring serves it from its
//! cache. Any other replica forwards it there, in one hop, and relays the
//! answer (`crate::exchange::fleet`). So each key is fetched from the
//! origin by one replica, and concurrent misses collapse there, whichever
//! replicas the clients reach.
//!
//! A forwarded request carries the shared secret ([`PEER_TOKEN`]) and the
//! forwarder's ring epoch ([`RING_EPOCH`]), a digest of the member list.
//! A request with a valid token is served where it lands and never
//! forwarded again, so no loop is possible; when its epoch differs from
//! the receiver's (the two disagree about membership for a moment), it is
//! counted. Both fields are removed from every request before anything
//! else reads it, so neither reaches an upstream. A request with a wrong
//! token is an ordinary client request.
//!
//! A peer that fails (no connection, no response head within
//! `peer_timeout`, a response hyper cannot parse) is counted, and the
//! forwarding replica serves the request itself. The peer is then skipped
//! for [`PEER_BACKOFF`]: its keys are served where they land meanwhile,
//! so a stalled peer costs each other replica one timeout per back-off,
//! not one per request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::balance::ring::{Ring, hash};
use crate::config::{FleetDiscovery, FleetSettings};
use crate::metrics::{FleetResult, Metrics};

/// The field a forwarded request proves it comes from a peer with: the
/// shared secret.
pub const PEER_TOKEN: HeaderName = HeaderName::from_static("x-weir-peer-token");

/// The field that carries the forwarder's ring epoch, in hex.
pub const RING_EPOCH: HeaderName = HeaderName::from_static("x-weir-ring-epoch");

/// How long a peer that failed is skipped.
pub const PEER_BACKOFF: Duration = Duration::from_secs(5);

/// Who serves a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// This replica.
    Here,
    /// Another replica: forward there, saying `epoch`.
    Peer {
        /// The owner's address.
        addr: SocketAddr,
        /// This replica's ring epoch.
        epoch: u64,
    },
}

/// The members as one replica sees them.
#[derive(Debug)]
struct Members {
    /// Sorted, deduplicated, this replica included.
    addrs: Vec<SocketAddr>,
    ring: Ring,
    /// A digest of `addrs`: equal on replicas that agree.
    epoch: u64,
    /// Per member, the time (ms since the fleet started) until which it is
    /// skipped after a failure.
    down_until: Vec<AtomicU64>,
}

impl Members {
    fn new(mut addrs: Vec<SocketAddr>) -> Members {
        addrs.sort_unstable();
        addrs.dedup();
        let names: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        let ring = Ring::new(names.iter().map(|n| (n.as_str(), 1)));
        let epoch = hash(names.join(",").as_bytes());
        let down_until = addrs.iter().map(|_| AtomicU64::new(0)).collect();
        Members {
            addrs,
            ring,
            epoch,
            down_until,
        }
    }
}

/// One replica's view of its fleet.
pub struct Fleet {
    self_addr: SocketAddr,
    token: HeaderValue,
    peer_timeout: Duration,
    members: ArcSwap<Members>,
    started: Instant,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("self_addr", &self.self_addr)
            .field("members", &self.members.load().addrs)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// The fleet of `settings`, its members the static list or, for DNS,
    /// this replica alone until the first resolution. Call
    /// [`Fleet::start_discovery`] to follow DNS.
    ///
    /// # Errors
    /// None in practice: the secret was checked to be visible ASCII.
    pub fn new(
        settings: &FleetSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Fleet>, http::header::InvalidHeaderValue> {
        let initial = match &settings.discovery {
            FleetDiscovery::Static(peers) => peers.clone(),
            FleetDiscovery::Dns { .. } => vec![settings.self_addr],
        };
        let members = Members::new(initial);
        metrics
            .fleet()
            .set_members(members.addrs.len(), members.epoch);
        Ok(Arc::new(Fleet {
            self_addr: settings.self_addr,
            token: HeaderValue::from_str(&settings.secret)?,
            peer_timeout: settings.peer_timeout,
            members: ArcSwap::from_pointee(members),
            started: Instant::now(),
            metrics,
        }))
    }

    /// Resolves `discovery`'s name every `refresh` in a task, until this
    /// fleet is dropped (a reload builds a new one). Nothing to do for a
    /// static list, or outside a tokio runtime.
    pub fn start_discovery(self: &Arc<Self>, discovery: &FleetDiscovery) {
        let FleetDiscovery::Dns { name, refresh } = discovery else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak: Weak<Fleet> = Arc::downgrade(self);
        let (name, refresh) = (name.clone(), *refresh);
        runtime.spawn(async move {
            let mut last_error: Option<String> = None;
            loop {
                let resolved = tokio::net::lookup_host(name.as_str()).await;
                let Some(fleet) = weak.upgrade() else {
                    return;
                };
                match resolved {
                    Ok(addrs) => {
                        last_error = None;
                        let mut addrs: Vec<SocketAddr> = addrs.collect();
                        // Not ready yet, a replica is not in its own
                        // Service's records; it still owns its share.
                        addrs.push(fleet.self_addr);
                        fleet.set_members(addrs);
                    }
                    Err(e) => {
                        // The members stay as they were.
                        let e = e.to_string();
                        if last_error.as_ref() != Some(&e) {
                            tracing::warn!(target: "weir::fleet", name = %name, "cannot resolve the fleet's peers: {e}");
                            last_error = Some(e);
                        }
                    }
                }
                drop(fleet);
                tokio::time::sleep(refresh).await;
            }
        });
    }

    /// Sets the members (this replica is added if missing). A changed list
    /// gives a new ring and epoch, logged; an unchanged one changes nothing.
    pub fn set_members(&self, mut addrs: Vec<SocketAddr>) {
        if !addrs.contains(&self.self_addr) {
            addrs.push(self.self_addr);
        }
        let next = Members::new(addrs);
        if next.addrs == self.members.load().addrs {
            return;
        }
        tracing::info!(
            target: "weir::fleet",
            members = next.addrs.len(),
            epoch = %format!("{:016x}", next.epoch),
            "fleet members changed: {}",
            next.addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(", ")
        );
        self.metrics
            .fleet()
            .set_members(next.addrs.len(), next.epoch);
        self.members.store(Arc::new(next));
    }

    /// This replica's address as peers reach it.
    pub fn self_addr(&self) -> SocketAddr {
        self.self_addr
    }

    /// How long a forwarded miss waits for the owner's response head.
    pub fn peer_timeout(&self) -> Duration {
        self.peer_timeout
    }

    /// The members now, sorted.
    pub fn members(&self) -> Vec<SocketAddr> {
        self.members.load().addrs.clone()
    }

    /// The ring epoch now.
    pub fn epoch(&self) -> u64 {
        self.members.load().epoch
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Who serves the cache key `key`: its owner on the ring, or this
    /// replica when that is this replica or an owner in back-off.
    pub(crate) fn owner(&self, key: &str) -> Owner {
        let members = self.members.load();
        let Some(i) = members
            .ring
            .pick(hash(key.as_bytes()), members.addrs.len(), |_| true)
        else {
            return Owner::Here;
        };
        let addr = members.addrs[i];
        if addr == self.self_addr || members.down_until[i].load(Ordering::Relaxed) > self.now_ms() {
            return Owner::Here;
        }
        Owner::Peer {
            addr,
            epoch: members.epoch,
        }
    }

    /// A forward to `addr` failed: skip it for [`PEER_BACKOFF`].
    pub(crate) fn peer_failed(&self, addr: SocketAddr) {
        self.metrics.fleet().count(FleetResult::PeerError);
        let members = self.members.load();
        if let Ok(i) = members.addrs.binary_search(&addr) {
            let until = self
                .now_ms()
                .saturating_add(PEER_BACKOFF.as_millis() as u64);
            members.down_until[i].store(until, Ordering::Relaxed);
        }
    }

    /// Removes the peer fields from `headers` and says whether they proved
    /// the request comes from a peer (counting a peer whose ring epoch
    /// differs from this replica's).
    pub(crate) fn admit(&self, headers: &mut HeaderMap) -> bool {
        let token = headers.remove(PEER_TOKEN);
        let epoch = headers.remove(RING_EPOCH);
        let Some(token) = token else {
            return false;
        };
        if !constant_time_eq(token.as_bytes(), self.token.as_bytes()) {
            return false;
        }
        let theirs = epoch.and_then(|v| {
            v.to_str()
                .ok()
                .and_then(|s| u64::from_str_radix(s, 16).ok())
        });
        if theirs != Some(self.epoch()) {
            self.metrics.fleet().count(FleetResult::RingDisagreement);
        }
        self.metrics.fleet().count(FleetResult::ServedForPeer);
        true
    }

    /// Adds the peer fields to a request forwarded with ring `epoch`.
    pub(crate) fn mark(&self, headers: &mut HeaderMap, epoch: u64) {
        headers.insert(PEER_TOKEN, self.token.clone());
        if let Ok(v) = HeaderValue::from_str(&format!("{epoch:016x}")) {
            headers.insert(RING_EPOCH, v);
        }
    }

    /// Counts one outcome of the fleet phase.
    pub(crate) fn count(&self, result: FleetResult) {
        self.metrics.fleet().count(result);
    }
}

/// Whether `a` equals `b`, in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(self_addr: &str, peers: &[&str]) -> Arc<Fleet> {
        let settings = FleetSettings {
            self_addr: self_addr.parse().expect("addr"),
            discovery: FleetDiscovery::Static(
                peers.iter().map(|p| p.parse().expect("addr")).collect(),
            ),
            secret: "0123456789abcdef0123".to_owned(),
            peer_timeout: Duration::from_secs(1),
        };
        let metrics = Arc::new(Metrics::new(Arc::default(), Vec::new()));
        Fleet::new(&settings, metrics).expect("fleet")
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
        assert!(f.admit(&mut h));
        assert!(h.is_empty(), "stripped");

        let mut h = HeaderMap::new();
        h.insert(PEER_TOKEN, HeaderValue::from_static("0123456789abcdef0124"));
        h.insert(RING_EPOCH, HeaderValue::from_static("00"));
        assert!(!f.admit(&mut h), "a wrong token is a client's request");
        assert!(h.is_empty(), "stripped anyway");
        assert!(!f.admit(&mut HeaderMap::new()));
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
        f.peer_failed(addr);
        assert_eq!(f.owner(&key), Owner::Here);
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
        // The task ends with the fleet.
        let weak = Arc::downgrade(&f);
        drop(f);
        assert!(weak.upgrade().is_none());
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
}
