//! The response cache on real sockets: a counting upstream behind Weir.
//! MISS then HIT (same SHA-256, `Age`), Vary variants apart, `no-store`,
//! aborted fills leave nothing, 304 revalidation, stale-if-error,
//! collapsing of 50 concurrent cold requests, and the RSS bound of a
//! 1 GB response whose fill is abandoned.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::oneshot;
use weir_proxy::cache::CacheStats;
use weir_proxy::config::Config;

/// Period of the generated bodies: a prime, so consecutive 64 KiB chunks differ.
const PERIOD: u64 = 65521;

/// Byte `i` of every generated body.
fn byte_at(i: u64) -> u8 {
    let i = i % PERIOD;
    (i.wrapping_mul(31).wrapping_add(i >> 7) % 251) as u8
}

/// Two periods and a chunk of the pattern: any chunk is a slice of it, no copy.
fn pattern() -> &'static Bytes {
    static P: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        (0..PERIOD + 64 * 1024)
            .map(byte_at)
            .collect::<Vec<u8>>()
            .into()
    })
}

/// What the test upstream serves.
#[derive(Clone)]
struct Spec {
    size: u64,
    cache_control: &'static str,
    etag: bool,
    vary: bool,
    /// Send `Content-Length` (else chunked).
    length: bool,
    /// Pause after each 64 KiB chunk.
    delay: Duration,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            size: 300_000,
            cache_control: "max-age=60",
            etag: false,
            vary: false,
            length: true,
            delay: Duration::ZERO,
        }
    }
}

/// Shared state of the test upstream.
#[derive(Default)]
struct Upstream {
    requests: AtomicUsize,
    /// Answer every request with this status and no body (0: off).
    status: AtomicU16,
    /// Fail the body half-way.
    die_mid_body: AtomicBool,
    /// `If-None-Match` of the last request.
    if_none_match: Mutex<Option<String>>,
}

/// A generated body: `size` bytes in 64 KiB chunks, optionally slow,
/// optionally failing half-way.
struct GenBody {
    pos: u64,
    size: u64,
    fail_at: Option<u64>,
    delay: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    length: bool,
}

impl Body for GenBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(s) = self.sleep.as_mut() {
            if s.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        if self.fail_at.is_some_and(|f| self.pos >= f) {
            return Poll::Ready(Some(Err(std::io::Error::other("upstream dies"))));
        }
        if self.pos >= self.size {
            return Poll::Ready(None);
        }
        let n = (self.size - self.pos).min(64 * 1024);
        let at = (self.pos % PERIOD) as usize;
        let chunk = pattern().slice(at..at + n as usize);
        self.pos += n;
        if !self.delay.is_zero() {
            self.sleep = Some(Box::pin(tokio::time::sleep(self.delay)));
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        if self.length {
            hyper::body::SizeHint::with_exact(self.size - self.pos)
        } else {
            hyper::body::SizeHint::default()
        }
    }
}

use std::future::Future as _;

/// The expected body of `spec` (and of a variant body for `vary`).
fn expected(spec: &Spec) -> Vec<u8> {
    (0..spec.size).map(byte_at).collect()
}

/// Starts the counting upstream.
async fn start_upstream(spec: Spec) -> (SocketAddr, Arc<Upstream>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let state = Arc::new(Upstream::default());
    let st = Arc::clone(&state);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let st = Arc::clone(&st);
            let spec = spec.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let st = Arc::clone(&st);
                    let spec = spec.clone();
                    async move { Ok::<_, Infallible>(answer(&st, &spec, &req)) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, state)
}

type AnyBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

