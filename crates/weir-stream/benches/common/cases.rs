//! The scenario table (plan, section 3, "Scenarios"): one function per
//! scenario ID, each returning its cases. Sizes are the seeds' so ratios
//! line up. Contender names: `pull/b1` and `pull/b128` are the core's pull
//! pipeline fed 1 or 128 chunks per batch; `a/*`, `b/mpsc1`, `b/mpsc16`,
//! `c1/*`, `c2/*`, `c3/*` are the baselines of `baseline.rs`.
//!
//! The pull scenarios live here; the others, one file each, in `cases/`.

pub mod churn;
mod consume;
mod merge;
mod multi;
pub mod natural;
mod pipe;
mod push;

use std::cell::RefCell;
use std::future::Future;

use bytes::Bytes;
use futures_core::Stream;
use futures_util::{StreamExt, stream};
use weir_stream::stateful::async_fn;
use weir_stream::{
    Batch, SourceExt, Transform, TransformExt, coalesce, from_iter, pull, pull_sync_batches,
    transform_fn,
};

pub use churn::b12;
pub use consume::b02;
pub use merge::b09;
pub use multi::b07;
pub use pipe::b06_pipe_to;
pub use push::b03;

use super::baseline::{
    CoalesceStream, Split2Stream, a_drain, b_chain, b_chain_from, c1_drain, c1_iter, c2_copy,
    c3_coalesce, c3_xor,
};
use super::check::{Count, Digest, Flow, Sink, Tally};
use super::drive::{pull_drain, pull_sync_drain};
use super::harness::Case;
use super::input::{Input, shape};
use super::rt;
use super::source::{ChunkSource, batches, chunks};
use super::stages::{
    COALESCE, Coalesce, Identity, JsonSha, KEY, KEYS, Op, Split2, Xor, XorGen, json_sha, own,
    reference, xor, xor_batch,
};

// ---- the lists the bench binaries run ----

/// The pull scenarios (`benches/pull.rs`).
pub fn pull_scenarios() -> Vec<Case> {
    [b01(), b04(), b05(), b06(), b08(), b11()]
        .into_iter()
        .flatten()
        .collect()
}

/// The scenarios beyond the pull pipeline (`benches/model.rs`): consumers,
/// push, `pipe_to`, share/broadcast, merge.
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

/// Adds `pull_sync/b1` and `pull_sync/b128`: `pull_sync_batches(batches, make())`
/// iterated on the bench thread, no runtime.
pub fn with_pull_sync<K, T, F>(case: Case, prefix: &str, make: F) -> Case
where
    K: Sink,
    T: Transform + Unpin + 'static,
    F: Fn() -> T + Clone + 'static,
{
    let m1 = make.clone();
    case.core(&format!("{prefix}/b1"), move |v| {
        pull_sync_drain::<K, _>(pull_sync_batches(batches(v, 1), m1()))
    })
    .core(&format!("{prefix}/b128"), move |v| {
        pull_sync_drain::<K, _>(pull_sync_batches(batches(v, 128), make()))
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
/// (a), (b), (c1), (c2); `pull_sync` (the same chain as an iterator).
/// `bytes()` against (c2) is B02.
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
            case = with_pull_sync::<Count, _, _>(case, "pull_sync", || ());
            case = with_a::<Count, _, _>(case, stream::iter);
            case = with_b::<Count>(case, &[]);
            with_c2(with_c1(case))
        })
        .collect()
}

// ---- B04: transforms ----

