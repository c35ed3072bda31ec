//! The accept loop: accept, set `TCP_NODELAY`, hand over, until stopped.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;

use tokio::net::{TcpListener, TcpStream};

use crate::{Backoff, ErrorClass, classify};

/// The accept loop of one listener (see the [crate docs](crate) for how it
/// treats accept errors).
///
/// Built on a borrowed listener, so the caller decides when the listener
/// closes (typically right after [`AcceptLoop::run`] returns, before
/// draining its connections).
///
/// ```no_run
/// # async fn example(listener: tokio::net::TcpListener) {
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// # drop(stop);
/// weir_net::AcceptLoop::new(&listener)
///     .run(
///         async {
///             let _ = stopped.await;
///         },
///         |stream, peer| {
///             tokio::spawn(async move {
///                 // serve `stream` from `peer`
/// #               drop((stream, peer));
///             });
///             async {}
///         },
///     )
///     .await;
/// drop(listener); // new connections are refused from here on
/// # }
/// ```
#[derive(Debug)]
#[must_use = "nothing is accepted until `run` is awaited"]
pub struct AcceptLoop<'l> {
    listener: &'l TcpListener,
    nodelay: bool,
}

impl<'l> AcceptLoop<'l> {
    /// A loop over `listener` that sets `TCP_NODELAY` on accepted sockets.
    pub fn new(listener: &'l TcpListener) -> Self {
        AcceptLoop {
            listener,
            nodelay: true,
        }
    }

    /// Whether to set `TCP_NODELAY` on each accepted socket (default: yes).
    /// A socket that refuses it is still handed over; the failure is logged
    /// at debug.
    pub fn nodelay(mut self, on: bool) -> Self {
        self.nodelay = on;
        self
    }

    /// Accepts connections until `stop` resolves, handing each one to
    /// `handler` and awaiting the future it returns before accepting the
    /// next one.
    ///
    /// A handler that serves connections concurrently spawns a task and
    /// returns a ready future (`async {}`); one that awaits (a bounded
    /// channel's `send`, say) holds the next accept back until it is done,
    /// and connections wait in the listener's backlog meanwhile.
    ///
    /// `stop` is polled first, then raced against the accept, the back-off
    /// pause and the handler's future: once it resolves the loop returns at
    /// once, even if a connection is waiting; a connection the handler's
    /// future still held is dropped with it. Accept errors never end the
    /// loop (the crate docs have the rule): per-connection errors are
    /// retried at once, others are logged as a warning and retried after a
    /// [`Backoff`] delay (10 ms doubling to 1 s, reset by a success), so a
    /// lasting shortage logs about one line a second.
    ///
    /// # Errors
    ///
    /// None: it only returns when `stop` resolves.
    ///
    /// # Panics
    ///
    /// If an accept error has to be waited out outside a tokio runtime with
    /// the time driver enabled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the loop at once, like `stop`: connections
    /// not yet accepted stay queued on the listener, and one whose handler
    /// future had not completed is dropped (closed) with that future.
    pub async fn run<S, H, F>(self, stop: S, mut handler: H)
    where
        S: Future<Output = ()>,
        H: FnMut(TcpStream, SocketAddr) -> F,
        F: Future<Output = ()>,
    {
        let nodelay = self.nodelay;
        let mut accepter = Accepter {
            listener: self.listener,
            backoff: Backoff::new(),
            failures: 0,
        };
        let mut stop = pin!(stop);
        loop {
            let next = async {
                let (stream, peer) = accepter.accept().await;
                if nodelay && let Err(err) = stream.set_nodelay(true) {
                    tracing::debug!(target: "weir::accept", %peer, error = %err, "could not set TCP_NODELAY");
                }
                handler(stream, peer).await;
            };
            tokio::select! {
                biased;
                () = &mut stop => return,
                () = next => {}
            }
        }
    }
}

/// `accept` with the error rule applied: returns only connections.
struct Accepter<'l> {
    listener: &'l TcpListener,
    backoff: Backoff,
    /// Back-off errors since the last accepted connection.
    failures: u64,
}

impl Accepter<'_> {
    /// The next connection, after as many retries and pauses as the errors
    /// before it ask for. Dropping the future loses no connection, only the
    /// rest of a pause.
    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let err = match self.listener.accept().await {
                Ok(conn) => {
                    if self.failures > 0 {
                        tracing::info!(
                            target: "weir::accept",
                            listener = %self.local_addr(),
                            failures = self.failures,
                            "accepting again"
                        );
                    }
                    self.failures = 0;
                    self.backoff.reset();
                    return conn;
                }
                Err(err) => err,
            };
            match classify(&err) {
                ErrorClass::PerConnection => {
                    tracing::debug!(
                        target: "weir::accept",
                        listener = %self.local_addr(),
                        error = %err,
                        "accept failed for one connection; accepting the next"
                    );
                }
                class => {
                    self.failures += 1;
                    let delay = self.backoff.next_delay();
                    tracing::warn!(
                        target: "weir::accept",
                        listener = %self.local_addr(),
                        error = %err,
                        ?class,
                        failures = self.failures,
                        retry_in_ms = delay.as_millis() as u64,
                        "accept failed; pausing before the next accept"
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// The listener's address for log lines (`?` if it cannot be had).
    fn local_addr(&self) -> String {
        self.listener
            .local_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string())
    }
}
