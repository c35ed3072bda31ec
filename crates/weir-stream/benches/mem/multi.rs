//! Share and broadcast memory: 100 MB through a share with two consumers
//! (the ring never holds more than hwm entries), a share whose secondary
//! consumer stalls (held to hwm entries, then detached with `Lagged`), and
//! broadcast to two slow consumers under every policy.

use std::sync::Arc;
use std::time::Duration;

use weir_stream::broadcast::{BroadcastOptions, broadcast};
use weir_stream::share::{ConsumerOptions, Share, ShareOptions, share};
use weir_stream::{Backpressure, Source, SourceExt, StreamError};

use super::pull::reference;
use super::{CHUNK, Delivered, allowance, indexed, lazy, slow_drain, spin, sustained};
use crate::common::cases::on_current;
use crate::common::check::{Digest, Tally};
use crate::common::rt;
use crate::{Report, measure_raw};

/// Drains a share consumer into a `Digest` tally, spinning `work` per
/// batch; returns the tally and the most entries the ring held after any
/// of its batches.
async fn drain_watching<S: Source + Unpin, T: Source + Unpin>(
    mut c: S,
    share: Arc<Share<T>>,
    work: Duration,
) -> (Tally, usize) {
    let mut t = Tally::default();
    let mut most = 0;
    while let Some(batch) = c.next_batch().await {
        let batch = batch.expect("a bench share consumer failed");
        most = most.max(share.buffer_size());
        for chunk in batch.chunks() {
            t.add::<Digest>(chunk);
        }
        spin(work);
    }
    (t, most)
}

/// The share and broadcast runs.
pub fn run(full: bool) -> Vec<Report> {
    let mut reports = Vec::new();
    let n = sustained(full);
    let mb = n * CHUNK / 1_000_000;
    let want = reference::<Digest>(n, false);

    // Share × 2, sustained, owned chunks, one consumer slower than the other.
    let hwm = 16;
    let name = format!("share×2 sustained {mb} MB, block hwm {hwm} chunks");
    let (cost, ((t1, m1), (t2, m2))) = measure_raw(|| {
        rt::multi().block_on(async move {
            let opts = ShareOptions {
                hwm_chunks: hwm,
                policy: Backpressure::Block,
                ..ShareOptions::default()
            };
            let s = Arc::new(share(lazy(n, CHUNK, true, 1), opts));
            let (c1, c2) = (s.pull(), s.pull());
            let h1 = tokio::spawn(drain_watching(c1, s.clone(), Duration::ZERO));
            let h2 = tokio::spawn(drain_watching(c2, s, Duration::from_micros(1)));
            (
                h1.await.expect("share consumer 1 panicked"),
                h2.await.expect("share consumer 2 panicked"),
            )
        })
    });
    t1.check(&want, &format!("{name}, consumer 1"));
    t2.check(&want, &format!("{name}, consumer 2"));
    let most = m1.max(m2);
    assert!(
        most <= hwm,
        "{name}: the ring held {most} > hwm {hwm} entries"
    );
    reports.push(
        Report::new(name, n, cost)
            .bounded((hwm + 3) * CHUNK + allowance(hwm))
            .note(format!(
                "ring ≤ {most} entries (hwm {hwm}), {:.0} ms",
                cost.elapsed.as_secs_f64() * 1e3
            )),
    );

    // A stalled secondary: never polled while the primary reads everything.
    let hwm = 16;
    let name = format!("share, secondary stalls, {mb} MB, hwm {hwm} chunks");
    let (cost, (t, most, lagged)) = measure_raw(|| {
        on_current(async move {
            let s = Arc::new(share(
                lazy(n, CHUNK, true, 1),
                ShareOptions {
                    hwm_chunks: hwm,
                    ..ShareOptions::default()
                },
            ));
            let primary = s.pull();
            let mut secondary = s.consumer(ConsumerOptions::secondary());
            let (t, most) = drain_watching(primary, s.clone(), Duration::ZERO).await;
            let lagged = secondary.next_batch().await;
            (t, most, lagged)
        })
    });
    t.check(&want, &name);
    assert!(
        most <= hwm,
        "{name}: the ring held {most} > hwm {hwm} entries"
    );
    assert!(
        matches!(lagged, Some(Err(StreamError::Lagged { hwm_chunks: h, .. })) if h == hwm),
        "{name}: the stalled secondary got {lagged:?}, not Lagged"
    );
    reports.push(
        Report::new(name, n, cost)
            .bounded((hwm + 2) * CHUNK + allowance(hwm))
            .note(format!(
                "ring ≤ {most} entries; then the secondary got Lagged {{ hwm_chunks: {hwm} }}"
            )),
    );

    // Broadcast, 500 × 4 KB, two consumers spending 20 µs per entry.
    let count = 500;
    for policy in [
        Backpressure::Strict,
        Backpressure::Block,
        Backpressure::DropOldest,
        Backpressure::DropNewest,
    ] {
        for hwm in [16usize, 64] {
            let name = format!("broadcast×2 {policy} hwm {hwm}, 500×4K, slow consumers");
            let (cost, (written, d1, d2)) = measure_raw(|| {
                rt::multi().block_on(async move {
                    let (w, b) = broadcast(BroadcastOptions::new().hwm(hwm).policy(policy));
                    let (c1, c2) = (b.subscribe(), b.subscribe());
                    drop(b);
                    let work = Duration::from_micros(20);
                    let h1 = tokio::spawn(slow_drain(c1, work, 0));
                    let h2 = tokio::spawn(slow_drain(c2, work, 0));
                    let writer = tokio::spawn(async move {
                        for i in 0..count {
                            w.write(indexed(i, CHUNK))
                                .await
                                .expect("a bench broadcast write failed");
                        }
                        w.end().expect("ending a bench broadcast")
                    });
                    let written = writer.await.expect("broadcast writer panicked");
                    let d1: Delivered = h1.await.expect("broadcast consumer 1 panicked");
                    let d2: Delivered = h2.await.expect("broadcast consumer 2 panicked");
                    (written, d1, d2)
                })
            });
            assert_eq!(written, (count * CHUNK) as u64, "{name}: bytes written");
            if matches!(policy, Backpressure::Strict | Backpressure::Block) {
                assert_eq!(d1.chunks, count as u64, "{name}: consumer 1 lost chunks");
                assert_eq!(d2.chunks, count as u64, "{name}: consumer 2 lost chunks");
            }
            reports.push(
                Report::new(name, count, cost)
                    .bounded((hwm + 3) * CHUNK + allowance(hwm))
                    .note(format!(
                        "delivered {} / {}, dropped {} / {}",
                        d1.chunks,
                        d2.chunks,
                        count as u64 - d1.chunks,
                        count as u64 - d2.chunks
                    )),
            );
        }
    }
    reports
}
