//! The buckets a fleet replica keeps for the keys it owns
//! (`scope = "fleet"`): every replica asks a key's owner, so one bucket
//! per key serves the whole fleet.
//!
//! A bucket is found by its [`Rate`] and its id (see
//! [`super::RouteRateLimit::shared_id`]), both sent by the asking replica,
//! so replicas agree on a bucket without agreeing on route order.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::{Rate, SWEEP_EVERY, wait_seconds};

/// The most distinct rates kept; past it the buckets start again empty
/// (full). Rates come from configs, so a fleet has a handful.
const MAX_RATES: usize = 256;

/// The owner's buckets, by rate, then by id.
#[derive(Debug, Default)]
pub struct SharedBuckets {
    by_rate: RwLock<HashMap<Rate, Arc<DefaultKeyedRateLimiter<u64>>>>,
    /// Keyed per process: ids an attacker chooses (a field's value) cannot
    /// be made to collide with another client's.
    hasher: RandomState,
    checks: AtomicU64,
}

impl SharedBuckets {
    /// Takes a token from bucket `id` of `rate`. `Err(seconds)`: empty,
    /// retry after `seconds` (≥ 1).
    pub fn check(&self, rate: Rate, id: &[u8]) -> Result<(), u64> {
        let limiter = self.limiter(rate);
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            for l in self.read().values() {
                l.retain_recent();
            }
        }
        limiter
            .check_key(&self.hasher.hash_one(id))
            .map_err(|not_until| {
                wait_seconds(not_until.wait_time_from(DefaultClock::default().now()))
            })
    }

    fn limiter(&self, rate: Rate) -> Arc<DefaultKeyedRateLimiter<u64>> {
        if let Some(l) = self.read().get(&rate) {
            return Arc::clone(l);
        }
        let mut map = self
            .by_rate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= MAX_RATES && !map.contains_key(&rate) {
            map.clear();
        }
        let per_second = NonZeroU32::new(rate.per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(rate.burst).unwrap_or(per_second);
        Arc::clone(map.entry(rate).or_insert_with(|| {
            Arc::new(DefaultKeyedRateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ))
        }))
    }

    fn read(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<Rate, Arc<DefaultKeyedRateLimiter<u64>>>> {
        self.by_rate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bucket_per_rate_and_id() {
        let b = SharedBuckets::default();
        let r = Rate {
            per_second: 1,
            burst: 2,
        };
        assert_eq!(b.check(r, b"x"), Ok(()));
        assert_eq!(b.check(r, b"x"), Ok(()));
        assert_eq!(b.check(r, b"x"), Err(1));
        assert_eq!(b.check(r, b"y"), Ok(()), "another id, another bucket");
        let wider = Rate {
            per_second: 1,
            burst: 3,
        };
        assert_eq!(b.check(wider, b"x"), Ok(()), "another rate, another bucket");
    }
}
