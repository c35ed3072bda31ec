//! `/status`, `/delay`, `/sse`, `/trailers` and `/echo`.

mod common;

use std::future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use weir_origin::pattern;

use common::{
    assert_bodiless, both_clients, bounded, get, h1_client, h2_client, header, raw_exchange,
    read_body, read_text, send, sha256_hex, url,
};

#[tokio::test]
async fn status_responds_with_requested_code_and_reason() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        for (code, text) in [
            (200, "200 OK\n"),
            (201, "201 Created\n"),
            (404, "404 Not Found\n"),
            (418, "418 I'm a teapot\n"),
            (503, "503 Service Unavailable\n"),
            (599, "599\n"),
        ] {
            let response = get(&client, &url(&origin, &format!("/status/{code}"))).await;
            assert_eq!(response.status().as_u16(), code, "{proto}");
            assert_eq!(
                header(response.headers(), "content-type"),
                Some("text/plain; charset=utf-8")
            );
            assert_eq!(read_text(response).await, text, "{proto}");
        }
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn status_204_205_and_304_have_no_body() {
    let origin = common::start().await;
    for code in [204_u16, 205, 304] {
        assert_bodiless(&origin, &format!("/status/{code}"), code).await;
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn delay_waits_before_sending_headers() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let started = Instant::now();
        let response = get(&client, &url(&origin, "/delay/300")).await;
        let head_at = started.elapsed();
        assert_eq!(response.status(), 200);
        assert!(
            head_at >= Duration::from_millis(300),
            "{proto}: head after {head_at:?}"
        );
        assert_eq!(read_text(response).await, "ok\n");
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn delay_zero_answers_at_once() {
    let origin = common::start().await;
    let started = Instant::now();
    let response = get(&h1_client(), &url(&origin, "/delay/0")).await;
    assert_eq!(response.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(2));
    origin.shutdown().await;
}

#[tokio::test]
async fn sse_sends_numbered_events_spaced_in_time() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let started = Instant::now();
        let response = get(&client, &url(&origin, "/sse?count=3&interval_ms=250")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            header(response.headers(), "content-type"),
            Some("text/event-stream")
        );
        assert_eq!(
            header(response.headers(), "cache-control"),
            Some("no-cache")
        );
        assert!(response.headers().get("content-length").is_none());
        let mut body = response.into_body();
        let mut events = Vec::new();
        while let Some(frame) = bounded(body.frame()).await {
            if let Ok(data) = frame.expect("frame").into_data() {
                events.push((
                    started.elapsed(),
                    String::from_utf8(data.to_vec()).expect("utf-8"),
                ));
            }
        }
        let texts: Vec<&str> = events.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            texts,
            [
                "id: 1\ndata: event 1\n\n",
                "id: 2\ndata: event 2\n\n",
                "id: 3\ndata: event 3\n\n"
            ],
            "{proto}"
        );
        assert!(
            events[0].0 < Duration::from_millis(200),
            "{proto}: first at {:?}",
            events[0].0
        );
        assert!(
            events[2].0 - events[0].0 >= Duration::from_millis(500),
            "{proto}: {events:?}"
        );
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn sse_defaults_to_ten_events() {
    let origin = common::start().await;
    let text = read_text(get(&h2_client(), &url(&origin, "/sse?interval_ms=0")).await).await;
    assert_eq!(text.matches("data: event ").count(), 10);
    assert!(text.ends_with("id: 10\ndata: event 10\n\n"));
    origin.shutdown().await;
}

#[tokio::test]
async fn trailers_arrive_after_body_on_http2() {
    let origin = common::start().await;
    let response = get(&h2_client(), &url(&origin, "/trailers")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(response.headers(), "trailer"),
        Some("x-body-sha256, x-trailer-test")
    );
    let body = read_body(response).await;
    let trailers = body.trailers.expect("trailers");
    assert_eq!(
        header(&trailers, "x-body-sha256"),
        Some(sha256_hex(&body.data).as_str())
    );
    assert_eq!(header(&trailers, "x-trailer-test"), Some("ok"));
    assert!(
        body.frames >= 4,
        "several data frames then trailers: {}",
        body.frames
    );
    origin.shutdown().await;
}

#[tokio::test]
async fn trailers_are_sent_on_http1_when_te_trailers_is_asked() {
    let origin = common::start().await;
    let reply = raw_exchange(
        origin.local_addr(),
        b"GET /trailers HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8(reply).expect("utf-8");
    let (head, chunked) = text.split_once("\r\n\r\n").expect("head");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(
        head.contains("trailer: x-body-sha256, x-trailer-test"),
        "{head}"
    );
    let (body, trailer_block) = decode_chunked(chunked);
    let expected = format!(
        "x-body-sha256: {}\r\nx-trailer-test: ok\r\n\r\n",
        sha256_hex(body.as_bytes())
    );
    assert_eq!(trailer_block, expected);
    assert!(body.starts_with("Weir trailers test"));
    origin.shutdown().await;
}

#[tokio::test]
async fn trailers_are_dropped_on_http1_without_te_trailers() {
    let origin = common::start().await;
    let reply = raw_exchange(
        origin.local_addr(),
        b"GET /trailers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8(reply).expect("utf-8");
    let (_, chunked) = text.split_once("\r\n\r\n").expect("head");
    let (body, trailer_block) = decode_chunked(chunked);
    assert_eq!(trailer_block, "\r\n");
    assert!(body.ends_with("the trailers follow.\n"));
    origin.shutdown().await;
}

/// Splits an HTTP/1.1 chunked body into its data and what follows the
/// last (zero-size) chunk line.
fn decode_chunked(mut rest: &str) -> (String, String) {
    let mut body = String::new();
    loop {
        let (size_line, after) = rest.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size_line.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return (body, after.to_owned());
        }
        body.push_str(&after[..size]);
        rest = after[size..]
            .strip_prefix("\r\n")
            .expect("chunk ends with CRLF");
    }
}

/// Parses an `/echo` reply.
async fn echo_json(response: http::Response<hyper::body::Incoming>) -> Value {
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(response.headers(), "content-type"),
        Some("application/json")
    );
    serde_json::from_slice(&read_body(response).await.data).expect("JSON")
}

#[tokio::test]
async fn echo_reports_request_line_headers_and_body_digest() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        let body = pattern::bytes(0, 200_000);
        let request = Request::post(url(&origin, "/echo?x=1&y=2"))
            .header("x-multi", "one")
            .header("x-single", "solo")
            .header("x-multi", "two")
            .body(Full::new(body.clone()))
            .expect("request");
        let json = echo_json(send(&client, request).await).await;
        assert_eq!(json["method"], "POST", "{proto}");
        let uri = json["uri"].as_str().expect("uri");
        assert!(uri.ends_with("/echo?x=1&y=2"), "{proto}: {uri}");
        let version = if proto == "HTTP/2" {
            "HTTP/2.0"
        } else {
            "HTTP/1.1"
        };
        assert_eq!(json["version"], version);
        assert_eq!(json["body_len"], 200_000);
        assert_eq!(json["body_sha256"], pattern::sha256_hex(200_000));
        assert!(json.get("trailers").is_none(), "{proto}: {json}");
        let headers: Vec<(String, String)> = json["headers"]
            .as_array()
            .expect("headers array")
            .iter()
            .map(|pair| {
                (
                    pair[0].as_str().expect("name").to_owned(),
                    pair[1].as_str().expect("value").to_owned(),
                )
            })
            .collect();
        let multi: Vec<&str> = headers
            .iter()
            .filter(|(n, _)| n == "x-multi")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(multi, ["one", "two"], "{proto}");
        assert!(headers.contains(&("x-single".to_owned(), "solo".to_owned())));
        assert!(headers.contains(&("content-length".to_owned(), "200000".to_owned())));
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn echo_accepts_any_method_and_empty_body() {
    let origin = common::start().await;
    for method in ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let request = Request::builder()
            .method(method)
            .uri(url(&origin, "/echo"))
            .body(Full::default())
            .expect("request");
        let json = echo_json(send(&h1_client(), request).await).await;
        assert_eq!(json["method"], method);
        assert_eq!(json["body_len"], 0);
        assert_eq!(json["body_sha256"], pattern::sha256_hex(0));
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn echo_lists_request_trailers_on_http2() {
    let origin = common::start().await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_static("abc123"));
    let body = Full::new(Bytes::from_static(b"hello trailers"))
        .with_trailers(future::ready(Some(Ok(trailers))));
    let request = Request::put(url(&origin, "/echo"))
        .body(body)
        .expect("request");
    let response = bounded(client.request(request)).await.expect("response");
    let json = echo_json(response).await;
    assert_eq!(json["body_len"], 14);
    assert_eq!(json["body_sha256"], sha256_hex(b"hello trailers"));
    assert_eq!(
        json["trailers"],
        serde_json::json!([["x-checksum", "abc123"]])
    );
    origin.shutdown().await;
}

#[tokio::test]
async fn echo_lists_request_trailers_of_chunked_http1_body() {
    let origin = common::start().await;
    let reply = raw_exchange(
        origin.local_addr(),
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 42\r\n\r\n",
    )
    .await;
    let text = String::from_utf8(reply).expect("utf-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let json: Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(json["body_len"], 11);
    assert_eq!(json["body_sha256"], sha256_hex(b"hello world"));
    assert_eq!(json["trailers"], serde_json::json!([["x-sum", "42"]]));
    assert!(
        json["headers"]
            .as_array()
            .expect("headers")
            .contains(&serde_json::json!(["transfer-encoding", "chunked"]))
    );
    origin.shutdown().await;
}

/// `HEAD` gets the head `GET` would get and no body, on both protocols
/// (curl treats any DATA frame on an HTTP/2 `HEAD` stream as an error).
#[tokio::test]
async fn head_gets_headers_without_body_on_every_endpoint() {
    let origin = common::start().await;
    let cases = [
        ("/bytes/1000", "200", Some("1000")),
        ("/stream/1000?chunk=10&delay_ms=100", "200", None),
        ("/status/418", "418", Some("17")),
        ("/status/204", "204", None),
        ("/delay/10", "200", Some("3")),
        ("/echo", "200", None),
        ("/sse?count=5&interval_ms=1000", "200", None),
        ("/trailers", "200", None),
        ("/abort/1000", "200", None),
        ("/fragment/a", "200", Some("47")),
        (
            "/fragment/a?gzip=1&chunks=3&chunk_delay_ms=1000",
            "200",
            None,
        ),
        ("/fragment/a?status=204", "204", None),
        ("/bytes/x", "400", None),
        ("/index.html", "200", None),
    ];
    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        for (path, status, length) in cases {
            let output = common::curl(&[flag, "--head", &url(&origin, path)]).await;
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{flag} HEAD {path}: {stderr}");
            let head = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
            let status_line = head.lines().next().unwrap_or_default();
            assert!(
                status_line.contains(&format!(" {status}")),
                "{flag} {path}: {head}"
            );
            if let Some(length) = length {
                assert!(
                    head.contains(&format!("content-length: {length}\r\n")),
                    "{flag} {path}: {head}"
                );
            }
        }
    }
    origin.shutdown().await;
}
