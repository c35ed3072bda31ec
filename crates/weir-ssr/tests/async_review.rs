//! The reviewers' cases against out-of-order `async` delivery (issue 15),
//! on a paused clock against in-memory fragments, each page checked on an
//! HTML5 tree (html5ever) for what a browser makes of Weir's markup:
//!
//! - every `<template id="weir-async-…">` is a `template` element in the
//!   body, outside any template, foreign element, `select`, or raw text;
//! - every mover is a `script` element in the body, outside any template
//!   and any foreign element;
//! - the page's `<p id="sentinel">` is still an element of the body (no
//!   comment, template, attribute or script swallowed it).
//!
//! The scripts themselves run in a browser in `crates/weir/tests/ssr.rs`.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::{MemFetcher, Script, context, template, token_of, untoken};
use html5ever::tendril::TendrilSink as _;
use markup5ever_rcdom::{Handle, NodeData, RcDom};
use tokio::time::Instant;
use weir_ssr::{ComposeSettings, FragmentOutcome, Page, PageBody, PageContext, compose};
use weir_stream::SourceExt as _;

/// Every batch of the page with the paused clock's milliseconds at which
/// it came, and the whole page (its ids untokened).
async fn run(body: PageBody) -> (Vec<(u128, String)>, String) {
    let mut body = body;
    let start = Instant::now();
    let mut out = Vec::new();
    while let Some(b) = body.next_batch().await {
        let mut s = String::new();
        for c in b.expect("page batch") {
            s.push_str(std::str::from_utf8(&c).expect("utf-8"));
        }
        out.push((start.elapsed().as_millis(), untoken(&s)));
    }
    let page = out.iter().map(|(_, s)| s.as_str()).collect();
    (out, page)
}

async fn body_of(ctx: PageContext, text: &str) -> PageBody {
    match compose(template(text, 16), ctx).await {
        Page::Composed { body, .. } => body,
        other => panic!("not composed: {other:?}"),
    }
}

async fn page_with(
    fetcher: &Arc<MemFetcher>,
    text: &str,
    s: ComposeSettings,
) -> (Vec<(u128, String)>, String) {
    let (ctx, _) = context(fetcher, s);
    run(body_of(ctx, text).await).await
}

/// When `needle` first appeared.
fn arrival(batches: &[(u128, String)], needle: &str) -> u128 {
    let mut text = String::new();
    for (at, s) in batches {
        text.push_str(s);
        if text.contains(needle) {
            return *at;
        }
    }
    panic!("{needle:?} never came: {text}");
}

/// Elements inside which Weir's templates must never be.
const NOT_INSIDE: [&str; 12] = [
    "template",
    "svg",
    "math",
    "select",
    "textarea",
    "title",
    "script",
    "style",
    "noscript",
    "xmp",
    "iframe",
    "plaintext",
];

fn id_of(h: &Handle) -> Option<String> {
    match &h.data {
        NodeData::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .find(|a| &*a.name.local == "id")
            .map(|a| a.value.to_string()),
        _ => None,
    }
}

fn text_of(h: &Handle) -> String {
    h.children
        .borrow()
        .iter()
        .filter_map(|c| match &c.data {
            NodeData::Text { contents } => Some(contents.borrow().to_string()),
            _ => None,
        })
        .collect()
}

#[derive(Default)]
struct Found {
    pieces: usize,
    movers: usize,
    sentinels: usize,
    problems: Vec<String>,
}

