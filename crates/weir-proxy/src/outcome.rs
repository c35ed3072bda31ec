//! How requests and mirror copies end: the names the access log, the
//! mirror log and the metrics share (labels of `weir_requests_total` and
//! `weir_mirror_requests_total`).

use std::fmt;

/// How a request ended, as the access log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The whole response went to the client.
    Ok,
    /// The client went away before the end of the response (or of its own request body).
    ClientAborted,
    /// The upstream was unreachable, or failed before or during the response.
    UpstreamError,
    /// The upstream missed a deadline (connect, response head, body idle).
    UpstreamTimeout,
    /// No route matched; Weir answered 404 itself.
    NoRoute,
    /// The request was malformed; Weir answered 4xx itself.
    BadRequest,
    /// Weir's shutdown grace period ended before the response did.
    Shutdown,
    /// A response transform (compress, html-rewrite, ...) failed mid-body;
    /// the reason names the stage.
    TransformError,
    /// A limit of the route turned the request away (`503` at
    /// `max_concurrent_requests`).
    Limited,
}

impl Outcome {
    /// The name used in log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ClientAborted => "client_aborted",
            Outcome::UpstreamError => "upstream_error",
            Outcome::UpstreamTimeout => "upstream_timeout",
            Outcome::NoRoute => "no_route",
            Outcome::BadRequest => "bad_request",
            Outcome::Shutdown => "shutdown",
            Outcome::TransformError => "transform_error",
            Outcome::Limited => "limited",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one mirror copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorOutcome {
    /// The shadow upstream answered; its body was read to the end.
    Ok,
    /// Connect or exchange failure.
    Error,
    /// The exchange missed `timeout`.
    Timeout,
    /// The copy's body fell more than `hwm` chunks (or 1 MiB) behind and was detached.
    Detached,
    /// `max_in_flight` copies were already running: not mirrored.
    Skipped,
}

impl MirrorOutcome {
    /// The outcome's name in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorOutcome::Ok => "ok",
            MirrorOutcome::Error => "error",
            MirrorOutcome::Timeout => "timeout",
            MirrorOutcome::Detached => "detached",
            MirrorOutcome::Skipped => "skipped",
        }
    }

    /// Every outcome, in a fixed order.
    pub const ALL: [MirrorOutcome; 5] = [
        MirrorOutcome::Ok,
        MirrorOutcome::Error,
        MirrorOutcome::Timeout,
        MirrorOutcome::Detached,
        MirrorOutcome::Skipped,
    ];
}
