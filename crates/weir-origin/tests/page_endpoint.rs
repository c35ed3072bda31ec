//! `/page`: an HTML page streamed in paced data frames.

mod common;

use std::time::{Duration, Instant};

use http::Request;
use http_body_util::{BodyExt, Full};

use common::{both_clients, bounded, get, h2_client, header, read_body, read_text, send, url};

const START: &str = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Weir streamed page</title></head>\n<body>\n";
const END: &str = "</body>\n</html>\n";

/// The page `/page?chunks={n}&pad={pad}` must send, frame by frame.
fn expected_frames(n: u64, pad: usize) -> Vec<String> {
    let filler: String = "lorem ipsum ".chars().cycle().take(pad).collect();
    let mut frames = vec![START.to_owned()];
    for k in 2..n {
        frames.push(format!(
            "<section id=\"s{k}\"><p>chunk {k} of {n}</p>{filler}</section>\n"
        ));
    }
    frames.push(END.to_owned());
    frames
}

#[tokio::test]
async fn page_sends_one_data_frame_per_chunk_with_html_headers() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let response = get(&client, &url(&origin, "/page?chunks=5&delay_ms=20&pad=30")).await;
        assert_eq!(response.status(), 200, "{proto}");
        let headers = response.headers().clone();
        assert_eq!(
            header(&headers, "content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(header(&headers, "cache-control"), Some("no-store"));
        assert!(headers.get("content-length").is_none(), "{proto}");
        if proto == "HTTP/1.1" {
            assert_eq!(header(&headers, "transfer-encoding"), Some("chunked"));
        }
        let mut body = response.into_body();
        let mut frames = Vec::new();
        while let Some(frame) = bounded(body.frame()).await {
            if let Ok(data) = frame.expect("frame").into_data() {
                frames.push(String::from_utf8(data.to_vec()).expect("utf-8"));
            }
        }
        assert_eq!(frames, expected_frames(5, 30), "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn page_defaults_to_twenty_chunks_without_padding() {
    let origin = common::start().await;
    let text = read_text(get(&h2_client(), &url(&origin, "/page?delay_ms=0")).await).await;
    assert_eq!(text, expected_frames(20, 0).concat());
    origin.shutdown().await;
}

#[tokio::test]
async fn page_of_two_chunks_and_large_padding() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let two = read_text(get(&client, &url(&origin, "/page?chunks=2&delay_ms=0")).await).await;
        assert_eq!(two, format!("{START}{END}"), "{proto}");
        let path = "/page?chunks=4&delay_ms=0&pad=1048576";
        let body = read_body(get(&client, &url(&origin, path)).await).await;
        assert_eq!(
            body.data,
            expected_frames(4, 1 << 20).concat().as_bytes(),
            "{proto}"
        );
    }
    origin.shutdown().await;
}

/// With 2 s between frames, the first frame reaches the client while the
/// second is not even written: the endpoint streams, it does not buffer.
/// Only bounds that cannot flake are checked: the first frame within 1 s,
/// the second one absent before 2 s have passed since the request.
#[tokio::test]
async fn page_first_frame_arrives_before_the_delay_elapses() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let started = Instant::now();
        let response = get(&client, &url(&origin, "/page?chunks=2&delay_ms=2000")).await;
        assert_eq!(response.status(), 200, "{proto}");
        let mut body = response.into_body();
        let first = tokio::time::timeout(Duration::from_secs(1), body.frame())
            .await
            .expect("first frame within 1 s")
            .expect("a frame")
            .expect("frame ok")
            .into_data()
            .expect("data frame");
        assert_eq!(first, START.as_bytes(), "{proto}");
        // A zero timeout polls the frame future once: it must be pending,
        // since the server writes the next frame 2 s after the first.
        let second_ready = tokio::time::timeout(Duration::ZERO, body.frame())
            .await
            .is_ok();
        let checked_at = started.elapsed();
        assert!(checked_at < Duration::from_millis(1900), "{proto}");
        assert!(!second_ready, "{proto}: second frame already there");
        let rest = read_body(http::Response::new(body)).await;
        assert_eq!(rest.data, END.as_bytes(), "{proto}");
        assert!(started.elapsed() >= Duration::from_secs(2), "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn head_page_has_the_get_head_and_no_body() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let request = Request::head(url(&origin, "/page?chunks=10&delay_ms=5000"))
            .body(Full::default())
            .expect("request");
        let started = Instant::now();
        let response = send(&client, request).await;
        assert_eq!(response.status(), 200, "{proto}");
        assert_eq!(
            header(response.headers(), "content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(
            header(response.headers(), "cache-control"),
            Some("no-store")
        );
        assert!(response.headers().get("content-length").is_none());
        assert!(read_body(response).await.data.is_empty(), "{proto}");
        // 9 pauses of 5 s would be 45 s; no body means no pauses.
        assert!(started.elapsed() < Duration::from_secs(10), "{proto}");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn head_page_with_bad_parameters_is_400() {
    let origin = common::start().await;
    let request = Request::head(url(&origin, "/page?chunks=1"))
        .body(Full::default())
        .expect("request");
    let response = send(&common::h1_client(), request).await;
    assert_eq!(response.status(), 400);
    assert!(read_body(response).await.data.is_empty());
    origin.shutdown().await;
}
