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
//! After the members change, a key that moved has a new owner with an
//! empty cache for it. For [`HANDOFF_WINDOW`], the new owner's cache miss
//! first asks the key's previous owner, if that replica is still a member,
//! with a peek ([`PEEK`]): the previous owner answers from its cache alone
//! (the entry as stored, no transform), or says `miss` and fetches
//! nothing; only then does the new owner go to the origin. So a replica
//! that joins, or one that leaves while it still runs, moves keys without
//! fetching them again. A replica that starts (or had no peers until now)
//! counts as joining: its previous ring is the members without it, so its
//! first misses peek at the replicas that owned those keys before it came.
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

use crate::balance::ring::{Ring, RingHash, hash};
use crate::config::{FleetDiscovery, FleetSettings};
use crate::metrics::{FleetResult, Metrics};

/// The field a forwarded request proves it comes from a peer with: the
/// shared secret.
pub const PEER_TOKEN: HeaderName = HeaderName::from_static("x-weir-peer-token");

/// The field that carries the forwarder's ring epoch, in hex.
pub const RING_EPOCH: HeaderName = HeaderName::from_static("x-weir-ring-epoch");

/// How long a peer that failed is skipped.
pub const PEER_BACKOFF: Duration = Duration::from_secs(5);

/// Timeouts in a row after which a peer is skipped: one slow answer (an
/// owner waiting on a slow origin) is not a stalled peer. A refused
/// connection or an answer that is not HTTP skips it at once.
pub const TIMEOUTS_BEFORE_BACKOFF: u32 = 3;

/// Removes the peer fields from a request on a replica without
/// `[fleet]`; says [`Admitted::Client`].
pub(crate) fn strip(headers: &mut HeaderMap) -> Admitted {
    for name in [PEER_TOKEN, RING_EPOCH, PEEK, RATE_ASK, INVALIDATE, REFUSED] {
        headers.remove(name);
    }
    Admitted::Client
}

/// The field of a peek: a peer asking for this replica's cached entry only.
/// On a miss the answer is a `404` with this field set to `miss`.
pub const PEEK: HeaderName = crate::headers::FLEET_PEEK;

/// The field of a peer's ask for a rate-limit token (see `fleet/rate.rs`):
/// `<per_second> <burst> <id>`, the id in hex (see
/// `crate::rate_limit::RouteRateLimit::shared_id`).
pub const RATE_ASK: HeaderName = HeaderName::from_static("x-weir-fleet-rate");

/// The field of a peer telling a key's owner that an unsafe method
/// succeeded on the key's URI elsewhere: the owner drops its entry.
pub const INVALIDATE: HeaderName = HeaderName::from_static("x-weir-fleet-invalidate");

/// How long after the members change a new owner peeks at a key's previous
/// owner before fetching it.
pub const HANDOFF_WINDOW: Duration = Duration::from_secs(60);

/// How a request came in (see [`Fleet::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admitted {
    /// From a client (or with a wrong token).
    Client,
    /// Forwarded by a peer: served here, never forwarded again.
    Peer,
    /// A peer's peek: answered from this replica's cache alone.
    Peek,
    /// A peer asking for a token of a rate-limit bucket this replica owns
    /// ([`RATE_ASK`]): answered before routing, without a log line.
    RateAsk,
    /// A peer telling this replica, the key's owner, to drop a cached
    /// entry ([`INVALIDATE`]): answered without a log line.
    Invalidate,
    /// A peer token that is not this replica's secret: refused with a
    /// `403` that says so ([`REFUSED`]), so that a replica whose secret
    /// differs (a Secret rotated on some pods first) fails its forwards at
    /// once and serves them itself, instead of being treated as a client.
    BadToken,
}

/// The field of the `403` a request with a wrong peer token gets: the
/// forwarding replica takes it as a failed forward.
pub const REFUSED: HeaderName = crate::headers::FLEET_REFUSED;

/// The most often a wrong peer token is logged: once per this many ms.
const BAD_TOKEN_LOG_MS: u64 = 10_000;

/// The members before the last change, asked for moved keys until `until_ms`.
#[derive(Debug)]
struct Previous {
    members: Arc<Members>,
    until_ms: u64,
}

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

/// Why [`Fleet::owner_of`] placed a key where it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Its owner on the ring.
    Ring,
    /// Its owner is in back-off: served here.
    Down,
    /// Its owner was at the bound on load: the next member under it.
    Bounded,
}

/// What a peer is asked for, each with its own failure count and
/// back-off: a client can make a forward time out (a slow origin behind
/// the owner), but not a rate-limit ask, which the owner answers from
/// memory, so forwards that time out do not turn the shared rate limits
/// off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Forwards, peeks and invalidations.
    Forward = 0,
    /// Rate-limit asks (`rate.rs`).
    Rate = 1,
}

