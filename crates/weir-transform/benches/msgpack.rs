//! msgpack: the small-chunk case (benches/README.md).
//!
//! A msgpack decoder that retries from the start of its buffer on every
//! chunk ([`NaiveMsgpackToJsonLines`]) against the incremental one
//! ([`MsgpackToJsonLines`]), over a ~7 MB API-like response fed as a socket
//! delivers it, in 8 KB pieces, with and without `coalesce` in front.
//!
//! `cargo bench -p weir-transform --bench msgpack -- --warm-up-time 1 --measurement-time 3`
//! (add `WEIR_MSGPACK_REPORT=1` for the naive decoder over 8 KiB chunks
//! of the whole array, about a minute per run, so run once each outside
//! criterion, and for interleaved paired runs of the fast cases).
//!
//! Every case is a `weir_stream::pull_sync` pipeline over an in-memory
//! source of one chunk per batch; its output is checked once against the
//! reference (the incremental decoder over the whole document) before it
//! is timed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, criterion_group, criterion_main};
use rmpv::Value;
use weir_stream::consume::{ConsumeOptions, bytes_sync};
use weir_stream::{Batch, BatchResult, Transform, TransformExt, coalesce, pull_sync_batches};
use weir_transform::msgpack::{MsgpackJsonSettings, MsgpackToJsonLines, NaiveMsgpackToJsonLines};

/// What a socket read typically hands over.
const SOCKET_CHUNK: usize = 8 * 1024;

/// Size the documents are grown to, in bytes.
const DOC_BYTES: usize = 7_000_000;

/// A small deterministic generator (xorshift64*), so every run decodes the
/// same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A lowercase word of `min` to `min + spread - 1` letters.
    fn word(&mut self, min: u64, spread: u64) -> String {
        let len = min + self.below(spread);
        (0..len)
            .map(|_| char::from(b'a' + self.below(26) as u8))
            .collect()
    }
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

/// One record of an API response: a customer with an address, tags and
/// recent orders (about 400 bytes of msgpack).
fn record(rng: &mut Rng, id: u64) -> Value {
    let tags = (0..rng.below(5))
        .map(|_| Value::from(rng.word(3, 6)))
        .collect();
    let orders = (0..1 + rng.below(4))
        .map(|_| {
            map(vec![
                ("at", Value::from(1_700_000_000 + rng.below(30_000_000))),
                ("amount", Value::F64(rng.below(1_000_000) as f64 / 100.0)),
                (
                    "currency",
                    Value::from(["EUR", "USD", "GBP"][rng.below(3) as usize]),
                ),
                (
                    "status",
                    Value::from(["paid", "refunded", "pending"][rng.below(3) as usize]),
                ),
            ])
        })
        .collect();
    let first = rng.word(4, 6);
    let last = rng.word(5, 8);
    map(vec![
        ("id", Value::from(id)),
        (
            "uuid",
            Value::from(format!("{:016x}-{:016x}", rng.next(), rng.next())),
        ),
        ("name", Value::from(format!("{first} {last}"))),
        ("email", Value::from(format!("{first}.{last}@example.com"))),
        ("active", Value::Boolean(rng.below(4) != 0)),
        ("score", Value::F64(rng.below(10_000) as f64 / 7.0)),
        (
            "balance_cents",
            Value::from(rng.below(2_000_000) as i64 - 500_000),
        ),
        (
            "created_at",
            Value::from(1_500_000_000 + rng.below(200_000_000)),
        ),
        ("tags", Value::Array(tags)),
        (
            "address",
            map(vec![
                (
                    "street",
                    Value::from(format!("{} {} Street", rng.below(999), rng.word(7, 1))),
                ),
                ("city", Value::from(rng.word(8, 1))),
                ("zip", Value::from(format!("{:05}", rng.below(100_000)))),
                (
                    "country",
                    Value::from(["DE", "FR", "US", "GB", "JP"][rng.below(5) as usize]),
                ),
            ]),
        ),
        ("orders", Value::Array(orders)),
    ])
}

/// About `DOC_BYTES` of records, each encoded on its own.
fn records() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x5eed_0fa1_15ee_d5ee);
    let mut out = Vec::new();
    let mut total = 0;
    while total < DOC_BYTES {
        let mut buf = Vec::new();
        rmpv::encode::write_value(&mut buf, &record(&mut rng, out.len() as u64)).expect("encode");
        total += buf.len();
        out.push(buf);
    }
    out
}

/// The API response: one top-level array of every record (array 32).
fn one_array(records: &[Vec<u8>]) -> Bytes {
    let mut doc = Vec::with_capacity(DOC_BYTES + 64);
    rmp::encode::write_array_len(&mut doc, records.len() as u32).expect("encode");
    for r in records {
        doc.extend_from_slice(r);
    }
    Bytes::from(doc)
}

