//! B12, construction churn (criterion): build + drop, and build + drain one
//! chunk, of 10,240 one-transform pipelines per iteration. Throughput is in
//! constructions/s; allocations per construction are in `memory.rs`.
//!
//! TODO(B12): push pairs and two-consumer shares go in `cases::b12` once
//! push.rs/share.rs land; nothing to change here.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};

use common::{cases, harness};

fn churn(c: &mut Criterion) {
    harness::register(c, &cases::b12());
}

criterion_group!(benches, churn);
criterion_main!(benches);
