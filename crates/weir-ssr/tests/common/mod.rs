//! In-memory fragments for the composer's tests: each `src` is a scripted
//! response (head delay, status, fields, body chunks with delays). The
//! proxy's fetcher over real sockets is tested in `crates/weir/tests/ssr.rs`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use weir_ssr::{
    BoxSource, ComposeSettings, Counts, FetchError, FetchFuture, Fetcher, FragmentResponse, Page,
    PageContext, compose,
};
use weir_stream::{Batch, BatchResult, Source};

/// One scripted fragment response.
#[derive(Clone, Debug)]
pub struct Script {
    pub head_delay: Duration,
    pub status: StatusCode,
    pub headers: Vec<(&'static str, String)>,
    /// Body chunks, each after its delay.
    pub chunks: Vec<(Duration, Bytes)>,
    /// Fail the body after the chunks instead of ending it.
    pub fail_at_end: bool,
}

impl Script {
    pub fn ok(body: &str) -> Script {
        Script {
            head_delay: Duration::ZERO,
            status: StatusCode::OK,
            headers: Vec::new(),
            chunks: vec![(Duration::ZERO, Bytes::copy_from_slice(body.as_bytes()))],
            fail_at_end: false,
        }
    }
    pub fn delayed(mut self, ms: u64) -> Script {
        self.head_delay = Duration::from_millis(ms);
        self
    }
    pub fn status(mut self, s: u16) -> Script {
        self.status = StatusCode::from_u16(s).expect("status");
        self
    }
    pub fn header(mut self, name: &'static str, value: &str) -> Script {
        self.headers.push((name, value.to_owned()));
        self
    }
    pub fn chunks(mut self, parts: &[(u64, &str)]) -> Script {
        self.chunks = parts
            .iter()
            .map(|(ms, s)| {
                (
                    Duration::from_millis(*ms),
                    Bytes::copy_from_slice(s.as_bytes()),
                )
            })
            .collect();
        self
    }
    pub fn failing(mut self) -> Script {
        self.fail_at_end = true;
        self
    }
}

/// Fragments by absolute URL (`http://t` + path), plus counters.
#[derive(Default)]
pub struct MemFetcher {
    pub scripts: Mutex<HashMap<String, Script>>,
    pub fetched: Mutex<Vec<String>>,
    /// Bodies alive (dropped ones are cancelled).
    pub live_bodies: Arc<AtomicUsize>,
    /// Body bytes handed to the composer, all fragments.
    pub pulled: Arc<AtomicU64>,
    /// Fetches started and not yet given a response or dropped.
    pub pending: Arc<AtomicUsize>,
    /// Most fetches in flight at once.
    pub in_flight: Arc<AtomicUsize>,
    pub max_in_flight: Arc<AtomicUsize>,
    /// Generated bodies: `(url, total bytes, chunk size)`.
    pub big: Mutex<HashMap<String, (usize, usize)>>,
}

impl MemFetcher {
    pub fn with(scripts: &[(&str, Script)]) -> Arc<MemFetcher> {
        let f = MemFetcher::default();
        {
            let mut m = f.scripts.lock().expect("lock");
            for (src, s) in scripts {
                m.insert(format!("http://t{src}"), s.clone());
            }
        }
        Arc::new(f)
    }

