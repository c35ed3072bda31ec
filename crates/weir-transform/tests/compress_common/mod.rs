//! Shared by the `compress_*` tests and the `compress` bench: deterministic
//! bodies and decoders built on the codec crates.
#![allow(dead_code)]

use std::io::{Read, Write};

use weir_transform::coding::Coding;

/// `len` pseudo-random bytes (xorshift64*), the same for the same `seed`.
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `len` bytes of deterministic HTML with embedded JSON: repetitive like a
/// real page (tags, attribute names, words from a small vocabulary) but not
/// a single repeated block, so ratios and speeds look like real text.
pub fn text(len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "stream", "proxy", "weir", "batch", "chunk", "river", "flow", "gate", "water", "level",
        "pull", "push", "socket", "header", "body", "value", "cache", "route", "origin", "client",
        "the", "a", "of", "and", "to", "in", "is", "for", "with", "on",
    ];
    let mut out = Vec::with_capacity(len + 512);
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut item = 0u64;
    out.extend_from_slice(
        b"<!doctype html>\n<html lang=\"en\"><head><title>Weir</title></head><body>\n",
    );
    while out.len() < len {
        item += 1;
        let class = WORDS[next(WORDS.len())];
        write!(
            out,
            "<div class=\"item {class}\" id=\"item-{item}\" data-n=\"{}\">",
            next(100_000)
        )
        .unwrap();
        write!(
            out,
            "<a href=\"/{}/{}?page={item}\">",
            WORDS[next(20)],
            WORDS[next(20)]
        )
        .unwrap();
        for _ in 0..4 + next(12) {
            out.extend_from_slice(WORDS[next(WORDS.len())].as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(b"</a>");
        if item.is_multiple_of(3) {
            write!(
                out,
                "<script type=\"application/json\">{{\"id\":{item},\"name\":\"{}\",\"score\":{}.{},\"tags\":[\"{}\",\"{}\"]}}</script>",
                WORDS[next(WORDS.len())],
                next(1000),
                next(100),
                WORDS[next(WORDS.len())],
                WORDS[next(WORDS.len())]
            )
            .unwrap();
        }
        out.extend_from_slice(b"</div>\n");
    }
    out.truncate(len);
    out
}

/// Decodes a whole, finished stream; fails on a truncated or corrupt one.
pub fn decode(coding: Coding, data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match coding {
        Coding::Gzip => {
            let mut decoder = flate2::read::GzDecoder::new(data);
            decoder.read_to_end(&mut out)?;
            // One member, nothing after it.
            let rest = decoder.into_inner();
            if !rest.is_empty() {
                return Err(std::io::Error::other("bytes after the gzip member"));
            }
        }
        Coding::Brotli => {
            brotli::Decompressor::new(data, 4096).read_to_end(&mut out)?;
        }
        Coding::Zstd => {
            out = zstd::stream::decode_all(data)?;
        }
    }
    Ok(out)
}

/// A decoder fed piece by piece, to see what a client can decode so far.
pub enum StreamDecoder {
    Gzip(Box<flate2::write::GzDecoder<Vec<u8>>>),
    Brotli(Box<brotli::DecompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Decoder<'static, Vec<u8>>),
}

impl StreamDecoder {
    pub fn new(coding: Coding) -> Self {
        match coding {
            Coding::Gzip => {
                StreamDecoder::Gzip(Box::new(flate2::write::GzDecoder::new(Vec::new())))
            }
            Coding::Brotli => {
                StreamDecoder::Brotli(Box::new(brotli::DecompressorWriter::new(Vec::new(), 4096)))
            }
            Coding::Zstd => {
                StreamDecoder::Zstd(zstd::stream::write::Decoder::new(Vec::new()).unwrap())
            }
        }
    }

    /// Feeds `data` and returns everything decoded so far.
    pub fn feed(&mut self, data: &[u8]) -> &[u8] {
        match self {
            StreamDecoder::Gzip(d) => {
                d.write_all(data).unwrap();
                d.flush().unwrap();
                d.get_ref()
            }
            StreamDecoder::Brotli(d) => {
                d.write_all(data).unwrap();
                // When it needs more input, the decoder pushes out at most
                // one output buffer of what it decoded; empty writes drain
                // the rest.
                loop {
                    let before = d.get_ref().len();
                    d.write_all(&[]).unwrap();
                    let _ = d.write(&[]).unwrap();
                    if d.get_ref().len() == before {
                        break;
                    }
                }
                d.get_ref()
            }
            StreamDecoder::Zstd(d) => {
                d.write_all(data).unwrap();
                d.flush().unwrap();
                d.get_ref()
            }
        }
    }
}

/// Appends every chunk of `batch`, if any, to `out`.
pub fn append(out: &mut Vec<u8>, batch: Option<weir_stream::Batch>) {
    for chunk in batch.iter().flat_map(|b| b.chunks()) {
        out.extend_from_slice(chunk);
    }
}

pub const ALL: [Coding; 3] = [Coding::Gzip, Coding::Brotli, Coding::Zstd];
