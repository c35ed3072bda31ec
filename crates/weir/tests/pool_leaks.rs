//! The upstream pool never leaks: after a storm of requests of which a
//! third abort mid-body, the live upstream connections (counted exactly by
//! the proxy's connector) drop to at most `pool_max_idle_per_host` at once,
//! and to 0 once the idle timeout has passed; the process's open file
//! descriptors return to their starting count.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;

const REQUESTS: usize = 10_000;
const CONCURRENCY: usize = 16;
const MAX_IDLE: u64 = 4;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_storm_leaves_no_upstream_connection_behind() {
    let origin = start_origin().await;
    let proxy = start_proxy(&config_text(
        &format!("http://{}", origin.addr),
        "",
        &format!("pool_idle_timeout = \"2s\"\npool_max_idle_per_host = {MAX_IDLE}"),
        "transforms = [\"coalesce\", \"compress\"]",
    ))
    .await;
    let fds_before = open_fds();
    let conns = proxy.upstream_connections.clone();
    let started = Instant::now();

    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let url = proxy.url("/stream/65536?chunk=8192");
        tasks.push(tokio::spawn(async move {
            // Each worker's client keeps one connection to the proxy.
            let client = client(worker % 2 == 1);
            let (mut completed, mut aborted) = (0usize, 0usize);
            let mut seed = worker as u64 + 1;
            for _ in (worker..REQUESTS).step_by(CONCURRENCY) {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let abort = (seed >> 33).is_multiple_of(3);
                let req = Request::get(&url)
                    .header(
                        "accept-encoding",
                        if seed & 1 == 0 { "gzip" } else { "identity" },
                    )
                    .body(Full::new(Bytes::new()))
                    .expect("request");
                let resp = client.request(req).await.expect("response");
                assert_eq!(resp.status(), 200);
                let mut body = resp.into_body();
                if abort {
                    // Read one frame, then walk away mid-body.
                    let _ = body.frame().await;
                    drop(body);
                    aborted += 1;
                } else {
                    body.collect().await.expect("whole body");
                    completed += 1;
                }
            }
            (completed, aborted)
        }));
    }
    let (mut completed, mut aborted) = (0, 0);
    for t in tasks {
        let (c, a) = t.await.expect("worker");
        completed += c;
        aborted += a;
    }
    let storm = started.elapsed();
    assert_eq!(completed + aborted, REQUESTS);
    assert!(
        aborted > REQUESTS / 4 && aborted < REQUESTS * 5 / 12,
        "aborted {aborted}"
    );
    let opened = conns.opened();

    // Aborted bodies close their upstream connection; completed ones go
    // back to the pool, which keeps at most MAX_IDLE per host.
    let settled = eventually(Duration::from_secs(2), || conns.live() <= MAX_IDLE).await;
    assert!(
        settled,
        "{} live upstream connections after the storm",
        conns.live()
    );
    // After the idle timeout (2 s, plus the pool timer's granularity), none.
    let drained = eventually(Duration::from_secs(6), || conns.live() == 0).await;
    assert!(
        drained,
        "{} live upstream connections after the idle timeout",
        conns.live()
    );
    let fds_back = eventually(Duration::from_secs(3), || open_fds() <= fds_before).await;
    assert!(
        fds_back,
        "open fds: {} before, {} after",
        fds_before,
        open_fds()
    );
    eprintln!(
        "{REQUESTS} requests ({aborted} aborted) in {storm:?}; {opened} upstream connections opened; \
         live after: {}",
        conns.live()
    );
}
