//! Conversions between the batch model and the shapes other code speaks:
//! sources from streams, readers and iterators; streams from sources; and
//! [`IntoBatch`], the return shapes a mapping closure may use (PULL-010).
//!
//! How each source batches (CORE-005): a source over a *sync* iterator of
//! chunks ([`from_iter`](crate::from_iter)) gathers chunks up to the batch
//! limits ([`BatchLimits`]: 128 chunks, 32 KiB), since they are all ready
//! at once; a source over *items* that arrive one by one ([`from_stream`],
//! [`from_results`]) yields one batch per item, so item boundaries stay
//! visible; a reader ([`from_async_read`]) batches every read that is ready
//! in one poll, up to the same limits, like
//! [`HttpBodySource`](crate::body::HttpBodySource).
//!
//! The one-item sources are the per-item path at its cheapest: their poll
//! is inlined into the consumer's, and their sticky end and error states are
//! recorded out of line without the batch passing through (a batch handed
//! to out-of-line code has to live on the stack, and every later move of it
//! then costs a store-to-load round trip).

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};

use bytes::{BufMut, Bytes, BytesMut};
use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{Batch, BatchLimits, BatchResult, Reason, Source, StreamError, Transform};

/// Converts any error into a [`StreamError`]: a `StreamError` (boxed)
/// comes back as itself, keeping its identity (CORE-006); anything else
/// becomes [`StreamError::Failed`].
pub fn into_stream_error(err: impl Into<Box<dyn StdError + Send + Sync>>) -> StreamError {
    match err.into().downcast::<StreamError>() {
        Ok(err) => *err,
        Err(other) => StreamError::Failed(Reason::new(other)),
    }
}

pin_project! {
    /// A [`futures_core::Stream`] of `Result<chunk, error>` as a [`Source`].
    /// See [`from_stream`].
    #[derive(Debug)]
    pub struct StreamSource<St> {
        #[pin]
        stream: St,
        state: ItemState,
    }
}

#[derive(Debug, Clone)]
enum ItemState {
    Open,
    Done,
    Failed(StreamError),
}

impl ItemState {
    /// Whether the source may still yield: the hot path checks only this.
    #[inline]
    fn is_open(&self) -> bool {
        matches!(self, ItemState::Open)
    }

    /// The sticky answer once ended (`None`) or failed (the error).
    #[cold]
    #[inline(never)]
    fn sticky(&self) -> Option<StreamError> {
        match self {
            ItemState::Open | ItemState::Done => None,
            ItemState::Failed(e) => Some(e.clone()),
        }
    }

    /// The source failed with `e`, for good (CORE-006).
    #[cold]
    #[inline(never)]
    fn failed(&mut self, e: StreamError) {
        *self = ItemState::Failed(e);
    }

    /// The source ended, for good (CORE-007).
    #[cold]
    #[inline(never)]
    fn done(&mut self) {
        *self = ItemState::Done;
    }
}

/// A source that yields one single-chunk batch per item of `stream`
/// (CORE-005), in order; chunks convert without a copy (CORE-003).
///
/// An error item becomes the source's error (sticky, CORE-006); a
/// [`StreamError`] is passed on as is, anything else becomes
/// [`StreamError::Failed`]. The stream is polled only when the source is.
pub fn from_stream<St, B, E>(stream: St) -> StreamSource<St>
where
    St: Stream<Item = Result<B, E>>,
    B: Into<Bytes>,
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    StreamSource {
        stream,
        state: ItemState::Open,
    }
}

impl<St, B, E> Source for StreamSource<St>
where
    St: Stream<Item = Result<B, E>>,
    B: Into<Bytes>,
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    #[inline(always)]
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.project();
        if !this.state.is_open() {
            return Poll::Ready(this.state.sticky().map(Err));
        }
        Poll::Ready(match ready!(this.stream.poll_next(cx)) {
            Some(Ok(chunk)) => Some(Ok(Batch::one(chunk))),
            Some(Err(e)) => {
                let e = into_stream_error(e);
                this.state.failed(e.clone());
                Some(Err(e))
            }
            None => {
                this.state.done();
                None
            }
        })
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        matches!(self.state, ItemState::Done)
    }
}

/// A sync iterator of batch results as a [`Source`]. See [`from_results`].
#[derive(Debug, Clone)]
pub struct ResultsSource<I> {
    iter: I,
    state: ItemState,
}

