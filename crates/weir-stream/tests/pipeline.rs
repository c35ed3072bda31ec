//! Pull pipeline behaviour, named after the catalogue IDs
//! (`shared/spec/streams-semantics.md`) they pin.

use std::cell::RefCell;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;
use weir_stream::body::{HttpBodySource, SourceBody};
use weir_stream::{
    Batch, BatchResult, Source, SourceExt, StreamError, Transform, TransformExt, from_iter, pull,
    transform_fn,
};

/// A source of scripted poll results that counts polls and drops.
struct Scripted {
    items: std::collections::VecDeque<Poll<Option<BatchResult>>>,
    polls: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Scripted {
    fn new(items: Vec<Poll<Option<BatchResult>>>) -> (Self, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let polls = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        (
            Scripted {
                items: items.into(),
                polls: polls.clone(),
                drops: drops.clone(),
            },
            polls,
            drops,
        )
    }
}

impl Source for Scripted {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.items.pop_front().unwrap_or(Poll::Ready(None))
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn data(s: &'static str) -> Poll<Option<BatchResult>> {
    Poll::Ready(Some(Ok(Batch::one(Bytes::from_static(s.as_bytes())))))
}

/// Records every call a transform receives.
#[derive(Clone, Default)]
struct Log(Rc<RefCell<Vec<String>>>);

struct Recorder {
    name: &'static str,
    log: Log,
    idle_output: Option<&'static str>,
}

impl Transform for Recorder {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match input {
            Some(b) => {
                self.log.0.borrow_mut().push(format!("{}:batch", self.name));
                let mut out = Batch::new();
                for c in b {
                    let mut v = c.to_vec();
                    v.extend_from_slice(self.name.as_bytes());
                    out.push(v.into());
                }
                Ok(Some(out))
            }
            None => {
                self.log.0.borrow_mut().push(format!("{}:flush", self.name));
                Ok(Some(Batch::one(Bytes::from(format!(
                    "<{}-end>",
                    self.name
                )))))
            }
        }
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        self.log.0.borrow_mut().push(format!("{}:idle", self.name));
        Ok(self
            .idle_output
            .take()
            .map(|s| Batch::one(Bytes::from_static(s.as_bytes()))))
    }

    fn abort(&mut self, reason: &StreamError) {
        self.log
            .0
            .borrow_mut()
            .push(format!("{}:abort:{reason}", self.name));
    }
}

fn rec(name: &'static str, log: &Log) -> Recorder {
    Recorder {
        name,
        log: log.clone(),
        idle_output: None,
    }
}

fn poll<S: Source + Unpin>(s: &mut S) -> Poll<Option<BatchResult>> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(s).poll_next_batch(&mut cx)
}

fn text(batch: &Batch) -> String {
    batch
        .chunks()
        .iter()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect()
}

#[test]
fn pull_001_building_a_pipeline_polls_and_calls_nothing() {
    let log = Log::default();
    let (src, polls, _) = Scripted::new(vec![data("a")]);
    let p = pull(src, rec("t1", &log).then(rec("t2", &log)));
    assert_eq!(polls.load(Ordering::SeqCst), 0);
    assert!(log.0.borrow().is_empty());
    drop(p);
}

#[test]
fn pull_002_one_consumer_poll_pulls_one_source_batch() {
    let (src, polls, _) = Scripted::new(vec![data("a"), data("b"), data("c")]);
    let mut p = pull(src, ());
    for k in 1..=3 {
        assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
        assert_eq!(polls.load(Ordering::SeqCst), k);
    }
}

#[test]
fn pull_005_transforms_run_in_order() {
    let log = Log::default();
    let (src, _, _) = Scripted::new(vec![data("x")]);
    let mut p = pull(src, rec("1", &log).then(rec("2", &log)));
    let Poll::Ready(Some(Ok(b))) = poll(&mut p) else {
        panic!("no batch")
    };
    assert_eq!(text(&b), "x12");
}

