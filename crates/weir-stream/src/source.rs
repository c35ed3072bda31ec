//! [`Source`]: the async pull contract, and the simple in-memory sources.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::SizeHint;

use crate::stateful::{AsyncStage, AsyncTransform, StatefulStage, StatefulTransform};
use crate::{Batch, BatchLimits, BatchResult, CancelToken, Pipeline, Transform};

/// Something that yields [`Batch`]es when polled.
///
/// This is the one contract of the streaming core; [`SourceExt::next_batch`]
/// is the `async` sugar over it.
///
/// A source does no work until polled: it must not read ahead of demand.
/// Dropping it is how its consumer says "stop": a source that holds a
/// connection releases it in `Drop`.
pub trait Source {
    /// Polls for the next batch.
    ///
    /// Returns `Ready(Some(Ok(batch)))` with a batch of everything that is
    /// ready, `Ready(Some(Err(e)))` when the source failed (sticky: later polls
    /// fail with the same error), `Ready(None)` at the end (and on every later
    /// poll), or `Pending` after registering `cx`'s waker.
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>>;

    /// Bounds on the bytes still to come. Unknown by default.
    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }

    /// Whether the source knows, without being polled, that it has no more
    /// batches (its next poll would return `Ready(None)`).
    ///
    /// `false` when unknown. A source that knows its length (an HTTP body
    /// with `Content-Length`) says so as soon as its last byte was yielded,
    /// so a pipeline can flush in the same poll and an HTTP writer that
    /// stops at the declared length still sees a complete body.
    fn is_end_stream(&self) -> bool {
        false
    }

    /// The trailers that followed the data, if any. Meaningful once
    /// `poll_next_batch` has returned `Ready(None)` (or `is_end_stream` is
    /// true); returns them once.
    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        None
    }

    /// The layer downstream is about to poll for the first time and hands
    /// over the pipeline-wide token (PULL-044).
    ///
    /// A layer that runs transforms (a [`Pipeline`], a
    /// [`StatefulStage`], an [`AsyncStage`]) keeps it, gives it to its
    /// transforms instead of making a token of its own, and passes it on
    /// upstream. Such a layer fires the token when it fails; firing it when
    /// the chain is dropped early is left to the outermost layer, which made
    /// it. An adapter that wraps a source should forward the call; other
    /// sources ignore it (the default). Called at most once, before the
    /// first poll; later calls are ignored.
    fn start(self: Pin<&mut Self>, token: &CancelToken) {
        let _ = token;
    }
}

impl<S: Source + Unpin + ?Sized> Source for &mut S {
    #[inline]
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        Pin::new(&mut **self).poll_next_batch(cx)
    }

    fn size_hint(&self) -> SizeHint {
        (**self).size_hint()
    }

    fn is_end_stream(&self) -> bool {
        (**self).is_end_stream()
    }

    fn take_trailers(mut self: Pin<&mut Self>) -> Option<HeaderMap> {
        Pin::new(&mut **self).take_trailers()
    }

    fn start(mut self: Pin<&mut Self>, token: &CancelToken) {
        Pin::new(&mut **self).start(token)
    }
}

impl<S: Source + Unpin + ?Sized> Source for Box<S> {
    #[inline]
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        Pin::new(&mut **self).poll_next_batch(cx)
    }

    fn size_hint(&self) -> SizeHint {
        (**self).size_hint()
    }

    fn is_end_stream(&self) -> bool {
        (**self).is_end_stream()
    }

    fn take_trailers(mut self: Pin<&mut Self>) -> Option<HeaderMap> {
        Pin::new(&mut **self).take_trailers()
    }

    fn start(mut self: Pin<&mut Self>, token: &CancelToken) {
        Pin::new(&mut **self).start(token)
    }
}

impl<S: Source + ?Sized> Source for Pin<Box<S>> {
    #[inline]
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        self.get_mut().as_mut().poll_next_batch(cx)
    }

    fn size_hint(&self) -> SizeHint {
        (**self).size_hint()
    }

    fn is_end_stream(&self) -> bool {
        (**self).is_end_stream()
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.get_mut().as_mut().take_trailers()
    }

    fn start(self: Pin<&mut Self>, token: &CancelToken) {
        self.get_mut().as_mut().start(token)
    }
}

