//! B12, construction churn: 10,240 constructions per iteration (10 MiB /
//! 1 KiB, the fast-webstreams count), built and dropped unpolled, or built
//! and used for one 1 KiB chunk. One-transform pipelines, push pairs and
//! two-consumer shares, each next to the nearest tokio / `futures`
//! construction. Allocations per construction are in `memory.rs`.

use futures_util::{StreamExt, stream};
use tokio::sync::{broadcast, mpsc};
use weir_stream::push::{PushOptions, push};
use weir_stream::share::{ShareOptions, share};
use weir_stream::{once, pull};

use super::{ident, on_current, on_multi};
use crate::common::baseline::{a_drain, b_chain};
use crate::common::check::{Count, Tally};
use crate::common::drive::pull_drain;
use crate::common::harness::Case;
use crate::common::input::Input;
use crate::common::stages::{Identity, Op};

/// Constructions per iteration: 10 MiB / 1 KiB (fast-webstreams).
pub const CHURN: usize = 10_240;

/// The tally of `CHURN` constructions, each carrying `bytes` bytes.
fn built(bytes: u64) -> Tally {
    Tally {
        chunks: CHURN as u64,
        bytes: CHURN as u64 * bytes,
        ..Tally::default()
    }
}

/// Counts one construction that carried `t`.
fn count(total: &mut Tally, t: Tally) {
    total.bytes += t.bytes;
    total.chunks += 1;
}

/// B12: pipelines, push pairs and two-consumer shares, build + drop and
/// build + use.
pub fn b12() -> Vec<Case> {
    let input = Input::shared(1 << 10, 1);
    vec![
        pipeline_build_drop(&input),
        pipeline_build_drain(&input),
        push_build_drop(&input),
        push_build_drain(&input),
        share_build_drop(&input),
        share_build_drain(&input),
    ]
}

fn pipeline_build_drop(input: &Input) -> Case {
    Case::new("B12/pipeline_build_drop/1K", input.clone(), built(0), true)
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
        })
}

fn pipeline_build_drain(input: &Input) -> Case {
    let mut case = Case::new(
        "B12/pipeline_build_drain/1K",
        input.clone(),
        built(1024),
        true,
    )
    .constructions(CHURN as u64)
    .core("pull", |v| {
        let chunk = v[0].clone();
        on_current(async move {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let one = pull_drain::<Count, _>(pull(once(chunk.clone()), Identity)).await;
                count(&mut t, one);
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
                count(&mut t, a_drain::<Count, _>(s).await);
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
                count(&mut t, one);
            }
            t
        })
    });
    // Baseline (b) spawns three tasks per construction: ~30 µs each.
    case.slow = true;
    case
}

/// A push pair (default options: hwm 4, strict) built and dropped, vs a
/// tokio `mpsc::channel(4)`.
fn push_build_drop(input: &Input) -> Case {
    Case::new("B12/push_pair_build_drop", input.clone(), built(0), true)
        .constructions(CHURN as u64)
        .core("push", |_| {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let pair = push(PushOptions::new());
                std::hint::black_box(&pair);
                drop(pair);
                t.chunks += 1;
            }
            t
        })
        .baseline("b/mpsc_channel", |_| {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let pair = mpsc::channel::<bytes::Bytes>(4);
                std::hint::black_box(&pair);
                drop(pair);
                t.chunks += 1;
            }
            t
        })
}

/// A push pair carrying one chunk: `try_write`, `end`, drain. vs an mpsc
/// channel: `try_send`, drop the sender, drain. Same task, no spawn.
fn push_build_drain(input: &Input) -> Case {
    Case::new(
        "B12/push_pair_write_drain/1K",
        input.clone(),
        built(1024),
        true,
    )
    .constructions(CHURN as u64)
    .core("push", |v| {
        let chunk = v[0].clone();
        on_current(async move {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let (w, r) = push(PushOptions::new());
                assert!(w.try_write(chunk.clone()));
                w.end().expect("ending a fresh push stream");
                count(&mut t, pull_drain::<Count, _>(r).await);
            }
            t
        })
    })
    .baseline("b/mpsc_channel", |v| {
        let chunk = v[0].clone();
        on_current(async move {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let (tx, mut rx) = mpsc::channel::<bytes::Bytes>(4);
                tx.try_send(chunk.clone())
                    .expect("a fresh channel has room");
                drop(tx);
                let mut one = Tally::default();
                while let Some(c) = rx.recv().await {
                    one.add::<Count>(&c);
                }
                count(&mut t, one);
            }
            t
        })
    })
}

/// A share of a one-chunk source with two primary consumers (default
/// options), built and dropped, vs a tokio `broadcast::channel(16)` with
/// two receivers.
fn share_build_drop(input: &Input) -> Case {
    Case::new("B12/share2_build_drop/1K", input.clone(), built(0), true)
        .constructions(CHURN as u64)
        .core("share", |v| {
            let chunk = v[0].clone();
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let s = share(once(chunk.clone()), ShareOptions::default());
                let c = (s.pull(), s.pull());
                std::hint::black_box(&c);
                drop(c);
                drop(s);
                t.chunks += 1;
            }
            t
        })
        .baseline("b/broadcast_channel", |_| {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let (tx, rx1) = broadcast::channel::<bytes::Bytes>(16);
                let rx2 = tx.subscribe();
                std::hint::black_box((&tx, &rx1, &rx2));
                drop((tx, rx1, rx2));
                t.chunks += 1;
            }
            t
        })
}

/// The same, each consumer drained (one after the other, same task): the
/// share pulls its one chunk once. vs `broadcast`: send, drop the sender,
/// drain both receivers.
fn share_build_drain(input: &Input) -> Case {
    Case::new(
        "B12/share2_build_drain/1K",
        input.clone(),
        built(2048),
        true,
    )
    .constructions(CHURN as u64)
    .core("share", |v| {
        let chunk = v[0].clone();
        on_current(async move {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let s = share(once(chunk.clone()), ShareOptions::default());
                let (c1, c2) = (s.pull(), s.pull());
                drop(s);
                let one = pull_drain::<Count, _>(c1).await;
                let two = pull_drain::<Count, _>(c2).await;
                count(&mut t, one.plus(two));
            }
            t
        })
    })
    .baseline("b/broadcast_channel", |v| {
        let chunk = v[0].clone();
        on_current(async move {
            let mut t = Tally::default();
            for _ in 0..CHURN {
                let (tx, mut rx1) = broadcast::channel::<bytes::Bytes>(16);
                let mut rx2 = tx.subscribe();
                tx.send(chunk.clone())
                    .expect("two receivers are subscribed");
                drop(tx);
                let mut one = Tally::default();
                for rx in [&mut rx1, &mut rx2] {
                    while let Ok(c) = rx.recv().await {
                        one.add::<Count>(&c);
                    }
                }
                count(&mut t, one);
            }
            t
        })
    })
}
