//! Helpers shared by the `html_*` tests.

#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use weir_stream::{Batch, Transform};
use weir_transform::html::{HtmlRewrite, HtmlRewriteSettings, rewrite_document};

pub const UTF8: &encoding_rs::Encoding = encoding_rs::UTF_8;

/// Chunk sizes every document is run with (bytes); `usize::MAX` is one chunk.
pub const CHUNK_SIZES: [usize; 9] = [1, 2, 3, 5, 8, 13, 64, 1000, usize::MAX];

pub fn settings(text: &str) -> Arc<HtmlRewriteSettings> {
    Arc::new(toml::from_str(text).unwrap())
}

/// All chunks of an output batch, concatenated.
pub fn flat(batch: Option<Batch>) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in batch.into_iter().flatten() {
        out.extend_from_slice(&chunk);
    }
    out
}

/// `input` split into chunks of `size` bytes.
pub fn split(input: &[u8], size: usize) -> Vec<Bytes> {
    let input = Bytes::copy_from_slice(input);
    if input.is_empty() {
        return Vec::new();
    }
    (0..input.len())
        .step_by(size.min(input.len()))
        .map(|i| input.slice(i..(i.saturating_add(size)).min(input.len())))
        .collect()
}

/// Runs `batches` through a fresh stage, then flushes; returns the whole output.
pub fn run_batches(
    s: &Arc<HtmlRewriteSettings>,
    encoding: &'static encoding_rs::Encoding,
    batches: Vec<Batch>,
) -> Vec<u8> {
    let mut stage = HtmlRewrite::new(Arc::clone(s), encoding);
    let mut out = Vec::new();
    for batch in batches {
        out.extend(flat(stage.transform(Some(batch)).unwrap()));
        out.extend(flat(stage.idle().unwrap()));
    }
    out.extend(flat(stage.transform(None).unwrap()));
    out
}

/// Runs `input` in chunks of `size` bytes, one chunk per batch.
pub fn run(
    s: &Arc<HtmlRewriteSettings>,
    encoding: &'static encoding_rs::Encoding,
    input: &[u8],
    size: usize,
) -> Vec<u8> {
    run_batches(
        s,
        encoding,
        split(input, size).into_iter().map(Batch::one).collect(),
    )
}

/// Runs `input` with every size of [`CHUNK_SIZES`], asserts the outputs
/// are the same, and returns it.
pub fn run_all(
    s: &Arc<HtmlRewriteSettings>,
    encoding: &'static encoding_rs::Encoding,
    input: &[u8],
) -> Vec<u8> {
    let whole = run(s, encoding, input, usize::MAX);
    for size in CHUNK_SIZES {
        let out = run(s, encoding, input, size);
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&whole),
            "chunks of {size} bytes"
        );
        assert_eq!(out, whole, "chunks of {size} bytes");
    }
    // Several chunks per batch, too.
    let batched: Vec<Batch> = split(input, 7)
        .chunks(5)
        .map(|c| Batch::from(c.to_vec()))
        .collect();
    assert_eq!(
        run_batches(s, encoding, batched),
        whole,
        "batches of 5 chunks of 7 bytes"
    );
    // The one-shot API agrees.
    if encoding.is_ascii_compatible() {
        assert_eq!(
            rewrite_document(s, encoding, input).unwrap(),
            whole,
            "rewrite_document"
        );
    }
    whole
}

/// Same as [`run_all`] for a UTF-8 document, as a string.
pub fn run_str(s: &Arc<HtmlRewriteSettings>, input: &str) -> String {
    String::from_utf8(run_all(s, UTF8, input.as_bytes())).unwrap()
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