fn walk(h: &Handle, path: &mut Vec<String>, found: &mut Found) {
    let NodeData::Element {
        name,
        template_contents,
        ..
    } = &h.data
    else {
        for c in h.children.borrow().iter() {
            walk(c, path, found);
        }
        return;
    };
    let html = &*name.ns == "http://www.w3.org/1999/xhtml";
    let local = name.local.to_string();
    let id = id_of(h).unwrap_or_default();
    let in_body = path.iter().any(|p| p == "body");
    let inside_bad = path.iter().find(|p| NOT_INSIDE.contains(&p.as_str()));
    if id.starts_with("weir-async-") {
        found.pieces += 1;
        if !html || local != "template" || !in_body || inside_bad.is_some() {
            found
                .problems
                .push(format!("piece {id} as {local} (html {html}) in {path:?}"));
        }
    }
    if local == "script" {
        if text_of(h).starts_with("(function(){var d=document") {
            found.movers += 1;
            if !html || !in_body || inside_bad.is_some() {
                found
                    .problems
                    .push(format!("mover as {local} (html {html}) in {path:?}"));
            }
        } else if text_of(h).contains("xss") && !path.iter().any(|p| p == "template") {
            // Content's scripts marked `xss` must stay inert.
            found
                .problems
                .push(format!("a live script {:?} in {path:?}", text_of(h)));
        }
    }
    if id == "sentinel" {
        found.sentinels += 1;
        if !html || !in_body || path.iter().any(|p| p == "template") {
            found.problems.push(format!("sentinel in {path:?}"));
        }
    }
    path.push(if html {
        local
    } else {
        format!("{local}@foreign")
    });
    if !html {
        // Foreign elements count as foreign whatever their name.
        path.push("svg".into());
    }
    for c in h.children.borrow().iter() {
        walk(c, path, found);
    }
    if let Some(t) = template_contents.borrow().as_ref() {
        path.push("template".into());
        walk(t, path, found);
        path.pop();
    }
    if !html {
        path.pop();
    }
    path.pop();
}

/// Parses `page` and checks Weir's markup in it (see the module): as many
/// piece templates and mover scripts in the tree, in their places, as
/// Weir wrote, and the sentinel in the body.
fn check_dom(page: &str) {
    let dom = html5ever::parse_document(RcDom::default(), Default::default()).one(page);
    let mut found = Found::default();
    walk(&dom.document, &mut Vec::new(), &mut found);
    assert!(found.problems.is_empty(), "{:?}\n{page}", found.problems);
    let sent_pieces = page.matches("<template id=\"weir-async-").count();
    let sent_movers = page.matches("(function(){var d=document").count();
    assert_eq!(
        found.pieces, sent_pieces,
        "a piece is not a template:\n{page}"
    );
    assert_eq!(
        found.movers, sent_movers,
        "a mover is not a script:\n{page}"
    );
    assert_eq!(found.sentinels, 1, "the sentinel is gone:\n{page}");
}

/// A1 (the attacker's P3): an in-order fragment cut after the inner
/// `</script>` of `<script><!-- … <script></script>` is still inside the
/// script; the async review goes out only after the script really ends.
#[tokio::test(start_paused = true)]
async fn a1_an_escaped_script_cut_after_its_inner_end_tag_is_no_safe_point() {
    let fetcher = MemFetcher::with(&[
        (
            "/legacy",
            Script::ok("").chunks(&[
                (
                    0,
                    "<script nonce=\"r4nd\"><!--\ndocument.write('<script src=\"data:text/javascript,1\"></script>'); // ad loader",
                ),
                (800, "\n//--></script>"),
            ]),
        ),
        (
            "/review",
            Script::ok(
                "<div class=review>Great kayak!\ndocument.documentElement.dataset.pwn=document.domain//</div>",
            )
            .delayed(300),
        ),
    ]);
    let text = "<!doctype html><html><head><title>t</title></head><body>\
                <div id=b><fragment src=\"/review\" async><p>loading</p></fragment></div>\
                <div id=a><fragment src=\"/legacy\"></fragment></div>\
                <p id=sentinel>S</p></body></html>";
    let (batches, page) = page_with(&fetcher, text, ComposeSettings::default()).await;
    let at = arrival(&batches, "<template id=\"weir-async-0\">");
    assert!(
        at >= 800,
        "the review went out at {at} ms, inside the script"
    );
    let end = page.find("//--></script>").expect("the script's end");
    let review = page.find("<template id=\"weir-async-0\">").expect("review");
    assert!(end < review, "{page}");
    check_dom(&page);
}

