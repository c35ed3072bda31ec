//! [`Sink`], the writing end, and [`pipe_to`]: a source drained into a sink
//! one batch per write (catalogue section 4, PIPE-001…005).
//!
//! A sink offers a synchronous fast path, [`Sink::try_write_batch`], and an
//! async fallback, [`Sink::poll_write_batch`]. [`pipe_to`] tries the first
//! and falls back to the second only when the sink cannot take the batch
//! now, so a sink that keeps up costs no future, no box and no allocation
//! per batch (PIPE-002). Transforms are not arguments: pipe a
//! [`Pipeline`](crate::Pipeline) (`pipe_to(pull(src, t1.then(t2)), sink, ..)`);
//! whatever a sink does to a batch inside its write therefore runs last
//! (PIPE-004).

use std::future::poll_fn;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use tokio::io::AsyncWrite;

use crate::{Batch, BatchBuf, BatchResult, CancelToken, Source, StreamError};

/// The answer of [`Sink::try_write_batch`].
#[derive(Debug)]
#[must_use = "a `Full` answer hands the batch back"]
pub enum TryWrite {
    /// The sink took the batch.
    Written,
    /// The sink cannot take the batch now; here it is back, untouched.
    Full(Batch),
}

/// The writing end of a pipe: a push writer, a socket, a collector.
///
/// Lifecycle: any number of writes, each batch handed over exactly once
/// (through [`try_write_batch`](Sink::try_write_batch) or, if that returned
/// [`TryWrite::Full`], through [`poll_write_batch`](Sink::poll_write_batch)),
/// then either [`poll_end`](Sink::poll_end) / [`try_end`](Sink::try_end) on
/// success or [`fail`](Sink::fail) on error.
///
/// Implementing it without allocating per batch: the sink keeps its own
/// state (a push writer keeps at most one waiting write, a socket writer the
/// [`BatchBuf`] it is writing) instead of a boxed future per write.
pub trait Sink {
    /// Writes `batch` now if the sink can take it without waiting.
    ///
    /// The default has no fast path: it hands every batch back.
    ///
    /// # Errors
    /// The sink is closed or failed; the batch is dropped.
    fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
        Ok(TryWrite::Full(batch))
    }

    /// Polls to write the batch in `*batch`.
    ///
    /// The sink takes the batch out of `*batch` (leaving `None`) once it is
    /// responsible for it; it may take it and still return `Pending` while
    /// it finishes the write (a partial socket write). The caller polls
    /// again with the same slot until `Ready`. `Ready(Ok(()))` means the
    /// batch is written, and the slot is then `None`. `Pending` registers
    /// `cx`'s waker.
    ///
    /// # Errors
    /// The sink is closed or failed; the batch is dropped.
    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>>;

    /// Ends the sink now, if that needs no waiting: `Some(Ok(()))` when
    /// ended, `None` when it would have to wait (a full push buffer,
    /// PUSH-086). The default always waits.
    ///
    /// # Errors
    /// `Some(Err(_))`: the sink is failed, or cannot end cleanly.
    fn try_end(&mut self) -> Option<Result<(), StreamError>> {
        None
    }

    /// Polls to end the sink: every batch written is delivered, and its
    /// reader sees a clean end.
    ///
    /// # Errors
    /// The sink is failed, or cannot end cleanly.
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>>;

    /// Fails the sink with `reason`: its reader sees the error, never a clean
    /// end. Does nothing if the sink is already ended or failed.
    fn fail(&mut self, reason: StreamError);
}

impl<K: Sink + ?Sized> Sink for &mut K {
    fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
        (**self).try_write_batch(batch)
    }

    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        (**self).poll_write_batch(cx, batch)
    }

    fn try_end(&mut self) -> Option<Result<(), StreamError>> {
        (**self).try_end()
    }

    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        (**self).poll_end(cx)
    }

    fn fail(&mut self, reason: StreamError) {
        (**self).fail(reason)
    }
}

impl<K: Sink + ?Sized> Sink for Box<K> {
    fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
        (**self).try_write_batch(batch)
    }

    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        (**self).poll_write_batch(cx, batch)
    }

    fn try_end(&mut self) -> Option<Result<(), StreamError>> {
        (**self).try_end()
    }

    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        (**self).poll_end(cx)
    }

    fn fail(&mut self, reason: StreamError) {
        (**self).fail(reason)
    }
}

/// How [`pipe_to`] and [`pipe_to_sync`] finish.
///
/// The default ends the sink on success, fails it on error, and has no token.
#[derive(Debug, Clone, Default)]
pub struct PipeOptions {
    /// Leave the sink open on success (no end).
    pub prevent_close: bool,
    /// Leave the sink as it is on error (no fail).
    pub prevent_fail: bool,
    /// Checked before every pull, write and end, and raced against each one
    /// that waits; once it fires the pipe fails with its reason (PIPE-003).
    pub token: Option<CancelToken>,
}

impl PipeOptions {
    /// The defaults.
    pub fn new() -> Self {
        PipeOptions::default()
    }

