//! A composed page with in-memory fragments: what composition costs on top
//! of the bytes it moves.
//!
//! The page: a ~64 KiB template with 20 fragments of 4 KiB each (two
//! chunks), every fragment ready at once (no network, no delay), composed
//! and drained on a current-thread Tokio runtime. The baseline is the
//! floor for the same output: concatenating the template's text pieces and
//! the fragment bodies into one buffer (a memcpy of the page). Both
//! results are checked against the expected page before timing.
//! Run with
//! `cargo bench -p weir-ssr --bench compose -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::{HeaderMap, StatusCode};
use weir_ssr::{
    BoxSource, ComposeSettings, FetchError, FetchFuture, Fetcher, FragmentResponse, NoObserver,
    Page, PageContext, compose,
};
use weir_stream::SourceExt as _;

const FRAGMENTS: usize = 20;
const FRAGMENT_BYTES: usize = 4096;

/// Fragment bodies by URL: each in two chunks, answered at once.
struct Memory {
    bodies: Vec<(String, Bytes)>,
}

impl Fetcher for Memory {
    fn resolve(&self, _base: &str, src: &str) -> Result<String, FetchError> {
        Ok(format!("http://mem{src}"))
    }

    fn fetch(&self, url: &str, _headers: HeaderMap) -> FetchFuture {
        let body = self
            .bodies
            .iter()
            .find(|(u, _)| u == url)
            .map(|(_, b)| b.clone());
        Box::pin(async move {
            let Some(body) = body else {
                return Err(FetchError::Upstream {
                    reason: "unknown".into(),
                });
            };
            let half = body.len() / 2;
            let chunks = vec![body.slice(..half), body.slice(half..)];
            let body: BoxSource = Box::pin(weir_stream::from_iter(chunks));
            Ok(FragmentResponse {
                status: StatusCode::OK,
                headers: HeaderMap::new(),
                body,
            })
        })
    }
}

/// The template, the fetcher, and the page they must give.
fn fixture() -> (Bytes, Arc<Memory>, Vec<u8>) {
    let filler =
        "<div class=\"card\"><a href=\"/p/1\">Product</a><span class=\"price\">9.99</span></div>\n";
    let mut template =
        String::from("<!doctype html><html><head><title>bench</title></head><body>\n");
    let mut want = template.clone();
    let mut bodies = Vec::new();
    for i in 0..FRAGMENTS {
        let text: String = filler.repeat(3072 / filler.len() + 1);
        template.push_str(&text);
        want.push_str(&text);
        template.push_str(&format!(
            "<fragment src=\"/f/{i}\">fallback {i}</fragment>\n"
        ));
        let body: String = format!("<section id=\"f{i}\">")
            .chars()
            .chain(std::iter::repeat_n('x', FRAGMENT_BYTES - 30))
            .chain("</section>".chars())
            .collect();
        want.push_str(&body);
        want.push('\n');
        bodies.push((format!("http://mem/f/{i}"), Bytes::from(body)));
    }
    template.push_str("</body></html>\n");
    want.push_str("</body></html>\n");
    (
        Bytes::from(template),
        Arc::new(Memory { bodies }),
        want.into_bytes(),
    )
}

async fn compose_once(
    template: &Bytes,
    fetcher: &Arc<Memory>,
    settings: &Arc<ComposeSettings>,
) -> usize {
    let ctx = PageContext {
        fetcher: Arc::clone(fetcher) as Arc<dyn Fetcher>,
        settings: Arc::clone(settings),
        base: "http://mem/page".into(),
        template_at_base: true,
        headers: HeaderMap::new(),
        observer: Arc::new(NoObserver),
        script_nonce: None,
        out_of_order: true,
    };
    let body: BoxSource = Box::pin(weir_stream::once(template.clone()));
    let Page::Composed { mut body, .. } = compose(body, ctx).await else {
        panic!("not composed");
    };
    let mut n = 0;
    while let Some(batch) = body.next_batch().await {
        n += batch.expect("page batch").byte_len();
    }
    n
}

fn bench(c: &mut Criterion) {
    let (template, fetcher, want) = fixture();
    let settings = Arc::new(ComposeSettings::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");

    // Check the page before timing.
    let page = rt.block_on(async {
        let ctx = PageContext {
            fetcher: Arc::clone(&fetcher) as Arc<dyn Fetcher>,
            settings: Arc::clone(&settings),
            base: "http://mem/page".into(),
            template_at_base: true,
            headers: HeaderMap::new(),
            observer: Arc::new(NoObserver),
            script_nonce: None,
            out_of_order: true,
        };
        let body: BoxSource = Box::pin(weir_stream::once(template.clone()));
        let Page::Composed { body, .. } = compose(body, ctx).await else {
            panic!("not composed");
        };
        weir_stream::consume::bytes(body, weir_stream::consume::ConsumeOptions::new())
            .await
            .expect("page")
    });
    assert_eq!(
        &page[..],
        &want[..],
        "composed page differs from the expected one"
    );

    let mut group = c.benchmark_group("compose");
    group.throughput(Throughput::Bytes(want.len() as u64));
    group.bench_function("weir-ssr 20 fragments", |b| {
        b.iter(|| {
            let n = rt.block_on(compose_once(&template, &fetcher, &settings));
            assert_eq!(n, want.len());
            black_box(n)
        })
    });
    let pieces: Vec<Bytes> = {
        let mut v = Vec::new();
        let mut scanner = weir_ssr::Scanner::new(weir_ssr::ScanLimits::default());
        let mut out = Vec::new();
        scanner.feed(template.clone(), &mut out);
        scanner.finish(&mut out);
        let mut f = fetcher.bodies.iter();
        for p in out {
            match p {
                weir_ssr::Piece::Text(t) => v.push(t),
                weir_ssr::Piece::Include(_) => v.push(f.next().expect("body").1.clone()),
                _ => {}
            }
        }
        v
    };
    group.bench_function("floor: concatenate the pieces", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(want.len());
            for p in &pieces {
                out.extend_from_slice(p);
            }
            assert_eq!(out.len(), want.len());
            black_box(out.len())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
