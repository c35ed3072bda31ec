//! The coalescing transform: small chunks gathered while input is ready,
//! released at `min_bytes`, on idle and at the end.

mod pull_support;

use std::task::Poll;

use bytes::Bytes;
use pull_support::*;
use weir_stream::coalesce::{Coalesce, DEFAULT_MAX_BYTES, DEFAULT_MIN_BYTES, coalesce};
use weir_stream::{Batch, BatchResult, Source, Transform, from_iter, pull};

fn chunk(len: usize, byte: u8) -> Bytes {
    Bytes::from(vec![byte; len])
}

fn batch_of(chunks: Vec<Bytes>) -> Poll<Option<BatchResult>> {
    Poll::Ready(Some(Ok(Batch::from(chunks))))
}

fn sizes(b: &Batch) -> Vec<usize> {
    b.chunks().iter().map(Bytes::len).collect()
}

fn expect_batch<S: Source + Unpin>(s: &mut S) -> Batch {
    match poll(s) {
        Poll::Ready(Some(Ok(b))) => b,
        other => panic!("expected a batch, got {other:?}"),
    }
}

#[test]
fn defaults_are_8_and_64_kib() {
    let c = Coalesce::default();
    assert_eq!(c.min_bytes(), DEFAULT_MIN_BYTES);
    assert_eq!(c.max_bytes(), DEFAULT_MAX_BYTES);
    assert_eq!(
        (DEFAULT_MIN_BYTES, DEFAULT_MAX_BYTES),
        (8 * 1024, 64 * 1024)
    );
    let odd = coalesce(0, 0);
    assert_eq!((odd.min_bytes(), odd.max_bytes()), (1, 1));
}

#[test]
fn gathers_small_chunks_while_input_is_ready_into_one_chunk() {
    let (src, counters) = Scripted::new(vec![
        batch_of(vec![chunk(40, b'a'), chunk(40, b'b')]),
        batch_of(vec![chunk(40, b'c')]),
        batch_of(vec![chunk(40, b'd')]),
    ]);
    let mut p = pull(src, coalesce(100, 1000));
    let b = expect_batch(&mut p);
    assert_eq!(sizes(&b), [120], "one merged chunk once it holds min_bytes");
    assert_eq!(&b.chunks()[0][..3], b"aaa");
    assert_eq!(
        counters.polls(),
        2,
        "kept pulling while nothing was emitted"
    );
    let b = expect_batch(&mut p);
    assert_eq!(sizes(&b), [40], "the rest at the end (flush)");
    assert!(matches!(poll(&mut p), Poll::Ready(None)));
}

#[test]
fn releases_what_it_holds_when_the_input_goes_idle_once_per_idle_period() {
    let (src, _) = Scripted::new(vec![data("ab"), pending(), pending(), data("c"), pending()]);
    let mut p = pull(src, coalesce(100, 1000));
    assert_eq!(text(&expect_batch(&mut p)), "ab", "idle: partial chunk out");
    assert!(poll(&mut p).is_pending(), "nothing held, nothing emitted");
    assert_eq!(text(&expect_batch(&mut p)), "c");
}

#[test]
fn never_emits_a_merged_chunk_over_max_bytes() {
    let small: Vec<Bytes> = (0..10).map(|i| chunk(30, b'a' + i)).collect();
    let (src, _) = Scripted::new(vec![batch_of(small)]);
    let mut p = pull(src, coalesce(50, 70));
    let (batches, _) = drain_sizes(&mut p);
    let all: Vec<usize> = batches.concat();
    assert_eq!(all.iter().sum::<usize>(), 300);
    assert!(all.iter().all(|&n| n <= 70), "{all:?}");
    assert!(all[..all.len() - 1].iter().all(|&n| n >= 50), "{all:?}");
}

#[test]
fn large_chunks_pass_alone_and_uncopied_after_what_is_held() {
    let big = chunk(500, b'B');
    let mid = chunk(150, b'M');
    let (big_ptr, mid_ptr) = (big.as_ptr(), mid.as_ptr());
    let (src, _) = Scripted::new(vec![batch_of(vec![
        chunk(10, b'a'),
        big,
        chunk(10, b'b'),
        mid,
    ])]);
    let mut p = pull(src, coalesce(100, 200));
    let b = expect_batch(&mut p);
    assert_eq!(sizes(&b), [10, 500, 10, 150]);
    assert_eq!(
        b.chunks()[1].as_ptr(),
        big_ptr,
        "larger than max: alone, as is"
    );
    assert_eq!(b.chunks()[3].as_ptr(), mid_ptr, "at least min: as is");
}

#[test]
fn a_batch_of_large_chunks_passes_as_the_same_batch() {
    let chunks = vec![chunk(100, b'x'), chunk(200, b'y')];
    let vec_ptr = chunks.as_ptr();
    let mut c = coalesce(100, 150);
    let out = c
        .transform(Some(Batch::from(chunks)))
        .expect("ok")
        .expect("batch");
    assert_eq!(out.chunks().as_ptr(), vec_ptr, "same Vec, no allocation");
}

#[test]
fn zero_length_chunks_are_dropped_and_the_flush_emits_the_rest() {
    let mut c = coalesce(10, 100);
    let out = c
        .transform(Some(Batch::from(vec![
            Bytes::new(),
            chunk(3, b'a'),
            Bytes::new(),
        ])))
        .expect("ok");
    assert!(out.is_none());
    assert_eq!(c.held_bytes(), 3);
    let flushed = c.transform(None).expect("ok").expect("batch");
    assert_eq!(sizes(&flushed), [3]);
    assert_eq!(c.transform(None).expect("ok"), None, "nothing left");
}

#[test]
fn abort_drops_what_is_held() {
    let mut c = coalesce(10, 100);
    let _ = c.transform(Some(Batch::one(chunk(3, b'a'))));
    c.abort(&weir_stream::StreamError::aborted("stop"));
    assert_eq!(c.held_bytes(), 0);
}

#[test]
fn many_tiny_chunks_become_few_large_ones_with_every_byte_in_order() {
    let parts: Vec<Bytes> = (0..5000u32)
        .map(|i| Bytes::from(format!("{:04},", i % 10_000)))
        .collect();
    let expected: Vec<u8> = parts.iter().flat_map(|p| p.to_vec()).collect();
    let mut p = pull(from_iter(parts), Coalesce::default());
    let (batches, _) = drain_bytes(&mut p);
    let chunks: Vec<Bytes> = batches.into_iter().flatten().collect();
    assert!(
        chunks.len() <= 4,
        "{} chunks for 25 000 bytes",
        chunks.len()
    );
    let got: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
    assert_eq!(got, expected);
}

fn drain_sizes<S: Source + Unpin>(s: &mut S) -> (Vec<Vec<usize>>, bool) {
    let (batches, ended) = drain_bytes(s);
    (
        batches
            .iter()
            .map(|b| b.iter().map(Bytes::len).collect())
            .collect(),
        ended,
    )
}

fn drain_bytes<S: Source + Unpin>(s: &mut S) -> (Vec<Vec<Bytes>>, bool) {
    let mut out = Vec::new();
    loop {
        match poll(s) {
            Poll::Ready(Some(Ok(b))) => out.push(b.into_chunks()),
            Poll::Ready(None) => return (out, true),
            _ => return (out, false),
        }
    }
}
