//! `pipe_to` and `pipe_to_sync` (catalogue section 4, PIPE-001…005).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use weir_stream::pipe::{IoSink, PipeOptions, Sink, TryWrite, pipe_to, pipe_to_sync};
use weir_stream::{
    Batch, BatchResult, CancelToken, Reason, Source, StreamError, from_iter, pull, transform_fn,
};

/// A source of scripted poll results that counts polls and drops.
struct Scripted {
    items: VecDeque<Poll<Option<BatchResult>>>,
    drops: Arc<AtomicUsize>,
}

impl Scripted {
    fn new(items: Vec<Poll<Option<BatchResult>>>) -> (Self, Arc<AtomicUsize>) {
        let drops = Arc::new(AtomicUsize::new(0));
        (
            Scripted {
                items: items.into(),
                drops: drops.clone(),
            },
            drops,
        )
    }
}

impl Source for Scripted {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        self.items.pop_front().unwrap_or(Poll::Ready(None))
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn ready(chunks: &[&'static str]) -> Poll<Option<BatchResult>> {
    Poll::Ready(Some(Ok(chunks
        .iter()
        .map(|c| Bytes::from_static(c.as_bytes()))
        .collect())))
}

/// How a [`Recorder`] behaves.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `try_write_batch` takes every batch.
    Sync,
    /// `try_write_batch` hands every batch back; `poll_write_batch` is
    /// pending once per batch (waking at once), then takes it.
    Async,
    /// Every write and end waits forever.
    Blocked,
    /// Every write fails with `Closed` (its reader left).
    Closed,
}

/// Everything a [`Recorder`] was asked to do.
#[derive(Default, Debug)]
struct Log {
    /// One entry per batch taken: its chunks.
    writes: Vec<Vec<Bytes>>,
    try_calls: usize,
    poll_calls: usize,
    ends: usize,
    fails: Vec<StreamError>,
}

#[derive(Clone)]
struct Recorder {
    mode: Mode,
    log: Arc<Mutex<Log>>,
    /// For `Mode::Async`: whether this batch was already made to wait once.
    waited: bool,
    /// Can end synchronously.
    sync_end: bool,
}

impl Recorder {
    fn new(mode: Mode) -> Self {
        Recorder {
            mode,
            log: Arc::default(),
            waited: false,
            sync_end: true,
        }
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().expect("log")
    }
}

impl Sink for Recorder {
    fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
        self.log().try_calls += 1;
        if self.mode == Mode::Closed {
            return Err(StreamError::Closed);
        }
        if self.mode == Mode::Sync {
            self.log().writes.push(batch.into_chunks());
            Ok(TryWrite::Written)
        } else {
            Ok(TryWrite::Full(batch))
        }
    }

    fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        self.log().poll_calls += 1;
        match self.mode {
            Mode::Blocked => Poll::Pending,
            _ if !self.waited => {
                self.waited = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            _ => {
                self.waited = false;
                let b = batch.take().expect("a batch to write");
                self.log().writes.push(b.into_chunks());
                Poll::Ready(Ok(()))
            }
        }
    }

    fn try_end(&mut self) -> Option<Result<(), StreamError>> {
        self.sync_end.then(|| {
            self.log().ends += 1;
            Ok(())
        })
    }

    fn poll_end(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        if self.mode == Mode::Blocked {
            return Poll::Pending;
        }
        self.log().ends += 1;
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, reason: StreamError) {
        self.log().fails.push(reason);
    }
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("timed out")
}

fn same(a: &StreamError, b: &StreamError) -> bool {
    match (a.reason(), b.reason()) {
        (Some(a), Some(b)) => Reason::ptr_eq(a, b),
        _ => false,
    }
}

