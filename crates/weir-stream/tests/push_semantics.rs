//! Push stream behaviour (catalogue section 2), one test per ID.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use weir_stream::push::{PushOptions, Readable, Writer, push};
use weir_stream::{
    Backpressure, Batch, BatchResult, CancelToken, Reason, Source, SourceExt, StreamError, pull,
    transform_fn,
};

const LIMIT: Duration = Duration::from_secs(5);

fn opts(hwm: usize, policy: Backpressure) -> PushOptions {
    PushOptions::new().hwm(hwm).policy(policy)
}

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

fn batch(parts: &[&'static str]) -> Batch {
    parts.iter().map(|p| b(p)).collect()
}

fn poll_src<S: Source + Unpin>(s: &mut S) -> Poll<Option<BatchResult>> {
    Pin::new(s).poll_next_batch(&mut Context::from_waker(Waker::noop()))
}

fn poll_fut<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

/// The chunks of the next batch, as strings; panics if there is none.
fn read(r: &mut Readable) -> Vec<String> {
    match poll_src(r) {
        Poll::Ready(Some(Ok(batch))) => batch
            .chunks()
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect(),
        other => panic!("expected a batch, got {other:?}"),
    }
}

/// Counts wake-ups.
#[derive(Default)]
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting() -> (Arc<CountWaker>, Waker) {
    let c = Arc::new(CountWaker::default());
    (c.clone(), Waker::from(c))
}

fn is_reason(err: &StreamError, expected: &StreamError) -> bool {
    match (err.reason(), expected.reason()) {
        (Some(a), Some(b)) => Reason::ptr_eq(a, b),
        _ => false,
    }
}

#[test]
fn push_001_transforms_run_only_when_the_consumer_polls() {
    let (w, r) = push(PushOptions::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let mut p = pull(
        r,
        transform_fn(move |b| {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok(b)
        }),
    );
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(matches!(poll_src(&mut p), Poll::Ready(Some(Ok(_)))));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn push_004_writev_is_atomic_takes_one_slot_and_keeps_order() {
    let (w, mut r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_writev(batch(&["a", "b", "c"])));
    assert!(!w.try_write(b("d")), "the writev filled the only slot");
    assert_eq!(read(&mut r), ["a", "b", "c"]);
}

#[test]
fn push_008_end_counts_bytes_discarded_by_drop_policies() {
    let (w, mut r) = push(opts(1, Backpressure::DropOldest));
    assert!(w.try_writev(batch(&["a", "b"])));
    assert!(w.try_write(b("c")));
    assert_eq!(w.end().expect("end"), 3);
    assert_eq!(read(&mut r), ["c"]);
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)));

    let (w, _r) = push(opts(1, Backpressure::DropNewest));
    assert!(w.try_write(b("ab")));
    assert!(w.try_write(b("cde")));
    assert_eq!(w.end().expect("end"), 5);
}

#[test]
fn push_010_fail_delivers_buffered_batches_then_the_error() {
    let (w, mut r) = push(PushOptions::default());
    assert!(w.try_write(b("x")));
    assert!(w.try_write(b("y")));
    let err = StreamError::failed("origin reset");
    w.fail(err.clone());
    assert_eq!(read(&mut r), ["x", "y"]);
    let Poll::Ready(Some(Err(got))) = poll_src(&mut r) else {
        panic!("no error after the data")
    };
    assert!(is_reason(&got, &err), "CORE-006: same failure");
}

#[test]
fn push_010_a_waiting_read_fails_at_once() {
    let (w, mut r) = push(PushOptions::default());
    let (wakes, waker) = counting();
    assert!(
        Pin::new(&mut r)
            .poll_next_batch(&mut Context::from_waker(&waker))
            .is_pending()
    );
    w.fail(StreamError::failed("boom"));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the parked read woke");
    assert!(matches!(poll_src(&mut r), Poll::Ready(Some(Err(_)))));
}

