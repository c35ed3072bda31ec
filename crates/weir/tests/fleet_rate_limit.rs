//! Rate limits shared by three `weir serve` replicas on 127.0.0.1,
//! 127.0.0.2 and 127.0.0.3 (`[route.rate_limit] scope`), end to end: real
//! processes, a real `redis-server`, clients spread over all replicas.
//!
//! Pinned: a limit of 100 requests/s for one key admits 100/s (±10 %)
//! for the whole fleet when its bucket lives on the key's ring owner
//! (`scope = "fleet"`) or in Redis (`scope = "redis"`), where per-replica
//! buckets admit three times that; and a Redis that goes away leaves the
//! limit to each replica's own bucket, with no request failing.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt as _, Full};

const SECRET: &str = "fleet-rate-test-secret-0123";

/// The limit under test, in requests per second.
const RATE: f64 = 100.0;

/// The bucket size: a bucket that may hold a few tokens loses none to
/// the gap between a token's arrival and the next request.
const BURST: u64 = 10;

/// How long each load runs.
const LOAD: Duration = Duration::from_secs(3);

/// The config of a replica at `addr` in front of `origin`, its one route
/// limited to 100 requests/s per `X-Api-Key` with a burst of [`BURST`], its
/// buckets where `scope` says; `extra` appended (`[fleet]`, `[redis]`).
fn config(addr: SocketAddr, origin: SocketAddr, scope: &str, extra: &str) -> String {
    format!(
        "[[listener]]\naddress = \"{addr}\"\n\n[admin]\naddress = \"{}:0\"\n\n\
         [[upstream]]\nname = \"origin\"\nurl = \"http://{origin}\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"origin\"\n\
         [route.rate_limit]\nrequests_per_second = {RATE}\nburst = {BURST}\n\
         key = \"header:x-api-key\"\nscope = \"{scope}\"\n\n{extra}",
        addr.ip()
    )
}

/// The `[fleet]` table of the replica at `me` among `peers`.
fn fleet_table(me: SocketAddr, peers: &[SocketAddr]) -> String {
    let list: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    // A rate_timeout a loaded debug build keeps (the default is 100 ms).
    format!(
        "[fleet]\nself = \"{me}\"\npeers = [{}]\nsecret = \"{SECRET}\"\nrate_timeout = \"2s\"\n",
        list.join(", ")
    )
}

/// Three replica addresses: one free port on 127.0.0.1, .2 and .3.
fn addresses() -> [SocketAddr; 3] {
    let port = free_port();
    [1, 2, 3].map(|i| SocketAddr::from(([127, 0, 0, i], port)))
}

/// Requests answered `200` and `429`, and how long the load ran.
struct Tally {
    ok: u64,
    limited: u64,
    elapsed: Duration,
}

impl Tally {
    /// Asserts that [`Tally::admitted_per_second`] is `rate` ± 10 %.
    fn assert_about(&self, rate: f64, what: &str) {
        let got = self.admitted_per_second();
        eprintln!(
            "{what}: {} admitted, {} limited in {:?}: {got:.1}/s",
            self.ok, self.limited, self.elapsed
        );
        assert!(
            (rate * 0.9..=rate * 1.1).contains(&got),
            "{what}: {} admitted, {} limited in {:?}: {got:.1}/s, want {rate}/s ± 10 %",
            self.ok,
            self.limited,
            self.elapsed
        );
        assert!(
            self.limited > self.ok,
            "{what}: the load must exceed the limit"
        );
    }

    /// Asserts that three replicas admitted more than 2.5 × `rate`: each
    /// had a bucket of its own.
    fn assert_per_replica(&self, rate: f64, what: &str) {
        let got = self.admitted_per_second();
        eprintln!(
            "{what}: {} admitted, {} limited in {:?}: {got:.1}/s",
            self.ok, self.limited, self.elapsed
        );
        assert!(
            got > rate * 2.5,
            "{what}: three buckets of {rate}/s admit about three times that, got {got:.1}/s"
        );
    }

    /// Requests admitted per second, past the first burst.
    fn admitted_per_second(&self) -> f64 {
        (self.ok.saturating_sub(BURST)) as f64 / self.elapsed.as_secs_f64()
    }
}

/// Sends `GET /bytes/10` with `X-Api-Key: k1` for [`LOAD`], 12 at a time,
/// request `i` to replica `i % 3`; every answer must be `200` or `429`.
async fn load(targets: &[SocketAddr]) -> Tally {
    let client = client(false);
    let ok = Arc::new(AtomicU64::new(0));
    let limited = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let targets: Arc<Vec<SocketAddr>> = Arc::new(targets.to_vec());
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..12 {
        let (client, ok, limited, next, stop, targets) = (
            client.clone(),
            Arc::clone(&ok),
            Arc::clone(&limited),
            Arc::clone(&next),
            Arc::clone(&stop),
            Arc::clone(&targets),
        );
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let target = targets[(i % targets.len() as u64) as usize];
                let req = http::Request::get(format!("http://{target}/bytes/10"))
                    .header("x-api-key", "k1")
                    .body(Full::new(Bytes::new()))
                    .expect("request");
                let resp = tokio::time::timeout(Duration::from_secs(5), client.request(req))
                    .await
                    .unwrap_or_else(|_| panic!("request {i} to {target} timed out"))
                    .unwrap_or_else(|e| panic!("request {i} to {target}: {e}"));
                let status = resp.status();
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                match status.as_u16() {
                    200 => ok.fetch_add(1, Ordering::Relaxed),
                    429 => limited.fetch_add(1, Ordering::Relaxed),
                    other => panic!("request {i} via {target}: {other} {body:?}"),
                };
            }
        }));
    }
    tokio::time::sleep(LOAD).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("load worker");
    }
    Tally {
        ok: ok.load(Ordering::Relaxed),
        limited: limited.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
    }
}

