//! A wrapper that spaces out the data frames of another body in time.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

pin_project! {
    /// Forwards `inner`, waiting `interval` after each data frame before
    /// asking for the next one. The first frame is passed on at once and no
    /// wait follows the last one (when `inner` reports its end).
    ///
    /// A zero `interval` makes this a plain pass-through (no timer).
    #[derive(Debug)]
    pub(crate) struct Paced<B> {
        #[pin]
        inner: B,
        interval: Duration,
        #[pin]
        pause: Option<Sleep>,
        waiting: bool,
    }
}

impl<B> Paced<B> {
    /// Wraps `inner`, pausing `interval` between its data frames.
    pub(crate) fn new(inner: B, interval: Duration) -> Self {
        Self {
            inner,
            interval,
            pause: None,
            waiting: false,
        }
    }
}

impl<B: Body> Body for Paced<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        if *this.waiting {
            if let Some(pause) = this.pause.as_mut().as_pin_mut() {
                ready!(pause.poll(cx));
            }
            *this.waiting = false;
        }
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        let was_data = matches!(&frame, Some(Ok(f)) if f.is_data());
        if was_data && !this.interval.is_zero() && !this.inner.is_end_stream() {
            let deadline = Instant::now() + *this.interval;
            match this.pause.as_mut().as_pin_mut() {
                Some(pause) => pause.reset(deadline),
                None => this.pause.set(Some(tokio::time::sleep_until(deadline))),
            }
            *this.waiting = true;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::body::{Length, PatternChunks};

    #[tokio::test(start_paused = true)]
    async fn first_frame_is_immediate_and_later_ones_wait() {
        let start = Instant::now();
        let mut body = std::pin::pin!(Paced::new(
            PatternChunks::new(30, 10, Length::Hidden),
            Duration::from_millis(100),
        ));
        let mut at = Vec::new();
        while let Some(frame) = body.frame().await {
            assert!(frame.is_ok());
            at.push(start.elapsed().as_millis());
        }
        assert_eq!(at, [0, 100, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_interval_never_waits() {
        let start = Instant::now();
        let body = Paced::new(PatternChunks::new(30, 10, Length::Hidden), Duration::ZERO);
        let collected = body.collect().await.map(|c| c.to_bytes().len()).ok();
        assert_eq!(collected, Some(30));
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
