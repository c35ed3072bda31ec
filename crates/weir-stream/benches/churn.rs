//! B12, construction churn (criterion): 10,240 constructions per iteration
//! of one-transform pipelines, push pairs and two-consumer shares, built and
//! dropped, or built and used for one 1 KiB chunk. Throughput is in
//! constructions/s; allocations per construction are in `memory.rs`.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};

use common::{cases, harness};

fn churn(c: &mut Criterion) {
    harness::register(c, &cases::b12());
}

criterion_group!(benches, churn);
criterion_main!(benches);
