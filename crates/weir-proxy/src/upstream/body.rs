//! An upstream response body that gives its connection back to the pool
//! when it was read to the end, and closes it otherwise.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use super::connect::Sender;
use super::pool::ServerPool;

/// How long [`PooledBody::read_ahead`] waits for a first body frame that
/// did not come with the head: 1 ms, the most a slow body's head is held.
pub(crate) const READ_AHEAD_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

pin_project! {
    /// The body of an upstream response, `Incoming` with its connection
    /// (an HTTP/1.1 one; none for a stream of an HTTP/2 connection).
    ///
    /// When the body ends (its last frame read, or no body at all: `HEAD`,
    /// 204, 304, `Content-Length: 0`), the connection goes back to its
    /// pool. When it is dropped before its end or fails, the connection is
    /// dropped with it and hyper closes it: a connection is never pooled
    /// half-read.
    #[derive(Debug)]
    pub struct PooledBody {
        #[pin]
        inner: Incoming,
        conn: Option<Checkout>,
        // Read ahead by `read_ahead`, handed out first: a data frame, or
        // (rarely: a body of trailers only) the trailers, boxed to keep
        // the body small.
        ahead: Option<Bytes>,
        ahead_trailers: Option<Box<http::HeaderMap>>,
        // Fired when this body ends or fails: stops a request body the
        // upstream answered before reading (see `stop_upload_at_end`).
        stop_upload: Option<weir_stream::CancelToken>,
    }
}

/// A connection out of its pool for one exchange.
#[derive(Debug)]
struct Checkout {
    pool: Arc<ServerPool>,
    sender: Sender,
}

impl PooledBody {
    /// `inner`, read on the connection `sender` of `pool`.
    pub(crate) fn new(inner: Incoming, pool: &Arc<ServerPool>, sender: Sender) -> PooledBody {
        let mut conn = Some(Checkout {
            pool: Arc::clone(pool),
            sender,
        });
        if inner.is_end_stream() {
            give_back(&mut conn);
        }
        PooledBody {
            inner,
            conn,
            ahead: None,
            ahead_trailers: None,
            stop_upload: None,
        }
    }

    /// Takes the body's first frame if the connection already has it, to
    /// be handed out first: a body that fails at once (a malformed first
    /// chunk-size line, or the connection closed, sent with the head)
    /// fails here, while the response head can still become a 502.
    ///
    /// The body is polled at once; when nothing is there yet the task
    /// yields once (so that a connection task that has the bytes can hand
    /// them over) and polls again, and only then waits for the first frame
    /// for at most [`READ_AHEAD_WAIT`]. A first frame that is not there by
    /// then is not waited for: the head goes out and the body follows. A
    /// body that was read with its head never reaches the timer.
    ///
    /// # Errors
    /// The body's error, when it had already failed; the connection is
    /// then closed.
    pub(crate) async fn read_ahead(&mut self) -> Result<(), hyper::Error> {
        if self.ahead.is_some() || self.ahead_trailers.is_some() || self.inner.is_end_stream() {
            return Ok(());
        }
        let mut first = self.poll_ready_frame().await;
        if first.is_none() {
            tokio::task::yield_now().await;
            first = self.poll_ready_frame().await;
        }
        if first.is_none() {
            // The connection task may run on another worker that is busy:
            // give it a bounded moment rather than a single scheduling turn.
            first = tokio::time::timeout(READ_AHEAD_WAIT, self.next_frame())
                .await
                .ok();
        }
        match first {
            Some(Some(Err(e))) => Err(e),
            Some(Some(Ok(frame))) => {
                match frame.into_data() {
                    Ok(data) => self.ahead = Some(data),
                    Err(frame) => self.ahead_trailers = frame.into_trailers().ok().map(Box::new),
                }
                Ok(())
            }
            Some(None) | None => Ok(()),
        }
    }

    /// The connection's next frame, waited for.
    async fn next_frame(&mut self) -> Option<Result<Frame<Bytes>, hyper::Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_inner(cx)).await
    }

    /// One poll of the connection: `None` when nothing is there yet.
    async fn poll_ready_frame(&mut self) -> Option<Option<Result<Frame<Bytes>, hyper::Error>>> {
        std::future::poll_fn(|cx| match Pin::new(&mut *self).poll_inner(cx) {
            Poll::Ready(frame) => Poll::Ready(Some(frame)),
            Poll::Pending => Poll::Ready(None),
        })
        .await
    }

    /// Fires `stop` when this body ends or fails: the upstream gave its
    /// final answer before reading the whole request body, so the rest of
    /// it is not sent once the answer is read (the connection, half
    /// written, then closes instead of going back to the pool).
    pub(crate) fn stop_upload_at_end(&mut self, stop: weir_stream::CancelToken) {
        if self.inner.is_end_stream() {
            // Already read to its end (with the head, or by `read_ahead`).
            stop.cancel("the upstream answered before reading the whole request body");
        } else {
            self.stop_upload = Some(stop);
        }
    }

    /// The next frame of the connection, its pool bookkeeping done.
    fn poll_inner(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => {
                give_back(this.conn);
                true
            }
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => {
                give_back(this.conn);
                true
            }
            Poll::Ready(Some(Err(_))) => {
                drop(this.conn.take());
                true
            }
            _ => false,
        };
        if ended && let Some(stop) = this.stop_upload.take() {
            stop.cancel("the upstream answered before reading the whole request body");
        }
        polled
    }
}

impl PooledBody {
    /// `inner`, with no pool to give a connection back to: read on a
    /// connection of its own that is closed after it (one opened to switch
    /// protocols that did not), or from a stream of a shared HTTP/2
    /// connection (which stays open for other streams either way).
    pub(crate) fn unpooled(inner: Incoming) -> PooledBody {
        PooledBody {
            inner,
            conn: None,
            ahead: None,
            ahead_trailers: None,
            stop_upload: None,
        }
    }
}

fn give_back(conn: &mut Option<Checkout>) {
    if let Some(Checkout { pool, sender }) = conn.take() {
        pool.put_back(sender);
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(data) = self.ahead.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(trailers) = self.ahead_trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(*trailers))));
        }
        self.poll_inner(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_none() && self.ahead_trailers.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        if let Some(held) = &self.ahead {
            let n = held.len() as u64;
            // Upper first: `set_lower` insists on lower <= upper.
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper.saturating_add(n));
            }
            hint.set_lower(hint.lower().saturating_add(n));
        }
        hint
    }
}
