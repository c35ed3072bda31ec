//! The `compress` stage against its limit: each codec called once on the
//! whole body at the same level.
//!
//! Body: ~4 MiB of deterministic HTML with embedded JSON
//! (`tests/compress_common`). For each coding:
//! - `stage_1KB`, `stage_16KB`: a fresh [`Compressor`] fed the body in
//!   1 KiB / 16 KiB chunks, one chunk per batch (as read off a socket),
//!   then finished; the output is dropped as it comes;
//! - `limit`: the codec's own API on the whole buffer in one call, into one
//!   preallocated output buffer, with the stage's level.
//!
//! - brotli only, `stage_16KB_hint`: the stage told the body's length
//!   ([`Compressor::with_size_hint`]), which makes brotli pick the same
//!   match finder as its one-shot call on the whole buffer does; without
//!   it the two do not do the same work (a smaller hash table, ~10% larger
//!   output), so this is the like-for-like comparison with `limit`.
//!
//! Every variant's output is decoded and compared with the body once,
//! outside the timed loops; the compressed sizes are printed then.
//!
//! Times are the on-CPU time of the bench thread (`CLOCK_THREAD_CPUTIME_ID`),
//! not wall time: the machine is shared, and preemption by other work would
//! otherwise dominate the differences measured here. Everything measured is
//! single-threaded, so on an idle machine the two agree.
//!
//! Ratios from separate criterion runs drift with the machine's load (the
//! contenders run one after the other, seconds apart), so before criterion
//! the bench prints a paired report: each round runs every variant of a
//! coding once, back to back in a rotating order, and takes the ratio
//! stage/limit within the round; the report is the median over rounds
//! (`WEIR_PAIRED_ROUNDS`, default 9; 0 skips it). That ratio is the number
//! to judge the stage by; criterion's times are the absolute ones.
//!
//! Run: `cargo bench -p weir-transform --bench compress -- --warm-up-time 1 --measurement-time 3`
//! (`cargo test -p weir-transform --benches` runs each variant once, checked.)

#[path = "../tests/compress_common/mod.rs"]
mod compress_common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use brotli::enc::StandardAlloc;
use brotli::enc::encode::{
    BrotliEncoderMaxCompressedSize, BrotliEncoderOperation, BrotliEncoderParameter,
    BrotliEncoderStateStruct,
};
use bytes::Bytes;
use compress_common::{ALL, decode, text};
use criterion::{Bencher, Criterion, Throughput, criterion_group};
use weir_stream::{Batch, Transform};
use weir_transform::coding::Coding;
use weir_transform::compress::{CompressSettings, Compressor};

const BODY_LEN: usize = 4 << 20;

/// On-CPU time of this thread.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Like `Bencher::iter`, timing on-CPU time instead of wall time.
fn iter_cpu<R>(b: &mut Bencher<'_>, mut f: impl FnMut() -> R) {
    b.iter_custom(|iters| {
        let (cpu, wall) = (cpu_time(), Instant::now());
        for _ in 0..iters {
            black_box(f());
        }
        let spent = cpu_time().saturating_sub(cpu);
        // No thread clock (not Linux): wall time.
        if spent.is_zero() {
            wall.elapsed()
        } else {
            spent
        }
    });
}

/// Runs the stage over `chunks`; hands every output chunk to `sink`.
fn stage(
    coding: Coding,
    settings: &CompressSettings,
    hint: Option<u64>,
    chunks: &[Bytes],
    mut sink: impl FnMut(&Bytes),
) {
    let mut c = Compressor::new(coding, settings);
    if let Some(hint) = hint {
        c = c.with_size_hint(hint);
    }
    for chunk in chunks {
        if let Some(out) = c.transform(Some(Batch::one(chunk.clone()))).unwrap() {
            out.chunks().iter().for_each(&mut sink);
        }
    }
    if let Some(out) = c.transform(None).unwrap() {
        out.chunks().iter().for_each(&mut sink);
    }
}

/// The codec on the whole body, one call, one output buffer.
fn limit(coding: Coding, settings: &CompressSettings, body: &[u8]) -> Vec<u8> {
    match coding {
        Coding::Gzip => {
            let mut c =
                flate2::Compress::new_gzip(flate2::Compression::new(settings.gzip_level), 15);
            let mut out = Vec::with_capacity(body.len() + body.len() / 100 + 1024);
            let status = c
                .compress_vec(body, &mut out, flate2::FlushCompress::Finish)
                .unwrap();
            assert_eq!(status, flate2::Status::StreamEnd);
            out
        }
        Coding::Brotli => {
            let mut s = BrotliEncoderStateStruct::new(StandardAlloc::default());
            s.set_parameter(
                BrotliEncoderParameter::BROTLI_PARAM_QUALITY,
                settings.brotli_quality,
            );
            let mut out = vec![0u8; BrotliEncoderMaxCompressedSize(body.len())];
            let (mut avail_in, mut in_off) = (body.len(), 0);
            let (mut avail_out, mut out_off, mut total) = (out.len(), 0, None);
            let ok = s.compress_stream(
                BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
                &mut avail_in,
                body,
                &mut in_off,
                &mut avail_out,
                &mut out,
                &mut out_off,
                &mut total,
                &mut |_, _, _, _| (),
            );
            assert!(ok && s.is_finished());
            out.truncate(out_off);
            out
        }
        Coding::Zstd => zstd::bulk::compress(body, settings.zstd_level).unwrap(),
    }
}

