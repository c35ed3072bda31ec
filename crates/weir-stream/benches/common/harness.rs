//! Scenarios as data: a [`Case`] is one input shape with its expected tally
//! and a list of contenders (core configurations and baselines). The same
//! cases feed criterion ([`register`]) and the interleaved paired runner
//! ([`paired`]), so a scenario is written once.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput};

use super::check::Tally;
use super::input::Input;

/// What one run returns: the sink's tally, and whatever must be dropped
/// *outside* the timed region (the input, for by-reference baselines).
#[derive(Debug, Default)]
pub struct Done {
    /// What the sink saw.
    pub tally: Tally,
    /// Handed back so its drop is not timed.
    pub keep: Vec<Bytes>,
}

/// One timed run: consumes one iteration's input.
pub type RunFn = Box<dyn Fn(Vec<Bytes>) -> Done>;

/// One contender of a case.
pub struct Contender {
    /// `pull/b1`, `a/futures`, `b/mpsc16`, `c1/iter`...
    pub name: String,
    /// Whether this is a core configuration (ratios are taken against it).
    pub core: bool,
    /// The timed run.
    pub run: RunFn,
}

/// What one unit of work is, for ns/unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// One input chunk; throughput in decimal MB/s of input bytes.
    Chunk,
    /// One construction (B12); throughput in constructions/s.
    Construction,
}

/// One scenario at one size.
pub struct Case {
    /// `B04/xor/8Kx500`.
    pub id: String,
    /// Built fresh for every iteration, outside the timed region.
    pub input: Input,
    /// The reference tally every run must reproduce.
    pub expect: Tally,
    /// Work units per iteration (chunks or constructions).
    pub units: u64,
    /// What a unit is.
    pub unit: Unit,
    /// Whether no stage touches the bytes (throughput is "logical").
    pub logical: bool,
    /// Large inputs: criterion takes 10 samples instead of 100.
    pub slow: bool,
    /// The contenders, core first.
    pub contenders: Vec<Contender>,
}

impl Case {
    /// A case over `input`, checked against `expect`; one unit per chunk.
    pub fn new(id: impl Into<String>, input: Input, expect: Tally, logical: bool) -> Self {
        let units = input.chunks() as u64;
        let slow = input.bytes() >= 32 << 20;
        Case {
            id: id.into(),
            input,
            expect,
            units,
            unit: Unit::Chunk,
            logical,
            slow,
            contenders: Vec::new(),
        }
    }

    /// Counts `units` constructions per iteration instead of chunks.
    pub fn constructions(mut self, units: u64) -> Self {
        self.units = units;
        self.unit = Unit::Construction;
        self
    }

    /// Adds a core contender that consumes the input.
    pub fn core(mut self, name: &str, f: impl Fn(Vec<Bytes>) -> Tally + 'static) -> Self {
        self.contenders.push(Contender {
            name: name.to_owned(),
            core: true,
            run: Box::new(move |v| Done {
                tally: f(v),
                keep: Vec::new(),
            }),
        });
        self
    }

    /// Adds a baseline that consumes the input.
    pub fn baseline(mut self, name: &str, f: impl Fn(Vec<Bytes>) -> Tally + 'static) -> Self {
        self.contenders.push(Contender {
            name: name.to_owned(),
            core: false,
            run: Box::new(move |v| Done {
                tally: f(v),
                keep: Vec::new(),
            }),
        });
        self
    }

    /// Adds a baseline that only borrows the input ((c1)–(c3)); the input
    /// is dropped outside the timed region.
    pub fn baseline_ref(mut self, name: &str, f: impl Fn(&[Bytes]) -> Tally + 'static) -> Self {
        self.contenders.push(Contender {
            name: name.to_owned(),
            core: false,
            run: Box::new(move |v| Done {
                tally: f(&v),
                keep: v,
            }),
        });
        self
    }

    /// Total input bytes per iteration.
    pub fn bytes(&self) -> u64 {
        self.input.bytes() as u64
    }