#[test]
fn push_020_desired_size_counts_free_slots_and_ignores_waiting_writes() {
    let (w, _r) = push(PushOptions::default());
    let mut sizes = vec![w.desired_size()];
    for _ in 0..4 {
        assert!(w.try_write(b("x")));
        sizes.push(w.desired_size());
    }
    assert_eq!(sizes, [Some(4), Some(3), Some(2), Some(1), Some(0)]);
    let mut waiting = w.write(b("y"));
    assert!(poll_fut(&mut waiting).is_pending());
    assert_eq!(w.desired_size(), Some(0), "PUSH-024: never below 0");
}

#[test]
fn push_022_desired_size_is_none_after_end_fail_and_consumer_stop() {
    let (w, _r) = push(PushOptions::default());
    let other = w.clone();
    assert_eq!(w.try_end(), Some(0));
    assert_eq!(other.desired_size(), None, "after end");

    let (w, _r) = push(PushOptions::default());
    assert!(w.try_fail(StreamError::failed("x")));
    assert_eq!(w.desired_size(), None, "after fail");

    let (w, r) = push(PushOptions::default());
    drop(r);
    assert_eq!(w.desired_size(), None, "after the consumer stopped");
}

#[test]
fn push_030_default_hwm_is_4() {
    let (w, _r) = push(PushOptions::default());
    assert_eq!(w.desired_size(), Some(4));
}

#[test]
fn push_032_hwm_zero_acts_as_one_and_huge_is_clamped() {
    let (w, _r) = push(opts(0, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    assert!(!w.try_write(b("b")));
    let (w, _r) = push(opts(usize::MAX, Backpressure::Strict));
    assert_eq!(w.desired_size(), Some(weir_stream::policy::MAX_HWM));
}

#[test]
fn push_033_hwm_counts_writes_not_bytes() {
    let (w, _r) = push(opts(2, Backpressure::Strict));
    assert!(w.try_write(Bytes::from(vec![0u8; 1 << 20])));
    assert_eq!(w.desired_size(), Some(1));
    assert!(w.try_write(b("x")));
    assert_eq!(w.desired_size(), Some(0));
}

#[test]
fn push_040_strict_rejects_excess_pending_writes() {
    let (w, _r) = push(opts(3, Backpressure::Strict));
    for _ in 0..3 {
        assert!(w.try_write(b("s")));
    }
    let mut waiting: Vec<_> = (0..3).map(|_| w.write(b("p"))).collect();
    for f in &mut waiting {
        assert!(poll_fut(f).is_pending(), "hwm writes may wait");
    }
    let mut fourth = w.write(b("q"));
    assert!(matches!(
        poll_fut(&mut fourth),
        Poll::Ready(Err(StreamError::BackpressureViolation))
    ));
    // A future that was only created, never polled, is not a waiter.
    let _lazy = w.write(b("lazy"));
    drop(waiting.pop());
    let mut fifth = w.write(b("r"));
    assert!(
        poll_fut(&mut fifth).is_pending(),
        "a withdrawn waiter frees its place"
    );
}

#[test]
fn push_041_strict_try_write_on_full_is_false_and_enqueues_nothing() {
    let (w, mut r) = push(opts(2, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert!(!w.try_write(b("c")));
    assert_eq!(read(&mut r), ["a", "b"]);
    assert!(poll_src(&mut r).is_pending());
}

#[tokio::test]
async fn push_042_block_queue_is_unbounded() {
    let (w, mut r) = push(opts(1, Backpressure::Block));
    let mut tasks = Vec::new();
    for i in 0..100u32 {
        let w = w.clone();
        tasks.push(tokio::spawn(async move {
            w.write(Bytes::from(i.to_string())).await
        }));
    }
    drop(w);
    let mut got = 0;
    let drained = tokio::time::timeout(LIMIT, async {
        while got < 100 {
            let batch = r.next_batch().await.expect("more").expect("ok");
            got += batch.len();
        }
    })
    .await;
    assert!(drained.is_ok(), "stuck after {got} chunks");
    for t in tasks {
        assert!(t.await.expect("task").is_ok());
    }
}

#[test]
fn push_043_block_try_write_enqueues_past_hwm_and_returns_false() {
    let (w, mut r) = push(opts(2, Backpressure::Block));
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert!(!w.try_write(b("c")), "a slow-down hint");
    assert_eq!(read(&mut r), ["a", "b", "c"]);
}

#[test]
fn push_044_drop_oldest_evicts_the_oldest_slot() {
    let (w, mut r) = push(opts(2, Backpressure::DropOldest));
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert!(w.try_write(b("c")));
    let mut f = w.write(b("d"));
    assert!(
        matches!(poll_fut(&mut f), Poll::Ready(Ok(()))),
        "never waits"
    );
    assert_eq!(read(&mut r), ["c", "d"]);
}

#[test]
fn push_045_drop_newest_discards_the_write_but_reports_success() {
    let (w, mut r) = push(opts(2, Backpressure::DropNewest));
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert!(w.try_write(b("c")));
    assert_eq!(read(&mut r), ["a", "b"]);
    assert_eq!(w.end().expect("end"), 3);
}

#[test]
fn push_046_a_waiting_write_is_enqueued_once_and_completes_after_the_read() {
    let (w, mut r) = push(opts(1, Backpressure::Block));
    assert!(w.try_write(b("a")));
    let mut waiting = w.write(b("b"));
    let (wakes, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut waiting).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut waiting).poll(&mut cx).is_pending());
    assert_eq!(read(&mut r), ["a"]);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the read woke the write");
    assert!(matches!(
        Pin::new(&mut waiting).poll(&mut cx),
        Poll::Ready(Ok(()))
    ));
    drop(waiting);
    assert_eq!(w.end().expect("end"), 2);
    assert_eq!(read(&mut r), ["b"]);
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)));
}

