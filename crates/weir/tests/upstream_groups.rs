//! Upstreams of several servers through a real proxy: round robin over
//! three origins, failover when one dies (no client error for GETs, the
//! server ejected, back after its checks pass once restarted), retries only
//! when safe, and 503 when no server is healthy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// An origin that answers every path with its name, and `/healthz` with
/// the status in `health` (200 unless changed).
struct Named {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

async fn named(name: &'static str, addr: &str, health: Arc<AtomicU16>) -> Named {
    let listener = TcpListener::bind(addr).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        // Dropped with this task, which aborts every connection's task.
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let health = Arc::clone(&health);
            conns.spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let health = Arc::clone(&health);
                    async move {
                        let mut resp =
                            Response::new(Full::new(Bytes::from_static(name.as_bytes())));
                        if req.uri().path() == "/healthz" {
                            *resp.status_mut() =
                                http::StatusCode::from_u16(health.load(Ordering::SeqCst)).unwrap();
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
        drop(conns);
    });
    Named { addr, task }
}

impl Named {
    /// Stops accepting and closes every connection (the port is free again).
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

fn group_config(servers: &[SocketAddr], upstream_extra: &str) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("\"http://{a}\"")).collect();
    ephemeral_admin(&format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nservers = [{}]\n{upstream_extra}\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"app\"\n",
        list.join(", ")
    ))
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

