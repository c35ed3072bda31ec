//! Listeners: accept connections, serve HTTP/1.1 and HTTP/2 (prior
//! knowledge) on each, and shut down gracefully; and the admin listener
//! ([`crate::admin`]) beside them.
//!
//! A TLS listener ([`crate::tls`]) runs the handshake on the connection's
//! own task, never on the accept loop, under the `header_read_timeout`
//! deadline; then serves HTTP/2 if ALPN chose `h2`, HTTP/1.1 otherwise.
//! The deadlines of `DownstreamIo` wrap the decrypted stream, so they
//! count request bytes, not TLS records.
//!
//! Connections are served with upgrades on (an HTTP/1.1 connection can
//! switch protocols, RFC 9110 §7.8) and HTTP/2's extended CONNECT (RFC
//! 8441 §3), so that routes with `upgrade` can tunnel WebSockets. On
//! shutdown, tunnels ([`crate::tunnel`]) get the same grace period as
//! in-flight requests, and are then closed.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::admin::AdminState;
use crate::config::Config;
use crate::io::DownstreamIo;
use crate::proxy::Proxy;

/// How long shutdown waits for closed tunnels to write their log lines.
const TUNNEL_CLOSE_WAIT: Duration = Duration::from_millis(500);

/// Bound listeners and the proxy that serves them.
#[derive(Debug)]
pub struct Server {
    proxy: Arc<Proxy>,
    /// Each bound listener, with its TLS config if it terminates TLS.
    listeners: Vec<(TcpListener, Option<Arc<rustls::ServerConfig>>)>,
    admin: Option<TcpListener>,
    header_read_timeout: Duration,
    connection_idle_timeout: Duration,
    shutdown_grace: Duration,
}

