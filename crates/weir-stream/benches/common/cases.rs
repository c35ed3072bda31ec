//! The scenario table (plan, section 3, "Scenarios"): one function per
//! scenario ID, each returning its cases. Sizes are the seeds' so ratios
//! line up. Contender names: `pull/b1` and `pull/b128` are the core's pull
//! pipeline fed 1 or 128 chunks per batch; `a/*`, `b/mpsc1`, `b/mpsc16`,
//! `c1/*`, `c2/*`, `c3/*` are the baselines of `baseline.rs`.

use std::cell::RefCell;
use std::future::Future;

use bytes::Bytes;
use futures_core::Stream;
use futures_util::{StreamExt, stream};
use weir_stream::{Batch, Transform, TransformExt, from_iter, once, pull, transform_fn};

use super::baseline::{
    CoalesceStream, Split2Stream, a_drain, b_chain, b_chain_from, c1_drain, c1_iter, c2_copy,
    c3_coalesce, c3_xor,
};
use super::check::{Count, Digest, Sink, Tally};
use super::drive::pull_drain;
use super::harness::Case;
use super::input::{Input, shape};
use super::rt;
use super::source::{ChunkSource, chunks};
use super::stages::{
    COALESCE, Coalesce, Identity, KEY, KEYS, Op, Split2, Xor, own, reference, xor, xor_batch,
};

// ---- the lists the bench binaries run ----

/// The pull scenarios (`benches/pull.rs`).
pub fn pull_scenarios() -> Vec<Case> {
    [b01(), b04(), b05(), b06(), b08(), b11()]
        .into_iter()
        .flatten()
        .collect()
}

/// The scenarios of modules still being written (`benches/model.rs`).
pub fn model_scenarios() -> Vec<Case> {
    [b02(), b03(), b06_pipe_to(), b07(), b09()]
        .into_iter()
        .flatten()
        .collect()
}

/// Every scenario (`benches/paired.rs`).
pub fn all() -> Vec<Case> {
    [pull_scenarios(), b12(), model_scenarios()]
        .into_iter()
        .flatten()
        .collect()
}

// ---- building blocks ----

/// The tally sink `K` must see: the reference stages run the plain way.
pub fn expect<K: Sink>(input: &Input, ops: &[Op]) -> Tally {
    let mut t = Tally::default();
    for c in reference(input.make(), ops) {
        t.add::<K>(&c);
    }
    t
}

/// Runs `f` on the `current_thread` runtime.
pub fn on_current<F: Future>(f: F) -> F::Output {
    rt::current().block_on(f)
}

/// Runs `f` on the 2-worker `multi_thread` runtime.
pub fn on_multi<F: Future>(f: F) -> F::Output {
    rt::multi().block_on(f)
}

/// Adds `pull/b1` and `pull/b128`: `pull(source, make())` drained into `K`.
pub fn with_pull<K, T, F>(case: Case, prefix: &str, make: F) -> Case
where
    K: Sink,
    T: Transform + Unpin + 'static,
    F: Fn() -> T + Clone + 'static,
{
    let m1 = make.clone();
    case.core(&format!("{prefix}/b1"), move |v| {
        on_current(pull_drain::<K, _>(pull(chunks(v, 1), m1())))
    })
    .core(&format!("{prefix}/b128"), move |v| {
        on_current(pull_drain::<K, _>(pull(chunks(v, 128), make())))
    })
}

/// Adds baseline (a): `build(chunks)` is the one-item stream, drained into `K`.
pub fn with_a<K, S, F>(case: Case, build: F) -> Case
where
    K: Sink,
    S: Stream<Item = Bytes> + Unpin,
    F: Fn(Vec<Bytes>) -> S + 'static,
{
    case.baseline("a/futures", move |v| on_current(a_drain::<K, _>(build(v))))
}