/// A source that yields each item of `iter` as it is: one batch per item
/// (CORE-005), an error ending the source (sticky, CORE-006). The iterator
/// is advanced only when the source is polled. It is never pending, which
/// makes it the source of [`pull_sync`](crate::sync_pull::pull_sync).
pub fn from_results<I>(iter: I) -> ResultsSource<I::IntoIter>
where
    I: IntoIterator<Item = BatchResult>,
{
    ResultsSource {
        iter: iter.into_iter(),
        state: ItemState::Open,
    }
}

impl<I: Iterator<Item = BatchResult> + Unpin> Source for ResultsSource<I> {
    #[inline(always)]
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        let this = &mut *self;
        if !this.state.is_open() {
            return Poll::Ready(this.state.sticky().map(Err));
        }
        match this.iter.next() {
            Some(Ok(batch)) => Poll::Ready(Some(Ok(batch))),
            Some(Err(e)) => {
                this.state.failed(e.clone());
                Poll::Ready(Some(Err(e)))
            }
            None => {
                this.state.done();
                Poll::Ready(None)
            }
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        matches!(self.state, ItemState::Done)
    }
}

/// The read size of [`from_async_read`] unless set otherwise, in bytes.
pub const DEFAULT_READ_CHUNK: usize = 8 * 1024;

pin_project! {
    /// A [`tokio::io::AsyncRead`] as a [`Source`]. See [`from_async_read`].
    pub struct ReaderSource<R> {
        #[pin]
        reader: R,
        buf: BytesMut,
        chunk_size: usize,
        limits: BatchLimits,
        state: ItemState,
    }
}

/// A source that reads `reader` into chunks of at most
/// [`DEFAULT_READ_CHUNK`] bytes (see [`ReaderSource::chunk_size`]).
///
/// Each poll reads for as long as the reader is ready, up to the batch
/// limits ([`BatchLimits::DEFAULT`]; see [`ReaderSource::batch_limits`]), and yields
/// what it read as one batch, one chunk per read. Reads go into one
/// [`BytesMut`] whose spare room is kept for the next read, so a short read
/// does not cost an allocation. End of file ends the source; an I/O error
/// becomes [`StreamError::Failed`], after the data read before it. The
/// reader is read only when the source is polled, and dropped with it.
pub fn from_async_read<R: AsyncRead>(reader: R) -> ReaderSource<R> {
    ReaderSource {
        reader,
        buf: BytesMut::new(),
        chunk_size: DEFAULT_READ_CHUNK,
        limits: BatchLimits::DEFAULT,
        state: ItemState::Open,
    }
}

impl<R> ReaderSource<R> {
    /// Sets the most bytes one read asks for (at least 1). Builds only.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Sets the batch limits (each at least 1). Builds only.
    pub fn batch_limits(mut self, limits: BatchLimits) -> Self {
        self.limits = BatchLimits::new(limits.chunks, limits.bytes);
        self
    }
}

impl<R> fmt::Debug for ReaderSource<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderSource")
            .field("chunk_size", &self.chunk_size)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<R: AsyncRead> Source for ReaderSource<R> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut this = self.project();
        if !this.state.is_open() {
            return Poll::Ready(this.state.sticky().map(Err));
        }
        let chunk = *this.chunk_size;
        let mut batch = Batch::new();
        let mut bytes = 0usize;
        while this.limits.has_room(batch.len(), bytes) {
            if this.buf.capacity() - this.buf.len() < chunk {
                this.buf.reserve(chunk);
            }
            let read = {
                let mut reader = this.reader.as_mut();
                let mut dst = (&mut *this.buf).limit(chunk);
                pin!(reader.read_buf(&mut dst)).poll(cx)
            };
            let end = match read {
                Poll::Ready(Ok(0)) => None,
                Poll::Ready(Ok(n)) => {
                    bytes += n;
                    batch.push(this.buf.split().freeze());
                    continue;
                }
                Poll::Ready(Err(e)) => Some(StreamError::failed(e)),
                Poll::Pending if batch.is_empty() => return Poll::Pending,
                Poll::Pending => break,
            };
            // End of file or an error: deliver what was read first.
            match &end {
                Some(e) => this.state.failed(e.clone()),
                None => this.state.done(),
            }
            if batch.is_empty() {
                return Poll::Ready(end.map(Err));
            }
            break;
        }
        Poll::Ready(Some(Ok(batch)))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, ItemState::Done)
    }
}

pin_project! {
    /// A [`Source`] as a [`futures_core::Stream`] of batch results. See [`into_stream`].
    #[derive(Debug)]
    pub struct BatchStream<S> {
        #[pin]
        source: S,
    }
}

