//! `/bytes`, `/stream` and `/abort`: pattern content, framing and failure.

mod common;

use std::time::{Duration, Instant};

use http::Request;
use http_body_util::{BodyExt, Full};
use weir_origin::pattern;

use common::{both_clients, bounded, curl, get, header, read_body, send, sha256_hex, url};

#[tokio::test]
async fn bytes_serves_pattern_with_content_length_on_both_protocols() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        for n in [0_u64, 1, 65_535, 65_536, 1_000_003] {
            let response = get(&client, &url(&origin, &format!("/bytes/{n}"))).await;
            assert_eq!(response.status(), 200, "{proto} n={n}");
            let headers = response.headers().clone();
            assert_eq!(
                header(&headers, "content-length"),
                Some(n.to_string().as_str()),
                "{proto} n={n}"
            );
            assert_eq!(
                header(&headers, "content-type"),
                Some("application/octet-stream")
            );
            assert!(headers.get("transfer-encoding").is_none());
            let body = read_body(response).await;
            assert_eq!(body.data.len() as u64, n, "{proto}");
            assert_eq!(
                sha256_hex(&body.data),
                pattern::sha256_hex(n),
                "{proto} n={n}"
            );
        }
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn bytes_of_several_blocks_matches_pattern_hash() {
    let origin = common::start().await;
    let n = 3 * pattern::BLOCK_LEN as u64 + 12_345;
    let body =
        read_body(get(&common::h1_client(), &url(&origin, &format!("/bytes/{n}"))).await).await;
    assert_eq!(body.data.len() as u64, n);
    assert_eq!(sha256_hex(&body.data), pattern::sha256_hex(n));
    assert_eq!(body.data, pattern::bytes(0, n as usize));
    origin.shutdown().await;
}

#[tokio::test]
async fn head_bytes_announces_length_without_body() {
    let origin = common::start().await;
    let request = Request::head(url(&origin, "/bytes/4096"))
        .body(Full::default())
        .expect("request");
    let response = send(&common::h1_client(), request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(response.headers(), "content-length"), Some("4096"));
    assert!(read_body(response).await.data.is_empty());
    origin.shutdown().await;
}

#[tokio::test]
async fn stream_has_no_content_length_and_is_chunked_on_http1() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let response = get(&client, &url(&origin, "/stream/100000?chunk=1000")).await;
        assert_eq!(response.status(), 200);
        let headers = response.headers().clone();
        assert!(headers.get("content-length").is_none(), "{proto}");
        assert_eq!(
            header(&headers, "content-type"),
            Some("application/octet-stream")
        );
        if proto == "HTTP/1.1" {
            assert_eq!(header(&headers, "transfer-encoding"), Some("chunked"));
        }
        let body = read_body(response).await;
        assert_eq!(body.data.len(), 100_000);
        assert_eq!(
            sha256_hex(&body.data),
            pattern::sha256_hex(100_000),
            "{proto}"
        );
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn stream_defaults_serve_the_pattern() {
    let origin = common::start().await;
    let n = 16_384 * 5 + 7;
    let body =
        read_body(get(&common::h2_client(), &url(&origin, &format!("/stream/{n}"))).await).await;
    assert_eq!(body.data, pattern::bytes(0, n));
    origin.shutdown().await;
}

/// With 4 chunks 400 ms apart, the first must reach the client long before
/// the last is even written: the endpoint streams, it does not buffer.
#[tokio::test]
async fn stream_first_chunk_arrives_before_last_is_written() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let started = Instant::now();
        let response = get(
            &client,
            &url(&origin, "/stream/4000?chunk=1000&delay_ms=400"),
        )
        .await;
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut arrivals = Vec::new();
        let mut received = Vec::new();
        while let Some(frame) = bounded(body.frame()).await {
            if let Ok(data) = frame.expect("frame").into_data() {
                arrivals.push((started.elapsed(), data.len()));
                received.extend_from_slice(&data);
            }
        }
        assert_eq!(received, pattern::bytes(0, 4000), "{proto}");
        let (first_at, first_len) = arrivals[0];
        let (last_at, _) = arrivals[arrivals.len() - 1];
        assert_eq!(first_len, 1000, "{proto}: first frame is one chunk");
        assert!(
            first_at < Duration::from_millis(350),
            "{proto}: first chunk at {first_at:?}"
        );
        assert!(
            last_at >= Duration::from_millis(1200),
            "{proto}: last chunk at {last_at:?}"
        );
        assert!(
            last_at - first_at >= Duration::from_millis(1150),
            "{proto}: {arrivals:?}"
        );
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn abort_sends_n_bytes_then_fails_the_transfer_in_hyper_clients() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let response = get(&client, &url(&origin, "/abort/10000")).await;
        assert_eq!(response.status(), 200, "{proto}");
        assert!(
            response.headers().get("content-length").is_none(),
            "{proto}"
        );
        let mut body = response.into_body();
        let mut received = Vec::new();
        let failure = loop {
            match bounded(body.frame()).await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        received.extend_from_slice(&data);
                    }
                }
                Some(Err(err)) => break Some(err),
                None => break None,
            }
        };
        assert!(
            failure.is_some(),
            "{proto}: body ended cleanly after {} bytes",
            received.len()
        );
        assert_eq!(received, pattern::bytes(0, 10_000), "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn abort_is_a_failed_transfer_for_curl_on_both_protocols() {
    let origin = common::start().await;
    let target = url(&origin, "/abort/100000");
    for (flag, expected_code) in [("--http1.1", 18), ("--http2-prior-knowledge", 92)] {
        let output = curl(&[flag, &target]).await;
        let code = output.status.code();
        assert_ne!(code, Some(0), "{flag}: curl succeeded");
        assert_eq!(
            code,
            Some(expected_code),
            "{flag}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.stdout.len(), 100_000, "{flag}");
        assert_eq!(
            sha256_hex(&output.stdout),
            pattern::sha256_hex(100_000),
            "{flag}"
        );
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn abort_of_zero_bytes_still_fails() {
    let origin = common::start().await;
    let output = curl(&["--http1.1", &url(&origin, "/abort/0")]).await;
    assert_ne!(output.status.code(), Some(0));
    assert!(output.stdout.is_empty());
    origin.shutdown().await;
}

#[tokio::test]
async fn curl_downloads_bytes_and_stream_intact() {
    let origin = common::start().await;
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        for path in ["/bytes/300000", "/stream/300000?chunk=7000"] {
            let output = curl(&["--fail", flag, &url(&origin, path)]).await;
            assert!(
                output.status.success(),
                "{flag} {path}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            assert_eq!(
                sha256_hex(&output.stdout),
                pattern::sha256_hex(300_000),
                "{flag} {path}"
            );
        }
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn bytes_of_a_tebibyte_starts_streaming_at_once() {
    let origin = common::start().await;
    let n: u64 = 1 << 40;
    let response = get(&common::h1_client(), &url(&origin, &format!("/bytes/{n}"))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(response.headers(), "content-length"),
        Some(n.to_string().as_str())
    );
    let mut body = response.into_body();
    let first = bounded(body.frame()).await.expect("a frame").expect("data");
    let first = first.into_data().expect("data frame");
    assert!(!first.is_empty() && first.len() <= 64 * 1024);
    assert_eq!(first, pattern::bytes(0, first.len()));
    drop(body);
    origin.shutdown().await;
}
