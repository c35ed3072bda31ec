//! The client's request body held to its route's size limit and the
//! server's minimum rate (`max_request_body_bytes`,
//! `request_body_min_rate`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderMap;
use http_body::SizeHint;
use tokio::time::Instant;
use weir_stream::{BatchResult, Source, StreamError};

/// The body grew past `max_request_body_bytes` (answered `413`, RFC 9110
/// §15.5.14).
#[derive(Debug, thiserror::Error)]
#[error("request body larger than max_request_body_bytes = {limit}")]
pub struct BodyTooLarge {
    /// The limit, in bytes.
    pub limit: u64,
}

/// The client sent its body slower than `request_body_min_rate` (answered
/// `408`, RFC 9110 §15.5.9).
#[derive(Debug, thiserror::Error)]
#[error(
    "request body too slow: {received} bytes in {waited_ms} ms of waiting, under request_body_min_rate = {rate} bytes/s"
)]
pub struct BodyTooSlow {
    /// Bytes received so far.
    pub received: u64,
    /// Time spent waiting for them, in ms.
    pub waited_ms: u64,
    /// The configured rate, in bytes per second.
    pub rate: u64,
}

/// How a client body is bounded.
#[derive(Debug, Clone, Copy)]
pub struct BodyBounds {
    /// Most bytes (`None`: no limit).
    pub max_bytes: Option<u64>,
    /// Least average rate in bytes/s over the time spent waiting for the
    /// client (0: none).
    pub min_rate: u64,
    /// Waiting time before the rate is checked.
    pub grace: Duration,
}

/// Fails `inner` with [`BodyTooLarge`] before handing on the batch that
/// crosses the size limit, and with [`BodyTooSlow`] when, past the grace
/// time of waiting, fewer than `min_rate` bytes per second of waiting came.
///
/// Only time the consumer spends waiting on the client counts: a body held
/// back by a slow upstream is not the client's doing. A body that is always
/// ready never reads the clock.
#[derive(Debug)]
pub struct ClientLimits<S> {
    inner: S,
    bounds: BodyBounds,
    received: u64,
    waited: Duration,
    wait_start: Option<Instant>,
}

impl<S> ClientLimits<S> {
    /// `inner` within `bounds`.
    pub fn new(inner: S, bounds: BodyBounds) -> Self {
        ClientLimits {
            inner,
            bounds,
            received: 0,
            waited: Duration::ZERO,
            wait_start: None,
        }
    }

    fn too_slow(&self) -> bool {
        if self.bounds.min_rate == 0 || self.waited <= self.bounds.grace {
            return false;
        }
        (self.received as f64) < self.bounds.min_rate as f64 * self.waited.as_secs_f64()
    }
}

impl<S: Source + Unpin> Source for ClientLimits<S> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_next_batch(cx);
        if polled.is_pending() {
            if this.bounds.min_rate > 0 && this.wait_start.is_none() {
                this.wait_start = Some(Instant::now());
            }
            return Poll::Pending;
        }
        if let Some(start) = this.wait_start.take() {
            this.waited += start.elapsed();
        }
        if let Poll::Ready(Some(Ok(batch))) = &polled {
            this.received = this.received.saturating_add(batch.byte_len() as u64);
            if let Some(limit) = this.bounds.max_bytes
                && this.received > limit
            {
                return Poll::Ready(Some(Err(StreamError::failed(BodyTooLarge { limit }))));
            }
            if this.too_slow() {
                return Poll::Ready(Some(Err(StreamError::failed(BodyTooSlow {
                    received: this.received,
                    waited_ms: this.waited.as_millis() as u64,
                    rate: this.bounds.min_rate,
                }))));
            }
        }
        polled
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        Pin::new(&mut self.get_mut().inner).take_trailers()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use weir_stream::consume::{ConsumeOptions, bytes};

    use super::*;

    fn bounds(max_bytes: Option<u64>) -> BodyBounds {
        BodyBounds {
            max_bytes,
            min_rate: 0,
            grace: Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn the_limit_passes_and_one_byte_more_fails_before_it_is_handed_on() {
        let chunks = || (0..10).map(|_| Bytes::from_static(b"0123456789"));
        let at = ClientLimits::new(weir_stream::from_iter(chunks()), bounds(Some(100)));
        assert_eq!(
            bytes(at, ConsumeOptions::new()).await.expect("ok").len(),
            100
        );
        let over = ClientLimits::new(weir_stream::from_iter(chunks()), bounds(Some(99)));
        let err = bytes(over, ConsumeOptions::new()).await.expect_err("413");
        assert!(
            err.reason()
                .is_some_and(|r| r.downcast_ref::<BodyTooLarge>().is_some()),
            "{err}"
        );
    }
}
