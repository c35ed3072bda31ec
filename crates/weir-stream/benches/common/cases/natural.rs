//! N01–N07, natural code: weir-stream used the way a user of its public API
//! writes it, against the code the same user would write without it.
//!
//! Every other family feeds the core through the bench's own `ChunkSource`
//! and stages tuned for it. Here nothing is tuned: sources are the crate's
//! own (`from_iter` at its default batch, `from_stream` and `from_results`
//! at one chunk per batch), stages are closures over the public helpers,
//! and every consumer is the plain loop
//! `while let Some(b) = s.next_batch().await { for c in &b? { .. } }`.
//!
//! - (a) `a/futures`: `futures::stream::iter(chunks).map(f)`, drained one
//!   item per poll; `a/iter` for the sync case, a plain `Iterator` chain.
//! - (b) `b/mpsc1`, `b/mpsc16`: a task per stage and a bounded channel
//!   between each (capacity 1, the WHATWG default, and 16).
//!
//! - (f) floors, written by hand without the crate, for the two targets
//!   that stay open: `f/batch_move` moves chunks into a reused list under
//!   the default batch limits and reads them by reference (the least any
//!   design that hands out owned batches does per chunk); `f/share_rc`
//!   does the same and gives a second reader its own handle on each
//!   batch, a reference count and no lock (the least a fan-out of owned
//!   batches does).
//!
//! Contenders: `weir/default` (`from_iter`, default batch limits),
//! `weir/b1` (`from_results`, one chunk per item), `weir/stream_b1`
//! (`from_stream`), `weir/sync` (`pull_sync`), `weir/share2` (two
//! consumers of one `share()`) and `weir/pull1` (the same source, one
//! consumer). Issue 14's targets are read off this family.

use std::convert::Infallible;

use bytes::Bytes;
use futures_util::{StreamExt, stream};
use weir_stream::adapt::{from_results, from_stream};
use weir_stream::{
    Batch, Source, SourceExt, TransformExt, from_iter, map_chunks, pull_sync, share,
};

use super::{expect, on_current, on_multi};
use crate::common::baseline::{a_drain, b_chain, spawn_stages};
use crate::common::check::{Count, Digest, Sink, Tally};
use crate::common::harness::Case;
use crate::common::input::{Input, shape};
use crate::common::stages::{KEY, Op};

/// Every natural-code case (`benches/natural.rs`).
pub fn all() -> Vec<Case> {
    [n01(), n01_made(), n02(), n03(), n04(), n05(), n06()]
        .into_iter()
        .flatten()
        .collect()
}

// ---- the user's code ----

/// The consumer loop a user writes: each batch, each chunk by reference.
async fn drain<K: Sink, S: Source + Unpin>(mut s: S) -> Tally {
    let mut t = Tally::default();
    while let Some(batch) = s.next_batch().await {
        let batch = batch.expect("a natural pipeline failed");
        for c in &batch {
            t.add::<K>(c);
        }
    }
    t
}

/// The allocating stage: a new buffer per chunk, every byte XORed.
#[inline]
fn xor_alloc(c: Bytes) -> Bytes {
    let mut out = Vec::with_capacity(c.len());
    out.extend(c.iter().map(|b| b ^ KEY));
    Bytes::from(out)
}

/// Chunk `i` of the generated source: a fresh 4 KiB buffer.
#[inline]
fn generate(i: usize) -> Bytes {
    Bytes::from(vec![(i % 251) as u8 + 1; GEN_CHUNK])
}

const GEN_CHUNK: usize = 4096;

/// One chunk per item, as `from_results` wants it.
fn items(v: Vec<Bytes>) -> impl Iterator<Item = weir_stream::BatchResult> {
    v.into_iter().map(|c| Ok(Batch::one(c)))
}

/// The one-item `Stream` a user has at hand.
fn one_item_stream(v: Vec<Bytes>) -> impl futures_core::Stream<Item = Result<Bytes, Infallible>> {
    stream::iter(v.into_iter().map(Ok))
}