    pub fn fetched(&self) -> Vec<String> {
        self.fetched.lock().expect("lock").clone()
    }
}

struct Guard(Arc<AtomicUsize>);
impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Fetcher for MemFetcher {
    fn resolve(&self, base: &str, src: &str) -> Result<String, FetchError> {
        if let Some(rest) = src.strip_prefix("http://") {
            if rest.starts_with("t/") {
                return Ok(src.to_owned());
            }
            return Err(FetchError::NotAllowed {
                src: src.to_owned(),
            });
        }
        if src.starts_with('/') {
            return Ok(format!("http://t{src}"));
        }
        let dir = base.rsplit_once('/').map_or(base, |(d, _)| d);
        Ok(format!("{dir}/{src}"))
    }

    fn fetch(&self, url: &str, _headers: HeaderMap) -> FetchFuture {
        self.fetched.lock().expect("lock").push(url.to_owned());
        let script = self.scripts.lock().expect("lock").get(url).cloned();
        let big = self.big.lock().expect("lock").get(url).copied();
        let live = Arc::clone(&self.live_bodies);
        let pulled = Arc::clone(&self.pulled);
        let in_flight = Arc::clone(&self.in_flight);
        let max = Arc::clone(&self.max_in_flight);
        let url = url.to_owned();
        Box::pin(async move {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(now, Ordering::SeqCst);
            let flight = Guard(Arc::clone(&in_flight));
            if let Some((total, chunk)) = big {
                live.fetch_add(1, Ordering::SeqCst);
                let body: BoxSource = Box::pin(Big {
                    left: total,
                    chunk: Bytes::from(vec![b'x'; chunk]),
                    pulled,
                    _live: Guard(live),
                    _flight: flight,
                });
                return Ok(FragmentResponse {
                    status: StatusCode::OK,
                    headers: HeaderMap::new(),
                    body,
                });
            }
            let Some(s) = script else {
                return Err(FetchError::Upstream {
                    reason: format!("no script for {url}"),
                });
            };
            tokio::time::sleep(s.head_delay).await;
            let mut headers = HeaderMap::new();
            for (n, v) in &s.headers {
                headers.append(*n, v.parse().expect("header value"));
            }
            live.fetch_add(1, Ordering::SeqCst);
            let body: BoxSource = Box::pin(Scripted {
                chunks: s.chunks.into(),
                sleep: None,
                fail_at_end: s.fail_at_end,
                pulled,
                _live: Guard(live),
                _flight: flight,
            });
            Ok(FragmentResponse {
                status: s.status,
                headers,
                body,
            })
        })
    }
}

struct Scripted {
    chunks: std::collections::VecDeque<(Duration, Bytes)>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    fail_at_end: bool,
    pulled: Arc<AtomicU64>,
    _live: Guard,
    _flight: Guard,
}

impl Source for Scripted {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        let Some((delay, _)) = this.chunks.front() else {
            if this.fail_at_end {
                return Poll::Ready(Some(Err(weir_stream::StreamError::failed(
                    "scripted failure",
                ))));
            }
            return Poll::Ready(None);
        };
        if !delay.is_zero() {
            let d = *delay;
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(d)));
            std::task::ready!(sleep.as_mut().poll(cx));
            this.sleep = None;
        }
        let (_, b) = this.chunks.pop_front().expect("front exists");
        this.pulled.fetch_add(b.len() as u64, Ordering::SeqCst);
        Poll::Ready(Some(Ok(Batch::one(b))))
    }
}

use std::future::Future as _;

struct Big {
    left: usize,
    chunk: Bytes,
    pulled: Arc<AtomicU64>,
    _live: Guard,
    _flight: Guard,
}

impl Source for Big {
    fn poll_next_batch(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let n = this.left.min(this.chunk.len());
        this.left -= n;
        this.pulled.fetch_add(n as u64, Ordering::SeqCst);
        Poll::Ready(Some(Ok(Batch::one(this.chunk.slice(..n)))))
    }
}

/// A template source from one string, in pieces of `piece` bytes.
pub fn template(text: &str, piece: usize) -> BoxSource {
    let chunks: Vec<Bytes> = text
        .as_bytes()
        .chunks(piece.max(1))
        .map(Bytes::copy_from_slice)
        .collect();
    Box::pin(weir_stream::from_iter(chunks))
}

pub fn context(fetcher: &Arc<MemFetcher>, settings: ComposeSettings) -> (PageContext, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let fetcher: Arc<dyn Fetcher> = Arc::clone(fetcher) as Arc<dyn Fetcher>;
    (
        PageContext {
            fetcher,
            settings: Arc::new(settings),
            base: "http://t/page".into(),
            template_at_base: true,
            headers: HeaderMap::new(),
            observer: counts.clone(),
            script_nonce: None,
            out_of_order: true,
        },
        counts,
    )
}

/// Composes `text` and collects the page (panics unless `Composed`).
pub async fn render(
    fetcher: &Arc<MemFetcher>,
    text: &str,
    settings: ComposeSettings,
) -> (String, Arc<Counts>) {
    let (ctx, counts) = context(fetcher, settings);
    match compose(template(text, 64), ctx).await {
        Page::Composed { body, .. } => {
            let bytes =
                weir_stream::consume::bytes(body, weir_stream::consume::ConsumeOptions::new())
                    .await
                    .expect("page body");
            (String::from_utf8(bytes.to_vec()).expect("utf-8"), counts)
        }
        other => panic!("not composed: {other:?}"),
    }
}

mod untoken;
pub use untoken::untoken;

/// The page's token: the one in its first placeholder.
pub fn token_of(page: &str) -> &str {
    let open = "<template id=\"weir-slot-";
    let at = page.find(open).expect("a placeholder") + open.len();
    &page[at..at + 16]
}
