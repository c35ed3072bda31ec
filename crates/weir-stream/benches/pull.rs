//! Pull-pipeline scenarios (criterion): B01 raw throughput, B04 transforms,
//! B05 chain depth, B06 pipelines (pull part), B08 async pull, B11 proxy
//! shapes. Every contender of a scenario sits in one criterion group, so
//! their numbers come from the same run; `paired.rs` gives paired ratios.
//!
//! `cargo bench -p weir-stream --bench pull -- B04` runs one scenario.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};

use common::{cases, harness};

fn pull_scenarios(c: &mut Criterion) {
    harness::register(c, &cases::pull_scenarios());
}

criterion_group!(benches, pull_scenarios);
criterion_main!(benches);
