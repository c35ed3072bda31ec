//! Failure passthrough: a document lol_html cannot handle goes on unchanged
//! from the failure point: output = rewritten prefix + raw rest, with every
//! input byte present exactly once.

mod html_util;

use bytes::Bytes;
use html_util::*;
use weir_stream::{Batch, Transform};
use weir_transform::html::{HtmlRewrite, rewrite_document};

/// Injection and URL rewriting under a small memory limit.
const SETTINGS: &str = r#"
inject_head_end = "<H>"
inject_body_end = "<B>"
url_prefixes = [{ from = "/", to = "/app/" }]
memory_limit = 16384
"#;

const PREFIX: &str = "<html><head><title>t</title></head><body><a href=\"/a\">a</a>";
const PREFIX_OUT: &str = "<html><head><title>t</title><H></head><body><a href=\"/app/a\">a</a>";
const TAIL: &str = "<a href=\"/b\">b</a><!-- c --></body></html>\n";

/// A document whose `<div>` start tag (about 64 KiB of one attribute)
/// cannot be buffered within the memory limit once it spans chunks.
fn big_attribute_document() -> (String, String) {
    let big = format!("<div data-big=\"{}\">", "x".repeat(64 * 1024));
    let doc = format!("{PREFIX}{big}{TAIL}");
    // Rewritten up to the tag lol_html could not finish, raw from there.
    let expected = format!("{PREFIX_OUT}{big}{TAIL}");
    (doc, expected)
}

#[test]
fn memory_limit_passes_the_rest_through_unchanged() {
    let s = settings(SETTINGS);
    let (doc, expected) = big_attribute_document();
    for size in [1, 3, 64, 1000, 4096, 10_000] {
        let out = run(&s, UTF8, doc.as_bytes(), size);
        // Every input byte from the failure point on is there, once.
        assert_eq!(out.len(), expected.len(), "chunks of {size}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            expected,
            "chunks of {size}"
        );
    }
    // In one chunk, nothing needs buffering: the whole document is rewritten.
    let out = run(&s, UTF8, doc.as_bytes(), usize::MAX);
    let big = format!("<div data-big=\"{}\">", "x".repeat(64 * 1024));
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("{PREFIX_OUT}{big}<a href=\"/app/b\">b</a><!-- c --><B></body></html>\n")
    );
}

