//! Interleaved paired ratios over the natural-code scenarios (N01–N06 of
//! `common/cases/natural.rs`): the crate used the way its users write it,
//! against a one-item `futures` chain and a task per stage.
//!
//! `cargo bench -p weir-stream --bench natural [-- FILTER...]`, with the
//! environment of `paired.rs`. Prints a markdown table and writes
//! `target/weir-bench/natural.json`. Under `cargo test --benches` it runs
//! every contender once (smoke check).

mod common;

fn main() {
    common::harness::paired_main(common::cases::natural::all(), "natural.json");
}