/// Three replicas in front of one origin, each with `extra(addr, all)`.
fn start_replicas(
    origin: SocketAddr,
    addrs: &[SocketAddr],
    scope: &str,
    extra: impl Fn(SocketAddr) -> String,
) -> Vec<WeirProcess> {
    addrs
        .iter()
        .map(|&a| WeirProcess::start_at(a, &config(a, origin, scope, &extra(a))))
        .collect()
}

/// A counter's value on a replica's `/metrics`.
async fn metric(weir: &WeirProcess, sample: &str) -> u64 {
    let (_, _, body) = get(&format!("http://{}/metrics", weir.admin_addr()), false).await;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {sample} in /metrics"))
}

/// `redis-server` on 127.0.0.1 at a free port, persisting nothing;
/// killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RedisServer {
    fn start() -> RedisServer {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (Debian's redis-server package; .ci/run installs it)");
        wait_for_port(
            SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(10),
        );
        RedisServer { child, port }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_scope_limit_admits_its_rate_once_for_three_replicas() {
    let origin = start_origin().await;
    let addrs = addresses();
    let replicas = start_replicas(origin.addr, &addrs, "fleet", |a| fleet_table(a, &addrs));
    let tally = load(&addrs).await;
    tally.assert_about(RATE, "fleet scope");
    // The key has one owner; the two others asked it.
    let mut asked = 0;
    let mut answered = 0;
    for r in &replicas {
        asked += metric(r, "weir_fleet_requests_total{result=\"rate_asked\"} ").await;
        answered += metric(r, "weir_fleet_requests_total{result=\"rate_answered\"} ").await;
        assert_eq!(
            metric(r, "weir_rate_limit_fallbacks_total{scope=\"fleet\"} ").await,
            0,
            "no ask failed"
        );
    }
    assert!(
        asked > 0 && asked == answered,
        "asked {asked}, answered {answered}"
    );
    let total = tally.ok + tally.limited;
    assert!(
        asked * 2 >= total && asked * 4 <= total * 3,
        "about two thirds of {total} requests asked the owner, not {asked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_scope_limit_admits_its_rate_per_replica() {
    let origin = start_origin().await;
    let addrs = addresses();
    let _replicas = start_replicas(origin.addr, &addrs, "replica", |a| fleet_table(a, &addrs));
    let tally = load(&addrs).await;
    tally.assert_per_replica(RATE, "replica scope");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_scope_limit_admits_its_rate_once_and_survives_redis_going_away() {
    let redis = RedisServer::start();
    let origin = start_origin().await;
    let addrs = addresses();
    let section = format!("[redis]\nurl = \"redis://127.0.0.1:{}/0\"\n", redis.port);
    let replicas = start_replicas(origin.addr, &addrs, "redis", |_| section.clone());
    let tally = load(&addrs).await;
    tally.assert_about(RATE, "redis scope");
    for r in &replicas {
        assert_eq!(
            metric(r, "weir_rate_limit_fallbacks_total{scope=\"redis\"} ").await,
            0
        );
    }
    drop(redis);
    // Each replica's own bucket decides now: no request fails, and the
    // three buckets admit about three times the rate.
    let tally = load(&addrs).await;
    tally.assert_per_replica(RATE, "without Redis");
    let mut fallbacks = 0;
    for r in &replicas {
        fallbacks += metric(r, "weir_rate_limit_fallbacks_total{scope=\"redis\"} ").await;
        assert!(
            r.log_text()
                .contains("rate limit checked on this replica's own bucket"),
            "the outage is logged"
        );
    }
    assert!(
        fallbacks >= tally.ok + tally.limited - 10,
        "{fallbacks} fallbacks for {} requests",
        tally.ok + tally.limited
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_answers_garbage_leaves_the_check_here_and_one_log_line() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Not Redis: an HTTP server's answer to every command.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let fake = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                    let reply = b"HTTP/1.1 400 Bad Request\r\nServer: x\r\n\r\n";
                    if s.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let origin = start_origin().await;
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let section = format!("[redis]\nurl = \"redis://127.0.0.1:{port}/0\"\n");
    let weir = WeirProcess::start_at(addr, &config(addr, origin.addr, "redis", &section));
    let out = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "x-api-key: k",
        &format!("http://{addr}/"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    assert_eq!(
        metric(&weir, "weir_rate_limit_fallbacks_total{scope=\"redis\"} ").await,
        1
    );
    let log = weir.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("own bucket"))
        .unwrap_or_else(|| panic!("no WARN for the failed check:\n{log}"));
    assert!(
        line.contains("Redis is left alone for 1s") && !line.contains("\\n"),
        "the WARN spans several lines:\n{log}"
    );
    fake.abort();
}
