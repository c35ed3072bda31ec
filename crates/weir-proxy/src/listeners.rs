//! The proxy's listeners, as a set a reload can change while it serves:
//! one accept task per listener, all feeding the serve loop of
//! [`crate::server`] through one channel.
//!
//! Each listener keeps its own graceful-shutdown group, so a listener a
//! reload removes stops accepting at once while its connections finish
//! (asked to close, then cut after `shutdown_grace`), as on shutdown. Its
//! TLS settings sit behind an atomic pointer that the accept task reads per
//! connection, so a reload swaps certificates without closing the socket.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// An accepted connection, as the serve loop gets it.
pub(crate) struct Accepted {
    /// The socket.
    pub(crate) stream: TcpStream,
    /// Its peer.
    pub(crate) peer: SocketAddr,
    /// The listener's TLS acceptor if it terminates TLS (as it was when
    /// the connection came).
    pub(crate) tls: Option<TlsAcceptor>,
    /// Its place in its listener's graceful-shutdown group, taken at accept
    /// time: a drain waits for connections still in their handshake too.
    pub(crate) watcher: Watcher,
    /// Turns true when the grace period of its listener's drain is over.
    pub(crate) force_close: watch::Receiver<bool>,
}

/// One open listener.
struct Listener {
    /// The configured address (port 0 stays 0): what reloads compare.
    address: SocketAddr,
    /// The bound address.
    local: Option<SocketAddr>,
    tls: Arc<ArcSwapOption<ServerConfig>>,
    /// `None` once the listener is closing.
    drain: Arc<Mutex<Option<GracefulShutdown>>>,
    force_close: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The connections of a listener that stopped accepting.
pub(crate) struct Drain {
    graceful: GracefulShutdown,
    force_close: watch::Sender<bool>,
}

impl Drain {
    /// Connections still open.
    pub(crate) fn count(&self) -> usize {
        self.graceful.count()
    }

    /// The graceful group (asked to close by its `shutdown`) and the
    /// sender that cuts what is left.
    pub(crate) fn split(self) -> (GracefulShutdown, watch::Sender<bool>) {
        (self.graceful, self.force_close)
    }

    /// Asks every connection to close after its current request, waits up
    /// to `grace`, then cuts the rest.
    pub(crate) async fn finish(self, grace: Duration) {
        let (graceful, force_close) = self.split();
        if tokio::time::timeout(grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(target: "weir::server", "removed listener: grace period over; closing its remaining connections");
            force_close.send_replace(true);
        }
    }
}

/// Every open listener, and the channel their connections go to.
pub(crate) struct ListenerSet {
    tx: mpsc::Sender<Accepted>,
    open: Mutex<Vec<Listener>>,
}

impl ListenerSet {
    /// An empty set whose listeners send to `tx`.
    pub(crate) fn new(tx: mpsc::Sender<Accepted>) -> ListenerSet {
        ListenerSet {
            tx,
            open: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Listener>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts accepting on `listener` (configured as `address`), with TLS
    /// when `tls` is given. Call on the runtime that serves.
    pub(crate) fn open(
        &self,
        address: SocketAddr,
        listener: TcpListener,
        tls: Option<Arc<ServerConfig>>,
    ) {
        let tls = Arc::new(ArcSwapOption::new(tls));
        let drain = Arc::new(Mutex::new(Some(GracefulShutdown::new())));
        let (force_close, force_rx) = watch::channel(false);
        let local = listener.local_addr().ok();
        let task = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&tls),
            Arc::clone(&drain),
            force_rx,
            self.tx.clone(),
        ));
        self.lock().push(Listener {
            address,
            local,
            tls,
            drain,
            force_close,
            task,
        });
    }

    /// The configured addresses, in opening order.
    pub(crate) fn addresses(&self) -> Vec<SocketAddr> {
        self.lock().iter().map(|l| l.address).collect()
    }

    /// The bound addresses, in opening order.
    pub(crate) fn local_addrs(&self) -> Vec<SocketAddr> {
        self.lock().iter().filter_map(|l| l.local).collect()
    }

    /// Replaces the TLS settings of the listener configured as `address`
    /// (`None`: cleartext); connections accepted from now on use them.
    pub(crate) fn set_tls(&self, address: SocketAddr, tls: Option<Arc<ServerConfig>>) {
        if let Some(l) = self.lock().iter().find(|l| l.address == address) {
            l.tls.store(tls);
        }
    }

    /// Stops the listener configured as `address`: once this returns its
    /// socket is closed (new connections are refused); its connections
    /// are left to the returned drain.
    pub(crate) async fn close(&self, address: SocketAddr) -> Option<Drain> {
        let listener = {
            let mut open = self.lock();
            let at = open.iter().position(|l| l.address == address)?;
            open.remove(at)
        };
        Some(stop(listener).await)
    }

    /// Stops every listener (shutdown); see [`ListenerSet::close`].
    pub(crate) async fn close_all(&self) -> Vec<Drain> {
        let listeners = std::mem::take(&mut *self.lock());
        let mut drains = Vec::with_capacity(listeners.len());
        for l in listeners {
            drains.push(stop(l).await);
        }
        drains
    }
}

/// Ends `l`'s accept task (dropping its socket) and takes its drain.
async fn stop(l: Listener) -> Drain {
    l.task.abort();
    let _ = l.task.await;
    let graceful = l
        .drain
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .unwrap_or_default();
    Drain {
        graceful,
        force_close: l.force_close,
    }
}

/// One listener's accept loop ([`weir_net::AcceptLoop`]: `TCP_NODELAY`, the
/// accept-error rule): hands each connection to the serve loop through `tx`,
/// waiting while its queue is full; ends once the receiver is gone or the
/// task is aborted. The TLS handshake is not done here, but on the
/// connection's task.
async fn accept_loop(
    listener: TcpListener,
    tls: Arc<ArcSwapOption<ServerConfig>>,
    drain: Arc<Mutex<Option<GracefulShutdown>>>,
    force_close: watch::Receiver<bool>,
    tx: mpsc::Sender<Accepted>,
) {
    let tx = &tx;
    weir_net::AcceptLoop::new(&listener)
        .run(tx.closed(), |stream, peer| {
            let watcher = drain
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map(GracefulShutdown::watcher);
            let accepted = watcher.map(|watcher| Accepted {
                stream,
                peer,
                tls: tls.load_full().map(TlsAcceptor::from),
                watcher,
                force_close: force_close.clone(),
            });
            async move {
                // `None`: the listener is closing; the socket is dropped.
                if let Some(accepted) = accepted {
                    // Fails only once the receiver is gone, which `closed` sees too.
                    let _ = tx.send(accepted).await;
                }
            }
        })
        .await;
}
