//! `pipe_to` into a push writer: the two halves of the core meet.

use std::time::Duration;

use bytes::Bytes;
use weir_stream::consume::{ConsumeOptions, bytes};
use weir_stream::pipe::{PipeOptions, pipe_to};
use weir_stream::push::{PushOptions, push};
use weir_stream::{Backpressure, StreamError, from_iter, pull, transform_fn};

#[tokio::test]
async fn pipe_001_pipe_into_a_push_writer_delivers_everything_and_ends() {
    let chunks: Vec<Bytes> = (0..1000u32)
        .map(|i| Bytes::from(i.to_be_bytes().to_vec()))
        .collect();
    let expected: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
    let (writer, readable) = push(PushOptions::new().hwm(2).policy(Backpressure::Strict));
    // 8 batches of up to 128 chunks into a writer that holds 2.
    let source = pull(from_iter(chunks), ());
    let pipe = tokio::spawn(pipe_to(source, writer, PipeOptions::default()));
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        bytes(readable, ConsumeOptions::default()),
    )
    .await
    .expect("not stuck")
    .expect("clean end");
    let written = pipe.await.expect("pipe task").expect("pipe ok");
    assert_eq!(written, 4000);
    assert_eq!(&got[..], &expected[..]);
}

#[tokio::test]
async fn pipe_001_a_failing_source_fails_the_push_writer() {
    let (writer, readable) = push(PushOptions::default());
    let source = pull(
        from_iter([Bytes::from_static(b"a")]),
        transform_fn(|b| match b {
            Some(_) => Err(StreamError::failed("upstream reset")),
            None => Ok(None),
        }),
    );
    let res = pipe_to(source, writer, PipeOptions::default()).await;
    assert_eq!(
        res.map_err(|e| e.to_string()),
        Err("upstream reset".to_owned())
    );
    let got = bytes(readable, ConsumeOptions::default()).await;
    assert_eq!(
        got.map_err(|e| e.to_string()),
        Err("upstream reset".to_owned())
    );
}
