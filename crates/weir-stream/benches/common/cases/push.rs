//! B03, push: a writer task and a reader task around one push pair, on the
//! 2-worker runtime, against baseline (b) reduced to one channel: a tokio
//! `mpsc(hwm)` between a source task and a sink task. Inputs are built
//! before the timed region (the seeds' push suites generated random data
//! inside it and measured their RNG).
//!
//! Writers: `push/write` awaits `write()` per chunk; `push/try_write` uses
//! `try_write` and waits on `ready()` only when refused; `push/writev20`
//! writes 20 chunks per `writev`. The reader drains the readable, which
//! takes every buffered slot per poll (PUSH-083).

use weir_stream::Backpressure;
use weir_stream::push::PushOptions;

use super::{expect, on_multi};
use crate::common::baseline::{b_chain, b_vec};
use crate::common::check::Count;
use crate::common::drive::{WriteMode, push_run};
use crate::common::harness::Case;
use crate::common::input::{Input, shape};

/// A push case: `modes` as core contenders, `b/mpsc{hwm}` as the baseline.
fn push_case(id: String, input: Input, hwm: usize, modes: &[(&str, WriteMode)]) -> Case {
    let expect = expect::<Count>(&input, &[]);
    let mut case = Case::new(id, input, expect, true);
    for &(name, mode) in modes {
        case = case.core(name, move |v| {
            on_multi(push_run::<Count>(v, PushOptions::new().hwm(hwm), mode))
        });
    }
    case.baseline(&format!("b/mpsc{hwm}"), move |v| {
        on_multi(b_chain::<Count>(v, &[], hwm))
    })
}

const WRITE: (&str, WriteMode) = ("push/write", WriteMode::Await);
const TRY_WRITE: (&str, WriteMode) = ("push/try_write", WriteMode::TryReady);

/// B03: concurrent 4K×1000 hwm 100; 64B×10000 hwm 1000; writev
/// 512B×20×200 hwm 50; push + iteration 2K×1000 (default hwm 4);
/// `try_write` + `ready()` vs `write().await` 4K×1000 hwm 16; an hwm sweep
/// (1, 4, 16, 256) over 4K×2000.
pub fn b03() -> Vec<Case> {
    let mut cases = vec![
        push_case(
            format!("B03/concurrent/{}/hwm100", shape(4 << 10, 1000)),
            Input::shared(4 << 10, 1000),
            100,
            &[WRITE, TRY_WRITE],
        ),
        push_case(
            format!("B03/tiny/{}/hwm1000", shape(64, 10_000)),
            Input::shared(64, 10_000),
            1000,
            &[WRITE, TRY_WRITE],
        ),
    ];

    // 200 writev calls of 20 chunks each; also against an mpsc carrying
    // the same 20-chunk `Vec`s (the batched form of the baseline).
    let case = push_case(
        "B03/writev/512Bx20x200/hwm50".to_owned(),
        Input::shared(512, 4000),
        50,
        &[("push/writev20", WriteMode::Writev(20))],
    );
    cases.push(case.baseline("b/mpsc50_vec20", |v| on_multi(b_vec::<Count>(v, 20, 50))));

    cases.push(push_case(
        format!("B03/push_iter/{}/hwm4", shape(2 << 10, 1000)),
        Input::shared(2 << 10, 1000),
        4,
        &[WRITE, TRY_WRITE],
    ));
    cases.push(push_case(
        format!("B03/try_vs_await/{}/hwm16", shape(4 << 10, 1000)),
        Input::shared(4 << 10, 1000),
        16,
        &[TRY_WRITE, WRITE],
    ));

    // hwm sweep: every contender is core, so each row holds the ratios to
    // the others (plan target: hwm 1 at most 1.5× slower than hwm 4).
    let input = Input::shared(4 << 10, 2000);
    let mut case = Case::new(
        format!("B03/hwm_sweep/{}", shape(4 << 10, 2000)),
        input.clone(),
        expect::<Count>(&input, &[]),
        true,
    );
    for hwm in [1usize, 4, 16, 256] {
        case = case.core(&format!("push/hwm{hwm}"), move |v| {
            let opts = PushOptions::new().hwm(hwm).policy(Backpressure::Strict);
            on_multi(push_run::<Count>(v, opts, WriteMode::Await))
        });
    }
    cases.push(case.baseline("b/mpsc4", |v| on_multi(b_chain::<Count>(v, &[], 4))));
    cases
}
