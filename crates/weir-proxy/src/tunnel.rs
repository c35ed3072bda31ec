//! Tunnels: the bytes of an upgraded exchange copied both ways between the
//! client and the upstream, once both sides switched protocols (an
//! HTTP/1.1 `101 Switching Protocols`, RFC 9110 §7.8 and RFC 6455 §4, or
//! an HTTP/2 extended CONNECT stream, RFC 8441 §4-5).
//!
//! - **Backpressure.** Each direction has one fixed buffer of
//!   [`BUFFER_BYTES`]: Weir reads the next bytes of a side only once the
//!   previous ones were written to the other, so a peer that stops reading
//!   makes Weir stop reading its counterpart (the socket buffers fill, and
//!   TCP flow control reaches the sender).
//! - **Idle timeout.** When no byte moves to or from the client for
//!   `upgrade_idle_timeout`, both sides are closed.
//! - **Closing.** Either side closing ends the tunnel: an end of stream
//!   from one side is passed on (what was read before it is written, then
//!   the write half of the other side is shut down), and then both sides
//!   are closed. Weir does not keep half-closed tunnels: a WebSocket ends
//!   with its closing handshake, after which neither side sends more. An
//!   error on either side closes both at once.
//! - **Shutdown.** [`Tunnels`] knows every live tunnel: the server waits
//!   for them within its grace period, then closes those still open.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::Instant;

/// The buffer of each direction of a tunnel, in bytes.
pub const BUFFER_BYTES: usize = 16 * 1024;

/// Every live tunnel of a proxy, so that shutdown can wait for them and
/// then close them.
#[derive(Debug)]
pub struct Tunnels {
    close: watch::Sender<bool>,
}

impl Default for Tunnels {
    fn default() -> Self {
        Tunnels {
            close: watch::channel(false).0,
        }
    }
}

impl Tunnels {
    /// Tunnels open now.
    pub fn live(&self) -> usize {
        self.close.receiver_count()
    }

    /// Resolves once no tunnel is open (at once when none is).
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub async fn drained(&self) {
        self.close.closed().await;
    }

    /// Closes every open tunnel, and every tunnel opened from now on.
    pub fn close_all(&self) {
        self.close.send_replace(true);
    }

    /// A new tunnel's close signal (counted in [`Tunnels::live`] while it lives).
    pub(crate) fn admit(&self) -> watch::Receiver<bool> {
        self.close.subscribe()
    }
}

/// How a tunnel ended.
#[derive(Debug)]
pub enum TunnelEnd {
    /// Both directions reached their end of stream.
    Closed,
    /// No byte moved to or from the client for the idle timeout.
    IdleTimeout {
        /// The timeout, in ms.
        ms: u64,
    },
    /// The proxy closed it: shutdown's grace period was over.
    Shutdown,
    /// A read or write failed; `side` says on which side's socket.
    Failed {
        /// The side whose socket failed.
        side: Side,
        /// What failed.
        error: io::Error,
    },
}

/// A side of a tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's connection (downstream).
    Client,
    /// The upstream's connection.
    Upstream,
}

/// A pipe's failure: whether its reading or its writing end failed.
#[derive(Debug)]
struct PipeError {
    reading: bool,
    error: io::Error,
}

impl PipeError {
    fn reading(error: io::Error) -> PipeError {
        PipeError {
            reading: true,
            error,
        }
    }

    fn writing(error: io::Error) -> PipeError {
        PipeError {
            reading: false,
            error,
        }
    }
}

/// What went through a tunnel, and how it ended.
#[derive(Debug)]
pub struct TunnelStats {
    /// Bytes read from the client (towards the upstream).
    pub bytes_in: u64,
    /// Bytes written to the client (from the upstream).
    pub bytes_out: u64,
    /// How it ended.
    pub end: TunnelEnd,
}

