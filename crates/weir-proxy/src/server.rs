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
//!
//! The proxy is behind an `ArcSwap` loaded once per request, so a reload
//! ([`crate::reload`]) reaches the next request of every open connection;
//! the listeners are a set (the private `listeners` module) a reload can change.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::admin::AdminState;
use crate::config::Config;
use crate::io::DownstreamIo;
use crate::listeners::{Accepted, Drain, ListenerSet};
use crate::proxy::Proxy;
use crate::reload::{ConfigSource, Reloader};

/// How long shutdown waits for closed tunnels to write their log lines.
const TUNNEL_CLOSE_WAIT: Duration = Duration::from_millis(500);

/// Bound listeners and the proxy that serves them.
pub struct Server {
    /// The proxy in effect: each request loads it once (a reload swaps it).
    state: Arc<ArcSwap<Proxy>>,
    /// The listeners; their accept tasks run from [`Server::bind`] on.
    listeners: Arc<ListenerSet>,
    /// Their accepted connections.
    accepted: mpsc::Receiver<Accepted>,
    admin: Option<TcpListener>,
    /// The config bound, with embedded upstreams resolved (the base of a reload).
    config: Config,
    reloader: Option<Arc<Reloader>>,
    header_read_timeout: Duration,
    connection_idle_timeout: Duration,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listeners", &self.listeners.local_addrs())
            .field("admin", &self.admin_addr())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds every listener of `config` and builds the proxy. The
    /// listeners accept from now on; connections wait for [`Server::run`].
    ///
    /// # Errors
    /// The first bind error (a listener's, then the admin listener's), naming
    /// the address; a listener's TLS settings that rustls refuses; or an
    /// unresolved embedded upstream.
    pub async fn bind(config: &Config) -> io::Result<Server> {
        let proxy = Proxy::new(config).map_err(io::Error::other)?;
        let mut bound = Vec::with_capacity(config.listeners.len());
        for spec in &config.listeners {
            let (listener, tls) = crate::reload::bind_listener(spec).await?;
            bound.push((spec.address, listener, tls));
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
        let (tx, accepted) = mpsc::channel::<Accepted>(64);
        let listeners = Arc::new(ListenerSet::new(tx));
        for (address, listener, tls) in bound {
            listeners.open(address, listener, tls);
        }
        Ok(Server {
            state: Arc::new(ArcSwap::new(proxy)),
            listeners,
            accepted,
            admin,
            config: config.clone(),
            reloader: None,
            header_read_timeout: config.server.header_read_timeout,
            connection_idle_timeout: connection_idle_timeout(config),
        })
    }

    /// Turns reloads on: the returned handle (also behind the admin
    /// listener's `POST /reload`) re-reads the config from `source` and
    /// swaps it in. `embedded` names each started embedded origin, with its
    /// upstream, address and settings.
    pub fn enable_reload(
        &mut self,
        source: ConfigSource,
        embedded: Vec<crate::reload::StartedOrigin>,
    ) -> Arc<Reloader> {
        let reloader = Arc::new(Reloader::new(
            source,
            embedded,
            Arc::clone(&self.state),
            Arc::clone(&self.listeners),
            self.config.clone(),
        ));
        self.reloader = Some(Arc::clone(&reloader));
        reloader
    }

    /// The bound addresses (useful when the config asked for port 0), in
    /// config order (after a reload: kept ones first, then new ones).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.local_addrs()
    }

    /// The admin listener's bound address (`/metrics`, `/healthz`), or
    /// `None` when `[admin] enabled = false`.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Live upstream connection counts (see [`crate::counted`]); the handle
    /// stays valid after [`Server::run`] takes the server.
    pub fn upstream_connections(&self) -> Arc<crate::counted::ConnectionCounts> {
        Arc::clone(self.state.load().upstream_connections())
    }

