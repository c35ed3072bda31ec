//! Fast paths equal slow paths (section 10 of
//! `shared/spec/streams-semantics.md`): one suite over the fused chain and a
//! boxed `dyn` chain (FAST-001), flush output at the end (FAST-002), error
//! identity (FAST-003), and integrity under backpressure (FAST-004).

mod pull_support;

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use pull_support::*;
use tokio::sync::mpsc;
use weir_stream::adapt::into_bytes_stream;
use weir_stream::body::SourceBody;
use weir_stream::stateful::{AsyncTransform, async_fn};
use weir_stream::sync_pull::pull_sync_batches;
use weir_stream::{
    Batch, BatchResult, Source, SourceExt, StreamError, Transform, TransformExt, pull, transform_fn,
};

type BoxFuture = Pin<Box<dyn Future<Output = Result<Option<Batch>, StreamError>> + Send>>;

/// A way to build a chain: fused (monomorphised) or boxed (`dyn` at every stage).
trait Flavor {
    /// `src → a → b`.
    fn chain<A, B>(src: Scripted, a: A, b: B) -> impl Source + Send
    where
        A: Transform + Send + 'static,
        B: Transform + Send + 'static;

    /// `src → a → async f → b`.
    fn mixed<A, F, B>(src: Scripted, a: A, f: F, b: B) -> impl Source + Send
    where
        A: Transform + Send + 'static,
        F: AsyncTransform + Send + 'static,
        F::Future: Send + 'static,
        B: Transform + Send + 'static;
}

/// Our own types all the way: one monomorphised value, no box.
struct Fused;

impl Flavor for Fused {
    fn chain<A, B>(src: Scripted, a: A, b: B) -> impl Source + Send
    where
        A: Transform + Send + 'static,
        B: Transform + Send + 'static,
    {
        pull(src, a.then(b))
    }

    fn mixed<A, F, B>(src: Scripted, a: A, f: F, b: B) -> impl Source + Send
    where
        A: Transform + Send + 'static,
        F: AsyncTransform + Send + 'static,
        F::Future: Send + 'static,
        B: Transform + Send + 'static,
    {
        src.then(a).then_async(f).then(b)
    }
}

/// The slow twin: every stage a boxed trait object, every future boxed.
struct Boxed;

type DynSource = Pin<Box<dyn Source + Send>>;
type DynTransform = Box<dyn Transform + Send>;

impl Flavor for Boxed {
    fn chain<A, B>(src: Scripted, a: A, b: B) -> impl Source + Send
    where
        A: Transform + Send + 'static,
        B: Transform + Send + 'static,
    {
        let s: DynSource = Box::pin(src);
        let s: DynSource = Box::pin(pull(s, Box::new(a) as DynTransform));
        let s: DynSource = Box::pin(pull(s, Box::new(b) as DynTransform));
        s
    }

    fn mixed<A, F, B>(src: Scripted, a: A, mut f: F, b: B) -> impl Source + Send
    where
        A: Transform + Send + 'static,
        F: AsyncTransform + Send + 'static,
        F::Future: Send + 'static,
        B: Transform + Send + 'static,
    {
        let s: DynSource = Box::pin(src);
        let s: DynSource = Box::pin(pull(s, Box::new(a) as DynTransform));
        let boxed =
            async_fn(move |input: Option<Batch>| -> BoxFuture { Box::pin(f.transform(input)) });
        let s: DynSource = Box::pin(s.then_async(boxed));
        let s: DynSource = Box::pin(pull(s, Box::new(b) as DynTransform));
        s
    }
}

fn poll_pinned<S: Source + ?Sized>(s: Pin<&mut S>) -> Poll<Option<BatchResult>> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    s.poll_next_batch(&mut cx)
}

fn drain_pinned<S: Source + ?Sized>(mut s: Pin<&mut S>) -> (Vec<Batch>, Option<StreamError>) {
    let mut out = Vec::new();
    loop {
        match poll_pinned(s.as_mut()) {
            Poll::Ready(Some(Ok(b))) => out.push(b),
            Poll::Ready(Some(Err(e))) => return (out, Some(e)),
            Poll::Ready(None) | Poll::Pending => return (out, None),
        }
    }
}