/// Adds baseline (b) at capacity 1 and 16: one task and channel per op.
pub fn with_b<K: Sink>(case: Case, ops: &[Op]) -> Case {
    let (o1, o16) = (ops.to_vec(), ops.to_vec());
    case.baseline("b/mpsc1", move |v| on_multi(b_chain::<K>(v, &o1, 1)))
        .baseline("b/mpsc16", move |v| on_multi(b_chain::<K>(v, &o16, 16)))
}

/// Adds (c1): iterate the slices, summing lengths (`c1/iter`), and the
/// same loop consuming the chunks, so each is dropped in the timed region
/// as in every streaming contender (`c1/drain`).
pub fn with_c1(case: Case) -> Case {
    case.baseline_ref("c1/iter", c1_iter)
        .baseline("c1/drain", c1_drain)
}

/// Adds (c2): copy into a preallocated buffer (allocated on first use).
pub fn with_c2(case: Case) -> Case {
    let buf = RefCell::new(Vec::new());
    case.baseline_ref("c2/memcpy", move |v| c2_copy(v, &mut buf.borrow_mut()))
}

/// Adds (c3): the XOR chain `keys` straight over the slices.
pub fn with_c3_xor(case: Case, keys: &'static [u8]) -> Case {
    case.baseline_ref("c3/xor", move |v| c3_xor(v, keys))
}

/// A one-item identity stage for baseline (a).
#[inline]
pub fn ident(c: Bytes) -> Bytes {
    c
}

/// A fused chain of 3 identity stages.
pub fn fused3() -> impl Transform + Unpin + Clone {
    Identity.then(Identity).then(Identity)
}

/// A fused chain of 8 identity stages.
pub fn fused8() -> impl Transform + Unpin + Clone {
    Identity
        .then(Identity)
        .then(Identity)
        .then(Identity)
        .then(Identity)
        .then(Identity)
        .then(Identity)
        .then(Identity)
}

/// `depth` identity stages, each behind `Box<dyn Transform>`: the slow
/// twin of the fused chain (FAST-001).
pub fn boxed_chain(depth: usize) -> Box<dyn Transform> {
    let mut t: Box<dyn Transform> = Box::new(Identity);
    for _ in 1..depth {
        let next: Box<dyn Transform> = Box::new(Identity);
        t = Box::new(t.then(next));
    }
    t
}

// ---- B01: raw throughput ----

/// B01: raw throughput, source → counting loop, no transform.
/// pull (`()` transform, batch 1 and 128, and the core's `from_iter`) vs
/// (a), (b), (c1), (c2).
// TODO(B01, pull_sync/consume): add `pull_sync/b1`, `pull_sync/b128`, and the
// `bytes()` consumer as a second sink (vs c2) once sync_pull/consume land.
pub fn b01() -> Vec<Case> {
    let shapes = [
        (64 << 10, 500),
        (8 << 10, 2000),
        (1 << 10, 5000),
        (100, 10000),
        // 100 MiB per iteration (fast-webstreams sizes).
        (1 << 10, 102_400),
        (16 << 10, 6400),
        (64 << 10, 1600),
        (1 << 20, 100),
    ];
    shapes
        .iter()
        .map(|&(size, count)| {
            let input = Input::shared(size, count);
            let expect = expect::<Count>(&input, &[]);
            let mut case = Case::new(
                format!("B01/raw/{}", shape(size, count)),
                input,
                expect,
                true,
            );
            case = with_pull::<Count, _, _>(case, "pull", || ());
            case = case.core("pull/from_iter", |v| {
                on_current(pull_drain::<Count, _>(pull(from_iter(v), ())))
            });
            case = with_a::<Count, _, _>(case, stream::iter);
            case = with_b::<Count>(case, &[]);
            with_c2(with_c1(case))
        })
        .collect()
}

// ---- B04: transforms ----

