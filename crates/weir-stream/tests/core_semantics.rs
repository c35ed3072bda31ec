//! Core rules every stream keeps (section 1 of
//! `shared/spec/streams-semantics.md`), and the HTTP body adapters.

mod pull_support;

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::Body;
use http_body_util::BodyExt;
use pull_support::*;
use weir_stream::adapt::{from_stream, into_bytes_stream};
use weir_stream::body::{HttpBodySource, SourceBody};
use weir_stream::stateful::async_fn;
use weir_stream::sync_pull::pull_sync_batches;
use weir_stream::{
    Batch, SourceExt, StreamError, TransformExt, from_iter, once, pull, transform_fn,
};

#[test]
fn core_001_pipelines_never_yield_an_empty_batch() {
    let (src, _) = Scripted::new(vec![data("a"), data("b"), data("c"), data("d")]);
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
    let log = Log::default();
    let mut p = pull(src, drop_b).stateful(per_item("s", &log));
    let mut seen = Vec::new();
    while let Poll::Ready(Some(item)) = poll(&mut p) {
        let b = item.expect("ok");
        assert!(!b.is_empty());
        seen.push(text(&b));
    }
    assert_eq!(seen, ["as", "ds", "<s-end>"]);
}

#[test]
fn core_002_identity_chains_hand_on_the_same_buffers() {
    let chunk = Bytes::from(vec![7u8; 4096]);
    let ptr = chunk.as_ptr();
    let mut p = pull(from_iter([chunk]), ().then(()))
        .stateful(Passthrough)
        .then(());
    let Poll::Ready(Some(Ok(b))) = poll(&mut p) else {
        panic!("no batch")
    };
    assert_eq!(b.chunks()[0].as_ptr(), ptr);
    assert_eq!(b.chunks()[0].len(), 4096);
}

#[tokio::test]
async fn core_002_async_layers_and_streams_hand_on_the_same_buffers() {
    let chunk = Bytes::from(vec![7u8; 4096]);
    let ptr = chunk.as_ptr();
    let chain = from_iter([chunk]).then_async(async_fn(|b: Option<Batch>| async move { Ok(b) }));
    let mut stream = Box::pin(into_bytes_stream(chain));
    let first = std::future::poll_fn(|cx| futures_core::Stream::poll_next(stream.as_mut(), cx))
        .await
        .expect("item")
        .expect("ok");
    assert_eq!(first.as_ptr(), ptr);
}

#[test]
fn core_003_text_is_utf8_and_bytes_are_wrapped_without_a_copy() {
    let mut text_src = once("é");
    let Poll::Ready(Some(Ok(b))) = poll(&mut text_src) else {
        panic!("no batch")
    };
    assert_eq!(&b.chunks()[0][..], [0xC3, 0xA9]);

    let owned = String::from("é");
    let mut string_src = once(owned);
    let Poll::Ready(Some(Ok(b))) = poll(&mut string_src) else {
        panic!("no batch")
    };
    assert_eq!(&b.chunks()[0][..], [0xC3, 0xA9]);

    let bytes = vec![1u8, 2, 3];
    let ptr = bytes.as_ptr();
    let mut vec_src = pull(once(bytes), ());
    let Poll::Ready(Some(Ok(b))) = poll(&mut vec_src) else {
        panic!("no batch")
    };
    assert_eq!(b.chunks()[0].as_ptr(), ptr, "the Vec's buffer, not a copy");
}

#[test]
fn core_004_in_memory_source_batches_at_most_128_chunks() {
    for (n, expected) in [
        (127, vec![127]),
        (128, vec![128]),
        (129, vec![128, 1]),
        (300, vec![128, 128, 44]),
    ] {
        let chunks: Vec<Bytes> = (0..n).map(|_| Bytes::from_static(b"x")).collect();
        let mut p = pull(from_iter(chunks), ());
        let mut sizes = Vec::new();
        while let Poll::Ready(Some(b)) = poll(&mut p) {
            sizes.push(b.expect("ok").len());
        }
        assert_eq!(sizes, expected, "{n} chunks");
    }
}