async fn collect_pinned<S: Source + ?Sized>(
    mut s: Pin<&mut S>,
) -> (Vec<String>, Option<StreamError>) {
    let mut out = Vec::new();
    loop {
        let item = tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| s.as_mut().poll_next_batch(cx)),
        )
        .await
        .expect("bounded");
        match item {
            Some(Ok(b)) => out.push(text(&b)),
            Some(Err(e)) => return (out, Some(e)),
            None => return (out, None),
        }
    }
}

fn texts(batches: &[Batch]) -> Vec<String> {
    batches.iter().map(text).collect()
}

/// Splits every chunk into one chunk per byte: one input chunk, N outputs.
fn explode() -> impl Transform + Send + 'static {
    transform_fn(|b: Option<Batch>| {
        Ok(b.map(|b| {
            b.into_iter()
                .flat_map(|c| (0..c.len()).map(move |i| c.slice(i..i + 1)))
                .collect()
        }))
    })
}

fn suite_identity<F: Flavor>() {
    let chunk = Bytes::from(vec![5u8; 1000]);
    let ptr = chunk.as_ptr();
    let (src, _) = Scripted::new(vec![Poll::Ready(Some(Ok(Batch::one(chunk)))), data("b")]);
    let mut s = pin!(F::chain(src, (), ()));
    let (out, err) = drain_pinned(s.as_mut());
    assert!(err.is_none());
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].chunks()[0].as_ptr(), ptr, "same buffer (CORE-002)");
    assert_eq!(text(&out[1]), "b");
}

fn suite_modifying<F: Flavor>() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("x"), data("y")]);
    let mut s = pin!(F::chain(src, rec("1", &log), rec("2", &log)));
    let (out, _) = drain_pinned(s.as_mut());
    assert_eq!(texts(&out), ["x12", "y12", "<1-end>2<2-end>"]);
}

fn suite_one_to_many<F: Flavor>() {
    let (src, _) = Scripted::new(vec![data("abc")]);
    let mut s = pin!(F::chain(src, explode(), ()));
    let (out, _) = drain_pinned(s.as_mut());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].len(), 3, "one chunk became three");
    assert_eq!(text(&out[0]), "abc");
}

fn suite_flush_output<F: Flavor>() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("x")]);
    let mut s = pin!(F::chain(
        src.knowing_its_end(),
        rec("1", &log),
        rec("2", &log)
    ));
    let (out, _) = drain_pinned(s.as_mut());
    assert_eq!(texts(&out).concat(), "x12<1-end>2<2-end>");
    assert_eq!(log.count(":flush"), 2);
    assert!(s.is_end_stream());
}

fn suite_error<F: Flavor>() {
    let log = Log::default();
    let err = StreamError::failed("source died");
    let (src, counters) = Scripted::new(vec![data("x"), fail(&err)]);
    let mut s = pin!(F::chain(src, rec("1", &log), rec("2", &log)));
    let (out, got) = drain_pinned(s.as_mut());
    assert_eq!(texts(&out), ["x12"]);
    assert!(same_reason(&got.expect("error"), &err), "FAST-003");
    assert_eq!(counters.drops(), 1);
    assert_eq!(log.count(":abort:source died"), 2, "{:?}", log.events());
    let Poll::Ready(Some(Err(again))) = poll_pinned(s.as_mut()) else {
        panic!("not sticky")
    };
    assert!(same_reason(&again, &err));
}

fn suite_cancel<F: Flavor>() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("x"), data("y")]);
    {
        let mut s = pin!(F::chain(src, rec("1", &log), rec("2", &log)));
        assert!(matches!(poll_pinned(s.as_mut()), Poll::Ready(Some(Ok(_)))));
    }
    assert_eq!(counters.drops(), 1);
    assert_eq!(log.count(":flush"), 0);
    assert_eq!(
        log.count_containing(":abort:aborted"),
        2,
        "{:?}",
        log.events()
    );
}

async fn suite_mixed<F: Flavor>() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("x"), pending(), data("y")]);
    let slow = async_fn(|b: Option<Batch>| async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(Some(b.unwrap_or_else(|| Batch::one("<async-end>"))))
    });
    let mut s = pin!(F::mixed(src.waking(), rec("1", &log), slow, rec("2", &log)));
    let (out, err) = collect_pinned(s.as_mut()).await;
    assert!(err.is_none());
    assert_eq!(out.concat(), "x12y12<1-end>2<async-end>2<2-end>", "{out:?}");
    assert_eq!(log.count(":flush"), 2);
}

