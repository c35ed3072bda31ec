//! The downstream socket wrapper: deadlines hyper does not enforce itself.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Bytes after which the auto (HTTP/1 + HTTP/2) server has surely chosen
/// its protocol: the length of the HTTP/2 connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;

/// A downstream connection with two deadlines of its own.
///
/// - **Preface deadline.** hyper's HTTP/1 header read timeout starts only
///   once the protocol is known; before that, the auto server waits for up
///   to 24 bytes with no deadline, so a client that sends nothing, or one
///   byte of the HTTP/2 preface, could hold the socket forever. Until 24
///   bytes have arrived, they must arrive within `preface_timeout` of the
///   accept.
/// - **Idle deadline.** When no byte moves in either direction for `idle`,
///   the connection fails with `TimedOut`. This bounds what hyper leaves
///   open-ended: an HTTP/2 connection with no stream, a stream whose header
///   block never completes, and a client that stops reading a response (an
///   HTTP/1 write, or an HTTP/2 stream with a zero window, that never
///   drains).
///
/// While the connection carries a tunnel (an upgraded HTTP/1.1 connection
/// or an RFC 8441 stream, see [`ConnTunnels`]), the idle deadline is off:
/// the tunnel's own `upgrade_idle_timeout` bounds it instead.
///
/// The idle clock is checked lazily: activity only records an instant, and
/// the timer is re-armed when it fires early, so a busy connection costs
/// no timer updates. Writes, vectored ones included, pass straight through.
#[derive(Debug)]
pub struct DownstreamIo<S> {
    inner: S,
    /// Bytes still expected before the protocol is surely known.
    preface_left: usize,
    preface_deadline: Option<Pin<Box<Sleep>>>,
    idle: Duration,
    last_activity: Instant,
    idle_timer: Pin<Box<Sleep>>,
    tunnels: Arc<ConnTunnels>,
}

/// The tunnels a downstream connection carries now: while there is one,
/// its [`DownstreamIo`] idle deadline is off. Shared by the socket wrapper
/// and the requests of its connection.
#[derive(Debug, Default)]
pub struct ConnTunnels(AtomicUsize);

impl ConnTunnels {
    /// Counts one tunnel until the guard is dropped.
    pub fn open(self: &Arc<Self>) -> TunnelOnConn {
        self.0.fetch_add(1, Ordering::AcqRel);
        TunnelOnConn(Arc::clone(self))
    }

    fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

/// One tunnel on a connection, counted in its [`ConnTunnels`] while it lives.
#[derive(Debug)]
pub struct TunnelOnConn(Arc<ConnTunnels>);

impl Drop for TunnelOnConn {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S> DownstreamIo<S> {
    /// Wraps an accepted socket; `tunnels` turns the idle deadline off
    /// while the connection carries a tunnel.
    pub fn new(
        inner: S,
        preface_timeout: Duration,
        idle: Duration,
        tunnels: Arc<ConnTunnels>,
    ) -> Self {
        let now = Instant::now();
        DownstreamIo {
            inner,
            preface_left: PREFACE_LEN,
            preface_deadline: Some(Box::pin(tokio::time::sleep_until(now + preface_timeout))),
            idle,
            last_activity: now,
            idle_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            tunnels,
        }
    }

    /// Called when an operation is pending: fails if a deadline has passed,
    /// and otherwise makes sure the timers will wake the task.
    fn check_deadlines(&mut self, cx: &mut Context<'_>, reading: bool) -> Option<io::Error> {
        if reading
            && let Some(deadline) = self.preface_deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Some(io::Error::new(
                io::ErrorKind::TimedOut,
                "client did not send a request before the header read timeout",
            ));
        }
        loop {
            if self.idle_timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            if self.tunnels.any() {
                // A tunnel's own idle timeout bounds it: count this as activity.
                self.last_activity = Instant::now();
            }
            let due = self.last_activity + self.idle;
            if due <= Instant::now() {
                return Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "connection idle: no bytes moved either way for {} ms",
                        self.idle.as_millis()
                    ),
                ));
            }
            // There was activity since the timer was armed: re-arm and poll again.
            self.idle_timer.as_mut().reset(due);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for DownstreamIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(res) => {
                let n = buf.filled().len() - before;
                if n > 0 {
                    this.last_activity = Instant::now();
                    if this.preface_deadline.is_some() {
                        this.preface_left = this.preface_left.saturating_sub(n);
                        if this.preface_left == 0 {
                            this.preface_deadline = None;
                        }
                    }
                }
                Poll::Ready(res)
            }
            Poll::Pending => match this.check_deadlines(cx, true) {
                Some(err) => Poll::Ready(Err(err)),
                None => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> DownstreamIo<S> {
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        res: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match res {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.last_activity = Instant::now();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.check_deadlines(cx, false) {
                Some(err) => Poll::Ready(Err(err)),
                None => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for DownstreamIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, res)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, res)
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