    /// Sets [`PipeOptions::prevent_close`].
    pub fn prevent_close(mut self, yes: bool) -> Self {
        self.prevent_close = yes;
        self
    }

    /// Sets [`PipeOptions::prevent_fail`].
    pub fn prevent_fail(mut self, yes: bool) -> Self {
        self.prevent_fail = yes;
        self
    }

    /// Sets the cancellation token.
    pub fn token(mut self, token: CancelToken) -> Self {
        self.token = Some(token);
        self
    }
}

/// Drains `source` into `sink`; returns the total bytes written (PIPE-001).
///
/// Exactly one write per batch, the whole batch at once: first
/// [`Sink::try_write_batch`], and only if that hands the batch back,
/// [`Sink::poll_write_batch`] until done (PIPE-002). When the source ends it
/// is dropped and, unless `prevent_close`, the sink is ended. Pass `&mut sink`
/// to keep the sink afterwards.
///
/// # Errors
/// The first error of the source, the sink (a write or the end) or the
/// token, unchanged. The source is dropped at once and, unless
/// `prevent_fail`, `sink.fail(e)` is called with the same error before it
/// is returned.
///
/// # Cancel safety
/// Not cancel-safe. Dropping the future half-way drops the source and the
/// batch in flight and, unless `prevent_fail`, fails the sink with
/// [`StreamError::Aborted`], so that its reader never takes a truncated
/// body for a complete one.
pub async fn pipe_to<S, K>(source: S, mut sink: K, options: PipeOptions) -> Result<u64, StreamError>
where
    S: Source + Unpin,
    K: Sink,
{
    let PipeOptions {
        prevent_close,
        prevent_fail,
        token,
    } = options;
    let mut guard = FailOnDrop {
        sink: &mut sink,
        armed: !prevent_fail,
    };
    let result = drain(source, guard.sink, token.as_ref(), prevent_close).await;
    guard.armed = false;
    if let Err(e) = &result
        && !prevent_fail
    {
        guard.sink.fail(e.clone());
    }
    result
}

/// Drains `source` into `sink` synchronously; the rules of [`pipe_to`]
/// (PIPE-004).
///
/// Every write goes through [`Sink::try_write_batch`] and the end through
/// [`Sink::try_end`]; a sink that cannot take a batch or end without waiting
/// is an error (PIPE-005).
///
/// # Errors
/// As for [`pipe_to`], plus [`StreamError::BackpressureViolation`] when the
/// sink hands a batch back or cannot end now.
pub fn pipe_to_sync<I, K>(source: I, mut sink: K, options: PipeOptions) -> Result<u64, StreamError>
where
    I: IntoIterator<Item = BatchResult>,
    K: Sink,
{
    let result = drain_sync(
        source,
        &mut sink,
        options.token.as_ref(),
        options.prevent_close,
    );
    if let Err(e) = &result
        && !options.prevent_fail
    {
        sink.fail(e.clone());
    }
    result
}

/// Fails the sink if `pipe_to` is dropped before it finished.
struct FailOnDrop<'a, K: Sink> {
    sink: &'a mut K,
    armed: bool,
}

impl<K: Sink> Drop for FailOnDrop<'_, K> {
    fn drop(&mut self) {
        if self.armed {
            self.sink.fail(StreamError::aborted(
                "pipe_to was dropped before it finished",
            ));
        }
    }
}

/// The token's error, if it has fired.
fn cancelled(token: Option<&CancelToken>) -> Option<StreamError> {
    token.and_then(CancelToken::reason)
}

