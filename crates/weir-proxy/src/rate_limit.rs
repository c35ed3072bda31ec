//! Per-route rate limits: a token bucket per key (GCRA, from `governor`),
//! keyed by the client's address, a request field or a cookie.

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use http::HeaderMap;
use ipnet::IpNet;

use crate::config::{HashKey, RateLimitSpec};

/// Checks between two sweeps of keys that have refilled their bucket.
const SWEEP_EVERY: u64 = 16 * 1024;

/// One route's limiter.
#[derive(Debug)]
pub struct RouteRateLimit {
    limiter: DefaultKeyedRateLimiter<u64>,
    key: HashKey,
    hasher: RandomState,
    checks: AtomicU64,
}

impl RouteRateLimit {
    /// The limiter `spec` describes (`requests_per_second` ≥ 1, `burst` ≥ 1:
    /// config validation says so).
    pub fn new(spec: &RateLimitSpec) -> RouteRateLimit {
        let per_second = NonZeroU32::new(spec.requests_per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(spec.burst).unwrap_or(per_second);
        RouteRateLimit {
            limiter: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ),
            key: spec.key.clone(),
            hasher: RandomState::new(),
            checks: AtomicU64::new(0),
        }
    }

    /// Takes a token for this request's key. `Err(seconds)`: the bucket is
    /// empty, and `seconds` (at least 1) is the `Retry-After` to send
    /// (RFC 9110 §10.2.3). Requests without the field or cookie the key
    /// names share one bucket.
    pub fn check(&self, headers: &HeaderMap, client: IpAddr) -> Result<(), u64> {
        let key = match &self.key {
            HashKey::ClientAddr => match client.to_canonical() {
                IpAddr::V4(v4) => self.hasher.hash_one(v4.octets()),
                IpAddr::V6(v6) => self.hasher.hash_one(v6.octets()),
            },
            HashKey::Header(name) => self
                .hasher
                .hash_one(headers.get(name).map(|v| v.as_bytes())),
            HashKey::Cookie(name) => self.hasher.hash_one(crate::balance::cookie(headers, name)),
        };
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            // Keys whose bucket is full again hold no state worth keeping.
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&key).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }
}

/// The client's address as a limit or a hash key sees it: the TCP peer's,
/// or, when the peer is a trusted proxy, the right-most `X-Forwarded-For`
/// entry that is not one (the left-most when all are).
pub fn client_addr(peer: IpAddr, trusted: &[IpNet], headers: &HeaderMap) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(&ip.to_canonical()));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut last = peer;
    let lines: Vec<&str> = headers
        .get_all(crate::headers::X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    for entry in lines.iter().rev().flat_map(|l| l.rsplit(',')) {
        let Ok(ip) = entry.trim().parse::<IpAddr>() else {
            // Not an address: what comes before it cannot be trusted.
            return last;
        };
        if !is_trusted(&ip) {
            return ip;
        }
        last = ip;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_right_most_untrusted_forwarded_address_is_the_client() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", "1.1.1.1, 2.2.2.2".parse().expect("v"));
        h.append("x-forwarded-for", "10.0.0.7".parse().expect("v"));
        let peer: IpAddr = "10.0.0.1".parse().expect("ip");
        assert_eq!(
            client_addr(peer, &trusted, &h),
            "2.2.2.2".parse::<IpAddr>().expect("ip")
        );
        let outside: IpAddr = "3.3.3.3".parse().expect("ip");
        assert_eq!(client_addr(outside, &trusted, &h), outside);
        assert_eq!(client_addr(peer, &trusted, &HeaderMap::new()), peer);
    }

    #[test]
    fn a_bucket_admits_its_burst_then_says_when_to_retry() {
        let limit = RouteRateLimit::new(&RateLimitSpec {
            requests_per_second: 1,
            burst: 3,
            key: HashKey::ClientAddr,
        });
        let h = HeaderMap::new();
        let a: IpAddr = "1.1.1.1".parse().expect("ip");
        let b: IpAddr = "2.2.2.2".parse().expect("ip");
        for _ in 0..3 {
            assert_eq!(limit.check(&h, a), Ok(()));
        }
        assert_eq!(limit.check(&h, a), Err(1));
        assert_eq!(limit.check(&h, b), Ok(()), "another key has its own bucket");
    }
}
