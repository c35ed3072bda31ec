//! The composer against in-memory fragments, on a paused clock: order,
//! streaming, the primary, fallbacks, async fragments, nesting, limits,
//! backpressure and cancellation.

mod common;

use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{MemFetcher, Script, context, render, template, untoken};
use http::StatusCode;
use weir_ssr::{ComposeSettings, FragmentOutcome, Page, compose};
use weir_stream::{Source, SourceExt as _};

fn settings() -> ComposeSettings {
    ComposeSettings::default()
}

/// A small PRNG for reproducible random cases.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

#[tokio::test(start_paused = true)]
async fn output_is_the_template_with_each_slot_replaced_whatever_order_fragments_finish_in() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for case in 0..60 {
        let n = 1 + (rng.next() % 8) as usize;
        let mut scripts = Vec::new();
        let mut text = String::from("<html><body>T");
        let mut want = String::from("<html><body>T");
        for i in 0..n {
            let src = format!("/f{i}");
            let delay = rng.next() % 50;
            let parts = 1 + rng.next() % 3;
            let chunks: Vec<(u64, String)> = (0..parts)
                .map(|k| (rng.next() % 10, format!("[{i}.{k}]")))
                .collect();
            let body: String = chunks.iter().map(|(_, s)| s.as_str()).collect();
            let refs: Vec<(u64, &str)> = chunks.iter().map(|(d, s)| (*d, s.as_str())).collect();
            scripts.push((src.clone(), Script::ok("").delayed(delay).chunks(&refs)));
            text.push_str(&format!("<p>{i}</p><fragment src=\"{src}\"></fragment>"));
            want.push_str(&format!("<p>{i}</p>{body}"));
        }
        text.push_str("</body></html>");
        want.push_str("</body></html>");
        let scripts: Vec<(&str, Script)> = scripts
            .iter()
            .map(|(s, x)| (s.as_str(), x.clone()))
            .collect();
        let fetcher = MemFetcher::with(&scripts);
        let (page, counts) = render(&fetcher, &text, settings()).await;
        assert_eq!(page, want, "case {case}");
        assert_eq!(counts.get(FragmentOutcome::Ok), n as u64, "case {case}");
    }
}

/// The page's next batch as text, or `None` at its end.
async fn next_text(body: &mut (impl Source + Unpin)) -> Option<String> {
    match body.next_batch().await {
        Some(Ok(b)) => {
            let mut s = String::new();
            for c in b {
                s.push_str(std::str::from_utf8(&c).expect("utf-8"));
            }
            Some(s)
        }
        Some(Err(e)) => panic!("page failed: {e}"),
        None => None,
    }
}

