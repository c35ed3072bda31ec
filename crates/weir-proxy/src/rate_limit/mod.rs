//! Per-route rate limits: a token bucket per key (GCRA, from `governor`),
//! keyed by the client's address, a request field or a cookie.
//!
//! Where a route's buckets live is its `scope`: in this process
//! (`replica`), on the key's owner among the `[fleet]` replicas
//! ([`buckets`], asked through `crate::exchange::rate`), or in Redis
//! ([`redis`]). A shared store that cannot answer in time leaves the check
//! to the route's own bucket here, so an outage loosens a limit to one
//! bucket per replica and never refuses or stalls requests.

pub mod buckets;
pub mod redis;

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use http::HeaderMap;
use ipnet::IpNet;

use crate::config::{HashKey, RateLimitScope, RateLimitSpec};

/// Checks between two sweeps of keys that have refilled their bucket.
const SWEEP_EVERY: u64 = 16 * 1024;

/// A bucket's rate and size: what a shared store needs to run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Tokens added per second (≥ 1).
    pub per_second: u32,
    /// Bucket size, in requests (≥ 1).
    pub burst: u32,
}

/// One route's limiter.
#[derive(Debug)]
pub struct RouteRateLimit {
    limiter: DefaultKeyedRateLimiter<u64>,
    key: HashKey,
    hasher: RandomState,
    checks: AtomicU64,
    rate: Rate,
    scope: RateLimitScope,
    /// The route's label (host and path prefix): the first part of a
    /// shared bucket's id, the same on every replica with this route.
    label: String,
}

impl RouteRateLimit {
    /// The limiter `spec` describes (`requests_per_second` ≥ 1, `burst` ≥ 1:
    /// config validation says so), for the route labelled `label`.
    pub fn new(spec: &RateLimitSpec, label: String) -> RouteRateLimit {
        let per_second = NonZeroU32::new(spec.requests_per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(spec.burst).unwrap_or(per_second);
        RouteRateLimit {
            limiter: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ),
            key: spec.key.clone(),
            hasher: RandomState::new(),
            checks: AtomicU64::new(0),
            rate: Rate {
                per_second: per_second.get(),
                burst: burst.get(),
            },
            scope: spec.scope,
            label,
        }
    }

    /// Where the buckets live.
    pub fn scope(&self) -> RateLimitScope {
        self.scope
    }

    /// The bucket's rate and size.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes a token for this request's key from this replica's bucket.
    /// `Err(seconds)`: the bucket is empty, and `seconds` (at least 1) is
    /// the `Retry-After` to send (RFC 9110 §10.2.3). Requests without the
    /// field or cookie the key names share one bucket.
    pub fn check(&self, headers: &HeaderMap, client: IpAddr) -> Result<(), u64> {
        let key = match key_part(&self.key, headers, client) {
            KeyPart::Addr(octets) => self.hasher.hash_one(octets),
            KeyPart::Value(v) => self.hasher.hash_one(v),
        };
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            // Keys whose bucket is full again hold no state worth keeping.
            self.limiter.retain_recent();
        }
        self.limiter.check_key(&key).map_err(|not_until| {
            wait_seconds(not_until.wait_time_from(DefaultClock::default().now()))
        })
    }

    /// The id of this request's bucket in a shared store: the route's
    /// label, a NUL, then `a` and the client's address octets, or `v` and
    /// the field's or cookie's value (`-` when the request has none). The
    /// same request gets the same id on every replica.
    pub fn shared_id(&self, headers: &HeaderMap, client: IpAddr) -> Vec<u8> {
        let mut id = Vec::with_capacity(self.label.len() + 24);
        id.extend_from_slice(self.label.as_bytes());
        id.push(0);
        match key_part(&self.key, headers, client) {
            KeyPart::Addr(octets) => {
                id.push(b'a');
                id.extend_from_slice(&octets);
            }
            KeyPart::Value(Some(v)) => {
                id.push(b'v');
                id.extend_from_slice(v);
            }
            KeyPart::Value(None) => id.push(b'-'),
        }
        id
    }
}

/// What a request's bucket is keyed by.
enum KeyPart<'h> {
    /// The client's address: 16 octets (IPv4 mapped into IPv6).
    Addr([u8; 16]),
    /// A field's or cookie's value, if the request has it.
    Value(Option<&'h [u8]>),
}

fn key_part<'h>(key: &HashKey, headers: &'h HeaderMap, client: IpAddr) -> KeyPart<'h> {
    match key {
        HashKey::ClientAddr => KeyPart::Addr(match client.to_canonical() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        }),
        HashKey::Header(name) => KeyPart::Value(headers.get(name).map(|v| v.as_bytes())),
        HashKey::Cookie(name) => {
            KeyPart::Value(crate::balance::cookie(headers, name).map(str::as_bytes))
        }
    }
}

/// `wait` as a `Retry-After` value: whole seconds, rounded up, at least 1.
/// The wait is read after the bucket said no, so the token may be due by
/// then: a `Retry-After: 0` would invite a client to retry at once.
pub(crate) fn wait_seconds(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
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
        let limit = RouteRateLimit::new(
            &RateLimitSpec {
                requests_per_second: 1,
                burst: 3,
                key: HashKey::ClientAddr,
                scope: RateLimitScope::Replica,
            },
            "/".to_owned(),
        );
        let h = HeaderMap::new();
        let a: IpAddr = "1.1.1.1".parse().expect("ip");
        let b: IpAddr = "2.2.2.2".parse().expect("ip");
        for _ in 0..3 {
            assert_eq!(limit.check(&h, a), Ok(()));
        }
        assert_eq!(limit.check(&h, a), Err(1));
        assert_eq!(limit.check(&h, b), Ok(()), "another key has its own bucket");
    }

    #[test]
    fn a_retry_after_is_whole_seconds_rounded_up_and_never_zero() {
        use std::time::Duration;
        assert_eq!(
            wait_seconds(Duration::ZERO),
            1,
            "due by the time it is read"
        );
        assert_eq!(wait_seconds(Duration::from_millis(20)), 1);
        assert_eq!(wait_seconds(Duration::from_secs(2)), 2);
        assert_eq!(wait_seconds(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn a_shared_id_names_the_route_and_the_key() {
        let spec = |key| RateLimitSpec {
            requests_per_second: 1,
            burst: 1,
            key,
            scope: RateLimitScope::Fleet,
        };
        let by_addr = RouteRateLimit::new(&spec(HashKey::ClientAddr), "a.test/api".to_owned());
        let v4: IpAddr = "1.2.3.4".parse().expect("ip");
        let mapped: IpAddr = "::ffff:1.2.3.4".parse().expect("ip");
        let h = HeaderMap::new();
        let id = by_addr.shared_id(&h, v4);
        assert!(id.starts_with(b"a.test/api\0a"), "{id:?}");
        assert_eq!(id, by_addr.shared_id(&h, mapped), "one address, one bucket");
        let by_field = RouteRateLimit::new(
            &spec(HashKey::Header(http::HeaderName::from_static("x-api-key"))),
            "/".to_owned(),
        );
        let mut with = HeaderMap::new();
        with.insert("x-api-key", "k1".parse().expect("v"));
        assert_eq!(by_field.shared_id(&with, v4), b"/\0vk1");
        assert_eq!(by_field.shared_id(&h, v4), b"/\0-");
    }
}
