//! The fleet families: `weir_fleet_members`, `weir_fleet_ring_epoch` and
//! `weir_fleet_requests_total{result}`; and the shared rate-limit stores'
//! `weir_rate_limit_fallbacks_total{scope}`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::labels::ResultLabels;

/// What the fleet phase did with a request (`weir_fleet_requests_total`'s
/// `result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetResult {
    /// A cacheable request another replica owns, forwarded there.
    Forwarded,
    /// A forward that failed (no connection, no head in time, a bad
    /// answer); this replica served the request itself.
    PeerError,
    /// A cacheable request this replica owns, from a client.
    Owner,
    /// A request a peer forwarded, served here.
    ServedForPeer,
    /// A forwarded request whose ring epoch differed from this replica's.
    RingDisagreement,
    /// A miss of a key that moved here, filled from its previous owner's
    /// cache instead of the upstream.
    Handoff,
    /// A peer's peek at this replica's cache, answered.
    PeekServed,
    /// A request with a peer token that is not this replica's secret,
    /// refused (`403`).
    BadToken,
    /// A rate-limit token asked of the key's owner (`scope = "fleet"`).
    RateAsked,
    /// A peer's ask for a token of a bucket this replica owns, answered.
    RateAnswered,
    /// A cacheable request sent past its owner, which had as many forwards
    /// in flight from this replica as `hash_balance_factor` allows.
    Bounded,
    /// A cacheable request another replica owns, answered from this
    /// replica's L1 of the owners' answers (`l1_bytes`).
    L1Hit,
    /// A cached entry this replica owns dropped at a peer's word: an
    /// unsafe method on its URI succeeded there.
    Invalidated,
}

impl FleetResult {
    /// Every value, in label order.
    pub const ALL: [FleetResult; 13] = [
        FleetResult::Forwarded,
        FleetResult::PeerError,
        FleetResult::Owner,
        FleetResult::ServedForPeer,
        FleetResult::RingDisagreement,
        FleetResult::Handoff,
        FleetResult::PeekServed,
        FleetResult::BadToken,
        FleetResult::RateAsked,
        FleetResult::RateAnswered,
        FleetResult::Bounded,
        FleetResult::L1Hit,
        FleetResult::Invalidated,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FleetResult::Forwarded => "forwarded",
            FleetResult::PeerError => "peer_error",
            FleetResult::Owner => "owner",
            FleetResult::ServedForPeer => "served_for_peer",
            FleetResult::RingDisagreement => "ring_disagreement",
            FleetResult::Handoff => "handoff",
            FleetResult::PeekServed => "peek_served",
            FleetResult::BadToken => "bad_token",
            FleetResult::RateAsked => "rate_asked",
            FleetResult::RateAnswered => "rate_answered",
            FleetResult::Bounded => "bounded",
            FleetResult::L1Hit => "l1_hit",
            FleetResult::Invalidated => "invalidated",
        }
    }
}

/// The fleet families, registered once per proxy (reloads keep them).
#[derive(Debug)]
pub struct FleetFamilies {
    members: Gauge,
    epoch: Gauge,
    requests: Family<ResultLabels, Counter>,
    fallbacks: Family<ScopeLabels, Counter>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabels {
    scope: &'static str,
}

impl FleetFamilies {
    pub(super) fn register(r: &mut Registry) -> FleetFamilies {
        let members = Gauge::default();
        r.register(
            "fleet_members",
            "Replicas on this replica's ring, itself included (0: no [fleet])",
            members.clone(),
        );
        let epoch = Gauge::default();
        r.register(
            "fleet_ring_epoch",
            "The ring epoch (the top 48 bits of the member list's digest): equal on replicas that agree",
            epoch.clone(),
        );
        let requests = Family::<ResultLabels, Counter>::default();
        r.register(
            "fleet_requests",
            "Cacheable requests by what the fleet phase did with them, and requests from peers",
            requests.clone(),
        );
        for result in FleetResult::ALL {
            drop(requests.get_or_create(&ResultLabels {
                result: result.as_str(),
            }));
        }
        let fallbacks = Family::<ScopeLabels, Counter>::default();
        r.register(
            "rate_limit_fallbacks",
            "Rate-limit checks made on this replica's own bucket because the shared store \
             (the key's fleet owner, or Redis) did not answer",
            fallbacks.clone(),
        );
        for scope in ["fleet", "redis"] {
            drop(fallbacks.get_or_create(&ScopeLabels { scope }));
        }
        FleetFamilies {
            members,
            epoch,
            requests,
            fallbacks,
        }
    }

    /// Sets `weir_fleet_members` and `weir_fleet_ring_epoch`.
    pub fn set_members(&self, count: usize, epoch: u64) {
        self.members.set(i64::try_from(count).unwrap_or(i64::MAX));
        self.epoch
            .set(i64::try_from(epoch >> 16).unwrap_or(i64::MAX));
    }

    /// Counts one check of a `scope` (`"fleet"`, `"redis"`) rate limit
    /// made on the replica's own bucket.
    pub fn count_fallback(&self, scope: &'static str) {
        self.fallbacks.get_or_create(&ScopeLabels { scope }).inc();
    }

    /// Counts one outcome in `weir_fleet_requests_total`.
    pub fn count(&self, result: FleetResult) {
        self.requests
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }
}