#[tokio::test(start_paused = true)]
async fn fragments_stream_in_order_as_they_arrive_and_the_page_takes_the_longest_delay_not_the_sum()
{
    let fetcher = MemFetcher::with(&[
        ("/a", Script::ok("A").delayed(0)),
        ("/b", Script::ok("B").delayed(100)),
        ("/c", Script::ok("C").delayed(200)),
        ("/d", Script::ok("D").delayed(1000)),
    ]);
    let text = "<head></head><body><fragment src=\"/a\"></fragment>|<fragment src=\"/b\"></fragment>|\
                <fragment src=\"/c\"></fragment>|<fragment src=\"/d\"></fragment></body>";
    let (ctx, _) = context(&fetcher, settings());
    let start = tokio::time::Instant::now();
    let Page::Composed {
        status, mut body, ..
    } = compose(template(text, 4096), ctx).await
    else {
        panic!("composed");
    };
    assert_eq!(status, None, "no primary: the template's status");
    let mut seen = Vec::new();
    while let Some(t) = next_text(&mut body).await {
        seen.push((t, start.elapsed()));
    }
    let all: String = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(all, "<head></head><body>A|B|C|D</body>");
    let at = |needle: &str| {
        seen.iter()
            .find(|(t, _)| t.contains(needle))
            .map(|(_, d)| *d)
            .expect("seen")
    };
    assert!(
        at("<head>") < Duration::from_millis(1),
        "template's first bytes at once"
    );
    assert!(at("B") >= Duration::from_millis(100) && at("B") < Duration::from_millis(150));
    assert!(at("C") < Duration::from_millis(250));
    let total = start.elapsed();
    assert!(
        total >= Duration::from_millis(1000) && total < Duration::from_millis(1100),
        "{total:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_primary_sets_status_and_fields_and_a_redirect_or_failure_replaces_the_page() {
    // 404: the page is composed with the primary's status and cookies.
    let fetcher = MemFetcher::with(&[
        (
            "/p",
            Script::ok("missing")
                .status(404)
                .header("set-cookie", "a=1")
                .header("set-cookie", "b=2")
                .header("cache-control", "no-cache")
                .header("x-private", "no"),
        ),
        (
            "/o",
            Script::ok("other").header("link", "</s.css>; rel=preload"),
        ),
    ]);
    let (ctx, _) = context(&fetcher, settings());
    let text = "<fragment src=\"/o\"></fragment><fragment src=\"/p\" primary></fragment>";
    let Page::Composed {
        status,
        headers,
        body,
    } = compose(template(text, 7), ctx).await
    else {
        panic!("composed");
    };
    assert_eq!(status, Some(StatusCode::NOT_FOUND));
    assert_eq!(headers.get_all("set-cookie").iter().count(), 2);
    assert_eq!(headers["cache-control"], "no-cache");
    assert!(headers.get("x-private").is_none());
    let page = weir_stream::consume::text(body, weir_stream::consume::ConsumeOptions::new())
        .await
        .expect("page");
    assert_eq!(page, "othermissing");

    // 302: the page is the redirect.
    let fetcher = MemFetcher::with(&[(
        "/p",
        Script::ok("").status(302).header("location", "/login"),
    )]);
    let (ctx, _) = context(&fetcher, settings());
    match compose(template("<fragment src=\"/p\" primary/>x", 64), ctx).await {
        Page::Redirect { status, headers } => {
            assert_eq!(status, StatusCode::FOUND);
            assert_eq!(headers["location"], "/login");
        }
        other => panic!("{other:?}"),
    }

    // A timeout: 504; an error, a 5xx, a 304 or a redirect to nowhere: 502.
    for (script, want) in [
        (Script::ok("").status(304), StatusCode::BAD_GATEWAY),
        (Script::ok("").status(302), StatusCode::BAD_GATEWAY),
        (
            Script::ok("late").delayed(5000),
            StatusCode::GATEWAY_TIMEOUT,
        ),
        (Script::ok("boom").status(503), StatusCode::BAD_GATEWAY),
    ] {
        let fetcher = MemFetcher::with(&[("/p", script)]);
        let (ctx, _) = context(&fetcher, settings());
        match compose(
            template(
                "<fragment src=\"/p\" primary timeout=\"300\"></fragment>",
                64,
            ),
            ctx,
        )
        .await
        {
            Page::Failed { status, .. } => assert_eq!(status, want),
            other => panic!("{other:?}"),
        }
    }
    let fetcher = MemFetcher::with(&[]);
    let (ctx, _) = context(&fetcher, settings());
    assert!(matches!(
        compose(
            template("<fragment src=\"/nothing\" primary></fragment>", 64),
            ctx
        )
        .await,
        Page::Failed {
            status: StatusCode::BAD_GATEWAY,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn fallbacks_go_fallback_src_then_alt_then_inline_markup_then_nothing() {
    let fetcher = MemFetcher::with(&[
        ("/slow", Script::ok("slow").delayed(5000)),
        ("/broken", Script::ok("broken").status(500)),
        ("/cached", Script::ok("cached")),
    ]);
    let text = "1<fragment src=\"/slow\" timeout=\"200ms\" fallback-src=\"/cached\">inline</fragment>\
                2<fragment src=\"/slow\" timeout=\"200\" fallback-src=\"/broken\">inline</fragment>\
                3<fragment src=\"/broken\"></fragment>\
                4<esi:include src=\"/broken\" alt=\"/cached\" onerror=\"continue\"/>\
                5<fragment src=\"http://elsewhere/x\">not allowed</fragment>6";
    let (page, counts) = render(&fetcher, text, settings()).await;
    assert_eq!(page, "1cached2inline34cached5not allowed6");
    assert_eq!(counts.get(FragmentOutcome::Fallback), 2);
    assert_eq!(counts.get(FragmentOutcome::Inline), 2);
    assert_eq!(counts.get(FragmentOutcome::Empty), 1);
}

#[tokio::test(start_paused = true)]
async fn async_fragments_leave_a_placeholder_and_come_before_body_end_in_arrival_order() {
    let fetcher = MemFetcher::with(&[
        ("/late", Script::ok("LATE").delayed(300)),
        ("/early", Script::ok("EARLY").delayed(100)),
        ("/sync", Script::ok("SYNC")),
    ]);
    let text = "<body><fragment src=\"/late\" async></fragment><fragment src=\"/early\" async></fragment>\
                <fragment src=\"/sync\"></fragment><p>end</p></body></html>";
    let (page, _) = render(&fetcher, text, settings()).await;
    let page = untoken(&page);
    let slot0 = page
        .find("<template id=\"weir-slot-0\"></template>")
        .expect("placeholder 0");
    let slot1 = page
        .find("<template id=\"weir-slot-1\"></template>")
        .expect("placeholder 1");
    let sync = page.find("SYNC").expect("sync");
    let early = page
        .find("<template id=\"weir-async-1\">EARLY</template>")
        .expect("early");
    let late = page
        .find("<template id=\"weir-async-0\">LATE</template>")
        .expect("late");
    let body_end = page.find("</body>").expect("body end");
    assert!(
        slot0 < slot1 && slot1 < sync && sync < early && early < late && late < body_end,
        "{page}"
    );
    assert!(page.ends_with("</body></html>"));
    assert_eq!(page.matches("<script>").count(), 2);
}

#[tokio::test(start_paused = true)]
async fn nested_templates_compose_and_loops_and_depth_are_stopped() {
    let fetcher = MemFetcher::with(&[
        (
            "/outer",
            Script::ok("(o<fragment src=\"/inner\"></fragment>o)").header("x-weir-template", "1"),
        ),
        ("/inner", Script::ok("i")),
        (
            "/loop",
            Script::ok("L<fragment src=\"/loop\">stop</fragment>").header("x-weir-template", "1"),
        ),
        (
            "/d1",
            Script::ok("1<fragment src=\"/d2\">x2</fragment>").header("x-weir-template", "1"),
        ),
        (
            "/d2",
            Script::ok("2<fragment src=\"/d3\">x3</fragment>").header("x-weir-template", "1"),
        ),
        (
            "/d3",
            Script::ok("3<fragment src=\"/d4\">x4</fragment>").header("x-weir-template", "1"),
        ),
        ("/d4", Script::ok("4").header("x-weir-template", "1")),
    ]);
    let text = "<fragment src=\"/outer\"></fragment>|<fragment src=\"/loop\"></fragment>|\
                <fragment src=\"/d1\"></fragment>";
    let (page, _) = render(&fetcher, text, settings()).await;
    // /loop includes itself: the inner include gets its inline fallback.
    // /d1 → /d2 → /d3 are depths 1..3; /d4 would be depth 4 > max_depth 3.
    assert_eq!(page, "(oio)|Lstop|123x4");
}

#[tokio::test(start_paused = true)]
async fn includes_past_max_includes_get_their_inline_fallback_without_a_fetch() {
    let fetcher = MemFetcher::with(&[("/f", Script::ok("F"))]);
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!("<fragment src=\"/f?{i}\">-</fragment>"));
    }
    {
        let mut m = fetcher.scripts.lock().expect("lock");
        for i in 0..300 {
            m.insert(format!("http://t/f?{i}"), Script::ok("F"));
        }
    }
    let (page, counts) = render(&fetcher, &text, settings()).await;
    assert_eq!(page, format!("{}{}", "F".repeat(256), "-".repeat(44)));
    assert_eq!(fetcher.fetched().len(), 256);
    assert_eq!(counts.get(FragmentOutcome::Skipped), 44);
}

#[tokio::test(start_paused = true)]
async fn a_big_fragment_behind_a_slow_one_is_not_read_past_its_buffer() {
    let fetcher = MemFetcher::with(&[("/slow", Script::ok("S").delayed(1000))]);
    fetcher
        .big
        .lock()
        .expect("lock")
        .insert("http://t/big".into(), (50 << 20, 16 * 1024));
    let s = ComposeSettings {
        fragment_buffer_bytes: 256 * 1024,
        ..settings()
    };
    let (ctx, _) = context(&fetcher, s);
    let text = "<fragment src=\"/slow\"></fragment><fragment src=\"/big\"></fragment>";
    let Page::Composed { mut body, .. } = compose(template(text, 64), ctx).await else {
        panic!("composed");
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pulled = fetcher.pulled.load(Ordering::SeqCst);
    assert!(
        pulled <= 256 * 1024 + 16 * 1024,
        "pulled {pulled} bytes ahead of its turn"
    );
    assert!(pulled >= 256 * 1024, "it did fill its buffer: {pulled}");
    let mut total = 0usize;
    while let Some(b) = body.next_batch().await {
        total += b.expect("ok").byte_len();
    }
    assert_eq!(total, 1 + (50 << 20));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_page_cancels_every_fragment_in_flight() {
    let fetcher = MemFetcher::with(&[
        ("/a", Script::ok("A")),
        ("/b", Script::ok("").chunks(&[(0, "b1"), (10_000, "b2")])),
        ("/c", Script::ok("C").delayed(10_000)),
    ]);
    let (ctx, counts) = context(&fetcher, settings());
    let text = "<fragment src=\"/a\"></fragment><fragment src=\"/b\"></fragment><fragment src=\"/c\"></fragment>";
    let Page::Composed { mut body, .. } = compose(template(text, 64), ctx).await else {
        panic!("composed");
    };
    assert_eq!(next_text(&mut body).await.as_deref(), Some("A"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(fetcher.in_flight.load(Ordering::SeqCst) >= 2);
    drop(body);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        fetcher.in_flight.load(Ordering::SeqCst),
        0,
        "fetches cancelled"
    );
    assert_eq!(
        fetcher.live_bodies.load(Ordering::SeqCst),
        0,
        "bodies dropped"
    );
    assert_eq!(counts.get(FragmentOutcome::Ok), 1);
    assert_eq!(
        counts.get(FragmentOutcome::Cancelled),
        2,
        "aborted tasks are counted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_fragment_failing_mid_stream_ends_there_and_may_close_its_elements() {
    let script = Script::ok("")
        .chunks(&[(0, "<div><ul><li>one"), (0, "</li><li>tw")])
        .failing();
    for (close, want) in [
        (false, "a<div><ul><li>one</li><li>twb"),
        (true, "a<div><ul><li>one</li><li>tw</li></ul></div>b"),
    ] {
        let fetcher = MemFetcher::with(&[("/f", script.clone())]);
        let s = ComposeSettings {
            close_open_elements: close,
            ..settings()
        };
        let (page, counts) =
            render(&fetcher, "a<fragment src=\"/f\">fallback</fragment>b", s).await;
        assert_eq!(page, want);
        assert_eq!(counts.get(FragmentOutcome::Cut), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn fetches_are_capped_per_page() {
    let mut scripts = Vec::new();
    for i in 0..40 {
        scripts.push((format!("/f{i}"), Script::ok("x").delayed(50)));
    }
    let refs: Vec<(&str, Script)> = scripts
        .iter()
        .map(|(s, x)| (s.as_str(), x.clone()))
        .collect();
    let fetcher = MemFetcher::with(&refs);
    let text: String = (0..40)
        .map(|i| format!("<fragment src=\"/f{i}\"></fragment>"))
        .collect();
    let s = ComposeSettings {
        max_parallel: 8,
        ..settings()
    };
    let (page, _) = render(&fetcher, &text, s).await;
    assert_eq!(page, "x".repeat(40));
    // Eight slots, and the fragment the page waits for, which takes none.
    let most = fetcher.max_in_flight.load(Ordering::SeqCst);
    assert!((8..=9).contains(&most), "{most} in flight");
}

#[tokio::test(start_paused = true)]
async fn the_page_yields_once_at_a_fragment_boundary_so_the_pipeline_flushes() {
    let fetcher = MemFetcher::with(&[("/a", Script::ok("A")), ("/b", Script::ok("B"))]);
    let (ctx, _) = context(&fetcher, settings());
    let Page::Composed { mut body, .. } = compose(
        template(
            "<fragment src=\"/a\"></fragment><fragment src=\"/b\"></fragment>",
            64,
        ),
        ctx,
    )
    .await
    else {
        panic!("composed");
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut pin = std::pin::Pin::new(&mut body);
    let mut seen = Vec::new();
    for _ in 0..8 {
        match pin.as_mut().poll_next_batch(&mut cx) {
            Poll::Ready(Some(Ok(b))) => {
                seen.push(String::from_utf8(b.into_chunks().concat()).expect("utf-8"))
            }
            Poll::Ready(None) => {
                seen.push("END".into());
                break;
            }
            Poll::Ready(Some(Err(e))) => panic!("{e}"),
            Poll::Pending => seen.push("|".into()),
        }
    }
    assert_eq!(seen.join(""), "A|B|END");
}

#[tokio::test(start_paused = true)]
async fn gzip_fragments_are_decoded_before_splicing() {
    use flate2::{Compress, Compression, FlushCompress};
    let mut c = Compress::new_gzip(Compression::default(), 15);
    let mut wire = Vec::with_capacity(256);
    c.compress_vec(b"<b>zipped</b>", &mut wire, FlushCompress::Finish)
        .expect("gzip");
    let fetcher = MemFetcher::with(&[(
        "/z",
        Script {
            chunks: vec![(Duration::ZERO, bytes::Bytes::from(wire))],
            ..Script::ok("").header("content-encoding", "gzip")
        },
    )]);
    let (page, _) = render(&fetcher, "[<fragment src=\"/z\"></fragment>]", settings()).await;
    assert_eq!(page, "[<b>zipped</b>]");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_attribute_past_the_clocks_range_is_capped_not_a_panic() {
    let fetcher = MemFetcher::with(&[
        ("/a", Script::ok("A").delayed(10)),
        ("/b", Script::ok("B").delayed(10)),
    ]);
    // 2^64 - 1 seconds: a valid `timeout` value, but no `Instant` is that far.
    let text = "[<fragment src=\"/a\" timeout=\"18446744073709551615s\">fa</fragment>]\
                [<fragment src=\"/b\" total-timeout=\"18446744073709551615s\">fb</fragment>]";
    let (page, counts) = render(&fetcher, text, settings()).await;
    assert_eq!(page, "[A][B]");
    assert_eq!(counts.get(FragmentOutcome::Ok), 2);
}

/// A template that never ends: `head` once, then `unit` as fast as it is
/// pulled (up to 64 MiB, then it stalls, so that a test fails rather than
/// runs out of memory); counts the bytes the page has pulled from it.
struct Endless {
    head: Option<bytes::Bytes>,
    unit: bytes::Bytes,
    pulled: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Source for Endless {
    fn poll_next_batch(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<weir_stream::BatchResult>> {
        let this = self.get_mut();
        if this.pulled.load(Ordering::SeqCst) >= 64 << 20 {
            return Poll::Pending;
        }
        let chunk = this.head.take().unwrap_or_else(|| this.unit.clone());
        this.pulled.fetch_add(chunk.len(), Ordering::SeqCst);
        Poll::Ready(Some(Ok(weir_stream::Batch::one(chunk))))
    }
}

#[tokio::test(start_paused = true)]
async fn a_template_of_includes_is_not_read_past_template_read_ahead() {
    let ahead = 256 * 1024;
    let s = ComposeSettings {
        template_read_ahead: ahead,
        max_includes: 4,
        ..settings()
    };
    // Past the first (slow) fragment, includes only: with inline fallback
    // markup (held, not text), and self-closing ones (a slot each).
    for unit in [
        format!("<fragment src=\"/x\">{}</fragment>", "F".repeat(8000)),
        "<fragment src=\"/x\"/>".repeat(100),
    ] {
        let fetcher = MemFetcher::with(&[("/slow", Script::ok("S").delayed(10_000))]);
        let (ctx, _) = context(&fetcher, s.clone());
        let pulled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let endless = Endless {
            head: Some(bytes::Bytes::from_static(
                b"<body><fragment src=\"/slow\"></fragment>",
            )),
            unit: bytes::Bytes::from(unit),
            pulled: std::sync::Arc::clone(&pulled),
        };
        let Page::Composed { mut body, .. } = compose(Box::pin(endless), ctx).await else {
            panic!("composed");
        };
        assert_eq!(next_text(&mut body).await.as_deref(), Some("<body>"));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        for _ in 0..4 {
            assert!(
                std::pin::Pin::new(&mut body)
                    .poll_next_batch(&mut cx)
                    .is_pending()
            );
        }
        let read = pulled.load(Ordering::SeqCst);
        assert!(
            read <= 2 * ahead,
            "read {read} template bytes with a read-ahead of {ahead}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn big_fragments_before_the_primary_holding_every_fetch_slot_do_not_time_it_out() {
    let fetcher = MemFetcher::with(&[("/p", Script::ok("P").status(404))]);
    for big in ["/big1", "/big2"] {
        fetcher
            .big
            .lock()
            .expect("lock")
            .insert(format!("http://t{big}"), (4 << 20, 16 * 1024));
    }
    let s = ComposeSettings {
        max_parallel: 2,
        ..settings()
    };
    let (ctx, _) = context(&fetcher, s);
    // Each big fragment fills its buffer and waits for its turn, which
    // comes only once the page's head is out: after the primary's head.
    let text = "<fragment src=\"/big1\"></fragment><fragment src=\"/big2\"></fragment>\
                <fragment src=\"/p\" primary></fragment>";
    match compose(template(text, 4096), ctx).await {
        Page::Composed { status, body, .. } => {
            assert_eq!(status, Some(StatusCode::NOT_FOUND));
            let page =
                weir_stream::consume::bytes(body, weir_stream::consume::ConsumeOptions::new())
                    .await
                    .expect("page");
            assert_eq!(page.len(), 2 * (4 << 20) + 1);
        }
        other => panic!("a healthy primary behind two big fragments: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_primary_whose_coding_or_nesting_cannot_be_used_fails_the_page() {
    // Its head said 200, but its body could never be spliced: the page
    // must not go out as a 200 without its main content.
    for (script, s) in [
        (
            Script::ok("brotli bytes").header("content-encoding", "br"),
            settings(),
        ),
        (
            Script::ok("<p>a template</p>").header("x-weir-template", "1"),
            ComposeSettings {
                max_depth: 0,
                ..settings()
            },
        ),
    ] {
        let fetcher = MemFetcher::with(&[("/p", script)]);
        let (ctx, _) = context(&fetcher, s);
        match compose(template("<b>x</b><fragment src=\"/p\" primary/>", 64), ctx).await {
            Page::Failed { status, .. } => assert_eq!(status, StatusCode::BAD_GATEWAY),
            Page::Composed { status, .. } => panic!("composed with status {status:?}"),
            other => panic!("{other:?}"),
        }
    }
}