#[test]
fn pull_031_every_transform_gets_exactly_one_flush_in_order() {
    let log = Log::default();
    let (src, _, _) = Scripted::new(vec![data("x")]);
    let mut p = pull(
        src,
        rec("1", &log).then(rec("2", &log)).then(rec("3", &log)),
    );
    let mut out = String::new();
    while let Poll::Ready(Some(item)) = poll(&mut p) {
        out += &text(&item.expect("ok"));
    }
    // Stage 1's flush output passes through 2 and 3; stage 2's through 3.
    assert_eq!(out, "x123<1-end>23<2-end>3<3-end>");
    let flushes = log
        .0
        .borrow()
        .iter()
        .filter(|e| e.ends_with(":flush"))
        .count();
    assert_eq!(flushes, 3);
    assert!(
        matches!(poll(&mut p), Poll::Ready(None)),
        "CORE-007: fused after the end"
    );
}

#[test]
fn pull_032_early_stop_aborts_instead_of_flushing() {
    let log = Log::default();
    let (src, _, drops) = Scripted::new(vec![data("a"), data("b")]);
    let mut p = pull(src, rec("1", &log).then(rec("2", &log)));
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    drop(p);
    let events = log.0.borrow().clone();
    assert!(!events.iter().any(|e| e.ends_with(":flush")), "{events:?}");
    assert_eq!(
        events
            .iter()
            .filter(|e| e.contains(":abort:aborted"))
            .count(),
        2,
        "{events:?}"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "PULL-041: the source is dropped"
    );
}

#[test]
fn pull_040_source_error_reaches_consumer_unchanged_and_is_sticky() {
    let log = Log::default();
    let err = StreamError::failed("origin reset");
    let (src, _, drops) = Scripted::new(vec![data("a"), Poll::Ready(Some(Err(err.clone())))]);
    let mut p = pull(src, rec("1", &log));
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    let Poll::Ready(Some(Err(got))) = poll(&mut p) else {
        panic!("no error")
    };
    let (Some(a), Some(b)) = (got.reason(), err.reason()) else {
        panic!("no reason")
    };
    assert!(
        weir_stream::Reason::ptr_eq(a, b),
        "CORE-006: same error identity"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the source is dropped on error"
    );
    assert!(log.0.borrow().iter().any(|e| e.starts_with("1:abort")));
    let Poll::Ready(Some(Err(again))) = poll(&mut p) else {
        panic!("error not sticky")
    };
    assert!(weir_stream::Reason::ptr_eq(
        again.reason().expect("reason"),
        b
    ));
}

#[test]
fn transform_error_aborts_every_stage_and_drops_the_source() {
    let log = Log::default();
    let (src, _, drops) = Scripted::new(vec![data("a")]);
    let failing = transform_fn(|_| Err(StreamError::failed("stage 2 broke")));
    let mut p = pull(src, rec("1", &log).then(failing).then(rec("3", &log)));
    let Poll::Ready(Some(Err(e))) = poll(&mut p) else {
        panic!("no error")
    };
    assert_eq!(e.to_string(), "stage 2 broke");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let events = log.0.borrow().clone();
    assert!(
        events.contains(&"1:abort:stage 2 broke".to_owned()),
        "{events:?}"
    );
    assert!(
        events.contains(&"3:abort:stage 2 broke".to_owned()),
        "{events:?}"
    );
}

#[test]
fn core_001_pipelines_never_yield_an_empty_batch() {
    let (src, _, _) = Scripted::new(vec![data("a"), data("b"), data("c"), data("d")]);
    let mut n = 0;
    let drop_b = transform_fn(move |b: Option<Batch>| {
        n += 1;
        Ok(match b {
            // The second batch becomes an empty batch, the third `None`.
            Some(_) if n == 2 => Some(Batch::new()),
            Some(_) if n == 3 => None,
            other => other,
        })
    });
    let mut p = pull(src, drop_b);
    let mut seen = Vec::new();
    while let Poll::Ready(Some(item)) = poll(&mut p) {
        let b = item.expect("ok");
        assert!(!b.is_empty());
        seen.push(text(&b));
    }
    assert_eq!(seen, ["a", "d"]);
}

