//! The buffer between a fragment's task and the page: bounded in bytes.
//!
//! The task reads its fragment's upstream body and writes each batch here;
//! the page reads it when the fragment's turn comes. While the page is
//! elsewhere, the spool fills up to its byte cap, and then the task's next
//! write waits: the upstream body is not read again until the page has
//! taken bytes out (backpressure through the pull, not memory).
//!
//! The spool also carries the fragment's head (status and fields) as soon
//! as the task knows it, for the primary fragment and for `Link` fields.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use weir_stream::{Batch, BatchResult, Source};

/// What a fragment's task reports before its body.
#[derive(Debug, Clone)]
pub(crate) enum Head {
    /// A response head arrived (for the primary: any status; for others:
    /// the one whose body is used).
    Response {
        /// Its status.
        status: StatusCode,
        /// Its fields.
        headers: HeaderMap,
    },
    /// No response will be used: the fragment failed before its first
    /// byte (it may still write fallback markup).
    Failed {
        /// Whether a deadline passed (else an error).
        timeout: bool,
        /// Why, for the log.
        reason: String,
    },
}

#[derive(Debug, Default)]
struct State {
    chunks: VecDeque<Bytes>,
    bytes: usize,
    head: Option<Head>,
    /// The writer closed (or was dropped): no more chunks.
    closed: bool,
    /// The reader was dropped: writes fail.
    reader_gone: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    cap: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The page dropped the fragment: stop reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReaderGone;

/// A spool holding at most about `cap` bytes (a write is admitted while
/// fewer than `cap` bytes are held, so one batch may pass the cap).
pub(crate) fn spool(cap: usize) -> (SpoolWriter, SpoolReader) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        cap: cap.max(1),
    });
    (
        SpoolWriter {
            shared: Arc::clone(&shared),
        },
        SpoolReader { shared },
    )
}

/// The task's end.
#[derive(Debug)]
pub(crate) struct SpoolWriter {
    shared: Arc<Shared>,
}

impl SpoolWriter {
    /// Reports the head (the first report wins).
    pub fn head(&self, head: Head) {
        let mut s = self.shared.lock();
        if s.head.is_none() {
            s.head = Some(head);
            if let Some(w) = s.reader.take() {
                w.wake();
            }
        }
    }

    /// Whether the page still wants the fragment.
    pub fn is_wanted(&self) -> bool {
        !self.shared.lock().reader_gone
    }

    /// Appends `bytes` at once, whatever the spool holds (bounded markup:
    /// an inline fallback).
    pub fn push_now(&self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        let mut s = self.shared.lock();
        s.bytes += bytes.len();
        s.chunks.push_back(bytes);
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// Appends `batch`, first waiting while the spool holds `cap` bytes or
    /// more.
    ///
    /// # Errors
    /// [`ReaderGone`] once the page has dropped the fragment.
    ///
    /// # Cancel safety
    /// Dropped before it completes, nothing of `batch` was written.
    pub async fn write(&self, batch: Batch) -> Result<(), ReaderGone> {
        let mut batch = Some(batch);
        poll_fn(|cx| {
            let mut s = self.shared.lock();
            if s.reader_gone {
                return Poll::Ready(Err(ReaderGone));
            }
            if s.bytes >= self.shared.cap {
                s.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            for c in batch.take().into_iter().flatten() {
                if !c.is_empty() {
                    s.bytes += c.len();
                    s.chunks.push_back(c);
                }
            }
            if let Some(w) = s.reader.take() {
                w.wake();
            }
            Poll::Ready(Ok(()))
        })
        .await
    }
}

impl Drop for SpoolWriter {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.closed = true;
        if s.head.is_none() {
            s.head = Some(Head::Failed {
                timeout: false,
                reason: "fragment task ended".into(),
            });
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }
}

/// The page's end: a [`Source`] of the fragment's bytes.
#[derive(Debug)]
pub(crate) struct SpoolReader {
    shared: Arc<Shared>,
}

impl SpoolReader {
    /// The head, once the task has reported it.
    pub fn poll_head(&self, cx: &mut Context<'_>) -> Poll<Head> {
        let mut s = self.shared.lock();
        match &s.head {
            Some(h) => Poll::Ready(h.clone()),
            None => {
                s.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// The head if known now, without registering.
    pub fn head(&self) -> Option<Head> {
        self.shared.lock().head.clone()
    }

    /// Whether a poll would return at once (bytes held, or the end);
    /// otherwise registers `cx` to be woken when that changes.
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.shared.lock();
        if !s.chunks.is_empty() || s.closed {
            Poll::Ready(())
        } else {
            s.reader = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Source for SpoolReader {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut s = self.shared.lock();
        if !s.chunks.is_empty() {
            let batch: Batch = s.chunks.drain(..).collect();
            s.bytes = 0;
            if let Some(w) = s.writer.take() {
                w.wake();
            }
            return Poll::Ready(Some(Ok(batch)));
        }
        if s.closed {
            return Poll::Ready(None);
        }
        s.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for SpoolReader {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.reader_gone = true;
        s.chunks.clear();
        s.bytes = 0;
        if let Some(w) = s.writer.take() {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_stream::SourceExt as _;

    #[tokio::test]
    async fn a_full_spool_makes_the_writer_wait_until_the_reader_takes() {
        let (w, mut r) = spool(10);
        w.write(Batch::one(Bytes::from_static(b"0123456789")))
            .await
            .expect("first write");
        let mut second = Box::pin(w.write(Batch::one(Bytes::from_static(b"x"))));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(second.as_mut().poll(&mut cx).is_pending(), "held 10 >= cap");
        let got = r.next_batch().await.expect("some").expect("ok");
        assert_eq!(got.byte_len(), 10);
        assert_eq!(second.await, Ok(()));
        drop(w);
        let got = r.next_batch().await.expect("some").expect("ok");
        assert_eq!(got.byte_len(), 1);
        assert!(r.next_batch().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_reader_fails_writes_and_releases_bytes() {
        let (w, r) = spool(4);
        w.write(Batch::one(Bytes::from_static(b"abcd")))
            .await
            .expect("write");
        let waiting = tokio::spawn(async move {
            let out = w.write(Batch::one(Bytes::from_static(b"e"))).await;
            (out, w.is_wanted())
        });
        tokio::task::yield_now().await;
        drop(r);
        assert_eq!(waiting.await.expect("join"), (Err(ReaderGone), false));
    }

    #[tokio::test]
    async fn a_dropped_writer_reports_a_failed_head_and_ends() {
        let (w, mut r) = spool(4);
        drop(w);
        assert!(matches!(r.head(), Some(Head::Failed { .. })));
        assert!(r.next_batch().await.is_none());
    }
}