/// B04: identity 8K×1000, XOR 8K×500, expand 1:2 4K×500, 3 chained
/// (nested pipelines) 8K×500, stateless XOR (a closure) 4K×500.
// TODO(B04, stateful): add `stateful XOR 4K×500` next to the stateless case
// once `weir_stream::stateful` lands; and `async transform 8K×300` once the
// async-stage adapter (adapt.rs) exists.
pub fn b04() -> Vec<Case> {
    let mut cases = Vec::new();

    let input = Input::shared(8 << 10, 1000);
    let mut case = Case::new(
        format!("B04/identity/{}", shape(8 << 10, 1000)),
        input.clone(),
        expect::<Count>(&input, &[Op::Id]),
        true,
    );
    case = with_pull::<Count, _, _>(case, "pull", || Identity);
    case = with_a::<Count, _, _>(case, |v| stream::iter(v).map(ident));
    case = with_b::<Count>(case, &[Op::Id]);
    cases.push(with_c1(case));

    let input = Input::shared(8 << 10, 500);
    let mut case = Case::new(
        format!("B04/xor/{}", shape(8 << 10, 500)),
        input.clone(),
        expect::<Digest>(&input, &[Op::Xor(KEY)]),
        false,
    );
    case = with_pull::<Digest, _, _>(case, "pull", || Xor(KEY));
    case = with_a::<Digest, _, _>(case, |v| stream::iter(v).map(|c| xor(c, KEY)));
    case = with_b::<Digest>(case, &[Op::Xor(KEY)]);
    cases.push(with_c3_xor(case, &[KEY]));

    let input = Input::shared(4 << 10, 500);
    let mut case = Case::new(
        format!("B04/expand_1to2/{}", shape(4 << 10, 500)),
        input.clone(),
        expect::<Count>(&input, &[Op::Split2]),
        true,
    );
    case = with_pull::<Count, _, _>(case, "pull", || Split2);
    case = with_a::<Count, _, _>(case, |v| Split2Stream::new(stream::iter(v)));
    case = with_b::<Count>(case, &[Op::Split2]);
    // (c1) for a 1:2 stage: iterate the slices, counting both halves.
    cases.push(case.baseline_ref("c1/iter", |v| {
        let mut t = Tally::default();
        for c in v {
            let half = c.len() / 2;
            t.add::<Count>(&c[..half]);
            t.add::<Count>(&c[half..]);
        }
        t
    }));

    // Three pipelines nested (each a Source), not fused: the pipeThrough shape.
    let input = Input::shared(8 << 10, 500);
    let mut case = Case::new(
        format!("B04/chained3_nested/{}", shape(8 << 10, 500)),
        input.clone(),
        expect::<Count>(&input, &[Op::Id, Op::Id, Op::Id]),
        true,
    );
    for n in [1usize, 128] {
        case = case.core(&format!("pull/b{n}"), move |v| {
            let p = pull(pull(pull(chunks(v, n), Identity), Identity), Identity);
            on_current(pull_drain::<Count, _>(p))
        });
    }
    case = with_a::<Count, _, _>(case, |v| stream::iter(v).map(ident).map(ident).map(ident));
    case = with_b::<Count>(case, &[Op::Id, Op::Id, Op::Id]);
    cases.push(with_c1(case));

    // A plain closure stage (stateless), as a user would write one.
    let input = Input::shared(4 << 10, 500);
    let mut case = Case::new(
        format!("B04/xor_stateless_fn/{}", shape(4 << 10, 500)),
        input.clone(),
        expect::<Digest>(&input, &[Op::Xor(KEY)]),
        false,
    );
    case = with_pull::<Digest, _, _>(case, "pull", || {
        transform_fn(|b: Option<Batch>| Ok(b.map(|b| xor_batch(b, KEY))))
    });
    case = with_a::<Digest, _, _>(case, |v| stream::iter(v).map(|c| xor(c, KEY)));
    case = with_b::<Digest>(case, &[Op::Xor(KEY)]);
    cases.push(with_c3_xor(case, &[KEY]));

    cases
}

// ---- B05: chain depth ----

