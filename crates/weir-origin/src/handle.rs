//! Running the origin on a background task.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::OriginConfig;
use crate::server::serve;

/// Binds `addr` (port 0 picks a free port), spawns [`serve`] on the current
/// tokio runtime, and returns a handle to the running server.
///
/// # Errors
///
/// The I/O error of binding `addr`, or of checking that `config.root` is an
/// existing directory.
///
/// # Panics
///
/// If called outside a tokio runtime.
pub async fn spawn(addr: SocketAddr, config: OriginConfig) -> io::Result<OriginHandle> {
    config.check_root().await?;
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, config, async move {
        // A dropped sender also means "stop".
        let _ = stopped.await;
    }));
    tracing::debug!(%local_addr, "origin listening");
    Ok(OriginHandle {
        local_addr,
        stop: Some(stop),
        task: Some(task),
    })
}

/// A running origin started by [`spawn`].
///
/// Dropping the handle stops the server at once (the task is aborted,
/// connections are dropped); [`OriginHandle::shutdown`] stops it gracefully.
#[derive(Debug)]
pub struct OriginHandle {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl OriginHandle {
    /// The address the server listens on (with the real port if 0 was
    /// asked for).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, lets in-flight connections finish (at most 5 s),
    /// and waits for the server task to end. Errors of the task are logged.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes drops the handle, which
    /// aborts the server at once.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.as_mut() {
            let outcome = task.await;
            self.task = None;
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "origin ended with an error"),
                Err(err) => tracing::warn!(error = %err, "origin task failed"),
            }
        }
    }
}

impl Drop for OriginHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
