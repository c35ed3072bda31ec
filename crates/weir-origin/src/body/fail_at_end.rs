//! A wrapper that turns the normal end of another body into a failure.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use crate::error::OriginError;

/// Where a [`FailAtEnd`] is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Passing on the inner body's frames.
    Forwarding,
    /// The inner body ended; waiting out the grace period.
    Grace,
    /// The failure was reported; nothing more follows.
    Failed,
}

pin_project! {
    /// Forwards every frame of `inner`; when `inner` ends, waits `grace` and
    /// then fails with [`OriginError::DeliberateAbort`] carrying the number
    /// of data bytes forwarded.
    ///
    /// The grace period lets hyper flush the bytes already handed to it
    /// before the error makes it drop the connection (HTTP/1.1) or reset the
    /// stream (HTTP/2), so the peer receives them and then sees the failure.
    ///
    /// The size hint never has an upper bound, so hyper sends no
    /// `Content-Length` and uses chunked coding on HTTP/1.1.
    #[derive(Debug)]
    pub(crate) struct FailAtEnd<B> {
        #[pin]
        inner: B,
        grace: Duration,
        #[pin]
        pause: Option<Sleep>,
        phase: Phase,
        forwarded: u64,
    }
}

impl<B> FailAtEnd<B> {
    /// Wraps `inner`, failing `grace` after it ends.
    pub(crate) fn new(inner: B, grace: Duration) -> Self {
        Self {
            inner,
            grace,
            pause: None,
            phase: Phase::Forwarding,
            forwarded: 0,
        }
    }
}

impl<B> Body for FailAtEnd<B>
where
    B: Body<Error = OriginError>,
{
    type Data = B::Data;
    type Error = OriginError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, OriginError>>> {
        let mut this = self.project();
        loop {
            match *this.phase {
                Phase::Forwarding => match ready!(this.inner.as_mut().poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            *this.forwarded += data.remaining() as u64;
                        }
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    Some(Err(err)) => {
                        *this.phase = Phase::Failed;
                        return Poll::Ready(Some(Err(err)));
                    }
                    None => {
                        this.pause.set(Some(tokio::time::sleep(*this.grace)));
                        *this.phase = Phase::Grace;
                    }
                },
                Phase::Grace => {
                    if let Some(pause) = this.pause.as_mut().as_pin_mut() {
                        ready!(pause.poll(cx));
                    }
                    *this.phase = Phase::Failed;
                    return Poll::Ready(Some(Err(OriginError::DeliberateAbort {
                        after_bytes: *this.forwarded,
                    })));
                }
                Phase::Failed => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.phase == Phase::Failed
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = SizeHint::new();
        hint.set_lower(self.inner.size_hint().lower());
        hint
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::body::{Length, PatternChunks};

    #[tokio::test(start_paused = true)]
    async fn data_then_deliberate_abort_with_byte_count() {
        let mut body = std::pin::pin!(FailAtEnd::new(
            PatternChunks::new(100, 64, Length::Announced),
            Duration::from_millis(50),
        ));
        assert_eq!(body.size_hint().exact(), None);
        let mut data_frames = 0;
        let outcome = loop {
            match body.frame().await {
                Some(Ok(_)) => data_frames += 1,
                Some(Err(err)) => break Some(err),
                None => break None,
            }
        };
        assert_eq!(data_frames, 2);
        assert!(matches!(
            outcome,
            Some(OriginError::DeliberateAbort { after_bytes: 100 })
        ));
        assert!(body.frame().await.is_none());
    }
}
