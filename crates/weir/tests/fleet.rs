//! A fleet of `weir serve` replicas on 127.0.0.1, 127.0.0.2 and 127.0.0.3
//! sharing one cache by consistent hashing (`[fleet]`), end to end: real
//! processes, real sockets, an origin that counts its fetches per path.
//!
//! Pinned: each key is fetched from the origin once for the whole fleet,
//! whichever replicas the clients reach (three times without `[fleet]`);
//! concurrent misses of one key sent to all replicas collapse into one
//! fetch; a stale key is served stale everywhere while its owner alone
//! revalidates it; a peer that stalls or answers garbage costs one short timeout,
//! is counted, and its keys are then served where they land, with no
//! request failing.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

const SECRET: &str = "fleet-test-secret-0123456789";

/// An origin that answers `/k/...` with the path, cacheable for 5 minutes,
/// counting fetches per path; `/slow/...` the same after 300 ms; `/swr/...`
/// fresh for 1 s, then stale-while-revalidate for 60 s; `/refused/...` a
/// `403` with `X-Weir-Fleet-Refused: token`.
struct CountingOrigin {
    addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
    /// Requests that arrived with a peer field (`x-weir-peer-token`,
    /// `x-weir-ring-epoch`): there must be none.
    peer_fields: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CountingOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CountingOrigin {
    async fn start() -> CountingOrigin {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(Mutex::new(HashMap::new()));
        let counted = Arc::clone(&hits);
        let peer_fields = Arc::new(AtomicUsize::new(0));
        let leaked = Arc::clone(&peer_fields);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (counted, leaked) = (Arc::clone(&counted), Arc::clone(&leaked));
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (counted, leaked) = (Arc::clone(&counted), Arc::clone(&leaked));
                        async move {
                            if req
                                .headers()
                                .keys()
                                .any(|k| k.as_str().starts_with("x-weir-"))
                            {
                                leaked.fetch_add(1, Ordering::Relaxed);
                            }
                            let path = req.uri().path().to_owned();
                            *counted
                                .lock()
                                .expect("hits")
                                .entry(path.clone())
                                .or_insert(0) += 1;
                            if path.starts_with("/slow/") {
                                tokio::time::sleep(Duration::from_millis(300)).await;
                            }
                            // `/swr/...`: stale after 1 s, then served stale
                            // while one background fetch refreshes it.
                            let cache_control = if path.starts_with("/swr/") {
                                "max-age=1, stale-while-revalidate=60"
                            } else {
                                "max-age=300"
                            };
                            // `/refused/...`: a 403 that looks like a
                            // replica's refusal of a peer token.
                            let (status, refused) = if path.starts_with("/refused/") {
                                (403, "token")
                            } else {
                                (200, "")
                            };
                            let mut resp = http::Response::builder().status(status);
                            if !refused.is_empty() {
                                resp = resp.header("x-weir-fleet-refused", refused);
                            }
                            let resp = resp
                                .header("cache-control", cache_control)
                                .body(Full::new(Bytes::from(format!("origin {path}"))))
                                .expect("response");
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        CountingOrigin {
            addr,
            hits,
            peer_fields,
            task,
        }
    }

    fn hits(&self) -> HashMap<String, usize> {
        self.hits.lock().expect("hits").clone()
    }

    fn total(&self) -> usize {
        self.hits().values().sum()
    }
}

/// One `weir serve` replica (killed on drop) at a loopback address of its
/// own.
struct Replica {
    weir: WeirProcess,
    addr: SocketAddr,
}

impl Replica {
    /// `weir serve` listening on `addr`, caching everything from `origin`,
    /// with `fleet` (a `[fleet]` table, or empty) appended.
    fn start(addr: SocketAddr, origin: SocketAddr, fleet: &str) -> Replica {
        Replica {
            weir: WeirProcess::start_at(addr, &Replica::config(addr, origin, fleet)),
            addr,
        }
    }

    /// The config of a replica at `addr` caching `origin`, with `fleet`.
    fn config(addr: SocketAddr, origin: SocketAddr, fleet: &str) -> String {
        format!(
            "[[listener]]\naddress = \"{addr}\"\n\n[admin]\naddress = \"{}:0\"\n\n\
             [[upstream]]\nname = \"origin\"\nurl = \"http://{origin}\"\n\n\
             [[route]]\npath_prefix = \"/\"\nupstream = \"origin\"\ncache = true\n\n{fleet}",
            addr.ip()
        )
    }

    /// Rewrites the config with `fleet` (the admin address kept), sends
    /// SIGHUP and waits for the reload to be applied.
    fn reload(&self, origin: SocketAddr, fleet: &str) {
        let admin = self.admin();
        let text = Replica::config(self.addr, origin, fleet)
            .replace(&format!("{}:0", self.addr.ip()), &admin.to_string());
        std::fs::write(self.weir.dir().join("weir.toml"), text).expect("rewrite config");
        let before = self.log_text().matches("config reloaded").count();
        self.weir.signal("HUP");
        let start = Instant::now();
        while self.log_text().matches("config reloaded").count() == before {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        self.weir.log_text()
    }

    /// The admin listener's address, from the startup log line.
    fn admin(&self) -> SocketAddr {
        self.weir.admin_addr()
    }

    /// `weir_fleet_requests_total{result=...}` now.
    async fn fleet_count(&self, result: &str) -> u64 {
        let (_, _, body) = get(&format!("http://{}/metrics", self.admin()), false).await;
        let sample = format!("weir_fleet_requests_total{{result=\"{result}\"}} ");
        String::from_utf8_lossy(&body)
            .lines()
            .find_map(|l| l.strip_prefix(&sample).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {sample} in /metrics"))
    }
}

/// The three replica addresses: one port free on 127.0.0.1, on .1, .2, .3.
fn addresses() -> [SocketAddr; 3] {
    let port = free_port();
    [1, 2, 3].map(|i| SocketAddr::from(([127, 0, 0, i], port)))
}

/// A replica at each of `addrs` caching `origin`, all in one fleet with
/// `extra` in its `[fleet]` table.
fn start_fleet(origin: &CountingOrigin, addrs: &[SocketAddr], extra: &str) -> Vec<Replica> {
    addrs
        .iter()
        .map(|&a| Replica::start(a, origin.addr, &fleet_table(a, addrs, extra)))
        .collect()
}

/// The `[fleet]` table of the replica at `me` among `peers`.
fn fleet_table(me: SocketAddr, peers: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "[fleet]\nself = \"{me}\"\npeers = [{}]\nsecret = \"{SECRET}\"\n{extra}\n",
        list.join(", ")
    )
}

/// Sends `count` GETs for `site.test`, request `i` for `path(i)` to
/// replica `i % n`, 32 at a time; every answer must be 200 with the
/// origin's body for the path.
async fn load(
    replicas: &[Replica],
    count: usize,
    path: impl Fn(usize) -> String + Send + Sync + 'static,
) {
    let targets: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    load_to(targets, count, path).await;
}

/// [`load`] to `targets`.
async fn load_to(
    targets: Vec<SocketAddr>,
    count: usize,
    path: impl Fn(usize) -> String + Send + Sync + 'static,
) {
    let client = client(false);
    let next = Arc::new(AtomicUsize::new(0));
    let targets = Arc::new(targets);
    let path = Arc::new(path);
    let mut workers = Vec::new();
    for _ in 0..32 {
        let (client, next, targets, path) = (
            client.clone(),
            Arc::clone(&next),
            Arc::clone(&targets),
            Arc::clone(&path),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return;
                }
                let p = path(i);
                let target = targets[i % targets.len()];
                // One site name whichever replica is reached, as behind a
                // load balancer: the cache key has the host in it.
                let (status, _, body) = get_site_with(&client, target, &p).await;
                assert_eq!(status, 200, "request {i} {p} via {target}: {body:?}");
                assert_eq!(body, format!("origin {p}"), "request {i} via {target}");
            }
        }));
    }
    for w in workers {
        w.await.expect("load worker");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_fetch_each_key_once_and_collapse_misses_across_the_fleet() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    // A peer timeout well above what a loaded debug build can take, so
    // that no forward falls back to the origin (that path has its own tests).
    let extra = "peer_timeout = \"10s\"";
    let replicas = start_fleet(&origin, &addrs, extra);

    // 10,000 requests over 1,000 keys, spread over the three replicas.
    load(&replicas, 10_000, |i| format!("/k/{}", i % 1000)).await;
    let hits = origin.hits();
    assert_eq!(hits.len(), 1000, "every key reached the origin");
    let twice: Vec<_> = hits.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "keys fetched more than once: {twice:?}");
    for r in &replicas {
        let (forwarded, owner) = (
            r.fleet_count("forwarded").await,
            r.fleet_count("owner").await,
        );
        // About two thirds of a replica's requests belong to the others.
        assert!(forwarded > 1500, "{}: forwarded {forwarded}", r.addr);
        assert!(owner > 700, "{}: owner {owner}", r.addr);
        assert_eq!(r.fleet_count("peer_error").await, 0, "{}", r.log_text());
        assert_eq!(r.fleet_count("ring_disagreement").await, 0);
    }

    // 50 new keys, each asked 12 times at once through all three replicas
    // (4 each) while the origin takes 300 ms: one fetch per key.
    load(&replicas, 600, |i| format!("/slow/{}", i / 12)).await;
    let slow: Vec<usize> = origin
        .hits()
        .iter()
        .filter(|(p, _)| p.starts_with("/slow/"))
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(slow.len(), 50);
    if slow.iter().any(|&n| n != 1) {
        let mut why = String::new();
        for r in &replicas {
            why += &format!(
                "{} peer errors: {}\n",
                r.addr,
                r.fleet_count("peer_error").await
            );
            for l in r.log_text().lines().filter(|l| l.contains("WARN")).take(5) {
                why += l;
                why.push('\n');
            }
        }
        panic!("fetches per slow key: {slow:?}\n{why}");
    }
    assert_eq!(origin.total(), 1050);
    assert_eq!(origin.peer_fields.load(Ordering::Relaxed), 0);
}

