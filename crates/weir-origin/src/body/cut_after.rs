//! A wrapper that ends another body after a number of data bytes.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// Forwards the frames of `inner` until `limit` data bytes have passed,
    /// cutting the frame that crosses the limit (a zero-copy slice), then
    /// ends. Ends earlier if `inner` does. Nothing after the cut is polled.
    ///
    /// The size hint has no upper bound, so hyper sends no
    /// `Content-Length`.
    #[derive(Debug)]
    pub(crate) struct CutAfter<B> {
        #[pin]
        inner: B,
        remaining: u64,
        done: bool,
    }
}

impl<B> CutAfter<B> {
    /// Wraps `inner`, ending after `limit` data bytes.
    pub(crate) fn new(inner: B, limit: u64) -> Self {
        Self {
            inner,
            remaining: limit,
            done: false,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for CutAfter<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if *this.done || *this.remaining == 0 {
            *this.done = true;
            return Poll::Ready(None);
        }
        let frame = match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => {
                *this.done = true;
                return Poll::Ready(other);
            }
        };
        match frame.into_data() {
            Ok(mut data) => {
                if data.len() as u64 >= *this.remaining {
                    // `remaining` is below `data.len()`, a usize.
                    data.truncate(*this.remaining as usize);
                }
                *this.remaining -= data.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Err(frame) => Poll::Ready(Some(Ok(frame))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::body::{Length, PatternChunks};
    use crate::pattern;

    #[tokio::test]
    async fn cuts_inside_a_frame() {
        let body = CutAfter::new(PatternChunks::new(1000, 100, Length::Announced), 250);
        let all = body.collect().await.map(|c| c.to_bytes()).ok();
        assert_eq!(all, Some(pattern::bytes(0, 250)));
    }

    #[tokio::test]
    async fn a_limit_past_the_end_passes_everything() {
        let body = CutAfter::new(PatternChunks::new(30, 10, Length::Announced), 1000);
        let all = body.collect().await.map(|c| c.to_bytes()).ok();
        assert_eq!(all, Some(pattern::bytes(0, 30)));
    }

    #[test]
    fn a_zero_limit_is_at_its_end() {
        let body = CutAfter::new(PatternChunks::new(30, 10, Length::Announced), 0);
        assert!(body.is_end_stream());
    }
}
