//! Stateful and async layers of a pull chain (PULL-020, PULL-030..033), and
//! how the pipeline rules carry through them.

mod pull_support;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use pull_support::*;
use weir_stream::stateful::{StatefulTransform, Upstream, async_fn};
use weir_stream::{
    Batch, BatchResult, Source, SourceExt, StreamError, TransformExt, from_iter, pull,
};

#[test]
fn pull_030_a_stateful_transform_yields_one_batch_per_item_probe() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a"), data("b")]);
    let mut p = src.stateful(per_item("s", &log));
    let (out, err) = drain(&mut p);
    assert!(err.is_none());
    // a, b, END → three batches.
    assert_eq!(out, ["as", "bs", "<s-end>"]);
    assert_eq!(log.count(":flush"), 1);
    assert!(p.is_end_stream());
}

/// Drives its own iteration: holds the current input and emits one byte
/// per output batch, so one input yields many outputs.
#[derive(Default)]
struct Spread {
    held: Bytes,
}

impl StatefulTransform for Spread {
    fn poll_transform<S: Source>(
        &mut self,
        cx: &mut Context<'_>,
        input: &mut Upstream<'_, S>,
    ) -> Poll<Option<BatchResult>> {
        loop {
            if !self.held.is_empty() {
                return Poll::Ready(Some(Ok(Batch::one(self.held.split_to(1)))));
            }
            match ready!(input.poll_next(cx)) {
                Some(Some(batch)) => {
                    self.held = batch
                        .into_iter()
                        .flat_map(|c| c.to_vec())
                        .collect::<Vec<u8>>()
                        .into()
                }
                Some(None) | None => return Poll::Ready(None),
            }
        }
    }
}

#[test]
fn pull_030_a_stateful_transform_may_emit_several_batches_per_input() {
    let (src, counters) = Scripted::new(vec![data("abc"), data("d")]);
    let mut p = src.stateful(Spread::default());
    assert_eq!(text(&expect_batch(&mut p)), "a");
    assert_eq!(text(&expect_batch(&mut p)), "b");
    assert_eq!(counters.polls(), 1, "pulls only when it needs input");
    let (rest, _) = drain(&mut p);
    assert_eq!(rest, ["c", "d"]);
}

#[test]
fn pull_030_a_stateful_transform_that_stops_early_aborts_the_layers_upstream_only() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a"), data("b"), data("c")]);
    let t = rec("t", &log);
    let tokens = t.tokens.clone();
    let mut p = pull(src, t).stateful(TakeOne::default());
    let (out, err) = drain(&mut p);
    assert!(err.is_none());
    assert_eq!(out, ["at"]);
    assert!(p.is_end_stream());
    assert_eq!(counters.drops(), 1, "the upstream is released at once");
    assert_eq!(
        log.count_containing("t:abort:aborted"),
        1,
        "{:?}",
        log.events()
    );
    assert_eq!(log.count(":flush"), 0);
    assert!(
        !tokens.lock().expect("tokens")[0].is_cancelled(),
        "a stage ending early is not a failure of the pipeline"
    );
}

/// Yields the first batch, then ends.
#[derive(Default)]
struct TakeOne {
    done: bool,
}

impl StatefulTransform for TakeOne {
    fn poll_transform<S: Source>(
        &mut self,
        cx: &mut Context<'_>,
        input: &mut Upstream<'_, S>,
    ) -> Poll<Option<BatchResult>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = ready!(input.poll_next(cx));
        self.done = true;
        Poll::Ready(item.flatten().map(Ok))
    }
}

#[test]
fn pull_031_stateless_and_stateful_flush_outputs_all_arrive_in_order() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("x")]);
    let mut p = pull(src, rec("1", &log).then(rec("2", &log))).stateful(per_item("s", &log));
    let (out, err) = drain(&mut p);
    assert!(err.is_none());
    assert_eq!(out.concat(), "x12s<1-end>2s<2-end>s<s-end>");
    assert_eq!(log.count(":flush"), 3);
}

