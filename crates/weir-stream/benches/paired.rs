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

use std::time::Duration;

use common::{cases, harness};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let selected = harness::select_contenders(harness::select(cases::all(), &harness::filters()));
    if std::env::args().any(|a| a == "--list") {
        for c in &selected {
            println!("{}: benchmark", c.id);
        }
        return;
    }
    if !harness::bench_mode() {
        harness::smoke(&selected);
        return;
    }
    let rounds = env_num("WEIR_PAIRED_ROUNDS", 9).max(1);
    let slice = Duration::from_millis(env_num("WEIR_PAIRED_MS", 30) as u64);
    let mut results = Vec::new();
    for case in &selected {
        let r = harness::paired_case(case, rounds, slice);
        eprintln!("paired: {} done", r.id);
        for line in harness::markdown(std::slice::from_ref(&r)).lines().skip(2) {
            println!("{line}");
        }
        results.push(r);
    }
    println!("\n{}", harness::markdown(&results));
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/weir-bench");
    let path = format!("{dir}/paired.json");
    match std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, harness::json(&results, rounds)))
    {
        Ok(()) => println!("wrote {path}"),
        Err(e) => eprintln!("could not write {path}: {e}"),
    }
}