fn suite_backpressure<F: Flavor>() {
    let (src, counters) = Scripted::new(vec![data("a"), data("b"), data("c"), data("d")]);
    let mut s = pin!(F::chain(src, (), ()));
    for k in 1..=3 {
        assert!(matches!(poll_pinned(s.as_mut()), Poll::Ready(Some(Ok(_)))));
        assert_eq!(counters.polls(), k, "no read-ahead (PULL-002)");
    }
}

macro_rules! fast_001_suite {
    ($module:ident, $flavor:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn fast_001_identity() {
                suite_identity::<$flavor>();
            }

            #[test]
            fn fast_001_modifying() {
                suite_modifying::<$flavor>();
            }

            #[test]
            fn fast_001_one_to_many() {
                suite_one_to_many::<$flavor>();
            }

            #[test]
            fn fast_001_flush_output() {
                suite_flush_output::<$flavor>();
            }

            #[test]
            fn fast_001_error() {
                suite_error::<$flavor>();
            }

            #[test]
            fn fast_001_cancel() {
                suite_cancel::<$flavor>();
            }

            #[tokio::test]
            async fn fast_001_mixed_sync_async() {
                suite_mixed::<$flavor>().await;
            }

            #[test]
            fn fast_001_backpressure() {
                suite_backpressure::<$flavor>();
            }
        }
    };
}

fast_001_suite!(fused, Fused);
fast_001_suite!(boxed, Boxed);

/// A source fed through a bounded channel by another task.
struct ChannelSource(mpsc::Receiver<Bytes>);

impl Source for ChannelSource {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Batch::one(c))))
    }
}

/// A channel source whose producer sends `items`, waits, then closes.
fn delayed_close(items: Vec<&'static str>, delay: Duration) -> ChannelSource {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        for item in items {
            if tx.send(Bytes::from_static(item.as_bytes())).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(delay).await;
    });
    ChannelSource(rx)
}

/// Emits three chunks on flush.
fn flush_three() -> impl Transform + Send + 'static {
    transform_fn(|b: Option<Batch>| {
        Ok(Some(b.unwrap_or_else(|| {
            Batch::from(vec![
                Bytes::from_static(b"x"),
                Bytes::from_static(b"y"),
                Bytes::from_static(b"z"),
            ])
        })))
    })
}

#[tokio::test]
async fn fast_002_flush_output_is_not_lost_when_the_end_comes_late_on_any_path() {
    let delay = Duration::from_millis(5);
    let expect = "abxyz";

    let mut fused = pin!(delayed_close(vec!["a", "b"], delay).then(flush_three()));
    assert_eq!(
        collect_pinned(fused.as_mut()).await.0.concat(),
        expect,
        "fused"
    );

    let boxed: DynSource = Box::pin(delayed_close(vec!["a", "b"], delay));
    let mut boxed: DynSource = Box::pin(pull(boxed, Box::new(flush_three()) as DynTransform));
    assert_eq!(
        collect_pinned(boxed.as_mut()).await.0.concat(),
        expect,
        "boxed"
    );

    let mut stateful = pin!(
        delayed_close(vec!["a", "b"], delay)
            .then(flush_three())
            .stateful(Passthrough)
    );
    assert_eq!(
        collect_pinned(stateful.as_mut()).await.0.concat(),
        expect,
        "stateful"
    );

    let mut in_async = pin!(
        delayed_close(vec!["a", "b"], delay)
            .then_async(async_fn(|b: Option<Batch>| async move { Ok(b) }))
            .then(flush_three())
    );
    assert_eq!(
        collect_pinned(in_async.as_mut()).await.0.concat(),
        expect,
        "async"
    );

    let body = SourceBody::new(delayed_close(vec!["a", "b"], delay).then(flush_three()));
    let bytes = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("bounded")
        .expect("body")
        .to_bytes();
    assert_eq!(&bytes[..], expect.as_bytes(), "SourceBody");

    let mut stream = pin!(into_bytes_stream(
        delayed_close(vec!["a", "b"], delay).then(flush_three())
    ));
    let mut got = Vec::new();
    while let Some(chunk) = tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(stream.as_mut(), cx)),
    )
    .await
    .expect("bounded")
    {
        got.extend_from_slice(&chunk.expect("ok"));
    }
    assert_eq!(got, expect.as_bytes(), "bytes stream");

    let sync: String = pull_sync_batches([Ok(Batch::one("a")), Ok(Batch::one("b"))], flush_three())
        .map(|b| text(&b.expect("ok")))
        .collect();
    assert_eq!(sync, expect, "sync");
}