/// Adds the three weir sources around `stage` (`None`: no stage).
fn with_weir<K, F, T>(case: Case, stage: F) -> Case
where
    K: Sink,
    F: Fn() -> T + Clone + 'static,
    T: weir_stream::Transform + Unpin + 'static,
{
    let (s1, s2) = (stage.clone(), stage.clone());
    case.core("weir/default", move |v| {
        on_current(drain::<K, _>(from_iter(v).then(s1())))
    })
    .core("weir/b1", move |v| {
        on_current(drain::<K, _>(from_results(items(v)).then(s2())))
    })
    .core("weir/stream_b1", move |v| {
        on_current(drain::<K, _>(from_stream(one_item_stream(v)).then(stage())))
    })
}

/// Adds (b) at capacity 1 and 16 over `ops`.
fn with_b<K: Sink>(case: Case, ops: &'static [Op]) -> Case {
    case.baseline("b/mpsc1", move |v| on_multi(b_chain::<K>(v, ops, 1)))
        .baseline("b/mpsc16", move |v| on_multi(b_chain::<K>(v, ops, 16)))
}

/// Floor (f): `v` in batches under the default limits, each moved into
/// one reused list, handed to `each` by reference, then cleared.
#[inline(never)]
fn batch_move(v: Vec<Bytes>, mut each: impl FnMut(&mut Vec<Bytes>)) {
    let limits = weir_stream::BatchLimits::DEFAULT;
    let mut it = v.into_iter().peekable();
    let mut list = Vec::with_capacity(limits.chunks);
    while it.peek().is_some() {
        let mut bytes = 0;
        while let Some(c) = it.next_if(|_| limits.has_room(list.len(), bytes)) {
            bytes += c.len();
            list.push(c);
            // A chunk of half the limit or more travels alone, as in `from_iter`.
            if bytes >= limits.bytes / 2 && list.len() == 1 {
                break;
            }
        }
        each(&mut list);
        list.clear();
    }
}

// ---- N01: pass-through ----

/// No stage: source to consumer.
pub fn n01() -> Vec<Case> {
    [(1024, 20_000), (16 * 1024, 4_000)]
        .into_iter()
        .map(|(size, count)| {
            let input = Input::shared(size, count);
            let e = expect::<Count>(&input, &[]);
            let case = Case::new(format!("N01/pass/{}", shape(size, count)), input, e, true);
            let case = with_weir::<Count, _, _>(case, || ());
            let case = case
                .baseline("a/futures", |v| {
                    on_current(a_drain::<Count, _>(stream::iter(v)))
                })
                .baseline("f/batch_move", |v| {
                    let mut t = Tally::default();
                    batch_move(v, |list| {
                        for c in list.iter() {
                            t.add::<Count>(c);
                        }
                    });
                    t
                });
            with_b::<Count>(case, &[])
        })
        .collect()
}

/// Chunk `i` of the made source: a zero-copy slice of a small, hot pool.
#[inline]
fn made(pool: &Bytes, i: usize) -> Bytes {
    let off = (i * 64) % 4096;
    pool.slice(off..off + 1024)
}

/// No stage, over a source that makes its chunks as it is pulled (a
/// socket's pace, hot in the cache), instead of a list built beforehand
/// (which the timed loop reads from memory, cold).
pub fn n01_made() -> Vec<Case> {
    let count = 20_000;
    let input = Input::shared(1024, count);
    let e = Tally {
        bytes: (count * 1024) as u64,
        chunks: count as u64,
        sum: 0,
        xor: 0,
    };
    let pool = || Bytes::from(vec![7u8; 8192]);
    let case = Case::new(format!("N01/made/{}", shape(1024, count)), input, e, true)
        .core("weir/default", move |v| {
            let p = pool();
            on_current(drain::<Count, _>(from_iter(
                (0..v.len()).map(|i| made(&p, i)),
            )))
        })
        .core("weir/b1", move |v| {
            let p = pool();
            on_current(drain::<Count, _>(from_results(
                (0..v.len()).map(|i| Ok(Batch::one(made(&p, i)))),
            )))
        })
        .baseline("a/futures", move |v| {
            let p = pool();
            on_current(a_drain::<Count, _>(stream::iter(
                (0..v.len()).map(|i| made(&p, i)),
            )))
        });
    vec![case]
}