#[test]
fn push_047_waiting_writes_are_promoted_in_fifo_order() {
    let (w, mut r) = push(opts(1, Backpressure::Block));
    let clones = [w.clone(), w.clone(), w.clone()];
    assert!(w.try_write(b("0")));
    let mut futs: Vec<_> = clones
        .iter()
        .zip(["1", "2", "3"])
        .map(|(c, s)| c.write(b(s)))
        .collect();
    for f in &mut futs {
        assert!(poll_fut(f).is_pending());
    }
    let mut order = Vec::new();
    let mut data = Vec::new();
    for _ in 0..4 {
        data.extend(read(&mut r));
        // Poll in reverse so a completion can only come from promotion order.
        for (i, f) in futs.iter_mut().enumerate().rev() {
            if !order.contains(&i) && poll_fut(f).is_ready() {
                order.push(i);
            }
        }
    }
    assert_eq!(order, [0, 1, 2]);
    assert_eq!(data, ["0", "1", "2", "3"]);
}

#[test]
fn push_050_consumer_drop_closes_the_writer_and_wakes_waiters() {
    let (w, r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    let mut parked = w.write(b("b"));
    let (wakes, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut parked).poll(&mut cx).is_pending());
    let ready = w.ready().expect("open");
    let mut ready = pin!(ready);
    assert!(ready.as_mut().poll(&mut cx).is_pending());

    drop(r);
    assert!(wakes.0.load(Ordering::SeqCst) >= 1, "parked parties woke");
    assert!(matches!(
        Pin::new(&mut parked).poll(&mut cx),
        Poll::Ready(Err(StreamError::Closed))
    ));
    assert!(
        matches!(ready.as_mut().poll(&mut cx), Poll::Ready(Ok(false))),
        "PUSH-100: ready() resolves false"
    );
    assert!(!w.try_write(b("c")));
    assert!(matches!(
        poll_fut(&mut w.write(b("d"))),
        Poll::Ready(Err(StreamError::Closed))
    ));
    assert!(w.ready().is_none());
}

#[test]
fn push_052_consumer_cancel_errors_the_writer_with_its_reason() {
    let (w, r) = push(PushOptions::default());
    let err = StreamError::aborted("client went away");
    r.cancel_with(err.clone());
    let Poll::Ready(Err(got)) = poll_fut(&mut w.write(b("x"))) else {
        panic!("write succeeded after cancel")
    };
    assert!(is_reason(&got, &err));
    let Err(got) = w.end() else {
        panic!("end succeeded after cancel")
    };
    assert!(is_reason(&got, &err));
}