/// Convenience methods for every [`Source`], among them the builders of
/// mixed chains.
///
/// A chain is built from its source outwards; each call wraps everything
/// built so far (PULL-033), and nothing is polled until the consumer polls
/// the result (PULL-001):
///
/// - [`then`](SourceExt::then) adds a synchronous [`Transform`]. On a
///   [`Pipeline`] the inherent [`Pipeline::then`] is picked instead, which
///   fuses the new stage into the pipeline's own loop, so a run of
///   synchronous stages stays one loop however it is written;
/// - [`stateful`](SourceExt::stateful) adds a [`StatefulTransform`] (PULL-030);
/// - [`then_async`](SourceExt::then_async) adds an [`AsyncTransform`] (PULL-020);
/// - [`with_token`](SourceExt::with_token) makes the chain fail once an
///   external token fires (PULL-043).
///
/// ```
/// use weir_stream::stateful::async_fn;
/// use weir_stream::{Batch, SourceExt, from_iter, transform_fn};
///
/// let upper = transform_fn(|b: Option<Batch>| {
///     Ok(b.map(|b| b.into_iter().map(|c| c.to_ascii_uppercase().into()).collect()))
/// });
/// let chain = from_iter(["a", "b"])
///     .then(upper)
///     .then_async(async_fn(|b: Option<Batch>| async move { Ok(b) }))
///     .then(());
/// # drop(chain);
/// ```
pub trait SourceExt: Source {
    /// The next batch, as a future.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future before it completes loses nothing,
    /// because a batch is only taken from the source when the future resolves.
    fn next_batch(&mut self) -> NextBatch<'_, Self>
    where
        Self: Unpin,
    {
        NextBatch { source: self }
    }

    /// Runs `transform` on this source's batches, in the consumer's poll:
    /// `pull(self, transform)` without the `Unpin` bound.
    fn then<T: Transform>(self, transform: T) -> Pipeline<Self, T>
    where
        Self: Sized,
    {
        Pipeline::new(self, transform)
    }

    /// Runs a stateful transform over this source (PULL-030). See
    /// [`StatefulStage`].
    fn stateful<T: StatefulTransform>(self, transform: T) -> StatefulStage<Self, T>
    where
        Self: Sized,
    {
        StatefulStage::new(self, transform)
    }

    /// Runs an async transform over this source, awaiting each of its
    /// futures before the output moves on (PULL-020). See [`AsyncStage`].
    fn then_async<T: AsyncTransform>(self, transform: T) -> AsyncStage<Self, T>
    where
        Self: Sized,
    {
        AsyncStage::new(self, transform)
    }

    /// Fails with `token`'s reason once it fires (PULL-043): a pipeline
    /// layer with no transform around this source. On a [`Pipeline`] the
    /// inherent [`Pipeline::with_token`] is picked instead, which adds no layer.
    fn with_token(self, token: CancelToken) -> Pipeline<Self, ()>
    where
        Self: Sized,
    {
        Pipeline::new(self, ()).with_token(token)
    }
}

impl<S: Source + ?Sized> SourceExt for S {}

/// Future returned by [`SourceExt::next_batch`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct NextBatch<'a, S: ?Sized> {
    source: &'a mut S,
}

impl<S: Source + Unpin + ?Sized> Future for NextBatch<'_, S> {
    type Output = Option<BatchResult>;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut *self.source).poll_next_batch(cx)
    }
}

/// A source that ends at once. See [`empty`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Empty;

/// A source with no data.
pub fn empty() -> Empty {
    Empty
}

impl Source for Empty {
    fn poll_next_batch(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        Poll::Ready(None)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(0)
    }

    fn is_end_stream(&self) -> bool {
        true
    }
}

/// A source of one chunk. See [`once`].
#[derive(Debug, Default, Clone)]
pub struct Once {
    chunk: Option<Bytes>,
}

