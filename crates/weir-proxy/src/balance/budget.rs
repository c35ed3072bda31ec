//! The retry budget of one upstream: retries allowed as a share of recent
//! requests, with a floor per second, so that a failing upstream does not
//! get every request two or three times (a retry storm).

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// One retry, in the budget's units (thousandths of a retry).
const RETRY: u64 = 1000;
/// Most retries saved up.
const MAX_SAVED: u64 = 1000 * RETRY;

/// A token bucket filled by requests: each request adds `percent / 100` of
/// a retry, each retry takes one; besides, `min_per_second` retries a
/// second are always allowed.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    /// Thousandths of a retry each request adds.
    per_request: u64,
    min_per_second: u32,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    saved: u64,
    second: Instant,
    used_this_second: u32,
}

impl RetryBudget {
    /// `percent` retries per 100 requests, and `min_per_second` in any case.
    pub fn new(percent: u32, min_per_second: u32) -> RetryBudget {
        RetryBudget {
            per_request: u64::from(percent) * RETRY / 100,
            min_per_second,
            state: Mutex::new(State {
                saved: 0,
                second: Instant::now(),
                used_this_second: 0,
            }),
        }
    }

    /// Counts a first attempt.
    pub fn deposit(&self) {
        if self.per_request > 0 {
            let mut s = self.lock();
            s.saved = (s.saved + self.per_request).min(MAX_SAVED);
        }
    }

    /// Takes one retry, if the budget allows one now.
    pub fn withdraw(&self) -> bool {
        let mut s = self.lock();
        let now = Instant::now();
        if now.duration_since(s.second).as_secs() >= 1 {
            s.second = now;
            s.used_this_second = 0;
        }
        if s.used_this_second < self.min_per_second {
            s.used_this_second += 1;
            return true;
        }
        if s.saved >= RETRY {
            s.saved -= RETRY;
            return true;
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
