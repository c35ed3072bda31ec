//! The response cache on real sockets: a counting upstream behind Weir.
//! MISS then HIT (same SHA-256, `Age`), Vary variants apart, `no-store`,
//! aborted fills leave nothing, 304 revalidation, stale-if-error (5xx and
//! a refused connection), stale-while-revalidate (one background
//! revalidation, refresh or replacement), a client's own conditional
//! requests answered 304, collapsing of 50 concurrent cold requests, and
//! the RSS bound of a 1 GB response whose fill is abandoned.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
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
use weir_proxy::config::Config;
use weir_proxy::metrics::{CacheResult, FillResult, Metrics};

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
    stats: Arc<Metrics>,
    /// The admin listener (`/metrics`).
    admin: SocketAddr,
    /// Live and opened upstream connections, counted by the proxy.
    conns: Arc<weir_proxy::counted::ConnectionCounts>,
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
    let stats = server.metrics();
    let admin = server.admin_addr().expect("admin listener");
    let conns = server.upstream_connections();
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
        admin,
        conns,
        _stop: tx,
    }
}

impl Cached {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits until `counter` reaches `n` (the fill task runs just after the
    /// client's body ends).
    async fn wait(&self, counter: impl Fn(&Metrics) -> u64, n: u64) {
        let start = Instant::now();
        while counter(&self.stats) < n {
            assert!(start.elapsed() < Duration::from_secs(10), "counter stuck");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The value of one sample of the admin listener's `/metrics`, written
    /// exactly as `series` (name and labels).
    async fn metric(&self, series: &str) -> Option<f64> {
        let (status, _, body) = get(&format!("http://{}/metrics", self.admin), false).await;
        assert_eq!(status, 200);
        let text = String::from_utf8(body.to_vec()).expect("UTF-8 metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }
}

/// GET with extra headers: status, `X-Cache`, `Age`, body.
async fn fetch(
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, Option<String>, Bytes) {
    let (status, fields, body) = send(url, "GET", headers).await;
    let h = |n: &str| {
        fields
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    (status, h("x-cache"), h("age"), body)
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
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;

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

    // A HEAD without a stored GET goes upstream, and says so.
    let resp = client(false)
        .request(
            Request::head(p.url("/obj?a=3"))
                .body(http_body_util::Full::new(Bytes::new()))
                .expect("req"),
        )
        .await
        .expect("head");
    assert_eq!(resp.headers()["x-cache"], "MISS");
    assert_eq!(requests(&up), 3);
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
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    let (_, x, _, body) = fetch(&url, &[("accept-encoding", "br")]).await;
    assert_eq!(
        (x.as_deref(), &body[..]),
        (Some("MISS"), &b"variant:br"[..])
    );
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 2).await;
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
    assert_eq!(p.stats.cache_fill_count(FillResult::Stored), 0);
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
    p.wait(|s| s.cache_fill_count(FillResult::Abandoned), 1)
        .await;
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
    p.wait(|s| s.cache_fill_count(FillResult::Abandoned), 1)
        .await;
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
        assert_eq!(p.stats.cache_fill_count(FillResult::Stored), 0);
        if !length {
            // Chunked: the fill starts and is abandoned at the limit.
            p.wait(|s| s.cache_fill_count(FillResult::Abandoned), 2)
                .await;
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
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    let (s, x, _, body) = fetch(&p.url("/r"), &[]).await;
    assert_eq!(
        up.if_none_match.lock().expect("lock").as_deref(),
        Some("\"v1\"")
    );
    assert_eq!((s, x.as_deref()), (200, Some("HIT")));
    assert_eq!(sha256_hex(&body), sha256_hex(&expected(&spec)));
    assert_eq!(requests(&up), 2);
    assert_eq!(p.stats.cache_fill_count(FillResult::Refreshed), 1);
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
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
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
    p2.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
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
            assert!(is_pattern(total, &data), "byte {total} differs");
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

// --- A versioned upstream: its body, ETag and Cache-Control can change,
// its answers can be delayed, every request is recorded, and it can be
// stopped (listener and open connections closed).

/// The `Last-Modified` the versioned upstream sends.
const LAST_MODIFIED: &str = "Tue, 15 Nov 1994 08:12:31 GMT";

/// State of the versioned upstream.
struct Versioned {
    addr: SocketAddr,
    /// Requests received.
    requests: AtomicUsize,
    /// Requests answered (after the delay).
    answered: AtomicUsize,
    /// The representation served: body `version N`, ETag `"vN"`.
    version: AtomicUsize,
    /// Send `ETag` and `Last-Modified` (and answer `If-None-Match` with 304).
    validators: AtomicBool,
    cache_control: Mutex<String>,
    /// Delay before each answer, ms.
    delay_ms: AtomicU64,
    /// Times the body repeats its line (`version N\n`).
    repeat: AtomicUsize,
    /// `If-None-Match` and `If-Modified-Since` of each request, in order.
    seen: Mutex<Vec<(Option<String>, Option<String>)>>,
    /// The accept loop and the connections, aborted by `stop`.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Versioned {
    async fn start(cache_control: &str, validators: bool) -> Arc<Versioned> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let st = Arc::new(Versioned {
            addr: listener.local_addr().expect("addr"),
            requests: AtomicUsize::new(0),
            answered: AtomicUsize::new(0),
            version: AtomicUsize::new(1),
            validators: AtomicBool::new(validators),
            cache_control: Mutex::new(cache_control.to_owned()),
            delay_ms: AtomicU64::new(0),
            repeat: AtomicUsize::new(1000),
            seen: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
        });
        let state = Arc::clone(&st);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let st = Arc::clone(&state);
                let conn = tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let st = Arc::clone(&st);
                        async move { Ok::<_, Infallible>(st.answer(&req).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                state.tasks.lock().expect("lock").push(conn);
            }
        });
        st.tasks.lock().expect("lock").push(accept);
        st
    }

    /// The body of `version` with the default `repeat`.
    fn body(version: usize) -> Bytes {
        Versioned::body_of(version, 1000)
    }

    fn body_of(version: usize, repeat: usize) -> Bytes {
        Bytes::from(format!("version {version}\n").repeat(repeat))
    }

    async fn answer(&self, req: &Request<Incoming>) -> Response<AnyBody> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let h = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let inm = h("if-none-match");
        self.seen
            .lock()
            .expect("lock")
            .push((inm.clone(), h("if-modified-since")));
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let version = self.version.load(Ordering::SeqCst);
        let cc = self.cache_control.lock().expect("lock").clone();
        let mut b = Response::builder()
            .header("cache-control", cc)
            .header("expires", "Thu, 01 Jan 2099 00:00:00 GMT")
            .header("vary", "Accept-Encoding")
            .header("content-type", "text/plain");
        let etag = format!("\"v{version}\"");
        let with_validators = self.validators.load(Ordering::SeqCst);
        if with_validators {
            b = b
                .header("etag", &etag)
                .header("last-modified", LAST_MODIFIED);
        }
        let resp = if with_validators && inm.is_some_and(|v| v.contains(&etag)) {
            b.status(304)
                .body(Empty::new().map_err(|e| match e {}).boxed())
        } else {
            b.body(
                http_body_util::Full::new(Versioned::body_of(
                    version,
                    self.repeat.load(Ordering::SeqCst),
                ))
                .map_err(|e| match e {})
                .boxed(),
            )
        };
        self.answered.fetch_add(1, Ordering::SeqCst);
        resp.expect("response")
    }

    /// Closes the listener and every open connection: from now on,
    /// connecting is refused.
    fn stop(&self) {
        for t in self.tasks.lock().expect("lock").drain(..) {
            t.abort();
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    fn seen(&self, i: usize) -> (Option<String>, Option<String>) {
        self.seen.lock().expect("lock")[i].clone()
    }
}

/// A request with `method` and extra headers: status, fields, body.
async fn send(url: &str, method: &str, headers: &[(&str, &str)]) -> (u16, http::HeaderMap, Bytes) {
    let mut req = Request::builder().method(method).uri(url);
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
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (parts.status.as_u16(), parts.headers, body)
}

/// The `X-Cache` field, `-` when missing.
fn x_cache(h: &http::HeaderMap) -> &str {
    h.get("x-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
}

/// Waits until `cond` holds, at most 10 s (a failed wait fails the test).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(10), &mut cond).await,
        "{what}"
    );
}

/// Long enough for a `max-age=1` entry to be stale: the `Date` the
/// upstream sends has one-second resolution.
const PAST_ONE_SECOND: Duration = Duration::from_millis(1600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_serves_at_once_and_revalidates_once_in_the_background() {
    let up = Versioned::start("max-age=1, stale-while-revalidate=30", true).await;
    let p = start_cached(up.addr, "").await;
    let url = p.url("/swr");
    let (s, x, _, body) = fetch(&url, &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("MISS")));
    assert_eq!(body, Versioned::body(1));
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    tokio::time::sleep(PAST_ONE_SECOND).await;

    // The revalidation takes 3 s upstream; the stale answer does not wait for it.
    up.delay_ms.store(3000, Ordering::SeqCst);
    let start = Instant::now();
    let (s, x, age, body) = fetch(&url, &[]).await;
    let took = start.elapsed();
    let answered_then = up.answered();
    println!("stale-while-revalidate: stale answer in {took:?} (upstream revalidation takes 3 s)");
    assert_eq!((s, x.as_deref()), (200, Some("STALE")));
    assert!(
        age.is_some_and(|a| a.parse::<u64>().is_ok_and(|a| a >= 1)),
        "Age"
    );
    assert_eq!(body, Versioned::body(1));
    assert_eq!(
        answered_then, 1,
        "served before the revalidation was answered"
    );
    until("the background revalidation reached the upstream", || {
        up.requests() == 2
    })
    .await;
    assert_eq!(up.seen(1).0.as_deref(), Some("\"v1\""), "If-None-Match");
    assert_eq!(
        up.seen(1).1.as_deref(),
        Some(LAST_MODIFIED),
        "If-Modified-Since"
    );

    // Meanwhile: stale answers, no more upstream requests.
    let during: Vec<_> = (0..5)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { fetch(&url, &[]).await })
        })
        .collect();
    for t in during {
        let (s, x, _, body) = t.await.expect("join");
        assert_eq!((s, x.as_deref()), (200, Some("STALE")));
        assert_eq!(body, Versioned::body(1));
    }
    assert_eq!(up.requests(), 2);

    // The 304 refreshes the entry: a plain hit afterwards.
    p.wait(|s| s.cache_fill_count(FillResult::Refreshed), 1)
        .await;
    let (s, x, _, body) = fetch(&url, &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("HIT")));
    assert_eq!(body, Versioned::body(1));
    assert_eq!(up.requests(), 2);
    assert_eq!(p.stats.cache_background_revalidation_count(), 1);
    assert_eq!(p.stats.cache_request_count(CacheResult::Stale), 6);
    assert_eq!(
        p.metric("weir_cache_requests_total{result=\"stale\"}")
            .await,
        Some(6.0)
    );
    assert_eq!(
        p.metric("weir_cache_fills_total{result=\"refreshed\"}")
            .await,
        Some(1.0)
    );
    // One request each: the miss, the final hit.
    assert_eq!(
        p.metric("weir_cache_requests_total{result=\"miss\"}").await,
        Some(1.0)
    );
    assert_eq!(
        p.metric("weir_cache_requests_total{result=\"hit\"}").await,
        Some(1.0)
    );
    // Through the pooled client, nothing left open or in flight.
    assert_eq!(
        p.conns.live(),
        p.conns.opened(),
        "no connection was dropped"
    );
    let in_flight = format!(
        "weir_upstream_requests_in_flight{{upstream=\"{}\"}}",
        up.addr
    );
    assert_eq!(p.metric(&in_flight).await, Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_without_validators_replaces_the_entry_with_a_plain_get() {
    let up = Versioned::start("max-age=1, stale-while-revalidate=30", false).await;
    let p = start_cached(up.addr, "").await;
    let url = p.url("/plain");
    let (_, x, _, body) = fetch(&url, &[]).await;
    assert_eq!((x.as_deref(), body), (Some("MISS"), Versioned::body(1)));
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    tokio::time::sleep(PAST_ONE_SECOND).await;

    up.version.store(2, Ordering::SeqCst);
    up.delay_ms.store(2000, Ordering::SeqCst);
    let (s, x, _, body) = fetch(&url, &[]).await;
    assert_eq!(
        up.answered(),
        1,
        "served before the revalidation was answered"
    );
    assert_eq!((s, x.as_deref()), (200, Some("STALE")));
    assert_eq!(body, Versioned::body(1));

    // The new body, read to its end in the background, replaces the entry.
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 2).await;
    assert_eq!(up.seen(1), (None, None), "a plain GET");
    let (s, x, _, body) = fetch(&url, &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("HIT")));
    assert_eq!(body, Versioned::body(2));
    assert_eq!(up.requests(), 2);
    // Read to the end, its connection went back to the pool.
    assert_eq!(
        p.conns.live(),
        p.conns.opened(),
        "no connection was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_replacement_over_max_object_bytes_is_dropped_with_its_connection() {
    let up = Versioned::start("max-age=1, stale-while-revalidate=30", false).await;
    // Version 1 (10 000 bytes) fits; version 2 (10 MB) does not.
    let p = start_cached(up.addr, "max_object_bytes = 100000\n").await;
    let url = p.url("/grows");
    let (_, x, _, _) = fetch(&url, &[]).await;
    assert_eq!(x.as_deref(), Some("MISS"));
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    tokio::time::sleep(PAST_ONE_SECOND).await;
    up.version.store(2, Ordering::SeqCst);
    up.repeat.store(1_000_000, Ordering::SeqCst);
    let (_, x, _, body) = fetch(&url, &[]).await;
    assert_eq!((x.as_deref(), body), (Some("STALE"), Versioned::body(1)));
    p.wait(|s| s.cache_fill_count(FillResult::Abandoned), 1)
        .await;
    // Dropped unread: its connection is closed, not pooled.
    until("the abandoned body's connection closed", || {
        p.conns.live() < p.conns.opened()
    })
    .await;
    // The superseded entry is gone: the next request goes upstream.
    let (_, x, _, body) = fetch(&url, &[]).await;
    assert_eq!(x.as_deref(), Some("MISS"));
    assert_eq!(body, Versioned::body_of(2, 1_000_000));
    assert_eq!(up.requests(), 3);
    // The last request leaves the gauge as its response ends, a moment
    // after the client has it.
    let in_flight = format!(
        "weir_upstream_requests_in_flight{{upstream=\"{}\"}}",
        up.addr
    );
    let start = Instant::now();
    while p.metric(&in_flight).await != Some(0.0) {
        assert!(start.elapsed() < Duration::from_secs(10), "still in flight");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_stale_while_revalidate_window_the_request_waits_for_revalidation() {
    let up = Versioned::start("max-age=1, stale-while-revalidate=1", true).await;
    let p = start_cached(up.addr, "").await;
    let url = p.url("/late");
    fetch(&url, &[]).await;
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    // Fresh for at most 1 s, then 1 s of window: 3.2 s is past both.
    tokio::time::sleep(2 * PAST_ONE_SECOND).await;
    up.delay_ms.store(1000, Ordering::SeqCst);
    let (s, x, _, body) = fetch(&url, &[]).await;
    assert_eq!(up.answered(), 2, "the request waited for the revalidation");
    assert_eq!((s, x.as_deref()), (200, Some("HIT")));
    assert_eq!(body, Versioned::body(1));
    assert_eq!(up.seen(1).0.as_deref(), Some("\"v1\""));
    assert_eq!(p.stats.cache_fill_count(FillResult::Refreshed), 1);
    assert_eq!(p.stats.cache_request_count(CacheResult::Stale), 0);
    assert_eq!(p.stats.cache_background_revalidation_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upstream_gets_stale_if_error_then_502_past_the_window() {
    let up = Versioned::start("max-age=0, stale-if-error=60", false).await;
    let p = start_cached(up.addr, "").await;
    fetch(&p.url("/long"), &[]).await;
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    *up.cache_control.lock().expect("lock") = "max-age=0, stale-if-error=1".to_owned();
    fetch(&p.url("/short"), &[]).await;
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 2).await;
    up.stop();

    let (s, x, _, body) = fetch(&p.url("/long"), &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("STALE")));
    assert_eq!(body, Versioned::body(1));
    // Past its 1 s window, /short is not served stale.
    tokio::time::sleep(2 * PAST_ONE_SECOND).await;
    let (s, x, _, body) = fetch(&p.url("/short"), &[]).await;
    assert_eq!(s, 502, "{x:?} {body:?}");
    let (s, x, _, _) = fetch(&p.url("/long"), &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("STALE")));
    assert_eq!(up.requests(), 2, "the upstream is gone");
    assert_eq!(p.stats.cache_request_count(CacheResult::Stale), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_conditional_on_a_fresh_entry_is_answered_304_by_the_cache() {
    let up = Versioned::start("max-age=60", true).await;
    let p = start_cached(up.addr, "").await;
    let url = p.url("/cond");
    fetch(&url, &[]).await;
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;

    for inm in ["\"v1\"", "W/\"v1\"", "\"x\", \"v1\"", "*"] {
        let (s, h, body) = send(&url, "GET", &[("if-none-match", inm)]).await;
        assert_eq!(s, 304, "If-None-Match: {inm}");
        assert!(body.is_empty());
        assert_eq!(h["x-cache"], "HIT");
        assert_eq!(h["etag"], "\"v1\"");
        assert_eq!(h["cache-control"], "max-age=60");
        assert_eq!(h["expires"], "Thu, 01 Jan 2099 00:00:00 GMT");
        assert_eq!(h["vary"], "Accept-Encoding");
        assert_eq!(h["last-modified"], LAST_MODIFIED);
        assert!(h.contains_key("date") && h.contains_key("age"), "{h:?}");
        assert!(!h.contains_key("content-type"), "{h:?}");
    }
    let (s, h, _) = send(&url, "GET", &[("if-modified-since", LAST_MODIFIED)]).await;
    assert_eq!((s, x_cache(&h)), (304, "HIT"));
    let (s, _, _) = send(&url, "HEAD", &[("if-none-match", "\"v1\"")]).await;
    assert_eq!(s, 304);

    // No match: the whole stored response.
    let older = "Mon, 14 Nov 1994 08:12:31 GMT";
    for h in [
        ("if-none-match", "\"v0\""),
        ("if-modified-since", older),
        ("if-modified-since", "not a date"),
    ] {
        let (s, hs, body) = send(&url, "GET", &[h]).await;
        assert_eq!((s, x_cache(&hs)), (200, "HIT"), "{h:?}");
        assert_eq!(body, Versioned::body(1));
    }
    // If-None-Match wins over a matching If-Modified-Since (RFC 9110 §13.1.3).
    let both = [
        ("if-none-match", "\"v0\""),
        ("if-modified-since", LAST_MODIFIED),
    ];
    let (s, _, body) = send(&url, "GET", &both).await;
    assert_eq!((s, body), (200, Versioned::body(1)));
    assert_eq!(up.requests(), 1, "all from the cache");
    assert_eq!(p.stats.cache_not_modified_count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_miss_fills_the_cache_with_the_full_response() {
    let up = Versioned::start("max-age=60", true).await;
    let p = start_cached(up.addr, "").await;
    let url = p.url("/cold");
    // The client's validator matches the upstream's current one.
    let (s, h, body) = send(&url, "GET", &[("if-none-match", "\"v1\"")]).await;
    assert_eq!((s, x_cache(&h)), (304, "MISS"));
    assert!(body.is_empty());
    assert_eq!(h["etag"], "\"v1\"");
    // The cache asked for the whole response, and stored it.
    assert_eq!(up.seen(0), (None, None), "client validators not forwarded");
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    let (s, h, body) = send(&url, "GET", &[]).await;
    assert_eq!((s, x_cache(&h)), (200, "HIT"));
    assert_eq!(body, Versioned::body(1));
    assert_eq!(
        h["content-length"],
        Versioned::body(1).len().to_string().as_str()
    );

    // A non-matching validator on a miss gets the full response.
    let (s, h, body) = send(&p.url("/cold2"), "GET", &[("if-none-match", "\"v0\"")]).await;
    assert_eq!((s, x_cache(&h)), (200, "MISS"));
    assert_eq!(body, Versioned::body(1));
    assert_eq!(up.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_age_or_max_age_past_2_pow_31_from_the_upstream_counts_as_2_pow_31_not_a_panic() {
    let origin = start_origin().await;
    let p = start_cached(origin.addr, "").await;
    // Age: 2^64 - 1 (RFC 9111 §1.2.2: taken as 2^31). Stored stale; a
    // second later, the age sum overflowed and every request for the key
    // panicked (an empty reply) for as long as the entry was kept.
    let old = p.url("/response-headers?Cache-Control=max-age%3D60&Age=18446744073709551615");
    let (s, x, _, _) = fetch(&old, &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("MISS")));
    p.wait(|s| s.cache_fill_count(FillResult::Stored), 1).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..2 {
        let (s, x, _, _) = fetch(&old, &[]).await;
        assert_eq!((s, x.as_deref()), (200, Some("MISS")), "stale: refetched");
    }
    // max-age=2^64-1: the fill's freshness sum overflowed and nothing was
    // stored; taken as 2^31 it is fresh for 68 years.
    let forever = p.url("/response-headers?Cache-Control=max-age%3D18446744073709551615");
    let fills = p.stats.cache_fill_count(FillResult::Stored);
    let (s, x, _, _) = fetch(&forever, &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("MISS")));
    p.wait(|s| s.cache_fill_count(FillResult::Stored), fills + 1)
        .await;
    let (s, x, _, _) = fetch(&forever, &[]).await;
    assert_eq!((s, x.as_deref()), (200, Some("HIT")));
}