/// A2, page side: an in-order fragment cut inside a construct the old
/// tracker did not know: no async content between its two parts.
#[tokio::test(start_paused = true)]
async fn a2_a_page_cut_inside_a_bogus_comment_cdata_or_odd_tag_is_no_safe_point() {
    let cases: &[(&str, &str)] = &[
        ("<p>before</p><?xml version=", "\"1.0\"?><p>after</p>"),
        ("<p>before</p><?", "?><p>after</p>"),
        ("<p>x</p></ ", "x><p>after</p>"),
        ("<p>x</p></1", "><p>after</p>"),
        ("<p>x</p><!x", "><p>after</p>"),
        ("<script>a</scriptx>", "</script><p>after</p>"),
        ("<script><!--<script></script>", "--></script><p>after</p>"),
        ("<svg><![CDATA[ a>b </svg>", "]]></svg><p>after</p>"),
        ("<a x\"y><b title=\">", "\">t</b></a><p>after</p>"),
        (
            "<svg><style></svg><a title=\"</style>",
            "\">t</a><p>after</p>",
        ),
        (
            "<svg><foreignObject><div></svg>",
            "</div></foreignObject></svg><p>after</p>",
        ),
        ("<template/>", "</template><p>after</p>"),
        ("<svg><template>", "</template></svg><p>after</p>"),
        (
            "<math><mtext><template>",
            "</template></mtext></math><p>after</p>",
        ),
        ("<p>x</p><!-- a", " --!><p>after</p>"),
    ];
    for (first, second) in cases {
        let fetcher = MemFetcher::with(&[
            ("/cut", Script::ok("").chunks(&[(0, first), (500, second)])),
            ("/fast", Script::ok("<b>FAST</b>").delayed(100)),
        ]);
        let text = "<!doctype html><html><head><title>t</title></head><body>\
                    <div><fragment src=\"/fast\" async><i>wait</i></fragment></div>\
                    <div><fragment src=\"/cut\"></fragment></div>\
                    <p id=sentinel>S</p></body></html>";
        let (batches, page) = page_with(&fetcher, text, ComposeSettings::default()).await;
        let at = arrival(&batches, "<template id=\"weir-async-0\">");
        assert!(
            at >= 500,
            "{first:?}: the async content went out at {at} ms"
        );
        let rest = page.find(second).expect("second part");
        let moved = page.find("<template id=\"weir-async-0\">").expect("moved");
        assert!(rest < moved, "{first:?}: {page}");
        check_dom(&page);
    }
}

/// A2 and A5, content side: async content that does not end in plain
/// data (the reviewers' endings) never goes out early; at `</body>` it is
/// closed (or cut before what cannot be closed), and a good fragment after
/// it is still a template and a script.
#[tokio::test(start_paused = true)]
async fn a2_a5_content_that_does_not_end_in_plain_data_waits_for_body_end_and_is_closed() {
    let endings = [
        "<?",
        "</ x",
        "<script>a</scriptx>",
        "<script><!--<script></script>",
        "<svg><![CDATA[ a>b </svg>",
        "<a x\"y><b title=\">",
        "<svg><style></svg><a title=\"</style>",
        "<template><template></template>",
        "<template>",
        "<svg><template>",
        "<math><mtext><template>",
        "<!--",
        "<a href=\"",
        "<script>",
        "<textarea>",
        "<plaintext>",
        "<!-- a --",
        "</template><script>document.body.dataset.xss=1</script>",
    ];
    for ending in endings {
        let bad = format!("<p class=async>x</p>{ending}");
        let fetcher = MemFetcher::with(&[
            ("/bad", Script::ok(&bad).delayed(100)),
            ("/good", Script::ok("<p class=good>g</p>").delayed(300)),
            ("/slow", Script::ok("<p>SLOW</p>").delayed(1000)),
        ]);
        let text = "<!doctype html><html><head><title>t</title></head><body>\
                    <div id=b1><fragment src=\"/bad\" async><p>fallback1</p></fragment></div>\
                    <div id=b2><fragment src=\"/good\" async><p>fallback2</p></fragment></div>\
                    <div><fragment src=\"/slow\"></fragment></div>\
                    <p id=sentinel>S</p></body></html>";
        let (batches, page) = page_with(&fetcher, text, ComposeSettings::default()).await;
        let bad_at = batches
            .iter()
            .scan(String::new(), |acc, (at, s)| {
                acc.push_str(s);
                Some((*at, acc.contains("<template id=\"weir-async-0\">")))
            })
            .find(|(_, seen)| *seen)
            .map(|(at, _)| at);
        if let Some(at) = bad_at {
            assert!(at >= 1000, "{ending:?}: went out early at {at} ms");
        }
        let good_at = arrival(&batches, "<template id=\"weir-async-1\">");
        assert!((300..350).contains(&good_at), "{ending:?}: {good_at}");
        check_dom(&page);
    }
}

