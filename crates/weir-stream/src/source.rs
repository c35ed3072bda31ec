//! [`Source`]: the async pull contract, and the simple in-memory sources.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::SizeHint;

use crate::{Batch, BatchResult};

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
}

impl<S: Source + Unpin + ?Sized> Source for &mut S {
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
}

impl<S: Source + Unpin + ?Sized> Source for Box<S> {
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
}

impl<S: Source + ?Sized> Source for Pin<Box<S>> {
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
}

/// Convenience methods for every [`Source`].
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
}

/// A source that yields the chunks of `iter`, up to [`Batch::MAX_CHUNKS`]
/// per batch (CORE-004). The iterator is advanced only when polled.
pub fn from_iter<I>(iter: I) -> IterSource<I::IntoIter>
where
    I: IntoIterator,
    I::Item: Into<Bytes>,
{
    IterSource {
        iter: iter.into_iter(),
    }
}

impl<I> Source for IterSource<I>
where
    I: Iterator + Unpin,
    I::Item: Into<Bytes>,
{
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        let batch: Batch = self
            .iter
            .by_ref()
            .take(Batch::MAX_CHUNKS)
            .map(Into::into)
            .collect();
        Poll::Ready((!batch.is_empty()).then_some(Ok(batch)))
    }
}
