//! Broadcast behaviour (catalogue section 6), one test per ID.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use weir_stream::broadcast::{BroadcastOptions, Consumer, broadcast};
use weir_stream::{
    Backpressure, Batch, BatchResult, CancelToken, Reason, Source, SourceExt, StreamError, pull,
    transform_fn,
};

const LIMIT: Duration = Duration::from_secs(5);

fn opts(hwm: usize, policy: Backpressure) -> BroadcastOptions {
    BroadcastOptions::new().hwm(hwm).policy(policy)
}

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

fn poll_src<S: Source + Unpin>(s: &mut S) -> Poll<Option<BatchResult>> {
    Pin::new(s).poll_next_batch(&mut Context::from_waker(Waker::noop()))
}

fn poll_fut<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

fn text(batch: &Batch) -> Vec<String> {
    batch
        .chunks()
        .iter()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect()
}

/// The chunks of the next batch; panics if there is none.
fn read<S: Source + Unpin>(c: &mut S) -> Vec<String> {
    match poll_src(c) {
        Poll::Ready(Some(Ok(batch))) => text(&batch),
        other => panic!("expected a batch, got {other:?}"),
    }
}

/// Every batch until the end or an error (returned last).
fn collect(c: &mut Consumer) -> (Vec<Vec<String>>, Option<StreamError>) {
    let mut out = Vec::new();
    loop {
        match poll_src(c) {
            Poll::Ready(Some(Ok(batch))) => out.push(text(&batch)),
            Poll::Ready(Some(Err(e))) => return (out, Some(e)),
            Poll::Ready(None) => return (out, None),
            Poll::Pending => panic!("pending after {out:?}"),
        }
    }
}

/// Every batch until a clean end; panics on an error.
fn collect_ok(c: &mut Consumer) -> Vec<Vec<String>> {
    let (out, err) = collect(c);
    assert!(err.is_none(), "error after {out:?}: {err:?}");
    out
}

#[derive(Default)]
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn bcast_001_subscribe_counts_a_consumer_at_once() {
    let (_w, bc) = broadcast(BroadcastOptions::default());
    assert_eq!(bc.consumer_count(), 0);
    let c1 = bc.subscribe();
    let c2 = bc.subscribe();
    assert_eq!(bc.consumer_count(), 2, "counted before any poll");
    drop(c1);
    assert_eq!(bc.consumer_count(), 1);
    drop(c2);
    assert_eq!(bc.consumer_count(), 0);
}

#[test]
fn bcast_002_a_new_consumer_starts_at_the_write_position() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let mut early = bc.subscribe();
    assert!(w.try_write(b("a")));
    let mut late = bc.subscribe();
    assert!(w.try_write(b("b")));
    assert_eq!(w.end().expect("end"), 2);
    assert_eq!(collect_ok(&mut late), [vec!["b".to_owned()]]);
    assert_eq!(
        collect(&mut early).0,
        [vec!["a".to_owned()], vec!["b".to_owned()]]
    );
}

#[test]
fn bcast_003_each_poll_returns_one_entry() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let mut c = bc.subscribe();
    assert!(w.try_write(b("a")));
    assert!(w.try_writev(vec![b("b"), b("c")]));
    assert!(w.try_write(b("d")));
    assert_eq!(read(&mut c), ["a"]);
    assert_eq!(read(&mut c), ["b", "c"]);
    assert_eq!(read(&mut c), ["d"]);
    assert!(poll_src(&mut c).is_pending());
}

#[test]
fn bcast_004_backpressure_follows_the_slowest_consumer() {
    let (w, bc) = broadcast(opts(2, Backpressure::Strict));
    let mut fast = bc.subscribe();
    let _slow = bc.subscribe();
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert_eq!(read(&mut fast), ["a"]);
    assert_eq!(read(&mut fast), ["b"]);
    assert_eq!(w.desired_size(), Some(0), "the slow one holds both");
    assert!(
        poll_src(&mut fast).is_pending(),
        "the fast one simply waits"
    );
    assert!(!w.try_write(b("c")));
}

