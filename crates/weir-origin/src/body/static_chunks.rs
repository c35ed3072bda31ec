//! A body made of a fixed list of static chunks.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::error::OriginError;

/// Yields each of `chunks` as its own data frame, without copying. Never
/// fails. Reports no exact length, so HTTP/1.1 uses chunked coding (which
/// trailers need).
#[derive(Debug)]
pub(crate) struct StaticChunks {
    rest: &'static [&'static [u8]],
}

impl StaticChunks {
    /// A body of `chunks`, in order.
    pub(crate) fn new(chunks: &'static [&'static [u8]]) -> Self {
        Self { rest: chunks }
    }
}

impl Body for StaticChunks {
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        let this = self.get_mut();
        let Some((first, rest)) = this.rest.split_first() else {
            return Poll::Ready(None);
        };
        this.rest = rest;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(first)))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
