//! A body of pattern bytes, cut into chunks that are zero-copy slices of the
//! shared block.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::error::OriginError;
use crate::pattern;

/// Whether a body tells hyper its length up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Length {
    /// Exact size hint: hyper sends `Content-Length` (HTTP/1.1 and HTTP/2).
    Announced,
    /// No exact size hint: chunked coding on HTTP/1.1, no `Content-Length`.
    Hidden,
}

/// Yields pattern bytes at offsets `0 .. len` as data frames of `chunk` bytes
/// (the last one shorter), each a slice of the shared block. Never fails.
#[derive(Debug)]
pub(crate) struct PatternChunks {
    offset: u64,
    remaining: u64,
    chunk: usize,
    length: Length,
}

impl PatternChunks {
    /// A body of `len` bytes in frames of `chunk` bytes.
    ///
    /// `chunk` is clamped to `1 ..= pattern::BLOCK_LEN`.
    pub(crate) fn new(len: u64, chunk: usize, length: Length) -> Self {
        Self {
            offset: 0,
            remaining: len,
            chunk: chunk.clamp(1, pattern::BLOCK_LEN),
            length,
        }
    }

    fn next_chunk(&mut self) -> Option<Bytes> {
        if self.remaining == 0 {
            return None;
        }
        let len = usize::try_from(self.remaining).map_or(self.chunk, |r| r.min(self.chunk));
        let data = pattern::slice(self.offset, len);
        self.offset += len as u64;
        self.remaining -= len as u64;
        Some(data)
    }
}

impl Body for PatternChunks {
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        Poll::Ready(
            self.get_mut()
                .next_chunk()
                .map(|data| Ok(Frame::data(data))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        match self.length {
            Length::Announced => SizeHint::with_exact(self.remaining),
            Length::Hidden => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn frames_are_chunk_sized_and_concatenate_to_the_pattern() {
        let mut body = PatternChunks::new(10_000, 4096, Length::Announced);
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame
                .ok()
                .and_then(|f| f.into_data().ok())
                .unwrap_or_default();
            sizes.push(data.len());
            all.extend_from_slice(&data);
        }
        assert_eq!(sizes, [4096, 4096, 1808]);
        assert_eq!(&all[..], &pattern::bytes(0, 10_000)[..]);
    }

    #[test]
    fn size_hint_follows_length_mode() {
        let announced = PatternChunks::new(5, 2, Length::Announced);
        assert_eq!(announced.size_hint().exact(), Some(5));
        let hidden = PatternChunks::new(5, 2, Length::Hidden);
        assert_eq!(hidden.size_hint().exact(), None);
    }

    #[test]
    fn empty_body_is_at_end() {
        assert!(PatternChunks::new(0, 2, Length::Announced).is_end_stream());
    }
}
