//! Sinks for `pipe_to` (B06): the same tally, behind three write paths.
//!
//! - [`SyncSink`] takes every batch in [`Sink::try_write_batch`]: the
//!   synchronous fast path, no future and no allocation per batch
//!   (PIPE-002; the seeds' "sink with sync methods").
//! - [`PollSink`] has no fast path: every batch goes through
//!   [`Sink::poll_write_batch`], which completes at once. The cost of the
//!   fallback path itself, still without allocation.
//! - [`BoxedSink`] is async-only the way a sink with an `async fn write`
//!   behind `dyn` is: each write makes one boxed future, polled to
//!   completion. The Rust analogue of a Web `WritableStream`, whose every
//!   `write()` returns a promise.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use weir_stream::pipe::{Sink, TryWrite};
use weir_stream::{Batch, StreamError};

use super::check::{Sink as Fold, Tally};

fn fold<K: Fold>(t: &mut Tally, batch: &Batch) {
    for c in batch.chunks() {
        t.add::<K>(c);
    }
}

/// Takes every batch synchronously, folding it into a tally.
#[derive(Debug)]
pub struct SyncSink<K> {
    /// What the sink saw.
    pub tally: Tally,
    _k: PhantomData<K>,
}

impl<K> Default for SyncSink<K> {
    fn default() -> Self {
        SyncSink {
            tally: Tally::default(),
            _k: PhantomData,
        }
    }
}

impl<K: Fold> Sink for SyncSink<K> {
    #[inline]
    fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
        fold::<K>(&mut self.tally, &batch);
        Ok(TryWrite::Written)
    }

    fn poll_write_batch(
        &mut self,
        _cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        if let Some(b) = batch.take() {
            fold::<K>(&mut self.tally, &b);
        }
        Poll::Ready(Ok(()))
    }

    fn try_end(&mut self) -> Option<Result<(), StreamError>> {
        Some(Ok(()))
    }

    fn poll_end(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, reason: StreamError) {
        panic!("a bench pipe failed: {reason}");
    }
}

/// No synchronous fast path: every batch goes through `poll_write_batch`.
#[derive(Debug)]
pub struct PollSink<K> {
    /// What the sink saw.
    pub tally: Tally,
    _k: PhantomData<K>,
}

impl<K> Default for PollSink<K> {
    fn default() -> Self {
        PollSink {
            tally: Tally::default(),
            _k: PhantomData,
        }
    }
}

impl<K: Fold> Sink for PollSink<K> {
    #[inline]
    fn poll_write_batch(
        &mut self,
        _cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        if let Some(b) = batch.take() {
            fold::<K>(&mut self.tally, &b);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_end(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, reason: StreamError) {
        panic!("a bench pipe failed: {reason}");
    }
}

type WriteFuture = Pin<Box<dyn Future<Output = Tally> + Send>>;

/// One boxed future per write, as an `async fn write(&self, batch)` behind
/// `dyn` makes: the future owns the batch and returns what it counted.
pub struct BoxedSink<K> {
    /// What the sink saw.
    pub tally: Tally,
    in_flight: Option<WriteFuture>,
    _k: PhantomData<K>,
}

impl<K> Default for BoxedSink<K> {
    fn default() -> Self {
        BoxedSink {
            tally: Tally::default(),
            in_flight: None,
            _k: PhantomData,
        }
    }
}

impl<K: Fold> BoxedSink<K> {
    /// The `async fn write` of this sink.
    fn write(batch: Batch) -> WriteFuture {
        Box::pin(async move {
            let mut t = Tally::default();
            fold::<K>(&mut t, &batch);
            t
        })
    }
}

impl<K: Fold> Sink for BoxedSink<K> {
    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        if let Some(b) = batch.take() {
            self.in_flight = Some(Self::write(b));
        }
        let Some(fut) = self.in_flight.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        match fut.as_mut().poll(cx) {
            Poll::Ready(t) => {
                self.in_flight = None;
                self.tally = self.tally.plus(t);
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_end(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, reason: StreamError) {
        panic!("a bench pipe failed: {reason}");
    }
}
