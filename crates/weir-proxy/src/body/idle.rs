//! Bodies as read from a peer's connection, failed when the peer sends
//! nothing for too long.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderMap;
use http_body::SizeHint;
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};
use weir_stream::body::HttpBodySource;
use weir_stream::{BatchResult, Source, StreamError};

/// The client's request body as read from its connection, within its
/// route's limits.
pub type ClientBody = super::limits::ClientLimits<IdleTimeout<HttpBodySource<Incoming>>>;

/// The error a body fails with when its peer sent nothing for too long.
#[derive(Debug, thiserror::Error)]
#[error("body idle timeout: no data for {ms} ms")]
pub struct BodyIdleTimeout {
    /// The configured timeout, in ms.
    pub ms: u64,
}

/// Fails a source that stays `Pending` for longer than `timeout` while its
/// consumer is waiting on it.
///
/// The clock runs only while the consumer waits: a slow consumer that
/// leaves data unread does not trip it. The timer is armed when the first
/// `Pending` of a wait is seen, so an always-ready source never touches it.
#[derive(Debug)]
pub struct IdleTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Made at the first wait: a body that is always ready (a small one
    /// that came with its head) never allocates a timer.
    sleep: Option<Pin<Box<Sleep>>>,
    waiting: bool,
}

impl<S> IdleTimeout<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        IdleTimeout {
            inner,
            timeout,
            sleep: None,
            waiting: false,
        }
    }
}

impl<S: Source + Unpin> Source for IdleTimeout<S> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_next_batch(cx) {
            Poll::Ready(item) => {
                this.waiting = false;
                Poll::Ready(item)
            }
            Poll::Pending => {
                if !this.waiting {
                    this.waiting = true;
                    let deadline = Instant::now() + this.timeout;
                    match &mut this.sleep {
                        Some(sleep) => sleep.as_mut().reset(deadline),
                        None => this.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                }
                let Some(sleep) = this.sleep.as_mut() else {
                    return Poll::Pending; // set just above
                };
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Some(Err(StreamError::failed(BodyIdleTimeout {
                            ms: this.timeout.as_millis() as u64,
                        }))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
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
