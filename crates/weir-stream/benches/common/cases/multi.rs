//! B07, multi-consumer: `share()` (a pull source read by two consumers)
//! and `broadcast()` (a push writer read by two consumers), on the 2-worker
//! runtime with each consumer in its own task, against a fan-out task
//! feeding two mpsc channels and `tokio::sync::broadcast`. A case's tally
//! is both consumers' tallies added up.
//!
//! Shares use the `block` policy (the default): a consumer that runs ahead
//! waits for the slowest.

use bytes::Bytes;
use weir_stream::broadcast::{BroadcastOptions, broadcast};
use weir_stream::share::{ShareOptions, share};
use weir_stream::{Backpressure, Transform, pull};

use super::{expect, on_multi};
use crate::common::baseline::{b_broadcast, b_broadcast_seq, b_fanout, b_fanout_ops, b_fanout_seq};
use crate::common::check::{Count, Digest, Sink, Tally};
use crate::common::drive::{WriteMode, pull_drain, write_all};
use crate::common::harness::Case;
use crate::common::input::{Input, shape};
use crate::common::source::chunks;
use crate::common::stages::{KEYS, Op, Xor};

/// The cases' marks are counted in chunks (as the seeds count entries of
/// one chunk each); no byte mark: the sequential case holds the whole
/// stream.
fn share_options(hwm: usize) -> ShareOptions {
    ShareOptions {
        hwm_chunks: hwm,
        hwm_bytes: usize::MAX,
        policy: Backpressure::Block,
        ..ShareOptions::default()
    }
}

fn sum([a, b]: [Tally; 2]) -> Tally {
    a.plus(b)
}

/// Two consumers of a share of `chunks(v, n)`, each through its own
/// transform, drained concurrently in two tasks.
async fn share_two<K, T1, T2>(v: Vec<Bytes>, n: usize, hwm: usize, t1: T1, t2: T2) -> Tally
where
    K: Sink,
    T1: Transform + Send + Unpin + 'static,
    T2: Transform + Send + Unpin + 'static,
{
    let s = share(chunks(v, n), share_options(hwm));
    let (c1, c2) = (pull(s.pull(), t1), pull(s.pull(), t2));
    drop(s);
    let h1 = tokio::spawn(pull_drain::<K, _>(c1));
    let h2 = tokio::spawn(pull_drain::<K, _>(c2));
    let t1 = h1.await.expect("share consumer 1 panicked");
    t1.plus(h2.await.expect("share consumer 2 panicked"))
}

/// Two consumers of a share drained one after the other by one task; the
/// ring (hwm) must hold the whole stream for that.
async fn share_seq<K: Sink>(v: Vec<Bytes>, n: usize, hwm: usize) -> Tally {
    let s = share(chunks(v, n), share_options(hwm));
    let (c1, c2) = (s.pull(), s.pull());
    drop(s);
    tokio::spawn(async move {
        let one = pull_drain::<K, _>(c1).await;
        one.plus(pull_drain::<K, _>(c2).await)
    })
    .await
    .expect("sequential share task panicked")
}

/// A broadcast with two consumers (subscribed before the first write), a
/// writer task and one reader task per consumer.
async fn broadcast_two<K: Sink>(v: Vec<Bytes>, hwm: usize, mode: WriteMode) -> Tally {
    let (w, b) = broadcast(BroadcastOptions::new().hwm(hwm));
    let (c1, c2) = (b.subscribe(), b.subscribe());
    drop(b);
    let h1 = tokio::spawn(pull_drain::<K, _>(c1));
    let h2 = tokio::spawn(pull_drain::<K, _>(c2));
    tokio::spawn(write_all(w, v, mode));
    let t1 = h1.await.expect("broadcast consumer 1 panicked");
    t1.plus(h2.await.expect("broadcast consumer 2 panicked"))
}

