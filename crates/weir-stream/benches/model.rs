//! The scenarios beyond the pull pipeline (criterion): B02 consumers, B03
//! push, B06 `pipe_to`, B07 share/broadcast, B09 merge. The cases are
//! written once in `common/cases/`; `paired.rs` runs the same ones.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};

use common::{cases, harness};

fn model_scenarios(c: &mut Criterion) {
    harness::register(c, &cases::model_scenarios());
}

criterion_group!(benches, model_scenarios);
criterion_main!(benches);