#[test]
fn memory_limit_within_one_chunk() {
    // 20 000 attributes in one chunk: lol_html's attribute list, not its
    // input buffer, outgrows the limit, in the middle of the chunk.
    let s = settings(SETTINGS);
    let tag = format!("<div{}>", " x=1".repeat(20_000));
    let doc = format!("{PREFIX}{tag}{TAIL}");
    let expected = format!("{PREFIX_OUT}{tag}{TAIL}");
    for size in [7, 1000, usize::MAX] {
        let out = run(&s, UTF8, doc.as_bytes(), size);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            expected,
            "chunks of {size}"
        );
    }
    // The one-shot API passes the rest through the same way.
    let out = rewrite_document(&s, UTF8, doc.as_bytes()).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn chunks_after_the_failure_are_forwarded_without_copy() {
    let s = settings(SETTINGS);
    let (doc, expected) = big_attribute_document();
    let chunks = split(doc.as_bytes(), 1024);
    let mut stage = HtmlRewrite::new(s, UTF8);
    let mut out = Vec::new();
    let mut failed_at = None;
    // Batches of 8 chunks: the failure happens inside one.
    for (b, batch_chunks) in chunks.chunks(8).enumerate() {
        let batch = Batch::from(batch_chunks.to_vec());
        let result = stage.transform(Some(batch)).unwrap().unwrap_or_default();
        if failed_at.is_none() && result.len() > 1 {
            // Output so far (with lol_html's raw flush), then the rest of
            // the batch: the very same chunks.
            failed_at = Some(b);
            let rest = &result.chunks()[1..];
            let input_rest = &batch_chunks[batch_chunks.len() - rest.len()..];
            for (o, i) in rest.iter().zip(input_rest) {
                assert_eq!(o.as_ptr(), i.as_ptr());
                assert_eq!(o.len(), i.len());
            }
        } else if let Some(f) = failed_at {
            assert!(b > f);
            assert_eq!(result.chunks(), batch_chunks);
            for (o, i) in result.chunks().iter().zip(batch_chunks) {
                assert_eq!(o.as_ptr(), i.as_ptr(), "batch {b} was copied");
            }
        }
        for chunk in &result {
            out.extend_from_slice(chunk);
        }
    }
    assert!(
        failed_at.is_some(),
        "the document should have hit the limit"
    );
    assert_eq!(flat(stage.idle().unwrap()), b"");
    assert_eq!(flat(stage.transform(None).unwrap()), b"");
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

/// Random documents with constructs too big for the memory limit at random
/// places, run through rules that change nothing: the output must be the
/// input, whatever the chunking and wherever lol_html gives up.
#[test]
fn random_failures_never_lose_or_double_bytes() {
    let noop = settings(
        r#"
url_prefixes = [{ from = "/never-", to = "/x/" }]
memory_limit = 8192
"#,
    );
    let marked = settings(
        r#"
inject_head_end = "[[H]]"
inject_body_end = "[[B]]"
url_prefixes = [{ from = "/never-", to = "/x/" }]
memory_limit = 8192
"#,
    );
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let mut failures = 0;
    for _ in 0..60 {
        let mut doc = Vec::new();
        doc.extend_from_slice(b"<html><head><title>t</title></head><body>");
        for _ in 0..rng.below(12) {
            let n = 1 + rng.below(30_000);
            match rng.below(6) {
                0 => doc.extend(format!("<p class=\"{}\">t</p>", "c".repeat(n)).bytes()),
                1 => doc.extend(format!("<a href=/x{}>l</a>", "/seg".repeat(n / 4)).bytes()),
                2 => doc.extend(format!("<!--{}-->", "-".repeat(n)).bytes()),
                3 => doc.extend(format!("<x{}>", "y".repeat(n)).bytes()),
                4 => doc.extend(format!("<i{}>", " a=b".repeat(n / 4)).bytes()),
                _ => doc.extend(format!("<b>{}</b>", "text ".repeat(n / 5)).bytes()),
            }
        }
        doc.extend_from_slice(b"</body></html>");
        let size = [1, 17, 512, 4096, 40_000][rng.below(5)];
        let out = run(&noop, UTF8, &doc, size);
        assert_eq!(out.len(), doc.len(), "chunks of {size}");
        assert!(out == doc, "chunks of {size}");

        let out = run(&marked, UTF8, &doc, size);
        let text = String::from_utf8(out).unwrap();
        if !text.contains("[[B]]") {
            failures += 1;
        }
        assert!(text.matches("[[H]]").count() <= 1);
        let stripped = text.replace("[[H]]", "").replace("[[B]]", "");
        assert_eq!(stripped.len(), doc.len(), "chunks of {size}");
        assert!(stripped.as_bytes() == doc, "chunks of {size}");
    }
    // The generator does make lol_html give up, and not always.
    assert!(failures > 5 && failures < 55, "{failures} failures");
}

#[test]
fn zero_memory_limit_passes_everything_through() {
    let s = settings(
        r#"
inject_body_end = "<B>"
memory_limit = 0
"#,
    );
    let doc = b"<html><body><p>x</p></body></html>";
    assert_eq!(run_all(&s, UTF8, doc), doc);
    // The stage forwards batches as they are from then on.
    let mut stage = HtmlRewrite::new(s, UTF8);
    let first = stage
        .transform(Some(Batch::one(Bytes::from_static(b"<html><bo"))))
        .unwrap();
    assert_eq!(flat(first), b"<html><bo");
    let next = Bytes::from_static(b"dy></body>");
    let out = stage
        .transform(Some(Batch::one(next.clone())))
        .unwrap()
        .unwrap();
    assert_eq!(out.chunks()[0].as_ptr(), next.as_ptr());
}

#[test]
fn handler_error_passes_the_rest_through_unchanged() {
    // KOI8-R has no "ü": lol_html refuses that attribute name in such a
    // document, the handler fails, and the stage passes the rest through.
    let s = settings(
        r#"
inject_head_end = "<H>"
url_prefixes = [{ from = "/", to = "/app/" }]
set_attributes = [{ selector = "p", name = "ü", value = "x" }]
"#,
    );
    let doc: &[u8] = b"<head></head><a href=/a>\xc1</a><p>\xc2</p><a href=/b></a>";
    let expected: &[u8] = b"<head><H></head><a href=\"/app/a\">\xc1</a><p>\xc2</p><a href=/b></a>";
    let out = run_all(&s, encoding_rs::KOI8_R, doc);
    assert_eq!(out, expected, "{}", String::from_utf8_lossy(&out));
    // In windows-1252 the name is fine.
    let out = run_all(&s, encoding_rs::WINDOWS_1252, doc);
    assert_eq!(
        out,
        b"<head><H></head><a href=\"/app/a\">\xc1</a><p \xfc=\"x\">\xc2</p><a href=\"/app/b\"></a>"
    );
}

#[test]
fn deep_nesting_passes_the_rest_through_unchanged() {
    // lol_html's open-element stack outgrows the limit somewhere in the
    // nesting: rewritten before that point, raw after it, nothing lost.
    let s = settings(SETTINGS);
    let nest = "<div>".repeat(5000);
    let doc = format!("{PREFIX}{nest}{TAIL}");
    for size in [1, 100, usize::MAX] {
        let out = String::from_utf8(run(&s, UTF8, doc.as_bytes(), size)).unwrap();
        assert!(out.starts_with(PREFIX_OUT), "chunks of {size}");
        assert!(
            out.ends_with(TAIL),
            "chunks of {size}: not rewritten after the failure"
        );
        assert_eq!(
            out.len(),
            PREFIX_OUT.len() + nest.len() + TAIL.len(),
            "chunks of {size}"
        );
        assert_eq!(
            &out[PREFIX_OUT.len()..],
            &doc[PREFIX.len()..],
            "chunks of {size}"
        );
    }
}