/// B05: 1, 3 and 8 identity stages at 1K and 16K chunks (10 MiB), fused
/// (`then`) and boxed (`Box<dyn Transform>` per stage, the slow twin).
pub fn b05() -> Vec<Case> {
    let mut cases = Vec::new();
    for (size, count) in [(1 << 10, 10_240), (16 << 10, 640)] {
        for depth in [1usize, 3, 8] {
            let input = Input::shared(size, count);
            let ops = vec![Op::Id; depth];
            let mut case = Case::new(
                format!("B05/depth{depth}/{}", shape(size, count)),
                input.clone(),
                expect::<Count>(&input, &ops),
                true,
            );
            case = match depth {
                1 => with_pull::<Count, _, _>(case, "pull", || Identity),
                3 => with_pull::<Count, _, _>(case, "pull", fused3),
                _ => with_pull::<Count, _, _>(case, "pull", fused8),
            };
            case = with_pull::<Count, _, _>(case, "pull_dyn", move || boxed_chain(depth));
            case = match depth {
                1 => with_a::<Count, _, _>(case, |v| stream::iter(v).map(ident)),
                3 => with_a::<Count, _, _>(case, |v| {
                    stream::iter(v).map(ident).map(ident).map(ident)
                }),
                _ => with_a::<Count, _, _>(case, |v| {
                    stream::iter(v)
                        .map(ident)
                        .map(ident)
                        .map(ident)
                        .map(ident)
                        .map(ident)
                        .map(ident)
                        .map(ident)
                        .map(ident)
                }),
            };
            case = with_b::<Count>(case, &ops);
            cases.push(with_c1(case));
        }
    }
    cases
}

// ---- B06: pipelines (pull part) ----

/// B06, pull part: simple 8K×1000 (no stage), +XOR 8K×1000, 3-stage fused
/// 8K×500, high-frequency 64B×20000 through one stage.
// TODO(B06, pipe_to): see `b06_pipe_to`.
pub fn b06() -> Vec<Case> {
    let mut cases = Vec::new();

    let input = Input::shared(8 << 10, 1000);
    let mut case = Case::new(
        format!("B06/simple/{}", shape(8 << 10, 1000)),
        input.clone(),
        expect::<Count>(&input, &[]),
        true,
    );
    case = with_pull::<Count, _, _>(case, "pull", || ());
    case = with_a::<Count, _, _>(case, stream::iter);
    case = with_b::<Count>(case, &[]);
    cases.push(with_c1(case));

    let input = Input::shared(8 << 10, 1000);
    let mut case = Case::new(
        format!("B06/xor/{}", shape(8 << 10, 1000)),
        input.clone(),
        expect::<Digest>(&input, &[Op::Xor(KEY)]),
        false,
    );
    case = with_pull::<Digest, _, _>(case, "pull", || Xor(KEY));
    case = with_a::<Digest, _, _>(case, |v| stream::iter(v).map(|c| xor(c, KEY)));
    case = with_b::<Digest>(case, &[Op::Xor(KEY)]);
    cases.push(with_c3_xor(case, &[KEY]));

    let input = Input::shared(8 << 10, 500);
    let mut case = Case::new(
        format!("B06/stage3_fused/{}", shape(8 << 10, 500)),
        input.clone(),
        expect::<Count>(&input, &[Op::Id, Op::Id, Op::Id]),
        true,
    );
    case = with_pull::<Count, _, _>(case, "pull", fused3);
    case = with_a::<Count, _, _>(case, |v| stream::iter(v).map(ident).map(ident).map(ident));
    case = with_b::<Count>(case, &[Op::Id, Op::Id, Op::Id]);
    cases.push(with_c1(case));

    let input = Input::shared(64, 20_000);
    let mut case = Case::new(
        format!("B06/tiny/{}", shape(64, 20_000)),
        input.clone(),
        expect::<Count>(&input, &[Op::Id]),
        true,
    );
    case = with_pull::<Count, _, _>(case, "pull", || Identity);
    case = with_a::<Count, _, _>(case, |v| stream::iter(v).map(ident));
    case = with_b::<Count>(case, &[Op::Id]);
    cases.push(with_c1(case));

    cases
}

