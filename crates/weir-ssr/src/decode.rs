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

/// `body` decoded as its `Content-Encoding` says (gzip, deflate or none).
///
/// # Errors
/// [`DecodeError::Unsupported`] for another coding or several.
pub fn decode_body(body: BoxSource, headers: &HeaderMap) -> Result<BoxSource, DecodeError> {
    Ok(match coding_of(headers)? {
        Some(coding) => Box::pin(Decoded::new(body, coding)),
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
}

impl Decoded {
    pub(crate) fn new(inner: BoxSource, coding: Coding) -> Decoded {
        Decoded {
            inner,
            coding,
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
        let chunks: Vec<Bytes> = wire
            .chunks(piece)
            .map(Bytes::copy_from_slice)
            .collect::<Vec<_>>();
        let src: BoxSource = Box::pin(weir_stream::from_iter(chunks));
        bytes(Decoded::new(src, coding), ConsumeOptions::new())
            .await
            .map(|b| b.to_vec())
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