// ---- N02: identity stages ----

/// One and three per-chunk identity stages (`map_chunks(|c| c)`).
pub fn n02() -> Vec<Case> {
    let mut out = Vec::new();
    for (size, count) in [(1024, 20_000), (16 * 1024, 4_000)] {
        let input = Input::shared(size, count);
        let e = expect::<Count>(&input, &[Op::Id]);
        let case = Case::new(
            format!("N02/identity1/{}", shape(size, count)),
            input,
            e,
            true,
        );
        let case = with_weir::<Count, _, _>(case, || map_chunks(|c: Bytes| c));
        let case = case.baseline("a/futures", |v| {
            on_current(a_drain::<Count, _>(stream::iter(v).map(|c| c)))
        });
        out.push(with_b::<Count>(case, &[Op::Id]));

        let input = Input::shared(size, count);
        let e = expect::<Count>(&input, &[Op::Id, Op::Id, Op::Id]);
        let case = Case::new(
            format!("N02/identity3/{}", shape(size, count)),
            input,
            e,
            true,
        );
        let case = with_weir::<Count, _, _>(case, || {
            map_chunks(|c: Bytes| c)
                .then(map_chunks(|c: Bytes| c))
                .then(map_chunks(|c: Bytes| c))
        });
        let case = case.baseline("a/futures", |v| {
            on_current(a_drain::<Count, _>(
                stream::iter(v).map(|c| c).map(|c| c).map(|c| c),
            ))
        });
        out.push(with_b::<Count>(case, &[Op::Id, Op::Id, Op::Id]));
    }
    out
}

// ---- N03: an allocating stage ----

/// A stage that allocates a new 8 KiB buffer per chunk and XORs every byte.
pub fn n03() -> Vec<Case> {
    let (size, count) = (8 * 1024, 4_000);
    let input = Input::shared(size, count);
    let e = expect::<Digest>(&input, &[Op::Xor(KEY)]);
    let case = Case::new(
        format!("N03/xor_alloc/{}", shape(size, count)),
        input,
        e,
        false,
    );
    let case = with_weir::<Digest, _, _>(case, || map_chunks(xor_alloc));
    let case = case.baseline("a/futures", |v| {
        on_current(a_drain::<Digest, _>(stream::iter(v).map(xor_alloc)))
    });
    vec![with_b::<Digest>(case, &[Op::Xor(KEY)])]
}

// ---- N04: a generated source ----

/// 100 MB of fresh 4 KiB chunks made by the source itself (no input).
pub fn n04() -> Vec<Case> {
    let count = 100_000_000 / GEN_CHUNK;
    // The input only says how many chunks to make; nothing reads it.
    let input = Input::shared(GEN_CHUNK, count);
    let e = Tally {
        bytes: (count * GEN_CHUNK) as u64,
        chunks: count as u64,
        sum: 0,
        xor: 0,
    };
    let id = format!("N04/generated/{}", shape(GEN_CHUNK, count));
    let case = Case::new(id, input, e, true)
        .core("weir/default", |v| {
            on_current(drain::<Count, _>(from_iter((0..v.len()).map(generate))))
        })
        .core("weir/b1", |v| {
            on_current(drain::<Count, _>(from_results(
                (0..v.len()).map(|i| Ok(Batch::one(generate(i)))),
            )))
        })
        .core("weir/stream_b1", |v| {
            on_current(drain::<Count, _>(from_stream(stream::iter(
                (0..v.len()).map(|i| Ok::<_, Infallible>(generate(i))),
            ))))
        })
        .baseline("a/futures", |v| {
            on_current(a_drain::<Count, _>(stream::iter(
                (0..v.len()).map(generate),
            )))
        })
        .baseline("b/mpsc1", |v| on_multi(b_generated(v.len(), 1)))
        .baseline("b/mpsc16", |v| on_multi(b_generated(v.len(), 16)));
    vec![case]
}