/// The same records as a stream of top-level values.
fn many_values(records: &[Vec<u8>]) -> Bytes {
    Bytes::from(records.concat())
}

/// `doc` cut into `size`-byte chunks, without copying.
fn cut(doc: &Bytes, size: usize) -> Vec<Bytes> {
    (0..doc.len())
        .step_by(size)
        .map(|at| doc.slice(at..(at + size).min(doc.len())))
        .collect()
}

fn source(chunks: &[Bytes]) -> impl Iterator<Item = BatchResult> + '_ {
    chunks.iter().map(|c| Ok(Batch::one(c.clone())))
}

fn settings() -> MsgpackJsonSettings {
    MsgpackJsonSettings::default()
}

fn naive() -> NaiveMsgpackToJsonLines {
    NaiveMsgpackToJsonLines::new(settings())
}

fn incremental() -> MsgpackToJsonLines {
    MsgpackToJsonLines::new(settings())
}

/// One case: the chunks fed, and the stage (chain) built fresh per run.
struct Case<'a, T> {
    name: &'a str,
    chunks: &'a [Bytes],
    stage: fn() -> T,
}

impl<T: Transform> Case<'_, T> {
    /// The whole output, for the check.
    fn output(&self) -> Bytes {
        bytes_sync(
            pull_sync_batches(source(self.chunks), (self.stage)()),
            ConsumeOptions::new(),
        )
        .expect("the stage failed")
    }

    /// The timed run: output bytes, counted as they come.
    fn run(&self) -> usize {
        pull_sync_batches(source(self.chunks), (self.stage)())
            .map(|b| b.expect("the stage failed").byte_len())
            .sum()
    }

    fn bench(&self, group: &mut BenchmarkGroup<'_, WallTime>, reference: &Bytes) {
        assert!(
            self.output() == *reference,
            "{}: output differs from the reference",
            self.name
        );
        group.bench_function(self.name, |b| b.iter(|| black_box(self.run())));
    }
}

/// Runs `case` once, timed, and checks its output; for the cases that take
/// seconds (ten criterion samples of those would take many minutes).
fn single_shot<T: Transform>(case: &Case<'_, T>, reference: &Bytes) {
    let started = Instant::now();
    let out = case.output();
    let took = started.elapsed();
    assert!(
        out == *reference,
        "{}: output differs from the reference",
        case.name
    );
    println!(
        "{:<44} {:>10.3} s  (one run, output checked)",
        case.name,
        took.as_secs_f64()
    );
}

/// The median of `xs` (sorted in place).
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// A contender of [`paired`]: its name and one timed run.
type Contender<'a> = (&'a str, &'a dyn Fn() -> usize);

