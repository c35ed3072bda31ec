//! The batch container: `Vec<Bytes>` (what `Batch` holds today) against
//! `SmallVec<[Bytes; N]>` (the issue asks to measure and pick).
//!
//! One iteration handles 1024 batches of `k` chunks (k = 1, 4, 16, 128):
//! build the batch (push `k` chunks), move it through 3 stages in the shape
//! a pipeline hands it on (`Poll<Option<Result<_, StreamError>>>`), opaque
//! (every move copies) or inlined (moves may be elided), then drain it (by-value iteration, summing lengths). Chunks are
//! `Bytes::from_static` clones, so cloning and dropping them costs no
//! atomic: what is left is the container's own cost (its allocation and
//! the bytes each move copies). The conclusion is in `benches/README.md`.

use std::hint::black_box;
use std::task::Poll;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use smallvec::SmallVec;
use weir_stream::StreamError;

/// Batches per iteration.
const BATCHES: usize = 1024;
static DATA: [u8; 1024] = [7; 1024];

/// What a container must do for this measurement.
trait Container: IntoIterator<Item = Bytes> + Sized {
    fn with_capacity(n: usize) -> Self;
    fn push(&mut self, b: Bytes);
}

impl Container for Vec<Bytes> {
    #[inline]
    fn with_capacity(n: usize) -> Self {
        Vec::with_capacity(n)
    }
    #[inline]
    fn push(&mut self, b: Bytes) {
        Vec::push(self, b)
    }
}

impl<const N: usize> Container for SmallVec<[Bytes; N]>
where
    [Bytes; N]: smallvec::Array<Item = Bytes>,
{
    #[inline]
    fn with_capacity(n: usize) -> Self {
        SmallVec::with_capacity(n)
    }
    #[inline]
    fn push(&mut self, b: Bytes) {
        SmallVec::push(self, b)
    }
}

type Polled<C> = Poll<Option<Result<C, StreamError>>>;

/// One hand-off, as a pipeline stage does it; opaque so the move happens
/// (the worst case for an inline container: every hand-off copies it).
#[inline(never)]
fn opaque_stage<C>(p: Polled<C>) -> Polled<C> {
    black_box(p)
}

/// One hand-off the compiler may see through (the best case for an inline
/// container: moves can be elided, as in a fully inlined fused pipeline).
#[inline(always)]
fn inlined_stage<C>(p: Polled<C>) -> Polled<C> {
    p
}

#[inline]
fn one_batch<C: Container>(k: usize, chunk: &Bytes, opaque: bool) -> usize {
    let mut c = C::with_capacity(k);
    for _ in 0..k {
        c.push(chunk.clone());
    }
    let p = Poll::Ready(Some(Ok(c)));
    let p = if opaque {
        opaque_stage(opaque_stage(opaque_stage(p)))
    } else {
        inlined_stage(inlined_stage(inlined_stage(p)))
    };
    let Poll::Ready(Some(Ok(c))) = p else {
        unreachable!("the stages hand the batch back")
    };
    c.into_iter().map(|b| b.len()).sum()
}

fn run<C: Container>(k: usize, chunk: &Bytes, opaque: bool) -> usize {
    let mut total = 0;
    for _ in 0..BATCHES {
        total += one_batch::<C>(black_box(k), chunk, opaque);
    }
    assert_eq!(total, BATCHES * k * chunk.len(), "lost chunks");
    total
}

fn containers(c: &mut Criterion) {
    let chunk = Bytes::from_static(&DATA);
    for (moves, opaque) in [("opaque", true), ("inlined", false)] {
        for k in [1usize, 4, 16, 128] {
            let mut g = c.benchmark_group(format!("batch_container/{moves}/k{k}"));
            g.throughput(Throughput::Elements((BATCHES * k) as u64));
            g.bench_function("vec", |b| b.iter(|| run::<Vec<Bytes>>(k, &chunk, opaque)));
            g.bench_function("smallvec1", |b| {
                b.iter(|| run::<SmallVec<[Bytes; 1]>>(k, &chunk, opaque))
            });
            g.bench_function("smallvec4", |b| {
                b.iter(|| run::<SmallVec<[Bytes; 4]>>(k, &chunk, opaque))
            });
            g.bench_function("smallvec8", |b| {
                b.iter(|| run::<SmallVec<[Bytes; 8]>>(k, &chunk, opaque))
            });
            g.finish();
        }
    }
}

criterion_group!(benches, containers);
criterion_main!(benches);