#[test]
fn push_053_writer_dropped_without_end_aborts_the_consumer() {
    let (w, mut r) = push(PushOptions::default());
    let second = w.clone();
    assert!(w.try_write(b("a")));
    drop(w);
    assert!(second.try_write(b("b")), "one clone left: still open");
    drop(second);
    assert_eq!(read(&mut r), ["a", "b"]);
    assert!(matches!(
        poll_src(&mut r),
        Poll::Ready(Some(Err(StreamError::Aborted(_))))
    ));
}

#[test]
fn push_060_cancelling_the_token_fails_writer_and_consumer() {
    let token = CancelToken::new();
    let (w, mut r) = push(PushOptions::new().token(token.clone()));
    assert!(w.try_write(b("a")));
    let (wakes, waker) = counting();
    assert_eq!(read(&mut r), ["a"]);
    assert!(
        Pin::new(&mut r)
            .poll_next_batch(&mut Context::from_waker(&waker))
            .is_pending()
    );
    token.cancel("deadline");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the parked read woke");
    let Poll::Ready(Some(Err(StreamError::Aborted(reason)))) = poll_src(&mut r) else {
        panic!("consumer did not get the abort")
    };
    assert_eq!(reason.to_string(), "deadline");
    assert!(!w.try_write(b("b")));
    assert!(matches!(
        poll_fut(&mut w.write(b("c"))),
        Poll::Ready(Err(StreamError::Aborted(_)))
    ));
}

#[test]
fn push_060_token_wakes_a_parked_write() {
    let token = CancelToken::new();
    let (w, _r) = push(opts(1, Backpressure::Block).token(token.clone()));
    assert!(w.try_write(b("a")));
    let mut parked = w.write(b("b"));
    let (wakes, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut parked).poll(&mut cx).is_pending());
    token.cancel("stop");
    assert!(wakes.0.load(Ordering::SeqCst) >= 1);
    assert!(matches!(
        Pin::new(&mut parked).poll(&mut cx),
        Poll::Ready(Err(StreamError::Aborted(_)))
    ));
}

#[test]
fn push_061_a_token_already_cancelled_gives_a_failed_stream() {
    let token = CancelToken::new();
    token.cancel("too late");
    let (w, mut r) = push(PushOptions::new().token(token));
    assert_eq!(w.desired_size(), None);
    assert!(!w.try_write(b("a")));
    assert!(matches!(
        poll_src(&mut r),
        Poll::Ready(Some(Err(StreamError::Aborted(_))))
    ));
}