fn answer(st: &Upstream, spec: &Spec, req: &Request<Incoming>) -> Response<AnyBody> {
    st.requests.fetch_add(1, Ordering::SeqCst);
    let inm = req
        .headers()
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    *st.if_none_match.lock().expect("lock") = inm.clone();
    let status = st.status.load(Ordering::SeqCst);
    if status != 0 {
        return Response::builder()
            .status(status)
            .body(Empty::new().map_err(|e| match e {}).boxed())
            .expect("response");
    }
    let mut b = Response::builder().header("cache-control", spec.cache_control);
    if spec.etag {
        b = b.header("etag", "\"v1\"");
        if inm.as_deref().is_some_and(|v| v.contains("\"v1\"")) {
            return b
                .status(304)
                .body(Empty::new().map_err(|e| match e {}).boxed())
                .expect("304");
        }
    }
    if spec.vary {
        let ae = req
            .headers()
            .get("accept-encoding")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_owned();
        return b
            .header("vary", "Accept-Encoding")
            .body(
                http_body_util::Full::new(Bytes::from(format!("variant:{ae}")))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .expect("vary");
    }
    let body = GenBody {
        pos: 0,
        size: spec.size,
        fail_at: st
            .die_mid_body
            .load(Ordering::SeqCst)
            .then_some(spec.size / 2),
        delay: spec.delay,
        sleep: None,
        length: spec.length,
    };
    b.body(body.boxed()).expect("response")
}

/// The proxy in-process with `cache = true` on its route, and its counters.
struct Cached {
    addr: SocketAddr,
    stats: Arc<CacheStats>,
    _stop: oneshot::Sender<()>,
}

async fn start_cached(upstream: SocketAddr, cache_table: &str) -> Cached {
    let text = config_text(
        &format!("http://{upstream}"),
        "",
        "",
        &format!("cache = true\n\n[cache]\n{cache_table}\n"),
    );
    let config = Config::parse(&text, "test.toml", &repo_root()).expect("valid config");
    let server = weir_proxy::Server::bind(&config).await.expect("bind");
    let addr = server.local_addrs()[0];
    let stats = server.cache_stats();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .run(async {
                let _ = rx.await;
            })
            .await;
    });
    Cached {
        addr,
        stats,
        _stop: tx,
    }
}

