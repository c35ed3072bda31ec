//! A body of numbered server-sent events.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::error::OriginError;

/// Yields `count` events, one data frame each: event `k` (from 1 to
/// `count`) is `id: k\ndata: event k\n\n`. Never fails. Reports no exact
/// length, so HTTP/1.1 uses chunked coding.
#[derive(Debug)]
pub(crate) struct SseEvents {
    next: u64,
    count: u64,
}

impl SseEvents {
    /// A body of `count` events.
    pub(crate) fn new(count: u64) -> Self {
        Self { next: 1, count }
    }
}

impl Body for SseEvents {
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        let this = self.get_mut();
        if this.next > this.count {
            return Poll::Ready(None);
        }
        let k = this.next;
        this.next += 1;
        let event = format!("id: {k}\ndata: event {k}\n\n");
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(event)))))
    }

    fn is_end_stream(&self) -> bool {
        self.next > self.count
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn events_are_numbered_from_one() {
        let all = SseEvents::new(2)
            .collect()
            .await
            .map(http_body_util::Collected::to_bytes)
            .ok();
        assert_eq!(
            all.as_deref(),
            Some(&b"id: 1\ndata: event 1\n\nid: 2\ndata: event 2\n\n"[..])
        );
    }

    #[test]
    fn zero_events_is_an_ended_body() {
        assert!(SseEvents::new(0).is_end_stream());
    }
}
