//! [`pull_sync`]: a pull pipeline over a synchronous source, as an
//! [`Iterator`] (PULL-060).
//!
//! The sync pipeline is the async one driven by a no-op waker: the same
//! [`Pipeline`] and [`StatefulStage`] layers, over a source that is never
//! pending, so order, flush, abort, sticky-error and fused-end rules are the
//! same by construction, and a transform (stateless or stateful) is written
//! once for both. Async transforms have no place here: nothing can wait.

use std::iter::FusedIterator;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::adapt::{ResultsSource, from_results};
use crate::pipeline::Life;
use crate::source::{IterSource, from_iter};
use crate::stateful::{StatefulStage, StatefulTransform};
use crate::{BatchResult, Chain, Pipeline, Source, StreamError, Transform};

/// What a sync pipeline fails with when a stage returns `Pending`.
const WOULD_BLOCK: &str =
    "a stage of a sync pipeline returned Pending: a sync pipeline cannot wait";

/// Builds a sync pipeline that pulls the chunks of `chunks` through
/// `transform`.
///
/// The chunks are gathered into batches as [`from_iter`] does (at most
/// [`Batch::MAX_CHUNKS`](crate::Batch::MAX_CHUNKS) chunks and
/// [`Batch::MAX_BYTES`](crate::Batch::MAX_BYTES) bytes; for other limits,
/// `PipelineSync::new(pull(from_iter(chunks).batch_limits(limits), t))`).
/// Chunks convert without a copy (CORE-003). Pass `()` for no transform.
/// Builds only: nothing is pulled or called until the first
/// [`Iterator::next`] (PULL-001).
///
/// ```
/// use weir_stream::{map_chunks, pull_sync};
/// let upper = map_chunks(|c: bytes::Bytes| c.to_ascii_uppercase().into());
/// let out: Vec<_> = pull_sync(["a", "b"], upper).map(Result::unwrap).collect();
/// assert_eq!(out[0].chunks(), ["A", "B"]);
/// ```
pub fn pull_sync<I, T>(
    chunks: I,
    transform: T,
) -> PipelineSync<Pipeline<IterSource<I::IntoIter>, T>>
where
    I: IntoIterator,
    I::Item: Into<Bytes>,
    T: Transform,
{
    PipelineSync::new(Pipeline::new(from_iter(chunks), transform))
}

/// Builds a sync pipeline over ready-made batches: `source` yields one
/// batch per item (CORE-005), or an error that ends the pipeline. Otherwise
/// as [`pull_sync`].
pub fn pull_sync_batches<I, T>(
    source: I,
    transform: T,
) -> PipelineSync<Pipeline<ResultsSource<I::IntoIter>, T>>
where
    I: IntoIterator<Item = BatchResult>,
    T: Transform,
{
    PipelineSync::new(Pipeline::new(from_results(source), transform))
}

/// A pull chain driven synchronously: an [`Iterator`] of
/// `Result<Batch, StreamError>` (PULL-060).
///
/// Each `next` polls the chain once with a no-op waker. After the end it
/// keeps returning `None`; after an error, the same error (CORE-006,
/// CORE-007). Dropping it before the end aborts every transform (PULL-032).
/// Transforms are started with a token like in an async pipeline; nothing
/// outside fires it, so a sync transform may ignore it.
///
/// A stage that returns `Pending` (a source that is not synchronous, say)
/// fails the pipeline with [`StreamError::Failed`], since nothing could wake it.
#[derive(Debug)]
pub struct PipelineSync<S> {
    // `None` once ended or failed, or inside the builders, which consume it.
    source: Option<S>,
    life: Life,
}

impl<S> PipelineSync<S> {
    /// Drives any chain synchronously. Its source must never be pending.
    pub fn new(source: S) -> Self {
        PipelineSync {
            source: Some(source),
            life: Life::new(),
        }
    }

    /// Wraps the chain in one more layer, keeping the pipeline's token if
    /// it already runs.
    fn wrap<S2: Source + Unpin>(mut self, layer: impl FnOnce(S) -> S2) -> PipelineSync<S2> {
        let life = std::mem::replace(&mut self.life, Life::ended());
        let mut source = self.source.take().map(layer);
        if let (Some(source), Some(token)) = (source.as_mut(), life.running_token()) {
            Pin::new(source).start(token);
        }
        PipelineSync { source, life }
    }

    /// Runs a stateful transform over the chain (PULL-030), synchronously.
    pub fn stateful<X>(self, transform: X) -> PipelineSync<StatefulStage<S, X>>
    where
        S: Source + Unpin,
        X: StatefulTransform,
    {
        self.wrap(|s| StatefulStage::new(s, transform))
    }
}

impl<S: Source + Unpin, T: Transform> PipelineSync<Pipeline<S, T>> {
    /// Fuses `next` after the pipeline's transform (see [`Pipeline::then`]).
    pub fn then<U: Transform>(self, next: U) -> PipelineSync<Pipeline<S, Chain<T, U>>> {
        self.wrap(|p| p.then(next))
    }
}

impl<S: Source + Unpin, X: StatefulTransform> PipelineSync<StatefulStage<S, X>> {
    /// Runs `next` on the stateful stage's output.
    pub fn then<U: Transform>(self, next: U) -> PipelineSync<Pipeline<StatefulStage<S, X>, U>> {
        self.wrap(|s| Pipeline::new(s, next))
    }
}

impl<S: Source + Unpin> Iterator for PipelineSync<S> {
    type Item = BatchResult;

    fn next(&mut self) -> Option<BatchResult> {
        if let Some(end) = self.life.finished() {
            return end;
        }
        let source = self.source.as_mut()?;
        if let Some(token) = self.life.begin() {
            Pin::new(&mut *source).start(token);
        }
        let mut cx = Context::from_waker(Waker::noop());
        let err = match Pin::new(&mut *source).poll_next_batch(&mut cx) {
            Poll::Ready(Some(Ok(batch))) => return Some(Ok(batch)),
            Poll::Ready(None) => {
                self.life.finish();
                self.source = None;
                return None;
            }
            Poll::Ready(Some(Err(e))) => e,
            Poll::Pending => StreamError::failed(WOULD_BLOCK),
        };
        // Fire the token before dropping the chain, so every layer aborts
        // with this error.
        self.life.fail(&err);
        self.source = None;
        Some(Err(err))
    }
}

impl<S: Source + Unpin> FusedIterator for PipelineSync<S> {}

impl<S> Drop for PipelineSync<S> {
    fn drop(&mut self) {
        // Fires the token if the chain is still running; the chain, dropped
        // right after, aborts its transforms with that reason.
        let _ = self.life.drop_reason();
    }
}