impl Cached {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits until `counter` reaches `n` (the fill task runs just after the
    /// client's body ends).
    async fn wait(&self, counter: impl Fn(&CacheStats) -> u64, n: u64) {
        let start = Instant::now();
        while counter(&self.stats) < n {
            assert!(start.elapsed() < Duration::from_secs(10), "counter stuck");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// GET with extra headers: status, `X-Cache`, `Age`, body.
async fn fetch(
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, Option<String>, Bytes) {
    let mut req = Request::get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client(false)
        .request(
            req.body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("response");
    let h = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (x, age) = (h("x-cache"), h("age"));
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, x, age, body)
}

fn requests(up: &Upstream) -> usize {
    up.requests.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn miss_then_hit_is_byte_identical_with_age() {
    let spec = Spec::default();
    let (up_addr, up) = start_upstream(spec.clone()).await;
    let p = start_cached(up_addr, "").await;
    let want = sha256_hex(&expected(&spec));

    let (s, x, _, body) = fetch(&p.url("/obj?a=1"), &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("MISS")));
    assert_eq!(sha256_hex(&body), want);
    p.wait(|s| s.fills.load(Ordering::Relaxed), 1).await;

    let (s, x, age, body) = fetch(&p.url("/obj?a=1"), &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("HIT")));
    assert!(age.is_some_and(|a| a.parse::<u64>().is_ok()), "Age header");
    assert_eq!(sha256_hex(&body), want);
    assert_eq!(requests(&up), 1, "the hit never reached the upstream");

    // Another query is another key.
    let (_, x, _, _) = fetch(&p.url("/obj?a=2"), &[]).await;
    assert_eq!(x.as_deref(), Some("MISS"));
    assert_eq!(requests(&up), 2);

    // HEAD is answered from the GET entry.
    let resp = client(false)
        .request(
            Request::head(p.url("/obj?a=1"))
                .body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("head");
    assert_eq!(resp.headers()["x-cache"], "HIT");
    assert_eq!(
        resp.headers()["content-length"],
        spec.size.to_string().as_str()
    );
    assert_eq!(requests(&up), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vary_variants_are_separate() {
    let (up_addr, up) = start_upstream(Spec {
        vary: true,
        ..Spec::default()
    })
    .await;
    let p = start_cached(up_addr, "").await;
    let url = p.url("/v");
    let (_, x, _, body) = fetch(&url, &[("accept-encoding", "gzip")]).await;
    assert_eq!(
        (x.as_deref(), &body[..]),
        (Some("MISS"), &b"variant:gzip"[..])
    );
    p.wait(|s| s.fills.load(Ordering::Relaxed), 1).await;
    let (_, x, _, body) = fetch(&url, &[("accept-encoding", "br")]).await;
    assert_eq!(
        (x.as_deref(), &body[..]),
        (Some("MISS"), &b"variant:br"[..])
    );
    p.wait(|s| s.fills.load(Ordering::Relaxed), 2).await;
    for ae in ["gzip", "br"] {
        let (_, x, _, body) = fetch(&url, &[("accept-encoding", ae)]).await;
        assert_eq!(x.as_deref(), Some("HIT"));
        assert_eq!(body, format!("variant:{ae}"));
    }
    assert_eq!(requests(&up), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_store_is_not_cached() {
    let (up_addr, up) = start_upstream(Spec {
        cache_control: "no-store",
        ..Spec::default()
    })
    .await;
    let p = start_cached(up_addr, "").await;
    for _ in 0..2 {
        let (s, x, _, _) = fetch(&p.url("/n"), &[]).await;
        assert_eq!((s, x.as_deref()), (200, Some("MISS")));
    }
    assert_eq!(requests(&up), 2);
    assert_eq!(p.stats.fills.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_dying_mid_body_leaves_nothing() {
    // Slow enough that the head is out before the upstream dies.
    let spec = Spec {
        size: 2_000_000,
        delay: Duration::from_millis(2),
        ..Spec::default()
    };
    let (up_addr, up) = start_upstream(spec.clone()).await;
    let p = start_cached(up_addr, "").await;
    up.die_mid_body.store(true, Ordering::SeqCst);
    let resp = client(false)
        .request(
            Request::get(p.url("/d"))
                .body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("head");
    let status = resp.status();
    let got = resp.into_body().collect().await.map(|b| b.to_bytes().len());
    assert!(got.is_err(), "the client sees the cut: {status} {got:?}");
    p.wait(|s| s.abandoned.load(Ordering::Relaxed), 1).await;
    up.die_mid_body.store(false, Ordering::SeqCst);
    let (_, x, _, body) = fetch(&p.url("/d"), &[]).await;
    assert_eq!(x.as_deref(), Some("MISS"));
    assert_eq!(sha256_hex(&body), sha256_hex(&expected(&spec)));
    assert_eq!(requests(&up), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_abort_abandons_the_fill() {
    let spec = Spec {
        size: 2_000_000,
        delay: Duration::from_millis(20),
        ..Spec::default()
    };
    let (up_addr, up) = start_upstream(spec.clone()).await;
    let p = start_cached(up_addr, "").await;
    let resp = client(false)
        .request(
            Request::get(p.url("/c"))
                .body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("head");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.is_data());
    drop(body);
    p.wait(|s| s.abandoned.load(Ordering::Relaxed), 1).await;
    let (_, x, _, body) = fetch(&p.url("/c"), &[]).await;
    assert_eq!(x.as_deref(), Some("MISS"));
    assert_eq!(body.len() as u64, spec.size);
    assert_eq!(requests(&up), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_max_object_bytes_is_not_stored() {
    for length in [true, false] {
        let (up_addr, up) = start_upstream(Spec {
            length,
            ..Spec::default()
        })
        .await;
        let p = start_cached(up_addr, "max_object_bytes = 100000\n").await;
        for _ in 0..2 {
            let (_, x, _, body) = fetch(&p.url("/big"), &[]).await;
            assert_eq!(x.as_deref(), Some("MISS"));
            assert_eq!(body.len(), 300_000);
        }
        assert_eq!(requests(&up), 2, "length known: {length}");
        assert_eq!(p.stats.fills.load(Ordering::Relaxed), 0);
        if !length {
            // Chunked: the fill starts and is abandoned at the limit.
            p.wait(|s| s.abandoned.load(Ordering::Relaxed), 2).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_entry_is_revalidated_with_its_etag() {
    let spec = Spec {
        cache_control: "max-age=0",
        etag: true,
        ..Spec::default()
    };
    let (up_addr, up) = start_upstream(spec.clone()).await;
    let p = start_cached(up_addr, "").await;
    let (_, x, _, _) = fetch(&p.url("/r"), &[]).await;
    assert_eq!(x.as_deref(), Some("MISS"));
    p.wait(|s| s.fills.load(Ordering::Relaxed), 1).await;
    let (s, x, _, body) = fetch(&p.url("/r"), &[]).await;
    assert_eq!(
        up.if_none_match.lock().expect("lock").as_deref(),
        Some("\"v1\"")
    );
    assert_eq!((s, x.as_deref()), (200, Some("HIT")));
    assert_eq!(sha256_hex(&body), sha256_hex(&expected(&spec)));
    assert_eq!(requests(&up), 2);
    assert_eq!(p.stats.revalidated.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_if_error_serves_the_stale_entry() {
    let spec = Spec {
        cache_control: "max-age=0, stale-if-error=60",
        ..Spec::default()
    };
    let (up_addr, up) = start_upstream(spec.clone()).await;
    let p = start_cached(up_addr, "").await;
    fetch(&p.url("/e"), &[]).await;
    p.wait(|s| s.fills.load(Ordering::Relaxed), 1).await;
    up.status.store(503, Ordering::SeqCst);
    let (s, x, _, body) = fetch(&p.url("/e"), &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("STALE")));
    assert_eq!(sha256_hex(&body), sha256_hex(&expected(&spec)));
    assert_eq!(requests(&up), 2);

    // Without stale-if-error, the 503 goes through.
    let (up2_addr, up2) = start_upstream(Spec {
        cache_control: "max-age=0",
        ..Spec::default()
    })
    .await;
    let p2 = start_cached(up2_addr, "").await;
    fetch(&p2.url("/e"), &[]).await;
    p2.wait(|s| s.fills.load(Ordering::Relaxed), 1).await;
    up2.status.store(503, Ordering::SeqCst);
    let (s, _, _, _) = fetch(&p2.url("/e"), &[]).await;
    assert_eq!(s, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_cold_requests_make_one_upstream_request() {
    let spec = Spec {
        size: 5 * 1024 * 1024,
        delay: Duration::from_millis(5),
        ..Spec::default()
    };
    let (up_addr, up) = start_upstream(spec.clone()).await;
    let p = start_cached(up_addr, "").await;
    let want = sha256_hex(&expected(&spec));
    let url = p.url("/five");
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { fetch(&url, &[]).await })
        })
        .collect();
    let mut labels = std::collections::BTreeMap::new();
    for t in tasks {
        let (s, x, _, body) = t.await.expect("join");
        assert_eq!(s, 200);
        assert_eq!(sha256_hex(&body), want);
        *labels.entry(x.unwrap_or_default()).or_insert(0) += 1;
    }
    let n = requests(&up);
    println!("50 concurrent cold requests: {n} upstream request(s); X-Cache {labels:?}");
    assert_eq!(n, 1);
    assert_eq!(labels.get("MISS"), Some(&1));
}

/// Guarantee 4b: a 1 GB response through the `weir` binary, with a fill
/// that is abandoned (chunked, over max_object_bytes), keeps the proxy's
/// peak RSS under 64 MB while the client gets every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1gb_response_keeps_rss_bounded() {
    let spec = Spec {
        size: 1 << 30,
        length: false,
        ..Spec::default()
    };
    let (up_addr, up) = start_upstream(spec).await;
    let config = format!(
        "[[listener]]\naddress = \"127.0.0.1:{{port}}\"\n\n[[upstream]]\nname = \"app\"\nurl = \"http://{up_addr}\"\n\n\
         [[route]]\npath_prefix = \"/\"\nupstream = \"app\"\ncache = true\n\n[cache]\nfill_hwm = 16\n"
    );
    let weir = tokio::task::spawn_blocking(move || WeirProcess::start(&config))
        .await
        .expect("start");
    let start = Instant::now();
    let resp = client(false)
        .request(
            Request::get(weir.url("/huge"))
                .body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("head");
    assert_eq!(resp.headers()["x-cache"], "MISS");
    let mut body = resp.into_body();
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("frame").into_data() {
            total += data.len() as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let rss = weir.peak_rss();
    println!(
        "1 GiB through weir (fill abandoned): {:.0} MB/s, peak RSS {} MB",
        total as f64 / secs / 1e6,
        rss >> 20
    );
    assert_eq!(total, 1 << 30);
    assert_eq!(requests(&up), 1);
    assert!(rss < 64 << 20, "peak RSS {rss}");
}