/// The members as one replica sees them.
#[derive(Debug)]
struct Members {
    /// Sorted, deduplicated, this replica included.
    addrs: Vec<SocketAddr>,
    ring: Ring,
    /// A digest of `addrs`: equal on replicas that agree.
    epoch: u64,
    /// Per member and [`Lane`], the time (ms since the fleet started)
    /// until which it is skipped after a failure.
    down_until: Vec<[AtomicU64; 2]>,
    /// Per member and [`Lane`], response-head timeouts in a row.
    timeouts: Vec<[std::sync::atomic::AtomicU32; 2]>,
    /// Per member, relayed bodies it broke off (or that stalled) with no
    /// clean one since.
    broken: Vec<std::sync::atomic::AtomicU32>,
    /// Per member, forwards from this replica waiting for its response
    /// head (see `load.rs`).
    in_flight: Vec<std::sync::atomic::AtomicU32>,
}

impl Members {
    /// Whether `addr` is a member in back-off for `lane` at `now_ms`.
    fn is_down(&self, addr: SocketAddr, lane: Lane, now_ms: u64) -> bool {
        self.addrs
            .binary_search(&addr)
            .is_ok_and(|i| self.down_until[i][lane as usize].load(Ordering::Relaxed) > now_ms)
    }

    /// Puts `addr`, if a member, in back-off for `lane` until
    /// `until_ms`; after a timeout (`timed_out`), only at the
    /// [`TIMEOUTS_BEFORE_BACKOFF`]th in a row.
    /// Says whether it is in back-off now.
    fn set_down(&self, addr: SocketAddr, lane: Lane, until_ms: u64, timed_out: bool) -> bool {
        if let Ok(i) = self.addrs.binary_search(&addr) {
            let (timeouts, down_until) = (
                &self.timeouts[i][lane as usize],
                &self.down_until[i][lane as usize],
            );
            if !timed_out {
                timeouts.store(TIMEOUTS_BEFORE_BACKOFF - 1, Ordering::Relaxed);
            }
            return strike(timeouts, down_until, until_ms);
        }
        false
    }

    /// Keeps `old`'s back-off state (skipped until, timeouts in a row) for
    /// the members both lists have (both on one clock: a reload keeps the
    /// fleet's). So a reload or a change of members does not forget a
    /// stalled peer.
    fn keep_state(&self, old: &Members) {
        for (i, addr) in self.addrs.iter().enumerate() {
            if let Ok(j) = old.addrs.binary_search(addr) {
                for lane in [Lane::Forward, Lane::Rate] {
                    let l = lane as usize;
                    let until = old.down_until[j][l].load(Ordering::Relaxed);
                    self.down_until[i][l].store(until, Ordering::Relaxed);
                    let timeouts = old.timeouts[j][l].load(Ordering::Relaxed);
                    self.timeouts[i][l].store(timeouts, Ordering::Relaxed);
                }
                let broken = old.broken[j].load(Ordering::Relaxed);
                self.broken[i].store(broken, Ordering::Relaxed);
            }
        }
    }

    /// `addr` answered on `lane`: its timeouts in a row there start again
    /// from 0.
    fn answered(&self, addr: SocketAddr, lane: Lane) {
        if let Ok(i) = self.addrs.binary_search(&addr) {
            self.timeouts[i][lane as usize].store(0, Ordering::Relaxed);
        }
    }

    fn new(mut addrs: Vec<SocketAddr>, kind: RingHash) -> Members {
        addrs.sort_unstable();
        addrs.dedup();
        let names: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        let ring = Ring::of_kind(kind, names.iter().map(|n| (n.as_str(), 1)));
        // Replicas on rings of two kinds disagree about owners.
        let kind_tag = match kind {
            RingHash::Weir => "",
            RingHash::Ketama => ";ketama",
        };
        let epoch = hash(format!("{}{kind_tag}", names.join(",")).as_bytes());
        let down_until = addrs.iter().map(|_| Default::default()).collect();
        let timeouts = addrs.iter().map(|_| Default::default()).collect();
        let broken = addrs.iter().map(|_| Default::default()).collect();
        let in_flight = addrs
            .iter()
            .map(|_| std::sync::atomic::AtomicU32::new(0))
            .collect();
        Members {
            addrs,
            ring,
            epoch,
            down_until,
            timeouts,
            broken,
            in_flight,
        }
    }
}

