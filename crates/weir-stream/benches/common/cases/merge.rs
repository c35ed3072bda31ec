//! B09, merge: one stream split into 2 or 4 parts, each a source that is
//! pending once (waking itself) after every 16 chunks, merged into one and
//! drained on the `current_thread` runtime. Against (a) `select_all` over
//! one-item streams that yield the same way, and (b) one task per part
//! feeding one mpsc channel. Merged order differs between contenders: the
//! `Count` check is order-independent.
//!
//! Sources yield by waking themselves rather than on a timer: a tokio timer
//! ticks in milliseconds, and every contender would measure the tick.

use bytes::Bytes;
use futures_util::stream::{self, select_all};
use weir_stream::merge;

use super::{expect, on_current, on_multi};
use crate::common::baseline::{a_drain, b_fanin};
use crate::common::check::Count;
use crate::common::drive::pull_drain;
use crate::common::harness::Case;
use crate::common::input::{Input, shape};
use crate::common::source::{Yielding, YieldingStream, chunks};

/// Chunks between two `Pending`s of one source.
const YIELD_EVERY: usize = 16;

/// `v` cut into `n` consecutive parts of equal length.
fn split(v: Vec<Bytes>, n: usize) -> Vec<Vec<Bytes>> {
    let per = v.len().div_ceil(n);
    let mut it = v.into_iter();
    (0..n).map(|_| it.by_ref().take(per).collect()).collect()
}

/// B09: merge 2×(4K×250) and 4×(4K×125).
pub fn b09() -> Vec<Case> {
    [(2usize, 250usize), (4, 125)]
        .into_iter()
        .map(|(n, each)| {
            let input = Input::shared(4 << 10, n * each);
            let mut case = Case::new(
                format!("B09/merge{n}/{}x{n}", shape(4 << 10, each)),
                input.clone(),
                expect::<Count>(&input, &[]),
                true,
            );
            // Batches of 1 chunk, or of 16 (one batch between two yields).
            for per in [1usize, YIELD_EVERY] {
                case = case.core(&format!("merge/b{per}"), move |v| {
                    let parts = split(v, n)
                        .into_iter()
                        .map(|p| Yielding::new(chunks(p, per), YIELD_EVERY));
                    on_current(pull_drain::<Count, _>(merge(parts)))
                });
            }
            case.baseline("a/select_all", move |v| {
                let parts = split(v, n)
                    .into_iter()
                    .map(|p| YieldingStream::new(stream::iter(p), YIELD_EVERY));
                on_current(a_drain::<Count, _>(select_all(parts)))
            })
            .baseline("b/fanin16", move |v| {
                on_multi(b_fanin::<Count>(split(v, n), 16))
            })
        })
        .collect()
}