fn split(body: &Bytes, chunk: usize) -> Vec<Bytes> {
    (0..body.len())
        .step_by(chunk)
        .map(|at| body.slice(at..(at + chunk).min(body.len())))
        .collect()
}

/// One way of compressing the body: a name, and a run returning the
/// compressed length.
struct Variant<'a> {
    name: &'static str,
    run: Box<dyn Fn() -> usize + 'a>,
}

/// The variants for `coding`, each checked once: its output decodes to the body.
fn variants<'a>(
    coding: Coding,
    settings: &'a CompressSettings,
    body: &'a Bytes,
    small: &'a [Bytes],
    large: &'a [Bytes],
) -> Vec<Variant<'a>> {
    let mut stages: Vec<(&'static str, Option<u64>, &'a [Bytes])> =
        vec![("stage_1KB", None, small), ("stage_16KB", None, large)];
    if coding == Coding::Brotli {
        stages.push(("stage_16KB_hint", Some(body.len() as u64), large));
    }
    let mut out = Vec::new();
    for (name, hint, chunks) in stages {
        let mut encoded = Vec::new();
        stage(coding, settings, hint, chunks, |b| {
            encoded.extend_from_slice(b)
        });
        assert!(
            decode(coding, &encoded).unwrap() == **body,
            "{coding} {name}"
        );
        eprintln!("{coding} {name}: {} -> {} bytes", body.len(), encoded.len());
        out.push(Variant {
            name,
            run: Box::new(move || {
                let mut n = 0;
                stage(coding, settings, hint, chunks, |out| n += out.len());
                n
            }),
        });
    }
    let whole = limit(coding, settings, body);
    assert!(decode(coding, &whole).unwrap() == **body, "{coding} limit");
    eprintln!("{coding} limit: {} -> {} bytes", body.len(), whole.len());
    out.push(Variant {
        name: "limit",
        run: Box::new(move || limit(coding, settings, body).len()),
    });
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The interleaved paired report (see the module doc).
fn paired(rounds: usize, inputs: &Inputs) {
    println!(
        "\n| coding | variant | CPU ms per 4 MiB (median) | stage/limit (median of paired ratios) |"
    );
    println!("|---|---|---|---|");
    for coding in ALL {
        let variants = variants(
            coding,
            &inputs.settings,
            &inputs.body,
            &inputs.small,
            &inputs.large,
        );
        let n = variants.len();
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); n];
        for round in 0..rounds {
            let mut this_round = vec![0.0; n];
            for k in 0..n {
                let i = (round + k) % n;
                let start = cpu_time();
                black_box((variants[i].run)());
                this_round[i] = cpu_time().saturating_sub(start).as_secs_f64() * 1e3;
            }
            for (all, t) in times.iter_mut().zip(this_round) {
                all.push(t);
            }
        }
        let limit = &times[n - 1];
        for (variant, t) in variants.iter().zip(&times) {
            let ratios: Vec<f64> = t.iter().zip(limit).map(|(s, l)| s / l).collect();
            println!(
                "| {coding} | {} | {:.1} | {:.3} |",
                variant.name,
                median(t.clone()),
                median(ratios)
            );
        }
    }
    println!();
}

struct Inputs {
    settings: CompressSettings,
    body: Bytes,
    small: Vec<Bytes>,
    large: Vec<Bytes>,
}

impl Inputs {
    fn new() -> Self {
        let body = Bytes::from(text(BODY_LEN));
        Inputs {
            settings: CompressSettings::default(),
            small: split(&body, 1024),
            large: split(&body, 16 * 1024),
            body,
        }
    }
}

fn bench(c: &mut Criterion) {
    let inputs = Inputs::new();
    for coding in ALL {
        let variants = variants(
            coding,
            &inputs.settings,
            &inputs.body,
            &inputs.small,
            &inputs.large,
        );
        let mut group = c.benchmark_group(format!("compress/{coding}"));
        group.throughput(Throughput::Bytes(inputs.body.len() as u64));
        group.sample_size(10);
        for variant in &variants {
            group.bench_function(variant.name, |b| iter_cpu(b, &variant.run));
        }
        group.finish();
    }
}

criterion_group!(benches, bench);

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not, and
    // then criterion runs each variant once.
    if std::env::args().any(|a| a == "--bench") {
        let rounds = std::env::var("WEIR_PAIRED_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(9);
        if rounds > 0 {
            paired(rounds, &Inputs::new());
        }
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