// ---- B08: sync vs async (async part) ----

/// B08, async pull only: 8K×1000, 4K×1000 + 1 XOR, 4K×500 + 3 XOR,
/// 256B×10000, 64B×20000, 10B×50000; pull vs (a).
// TODO(B08, pull_sync): add `pull_sync/b1` and `pull_sync/b128` to every case
// here (the point of B08 is pull_sync vs pull vs a).
pub fn b08() -> Vec<Case> {
    let mut cases = Vec::new();
    for (size, count) in [(8 << 10, 1000), (256, 10_000), (64, 20_000), (10, 50_000)] {
        let input = Input::shared(size, count);
        let mut case = Case::new(
            format!("B08/pass/{}", shape(size, count)),
            input.clone(),
            expect::<Count>(&input, &[]),
            true,
        );
        case = with_pull::<Count, _, _>(case, "pull", || ());
        cases.push(with_a::<Count, _, _>(case, stream::iter));
    }

    let input = Input::shared(4 << 10, 1000);
    let mut case = Case::new(
        format!("B08/xor1/{}", shape(4 << 10, 1000)),
        input.clone(),
        expect::<Digest>(&input, &[Op::Xor(KEYS[0])]),
        false,
    );
    case = with_pull::<Digest, _, _>(case, "pull", || Xor(KEYS[0]));
    cases.push(with_a::<Digest, _, _>(case, |v| {
        stream::iter(v).map(|c| xor(c, KEYS[0]))
    }));

    let input = Input::shared(4 << 10, 500);
    let ops = [Op::Xor(KEYS[0]), Op::Xor(KEYS[1]), Op::Xor(KEYS[2])];
    let mut case = Case::new(
        format!("B08/xor3/{}", shape(4 << 10, 500)),
        input.clone(),
        expect::<Digest>(&input, &ops),
        false,
    );
    case = with_pull::<Digest, _, _>(case, "pull", || {
        Xor(KEYS[0]).then(Xor(KEYS[1])).then(Xor(KEYS[2]))
    });
    cases.push(with_a::<Digest, _, _>(case, |v| {
        stream::iter(v)
            .map(|c| xor(c, KEYS[0]))
            .map(|c| xor(c, KEYS[1]))
            .map(|c| xor(c, KEYS[2]))
    }));

    cases
}

// ---- B11: proxy shapes ----

/// B11: response forward (owned 1–64 KiB chunks → identity → counting sink,
/// 20 MiB), and accumulation of owned ≤16 KiB chunks into 64 KiB (a
/// hand-written coalescing stage, 20 MiB).
// TODO(B11, coalesce): add `pull_coalesce/b1`, `pull_coalesce/b128` with
// `weir_stream::coalesce` next to the hand-written `Coalesce` once it lands.
// TODO(B11): gzip round trip 10 MiB (flate2) and JSON+SHA-256 per chunk
// (serde_json, sha2) vs c3, and the slow sink (1 ms/write, 10 MiB, memory
// bound) with pipe_to; each needs its dev-dependency or module first.
pub fn b11() -> Vec<Case> {
    let mut cases = Vec::new();
    let total = 20 << 20;

    // Every contender's source copies each chunk into a fresh allocation
    // (`own`), as a socket read does, and its sink frees it: both inside the
    // timed region, the same for all.
    let input = Input::mixed(1 << 10, 64 << 10, total);
    let case = Case::new(
        "B11/forward_owned_1K-64K/20MiB",
        input.clone(),
        expect::<Count>(&input, &[Op::Id]),
        true,
    );
    cases.push(
        owned_contenders::<Count, _, _>(
            case,
            || Identity,
            &[Op::Id],
            |v| stream::iter(v.into_iter().map(own)).map(ident),
        )
        // Copy, then drop, chunk by chunk, as the streaming contenders do.
        .baseline("c1/drain", |v| {
            let mut t = Tally::default();
            for c in v {
                let c = std::hint::black_box(own(c));
                t.add::<Count>(&c);
            }
            t
        }),
    );

    let input = Input::mixed(1 << 10, 16 << 10, total);
    let ops = [Op::Coalesce(COALESCE)];
    let case = Case::new(
        "B11/accumulate_1K-16K_to_64K/20MiB",
        input.clone(),
        expect::<Digest>(&input, &ops),
        false,
    );
    let scratch = RefCell::new(Vec::new());
    cases.push(
        owned_contenders::<Digest, _, _>(
            case,
            || Coalesce::new(COALESCE),
            &ops,
            |v| CoalesceStream::new(stream::iter(v.into_iter().map(own)), COALESCE),
        )
        // The ceiling: one copy, straight from the slices into 64 KiB buffers.
        .baseline_ref("c3/coalesce", move |v| {
            c3_coalesce::<Digest>(v, COALESCE, &mut scratch.borrow_mut())
        }),
    );

    cases
}

