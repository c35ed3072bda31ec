//! Body types of the proxy: the request and response pipelines, and the
//! body idle timeout.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderMap;
use http_body::SizeHint;
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};
use weir_stream::body::{HttpBodySource, SourceBody};
use weir_stream::{BatchBuf, BatchResult, Chain, Once, Pipeline, Source, StreamError};
use weir_transform::chain::ResponseChain;

use crate::access_log::{RequestTally, ResponseLog};
use crate::body_log::BodyLog;

/// The body Weir sends upstream: the client's body, streamed, or nothing
/// when the request has no body (so no `Content-Length: 0` is invented).
pub type RequestBody =
    Either<SourceBody<Pipeline<RequestSource, Chain<BodyLog, RequestTally>>>, Empty<BatchBuf>>;

/// The client's request body as read from its connection.
pub type ClientBody = IdleTimeout<HttpBodySource<Incoming>>;

/// Where a request body sent upstream comes from.
#[derive(Debug)]
pub enum RequestSource {
    /// The client's body, read directly.
    Direct(ClientBody),
    /// A consumer of the client's body shared with a mirror copy: the
    /// primary request's (primary) or the copy's (secondary).
    Shared(weir_stream::share::Consumer<ClientBody>),
}

impl Source for RequestSource {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        match self.get_mut() {
            RequestSource::Direct(s) => Pin::new(s).poll_next_batch(cx),
            RequestSource::Shared(s) => Pin::new(s).poll_next_batch(cx),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestSource::Direct(s) => s.size_hint(),
            RequestSource::Shared(s) => s.size_hint(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestSource::Direct(s) => s.is_end_stream(),
            RequestSource::Shared(s) => s.is_end_stream(),
        }
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        match self.get_mut() {
            RequestSource::Direct(s) => Pin::new(s).take_trailers(),
            RequestSource::Shared(s) => Pin::new(s).take_trailers(),
        }
    }
}

/// The body Weir sends downstream: the upstream's body or Weir's own, streamed.
/// Its pipeline runs the route's response transforms (empty for most
/// routes and for Weir's own responses), then the access-log stage.
pub type ResponseBody =
    SourceBody<Pipeline<ResponseSource, Chain<Chain<BodyLog, ResponseChain>, ResponseLog>>>;

/// Where a response body comes from.
#[derive(Debug)]
pub enum ResponseSource {
    /// The upstream's body.
    Upstream(IdleTimeout<HttpBodySource<Incoming>>),
    /// A body Weir made itself (an error page).
    Local(Once),
    /// A body the response cache serves or tees (crate::cache).
    Cache(crate::cache::CacheSource),
    /// A page composed from a template and its fragments (crate::ssr).
    Page(weir_ssr::PageBody),
}

impl Source for ResponseSource {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        match self.get_mut() {
            ResponseSource::Upstream(s) => Pin::new(s).poll_next_batch(cx),
            ResponseSource::Local(s) => Pin::new(s).poll_next_batch(cx),
            ResponseSource::Cache(s) => Pin::new(s).poll_next_batch(cx),
            ResponseSource::Page(s) => Pin::new(s).poll_next_batch(cx),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseSource::Upstream(s) => s.size_hint(),
            ResponseSource::Local(s) => s.size_hint(),
            ResponseSource::Cache(s) => s.size_hint(),
            ResponseSource::Page(s) => s.size_hint(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseSource::Upstream(s) => s.is_end_stream(),
            ResponseSource::Local(s) => s.is_end_stream(),
            ResponseSource::Cache(s) => s.is_end_stream(),
            ResponseSource::Page(s) => s.is_end_stream(),
        }
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        match self.get_mut() {
            ResponseSource::Upstream(s) => Pin::new(s).take_trailers(),
            ResponseSource::Local(s) => Pin::new(s).take_trailers(),
            ResponseSource::Cache(s) => Pin::new(s).take_trailers(),
            ResponseSource::Page(_) => None,
        }
    }
}

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
    sleep: Pin<Box<Sleep>>,
    waiting: bool,
}

impl<S> IdleTimeout<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        IdleTimeout {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
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
                    this.sleep.as_mut().reset(Instant::now() + this.timeout);
                }
                match this.sleep.as_mut().poll(cx) {
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

use std::future::Future as _;
