//! A large upstream read must not count against `memory_limit`: a flat,
//! well-formed page needs little parser memory however it is chunked.

use std::sync::Arc;

use weir_stream::{Batch, Transform};
use weir_transform::html::{HtmlRewrite, HtmlRewriteSettings};

#[test]
fn one_large_chunk_is_rewritten_in_full_under_a_small_memory_limit() {
    let settings: HtmlRewriteSettings = toml::from_str(
        "memory_limit = 262144\nurl_prefixes = [{ from = \"/\", to = \"/app/\" }]\n",
    )
    .expect("settings");
    let links = 80_000;
    let page = "<p><a href=\"/l\">l</a></p>".repeat(links);
    let mut stage = HtmlRewrite::new(Arc::new(settings), encoding_rs::UTF_8);
    let mut out = Vec::new();
    // One 2 MB chunk, as a single upstream read with Content-Length could give.
    for input in [Some(Batch::one(page.into_bytes())), None] {
        if let Some(b) = stage.transform(input).expect("no failure") {
            for c in b.chunks() {
                out.extend_from_slice(c);
            }
        }
    }
    let text = String::from_utf8(out).expect("utf-8");
    assert_eq!(text.matches("href=\"/app/l\"").count(), links);
    assert_eq!(text.matches("href=\"/l\"").count(), 0);
}
