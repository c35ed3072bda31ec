//! Pull pipeline behaviour (section 3 of `shared/spec/streams-semantics.md`),
//! named after the catalogue IDs it pins.

mod pull_support;

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use pull_support::*;
use weir_stream::stateful::async_fn;
use weir_stream::{
    Batch, BatchResult, CancelToken, Chain, Pipeline, Source, SourceExt, StreamError, TransformExt,
    pull, transform_fn,
};

#[test]
fn pull_001_building_a_pipeline_polls_and_calls_nothing() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a")]);
    let p = pull(src, rec("t1", &log).then(rec("t2", &log)))
        .stateful(per_item("s", &log))
        .then_async(async_fn(|b: Option<Batch>| async move { Ok(b) }))
        .then(rec("t3", &log))
        .with_token(CancelToken::new());
    assert_eq!(counters.polls(), 0);
    assert!(log.events().is_empty(), "{:?}", log.events());
    drop(p);
    // Dropped unpolled: each stage is told the stream was never used (an
    // abort), without having been started or flushed.
    assert_eq!(
        log.count_containing(":abort:aborted"),
        4,
        "{:?}",
        log.events()
    );
    assert_eq!(log.events().len(), 4, "{:?}", log.events());
    assert_eq!(counters.drops(), 1);
}

#[test]
fn pull_002_one_consumer_poll_pulls_one_source_batch() {
    let (src, counters) = Scripted::new(vec![data("a"), data("b"), data("c")]);
    let log = Log::default();
    let mut p = pull(src, rec("t", &log)).stateful(per_item("s", &log));
    for k in 1..=3 {
        assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
        assert_eq!(counters.polls(), k, "no read-ahead through the layers");
    }
}

#[test]
fn pull_005_transforms_run_in_order() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("x")]);
    let mut p = pull(src, rec("1", &log).then(rec("2", &log)));
    let Poll::Ready(Some(Ok(b))) = poll(&mut p) else {
        panic!("no batch")
    };
    assert_eq!(text(&b), "x12");
    assert_eq!(log.events(), ["1:start", "2:start", "1:batch", "2:batch"]);
}

#[test]
fn pull_031_every_transform_gets_exactly_one_flush_in_order() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("x")]);
    let mut p = pull(
        src,
        rec("1", &log).then(rec("2", &log)).then(rec("3", &log)),
    );
    let (out, err) = drain(&mut p);
    assert!(err.is_none());
    // Stage 1's flush output passes through 2 and 3; stage 2's through 3.
    assert_eq!(out.concat(), "x123<1-end>23<2-end>3<3-end>");
    assert_eq!(log.count(":flush"), 3);
    assert_eq!(log.count_containing(":abort"), 0);
}

#[test]
fn pull_031_flush_joins_the_last_batch_when_the_source_knows_its_end() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a"), data("b")]);
    let mut p = pull(src.knowing_its_end(), rec("1", &log));
    assert_eq!(text(&expect_batch(&mut p)), "a1");
    let last = expect_batch(&mut p);
    assert_eq!(text(&last), "b1<1-end>");
    assert!(p.is_end_stream(), "end known with the last batch");
    assert!(matches!(poll(&mut p), Poll::Ready(None)));
    assert_eq!(log.count(":flush"), 1);
}

#[test]
fn pull_032_early_stop_aborts_instead_of_flushing() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a"), data("b")]);
    let mut p = pull(src, rec("1", &log).then(rec("2", &log)));
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    drop(p);
    assert_eq!(log.count(":flush"), 0, "{:?}", log.events());
    assert_eq!(
        log.count_containing(":abort:aborted"),
        2,
        "{:?}",
        log.events()
    );
    assert_eq!(counters.drops(), 1, "the source is dropped");
}

#[test]
fn pull_040_source_error_reaches_consumer_unchanged_and_is_sticky() {
    let log = Log::default();
    let err = StreamError::failed("origin reset");
    let (src, counters) = Scripted::new(vec![data("a"), fail(&err)]);
    let t = rec("1", &log);
    let tokens = t.tokens.clone();
    let mut p = pull(src, t);
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    let Poll::Ready(Some(Err(got))) = poll(&mut p) else {
        panic!("no error")
    };
    assert!(same_reason(&got, &err), "CORE-006: same error identity");
    assert_eq!(counters.drops(), 1, "the source is dropped on error");
    assert_eq!(log.count(":abort:origin reset"), 1);
    let token = tokens.lock().expect("tokens")[0].clone();
    let fired = token.reason().expect("the token fired");
    assert!(same_reason(&fired, &err), "the token carries the error");
    let Poll::Ready(Some(Err(again))) = poll(&mut p) else {
        panic!("error not sticky")
    };
    assert!(same_reason(&again, &err));
}