#[test]
fn bcast_005_the_slowest_leaving_recomputes_at_once() {
    let (w, bc) = broadcast(opts(2, Backpressure::Block));
    let mut fast = bc.subscribe();
    let slow = bc.subscribe();
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert_eq!(read(&mut fast), ["a"]);
    assert_eq!(read(&mut fast), ["b"]);
    let mut waiting = w.write(b("c"));
    assert!(poll_fut(&mut waiting).is_pending());
    let mut ready = w.ready().expect("open");
    assert!(poll_fut(&mut ready).is_pending());
    drop(slow);
    assert!(matches!(poll_fut(&mut waiting), Poll::Ready(Ok(()))));
    assert_eq!(w.desired_size(), Some(1), "c was promoted into the space");
    assert!(matches!(poll_fut(&mut ready), Poll::Ready(Ok(true))));
    assert_eq!(read(&mut fast), ["c"]);
    assert_eq!(w.desired_size(), Some(2));
}

#[test]
fn bcast_006_with_no_consumers_writes_are_held_up_to_hwm() {
    let (w, bc) = broadcast(opts(2, Backpressure::Strict));
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert!(!w.try_write(b("c")));
    assert_eq!(w.desired_size(), Some(0));
    // A consumer starts at the write position: the held entries are released.
    let mut c = bc.subscribe();
    assert_eq!(w.desired_size(), Some(2));
    assert!(w.try_write(b("d")));
    assert_eq!(read(&mut c), ["d"]);
}

#[test]
fn bcast_007_drop_oldest_moves_lagging_cursors_forward() {
    let (w, bc) = broadcast(opts(2, Backpressure::DropOldest));
    let mut fast = bc.subscribe();
    let mut slow = bc.subscribe();
    for s in ["c0", "c1", "c2", "c3"] {
        assert!(w.try_write(b(s)));
        assert_eq!(read(&mut fast), [s]);
    }
    assert_eq!(w.desired_size(), Some(0));
    assert!(w.try_write(b("c4")));
    assert!(w.try_write(b("c5")));
    assert_eq!(w.end().expect("end"), 12);
    let (got, err) = collect(&mut slow);
    assert_eq!(got, [vec!["c4".to_owned()], vec!["c5".to_owned()]]);
    assert!(err.is_none());
    assert_eq!(
        collect(&mut fast).0,
        [vec!["c4".to_owned()], vec!["c5".to_owned()]]
    );
}

#[test]
fn bcast_007_drop_newest_discards_per_the_slowest() {
    let (w, bc) = broadcast(opts(2, Backpressure::DropNewest));
    let mut c = bc.subscribe();
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert!(w.try_write(b("c")), "reported written");
    assert_eq!(w.end().expect("end"), 3);
    assert_eq!(
        collect(&mut c).0,
        [vec!["a".to_owned()], vec!["b".to_owned()]]
    );
}

#[test]
fn bcast_007_block_try_write_enqueues_past_hwm() {
    let (w, bc) = broadcast(opts(1, Backpressure::Block));
    let mut c = bc.subscribe();
    assert!(w.try_write(b("a")));
    assert!(!w.try_write(b("b")), "a slow-down hint");
    assert_eq!(read(&mut c), ["a"]);
    assert_eq!(read(&mut c), ["b"]);
}

#[test]
fn bcast_007_strict_rejects_excess_pending_writes() {
    let (w, bc) = broadcast(opts(1, Backpressure::Strict));
    let _c = bc.subscribe();
    assert!(w.try_write(b("a")));
    let mut first = w.write(b("b"));
    assert!(poll_fut(&mut first).is_pending());
    assert!(matches!(
        poll_fut(&mut w.write(b("c"))),
        Poll::Ready(Err(StreamError::BackpressureViolation))
    ));
}

#[test]
fn bcast_008_end_delivers_unread_entries_then_the_end() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let mut c = bc.subscribe();
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    assert_eq!(w.end().expect("end"), 2);
    assert_eq!(
        collect_ok(&mut c),
        [vec!["a".to_owned()], vec!["b".to_owned()]]
    );
    assert!(matches!(poll_src(&mut c), Poll::Ready(None)), "CORE-007");
    assert_eq!(bc.consumer_count(), 0, "a finished consumer stops counting");
}

