//! Adapters between the batch model and streams, readers and iterators,
//! and the return shapes of a mapping closure (PULL-010).

mod pull_support;

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use pull_support::*;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use weir_stream::adapt::{
    Chunks, from_async_read, from_results, from_stream, into_bytes_stream, into_stream,
    into_stream_error, map_batches,
};
use weir_stream::{Batch, SourceExt, StreamError, from_iter, pull};

/// A stream over a list that counts its polls.
struct Counted<T> {
    items: VecDeque<T>,
    polls: Arc<AtomicUsize>,
}

impl<T: Unpin> Stream for Counted<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(self.items.pop_front())
    }
}

fn counted<T>(items: Vec<T>) -> (Counted<T>, Arc<AtomicUsize>) {
    let polls = Arc::new(AtomicUsize::new(0));
    (
        Counted {
            items: items.into(),
            polls: polls.clone(),
        },
        polls,
    )
}

async fn next<S: Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    tokio::time::timeout(
        Duration::from_secs(5),
        std::future::poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)),
    )
    .await
    .expect("bounded")
}

#[test]
fn from_stream_yields_one_batch_per_item_and_polls_on_demand() {
    let items: Vec<Result<&'static str, io::Error>> = vec![Ok("a"), Ok("bc"), Ok("")];
    let (stream, polls) = counted(items);
    let mut src = from_stream(stream);
    assert_eq!(polls.load(Ordering::SeqCst), 0);
    assert_eq!(text(&expect_batch(&mut src)), "a");
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    assert_eq!(text(&expect_batch(&mut src)), "bc");
    let empty = expect_batch(&mut src);
    assert_eq!(empty.len(), 1, "a zero-length item is carried (CORE-008)");
    assert!(matches!(poll(&mut src), Poll::Ready(None)));
    assert!(matches!(poll(&mut src), Poll::Ready(None)), "fused");
}

#[test]
fn from_stream_keeps_a_stream_error_as_is_and_wraps_others() {
    let err = StreamError::failed("upstream");
    let items: Vec<Result<Bytes, StreamError>> =
        vec![Ok(Bytes::from_static(b"a")), Err(err.clone())];
    let (stream, polls) = counted(items);
    let mut src = from_stream(stream);
    let _ = expect_batch(&mut src);
    for _ in 0..2 {
        let Poll::Ready(Some(Err(got))) = poll(&mut src) else {
            panic!("no error")
        };
        assert!(same_reason(&got, &err), "identity kept, sticky");
    }
    assert_eq!(
        polls.load(Ordering::SeqCst),
        2,
        "not polled after the error"
    );

    let items: Vec<Result<Bytes, io::Error>> = vec![Err(io::Error::other("disk"))];
    let (stream, _) = counted(items);
    let mut src = from_stream(stream);
    let Poll::Ready(Some(Err(StreamError::Failed(reason)))) = poll(&mut src) else {
        panic!("no error")
    };
    assert!(reason.downcast_ref::<io::Error>().is_some());
}

#[test]
fn into_stream_error_unwraps_a_stream_error() {
    let err = StreamError::aborted("gone");
    let back = into_stream_error(err.clone());
    assert!(matches!(back, StreamError::Aborted(_)));
    assert!(same_reason(&back, &err));
    assert!(matches!(into_stream_error("text"), StreamError::Failed(_)));
}

#[test]
fn from_results_is_one_batch_per_item_and_sticky() {
    let err = StreamError::failed("bad");
    let mut src = from_results(vec![
        Ok(Batch::one("a")),
        Ok(Batch::one("b")),
        Err(err.clone()),
        Ok(Batch::one("never")),
    ]);
    assert_eq!(text(&expect_batch(&mut src)), "a");
    assert_eq!(text(&expect_batch(&mut src)), "b");
    for _ in 0..2 {
        let Poll::Ready(Some(Err(got))) = poll(&mut src) else {
            panic!("no error")
        };
        assert!(same_reason(&got, &err));
    }
}

#[tokio::test]
async fn from_async_read_batches_every_ready_read_in_chunks_of_the_set_size() {
    let reader: &[u8] = b"abcdefghij";
    let mut src = from_async_read(reader).chunk_size(4);
    let batch = tokio::time::timeout(Duration::from_secs(5), src.next_batch())
        .await
        .expect("bounded")
        .expect("batch")
        .expect("ok");
    let chunks: Vec<&[u8]> = batch.chunks().iter().map(|c| &c[..]).collect();
    assert_eq!(chunks, [&b"abcd"[..], b"efgh", b"ij"]);
    assert!(src.next_batch().await.is_none());
    assert!(src.next_batch().await.is_none(), "fused");
}

#[tokio::test]
async fn from_async_read_caps_one_batch() {
    let data = vec![1u8; 1024 * 1024];
    let mut src = from_async_read(&data[..]);
    let batch = src.next_batch().await.expect("batch").expect("ok");
    // The byte bound: no chunk is added once the batch holds 32 KiB, and
    // each read is at most 8 KiB.
    assert_eq!(batch.byte_len(), Batch::MAX_BYTES, "{}", batch.byte_len());
    assert!(batch.len() <= Batch::MAX_CHUNKS);
    let mut total = batch.byte_len();
    while let Some(b) = src.next_batch().await {
        total += b.expect("ok").byte_len();
    }
    assert_eq!(total, data.len());
}

