//! The error type shared by every stream, and its cheap-to-clone reason.

use std::error::Error as StdError;
use std::fmt;
use std::sync::{Arc, LazyLock};

/// Why a stream failed.
///
/// `Clone` because one failure reaches many consumers (a shared body, its
/// log branch, its cache branch); the payload of [`StreamError::Aborted`] and
/// [`StreamError::Failed`] is an [`Arc`], so every clone keeps the identity of
/// the original error (CORE-006).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The other side of the stream is gone: the writer ended, or the consumer stopped.
    #[error("stream is closed")]
    Closed,
    /// A `strict` buffer was full and its pending-write limit was reached.
    #[error("backpressure violation: the buffer and its pending-write queue are full")]
    BackpressureViolation,
    /// A `strict` shared buffer was full; the consumer may retry once the slowest one moves on.
    #[error("shared buffer is full")]
    BufferFull,
    /// A collecting consumer saw more than `limit` bytes.
    #[error("byte limit exceeded: more than {limit} bytes")]
    LimitExceeded {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The consumer or a cancellation stopped the stream; the reason says who.
    #[error("aborted: {0}")]
    Aborted(Reason),
    /// The source or a transform failed.
    #[error(transparent)]
    Failed(Reason),
    /// Bytes collected as text were not valid UTF-8.
    #[error("invalid UTF-8")]
    InvalidUtf8,
    /// A secondary consumer of a share fell more than a high-water mark
    /// behind and was detached.
    #[error(
        "consumer lagged more than {hwm_chunks} chunks or {hwm_bytes} bytes behind and was detached"
    )]
    Lagged {
        /// The share's high-water mark in chunks.
        hwm_chunks: usize,
        /// The share's high-water mark in bytes.
        hwm_bytes: usize,
    },
}

impl StreamError {
    /// A [`StreamError::Failed`] wrapping `err`.
    pub fn failed(err: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        StreamError::Failed(Reason::new(err))
    }

    /// A [`StreamError::Aborted`] wrapping `reason`.
    pub fn aborted(reason: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        StreamError::Aborted(Reason::new(reason))
    }

    /// The reason carried by `Aborted` and `Failed`, if any.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            StreamError::Aborted(r) | StreamError::Failed(r) => Some(r),
            _ => None,
        }
    }
}

/// The cause of a failure, shared behind an [`Arc`].
///
/// Cloning is a reference-count increment; [`Reason::ptr_eq`] tells whether
/// two reasons are the same failure.
#[derive(Clone)]
pub struct Reason(Arc<dyn StdError + Send + Sync>);

impl Reason {
    /// Wraps any error, or a message (`&str`, `String`).
    pub fn new(err: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Reason(Arc::from(err.into()))
    }

    /// The wrapped error.
    pub fn get(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.0
    }

    /// Downcasts the wrapped error.
    pub fn downcast_ref<E: StdError + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref::<E>()
    }

    /// Whether both reasons are the same failure (not merely equal messages).
    pub fn ptr_eq(a: &Reason, b: &Reason) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl StdError for Reason {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// The reason a stream's stages are aborted with when its consumer stops
/// before the end. One shared reason, so dropping a stream allocates nothing.
static STOPPED_EARLY: LazyLock<Reason> =
    LazyLock::new(|| Reason::new("the consumer stopped before the end"));

/// The reason a push stream fails with when its last writer is dropped
/// without `end()` (PUSH-053). Shared, like [`STOPPED_EARLY`].
static WRITER_DROPPED: LazyLock<Reason> =
    LazyLock::new(|| Reason::new("the writer was dropped without end()"));

/// [`StreamError::Aborted`] for a consumer that stopped early; no allocation
/// after the first.
pub(crate) fn stopped_early() -> StreamError {
    StreamError::Aborted(STOPPED_EARLY.clone())
}

/// [`StreamError::Aborted`] for a writer dropped without `end()`; no
/// allocation after the first.
pub(crate) fn writer_dropped() -> StreamError {
    StreamError::Aborted(WRITER_DROPPED.clone())
}
