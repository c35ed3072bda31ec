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
        PooledBody { inner, conn }
    }
}

impl PooledBody {
    /// `inner`, read from a stream of a shared HTTP/2 connection: nothing
    /// goes back to a pool when it ends (the connection stays open for
    /// other streams either way).
    pub(crate) fn unpooled(inner: Incoming) -> PooledBody {
        PooledBody { inner, conn: None }
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
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        let polled = this.inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(None) => give_back(this.conn),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => give_back(this.conn),
            Poll::Ready(Some(Err(_))) => drop(this.conn.take()),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
