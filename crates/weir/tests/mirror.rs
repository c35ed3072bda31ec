//! `[route.mirror]` and `[route.body_log]` on real sockets: the shadow
//! upstream gets a faithful copy; a slow or dead one never delays or fails
//! the primary request; the body log holds the first bytes and no more.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::mpsc;
use weir_proxy::mirror::MirrorOutcome;

/// What a recording upstream saw of one request.
#[derive(Debug)]
struct Seen {
    method: String,
    path_and_query: String,
    body_sha256: String,
    body_len: usize,
    header_x_test: Option<String>,
}

/// An HTTP/1.1 upstream that records each request (body hashed) and answers `204`.
async fn recording_upstream() -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let _ = tx.send(Seen {
                            method: parts.method.to_string(),
                            path_and_query: parts
                                .uri
                                .path_and_query()
                                .map(ToString::to_string)
                                .unwrap_or_default(),
                            body_sha256: sha256_hex(&body),
                            body_len: body.len(),
                            header_x_test: parts
                                .headers
                                .get("x-test")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned),
                        });
                        Ok::<_, Infallible>(
                            hyper::Response::builder()
                                .status(204)
                                .body(Full::new(Bytes::new()))
                                .expect("response"),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, rx)
}

/// An upstream that reads the request head, then neither reads nor answers
/// for `stall`: a stalled shadow.
async fn stalled_upstream(stall: Duration) -> SocketAddr {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                tokio::time::sleep(stall).await;
                drop(s);
            });
        }
    });
    addr
}

fn mirror_extra(shadow: SocketAddr, settings: &str) -> String {
    format!(
        "[route.mirror]\nupstream = \"shadow\"\n{settings}\n\n[[upstream]]\nname = \"shadow\"\nurl = \"http://{shadow}\"\n"
    )
}

async fn post(url: &str, body: impl Into<Bytes>) -> serde_json::Value {
    let req = Request::post(url)
        .header("x-test", "copied")
        .body(Full::new(body.into()))
        .expect("request");
    let resp = client(false).request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&body).expect("echo json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shadow_gets_a_faithful_copy_of_each_request() {
    let origin = start_origin().await;
    let (shadow, mut seen) = recording_upstream().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "",
        "",
        &mirror_extra(shadow, ""),
    ))
    .await;
    let data = weir_origin::pattern::bytes(3, 1024 * 1024);
    let echo = post(&proxy.url("/echo?a=1"), data.clone()).await;
    assert_eq!(echo["body_sha256"], sha256_hex(&data));
    let copy = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .expect("the copy arrives")
        .expect("a request");
    assert_eq!(copy.method, "POST");
    assert_eq!(copy.path_and_query, "/echo?a=1");
    assert_eq!(copy.body_len, data.len());
    assert_eq!(copy.body_sha256, sha256_hex(&data));
    assert_eq!(copy.header_x_test.as_deref(), Some("copied"));

    // A request without a body is copied too.
    let (status, _, _) = get(&proxy.url("/index.html"), false).await;
    assert_eq!(status, 200);
    let copy = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .expect("the copy arrives")
        .expect("a request");
    assert_eq!((copy.method.as_str(), copy.body_len), ("GET", 0));
    let stats = proxy.metrics.clone();
    assert!(
        eventually(Duration::from_secs(5), || stats
            .mirror_request_count(MirrorOutcome::Ok)
            == 2)
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_shadow_never_delays_the_primary_and_is_detached() {
    let origin = start_origin().await;
    let shadow = stalled_upstream(Duration::from_secs(20)).await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "",
        "",
        &mirror_extra(shadow, "hwm = 4\ntimeout = \"10s\""),
    ))
    .await;
    // 32 MB: far more than the socket buffers towards the stalled shadow.
    let data = weir_origin::pattern::bytes(5, 32 * 1024 * 1024);
    let started = Instant::now();
    let echo = post(&proxy.url("/echo"), data.clone()).await;
    let took = started.elapsed();
    assert_eq!(echo["body_sha256"], sha256_hex(&data));
    assert_eq!(echo["body_len"], data.len());
    // The shadow holds its connection for 20 s: a primary that waited for
    // it would take at least that.
    assert!(took < Duration::from_secs(10), "primary took {took:?}");
    let stats = proxy.metrics.clone();
    assert!(
        eventually(Duration::from_secs(5), || stats
            .mirror_request_count(MirrorOutcome::Detached)
            == 1)
        .await,
        "outcomes: detached {}, timeout {}, error {}",
        stats.mirror_request_count(MirrorOutcome::Detached),
        stats.mirror_request_count(MirrorOutcome::Timeout),
        stats.mirror_request_count(MirrorOutcome::Error)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shadow_never_fails_the_primary() {
    let origin = start_origin().await;
    let dead: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "",
        "",
        &mirror_extra(dead, ""),
    ))
    .await;
    let data = b"small body".to_vec();
    let echo = post(&proxy.url("/echo"), data.clone()).await;
    assert_eq!(echo["body_len"], data.len());
    let stats = proxy.metrics.clone();
    assert!(
        eventually(Duration::from_secs(5), || stats
            .mirror_request_count(MirrorOutcome::Error)
            == 1)
        .await
    );
    assert_eq!(stats.mirror_request_count(MirrorOutcome::Ok), 0);
}