#[tokio::test]
async fn from_async_read_yields_what_is_ready_then_waits() {
    let (mut writer, reader) = tokio::io::duplex(64);
    let mut src = Box::pin(from_async_read(reader));
    writer.write_all(b"abc").await.expect("write");
    let first = src.next_batch().await.expect("batch").expect("ok");
    assert_eq!(text(&first), "abc");
    let waiting = tokio::time::timeout(Duration::from_millis(20), src.next_batch()).await;
    assert!(waiting.is_err(), "nothing ready: the source waits");
    writer.write_all(b"de").await.expect("write");
    drop(writer);
    let second = tokio::time::timeout(Duration::from_secs(5), src.next_batch())
        .await
        .expect("woken by the write")
        .expect("batch")
        .expect("ok");
    assert_eq!(text(&second), "de");
    assert!(src.next_batch().await.is_none());
}

/// A reader that gives some data, then fails.
struct Failing(Option<&'static [u8]>);

impl AsyncRead for Failing {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.take() {
            Some(data) => {
                buf.put_slice(data);
                Poll::Ready(Ok(()))
            }
            None => Poll::Ready(Err(io::Error::other("reset"))),
        }
    }
}

#[tokio::test]
async fn from_async_read_delivers_data_before_a_sticky_error() {
    let mut src = from_async_read(Failing(Some(b"xy")));
    let first = src.next_batch().await.expect("batch").expect("ok");
    assert_eq!(text(&first), "xy");
    for _ in 0..2 {
        let err = src.next_batch().await.expect("item").expect_err("error");
        assert_eq!(err.to_string(), "reset");
    }
}

#[tokio::test]
async fn into_stream_yields_batches_then_the_end() {
    let mut s = into_stream(pull(from_iter(["a", "b"]), ()));
    let b = next(&mut s).await.expect("item").expect("ok");
    assert_eq!(text(&b), "ab");
    assert!(next(&mut s).await.is_none());
}

#[tokio::test]
async fn into_bytes_stream_flattens_batches_and_ends_with_the_error() {
    let err = StreamError::failed("late");
    let (src, counters) = Scripted::new(vec![
        Poll::Ready(Some(Ok(Batch::from(vec![
            Bytes::from_static(b"a"),
            Bytes::from_static(b"b"),
        ])))),
        fail(&err),
    ]);
    let mut s = into_bytes_stream(src);
    assert_eq!(&next(&mut s).await.expect("a").expect("ok")[..], b"a");
    assert_eq!(counters.polls(), 1);
    assert_eq!(&next(&mut s).await.expect("b").expect("ok")[..], b"b");
    assert_eq!(
        counters.polls(),
        1,
        "polled again only once the batch is taken"
    );
    let got = next(&mut s).await.expect("err").expect_err("error");
    assert!(same_reason(&got, &err));
}

fn run_map<R: weir_stream::adapt::IntoBatch>(
    f: impl FnMut(Batch) -> R,
) -> (Vec<String>, Option<StreamError>) {
    let mut p = pull(from_iter(["in"]), map_batches(f));
    drain(&mut p)
}

#[test]
fn pull_010_a_mapping_may_return_any_shape_and_it_is_flattened() {
    assert_eq!(run_map(|_| ()).0, Vec::<String>::new(), "nothing");
    assert_eq!(run_map(|b| b).0, ["in"], "a batch");
    assert_eq!(run_map(|_| Bytes::from_static(b"chunk")).0, ["chunk"]);
    assert_eq!(run_map(|_| "text").0, ["text"]);
    assert_eq!(run_map(|_| String::from("string")).0, ["string"]);
    assert_eq!(run_map(|_| b"bytes".to_vec()).0, ["bytes"]);
    assert_eq!(
        run_map(|_| Chunks(["x", "y", "z"])).0,
        ["xyz"],
        "an iterable"
    );
    assert_eq!(run_map(|_| Some("opt")).0, ["opt"]);
    assert_eq!(run_map(|_| None::<Batch>).0, Vec::<String>::new());
    let (out, err) = run_map(|_| Err::<Batch, _>(StreamError::failed("nope")));
    assert!(out.is_empty());
    assert_eq!(err.expect("error").to_string(), "nope");
}

#[test]
fn pull_010_an_iterable_keeps_its_chunk_boundaries() {
    let mut p = pull(from_iter(["in"]), map_batches(|_| Chunks(vec!["a", "b"])));
    let b = expect_batch(&mut p);
    assert_eq!(b.len(), 2);
}

fn expect_batch<S: weir_stream::Source + Unpin>(s: &mut S) -> Batch {
    match poll(s) {
        Poll::Ready(Some(Ok(b))) => b,
        other => panic!("expected a batch, got {other:?}"),
    }
}
