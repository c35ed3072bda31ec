//! The request body Weir sends upstream.

use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderMap;
use http_body::SizeHint;
use http_body_util::{Either, Empty};
use weir_stream::body::SourceBody;
use weir_stream::{BatchBuf, BatchResult, CancelToken, Chain, Pipeline, Source};

use crate::access_log::RequestTally;
use crate::body::idle::ClientBody;
use crate::body::replay::{Tape, TapeReader};
use crate::body_log::BodyLog;

/// The body Weir sends upstream: the client's body, streamed, or nothing
/// when the request has no body (so no `Content-Length: 0` is invented).
///
/// The streamed body is boxed: hyper's client queues whole requests in a
/// channel whose blocks hold 32 of them per upstream connection, so a
/// request's size is paid 32 times over for every connection in the pool
/// (23 KiB a connection unboxed, 8 KiB boxed); only requests with a body
/// pay the allocation.
pub type RequestBody = Either<Box<StreamedRequestBody>, Empty<BatchBuf>>;

/// The client's body as streamed upstream.
pub type StreamedRequestBody = SourceBody<Stoppable>;

/// A request body the exchange can stop sending: when the upstream gave
/// its final answer before it read the whole body (a `413` or `401` to an
/// upload), the rest is not sent; the body fails, so that the half-written
/// connection is closed, never pooled.
#[derive(Debug)]
pub struct Stoppable {
    inner: Outgoing,
    stop: CancelToken,
}

impl Source for Stoppable {
    #[inline]
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        if let Poll::Ready(reason) = this.stop.poll_cancelled(cx) {
            return Poll::Ready(Some(Err(reason)));
        }
        Pin::new(&mut this.inner).poll_next_batch(cx)
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

/// The client's body through the body log and the byte tally.
pub type RequestPipeline = Pipeline<RequestSource, Chain<BodyLog, RequestTally>>;

/// A request body as one attempt sends it: the pipeline itself, or, on an
/// upstream that may retry it, a reader of its retry [`Tape`].
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "the body is boxed once in RequestBody; boxing the pipeline again would cost a second allocation"
)]
pub enum Outgoing {
    /// Sent once.
    Once(RequestPipeline),
    /// Kept for a retry while it fits in `retry_body_bytes`.
    Taped(TapeReader<RequestPipeline>),
}

impl Outgoing {
    /// The upstream body of `pipeline`, sent once, stopped when `stop`
    /// fires.
    pub fn once(pipeline: RequestPipeline, stop: CancelToken) -> RequestBody {
        Outgoing::Once(pipeline).stoppable(stop)
    }

    /// The upstream body of `pipeline` kept for retries up to `cap` bytes,
    /// and its tape.
    pub fn taped(
        pipeline: RequestPipeline,
        cap: u64,
        stop: CancelToken,
    ) -> (RequestBody, Tape<RequestPipeline>) {
        let (tape, reader) = Tape::new(pipeline, cap);
        (Outgoing::reader(reader, stop), tape)
    }

    /// The upstream body of a rewound tape `reader`.
    pub fn reader(reader: TapeReader<RequestPipeline>, stop: CancelToken) -> RequestBody {
        Outgoing::Taped(reader).stoppable(stop)
    }

    fn stoppable(self, stop: CancelToken) -> RequestBody {
        Either::Left(Box::new(SourceBody::new(Stoppable { inner: self, stop })))
    }
}

impl Source for Outgoing {
    #[inline]
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        match self.get_mut() {
            Outgoing::Once(s) => Pin::new(s).poll_next_batch(cx),
            Outgoing::Taped(s) => Pin::new(s).poll_next_batch(cx),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Outgoing::Once(s) => s.size_hint(),
            Outgoing::Taped(s) => s.size_hint(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Outgoing::Once(s) => s.is_end_stream(),
            Outgoing::Taped(s) => s.is_end_stream(),
        }
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        match self.get_mut() {
            Outgoing::Once(s) => Pin::new(s).take_trailers(),
            Outgoing::Taped(s) => Pin::new(s).take_trailers(),
        }
    }
}

/// Where a request body sent upstream comes from.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "the body is boxed once in RequestBody; a mirror's consumer is the rare case"
)]
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