/// A2 with `async_stream`: a well-formed fragment whose chunks end inside
/// a processing instruction or a bogus end tag is not cut there.
#[tokio::test(start_paused = true)]
async fn a2_async_stream_pieces_never_end_inside_a_bogus_comment() {
    for (a, b) in [
        ("<p>1</p><?xml ", " ?><p>2</p>"),
        ("<p>1</p></ ", "x><p>2</p>"),
        ("<p>1</p><svg><![CDATA[x", "]]></svg><p>2</p>"),
    ] {
        let fetcher = MemFetcher::with(&[
            ("/s", Script::ok("").chunks(&[(0, a), (200, b)])),
            ("/slow", Script::ok("<p>SLOW</p>").delayed(1000)),
        ]);
        let text = "<!doctype html><html><head><title>t</title></head><body>\
                    <div><fragment src=\"/s\" async></fragment></div>\
                    <div><fragment src=\"/slow\"></fragment></div>\
                    <p id=sentinel>S</p></body></html>";
        let s = ComposeSettings {
            async_stream: true,
            ..ComposeSettings::default()
        };
        let (_, page) = page_with(&fetcher, text, s).await;
        // Cut only at a chunk's end, and not at this one.
        assert!(!page.contains(&format!("{a}</template>")), "{a:?}: {page}");
        assert!(page.contains(&format!("{a}{b}")), "{a:?}: {page}");
        check_dom(&page);
    }
}

/// A4: the template's first `</body>` where Weir's markup cannot go (in a
/// textarea, in an svg, in a template): the async content goes at the end
/// of the template instead, where it can.
#[tokio::test(start_paused = true)]
async fn a4_a_body_end_inside_markup_is_no_async_point() {
    let templates = [
        "<!doctype html><html><head><title>T</title></head><body><div id=b>\
         <fragment src=\"/a\" async><p>fallback</p></fragment></div>\
         <textarea></body></textarea><p id=sentinel>S</p></body></html>",
        "<!doctype html><html><head><title>T</title></head><body><div id=b>\
         <fragment src=\"/a\" async><p>fallback</p></fragment></div>\
         <svg></body><p id=sentinel>S</p></svg></html>",
        "<!doctype html><html><head><title>T</title></head><body><div id=b>\
         <fragment src=\"/a\" async><p>fallback</p></fragment></div>\
         <template></body></template><p id=sentinel>S</p></body></html>",
    ];
    for text in templates {
        let fetcher = MemFetcher::with(&[("/a", Script::ok("<p class=a>A</p>").delayed(100))]);
        let (_, page) = page_with(&fetcher, text, ComposeSettings::default()).await;
        let moved = page.find("<template id=\"weir-async-0\">").expect("moved");
        assert!(moved > page.find("</html>").expect("html end"), "{page}");
        check_dom(&page);
    }
}

/// A4: a template that ends inside markup gets it closed before the async
/// content (a warning says so); one that ends inside `<plaintext>`, which
/// nothing closes, keeps the inline fallback.
#[tokio::test(start_paused = true)]
async fn a4_a_page_that_ends_inside_markup_is_closed_before_async_content() {
    for (tail, closed) in [
        ("<div><!-- c", "<!-- c-->"),
        ("<div><textarea>t", "<textarea>t</textarea>"),
        ("<svg><g><text>t", "t</text></g></svg>"),
        ("<template><p>", "</p></template>"),
    ] {
        let fetcher = MemFetcher::with(&[("/a", Script::ok("<p class=a>A</p>").delayed(100))]);
        let text = format!(
            "<!doctype html><html><head><title>T</title></head><body><p id=sentinel>S</p>\
             <div id=b><fragment src=\"/a\" async><p>fallback</p></fragment></div>{tail}"
        );
        let (_, page) = page_with(&fetcher, &text, ComposeSettings::default()).await;
        let close = page.find(closed).expect("closed");
        let moved = page.find("<template id=\"weir-async-0\">").expect("moved");
        assert!(close < moved, "{tail:?}: {page}");
        check_dom(&page);
    }
    let fetcher = MemFetcher::with(&[("/a", Script::ok("<p class=a>A</p>").delayed(100))]);
    let text = "<!doctype html><html><body><p id=sentinel>S</p>\
                <div id=b><fragment src=\"/a\" async><p>fallback</p></fragment></div><plaintext>";
    let (_, page) = page_with(&fetcher, text, ComposeSettings::default()).await;
    assert!(
        !page.contains("weir-async") && !page.contains("<script"),
        "{page}"
    );
    assert!(page.contains("<p>fallback</p>"), "{page}");
}