/// Interleaved runs, for ratios that hold on a noisy machine: each round
/// times every contender once, in turn; prints each one's median time and
/// the median over rounds of its time over the first contender's.
fn paired(title: &str, contenders: &[Contender<'_>], rounds: usize) {
    let mut times = vec![Vec::with_capacity(rounds); contenders.len()];
    for _ in 0..rounds {
        for (i, (_, run)) in contenders.iter().enumerate() {
            let started = Instant::now();
            black_box(run());
            times[i].push(started.elapsed().as_secs_f64());
        }
    }
    println!(
        "{title}: paired, {rounds} rounds; median time, median per-round ratio to {}",
        contenders[0].0
    );
    for (i, (name, _)) in contenders.iter().enumerate() {
        let mut ratios: Vec<f64> = (0..rounds).map(|r| times[i][r] / times[0][r]).collect();
        let ms = median(&mut times[i].clone()) * 1e3;
        println!("  {name:<24} {ms:>9.1} ms   x{:.2}", median(&mut ratios));
    }
}

fn msgpack(c: &mut Criterion) {
    let records = records();
    let array = one_array(&records);
    let stream = many_values(&records);
    let array_8k = cut(&array, SOCKET_CHUNK);
    let array_1k = cut(&array, 1024);
    let array_whole = vec![array.clone()];
    let stream_8k = cut(&stream, SOCKET_CHUNK);

    let reference = Case {
        name: "ref",
        chunks: &array_whole,
        stage: incremental,
    }
    .output();
    let stream_reference = Case {
        name: "ref",
        chunks: std::slice::from_ref(&stream),
        stage: incremental,
    }
    .output();
    assert_eq!(reference.iter().filter(|&&b| b == b'\n').count(), 1);
    assert_eq!(
        stream_reference.iter().filter(|&&b| b == b'\n').count(),
        records.len()
    );
    println!(
        "msgpack bench: {} records; one array: {} bytes of msgpack ({} chunks of 8 KiB), \
         {} bytes of JSON",
        records.len(),
        array.len(),
        array_8k.len(),
        reference.len(),
    );

    // coalesce(8 KiB, 64 KiB) holds back only chunks shorter than 8 KiB:
    // socket-sized chunks pass as they are, so b1 is a with one more stage.
    let passed = pull_sync_batches(source(&array_8k), coalesce(8 * 1024, 64 * 1024))
        .map(|b| b.expect("coalesce").len())
        .sum::<usize>();
    assert_eq!(passed, array_8k.len());

    // The naive decoder over 8 KiB chunks of the whole array takes about a
    // minute per run here, so these run once each, and only on request,
    // with the paired runs the README quotes.
    let report = std::env::var_os("WEIR_MSGPACK_REPORT").is_some();
    if report {
        // The Node report's size first: 2.2 MB, the same records.
        let node_records = &records[..records.len() * 22 / 70];
        let node_array = one_array(node_records);
        let node_8k = cut(&node_array, SOCKET_CHUNK);
        let node_reference = Case {
            name: "ref",
            chunks: std::slice::from_ref(&node_array),
            stage: incremental,
        }
        .output();
        println!(
            "2.2 MB prefix: {} records, {} bytes of msgpack",
            node_records.len(),
            node_array.len()
        );
        single_shot(
            &Case {
                name: "msgpack/array_2.2MB/a_naive_8k",
                chunks: &node_8k,
                stage: naive,
            },
            &node_reference,
        );
        single_shot(
            &Case {
                name: "msgpack/array/a_naive_8k",
                chunks: &array_8k,
                stage: naive,
            },
            &reference,
        );
        single_shot(
            &Case {
                name: "msgpack/array/b1_coalesce_8k_64k_naive_8k",
                chunks: &array_8k,
                stage: || coalesce(8 * 1024, 64 * 1024).then(naive()),
            },
            &reference,
        );
        single_shot(
            &Case {
                name: "msgpack/array/b2_coalesce_64k_64k_naive_8k",
                chunks: &array_8k,
                stage: || coalesce(64 * 1024, 64 * 1024).then(naive()),
            },
            &reference,
        );
    } else {
        println!(
            "a, b1, b2 (naive, about a minute each) and paired runs skipped: set WEIR_MSGPACK_REPORT=1"
        );
    }
    if report {
        let run = |chunks: &[Bytes], incremental_stage: bool| {
            if incremental_stage {
                Case {
                    name: "",
                    chunks,
                    stage: incremental,
                }
                .run()
            } else {
                Case {
                    name: "",
                    chunks,
                    stage: naive,
                }
                .run()
            }
        };
        paired(
            "msgpack/array",
            &[
                ("d_incremental_whole", &|| run(&array_whole, true)),
                ("c_incremental_8k", &|| run(&array_8k, true)),
                ("e_incremental_1k", &|| run(&array_1k, true)),
                ("naive_whole", &|| run(&array_whole, false)),
            ],
            10,
        );
        paired(
            "msgpack/stream",
            &[
                ("f_naive_8k", &|| run(&stream_8k, false)),
                ("g_incremental_8k", &|| run(&stream_8k, true)),
            ],
            10,
        );
    }

    let mut array_group = c.benchmark_group("msgpack/array");
    array_group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    Case {
        name: "b3_coalesce_1m_8m_naive_8k",
        chunks: &array_8k,
        stage: || coalesce(1024 * 1024, 8 * 1024 * 1024).then(naive()),
    }
    .bench(&mut array_group, &reference);
    Case {
        name: "naive_whole",
        chunks: &array_whole,
        stage: naive,
    }
    .bench(&mut array_group, &reference);
    Case {
        name: "c_incremental_8k",
        chunks: &array_8k,
        stage: incremental,
    }
    .bench(&mut array_group, &reference);
    Case {
        name: "d_incremental_whole",
        chunks: &array_whole,
        stage: incremental,
    }
    .bench(&mut array_group, &reference);
    Case {
        name: "e_incremental_1k",
        chunks: &array_1k,
        stage: incremental,
    }
    .bench(&mut array_group, &reference);
    array_group.finish();

    let mut stream_group = c.benchmark_group("msgpack/stream");
    stream_group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    Case {
        name: "f_naive_8k",
        chunks: &stream_8k,
        stage: naive,
    }
    .bench(&mut stream_group, &stream_reference);
    Case {
        name: "g_incremental_8k",
        chunks: &stream_8k,
        stage: incremental,
    }
    .bench(&mut stream_group, &stream_reference);
    stream_group.finish();
}

criterion_group!(benches, msgpack);
criterion_main!(benches);