#[tokio::test]
async fn push_062_cancelling_one_waiting_write_removes_only_that_write() {
    let (w, mut r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    tokio::select! {
        res = w.write(b("cancelled")) => panic!("write completed: {res:?}"),
        () = tokio::time::sleep(Duration::from_millis(10)) => {}
    }
    // The slot is still one; the pending place was released.
    {
        let mut later = w.write(b("later"));
        assert!(poll_fut(&mut later).is_pending(), "writer still open");
        let first = r.next_batch().await.expect("batch").expect("ok");
        assert_eq!(first.chunks(), [b("a")]);
        tokio::time::timeout(LIMIT, later)
            .await
            .expect("in time")
            .expect("later write ok");
    }
    assert_eq!(w.end().expect("end"), "alater".len() as u64);
    let second = r.next_batch().await.expect("batch").expect("ok");
    assert_eq!(second.chunks(), [b("later")]);
    assert!(r.next_batch().await.is_none());
}

#[test]
fn push_062_withdrawn_waiters_leave_no_trace_in_the_strict_limit() {
    let (w, _r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    for _ in 0..10 {
        let mut f = w.write(b("x"));
        assert!(poll_fut(&mut f).is_pending(), "the waiting place leaked");
    }
}

#[test]
fn push_080_empty_write_delivers_a_zero_byte_chunk_empty_writev_nothing() {
    let (w, mut r) = push(opts(2, Backpressure::Strict));
    assert!(w.try_writev(Batch::new()));
    assert_eq!(w.desired_size(), Some(1), "an empty writev takes a slot");
    assert!(w.try_write(Bytes::new()));
    assert_eq!(read(&mut r), [""]);

    let (w, mut r) = push(PushOptions::default());
    assert!(w.try_writev(Batch::new()));
    assert!(poll_src(&mut r).is_pending(), "no empty batch is yielded");
    assert_eq!(w.desired_size(), Some(4), "but its slot was freed");
}

#[test]
fn core_008_a_zero_length_chunk_is_carried() {
    let (w, mut r) = push(PushOptions::default());
    let mut f = w.write(Bytes::new());
    assert!(matches!(poll_fut(&mut f), Poll::Ready(Ok(()))));
    drop(f);
    let Poll::Ready(Some(Ok(batch))) = poll_src(&mut r) else {
        panic!("no batch")
    };
    assert_eq!(batch.len(), 1);
    assert!(batch.chunks()[0].is_empty());
}

#[test]
fn core_002_push_hands_on_the_same_buffers() {
    let (w, mut r) = push(PushOptions::default());
    let chunk = Bytes::from(vec![9u8; 4096]);
    let ptr = chunk.as_ptr();
    assert!(w.try_write(chunk));
    assert!(w.try_writev(vec![Bytes::from(vec![1u8; 10])]));
    let Poll::Ready(Some(Ok(batch))) = poll_src(&mut r) else {
        panic!("no batch")
    };
    assert_eq!(batch.chunks()[0].as_ptr(), ptr);
    assert_eq!(batch.chunks()[0].len(), 4096);
}

#[test]
fn core_006_errors_are_sticky() {
    let (w, mut r) = push(PushOptions::default());
    let err = StreamError::failed("x");
    w.fail(err.clone());
    for _ in 0..3 {
        let Poll::Ready(Some(Err(got))) = poll_src(&mut r) else {
            panic!("not sticky")
        };
        assert!(is_reason(&got, &err));
    }
}

#[test]
fn push_081_a_waiting_read_completes_on_end() {
    let (w, mut r) = push(PushOptions::default());
    let (wakes, waker) = counting();
    assert!(
        Pin::new(&mut r)
            .poll_next_batch(&mut Context::from_waker(&waker))
            .is_pending()
    );
    assert_eq!(w.end().expect("end"), 0);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    for _ in 0..3 {
        assert!(matches!(poll_src(&mut r), Poll::Ready(None)), "CORE-007");
    }
}

#[test]
fn push_088_a_stream_ended_with_nothing_yields_none_at_once() {
    let (w, mut r) = push(PushOptions::default());
    assert_eq!(w.end().expect("end"), 0);
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)));
    assert!(r.is_end_stream());
}

#[test]
fn push_082_a_second_end_through_a_clone_is_closed() {
    let (w, _r) = push(PushOptions::default());
    let other = w.clone();
    assert!(w.try_write(b("abc")));
    assert_eq!(w.end().expect("first end"), 3);
    assert!(matches!(other.end(), Err(StreamError::Closed)));
}

#[test]
fn push_084_after_end_writes_fail_and_try_end_is_none() {
    let (w, _r) = push(PushOptions::default());
    assert_eq!(w.try_end(), Some(0));
    assert!(!w.try_write(b("a")));
    assert!(matches!(
        poll_fut(&mut w.write(b("b"))),
        Poll::Ready(Err(StreamError::Closed))
    ));
    assert_eq!(w.try_end(), None);
    assert!(w.ready().is_none());
}

#[test]
fn push_085_end_rejects_writes_waiting_on_other_clones() {
    let (w, mut r) = push(opts(1, Backpressure::Block));
    let other = w.clone();
    assert!(w.try_write(b("a")));
    let mut waiting = other.write(b("b"));
    assert!(poll_fut(&mut waiting).is_pending());
    assert_eq!(w.end().expect("end"), 1);
    assert!(matches!(
        poll_fut(&mut waiting),
        Poll::Ready(Err(StreamError::Closed))
    ));
    assert_eq!(read(&mut r), ["a"]);
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)));
}

#[test]
fn push_086_try_end_is_none_while_full() {
    let (w, mut r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("ab")));
    assert_eq!(w.try_end(), None);
    assert_eq!(read(&mut r), ["ab"]);
    assert_eq!(w.try_end(), Some(2));
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)));
}

#[test]
fn push_087_fail_after_end_does_nothing() {
    let (w, mut r) = push(PushOptions::default());
    let other = w.clone();
    assert!(w.try_write(b("a")));
    assert_eq!(w.end().expect("end"), 1);
    assert!(!other.try_fail(StreamError::failed("late")));
    other.fail(StreamError::failed("later"));
    assert_eq!(read(&mut r), ["a"]);
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)), "clean end");
}

