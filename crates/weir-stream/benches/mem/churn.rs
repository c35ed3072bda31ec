//! B12, allocations per construction: one-transform pipelines, push pairs
//! and two-consumer shares, built and dropped or built and used for one
//! 1 KiB chunk (the same loops as `cases/churn.rs`). Plan target: a push
//! pair ≤ 4 allocations, a one-transform pipeline ≤ 2.

use weir_stream::push::{PushOptions, push};
use weir_stream::share::{ShareOptions, share};
use weir_stream::{once, pull};

use super::chunk;
use crate::common::cases::churn::CHURN;
use crate::common::cases::on_current;
use crate::common::check::{Count, Tally};
use crate::common::drive::pull_drain;
use crate::common::stages::Identity;
use crate::{Report, measure};

fn built(bytes: u64) -> Tally {
    Tally {
        chunks: CHURN as u64,
        bytes: CHURN as u64 * bytes,
        ..Tally::default()
    }
}

/// The construction runs.
pub fn run(_full: bool) -> Vec<Report> {
    let one = chunk(0, 1024, false);
    let mut reports = Vec::new();

    reports.push(measure("pipeline build+drop", CHURN, &built(0), || {
        let mut t = Tally::default();
        for _ in 0..CHURN {
            let p = pull(once(one.clone()), Identity);
            std::hint::black_box(&p);
            drop(p);
            t.chunks += 1;
        }
        t
    }));
    reports.push(measure(
        "pipeline build+drain 1 KiB",
        CHURN,
        &built(1024),
        || {
            on_current(async {
                let mut t = Tally::default();
                for _ in 0..CHURN {
                    let o = pull_drain::<Count, _>(pull(once(one.clone()), Identity)).await;
                    t.bytes += o.bytes;
                    t.chunks += 1;
                }
                t
            })
        },
    ));
    reports.push(measure("push pair build+drop", CHURN, &built(0), || {
        let mut t = Tally::default();
        for _ in 0..CHURN {
            let pair = push(PushOptions::new());
            std::hint::black_box(&pair);
            drop(pair);
            t.chunks += 1;
        }
        t
    }));
    reports.push(measure(
        "push pair try_write+end+drain 1 KiB",
        CHURN,
        &built(1024),
        || {
            on_current(async {
                let mut t = Tally::default();
                for _ in 0..CHURN {
                    let (w, r) = push(PushOptions::new());
                    assert!(w.try_write(one.clone()));
                    w.end().expect("ending a fresh push stream");
                    t.bytes += pull_drain::<Count, _>(r).await.bytes;
                    t.chunks += 1;
                }
                t
            })
        },
    ));
    reports.push(measure("share×2 build+drop", CHURN, &built(0), || {
        let mut t = Tally::default();
        for _ in 0..CHURN {
            let s = share(once(one.clone()), ShareOptions::default());
            let c = (s.pull(), s.pull());
            std::hint::black_box(&c);
            drop(c);
            drop(s);
            t.chunks += 1;
        }
        t
    }));
    reports.push(measure(
        "share×2 build+drain 1 KiB",
        CHURN,
        &built(2048),
        || {
            on_current(async {
                let mut t = Tally::default();
                for _ in 0..CHURN {
                    let s = share(once(one.clone()), ShareOptions::default());
                    let (c1, c2) = (s.pull(), s.pull());
                    drop(s);
                    t.bytes += pull_drain::<Count, _>(c1).await.bytes;
                    t.bytes += pull_drain::<Count, _>(c2).await.bytes;
                    t.chunks += 1;
                }
                t
            })
        },
    ));
    reports
}