/// One replica's view of its fleet.
pub struct Fleet {
    self_addr: SocketAddr,
    token: HeaderValue,
    peer_timeout: Duration,
    rate_timeout: Duration,
    /// The kind of ring the members go on.
    ring: RingHash,
    /// `hash_balance_factor`: the most forwards in flight to one member,
    /// in percent of the average per member (`None`: no bound).
    balance_factor: Option<u32>,
    members: ArcSwap<Members>,
    previous: arc_swap::ArcSwapOption<Previous>,
    started: Instant,
    /// When a wrong peer token was last logged (ms since `started`, plus 1;
    /// 0: never).
    bad_token_logged: AtomicU64,
    /// The rate-limit buckets of the keys this replica owns (kept across
    /// reloads).
    buckets: Arc<crate::rate_limit::buckets::SharedBuckets>,
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
        Fleet::after(settings, metrics, None)
    }

    /// As [`Fleet::new`], for a reload: the fleet in effect until now is
    /// `before`. Under DNS discovery the new fleet starts with its members;
    /// when the members differ, moved keys are handed off from `before`'s
    /// owners for [`HANDOFF_WINDOW`].
    ///
    /// # Errors
    /// None in practice: the secret was checked to be visible ASCII.
    pub fn after(
        settings: &FleetSettings,
        metrics: Arc<Metrics>,
        before: Option<&Fleet>,
    ) -> Result<Arc<Fleet>, http::header::InvalidHeaderValue> {
        let initial = match (&settings.discovery, before) {
            (FleetDiscovery::Static(peers), _) => peers.clone(),
            (FleetDiscovery::Dns { .. } | FleetDiscovery::EndpointSlices { .. }, Some(before)) => {
                before.members()
            }
            (FleetDiscovery::Dns { .. } | FleetDiscovery::EndpointSlices { .. }, None) => {
                vec![settings.self_addr]
            }
        };
        let members = Members::new(initial, settings.ring);
        metrics
            .fleet()
            .set_members(members.addrs.len(), members.epoch);
        tracing::info!(
            target: "weir::fleet",
            this = %settings.self_addr,
            members = members.addrs.len(),
            epoch = %format!("{:016x}", members.epoch),
            "fleet: {}",
            members.addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(", ")
        );
        let fleet = Arc::new(Fleet {
            self_addr: settings.self_addr,
            token: HeaderValue::from_str(&settings.secret)?,
            peer_timeout: settings.peer_timeout,
            rate_timeout: settings.rate_timeout,
            ring: settings.ring,
            balance_factor: settings.balance_factor,
            members: ArcSwap::from_pointee(members),
            previous: arc_swap::ArcSwapOption::empty(),
            // One clock across reloads, so that back-off times and the
            // handoff window carry over as they are.
            started: before.map_or_else(Instant::now, |b| b.started),
            bad_token_logged: AtomicU64::new(0),
            buckets: before.map(|b| Arc::clone(&b.buckets)).unwrap_or_default(),
            metrics,
        });
        match before {
            None => fleet.joined(),
            Some(before) => {
                let old = before.members.load_full();
                fleet.members.load().keep_state(&old);
                if old.addrs != fleet.members.load().addrs {
                    fleet.keep_previous(old);
                } else {
                    // Still within an earlier change's window, if any.
                    fleet.previous.store(before.previous.load_full());
                }
            }
        }
        Ok(fleet)
    }

    /// This replica has just joined the members it has (it started, or it
    /// was alone until now): the keys it owns were the others' until now,
    /// so the previous ring is the members without it.
    fn joined(&self) {
        let others: Vec<SocketAddr> = self
            .members
            .load()
            .addrs
            .iter()
            .copied()
            .filter(|&a| a != self.self_addr)
            .collect();
        if !others.is_empty() {
            self.keep_previous(Arc::new(Members::new(others, self.ring)));
        }
    }

    /// Keeps `old` as the members moved keys are handed off from.
    fn keep_previous(&self, old: Arc<Members>) {
        let until_ms = self
            .now_ms()
            .saturating_add(HANDOFF_WINDOW.as_millis() as u64);
        self.previous.store(Some(Arc::new(Previous {
            members: old,
            until_ms,
        })));
    }

    /// Follows `discovery` in a task until this fleet is dropped (a reload
    /// builds a new one): resolves its DNS name every `refresh`, or
    /// watches its EndpointSlices (`endpoints.rs`). Nothing to do for a
    /// static list, or outside a tokio runtime.
    pub fn start_discovery(self: &Arc<Self>, discovery: &FleetDiscovery) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (name, refresh) = match discovery {
            FleetDiscovery::Static(_) => return,
            FleetDiscovery::EndpointSlices { service, namespace } => {
                let (alive, set) = (Arc::downgrade(self), Arc::downgrade(self));
                runtime.spawn(endpoints::watch(
                    service.clone(),
                    namespace.clone(),
                    self.self_addr.port(),
                    move || alive.strong_count() > 0,
                    move |addrs| {
                        if let Some(fleet) = set.upgrade() {
                            fleet.set_members(addrs);
                        }
                    },
                ));
                return;
            }
            FleetDiscovery::Dns { name, refresh } => (name, refresh),
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
        let next = Members::new(addrs, self.ring);
        if next.addrs == self.members.load().addrs {
            return;
        }
        next.keep_state(&self.members.load());
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
        let old = self.members.swap(Arc::new(next));
        if old.addrs == [self.self_addr] {
            self.joined();
        } else {
            self.keep_previous(old);
        }
    }

    /// This replica's address as peers reach it.
    pub fn self_addr(&self) -> SocketAddr {
        self.self_addr
    }

    /// How long a forwarded miss waits for the owner's response head.
    pub fn peer_timeout(&self) -> Duration {
        self.peer_timeout
    }

    /// How long a rate-limit ask waits for the owner's answer.
    pub fn rate_timeout(&self) -> Duration {
        self.rate_timeout
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

    /// The replica to peek at for `key`, which this replica owns now: its
    /// owner before the last change of members, while [`HANDOFF_WINDOW`]
    /// lasts, if that is another replica and not in back-off. It may have
    /// left the members and still run (a replica drained out of the ring);
    /// one that is gone fails once and is then skipped.
    pub(crate) fn previous_owner(&self, key: &str) -> Option<SocketAddr> {
        let previous = self.previous.load_full()?;
        let now = self.now_ms();
        if now > previous.until_ms {
            return None;
        }
        let old = &previous.members;
        let i = old
            .ring
            .pick(old.ring.key_point(key.as_bytes()), old.addrs.len(), |_| {
                true
            })?;
        let addr = old.addrs[i];
        let down = old.is_down(addr, Lane::Forward, now)
            || self.members.load().is_down(addr, Lane::Forward, now);
        (addr != self.self_addr && !down).then_some(addr)
    }

    /// An ask of `lane` to `addr` failed: skip it there for
    /// [`PEER_BACKOFF`] (for forwards, as a member and as a previous
    /// owner); after a response-head timeout (`timed_out`), only once
    /// [`TIMEOUTS_BEFORE_BACKOFF`] came in a row.
    /// Says whether the peer is now skipped.
    pub(crate) fn peer_failed(&self, addr: SocketAddr, lane: Lane, timed_out: bool) -> bool {
        self.metrics.fleet().count(FleetResult::PeerError);
        let until = self
            .now_ms()
            .saturating_add(PEER_BACKOFF.as_millis() as u64);
        let mut skipped = self.members.load().set_down(addr, lane, until, timed_out);
        if lane == Lane::Forward
            && let Some(previous) = self.previous.load_full()
        {
            skipped |= previous.members.set_down(addr, lane, until, timed_out);
        }
        skipped
    }

    /// The body of an answer relayed from the owner at `addr` ended:
    /// `clean`, or broken off (or stalled). One break alone never skips
    /// the owner: the owner may have closed a connection this replica
    /// stopped reading because its client did, or its origin may have
    /// broken the body. [`TIMEOUTS_BEFORE_BACKOFF`] breaks with no clean
    /// body between put it in back-off for forwards.
    /// Says whether the peer is now skipped.
    pub(crate) fn peer_body_ended(&self, addr: SocketAddr, clean: bool) -> bool {
        let members = self.members.load();
        let Ok(i) = members.addrs.binary_search(&addr) else {
            return false;
        };
        if clean {
            members.broken[i].store(0, Ordering::Relaxed);
            return false;
        }
        self.metrics.fleet().count(FleetResult::PeerError);
        let until = self
            .now_ms()
            .saturating_add(PEER_BACKOFF.as_millis() as u64);
        strike(
            &members.broken[i],
            &members.down_until[i][Lane::Forward as usize],
            until,
        )
    }

    /// An ask of `lane` to `addr` got an answer.
    pub(crate) fn peer_answered(&self, addr: SocketAddr, lane: Lane) {
        self.members.load().answered(addr, lane);
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

/// One more failure in a row on `count`: the [`TIMEOUTS_BEFORE_BACKOFF`]th
/// restarts it and sets `down_until` to `until_ms` (says whether).
fn strike(count: &std::sync::atomic::AtomicU32, down_until: &AtomicU64, until_ms: u64) -> bool {
    if count.fetch_add(1, Ordering::Relaxed) + 1 < TIMEOUTS_BEFORE_BACKOFF {
        return false;
    }
    count.store(0, Ordering::Relaxed);
    down_until.store(until_ms, Ordering::Relaxed);
    true
}

/// Whether `a` equals `b`, in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

mod admit;
mod endpoints;
mod load;
mod owner;
pub(crate) mod rate;
#[cfg(test)]
mod tests;