#[test]
fn pull_033_each_layer_wraps_its_upstream_and_runs_only_when_pulled() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a")]);
    // s4(t3(s2(t1(src))))
    let mut p = src
        .then(rec("t1", &log))
        .stateful(per_item("s2", &log))
        .then(rec("t3", &log))
        .stateful(per_item("s4", &log));
    assert!(log.events().is_empty());
    let first = expect_batch(&mut p);
    assert_eq!(text(&first), "at1s2t3s4");
    assert_eq!(
        log.events(),
        [
            // Each layer starts on its first pull, outside in; the data
            // then runs inside out.
            "s4:start", "s4:poll", "t3:start", "s2:start", "s2:poll", "t1:start", "t1:batch",
            "s2:item", "t3:batch", "s4:item",
        ]
    );
    assert_eq!(counters.polls(), 1);
}

#[tokio::test]
async fn pull_020_an_async_transform_is_awaited_before_its_output_moves_on() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a"), data("b")]);
    let slow = {
        let log = log.clone();
        async_fn(move |b: Option<Batch>| {
            let log = log.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if let Some(b) = &b {
                    log.push(format!("slow:done:{}", text(b)));
                }
                Ok(b)
            }
        })
    };
    let mut p = Box::pin(src.then_async(slow).then(rec("next", &log)));
    let mut out = Vec::new();
    while let Some(b) = tokio::time::timeout(Duration::from_secs(5), p.next_batch())
        .await
        .expect("bounded")
    {
        out.push(text(&b.expect("ok")));
    }
    assert_eq!(out, ["anext", "bnext", "<next-end>"]);
    let events: Vec<String> = log
        .events()
        .into_iter()
        .filter(|e| e.starts_with("slow:done") || e == "next:batch")
        .collect();
    assert_eq!(
        events,
        ["slow:done:a", "next:batch", "slow:done:b", "next:batch"],
        "the next stage waits for each future"
    );
}

#[tokio::test]
async fn pull_020_the_async_flush_is_awaited_and_its_output_arrives_before_the_end() {
    let (src, _) = Scripted::new(vec![data("a")]);
    let log = Log::default();
    let mut p = Box::pin(
        src.then_async(async_fn(|b: Option<Batch>| async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            Ok(Some(b.unwrap_or_else(|| Batch::one("<async-end>"))))
        }))
        .then(rec("t", &log)),
    );
    let mut out = Vec::new();
    while let Some(b) = tokio::time::timeout(Duration::from_secs(5), p.next_batch())
        .await
        .expect("bounded")
    {
        out.push(text(&b.expect("ok")));
    }
    assert_eq!(out.concat(), "at<async-end>t<t-end>");
    assert_eq!(log.count(":flush"), 1);
}

#[test]
fn pull_040_an_upstream_error_passes_a_stateful_layer_unchanged() {
    let log = Log::default();
    let err = StreamError::failed("upstream broke");
    let (src, counters) = Scripted::new(vec![data("a"), fail(&err)]);
    let mut p = pull(src, rec("t", &log)).stateful(per_item("s", &log));
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    let Poll::Ready(Some(Err(got))) = poll(&mut p) else {
        panic!("no error")
    };
    assert!(same_reason(&got, &err));
    assert_eq!(counters.drops(), 1);
    assert_eq!(log.count(":abort:upstream broke"), 2, "{:?}", log.events());
    assert_eq!(log.count(":flush"), 0);
}

/// Fails on its second item.
struct FailSecond(usize);

impl StatefulTransform for FailSecond {
    fn poll_transform<S: Source>(
        &mut self,
        cx: &mut Context<'_>,
        input: &mut Upstream<'_, S>,
    ) -> Poll<Option<BatchResult>> {
        let item = ready!(input.poll_next(cx));
        self.0 += 1;
        if self.0 == 2 {
            return Poll::Ready(Some(Err(StreamError::failed("stateful broke"))));
        }
        Poll::Ready(item.flatten().map(Ok))
    }
}

#[test]
fn pull_040_a_stateful_error_aborts_both_sides_and_drops_the_source() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a"), data("b"), data("c")]);
    let mut p = pull(src, rec("up", &log))
        .stateful(FailSecond(0))
        .then(rec("down", &log));
    let (out, err) = drain(&mut p);
    assert_eq!(out, ["aupdown"]);
    assert_eq!(err.expect("error").to_string(), "stateful broke");
    assert_eq!(counters.drops(), 1);
    assert_eq!(log.count(":abort:stateful broke"), 2, "{:?}", log.events());
}

