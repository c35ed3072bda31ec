//! The streaming guarantees, measured end to end:
//!
//! 1. A client that disconnects mid-response gets its upstream connection
//!    closed within 100 ms (client→proxy over HTTP/1.1 and HTTP/2; the
//!    upstream side is always HTTP/1.1); the upstream sees the close, and
//!    the access log says `client_aborted`.
//! 2. A response body Weir does not forward (a HEAD, a response replaced by
//!    a 502, a body the client never reads) never goes back to the pool
//!    half-read and is not held open: the next request gets a fresh, correct
//!    response, never bytes of the previous body.
//! 3. Memory stays bounded: a 1 GiB response to a slow reader keeps the
//!    proxy's peak RSS under 64 MB.
//!
//! The upstreams here are scripted on raw TCP so that they can misbehave
//! and can record the instant the proxy closes their connection.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::access_log::{access_line, access_log};
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The bound on "client gone → upstream connection closed".
const CLOSE_BOUND: Duration = Duration::from_millis(100);

// ---------------------------------------------------------------------------
// A scripted upstream.

/// What the scripted upstream saw on one connection (indexed in accept order).
#[derive(Debug, Clone)]
struct ConnEvent {
    /// Request lines received on it, in order.
    requests: Vec<String>,
    /// When the proxy closed it (read EOF or error), if it did.
    closed_at: Option<Instant>,
}

/// An upstream on raw TCP whose answers depend on the request path:
///
/// - `/drip…`: `200`, chunked, a 1 KiB chunk every 10 ms (for at most 30 s);
/// - `/head-lies`: to a HEAD, a `200` head with `Content-Length: 1000000`,
///   then (wrongly) body bytes that look like a whole second response
///   (`EVIL!`), the first with the head, the rest dripped;
/// - `/head-lies-late`: the same, but the body bytes start 50 ms after the head;
/// - `/lying-{code}`: a `{code}` (204, 304) head, then the smuggled bytes as for `/head-lies`;
/// - `/switch`: a `101 Switching Protocols` nobody asked for, then the same
///   smuggled bytes, dripped;
/// - `/gzip-te`: `200` with `Transfer-Encoding: gzip` (delimited by close),
///   then the smuggled bytes, dripped;
/// - `/big`: `200` with `Content-Length: 64 MiB`, 16 KiB every 5 ms;
/// - anything else: `200`, `Content-Length: 5`, `fresh` (no body to a HEAD).
///
/// Each connection has a reader task that records request lines and the
/// instant the proxy closes the connection, and a writer task that answers
/// requests in order (so a connection reused while a drip is going on
/// would hand the next request the dripped bytes).
struct ScriptedUpstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    events: Arc<Mutex<Vec<ConnEvent>>>,
    /// `(conn, instant)` each time the proxy closes a connection.
    closes: mpsc::UnboundedReceiver<(usize, Instant)>,
    task: tokio::task::JoinHandle<()>,
}

/// A whole HTTP/1.1 response, sent as "body" bytes that must never reach a client.
const SMUGGLED: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!";