impl Server {
    /// Binds every listener of `config` and builds the proxy.
    ///
    /// # Errors
    /// The first bind error (a listener's, then the admin listener's), naming
    /// the address; a listener's TLS settings that rustls refuses; or an
    /// unresolved embedded upstream.
    pub async fn bind(config: &Config) -> io::Result<Server> {
        let proxy = Proxy::new(config).map_err(io::Error::other)?;
        let mut listeners = Vec::with_capacity(config.listeners.len());
        for spec in &config.listeners {
            let addr = spec.address;
            let tls = match &spec.tls {
                Some(settings) => Some(crate::tls::server_config(settings).map_err(|e| {
                    io::Error::other(format!("cannot set up TLS on listener {addr}: {e}"))
                })?),
                None => None,
            };
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            listeners.push((listener, tls));
        }
        proxy.start_health_checks();
        let admin = match &config.admin {
            Some(admin) => Some(TcpListener::bind(admin.address).await.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot serve the admin endpoint ([admin] address) on {}: {e}",
                        admin.address
                    ),
                )
            })?),
            None => None,
        };
        Ok(Server {
            proxy,
            listeners,
            admin,
            header_read_timeout: config.server.header_read_timeout,
            connection_idle_timeout: connection_idle_timeout(config),
            shutdown_grace: config.server.shutdown_grace,
        })
    }

    /// The bound addresses (useful when the config asked for port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|(l, _)| l.local_addr().ok())
            .collect()
    }

    /// The admin listener's bound address (`/metrics`, `/healthz`), or
    /// `None` when `[admin] enabled = false`.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Live upstream connection counts (see [`crate::counted`]); the handle
    /// stays valid after [`Server::run`] takes the server.
    pub fn upstream_connections(&self) -> Arc<crate::counted::ConnectionCounts> {
        Arc::clone(self.proxy.upstream_connections())
    }

    /// The proxy's metrics (the counts tests read, too).
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        Arc::clone(self.proxy.metrics())
    }

    /// Serves until `shutdown` resolves; then stops accepting, and lets
    /// in-flight requests finish for up to the configured grace period.
    ///
    /// # Errors
    /// None today; the signature leaves room for listener failures.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        let limits = &self.proxy.settings.limits;
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .keep_alive(true);
        if limits.max_head_bytes > HYPER_MAX_BUF {
            // The read buffer must hold the whole head. Below hyper's own
            // size it is left alone: it also bounds what hyper queues for
            // writing, and large responses would flush more often. The
            // head limit itself is checked in `request::filter`.
            builder.http1().max_buf_size(limits.max_head_bytes);
        }
        if limits.max_headers != HYPER_MAX_HEADERS {
            // Any other count makes hyper allocate the field array per request.
            builder.http1().max_headers(limits.max_headers);
        }
        builder
            .http2()
            .timer(TokioTimer::new())
            .enable_connect_protocol()
            // h2 refuses a list of this size or more with a 431.
            .max_header_list_size(
                u32::try_from(limits.max_head_bytes.saturating_add(1)).unwrap_or(u32::MAX),
            );
        let conns = Arc::new(Connections {
            proxy: Arc::clone(&self.proxy),
            http1: builder.clone().http1_only(),
            http2: builder.clone().http2_only(),
            auto: builder,
            header_read_timeout: self.header_read_timeout,
            connection_idle_timeout: self.connection_idle_timeout,
        });

        // One accept task per listener, all feeding one loop.
        let (tx, mut rx) = mpsc::channel::<Accepted>(64);
        let mut accept_tasks = Vec::new();
        for (listener, tls) in self.listeners {
            let tx = tx.clone();
            let tls = tls.map(TlsAcceptor::from);
            accept_tasks.push(tokio::spawn(accept_loop(listener, tls, tx)));
        }
        drop(tx);

        let admin_state = Arc::new(AdminState::new(Arc::clone(self.proxy.metrics())));
        let (stop_admin, stop_admin_rx) = watch::channel(false);
        let admin_task = self.admin.map(|listener| {
            tokio::spawn(crate::admin::serve(
                listener,
                Arc::clone(&admin_state),
                stop_admin_rx,
            ))
        });

        let graceful = GracefulShutdown::new();
        // Flipped when the grace period is over: connection tasks still
        // running drop their connection at once.
        let (force_close, force_close_rx) = watch::channel(false);
        tokio::pin!(shutdown);
        let slots = Arc::new(tokio::sync::Semaphore::new(
            self.proxy.settings.limits.max_connections,
        ));
        let metrics = Arc::clone(self.proxy.metrics());
        loop {
            // A slot of `max_connections` first: while none is free, new
            // connections wait in the listen backlog.
            let slot = match Arc::clone(&slots).try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    metrics.downstream_waits.inc();
                    tokio::select! {
                        slot = Arc::clone(&slots).acquire_owned() => match slot {
                            Ok(slot) => slot,
                            Err(_) => break,
                        },
                        () = &mut shutdown => break,
                    }
                }
            };
            let (stream, peer, tls) = tokio::select! {
                conn = rx.recv() => match conn {
                    Some(conn) => conn,
                    None => break,
                },
                () = &mut shutdown => break,
            };
            // Taken here, before the handshake: shutdown waits for
            // connections still in their handshake too.
            let watcher = graceful.watcher();
            let conns = Arc::clone(&conns);
            let mut force_close = force_close_rx.clone();
            let open = OpenConnection::new(slot, metrics.downstream_open.clone());
            tokio::spawn(async move {
                let _open = open;
                tokio::select! {
                    () = conns.serve(stream, peer, tls, watcher) => {}
                    _ = force_close.wait_for(|closed| *closed) => {
                        tracing::debug!(target: "weir::server", %peer, "connection closed: grace period over");
                    }
                }
            });
        }

        for task in &accept_tasks {
            task.abort();
        }
        drop(rx);
        // The admin listener stays up while requests drain, saying so.
        admin_state.set_draining();
        let tunnels = Arc::clone(self.proxy.tunnels());
        tracing::info!(
            target: "weir::server",
            connections = graceful.count(),
            tunnels = tunnels.live(),
            grace_ms = self.shutdown_grace.as_millis() as u64,
            "shutting down: no longer accepting, waiting for in-flight requests"
        );
        // Upgraded HTTP/1.1 connections have left hyper (their connection
        // futures ended with the switch): the tunnels are waited for
        // beside the connections, within the same grace period.
        let drained = async {
            graceful.shutdown().await;
            tunnels.drained().await;
        };
        if tokio::time::timeout(self.shutdown_grace, drained)
            .await
            .is_err()
        {
            tracing::warn!(target: "weir::server", tunnels = tunnels.live(), "grace period over; closing the remaining connections and tunnels");
            self.proxy.mark_shutdown_cut();
            let _ = force_close.send(true);
            tunnels.close_all();
            // Let the connection tasks run their drops (and access log
            // lines), and the tunnels theirs, for a moment.
            tokio::task::yield_now().await;
            let _ = tokio::time::timeout(TUNNEL_CLOSE_WAIT, tunnels.drained()).await;
        }
        let _ = stop_admin.send(true);
        if let Some(task) = admin_task {
            let _ = task.await;
        }
        Ok(())
    }
}

/// One downstream connection's slot of `max_connections`, counted in
/// `weir_downstream_connections` while it lives.
struct OpenConnection {
    _slot: tokio::sync::OwnedSemaphorePermit,
    gauge: prometheus_client::metrics::gauge::Gauge,
}

