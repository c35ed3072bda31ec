//! Socket wrappers.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A stream whose first read must bring data within a deadline.
///
/// hyper's HTTP/1 header read timeout starts only once the protocol is
/// known; before that, the auto (HTTP/1 + HTTP/2) server waits for the
/// first bytes with no deadline. This closes that gap: a client that opens
/// a connection and sends nothing gets a `TimedOut` error and is dropped.
/// Writes and every read after the first byte pass straight through
/// (vectored writes included).
#[derive(Debug)]
pub struct FirstByteDeadline<S> {
    inner: S,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<S> FirstByteDeadline<S> {
    /// Wraps `inner`; the first byte must arrive within `timeout`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        FirstByteDeadline {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstByteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.inner).poll_read(cx, buf);
        let Some(deadline) = this.deadline.as_mut() else {
            return res;
        };
        if res.is_ready() {
            if buf.filled().len() > before {
                this.deadline = None;
            }
        } else if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client sent nothing before the header read timeout",
            )));
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstByteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

use std::future::Future as _;
