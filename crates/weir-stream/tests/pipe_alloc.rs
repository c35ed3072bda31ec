//! PIPE-002: `pipe_to` into a sink that keeps up allocates nothing per batch.
//!
//! Counted with `allocation-counter`, which counts the current thread only.

use std::collections::VecDeque;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use weir_stream::pipe::{PipeOptions, Sink, TryWrite, pipe_to};
use weir_stream::{Batch, BatchResult, CancelToken, Source, StreamError};

/// Yields batches built beforehand, so pulling allocates nothing.
struct Prebuilt(VecDeque<Batch>);

impl Source for Prebuilt {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// Takes every batch, on the fast path or (if `slow`) on the async one.
#[derive(Default)]
struct Counting {
    slow: bool,
    bytes: usize,
}

impl Sink for Counting {
    fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
        if self.slow {
            return Ok(TryWrite::Full(batch));
        }
        self.bytes += batch.byte_len();
        Ok(TryWrite::Written)
    }

    fn poll_write_batch(
        &mut self,
        _cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        if let Some(b) = batch.take() {
            self.bytes += b.byte_len();
        }
        Poll::Ready(Ok(()))
    }

    fn poll_end(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, _reason: StreamError) {}
}

fn batches(n: usize) -> Prebuilt {
    let chunk = Bytes::from_static(b"0123456789");
    Prebuilt(
        (0..n)
            .map(|_| Batch::from(vec![chunk.clone(), chunk.clone()]))
            .collect(),
    )
}

/// Runs one pipe to completion on this thread; returns (allocations, total).
fn measure(n: usize, slow: bool, options: PipeOptions) -> (usize, u64) {
    let source = batches(n);
    let mut sink = Counting {
        slow,
        ..Counting::default()
    };
    let mut cx = Context::from_waker(Waker::noop());
    let mut total = 0;
    let info = allocation_counter::measure(|| {
        let mut fut = pin!(pipe_to(source, &mut sink, options));
        total = match fut.as_mut().poll(&mut cx) {
            Poll::Ready(r) => r.expect("pipe"),
            Poll::Pending => panic!("an always-ready pipe was pending"),
        };
    });
    assert_eq!(sink.bytes as u64, total);
    (info.count_total as usize, total)
}

#[test]
fn pipe_002_zero_allocations_per_batch() {
    // Warm up anything lazily initialised on first use.
    measure(2, false, PipeOptions::new());

    let (allocs, total) = measure(1000, false, PipeOptions::new());
    assert_eq!(total, 20_000);
    assert_eq!(allocs, 0, "fast path: allocations for 1000 batches");

    let token = CancelToken::new();
    let (allocs, _) = measure(1000, false, PipeOptions::new().token(token));
    assert_eq!(allocs, 0, "fast path with a token");

    let (allocs, total) = measure(1000, true, PipeOptions::new());
    assert_eq!(total, 20_000);
    assert_eq!(allocs, 0, "the async fallback allocates nothing either");
}
