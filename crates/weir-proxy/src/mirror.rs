//! `[route.mirror]`: a copy of each request to a shadow upstream, whose
//! response is read and thrown away.
//!
//! The copy never delays or fails the primary request:
//! - it is sent from a task of its own, after the primary is on its way;
//! - its request body is a *secondary* consumer of the client's body
//!   (weir-stream `share()` with [`ConsumerOptions::secondary`]): the primary
//!   upstream sets the pace, and a mirror that falls more than `hwm` chunks
//!   behind is detached (`StreamError::Lagged`), which aborts the copy;
//! - at most `max_in_flight` copies run at once per route; beyond that a
//!   request is not mirrored (outcome `skipped`);
//! - the whole exchange has a deadline (`timeout`).
//!
//! Every copy ends with one outcome, counted in `weir_mirror_requests_total` and logged
//! under the target `weir::mirror` at DEBUG.

use std::sync::Arc;
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use weir_stream::{ConsumerOptions, Share};

use crate::body::idle::ClientBody;
use crate::body::request::RequestBody;
use crate::config::{MirrorSpec, UpstreamUrl};
use crate::metrics::Metrics;
use crate::upstream::{UpstreamClient, UpstreamError};

pub use crate::outcome::MirrorOutcome;

/// Counts a finished copy (`weir_mirror_requests_total`, and
/// `weir_share_lag_detaches_total{branch="mirror"}` for a detach).
fn record(metrics: &Metrics, outcome: MirrorOutcome) {
    metrics.mirror_request(outcome);
    if outcome == MirrorOutcome::Detached {
        metrics.share_lag_detach("mirror");
    }
}

/// A route's mirror, ready to copy requests.
#[derive(Debug, Clone)]
pub struct Mirror {
    /// The shadow upstream's name, for logs.
    pub name: String,
    /// Where copies go.
    pub url: UpstreamUrl,
    /// Deadline and branch settings.
    pub spec: MirrorSpec,
    in_flight: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Mirror {
    /// A mirror to `url` (named `name`) with `spec`, counting its copies
    /// into `metrics`.
    pub fn new(name: String, url: UpstreamUrl, spec: MirrorSpec, metrics: Arc<Metrics>) -> Self {
        let permits = spec.max_in_flight.min(Semaphore::MAX_PERMITS);
        Mirror {
            name,
            url,
            spec,
            in_flight: Arc::new(Semaphore::new(permits)),
            metrics,
        }
    }

    /// A slot for one copy, or `None` (and a `skipped` count) when
    /// `max_in_flight` copies are running.
    pub fn admit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = Arc::clone(&self.in_flight).try_acquire_owned().ok();
        if permit.is_none() {
            record(&self.metrics, MirrorOutcome::Skipped);
            tracing::debug!(target: "weir::mirror", mirror = %self.name, outcome = "skipped");
        }
        permit
    }

    /// The options of the copy's body branch.
    pub fn branch() -> ConsumerOptions {
        ConsumerOptions::secondary()
    }

    /// Sends `req` (already aimed at this mirror) in the background, reads
    /// and drops the response, and counts the outcome.
    ///
    /// `branch` is the share the copy's body is a secondary consumer of:
    /// the copy is dropped (its connection closed) as soon as that consumer
    /// is detached for lagging, rather than when its request next polls it
    /// (which, towards a shadow that stopped reading, may be never).
    pub fn spawn(
        &self,
        client: UpstreamClient,
        req: Request<RequestBody>,
        branch: Option<Share<ClientBody>>,
        permit: OwnedSemaphorePermit,
    ) {
        let timeout = self.spec.timeout;
        let metrics = Arc::clone(&self.metrics);
        let name = self.name.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let outcome = tokio::select! {
                outcome = exchange(&client, req, timeout) => outcome,
                () = detached(branch) => MirrorOutcome::Detached,
            };
            record(&metrics, outcome);
            tracing::debug!(target: "weir::mirror", mirror = %name, outcome = outcome.as_str());
        });
    }
}

/// Resolves once the copy's branch of `share` has been detached for
/// lagging; never without a share (a copy without a body).
async fn detached(share: Option<Share<ClientBody>>) {
    let Some(share) = share else {
        return std::future::pending().await;
    };
    let mut tick = tokio::time::interval(DETACH_CHECK);
    loop {
        tick.tick().await;
        if share.lagged_count() > 0 {
            return;
        }
    }
}

/// How often a copy checks whether its body branch was detached.
const DETACH_CHECK: Duration = Duration::from_millis(20);

/// One copy: send, then read the body to its end, all within `timeout`.
async fn exchange(
    client: &UpstreamClient,
    req: Request<RequestBody>,
    timeout: Duration,
) -> MirrorOutcome {
    let run = async {
        let resp = client.send(req).await.map_err(|e| match e {
            UpstreamError::BodyDetached { .. } => MirrorOutcome::Detached,
            _ => MirrorOutcome::Error,
        })?;
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            frame.map_err(|_| MirrorOutcome::Error)?;
        }
        Ok::<_, MirrorOutcome>(MirrorOutcome::Ok)
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(outcome) | Err(outcome)) => outcome,
        Err(_) => MirrorOutcome::Timeout,
    }
}