/// Copies bytes both ways between `client` and `upstream` until both
/// directions ended, one side failed, no byte moved for `idle`, or `close`
/// turns true. Both are dropped (closed) when it returns.
///
/// # Cancel safety
/// Dropping the future closes both sides; nothing else is lost.
pub async fn run<C, U>(
    client: C,
    mut upstream: U,
    idle: Duration,
    mut close: watch::Receiver<bool>,
) -> TunnelStats
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let meter = Arc::new(Meter::new());
    let mut client = Metered {
        io: client,
        meter: Arc::clone(&meter),
    };
    let end = {
        let mut up = Pipe::new();
        let mut down = Pipe::new();
        let copy = std::future::poll_fn(|cx| {
            let to_upstream = up.poll_pipe(cx, &mut client, &mut upstream);
            let to_client = down.poll_pipe(cx, &mut upstream, &mut client);
            // Client to upstream reads the client and writes the upstream;
            // upstream to client the other way round.
            match (to_upstream, to_client) {
                (Poll::Ready(Err(e)), _) => {
                    let side = if e.reading {
                        Side::Client
                    } else {
                        Side::Upstream
                    };
                    Poll::Ready(Err((side, e.error)))
                }
                (_, Poll::Ready(Err(e))) => {
                    let side = if e.reading {
                        Side::Upstream
                    } else {
                        Side::Client
                    };
                    Poll::Ready(Err((side, e.error)))
                }
                (Poll::Ready(Ok(())), _) | (_, Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
                _ => Poll::Pending,
            }
        });
        tokio::pin!(copy);
        loop {
            let due = meter.last_activity() + idle;
            tokio::select! {
                res = &mut copy => break match res {
                    Ok(_) => TunnelEnd::Closed,
                    Err((side, error)) => TunnelEnd::Failed { side, error },
                },
                () = tokio::time::sleep_until(due) => {
                    if meter.last_activity() + idle <= Instant::now() {
                        break TunnelEnd::IdleTimeout { ms: idle.as_millis() as u64 };
                    }
                }
                _ = close.wait_for(|closed| *closed) => break TunnelEnd::Shutdown,
            }
        }
    };
    TunnelStats {
        bytes_in: meter.read.load(Ordering::Relaxed),
        bytes_out: meter.written.load(Ordering::Relaxed),
        end,
    }
}

/// One direction of a tunnel: a fixed buffer between a reader and a writer.
#[derive(Debug)]
struct Pipe {
    buf: Box<[u8]>,
    /// The bytes read and not written yet: `buf[start..end]`.
    start: usize,
    end: usize,
    /// The reader ended.
    eof: bool,
    /// Bytes were written since the last flush.
    unflushed: bool,
}