/// `pull/b1`, `pull/b128`, (a) and (b) over owned chunks: each source
/// copies every chunk ([`own`]) as it yields it.
fn owned_contenders<K, T, S>(
    case: Case,
    make: fn() -> T,
    ops: &[Op],
    a: fn(Vec<Bytes>) -> S,
) -> Case
where
    K: Sink,
    T: Transform + Unpin + 'static,
    S: Stream<Item = Bytes> + Unpin + 'static,
{
    let mut case = case;
    for n in [1usize, 128] {
        case = case.core(&format!("pull/b{n}"), move |v| {
            let src = ChunkSource::new(v.into_iter().map(own as fn(Bytes) -> Bytes), n);
            on_current(pull_drain::<K, _>(pull(src, make())))
        });
    }
    case = case.baseline("a/futures", move |v| on_current(a_drain::<K, _>(a(v))));
    for cap in [1usize, 16] {
        let ops = ops.to_vec();
        case = case.baseline(&format!("b/mpsc{cap}"), move |v| {
            on_multi(b_chain_from::<K>(v, own, &ops, cap))
        });
    }
    case
}

// ---- B12: construction churn ----

/// Constructions per iteration: 10 MiB / 1 KiB (fast-webstreams).
pub const CHURN: usize = 10_240;

/// B12, pull part: 10,240 one-transform pipelines per iteration, built and
/// dropped unpolled, or built and drained of one 1 KiB chunk.
// TODO(B12, push/share): add "build + drop 10,240 push pairs" and
// "10,240 two-consumer shares" cases (vs `mpsc::channel` and
// `broadcast::channel` construction) once push/share land; allocation counts
// per construction go in `benches/memory.rs`.
pub fn b12() -> Vec<Case> {
    let mut cases = Vec::new();
    let input = Input::shared(1 << 10, 1);

    let t = Tally {
        chunks: CHURN as u64,
        ..Tally::default()
    };
    let case = Case::new("B12/pipeline_build_drop/1K", input.clone(), t, true)
        .constructions(CHURN as u64)
        .core("pull", |v| {
            let chunk = v[0].clone();
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let p = pull(once(chunk.clone()), Identity);
                std::hint::black_box(&p);
                drop(p);
                t.chunks += 1;
            }
            t
        })
        .baseline("a/futures", |v| {
            let chunk = v[0].clone();
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let s = stream::once(std::future::ready(chunk.clone())).map(ident);
                std::hint::black_box(&s);
                drop(s);
                t.chunks += 1;
            }
            t
        });
    cases.push(case);

    let t = Tally {
        chunks: CHURN as u64,
        bytes: (CHURN * 1024) as u64,
        ..Tally::default()
    };
    let mut case = Case::new("B12/pipeline_build_drain/1K", input, t, true)
        .constructions(CHURN as u64)
        .core("pull", |v| {
            let chunk = v[0].clone();
            on_current(async move {
                let mut t = Tally::default();
                for _ in 0..CHURN {
                    let one = pull_drain::<Count, _>(pull(once(chunk.clone()), Identity)).await;
                    t.bytes += one.bytes;
                    t.chunks += one.chunks;
                }
                t
            })
        })
        .baseline("a/futures", |v| {
            let chunk = v[0].clone();
            on_current(async move {
                let mut t = Tally::default();
                for _ in 0..CHURN {
                    let s = stream::once(std::future::ready(chunk.clone())).map(ident);
                    let one = a_drain::<Count, _>(s).await;
                    t.bytes += one.bytes;
                    t.chunks += one.chunks;
                }
                t
            })
        })
        .baseline("b/mpsc1", |v| {
            let chunk = v[0].clone();
            on_multi(async move {
                let mut t = Tally::default();
                for _ in 0..CHURN {
                    let one = b_chain::<Count>(vec![chunk.clone()], &[Op::Id], 1).await;
                    t.bytes += one.bytes;
                    t.chunks += one.chunks;
                }
                t
            })
        });
    // Baseline (b) spawns three tasks per construction: ~30 µs each.
    case.slow = true;
    cases.push(case);
    cases
}