    /// Runs `ct` once on a fresh input and checks the tally.
    fn run_checked(&self, ct: &Contender, input: Vec<Bytes>) -> Done {
        let done = (ct.run)(input);
        done.tally
            .check(&self.expect, &format!("{} {}", self.id, ct.name));
        done
    }
}

/// Registers every case with criterion: one group per case, one bench per
/// contender, throughput in decimal bytes (or elements for constructions).
pub fn register(c: &mut Criterion, cases: &[Case]) {
    for case in cases {
        let mut g = c.benchmark_group(&case.id);
        g.throughput(match case.unit {
            Unit::Chunk => Throughput::BytesDecimal(case.bytes()),
            Unit::Construction => Throughput::Elements(case.units),
        });
        if case.slow {
            g.sample_size(10);
        }
        for ct in &case.contenders {
            g.bench_function(&ct.name, |b| {
                b.iter_batched(
                    || case.input.make(),
                    |input| case.run_checked(ct, input),
                    BatchSize::LargeInput,
                )
            });
        }
        g.finish();
    }
}

/// Whether a `harness = false` binary was started by `cargo bench` (which
/// passes `--bench`) rather than by `cargo test --benches` (a smoke run).
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Positional arguments (filters), skipping criterion's flags and their values.
pub fn filters() -> Vec<String> {
    const WITH_VALUE: &[&str] = &[
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--noise-threshold",
        "--significance-level",
        "--confidence-level",
        "--nresamples",
        "--output-format",
        "--profile-time",
        "--color",
        "--format",
        "--plotting-backend",
    ];
    let mut out = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if WITH_VALUE.contains(&a.as_str()) {
            args.next();
        } else if !a.starts_with('-') {
            out.push(a);
        }
    }
    out
}

/// Keeps the cases whose id contains one of `filters` (all when empty).
pub fn select(cases: Vec<Case>, filters: &[String]) -> Vec<Case> {
    cases
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.id.contains(f.as_str())))
        .collect()
}

/// Keeps, in every case, only the contenders whose name contains one of
/// the comma-separated substrings of `WEIR_CONTENDERS` (all when unset):
/// for looking at one contender alone (`perf stat`, say).
pub fn select_contenders(mut cases: Vec<Case>) -> Vec<Case> {
    let Ok(wanted) = std::env::var("WEIR_CONTENDERS") else {
        return cases;
    };
    let wanted: Vec<&str> = wanted.split(',').filter(|w| !w.is_empty()).collect();
    for case in &mut cases {
        case.contenders
            .retain(|ct| wanted.iter().any(|w| ct.name.contains(w)));
    }
    cases.retain(|c| !c.contenders.is_empty());
    cases
}

/// One contender's paired result.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Contender name.
    pub name: String,
    /// Whether it is a core configuration.
    pub core: bool,
    /// Median ns per iteration over the rounds.
    pub ns_per_iter: f64,
}

