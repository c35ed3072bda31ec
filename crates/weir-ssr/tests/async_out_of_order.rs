//! `async` fragments delivered out of order, against in-memory fragments on
//! a paused clock: at the first safe point once ready, never inside a slow
//! in-order fragment's markup, in pieces with `async_stream`, with the CSP
//! nonce; and the page-wide byte budget.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{MemFetcher, Script, context, template, untoken};
use tokio::time::Instant;
use weir_ssr::{ComposeSettings, Page, PageBody, compose};
use weir_stream::SourceExt as _;

/// Every batch of the page, with the paused clock's milliseconds at which
/// it came; the page's token is taken out of Weir's ids (`untoken`: an id
/// is always inside one of Weir's chunks, so inside one batch).
async fn timed(mut body: PageBody) -> Vec<(u128, String)> {
    let start = Instant::now();
    let mut out = Vec::new();
    while let Some(b) = body.next_batch().await {
        let mut s = String::new();
        for c in b.expect("page batch") {
            s.push_str(std::str::from_utf8(&c).expect("utf-8"));
        }
        out.push((start.elapsed().as_millis(), untoken(&s)));
    }
    out
}

async fn page(fetcher: &std::sync::Arc<MemFetcher>, text: &str, s: ComposeSettings) -> PageBody {
    let (ctx, _) = context(fetcher, s);
    match compose(template(text, 16), ctx).await {
        Page::Composed { body, .. } => body,
        other => panic!("not composed: {other:?}"),
    }
}

/// When `needle` first appeared, and the text up to it.
fn arrival(batches: &[(u128, String)], needle: &str) -> (u128, usize) {
    let mut text = String::new();
    for (at, s) in batches {
        text.push_str(s);
        if let Some(i) = text.find(needle) {
            return (*at, i);
        }
    }
    panic!("{needle:?} never came: {text}");
}