#[tokio::test]
async fn pipe_001_one_write_per_batch_then_end_and_total() {
    let (src, drops) = Scripted::new(vec![ready(&["a", "b", "c"]), ready(&["dd"])]);
    let sink = Recorder::new(Mode::Sync);
    let total = within(pipe_to(src, sink.clone(), PipeOptions::new()))
        .await
        .expect("ok");
    assert_eq!(total, 5);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let log = sink.log();
    assert_eq!(log.writes.len(), 2, "a+b+c in one call");
    assert_eq!(
        log.writes[0],
        ["a", "b", "c"].map(|c: &'static str| Bytes::from_static(c.as_bytes()))
    );
    assert_eq!(log.ends, 1);
    assert!(log.fails.is_empty());
}

#[tokio::test]
async fn pipe_001_prevent_close_leaves_the_sink_open() {
    let mut sink = Recorder::new(Mode::Sync);
    let total = within(pipe_to(
        from_iter(["xy"]),
        &mut sink,
        PipeOptions::new().prevent_close(true),
    ))
    .await
    .expect("ok");
    assert_eq!(total, 2);
    assert_eq!(sink.log().ends, 0);
    assert_eq!(sink.log().writes.len(), 1);
}

#[tokio::test]
async fn pipe_001_source_error_fails_the_sink_and_is_returned() {
    let boom = StreamError::failed("origin reset");
    let (src, drops) = Scripted::new(vec![ready(&["a"]), Poll::Ready(Some(Err(boom.clone())))]);
    let sink = Recorder::new(Mode::Sync);
    let err = within(pipe_to(src, sink.clone(), PipeOptions::new()))
        .await
        .expect_err("source failed");
    assert!(same(&err, &boom), "returned unchanged");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let log = sink.log();
    assert_eq!(log.ends, 0, "no end after an error");
    assert_eq!(log.fails.len(), 1);
    assert!(same(&log.fails[0], &boom), "fail(e) with the same error");
}

#[tokio::test]
async fn pipe_001_sink_error_stops_the_pipe_and_is_returned() {
    let (src, drops) = Scripted::new(vec![ready(&["a"]), ready(&["b"])]);
    let sink = Recorder::new(Mode::Closed);
    let err = within(pipe_to(src, sink.clone(), PipeOptions::new()))
        .await
        .expect_err("sink closed");
    assert!(matches!(err, StreamError::Closed), "{err:?}");
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the source is dropped");
    let log = sink.log();
    assert_eq!(log.try_calls, 1, "no write after the failed one");
    assert_eq!(log.ends, 0);
    assert!(matches!(log.fails[..], [StreamError::Closed]));
}

#[tokio::test]
async fn pipe_001_prevent_fail_leaves_the_sink_as_it_is() {
    let (src, _) = Scripted::new(vec![Poll::Ready(Some(Err(StreamError::failed("x"))))]);
    let sink = Recorder::new(Mode::Sync);
    let err = within(pipe_to(
        src,
        sink.clone(),
        PipeOptions::new().prevent_fail(true),
    ))
    .await
    .expect_err("source failed");
    assert_eq!(err.to_string(), "x");
    assert!(sink.log().fails.is_empty());
    assert_eq!(sink.log().ends, 0);
}

#[tokio::test]
async fn pipe_002_falls_back_to_the_async_write_when_the_sink_is_full() {
    let (src, _) = Scripted::new(vec![ready(&["a"]), ready(&["b", "c"]), ready(&["d"])]);
    let sink = Recorder::new(Mode::Async);
    let total = within(pipe_to(src, sink.clone(), PipeOptions::new()))
        .await
        .expect("ok");
    assert_eq!(total, 4);
    let log = sink.log();
    assert_eq!(
        log.try_calls, 3,
        "the fast path is tried first, once per batch"
    );
    assert_eq!(
        log.poll_calls, 6,
        "then the async write, until it completes"
    );
    assert_eq!(log.writes.len(), 3, "each batch written exactly once");
    assert_eq!(log.ends, 1);
}

#[tokio::test]
async fn pipe_002_the_fast_path_never_polls_the_async_write() {
    let sink = Recorder::new(Mode::Sync);
    within(pipe_to(
        from_iter(["a", "b"]),
        sink.clone(),
        PipeOptions::new(),
    ))
    .await
    .expect("ok");
    assert_eq!(sink.log().poll_calls, 0);
    assert_eq!(sink.log().try_calls, 1);
}

#[tokio::test]
async fn pipe_003_cancelling_the_token_rejects_a_blocked_write_and_the_pipe() {
    let token = CancelToken::new();
    let sink = Recorder::new(Mode::Blocked);
    let (src, drops) = Scripted::new(vec![ready(&["a"]), ready(&["b"])]);
    let canceller = {
        let token = token.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            token.cancel("client left");
        }
    };
    let (res, ()) = within(async {
        tokio::join!(
            pipe_to(src, sink.clone(), PipeOptions::new().token(token.clone())),
            canceller
        )
    })
    .await;
    let err = res.expect_err("cancelled");
    assert_eq!(err.to_string(), "aborted: client left");
    assert!(same(&err, &token.reason().expect("fired")));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let log = sink.log();
    assert!(log.poll_calls >= 1, "the write was blocked");
    assert!(log.writes.is_empty());
    assert_eq!(log.fails.len(), 1, "the sink is failed with the reason");
    assert!(same(&log.fails[0], &err));
}

