//! Allocation counts of the pull path (FAST-005, FAST-006), measured by a
//! counting global allocator (`allocation-counter`, which counts the
//! current thread only, so tests running in parallel do not disturb it).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use allocation_counter::measure;
use bytes::Bytes;
use weir_stream::stateful::async_fn;
use weir_stream::{Batch, BatchResult, Source, SourceExt, TransformExt, pull};

/// A source handing out batches built before the measurement: polling it
/// allocates nothing.
struct Prebuilt(VecDeque<Batch>);

impl Prebuilt {
    fn new(n: usize) -> Self {
        Prebuilt(
            (0..n)
                // Two chunks, so each batch owns a `Vec` whose identity
                // the test can follow (one chunk would be held inline).
                .map(|_| Batch::from(vec![Bytes::from_static(b"chu"), Bytes::from_static(b"nk")]))
                .collect(),
        )
    }
}

impl Source for Prebuilt {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// A source that builds each batch when polled: one `Vec` per batch.
struct Allocating(usize);

impl Source for Allocating {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        if self.0 == 0 {
            return Poll::Ready(None);
        }
        self.0 -= 1;
        Poll::Ready(Some(Ok(Batch::from(vec![
            Bytes::from_static(b"chu"),
            Bytes::from_static(b"nk"),
        ]))))
    }
}

fn poll<S: Source + Unpin>(s: &mut S) -> Poll<Option<BatchResult>> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(s).poll_next_batch(&mut cx)
}

#[test]
fn fast_005_building_pipelines_allocates_nothing() {
    let sources: Vec<Prebuilt> = (0..100).map(|_| Prebuilt::new(1)).collect();
    let mut built = Vec::with_capacity(100);
    let one = measure(|| {
        let mut sources = sources.into_iter();
        let first = sources.next().expect("source");
        built.push(pull(first, ().then(())));
        for s in sources {
            built.push(pull(s, ().then(())));
        }
    });
    assert_eq!(one.count_total, 0, "per pipeline: {one:?}");

    let (source, token) = (Prebuilt::new(0), weir_stream::CancelToken::new());
    let mut chain = None;
    let mixed = measure(|| {
        chain = Some(
            source
                .then(())
                .then_async(async_fn(|b: Option<Batch>| async move { Ok(b) }))
                .then(())
                .with_token(token),
        );
    });
    assert_eq!(mixed.count_total, 0, "a mixed chain: {mixed:?}");
    drop((built, chain));
}

#[test]
fn fast_005_the_first_poll_allocates_a_small_constant() {
    let counts: Vec<u64> = [1usize, 10]
        .iter()
        .map(|&n| {
            let mut p = pull(Prebuilt::new(n), ().then(()));
            let _ = poll(&mut p); // warm the thread's runtime context
            let mut p = pull(Prebuilt::new(n), ().then(()));
            measure(|| {
                let _ = poll(&mut p);
            })
            .count_total
        })
        .collect();
    assert_eq!(
        counts[0], 1,
        "first poll: the chain's token only ({counts:?})"
    );
    assert_eq!(counts[0], counts[1], "independent of the source's length");
}

#[test]
fn fast_006_a_fused_identity_chain_allocates_nothing_per_batch() {
    const N: usize = 1000;
    let source = Prebuilt::new(N + 1);
    let pointers: Vec<*const Bytes> = source.0.iter().map(|b| b.chunks().as_ptr()).collect();
    let mut p = pull(source, ().then(()).then(()));
    // Steady state: the first poll has made the pipeline's token.
    let first = poll(&mut p);
    let mut same_vec = 0usize;
    let info = measure(|| {
        for expected in &pointers[1..] {
            let Poll::Ready(Some(Ok(batch))) = poll(&mut p) else {
                panic!("no batch")
            };
            if batch.chunks().as_ptr() == *expected {
                same_vec += 1;
            }
        }
    });
    drop(first);
    assert_eq!(info.count_total, 0, "{info:?}");
    assert_eq!(
        same_vec, N,
        "the identity path hands on the source's own Vec"
    );
}

#[test]
fn fast_006_at_most_the_sources_vec_per_batch() {
    const N: u64 = 1000;
    let mut p = pull(Allocating(N as usize + 1), ().then(()).then(()));
    let _ = poll(&mut p);
    let info = measure(|| {
        for _ in 0..N {
            let Poll::Ready(Some(Ok(batch))) = poll(&mut p) else {
                panic!("no batch")
            };
            drop(batch);
        }
    });
    assert_eq!(info.count_total, N, "one Vec per batch, made by the source");
}

/// Makes a one-chunk batch per poll.
struct OneChunk(usize);

impl Source for OneChunk {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        if self.0 == 0 {
            return Poll::Ready(None);
        }
        self.0 -= 1;
        Poll::Ready(Some(Ok(Batch::one(Bytes::from_static(b"chunk")))))
    }
}

#[test]
fn fast_006_one_chunk_batches_allocate_nothing() {
    const N: usize = 1000;
    let mut p = pull(OneChunk(N), ().then(()).then(()));
    let _ = poll(&mut p);
    let info = measure(|| while let Poll::Ready(Some(Ok(_))) = poll(&mut p) {});
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[test]
fn fast_006_per_chunk_stages_allocate_nothing_per_batch() {
    // map, filter-map and try-map stages, fused: each batch keeps its list
    // and nothing is allocated, however many stages.
    const N: usize = 1000;
    let source = Prebuilt::new(N + 1);
    let pointers: Vec<*const Bytes> = source.0.iter().map(|b| b.chunks().as_ptr()).collect();
    let stages = weir_stream::map_chunks(|c: Bytes| c.slice(1..))
        .filter_map_chunks(Some)
        .try_map_chunks(Ok)
        .filter_chunks(|c| !c.is_empty());
    let mut p = pull(source, stages);
    let first = poll(&mut p);
    let mut same_list = 0usize;
    let info = measure(|| {
        for expected in &pointers[1..] {
            let Poll::Ready(Some(Ok(batch))) = poll(&mut p) else {
                panic!("no batch")
            };
            assert_eq!(batch.chunks(), ["hu", "k"]);
            if batch.chunks().as_ptr() == *expected {
                same_list += 1;
            }
        }
    });
    drop(first);
    assert_eq!(info.count_total, 0, "{info:?}");
    assert_eq!(same_list, N, "every stage works in the source's own list");
}

#[test]
fn fast_006_from_iter_reuses_the_list_a_consumer_dropped() {
    // The usual loop drops each batch before it pulls the next: from the
    // second batch on, the source takes that batch's list back instead of
    // allocating one.
    let chunks: Vec<Bytes> = (0..10_000).map(|_| Bytes::from_static(b"chunk")).collect();
    let mut p = pull(
        weir_stream::from_iter(chunks),
        weir_stream::map_chunks(|c| c),
    );
    let _ = poll(&mut p);
    let mut batches = 0;
    let info = measure(|| {
        while let Poll::Ready(Some(Ok(batch))) = poll(&mut p) {
            assert_eq!(
                batch.len(),
                Batch::MAX_CHUNKS.min(10_000 - 128 * (batches + 1))
            );
            batches += 1;
            drop(batch);
        }
    });
    assert!(batches >= 70, "{batches}");
    assert_eq!(info.count_total, 0, "{batches} batches: {info:?}");
}
