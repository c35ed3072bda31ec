//! Decoding fragments sent with `Content-Encoding: gzip` or `deflate`
//! (RFC 9110 §8.4.1), so their markup can be spliced into the page.
//!
//! A [`Source`] wrapper rather than a transform: it yields at most
//! [`OUT_CHUNK`] decoded bytes per poll, so a small compressed batch that
//! expands a thousandfold never becomes one huge allocation.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use flate2::{Decompress, FlushDecompress, Status};
use http::HeaderMap;
use http::header::CONTENT_ENCODING;
use weir_http::list;
use weir_stream::{Batch, BatchResult, Source, StreamError};

use crate::fetch::BoxSource;

/// Most decoded bytes handed out per poll.
pub const OUT_CHUNK: usize = 32 * 1024;

/// A content coding the composer decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// `gzip` or `x-gzip` (RFC 9110 §8.4.1.3).
    Gzip,
    /// `deflate`: the zlib format (RFC 9110 §8.4.1.2).
    Deflate,
}

/// Why a fragment's coding can't be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A coding other than gzip, deflate or identity, or more than one.
    #[error("unsupported content coding {0:?}")]
    Unsupported(String),
    /// The compressed data is corrupt.
    #[error("corrupt {coding} data: {reason}")]
    Corrupt {
        /// `gzip` or `deflate`.
        coding: &'static str,
        /// What the decoder said.
        reason: String,
    },
    /// The body ended inside the compressed stream.
    #[error("{0} data cut short")]
    Truncated(&'static str),
    /// More decoded bytes than [`DecodeLimits::max_decoded_bytes`].
    #[error("{coding} data decodes to more than {limit} bytes (max_decoded_bytes)")]
    TooLarge {
        /// `gzip` or `deflate`.
        coding: &'static str,
        /// The limit, in bytes.
        limit: u64,
    },
    /// Decoded bytes grew past [`DecodeLimits::max_ratio`] times the
    /// encoded bytes read, beyond [`DecodeLimits::ratio_floor`].
    #[error(
        "{coding} data expands more than {limit}x ({decoded} bytes from {encoded}; max_decode_ratio)"
    )]
    Expansion {
        /// `gzip` or `deflate`.
        coding: &'static str,
        /// The ratio limit.
        limit: u64,
        /// Decoded bytes so far.
        decoded: u64,
        /// Encoded bytes read so far.
        encoded: u64,
    },
}

/// Bounds on what decoding one body may produce, against decompression
/// bombs (a few KiB of gzip that expand to gigabytes). Checked as the
/// bytes are decoded: a body past either bound fails with
/// [`DecodeError::TooLarge`] or [`DecodeError::Expansion`] at once, having
/// handed out at most the bound (plus one 32 KiB piece).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Most decoded bytes of one body. Default 64 MiB.
    pub max_decoded_bytes: u64,
    /// Most decoded bytes per encoded byte read (the expansion ratio),
    /// checked once more than [`ratio_floor`](Self::ratio_floor) bytes were
    /// decoded. Default 100 (markup rarely compresses past 20x).
    pub max_ratio: u64,
    /// Decoded bytes below which the ratio is not checked, so that small,
    /// very repetitive bodies pass. Default 1 MiB.
    pub ratio_floor: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_decoded_bytes: 64 << 20,
            max_ratio: 100,
            ratio_floor: 1 << 20,
        }
    }
}

impl DecodeLimits {
    /// The error for `decoded` bytes made from `encoded` bytes, if they
    /// break a bound.
    fn check(&self, coding: &'static str, decoded: u64, encoded: u64) -> Result<(), DecodeError> {
        if decoded > self.max_decoded_bytes {
            return Err(DecodeError::TooLarge {
                coding,
                limit: self.max_decoded_bytes,
            });
        }
        if decoded > self.ratio_floor && decoded > encoded.saturating_mul(self.max_ratio) {
            return Err(DecodeError::Expansion {
                coding,
                limit: self.max_ratio,
                decoded,
                encoded,
            });
        }
        Ok(())
    }
}

/// The coding named by `Content-Encoding`: `Ok(None)` for none or
/// `identity`.
///
/// # Errors
/// [`DecodeError::Unsupported`] for any other coding, or a list of several.
pub(crate) fn coding_of(headers: &HeaderMap) -> Result<Option<Coding>, DecodeError> {
    let mut found = None;
    for value in headers.get_all(CONTENT_ENCODING) {
        let text = value
            .to_str()
            .map_err(|_| DecodeError::Unsupported("(not ASCII)".into()))?;
        for c in list::members(text) {
            let coding = if c.eq_ignore_ascii_case(b"gzip") || c.eq_ignore_ascii_case(b"x-gzip") {
                Coding::Gzip
            } else if c.eq_ignore_ascii_case(b"deflate") {
                Coding::Deflate
            } else if c.eq_ignore_ascii_case(b"identity") {
                continue;
            } else {
                // `text` is ASCII: nothing is lost.
                return Err(DecodeError::Unsupported(
                    String::from_utf8_lossy(c).into_owned(),
                ));
            };
            if found.replace(coding).is_some() {
                return Err(DecodeError::Unsupported(text.to_owned()));
            }
        }
    }
    Ok(found)
}

