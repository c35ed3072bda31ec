//! The access log: one line per request, written when the response body
//! ends, fails, or is dropped by a departing client.
//!
//! Lines go to `tracing` under the target `weir::access` at INFO, with the
//! fields `method`, `path`, `status`, `bytes_in`, `bytes_out`,
//! `duration_ms`, `upstream`, `outcome`, `peer` and, for failures, `reason`.
//! An upgraded exchange (a tunnel, [`crate::tunnel`]) is logged when the
//! tunnel ends, with `upgraded=true` and, in `bytes_in`/`bytes_out`, the
//! bytes that went through it from and to the client.
//!
//! The same moment counts the request in the proxy's [`Metrics`], when the
//! record was given them ([`AccessRecord::count_into`]): once per request.
//! A record dropped unwritten (the client went away before any response
//! was made, so hyper dropped the request's future) is written then, as
//! `client_aborted` with status 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

use weir_stream::{Batch, StreamError, Transform};
use weir_transform::chain::StageError;

use crate::body::idle::BodyIdleTimeout;
use crate::body::limits::{BodyTooLarge, BodyTooSlow};
use crate::metrics::{InFlight, Metrics, RequestSample, RouteMetrics};
pub use crate::outcome::Outcome;

/// Counters the request-body side shares with the log record.
#[derive(Debug, Default)]
pub struct RequestCounters {
    /// Request body bytes forwarded upstream.
    pub bytes_in: AtomicU64,
    /// How the client's request body failed, if it did ([`ClientBodyFailure`] as `u8`).
    client_failure: AtomicU8,
}

/// How a client's request body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientBodyFailure {
    /// It was malformed, or the client went away mid-upload.
    Broken = 1,
    /// The client sent nothing for `body_idle_timeout`.
    IdleTimeout = 2,
    /// The body grew past `max_request_body_bytes`.
    TooLarge = 3,
    /// The client sent it slower than `request_body_min_rate`.
    TooSlow = 4,
}

impl RequestCounters {
    /// How the request body failed, if it did.
    pub fn client_failure(&self) -> Option<ClientBodyFailure> {
        match self.client_failure.load(Ordering::Relaxed) {
            1 => Some(ClientBodyFailure::Broken),
            2 => Some(ClientBodyFailure::IdleTimeout),
            3 => Some(ClientBodyFailure::TooLarge),
            4 => Some(ClientBodyFailure::TooSlow),
            _ => None,
        }
    }

    fn set_client_failure(&self, failure: ClientBodyFailure) {
        self.client_failure.store(failure as u8, Ordering::Relaxed);
    }
}

/// What the access log line says about one request; filled in as the
/// request moves through the phases.
#[derive(Debug)]
pub struct AccessRecord {
    start: Instant,
    method: http::Method,
    path: String,
    peer: SocketAddr,
    /// Status sent to the client.
    pub status: u16,
    /// The upstream's name, once routed.
    pub upstream: Option<String>,
    /// The server of the last attempt (`host:port`).
    pub server: Option<Arc<str>>,
    /// Attempts made upstream (0: none).
    pub attempts: u8,
    /// The earlier attempts' servers and results, `host:port result`,
    /// comma-separated; `None` when there was no retry.
    pub retried: Option<String>,
    /// Why it failed, for failure outcomes.
    pub reason: Option<String>,
    /// The exchange switched protocols and became a tunnel.
    pub upgraded: bool,
    /// A retry was possible but the upstream's retry budget refused it
    /// (logged as `retry="budget_exhausted"`).
    pub retry_budget_exhausted: bool,
    /// The request's `X-Request-Id`.
    pub request_id: Option<http::HeaderValue>,
    /// The request target's query, without the `?` (as nginx's `$request`
    /// carries it).
    query: Option<String>,
    counters: Arc<RequestCounters>,
    shutdown_cut: Arc<AtomicBool>,
    /// Where the finished request is counted, and its `route` label.
    metrics: Option<(Arc<Metrics>, Arc<RouteMetrics>)>,
    /// Keeps the upstream request in flight until the record is written.
    in_flight: Option<InFlight>,
    /// The route's `max_concurrent_requests` slot, held until the record
    /// is written (the response body ended).
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Told when the upstream's response body fails after its head (see
    /// [`BodyBlame`]).
    pub body_blame: Option<BodyBlame>,
    /// Whether the line was written.
    done: bool,
}

/// What to tell when the upstream's response body ends, for the server's
/// passive-ejection count: a body the upstream broke after its head (a
/// reset, a truncated body, a body idle timeout) counts as a failed
/// attempt, a clean end as an ok one. Not called for a client abort, a
/// transform's failure, or a failure the client's own request body caused.
pub struct BodyBlame(pub Box<dyn FnOnce(BodyEnd) + Send + Sync>);

/// How an upstream response body ended, for [`BodyBlame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEnd {
    /// Read to its end.
    Clean,
    /// The upstream broke it.
    Failed,
    /// It stalled past `body_idle_timeout`.
    TimedOut,
}