#[test]
fn bcast_009_fail_delivers_unread_entries_then_the_error() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let mut c1 = bc.subscribe();
    let mut c2 = bc.subscribe();
    assert!(w.try_write(b("a")));
    assert!(w.try_write(b("b")));
    let err = StreamError::failed("origin reset");
    w.fail(err.clone());
    for c in [&mut c1, &mut c2] {
        let (got, e) = collect(c);
        assert_eq!(got, [vec!["a".to_owned()], vec!["b".to_owned()]]);
        let e = e.expect("an error after the data");
        assert!(Reason::ptr_eq(
            e.reason().expect("reason"),
            err.reason().expect("reason")
        ));
        assert!(matches!(poll_src(c), Poll::Ready(Some(Err(_)))), "sticky");
    }
    assert_eq!(bc.consumer_count(), 0, "consumers detached");
}

#[tokio::test]
async fn bcast_010_cancel_never_hangs_and_rejects_waiting_writes() {
    let (w, bc) = broadcast(opts(1, Backpressure::Block));
    let mut c = bc.subscribe();
    assert!(w.try_write(b("a")));
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        bc.cancel();
    };
    let (res, ()) = tokio::time::timeout(LIMIT, async { tokio::join!(w.write(b("b")), cancel) })
        .await
        .expect("no hang");
    assert!(matches!(res, Err(StreamError::Aborted(_))));
    assert!(
        matches!(poll_src(&mut c), Poll::Ready(None)),
        "unread data dropped, clean end"
    );
    assert!(w.ready().is_none());
    bc.cancel();
    assert!(matches!(poll_src(&mut c), Poll::Ready(None)), "idempotent");
}

#[test]
fn bcast_010_cancel_resolves_ready_false_and_wakes_consumers() {
    let (w, bc) = broadcast(opts(1, Backpressure::Strict));
    let mut c = bc.subscribe();
    let count = Arc::new(CountWaker::default());
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut c).poll_next_batch(&mut cx).is_pending());
    assert!(w.try_write(b("a")));
    let mut ready = w.ready().expect("open");
    assert!(poll_fut(&mut ready).is_pending());
    let before = count.0.load(Ordering::SeqCst);
    let mut parked = bc.subscribe();
    assert!(Pin::new(&mut parked).poll_next_batch(&mut cx).is_pending());
    bc.cancel_with("shutting down");
    assert!(
        count.0.load(Ordering::SeqCst) > before,
        "parked consumer woke"
    );
    assert!(matches!(poll_fut(&mut ready), Poll::Ready(Ok(false))));
    assert!(matches!(
        poll_src(&mut parked),
        Poll::Ready(Some(Err(StreamError::Aborted(_))))
    ));
    assert!(matches!(
        poll_fut(&mut w.write(b("x"))),
        Poll::Ready(Err(StreamError::Aborted(_)))
    ));
}

#[test]
fn bcast_010_cancel_with_no_consumers_is_fine() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    bc.cancel();
    assert!(!w.try_write(b("a")));
    assert!(matches!(w.end(), Err(StreamError::Aborted(_))));
}

#[test]
fn bcast_011_byte_count_writev_and_per_consumer_transforms() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let upper = transform_fn(|b: Option<Batch>| {
        Ok(b.map(|b| {
            b.into_iter()
                .map(|c| Bytes::from(c.to_ascii_uppercase()))
                .collect()
        }))
    });
    let mut shout = pull(bc.subscribe(), upper);
    let mut plain = pull(bc.subscribe(), ());
    assert!(w.try_writev(vec![b("ab"), b("c")]));
    assert!(w.try_write(b("d")));
    assert_eq!(w.end().expect("end"), 4);
    assert_eq!(read(&mut shout), ["AB", "C"]);
    assert_eq!(read(&mut plain), ["ab", "c"]);
    assert_eq!(read(&mut shout), ["D"]);
    assert_eq!(read(&mut plain), ["d"]);
}

#[test]
fn bcast_030_default_hwm_is_16() {
    let (w, _bc) = broadcast(BroadcastOptions::default());
    assert_eq!(w.desired_size(), Some(16));
}