impl OpenConnection {
    fn new(
        slot: tokio::sync::OwnedSemaphorePermit,
        gauge: prometheus_client::metrics::gauge::Gauge,
    ) -> Self {
        gauge.inc();
        OpenConnection { _slot: slot, gauge }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// hyper's HTTP/1.1 field count, kept on the stack (hyper's default).
const HYPER_MAX_HEADERS: usize = 100;
/// hyper's default HTTP/1.1 buffer bound, in bytes (8 KiB + 100 × 4 KiB).
const HYPER_MAX_BUF: usize = 8192 + 4096 * 100;

/// Logs why a connection ended badly, at a level that fits the cause.
///
/// Malformed requests and timeouts are the client's doing and worth a line;
/// a response body that failed is already in the access log.
fn log_connection_error(peer: SocketAddr, err: &(dyn std::error::Error + 'static)) {
    let body_failed = error_chain_has::<weir_stream::StreamError>(err);
    let chain = crate::upstream::error_chain(err);
    // hyper's own text often starts with the words of our message.
    let detail = chain.strip_prefix("connection error: ").unwrap_or(&chain);
    if body_failed {
        tracing::debug!(target: "weir::server", %peer, "connection closed after a body failed: {detail}");
    } else {
        tracing::info!(target: "weir::server", %peer, "connection error: {detail}");
    }
}

fn error_chain_has<E: std::error::Error + 'static>(
    err: &(dyn std::error::Error + 'static),
) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if e.is::<E>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// How long a downstream connection may see no byte move either way:
/// `header_read_timeout + max(body_idle_timeout, response_header_timeout)`.
///
/// Longer than any wait a healthy request has (waiting for the upstream's
/// head, or for the next piece of a body), so it only ends connections that
/// nothing else bounds: idle HTTP/2 connections and clients that stopped
/// reading.
pub fn connection_idle_timeout(config: &Config) -> Duration {
    config.server.header_read_timeout
        + config
            .server
            .body_idle_timeout
            .max(config.client.response_header_timeout)
}

/// An accepted connection: the socket, its peer, and the listener's TLS
/// acceptor if it terminates TLS.
type Accepted = (TcpStream, SocketAddr, Option<TlsAcceptor>);

/// One listener's accept loop ([`weir_net::AcceptLoop`]: `TCP_NODELAY`, the
/// accept-error rule): hands each connection to the serve loop through `tx`,
/// waiting while its queue is full; ends once the receiver is gone. The TLS
/// handshake is not done here, but on the connection's task.
async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, tx: mpsc::Sender<Accepted>) {
    let tx = &tx;
    let tls = &tls;
    weir_net::AcceptLoop::new(&listener)
        .run(tx.closed(), |stream, peer| async move {
            // Fails only once the receiver is gone, which `closed` sees too.
            let _ = tx.send((stream, peer, tls.clone())).await;
        })
        .await;
}

/// What every connection task shares: the proxy, the connection builders
/// and the downstream deadlines.
struct Connections {
    proxy: Arc<Proxy>,
    /// Cleartext: HTTP/1.1 or HTTP/2 prior knowledge, told apart by the
    /// first bytes.
    auto: auto::Builder<TokioExecutor>,
    /// TLS without ALPN `h2`.
    http1: auto::Builder<TokioExecutor>,
    /// TLS with ALPN `h2`.
    http2: auto::Builder<TokioExecutor>,
    header_read_timeout: Duration,
    connection_idle_timeout: Duration,
}

impl Connections {
    /// Serves one accepted connection to its end: the TLS handshake first
    /// on a TLS listener, then HTTP.
    async fn serve(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        tls: Option<TlsAcceptor>,
        watcher: Watcher,
    ) {
        let Some(acceptor) = tls else {
            return self
                .serve_http(stream, peer, false, &self.auto, watcher)
                .await;
        };
        match crate::tls::handshake(&acceptor, stream, self.header_read_timeout).await {
            Ok(stream) => {
                let builder = if crate::tls::negotiated_h2(&stream) {
                    &self.http2
                } else {
                    &self.http1
                };
                self.serve_http(stream, peer, true, builder, watcher).await;
            }
            Err(e) => {
                self.proxy.metrics().tls_handshake_error();
                if e.peer_left() {
                    tracing::debug!(target: "weir::server", %peer, "{e}");
                } else {
                    tracing::info!(target: "weir::server", %peer, "{e}");
                }
            }
        }
    }

    /// Serves HTTP on `stream` (a socket, or a TLS stream over one) with
    /// `builder`, until the connection ends or shutdown closes it.
    async fn serve_http<S>(
        &self,
        stream: S,
        peer: SocketAddr,
        tls: bool,
        builder: &auto::Builder<TokioExecutor>,
        watcher: Watcher,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let proxy = Arc::clone(&self.proxy);
        let downstream = Arc::new(proxy.downstream(peer, tls));
        let downstream_tunnels = Arc::clone(&downstream.tunnels);
        let service = service_fn(move |req| {
            let proxy = proxy.clone();
            let downstream = Arc::clone(&downstream);
            async move { Ok::<_, Infallible>(proxy.handle(req, &downstream).await) }
        });
        let io = TokioIo::new(DownstreamIo::new(
            stream,
            self.header_read_timeout,
            self.connection_idle_timeout,
            downstream_tunnels,
        ));
        let conn = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        if let Err(e) = watcher.watch(conn).await {
            log_connection_error(peer, &*e);
        }
    }
}