impl Pipe {
    fn new() -> Pipe {
        Pipe {
            buf: vec![0u8; BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            unflushed: false,
        }
    }

    /// Moves bytes from `from` to `to`, reading only into an empty buffer
    /// (so a writer that does not take them stops the reading), flushing
    /// `to` whenever `from` has nothing more yet. Ready once `from` ended
    /// and that end was passed on (`to` flushed and shut down).
    fn poll_pipe<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut R,
        to: &mut W,
    ) -> Poll<Result<(), PipeError>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            while self.start < self.end {
                let n = std::task::ready!(
                    Pin::new(&mut *to).poll_write(cx, &self.buf[self.start..self.end])
                )
                .map_err(PipeError::writing)?;
                if n == 0 {
                    return Poll::Ready(Err(PipeError::writing(io::ErrorKind::WriteZero.into())));
                }
                self.start += n;
                self.unflushed = true;
            }
            if self.eof {
                std::task::ready!(Pin::new(&mut *to).poll_flush(cx)).map_err(PipeError::writing)?;
                std::task::ready!(Pin::new(&mut *to).poll_shutdown(cx))
                    .map_err(PipeError::writing)?;
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut self.buf);
            match Pin::new(&mut *from).poll_read(cx, &mut read) {
                Poll::Ready(res) => {
                    res.map_err(PipeError::reading)?;
                    let n = read.filled().len();
                    (self.start, self.end, self.eof) = (0, n, n == 0);
                }
                Poll::Pending => {
                    if self.unflushed {
                        std::task::ready!(Pin::new(&mut *to).poll_flush(cx))
                            .map_err(PipeError::writing)?;
                        self.unflushed = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Bytes through the client side of a tunnel, and when the last moved.
#[derive(Debug)]
struct Meter {
    start: Instant,
    /// Milliseconds from `start` to the last byte moved.
    last_ms: AtomicU64,
    read: AtomicU64,
    written: AtomicU64,
}

impl Meter {
    fn new() -> Meter {
        Meter {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            read: AtomicU64::new(0),
            written: AtomicU64::new(0),
        }
    }

    fn moved(&self, counter: &AtomicU64, n: usize) {
        if n > 0 {
            counter.fetch_add(n as u64, Ordering::Relaxed);
            let ms = self.start.elapsed().as_millis() as u64;
            self.last_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    fn last_activity(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// The client side of a tunnel, counting what moves through it.
#[derive(Debug)]
struct Metered<T> {
    io: T,
    meter: Arc<Meter>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let res = Pin::new(&mut this.io).poll_read(cx, buf);
        this.meter
            .moved(&this.meter.read, buf.filled().len() - before);
        res
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let res = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &res {
            this.meter.moved(&this.meter.written, *n);
        }
        res
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn bytes_go_both_ways_and_an_end_of_stream_is_passed_on_then_closes_both() {
        let (client, mut client_peer) = tokio::io::duplex(64);
        let (upstream, mut upstream_peer) = tokio::io::duplex(64);
        let tunnels = Tunnels::default();
        let task = tokio::spawn(run(
            client,
            upstream,
            Duration::from_secs(5),
            tunnels.admit(),
        ));
        client_peer.write_all(b"ping").await.expect("write");
        let mut buf = [0u8; 4];
        upstream_peer.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"ping");
        upstream_peer.write_all(b"pong!").await.expect("write");
        upstream_peer.shutdown().await.expect("shutdown");
        let mut got = Vec::new();
        client_peer.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"pong!", "the upstream's EOF reaches the client");
        let stats = task.await.expect("task");
        let mut rest = Vec::new();
        let _ = upstream_peer.read_to_end(&mut rest).await;
        assert!(rest.is_empty(), "the upstream side is closed too");
        assert!(matches!(stats.end, TunnelEnd::Closed), "{:?}", stats.end);
        assert_eq!((stats.bytes_in, stats.bytes_out), (4, 5));
        assert_eq!(tunnels.live(), 0);
    }

    #[tokio::test]
    async fn an_idle_tunnel_is_closed_and_close_all_ends_the_rest() {
        let (client, _client_peer) = tokio::io::duplex(64);
        let (upstream, _upstream_peer) = tokio::io::duplex(64);
        let tunnels = Tunnels::default();
        let stats = run(
            client,
            upstream,
            Duration::from_millis(300),
            tunnels.admit(),
        )
        .await;
        assert!(
            matches!(stats.end, TunnelEnd::IdleTimeout { ms: 300 }),
            "{:?}",
            stats.end
        );
        let (client, _client_peer) = tokio::io::duplex(64);
        let (upstream, _upstream_peer) = tokio::io::duplex(64);
        let task = tokio::spawn(run(
            client,
            upstream,
            Duration::from_secs(60),
            tunnels.admit(),
        ));
        tokio::task::yield_now().await;
        assert_eq!(tunnels.live(), 1);
        tunnels.close_all();
        let stats = task.await.expect("task");
        assert!(matches!(stats.end, TunnelEnd::Shutdown), "{:?}", stats.end);
        tokio::time::timeout(Duration::from_secs(1), tunnels.drained())
            .await
            .expect("drained");
    }
}