/// A stream that yields each batch of `source` as one item, then its error
/// or its end, exactly as the source does.
pub fn into_stream<S: Source>(source: S) -> BatchStream<S> {
    BatchStream { source }
}

impl<S> BatchStream<S> {
    /// The source back.
    pub fn into_inner(self) -> S {
        self.source
    }
}

impl<S: Source> Stream for BatchStream<S> {
    type Item = BatchResult;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        self.project().source.poll_next_batch(cx)
    }
}

pin_project! {
    /// A [`Source`] as a [`futures_core::Stream`] of chunks. See [`into_bytes_stream`].
    #[derive(Debug)]
    pub struct BytesStream<S> {
        #[pin]
        source: S,
        chunks: crate::batch::IntoIter,
    }
}

/// A stream that yields every chunk of every batch of `source`, in order,
/// zero-length chunks included (CORE-008), then the source's error or end.
/// The source is polled only once the previous batch's chunks are taken.
pub fn into_bytes_stream<S: Source>(source: S) -> BytesStream<S> {
    BytesStream {
        source,
        chunks: Batch::new().into_iter(),
    }
}

impl<S: Source> Stream for BytesStream<S> {
    type Item = Result<Bytes, StreamError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if let Some(chunk) = this.chunks.next() {
                return Poll::Ready(Some(Ok(chunk)));
            }
            match ready!(this.source.as_mut().poll_next_batch(cx)) {
                Some(Ok(batch)) => *this.chunks = batch.into_iter(),
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.chunks.len(), None)
    }
}

/// What a mapping closure may return (PULL-010): nothing, a batch, one
/// chunk, text, bytes, or a list of chunks, each flattened into at most one
/// batch; and a `Result` of any of them. `Option<Batch>` is the zero-cost case.
pub trait IntoBatch {
    /// The batch, or `None` for nothing.
    ///
    /// # Errors
    /// The error of a `Result`, as is.
    fn into_batch(self) -> Result<Option<Batch>, StreamError>;
}

impl IntoBatch for () {
    fn into_batch(self) -> Result<Option<Batch>, StreamError> {
        Ok(None)
    }
}

impl IntoBatch for Batch {
    fn into_batch(self) -> Result<Option<Batch>, StreamError> {
        Ok(Some(self))
    }
}

impl<T: IntoBatch> IntoBatch for Option<T> {
    fn into_batch(self) -> Result<Option<Batch>, StreamError> {
        self.map_or(Ok(None), IntoBatch::into_batch)
    }
}

impl<T: IntoBatch> IntoBatch for Result<T, StreamError> {
    fn into_batch(self) -> Result<Option<Batch>, StreamError> {
        self?.into_batch()
    }
}

macro_rules! chunk_into_batch {
    ($($ty:ty),*) => {$(
        impl IntoBatch for $ty {
            fn into_batch(self) -> Result<Option<Batch>, StreamError> {
                Ok(Some(Batch::one(self)))
            }
        }
    )*};
}

chunk_into_batch!(Bytes, Vec<u8>, String, &'static str, &'static [u8]);

impl IntoBatch for Vec<Bytes> {
    fn into_batch(self) -> Result<Option<Batch>, StreamError> {
        Ok(Some(Batch::from(self)))
    }
}

/// A list of chunks of any kind, flattened into one batch: `Chunks(["a", "b"])`.
#[derive(Debug, Clone)]
pub struct Chunks<I>(pub I);

impl<I> IntoBatch for Chunks<I>
where
    I: IntoIterator,
    I::Item: Into<Bytes>,
{
    fn into_batch(self) -> Result<Option<Batch>, StreamError> {
        Ok(Some(self.0.into_iter().map(Into::into).collect()))
    }
}

/// A transform that maps each batch with a closure. See [`map_batches`].
#[derive(Debug, Clone)]
pub struct MapBatches<F> {
    f: F,
}

/// A stateless transform that passes each batch through `f`, whose result
/// may be any [`IntoBatch`] shape (PULL-010). It holds nothing back, so its
/// flush emits nothing; use [`transform_fn`](crate::transform_fn) to see
/// the flush.
pub fn map_batches<F, R>(f: F) -> MapBatches<F>
where
    F: FnMut(Batch) -> R,
    R: IntoBatch,
{
    MapBatches { f }
}

impl<F, R> Transform for MapBatches<F>
where
    F: FnMut(Batch) -> R,
    R: IntoBatch,
{
    #[inline]
    fn holds_back(&self) -> bool {
        false
    }

    #[inline]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match input {
            Some(batch) => (self.f)(batch).into_batch(),
            None => Ok(None),
        }
    }
}
