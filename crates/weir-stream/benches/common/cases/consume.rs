//! B02, consumption: the collecting consumers (`bytes()`, `text()`,
//! `bytes()` with a limit) and the iteration loop, against (a) folding a
//! one-item stream into a growing `Vec<u8>` and (c2) one `memcpy` into a
//! buffer allocated beforehand.
//!
//! (c2) comes twice: `c2/memcpy` copies into one buffer allocated once and
//! reused (the plan's ceiling), `c2/fresh` allocates the output anew each
//! run, as any consumer that returns its buffer must. The two differ by
//! the page faults of a fresh multi-megabyte allocation, which glibc may
//! serve from a new mapping.
//!
//! A collected buffer is checked with the `Whole` sink (length plus a
//! positional sample), the same for every contender.

use std::cell::RefCell;

use bytes::Bytes;
use futures_util::{StreamExt, stream};
use weir_stream::StreamError;
use weir_stream::consume::{ConsumeOptions, bytes, bytes_sync, text};
use weir_stream::from_iter;

use super::{expect, on_current, with_a, with_c1, with_pull};
use crate::common::baseline::c2_copy;
use crate::common::check::{Count, Tally, Whole};
use crate::common::drive::pull_drain;
use crate::common::harness::Case;
use crate::common::input::{Input, shape};
use crate::common::source::{batches, chunks};

/// The tally of one collected buffer.
fn whole(buf: &[u8]) -> Tally {
    let mut t = Tally::default();
    t.add::<Whole>(buf);
    t
}

/// The tally of the whole input, concatenated (outside any timed region).
fn whole_input(input: &Input) -> Tally {
    let all: Vec<u8> = input
        .make()
        .iter()
        .flat_map(|c| c.iter().copied())
        .collect();
    whole(&all)
}

/// What a collecting consumer's result counts as: its buffer, or, for the
/// expected `LimitExceeded`, the limit alone.
fn outcome(r: Result<impl AsRef<[u8]>, StreamError>) -> Tally {
    match r {
        Ok(buf) => whole(buf.as_ref()),
        Err(StreamError::LimitExceeded { limit }) => Tally {
            bytes: limit,
            ..Tally::default()
        },
        Err(e) => panic!("a bench consumer failed: {e}"),
    }
}

/// Baseline (a) of a collecting consumer: a one-item stream folded into a
/// `Vec<u8>` that grows as it goes, with the same limit rule.
async fn a_fold(v: Vec<Bytes>, limit: Option<u64>) -> Result<Vec<u8>, StreamError> {
    let mut s = stream::iter(v);
    let mut buf = Vec::new();
    while let Some(c) = s.next().await {
        if let Some(limit) = limit
            && (buf.len() + c.len()) as u64 > limit
        {
            return Err(StreamError::LimitExceeded { limit });
        }
        buf.extend_from_slice(&c);
    }
    Ok(buf)
}

/// `bytes()` over `chunks(v, 1)` / `chunks(v, 128)`, `bytes_sync`, (a), and
/// for an unlimited run (c2).
fn bytes_case(id: String, input: Input, limit: Option<u64>) -> Case {
    let expect = match limit {
        Some(l) if l < input.bytes() as u64 => Tally {
            bytes: l,
            ..Tally::default()
        },
        _ => whole_input(&input),
    };
    let opts = move || match limit {
        Some(l) => ConsumeOptions::new().limit(l),
        None => ConsumeOptions::new(),
    };
    let mut case = Case::new(id, input, expect, false);
    for n in [1usize, 128] {
        case = case.core(&format!("bytes/b{n}"), move |v| {
            outcome(on_current(bytes(chunks(v, n), opts())))
        });
    }
    case = case
        .core("bytes_sync/b128", move |v| {
            outcome(bytes_sync(batches(v, 128), opts()))
        })
        .baseline("a/fold", move |v| outcome(on_current(a_fold(v, limit))));
    if limit.is_none() {
        let buf = RefCell::new(Vec::new());
        case = case
            .baseline_ref("c2/memcpy", move |v| {
                let mut buf = buf.borrow_mut();
                c2_copy(v, &mut buf);
                whole(&buf)
            })
            .baseline_ref("c2/fresh", |v| whole(&c2_fresh(v)));
    }
    case
}

/// (c2) into a buffer allocated for this run, of the exact total size.
fn c2_fresh(v: &[Bytes]) -> Vec<u8> {
    let total = v.iter().map(Bytes::len).sum();
    let mut buf = Vec::with_capacity(total);
    for c in v {
        buf.extend_from_slice(c);
    }
    buf
}

/// B02: `bytes()` 16K×500; `text()` 1K×5000 of UTF-8 with characters split
/// across chunks; the iteration consumer 8K×1000; `bytes()` with a limit at
/// 50 % (fails with `LimitExceeded`, checked) and at 100 % of the size.
pub fn b02() -> Vec<Case> {
    let mut cases = Vec::new();
    let (size, count) = (16 << 10, 500);
    let total = (size * count) as u64;

    cases.push(bytes_case(
        format!("B02/bytes/{}", shape(size, count)),
        Input::shared(size, count),
        None,
    ));

    let input = Input::utf8(1 << 10, 5000);
    let mut case = Case::new(
        format!("B02/text/{}", shape(1 << 10, 5000)),
        input.clone(),
        whole_input(&input),
        false,
    );
    for n in [1usize, 128] {
        case = case.core(&format!("text/b{n}"), move |v| {
            outcome(on_current(text(chunks(v, n), ConsumeOptions::new())))
        });
    }
    let buf = RefCell::new(Vec::new());
    cases.push(
        case.baseline("a/fold", |v| {
            let bytes = on_current(a_fold(v, None)).expect("no limit");
            whole(String::from_utf8(bytes).expect("valid UTF-8").as_bytes())
        })
        // The ceiling of text(): one memcpy and one UTF-8 validation.
        .baseline_ref("c2/memcpy+utf8", move |v| {
            let mut buf = buf.borrow_mut();
            c2_copy(v, &mut buf);
            whole(std::str::from_utf8(&buf).expect("valid UTF-8").as_bytes())
        })
        .baseline_ref("c2/fresh+utf8", |v| {
            let s = String::from_utf8(c2_fresh(v)).expect("valid UTF-8");
            whole(s.as_bytes())
        }),
    );

    let input = Input::shared(8 << 10, 1000);
    let mut case = Case::new(
        format!("B02/iterate/{}", shape(8 << 10, 1000)),
        input.clone(),
        expect::<Count>(&input, &[]),
        true,
    );
    // The source itself, iterated batch by batch (no pipeline layer).
    for n in [1usize, 128] {
        case = case.core(&format!("iter/b{n}"), move |v| {
            on_current(pull_drain::<Count, _>(chunks(v, n)))
        });
    }
    case = case.core("iter/from_iter", |v| {
        on_current(pull_drain::<Count, _>(from_iter(v)))
    });
    case = with_pull::<Count, _, _>(case, "pull", || ());
    case = with_a::<Count, _, _>(case, stream::iter);
    cases.push(with_c1(case));

    for (pct, limit) in [(50, total / 2), (100, total)] {
        cases.push(bytes_case(
            format!("B02/bytes_limit{pct}/{}", shape(size, count)),
            Input::shared(size, count),
            Some(limit),
        ));
    }
    cases
}