/// `share/b1`, `share/b128` (pass-through) vs fan-out mpsc and tokio
/// broadcast, all at capacity `hwm`.
fn share_case(size: usize, count: usize, hwm: usize) -> Case {
    let input = Input::shared(size, count);
    let one = expect::<Count>(&input, &[]);
    let mut case = Case::new(
        format!("B07/share2/{}/hwm{hwm}", shape(size, count)),
        input,
        one.plus(one),
        true,
    );
    for n in [1usize, 128] {
        case = case.core(&format!("share/b{n}"), move |v| {
            on_multi(share_two::<Count, _, _>(v, n, hwm, (), ()))
        });
    }
    with_fanout(case, hwm)
}

/// Adds `b/fanout{cap}` and `b/broadcast{cap}` (pass-through, `Count`).
fn with_fanout(case: Case, cap: usize) -> Case {
    case.baseline(&format!("b/fanout{cap}"), move |v| {
        sum(on_multi(b_fanout::<Count>(v, cap)))
    })
    .baseline(&format!("b/broadcast{cap}"), move |v| {
        sum(on_multi(b_broadcast::<Count>(v, cap)))
    })
}

/// B07: share 2 readers 4K×500 hwm 100; share + a per-branch XOR 4K×500;
/// share 256B×5000 hwm 500; broadcast 2 consumers 4K×500 hwm 1000;
/// concurrent and sequential drain of 20 MiB (16K×1280).
pub fn b07() -> Vec<Case> {
    let mut cases = vec![share_case(4 << 10, 500, 100)];

    // Each branch XORs with its own key, in the consumer's task (core) or
    // in a stage task per branch (b).
    let input = Input::shared(4 << 10, 500);
    let (k1, k2) = (KEYS[0], KEYS[1]);
    let want =
        expect::<Digest>(&input, &[Op::Xor(k1)]).plus(expect::<Digest>(&input, &[Op::Xor(k2)]));
    let mut case = Case::new(
        format!("B07/share2_xor/{}/hwm100", shape(4 << 10, 500)),
        input,
        want,
        false,
    );
    for n in [1usize, 128] {
        case = case.core(&format!("share/b{n}"), move |v| {
            on_multi(share_two::<Digest, _, _>(v, n, 100, Xor(k1), Xor(k2)))
        });
    }
    cases.push(case.baseline("b/fanout100", move |v| {
        sum(on_multi(b_fanout_ops::<Digest>(
            v,
            100,
            [&[Op::Xor(k1)], &[Op::Xor(k2)]],
        )))
    }));

    cases.push(share_case(256, 5000, 500));

    let input = Input::shared(4 << 10, 500);
    let one = expect::<Count>(&input, &[]);
    let mut case = Case::new(
        format!("B07/broadcast2/{}/hwm1000", shape(4 << 10, 500)),
        input,
        one.plus(one),
        true,
    );
    case = case
        .core("broadcast/write", |v| {
            on_multi(broadcast_two::<Count>(v, 1000, WriteMode::Await))
        })
        .core("broadcast/writev128", |v| {
            on_multi(broadcast_two::<Count>(v, 1000, WriteMode::Writev(128)))
        });
    cases.push(with_fanout(case, 1000));

    // 20 MiB, concurrent (default share hwm 16) and sequential.
    let (size, count) = (16 << 10, 1280);
    let input = Input::shared(size, count);
    let one = expect::<Count>(&input, &[]);
    let mut case = Case::new(
        format!("B07/concurrent/{}/hwm16", shape(size, count)),
        input.clone(),
        one.plus(one),
        true,
    );
    for n in [1usize, 128] {
        case = case.core(&format!("share/b{n}"), move |v| {
            on_multi(share_two::<Count, _, _>(v, n, 16, (), ()))
        });
    }
    cases.push(with_fanout(case, 16));

    let mut case = Case::new(
        format!("B07/sequential/{}", shape(size, count)),
        input,
        one.plus(one),
        true,
    );
    for n in [1usize, 128] {
        case = case.core(&format!("share/b{n}"), move |v| {
            on_multi(share_seq::<Count>(v, n, count))
        });
    }
    cases.push(
        case.baseline("b/fanout_unbounded", |v| {
            sum(on_multi(b_fanout_seq::<Count>(v)))
        })
        .baseline("b/broadcast2048", |v| {
            sum(on_multi(b_broadcast_seq::<Count>(v, 2048)))
        }),
    );
    cases
}
