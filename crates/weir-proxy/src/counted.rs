//! Live upstream connections, counted: a connector wrapper whose every
//! connection holds a guard that decrements the count when the connection
//! is dropped (closed by either side, evicted from the pool, or abandoned
//! half-read).
//!
//! This is how Weir proves that its pool never leaks: the count is exact,
//! not sampled from the OS, and it is exposed per upstream authority.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use pin_project_lite::pin_project;

/// Live connection counts, per upstream authority (`host:port`) and in all.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    total: AtomicU64,
    opened: AtomicU64,
    by_authority: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

impl ConnectionCounts {
    /// Connections open now, to every upstream.
    pub fn live(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    /// Connections opened since the start, to every upstream.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Connections open now, per upstream authority (`host:port`), sorted.
    pub fn live_by_authority(&self) -> Vec<(String, u64)> {
        let map = self
            .by_authority
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = map
            .iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::Acquire)))
            .collect();
        out.sort();
        out
    }

    fn guard(self: &Arc<Self>, authority: &str) -> ConnectionGuard {
        let counter = {
            let mut map = self
                .by_authority
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            Arc::clone(map.entry(authority.to_owned()).or_default())
        };
        counter.fetch_add(1, Ordering::AcqRel);
        self.total.fetch_add(1, Ordering::AcqRel);
        self.opened.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard {
            counts: Arc::clone(self),
            counter,
        }
    }
}

/// Decrements the counts when its connection is dropped.
#[derive(Debug)]
struct ConnectionGuard {
    counts: Arc<ConnectionCounts>,
    counter: Arc<AtomicU64>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
        self.counts.total.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connector that counts the connections made by `C`.
#[derive(Debug, Clone)]
pub struct CountingConnector<C> {
    inner: C,
    counts: Arc<ConnectionCounts>,
}

impl<C> CountingConnector<C> {
    /// Wraps `inner`, counting into `counts`.
    pub fn new(inner: C, counts: Arc<ConnectionCounts>) -> Self {
        CountingConnector { inner, counts }
    }
}

impl<C> tower::Service<Uri> for CountingConnector<C>
where
    C: tower::Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = Counted<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let authority = uri
            .authority()
            .map_or_else(String::new, ToString::to_string);
        let counts = Arc::clone(&self.counts);
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            Ok(Counted {
                io,
                _guard: counts.guard(&authority),
            })
        })
    }
}

pin_project! {
    /// A connection that is counted while it lives.
    #[derive(Debug)]
    pub struct Counted<T> {
        #[pin]
        io: T,
        _guard: ConnectionGuard,
    }
}

impl<T: Connection> Connection for Counted<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl<T: Read> Read for Counted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        self.project().io.poll_read(cx, buf)
    }
}

impl<T: Write> Write for Counted<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
}