#[tokio::test]
async fn pull_040_an_async_error_reaches_the_consumer_unchanged() {
    let err = StreamError::failed("lookup failed");
    let thrown = err.clone();
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a"), data("b")]);
    let mut p = Box::pin(pull(src, rec("up", &log)).then_async(async_fn(
        move |b: Option<Batch>| {
            let thrown = thrown.clone();
            async move { if b.is_some() { Err(thrown) } else { Ok(None) } }
        },
    )));
    let got = tokio::time::timeout(Duration::from_secs(5), p.next_batch())
        .await
        .expect("bounded")
        .expect("item")
        .expect_err("error");
    assert!(same_reason(&got, &err));
    assert_eq!(counters.drops(), 1);
    assert_eq!(log.count(":abort:lookup failed"), 1);
}

#[tokio::test]
async fn pull_041_dropping_an_async_stage_mid_future_drops_the_future_and_aborts() {
    let dropped = Arc::new(AtomicBool::new(false));
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a")]);
    let flag = dropped.clone();
    let mut p = Box::pin(pull(src, rec("up", &log)).then_async(async_fn(
        move |b: Option<Batch>| {
            let guard = Guard(flag.clone());
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Ok(b)
            }
        },
    )));
    let waited = tokio::time::timeout(Duration::from_millis(20), p.next_batch()).await;
    assert!(waited.is_err(), "the future never completes");
    drop(p);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the future in flight is dropped"
    );
    assert_eq!(counters.drops(), 1);
    assert_eq!(
        log.count_containing("up:abort:aborted"),
        1,
        "{:?}",
        log.events()
    );
}

#[test]
fn idle_flush_composes_through_a_stateful_layer() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![
        data("a"),
        pending(),
        pending(),
        pending(),
        data("b"),
        pending(),
        pending(),
    ]);
    let mut inner = rec("in", &log);
    inner.idle_output = Some("held-in");
    let mut outer = rec("out", &log);
    outer.idle_output = Some("held-out");
    let mut p = pull(src, inner).stateful(per_item("s", &log)).then(outer);
    assert_eq!(text(&expect_batch(&mut p)), "ainsout");
    // The source idles: the inner stage's idle output goes through the
    // stateful layer and the outer stage.
    assert_eq!(text(&expect_batch(&mut p)), "held-insout");
    // Still idle: now the outer stage is asked, once.
    assert_eq!(text(&expect_batch(&mut p)), "held-out");
    assert!(
        poll(&mut p).is_pending(),
        "no stage asked twice per idle period"
    );
    assert_eq!(text(&expect_batch(&mut p)), "binsout");
    assert!(poll(&mut p).is_pending());
    assert!(poll(&mut p).is_pending());
    assert_eq!(log.count("in:idle"), 2, "{:?}", log.events());
    assert_eq!(log.count("out:idle"), 2, "{:?}", log.events());
}

#[test]
fn stateful_stage_passes_trailers_after_its_end() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-sum", "1".parse().expect("value"));
    let frames: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> = vec![
        Ok(http_body::Frame::data(Bytes::from_static(b"a"))),
        Ok(http_body::Frame::trailers(trailers)),
    ];
    let body = http_body_util::StreamBody::new(VecStream(frames.into()));
    let log = Log::default();
    let mut p = weir_stream::body::HttpBodySource::new(body).stateful(per_item("s", &log));
    let (out, _) = drain(&mut p);
    assert_eq!(out, ["as", "<s-end>"]);
    let got = Pin::new(&mut p).take_trailers().expect("trailers");
    assert_eq!(got["x-sum"], "1");
}

#[test]
fn chains_mix_any_number_of_layers() {
    let mut p = from_iter(["a", "b"])
        .then(())
        .stateful(TakeOne::default())
        .then(())
        .stateful(TakeOne::default());
    assert_eq!(text(&expect_batch(&mut p)), "ab");
    assert!(matches!(poll(&mut p), Poll::Ready(None)));
}

struct VecStream<T>(std::collections::VecDeque<T>);

impl<T: Unpin> futures_core::Stream for VecStream<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<T>> {
        Poll::Ready(self.0.pop_front())
    }
}

fn expect_batch<S: Source + Unpin>(s: &mut S) -> Batch {
    match poll(s) {
        Poll::Ready(Some(Ok(b))) => b,
        other => panic!("expected a batch, got {other:?}"),
    }
}
