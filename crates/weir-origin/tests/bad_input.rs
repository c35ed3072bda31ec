//! Malformed and out-of-range input: `400` with a plain-text reason;
//! wrong methods: `405`.

mod common;

use std::time::{Duration, Instant};

use http::Request;
use http_body_util::Full;

use common::{assert_bad_requests, both_clients, get, h1_client, header, read_text, send, url};

/// `(path, words the reason must contain)`.
const BAD: &[(&str, &str)] = &[
    ("/bytes/abc", "not a decimal number"),
    ("/bytes/", "not a decimal number"),
    ("/bytes/-1", "not a decimal number"),
    ("/bytes/+5", "not a decimal number"),
    ("/bytes/1.5", "not a decimal number"),
    ("/bytes/0x10", "not a decimal number"),
    ("/bytes/%2010", "not a decimal number"),
    ("/bytes/99999999999999999999999", "not a decimal number"),
    ("/bytes/1099511627777", "out of range"),
    ("/bytes/10?x=1", "unknown query parameter"),
    ("/stream/10?chunk=0", "out of range"),
    ("/stream/10?chunk=1048577", "out of range"),
    ("/stream/10?chunk=", "not a decimal number"),
    ("/stream/10?delay_ms=300001", "out of range"),
    ("/stream/10?chunk=1&chunk=2", "more than once"),
    ("/stream/10?chunks=5", "unknown query parameter"),
    ("/stream/1099511627777", "out of range"),
    ("/status/abc", "not a decimal number"),
    ("/status/99", "out of range"),
    ("/status/100", "informational"),
    ("/status/199", "informational"),
    ("/status/600", "out of range"),
    ("/status/65736", "out of range"),
    ("/delay/300001", "out of range"),
    ("/delay/soon", "not a decimal number"),
    ("/sse?count=1000001", "out of range"),
    ("/sse?interval_ms=-1", "not a decimal number"),
    ("/sse?count=1&count=2", "more than once"),
    ("/page?chunks=1", "out of range"),
    ("/page?chunks=10001", "out of range"),
    ("/page?chunks=", "not a decimal number"),
    ("/page?delay_ms=300001", "out of range"),
    ("/page?pad=1048577", "out of range"),
    ("/page?pad=-1", "not a decimal number"),
    ("/page?pad=1&pad=2", "more than once"),
    ("/page?chunk=5", "unknown query parameter"),
    ("/trailers?x=1", "unknown query parameter"),
    ("/abort/1099511627777", "out of range"),
    ("/abort/x", "not a decimal number"),
];

#[tokio::test]
async fn bad_numbers_and_parameters_are_400_with_reason() {
    let origin = common::start().await;
    for (proto, client) in both_clients() {
        assert_bad_requests(&client, &origin, proto, BAD).await;
    }
    origin.shutdown().await;
}

#[tokio::test]
async fn bad_delay_is_refused_without_waiting() {
    let origin = common::start().await;
    let started = Instant::now();
    let response = get(&h1_client(), &url(&origin, "/delay/300001")).await;
    assert_eq!(response.status(), 400);
    assert!(started.elapsed() < Duration::from_secs(2));
    origin.shutdown().await;
}

#[tokio::test]
async fn long_garbage_is_quoted_shortly() {
    let origin = common::start().await;
    let garbage = "z".repeat(2000);
    let response = get(&h1_client(), &url(&origin, &format!("/bytes/{garbage}"))).await;
    assert_eq!(response.status(), 400);
    assert!(read_text(response).await.len() < 200);
    origin.shutdown().await;
}

#[tokio::test]
async fn endpoints_other_than_echo_refuse_other_methods() {
    let origin = common::start().await;
    for path in [
        "/bytes/1",
        "/stream/1",
        "/status/200",
        "/delay/0",
        "/sse",
        "/page",
        "/trailers",
        "/abort/1",
        "/fragment/a",
    ] {
        let request = Request::post(url(&origin, path))
            .body(Full::default())
            .expect("request");
        let response = send(&h1_client(), request).await;
        assert_eq!(response.status(), 405, "{path}");
        assert_eq!(header(response.headers(), "allow"), Some("GET, HEAD"));
    }
    origin.shutdown().await;
}

/// With the test endpoints off, `/fragment`'s test-only parameters are a
/// `400` that says why (the endpoints themselves are `404`, tested through
/// the proxy in `weir`'s reload tests).
#[tokio::test]
async fn test_only_fragment_parameters_are_400_when_test_endpoints_are_off() {
    let config = weir_origin::OriginConfig {
        test_endpoints: false,
        ..weir_origin::OriginConfig::new(common::fixtures_dir())
    };
    let origin = weir_origin::spawn(([127, 0, 0, 1], 0).into(), config)
        .await
        .expect("spawn");
    const OFF: &[(&str, &str)] = &[
        ("/fragment/nav?bytes=1", "for tests only"),
        ("/fragment/nav?fail_after=0", "for tests only"),
        ("/fragment/nav?include=/fragment/nav", "for tests only"),
        (
            "/fragment/nav?status=302&header=Location:%20https://evil.example/",
            "for tests only",
        ),
    ];
    for (proto, client) in both_clients() {
        assert_bad_requests(&client, &origin, proto, OFF).await;
    }
    let response = get(
        &h1_client(),
        &url(&origin, "/fragment/nav?delay_ms=1&chunks=2"),
    )
    .await;
    assert_eq!(response.status(), 200);
    // A site's fragment sets its fields from `fragments/{name}.headers`.
    let response = get(&h1_client(), &url(&origin, "/fragment/header")).await;
    assert_eq!(response.status(), 200);
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok());
    assert_eq!(cookie, Some("tidewater_cart=2; Path=/"));
}
