//! Consumers: `bytes()` of a one-chunk stream (asserted: no copy; the
//! allocations are reported), and 100 MB through `bytes()`, which collects everything by
//! design (the seeds' "~100 MB with bytes()").

use weir_stream::consume::{ConsumeOptions, bytes};
use weir_stream::{once, pull};

use super::pull::reference;
use super::{CHUNK, chunk, lazy, sustained};
use crate::common::cases::on_current;
use crate::common::check::{Flow, Tally};
use crate::{Report, measure_raw};

/// The consumer runs.
pub fn run(full: bool) -> Vec<Report> {
    let mut reports = Vec::new();

    let one = chunk(0, 16 << 10, true);
    let ptr = one.as_ptr();
    let (cost, out) = measure_raw(|| {
        on_current(bytes(once(one), ConsumeOptions::new())).expect("bytes() failed")
    });
    assert_eq!(out.as_ptr(), ptr, "bytes() copied a one-chunk stream");
    assert!(
        cost.bytes_allocated < 1024,
        "bytes() of one chunk allocated {} bytes",
        cost.bytes_allocated
    );
    reports.push(
        Report::new("bytes() of one 16 KiB chunk", 1, cost)
            .bounded(1024)
            .note("same pointer back: 0 copies (the allocation is the list of chunk handles)"),
    );

    let n = sustained(full);
    let name = format!("bytes() sustained {} MB, owned", n * CHUNK / 1_000_000);
    let (cost, out) = measure_raw(|| {
        on_current(bytes(
            pull(lazy(n, CHUNK, true, 1), ()),
            ConsumeOptions::new(),
        ))
        .expect("bytes() failed")
    });
    let mut t = Tally::default();
    t.add::<Flow>(&out);
    t.check(&reference::<Flow>(n, false), &name);
    reports.push(Report::new(name, n, cost).note("collects: chunks held, then one copy"));
    reports
}
