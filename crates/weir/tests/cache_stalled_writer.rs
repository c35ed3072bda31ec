//! Guarantee 4(b) with a cache writer that really stalls: a 1 GiB
//! response is filled into the cache while the writer stops reading its
//! branch of the shared body (`weir_proxy::cache::test_hooks`), so the
//! share detaches it for lagging. The client still gets every byte at full
//! speed, the proxy's memory stays bounded, and nothing is stored.
//!
//! In a test binary of its own: the stall hook is process-wide, and the
//! peak RSS measured is this process's (proxy, upstream and client all run
//! here), so no other test may run beside it.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::oneshot;
use weir_proxy::cache::test_hooks;
use weir_proxy::config::Config;
use weir_proxy::metrics::FillResult;

const GIB: u64 = 1 << 30;

/// `size` bytes of the shared pattern, in 64 KiB slices, with a length.
struct PatternBody {
    pos: u64,
    size: u64,
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.pos >= self.size {
            return Poll::Ready(None);
        }
        let n = (self.size - self.pos).min(64 * 1024);
        let at = (self.pos % PERIOD) as usize;
        self.pos += n;
        Poll::Ready(Some(Ok(Frame::data(pattern().slice(at..at + n as usize)))))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.size - self.pos)
    }
}

/// An upstream serving 1 GiB of the pattern on every path, cacheable,
/// counting requests.
async fn start_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let requests = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&requests);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let service = service_fn(move |_req: Request<Incoming>| {
                    count.fetch_add(1, Ordering::SeqCst);
                    async move {
                        Response::builder()
                            .header("cache-control", "max-age=60")
                            .body(PatternBody { pos: 0, size: GIB })
                            .map_err(|e| std::io::Error::other(e.to_string()))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, requests)
}

/// This process's peak resident set size (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kb * 1024
}

/// Resets the peak RSS to the current RSS (Linux: `5` to `clear_refs`);
/// whether it could.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// GETs `url` and reads the whole body, checking every byte against the
/// pattern: `X-Cache`, bytes, MB/s. A body that stalls for 30 s fails.
async fn download(url: &str) -> (Option<String>, u64, f64) {
    let start = Instant::now();
    let resp = client(false)
        .request(
            Request::get(url)
                .body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("head");
    assert_eq!(resp.status(), 200);
    let x_cache = resp
        .headers()
        .get("x-cache")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = resp.into_body();
    let mut total = 0u64;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .expect("the body never stalls for 30 s");
        let Some(frame) = frame else { break };
        if let Ok(data) = frame.expect("frame").into_data() {
            assert!(is_pattern(total, &data), "byte {total} differs");
            total += data.len() as u64;
        }
    }
    let mbps = total as f64 / start.elapsed().as_secs_f64() / 1e6;
    (x_cache, total, mbps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cache_writer_is_detached_while_the_client_gets_1gib_at_full_speed() {
    let (up_addr, requests) = start_upstream().await;
    // Limits far above 1 GiB: only lag can abandon this fill.
    let text = config_text(
        &format!("http://{up_addr}"),
        "",
        "",
        "cache = true\n\n[[route]]\npath_prefix = \"/plain\"\nupstream = \"app\"\n\n\
         [cache]\nmax_bytes = 4294967296\nmax_object_bytes = 2147483648\n",
    );
    let config = Config::parse(&text, "test.toml", &repo_root()).expect("valid config");
    let server = weir_proxy::Server::bind(&config).await.expect("bind");
    let addr = server.local_addrs()[0];
    let admin = server.admin_addr().expect("admin");
    let stats = server.metrics();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .run(async {
                let _ = stopped.await;
            })
            .await;
    });

    // For comparison: the same 1 GiB through a route without the cache.
    let (_, total, plain_mbps) = download(&format!("http://{addr}/plain/huge")).await;
    assert_eq!(total, GIB);

    let reset = reset_peak_rss();
    let before = peak_rss();
    // Every cache writer stops reading once it holds 1 MiB, still attached.
    test_hooks::stall_cache_writers_after(1 << 20);
    let (x_cache, total, mbps) = download(&format!("http://{addr}/huge")).await;
    let rss = peak_rss();
    test_hooks::resume_cache_writers();
    println!(
        "1 GiB, cache writer stalled after 1 MiB: client {mbps:.0} MB/s \
         (same proxy, no cache: {plain_mbps:.0} MB/s); peak RSS {} MB \
         (process, {} MB before the transfer{})",
        rss >> 20,
        before >> 20,
        if reset {
            ", peak reset"
        } else {
            ", peak not reset"
        }
    );
    assert_eq!(x_cache.as_deref(), Some("MISS"));
    assert_eq!(total, GIB);
    assert!(rss < 64 << 20, "peak RSS {rss}");

    // Resumed, the writer finds itself detached: abandoned for lag.
    let start = Instant::now();
    while stats.cache_fill_count(FillResult::Abandoned) < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "fill not abandoned"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stats.share_lag_detach_count("cache"), 1);
    assert_eq!(stats.cache_fill_count(FillResult::Stored), 0);
    let (status, _, body) = get(&format!("http://{admin}/metrics"), false).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body.to_vec()).expect("UTF-8");
    for series in [
        "weir_cache_fills_total{result=\"abandoned\"} 1",
        "weir_cache_fills_total{result=\"stored\"} 0",
        "weir_share_lag_detaches_total{branch=\"cache\"} 1",
    ] {
        assert!(text.lines().any(|l| l == series), "{series} in\n{text}");
    }
    // Nothing stored: a HEAD is not answered from the cache.
    let resp = client(false)
        .request(
            Request::head(format!("http://{addr}/huge"))
                .body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("head");
    assert_eq!(
        resp.headers().get("x-cache").and_then(|v| v.to_str().ok()),
        Some("MISS")
    );
    assert_eq!(requests.load(Ordering::SeqCst), 3);
    let _ = stop.send(());
}
