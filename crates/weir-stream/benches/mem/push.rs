//! B10, push under backpressure: a writer task that writes as fast as it
//! can (owned 4 KB chunks, made one at a time) and a slow reader task, on
//! the 2-worker runtime, for every policy and hwm 1…1024; the plan's slow
//! consumer (500×4K, hwm 16, yielding every 10 batches); and 100 MB
//! sustained.
//!
//! The bound: a reader takes every buffered slot in one poll (PUSH-083), so
//! at worst it holds hwm chunks while hwm more refill the slots and the
//! writer holds one more, waiting: (2·hwm + 1) chunks. Drop policies never
//! wait, so the same bound holds with drops instead.

use std::time::Duration;

use weir_stream::Backpressure;
use weir_stream::push::{PushOptions, push};

use super::{CHUNK, Delivered, allowance, indexed, slow_drain, sustained};
use crate::common::rt;
use crate::{Report, measure_raw};

const POLICIES: [Backpressure; 4] = [
    Backpressure::Strict,
    Backpressure::Block,
    Backpressure::DropOldest,
    Backpressure::DropNewest,
];

/// One push run: `n` indexed chunks of `size` bytes written with
/// `write().await` (which never waits under a drop policy), read by
/// [`slow_drain`]. Returns the bytes the writer reported written and what
/// the reader saw.
fn run_push(
    n: usize,
    size: usize,
    options: PushOptions,
    work: Duration,
    yield_every: u64,
) -> (u64, Delivered) {
    rt::multi().block_on(async move {
        let (w, r) = push(options);
        let writer = tokio::spawn(async move {
            for i in 0..n {
                w.write(indexed(i, size))
                    .await
                    .expect("a bench push write failed");
            }
            w.end().expect("ending a bench push stream")
        });
        let reader = tokio::spawn(slow_drain(r, work, yield_every));
        let written = writer.await.expect("push writer task panicked");
        (written, reader.await.expect("push reader task panicked"))
    })
}

/// Checks what a run delivered against what it wrote; returns the note.
#[track_caller]
fn check(
    name: &str,
    n: usize,
    size: usize,
    policy: Backpressure,
    written: u64,
    d: Delivered,
) -> String {
    assert_eq!(written, (n * size) as u64, "{name}: bytes written");
    assert_eq!(d.bytes, d.chunks * size as u64, "{name}: whole chunks");
    let dropped = n as u64 - d.chunks;
    match policy {
        Backpressure::Strict | Backpressure::Block => {
            assert_eq!(dropped, 0, "{name}: a waiting policy lost chunks")
        }
        _ => assert!(d.chunks >= 1 && d.chunks <= n as u64, "{name}: delivered"),
    }
    format!(
        "delivered {}, dropped {dropped}, {} batches",
        d.chunks, d.batches
    )
}

/// The push runs.
pub fn run(full: bool) -> Vec<Report> {
    let mut reports = Vec::new();

    // Policy × hwm, 2000 × 4 KB, a reader that spends 20 µs per batch.
    let n = 2000;
    for policy in POLICIES {
        for hwm in [1usize, 4, 16, 64, 256, 1024] {
            let name = format!("push {policy} hwm {hwm}, 2000×4K, slow reader");
            let opts = PushOptions::new().hwm(hwm).policy(policy);
            let (cost, (written, d)) =
                measure_raw(|| run_push(n, CHUNK, opts, Duration::from_micros(20), 0));
            let note = check(&name, n, CHUNK, policy, written, d);
            reports.push(
                Report::new(name, n, cost)
                    .bounded((2 * hwm + 1) * CHUNK + allowance(hwm))
                    .note(note),
            );
        }
    }

    // The plan's slow consumer: 500 × 4 KB, hwm 16, the reader yields to
    // the runtime every 10 batches. Time shows what drops shed.
    let n = 500;
    for policy in POLICIES {
        let hwm = 16;
        let name = format!("slow consumer {policy} hwm {hwm}, 500×4K, yield/10 batches");
        let opts = PushOptions::new().hwm(hwm).policy(policy);
        let (cost, (written, d)) = measure_raw(|| run_push(n, CHUNK, opts, Duration::ZERO, 10));
        let note = check(&name, n, CHUNK, policy, written, d);
        reports.push(
            Report::new(name, n, cost)
                .bounded((2 * hwm + 1) * CHUNK + allowance(hwm))
                .note(format!(
                    "{note}, {:.2} ms",
                    cost.elapsed.as_secs_f64() * 1e3
                )),
        );
    }

    // Sustained: 100 MB through a push pair at the default hwm (4).
    let n = sustained(full);
    let hwm = 4;
    let name = format!(
        "push sustained {} MB, strict hwm {hwm}",
        n * CHUNK / 1_000_000
    );
    let opts = PushOptions::new().hwm(hwm);
    let (cost, (written, d)) = measure_raw(|| run_push(n, CHUNK, opts, Duration::ZERO, 0));
    let note = check(&name, n, CHUNK, Backpressure::Strict, written, d);
    reports.push(
        Report::new(name, n, cost)
            .bounded((2 * hwm + 1) * CHUNK + allowance(hwm))
            .note(format!(
                "{note}, {:.0} ms",
                cost.elapsed.as_secs_f64() * 1e3
            )),
    );
    reports
}