/// One case's paired result.
#[derive(Clone, Debug)]
pub struct PairedCase {
    /// Case id.
    pub id: String,
    /// Units per iteration.
    pub units: u64,
    /// Unit kind.
    pub unit: Unit,
    /// Input bytes per iteration.
    pub bytes: u64,
    /// Logical throughput (no byte touched).
    pub logical: bool,
    /// Per contender, in case order.
    pub measured: Vec<Measured>,
    /// `speedup[i][j]`: median over rounds of `t_j / t_i`, for core contender
    /// `i` (index into `measured`) against every contender `j`. Above 1 means
    /// the core contender is faster.
    pub speedup: Vec<(usize, Vec<f64>)>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times `iters` runs of `ct`, inputs built beforehand; ns per iteration.
fn time_runs(case: &Case, ct: &Contender, iters: usize) -> f64 {
    let inputs: Vec<Vec<Bytes>> = (0..iters).map(|_| case.input.make()).collect();
    let mut outs = Vec::with_capacity(iters);
    let start = Instant::now();
    for input in inputs {
        outs.push(case.run_checked(ct, input));
    }
    let elapsed = start.elapsed();
    drop(outs);
    elapsed.as_nanos() as f64 / iters as f64
}

/// Runs every contender of `case` in interleaved rounds (the machine's
/// speed drifts every few seconds: compare within a round, never across)
/// and reports paired ratios. `slice` is the time per contender per round.
pub fn paired_case(case: &Case, rounds: usize, slice: Duration) -> PairedCase {
    let n = case.contenders.len();
    // Warm up and calibrate: iterations per round so each slice ≈ `slice`.
    let iters: Vec<usize> = case
        .contenders
        .iter()
        .map(|ct| {
            let t = time_runs(case, ct, 1).max(time_runs(case, ct, 1));
            // Inputs of a slice are built up front: keep them under 256 MiB
            // of handles.
            let most = (256 << 20) / (case.input.chunks() * 32).max(1);
            ((slice.as_nanos() as f64 / t.max(1.0)) as usize).clamp(1, most.clamp(1, 10_000))
        })
        .collect();
    let mut per_round = vec![Vec::with_capacity(rounds); n];
    for r in 0..rounds {
        for k in 0..n {
            // Rotate the order so no contender always runs first.
            let j = (k + r) % n;
            per_round[j].push(time_runs(case, &case.contenders[j], iters[j]));
        }
    }
    let measured = case
        .contenders
        .iter()
        .zip(&per_round)
        .map(|(ct, t)| Measured {
            name: ct.name.clone(),
            core: ct.core,
            ns_per_iter: median(&mut t.clone()),
        })
        .collect();
    let speedup = (0..n)
        .filter(|&i| case.contenders[i].core)
        .map(|i| {
            let row = (0..n)
                .map(|j| {
                    let mut ratios: Vec<f64> = (0..rounds)
                        .map(|r| per_round[j][r] / per_round[i][r])
                        .collect();
                    median(&mut ratios)
                })
                .collect();
            (i, row)
        })
        .collect();
    PairedCase {
        id: case.id.clone(),
        units: case.units,
        unit: case.unit,
        bytes: case.bytes(),
        logical: case.logical,
        measured,
        speedup,
    }
}

/// Runs one contender once per case, checking tallies: the smoke run of
/// `cargo test --benches`.
pub fn smoke(cases: &[Case]) {
    for case in cases {
        for ct in &case.contenders {
            drop(case.run_checked(ct, case.input.make()));
        }
        println!("ok {} ({} contenders)", case.id, case.contenders.len());
    }
}

/// The baseline columns of [`markdown`]: a name ending in `/` is a prefix.
const COLS: [&str; 8] = [
    "a/",
    "b/mpsc1",
    "b/mpsc16",
    "c1/iter",
    "c1/drain",
    "c2/memcpy",
    "c2/fresh",
    "c3/",
];

/// The baseline column a contender name belongs to.
fn column(name: &str) -> Option<usize> {
    COLS.iter().position(|p| {
        if p.starts_with("c2/") || p.ends_with('/') {
            name.starts_with(p)
        } else {
            name == *p
        }
    })
}

/// A markdown table: one row per (case, core contender), one column per
/// baseline, each cell the median paired speedup `t_baseline / t_core`.
pub fn markdown(results: &[PairedCase]) -> String {
    let mut s = String::new();
    s.push_str(
        "| case | core | ns/unit | MB/s | vs a | vs b cap1 | vs b cap16 | vs c1 iter | vs c1 drain | vs c2 | vs c2 fresh | vs c3 |\n",
    );
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in results {
        for (i, row) in &r.speedup {
            let m = &r.measured[*i];
            let ns_unit = m.ns_per_iter / r.units as f64;
            let mbps = match r.unit {
                Unit::Chunk => {
                    let v = r.bytes as f64 / m.ns_per_iter * 1e3;
                    if r.logical {
                        format!("{v:.0} (logical)")
                    } else {
                        format!("{v:.0}")
                    }
                }
                Unit::Construction => "–".to_owned(),
            };
            let mut cells = vec!["–".to_owned(); COLS.len()];
            let mut others = Vec::new();
            for (j, x) in row.iter().enumerate() {
                if j == *i {
                    continue;
                }
                let name = &r.measured[j].name;
                match column(name) {
                    Some(col) if !r.measured[j].core => {
                        cells[col] = format!("{x:.2}×");
                    }
                    _ => others.push(format!("{name} {x:.2}×")),
                }
            }
            let core_name = if others.is_empty() {
                m.name.clone()
            } else {
                format!("{} (vs {})", m.name, others.join(", "))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {} | {} |",
                r.id,
                core_name,
                ns_unit,
                mbps,
                cells.join(" | ")
            );
        }
    }
    s
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default()
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The results as JSON, with git sha, rustc version, CPU and the
/// free-text description from `WEIR_BENCH_DESC`.
pub fn json(results: &[PairedCase], rounds: usize) -> String {
    let mut s = String::from("{\n");
    let _ = writeln!(
        s,
        "  \"git_sha\": {},",
        json_str(&command_line(
            "git",
            &["describe", "--always", "--dirty", "--abbrev=40"]
        ))
    );
    let _ = writeln!(
        s,
        "  \"rustc\": {},",
        json_str(&command_line("rustc", &["-V"]))
    );
    let _ = writeln!(s, "  \"cpu\": {},", json_str(&cpu_model()));
    let _ = writeln!(
        s,
        "  \"description\": {},",
        json_str(&std::env::var("WEIR_BENCH_DESC").unwrap_or_default())
    );
    let _ = writeln!(s, "  \"rounds\": {rounds},");
    s.push_str("  \"cases\": [\n");
    for (k, r) in results.iter().enumerate() {
        let _ = write!(
            s,
            "    {{\"id\": {}, \"units\": {}, \"unit\": {}, \"bytes\": {}, \"logical\": {}, \"contenders\": [",
            json_str(&r.id),
            r.units,
            json_str(match r.unit {
                Unit::Chunk => "chunk",
                Unit::Construction => "construction",
            }),
            r.bytes,
            r.logical
        );
        for (j, m) in r.measured.iter().enumerate() {
            let speedups: Vec<String> = r
                .speedup
                .iter()
                .map(|(i, row)| format!("{}: {:.4}", json_str(&r.measured[*i].name), row[j]))
                .collect();
            let _ = write!(
                s,
                "{}{{\"name\": {}, \"core\": {}, \"ns_per_iter\": {:.1}, \"ns_per_unit\": {:.3}, \"t_over_core\": {{{}}}}}",
                if j == 0 { "" } else { ", " },
                json_str(&m.name),
                m.core,
                m.ns_per_iter,
                m.ns_per_iter / r.units as f64,
                speedups.join(", ")
            );
        }
        let _ = writeln!(s, "]}}{}", if k + 1 == results.len() { "" } else { "," });
    }
    s.push_str("  ]\n}\n");
    s
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The main of a paired bench binary: filters `cases` by the command line
/// and `WEIR_CONTENDERS`; under `cargo test --benches`, runs each contender
/// once (smoke); under `cargo bench`, runs the interleaved rounds
/// (`WEIR_PAIRED_ROUNDS`, default 9; `WEIR_PAIRED_MS` per contender per
/// round, default 30), prints markdown and writes
/// `target/weir-bench/<json_name>`.
pub fn paired_main(cases: Vec<Case>, json_name: &str) {
    let selected = select_contenders(select(cases, &filters()));
    if std::env::args().any(|a| a == "--list") {
        for c in &selected {
            println!("{}: benchmark", c.id);
        }
        return;
    }
    if !bench_mode() {
        smoke(&selected);
        return;
    }
    let rounds = env_num("WEIR_PAIRED_ROUNDS", 9).max(1);
    let slice = Duration::from_millis(env_num("WEIR_PAIRED_MS", 30) as u64);
    let mut results = Vec::new();
    for case in &selected {
        let r = paired_case(case, rounds, slice);
        eprintln!("paired: {} done", r.id);
        for line in markdown(std::slice::from_ref(&r)).lines().skip(2) {
            println!("{line}");
        }
        results.push(r);
    }
    println!("\n{}", markdown(&results));
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/weir-bench");
    let path = format!("{dir}/{json_name}");
    match std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, json(&results, rounds)))
    {
        Ok(()) => println!("wrote {path}"),
        Err(e) => eprintln!("could not write {path}: {e}"),
    }
}
