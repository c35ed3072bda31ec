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
