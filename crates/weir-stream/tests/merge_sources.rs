//! `merge` (catalogue section 8, MERGE-001…005).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use weir_stream::merge::merge;
use weir_stream::{Batch, BatchResult, CancelToken, Reason, Source, SourceExt, StreamError};

/// A source of scripted poll results that counts polls and drops, with
/// optional trailers at the end. Once the script runs out it ends.
struct Scripted {
    items: VecDeque<Poll<Option<BatchResult>>>,
    trailers: Option<HeaderMap>,
    polls: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Counters {
    polls: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Counters {
    fn polls(&self) -> usize {
        self.polls.load(Ordering::SeqCst)
    }
    fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
}

fn scripted(items: Vec<Poll<Option<BatchResult>>>) -> (Scripted, Counters) {
    let c = Counters {
        polls: Arc::default(),
        drops: Arc::default(),
    };
    (
        Scripted {
            items: items.into(),
            trailers: None,
            polls: c.polls.clone(),
            drops: c.drops.clone(),
        },
        c,
    )
}

/// `n` one-chunk batches named `{tag}{i}`.
fn items(tag: &str, n: usize) -> Vec<Poll<Option<BatchResult>>> {
    (0..n)
        .map(|i| Poll::Ready(Some(Ok(Batch::one(Bytes::from(format!("{tag}{i}")))))))
        .collect()
}

impl Source for Scripted {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.items.pop_front().unwrap_or(Poll::Ready(None))
    }

    fn take_trailers(mut self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.trailers.take()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

/// A source that yields `n` batches, one every `every`.
struct Timed {
    tag: &'static str,
    every: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    sent: usize,
    n: usize,
}

fn timed(tag: &'static str, every_ms: u64, n: usize) -> Timed {
    let every = Duration::from_millis(every_ms);
    Timed {
        tag,
        every,
        sleep: Box::pin(tokio::time::sleep(every)),
        sent: 0,
        n,
    }
}

impl Source for Timed {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        if self.sent == self.n {
            return Poll::Ready(None);
        }
        std::task::ready!(self.sleep.as_mut().poll(cx));
        let next = tokio::time::Instant::now() + self.every;
        self.sleep.as_mut().reset(next);
        self.sent += 1;
        let name = format!("{}{}", self.tag, self.sent);
        Poll::Ready(Some(Ok(Batch::one(Bytes::from(name)))))
    }
}

fn poll<S: Source + Unpin>(s: &mut S) -> Poll<Option<BatchResult>> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(s).poll_next_batch(&mut cx)
}

fn name(item: Poll<Option<BatchResult>>) -> String {
    match item {
        Poll::Ready(Some(Ok(b))) => b
            .chunks()
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect(),
        other => panic!("expected a batch, got {other:?}"),
    }
}

fn same(a: &StreamError, b: &StreamError) -> bool {
    match (a.reason(), b.reason()) {
        (Some(a), Some(b)) => Reason::ptr_eq(a, b),
        _ => false,
    }
}

#[test]
fn merge_001_no_sources_end_at_once() {
    let mut m = merge(Vec::<Scripted>::new());
    assert!(m.is_end_stream());
    assert!(matches!(poll(&mut m), Poll::Ready(None)));
    assert!(matches!(poll(&mut m), Poll::Ready(None)), "CORE-007");
}

#[test]
fn merge_001_one_source_passes_through() {
    let a = Bytes::from(vec![1u8; 64]);
    let ptr = a.as_ptr();
    let (mut src, c) = scripted(vec![
        Poll::Ready(Some(Ok(Batch::from(vec![a, Bytes::from_static(b"b")])))),
        Poll::Ready(Some(Ok(Batch::one(Bytes::from_static(b"c"))))),
    ]);
    let mut trailers = HeaderMap::new();
    trailers.insert("x-sum", "7".parse().expect("value"));
    src.trailers = Some(trailers);
    let mut m = merge([src]);
    let Poll::Ready(Some(Ok(first))) = poll(&mut m) else {
        panic!("no batch")
    };
    assert_eq!(first.len(), 2, "batch boundaries kept");
    assert_eq!(first.chunks()[0].as_ptr(), ptr, "same buffers");
    assert_eq!(name(poll(&mut m)), "c");
    assert!(matches!(poll(&mut m), Poll::Ready(None)));
    assert_eq!(c.drops(), 1, "the ended source is released");
    let t = Pin::new(&mut m)
        .take_trailers()
        .expect("trailers passed on");
    assert_eq!(t["x-sum"], "7");
}

#[tokio::test]
async fn merge_002_batches_come_out_in_the_order_they_become_ready() {
    let mut m = merge([timed("slow", 250, 2), timed("fast", 5, 3)]);
    let run = async {
        let mut out = Vec::new();
        while let Some(b) = m.next_batch().await {
            out.push(name(Poll::Ready(Some(b))));
        }
        out
    };
    let out = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("timed out");
    assert_eq!(&out[..3], ["fast1", "fast2", "fast3"], "{out:?}");
    let mut sorted = out.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["fast1", "fast2", "fast3", "slow1", "slow2"],
        "each exactly once"
    );
}

