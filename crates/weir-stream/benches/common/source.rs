//! A bench source whose batch size is a parameter (1 or 128 chunks), so
//! batching gains stay apart from implementation gains (plan, section 3).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use weir_stream::{Batch, BatchResult, Source};

/// Yields the chunks of `iter`, `per_batch` at a time; knows its end.
#[derive(Debug)]
pub struct ChunkSource<I> {
    iter: I,
    per_batch: usize,
}

/// A source over `chunks`, `per_batch` chunks per batch.
pub fn chunks(chunks: Vec<Bytes>, per_batch: usize) -> ChunkSource<std::vec::IntoIter<Bytes>> {
    ChunkSource::new(chunks.into_iter(), per_batch)
}

impl<I: ExactSizeIterator<Item = Bytes>> ChunkSource<I> {
    /// A source over `iter`, `per_batch` chunks per batch (at least 1).
    pub fn new(iter: I, per_batch: usize) -> Self {
        ChunkSource {
            iter,
            per_batch: per_batch.max(1),
        }
    }
}

impl<I: ExactSizeIterator<Item = Bytes> + Unpin> Source for ChunkSource<I> {
    #[inline]
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        let n = self.per_batch.min(self.iter.len());
        if n == 0 {
            return Poll::Ready(None);
        }
        // `collect` (generic, so inlined here) rather than `Batch::push` in
        // a loop: `push` is not `#[inline]` and would cost a call per chunk.
        let batch: Batch = self.iter.by_ref().take(n).collect();
        Poll::Ready(Some(Ok(batch)))
    }

    fn is_end_stream(&self) -> bool {
        self.iter.len() == 0
    }
}

/// The chunks of `chunks`, `per_batch` at a time, as the iterator of batch
/// results that [`weir_stream::pull_sync`] and the sync consumers take.
pub fn batches(chunks: Vec<Bytes>, per_batch: usize) -> Batches {
    Batches {
        iter: chunks.into_iter(),
        per_batch: per_batch.max(1),
    }
}

/// See [`batches`].
#[derive(Debug)]
pub struct Batches {
    iter: std::vec::IntoIter<Bytes>,
    per_batch: usize,
}

impl Iterator for Batches {
    type Item = BatchResult;

    #[inline]
    fn next(&mut self) -> Option<BatchResult> {
        let n = self.per_batch.min(self.iter.len());
        if n == 0 {
            return None;
        }
        Some(Ok(self.iter.by_ref().take(n).collect()))
    }
}

/// A source that is pending once (waking itself at once) after every
/// `every` chunks it yielded: an upstream that is not always ready, without
/// timers (B09). A merge must then go back to its other sources.
#[derive(Debug)]
pub struct Yielding<S> {
    inner: S,
    every: usize,
    since: usize,
}

impl<S> Yielding<S> {
    /// Wraps `inner`, yielding after every `every` chunks.
    pub fn new(inner: S, every: usize) -> Self {
        Yielding {
            inner,
            every: every.max(1),
            since: 0,
        }
    }
}

impl<S: Source + Unpin> Source for Yielding<S> {
    #[inline]
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        if self.since >= self.every {
            self.since = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let polled = Pin::new(&mut self.inner).poll_next_batch(cx);
        if let Poll::Ready(Some(Ok(b))) = &polled {
            self.since += b.len();
        }
        polled
    }
}

/// [`Yielding`] for a one-item `futures` stream (baseline (a) of B09).
#[derive(Debug)]
pub struct YieldingStream<S> {
    inner: S,
    every: usize,
    since: usize,
}

impl<S> YieldingStream<S> {
    /// Wraps `inner`, yielding after every `every` items.
    pub fn new(inner: S, every: usize) -> Self {
        YieldingStream {
            inner,
            every: every.max(1),
            since: 0,
        }
    }
}

impl<S: futures_core::Stream<Item = Bytes> + Unpin> futures_core::Stream for YieldingStream<S> {
    type Item = Bytes;

    #[inline]
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if self.since >= self.every {
            self.since = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(Some(_)) = &polled {
            self.since += 1;
        }
        polled
    }
}
