//! What a composition reports: one event per fragment, for logs and
//! metrics. The proxy implements [`Observer`] with its Prometheus counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::decode::DecodeError;
use crate::fetch::FetchError;

/// How a fragment's slot was filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FragmentOutcome {
    /// Its `src` answered and streamed to the end.
    Ok,
    /// `src` failed before its first byte; `fallback-src` (or `alt`) served it.
    Fallback,
    /// Every source failed before its first byte: the inline fallback markup.
    Inline,
    /// Every source failed and there was no inline markup: nothing.
    Empty,
    /// It failed after it had started streaming: it ends where it was.
    Cut,
    /// Over the page's `max_includes`: not fetched; its inline markup.
    Skipped,
    /// The page went away (client gone, primary failed) before it ended.
    Cancelled,
}

impl FragmentOutcome {
    /// Every outcome, for labels known up front.
    pub const ALL: [FragmentOutcome; 7] = [
        FragmentOutcome::Ok,
        FragmentOutcome::Fallback,
        FragmentOutcome::Inline,
        FragmentOutcome::Empty,
        FragmentOutcome::Cut,
        FragmentOutcome::Skipped,
        FragmentOutcome::Cancelled,
    ];

    /// The name used in logs and metric labels (`ok`, `fallback`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            FragmentOutcome::Ok => "ok",
            FragmentOutcome::Fallback => "fallback",
            FragmentOutcome::Inline => "inline",
            FragmentOutcome::Empty => "empty",
            FragmentOutcome::Cut => "cut",
            FragmentOutcome::Skipped => "skipped",
            FragmentOutcome::Cancelled => "cancelled",
        }
    }
}

/// Why a fragment source was not used (or, for [`FragmentOutcome::Cut`],
/// why the fragment ended early).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// A deadline passed: the first-byte deadline, the fragment's total
    /// deadline or the page budget.
    #[error("timed out after {elapsed_ms} ms")]
    Timeout {
        /// Time since the source was tried, in ms.
        elapsed_ms: u64,
    },
    /// The fetcher refused or failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The source answered with a status other than 2xx.
    #[error("answered {0}")]
    Status(u16),
    /// Its content coding could not be decoded.
    #[error(transparent)]
    Coding(#[from] DecodeError),
    /// Its body failed.
    #[error("body failed: {0}")]
    Body(String),
    /// The source is a template that includes itself, directly or not.
    #[error("include loop: {url} is already being composed above")]
    Loop {
        /// The resolved URL.
        url: String,
    },
    /// The source is a template nested deeper than `max_depth`.
    #[error("nesting deeper than max_depth = {limit}")]
    Depth {
        /// The limit.
        limit: usize,
    },
    /// The page already processed `max_includes` includes.
    #[error("more than max_includes = {limit} includes in the page")]
    Limit {
        /// The limit.
        limit: usize,
    },
    /// The include had no source to try.
    #[error("no src, fallback-src or alt")]
    NoSource,
}

impl Failure {
    /// A short name for metric labels (`timeout`, `error`, `status`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Timeout { .. } => "timeout",
            Failure::Fetch(_) | Failure::Body(_) => "error",
            Failure::Status(_) => "status",
            Failure::Coding(_) => "coding",
            Failure::Loop { .. } => "loop",
            Failure::Depth { .. } => "depth",
            Failure::Limit { .. } => "limit",
            Failure::NoSource => "no_source",
        }
    }
}

/// One fragment's end.
#[derive(Debug)]
pub struct FragmentEvent<'a> {
    /// The `src` as written (or the fallback's, when it served).
    pub src: &'a str,
    /// How its slot was filled.
    pub outcome: FragmentOutcome,
    /// The last failure on the way, if any.
    pub failure: Option<&'a Failure>,
    /// From the start of the fragment to its end.
    pub elapsed: Duration,
    /// Nesting depth of the template it was in (0: the page).
    pub depth: usize,
}

/// Receives a composition's events. Every method does nothing by default.
pub trait Observer: Send + Sync + 'static {
    /// A fragment ended.
    fn fragment(&self, event: &FragmentEvent<'_>) {
        let _ = event;
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// An observer that counts outcomes (tests, simple stats).
#[derive(Debug, Default)]
pub struct Counts {
    by_outcome: [AtomicU64; 7],
}

impl Counts {
    /// Fragments that ended with `outcome` so far.
    pub fn get(&self, outcome: FragmentOutcome) -> u64 {
        self.by_outcome[outcome as usize].load(Ordering::Relaxed)
    }
}

impl Observer for Counts {
    fn fragment(&self, event: &FragmentEvent<'_>) {
        self.by_outcome[event.outcome as usize].fetch_add(1, Ordering::Relaxed);
    }
}