/// B04: identity 8K×1000, XOR 8K×500, expand 1:2 4K×500, 3 chained
/// (nested pipelines) 8K×500, stateless XOR (a closure) vs stateful XOR
/// (a `StatefulTransform`) 4K×500, async identity transform 8K×300.
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

    // A plain closure stage (stateless), as a user would write one, next
    // to the same XOR as a stateful transform driving its own loop.
    let input = Input::shared(4 << 10, 500);
    let mut case = Case::new(
        format!("B04/xor_stateless_stateful/{}", shape(4 << 10, 500)),
        input.clone(),
        expect::<Digest>(&input, &[Op::Xor(KEY)]),
        false,
    );
    case = with_pull::<Digest, _, _>(case, "pull", || {
        transform_fn(|b: Option<Batch>| Ok(b.map(|b| xor_batch(b, KEY))))
    });
    for n in [1usize, 128] {
        case = case.core(&format!("pull_stateful/b{n}"), move |v| {
            on_current(pull_drain::<Digest, _>(chunks(v, n).stateful(XorGen(KEY))))
        });
    }
    case = with_a::<Digest, _, _>(case, |v| stream::iter(v).map(|c| xor(c, KEY)));
    case = with_b::<Digest>(case, &[Op::Xor(KEY)]);
    cases.push(with_c3_xor(case, &[KEY]));

    // An async transform that awaits nothing: the cost of the async stage
    // (one future per batch, held in place) on top of a pass-through.
    let input = Input::shared(8 << 10, 300);
    let mut case = Case::new(
        format!("B04/async_identity/{}", shape(8 << 10, 300)),
        input.clone(),
        expect::<Count>(&input, &[Op::Id]),
        true,
    );
    for n in [1usize, 128] {
        case = case.core(&format!("pull_async/b{n}"), move |v| {
            let stage = chunks(v, n).then_async(async_fn(|b: Option<Batch>| async move { Ok(b) }));
            on_current(pull_drain::<Count, _>(Box::pin(stage)))
        });
    }
    case = with_a::<Count, _, _>(case, |v| {
        Box::pin(stream::iter(v).then(|c| async move { c }))
    });
    case = with_b::<Count>(case, &[Op::Id]);
    cases.push(with_c1(case));

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
/// 8K×500, high-frequency 64B×20000 through one stage. `pipe_to` is in
/// `cases/pipe.rs`.
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

/// B08, sync vs async: 8K×1000, 4K×1000 + 1 XOR, 4K×500 + 3 XOR,
/// 256B×10000, 64B×20000, 10B×50000; pull_sync vs pull vs (a).
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
        case = with_pull_sync::<Count, _, _>(case, "pull_sync", || ());
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
    case = with_pull_sync::<Digest, _, _>(case, "pull_sync", || Xor(KEYS[0]));
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
    case = with_pull_sync::<Digest, _, _>(case, "pull_sync", || {
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
/// 20 MiB); accumulation of owned ≤16 KiB chunks into 64 KiB (a
/// hand-written coalescing stage and the core's `coalesce`, 20 MiB); JSON
/// parse + serialise + SHA-256 per 1 KiB chunk (4 MiB). The slow sink
/// (1 ms per write, a memory bound, not a speed) is in `memory.rs`; gzip is
/// not measured (it would need `flate2`, not in this workspace).
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

    // The hand-written stage cuts exact 64 KiB chunks, the core's keeps
    // input chunks whole (each output chunk ≤ 64 KiB): `Flow` checks bytes,
    // sum and XOR, not boundaries.
    let input = Input::mixed(1 << 10, 16 << 10, total);
    let ops = [Op::Coalesce(COALESCE)];
    let case = Case::new(
        "B11/accumulate_1K-16K_to_64K/20MiB",
        input.clone(),
        expect::<Flow>(&input, &ops),
        false,
    );
    let mut case = owned_contenders::<Flow, _, _>(
        case,
        || Coalesce::new(COALESCE),
        &ops,
        |v| CoalesceStream::new(stream::iter(v.into_iter().map(own)), COALESCE),
    );
    for n in [1usize, 128] {
        case = case.core(&format!("pull_coalesce/b{n}"), move |v| {
            let src = ChunkSource::new(v.into_iter().map(own as fn(Bytes) -> Bytes), n);
            on_current(pull_drain::<Flow, _>(pull(
                src,
                coalesce(COALESCE, COALESCE),
            )))
        });
    }
    // The ceiling: one copy, straight from the slices into 64 KiB buffers.
    let scratch = RefCell::new(Vec::new());
    cases.push(case.baseline_ref("c3/coalesce", move |v| {
        c3_coalesce::<Flow>(v, COALESCE, &mut scratch.borrow_mut())
    }));

    // CPU-bound: every chunk parsed, serialised and hashed.
    let input = Input::json(1 << 10, 4096);
    let ops = [Op::JsonSha];
    let mut case = Case::new(
        format!("B11/json_sha256/{}", shape(1 << 10, 4096)),
        input.clone(),
        expect::<Digest>(&input, &ops),
        false,
    );
    case = with_pull::<Digest, _, _>(case, "pull", || JsonSha);
    case = with_a::<Digest, _, _>(case, |v| stream::iter(v).map(|c| json_sha(&c)));
    case = with_b::<Digest>(case, &ops);
    cases.push(case.baseline_ref("c3/json_sha", |v| {
        let mut t = Tally::default();
        for c in v {
            t.add::<Digest>(&json_sha(c));
        }
        t
    }));

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