#[test]
fn core_002_consumers_share_the_same_buffers() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let mut c1 = bc.subscribe();
    let mut c2 = bc.subscribe();
    let chunk = Bytes::from(vec![3u8; 1024]);
    let ptr = chunk.as_ptr();
    assert!(w.try_write(chunk));
    for c in [&mut c1, &mut c2] {
        let Poll::Ready(Some(Ok(batch))) = poll_src(c) else {
            panic!("no batch")
        };
        assert_eq!(batch.chunks()[0].as_ptr(), ptr);
        assert_eq!(batch.chunks()[0].len(), 1024);
    }
}

#[test]
fn bcast_empty_writev_delivers_nothing_and_zero_length_chunks_arrive() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let mut c = bc.subscribe();
    assert!(w.try_writev(Batch::new()));
    assert!(w.try_write(Bytes::new()));
    assert_eq!(read(&mut c), [""]);
    assert!(poll_src(&mut c).is_pending());
}

#[test]
fn bcast_reading_past_empty_writevs_promotes_waiting_writes() {
    let (w, bc) = broadcast(opts(1, Backpressure::Block));
    let mut c = bc.subscribe();
    assert!(w.try_writev(Batch::new()));
    let mut waiting = w.write(b("x"));
    assert!(poll_fut(&mut waiting).is_pending());
    assert_eq!(read(&mut c), ["x"], "the freed entry let x in");
    assert!(matches!(poll_fut(&mut waiting), Poll::Ready(Ok(()))));
}

#[test]
fn bcast_writer_dropped_without_end_aborts_consumers() {
    let (w, bc) = broadcast(BroadcastOptions::default());
    let mut c = bc.subscribe();
    assert!(w.try_write(b("a")));
    drop(w);
    let (got, err) = collect(&mut c);
    assert_eq!(got, [vec!["a".to_owned()]]);
    assert!(matches!(err, Some(StreamError::Aborted(_))));
}

#[test]
fn bcast_token_fails_writer_and_consumers() {
    let token = CancelToken::new();
    let (w, bc) = broadcast(BroadcastOptions::new().token(token.clone()));
    let mut c = bc.subscribe();
    assert!(w.try_write(b("a")));
    token.cancel("deadline");
    assert!(!w.try_write(b("b")));
    let (got, err) = collect(&mut c);
    assert_eq!(got, [vec!["a".to_owned()]]);
    assert!(matches!(err, Some(StreamError::Aborted(_))));
}

#[test]
fn bcast_closes_the_writer_when_nobody_can_read_again() {
    let (w, bc) = broadcast(opts(1, Backpressure::Block));
    let c = bc.subscribe();
    let handle = bc.clone();
    drop(bc);
    assert!(w.try_write(b("a")));
    let mut parked = w.write(b("b"));
    assert!(poll_fut(&mut parked).is_pending());
    drop(c);
    assert!(w.desired_size().is_some(), "a handle is still alive");
    drop(handle);
    assert!(matches!(
        poll_fut(&mut parked),
        Poll::Ready(Err(StreamError::Closed))
    ));
    assert_eq!(w.desired_size(), None);
}

#[tokio::test]
async fn bcast_two_consumers_at_different_speeds_get_everything() {
    let (w, bc) = broadcast(opts(2, Backpressure::Block));
    let consumers: Vec<_> = (0..2).map(|_| bc.subscribe()).collect();
    let producer = tokio::spawn(async move {
        for i in 0..50u8 {
            w.write(Bytes::from(vec![i])).await?;
        }
        w.end()
    });
    let mut readers = Vec::new();
    for (k, mut c) in consumers.into_iter().enumerate() {
        readers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(batch) = c.next_batch().await {
                got.extend(batch.expect("ok").into_iter().map(|c| c[0]));
                if k == 1 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            got
        }));
    }
    for r in readers {
        let got = tokio::time::timeout(LIMIT, r)
            .await
            .expect("in time")
            .expect("task");
        assert_eq!(got, (0..50).collect::<Vec<u8>>());
    }
    assert_eq!(producer.await.expect("task").expect("end"), 50);
}