/// GET `path` of `site.test` from `target`: status, `X-Cache` and body.
async fn get_site(target: SocketAddr, path: &str) -> (http::StatusCode, String, Bytes) {
    get_site_with(&client(false), target, path).await
}

/// [`get_site`] on `client`'s connections.
async fn get_site_with(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    target: SocketAddr,
    path: &str,
) -> (http::StatusCode, String, Bytes) {
    let req = http::Request::get(format!("http://{target}{path}"))
        .header(http::header::HOST, "site.test")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .unwrap_or_else(|_| panic!("{path} via {target} timed out"))
        .unwrap_or_else(|e| panic!("{path} via {target}: {e}"));
    let status = resp.status();
    let x_cache = resp
        .headers()
        .get("x-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, x_cache, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_revalidates_a_stale_key_once_for_the_whole_fleet() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let replicas = start_fleet(&origin, &addrs, "peer_timeout = \"10s\"");
    let keys: Vec<String> = (0..20).map(|i| format!("/swr/{i}")).collect();
    // Each key asked through every replica: one fetch each.
    for key in &keys {
        for r in &replicas {
            let (status, _, body) = get_site(r.addr, key).await;
            assert_eq!(status, 200, "{key} via {}", r.addr);
            assert_eq!(body, format!("origin {key}"));
        }
    }
    assert_eq!(origin.total(), 20);

    // Past max-age: every replica's answer is the owner's stale entry (or,
    // once the owner's one background fetch has landed, the fresh one),
    // never a wait for the origin and never a fetch of each replica's own.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    for key in &keys {
        for (n, r) in replicas.iter().enumerate() {
            let (status, x_cache, body) = get_site(r.addr, key).await;
            assert_eq!(status, 200, "{key} via {}", r.addr);
            assert_eq!(body, format!("origin {key}"));
            if n == 0 {
                assert_eq!(x_cache, "STALE", "{key} via {}", r.addr);
            } else {
                assert!(
                    x_cache == "STALE" || x_cache == "HIT",
                    "{key} via {}: X-Cache {x_cache}",
                    r.addr
                );
            }
        }
    }
    // The background refreshes land: one per key, made by its owner.
    let start = Instant::now();
    while origin.total() < 40 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let twice: Vec<_> = origin.hits().into_iter().filter(|(_, n)| *n != 2).collect();
    assert!(twice.is_empty(), "fetches per key other than 2: {twice:?}");
    for r in &replicas {
        assert_eq!(r.fleet_count("peer_error").await, 0, "{}", r.log_text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origins_fleet_fields_neither_fail_a_forward_nor_reach_the_client() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let replicas = start_fleet(&origin, &addrs, "peer_timeout = \"10s\"");
    // A client's own X-Weir-Fleet-Refused on the way in, and the origin's
    // 403 with it on the way back: the owner's answer is relayed as an
    // answer, not taken for a refusal of the peer token.
    let client = client(false);
    for i in 0..12 {
        let path = format!("/refused/{i}");
        let target = addrs[i % 3];
        let req = http::Request::get(format!("http://{target}{path}"))
            .header(http::header::HOST, "site.test")
            .header("x-weir-fleet-refused", "token")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let resp = client.request(req).await.expect("response");
        assert_eq!(resp.status(), 403, "{path} via {target}");
        assert!(
            resp.headers().get("x-weir-fleet-refused").is_none(),
            "{path} via {target}: the origin's fleet field reached the client"
        );
        resp.into_body().collect().await.expect("body");
    }
    assert_eq!(origin.total(), 12, "each key fetched once, by its owner");
    assert_eq!(origin.peer_fields.load(Ordering::Relaxed), 0);
    let mut forwarded = 0;
    for r in &replicas {
        assert_eq!(r.fleet_count("peer_error").await, 0, "{}", r.log_text());
        forwarded += r.fleet_count("forwarded").await;
    }
    assert!(forwarded >= 4, "forwarded {forwarded} of 12");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_near_the_limit_is_served_where_it_lands_and_still_invalidates() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let replicas = start_fleet(&origin, &addrs, "peer_timeout = \"10s\"");
    // Just under the default 16 KiB here; over it at the owner once the
    // forward's own fields are added.
    let cookie = format!("c={}", "x".repeat(16_384 - 250));
    let client = client(false);
    let send = |method: &'static str, target: SocketAddr, path: String, big: bool| {
        let client = client.clone();
        let cookie = cookie.clone();
        async move {
            let mut req = http::Request::builder()
                .method(method)
                .uri(format!("http://{target}{path}"))
                .header(http::header::HOST, "site.test");
            if big {
                req = req.header(http::header::COOKIE, cookie.as_str());
            }
            let req = req.body(Full::new(Bytes::new())).expect("request");
            let resp = client.request(req).await.expect("response");
            let status = resp.status();
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            assert_eq!(status, 200, "{method} {path} via {target}: {body:?}");
            assert_eq!(body, format!("origin {path}"));
        }
    };
    for i in 0..12 {
        send("GET", addrs[0], format!("/k/big-{i}"), true).await;
    }
    assert_eq!(origin.total(), 12);
    // No peer was sent a head over its limit: no forward, no peek.
    for r in &replicas[1..] {
        assert!(!r.log_text().contains("\"status\":431"), "{}", r.log_text());
    }
    // A POST with the big head, through the same replica, still drops the
    // owner's entry: the invalidation carries no client fields.
    for i in 0..12 {
        send("POST", addrs[0], format!("/k/big-{i}"), true).await;
    }
    let mut told = u64::MAX;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut now = 0;
        for r in &replicas {
            now += r.fleet_count("invalidated").await;
        }
        if now == told {
            break;
        }
        told = now;
    }
    for i in 0..12 {
        send("GET", addrs[1], format!("/k/big-{i}"), false).await;
    }
    assert_eq!(origin.total(), 36, "each key: a GET, the POST, a GET again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fleet_each_replica_fetches_each_key_itself() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let replicas: Vec<Replica> = addrs
        .iter()
        .map(|&a| Replica::start(a, origin.addr, ""))
        .collect();
    load(&replicas, 10_000, |i| format!("/k/{}", i % 1000)).await;
    // Request i goes to replica i % 3 and asks key i % 1000: every key
    // reaches every replica, which fetches it once.
    assert_eq!(origin.total(), 3000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l1_answers_the_owners_keys_without_the_hop_until_l1_ttl() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let replicas = start_fleet(
        &origin,
        &addrs,
        "peer_timeout = \"10s\"\nl1_bytes = 1048576\nl1_ttl = \"1s\"",
    );
    let first = &replicas[0];
    // 600 requests over 30 keys, all to the first replica.
    load_to(vec![first.addr], 600, |i| format!("/k/l1-{}", i % 30)).await;
    assert_eq!(origin.total(), 30, "each key fetched once");
    let (owner, forwarded, l1) = (
        first.fleet_count("owner").await,
        first.fleet_count("forwarded").await,
        first.fleet_count("l1_hit").await,
    );
    assert_eq!(
        owner + forwarded + l1,
        600,
        "owner {owner}, forwarded {forwarded}, l1 {l1}"
    );
    // The others' keys (about 20) were forwarded about once each, then
    // answered from the L1; their owners saw only those forwards.
    assert!(
        owner > 0 && l1 > 300,
        "owner {owner}, forwarded {forwarded}, l1 {l1}"
    );
    assert!(forwarded < 60, "forwarded {forwarded}");
    let mut served_for_peer = 0;
    for r in &replicas[1..] {
        served_for_peer += r.fleet_count("served_for_peer").await;
    }
    assert_eq!(served_for_peer, forwarded);

    // Past l1_ttl each of the others' keys is asked of its owner once
    // more (served from the owner's cache: no origin fetch).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    load_to(vec![first.addr], 60, |i| format!("/k/l1-{}", i % 30)).await;
    let again = first.fleet_count("forwarded").await - forwarded;
    let owned_again = first.fleet_count("owner").await - owner;
    assert_eq!(origin.total(), 30);
    // Two requests per key: the first asks the owner again, the second
    // joins that fill or finds the entry refreshed.
    let others_keys = (60 - owned_again) / 2;
    eprintln!(
        "l1: owner {owner}, forwarded {forwarded}, l1 hits {l1}; after l1_ttl {again} forwarded for {others_keys} keys"
    );
    assert!(
        again >= others_keys && again <= 2 * others_keys,
        "forwarded again {again} for {others_keys} keys of the others"
    );
    assert_eq!(
        first.fleet_count("peer_error").await,
        0,
        "{}",
        first.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsafe_method_anywhere_drops_the_owners_entry() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let replicas = start_fleet(&origin, &addrs, "peer_timeout = \"10s\"");
    let client = client(false);
    let send = |method: &'static str, target: SocketAddr| {
        let client = client.clone();
        async move {
            let req = http::Request::builder()
                .method(method)
                .uri(format!("http://{target}/k/inv"))
                .header(http::header::HOST, "site.test")
                .body(Full::new(if method == "GET" {
                    Bytes::new()
                } else {
                    Bytes::from_static(b"x")
                }))
                .expect("request");
            let resp = client.request(req).await.expect("response");
            let status = resp.status();
            resp.into_body().collect().await.expect("body");
            assert_eq!(status, 200, "{method} via {target}");
        }
    };
    send("GET", addrs[0]).await;
    send("GET", addrs[1]).await;
    assert_eq!(origin.hits()["/k/inv"], 1, "stored once, at the owner");
    // A POST through each replica in turn (the owner too), then a GET:
    // each time the owner's entry is gone and the GET fetches again.
    let mut told = 0;
    for (round, &via) in addrs.iter().enumerate() {
        send("POST", via).await;
        let mut invalidated = 0;
        for r in &replicas {
            invalidated += r.fleet_count("invalidated").await;
        }
        // The owner is told in the background; wait for it (not when the
        // POST went through the owner itself, which drops it at once).
        for _ in 0..100 {
            if invalidated > told {
                break;
            }
            let mut now = 0;
            for r in &replicas {
                now += r.fleet_count("invalidated").await;
            }
            invalidated = now;
            if invalidated > told {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        told = invalidated;
        send("GET", addrs[(round + 1) % 3]).await;
        assert_eq!(
            origin.hits()["/k/inv"],
            1 + 2 * (round + 1),
            "round {round}: the POST, then a fetch of the dropped entry"
        );
    }
    assert_eq!(
        told, 2,
        "the two replicas that do not own the key told the owner"
    );
}

/// How [`bad_peer`] misbehaves.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bad {
    /// Accepts connections and never answers.
    Stall,
    /// Answers with bytes that are not HTTP.
    Garbage,
    /// Answers a head for 100,000 bytes, sends 1,000 and closes.
    MidBody,
}

/// A member that misbehaves as `bad` says.
async fn bad_peer(addr: SocketAddr, bad: Bad) -> tokio::task::JoinHandle<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind bad peer");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                match bad {
                    Bad::Stall => tokio::time::sleep(Duration::from_secs(60)).await,
                    Bad::Garbage => {
                        let _ = s.write_all(b"NOT HTTP AT ALL\r\n\r\n").await;
                    }
                    Bad::MidBody => {
                        let head = "HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n";
                        let _ = s.write_all(head.as_bytes()).await;
                        let _ = s.write_all(&[b'x'; 1000]).await;
                    }
                }
            });
        }
    })
}

