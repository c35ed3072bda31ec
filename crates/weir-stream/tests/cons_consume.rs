//! Collecting consumers with limits (catalogue section 7, CONS-001…006).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use weir_stream::consume::{ConsumeOptions, array, array_sync, bytes, bytes_sync, text, text_sync};
use weir_stream::{Batch, BatchResult, CancelToken, Reason, Source, StreamError, from_iter};

/// A source of scripted poll results that counts polls and drops.
/// Once the script runs out it stays pending forever (it never wakes).
struct Scripted {
    items: VecDeque<Poll<Option<BatchResult>>>,
    end_when_empty: bool,
    polls: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

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

impl Scripted {
    fn new(items: Vec<Poll<Option<BatchResult>>>) -> (Self, Counters) {
        Self::build(items, true)
    }

    fn stalling(items: Vec<Poll<Option<BatchResult>>>) -> (Self, Counters) {
        Self::build(items, false)
    }

    fn build(items: Vec<Poll<Option<BatchResult>>>, end_when_empty: bool) -> (Self, Counters) {
        let polls = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        (
            Scripted {
                items: items.into(),
                end_when_empty,
                polls: polls.clone(),
                drops: drops.clone(),
            },
            Counters { polls, drops },
        )
    }
}

impl Source for Scripted {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        match self.items.pop_front() {
            Some(item) => item,
            None if self.end_when_empty => Poll::Ready(None),
            None => Poll::Pending,
        }
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn chunk(b: &'static [u8]) -> Bytes {
    Bytes::from_static(b)
}

fn ready(chunks: &[&'static [u8]]) -> Poll<Option<BatchResult>> {
    Poll::Ready(Some(Ok(chunks.iter().map(|c| chunk(c)).collect())))
}

/// 100 batches of ten bytes each.
fn hundred_tens() -> Vec<Poll<Option<BatchResult>>> {
    (0..100).map(|_| ready(&[b"0123456789"])).collect()
}

/// An iterator of batch results that counts `next` calls and its drop.
struct CountingIter {
    inner: std::vec::IntoIter<BatchResult>,
    counters: Counters,
}

impl CountingIter {
    fn new(items: Vec<BatchResult>) -> (Self, Counters) {
        let polls = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        (
            CountingIter {
                inner: items.into_iter(),
                counters: Counters {
                    polls: polls.clone(),
                    drops: drops.clone(),
                },
            },
            Counters { polls, drops },
        )
    }
}

impl Iterator for CountingIter {
    type Item = BatchResult;
    fn next(&mut self) -> Option<BatchResult> {
        self.counters.polls.fetch_add(1, Ordering::SeqCst);
        self.inner.next()
    }
}

impl Drop for CountingIter {
    fn drop(&mut self) {
        self.counters.drops.fetch_add(1, Ordering::SeqCst);
    }
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("timed out")
}

#[tokio::test]
async fn cons_001_one_chunk_is_returned_uncopied() {
    let data = Bytes::from(vec![42u8; 1000]);
    let ptr = data.as_ptr();
    // Empty chunks around it do not force a copy.
    let src = from_iter([Bytes::new(), data, Bytes::new()]);
    let out = within(bytes(src, ConsumeOptions::new())).await.expect("ok");
    assert_eq!(out.as_ptr(), ptr);
    assert_eq!(out.len(), 1000);
}

#[tokio::test]
async fn cons_001_no_chunks_give_empty_bytes() {
    let out = within(bytes(weir_stream::empty(), ConsumeOptions::new()))
        .await
        .expect("ok");
    assert!(out.is_empty());
}

#[tokio::test]
async fn cons_001_several_chunks_are_concatenated_in_order() {
    let (src, _) = Scripted::new(vec![ready(&[b"ab", b"c"]), ready(&[b"", b"def"])]);
    let out = within(bytes(src, ConsumeOptions::new())).await.expect("ok");
    assert_eq!(&out[..], b"abcdef");
}

#[tokio::test]
async fn cons_002_limit_stops_pulling_and_drops_the_source() {
    let (src, c) = Scripted::new(hundred_tens());
    let err = within(bytes(src, ConsumeOptions::new().limit(25)))
        .await
        .expect_err("over the limit");
    assert!(
        matches!(err, StreamError::LimitExceeded { limit: 25 }),
        "{err:?}"
    );
    assert_eq!(c.polls(), 3, "stopped after 3 of 100 batches");
    assert_eq!(c.drops(), 1, "the source was dropped");
}

#[tokio::test]
async fn cons_002_a_total_equal_to_the_limit_is_fine() {
    let (src, c) = Scripted::new(vec![ready(&[b"0123456789"]), ready(&[b"0123456789"])]);
    let out = within(bytes(src, ConsumeOptions::new().limit(20)))
        .await
        .expect("equal to the limit");
    assert_eq!(out.len(), 20);
    assert_eq!(c.drops(), 1);
}

#[tokio::test]
async fn cons_003_cancelled_token_errors_without_polling() {
    let token = CancelToken::new();
    let reason = StreamError::aborted("client left");
    token.cancel_with(reason.clone());
    let (src, c) = Scripted::new(hundred_tens());
    let err = within(bytes(src, ConsumeOptions::new().token(token)))
        .await
        .expect_err("cancelled");
    assert_eq!(c.polls(), 0);
    assert_eq!(c.drops(), 1);
    let (Some(a), Some(b)) = (err.reason(), reason.reason()) else {
        panic!("no reason: {err:?}")
    };
    assert!(Reason::ptr_eq(a, b), "the token's own error");
}

#[tokio::test]
async fn cons_003_token_rejects_a_consumer_waiting_on_its_source() {
    let token = CancelToken::new();
    let (src, c) = Scripted::stalling(vec![ready(&[b"abc"])]);
    let canceller = {
        let token = token.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            token.cancel("deadline");
        }
    };
    let (res, ()) =
        within(async { tokio::join!(text(src, ConsumeOptions::new().token(token)), canceller) })
            .await;
    let err = res.expect_err("cancelled while waiting");
    assert!(matches!(err, StreamError::Aborted(_)), "{err:?}");
    assert_eq!(err.to_string(), "aborted: deadline");
    assert_eq!(c.drops(), 1);
    assert!(c.polls() >= 2, "it was waiting on the source");
}

#[tokio::test]
async fn cons_004_text_joins_a_character_split_over_chunks() {
    let e_acute = "é".as_bytes();
    assert_eq!(e_acute, [0xC3, 0xA9]);
    let (src, _) = Scripted::new(vec![ready(&[b"caf", b"\xC3"]), ready(&[b"\xA9!"])]);
    let out = within(text(src, ConsumeOptions::new())).await.expect("ok");
    assert_eq!(out, "café!");
}

#[tokio::test]
async fn cons_004_invalid_utf8_is_an_error() {
    let (src, _) = Scripted::new(vec![ready(&[b"\xFF\xFE"])]);
    let err = within(text(src, ConsumeOptions::new()))
        .await
        .expect_err("not UTF-8");
    assert!(matches!(err, StreamError::InvalidUtf8), "{err:?}");

    let (src, _) = Scripted::new(vec![ready(&[b"ok \xE2\x82"])]);
    let err = within(text(src, ConsumeOptions::new()))
        .await
        .expect_err("stops inside a character");
    assert!(matches!(err, StreamError::InvalidUtf8), "{err:?}");
}

#[tokio::test]
async fn cons_004_invalid_bytes_stop_pulling_at_once() {
    let mut script = vec![ready(&[b"fine"]), ready(&[b"\xC3("])];
    script.extend(hundred_tens());
    let (src, c) = Scripted::new(script);
    let err = within(text(src, ConsumeOptions::new()))
        .await
        .expect_err("not UTF-8");
    assert!(matches!(err, StreamError::InvalidUtf8), "{err:?}");
    assert_eq!(c.polls(), 2);
    assert_eq!(c.drops(), 1);
}

#[tokio::test]
async fn cons_004_a_byte_order_mark_is_kept() {
    let src = from_iter([Bytes::from_static(b"\xEF\xBB\xBFhi")]);
    let out = within(text(src, ConsumeOptions::new())).await.expect("ok");
    assert_eq!(out, "\u{FEFF}hi");
}

#[tokio::test]
async fn cons_005_array_keeps_chunk_boundaries() {
    let a = Bytes::from_static(b"a");
    let ptr = a.as_ptr();
    let (src, _) = Scripted::new(vec![
        Poll::Ready(Some(Ok(Batch::from(vec![a, chunk(b"bb")])))),
        ready(&[b"ccc"]),
    ]);
    let out = within(array(src, ConsumeOptions::new())).await.expect("ok");
    assert_eq!(out.len(), 3);
    assert_eq!(out, [chunk(b"a"), chunk(b"bb"), chunk(b"ccc")]);
    assert_eq!(out[0].as_ptr(), ptr, "chunks are moved, not copied");
}

#[tokio::test]
async fn cons_005_array_applies_the_limit() {
    let (src, c) = Scripted::new(hundred_tens());
    let err = within(array(src, ConsumeOptions::new().limit(25)))
        .await
        .expect_err("over the limit");
    assert!(matches!(err, StreamError::LimitExceeded { limit: 25 }));
    assert_eq!(c.polls(), 3);
    assert_eq!(c.drops(), 1);
}

#[tokio::test]
async fn cons_005_source_error_is_returned_unchanged() {
    let boom = StreamError::failed("origin reset");
    let (src, c) = Scripted::new(vec![ready(&[b"a"]), Poll::Ready(Some(Err(boom.clone())))]);
    let err = within(array(src, ConsumeOptions::new()))
        .await
        .expect_err("source failed");
    let (Some(a), Some(b)) = (err.reason(), boom.reason()) else {
        panic!("no reason")
    };
    assert!(Reason::ptr_eq(a, b));
    assert_eq!(c.drops(), 1);
}

#[test]
fn cons_006_sync_variants_collect_the_same() {
    let items = || -> Vec<BatchResult> {
        vec![
            Ok(Batch::from(vec![chunk(b"caf"), chunk(b"\xC3")])),
            Ok(Batch::one(chunk(b"\xA9"))),
        ]
    };
    assert_eq!(
        &bytes_sync(items(), ConsumeOptions::new()).expect("ok")[..],
        "café".as_bytes()
    );
    assert_eq!(
        text_sync(items(), ConsumeOptions::new()).expect("ok"),
        "café"
    );
    assert_eq!(
        array_sync(items(), ConsumeOptions::new())
            .expect("ok")
            .len(),
        3
    );
    let bad = vec![Ok(Batch::one(chunk(b"\xFF\xFE")))];
    assert!(matches!(
        text_sync(bad, ConsumeOptions::new()),
        Err(StreamError::InvalidUtf8)
    ));
}

#[test]
fn cons_006_sync_limit_stops_pulling_and_drops_the_iterator() {
    let items: Vec<BatchResult> = (0..100)
        .map(|_| Ok(Batch::one(chunk(b"0123456789"))))
        .collect();
    let (iter, c) = CountingIter::new(items.clone());
    let err = bytes_sync(iter, ConsumeOptions::new().limit(25)).expect_err("over");
    assert!(matches!(err, StreamError::LimitExceeded { limit: 25 }));
    assert_eq!(c.polls(), 3);
    assert_eq!(c.drops(), 1);

    let (iter, c) = CountingIter::new(items);
    let err = array_sync(iter, ConsumeOptions::new().limit(25)).expect_err("over");
    assert!(matches!(err, StreamError::LimitExceeded { limit: 25 }));
    assert_eq!(c.polls(), 3);
}

#[test]
fn cons_006_sync_variant_with_a_cancelled_token_pulls_nothing() {
    let token = CancelToken::new();
    token.cancel("stop");
    let (iter, c) = CountingIter::new(vec![Ok(Batch::one(chunk(b"a")))]);
    let err = text_sync(iter, ConsumeOptions::new().token(token)).expect_err("cancelled");
    assert!(matches!(err, StreamError::Aborted(_)));
    assert_eq!(c.polls(), 0);
    assert_eq!(c.drops(), 1);
}
