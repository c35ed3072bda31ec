//! `share()` behaviour, named after the catalogue IDs
//! (`shared/spec/streams-semantics.md`, section 5) they pin, plus the
//! secondary consumers a proxy uses for its cache branch.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::SizeHint;
use weir_stream::share::{ConsumerOptions, Share, ShareOptions, share};
use weir_stream::{
    Backpressure, Batch, BatchResult, CancelToken, Reason, Source, SourceExt, StreamError,
    Transform, pull,
};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A source fed by the test: pending until an item is pushed, counting
/// polls and drops, keeping the last waker it was given.
#[derive(Clone, Default)]
struct Gate(Arc<Mutex<GateState>>);

#[derive(Default)]
struct GateState {
    items: VecDeque<BatchResult>,
    ended: bool,
    waker: Option<Waker>,
    polls: usize,
    drops: usize,
    trailers: Option<HeaderMap>,
}

struct GateSource(Gate);

impl Gate {
    /// A source holding `items` and then ending.
    fn ready(items: &[&'static str]) -> (Gate, GateSource) {
        let gate = Gate::default();
        for item in items {
            gate.push(item);
        }
        gate.end();
        let source = gate.source();
        (gate, source)
    }

    fn source(&self) -> GateSource {
        GateSource(self.clone())
    }

    fn send(&self, item: BatchResult) {
        let waker = {
            let mut s = self.0.lock().unwrap();
            s.items.push_back(item);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn push(&self, text: &'static str) {
        self.send(Ok(Batch::one(Bytes::from_static(text.as_bytes()))));
    }

    fn end(&self) {
        let waker = {
            let mut s = self.0.lock().unwrap();
            s.ended = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn polls(&self) -> usize {
        self.0.lock().unwrap().polls
    }

    fn drops(&self) -> usize {
        self.0.lock().unwrap().drops
    }
}

impl Source for GateSource {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut s = self.0.0.lock().unwrap();
        s.polls += 1;
        if let Some(item) = s.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        if s.ended {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.0.0.lock().unwrap().trailers.take()
    }
}

impl Drop for GateSource {
    fn drop(&mut self) {
        self.0.0.lock().unwrap().drops += 1;
    }
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counter() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    (count, waker)
}

fn woken(count: &Count) -> usize {
    count.0.load(Ordering::SeqCst)
}

fn poll_with<S: Source + Unpin>(source: &mut S, waker: &Waker) -> Poll<Option<BatchResult>> {
    Pin::new(source).poll_next_batch(&mut Context::from_waker(waker))
}

fn poll_now<S: Source + Unpin>(source: &mut S) -> Poll<Option<BatchResult>> {
    poll_with(source, Waker::noop())
}

fn text(batch: &Batch) -> String {
    batch
        .chunks()
        .iter()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect()
}

/// Polls once and expects a batch; returns its text.
fn next_text<S: Source + Unpin>(source: &mut S) -> String {
    match poll_now(source) {
        Poll::Ready(Some(Ok(batch))) => text(&batch),
        other => panic!("expected a batch, got {other:?}"),
    }
}

fn opts(hwm: usize, policy: Backpressure) -> ShareOptions {
    ShareOptions {
        hwm_chunks: hwm,
        policy,
        ..ShareOptions::default()
    }
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("timed out")
}

async fn collect<S: Source + Unpin>(source: &mut S) -> Result<Vec<String>, StreamError> {
    let mut out = Vec::new();
    while let Some(batch) = source.next_batch().await {
        out.push(text(&batch?));
    }
    Ok(out)
}

fn reason_of(item: Poll<Option<BatchResult>>) -> Reason {
    match item {
        Poll::Ready(Some(Err(e))) => e.reason().cloned().expect("a reason"),
        other => panic!("expected an error with a reason, got {other:?}"),
    }
}

const ABC: &[&str] = &["a", "b", "c"];

// ---------------------------------------------------------------------------
// SHARE-001 .. SHARE-017
// ---------------------------------------------------------------------------

#[tokio::test]
async fn share_001_nothing_is_pulled_until_a_consumer_polls() {
    let (gate, source) = Gate::ready(ABC);
    let sh = share(source, ShareOptions::default());
    let _a = sh.pull();
    let _b = sh.pull();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(gate.polls(), 0);
    assert_eq!(sh.buffer_size(), 0);
}

#[test]
fn share_002_consumers_count_from_creation_until_drop_or_end() {
    let (_gate, source) = Gate::ready(&["a"]);
    let sh = share(source, ShareOptions::default());
    assert_eq!(sh.consumer_count(), 0);
    let mut a = sh.pull();
    assert_eq!(sh.consumer_count(), 1);
    let b = sh.pull();
    assert_eq!(sh.consumer_count(), 2);
    drop(b);
    assert_eq!(sh.consumer_count(), 1);
    assert_eq!(next_text(&mut a), "a");
    assert_eq!(sh.consumer_count(), 1, "still counted until its end");
    assert!(matches!(poll_now(&mut a), Poll::Ready(None)));
    assert_eq!(sh.consumer_count(), 0);
    // Fused after the end (CORE-007).
    assert!(matches!(poll_now(&mut a), Poll::Ready(None)));
}

#[test]
fn share_003_every_consumer_sees_every_batch_with_the_same_buffers() {
    let chunks: Vec<Bytes> = ["one", "two", "three"]
        .iter()
        .map(|s| Bytes::from(s.to_string()))
        .collect();
    let gate = Gate::default();
    gate.send(Ok(Batch::from(vec![chunks[0].clone(), chunks[1].clone()])));
    gate.send(Ok(Batch::one(chunks[2].clone())));
    gate.end();
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.pull();
    let mut seen = [Vec::new(), Vec::new()];
    for (i, c) in [&mut a, &mut b].into_iter().enumerate() {
        while let Poll::Ready(Some(batch)) = poll_now(c) {
            seen[i].push(batch.unwrap());
        }
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[0].len(), 2, "batch boundaries are kept");
    let flat = |s: &Vec<Batch>| -> Vec<(*const u8, usize)> {
        s.iter()
            .flat_map(|b| b.chunks().iter().map(|c| (c.as_ptr(), c.len())))
            .collect()
    };
    let original: Vec<_> = chunks.iter().map(|c| (c.as_ptr(), c.len())).collect();
    assert_eq!(flat(&seen[0]), original);
    assert_eq!(flat(&seen[1]), original);
}

#[test]
fn share_003_no_reader_copies_the_batch() {
    // The cost rule: every reader sees the source's own list of chunks; the
    // first shares it, the last takes it, and once the first is done with
    // its batch the last holds it alone and takes the chunks by move.
    let batch = Batch::from(vec![Bytes::from_static(b"x"), Bytes::from_static(b"y")]);
    let vec_ptr = batch.chunks().as_ptr();
    let gate = Gate::default();
    gate.send(Ok(batch));
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.pull();
    let Poll::Ready(Some(Ok(first))) = poll_now(&mut a) else {
        panic!("no batch")
    };
    let Poll::Ready(Some(Ok(last))) = poll_now(&mut b) else {
        panic!("no batch")
    };
    assert_eq!(first.chunks().as_ptr(), vec_ptr, "the first reader shares");
    assert_eq!(last.chunks().as_ptr(), vec_ptr, "the last reader too");
    drop(first);
    let chunks = last.into_chunks();
    assert_eq!(chunks.as_ptr(), vec_ptr, "the last holder takes the list");
}

#[test]
fn share_004_one_upstream_pull_serves_every_waiting_consumer() {
    let gate = Gate::default();
    let sh = share(gate.source(), ShareOptions::default());
    let mut consumers = [sh.pull(), sh.pull(), sh.pull()];
    let counters: Vec<_> = (0..3).map(|_| counter()).collect();
    for (c, (_, waker)) in consumers.iter_mut().zip(&counters) {
        assert!(poll_with(c, waker).is_pending());
    }
    assert_eq!(gate.polls(), 1, "the others wait for the pending pull");
    gate.push("x");
    for (count, _) in &counters {
        assert_eq!(woken(count), 1, "the source's wake-up reaches every waiter");
    }
    let mut ptrs = Vec::new();
    for c in consumers.iter_mut() {
        let Poll::Ready(Some(Ok(batch))) = poll_now(c) else {
            panic!("no batch")
        };
        ptrs.push(batch.chunks()[0].as_ptr());
    }
    assert_eq!(gate.polls(), 2, "one poll per batch, shared by all");
    assert!(ptrs.iter().all(|p| *p == ptrs[0]));
}

#[test]
fn share_004_wake_reaches_waiters_after_the_polling_consumer_left() {
    let gate = Gate::default();
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.pull();
    let (b_count, b_waker) = counter();
    assert!(poll_now(&mut a).is_pending(), "a polls the source");
    assert!(poll_with(&mut b, &b_waker).is_pending());
    drop(a);
    gate.push("x");
    assert_eq!(woken(&b_count), 1);
    assert_eq!(next_text(&mut b), "x");
}

#[tokio::test]
async fn share_004_concurrent_consumers_pull_each_batch_once() {
    let gate = Gate::default();
    let sh = share(gate.source(), ShareOptions::default());
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let mut c = sh.pull();
            tokio::spawn(async move { collect(&mut c).await })
        })
        .collect();
    let feeder = gate.clone();
    tokio::spawn(async move {
        for item in ["a", "b", "c", "d"] {
            tokio::time::sleep(Duration::from_millis(2)).await;
            feeder.push(item);
        }
        feeder.end();
    });
    for t in tasks {
        assert_eq!(
            within(t).await.unwrap().unwrap(),
            ["a", "b", "c", "d"],
            "every consumer sees every batch in order"
        );
    }
    // One ready poll per batch plus the end; pending polls are one per
    // wait, not one per waiting consumer.
    assert!(gate.polls() <= 5 + 5, "polls: {}", gate.polls());
}

#[test]
fn share_005_buffer_is_trimmed_to_the_slowest_cursor() {
    let (_gate, source) = Gate::ready(ABC);
    let sh = share(source, ShareOptions::default());
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    assert_eq!(next_text(&mut fast), "a");
    assert_eq!(next_text(&mut fast), "b");
    assert_eq!(sh.buffer_size(), 2);
    assert_eq!(next_text(&mut slow), "a");
    assert_eq!(sh.buffer_size(), 1);
    assert_eq!(next_text(&mut slow), "b");
    assert_eq!(sh.buffer_size(), 0);
}

#[test]
fn share_006_late_joiner_starts_at_the_oldest_entry_held() {
    let (_gate, source) = Gate::ready(&["a", "b", "c", "d"]);
    let sh = share(source, ShareOptions::default());
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    assert_eq!(next_text(&mut fast), "a");
    assert_eq!(next_text(&mut fast), "b");
    assert_eq!(next_text(&mut slow), "a");
    // Held now: b (for slow).
    let mut late = sh.pull();
    assert_eq!(next_text(&mut late), "b");
    assert_eq!(next_text(&mut late), "c");
    drop((fast, slow));
    // With nothing held, a late joiner starts at the next upstream batch.
    let mut later = sh.pull();
    assert_eq!(next_text(&mut later), "d");
}

#[test]
fn share_007_strict_full_buffer_is_buffer_full_then_recovers() {
    let (gate, source) = Gate::ready(&["c0", "c1", "c2"]);
    let sh = share(source, opts(2, Backpressure::Strict));
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    assert_eq!(next_text(&mut fast), "c0");
    assert_eq!(next_text(&mut fast), "c1");
    assert!(matches!(
        poll_now(&mut fast),
        Poll::Ready(Some(Err(StreamError::BufferFull)))
    ));
    assert_eq!(gate.polls(), 2, "no upstream pull when full");
    assert_eq!(sh.consumer_count(), 2, "BufferFull is not terminal");
    assert_eq!(next_text(&mut slow), "c0");
    assert_eq!(next_text(&mut fast), "c2");
}

#[tokio::test]
async fn share_008_block_fast_consumer_waits_for_the_slowest() {
    let (_gate, source) = Gate::ready(&["c0", "c1", "c2"]);
    let sh = share(source, opts(2, Backpressure::Block));
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    assert_eq!(next_text(&mut fast), "c0");
    assert_eq!(next_text(&mut fast), "c1");
    let (count, waker) = counter();
    assert!(poll_with(&mut fast, &waker).is_pending());
    assert_eq!(sh.buffer_size(), 2);
    assert_eq!(next_text(&mut slow), "c0");
    assert_eq!(woken(&count), 1, "the slow read frees room and wakes fast");
    assert_eq!(next_text(&mut fast), "c2");

    // The same through real tasks.
    let (_gate, source) = Gate::ready(&["a", "b", "c", "d", "e"]);
    let sh = share(source, opts(1, Backpressure::Block));
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    let fast_task = tokio::spawn(async move { collect(&mut fast).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!fast_task.is_finished(), "fast waits for slow");
    let slow_out = within(collect(&mut slow)).await.unwrap();
    assert_eq!(slow_out, ["a", "b", "c", "d", "e"]);
    assert_eq!(within(fast_task).await.unwrap().unwrap(), slow_out);
}

#[test]
fn share_009_drop_oldest_moves_lagging_cursors_forward() {
    let (_gate, source) = Gate::ready(&["c0", "c1", "c2", "c3", "c4", "c5"]);
    let sh = share(source, opts(2, Backpressure::DropOldest));
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    for i in 0..6 {
        assert_eq!(next_text(&mut fast), format!("c{i}"));
        assert!(sh.buffer_size() <= 2);
    }
    assert_eq!(next_text(&mut slow), "c4");
    assert_eq!(next_text(&mut slow), "c5");
    assert!(matches!(poll_now(&mut slow), Poll::Ready(None)));
    assert!(matches!(poll_now(&mut fast), Poll::Ready(None)));
}

#[test]
fn share_010_drop_newest_discards_new_batches_and_never_exceeds_hwm() {
    let (gate, source) = Gate::ready(&["c0", "c1", "c2", "c3", "c4"]);
    let sh = share(source, opts(2, Backpressure::DropNewest));
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    let mut fast_got = Vec::new();
    let (count, waker) = counter();
    for _ in 0..20 {
        match poll_with(&mut fast, &waker) {
            Poll::Ready(Some(Ok(b))) => fast_got.push(text(&b)),
            Poll::Ready(None) => break,
            Poll::Ready(Some(Err(e))) => panic!("{e}"),
            Poll::Pending => {}
        }
        assert!(sh.buffer_size() <= 2, "buffer {}", sh.buffer_size());
    }
    assert_eq!(fast_got, ["c0", "c1"], "c2..c4 were discarded");
    assert!(
        woken(&count) >= 1,
        "a discarding poll yields by waking itself"
    );
    assert_eq!(gate.drops(), 1, "the source was drained to its end");
    assert_eq!(next_text(&mut slow), "c0");
    assert_eq!(next_text(&mut slow), "c1");
    assert!(matches!(poll_now(&mut slow), Poll::Ready(None)));
}

#[test]
fn share_011_slowest_leaving_trims_and_wakes_blocked_pullers() {
    let (_gate, source) = Gate::ready(&["c0", "c1"]);
    let sh = share(source, opts(1, Backpressure::Block));
    let mut fast = sh.pull();
    let slow = sh.pull();
    assert_eq!(next_text(&mut fast), "c0");
    let (count, waker) = counter();
    assert!(poll_with(&mut fast, &waker).is_pending());
    assert_eq!(sh.buffer_size(), 1);
    drop(slow);
    assert_eq!(sh.buffer_size(), 0, "trimmed at once");
    assert_eq!(woken(&count), 1);
    assert_eq!(next_text(&mut fast), "c1");
}

#[test]
fn share_012_source_error_reaches_every_consumer_and_is_sticky() {
    let gate = Gate::default();
    gate.push("c0");
    gate.send(Err(StreamError::failed("origin reset")));
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.pull();
    assert_eq!(next_text(&mut a), "c0");
    let ra = reason_of(poll_now(&mut a));
    assert_eq!(gate.drops(), 1, "the failed source is dropped at once");
    assert_eq!(next_text(&mut b), "c0", "unread entries come first");
    let rb = reason_of(poll_now(&mut b));
    assert!(Reason::ptr_eq(&ra, &rb), "one failure, one Arc");
    assert!(Reason::ptr_eq(&ra, &reason_of(poll_now(&mut a))), "sticky");
    assert_eq!(sh.consumer_count(), 0);
    assert_eq!(gate.polls(), 2);
}

#[test]
fn share_013_cancel_ends_every_consumer_and_drops_the_source() {
    // Without a reason: a clean end.
    let gate = Gate::default();
    gate.push("c0");
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.pull();
    assert_eq!(next_text(&mut a), "c0");
    let (count, waker) = counter();
    assert!(poll_with(&mut a, &waker).is_pending());
    sh.cancel(None);
    assert_eq!(gate.drops(), 1);
    assert_eq!(woken(&count), 1, "a waiting consumer is woken");
    assert_eq!(sh.consumer_count(), 0);
    assert_eq!(sh.buffer_size(), 0, "buffered entries are released");
    assert!(matches!(poll_now(&mut a), Poll::Ready(None)));
    assert!(
        matches!(poll_now(&mut b), Poll::Ready(None)),
        "even with unread data"
    );
    // Idempotent: a second cancel changes nothing.
    sh.cancel(Some(StreamError::aborted("late")));
    assert!(matches!(poll_now(&mut a), Poll::Ready(None)));
    assert_eq!(gate.drops(), 1);

    // With a reason: every consumer gets it, same Arc.
    let gate = Gate::default();
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.pull();
    let reason = StreamError::aborted("client gone");
    sh.cancel(Some(reason.clone()));
    sh.cancel(None);
    let original = reason.reason().unwrap();
    assert!(Reason::ptr_eq(original, &reason_of(poll_now(&mut a))));
    assert!(Reason::ptr_eq(original, &reason_of(poll_now(&mut b))));
    // A consumer made after the cancel ends too, and is not counted.
    let mut late = sh.pull();
    assert_eq!(sh.consumer_count(), 0);
    assert!(Reason::ptr_eq(original, &reason_of(poll_now(&mut late))));
    assert_eq!(gate.polls(), 0);
}

#[test]
fn share_014_source_is_dropped_with_the_last_consumer_and_the_handle() {
    // Consumers first, then the handle.
    let gate = Gate::default();
    gate.push("c0");
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let b = sh.pull();
    assert_eq!(next_text(&mut a), "c0");
    drop((a, b));
    assert_eq!(gate.drops(), 0, "the handle may still make consumers");
    drop(sh);
    assert_eq!(gate.drops(), 1);

    // The handle first, then the consumers.
    let gate = Gate::default();
    gate.push("c0");
    gate.push("c1");
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let b = sh.pull();
    drop(sh);
    assert_eq!(next_text(&mut a), "c0", "consumers outlive the handle");
    drop(b);
    assert_eq!(gate.drops(), 0);
    drop(a);
    assert_eq!(gate.drops(), 1);
}

#[derive(Default, Clone)]
struct Aborts(Arc<AtomicUsize>);

struct Upper(Aborts);

impl Transform for Upper {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input.map(|b| {
            b.into_iter()
                .map(|c| Bytes::from(c.to_ascii_uppercase()))
                .collect()
        }))
    }

    fn abort(&mut self, _reason: &StreamError) {
        self.0.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn share_015_transforms_are_per_consumer_and_one_stopping_leaves_the_others() {
    let (_gate, source) = Gate::ready(&["a", "b", "c"]);
    let sh = share(source, opts(1, Backpressure::Block));
    let aborts = Aborts::default();
    let mut upper = pull(sh.pull(), Upper(aborts.clone()));
    let mut plain = pull(sh.pull(), ());
    assert_eq!(text(&upper.next_batch().await.unwrap().unwrap()), "A");
    drop(upper);
    assert_eq!(
        aborts.0.load(Ordering::SeqCst),
        1,
        "its transform is aborted"
    );
    assert_eq!(sh.consumer_count(), 1);
    assert_eq!(within(collect(&mut plain)).await.unwrap(), ["a", "b", "c"]);
}

#[tokio::test]
async fn share_017_token_cancels_the_share() {
    // Already cancelled: the source is dropped at once and never polled.
    let token = CancelToken::new();
    token.cancel("shutting down");
    let (gate, source) = Gate::ready(ABC);
    let sh = share(
        source,
        ShareOptions {
            token: Some(token.clone()),
            ..ShareOptions::default()
        },
    );
    assert_eq!(gate.drops(), 1);
    let mut a = sh.pull();
    assert_eq!(sh.consumer_count(), 0);
    let reason = token.reason().unwrap();
    let got = poll_now(&mut a);
    assert!(matches!(
        got,
        Poll::Ready(Some(Err(StreamError::Aborted(_))))
    ));
    assert!(Reason::ptr_eq(reason.reason().unwrap(), &reason_of(got)));
    assert_eq!(gate.polls(), 0);

    // Cancelled while a consumer waits: it wakes and fails with the reason.
    let token = CancelToken::new();
    let gate = Gate::default();
    let sh = share(
        gate.source(),
        ShareOptions {
            token: Some(token.clone()),
            ..ShareOptions::default()
        },
    );
    let mut a = sh.pull();
    let waiting = tokio::spawn(async move { a.next_batch().await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    token.cancel("client gone");
    let got = within(waiting).await.unwrap();
    assert!(matches!(got, Some(Err(StreamError::Aborted(_)))), "{got:?}");
    assert_eq!(gate.drops(), 1);
    assert_eq!(sh.consumer_count(), 0);
}

// ---------------------------------------------------------------------------
// Size hint, end of stream, trailers
// ---------------------------------------------------------------------------

#[test]
fn share_consumers_keep_the_size_hint_end_and_trailers() {
    let sh = share(weir_stream::once("hello"), ShareOptions::default());
    let mut a = sh.pull();
    let b = sh.pull();
    assert_eq!(a.size_hint().exact(), Some(5));
    assert_eq!(next_text(&mut a), "hello");
    assert!(a.is_end_stream(), "the source knew it was done");
    assert_eq!(a.size_hint().exact(), Some(0));
    assert_eq!(b.size_hint().exact(), Some(5), "b still has it buffered");
    assert!(!b.is_end_stream());

    let gate = Gate::default();
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_static("abc"));
    gate.0.lock().unwrap().trailers = Some(trailers.clone());
    gate.push("x");
    gate.end();
    let sh = share(gate.source(), ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.pull();
    for c in [&mut a, &mut b] {
        assert!(
            Pin::new(&mut *c).take_trailers().is_none(),
            "not before the end"
        );
        assert_eq!(next_text(c), "x");
        assert!(matches!(poll_now(c), Poll::Ready(None)));
        assert_eq!(Pin::new(&mut *c).take_trailers(), Some(trailers.clone()));
        assert!(Pin::new(&mut *c).take_trailers().is_none(), "once");
    }

    // A drop policy cannot promise a lower bound.
    let sh = share(
        weir_stream::once("hello"),
        opts(4, Backpressure::DropOldest),
    );
    let a = sh.pull();
    let hint: SizeHint = a.size_hint();
    assert_eq!((hint.lower(), hint.upper()), (0, Some(5)));
}

// ---------------------------------------------------------------------------
// Secondary consumers (the proxy's cache branch)
// ---------------------------------------------------------------------------

#[test]
fn secondary_never_slows_primaries_and_is_detached_when_it_lags() {
    let items: Vec<&'static str> = vec!["c0", "c1", "c2", "c3", "c4"];
    let (gate, source) = Gate::ready(&items);
    let sh = share(source, opts(2, Backpressure::Strict));
    let mut client = sh.pull();
    let mut cache = sh.consumer(ConsumerOptions::secondary());
    assert!(cache.is_secondary());
    for item in &items {
        // Strict would refuse a primary here; the stalled secondary does not count.
        assert_eq!(&next_text(&mut client), item);
        assert!(sh.buffer_size() <= 2);
    }
    assert_eq!(sh.consumer_count(), 1, "the lagging secondary is detached");
    assert_eq!(sh.buffer_size(), 0, "its cursor no longer holds the ring");
    assert!(matches!(
        poll_now(&mut cache),
        Poll::Ready(Some(Err(StreamError::Lagged { hwm_chunks: 2, .. })))
    ));
    assert!(
        matches!(
            poll_now(&mut cache),
            Poll::Ready(Some(Err(StreamError::Lagged { hwm_chunks: 2, .. })))
        ),
        "sticky"
    );
    assert!(matches!(poll_now(&mut client), Poll::Ready(None)));
    drop((client, cache));
    assert_eq!(gate.drops(), 1);
}

#[test]
fn secondary_within_hwm_reads_everything() {
    let (_gate, source) = Gate::ready(&["c0", "c1", "c2"]);
    let sh = share(source, opts(2, Backpressure::Strict));
    let mut client = sh.pull();
    let mut cache = sh.consumer(ConsumerOptions::secondary());
    assert_eq!(next_text(&mut client), "c0");
    assert_eq!(next_text(&mut client), "c1");
    assert_eq!(next_text(&mut cache), "c0");
    assert_eq!(next_text(&mut client), "c2");
    assert_eq!(next_text(&mut cache), "c1");
    assert_eq!(next_text(&mut cache), "c2");
    assert!(matches!(poll_now(&mut cache), Poll::Ready(None)));
}

#[tokio::test]
async fn secondary_stalled_keeps_memory_bounded_under_block() {
    let hwm = 3;
    let items: Vec<&'static str> = (0..100).map(|_| "x").collect();
    let (_gate, source) = Gate::ready(&items);
    let sh = share(source, opts(hwm, Backpressure::Block));
    let mut client = sh.pull();
    let _stalled_cache = sh.consumer(ConsumerOptions::secondary());
    let mut max = 0;
    let mut n = 0;
    while let Some(batch) = within(client.next_batch()).await {
        batch.unwrap();
        n += 1;
        max = max.max(sh.buffer_size());
    }
    assert_eq!(n, 100, "the client never waited for the cache");
    assert!(max <= hwm, "buffer reached {max} with hwm {hwm}");
}

#[test]
fn secondary_ahead_of_full_primaries_waits_instead_of_failing() {
    let (_gate, source) = Gate::ready(&["c0", "c1"]);
    let sh = share(source, opts(1, Backpressure::Strict));
    let mut client = sh.pull();
    let mut cache = sh.consumer(ConsumerOptions::secondary());
    assert_eq!(next_text(&mut cache), "c0");
    let (count, waker) = counter();
    assert!(
        poll_with(&mut cache, &waker).is_pending(),
        "no BufferFull, no eviction for a secondary"
    );
    assert_eq!(next_text(&mut client), "c0");
    assert_eq!(woken(&count), 1);
    assert_eq!(next_text(&mut cache), "c1");
    assert_eq!(next_text(&mut client), "c1");
}

#[test]
fn secondary_lag_aborts_its_pipeline() {
    let (_gate, source) = Gate::ready(&["c0", "c1", "c2"]);
    let sh = share(source, opts(1, Backpressure::Strict));
    let mut client = sh.pull();
    let aborts = Aborts::default();
    let mut cache = pull(
        sh.consumer(ConsumerOptions::secondary()),
        Upper(aborts.clone()),
    );
    assert_eq!(next_text(&mut client), "c0");
    assert_eq!(next_text(&mut client), "c1");
    assert!(matches!(
        poll_now(&mut cache),
        Poll::Ready(Some(Err(StreamError::Lagged { hwm_chunks: 1, .. })))
    ));
    assert_eq!(
        aborts.0.load(Ordering::SeqCst),
        1,
        "the cache write is abandoned"
    );
    assert_eq!(next_text(&mut client), "c2");
}

#[test]
fn secondary_alone_pulls_freely() {
    let (_gate, source) = Gate::ready(ABC);
    let sh = share(source, opts(1, Backpressure::Strict));
    let client = sh.pull();
    let mut cache = sh.consumer(ConsumerOptions::secondary());
    drop(client);
    for item in ABC {
        assert_eq!(&next_text(&mut cache), item);
    }
    assert!(matches!(poll_now(&mut cache), Poll::Ready(None)));
}

#[test]
fn share_is_send_and_sync_for_send_sources() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Share<GateSource>>();
    assert_send_sync::<weir_stream::share::Consumer<GateSource>>();
}

// ---------------------------------------------------------------------------
// High-water marks in chunks and bytes, the default policy (issue 14)
// ---------------------------------------------------------------------------

/// A source of `n` batches of `per_batch` chunks of `size` bytes each.
fn big_batches(n: usize, per_batch: usize, size: usize) -> impl Source + Unpin + Send + 'static {
    weir_stream::adapt::from_results((0..n).map(move |i| {
        Ok((0..per_batch)
            .map(|_| Bytes::from(vec![i as u8; size]))
            .collect::<Batch>())
    }))
}

#[test]
fn share_hwm_counts_chunks_not_batches() {
    // 128-chunk batches: a mark of 200 chunks is full after two of them,
    // where a mark counted in batches would have admitted 200 × 128 chunks.
    let sh = share(
        big_batches(10, 128, 1),
        ShareOptions {
            hwm_chunks: 200,
            policy: Backpressure::Strict,
            ..ShareOptions::default()
        },
    );
    let mut fast = sh.pull();
    let _slow = sh.pull();
    assert!(matches!(poll_now(&mut fast), Poll::Ready(Some(Ok(_)))));
    assert!(matches!(poll_now(&mut fast), Poll::Ready(Some(Ok(_)))));
    assert!(matches!(
        poll_now(&mut fast),
        Poll::Ready(Some(Err(StreamError::BufferFull)))
    ));
    assert_eq!(sh.buffered_chunks(), 256);
}

#[test]
fn share_hwm_counts_bytes() {
    // 64 KiB batches, a 100 KiB mark: full after two batches, whatever the
    // chunk count, and never more than the mark plus one batch held.
    let sh = share(
        big_batches(10, 4, 16 * 1024),
        ShareOptions {
            hwm_bytes: 100 * 1024,
            policy: Backpressure::Strict,
            ..ShareOptions::default()
        },
    );
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    let mut read = 0;
    while let Poll::Ready(Some(Ok(_))) = poll_now(&mut fast) {
        read += 1;
        assert!(sh.buffered_bytes() <= 100 * 1024 + 64 * 1024);
    }
    assert_eq!(read, 2);
    assert_eq!(sh.buffered_bytes(), 128 * 1024);
    // The slow one moves on: room again.
    assert!(matches!(poll_now(&mut slow), Poll::Ready(Some(Ok(_)))));
    assert!(matches!(poll_now(&mut fast), Poll::Ready(Some(Ok(_)))));
}

#[tokio::test]
async fn share_default_policy_lets_two_plain_consumer_loops_read_everything() {
    // The natural code: two tasks, each `while let Some(b) = next_batch()`,
    // one much slower, over far more than the marks. No `BufferFull`, every
    // byte to both, and the ring stays within its marks plus one batch.
    let sh = Arc::new(share(big_batches(200, 16, 1024), ShareOptions::default()));
    let (mut a, mut b) = (sh.pull(), sh.pull());
    let watch = sh.clone();
    let fast = tokio::spawn(async move {
        let mut bytes = 0;
        while let Some(batch) = a.next_batch().await {
            bytes += batch.expect("no error under the default policy").byte_len();
            assert!(watch.buffered_bytes() <= 1024 * 1024 + 16 * 1024);
        }
        bytes
    });
    let slow = tokio::spawn(async move {
        let mut bytes = 0;
        while let Some(batch) = b.next_batch().await {
            bytes += batch.expect("no error under the default policy").byte_len();
            tokio::task::yield_now().await;
        }
        bytes
    });
    let (fast, slow) = within(async { (fast.await, slow.await) }).await;
    assert_eq!(fast.expect("fast"), 200 * 16 * 1024);
    assert_eq!(slow.expect("slow"), 200 * 16 * 1024);
    assert_eq!(ShareOptions::default().policy, Backpressure::Block);
}

#[test]
fn secondary_is_detached_past_the_byte_mark_not_before() {
    let sh = share(
        big_batches(10, 1, 10_000),
        ShareOptions {
            hwm_bytes: 35_000,
            ..ShareOptions::default()
        },
    );
    let mut primary = sh.pull();
    let mut cache = sh.consumer(ConsumerOptions::secondary());
    // Three batches (30,000 bytes) behind: still attached.
    for _ in 0..3 {
        assert!(matches!(poll_now(&mut primary), Poll::Ready(Some(Ok(_)))));
    }
    assert!(matches!(poll_now(&mut cache), Poll::Ready(Some(Ok(_)))));
    // Five more: past 35,000 bytes behind the newest, detached.
    for _ in 0..5 {
        assert!(matches!(poll_now(&mut primary), Poll::Ready(Some(Ok(_)))));
    }
    assert!(matches!(
        poll_now(&mut cache),
        Poll::Ready(Some(Err(StreamError::Lagged {
            hwm_bytes: 35_000,
            ..
        })))
    ));
}