#[test]
fn core_005_a_sync_iterator_is_grouped_but_item_sources_yield_one_batch_per_item() {
    // Async `from` over a sync iterator: all ready at once, one batch.
    let mut grouped = pull(from_iter(["a", "b", "c"]), ());
    let (out, _) = drain(&mut grouped);
    assert_eq!(out, ["abc"]);

    // An async source of items: one batch per item.
    let items: Vec<Result<&'static str, StreamError>> = vec![Ok("a"), Ok("b"), Ok("c")];
    let mut per_item = pull(from_stream(VecStream(items.into())), ());
    let (out, _) = drain(&mut per_item);
    assert_eq!(out, ["a", "b", "c"]);

    // The sync pipeline: one batch per item.
    let sync: Vec<String> = pull_sync_batches(["a", "b", "c"].map(|c| Ok(Batch::one(c))), ())
        .map(|b| text(&b.expect("ok")))
        .collect();
    assert_eq!(sync, ["a", "b", "c"]);
}

#[test]
fn core_006_errors_are_sticky_and_keep_their_identity() {
    let err = StreamError::failed("boom");
    let (src, _) = Scripted::new(vec![fail(&err)]);
    let log = Log::default();
    let mut p = pull(src, rec("t", &log)).stateful(per_item("s", &log));
    for _ in 0..3 {
        let Poll::Ready(Some(Err(got))) = poll(&mut p) else {
            panic!("not sticky")
        };
        assert!(same_reason(&got, &err));
    }
}

#[test]
fn core_007_polls_after_the_end_keep_returning_none() {
    let log = Log::default();
    let (src, _) = Scripted::new(vec![data("a")]);
    let mut p = pull(src, rec("t", &log))
        .stateful(per_item("s", &log))
        .then(());
    let (out, _) = drain(&mut p);
    assert_eq!(out.len(), 3);
    for _ in 0..3 {
        assert!(matches!(poll(&mut p), Poll::Ready(None)));
    }
    assert_eq!(log.count(":flush"), 2, "no second flush");

    let mut sync = pull_sync_batches([Ok(Batch::one("a"))], ());
    assert!(sync.next().is_some());
    for _ in 0..3 {
        assert!(sync.next().is_none());
    }
}

#[tokio::test]
async fn core_007_an_async_stage_stays_ended() {
    let mut p =
        Box::pin(from_iter(["a"]).then_async(async_fn(|b: Option<Batch>| async move { Ok(b) })));
    assert!(p.next_batch().await.is_some());
    for _ in 0..3 {
        assert!(p.next_batch().await.is_none());
    }
}

#[tokio::test]
async fn core_008_source_body_skips_zero_length_chunks_and_batches() {
    let (src, _) = Scripted::new(vec![
        Poll::Ready(Some(Ok(Batch::from(vec![
            Bytes::from_static(b"ab"),
            Bytes::new(),
            Bytes::from_static(b"c"),
        ])))),
        Poll::Ready(Some(Ok(Batch::one(Bytes::new())))),
        data("d"),
    ]);
    let mut body = SourceBody::new(pull(src, ()));
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        let data = frame.expect("ok").into_data().expect("data");
        let mut slices = [std::io::IoSlice::new(&[]); 8];
        let n = data.chunks_vectored(&mut slices);
        assert!(slices[..n].iter().all(|s| !s.is_empty()), "no empty slice");
        frames.push(data.remaining());
    }
    // The all-empty batch makes no frame (a 0-size chunk would end an
    // HTTP/1.1 chunked body).
    assert_eq!(frames, [3, 1]);
}

#[tokio::test]
async fn core_008_a_zero_length_chunk_survives_a_pipeline_and_a_bytes_stream() {
    let (src, _) = Scripted::new(vec![Poll::Ready(Some(Ok(Batch::one(Bytes::new()))))]);
    let mut stream = into_bytes_stream(pull(src, ()));
    let first =
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut stream), cx))
            .await
            .expect("item")
            .expect("ok");
    assert!(first.is_empty());
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
    let body = http_body_util::StreamBody::new(VecStream(frames.into()));
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
    let (src, _) = Scripted::new(vec![data("a"), fail(&StreamError::failed("boom"))]);
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
    let b = tokio::time::timeout(Duration::from_secs(5), p.next_batch())
        .await
        .expect("bounded")
        .expect("batch")
        .expect("ok");
    assert_eq!(text(&b), "ab");
    assert!(p.next_batch().await.is_none());
}

/// A tiny `Stream` over a vector, so the tests need no futures crate.
struct VecStream<T>(std::collections::VecDeque<T>);

impl<T: Unpin> futures_core::Stream for VecStream<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<T>> {
        Poll::Ready(self.0.pop_front())
    }
}
