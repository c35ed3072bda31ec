//! Admission of a request that may come from a peer: its peer fields
//! checked against the secret and removed before anything reads them.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use http::HeaderMap;

use super::{
    Admitted, BAD_TOKEN_LOG_MS, Fleet, INVALIDATE, PEEK, PEER_TOKEN, RATE_ASK, REFUSED, RING_EPOCH,
    constant_time_eq,
};
use crate::metrics::FleetResult;

impl Fleet {
    /// Removes the peer fields from `headers` and says whether they proved
    /// the request comes from a peer, and whether it is a peek (counting a
    /// peer whose ring epoch differs from this replica's).
    pub(crate) fn admit(&self, headers: &mut HeaderMap, from: SocketAddr) -> Admitted {
        let token = headers.remove(PEER_TOKEN);
        let epoch = headers.remove(RING_EPOCH);
        let peek = headers.remove(PEEK).is_some();
        // A response field: no request has a use for it.
        headers.remove(REFUSED);
        let valid = token
            .as_ref()
            .map(|t| constant_time_eq(t.as_bytes(), self.token.as_bytes()));
        if valid != Some(true) {
            // Only a peer asks for a rate-limit token or invalidates.
            headers.remove(RATE_ASK);
            headers.remove(INVALIDATE);
        }
        let Some(valid) = valid else {
            return Admitted::Client;
        };
        if !valid {
            self.metrics.fleet().count(FleetResult::BadToken);
            let now = self.now_ms().saturating_add(1);
            let last = self.bad_token_logged.load(Ordering::Relaxed);
            if (last == 0 || now.saturating_sub(last) >= BAD_TOKEN_LOG_MS)
                && self
                    .bad_token_logged
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                tracing::warn!(
                    target: "weir::fleet",
                    peer = %from,
                    "refused a request whose fleet peer token is not this replica's secret: \
                     check that every replica has the same [fleet] secret (logged at most every 10 s)"
                );
            }
            return Admitted::BadToken;
        }
        if peek {
            self.metrics.fleet().count(FleetResult::PeekServed);
            return Admitted::Peek;
        }
        if headers.contains_key(RATE_ASK) {
            return Admitted::RateAsk;
        }
        if headers.remove(INVALIDATE).is_some() {
            return Admitted::Invalidate;
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
        Admitted::Peer
    }
}
