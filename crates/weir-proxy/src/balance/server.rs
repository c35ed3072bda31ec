//! One server of an upstream group: its pool, its requests in flight, and
//! its health (active checks) and ejection (passive) state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::config::{OutlierSettings, UpstreamUrl};
use crate::upstream::ServerPool;

/// How one attempt on a server ended, for ejection, metrics and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// A response head below 500.
    Ok,
    /// A 5xx response head.
    ServerError,
    /// The connection could not be made (refused, timed out, no route).
    ConnectFailed,
    /// The connection failed after it was made (reset, bad response).
    Failed,
    /// No response head within the deadline.
    Timeout,
}

impl AttemptResult {
    /// Every result, in label order.
    pub const ALL: [AttemptResult; 5] = [
        AttemptResult::Ok,
        AttemptResult::ServerError,
        AttemptResult::ConnectFailed,
        AttemptResult::Failed,
        AttemptResult::Timeout,
    ];

    /// The `result` label and access-log word.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptResult::Ok => "ok",
            AttemptResult::ServerError => "5xx",
            AttemptResult::ConnectFailed => "connect_failed",
            AttemptResult::Failed => "failed",
            AttemptResult::Timeout => "timeout",
        }
    }

    /// Whether it counts towards ejection.
    fn is_failure(self) -> bool {
        self != AttemptResult::Ok
    }
}

/// One server of an upstream.
#[derive(Debug)]
pub struct Server {
    /// Its URL.
    pub url: UpstreamUrl,
    /// `host:port`, the `server` label.
    pub authority: Arc<str>,
    pub(crate) pool: Arc<ServerPool>,
    pub(crate) weight: u32,
    pub(crate) max_in_flight: Option<u32>,
    /// `weir_upstream_requests_in_flight` of this server; also what
    /// `least_outstanding` compares.
    pub(crate) in_flight: Gauge,
    /// `weir_upstream_attempts_total` of this server, by [`AttemptResult::ALL`].
    pub(crate) attempts: [Counter; 5],
    pub(crate) ejections_total: Counter,
    /// Cleared by active checks that fail `fall` times, set again after `rise` passes.
    pub(crate) healthy: AtomicBool,
    /// Checks in a row with the other outcome than `healthy` says.
    pub(crate) streak: AtomicU32,
    failures: AtomicU32,
    /// Ejected until this many ms after the group's epoch; 0: not ejected.
    ejected_until_ms: AtomicU64,
    ejections: AtomicU32,
    /// Set on ejection, cleared by the first attempt noted after it ended
    /// (so that its end is logged once).
    was_ejected: AtomicBool,
}

/// What [`Server::note`] did with an attempt's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Noted {
    /// Counted in the failure streak, or the streak reset.
    Counted,
    /// The server is now ejected for this long.
    Ejected(Duration),
    /// The streak reached `consecutive_failures`, but the group's cap
    /// (`max_ejected_percent`) kept the server in. Reported once per
    /// streak, when it first reaches the threshold.
    Capped,
}

impl Server {
    pub(crate) fn new(
        url: UpstreamUrl,
        pool: Arc<ServerPool>,
        weight: u32,
        max_in_flight: Option<u32>,
        in_flight: Gauge,
        attempts: [Counter; 5],
        ejections_total: Counter,
    ) -> Server {
        Server {
            authority: Arc::from(url.authority.as_str()),
            url,
            pool,
            weight,
            max_in_flight,
            in_flight,
            attempts,
            ejections_total,
            healthy: AtomicBool::new(true),
            streak: AtomicU32::new(0),
            failures: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            ejections: AtomicU32::new(0),
            was_ejected: AtomicBool::new(false),
        }
    }

    /// Whether a request may go here now: healthy, not ejected, below its
    /// `max_connections`.
    pub(crate) fn available(&self, epoch: Instant) -> bool {
        self.healthy.load(Ordering::Relaxed)
            && !self.is_ejected(epoch)
            && self
                .max_in_flight
                .is_none_or(|max| self.in_flight.get() < i64::from(max))
    }

    /// Whether passive ejection keeps it out now.
    pub(crate) fn is_ejected(&self, epoch: Instant) -> bool {
        let until = self.ejected_until_ms.load(Ordering::Relaxed);
        until != 0 && millis_since(epoch) < until
    }

    /// Requests in flight per unit of weight, scaled to compare as integers.
    pub(crate) fn load(&self) -> u64 {
        let n = self.in_flight.get().max(0) as u64;
        n.saturating_mul(1000) / u64::from(self.weight.max(1))
    }

    /// Counts an attempt's result in `/metrics` only (the failure streak
    /// is [`Server::note`]'s).
    pub(crate) fn count(&self, result: AttemptResult) {
        self.attempts[result as usize].inc();
    }

    /// Whether an ejection of this server ended since the last call: true
    /// once per ejection, at the first attempt noted after it ended.
    pub(crate) fn take_ended_ejection(&self, epoch: Instant) -> bool {
        self.was_ejected.load(Ordering::Relaxed)
            && !self.is_ejected(epoch)
            && self.was_ejected.swap(false, Ordering::Relaxed)
    }

    /// Notes an attempt's result in the failure streak; says whether this
    /// result ejected the server, and for how long (`may_eject` says
    /// whether the group's cap allows one more).
    pub(crate) fn note(
        &self,
        result: AttemptResult,
        outlier: &OutlierSettings,
        epoch: Instant,
        may_eject: impl FnOnce() -> bool,
    ) -> Noted {
        if !result.is_failure() {
            self.failures.store(0, Ordering::Relaxed);
            if self.ejections.load(Ordering::Relaxed) > 0 {
                // A long clean run forgets earlier ejections.
                let until = self.ejected_until_ms.load(Ordering::Relaxed);
                let calm = outlier.max_ejection.as_millis() as u64;
                if millis_since(epoch) > until.saturating_add(calm) {
                    self.ejections.store(0, Ordering::Relaxed);
                }
            }
            return Noted::Counted;
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if outlier.consecutive_failures == 0
            || failures < outlier.consecutive_failures
            || self.is_ejected(epoch)
        {
            return Noted::Counted;
        }
        if !may_eject() {
            return if failures == outlier.consecutive_failures {
                Noted::Capped
            } else {
                Noted::Counted
            };
        }
        let n = self.ejections.fetch_add(1, Ordering::Relaxed).min(20);
        let length = outlier
            .base_ejection
            .saturating_mul(1 << n)
            .min(outlier.max_ejection);
        self.eject_for(length, epoch);
        self.was_ejected.store(true, Ordering::Relaxed);
        Noted::Ejected(length)
    }

    fn eject_for(&self, length: Duration, epoch: Instant) {
        let until = millis_since(epoch)
            .saturating_add(length.as_millis() as u64)
            .max(1);
        self.ejected_until_ms.store(until, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        self.ejections_total.inc();
    }
}

fn millis_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}
