//! Which replica serves a key: its owner on the ring, this replica when
//! the owner is in back-off, or the next member under the bound on load.

use std::sync::atomic::Ordering;

use super::{Fleet, Lane, Owner, Why};
use crate::metrics::FleetResult;

impl Fleet {
    /// Who serves the cache key `key`: its owner on the ring, or this
    /// replica when that is this replica or an owner in back-off.
    /// Under `hash_balance_factor`, an owner with more forwards in flight
    /// from here than the bound is passed over for the next member on the
    /// ring that is under it (see `load.rs`).
    pub(crate) fn owner(&self, key: &str) -> Owner {
        self.owner_of(key.as_bytes(), true).0
    }

    /// [`Fleet::owner`] for a client's request, counted: as `owner` when
    /// this replica owns the key, as `bounded` when the bound on load
    /// passed its owner over.
    pub(crate) fn place(&self, key: &str) -> Owner {
        let (owner, why) = self.owner_of(key.as_bytes(), true);
        match (owner, why) {
            (_, Why::Bounded) => self.count(FleetResult::Bounded),
            (Owner::Here, Why::Ring) => self.count(FleetResult::Owner),
            _ => {}
        }
        owner
    }

    /// The owner of key `key` on the ring, with no bound on load and in
    /// back-off or not: where the fleet's cache entry or rate-limit bucket
    /// for it is kept.
    pub(crate) fn ring_owner(&self, key: &[u8]) -> Owner {
        let members = self.members.load();
        let point = members.ring.key_point(key);
        match members.ring.pick(point, members.addrs.len(), |_| true) {
            Some(i) if members.addrs[i] != self.self_addr => Owner::Peer {
                addr: members.addrs[i],
                epoch: members.epoch,
            },
            _ => Owner::Here,
        }
    }

    /// Who serves the key `bytes` (see [`Fleet::owner`]), and why;
    /// `bounded`: with the bound on load, if there is one.
    pub(super) fn owner_of(&self, bytes: &[u8], bounded: bool) -> (Owner, Why) {
        let members = self.members.load();
        let point = members.ring.key_point(bytes);
        let bound = self
            .balance_factor
            .filter(|_| bounded)
            .map(|f| members.bound(f));
        let usable = |i: usize| match bound {
            None => true,
            Some(bound) => {
                members.addrs[i] == self.self_addr
                    || members.in_flight[i].load(Ordering::Relaxed) < bound
            }
        };
        let Some(i) = members.ring.pick(point, members.addrs.len(), usable) else {
            return (Owner::Here, Why::Ring);
        };
        let why = if bound.is_some()
            && members.ring.pick(point, members.addrs.len(), |_| true) != Some(i)
        {
            Why::Bounded
        } else {
            Why::Ring
        };
        let addr = members.addrs[i];
        if addr == self.self_addr {
            return (Owner::Here, why);
        }
        if members.down_until[i][Lane::Forward as usize].load(Ordering::Relaxed) > self.now_ms() {
            return (Owner::Here, Why::Down);
        }
        let peer = Owner::Peer {
            addr,
            epoch: members.epoch,
        };
        (peer, why)
    }
}