/// `body` decoded as its `Content-Encoding` says (gzip, deflate or none),
/// within `limits`.
///
/// # Errors
/// [`DecodeError::Unsupported`] for another coding or several. Decoding
/// errors (corrupt data, a bound of `limits` passed) come later, as the
/// body's [`StreamError`].
pub fn decode_body(
    body: BoxSource,
    headers: &HeaderMap,
    limits: DecodeLimits,
) -> Result<BoxSource, DecodeError> {
    Ok(match coding_of(headers)? {
        Some(coding) => Box::pin(Decoded::new(body, coding, limits)),
        None => body,
    })
}

/// `body`, decoded.
pub(crate) struct Decoded {
    inner: BoxSource,
    coding: Coding,
    z: Decompress,
    input: VecDeque<Bytes>,
    /// The current member ended (gzip: a new one may follow).
    member_done: bool,
    inner_done: bool,
    scratch: Box<[u8]>,
    failed: Option<StreamError>,
    limits: DecodeLimits,
    /// Encoded bytes consumed, over every member.
    encoded: u64,
    /// Decoded bytes produced, over every member.
    decoded: u64,
}

impl Decoded {
    pub(crate) fn new(inner: BoxSource, coding: Coding, limits: DecodeLimits) -> Decoded {
        Decoded {
            inner,
            coding,
            limits,
            encoded: 0,
            decoded: 0,
            z: decompressor(coding),
            input: VecDeque::new(),
            member_done: false,
            inner_done: false,
            scratch: vec![0u8; OUT_CHUNK].into_boxed_slice(),
            failed: None,
        }
    }

    fn name(&self) -> &'static str {
        match self.coding {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
        }
    }

    /// Decodes from the held input; `Some(bytes)` when it produced any.
    fn step(&mut self) -> Result<Option<Bytes>, DecodeError> {
        let name = self.name();
        while let Some(front) = self.input.front_mut() {
            if front.is_empty() {
                self.input.pop_front();
                continue;
            }
            if self.member_done {
                if self.coding == Coding::Deflate {
                    return Err(DecodeError::Corrupt {
                        coding: "deflate",
                        reason: "data after the end of the stream".into(),
                    });
                }
                // gzip members may follow one another (RFC 1952 §2.2).
                self.z = decompressor(self.coding);
                self.member_done = false;
            }
            let (in0, out0) = (self.z.total_in(), self.z.total_out());
            let status = self
                .z
                .decompress(front, &mut self.scratch, FlushDecompress::None)
                .map_err(|e| DecodeError::Corrupt {
                    coding: name,
                    reason: e.to_string(),
                })?;
            let used = usize::try_from(self.z.total_in() - in0).unwrap_or(usize::MAX);
            let made = usize::try_from(self.z.total_out() - out0).unwrap_or(usize::MAX);
            front.advance(used.min(front.len()));
            if status == Status::StreamEnd {
                self.member_done = true;
            }
            self.encoded = self.encoded.saturating_add(used as u64);
            self.decoded = self.decoded.saturating_add(made as u64);
            self.limits.check(name, self.decoded, self.encoded)?;
            if made > 0 {
                return Ok(Some(Bytes::copy_from_slice(&self.scratch[..made])));
            }
            if used == 0 && status != Status::StreamEnd {
                // Needs more input than this chunk holds: join it with the next.
                if self.input.len() > 1 {
                    let a = self.input.pop_front().unwrap_or_default();
                    let b = self.input.pop_front().unwrap_or_default();
                    let mut joined = Vec::with_capacity(a.len() + b.len());
                    joined.extend_from_slice(&a);
                    joined.extend_from_slice(&b);
                    self.input.push_front(Bytes::from(joined));
                    continue;
                }
                return Ok(None);
            }
        }
        Ok(None)
    }
}

fn decompressor(coding: Coding) -> Decompress {
    match coding {
        Coding::Gzip => Decompress::new_gzip(15),
        Coding::Deflate => Decompress::new(true),
    }
}