/// A4: a nested template included inside `<svg>`: its async include is
/// spliced in order, so nothing of Weir's lands in the svg.
#[tokio::test(start_paused = true)]
async fn a4_async_includes_in_a_nested_template_are_spliced_in_order() {
    let fetcher = MemFetcher::with(&[
        (
            "/nested",
            Script::ok("<g><fragment src=\"/inner\" async>wait</fragment></g>")
                .header("x-weir-template", "1"),
        ),
        ("/inner", Script::ok("<circle r=\"1\"/>").delayed(100)),
    ]);
    let text = "<!doctype html><html><body><svg><fragment src=\"/nested\"></fragment></svg>\
                <p id=sentinel>S</p></body></html>";
    let (_, page) = page_with(&fetcher, text, ComposeSettings::default()).await;
    assert!(
        page.contains("<svg><g><circle r=\"1\"/></g></svg>"),
        "{page}"
    );
    assert!(
        !page.contains("weir-") && !page.contains("<script"),
        "{page}"
    );
    check_dom(&page);
}

/// A6: every id of Weir's carries the page's token, 16 hex digits, new
/// for each page; an id written in advance by page content is not one of
/// them.
#[tokio::test(start_paused = true)]
async fn a6_ids_carry_a_token_of_the_page() {
    let fetcher = MemFetcher::with(&[
        (
            "/ugc",
            Script::ok("<span id=\"weir-slot-0\"></span><span id=\"weir-async-0\"></span>"),
        ),
        ("/acct", Script::ok("<p>account</p>").delayed(200)),
        ("/slow", Script::ok("SLOW").delayed(1000)),
    ]);
    let text = "<body><div id=comments><fragment src=\"/ugc\"></fragment></div>\
                <div id=acct><fragment src=\"/acct\" async><p>loading</p></fragment></div>\
                <fragment src=\"/slow\"></fragment></body>";
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let (ctx, _) = context(&fetcher, ComposeSettings::default());
        let Page::Composed { body, .. } = compose(template(text, 16), ctx).await else {
            panic!("composed");
        };
        let raw = weir_stream::consume::bytes(body, weir_stream::consume::ConsumeOptions::new())
            .await
            .expect("page");
        let raw = String::from_utf8(raw.to_vec()).expect("utf-8");
        let token = token_of(&raw).to_owned();
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{raw}");
        for id in [
            format!("weir-slot-{token}-0"),
            format!("weir-end-{token}-0"),
            format!("weir-async-{token}-0"),
        ] {
            assert!(raw.contains(&format!("id=\"{id}\"")), "{id}: {raw}");
        }
        assert!(raw.contains(&format!("getElementById(\"weir-slot-{token}-0\")")));
        assert!(!raw.contains("getElementById(\"weir-slot-0\")"), "{raw}");
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1], "each page has its own token");
}

/// A7: a page whose charset Weir cannot read bytewise (by its
/// `Content-Type`, which the proxy turns into `out_of_order = false`, or
/// by a `<meta>` of its own) gets its async content only at `</body>`,
/// though safe points come earlier.
#[tokio::test(start_paused = true)]
async fn a7_without_out_of_order_async_content_waits_for_body_end() {
    let fetcher = MemFetcher::with(&[
        ("/fast", Script::ok("<b>FAST</b>").delayed(100)),
        ("/slow", Script::ok("<p>SLOW</p>").delayed(1000)),
    ]);
    let body = "<body><div><fragment src=\"/fast\" async>wait</fragment></div>\
                <div><fragment src=\"/slow\"></fragment></div><p id=sentinel>S</p></body>";
    let jis = "<head><meta charset=\"iso-2022-jp\"></head>";
    let equiv =
        "<head><meta http-equiv=content-type content=\"text/html; charset=shift_jis\"></head>";
    let utf8 = "<head><meta charset=\"utf-8\"></head>";
    for (out_of_order, head, early) in [
        (true, "", true),
        (true, utf8, true),
        (false, "", false),
        (true, jis, false),
        (true, equiv, false),
    ] {
        let (mut ctx, _) = context(&fetcher, ComposeSettings::default());
        ctx.out_of_order = out_of_order;
        let text = format!("{head}{body}");
        let (batches, page) = run(body_of(ctx, &text).await).await;
        let at = arrival(&batches, "<template id=\"weir-async-0\">");
        assert_eq!(at < 1000, early, "{out_of_order} {head:?}: at {at} ms");
        let (slow, moved) = (page.find("SLOW"), page.find("weir-async-0"));
        assert_eq!(moved < slow, early, "{page}");
        check_dom(&page);
    }
}