#[test]
fn merge_003_no_read_ahead_and_fair_rotation() {
    let (a, ca) = scripted(items("a", 10));
    let (b, cb) = scripted(items("b", 10));
    let (c, cc) = scripted(items("c", 10));
    let mut m = merge([a, b, c]);
    let taken: Vec<String> = (0..6).map(|_| name(poll(&mut m))).collect();
    assert_eq!(taken, ["a0", "b0", "c0", "a1", "b1", "c1"]);
    for (counters, tag) in [(&ca, "a"), (&cb, "b"), (&cc, "c")] {
        let from_it = taken.iter().filter(|t| t.starts_with(tag)).count();
        assert_eq!(counters.polls(), from_it, "{tag}: one poll per item taken");
    }
}

#[test]
fn merge_003_a_pending_source_does_not_hold_back_the_others() {
    let (stuck, cs) = scripted(vec![Poll::Pending, Poll::Pending, Poll::Pending]);
    let (b, cb) = scripted(items("b", 2));
    let mut m = merge([stuck, b]);
    assert_eq!(name(poll(&mut m)), "b0");
    assert_eq!(name(poll(&mut m)), "b1");
    assert_eq!(cb.polls(), 2);
    assert_eq!(cs.polls(), 2, "polled once per merge poll, never twice");
}

#[test]
fn merge_004_a_source_error_ends_the_merge_and_drops_the_others() {
    let boom = StreamError::failed("origin reset");
    let (a, ca) = scripted(items("a", 5));
    let (b, cb) = scripted(vec![Poll::Ready(Some(Err(boom.clone())))]);
    let (c, cc) = scripted(items("c", 5));
    let mut m = merge([a, b, c]);
    assert_eq!(name(poll(&mut m)), "a0");
    let Poll::Ready(Some(Err(err))) = poll(&mut m) else {
        panic!("no error")
    };
    assert!(same(&err, &boom), "the source's error, unchanged");
    assert_eq!((ca.drops(), cb.drops(), cc.drops()), (1, 1, 1));
    assert_eq!(cc.polls(), 0);
    let Poll::Ready(Some(Err(again))) = poll(&mut m) else {
        panic!("not sticky")
    };
    assert!(same(&again, &boom));
}

#[test]
fn merge_005_dropping_the_merge_drops_every_source() {
    let (a, ca) = scripted(items("a", 10));
    let (b, cb) = scripted(items("b", 1));
    let (c, cc) = scripted(items("c", 10));
    let mut m = merge([a, b, c]);
    let taken: Vec<String> = (0..5).map(|_| name(poll(&mut m))).collect();
    assert_eq!(taken, ["a0", "b0", "c0", "a1", "c1"]);
    assert_eq!(cb.drops(), 1, "an ended source is dropped at once");
    assert_eq!((ca.drops(), cc.drops()), (0, 0));
    drop(m);
    assert_eq!((ca.drops(), cb.drops(), cc.drops()), (1, 1, 1));
}

#[test]
fn merge_005_a_cancelled_token_errors_without_polling() {
    let token = CancelToken::new();
    token.cancel("client left");
    let (a, ca) = scripted(items("a", 3));
    let (b, cb) = scripted(items("b", 3));
    let mut m = merge([a, b]).with_token(token.clone());
    let Poll::Ready(Some(Err(err))) = poll(&mut m) else {
        panic!("no error")
    };
    assert!(same(&err, &token.reason().expect("fired")));
    assert_eq!((ca.polls(), cb.polls()), (0, 0));
    assert_eq!((ca.drops(), cb.drops()), (1, 1));
}

#[tokio::test]
async fn merge_005_cancelling_the_token_wakes_a_waiting_merge() {
    let token = CancelToken::new();
    let (stuck, cs) = scripted(vec![Poll::Pending; 1000]);
    let mut m = merge([stuck]).with_token(token.clone());
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        token.cancel("deadline");
    };
    let (res, ()) = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(m.next_batch(), canceller)
    })
    .await
    .expect("timed out: the token did not wake the merge");
    let err = res.expect("an item").expect_err("cancelled");
    assert_eq!(err.to_string(), "aborted: deadline");
    assert_eq!(cs.drops(), 1);
}