#[tokio::test]
async fn fast_003_fused_and_layered_chains_keep_error_identity() {
    let err = StreamError::failed("origin reset");
    let run = |err: &StreamError| Scripted::new(vec![data("a"), fail(err)]).0;

    let mut fused = pull(run(&err), ().then(()).then(()).then(()));
    let (_, got) = drain(&mut fused);
    assert!(same_reason(&got.expect("error"), &err), "fused");

    let mut layered = pull(run(&err), ()).stateful(Passthrough).then(());
    let (_, got) = drain(&mut layered);
    assert!(same_reason(&got.expect("error"), &err), "stateful");

    let mut in_async = pin!(
        run(&err)
            .then_async(async_fn(|b: Option<Batch>| async move { Ok(b) }))
            .then(())
    );
    let (_, got) = collect_pinned(in_async.as_mut()).await;
    assert!(same_reason(&got.expect("error"), &err), "async");

    let mut body = SourceBody::new(pull(run(&err), ().then(())));
    let _ = body.frame().await;
    let got = body.frame().await.expect("frame").expect_err("error");
    assert!(same_reason(&got, &err), "SourceBody");

    // An error raised by a stage keeps its identity too.
    let raised = StreamError::failed("stage broke");
    let thrown = raised.clone();
    let mut p = pull(
        Scripted::new(vec![data("a")]).0,
        ().then(transform_fn(move |_| Err(thrown.clone()))).then(()),
    );
    let (_, got) = drain(&mut p);
    assert!(
        same_reason(&got.expect("error"), &raised),
        "raised in a stage"
    );
}

/// Runs 100 items through `t1 → async t2 → t3` into a consumer that sleeps
/// now and then; returns what it received.
async fn hundred_through_three_stages(tag: &'static str) -> Vec<String> {
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    let producer = tokio::spawn(async move {
        for i in 0..100 {
            let item = Bytes::from(format!("{tag}{i:03}"));
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    let upper = transform_fn(|b: Option<Batch>| {
        Ok(b.map(|b| {
            b.into_iter()
                .map(|c| Bytes::from(c.to_ascii_uppercase()))
                .collect()
        }))
    });
    let hop = async_fn(|b: Option<Batch>| async move {
        tokio::task::yield_now().await;
        Ok(b)
    });
    let mark = transform_fn(|b: Option<Batch>| {
        Ok(b.map(|b| {
            b.into_iter()
                .map(|c| Bytes::from([&c[..], b";"].concat()))
                .collect()
        }))
    });
    let mut chain = pin!(ChannelSource(rx).then(upper).then_async(hop).then(mark));
    let mut out = Vec::new();
    while let Some(batch) = tokio::time::timeout(
        Duration::from_secs(10),
        std::future::poll_fn(|cx| chain.as_mut().poll_next_batch(cx)),
    )
    .await
    .expect("bounded")
    {
        for chunk in batch.expect("ok") {
            out.push(String::from_utf8_lossy(&chunk).into_owned());
        }
        if out.len() % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    producer.await.expect("producer");
    out
}

fn expected(tag: &str) -> Vec<String> {
    (0..100)
        .map(|i| format!("{tag}{i:03};").to_ascii_uppercase())
        .collect()
}

#[tokio::test]
async fn fast_004_a_hundred_items_arrive_complete_and_in_order_into_a_slow_consumer() {
    assert_eq!(hundred_through_three_stages("item").await, expected("item"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_004_concurrent_pipelines_do_not_interfere() {
    let tags = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let runs: Vec<_> = tags
        .iter()
        .map(|&tag| tokio::spawn(hundred_through_three_stages(tag)))
        .collect();
    for (run, tag) in runs.into_iter().zip(tags) {
        assert_eq!(run.await.expect("task"), expected(tag), "pipeline {tag}");
    }
}