impl std::fmt::Debug for BodyBlame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BodyBlame")
    }
}

impl AccessRecord {
    /// Starts a record for a request just received. `shutdown_cut` is set
    /// by the server when its grace period ends with requests still running.
    pub fn new<B>(req: &http::Request<B>, peer: SocketAddr, shutdown_cut: Arc<AtomicBool>) -> Self {
        AccessRecord {
            start: Instant::now(),
            method: req.method().clone(),
            path: req.uri().path().to_owned(),
            peer,
            status: 0,
            upstream: None,
            server: None,
            attempts: 0,
            retried: None,
            reason: None,
            upgraded: false,
            retry_budget_exhausted: false,
            request_id: None,
            query: req.uri().query().map(str::to_owned),
            counters: Arc::new(RequestCounters::default()),
            shutdown_cut,
            metrics: None,
            in_flight: None,
            slot: None,
            body_blame: None,
            done: false,
        }
    }

    /// Notes that the attempt on `server` ended with `result` (its label,
    /// e.g. `connect_failed`) and the request goes on to another server
    /// (the `retried` field).
    pub fn note_retry(&mut self, server: &str, result: &str) {
        let earlier = self.retried.get_or_insert_with(String::new);
        if !earlier.is_empty() {
            earlier.push(',');
        }
        earlier.push_str(server);
        earlier.push(' ');
        earlier.push_str(result);
    }

    /// Takes a slot of the route's `max_concurrent_requests`, if it has
    /// one: `false` when every slot is taken (the request gets a `503`).
    pub fn admit(&mut self, slots: Option<&Arc<tokio::sync::Semaphore>>) -> bool {
        let Some(slots) = slots else {
            return true;
        };
        match Arc::clone(slots).try_acquire_owned() {
            Ok(slot) => {
                self.slot = Some(slot);
                true
            }
            Err(_) => {
                self.reason = Some("max_concurrent_requests reached".to_owned());
                false
            }
        }
    }

    /// The request's method.
    pub fn method(&self) -> &http::Method {
        &self.method
    }

    /// Counts the finished request into `metrics` under the `route` label
    /// (replacing any earlier label: the proxy sets one before routing and
    /// the matched route's after).
    pub fn count_into(&mut self, metrics: Arc<Metrics>, route: Arc<RouteMetrics>) {
        self.metrics = Some((metrics, route));
    }

    /// Holds `in_flight` until the line is written (the response ended).
    pub fn hold_in_flight(&mut self, in_flight: InFlight) {
        self.in_flight = Some(in_flight);
    }

    /// The counters the request-body side fills.
    pub fn counters(&self) -> &Arc<RequestCounters> {
        &self.counters
    }

    /// Writes the line and counts the request; a second call does nothing.
    pub fn emit(&mut self, outcome: Outcome, bytes_out: u64) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        self.in_flight = None;
        let failed = !matches!(
            outcome,
            Outcome::Ok | Outcome::NoRoute | Outcome::BadRequest
        );
        let outcome = if failed && self.shutdown_cut.load(Ordering::Relaxed) {
            Outcome::Shutdown
        } else if failed && self.counters.client_failure().is_some() {
            Outcome::ClientAborted
        } else {
            outcome
        };
        let duration = self.start.elapsed();
        let bytes_in = self.counters.bytes_in.load(Ordering::Relaxed);
        if let Some((metrics, route)) = &self.metrics {
            metrics.record_request(&RequestSample {
                route,
                status: self.status,
                outcome,
                bytes_in,
                bytes_out,
                duration,
            });
        }
        tracing::info!(
            target: "weir::access",
            method = %self.method,
            path = %self.path,
            query = self.query.as_deref(),
            status = self.status,
            bytes_in,
            bytes_out,
            duration_ms = duration.as_millis() as u64,
            upstream = self.upstream.as_deref().unwrap_or("-"),
            server = self.server.as_deref().unwrap_or("-"),
            attempts = self.attempts,
            retried = self.retried.as_deref(),
            upgraded = self.upgraded.then_some(true),
            retry = self.retry_budget_exhausted.then_some("budget_exhausted"),
            outcome = outcome.as_str(),
            peer = %self.peer,
            reason = self.reason.as_deref(),
            request_id = self.request_id.as_ref().and_then(|v| v.to_str().ok()),
        );
    }
}

impl Drop for AccessRecord {
    fn drop(&mut self) {
        // Unwritten: the request's future was dropped before a response
        // (and its log stage) was made, because the client went away.
        self.emit(Outcome::ClientAborted, 0);
    }
}