#[tokio::test]
async fn pipe_003_cancelling_the_token_rejects_a_blocked_end() {
    let token = CancelToken::new();
    let mut sink = Recorder::new(Mode::Blocked);
    sink.sync_end = false;
    let canceller = {
        let token = token.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            token.cancel("deadline");
        }
    };
    let (res, ()) = within(async {
        tokio::join!(
            pipe_to(
                weir_stream::empty(),
                sink.clone(),
                PipeOptions::new().token(token.clone())
            ),
            canceller
        )
    })
    .await;
    assert_eq!(res.expect_err("cancelled").to_string(), "aborted: deadline");
    assert_eq!(sink.log().ends, 0);
    assert_eq!(sink.log().fails.len(), 1);
}

#[tokio::test]
async fn pipe_003_an_already_cancelled_token_writes_nothing() {
    let token = CancelToken::new();
    token.cancel("gone");
    let sink = Recorder::new(Mode::Sync);
    let err = within(pipe_to(
        from_iter(["a"]),
        sink.clone(),
        PipeOptions::new().token(token),
    ))
    .await
    .expect_err("cancelled");
    assert!(matches!(err, StreamError::Aborted(_)));
    assert_eq!(sink.log().try_calls, 0);
    assert_eq!(sink.log().fails.len(), 1);
}

#[test]
fn pipe_003_dropping_the_pipe_half_way_fails_the_sink() {
    let sink = Recorder::new(Mode::Blocked);
    let (src, drops) = Scripted::new(vec![ready(&["a"])]);
    let mut fut = Box::pin(pipe_to(src, sink.clone(), PipeOptions::new()));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    drop(fut);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let log = sink.log();
    assert_eq!(log.fails.len(), 1);
    assert!(matches!(log.fails[0], StreamError::Aborted(_)));
}

#[tokio::test]
async fn pipe_004_a_sink_that_transforms_runs_after_the_pipeline() {
    /// Appends "!" to every chunk inside its write.
    struct Shout(Recorder);
    impl Sink for Shout {
        fn try_write_batch(&mut self, batch: Batch) -> Result<TryWrite, StreamError> {
            let loud = batch
                .into_iter()
                .map(|c| Bytes::from([&c[..], b"!"].concat()))
                .collect();
            self.0.try_write_batch(loud)
        }
        fn poll_write_batch(
            &mut self,
            cx: &mut Context<'_>,
            batch: &mut Option<Batch>,
        ) -> Poll<Result<(), StreamError>> {
            self.0.poll_write_batch(cx, batch)
        }
        fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
            self.0.poll_end(cx)
        }
        fn fail(&mut self, reason: StreamError) {
            self.0.fail(reason)
        }
    }
    let upper = transform_fn(|b: Option<Batch>| {
        Ok(b.map(|b| {
            b.into_iter()
                .map(|c| Bytes::from(c.to_ascii_uppercase()))
                .collect()
        }))
    });
    let rec = Recorder::new(Mode::Sync);
    within(pipe_to(
        pull(from_iter(["hi"]), upper),
        Shout(rec.clone()),
        PipeOptions::new(),
    ))
    .await
    .expect("ok");
    assert_eq!(rec.log().writes, [[Bytes::from_static(b"HI!")]]);
}