async fn get_text(client: &Client, url: &str) -> (u16, String) {
    let resp = client.get(url.parse().unwrap()).await.expect("response");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GETs `url` every 20 ms until it answers `status` or 5 s pass; the last answer.
async fn until_status(client: &Client, url: &str, status: u16) -> (u16, String) {
    let start = Instant::now();
    loop {
        let last = get_text(client, url).await;
        if last.0 == status || start.elapsed() > Duration::from_secs(5) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_spreads_requests_evenly_over_three_servers() {
    let ok = || Arc::new(AtomicU16::new(200));
    let a = named("a", "127.0.0.1:0", ok()).await;
    let b = named("b", "127.0.0.1:0", ok()).await;
    let c = named("c", "127.0.0.1:0", ok()).await;
    let proxy = start_proxy(&group_config(&[a.addr, b.addr, c.addr], "")).await;
    let client = client(false);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for _ in 0..300 {
        let (status, who) = get_text(&client, &proxy.url("/x")).await;
        assert_eq!(status, 200);
        *seen.entry(who).or_default() += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.values().all(|&n| n == 100), "{seen:?}");
    let text = proxy.metrics.encode().expect("metrics");
    for s in [a.addr, b.addr, c.addr] {
        let line = format!(
            "weir_upstream_attempts_total{{upstream=\"app\",server=\"{s}\",result=\"ok\"}} 100"
        );
        assert!(text.contains(&line), "{line} missing from\n{text}");
        let up = format!("weir_upstream_server_available{{upstream=\"app\",server=\"{s}\"}} 1");
        assert!(text.contains(&up), "{up}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_is_retried_around_ejected_and_back_after_its_checks() {
    let health = Arc::new(AtomicU16::new(200));
    let a = named("a", "127.0.0.1:0", Arc::clone(&health)).await;
    let b = named("b", "127.0.0.1:0", Arc::clone(&health)).await;
    let c = named("c", "127.0.0.1:0", Arc::clone(&health)).await;
    let b_addr = b.addr;
    let proxy = start_proxy(&group_config(
        &[a.addr, b.addr, c.addr],
        "[upstream.health]\npath = \"/healthz\"\ninterval = \"100ms\"\ntimeout = \"500ms\"\nrise = 2\nfall = 2\n\n\
         [upstream.outlier]\nconsecutive_failures = 2\nbase_ejection = \"200ms\"\n",
    ))
    .await;
    let client = client(false);
    b.kill().await;
    // Every GET succeeds: a refused connect is retried on another server.
    let mut seen: HashMap<String, usize> = HashMap::new();
    for _ in 0..200 {
        let (status, who) = get_text(&client, &proxy.url("/x")).await;
        assert_eq!(status, 200, "{who}");
        *seen.entry(who).or_default() += 1;
    }
    assert!(!seen.contains_key("b"), "{seen:?}");
    let text = proxy.metrics.encode().expect("metrics");
    let ejected = format!("weir_upstream_ejections_total{{upstream=\"app\",server=\"{b_addr}\"}} ");
    let line = text
        .lines()
        .find(|l| l.starts_with(&ejected))
        .expect("ejection sample");
    assert_ne!(line.trim_start_matches(&ejected), "0", "{line}");
    assert!(text.contains(&format!(
        "weir_upstream_server_available{{upstream=\"app\",server=\"{b_addr}\"}} 0"
    )));
    // Restarted on its port, it is back once two checks pass.
    let b = named("b", &b_addr.to_string(), health).await;
    let start = Instant::now();
    let mut back = false;
    while start.elapsed() < Duration::from_secs(5) && !back {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (status, who) = get_text(&client, &proxy.url("/x")).await;
        assert_eq!(status, 200);
        back = who == "b";
    }
    assert!(back, "b never came back");
    drop((a, b, c));
}

/// A server that reads a request head and closes without answering: the
/// request was sent, then the upstream died.
async fn dying() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_is_retried_after_the_upstream_died_but_a_post_is_not() {
    let good = named("good", "127.0.0.1:0", Arc::new(AtomicU16::new(200))).await;
    let (dead, _task) = dying().await;
    // Ejection off, so the dying server keeps its turn.
    let proxy = start_proxy(&group_config(
        &[dead, good.addr],
        "[upstream.outlier]\nconsecutive_failures = 0\n",
    ))
    .await;
    let client = client(false);
    for _ in 0..10 {
        let (status, who) = get_text(&client, &proxy.url("/x")).await;
        assert_eq!((status, who.as_str()), (200, "good"));
    }
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let req = Request::post(proxy.url("/x"))
            .body(Full::new(Bytes::from_static(b"payload")))
            .unwrap();
        let resp = client.request(req).await.expect("response");
        statuses.push(resp.status().as_u16());
        let _ = resp.into_body().collect().await;
    }
    // Round robin: every other POST meets the dying server and fails.
    assert_eq!(
        statuses.iter().filter(|&&s| s == 502).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        5,
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_healthy_server_answers_503() {
    let health = Arc::new(AtomicU16::new(500));
    let a = named("a", "127.0.0.1:0", Arc::clone(&health)).await;
    let b = named("b", "127.0.0.1:0", Arc::clone(&health)).await;
    let proxy = start_proxy(&group_config(
        &[a.addr, b.addr],
        "[upstream.health]\npath = \"/healthz\"\ninterval = \"50ms\"\nfall = 2\nrise = 1\n",
    ))
    .await;
    let client = client(false);
    let last = until_status(&client, &proxy.url("/x"), 503).await;
    assert_eq!(last.0, 503, "{last:?}");
    assert!(last.1.contains("no upstream server"), "{last:?}");
    // Healthy again after one passing check.
    health.store(200, Ordering::SeqCst);
    let last = until_status(&client, &proxy.url("/x"), 200).await;
    assert_eq!(last.0, 200, "{last:?}");
}

/// An origin that answers every request with `name:` and the request body
/// it read.
async fn echoing(name: &'static str) -> Named {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            conns.spawn(async move {
                let service = service_fn(move |req: Request<hyper::body::Incoming>| async move {
                    let body = req.into_body().collect().await?.to_bytes();
                    let mut out = format!("{name}:").into_bytes();
                    out.extend_from_slice(&body);
                    Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(out))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
        drop(conns);
    });
    Named { addr, task }
}

async fn put(client: &Client, url: &str, body: &'static [u8]) -> (u16, String) {
    let req = Request::put(url)
        .body(Full::new(Bytes::from_static(body)))
        .unwrap();
    let resp = client.request(req).await.expect("response");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_body_is_replayed_to_the_next_server_after_the_first_died() {
    let good = echoing("good").await;
    let (dead, _task) = dying().await;
    let proxy = start_proxy(&group_config(
        &[dead, good.addr],
        "[upstream.outlier]\nconsecutive_failures = 0\n",
    ))
    .await;
    let client = client(false);
    // Every other PUT meets the dying server first, which read the whole
    // request; its retry sends the same body again, from the tape.
    let body: &'static [u8] = b"the whole body, sent twice when it has to be";
    for _ in 0..10 {
        let (status, echo) = put(&client, &proxy.url("/x"), body).await;
        assert_eq!(status, 200, "{echo}");
        assert_eq!(echo.as_bytes(), [b"good:".as_slice(), body].concat());
    }
    let retried = proxy.metrics.retry_counter("app", "retried").get();
    assert_eq!(retried, 5, "one retry per PUT that met the dying server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_body_over_retry_body_bytes_is_not_retried() {
    let good = echoing("good").await;
    let (dead, _task) = dying().await;
    let proxy = start_proxy(&group_config(
        &[dead, good.addr],
        "[upstream.outlier]\nconsecutive_failures = 0\n[upstream.retry]\nretry_body_bytes = 16\n",
    ))
    .await;
    let client = client(false);
    let mut statuses = Vec::new();
    for _ in 0..10 {
        // 17 bytes: one over the cap, so the body is not kept.
        statuses.push(put(&client, &proxy.url("/x"), b"0123456789abcdefg").await.0);
    }
    assert_eq!(
        statuses.iter().filter(|&&s| s == 502).count(),
        5,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        5,
        "{statuses:?}"
    );
    // A body at the cap is kept and retried.
    for _ in 0..4 {
        let (status, echo) = put(&client, &proxy.url("/x"), b"0123456789abcdef").await;
        assert_eq!((status, echo.as_str()), (200, "good:0123456789abcdef"));
    }
    assert_eq!(proxy.metrics.retry_counter("app", "retried").get(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_caps_retries_under_a_storm() {
    common::access_log::access_log();
    let good = named("good", "127.0.0.1:0", Arc::new(AtomicU16::new(200))).await;
    // A port nobody listens on: every attempt there is refused.
    let refused: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let proxy = start_proxy(&group_config(
        &[refused, good.addr],
        "[upstream.outlier]\nconsecutive_failures = 0\n\
         [upstream.retry]\nbudget_percent = 10\nmin_retries_per_second = 0\n",
    ))
    .await;
    let client = client(false);
    let mut statuses = HashMap::<u16, u32>::new();
    for _ in 0..200 {
        *statuses
            .entry(get_text(&client, &proxy.url("/storm")).await.0)
            .or_default() += 1;
    }
    let retried = proxy.metrics.retry_counter("app", "retried").get();
    let refused_retries = proxy.metrics.retry_counter("app", "budget_exhausted").get();
    // Half the requests meet the refused server first; 10% of 200 requests
    // buys at most 20 retries, the rest are answered 502.
    assert_eq!(retried + refused_retries, 100, "{statuses:?}");
    assert!(
        (15..=20).contains(&retried),
        "retried {retried}, {statuses:?}"
    );
    assert_eq!(
        statuses.get(&502).copied().unwrap_or(0) as u64,
        refused_retries
    );
    assert_eq!(
        statuses.get(&200).copied().unwrap_or(0) as u64,
        100 + retried
    );
    // Each refused retry says so in its access line.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let said = common::access_log::access_log()
        .lock()
        .expect("lock")
        .iter()
        .filter(|l| l.get("path").map(String::as_str) == Some("/storm"))
        .filter(|l| l.get("retry").map(String::as_str) == Some("budget_exhausted"))
        .count();
    assert_eq!(said as u64, refused_retries);
}

/// A server that answers every request with a head and 5 of the 100
/// bytes its `Content-Length` promises, then closes: it fails mid-body.
async fn truncating() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello")
                    .await;
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_mid_body_counts_as_failing_and_is_ejected() {
    let good = named("good", "127.0.0.1:0", Arc::new(AtomicU16::new(200))).await;
    let (bad, _task) = truncating().await;
    let proxy = start_proxy(&group_config(
        &[bad, good.addr],
        "[upstream.outlier]\nconsecutive_failures = 2\nbase_ejection = \"30s\"\n\n\
         [upstream.retry]\nattempts = 1\n",
    ))
    .await;
    let client = client(false);
    let mut truncated = 0;
    for _ in 0..20 {
        let resp = client
            .get(proxy.url("/x").parse().unwrap())
            .await
            .expect("head");
        if resp.into_body().collect().await.is_err() {
            truncated += 1;
        }
    }
    // Round robin sends the first and third request to `bad`; two failed
    // bodies in a row eject it, and the rest go to `good`.
    assert_eq!(truncated, 2, "bodies cut short");
    let text = proxy.metrics.encode().expect("metrics");
    let ejections = format!("weir_upstream_ejections_total{{upstream=\"app\",server=\"{bad}\"}} 1");
    assert!(
        text.contains(&ejections),
        "{ejections} missing from\n{text}"
    );
    let failed = format!(
        "weir_upstream_attempts_total{{upstream=\"app\",server=\"{bad}\",result=\"failed\"}} 2"
    );
    assert!(text.contains(&failed), "{failed} missing");
    drop(good);
}