#[test]
fn pull_040_transform_error_aborts_every_stage_fires_the_token_and_drops_the_source() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a")]);
    let failing = transform_fn(|_| Err(StreamError::failed("stage 2 broke")));
    let first = rec("1", &log);
    let tokens = first.tokens.clone();
    let mut p = pull(src, first.then(failing).then(rec("3", &log)));
    let Poll::Ready(Some(Err(e))) = poll(&mut p) else {
        panic!("no error")
    };
    assert_eq!(e.to_string(), "stage 2 broke");
    assert_eq!(counters.drops(), 1);
    let events = log.events();
    assert!(
        events.contains(&"1:abort:stage 2 broke".to_owned()),
        "{events:?}"
    );
    assert!(
        events.contains(&"3:abort:stage 2 broke".to_owned()),
        "{events:?}"
    );
    assert!(tokens.lock().expect("tokens")[0].is_cancelled());
}

#[test]
fn pull_041_early_drop_fires_the_token_aborts_every_layer_and_drops_the_source() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a"), data("b")]);
    let t1 = rec("t1", &log);
    let tokens = t1.tokens.clone();
    let mut p = pull(src, t1)
        .stateful(per_item("s", &log))
        .then(rec("t2", &log));
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    drop(p);
    assert_eq!(counters.drops(), 1);
    let token = tokens.lock().expect("tokens")[0].clone();
    let reason = token.reason().expect("token fired");
    assert!(matches!(reason, StreamError::Aborted(_)));
    assert_eq!(
        log.count_containing(":abort:aborted"),
        3,
        "{:?}",
        log.events()
    );
    assert_eq!(log.count(":flush"), 0);
}

#[test]
fn pull_042_normal_completion_does_not_fire_the_token() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a")]);
    let t = rec("1", &log);
    let tokens = t.tokens.clone();
    let mut p = pull(src, t).stateful(per_item("s", &log));
    let (out, err) = drain(&mut p);
    assert!(err.is_none());
    assert_eq!(out, ["a1s", "<1-end>s", "<s-end>"]);
    drop(p);
    assert!(!tokens.lock().expect("tokens")[0].is_cancelled());
    assert_eq!(log.count_containing(":abort"), 0);
}

#[test]
fn pull_043_token_cancelled_before_the_first_poll_fails_without_calling_any_transform() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a")]);
    let token = CancelToken::new();
    token.cancel("request timed out");
    let mut p = pull(src, rec("1", &log).then(rec("2", &log))).with_token(token.clone());
    let Poll::Ready(Some(Err(e))) = poll(&mut p) else {
        panic!("no error")
    };
    assert!(matches!(e, StreamError::Aborted(_)));
    assert!(same_reason(&e, &token.reason().expect("fired")));
    assert_eq!(counters.polls(), 0);
    assert_eq!(counters.drops(), 1);
    drop(p);
    assert!(log.events().is_empty(), "{:?}", log.events());
}

#[test]
fn pull_043_token_cancelled_mid_stream_fails_the_next_poll_and_aborts_every_transform() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a"), data("b")]);
    let token = CancelToken::new();
    let t1 = rec("t1", &log);
    let tokens = t1.tokens.clone();
    let mut p = pull(src, t1)
        .stateful(per_item("s", &log))
        .then(rec("t2", &log))
        .with_token(token.clone());
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    token.cancel("client went away");
    let Poll::Ready(Some(Err(e))) = poll(&mut p) else {
        panic!("no error")
    };
    assert_eq!(e.to_string(), "aborted: client went away");
    assert_eq!(counters.drops(), 1);
    assert_eq!(
        log.count(":abort:aborted: client went away"),
        3,
        "{:?}",
        log.events()
    );
    let inner = tokens.lock().expect("tokens")[0].clone();
    assert!(
        same_reason(&inner.reason().expect("fired"), &e),
        "the transforms' token fires with the external reason"
    );
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Err(_)))), "sticky");
}

#[test]
fn pull_043_with_token_works_on_any_source() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a"), data("b")]);
    let token = CancelToken::new();
    let mut p = src.stateful(per_item("s", &log)).with_token(token.clone());
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    token.cancel("stop");
    assert!(matches!(
        poll(&mut p),
        Poll::Ready(Some(Err(StreamError::Aborted(_))))
    ));
    assert_eq!(log.count(":abort:aborted: stop"), 1, "{:?}", log.events());
}

#[tokio::test]
async fn pull_043_a_pending_pipeline_wakes_when_its_token_fires() {
    let (src, _) = Scripted::new(vec![pending()]);
    let token = CancelToken::new();
    let mut p = pull(src, ()).with_token(token.clone());
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            token.cancel("deadline");
        })
    };
    let got = tokio::time::timeout(Duration::from_secs(5), p.next_batch())
        .await
        .expect("woken by the token");
    assert!(matches!(got, Some(Err(StreamError::Aborted(_)))));
    canceller.await.expect("canceller");
}