/// A source that yields `chunk` as a one-chunk batch, then ends.
///
/// The chunk is wrapped, not copied (CORE-003): `Bytes`, `Vec<u8>`,
/// `String` and `&'static str` all convert without a copy.
pub fn once(chunk: impl Into<Bytes>) -> Once {
    Once {
        chunk: Some(chunk.into()),
    }
}

impl Source for Once {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        Poll::Ready(self.chunk.take().map(|c| Ok(Batch::one(c))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.chunk.as_ref().map_or(0, |c| c.len() as u64))
    }

    fn is_end_stream(&self) -> bool {
        self.chunk.is_none()
    }
}

/// A source over an iterator of chunks. See [`from_iter`].
#[derive(Debug, Clone)]
pub struct IterSource<I> {
    iter: I,
    limits: BatchLimits,
}

/// A source that yields the chunks of `iter`, gathered into batches of at
/// most [`Batch::MAX_CHUNKS`] chunks and [`Batch::MAX_BYTES`] bytes
/// (CORE-004; see [`BatchLimits`], and [`IterSource::batch_limits`] to set
/// them); a chunk of half the byte limit or more goes in a batch of its
/// own. The iterator is advanced only when polled, and only for the chunks
/// of one batch. Chunks convert without a copy (CORE-003).
pub fn from_iter<I>(iter: I) -> IterSource<I::IntoIter>
where
    I: IntoIterator,
    I::Item: Into<Bytes>,
{
    IterSource {
        iter: iter.into_iter(),
        limits: BatchLimits::DEFAULT,
    }
}

impl<I> IterSource<I> {
    /// Sets the batch limits (each at least 1). Builds only.
    pub fn batch_limits(mut self, limits: BatchLimits) -> Self {
        self.limits = BatchLimits::new(limits.chunks, limits.bytes);
        self
    }
}

impl<I> IterSource<I>
where
    I: Iterator,
    I::Item: Into<Bytes>,
{
    /// The next batch: up to the limits, `None` once the iterator is done.
    /// One chunk stays inline (no allocation).
    #[inline(always)]
    pub(crate) fn next_batch_sync(&mut self) -> Option<Batch> {
        let first: Bytes = self.iter.next()?.into();
        let limits = self.limits;
        // A chunk of half the byte limit or more travels alone: a list of
        // two such chunks costs more than two one-chunk batches
        // (benches/README.md, N01/N02 at 16 KiB), and batching them saves
        // nothing an in-memory source could use.
        let second = if limits.has_room(1, first.len().saturating_mul(2)) {
            self.iter.next()
        } else {
            None
        };
        let Some(second) = second else {
            return Some(Batch::one(first));
        };
        Some(self.gather(first, second.into()))
    }

    /// A batch of `first`, `second` and what follows, up to the limits.
    /// Out of line, so that the one-chunk path above stays small enough to
    /// inline into its consumer.
    #[inline(never)]
    fn gather(&mut self, first: Bytes, second: Bytes) -> Batch {
        let limits = self.limits;
        let mut bytes = first.len() + second.len();
        // Room for what the limits and the iterator allow, not more.
        let want = (limits.bytes / first.len().max(1))
            .saturating_add(1)
            .min(limits.chunks);
        let room = match self.iter.size_hint() {
            (_, Some(upper)) => want.min(upper.saturating_add(2)),
            (_, None) => want,
        };
        let mut chunks = crate::batch::spare_list(room.max(2));
        chunks.push(first);
        chunks.push(second);
        while limits.has_room(chunks.len(), bytes) {
            let Some(chunk) = self.iter.next() else {
                break;
            };
            let chunk: Bytes = chunk.into();
            bytes += chunk.len();
            chunks.push(chunk);
        }
        Batch::from(chunks)
    }
}

impl<I> Source for IterSource<I>
where
    I: Iterator + Unpin,
    I::Item: Into<Bytes>,
{
    #[inline(always)]
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        Poll::Ready(self.next_batch_sync().map(Ok))
    }
}
