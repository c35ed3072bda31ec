//! The buffer between a fragment's task and the page: bounded in bytes.
//!
//! The task reads its fragment's upstream body and writes each batch here;
//! the page reads it when the fragment's turn comes. While the page is
//! elsewhere, the spool fills up to its byte cap, and then the task's next
//! write waits: the upstream body is not read again until the page has
//! taken bytes out (backpressure through the pull, not memory).
//!
//! Every spool of a page also draws on the page's [`Budget`]
//! (`page_buffer_bytes`): a spool that already holds bytes takes no more
//! while the page's spools together hold the budget or more. An empty
//! spool always takes one batch, so the fragment the page is reading (it
//! empties its spool as it goes) and an `async` fragment's first bytes
//! never wait for the others: the bound is the budget plus one batch per
//! fragment in flight.
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

impl State {
    /// The page waits for these bytes.
    fn want(&mut self) {
        self.wanted = true;
        if let Some(w) = self.wanted_waker.take() {
            w.wake();
        }
    }
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
    /// The page asked for the fragment's bytes and has none: it waits for
    /// this fragment (it is at the head of its line).
    wanted: bool,
    wanted_waker: Option<Waker>,
    /// The fragment failed to its inline fallback markup, which its
    /// placeholder already shows (an `async` fragment): nothing to send.
    inline: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    cap: usize,
    budget: Arc<Budget>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The page dropped the fragment: stop reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReaderGone;

/// The bytes held by all the spools of one page, against
/// `page_buffer_bytes`.
#[derive(Debug)]
pub(crate) struct Budget {
    cap: usize,
    state: Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    held: usize,
    /// Writers waiting for the page to hold less than `cap`.
    waiting: Vec<Waker>,
}

impl Budget {
    /// A budget of `cap` bytes (at least 1).
    pub(crate) fn new(cap: usize) -> Arc<Budget> {
        Arc::new(Budget {
            cap: cap.max(1),
            state: Mutex::new(BudgetState::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BudgetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes held now by the page's spools.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().held
    }

    /// Counts `n` bytes whatever the page holds.
    fn take(&self, n: usize) {
        self.lock().held += n;
    }

    /// Counts `n` bytes if the page holds less than the budget; otherwise
    /// registers `cx` to be woken when it does.
    fn try_take(&self, n: usize, cx: &Context<'_>) -> bool {
        let mut s = self.lock();
        if s.held < self.cap {
            s.held += n;
            return true;
        }
        if !s.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            s.waiting.push(cx.waker().clone());
        }
        false
    }

    /// Gives back `n` bytes; wakes the waiting writers once the page holds
    /// less than the budget.
    fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut s = self.lock();
        s.held = s.held.saturating_sub(n);
        if s.held < self.cap {
            for w in s.waiting.drain(..) {
                w.wake();
            }
        }
    }
}

/// A spool holding at most about `cap` bytes (a write is admitted while
/// fewer than `cap` bytes are held, so one batch may pass the cap), drawing
/// on the page's `budget`.
pub(crate) fn spool(cap: usize, budget: Arc<Budget>) -> (SpoolWriter, SpoolReader) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        cap: cap.max(1),
        budget,
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
    /// The fragment ends with its inline fallback markup, which the slot
    /// already holds (an `async` fragment's placeholder keeps it): the
    /// page sends nothing for it, not even a mover script.
    pub fn keep_inline(&self) {
        self.shared.lock().inline = true;
    }

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

