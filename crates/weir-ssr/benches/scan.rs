//! The template scanner over a generated ~1 MB page with 100 include tags,
//! fed whole and in 16 KiB chunks, against lol_html's `HtmlRewriter` with
//! no handlers (the limit of any HTML-aware pass) and with element handlers
//! on `fragment` and `esi\:include` (what a lol_html-based scanner costs).
//!
//! Before timing, the results are checked: 100 includes found in both
//! feedings with the same pieces, lol_html's output as long as its input,
//! its handlers called 100 times. Then a paired report (rounds of the
//! scanner and lol_html back to back, the median ratio), then criterion.
//! Run with
//! `cargo bench -p weir-ssr --bench scan -- --warm-up-time 1 --measurement-time 3`.

use std::cell::Cell;
use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lol_html::{HtmlRewriter, Settings, element};
use weir_ssr::{Piece, ScanLimits, Scanner};

const INCLUDES: usize = 100;

/// A page of about `target` bytes with `INCLUDES` include tags spread
/// evenly: a head with assets and an inline script, then sections of
/// nested divs with attributes, links, lists, text, the odd comment and
/// script; every include alternates between a `<fragment>` with inline
/// fallback and a self-closing `<esi:include>`.
fn page(target: usize) -> Vec<u8> {
    let mut p = String::with_capacity(target + 8192);
    p.push_str(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Shop</title>\n\
         <link rel=\"stylesheet\" href=\"/static/site.css\">\n\
         <style>.card > .price { color: #c00 } a:hover { text-decoration: underline }</style>\n\
         <script>window.dataLayer = window.dataLayer || []; if (a < b && c > d) { x = '</div>'; }</script>\n\
         </head>\n<body class=\"page home\" data-route=\"/\">\n",
    );
    let per_include = target / INCLUDES;
    let mut next_include = per_include / 2;
    let mut included = 0;
    let mut i = 0usize;
    while p.len() < target || included < INCLUDES {
        if included < INCLUDES && p.len() >= next_include {
            if included % 2 == 0 {
                p.push_str(&format!(
                    "<fragment src=\"https://frag.example/widgets/{included}?lang=en&amp;v=2\" \
                     id=\"w{included}\" timeout=\"500ms\"{}>\n<div class=\"skeleton\">\
                     <span>Loading widget {included}…</span></div>\n</fragment>\n",
                    if included == 0 { " primary" } else { "" }
                ));
            } else {
                p.push_str(&format!(
                    "<esi:include src=\"/esi/recs/{included}\" alt=\"/esi/recs/default\" \
                     onerror=\"continue\"/>\n"
                ));
            }
            included += 1;
            next_include += per_include;
        }
        p.push_str(&format!(
            "<section class=\"row products\" id=\"s{i}\">\n\
             <div class=\"col col-4\"><div class=\"card\" data-sku=\"SKU-{i}-A\" data-price=\"19.99\">\n\
             <a class=\"card-link\" href=\"/p/{i}/blue-shirt\" title=\"Blue shirt, size M\">\
             <img src=\"/img/{i}-a.jpg\" alt=\"Blue shirt\" width=\"320\" height=\"240\" loading=\"lazy\"></a>\n\
             <h3 class=\"card-title\">Blue shirt <small>#{i}</small></h3>\n\
             <p class=\"desc\">Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do \
             eiusmod tempor incididunt ut labore et dolore magna aliqua &amp; more.</p>\n\
             <span class=\"price\">$19.99</span> <button type=\"button\" class=\"btn btn-primary\" \
             data-action=\"add-to-cart\" data-id=\"{i}\">Add to cart</button>\n</div></div>\n\
             <div class=\"col col-4\"><ul class=\"specs\"><li>Cotton</li><li>Machine wash</li>\
             <li><a href=\"/size-guide\">Size guide</a></li></ul>\n\
             <p>Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip \
             ex ea commodo consequat. Duis aute irure dolor in reprehenderit.</p></div>\n"
        ));
        if i.is_multiple_of(7) {
            p.push_str(&format!("<!-- row {i}: recommendations below -->\n"));
        }
        if i.is_multiple_of(25) {
            p.push_str(&format!(
                "<script type=\"application/ld+json\">{{\"@type\":\"Product\",\"sku\":\"SKU-{i}\",\
                 \"offers\":{{\"price\":\"19.99\"}}}}</script>\n"
            ));
        }
        p.push_str("</section>\n");
        i += 1;
    }
    p.push_str("<footer><p>&copy; Shop</p></footer>\n</body></html>\n");
    p.into_bytes()
}

fn chunked(doc: &Bytes, size: usize) -> Vec<Bytes> {
    (0..doc.len())
        .step_by(size)
        .map(|i| doc.slice(i..(i + size).min(doc.len())))
        .collect()
}

/// The scanner over `chunks`; returns the pieces.
fn weir(chunks: &[Bytes], out: &mut Vec<Piece>) {
    out.clear();
    let mut s = Scanner::new(ScanLimits::default());
    for c in chunks {
        s.feed(c.clone(), out);
    }
    s.finish(out);
}

/// lol_html with no handlers; returns the output length.
fn lol(chunks: &[Bytes]) -> usize {
    let mut len = 0;
    let mut r = HtmlRewriter::new(Settings::new(), |c: &[u8]| len += c.len());
    for c in chunks {
        r.write(c).expect("lol_html write");
    }
    r.end().expect("lol_html end");
    len
}

