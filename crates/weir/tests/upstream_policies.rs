//! Each balancing policy over real sockets: 10,000 requests through the
//! proxy to three origins land within the policy's stated tolerance;
//! adding a fourth server to a hash ring moves at most its share of keys;
//! and a server killed in the middle of a concurrent run costs no GET an
//! error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const REQUESTS: usize = 10_000;
/// Requests in flight at once.
const CONCURRENCY: usize = 16;

/// An origin that answers every request with its name.
struct Named {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

async fn named(name: &'static str) -> Named {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            conns.spawn(async move {
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| async move {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                        name.as_bytes(),
                    ))))
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

fn config(servers: &str, upstream_extra: &str) -> String {
    format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"app\"\nservers = [{servers}]\n\
         {upstream_extra}\n\n[[route]]\npath_prefix = \"/\"\nupstream = \"app\"\n"
    )
}

fn list(servers: &[&Named]) -> String {
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("\"http://{}\"", s.addr))
        .collect();
    urls.join(", ")
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
>;

/// Sends request `i` of `n` (with `key: k<i>` when `keyed`), `CONCURRENCY`
/// at once, and returns who answered each; panics on any non-200.
async fn run(proxy: &Proxy, n: usize, keyed: bool) -> Vec<String> {
    let client: Client = client(false);
    let next = Arc::new(AtomicUsize::new(0));
    let answers = Arc::new(std::sync::Mutex::new(vec![String::new(); n]));
    let mut tasks = Vec::new();
    for _ in 0..CONCURRENCY {
        let (client, next, answers) = (client.clone(), Arc::clone(&next), Arc::clone(&answers));
        let url = proxy.url("/x");
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let mut req = Request::get(&url);
                if keyed {
                    req = req.header("key", format!("k{i}"));
                }
                let resp = client
                    .request(req.body(Full::default()).unwrap())
                    .await
                    .expect("response");
                let status = resp.status();
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                let who = String::from_utf8_lossy(&body).into_owned();
                assert_eq!(status, 200, "request {i}: {who}");
                answers.lock().unwrap()[i] = who;
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    Arc::try_unwrap(answers).unwrap().into_inner().unwrap()
}

fn tally(answers: &[String]) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for a in answers {
        *out.entry(a.clone()).or_default() += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_requests_per_policy_land_within_tolerance() {
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let servers = list(&[&a, &b, &c]);
    // Round robin: exact.
    let proxy = start_proxy(&config(&servers, "")).await;
    let t = tally(&run(&proxy, REQUESTS - 1, false).await);
    eprintln!("round_robin: {t:?}");
    assert_eq!((t["a"], t["b"], t["c"]), (3333, 3333, 3333), "{t:?}");
    drop(proxy);
    // Weighted round robin (1:1:2): exact too.
    let weighted = format!(
        "{{ url = \"http://{}\" }}, {{ url = \"http://{}\" }}, {{ url = \"http://{}\", weight = 2 }}",
        a.addr, b.addr, c.addr
    );
    let proxy = start_proxy(&config(&weighted, "")).await;
    let t = tally(&run(&proxy, REQUESTS, false).await);
    eprintln!("weighted 1:1:2: {t:?}");
    assert_eq!((t["a"], t["b"], t["c"]), (2500, 2500, 5000), "{t:?}");
    drop(proxy);
    // Least outstanding (two random choices): each within 10% of a third.
    let proxy = start_proxy(&config(&servers, "balance = \"least_outstanding\"")).await;
    let t = tally(&run(&proxy, REQUESTS, false).await);
    eprintln!("least_outstanding: {t:?}");
    for who in ["a", "b", "c"] {
        assert!((3000..=3667).contains(&t[who]), "{t:?}");
    }
    drop(proxy);
    // Consistent hashing of 10,000 distinct keys: each within 15% of a third.
    let proxy = start_proxy(&config(
        &servers,
        "balance = \"hash\"\nhash_key = \"header:key\"",
    ))
    .await;
    let t = tally(&run(&proxy, REQUESTS, true).await);
    eprintln!("hash header:key: {t:?}");
    for who in ["a", "b", "c"] {
        assert!((2833..=3833).contains(&t[who]), "{t:?}");
    }
    drop((a, b, c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_server_on_the_ring_moves_only_its_share_of_keys() {
    let (a, b, c, d) = (
        named("a").await,
        named("b").await,
        named("c").await,
        named("d").await,
    );
    let hash = "balance = \"hash\"\nhash_key = \"header:key\"";
    let three = start_proxy(&config(&list(&[&a, &b, &c]), hash)).await;
    let before = run(&three, REQUESTS, true).await;
    // The same keys twice: a key stays on its server.
    assert_eq!(run(&three, REQUESTS, true).await, before);
    drop(three);
    let four = start_proxy(&config(&list(&[&a, &b, &c, &d]), hash)).await;
    let after = run(&four, REQUESTS, true).await;
    let moved: Vec<usize> = (0..REQUESTS).filter(|&i| before[i] != after[i]).collect();
    // Every moved key moved to the new server, and about a quarter moved
    // (1/N with N = 4, within 5 points).
    eprintln!(
        "hash: {} of {REQUESTS} keys moved adding a fourth server",
        moved.len()
    );
    assert!(moved.iter().all(|&i| after[i] == "d"));
    assert!(
        moved.len() <= REQUESTS * 30 / 100 && moved.len() >= REQUESTS * 20 / 100,
        "{} of {REQUESTS} keys moved",
        moved.len()
    );
    drop((a, b, c, d));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_costs_no_get_an_error() {
    let (a, b, c) = (named("a").await, named("b").await, named("c").await);
    let proxy = Arc::new(
        start_proxy(&config(
            &list(&[&a, &b, &c]),
            "[upstream.outlier]\nconsecutive_failures = 3\nbase_ejection = \"30s\"\n",
        ))
        .await,
    );
    // 4,000 GETs in flight 16 at a time; b dies after the first 1,000 answers.
    let runner = {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { run(&proxy, 4_000, false).await })
    };
    let b_addr = b.addr;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while proxy
        .metrics
        .attempt_counter("app", &b_addr.to_string(), "ok")
        .get()
        < 333
    {
        assert!(tokio::time::Instant::now() < deadline, "b never answered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    b.task.abort();
    let _ = b.task.await;
    // `run` panics on any answer other than 200.
    let answers = runner.await.expect("every GET answered 200");
    let t = tally(&answers);
    assert!(t["a"] > 1_000 && t["c"] > 1_000, "{t:?}");
    let ejections = proxy
        .metrics
        .ejection_counter("app", &b_addr.to_string())
        .get();
    eprintln!("b killed mid-run: {t:?}, ejections of b: {ejections}");
    assert_eq!(ejections, 1, "{t:?}");
    drop((a, c));
}
