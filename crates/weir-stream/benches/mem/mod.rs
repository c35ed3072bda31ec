//! The scenarios of `memory.rs`, one file per family, and what they share:
//! lazy inputs, the slow reader, the bookkeeping allowance.

pub mod churn;
pub mod consume;
pub mod multi;
pub mod pull;
pub mod push;
pub mod sink;

use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_stream::{Source, SourceExt};

use crate::common::input::pool;
use crate::common::source::ChunkSource;

/// The chunk size of the sustained runs: 4 KB (25,000 × 4 KB ≈ 100 MB).
pub const CHUNK: usize = 4096;
/// Chunks of a sustained run (100 MB), or a tenth under `cargo test`.
pub fn sustained(full: bool) -> usize {
    if full { 25_000 } else { 2_500 }
}

/// Bytes a stream may hold besides the chunks it holds: tasks, the slot
/// ring, the vector of a taken batch, wakers. 16 KiB, plus 256 bytes per
/// hwm slot (a slot, a batch entry and a pending entry are 32–64 bytes each).
pub fn allowance(hwm: usize) -> usize {
    16 * 1024 + 256 * hwm
}

/// Chunk `i` of `size` bytes: a slice of the pool (shared) or a fresh copy
/// (owned, like a socket read).
pub fn chunk(i: usize, size: usize, owned: bool) -> Bytes {
    let off = (i * 64) % 4096;
    if owned {
        Bytes::copy_from_slice(&pool()[off..off + size])
    } else {
        pool().slice(off..off + size)
    }
}

/// An owned chunk of `size` bytes whose first 8 bytes are `i`, so a reader
/// can check order and count what a drop policy discarded.
pub fn indexed(i: usize, size: usize) -> Bytes {
    let off = (i * 64) % 4096;
    let mut v = pool()[off..off + size].to_vec();
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    Bytes::from(v)
}

/// The index [`indexed`] wrote.
pub fn index_of(c: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&c[..8]);
    u64::from_le_bytes(b)
}

/// A lazy source of `n` chunks of `size` bytes, `per_batch` per batch:
/// nothing of the input is resident up front.
pub fn lazy(
    n: usize,
    size: usize,
    owned: bool,
    per_batch: usize,
) -> ChunkSource<impl ExactSizeIterator<Item = Bytes> + Unpin + Send + 'static> {
    ChunkSource::new((0..n).map(move |i| chunk(i, size, owned)), per_batch)
}

/// Busy-waits `d`: a consumer doing CPU work on each batch, slower than
/// the writer, without timers.
pub fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// What a slow reader of [`indexed`] chunks saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Delivered {
    /// Chunks received.
    pub chunks: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Batches received.
    pub batches: u64,
}

/// Drains `s`, spinning `work` per batch (with the batch held) and
/// yielding to the runtime every `yield_every` batches; panics if the
/// chunk indices do not strictly increase (a loss is fine, a duplicate or
/// a reordering is not).
pub async fn slow_drain<S: Source + Unpin>(
    mut s: S,
    work: Duration,
    yield_every: u64,
) -> Delivered {
    let mut d = Delivered::default();
    let mut last: Option<u64> = None;
    while let Some(batch) = s.next_batch().await {
        let batch = batch.expect("a bench stream failed");
        for c in batch.chunks() {
            let i = index_of(c);
            assert!(
                last.is_none_or(|l| i > l),
                "chunk {i} after {last:?}: duplicated or reordered"
            );
            last = Some(i);
            d.chunks += 1;
            d.bytes += c.len() as u64;
        }
        d.batches += 1;
        spin(work);
        drop(batch);
        if yield_every > 0 && d.batches % yield_every == 0 {
            tokio::task::yield_now().await;
        }
    }
    d
}
