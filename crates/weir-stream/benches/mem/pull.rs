//! 100 MB pull + XOR (asserted < 4 MB), pull identity, and baseline (a)
//! with the same XOR, for comparison.

use futures_util::{StreamExt, stream};
use weir_stream::pull;

use super::{CHUNK, chunk, lazy, sustained};
use crate::common::baseline::a_drain;
use crate::common::cases::on_current;
use crate::common::check::{Count, Digest, Sink, Tally};
use crate::common::drive::pull_drain;
use crate::common::stages::{Identity, KEY, Xor, xor};
use crate::{Report, measure};

/// The asserted bound on peak live bytes for pull + XOR (plan: ≤ 4 MB).
const PULL_XOR_PEAK: usize = 4_000_000;

/// The tally of `n` chunks, XORed or not, seen by sink `K`.
pub fn reference<K: Sink>(n: usize, xored: bool) -> Tally {
    let mut t = Tally::default();
    for i in 0..n {
        let c = chunk(i, CHUNK, false);
        if xored {
            t.add::<K>(&xor(c, KEY));
        } else {
            t.add::<K>(&c);
        }
    }
    t
}

/// The pull runs.
pub fn run(full: bool) -> Vec<Report> {
    let n = sustained(full);
    let mb = n * CHUNK / 1_000_000;
    let xored = reference::<Digest>(n, true);
    let plain = reference::<Count>(n, false);
    let mut reports = Vec::new();

    for owned in [false, true] {
        for per_batch in [1usize, 128] {
            let style = if owned { "owned" } else { "shared" };
            let r = measure(
                &format!("pull+XOR {mb} MB, {style}, b{per_batch}"),
                n,
                &xored,
                || {
                    on_current(pull_drain::<Digest, _>(pull(
                        lazy(n, CHUNK, owned, per_batch),
                        Xor(KEY),
                    )))
                },
            );
            reports.push(r.bounded(PULL_XOR_PEAK));
        }
    }

    for per_batch in [1usize, 128] {
        reports.push(measure(
            &format!("pull identity {mb} MB, shared, b{per_batch}"),
            n,
            &plain,
            || {
                on_current(pull_drain::<Count, _>(pull(
                    lazy(n, CHUNK, false, per_batch),
                    Identity,
                )))
            },
        ));
    }
    reports.push(measure(
        &format!("a/futures XOR {mb} MB, owned"),
        n,
        &xored,
        || {
            let s = stream::iter((0..n).map(|i| chunk(i, CHUNK, true))).map(|c| xor(c, KEY));
            on_current(a_drain::<Digest, _>(s))
        },
    ));
    reports
}