#[test]
fn body_log_writes_the_first_bytes_of_each_body_and_no_more() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let origin = rt.block_on(start_origin());
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{}\"\n\n\
         [[route]]\nupstream = \"app\"\n[route.body_log]\nrequest_bytes = 5\nresponse_bytes = 12\n",
        origin.addr
    );
    let weir = WeirProcess::start(&config);
    let out = curl(&["--data-binary", "hello, world\n\x01", &weir.url("/echo")]);
    assert!(out.status.success());
    let echoed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(echoed.contains("\"body_len\":14"), "{echoed}");
    std::thread::sleep(Duration::from_millis(300));
    let log = weir.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "weir::body")
        .collect();
    let request = lines
        .iter()
        .find(|l| l["direction"] == "request")
        .unwrap_or_else(|| panic!("no request body line in {log}"));
    assert_eq!(request["body"], "hello");
    assert_eq!(request["captured"], 5);
    assert_eq!(request["complete"], false);
    assert_eq!(request["path"], "/echo");
    let response = lines
        .iter()
        .find(|l| l["direction"] == "response")
        .unwrap_or_else(|| panic!("no response body line in {log}"));
    assert_eq!(response["captured"], 12);
    assert_eq!(response["body"].as_str().map(str::len), Some(12));
    assert!(
        echoed.starts_with(response["body"].as_str().expect("text")),
        "{response}"
    );
}

/// Writes `total` bytes as a chunked upload to `addr` (a raw HTTP/1.1
/// request), then reads the response; returns it as text.
fn chunked_upload(addr: SocketAddr, path: &str, total: u64, limit: Duration) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(limit)).expect("timeout");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: weir.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .expect("head");
    let chunk = vec![b'm'; 256 * 1024];
    let mut sent = 0u64;
    while sent < total {
        let n = (total - sent).min(chunk.len() as u64) as usize;
        write!(s, "{n:x}\r\n").expect("size");
        s.write_all(&chunk[..n]).expect("data");
        s.write_all(b"\r\n").expect("crlf");
        sent += n as u64;
    }
    s.write_all(b"0\r\n\r\n").expect("end");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_1gib_upload_and_a_1gib_download_with_a_stalled_mirror_keep_rss_under_64mb() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let origin = rt.block_on(start_origin());
    let shadow = rt.block_on(stalled_upstream(Duration::from_secs(120)));
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n\n\
         [[upstream]]\nname = \"app\"\nurl = \"http://{}\"\n\n[[upstream]]\nname = \"shadow\"\nurl = \"http://{shadow}\"\n\n\
         [[route]]\nupstream = \"app\"\n[route.mirror]\nupstream = \"shadow\"\ntimeout = \"60s\"\n",
        origin.addr
    );
    let weir = WeirProcess::start(&config);
    const GIB: u64 = 1 << 30;

    // Upload: the copy's body branch stalls at once (the shadow never
    // reads); the primary must still stream the whole GiB to /echo.
    let started = Instant::now();
    let reply = chunked_upload(weir.addr, "/echo", GIB, Duration::from_secs(120));
    let upload_took = started.elapsed();
    assert!(
        reply.starts_with("HTTP/1.1 200"),
        "{}",
        &reply[..reply.len().min(300)]
    );
    assert!(
        reply.contains(&format!("\"body_len\":{GIB}")),
        "{}",
        &reply[..reply.len().min(600)]
    );

    // Download: the copy of a GET has no body; the shadow never answers.
    let started = Instant::now();
    let out = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        &weir.url(&format!("/bytes/{GIB}")),
    ]);
    let download_took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), GIB.to_string());

    let peak = weir.peak_rss();
    eprintln!(
        "stalled mirror: 1 GiB upload in {upload_took:?}, 1 GiB download in {download_took:?}; \
         proxy peak RSS {:.1} MB",
        peak as f64 / 1e6
    );
    assert!(peak < 64 * 1024 * 1024, "peak RSS {peak} bytes");
}
