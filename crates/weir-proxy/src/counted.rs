//! Live upstream connections, counted: every upstream socket is wrapped
//! in a [`Counted`] that holds a guard that decrements the count when the connection
//! is dropped (closed by either side, evicted from the pool, or abandoned
//! half-read).
//!
//! This is how Weir proves that its pool never leaks: the count is exact,
//! not sampled from the OS, and it is exposed per upstream authority.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
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

    /// The live count of one authority, created at zero on first use.
    pub(crate) fn counter(&self, authority: &str) -> Counter {
        let mut map = self
            .by_authority
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Counter(Arc::clone(map.entry(authority.to_owned()).or_default()))
    }

    /// Counts one new connection into `counter` and the totals, until the
    /// guard is dropped.
    pub(crate) fn guard(self: &Arc<Self>, counter: &Counter) -> ConnectionGuard {
        counter.0.fetch_add(1, Ordering::AcqRel);
        self.total.fetch_add(1, Ordering::AcqRel);
        self.opened.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard {
            counts: Arc::clone(self),
            counter: Arc::clone(&counter.0),
        }
    }
}

/// One authority's live connection count, resolved once per server pool.
#[derive(Debug, Clone)]
pub(crate) struct Counter(Arc<AtomicU64>);

/// Decrements the counts when its connection is dropped.
#[derive(Debug)]
pub(crate) struct ConnectionGuard {
    counts: Arc<ConnectionCounts>,
    counter: Arc<AtomicU64>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::AcqRel);
        self.counts.total.fetch_sub(1, Ordering::AcqRel);
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

impl<T> Counted<T> {
    /// `io`, counted until it is dropped.
    pub(crate) fn new(io: T, guard: ConnectionGuard) -> Self {
        Counted { io, _guard: guard }
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
