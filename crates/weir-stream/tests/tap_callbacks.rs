//! `tap` and `tap_async` (catalogue section 9, TAP-001…004).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use weir_stream::tap::{tap, tap_async};
use weir_stream::{Batch, BatchResult, Reason, Source, SourceExt, StreamError, Transform, pull};

/// A source of scripted poll results that counts its drops.
struct Scripted {
    items: VecDeque<Poll<Option<BatchResult>>>,
    drops: Arc<AtomicUsize>,
}

fn scripted(items: Vec<Poll<Option<BatchResult>>>) -> (Scripted, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    (
        Scripted {
            items: items.into(),
            drops: drops.clone(),
        },
        drops,
    )
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

fn batch(chunks: &[&'static str]) -> Batch {
    chunks
        .iter()
        .map(|c| Bytes::from_static(c.as_bytes()))
        .collect()
}

fn poll<S: Source + Unpin>(s: &mut S) -> Poll<Option<BatchResult>> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(s).poll_next_batch(&mut cx)
}

fn same(a: &StreamError, b: &StreamError) -> bool {
    match (a.reason(), b.reason()) {
        (Some(a), Some(b)) => Reason::ptr_eq(a, b),
        _ => false,
    }
}

type Log = Rc<RefCell<Vec<String>>>;

fn describe(b: Option<&Batch>) -> String {
    b.map_or("end".to_owned(), |b| format!("{} chunks", b.len()))
}

#[test]
fn tap_001_callback_sees_each_batch_then_the_end() {
    let a = Bytes::from(vec![5u8; 100]);
    let ptr = a.as_ptr();
    let (src, _) = scripted(vec![Poll::Ready(Some(Ok(Batch::from(vec![
        a,
        Bytes::from_static(b"b"),
    ]))))]);
    let log = Log::default();
    let seen = log.clone();
    let mut p = pull(
        src,
        tap(move |b: Option<&Batch>| {
            seen.borrow_mut().push(describe(b));
            Ok(())
        }),
    );
    let Poll::Ready(Some(Ok(out))) = poll(&mut p) else {
        panic!("no batch")
    };
    assert_eq!(
        out.chunks()[0].as_ptr(),
        ptr,
        "buffers pass through unchanged"
    );
    assert_eq!(out.len(), 2);
    assert!(matches!(poll(&mut p), Poll::Ready(None)));
    assert_eq!(*log.borrow(), ["2 chunks", "end"]);
}

#[test]
fn tap_001_no_end_call_after_an_error() {
    let (src, _) = scripted(vec![
        Poll::Ready(Some(Ok(batch(&["a"])))),
        Poll::Ready(Some(Err(StreamError::failed("reset")))),
    ]);
    let log = Log::default();
    let seen = log.clone();
    let mut p = pull(
        src,
        tap(move |b: Option<&Batch>| {
            seen.borrow_mut().push(describe(b));
            Ok(())
        }),
    );
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Err(_)))));
    assert_eq!(*log.borrow(), ["1 chunks"]);
}

#[tokio::test]
async fn tap_002_async_callback_is_awaited_before_the_batch_moves_on() {
    let a = Bytes::from(vec![9u8; 10]);
    let ptr = a.as_ptr();
    let (src, drops) = scripted(vec![
        Poll::Ready(Some(Ok(Batch::one(a)))),
        Poll::Ready(Some(Ok(batch(&["b", "c"])))),
    ]);
    let log = Log::default();
    let seen = log.clone();
    // An `async` block is not `Unpin`: pin the tap once, not per batch.
    let mut t = Box::pin(tap_async(src, move |b: Option<&Batch>| {
        let what = describe(b);
        let seen = seen.clone();
        seen.borrow_mut().push(format!("start {what}"));
        async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            seen.borrow_mut().push(format!("done {what}"));
            Ok(())
        }
    }));
    let run = async {
        let mut first_ptr = None;
        while let Some(b) = t.next_batch().await {
            let b = b.expect("ok");
            first_ptr.get_or_insert(b.chunks()[0].as_ptr());
            log.borrow_mut().push(format!("out {}", describe(Some(&b))));
        }
        log.borrow_mut().push("consumer end".to_owned());
        first_ptr
    };
    let first_ptr = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("timed out");
    assert_eq!(first_ptr, Some(ptr), "buffers pass through unchanged");
    assert_eq!(
        *log.borrow(),
        [
            "start 1 chunks",
            "done 1 chunks",
            "out 1 chunks",
            "start 2 chunks",
            "done 2 chunks",
            "out 2 chunks",
            "start end",
            "done end",
            "consumer end",
        ]
    );
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert!(t.is_end_stream());
}

#[test]
fn tap_003_callback_error_ends_the_pipeline_and_drops_the_source() {
    let boom = StreamError::failed("hash mismatch");
    let (src, drops) = scripted(vec![
        Poll::Ready(Some(Ok(batch(&["a"])))),
        Poll::Ready(Some(Ok(batch(&["b"])))),
    ]);
    let err = boom.clone();
    let mut calls = 0;
    let mut p = pull(
        src,
        tap(move |_: Option<&Batch>| {
            calls += 1;
            if calls == 2 { Err(err.clone()) } else { Ok(()) }
        }),
    );
    assert!(matches!(poll(&mut p), Poll::Ready(Some(Ok(_)))));
    let Poll::Ready(Some(Err(got))) = poll(&mut p) else {
        panic!("no error")
    };
    assert!(same(&got, &boom), "the callback's error, unchanged");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let Poll::Ready(Some(Err(again))) = poll(&mut p) else {
        panic!("not sticky")
    };
    assert!(same(&again, &boom));
}

#[tokio::test]
async fn tap_003_async_callback_error_ends_the_stream_and_drops_the_source() {
    let boom = StreamError::failed("log sink down");
    let (src, drops) = scripted(vec![
        Poll::Ready(Some(Ok(batch(&["a"])))),
        Poll::Ready(Some(Ok(batch(&["b"])))),
    ]);
    let err = boom.clone();
    let mut t = Box::pin(tap_async(src, move |_: Option<&Batch>| {
        let err = err.clone();
        async move { Err(err) }
    }));
    let got = tokio::time::timeout(Duration::from_secs(5), t.next_batch())
        .await
        .expect("timed out")
        .expect("an item")
        .expect_err("the callback failed");
    assert!(same(&got, &boom));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let again = t.next_batch().await.expect("sticky").expect_err("sticky");
    assert!(same(&again, &boom));
}

/// `pull_sync` lives in another module; `tap` is a plain synchronous
/// `Transform`, so this drives it the way a sync pipeline does.
#[test]
fn tap_004_tap_runs_synchronously_as_a_plain_transform() {
    let mut seen = Vec::new();
    let mut t = tap(|b: Option<&Batch>| {
        seen.push(describe(b));
        if b.is_some_and(|b| b.byte_len() > 3) {
            Err(StreamError::failed("too long"))
        } else {
            Ok(())
        }
    });
    let input = batch(&["ab"]);
    let ptr = input.chunks()[0].as_ptr();
    let out = t.transform(Some(input)).expect("ok").expect("a batch");
    assert_eq!(out.chunks()[0].as_ptr(), ptr);
    assert!(
        t.transform(None).expect("ok").is_none(),
        "the end emits nothing"
    );
    let err = t.transform(Some(batch(&["long!"]))).expect_err("fails");
    assert_eq!(err.to_string(), "too long");
    assert_eq!(seen, ["1 chunks", "end", "1 chunks"]);
}
