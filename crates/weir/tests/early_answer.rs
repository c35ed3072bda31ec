//! An upstream that answers before it has read the request body (a 413 or
//! 401 to an upload): Weir forwards the answer at once and closes that
//! upstream connection (it is half-written, never to be pooled) within a
//! second, instead of streaming the rest of the upload into it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads from `stream` until the end of a request head; what came after it
/// is dropped.
async fn read_head(stream: &mut TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await.expect("read head");
        assert!(n > 0, "closed before the head ended");
        seen.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_request_body_is_forwarded_and_the_upstream_connection_closed() {
    let upstream = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let upstream_addr = upstream.local_addr().expect("addr");
    // The upstream: reads the head, answers 413 at once, then only watches
    // for the connection's end (draining what still comes), at most 10 s.
    let watcher = tokio::spawn(async move {
        let (mut stream, _) = upstream.accept().await.expect("accept");
        read_head(&mut stream).await;
        stream
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\n\r\ntoo large")
            .await
            .expect("answer");
        let answered = Instant::now();
        let mut buf = vec![0u8; 65536];
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        (ended.is_ok(), answered.elapsed())
    });
    let proxy = start_proxy(&config_text(&format!("http://{upstream_addr}"), "", "", "")).await;

    // The client: an upload of 100 MB announced, sent 64 KiB every 5 ms
    // (it would take about 8 s), while the answer is read beside it.
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    client
        .write_all(b"PUT /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n")
        .await
        .expect("head");
    let (mut rx, mut tx) = client.into_split();
    let started = Instant::now();
    let sender = tokio::spawn(async move {
        let chunk = vec![b'x'; 65536];
        for _ in 0..1500 {
            if tx.write_all(&chunk).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(9).any(|w| w == b"too large") {
        let n = tokio::time::timeout(Duration::from_secs(5), rx.read(&mut buf))
            .await
            .expect("an answer within 5 s")
            .expect("read");
        assert!(
            n > 0,
            "closed before the answer: {:?}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    let answered_in = started.elapsed();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(
        answered_in < Duration::from_secs(2),
        "answer took {answered_in:?}"
    );

    let (closed, after) = watcher.await.expect("watcher");
    assert!(
        closed,
        "the upstream connection stayed open 10 s after the answer"
    );
    assert!(
        after < Duration::from_millis(1500),
        "the upstream connection closed {after:?} after the answer"
    );
    sender.abort();
    let start = Instant::now();
    while proxy.upstream_connections.live() > 0 && start.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        proxy.upstream_connections.live(),
        0,
        "no upstream connection left open or pooled"
    );
}