#[test]
fn idle_flush_is_asked_once_per_idle_period() {
    let log = Log::default();
    let (src, _, _) = Scripted::new(vec![
        data("a"),
        Poll::Pending,
        Poll::Pending,
        data("b"),
        Poll::Pending,
    ]);
    let mut stage = rec("c", &log);
    stage.idle_output = Some("held");
    let mut p = pull(src, stage);
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    let Poll::Ready(Some(Ok(b))) = poll(&mut p) else {
        panic!("no idle output")
    };
    assert_eq!(text(&b), "held");
    assert!(
        poll(&mut p).is_pending(),
        "idle asked again before new input"
    );
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    assert!(poll(&mut p).is_pending());
    let idles = log
        .0
        .borrow()
        .iter()
        .filter(|e| e.ends_with(":idle"))
        .count();
    assert_eq!(idles, 2, "{:?}", log.0.borrow());
}

#[test]
fn core_002_identity_pipeline_hands_on_the_same_buffers() {
    let chunk = Bytes::from(vec![7u8; 4096]);
    let ptr = chunk.as_ptr();
    let mut p = pull(from_iter([chunk]), ());
    let Poll::Ready(Some(Ok(b))) = poll(&mut p) else {
        panic!("no batch")
    };
    assert_eq!(b.chunks()[0].as_ptr(), ptr);
}

#[test]
fn core_004_in_memory_source_batches_at_most_128_chunks() {
    let chunks: Vec<Bytes> = (0..300).map(|_| Bytes::from_static(b"x")).collect();
    let mut p = pull(from_iter(chunks), ());
    let mut sizes = Vec::new();
    while let Poll::Ready(Some(b)) = poll(&mut p) {
        sizes.push(b.expect("ok").len());
    }
    assert_eq!(sizes, [128, 128, 44]);
}

#[tokio::test]
async fn body_adapters_round_trip_data_and_trailers() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-sum", "42".parse().expect("value"));
    let frames: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> = vec![
        Ok(http_body::Frame::data(Bytes::from_static(b"hello "))),
        Ok(http_body::Frame::data(Bytes::new())),
        Ok(http_body::Frame::data(Bytes::from_static(b"world"))),
        Ok(http_body::Frame::trailers(trailers)),
    ];
    let body = http_body_util::StreamBody::new(futures_util_stream(frames));
    let out = SourceBody::new(pull(HttpBodySource::new(body), ()));
    let collected = out.collect().await.expect("body");
    assert_eq!(
        collected.trailers().map(|t| t["x-sum"].clone()),
        Some("42".parse().expect("v"))
    );
    assert_eq!(&collected.to_bytes()[..], b"hello world");
}

#[tokio::test]
async fn source_body_turns_a_source_error_into_a_body_error() {
    let (src, _, _) = Scripted::new(vec![
        data("a"),
        Poll::Ready(Some(Err(StreamError::failed("boom")))),
    ]);
    let mut body = SourceBody::new(pull(src, ()));
    let first = body.frame().await.expect("frame").expect("data");
    assert!(first.is_data());
    let err = body.frame().await.expect("frame").expect_err("error");
    assert_eq!(err.to_string(), "boom");
    assert!(body.is_end_stream());
}

#[tokio::test]
async fn next_batch_is_the_async_sugar_over_poll() {
    let mut p = pull(from_iter(["a", "b"]), ());
    let b = p.next_batch().await.expect("batch").expect("ok");
    assert_eq!(text(&b), "ab");
    assert!(p.next_batch().await.is_none());
}

/// A tiny `Stream` over a vector, so the test needs no futures crate.
fn futures_util_stream<T: Unpin>(items: Vec<T>) -> VecStream<T> {
    VecStream(items.into())
}

struct VecStream<T>(std::collections::VecDeque<T>);

impl<T: Unpin> futures_core::Stream for VecStream<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<T>> {
        Poll::Ready(self.0.pop_front())
    }
}