fn all(batches: &[(u128, String)]) -> String {
    batches.iter().map(|(_, s)| s.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_ready_async_fragment_goes_out_at_once_ahead_of_a_slow_in_order_one() {
    let fetcher = MemFetcher::with(&[
        ("/slow", Script::ok("<p>SLOW</p>").delayed(1000)),
        ("/fast", Script::ok("<p>FAST</p>").delayed(100)),
    ]);
    let text = "<html><head><title>t</title></head><body>\
                <div><fragment src=\"/fast\" async><i>wait</i></fragment></div>\
                <div><fragment src=\"/slow\"></fragment></div><p>end</p></body></html>";
    let batches = timed(page(&fetcher, text, ComposeSettings::default()).await).await;
    let (fast_at, fast_pos) = arrival(&batches, "<template id=\"weir-async-0\"><p>FAST</p>");
    let (slow_at, slow_pos) = arrival(&batches, "SLOW");
    assert!((100..150).contains(&fast_at), "async at {fast_at} ms");
    assert!(slow_at >= 1000, "slow at {slow_at} ms");
    assert!(fast_pos < slow_pos);
    let page = all(&batches);
    // Placeholder with its no-script fallback, then the content and the
    // script that moves it, right where the page waited for /slow.
    assert!(
        page.contains(
            "<div><template id=\"weir-slot-0\"></template><i>wait</i>\
             <template id=\"weir-end-0\"></template></div><div><template id=\"weir-async-0\">\
             <p>FAST</p></template><script>"
        ),
        "{page}"
    );
    assert!(
        page.ends_with("<p>SLOW</p></div><p>end</p></body></html>"),
        "{page}"
    );
    assert_eq!(page.matches("<script>").count(), 1, "{page}");
}

#[tokio::test(start_paused = true)]
async fn an_async_fragment_waits_while_the_page_is_inside_a_textarea_or_a_comment() {
    // The page waits inside a textarea (a slow fragment there) until 300
    // ms, then inside a fragment's comment (cut in two) until 700 ms:
    // neither is a safe point. /a is ready at 100 ms, /b at 400 ms.
    let fetcher = MemFetcher::with(&[
        ("/a", Script::ok("<b>A</b>").delayed(100)),
        ("/b", Script::ok("<b>B</b>").delayed(400)),
        ("/t", Script::ok("typed").delayed(300)),
        (
            "/c",
            Script::ok("").chunks(&[(0, "<p>x<!-- a com"), (700, "ment --></p>")]),
        ),
    ]);
    let text = "<body><span><fragment src=\"/a\" async></fragment></span>\
                <span><fragment src=\"/b\" async></fragment></span>\
                <textarea><fragment src=\"/t\"></fragment></textarea>\
                <div><fragment src=\"/c\"></fragment></div></body>";
    let batches = timed(page(&fetcher, text, ComposeSettings::default()).await).await;
    let page = all(&batches);
    let (a_at, a) = arrival(&batches, "<template id=\"weir-async-0\">");
    let (b_at, b) = arrival(&batches, "<template id=\"weir-async-1\">");
    let textarea_end = page.find("</textarea>").expect("textarea");
    let comment = page.find("<!-- a com").expect("comment");
    let comment_end = page.find("ment -->").expect("comment end");
    assert!(textarea_end < a && a < comment, "{page}");
    assert!((300..350).contains(&a_at), "/a at {a_at} ms");
    assert!(comment_end < b, "{page}");
    assert!(b_at >= 700, "/b at {b_at} ms: {page}");
}

#[tokio::test(start_paused = true)]
async fn with_async_stream_whole_top_level_nodes_go_out_as_they_arrive() {
    let fetcher = MemFetcher::with(&[
        ("/slow", Script::ok("SLOW").delayed(1000)),
        (
            "/list",
            Script::ok("").chunks(&[(0, "<li>a</li>"), (100, "<li>b"), (100, "</li>")]),
        ),
    ]);
    let text = "<body><ul><fragment src=\"/list\" async></fragment></ul>\
                <div><fragment src=\"/slow\"></fragment></div></body>";
    let s = ComposeSettings {
        async_stream: true,
        ..ComposeSettings::default()
    };
    let batches = timed(page(&fetcher, text, s).await).await;
    let (first, _) = arrival(
        &batches,
        "<template id=\"weir-async-0\"><li>a</li></template>",
    );
    let (second, _) = arrival(
        &batches,
        "<template id=\"weir-async-0-1\"><li>b</li></template>",
    );
    assert!(first < 50, "first piece at {first} ms");
    assert!((200..250).contains(&second), "second piece at {second} ms");
    let page = all(&batches);
    // The first script moves piece 0 and keeps the slot marker; the last
    // one moves piece 1 and removes it.
    let scripts: Vec<&str> = page.split("<script>").skip(1).collect();
    assert_eq!(scripts.len(), 2, "{page}");
    assert!(scripts[0].contains("[\"weir-async-0\"]") && !scripts[0].contains("a.remove()"));
    assert!(scripts[1].contains("[\"weir-async-0-1\"]") && scripts[1].contains("a.remove()"));
}

#[tokio::test(start_paused = true)]
async fn content_that_comes_before_its_placeholder_is_moved_once_the_placeholder_is_out() {
    let fetcher = MemFetcher::with(&[
        ("/slow", Script::ok("SLOW").delayed(1000)),
        ("/fast", Script::ok("FAST").delayed(100)),
    ]);
    let text = "<body><div><fragment src=\"/slow\"></fragment></div>\
                <div><fragment src=\"/fast\" async></fragment></div><p>end</p></body>";
    let batches = timed(page(&fetcher, text, ComposeSettings::default()).await).await;
    let (content_at, content) = arrival(&batches, "<template id=\"weir-async-0\">FAST</template>");
    let (_, slot) = arrival(&batches, "<template id=\"weir-slot-0\">");
    let (_, script) = arrival(&batches, "<script>");
    assert!(content_at < 150, "{content_at}");
    assert!(content < slot && slot < script, "{}", all(&batches));
}

#[tokio::test(start_paused = true)]
async fn the_mover_script_carries_the_nonce_of_the_page() {
    let fetcher = MemFetcher::with(&[("/a", Script::ok("A").delayed(10))]);
    let (mut ctx, _) = context(&fetcher, ComposeSettings::default());
    ctx.script_nonce = Some("n0nce+/=".into());
    let text = "<body><fragment src=\"/a\" async></fragment></body>";
    let Page::Composed { body, .. } = compose(template(text, 16), ctx).await else {
        panic!("composed");
    };
    let page = all(&timed(body).await);
    assert!(page.contains("<script nonce=\"n0nce+/=\">"), "{page}");
    assert!(!page.contains("<script>"), "{page}");
}

#[tokio::test(start_paused = true)]
async fn the_page_budget_stops_reading_fragments_that_hold_bytes_until_the_page_catches_up() {
    let fetcher = MemFetcher::with(&[("/slow", Script::ok("S").delayed(1000))]);
    let mut text = String::from("<body><fragment src=\"/slow\"></fragment>");
    for k in 0..20 {
        fetcher
            .big
            .lock()
            .expect("lock")
            .insert(format!("http://t/big{k}"), (1 << 20, 16 * 1024));
        text.push_str(&format!("<fragment src=\"/big{k}\"></fragment>"));
    }
    text.push_str("</body>");
    let s = ComposeSettings {
        // Each fragment alone could hold all of its 1 MiB.
        fragment_buffer_bytes: 2 << 20,
        page_buffer_bytes: 1 << 20,
        ..ComposeSettings::default()
    };
    let body = page(&fetcher, &text, s).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pulled = fetcher.pulled.load(Ordering::SeqCst);
    // The budget, then per fragment at most one 16 KiB batch in its
    // buffer (an empty buffer takes one) and one read and waiting to go in.
    assert!(
        pulled <= (1 << 20) + 20 * 2 * 16 * 1024,
        "pulled {pulled} bytes ahead of their turn"
    );
    assert!(pulled >= 1 << 20, "the budget was used: {pulled}");
    let page = all(&timed(body).await);
    assert_eq!(page.len(), "<body>S</body>".len() + 20 * (1 << 20));
}
