//! html-rewrite: the stage over a ~2 MB generated page in 1 KiB and 16 KiB
//! chunks, against lol_html on the whole buffer at once with the same
//! settings (`rewrite_document`: one `write`, one `end`), which is the limit.
//!
//! Settings: a snippet injected before `</body>` and one attribute rewrite
//! (URL prefix `/` → `/app/` in href, src, ...). Run with
//! `cargo bench -p weir-transform --bench html -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weir_stream::{Batch, Transform};
use weir_transform::html::{HtmlRewrite, HtmlRewriteSettings, rewrite_document};

/// A page of about `target` bytes: a head with assets, then article blocks
/// with links, images, inline formatting and text.
fn page(target: usize) -> Vec<u8> {
    let mut p = String::with_capacity(target + 4096);
    p.push_str(
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8><title>Bench</title>\n\
         <link rel=stylesheet href=\"/static/site.css\"><script src=\"/static/app.js\" defer></script>\n\
         </head>\n<body class=\"page\">\n<nav><a href=\"/\">Home</a> <a href=\"https://example.com/\">Out</a></nav>\n",
    );
    let mut i = 0usize;
    while p.len() < target {
        p.push_str(&format!(
            "<article id=\"a{i}\" class=\"post\">\n<h2><a href=\"/posts/{i}\">Post number {i}</a></h2>\n\
             <p>Lorem ipsum dolor sit amet, <em>consectetur</em> adipiscing elit, sed do eiusmod tempor \
             incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud \
             <a href=\"//cdn.example/x/{i}\">exercitation</a> ullamco laboris nisi ut aliquip.</p>\n\
             <img src=\"/img/{i}.jpg\" alt=\"Picture {i}\" width=640 height=480>\n\
             <ul><li>one</li><li>two &amp; three</li><li><a href=\"rel/{i}\">relative</a></li></ul>\n\
             <!-- block {i} -->\n</article>\n"
        ));
        i += 1;
    }
    p.push_str("<footer>end</footer>\n</body></html>\n");
    p.into_bytes()
}

fn settings() -> Arc<HtmlRewriteSettings> {
    Arc::new(
        toml::from_str(
            r#"
inject_body_end = '<script src="/app/overlay.js"></script>'
url_prefixes = [{ from = "/", to = "/app/" }]
"#,
        )
        .expect("bench settings"),
    )
}

/// The stage over `chunks`, one chunk per batch; returns the output length
/// (or the whole output, for the check).
fn through_stage(s: &Arc<HtmlRewriteSettings>, chunks: &[Bytes], keep: bool) -> (usize, Vec<u8>) {
    let mut stage = HtmlRewrite::new(Arc::clone(s), encoding_rs::UTF_8);
    let mut len = 0;
    let mut kept = Vec::new();
    let mut take = |out: Option<Batch>| {
        for chunk in out.into_iter().flatten() {
            len += chunk.len();
            if keep {
                kept.extend_from_slice(&chunk);
            }
        }
    };
    for chunk in chunks {
        take(
            stage
                .transform(Some(Batch::one(chunk.clone())))
                .expect("transform"),
        );
    }
    take(stage.transform(None).expect("flush"));
    (len, kept)
}

fn chunked(doc: &[u8], size: usize) -> Vec<Bytes> {
    let doc = Bytes::copy_from_slice(doc);
    (0..doc.len())
        .step_by(size)
        .map(|i| doc.slice(i..(i + size).min(doc.len())))
        .collect()
}

fn bench(c: &mut Criterion) {
    let s = settings();
    let doc = page(2_000_000);
    let expected = rewrite_document(&s, encoding_rs::UTF_8, &doc).expect("rewrite_document");
    // The result is checked once, outside the timed loops.
    let text = String::from_utf8(expected.clone()).expect("utf-8");
    assert!(text.contains("<a href=\"/app/posts/7\">"));
    assert!(text.contains("<a href=\"//cdn.example/x/7\">"));
    assert_eq!(
        text.matches("<script src=\"/app/overlay.js\"></script></body>")
            .count(),
        1
    );
    let chunks_1k = chunked(&doc, 1024);
    let chunks_16k = chunked(&doc, 16 * 1024);
    assert_eq!(through_stage(&s, &chunks_1k, true).1, expected);
    assert_eq!(through_stage(&s, &chunks_16k, true).1, expected);

    let mut g = c.benchmark_group("html_rewrite_2MB");
    g.throughput(Throughput::Bytes(doc.len() as u64));
    g.sample_size(20);
    g.bench_function("lol_html_whole_buffer", |b| {
        b.iter(|| {
            rewrite_document(&s, encoding_rs::UTF_8, black_box(&doc))
                .expect("rewrite")
                .len()
        })
    });
    g.bench_function("stage_16k_chunks", |b| {
        b.iter(|| through_stage(&s, black_box(&chunks_16k), false).0)
    });
    g.bench_function("stage_1k_chunks", |b| {
        b.iter(|| through_stage(&s, black_box(&chunks_1k), false).0)
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