#[test]
fn push_089_a_write_with_room_completes_on_its_first_poll() {
    let (w, _r) = push(PushOptions::default());
    let mut f = w.write(b("a"));
    assert!(matches!(poll_fut(&mut f), Poll::Ready(Ok(()))));
    let mut f = w.writev(batch(&["b", "c"]));
    assert!(matches!(poll_fut(&mut f), Poll::Ready(Ok(()))));
}

#[test]
fn push_090_ready_is_none_when_closed_or_failed_and_true_with_room() {
    let (w, _r) = push(PushOptions::default());
    let mut ready = w.ready().expect("open");
    assert!(matches!(poll_fut(&mut ready), Poll::Ready(Ok(true))));
    assert!(matches!(
        w.poll_ready(&mut Context::from_waker(Waker::noop())),
        Poll::Ready(Ok(true))
    ));

    let (w, _r) = push(PushOptions::default());
    assert!(w.try_fail(StreamError::failed("x")));
    assert!(w.ready().is_none(), "failed");
    assert!(matches!(
        w.poll_ready(&mut Context::from_waker(Waker::noop())),
        Poll::Ready(Err(_))
    ));

    let (w, _r) = push(PushOptions::default());
    assert_eq!(w.try_end(), Some(0));
    assert!(w.ready().is_none(), "closed");
}

