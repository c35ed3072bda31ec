//! Sinks: allocations per batch of `pipe_to` into a sync-capable sink and
//! into an async-only one (B06, "0 futures and 0 allocations per batch"),
//! and the B11 slow sink: 10 MiB into a sink that takes 1 ms per write,
//! fed by a push pair and by a pull pipeline. The slow sink is about
//! bounded memory, not speed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use weir_stream::pipe::{PipeOptions, Sink, pipe_to};
use weir_stream::push::{PushOptions, push};
use weir_stream::{Batch, StreamError, pull};

use super::{CHUNK, allowance, chunk, indexed, lazy};
use crate::common::cases::on_current;
use crate::common::check::{Count, Tally};
use crate::common::rt;
use crate::common::sinks::{BoxedSink, SyncSink};
use crate::common::stages::Identity;
use crate::{Report, measure, measure_raw};

/// A sink whose every write takes 1 ms (a tokio timer): a slow client.
#[derive(Default)]
struct SlowSink {
    tally: Tally,
    writes: u64,
    sleeping: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Sink for SlowSink {
    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        if let Some(b) = batch.take() {
            for c in b.chunks() {
                self.tally.add::<Count>(c);
            }
            self.writes += 1;
            // The batch is dropped here; the wait stands for the socket.
            self.sleeping = Some(Box::pin(tokio::time::sleep(Duration::from_millis(1))));
        }
        match self.sleeping.as_mut() {
            Some(s) => {
                std::task::ready!(s.as_mut().poll(cx));
                self.sleeping = None;
                Poll::Ready(Ok(()))
            }
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_end(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, reason: StreamError) {
        panic!("the slow sink was failed: {reason}");
    }
}

/// The sink runs.
pub fn run(_full: bool) -> Vec<Report> {
    let mut reports = Vec::new();

    // pipe_to, 1000 × 4 KB shared chunks, one chunk per batch.
    let n = 1000;
    let mut want = Tally::default();
    for i in 0..n {
        want.add::<Count>(&chunk(i, CHUNK, false));
    }
    reports.push(
        measure("pipe_to sync sink, 1000×4K, b1", n, &want, || {
            let mut sink = SyncSink::<Count>::default();
            on_current(pipe_to(
                lazy(n, CHUNK, false, 1),
                &mut sink,
                PipeOptions::new(),
            ))
            .expect("pipe_to failed");
            sink.tally
        })
        .note("try_write_batch: no future per batch"),
    );
    reports.push(
        measure("pipe_to boxed-future sink, 1000×4K, b1", n, &want, || {
            let mut sink = BoxedSink::<Count>::default();
            on_current(pipe_to(
                lazy(n, CHUNK, false, 1),
                &mut sink,
                PipeOptions::new(),
            ))
            .expect("pipe_to failed");
            sink.tally
        })
        .note("one boxed write future per batch"),
    );

    // The slow sink: 10 MiB of owned 16 KiB chunks.
    let size = 16 << 10;
    let n = (10 << 20) / size;
    let mut want = Tally::default();
    for i in 0..n {
        want.add::<Count>(&chunk(i, size, false));
    }
    let hwm = 4;
    let name = format!("slow sink 1 ms/write, 10 MiB, push strict hwm {hwm} → pipe_to");
    let (cost, (t, writes)) = measure_raw(|| {
        rt::timed().block_on(async move {
            let (w, r) = push(PushOptions::new().hwm(hwm));
            tokio::spawn(async move {
                for i in 0..n {
                    w.write(indexed(i, size))
                        .await
                        .expect("a push write failed");
                }
                w.end().expect("ending the push stream");
            });
            let mut sink = SlowSink::default();
            pipe_to(r, &mut sink, PipeOptions::new())
                .await
                .expect("pipe_to into the slow sink failed");
            (sink.tally, sink.writes)
        })
    });
    assert_eq!(t.bytes, want.bytes, "{name}: bytes");
    reports.push(
        Report::new(name, n, cost)
            .bounded((2 * hwm + 1) * size + allowance(hwm))
            .note(format!(
                "{writes} writes, {:.0} ms",
                cost.elapsed.as_secs_f64() * 1e3
            )),
    );

    let name = "slow sink 1 ms/write, 10 MiB, pull b1 → pipe_to";
    let (cost, (t, writes)) = measure_raw(|| {
        rt::timed().block_on(async move {
            let mut sink = SlowSink::default();
            pipe_to(
                pull(lazy(n, size, true, 1), Identity),
                &mut sink,
                PipeOptions::new(),
            )
            .await
            .expect("pipe_to into the slow sink failed");
            (sink.tally, sink.writes)
        })
    });
    t.check(&want, name);
    reports.push(
        Report::new(name, n, cost)
            .bounded(2 * size + allowance(1))
            .note(format!(
                "{writes} writes, {:.0} ms",
                cost.elapsed.as_secs_f64() * 1e3
            )),
    );
    reports
}