impl Source for Decoded {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        if let Some(e) = &this.failed {
            return Poll::Ready(Some(Err(e.clone())));
        }
        loop {
            match this.step() {
                Ok(Some(bytes)) => return Poll::Ready(Some(Ok(Batch::one(bytes)))),
                Ok(None) => {}
                Err(e) => {
                    let e = StreamError::failed(e);
                    this.failed = Some(e.clone());
                    return Poll::Ready(Some(Err(e)));
                }
            }
            if this.inner_done {
                if this.member_done {
                    return Poll::Ready(None);
                }
                let e = StreamError::failed(DecodeError::Truncated(this.name()));
                this.failed = Some(e.clone());
                return Poll::Ready(Some(Err(e)));
            }
            match this.inner.as_mut().poll_next_batch(cx) {
                Poll::Ready(Some(Ok(batch))) => this.input.extend(batch),
                Poll::Ready(Some(Err(e))) => {
                    this.failed = Some(e.clone());
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => this.inner_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};
    use weir_stream::consume::{ConsumeOptions, bytes};

    fn compress(data: &[u8], gzip: bool) -> Vec<u8> {
        let mut c = if gzip {
            Compress::new_gzip(Compression::default(), 15)
        } else {
            Compress::new(Compression::default(), true)
        };
        let mut out = Vec::with_capacity(data.len() + 64);
        loop {
            let st = c
                .compress_vec(
                    &data[usize::try_from(c.total_in()).expect("fits")..],
                    &mut out,
                    FlushCompress::Finish,
                )
                .expect("compress");
            if st == Status::StreamEnd {
                break out;
            }
            out.reserve(4096);
        }
    }

    async fn decode(wire: Vec<u8>, coding: Coding, piece: usize) -> Result<Vec<u8>, StreamError> {
        decode_within(wire, coding, piece, DecodeLimits::default()).await
    }

    async fn decode_within(
        wire: Vec<u8>,
        coding: Coding,
        piece: usize,
        limits: DecodeLimits,
    ) -> Result<Vec<u8>, StreamError> {
        let chunks: Vec<Bytes> = wire
            .chunks(piece)
            .map(Bytes::copy_from_slice)
            .collect::<Vec<_>>();
        let src: BoxSource = Box::pin(weir_stream::from_iter(chunks));
        bytes(Decoded::new(src, coding, limits), ConsumeOptions::new())
            .await
            .map(|b| b.to_vec())
    }

    #[tokio::test]
    async fn a_bomb_fails_past_the_ratio_and_a_large_body_past_the_size() {
        // 8 MiB of zeros: gzip makes about 8 KiB of it (1000x).
        let zeros = vec![0u8; 8 << 20];
        let wire = compress(&zeros, true);
        let err = decode(wire.clone(), Coding::Gzip, 4096)
            .await
            .expect_err("a 1000x expansion fails");
        assert!(err.to_string().contains("expands more than 100x"), "{err}");
        // With the ratio out of the way, the size bound still holds.
        let limits = DecodeLimits {
            max_decoded_bytes: 2 << 20,
            max_ratio: u64::MAX,
            ..DecodeLimits::default()
        };
        let err = decode_within(wire, Coding::Gzip, 4096, limits)
            .await
            .expect_err("over max_decoded_bytes fails");
        assert!(err.to_string().contains("more than 2097152 bytes"), "{err}");
        // Small repetitive bodies pass below the floor, whatever the ratio.
        let small = vec![b' '; 512 * 1024];
        let out = decode(compress(&small, true), Coding::Gzip, 7)
            .await
            .expect("below the floor");
        assert_eq!(out, small);
        // Exactly at the size bound passes.
        let limits = DecodeLimits {
            max_decoded_bytes: small.len() as u64,
            ..DecodeLimits::default()
        };
        let out = decode_within(compress(&small, false), Coding::Deflate, 100, limits)
            .await
            .expect("at the bound");
        assert_eq!(out.len(), small.len());
    }

    #[tokio::test]
    async fn gzip_and_deflate_round_trip_in_any_chunking() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for gzip in [true, false] {
            let wire = compress(&data, gzip);
            let coding = if gzip { Coding::Gzip } else { Coding::Deflate };
            for piece in [1, 7, 4096, wire.len()] {
                assert_eq!(decode(wire.clone(), coding, piece).await.expect("ok"), data);
            }
        }
    }

    #[tokio::test]
    async fn concatenated_gzip_members_decode_and_truncation_fails() {
        let mut wire = compress(b"hello ", true);
        wire.extend(compress(b"world", true));
        assert_eq!(
            decode(wire.clone(), Coding::Gzip, 3).await.expect("ok"),
            b"hello world"
        );
        wire.truncate(wire.len() - 4);
        assert!(decode(wire, Coding::Gzip, 5).await.is_err());
        assert!(
            decode(b"not gzip at all".to_vec(), Coding::Gzip, 4)
                .await
                .is_err()
        );
    }

    #[test]
    fn codings_are_read_from_content_encoding() {
        let mut h = HeaderMap::new();
        assert_eq!(coding_of(&h), Ok(None));
        h.insert(CONTENT_ENCODING, "x-gzip".parse().expect("value"));
        assert_eq!(coding_of(&h), Ok(Some(Coding::Gzip)));
        h.insert(CONTENT_ENCODING, "identity".parse().expect("value"));
        assert_eq!(coding_of(&h), Ok(None));
        h.insert(CONTENT_ENCODING, "br".parse().expect("value"));
        assert!(coding_of(&h).is_err());
        h.insert(CONTENT_ENCODING, "gzip, deflate".parse().expect("value"));
        assert!(coding_of(&h).is_err());
    }
}