/// Baseline (b) of N04: a source task generating into a channel, a sink task.
async fn b_generated(count: usize, cap: usize) -> Tally {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(cap);
    tokio::spawn(async move {
        for i in 0..count {
            if tx.send(generate(i)).await.is_err() {
                return;
            }
        }
    });
    let mut rx = spawn_stages(rx, &[], cap);
    tokio::spawn(async move {
        let mut t = Tally::default();
        while let Some(c) = rx.recv().await {
            t.add::<Count>(&c);
        }
        t
    })
    .await
    .expect("baseline (b) sink task panicked")
}

// ---- N05: share, two consumers ----

/// Two consumers of one `share()`, polled by one task, against one
/// consumer of the same source.
pub fn n05() -> Vec<Case> {
    [(1024, 20_000), (16 * 1024, 4_000)]
        .into_iter()
        .map(|(size, count)| {
            let input = Input::shared(size, count);
            let one = expect::<Count>(&input, &[]);
            let e = one.plus(one);
            let id = format!("N05/share2/{}", shape(size, count));
            Case::new(id, input, e, true)
                .core("weir/share2", |v| {
                    on_current(async move {
                        let s = share(from_iter(v), Default::default());
                        let (a, b) = (s.pull(), s.pull());
                        drop(s);
                        let (ta, tb) = tokio::join!(drain::<Count, _>(a), drain::<Count, _>(b));
                        ta.plus(tb)
                    })
                })
                .baseline("f/share_rc", |v| {
                    // Each batch: one chunk is cloned, a list goes behind an
                    // `Arc` and is cloned; each reader reads its handle and
                    // drops it (as `Batch::clone_shared` does).
                    let (mut ta, mut tb) = (Tally::default(), Tally::default());
                    batch_move(v, |list| {
                        if list.len() == 1 {
                            let (a, b) = (list[0].clone(), list.pop());
                            ta.add::<Count>(&a);
                            drop(a);
                            if let Some(b) = b {
                                tb.add::<Count>(&b);
                            }
                        } else {
                            let a = std::sync::Arc::new(std::mem::take(list));
                            let b = std::sync::Arc::clone(&a);
                            for c in a.iter() {
                                ta.add::<Count>(c);
                            }
                            drop(a);
                            for c in b.iter() {
                                tb.add::<Count>(c);
                            }
                            // The last reader hands the list back for reuse.
                            if let Ok(back) = std::sync::Arc::try_unwrap(b) {
                                *list = back;
                            }
                        }
                    });
                    ta.plus(tb)
                })
                .core("weir/pull1", |v| {
                    // The same work for the one consumer, counted twice.
                    let t = on_current(drain::<Count, _>(from_iter(v)));
                    t.plus(t)
                })
        })
        .collect()
}

// ---- N06: sync ----

/// `pull_sync` over chunks with one identity stage, on the bench thread.
// The identity `map` is the stage being measured.
#[allow(clippy::map_identity)]
pub fn n06() -> Vec<Case> {
    [(1024, 20_000), (8 * 1024, 4_000)]
        .into_iter()
        .map(|(size, count)| {
            let input = Input::shared(size, count);
            let e = expect::<Count>(&input, &[Op::Id]);
            let id = format!("N06/sync_identity1/{}", shape(size, count));
            Case::new(id, input, e, true)
                .core("weir/sync", |v| {
                    let mut t = Tally::default();
                    for batch in pull_sync(v, map_chunks(|c: Bytes| c)) {
                        for c in &batch.expect("a natural sync pipeline failed") {
                            t.add::<Count>(c);
                        }
                    }
                    t
                })
                .baseline("a/iter", |v| {
                    let mut t = Tally::default();
                    for c in v.into_iter().map(|c| c) {
                        t.add::<Count>(&c);
                    }
                    t
                })
        })
        .collect()
}