impl ScriptedUpstream {
    async fn start() -> ScriptedUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let events = Arc::new(Mutex::new(Vec::new()));
        let (close_tx, closes) = mpsc::unbounded_channel();
        let task = {
            let accepted = accepted.clone();
            let events = events.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let conn = accepted.fetch_add(1, Ordering::SeqCst);
                    events.lock().unwrap().push(ConnEvent {
                        requests: Vec::new(),
                        closed_at: None,
                    });
                    let _ = stream.set_nodelay(true);
                    let (mut rd, mut wr) = stream.into_split();
                    let (req_tx, mut req_rx) = mpsc::unbounded_channel::<String>();
                    let events_r = events.clone();
                    let close_tx = close_tx.clone();
                    // Reader: request heads in, close detection.
                    tokio::spawn(async move {
                        let mut buf = Vec::new();
                        let mut chunk = [0u8; 4096];
                        loop {
                            match rd.read(&mut chunk).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                                buf.drain(..end + 4);
                                let line = head.lines().next().unwrap_or("").to_owned();
                                events_r.lock().unwrap()[conn].requests.push(line.clone());
                                let _ = req_tx.send(line);
                            }
                        }
                        let at = Instant::now();
                        events_r.lock().unwrap()[conn].closed_at = Some(at);
                        let _ = close_tx.send((conn, at));
                    });
                    // Writer: answers in order.
                    tokio::spawn(async move {
                        while let Some(line) = req_rx.recv().await {
                            if answer(&mut wr, &line).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            })
        };
        ScriptedUpstream {
            addr,
            accepted,
            events,
            closes,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn events(&self) -> Vec<ConnEvent> {
        self.events.lock().unwrap().clone()
    }

    /// The next close the upstream observes, within `limit`.
    async fn next_close(&mut self, limit: Duration) -> Option<(usize, Instant)> {
        tokio::time::timeout(limit, self.closes.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for ScriptedUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Writes `data` in `piece`-byte writes, `every` apart, at most `limit` in all.
async fn drip(
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    data: &[u8],
    piece: usize,
    every: Duration,
) -> std::io::Result<()> {
    for part in data.chunks(piece) {
        tokio::time::sleep(every).await;
        wr.write_all(part).await?;
    }
    Ok(())
}

/// Answers one request (see [`ScriptedUpstream`]).
async fn answer(wr: &mut tokio::net::tcp::OwnedWriteHalf, line: &str) -> std::io::Result<()> {
    let path = line.split(' ').nth(1).unwrap_or("/");
    if path.starts_with("/drip") {
        wr.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await?;
        let chunk = format!("400\r\n{}\r\n", "d".repeat(1024));
        // 3000 chunks, 10 ms apart: at most 30 s.
        for _ in 0..3000 {
            wr.write_all(chunk.as_bytes()).await?;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        wr.write_all(b"0\r\n\r\n").await?;
    } else if let Some(code) = path.strip_prefix("/lying-") {
        wr.write_all(format!("HTTP/1.1 {code} X\r\n\r\n").as_bytes())
            .await?;
        wr.write_all(&SMUGGLED[..4]).await?;
        drip(wr, &SMUGGLED[4..], 4, Duration::from_millis(20)).await?;
    } else if path.starts_with("/head-lies-late") {
        wr.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            .await?;
        // The smuggled bytes come later, after the proxy has moved on.
        tokio::time::sleep(Duration::from_millis(50)).await;
        drip(wr, SMUGGLED, 4, Duration::from_millis(20)).await?;
    } else if path.starts_with("/head-lies") {
        wr.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            .await?;
        // The first smuggled bytes arrive with the head, the rest slowly.
        wr.write_all(&SMUGGLED[..4]).await?;
        drip(wr, &SMUGGLED[4..], 4, Duration::from_millis(20)).await?;
    } else if path.starts_with("/switch") {
        wr.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: nonsense\r\n\r\n",
        )
        .await?;
        drip(wr, SMUGGLED, 4, Duration::from_millis(20)).await?;
        // Then hold the connection open for a while, as an upgraded peer would.
        tokio::time::sleep(Duration::from_secs(10)).await;
    } else if path.starts_with("/gzip-te") {
        wr.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")
            .await?;
        drip(wr, SMUGGLED, 4, Duration::from_millis(20)).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
    } else if path.starts_with("/big") {
        wr.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\n\r\n")
            .await?;
        let block = vec![b'b'; 16 * 1024];
        for _ in 0..4096 {
            wr.write_all(&block).await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    } else if line.starts_with("HEAD ") {
        wr.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            .await?;
    } else {
        wr.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
            .await?;
    }
    Ok(())
}

/// Polls `cond` every 1 ms until it holds or `limit` passes; the time it took.
async fn within(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

// ---------------------------------------------------------------------------
// 1. Client disconnect mid-response.

/// How the client leaves mid-response.
#[derive(Debug, Clone, Copy)]
enum Leave {
    /// HTTP/1.1: the socket is dropped.
    H1Close,
    /// HTTP/2: the stream is reset (response body dropped), the connection kept.
    H2Reset,
    /// HTTP/2: the whole connection is dropped.
    H2Close,
}

/// Runs one disconnect. Returns (client gone → upstream saw the close,
/// client gone → the proxy's live upstream count at 0).
async fn disconnect_mid_response(leave: Leave) -> (Duration, Duration) {
    access_log();
    let mut upstream = ScriptedUpstream::start().await;
    let proxy = start_proxy(&config_text(&upstream.url(), "", "", "")).await;
    let path = match leave {
        Leave::H1Close => "/drip-h1",
        Leave::H2Reset => "/drip-h2-reset",
        Leave::H2Close => "/drip-h2-close",
    };

    let (gone, _keep) = if let Leave::H2Close = leave {
        let io =
            hyper_util::rt::TokioIo::new(tokio::net::TcpStream::connect(proxy.addr).await.unwrap());
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .expect("h2 handshake");
        let conn = tokio::spawn(conn);
        let req = Request::get(proxy.url(path))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.expect("response");
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut got = 0;
        while got < 8 * 1024 {
            let frame = body.frame().await.expect("frame").expect("data");
            got += frame.data_ref().map_or(0, Bytes::len);
        }
        let gone = Instant::now();
        // Dropping the connection task drops the socket.
        conn.abort();
        let _ = conn.await;
        (gone, None)
    } else if let Leave::H2Reset = leave {
        let client = client(true);
        let resp = client
            .get(proxy.url(path).parse().unwrap())
            .await
            .expect("response");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let mut body = resp.into_body();
        // Read for a while: the body is really streaming.
        let mut got = 0;
        while got < 8 * 1024 {
            let frame = body.frame().await.expect("frame").expect("data");
            got += frame.data_ref().map_or(0, Bytes::len);
        }
        let gone = Instant::now();
        drop(body);
        (gone, Some(client))
    } else {
        let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = Vec::new();
        while got.len() < 8 * 1024 {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "proxy closed early");
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"), "{:?}", &got[..32]);
        let gone = Instant::now();
        drop(s);
        (gone, None)
    };
    let counts = proxy.upstream_connections.clone();
    let count_zero = within(Duration::from_secs(2), || counts.live() == 0)
        .await
        .map(|_| gone.elapsed());
    let (conn, closed_at) = upstream
        .next_close(Duration::from_secs(2))
        .await
        .expect("the upstream never saw its connection close");
    assert_eq!(conn, 0);
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 1);
    let upstream_close = closed_at.duration_since(gone);
    let count_zero = count_zero.expect("live upstream connections never dropped to 0");

    let line = access_line(path, Duration::from_secs(2))
        .await
        .expect("no access log line");
    assert_eq!(line["outcome"], "client_aborted", "{line:?}");
    assert_eq!(line["status"], "200", "{line:?}");
    let bytes_out: u64 = line["bytes_out"].parse().unwrap();
    assert!((8 * 1024..3000 * 1024).contains(&bytes_out), "{line:?}");
    (upstream_close, count_zero)
}

fn check_close_latency(proto: &str, runs: &[(Duration, Duration)]) {
    let worst = runs.iter().map(|r| r.0.max(r.1)).max().unwrap();
    eprintln!(
        "{proto}: client gone → upstream close / live count 0, per run: {:?}",
        runs.iter()
            .map(|(u, c)| format!("{:.1}/{:.1} ms", ms(*u), ms(*c)))
            .collect::<Vec<_>>()
    );
    assert!(
        worst < CLOSE_BOUND,
        "{proto}: upstream connection closed {worst:?} after the client left (bound {CLOSE_BOUND:?})"
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_client_disconnect_closes_the_upstream_connection_within_100ms() {
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(disconnect_mid_response(Leave::H1Close).await);
    }
    check_close_latency("HTTP/1.1 close", &runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_stream_reset_closes_the_upstream_connection_within_100ms() {
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(disconnect_mid_response(Leave::H2Reset).await);
    }
    check_close_latency("HTTP/2 stream reset", &runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connection_drop_closes_the_upstream_connection_within_100ms() {
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(disconnect_mid_response(Leave::H2Close).await);
    }
    check_close_latency("HTTP/2 connection close", &runs);
}

// ---------------------------------------------------------------------------
// 2. Unconsumed bodies are cancelled.

/// A request through `client`; status and whole body.
async fn fetch(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    method: &str,
    url: &str,
) -> (u16, Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("response within 10 s")
        .expect("response");
    let status = resp.status().as_u16();
    let body = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
        .await
        .expect("body within 10 s")
        .expect("body")
        .to_bytes();
    (status, body)
}

/// After a response Weir must not pool half-read (`method path`, answered
/// `want`), the upstream connection is closed within 1 s, and the next
/// requests get fresh, correct answers on new connections.
async fn not_pooled_half_read(method: &str, path: &str, want: u16, h2: bool) {
    let mut upstream = ScriptedUpstream::start().await;
    let proxy = start_proxy(&config_text(&upstream.url(), "", "", "")).await;
    let client = client(h2);
    let (status, body) = fetch(&client, method, &proxy.url(path)).await;
    assert_eq!(status, want, "{method} {path}: {body:?}");
    assert!(
        !body.windows(4).any(|w| w == b"EVIL"),
        "{method} {path}: smuggled bytes reached the client: {body:?}"
    );
    // Straight away, and after the smuggled bytes had time to arrive.
    for pause in [0, 150] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let (status, body) = fetch(&client, "GET", &proxy.url("/next")).await;
        assert_eq!(
            (status, &body[..]),
            (200, &b"fresh"[..]),
            "after {method} {path}: the next request got someone else's bytes"
        );
    }
    let counts = proxy.upstream_connections.clone();
    // The dripping connection is closed (only a pooled, clean one may stay).
    let (conn, _) = upstream
        .next_close(Duration::from_secs(1))
        .await
        .unwrap_or_else(|| panic!("{method} {path}: its upstream connection is held open"));
    assert_eq!(conn, 0);
    let events = upstream.events();
    assert_eq!(
        events[0].requests.len(),
        1,
        "{method} {path}: its connection was reused: {events:?}"
    );
    assert!(
        counts.live() <= 1,
        "{} live upstream connections: {events:?}",
        counts.live()
    );
    eprintln!(
        "{method} {path} (h2 client: {h2}): {} upstream connections opened, {} live after",
        counts.opened(),
        counts.live()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_whose_upstream_sends_a_body_anyway_is_never_pooled_half_read() {
    for h2 in [false, true] {
        not_pooled_half_read("HEAD", "/head-lies", 200, h2).await;
        // Regression: bytes that came after the connection was pooled were
        // read as the next request's response (fixed by closing after HEAD).
        not_pooled_half_read("HEAD", "/head-lies-late", 200, h2).await;
    }
}

/// A 204 or 304 that carries a body anyway: bytes arriving with the head
/// are seen by hyper, which closes the connection instead of pooling it.
/// (Bytes that arrive only after the connection went back to the pool
/// cannot be told from the next response: no HTTP/1.1 client can guard
/// against that without giving up reuse; HEAD, where Weir knows the
/// response is bodiless in advance, closes its connection instead.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_204_or_304_with_a_body_is_never_pooled_half_read() {
    for code in [204u16, 304] {
        for h2 in [false, true] {
            not_pooled_half_read("GET", &format!("/lying-{code}"), code, h2).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_101_is_closed_not_pooled() {
    for h2 in [false, true] {
        not_pooled_half_read("GET", "/switch", 502, h2).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_unknown_transfer_coding_is_closed_not_pooled() {
    for h2 in [false, true] {
        not_pooled_half_read("GET", "/gzip-te", 502, h2).await;
    }
}

/// Weir cannot tell a well-behaved HEAD upstream from one whose stray body
/// bytes are late, so a HEAD's upstream connection is never reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_never_reuses_its_upstream_connection() {
    let mut upstream = ScriptedUpstream::start().await;
    let proxy = start_proxy(&config_text(&upstream.url(), "", "", "")).await;
    let client = client(false);
    let (status, body) = fetch(&client, "HEAD", &proxy.url("/fine")).await;
    assert_eq!((status, body.len()), (200, 0));
    let (conn, _) = upstream
        .next_close(Duration::from_secs(1))
        .await
        .expect("the HEAD's upstream connection stays open");
    assert_eq!(conn, 0);
    let (status, body) = fetch(&client, "GET", &proxy.url("/next")).await;
    assert_eq!((status, &body[..]), (200, &b"fresh"[..]));
    assert_eq!(upstream.accepted.load(Ordering::SeqCst), 2);
    // The GET's connection, by contrast, is pooled.
    assert_eq!(proxy.upstream_connections.live(), 1);
}

/// A client that drops the response right after its head: the upstream
/// connection (64 MiB pending) is closed, not pooled, within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_client_never_reads_closes_its_upstream_connection() {
    for h2 in [false, true] {
        let mut upstream = ScriptedUpstream::start().await;
        let proxy = start_proxy(&config_text(&upstream.url(), "", "", "")).await;
        let client = client(h2);
        let resp = client
            .get(proxy.url("/big").parse().unwrap())
            .await
            .expect("response");
        assert_eq!(resp.status(), 200);
        assert_eq!(proxy.upstream_connections.live(), 1);
        let gone = Instant::now();
        drop(resp);
        let counts = proxy.upstream_connections.clone();
        let zero = within(Duration::from_secs(1), || counts.live() == 0).await;
        let (conn, at) = upstream
            .next_close(Duration::from_secs(1))
            .await
            .expect("the upstream connection is held open");
        assert_eq!(conn, 0);
        let zero = zero.expect("the live upstream count never dropped to 0");
        eprintln!(
            "unread body (h2 client: {h2}): upstream closed after {:.1} ms, count 0 after {:.1} ms",
            ms(at.duration_since(gone)),
            ms(zero)
        );
        let (status, body) = fetch(&client, "GET", &proxy.url("/next")).await;
        assert_eq!((status, &body[..]), (200, &b"fresh"[..]));
        assert_eq!(upstream.accepted.load(Ordering::SeqCst), 2);
    }
}

// ---------------------------------------------------------------------------
// 3. Memory stays bounded.

/// Reads up to `total` bytes of the response to `GET path` from `addr`,
/// `piece` bytes at a time with `pause` between reads, stalling for
/// `stall` once after 16 MiB; stops at `deadline`. Returns bytes read
/// (head included).
fn slow_read(
    addr: SocketAddr,
    path: &str,
    total: u64,
    piece: usize,
    pause: Duration,
    stall: Duration,
    deadline: Instant,
) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut buf = vec![0u8; piece];
    let mut got = 0u64;
    let mut stalled = false;
    while got < total && Instant::now() < deadline {
        let n = s.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        got += n as u64;
        if !stalled && got > 16 << 20 {
            stalled = true;
            std::thread::sleep(stall);
        }
        std::thread::sleep(pause);
    }
    got
}

const GIB: u64 = 1 << 30;
/// The bound on the proxy's peak RSS, in bytes.
const RSS_LIMIT: u64 = 64 * 1000 * 1000;

/// The `weir` binary in front of a built-in origin running in this process
/// (so the binary's RSS is the proxy's alone).
async fn weir_before_origin() -> (WeirProcess, Origin) {
    let origin = start_origin().await;
    let config = config_text(&format!("http://{}", origin.addr), "", "", "").replacen(
        "\"127.0.0.1:0\"",
        "\"127.0.0.1:{port}\"",
        1,
    );
    let weir = tokio::task::spawn_blocking(move || WeirProcess::start(&config))
        .await
        .unwrap();
    (weir, origin)
}

fn check_rss(proto: &str, weir: &WeirProcess, rss_idle: u64, read: u64, took: Duration) {
    let peak = weir.peak_rss();
    eprintln!(
        "{proto}: 1 GiB response, slow reader: read {} MiB in {took:?} ({:.0} MiB/s); \
         proxy peak RSS {:.1} MB (idle {:.1} MB)",
        read >> 20,
        (read >> 20) as f64 / took.as_secs_f64(),
        peak as f64 / 1e6,
        rss_idle as f64 / 1e6
    );
    assert!(
        read >= 128 << 20,
        "{proto}: only {read} bytes read: the test did not exercise much"
    );
    assert!(
        peak < RSS_LIMIT,
        "{proto}: proxy peak RSS {peak} bytes >= {RSS_LIMIT} with a slow reader"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_1gib_response_to_a_slow_reader_keeps_rss_under_64mb() {
    let (weir, _origin) = weir_before_origin().await;
    let rss_idle = weir.peak_rss();
    let addr = weir.addr;
    let started = Instant::now();
    let read = tokio::task::spawn_blocking(move || {
        slow_read(
            addr,
            &format!("/bytes/{GIB}"),
            GIB,
            64 * 1024,
            Duration::from_millis(1),
            Duration::from_secs(2),
            Instant::now() + Duration::from_secs(25),
        )
    })
    .await
    .unwrap();
    check_rss("HTTP/1.1", &weir, rss_idle, read, started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_1gib_response_to_a_slow_reader_keeps_rss_under_64mb() {
    let (weir, _origin) = weir_before_origin().await;
    let rss_idle = weir.peak_rss();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(15);
    let resp = client(true)
        .get(weir.url(&format!("/bytes/{GIB}")).parse().unwrap())
        .await
        .expect("response");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let mut body = resp.into_body();
    let (mut read, mut since_pause, mut stalled) = (0u64, 0u64, false);
    while Instant::now() < deadline {
        let Some(frame) = body.frame().await else {
            break;
        };
        let n = frame.expect("frame").data_ref().map_or(0, Bytes::len) as u64;
        read += n;
        since_pause += n;
        if !stalled && read > 16 << 20 {
            stalled = true;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        if since_pause >= 64 * 1024 {
            since_pause = 0;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    check_rss("HTTP/2", &weir, rss_idle, read, started.elapsed());
}
