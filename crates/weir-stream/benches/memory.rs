//! Memory (B10, the memory targets of the plan, and allocation counts for
//! B06/B12): peak live bytes, allocations and RSS of whole runs, measured
//! with a counting global allocator. Not criterion: each scenario runs
//! once, in this process, one after the other.
//!
//! The allocator is two small crates stacked, so this file needs no
//! `unsafe`: `peakmem-alloc` (live bytes since a reset, and their peak)
//! around `stats_alloc` (allocation counts and bytes). Both count every
//! thread, tokio workers included. RSS is sampled every 2 ms from
//! `/proc/self/statm` by a thread that does not allocate.
//!
//! Inputs are made lazily, inside the run, one chunk at a time (owned
//! chunks are fresh allocations, like socket reads), so the peak shows what
//! the stream holds, not the input.
//!
//! Asserted (plan, "Targets", Memory), each with a bookkeeping allowance
//! ([`mem::allowance`]) on top of the data:
//! - 100 MB pull + XOR: peak live bytes < 4 MB;
//! - push, every policy, hwm 1…1024, fast writer and slow reader: peak ≤
//!   (2·hwm + 1) chunks; drop policies deliver in order and count their
//!   drops (`delivered + dropped = written`);
//! - broadcast to 2 slow consumers: peak ≤ (hwm + 3) chunks;
//! - share × 2, 100 MB: the ring never holds more than hwm entries, peak ≤
//!   (hwm + 3) chunks;
//! - a share whose secondary consumer stalls holds at most hwm entries, and
//!   the secondary then gets `Lagged`;
//! - the slow sink (1 ms per write) keeps push and pull bounded the same way;
//! - `bytes()` of a one-chunk stream returns that chunk: no copy.
//!
//! Everything else is reported. `cargo bench -p weir-stream --bench memory`;
//! under `cargo test --benches` the sustained runs are 10 MB, not 100 MB.

mod common;
mod mem;

use std::alloc::System;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use peakmem_alloc::{PeakMemAlloc, PeakMemAllocTrait};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

use common::check::Tally;
use common::harness::bench_mode;

#[global_allocator]
static GLOBAL: PeakMemAlloc<&'static StatsAlloc<System>> = PeakMemAlloc::new(&INSTRUMENTED_SYSTEM);

/// Samples the resident set size every 2 ms without allocating.
struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn rss_bytes(f: &std::fs::File) -> usize {
    let mut buf = [0u8; 128];
    let n = f.read_at(&mut buf, 0).unwrap_or(0);
    // statm: "size resident shared text lib data dt", in pages.
    let pages = buf[..n]
        .split(|&b| b == b' ')
        .nth(1)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0);
    pages * 4096
}

impl RssSampler {
    fn start() -> (Self, usize) {
        let file = std::fs::File::open("/proc/self/statm").expect("reading /proc/self/statm");
        let base = rss_bytes(&file);
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicUsize::new(base));
        let thread = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_bytes(&file), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
                peak.fetch_max(rss_bytes(&file), Ordering::Relaxed);
            })
        };
        (
            RssSampler {
                stop,
                peak,
                thread: Some(thread),
            },
            base,
        )
    }

    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

/// What one run cost.
#[derive(Clone, Copy, Debug)]
pub struct Cost {
    /// Allocations and reallocations, every thread.
    pub allocs: usize,
    /// Bytes allocated (not freed), every thread.
    pub bytes_allocated: usize,
    /// Peak of (bytes allocated − bytes freed) since the run started.
    pub peak_live: usize,
    /// Peak RSS minus RSS at the start.
    pub rss_delta: usize,
    /// Wall time of the run (reported for the slow runs, not a benchmark).
    pub elapsed: Duration,
}

/// Runs `f` once under measurement.
pub fn measure_raw<R>(f: impl FnOnce() -> R) -> (Cost, R) {
    let (rss, rss_base) = RssSampler::start();
    let region = Region::new(&INSTRUMENTED_SYSTEM);
    GLOBAL.reset_peak_memory();
    let start = Instant::now();
    let out = f();
    let elapsed = start.elapsed();
    let peak_live = GLOBAL.get_peak_memory();
    let change = region.change();
    let rss_peak = rss.finish();
    (
        Cost {
            allocs: change.allocations + change.reallocations,
            bytes_allocated: change.bytes_allocated,
            peak_live,
            rss_delta: rss_peak.saturating_sub(rss_base),
            elapsed,
        },
        out,
    )
}

/// One row of the report.
pub struct Report {
    /// What ran.
    pub name: String,
    /// Units of work (chunks or constructions).
    pub units: usize,
    /// Its cost.
    pub cost: Cost,
    /// The peak live bytes it was asserted against, if any.
    pub bound: Option<usize>,
    /// Anything else worth a column: drops, ring size, elapsed time.
    pub note: String,
}

impl Report {
    /// A row for `cost`, with nothing asserted yet.
    pub fn new(name: impl Into<String>, units: usize, cost: Cost) -> Report {
        Report {
            name: name.into(),
            units,
            cost,
            bound: None,
            note: String::new(),
        }
    }

    /// Asserts `peak_live ≤ bound` and records the bound.
    #[track_caller]
    pub fn bounded(mut self, bound: usize) -> Report {
        assert!(
            self.cost.peak_live <= bound,
            "{}: peak live bytes {} > bound {bound}",
            self.name,
            self.cost.peak_live
        );
        self.bound = Some(bound);
        self
    }

    /// Adds a note.
    pub fn note(mut self, note: impl Into<String>) -> Report {
        self.note = note.into();
        self
    }
}

/// Runs `f` once under measurement and checks its tally against `expect`.
#[track_caller]
pub fn measure(name: &str, units: usize, expect: &Tally, f: impl FnOnce() -> Tally) -> Report {
    let (cost, tally) = measure_raw(f);
    tally.check(expect, name);
    Report::new(name, units, cost)
}

fn print(section: &str, reports: &[Report]) {
    println!("\n### {section}\n");
    println!(
        "| run | units | allocs/unit | bytes allocated | peak live bytes | asserted ≤ | peak RSS delta | notes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for r in reports {
        println!(
            "| {} | {} | {:.3} | {} | {} | {} | {} | {} |",
            r.name,
            r.units,
            r.cost.allocs as f64 / r.units.max(1) as f64,
            r.cost.bytes_allocated,
            r.cost.peak_live,
            r.bound.map_or("–".to_owned(), |b| b.to_string()),
            r.cost.rss_delta,
            r.note
        );
    }
}

/// A family of runs: full size or smoke size in, rows out.
type Section = fn(bool) -> Vec<Report>;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        // `cargo bench -- --list` lists criterion benches; nothing to list here.
        return;
    }
    let full = bench_mode();
    // Built before any measurement.
    let _ = common::input::pool();
    let _ = common::rt::current();
    let _ = common::rt::multi();
    let _ = common::rt::timed();

    let sections: [(&str, Section); 6] = [
        ("Pull (100 MB sustained)", mem::pull::run),
        (
            "Push: policy × hwm, slow consumers, sustained",
            mem::push::run,
        ),
        ("Share and broadcast", mem::multi::run),
        ("Sinks: pipe_to, the slow sink (B11)", mem::sink::run),
        ("Consumers", mem::consume::run),
        ("Construction (B12, per construction)", mem::churn::run),
    ];
    for (name, run) in sections {
        let reports = run(full);
        print(name, &reports);
    }
    println!("\nEvery assertion held (see the module docs for the list).");
}