/// The last stage of every response pipeline: counts the bytes going to the
/// client and writes the access log line exactly once.
///
/// - flush (the body ended) → the record's success outcome (`ok`, or
///   `no_route` etc. for Weir's own responses);
/// - abort by an error → `upstream_timeout` for a body idle timeout,
///   `upstream_error` otherwise;
/// - abort because the consumer stopped → `client_aborted`, unless the
///   response has no body to send (HEAD, 204, 304), which hyper never polls.
#[derive(Debug)]
pub struct ResponseLog {
    record: Option<AccessRecord>,
    on_success: Outcome,
    expects_body: bool,
    bytes_out: u64,
}

impl ResponseLog {
    /// Logs `record` with `on_success` when the body completes.
    /// `expects_body` is false for responses hyper sends without polling a body.
    pub fn new(record: AccessRecord, on_success: Outcome, expects_body: bool) -> Self {
        ResponseLog {
            record: Some(record),
            on_success,
            expects_body,
            bytes_out: 0,
        }
    }

    /// A log stage that logs nothing: for the head of an exchange whose
    /// record is written elsewhere (a tunnel logs when it ends).
    pub fn detached() -> Self {
        ResponseLog {
            record: None,
            on_success: Outcome::Ok,
            expects_body: false,
            bytes_out: 0,
        }
    }

    fn finish(&mut self, outcome: Outcome, reason: Option<String>) {
        if let Some(mut record) = self.record.take() {
            if reason.is_some() {
                record.reason = reason;
            }
            record.emit(outcome, self.bytes_out);
        }
    }
}

impl Transform for ResponseLog {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match &input {
            Some(batch) => self.bytes_out += batch.byte_len() as u64,
            None => {
                if let Some(BodyBlame(blame)) =
                    self.record.as_mut().and_then(|r| r.body_blame.take())
                {
                    blame(BodyEnd::Clean);
                }
                self.finish(self.on_success, None);
            }
        }
        Ok(input)
    }

    fn abort(&mut self, reason: &StreamError) {
        let (outcome, why) = match reason {
            StreamError::Aborted(_) if !self.expects_body => (self.on_success, None),
            StreamError::Aborted(_) => (Outcome::ClientAborted, None),
            StreamError::Failed(r) if r.downcast_ref::<BodyIdleTimeout>().is_some() => {
                (Outcome::UpstreamTimeout, Some(r.to_string()))
            }
            StreamError::Failed(r) if r.downcast_ref::<StageError>().is_some() => {
                (Outcome::TransformError, Some(r.to_string()))
            }
            other => (
                Outcome::UpstreamError,
                Some(format!("response body: {other}")),
            ),
        };
        if matches!(outcome, Outcome::UpstreamError | Outcome::UpstreamTimeout)
            && let Some(record) = &mut self.record
            && record.counters().client_failure().is_none()
            && let Some(BodyBlame(blame)) = record.body_blame.take()
        {
            blame(if outcome == Outcome::UpstreamTimeout {
                BodyEnd::TimedOut
            } else {
                BodyEnd::Failed
            });
        }
        self.finish(outcome, why);
    }

    fn size_hint(&self, upstream: http_body::SizeHint) -> http_body::SizeHint {
        upstream
    }
}

impl Drop for ResponseLog {
    fn drop(&mut self) {
        // A pipeline always flushes or aborts; this only catches a log
        // stage dropped before its pipeline was built.
        self.finish(Outcome::ClientAborted, None);
    }
}

/// A stage of the request-body pipeline: counts bytes going upstream,
/// marks the record when the client's upload fails, and strips request
/// trailers of fields they must not carry.
#[derive(Debug)]
pub struct RequestTally {
    counters: Arc<RequestCounters>,
}

impl RequestTally {
    /// Counts into `counters`.
    pub fn new(counters: Arc<RequestCounters>) -> Self {
        RequestTally { counters }
    }
}

impl Transform for RequestTally {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        if let Some(batch) = &input {
            self.counters
                .bytes_in
                .fetch_add(batch.byte_len() as u64, Ordering::Relaxed);
        }
        Ok(input)
    }

    fn abort(&mut self, reason: &StreamError) {
        // The upstream side stopping early is not the client's fault.
        if matches!(reason, StreamError::Failed(_)) {
            let why = reason.reason();
            let idle = why.is_some_and(|r| r.downcast_ref::<BodyIdleTimeout>().is_some());
            let large = why.is_some_and(|r| r.downcast_ref::<BodyTooLarge>().is_some());
            let slow = why.is_some_and(|r| r.downcast_ref::<BodyTooSlow>().is_some());
            self.counters.set_client_failure(if idle {
                ClientBodyFailure::IdleTimeout
            } else if large {
                ClientBodyFailure::TooLarge
            } else if slow {
                ClientBodyFailure::TooSlow
            } else {
                ClientBodyFailure::Broken
            });
        }
    }

    fn size_hint(&self, upstream: http_body::SizeHint) -> http_body::SizeHint {
        upstream
    }

    fn trailers(&mut self, trailers: &mut http::HeaderMap) {
        crate::headers::sanitize_trailers(trailers);
    }
}
