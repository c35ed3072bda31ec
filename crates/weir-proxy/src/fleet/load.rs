//! Bounded load on the fleet's ring (`[fleet] hash_balance_factor`), after
//! "consistent hashing with bounded loads" (Mirrokni, Thorup and
//! Zadimoghaddam, 2018): no member gets more than `factor` times its
//! average share of the work in flight. A key whose owner is at the bound
//! goes to the next member on the ring that is under it, so a hot key
//! spreads over a few replicas instead of pinning one.
//!
//! Each replica bounds what it sends itself: the load of a member is the
//! number of forwards from this replica waiting for that member's response
//! head ([`InFlight`]), and this replica's own share never counts against
//! it, so a key passed over by every peer is served here. Replicas do not
//! share their counts: the bound holds per sender.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Fleet, Members};

impl Members {
    /// The most forwards in flight to one member: `factor` percent of the
    /// average per member with this one added, rounded up (at least 1).
    pub(super) fn bound(&self, factor: u32) -> u32 {
        let total: u64 = self
            .in_flight
            .iter()
            .map(|n| u64::from(n.load(Ordering::Relaxed)))
            .sum();
        let n = self.addrs.len().max(1) as u64;
        let bound = (u64::from(factor) * (total + 1)).div_ceil(100 * n);
        u32::try_from(bound.max(1)).unwrap_or(u32::MAX)
    }
}

/// A forward in flight to a member, counted until dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    members: Arc<Members>,
    index: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.members.in_flight[self.index].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Fleet {
    /// Counts a forward to `addr` in flight until the guard is dropped
    /// (`None`: not a member now).
    pub(crate) fn forwarding(&self, addr: std::net::SocketAddr) -> Option<InFlight> {
        let members = self.members.load_full();
        let index = members.addrs.binary_search(&addr).ok()?;
        members.in_flight[index].fetch_add(1, Ordering::Relaxed);
        Some(InFlight { members, index })
    }
}
