//! Filling the cache while the client streams, and the body sources the
//! cache serves.
//!
//! On a miss the upstream body goes through `weir_stream::share`: the
//! client reads the primary consumer, the cache writer (a small task) the
//! secondary one, so the client is never slowed by the cache. The writer
//! appends every batch to a [`FillBuf`] (shared, not copied: the same
//! `Bytes`), which collapsed requests read from its first byte. The fill is
//! abandoned — nothing stored, readers of the buffer fail — when the writer
//! lags past the share's hwm (`StreamError::Lagged`), the body grows past
//! `max_object_bytes`, the upstream fails, or the client goes away (unless
//! `fill_on_client_abort`, or other clients are reading the buffer).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::SizeHint;
use weir_stream::share::Consumer;
use weir_stream::{Batch, BatchResult, Share, Source, SourceExt as _, StreamError};

pub(crate) use crate::upstream::UpstreamBody;

/// Most chunks handed out in one batch when serving a stored body.
const CHUNKS_PER_BATCH: usize = 64;

/// Why a fill was abandoned; what readers of an abandoned buffer fail with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Abandoned {
    /// The cache writer fell more than `fill_hwm` chunks (or `max_object_bytes`
    /// bytes) behind the client.
    #[error("cache fill abandoned: the writer lagged behind the client")]
    Lagged,
    /// The body is larger than `max_object_bytes`.
    #[error("cache fill abandoned: the body exceeds max_object_bytes")]
    TooLarge,
    /// The upstream body failed mid-way.
    #[error("cache fill abandoned: the upstream body failed")]
    UpstreamFailed,
    /// The client went away and no one else was reading.
    #[error("cache fill abandoned: the client went away")]
    ClientGone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Growing,
    Complete,
    Abandoned(Abandoned),
}

#[derive(Debug)]
struct Inner {
    chunks: Vec<Bytes>,
    bytes: u64,
    state: State,
    wakers: Vec<Waker>,
}

/// A body being filled: the chunks received so far, readable from the first.
#[derive(Debug)]
pub(crate) struct FillBuf {
    inner: Mutex<Inner>,
    /// Collapsed requests currently reading it.
    readers: AtomicUsize,
}

