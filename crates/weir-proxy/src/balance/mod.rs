//! Upstream groups: the servers of one `[[upstream]]`, the policy that
//! picks one per attempt (`balance`), passive ejection, active health
//! checks and the retry budget.
//!
//! A pick never blocks and takes no lock on the common paths (round robin
//! with equal weights, least outstanding, hash); smooth weighted round
//! robin takes one short lock.

mod budget;
pub mod health;
pub(crate) mod ring;
mod server;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use http::HeaderMap;
use prometheus_client::metrics::counter::Counter;

use server::Noted;
pub use server::{AttemptResult, Server};

use crate::config::{Balance, HashKey, HealthCheck, OutlierSettings, Protocol, RetrySettings};
use budget::RetryBudget;
use ring::Ring;

/// The servers of one upstream and how to choose among them.
#[derive(Debug)]
pub struct UpstreamGroup {
    /// The upstream's name.
    pub name: String,
    /// Its servers, in config order.
    pub servers: Vec<Arc<Server>>,
    policy: Policy,
    pub(crate) outlier: OutlierSettings,
    pub(crate) retry: RetrySettings,
    pub(crate) health: Option<HealthCheck>,
    /// Whether a failed attempt can go to another server: `attempts` above
    /// 1 and at least two servers. Without it, no retry budget is kept.
    pub(crate) can_retry: bool,
    budget: RetryBudget,
    /// `weir_upstream_retries_total{result="retried"}` of this upstream.
    pub(crate) retried: Counter,
    /// `weir_upstream_retries_total{result="budget_exhausted"}`.
    pub(crate) retry_budget_exhausted: Counter,
    /// Time zero of the servers' ejection clocks.
    epoch: Instant,
    /// `protocol`: the HTTP version its servers are spoken to in (set
    /// after [`UpstreamGroup::new`]; HTTP/1.1 until then).
    pub(crate) protocol: Protocol,
    /// Turned true when a reload drops this group ([`UpstreamGroup::retire`]):
    /// its health-check tasks end. Dropping the group ends them too.
    retired: tokio::sync::watch::Sender<bool>,
}

#[derive(Debug)]
enum Policy {
    /// Equal weights: a counter.
    RoundRobin(AtomicUsize),
    /// Smooth weighted round robin: each server's current weight.
    Weighted(Mutex<Vec<i64>>),
    LeastOutstanding,
    Hash(HashKey, Ring, AtomicUsize),
}

/// What a pick may look at in the request.
#[derive(Debug, Clone, Copy)]
pub struct PickKey<'a> {
    /// The request's fields (for `header:` and `cookie:` keys).
    pub headers: &'a HeaderMap,
    /// The client's address (for `client_addr`).
    pub client: std::net::IpAddr,
    /// The host the client asked for (`Host`, or HTTP/2 `:authority`), for
    /// a `header:host` key: an HTTP/2 request carries no `Host` field.
    pub host: Option<&'a str>,
}