async fn a_bad_peer_costs_one_short_timeout_and_no_failed_request(bad: Bad) {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let bad = bad_peer(addrs[2], bad).await;
    let extra = "peer_timeout = \"300ms\"";
    let replicas: Vec<Replica> = addrs[..2]
        .iter()
        .map(|&a| Replica::start(a, origin.addr, &fleet_table(a, &addrs, extra)))
        .collect();
    let started = Instant::now();
    load(&replicas, 600, |i| format!("/k/{}", i % 300)).await;
    let elapsed = started.elapsed();
    // The bad peer owns about a third of the keys; each good replica tries
    // it for the requests in flight when it first fails, then skips it.
    for r in &replicas {
        let errors = r.fleet_count("peer_error").await;
        assert!(
            (1..=64).contains(&errors),
            "{}: {errors} peer errors",
            r.addr
        );
        assert!(
            // A forward, or a peek of the first minute (the replica just
            // joined), found it broken.
            r.log_text().contains("failed; served here"),
            "{}",
            r.log_text()
        );
    }
    assert!(
        elapsed < Duration::from_secs(5),
        "600 requests took {elapsed:?}"
    );
    // The good replicas still share their own keys: fewer fetches than
    // two replicas caching alone would make.
    assert!(origin.total() < 600, "{} fetches", origin.total());
    bad.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_peer_costs_one_short_timeout_and_no_failed_request() {
    a_bad_peer_costs_one_short_timeout_and_no_failed_request(Bad::Stall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_answering_garbage_is_skipped_and_no_request_fails() {
    a_bad_peer_costs_one_short_timeout_and_no_failed_request(Bad::Garbage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_breaks_off_bodies_is_skipped_after_three_in_a_row() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let bad = bad_peer(addrs[2], Bad::MidBody).await;
    let replica = Replica::start(
        addrs[0],
        origin.addr,
        &fleet_table(addrs[0], &addrs, "peer_timeout = \"10s\""),
    );
    // One request at a time, about a third of them owned by the bad peer.
    // The first three of those are cut short: each head was relayed before
    // its body broke, so nothing can replace it (one break alone may be an
    // origin's, or a close of a connection this replica stopped reading).
    // Then the peer is skipped and its keys are served here.
    let mut cut = Vec::new();
    for i in 0..60 {
        let path = format!("/k/{i}");
        let req = http::Request::get(format!("http://{}{path}", replica.addr))
            .header(http::header::HOST, "site.test")
            .body(Full::new(Bytes::new()))
            .expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(10), client(false).request(req))
            .await
            .expect("an answer in time")
            .expect("a response head");
        assert_eq!(resp.status(), 200, "{path}");
        match resp.into_body().collect().await {
            Ok(body) => assert_eq!(body.to_bytes(), format!("origin {path}")),
            Err(_) => cut.push(i),
        }
    }
    assert!(
        (3..=4).contains(&cut.len()) && cut[cut.len() - 1] < 50,
        "answers cut short: {cut:?}\n{}",
        replica.log_text()
    );
    assert!(replica.fleet_count("peer_error").await >= 1);
    assert!(
        replica
            .log_text()
            .contains("broke off its answer's body (the client's answer was cut short); the peer is skipped for 5s after 3 in a row"),
        "{}",
        replica.log_text()
    );
    bad.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_peer_token_is_refused_and_a_replica_with_another_secret_serves_alone() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let extra = "peer_timeout = \"10s\"";
    let replicas = start_fleet(&origin, &addrs, extra);
    // A client claiming to be a peer: 403, said why, nothing upstream, and
    // no peer field or peek goes anywhere.
    for peek in [false, true] {
        let mut args = vec![
            "-s",
            "-i",
            "-H",
            "x-weir-peer-token: not-the-secret-at-all",
            "-H",
            "x-weir-ring-epoch: 0000000000000000",
        ];
        if peek {
            args.extend(["-H", "x-weir-fleet-peek: 1"]);
        }
        let url = format!("http://{}/k/forged", replicas[0].addr);
        args.push(&url);
        let out = String::from_utf8_lossy(&curl(&args).stdout).into_owned();
        assert!(out.starts_with("HTTP/1.1 403"), "{out}");
        assert!(out.contains("x-weir-fleet-refused: token"), "{out}");
    }
    assert_eq!(origin.total(), 0);
    assert_eq!(replicas[0].fleet_count("bad_token").await, 2);
    assert!(
        replicas[0]
            .log_text()
            .contains("check that every replica has the same [fleet] secret"),
        "{}",
        replicas[0].log_text()
    );

    // The third replica gets another secret (a Secret rotated on one pod
    // first): its forwards are refused at once and it serves them itself;
    // the others' forwards to it likewise. No request fails or waits for
    // a timeout.
    let other =
        fleet_table(addrs[2], &addrs, extra).replace(SECRET, "another-secret-0123456789abcdef");
    replicas[2].reload(origin.addr, &other);
    let started = Instant::now();
    load(&replicas, 300, |i| format!("/k/{}", i % 100)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(replicas[2].fleet_count("peer_error").await >= 1);
    assert!(replicas[2].fleet_count("bad_token").await >= 1);
    assert_eq!(
        origin.peer_fields.load(Ordering::Relaxed),
        0,
        "a peer field reached the origin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_one_replica_under_load_fails_no_request() {
    let origin = CountingOrigin::start().await;
    let addrs = addresses();
    let mut replicas: Vec<Replica> = addrs
        .iter()
        .map(|&a| {
            let table = fleet_table(a, &addrs, "");
            Replica::start(
                a,
                origin.addr,
                &format!("{table}\n[server]\nshutdown_grace = \"3s\"\n"),
            )
        })
        .collect();
    let mut leaving = replicas.pop().expect("three");
    let admin = leaving.admin();
    let survivors: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();

    // Load on the two that stay (a load balancer's view), and requests in
    // flight on the one that leaves when it gets SIGTERM.
    let steady = tokio::spawn(load_to(survivors, 6000, |i| format!("/k/{}", i % 500)));
    let in_flight = tokio::spawn(load_to(vec![leaving.addr], 8, |i| {
        format!("/slow/drain-{i}")
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    leaving.weir.signal("TERM");
    let sent = Instant::now();
    assert!(!steady.is_finished(), "the load outlasts the SIGTERM");

    // Readiness fails at once; liveness holds while it drains.
    let code = |path: &str| curl_code(&format!("http://{admin}{path}"));
    assert_eq!(code("/readyz"), "503");
    let not_ready = sent.elapsed();
    assert!(not_ready < Duration::from_millis(500), "{not_ready:?}");
    assert_eq!(code("/livez"), "200");

    // It exits within its grace period (3 s), with margin for a loaded
    // machine, while the load on the others goes on.
    let exited = loop {
        if let Some(status) = leaving.weir.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(8),
            "still running {:?} after SIGTERM",
            sent.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let gone = sent.elapsed();
    assert!(exited.success(), "{exited:?}\n{}", leaving.log_text());
    in_flight
        .await
        .expect("the requests in flight on the leaving replica all ended 200");
    steady.await.expect("every request to the others ended 200");
    eprintln!("drain: /readyz 503 after {not_ready:?}, exit after {gone:?} (grace 3 s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_and_a_leave_move_about_a_quarter_of_the_keys_and_fetch_none_again() {
    let origin = CountingOrigin::start().await;
    let port = free_port();
    let addrs: Vec<SocketAddr> = (1..=4)
        .map(|i| SocketAddr::from(([127, 0, 0, i], port)))
        .collect();
    let extra = "peer_timeout = \"10s\"";
    let (three, four) = (&addrs[..3], &addrs[..]);
    let mut replicas: Vec<Replica> = three
        .iter()
        .map(|&a| Replica::start(a, origin.addr, &fleet_table(a, three, extra)))
        .collect();
    load(&replicas, 900, |i| format!("/k/{}", i % 300)).await;
    assert_eq!(origin.total(), 300, "warm: each key once");

    // A fourth replica joins: it starts with the four, and the three are
    // reloaded with them.
    replicas.push(Replica::start(
        addrs[3],
        origin.addr,
        &fleet_table(addrs[3], four, extra),
    ));
    for (r, &a) in replicas.iter().zip(four).take(3) {
        r.reload(origin.addr, &fleet_table(a, four, extra));
    }
    load(&replicas, 1200, |i| format!("/k/{}", i % 300)).await;
    let joined = replicas[3].fleet_count("handoff").await;
    eprintln!("join: {joined} of 300 keys handed to the new replica");
    assert!(
        (40..=110).contains(&joined),
        "keys handed to the new replica: {joined} of 300"
    );
    assert_eq!(
        origin.total(),
        300,
        "the moved keys came from their previous owners"
    );

    // The third leaves the ring while it still runs: the others are
    // reloaded without it and take its keys from its cache.
    let left: Vec<SocketAddr> = [addrs[0], addrs[1], addrs[3]].to_vec();
    let before: u64 = {
        let mut n = 0;
        for r in &replicas {
            n += r.fleet_count("handoff").await;
        }
        n
    };
    for i in [0, 1, 3] {
        replicas[i].reload(origin.addr, &fleet_table(addrs[i], &left, extra));
    }
    let staying = vec![addrs[0], addrs[1], addrs[3]];
    load_to(staying, 1200, |i| format!("/k/{}", i % 300)).await;
    let mut after = 0;
    for r in &replicas {
        after += r.fleet_count("handoff").await;
    }
    let moved = after - before;
    eprintln!("leave: {moved} of 300 keys handed over from the leaver");
    assert!(
        (40..=110).contains(&moved),
        "keys handed over from the leaver: {moved} of 300"
    );
    assert_eq!(origin.total(), 300, "the leaver's keys came from its cache");
    assert!(replicas[2].fleet_count("peek_served").await >= moved);
    // A peek's `204 miss` has no body: its end is no client abort.
    for r in &replicas {
        assert!(
            !r.log_text().contains("client_aborted"),
            "{}: a peek logged as a client abort",
            r.addr
        );
    }
}
