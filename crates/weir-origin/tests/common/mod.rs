//! Helpers shared by the integration tests: a running origin on
//! 127.0.0.1, HTTP/1.1 and HTTP/2 clients, raw sockets and curl.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_origin::{OriginConfig, OriginHandle};

/// Upper bound for any single test step.
pub const STEP_LIMIT: Duration = Duration::from_secs(15);

/// A pooled client over plain TCP.
pub type TestClient = Client<HttpConnector, Full<Bytes>>;

/// The repository's `fixtures/` directory.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Starts an origin serving `fixtures/` on 127.0.0.1 with a free port.
pub async fn start() -> OriginHandle {
    let addr: SocketAddr = ([127, 0, 0, 1], 0).into();
    let config = OriginConfig::new(fixtures_dir());
    bounded(weir_origin::spawn(addr, config))
        .await
        .expect("origin starts")
}

/// Awaits `fut`, failing the test if it takes longer than [`STEP_LIMIT`].
pub async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(STEP_LIMIT, fut)
        .await
        .expect("test step exceeded its time limit")
}

/// `http://{addr}{path}`.
pub fn url(origin: &OriginHandle, path: &str) -> String {
    format!("http://{}{path}", origin.local_addr())
}

/// A client that speaks HTTP/1.1 only.
pub fn h1_client() -> TestClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A client that speaks HTTP/2 with prior knowledge only.
pub fn h2_client() -> TestClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// Both clients with a label, for tests that run on each protocol.
pub fn both_clients() -> [(&'static str, TestClient); 2] {
    [("HTTP/1.1", h1_client()), ("HTTP/2", h2_client())]
}

/// Sends `GET {url}` with an empty body.
pub async fn get(client: &TestClient, url: &str) -> Response<Incoming> {
    let request = Request::get(url)
        .body(Full::default())
        .expect("valid request");
    send(client, request).await
}

/// Sends `request`, bounded in time.
pub async fn send(client: &TestClient, request: Request<Full<Bytes>>) -> Response<Incoming> {
    bounded(client.request(request))
        .await
        .expect("request succeeds")
}

/// A response body read to its end: data and trailers.
pub struct ReadBody {
    pub data: Bytes,
    pub trailers: Option<HeaderMap>,
    pub frames: usize,
}

/// Reads the body of `response` to its end, bounded in time.
pub async fn read_body(response: Response<Incoming>) -> ReadBody {
    let mut body = response.into_body();
    let mut data = Vec::new();
    let mut trailers = None;
    let mut frames = 0;
    while let Some(frame) = bounded(body.frame()).await {
        let frame = frame.expect("body frame");
        frames += 1;
        match frame.into_data() {
            Ok(chunk) => data.extend_from_slice(&chunk),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    ReadBody {
        data: Bytes::from(data),
        trailers,
        frames,
    }
}

/// Reads the body of `response` as UTF-8 text.
pub async fn read_text(response: Response<Incoming>) -> String {
    String::from_utf8(read_body(response).await.data.to_vec()).expect("UTF-8 body")
}

/// SHA-256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Value of header `name` as a string.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Writes `request` verbatim on a new connection to `addr` and returns
/// everything the server sends until it closes (send `Connection: close`).
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    bounded(async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request).await.expect("write request");
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.expect("read reply");
        reply
    })
    .await
}

/// The status code of a raw HTTP/1.1 reply.
pub fn raw_status(reply: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(reply);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"))
}

/// Runs `curl` with `args` (plus `--silent --show-error --max-time 10`).
pub async fn curl(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    bounded(tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["--silent", "--show-error", "--max-time", "10"])
            .args(&args)
            .output()
            .expect("the curl binary runs")
    }))
    .await
    .expect("curl task")
}

/// `GET path` over a raw HTTP/1.1 connection, asserting the reply has
/// status `code`, no body and no `Content-Type` (RFC 9110 §15.3.5,
/// §15.4.5: 204, 205 and 304 carry no content).
pub async fn assert_bodiless(origin: &OriginHandle, path: &str, code: u16) {
    let reply = raw_exchange(
        origin.local_addr(),
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with(&format!("HTTP/1.1 {code} ")), "{text}");
    let (head, body) = text.split_once("\r\n\r\n").expect("head ends");
    assert!(body.is_empty(), "{code}: body {body:?}");
    assert!(
        !head.to_ascii_lowercase().contains("content-type"),
        "{head}"
    );
}

/// GETs each `(path, reason)` of `cases` and asserts a `400` whose
/// one-line plain-text body contains `reason`.
pub async fn assert_bad_requests(
    client: &TestClient,
    origin: &OriginHandle,
    proto: &str,
    cases: &[(&str, &str)],
) {
    for (path, reason) in cases {
        let response = get(client, &url(origin, path)).await;
        assert_eq!(response.status(), 400, "{proto} {path}");
        assert_eq!(
            header(response.headers(), "content-type"),
            Some("text/plain; charset=utf-8")
        );
        let text = read_text(response).await;
        assert!(text.contains(reason), "{proto} {path}: {text:?}");
        assert!(
            text.ends_with('\n') && text.lines().count() == 1,
            "{text:?}"
        );
    }
}