/// Polls `op` unless `token` has fired; while `op` waits, waits for the token too.
fn poll_with_token<T>(
    token: Option<&CancelToken>,
    cx: &mut Context<'_>,
    op: impl FnOnce(&mut Context<'_>) -> Poll<Result<T, StreamError>>,
) -> Poll<Result<T, StreamError>> {
    if let Some(e) = cancelled(token) {
        return Poll::Ready(Err(e));
    }
    match op(cx) {
        Poll::Pending => match token.map(|t| t.poll_cancelled(cx)) {
            Some(Poll::Ready(e)) => Poll::Ready(Err(e)),
            _ => Poll::Pending,
        },
        ready => ready,
    }
}

async fn drain<S, K>(
    mut source: S,
    sink: &mut K,
    token: Option<&CancelToken>,
    prevent_close: bool,
) -> Result<u64, StreamError>
where
    S: Source + Unpin,
    K: Sink,
{
    let mut total = 0u64;
    loop {
        let next = poll_fn(|cx| {
            poll_with_token(token, cx, |cx| {
                Pin::new(&mut source)
                    .poll_next_batch(cx)
                    .map(Option::transpose)
            })
        })
        .await?;
        let Some(batch) = next else { break };
        let len = batch.byte_len() as u64;
        if let Some(e) = cancelled(token) {
            return Err(e);
        }
        if let TryWrite::Full(batch) = sink.try_write_batch(batch)? {
            let mut slot = Some(batch);
            poll_fn(|cx| poll_with_token(token, cx, |cx| sink.poll_write_batch(cx, &mut slot)))
                .await?;
        }
        total = total.saturating_add(len);
    }
    drop(source);
    if !prevent_close {
        poll_fn(|cx| poll_with_token(token, cx, |cx| sink.poll_end(cx))).await?;
    }
    Ok(total)
}

fn drain_sync<I, K>(
    source: I,
    sink: &mut K,
    token: Option<&CancelToken>,
    prevent_close: bool,
) -> Result<u64, StreamError>
where
    I: IntoIterator<Item = BatchResult>,
    K: Sink,
{
    let mut total = 0u64;
    let mut iter = source.into_iter();
    loop {
        if let Some(e) = cancelled(token) {
            return Err(e);
        }
        let Some(batch) = iter.next().transpose()? else {
            break;
        };
        let len = batch.byte_len() as u64;
        if let Some(e) = cancelled(token) {
            return Err(e);
        }
        if let TryWrite::Full(_) = sink.try_write_batch(batch)? {
            return Err(StreamError::BackpressureViolation);
        }
        total = total.saturating_add(len);
    }
    drop(iter);
    if !prevent_close {
        if let Some(e) = cancelled(token) {
            return Err(e);
        }
        sink.try_end()
            .unwrap_or(Err(StreamError::BackpressureViolation))?;
    }
    Ok(total)
}

/// The most chunks [`IoSink`] hands to one vectored write.
const MAX_IOVECS: usize = 64;

/// A [`tokio::io::AsyncWrite`] (a socket, a file) as a [`Sink`].
///
/// Each batch is written with vectored writes straight from its chunks: no
/// copy, and no allocation per batch (the batch's own vector is kept while
/// it is written). There is no synchronous fast path; every batch goes
/// through [`Sink::poll_write_batch`]. Ending flushes and shuts the writer
/// down.
///
/// [`Sink::fail`] drops the unwritten rest and refuses later writes with
/// the same error; it cannot reset a connection by itself, so the owner
/// should then drop the writer (see [`IoSink::into_inner`]) rather than
/// reuse it.
#[derive(Debug)]
pub struct IoSink<W> {
    io: W,
    /// What is left of the batch being written.
    buf: BatchBuf,
    failed: Option<StreamError>,
}

impl<W> IoSink<W> {
    /// Wraps `io`. Writes nothing.
    pub fn new(io: W) -> Self {
        IoSink {
            io,
            buf: BatchBuf::default(),
            failed: None,
        }
    }

    /// The writer back; bytes of a batch not fully written are lost.
    pub fn into_inner(self) -> W {
        self.io
    }

    /// The writer.
    pub fn get_ref(&self) -> &W {
        &self.io
    }
}

impl<W: AsyncWrite + Unpin> IoSink<W> {
    /// Writes out what is left of the current batch.
    fn poll_flush_buf(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        while self.buf.has_remaining() {
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let n = self.buf.chunks_vectored(&mut slices);
            match Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..n]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(self.failed(std::io::ErrorKind::WriteZero.into())));
                }
                Poll::Ready(Ok(written)) => self.buf.advance(written),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(self.failed(e))),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn failed(&mut self, e: std::io::Error) -> StreamError {
        let err = StreamError::failed(e);
        self.fail(err.clone());
        err
    }
}

impl<W: AsyncWrite + Unpin> Sink for IoSink<W> {
    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        if let Some(e) = &self.failed {
            return Poll::Ready(Err(e.clone()));
        }
        // Finish the previous batch (never left over by `pipe_to`) first.
        if self.buf.has_remaining() {
            std::task::ready!(self.poll_flush_buf(cx))?;
        }
        if let Some(b) = batch.take() {
            self.buf = b.into_buf();
        }
        self.poll_flush_buf(cx)
    }

    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        if let Some(e) = &self.failed {
            return Poll::Ready(Err(e.clone()));
        }
        std::task::ready!(self.poll_flush_buf(cx))?;
        match Pin::new(&mut self.io).poll_shutdown(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.failed(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn fail(&mut self, reason: StreamError) {
        if self.failed.is_none() {
            self.buf = BatchBuf::default();
            self.failed = Some(reason);
        }
    }
}

/// A push [`Writer`](crate::push::Writer) is a sink: `try_write_batch`
/// enqueues when there is room (never past the high-water mark, whatever
/// the policy), `poll_write_batch` waits for room without a future per
/// batch, and the end and failure reach the writer's readable.
impl Sink for crate::push::Writer {
    fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
        match crate::push::Writer::try_write_batch(self, batch) {
            Ok(()) => Ok(TryWrite::Written),
            // Full, or closed: the async path tells which.
            Err(batch) => Ok(TryWrite::Full(batch)),
        }
    }

    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        crate::push::Writer::poll_write_batch(self, cx, batch)
    }

    fn try_end(&mut self) -> Option<Result<(), StreamError>> {
        crate::push::Writer::try_end(self).map(|_| Ok(()))
    }

    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        crate::push::Writer::poll_end(self, cx).map(|r| r.map(|_| ()))
    }

    fn fail(&mut self, reason: StreamError) {
        let _ = self.try_fail(reason);
    }
}