// ---- Scenarios waiting for modules being written elsewhere ----
//
// Each returns no case yet; `benches/model.rs` already registers them, so a
// scenario lands by filling in its function (and `paired.rs` picks it up).

/// TODO(B02, consume.rs): consumption. `bytes()` 16K×500 (vs c2, target
/// within 1.2×; one-chunk input = 0 copies); `text()` over 1K chunks of valid
/// UTF-8; the iteration consumer 8K×1000 (vs a's fold); `bytes(limit)` at 50 %
/// (must fail with `LimitExceeded`, check that, not the tally) and 100 % of
/// the size. Contenders: `consume/b1`, `consume/b128` vs `a/fold`, `c2/memcpy`.
pub fn b02() -> Vec<Case> {
    Vec::new()
}

/// TODO(B03, push.rs): push. Concurrent writer/reader tasks on
/// `rt::multi()`: 4K×1000 hwm 100; 64B×10000 hwm 1000; writev 512B×20×200
/// hwm 50 (`write_batch`); push + iteration 2K×1000; `try_write`+`ready()`
/// vs `write().await`, 1000×4K. Baseline: one `mpsc(hwm)` (`b_chain` with no
/// op and `cap = hwm`). Targets: ≥1.5× over mpsc, ≤120 ns per chunk.
pub fn b03() -> Vec<Case> {
    Vec::new()
}

/// TODO(B06 pipe_to, pipe.rs): `pipe_to` 1000×4K into a sync-capable sink
/// (`try_write_batch`) vs an async-only sink; vs (a) (`forward` into a
/// `Sink`-like loop) and (b). Target: sync sink ≥3× the async-only one.
pub fn b06_pipe_to() -> Vec<Case> {
    Vec::new()
}

/// TODO(B07, share.rs / broadcast.rs): multi-consumer. share, 2 readers
/// 4K×500 hwm 100; share + a per-branch XOR; 256B×5000 hwm 500; broadcast
/// 2 consumers hwm 1000; concurrent vs sequential drain (20 MiB); policy
/// compare on broadcast 4K×500. Baselines ready: `baseline::b_fanout`
/// (a task feeding two mpsc) and `baseline::b_broadcast`; each returns two
/// tallies, check both against `expect`. Tally of a case = both readers
/// summed (bytes ×2).
pub fn b07() -> Vec<Case> {
    Vec::new()
}

/// TODO(B09, merge.rs): merge 2×(4K×250) and 4×(4K×125), with sources that
/// yield on a timer (needs a runtime with `enable_time`; add `rt::timed()`),
/// vs `futures_util::stream::select_all`. Merged order differs: check with
/// `Count`/`Digest` (order-independent).
pub fn b09() -> Vec<Case> {
    Vec::new()
}