#[test]
fn pipe_004_pipe_to_sync_follows_the_same_rules() {
    let sink = Recorder::new(Mode::Sync);
    let items: Vec<BatchResult> = vec![
        Ok(Batch::from(vec![
            Bytes::from_static(b"a"),
            Bytes::from_static(b"b"),
        ])),
        Ok(Batch::one(Bytes::from_static(b"cd"))),
    ];
    let total = pipe_to_sync(items, sink.clone(), PipeOptions::new()).expect("ok");
    assert_eq!(total, 4);
    assert_eq!(sink.log().writes.len(), 2);
    assert_eq!(sink.log().ends, 1);

    let boom = StreamError::failed("bad");
    let items = vec![Ok(Batch::one(Bytes::from_static(b"a"))), Err(boom.clone())];
    let sink = Recorder::new(Mode::Sync);
    let err = pipe_to_sync(items, sink.clone(), PipeOptions::new()).expect_err("failed");
    assert!(same(&err, &boom));
    assert_eq!(sink.log().ends, 0);
    assert!(same(&sink.log().fails[0], &boom));

    let sink = Recorder::new(Mode::Sync);
    let items = vec![Err(StreamError::failed("x"))];
    pipe_to_sync(items, sink.clone(), PipeOptions::new().prevent_fail(true)).expect_err("x");
    assert!(sink.log().fails.is_empty());

    let sink = Recorder::new(Mode::Sync);
    pipe_to_sync(
        vec![Ok(Batch::one(Bytes::from_static(b"a")))],
        sink.clone(),
        PipeOptions::new().prevent_close(true),
    )
    .expect("ok");
    assert_eq!(sink.log().ends, 0);
}

#[test]
fn pipe_005_pipe_to_sync_errors_when_the_sink_is_full() {
    let sink = Recorder::new(Mode::Async);
    let items: Vec<BatchResult> = vec![Ok(Batch::one(Bytes::from_static(b"a")))];
    let err = pipe_to_sync(items, sink.clone(), PipeOptions::new()).expect_err("full");
    assert!(matches!(err, StreamError::BackpressureViolation), "{err:?}");
    let log = sink.log();
    assert_eq!(log.poll_calls, 0, "never waits");
    assert_eq!(log.fails.len(), 1);

    // A sink that cannot end without waiting is an error too.
    let mut sink = Recorder::new(Mode::Sync);
    sink.sync_end = false;
    let err = pipe_to_sync(Vec::<BatchResult>::new(), sink.clone(), PipeOptions::new())
        .expect_err("cannot end");
    assert!(matches!(err, StreamError::BackpressureViolation), "{err:?}");
}

#[tokio::test]
async fn pipe_002_io_sink_writes_every_batch_on_the_async_path() {
    let (client, mut server) = tokio::io::duplex(4);
    let chunks: Vec<Bytes> = (0..50).map(|i| Bytes::from(format!("{i},"))).collect();
    let expected: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
    let reader = async move {
        let mut out = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut server, &mut out)
            .await
            .expect("read");
        out
    };
    let (total, got) = within(async {
        tokio::join!(
            pipe_to(from_iter(chunks), IoSink::new(client), PipeOptions::new()),
            reader
        )
    })
    .await;
    assert_eq!(total.expect("ok"), expected.len() as u64);
    assert_eq!(got, expected, "complete, in order, then EOF after the end");
}

#[test]
fn pipe_and_consumer_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let pipe = pipe_to(
        from_iter(["a"]),
        Recorder::new(Mode::Sync),
        PipeOptions::new(),
    );
    assert_send(&pipe);
    let collect = weir_stream::consume::bytes(from_iter(["a"]), Default::default());
    assert_send(&collect);
    let merged = weir_stream::merge::merge([from_iter(["a"])]);
    assert_send(&merged);
}
