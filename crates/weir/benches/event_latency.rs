//! How much latency Weir adds to a trickling stream (server-sent events, an
//! SSR page's chunks): the bound is 5 ms above the direct path, for
//! a route with `coalesce` + `compress` in its chain.
//!
//! An upstream in this process writes `EVENTS` events, `INTERVAL_MS` apart,
//! each stamped with the moment it was written (ns since a process-wide
//! base); the client notes when each event arrives, decoded. The three
//! paths run one after the other in the same process: direct to the
//! upstream, through Weir with no transforms, and through Weir with
//! `coalesce` + `compress` (gzip). Every event must arrive, in order,
//! intact.
//!
//! Run: `cargo bench -p weir --bench event_latency`. Prints a Markdown table
//! of latency percentiles (µs) per path.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const EVENTS: usize = 300;
const INTERVAL_MS: u64 = 10;

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(base().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// An HTTP/1.1 upstream answering every request with `EVENTS` stamped
/// events, one chunk each, `INTERVAL_MS` apart.
async fn start_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            s.set_nodelay(true).expect("nodelay");
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                             cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
                if s.write_all(head).await.is_err() {
                    return;
                }
                let mut tick = tokio::time::interval(Duration::from_millis(INTERVAL_MS));
                for k in 0..EVENTS {
                    tick.tick().await;
                    let event = format!("id: {k}\ndata: {}\n\n", now_ns());
                    let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                    if s.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                let _ = s.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    addr
}

/// Starts Weir in this process in front of `upstream`, with `transforms`.
async fn start_weir(upstream: SocketAddr, transforms: &str) -> SocketAddr {
    let text = format!(
        "[[listener]]\naddress = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"up\"\nurl = \"http://{upstream}\"\n\n\
         [[route]]\nupstream = \"up\"\ntransforms = [{transforms}]\n"
    );
    let config = weir_proxy::config::Config::parse(&text, "bench.toml", std::path::Path::new("."))
        .expect("config");
    let server = weir_proxy::Server::bind(&config).await.expect("bind");
    let addr = server.local_addrs()[0];
    tokio::spawn(async move {
        let _ = server.run(std::future::pending()).await;
    });
    addr
}

/// Latencies (ns) of every event of one response from `addr`.
async fn measure(addr: SocketAddr, gzip: bool) -> Vec<u64> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut req = hyper::Request::get(format!("http://{addr}/events"));
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    let resp = client
        .request(req.body(Empty::new()).expect("request"))
        .await
        .expect("response");
    let encoded = resp
        .headers()
        .get("content-encoding")
        .map(|v| v.as_bytes().to_vec());
    assert_eq!(encoded.as_deref(), gzip.then_some(&b"gzip"[..]), "coding");
    let mut body = resp.into_body();
    let mut decoder = flate2::write::GzDecoder::new(Vec::new());
    let mut plain = Vec::new();
    let mut parsed = 0;
    let mut latencies = Vec::with_capacity(EVENTS);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("frame").into_data() else {
            continue;
        };
        let text = if gzip {
            decoder.write_all(&data).expect("gunzip");
            decoder.flush().expect("gunzip");
            decoder.get_ref()
        } else {
            plain.extend_from_slice(&data);
            &plain
        };
        let arrived = now_ns();
        let text = std::str::from_utf8(text).expect("utf-8");
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        let complete = if text.ends_with("\n\n") {
            events.len()
        } else {
            events.len() - 1
        };
        for (k, event) in events.iter().enumerate().take(complete).skip(parsed) {
            let (id, data) = event.split_once('\n').expect("two lines");
            assert_eq!(id, format!("id: {k}"), "events out of order");
            let sent: u64 = data
                .strip_prefix("data: ")
                .expect("data")
                .parse()
                .expect("stamp");
            latencies.push(arrived.saturating_sub(sent));
        }
        parsed = parsed.max(complete);
    }
    assert_eq!(latencies.len(), EVENTS, "every event arrives");
    latencies
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        base();
        let upstream = start_upstream().await;
        let plain = start_weir(upstream, "").await;
        let chained = start_weir(upstream, "\"coalesce\", \"compress\"").await;
        let paths = [
            ("direct", upstream, false),
            ("weir, no transforms", plain, false),
            ("weir, coalesce + compress (gzip)", chained, true),
        ];
        // One warm-up pass (connections, pools), then the measured one.
        for (_, addr, gzip) in paths {
            measure(addr, gzip).await;
        }
        println!(
            "{EVENTS} events, {INTERVAL_MS} ms apart, latency from write to decoded arrival (µs)\n"
        );
        println!("| path | p50 | p90 | p99 | max | p50 − direct p50 |");
        println!("|---|---|---|---|---|---|");
        let mut direct_p50 = 0.0;
        for (name, addr, gzip) in paths {
            let mut l = measure(addr, gzip).await;
            l.sort_unstable();
            let p50 = percentile(&l, 0.5);
            if name == "direct" {
                direct_p50 = p50;
            }
            println!(
                "| {name} | {p50:.0} | {:.0} | {:.0} | {:.0} | {:+.0} |",
                percentile(&l, 0.9),
                percentile(&l, 0.99),
                percentile(&l, 1.0),
                p50 - direct_p50
            );
        }
    });
}
