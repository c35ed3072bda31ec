//! Interleaved paired ratios over every scenario of `common/cases.rs`.
//!
//! This machine's speed switches between two levels every few seconds
//! (plan, section 4), so ratios taken from separate criterion runs drift.
//! Here each round runs every contender of a case back to back, in a
//! rotating order, and the ratio is taken within the round; the report is
//! the median over rounds.
//!
//! `cargo bench -p weir-stream --bench paired [-- FILTER...]`. Environment:
//! `WEIR_PAIRED_ROUNDS` (default 9), `WEIR_PAIRED_MS` (time per contender
//! per round, default 30), `WEIR_BENCH_DESC` (free text for the JSON),
//! `WEIR_CONTENDERS` (comma-separated name substrings: run only those).
//! Prints a markdown table and writes `target/weir-bench/paired.json`.
//! Under `cargo test --benches` it runs every contender once (smoke check).

mod common;

fn main() {
    common::harness::paired_main(common::cases::all(), "paired.json");
}
