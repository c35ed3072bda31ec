//! Scenarios of the modules still being written (criterion): B02 consumers,
//! B03 push, B06 pipe_to, B07 share/broadcast, B09 merge. Each scenario
//! function in `common/cases.rs` returns no case yet; filling one in is
//! all it takes to run it here and in `paired.rs`.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};

use common::{cases, harness};

fn model_scenarios(c: &mut Criterion) {
    harness::register(c, &cases::model_scenarios());
}

criterion_group!(benches, model_scenarios);
criterion_main!(benches);