impl FillBuf {
    pub fn new() -> Arc<FillBuf> {
        Arc::new(FillBuf {
            inner: Mutex::new(Inner {
                chunks: Vec::new(),
                bytes: 0,
                state: State::Growing,
                wakers: Vec::new(),
            }),
            readers: AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a batch; returns the total bytes held.
    fn append(&self, batch: Batch) -> u64 {
        let mut g = self.lock();
        for c in batch {
            g.bytes += c.len() as u64;
            g.chunks.push(c);
        }
        let total = g.bytes;
        wake_all(&mut g);
        total
    }

    /// Ends the fill: the complete chunks, or `None` when abandoned (the
    /// chunks are released at once).
    fn finish(&self, outcome: Result<(), Abandoned>) -> Option<Vec<Bytes>> {
        let mut g = self.lock();
        let out = match outcome {
            Ok(()) => {
                g.state = State::Complete;
                Some(g.chunks.clone())
            }
            Err(why) => {
                g.state = State::Abandoned(why);
                g.chunks = Vec::new();
                None
            }
        };
        wake_all(&mut g);
        out
    }

    /// Whether it was abandoned.
    pub fn is_abandoned(&self) -> bool {
        matches!(self.lock().state, State::Abandoned(_))
    }

    /// A reader from the first byte; counted until dropped.
    pub fn reader(self: &Arc<Self>) -> CacheSource {
        self.readers.fetch_add(1, Ordering::AcqRel);
        CacheSource::Growing(Growing {
            buf: Arc::clone(self),
            pos: 0,
            ended: false,
        })
    }
}

fn wake_all(g: &mut Inner) {
    for w in g.wakers.drain(..) {
        w.wake();
    }
}

/// A collapsed request's body: reads a [`FillBuf`] from its first chunk,
/// waiting for more as the fill grows.
#[derive(Debug)]
pub struct Growing {
    buf: Arc<FillBuf>,
    pos: usize,
    ended: bool,
}

impl Drop for Growing {
    fn drop(&mut self) {
        self.buf.readers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The client's side of a fill: the primary consumer of the shared
/// upstream body. Dropped before the end, it abandons the fill (unless
/// `fill_on_client_abort`, or collapsed requests are reading the buffer).
pub struct Primary<S = UpstreamBody> {
    inner: Consumer<S>,
    share: Arc<Share<S>>,
    buf: Arc<FillBuf>,
    fill_on_client_abort: bool,
    ended: std::sync::atomic::AtomicBool,
}

impl<S> std::fmt::Debug for Primary<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primary")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl<S: Source + Unpin> Source for Primary<S> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        let out = Pin::new(&mut this.inner).poll_next_batch(cx);
        if let Poll::Ready(None) = out {
            this.ended.store(true, Ordering::Release);
        }
        out
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }

    fn is_end_stream(&self) -> bool {
        // A known-length body is over once its last byte is out, and a
        // pipeline may then stop without polling for the end.
        let end = self.inner.is_end_stream();
        if end {
            self.ended.store(true, Ordering::Release);
        }
        end
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        Pin::new(&mut self.get_mut().inner).take_trailers()
    }
}

impl<S> Drop for Primary<S> {
    fn drop(&mut self) {
        let complete = self.ended.load(Ordering::Acquire);
        if !complete && !self.fill_on_client_abort && self.buf.readers.load(Ordering::Acquire) == 0
        {
            self.share
                .cancel(Some(StreamError::aborted(Abandoned::ClientGone)));
        }
    }
}

/// A response body served by the cache.
#[derive(Debug)]
pub enum CacheSource {
    /// A stored body: its chunks, shared, handed out without copying.
    Stored {
        /// The chunks.
        chunks: Arc<[Bytes]>,
        /// Next chunk to hand out.
        pos: usize,
    },
    /// A body still being filled by another request (collapsing).
    Growing(Growing),
    /// The upstream body of a miss, teed into the cache.
    Primary(Primary),
}

impl CacheSource {
    /// A stored body.
    pub(crate) fn stored(chunks: Arc<[Bytes]>) -> CacheSource {
        CacheSource::Stored { chunks, pos: 0 }
    }
}

impl Source for CacheSource {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        match self.get_mut() {
            CacheSource::Stored { chunks, pos } => {
                let rest = &chunks[*pos..];
                if rest.is_empty() {
                    return Poll::Ready(None);
                }
                let n = rest.len().min(CHUNKS_PER_BATCH);
                *pos += n;
                let batch: Batch = rest[..n]
                    .iter()
                    .filter(|c| !c.is_empty())
                    .cloned()
                    .collect();
                if batch.is_empty() {
                    // Only empty chunks: nothing to yield; try again at once.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(batch)))
            }
            CacheSource::Growing(g) => {
                if g.ended {
                    return Poll::Ready(None);
                }
                let mut inner = g.buf.lock();
                if g.pos < inner.chunks.len() {
                    let batch: Batch = inner.chunks[g.pos..]
                        .iter()
                        .filter(|c| !c.is_empty())
                        .cloned()
                        .collect();
                    g.pos = inner.chunks.len();
                    if !batch.is_empty() {
                        return Poll::Ready(Some(Ok(batch)));
                    }
                }
                match inner.state {
                    State::Complete => {
                        g.ended = true;
                        Poll::Ready(None)
                    }
                    State::Abandoned(why) => Poll::Ready(Some(Err(StreamError::failed(why)))),
                    State::Growing => {
                        if !inner.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                            inner.wakers.push(cx.waker().clone());
                        }
                        Poll::Pending
                    }
                }
            }
            CacheSource::Primary(p) => Pin::new(p).poll_next_batch(cx),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            CacheSource::Stored { chunks, pos } => {
                SizeHint::with_exact(chunks[*pos..].iter().map(|c| c.len() as u64).sum())
            }
            CacheSource::Growing(_) => SizeHint::default(),
            CacheSource::Primary(p) => p.size_hint(),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            CacheSource::Stored { chunks, pos } => chunks[*pos..].iter().all(Bytes::is_empty),
            CacheSource::Growing(g) => g.ended,
            CacheSource::Primary(p) => p.is_end_stream(),
        }
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        match self.get_mut() {
            CacheSource::Primary(p) => Pin::new(p).take_trailers(),
            _ => None,
        }
    }
}

/// Tees `body` into a new fill: returns the client's source, the buffer
/// collapsed requests read, and the writer's consumer.
///
/// The writer may fall `hwm_chunks` chunks or `hwm_bytes` bytes behind the
/// client before it is detached and the fill abandoned.
pub(crate) fn tee<S: Source + Unpin>(
    body: S,
    hwm_chunks: usize,
    hwm_bytes: u64,
    fill_on_client_abort: bool,
) -> (Primary<S>, Arc<FillBuf>, Writer<S>) {
    let share = Arc::new(weir_stream::share(
        body,
        weir_stream::ShareOptions {
            hwm_chunks,
            hwm_bytes: usize::try_from(hwm_bytes).unwrap_or(usize::MAX),
            ..weir_stream::ShareOptions::default()
        },
    ));
    let primary = share.consumer(weir_stream::ConsumerOptions::primary());
    let secondary = share.consumer(weir_stream::ConsumerOptions::secondary());
    let buf = FillBuf::new();
    let client = Primary {
        inner: primary,
        share: Arc::clone(&share),
        buf: Arc::clone(&buf),
        fill_on_client_abort,
        ended: std::sync::atomic::AtomicBool::new(false),
    };
    let writer = Writer {
        consumer: secondary,
        buf: Arc::clone(&buf),
    };
    (client, buf, writer)
}

/// The cache writer: drains the secondary consumer into the [`FillBuf`].
pub(crate) struct Writer<S> {
    consumer: Consumer<S>,
    buf: Arc<FillBuf>,
}

impl<S: Source + Unpin> Writer<S> {
    /// Reads to the end; the complete body, or why it was abandoned. The
    /// buffer is finished either way (readers see the end or the failure).
    pub async fn run(mut self, max_object_bytes: u64) -> Result<Vec<Bytes>, Abandoned> {
        let mut held = 0;
        let outcome = loop {
            super::test_hooks::wait_while_stalled(held).await;
            match self.consumer.next_batch().await {
                Some(Ok(batch)) => {
                    held = self.buf.append(batch);
                    if held > max_object_bytes {
                        break Err(Abandoned::TooLarge);
                    }
                }
                Some(Err(StreamError::Lagged { .. })) => break Err(Abandoned::Lagged),
                Some(Err(e)) => {
                    let gone = e.reason().is_some_and(|r| {
                        r.downcast_ref::<Abandoned>() == Some(&Abandoned::ClientGone)
                    });
                    break Err(if gone {
                        Abandoned::ClientGone
                    } else {
                        Abandoned::UpstreamFailed
                    });
                }
                None => break Ok(()),
            }
        };
        // Leave the share first: a writer that stops early must not hold it.
        drop(self.consumer);
        match self.buf.finish(outcome) {
            Some(chunks) => Ok(chunks),
            None => Err(outcome.err().unwrap_or(Abandoned::UpstreamFailed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_stream::consume;

    fn batches(n: usize, size: usize) -> impl Source + Unpin + Send + 'static {
        weir_stream::from_iter((0..n).map(move |i| Bytes::from(vec![i as u8; size])))
    }

    #[tokio::test]
    async fn a_writer_never_polled_does_not_slow_the_client_and_stores_nothing() {
        let (client, buf, writer) = tee(batches(1000, 1024), 512, u64::MAX, false);
        // The client reads everything while the writer sleeps.
        let body = consume::bytes(client, consume::ConsumeOptions::new())
            .await
            .expect("client body");
        assert_eq!(body.len(), 1000 * 1024);
        // The writer wakes up detached: the fill is abandoned, nothing kept.
        assert_eq!(writer.run(u64::MAX).await, Err(Abandoned::Lagged));
        assert!(buf.is_abandoned());
        assert!(buf.lock().chunks.is_empty());
    }

    #[tokio::test]
    async fn a_writer_keeping_up_gets_the_identical_body() {
        let (client, _buf, writer) = tee(batches(200, 1000), 512, u64::MAX, false);
        let w = tokio::spawn(writer.run(u64::MAX));
        let body = consume::bytes(client, consume::ConsumeOptions::new())
            .await
            .expect("client body");
        let stored: Vec<u8> = w.await.expect("join").expect("stored").concat();
        assert_eq!(stored, body.to_vec());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_abandoned() {
        let (client, buf, writer) = tee(batches(50, 1000), 64, u64::MAX, false);
        let w = tokio::spawn(writer.run(10_000));
        let body = consume::bytes(client, consume::ConsumeOptions::new())
            .await
            .expect("client body");
        assert_eq!(body.len(), 50_000);
        assert_eq!(w.await.expect("join"), Err(Abandoned::TooLarge));
        assert!(buf.is_abandoned());
    }

    #[tokio::test]
    async fn a_client_gone_abandons_unless_configured() {
        for keep in [false, true] {
            let (mut client, _buf, writer) = tee(batches(100, 10), 512, u64::MAX, keep);
            let first = client.next_batch().await;
            assert!(matches!(first, Some(Ok(_))));
            drop(client);
            let out = writer.run(u64::MAX).await;
            if keep {
                assert_eq!(out.expect("kept").concat().len(), 1000);
            } else {
                assert_eq!(out, Err(Abandoned::ClientGone));
            }
        }
    }

    #[tokio::test]
    async fn a_growing_reader_reads_from_the_first_byte() {
        let buf = FillBuf::new();
        buf.append(Batch::one(Bytes::from_static(b"ab")));
        let mut r = buf.reader();
        buf.append(Batch::one(Bytes::from_static(b"cd")));
        let first = r.next_batch().await.expect("some").expect("ok");
        assert_eq!(first.byte_len(), 4);
        let b2 = Arc::clone(&buf);
        let t = tokio::spawn(async move {
            b2.append(Batch::one(Bytes::from_static(b"e")));
            b2.finish(Ok(()))
        });
        let rest = consume::bytes(&mut r, consume::ConsumeOptions::new())
            .await
            .expect("rest");
        assert_eq!(&rest[..], b"e");
        assert_eq!(t.await.expect("join").expect("complete").concat(), b"abcde");
    }
}