impl UpstreamGroup {
    /// A group over `servers` (at least one), choosing by `balance`.
    pub fn new(
        name: String,
        servers: Vec<Arc<Server>>,
        balance: &Balance,
        outlier: OutlierSettings,
        retry: RetrySettings,
        health: Option<HealthCheck>,
        retry_counters: [Counter; 2],
    ) -> UpstreamGroup {
        let policy = match balance {
            Balance::RoundRobin if servers.iter().all(|s| s.weight == servers[0].weight) => {
                Policy::RoundRobin(AtomicUsize::new(0))
            }
            Balance::RoundRobin => Policy::Weighted(Mutex::new(vec![0; servers.len()])),
            Balance::LeastOutstanding => Policy::LeastOutstanding,
            Balance::Hash(key, kind) => Policy::Hash(
                key.clone(),
                Ring::of_kind(*kind, servers.iter().map(|s| (&*s.authority, s.weight))),
                AtomicUsize::new(0),
            ),
        };
        let [retried, retry_budget_exhausted] = retry_counters;
        UpstreamGroup {
            can_retry: retry.attempts > 1 && servers.len() > 1,
            name,
            policy,
            retried,
            retry_budget_exhausted,
            budget: RetryBudget::new(retry.budget_percent, retry.min_per_second),
            outlier,
            retry,
            health,
            servers,
            epoch: Instant::now(),
            protocol: Protocol::Http1,
            retired: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Marks the group as no longer in the config (a reload removed or
    /// changed its upstream): its health checks stop at once, while the
    /// requests still holding it finish.
    pub fn retire(&self) {
        self.retired.send_replace(true);
    }

    /// Whether [`UpstreamGroup::retire`] was called, as a channel the
    /// health checks wait on.
    pub(crate) fn retired(&self) -> tokio::sync::watch::Receiver<bool> {
        self.retired.subscribe()
    }

    /// The server for the next attempt of a request, skipping the servers
    /// in `tried` and those unavailable (unhealthy, ejected, at their
    /// `max_connections`); `None` when no server is left. Under round
    /// robin and weighted round robin a retry takes the next usable server
    /// after the last one tried, without moving the rotation.
    pub fn pick(&self, key: &PickKey<'_>, tried: &[usize]) -> Option<usize> {
        let n = self.servers.len();
        let usable = |i: usize| !tried.contains(&i) && self.servers[i].available(self.epoch);
        if n == 1 {
            return usable(0).then_some(0);
        }
        // A retry walks on from the server that failed and leaves the
        // rotation alone: advancing it too would send every first attempt
        // to the same server once each request takes two turns.
        if let (Some(&last), Policy::RoundRobin(_) | Policy::Weighted(_)) =
            (tried.last(), &self.policy)
        {
            return (1..n).map(|k| (last + k) % n).find(|&i| usable(i));
        }
        match &self.policy {
            Policy::RoundRobin(next) => round_robin(next, n, usable),
            Policy::Weighted(current) => self.weighted(current, usable),
            Policy::LeastOutstanding => self.least_outstanding(usable),
            Policy::Hash(hash_key, ring, next) => match key_hash(hash_key, ring, key) {
                Some(point) => ring.pick(point, n, usable),
                None => round_robin(next, n, usable),
            },
        }
    }

    /// Counts a first attempt into the retry budget (when retries are possible).
    pub fn deposit(&self) {
        if self.can_retry {
            self.budget.deposit();
        }
    }

    /// Takes a retry from the budget, if it has one.
    pub fn withdraw(&self) -> bool {
        self.budget.withdraw()
    }

    /// Counts `result` of an attempt on server `index`; ejects it when its
    /// failures in a row reach `consecutive_failures` and fewer than
    /// `max_ejected_percent` of the servers are out, ejected or unhealthy
    /// (one always stays in).
    /// Returns whether it was ejected now.
    pub fn record(&self, index: usize, result: AttemptResult) -> bool {
        self.servers[index].count(result);
        self.note(index, result)
    }

    /// An attempt of server `index` answered with a `5xx`: counted as
    /// `5xx` in `/metrics`, and toward ejection when `failure_statuses`
    /// holds `status` (else it ends the failure streak like a success).
    /// Returns whether it was ejected now.
    pub fn record_server_error(&self, index: usize, status: http::StatusCode) -> bool {
        self.servers[index].count(AttemptResult::ServerError);
        let result = if self.outlier.counts(status) {
            AttemptResult::ServerError
        } else {
            AttemptResult::Ok
        };
        self.note(index, result)
    }

    /// An attempt of server `index` whose response head was fine and whose
    /// body is still to come: counted as `ok` in `/metrics` now; the end of
    /// the body is told to [`UpstreamGroup::note`] (`Ok` when it ended
    /// cleanly, `Failed` or `Timeout` when the upstream broke it), so that
    /// a server that fails mid-body is ejected like one that fails before.
    pub fn record_head(&self, index: usize) {
        self.servers[index].count(AttemptResult::Ok);
    }

    /// The failure streak and ejection part of [`UpstreamGroup::record`],
    /// for a result already counted in `/metrics`.
    /// Returns whether it was ejected now.
    pub fn note(&self, index: usize, result: AttemptResult) -> bool {
        let server = &self.servers[index];
        if self.health.is_none() && server.take_ended_ejection(self.epoch) {
            // With health checks, "server healthy again" says it instead.
            tracing::info!(
                target: "weir::upstream",
                upstream = %self.name,
                server = %server.authority,
                "server back in rotation: its ejection ended"
            );
        }
        let noted = server.note(result, &self.outlier, self.epoch, || {
            let n = self.servers.len();
            // Servers health checks took out count too: the last
            // available server is never ejected.
            let out = self
                .servers
                .iter()
                .filter(|s| s.is_ejected(self.epoch) || !s.healthy.load(Ordering::Relaxed))
                .count();
            let cap = (n * self.outlier.max_ejected_percent as usize / 100).min(n - 1);
            out < cap
        });
        let failures = match self.outlier.consecutive_failures {
            1 => "1 failure".to_owned(),
            n => format!("{n} failures"),
        };
        match noted {
            Noted::Counted => false,
            Noted::Ejected(length) => {
                if self.health.is_some() {
                    // Back only once its checks pass again.
                    server.healthy.store(false, Ordering::Relaxed);
                    server.streak.store(0, Ordering::Relaxed);
                }
                tracing::warn!(
                    target: "weir::upstream",
                    upstream = %self.name,
                    server = %server.authority,
                    "server ejected for {} after {failures} in a row (last: {})",
                    crate::config::format_duration(length),
                    result.as_str()
                );
                true
            }
            Noted::Capped if self.outlier.max_ejected_percent == 0 => false,
            Noted::Capped => {
                tracing::warn!(
                    target: "weir::upstream",
                    upstream = %self.name,
                    server = %server.authority,
                    "server not ejected after {failures} in a row (last: {}): max_ejected_percent = {} keeps it in, as enough servers are out already",
                    result.as_str(),
                    self.outlier.max_ejected_percent
                );
                false
            }
        }
    }

    /// Whether server `index` is available now (for `/metrics` and `weir check`).
    pub fn is_available(&self, index: usize) -> bool {
        self.servers[index].available(self.epoch)
    }

    fn weighted(&self, current: &Mutex<Vec<i64>>, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let mut current = current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for (i, server) in self.servers.iter().enumerate() {
            if !usable(i) {
                continue;
            }
            let w = i64::from(server.weight);
            current[i] += w;
            total += w;
            if best.is_none_or(|b| current[i] > current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        current[b] -= total;
        Some(b)
    }

    fn least_outstanding(&self, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.servers.len();
        let a = random_below(n);
        let b = (a + 1 + random_below(n - 1)) % n;
        let pick = match (usable(a), usable(b)) {
            (true, true) => {
                if self.servers[b].load() < self.servers[a].load() {
                    b
                } else {
                    a
                }
            }
            (true, false) => a,
            (false, true) => b,
            (false, false) => return (0..n).map(|k| (a + k) % n).find(|&i| usable(i)),
        };
        Some(pick)
    }
}

/// The next usable server in the rotation. The rotation moves past each
/// server it skips, so that the usable ones share a skipped server's turns
/// evenly (taking the next one in the list instead would hand one
/// neighbour all of them).
fn round_robin(next: &AtomicUsize, n: usize, usable: impl Fn(usize) -> bool) -> Option<usize> {
    (0..n)
        .map(|_| next.fetch_add(1, Ordering::Relaxed) % n)
        .find(|&i| usable(i))
}

/// The ring point of this request's `key`, if it has one. An empty
/// header or cookie value is no key: clients that send the field empty
/// are balanced round robin rather than all sent to one server. The
/// client's address is its octets on Weir's ring, and its text on a
/// ketama ring (nginx's `$remote_addr`).
fn key_hash(key: &HashKey, ring: &Ring, pick: &PickKey<'_>) -> Option<u64> {
    let nonempty = |v: &[u8]| (!v.is_empty()).then(|| ring.key_point(v));
    match key {
        HashKey::Header(name) if name == http::header::HOST => {
            pick.host.and_then(|h| nonempty(h.as_bytes()))
        }
        HashKey::Header(name) => pick.headers.get(name).and_then(|v| nonempty(v.as_bytes())),
        HashKey::Cookie(name) => cookie(pick.headers, name).and_then(|v| nonempty(v.as_bytes())),
        HashKey::ClientAddr => Some(match (ring.kind(), pick.client.to_canonical()) {
            (ring::RingHash::Ketama, ip) => ring.key_point(ip.to_string().as_bytes()),
            (_, std::net::IpAddr::V4(v4)) => ring.key_point(&v4.octets()),
            (_, std::net::IpAddr::V6(v6)) => ring.key_point(&v6.octets()),
        }),
    }
}

/// The value of cookie `name` in the request's `Cookie` fields (RFC 6265 §4.2).
pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then(|| v.trim_matches('"'))
        })
}

/// A number below `n` (n ≥ 1), from a per-thread xorshift generator.
fn random_below(n: usize) -> usize {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(RandomState::new().hash_one(0u64) | 1);
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        ((x >> 32) as usize * n) >> 32
    })
}

/// Every group of a proxy, as `/metrics` reads them.
#[derive(Debug)]
pub struct Groups(pub Vec<Arc<UpstreamGroup>>);

impl crate::metrics::ServerStates for Groups {
    fn each_server(&self, f: &mut dyn FnMut(&str, &str, bool)) {
        for group in &self.0 {
            for (i, server) in group.servers.iter().enumerate() {
                f(&group.name, &server.authority, group.is_available(i));
            }
        }
    }
}