/// lol_html with element handlers on the two include tags; returns the
/// output length and how many elements the handlers saw.
fn lol_handlers(chunks: &[Bytes]) -> (usize, usize) {
    let mut len = 0;
    let seen = Cell::new(0usize);
    let settings = Settings::new()
        .with_enable_esi_tags(true)
        .append_element_content_handler(element!("fragment", |el| {
            seen.set(seen.get() + 1);
            black_box(el.get_attribute("src"));
            Ok(())
        }))
        .append_element_content_handler(element!("esi\\:include", |el| {
            seen.set(seen.get() + 1);
            black_box(el.get_attribute("src"));
            Ok(())
        }));
    let mut r = HtmlRewriter::new(settings, |c: &[u8]| len += c.len());
    for c in chunks {
        r.write(c).expect("lol_html write");
    }
    r.end().expect("lol_html end");
    (len, seen.get())
}

fn merged(pieces: &[Piece]) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut text = Vec::new();
    for p in pieces {
        match p {
            Piece::Text(t) => text.extend_from_slice(t),
            p => {
                if !text.is_empty() {
                    out.push(Piece::Text(Bytes::from(std::mem::take(&mut text))));
                }
                out.push(p.clone());
            }
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(Bytes::from(text)));
    }
    out
}

fn check(doc: &Bytes, whole: &[Bytes], chunks: &[Bytes]) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    weir(whole, &mut a);
    weir(chunks, &mut b);
    let count = |p: &[Piece]| p.iter().filter(|p| matches!(p, Piece::Include(_))).count();
    assert_eq!(count(&a), INCLUDES, "includes found, whole");
    assert_eq!(count(&b), INCLUDES, "includes found, 16 KiB chunks");
    assert!(
        !a.iter().any(|p| matches!(p, Piece::Warning(_))),
        "no warnings"
    );
    assert_eq!(
        a.iter().filter(|p| matches!(p, Piece::BodyEnd)).count(),
        1,
        "one body end"
    );
    assert_eq!(merged(&a), merged(&b), "same pieces in both feedings");
    assert_eq!(lol(whole), doc.len(), "lol_html passes the page through");
    assert_eq!(lol(chunks), doc.len());
    let (len, seen) = lol_handlers(chunks);
    assert_eq!((len, seen), (doc.len(), INCLUDES), "lol_html's handlers");
}

/// Rounds of the scanner and both lol_html variants back to back on the
/// 16 KiB chunks, one pass each: the machine is shared and noisy, so each
/// one's best pass and the median of the per-round ratios are printed.
fn paired(doc: &Bytes, chunks: &[Bytes]) {
    const ROUNDS: usize = 41;
    let mut out = Vec::with_capacity(1024);
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    let (mut plain, mut handlers) = (Vec::new(), Vec::new());
    let mut best = [f64::MAX; 3];
    for _ in 0..ROUNDS {
        let w = time(&mut || weir(black_box(chunks), &mut out));
        let l = time(&mut || {
            black_box(lol(black_box(chunks)));
        });
        let h = time(&mut || {
            black_box(lol_handlers(black_box(chunks)));
        });
        for (b, t) in best.iter_mut().zip([w, l, h]) {
            *b = b.min(t);
        }
        plain.push(l / w);
        handlers.push(h / w);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[ROUNDS / 4], v[ROUNDS / 2], v[3 * ROUNDS / 4])
    };
    let mb = doc.len() as f64 / 1e6;
    let (p1, p2, p3) = median(&mut plain);
    let (h1, h2, h3) = median(&mut handlers);
    println!(
        "paired, 16 KiB chunks, {} bytes, {ROUNDS} rounds, best pass: weir {:.0} MB/s, \
         lol_html no handlers {:.0} MB/s, lol_html include handlers {:.0} MB/s",
        doc.len(),
        mb / best[0],
        mb / best[1],
        mb / best[2]
    );
    println!(
        "paired speed ratio weir/lol_html, median (quartiles): no handlers {p2:.2}x ({p1:.2}x-{p3:.2}x), \
         include handlers {h2:.2}x ({h1:.2}x-{h3:.2}x)"
    );
}

fn bench(c: &mut Criterion) {
    let doc = Bytes::from(page(1_000_000));
    let whole = vec![doc.clone()];
    let chunks = chunked(&doc, 16 * 1024);
    check(&doc, &whole, &chunks);
    paired(&doc, &chunks);

    let mut g = c.benchmark_group("scan_1MB_100_includes");
    g.throughput(Throughput::Bytes(doc.len() as u64));
    g.sample_size(20);
    let mut out = Vec::with_capacity(1024);
    g.bench_function("weir_whole", |b| {
        b.iter(|| {
            weir(black_box(&whole), &mut out);
            out.len()
        })
    });
    g.bench_function("weir_16k_chunks", |b| {
        b.iter(|| {
            weir(black_box(&chunks), &mut out);
            out.len()
        })
    });
    g.bench_function("lol_html_no_handlers_whole", |b| {
        b.iter(|| lol(black_box(&whole)))
    });
    g.bench_function("lol_html_no_handlers_16k_chunks", |b| {
        b.iter(|| lol(black_box(&chunks)))
    });
    g.bench_function("lol_html_include_handlers_16k_chunks", |b| {
        b.iter(|| lol_handlers(black_box(&chunks)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