/// U5: with `async_stream`, no piece goes out empty: the last script may
/// come alone.
#[tokio::test(start_paused = true)]
async fn u5_async_stream_sends_no_empty_pieces() {
    let fetcher = MemFetcher::with(&[
        (
            "/list",
            Script::ok("").chunks(&[(0, "<li>a</li>"), (100, "<li>b</li>"), (100, "")]),
        ),
        ("/slow", Script::ok("SLOW").delayed(1000)),
    ]);
    let text = "<body><ul><fragment src=\"/list\" async></fragment></ul>\
                <div><fragment src=\"/slow\"></fragment></div><p id=sentinel>S</p></body>";
    let s = ComposeSettings {
        async_stream: true,
        ..ComposeSettings::default()
    };
    let (_, page) = page_with(&fetcher, text, s).await;
    for (at, _) in page.match_indices("<template id=\"weir-async-") {
        let open = &page[at..];
        let end = open.find('>').expect("tag end");
        assert!(
            !open[end + 1..].starts_with("</template>"),
            "an empty piece: {page}"
        );
    }
    assert!(
        page.contains("<li>a</li>") && page.contains("<li>b</li>"),
        "{page}"
    );
    assert!(
        page.contains("a.remove()"),
        "the last script went out: {page}"
    );
    check_dom(&page);
}

/// U1: fifty 1 MB fragments behind a slow one, each allowed 2 MiB, under
/// the default 8 MiB page budget: those waiting for a fetch slot do not
/// time out (their deadline starts with the slot); the page is whole.
#[tokio::test(start_paused = true)]
async fn u1_fifty_1mb_fragments_behind_a_slow_one_all_arrive_with_the_default_budget() {
    let fetcher = MemFetcher::with(&[("/slow", Script::ok("S").delayed(3000))]);
    let mut text = String::from("<body><fragment src=\"/slow\" timeout=\"5s\"></fragment>");
    for k in 0..50 {
        fetcher
            .big
            .lock()
            .expect("lock")
            .insert(format!("http://t/f{k}"), (1_000_000, 16 * 1024));
        text.push_str(&format!("<fragment src=\"/f{k}\">FALLBACK</fragment>"));
    }
    text.push_str("</body>");
    let s = ComposeSettings {
        fragment_buffer_bytes: 2 << 20,
        ..ComposeSettings::default()
    };
    let (ctx, counts) = context(&fetcher, s);
    let body = body_of(ctx, &text).await;
    let bytes = weir_stream::consume::bytes(body, weir_stream::consume::ConsumeOptions::new())
        .await
        .expect("page");
    assert_eq!(bytes.len(), "<body>S</body>".len() + 50 * 1_000_000);
    assert_eq!(counts.get(FragmentOutcome::Ok), 51);
    assert_eq!(counts.get(FragmentOutcome::Inline), 0);
    assert_eq!(fetcher.fetched().len(), 51);
}

/// A3: with `max_parallel = 2`, two async fragments bigger than their
/// buffers hold both slots until `</body>`; the in-order main content is
/// what the page waits for, so it needs no slot: it arrives at once, not
/// its fallback after the first-byte deadline.
#[tokio::test(start_paused = true)]
async fn a3_big_async_fragments_holding_every_slot_do_not_starve_the_main_content() {
    let fetcher = MemFetcher::with(&[("/main", Script::ok("<p>MAIN</p>").delayed(50))]);
    for k in 0..2 {
        fetcher
            .big
            .lock()
            .expect("lock")
            .insert(format!("http://t/big{k}"), (1_000_000, 16 * 1024));
    }
    let text = "<body><fragment src=\"/big0\" async></fragment><fragment src=\"/big1\" async></fragment>\
                <main><fragment src=\"/main\">MAIN FALLBACK</fragment></main><p id=sentinel>S</p></body>";
    let s = ComposeSettings {
        max_parallel: 2,
        ..ComposeSettings::default()
    };
    let (ctx, counts) = context(&fetcher, s);
    let (batches, page) = run(body_of(ctx, text).await).await;
    let main = arrival(&batches, "<p>MAIN</p>");
    assert!(main < 100, "main content at {main} ms");
    assert!(
        !page.contains("MAIN FALLBACK"),
        "fallback instead of content"
    );
    assert_eq!(counts.get(FragmentOutcome::Ok), 3);
    assert_eq!(page.matches("<template id=\"weir-async-").count(), 2);
    assert!(fetcher.max_in_flight.load(Ordering::SeqCst) <= 3);
}
