//! The server: HTTP/1.1 and cleartext HTTP/2 on one listener, accepted by
//! [`weir_net::AcceptLoop`], with graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::config::OriginConfig;
use crate::router::Router;

/// Longest wait for in-flight connections after shutdown starts (5 s).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `config` on an already-bound listener until `shutdown` resolves,
/// then stops accepting and lets in-flight connections finish
/// (`hyper_util::server::graceful`), waiting at most 5 s.
///
/// Each accepted socket gets `TCP_NODELAY` and speaks HTTP/1.1 or HTTP/2
/// with prior knowledge, whichever its first bytes show. On shutdown, idle
/// HTTP/1.1 connections close, HTTP/2 connections get `GOAWAY`, and
/// requests under way may complete; connections still open after
/// [`DRAIN_TIMEOUT`] are dropped.
///
/// Accept errors never end the loop: those about a single connection are
/// retried at once, others (such as running out of file descriptors) after
/// a pause of 10 ms doubling to 1 s ([`weir_net`] has the rule).
///
/// # Errors
///
/// Only before serving starts: if `config.root` is not an existing
/// directory.
///
/// # Cancel safety
///
/// Dropping the future stops the server at once: the listener closes and
/// every connection is dropped without draining.
pub async fn serve(
    listener: TcpListener,
    config: OriginConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    config.check_root().await?;
    let router = Arc::new(Router::new(&config));
    let builder = connection_builder();
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();

    weir_net::AcceptLoop::new(&listener)
        .run(shutdown, |stream, peer| {
            let connection = Connection { stream, peer };
            connection.spawn(&builder, &router, &graceful, &mut connections);
            // Reap finished connection tasks so the set stays small.
            while connections.try_join_next().is_some() {}
            async {}
        })
        .await;

    drop(listener);
    let open = graceful.count();
    tracing::debug!(open, "origin shutting down; draining connections");
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_ms = DRAIN_TIMEOUT.as_millis(),
            "connections still open after the drain timeout; dropping them"
        );
    }
    connections.shutdown().await;
    Ok(())
}

/// The HTTP/1.1 + HTTP/2 connection builder, with tokio timers so that
/// hyper's header-read timeout and HTTP/2 keep-alive work.
fn connection_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    builder
}

/// One accepted TCP connection, before hyper takes it over.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
}

impl Connection {
    /// Serves the connection on a task in `tasks`, watched by `graceful`,
    /// until the peer closes; logs how it ended.
    fn spawn(
        self,
        builder: &auto::Builder<TokioExecutor>,
        router: &Arc<Router>,
        graceful: &GracefulShutdown,
        tasks: &mut JoinSet<()>,
    ) {
        let Self { stream, peer } = self;
        let router = Arc::clone(router);
        let service = service_fn(move |request| {
            let router = Arc::clone(&router);
            async move { Ok::<_, Infallible>(router.handle(request).await) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let served = graceful.watch(connection);
        tasks.spawn(async move {
            if let Err(err) = served.await {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }
}