    /// The proxy's metrics (the counts tests read, too).
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        Arc::clone(self.state.load().metrics())
    }

    /// Serves until `shutdown` resolves; then stops accepting, and lets
    /// in-flight requests finish for up to the configured grace period.
    ///
    /// # Errors
    /// None today; the signature leaves room for listener failures.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        let proxy = self.state.load_full();
        let mut builder = auto::Builder::new(TokioExecutor::new());
        let limits = &proxy.settings.limits;
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
            state: Arc::clone(&self.state),
            http1: builder.clone().http1_only(),
            http2: builder.clone().http2_only(),
            auto: builder,
            header_read_timeout: self.header_read_timeout,
            connection_idle_timeout: self.connection_idle_timeout,
        });

        let admin_state = Arc::new(AdminState::new(Arc::clone(proxy.metrics())));
        if let Some(reloader) = &self.reloader {
            admin_state.set_reloader(Arc::clone(reloader));
        }
        let (stop_admin, stop_admin_rx) = watch::channel(false);
        let admin_task = self.admin.take().map(|listener| {
            tokio::spawn(crate::admin::serve(
                listener,
                Arc::clone(&admin_state),
                stop_admin_rx,
            ))
        });

        tokio::pin!(shutdown);
        let slots = Arc::new(tokio::sync::Semaphore::new(
            proxy.settings.limits.max_connections,
        ));
        let metrics = Arc::clone(proxy.metrics());
        // Reloads keep the tunnels and the shutdown flag.
        let tunnels = Arc::clone(proxy.tunnels());
        drop(proxy);
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
            let accepted = tokio::select! {
                conn = self.accepted.recv() => match conn {
                    Some(conn) => conn,
                    None => break,
                },
                () = &mut shutdown => break,
            };
            let conns = Arc::clone(&conns);
            let open = OpenConnection::new(slot, metrics.downstream_open.clone());
            tokio::spawn(async move {
                let _open = open;
                let Accepted {
                    stream,
                    peer,
                    tls,
                    watcher,
                    mut force_close,
                } = accepted;
                tokio::select! {
                    () = conns.serve(stream, peer, tls, watcher) => {}
                    _ = force_close.wait_for(|closed| *closed) => {
                        tracing::debug!(target: "weir::server", %peer, "connection closed: grace period over");
                    }
                }
            });
        }

        let drains = self.listeners.close_all().await;
        drop(self.accepted);
        // The admin listener stays up while requests drain, saying so.
        admin_state.set_draining();
        // The grace period of the config in effect now.
        let grace = self.state.load().settings.shutdown_grace;
        tracing::info!(
            target: "weir::server",
            connections = drains.iter().map(Drain::count).sum::<usize>(),
            tunnels = tunnels.live(),
            grace_ms = grace.as_millis() as u64,
            "shutting down: no longer accepting, waiting for in-flight requests"
        );
        let (graceful, cuts): (Vec<_>, Vec<_>) = drains.into_iter().map(Drain::split).unzip();
        // Upgraded HTTP/1.1 connections have left hyper (their connection
        // futures ended with the switch): the tunnels are waited for
        // beside the connections, within the same grace period.
        let drained = async {
            let mut all = tokio::task::JoinSet::new();
            for g in graceful {
                all.spawn(g.shutdown());
            }
            while all.join_next().await.is_some() {}
            tunnels.drained().await;
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(target: "weir::server", tunnels = tunnels.live(), "grace period over; closing the remaining connections and tunnels");
            self.state.load().mark_shutdown_cut();
            for cut in &cuts {
                cut.send_replace(true);
            }
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

/// What every connection task shares: the proxy, the connection builders
/// and the downstream deadlines.
struct Connections {
    /// The proxy in effect, loaded once per request.
    state: Arc<ArcSwap<Proxy>>,
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
                self.state.load().metrics().tls_handshake_error();
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
        let state = Arc::clone(&self.state);
        let downstream = Arc::new(state.load().downstream(peer, tls));
        let downstream_tunnels = Arc::clone(&downstream.tunnels);
        let service = service_fn(move |req| {
            // One load per request: a request runs to its end on the
            // config it started with, the next one gets the newest.
            let proxy = state.load_full();
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