#[test]
fn pull_044_each_transform_starts_once_with_the_same_token() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a")]);
    let (t1, t2, s) = (rec("t1", &log), rec("t2", &log), per_item("s", &log));
    let slots = [t1.tokens.clone(), t2.tokens.clone(), s.tokens.clone()];
    let mut p = pull(src, t1).stateful(s).then(t2);
    let _ = drain(&mut p);
    let tokens: Vec<CancelToken> = slots
        .iter()
        .map(|slot| {
            let slot = slot.lock().expect("tokens");
            assert_eq!(slot.len(), 1, "each stage is started exactly once");
            slot[0].clone()
        })
        .collect();
    // Each stage is its own `&mut self` (its own ctx); the token is shared:
    // firing one fires them all, with one reason.
    tokens[0].cancel("probe");
    let first = tokens[0].reason().expect("fired");
    for t in &tokens[1..] {
        assert!(same_reason(&t.reason().expect("shared"), &first));
    }
}

#[tokio::test]
async fn pull_050_an_idle_source_is_not_busy_polled() {
    let (src, counters) = Scripted::new(vec![pending(); 1000]);
    let mut p = pull(src, ()).with_token(CancelToken::new());
    let waited = tokio::time::timeout(Duration::from_millis(100), p.next_batch()).await;
    assert!(waited.is_err(), "nothing was ready");
    assert!(
        counters.polls() < 5,
        "polled {} times in 100 ms",
        counters.polls()
    );
}

/// An always-ready source of one-chunk batches that never ends.
struct Endless(Bytes);

impl Source for Endless {
    fn poll_next_batch(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        Poll::Ready(Some(Ok(Batch::one(self.0.clone()))))
    }
}

#[tokio::test]
async fn pull_051_an_always_ready_pipeline_lets_a_timer_fire() {
    let fired = Arc::new(AtomicBool::new(false));
    let timer = {
        let fired = fired.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            fired.store(true, Ordering::SeqCst);
        })
    };
    let mut p = pull(Endless(Bytes::from_static(b"x")), ().then(()));
    let mut batches = 0usize;
    // Without a yield, this single-threaded runtime would never run the
    // timer task, and the loop would run out its bound.
    while !fired.load(Ordering::SeqCst) && batches < 2_000_000 {
        p.next_batch().await.expect("endless").expect("ok");
        batches += 1;
    }
    assert!(
        fired.load(Ordering::SeqCst),
        "the timer fired while the pipeline drained"
    );
    timer.await.expect("timer");
}

#[test]
fn idle_flush_is_asked_once_per_idle_period() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a"), pending(), pending(), data("b"), pending()]);
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
    assert_eq!(log.count(":idle"), 2, "{:?}", log.events());
}

#[test]
fn pipeline_then_fuses_new_stages_into_the_same_loop() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("x")]);
    let p: Pipeline<Scripted, Chain<Chain<pull_support::Recorder, pull_support::Recorder>, ()>> =
        pull(src, rec("1", &log)).then(rec("2", &log)).then(());
    let mut p = p;
    let (out, _) = drain(&mut p);
    assert_eq!(out.concat(), "x12<1-end>2<2-end>");
}

#[test]
fn pipeline_then_on_a_running_pipeline_starts_the_new_stage() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a"), data("b")]);
    let mut p = pull(src, rec("1", &log));
    assert_eq!(text(&expect_batch(&mut p)), "a1");
    let mut p = p.then(rec("2", &log));
    let (out, _) = drain(&mut p);
    assert_eq!(out.concat(), "b12<1-end>2<2-end>");
    assert_eq!(log.count(":start"), 2);
    assert_eq!(log.count_containing(":abort"), 0, "{:?}", log.events());
}

#[tokio::test]
async fn an_unpin_source_chain_runs_through_source_ext() {
    // An async block's future is not `Unpin`: the stage holding it is not
    // either, and still runs under a pipeline layer.
    let delay = Arc::new(AtomicUsize::new(0));
    let seen = delay.clone();
    let chain = weir_stream::from_iter(["a", "b"])
        .then_async(async_fn(move |b: Option<Batch>| {
            let seen = seen.clone();
            async move {
                tokio::task::yield_now().await;
                seen.fetch_add(1, Ordering::SeqCst);
                Ok(b)
            }
        }))
        .then(());
    let mut chain = pin!(chain);
    let mut out = Vec::new();
    while let Some(b) = tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| chain.as_mut().poll_next_batch(cx)),
    )
    .await
    .expect("bounded")
    {
        out.push(text(&b.expect("ok")));
    }
    assert_eq!(out, ["ab"]);
    assert_eq!(delay.load(Ordering::SeqCst), 2, "one batch and the flush");
}

fn expect_batch<S: Source + Unpin>(s: &mut S) -> Batch {
    match poll(s) {
        Poll::Ready(Some(Ok(b))) => b,
        other => panic!("expected a batch, got {other:?}"),
    }
}