    /// Resolves once the page waits for this fragment's bytes (it is at
    /// the head of the page's line, or at an async point), or has dropped
    /// it.
    pub async fn wanted(&self) {
        poll_fn(|cx| {
            let mut s = self.shared.lock();
            if s.wanted || s.reader_gone {
                Poll::Ready(())
            } else {
                s.wanted_waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
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
        self.shared.budget.take(bytes.len());
        s.bytes += bytes.len();
        s.chunks.push_back(bytes);
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// Appends `batch`, first waiting while the spool holds `cap` bytes or
    /// more, or holds some bytes while the page's spools hold the page's
    /// budget or more.
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
            let n = batch.as_ref().map_or(0, Batch::byte_len);
            if s.bytes == 0 {
                self.shared.budget.take(n);
            } else if !self.shared.budget.try_take(n, cx) {
                // Also woken if the page drops the fragment meanwhile.
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

    /// Clones of the chunks held, from the `from`-th on (reference counts,
    /// no copy), and whether the writer is done (no chunk will follow
    /// them). Registers `cx` to be woken by the next write or the end.
    pub fn peek(&self, from: usize, cx: &mut Context<'_>) -> (Vec<Bytes>, bool) {
        let mut s = self.shared.lock();
        let chunks = s.chunks.iter().skip(from).cloned().collect();
        if !s.closed {
            s.reader = Some(cx.waker().clone());
        }
        (chunks, s.closed)
    }

    /// Takes the first `n` chunks held (all of them if fewer), as a batch.
    pub fn take_front(&self, n: usize) -> Batch {
        let mut s = self.shared.lock();
        let n = n.min(s.chunks.len());
        let batch: Batch = s.chunks.drain(..n).collect();
        let taken = batch.byte_len();
        s.bytes = s.bytes.saturating_sub(taken);
        self.shared.budget.release(taken);
        if let Some(w) = s.writer.take() {
            w.wake();
        }
        batch
    }

    /// The page waits for this fragment (see [`SpoolWriter::wanted`]).
    pub fn want(&self) {
        self.shared.lock().want();
    }

    /// Whether the fragment ended with the inline markup its slot holds
    /// ([`SpoolWriter::keep_inline`]).
    pub fn keeps_inline(&self) -> bool {
        self.shared.lock().inline
    }

    /// Whether the writer is done and every chunk was taken.
    pub fn is_drained(&self) -> bool {
        let s = self.shared.lock();
        s.closed && s.chunks.is_empty()
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
            self.shared.budget.release(std::mem::take(&mut s.bytes));
            if let Some(w) = s.writer.take() {
                w.wake();
            }
            return Poll::Ready(Some(Ok(batch)));
        }
        if s.closed {
            return Poll::Ready(None);
        }
        s.reader = Some(cx.waker().clone());
        s.want();
        Poll::Pending
    }
}

impl Drop for SpoolReader {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.reader_gone = true;
        if let Some(w) = s.wanted_waker.take() {
            w.wake();
        }
        s.chunks.clear();
        self.shared.budget.release(std::mem::take(&mut s.bytes));
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
        let (w, mut r) = spool(10, Budget::new(usize::MAX));
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
        let (w, r) = spool(4, Budget::new(usize::MAX));
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
    async fn past_the_page_budget_only_empty_spools_take_a_batch() {
        let budget = Budget::new(10);
        let (a, mut ra) = spool(100, Arc::clone(&budget));
        let (b, rb) = spool(100, Arc::clone(&budget));
        let chunk = |n: usize| Batch::one(Bytes::from(vec![b'x'; n]));
        a.write(chunk(6)).await.expect("empty spool");
        a.write(chunk(4)).await.expect("under the budget");
        assert_eq!(budget.held(), 10);
        b.write(chunk(3))
            .await
            .expect("an empty spool takes one batch");
        assert_eq!(budget.held(), 13);
        let mut blocked = Box::pin(b.write(chunk(1)));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(blocked.as_mut().poll(&mut cx).is_pending(), "over budget");
        let got = ra.next_batch().await.expect("some").expect("ok");
        assert_eq!(got.byte_len(), 10);
        assert_eq!(budget.held(), 3);
        assert_eq!(blocked.await, Ok(()));
        assert_eq!(budget.held(), 4);
        let front = rb.take_front(1);
        assert_eq!(front.byte_len(), 3);
        drop(rb);
        assert_eq!(budget.held(), 0, "a dropped reader gives its bytes back");
        drop(a);
        assert!(ra.next_batch().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_writer_reports_a_failed_head_and_ends() {
        let (w, mut r) = spool(4, Budget::new(usize::MAX));
        drop(w);
        assert!(matches!(r.head(), Some(Head::Failed { .. })));
        assert!(r.next_batch().await.is_none());
    }
}