#[test]
fn push_091_every_ready_waiter_wakes_when_space_appears() {
    let (w, mut r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    let (w1, k1) = counting();
    let (w2, k2) = counting();
    let mut r1 = w.ready().expect("open");
    let mut r2 = w.ready().expect("open");
    assert!(
        Pin::new(&mut r1)
            .poll(&mut Context::from_waker(&k1))
            .is_pending()
    );
    assert!(
        Pin::new(&mut r2)
            .poll(&mut Context::from_waker(&k2))
            .is_pending()
    );
    assert_eq!(read(&mut r), ["a"]);
    assert_eq!(w1.0.load(Ordering::SeqCst), 1);
    assert_eq!(w2.0.load(Ordering::SeqCst), 1);
    assert!(matches!(poll_fut(&mut r1), Poll::Ready(Ok(true))));
    assert!(matches!(poll_fut(&mut r2), Poll::Ready(Ok(true))));
}

#[test]
fn push_094_ready_resolves_false_when_the_writer_ends_first() {
    let (w, _r) = push(opts(1, Backpressure::Strict));
    let other = w.clone();
    assert!(w.try_write(b("a")));
    let mut ready = w.ready().expect("open");
    assert!(poll_fut(&mut ready).is_pending());
    assert_eq!(other.end().expect("end"), 1);
    assert!(matches!(poll_fut(&mut ready), Poll::Ready(Ok(false))));
}

#[test]
fn push_095_ready_rejects_when_the_writer_fails() {
    let (w, _r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    let mut ready = w.ready().expect("open");
    assert!(poll_fut(&mut ready).is_pending());
    let err = StreamError::failed("x");
    assert!(w.try_fail(err.clone()));
    let Poll::Ready(Err(got)) = poll_fut(&mut ready) else {
        panic!("ready did not reject")
    };
    assert!(is_reason(&got, &err));
}

#[test]
fn push_100_consumer_break_resolves_a_pending_ready_with_false() {
    let (w, r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    let mut ready = w.ready().expect("open");
    assert!(poll_fut(&mut ready).is_pending());
    drop(r);
    assert!(matches!(poll_fut(&mut ready), Poll::Ready(Ok(false))));
}

#[test]
fn push_101_consumer_error_rejects_a_pending_ready() {
    let (w, r) = push(opts(1, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    let mut ready = w.ready().expect("open");
    assert!(poll_fut(&mut ready).is_pending());
    r.cancel("bad request");
    let Poll::Ready(Err(StreamError::Aborted(reason))) = poll_fut(&mut ready) else {
        panic!("ready did not reject")
    };
    assert_eq!(reason.to_string(), "bad request");
}

#[test]
fn sink_try_write_batch_hands_the_batch_back_when_it_would_wait() {
    let (w, mut r) = push(opts(1, Backpressure::Block));
    assert!(w.try_write_batch(batch(&["a"])).is_ok());
    let back = w
        .try_write_batch(batch(&["b", "c"]))
        .expect_err("full: handed back");
    assert_eq!(back, batch(&["b", "c"]));
    assert_eq!(read(&mut r), ["a"], "nothing enqueued past hwm");
}

#[test]
fn sink_poll_write_batch_parks_and_poll_end_waits_for_it() {
    let (mut w, mut r) = push(opts(1, Backpressure::Strict));
    let mut cx = Context::from_waker(Waker::noop());
    let mut slot = Some(batch(&["a"]));
    assert!(matches!(
        w.poll_write_batch(&mut cx, &mut slot),
        Poll::Ready(Ok(()))
    ));
    assert!(slot.is_none());
    slot = Some(batch(&["b"]));
    assert!(w.poll_write_batch(&mut cx, &mut slot).is_pending());
    assert!(slot.is_none(), "the stream holds the parked batch");
    assert!(
        w.poll_end(&mut cx).is_pending(),
        "waits for the parked write"
    );
    assert_eq!(read(&mut r), ["a"]);
    assert!(matches!(w.poll_end(&mut cx), Poll::Ready(Ok(2))));
    assert_eq!(read(&mut r), ["b"]);
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)));
}

#[test]
fn sink_poll_write_batch_gives_a_refused_batch_back() {
    let (mut w, _r) = push(opts(1, Backpressure::Strict));
    let mut cx = Context::from_waker(Waker::noop());
    let other = w.clone();
    assert!(other.try_write(b("a")));
    let mut parked = other.write(b("b"));
    assert!(poll_fut(&mut parked).is_pending());
    let mut slot = Some(batch(&["c"]));
    assert!(matches!(
        w.poll_write_batch(&mut cx, &mut slot),
        Poll::Ready(Err(StreamError::BackpressureViolation))
    ));
    assert_eq!(slot, Some(batch(&["c"])));
}

#[test]
fn sink_dropping_a_writer_withdraws_its_parked_batch() {
    let (mut w, mut r) = push(opts(1, Backpressure::Block));
    let keep = w.clone();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(keep.try_write(b("a")));
    let mut slot = Some(batch(&["b"]));
    assert!(w.poll_write_batch(&mut cx, &mut slot).is_pending());
    drop(w);
    assert_eq!(read(&mut r), ["a"]);
    assert_eq!(keep.end().expect("end"), 1);
    assert!(matches!(poll_src(&mut r), Poll::Ready(None)));
}

#[tokio::test]
async fn fast_004_data_integrity_under_backpressure() {
    let (w, r) = push(opts(3, Backpressure::Block));
    let mut p = pull(r, transform_fn(Ok));
    let producer = tokio::spawn(async move {
        for i in 0..100u32 {
            w.write(Bytes::from(i.to_be_bytes().to_vec())).await?;
        }
        w.end()
    });
    let got = tokio::time::timeout(LIMIT, async {
        let mut got = Vec::new();
        while let Some(batch) = p.next_batch().await {
            for c in batch.expect("ok") {
                got.push(u32::from_be_bytes(c[..].try_into().expect("4 bytes")));
            }
            tokio::task::yield_now().await;
        }
        got
    })
    .await
    .expect("in time");
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    assert_eq!(producer.await.expect("task").expect("end"), 400);
}

#[test]
fn writer_and_readable_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Writer>();
    check::<Readable>();
    check::<weir_stream::push::Write<'static>>();
}

#[test]
fn push_083_one_read_takes_every_buffered_slot_as_one_flat_batch() {
    let (writer, mut readable) = push(opts(4, Backpressure::Strict));
    for part in ["a", "b", "c", "d"] {
        assert!(writer.try_write(b(part)));
    }
    assert_eq!(writer.desired_size(), Some(0));
    let Poll::Ready(Some(Ok(batch))) = poll_src(&mut readable) else {
        panic!("no batch")
    };
    assert_eq!(batch.len(), 4, "one read, four chunks");
    assert_eq!(
        writer.desired_size(),
        Some(4),
        "every slot freed by the one read"
    );
}
