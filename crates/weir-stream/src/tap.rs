//! Taps: look at every batch on its way through, without changing it
//! (catalogue section 9, TAP-001…004). For hashing, metrics, body logging.
//!
//! [`tap`] is a synchronous [`Transform`], so it fits in any pipeline, sync
//! or async; [`tap_async`] wraps a [`Source`] and awaits an async callback
//! before it passes each batch on.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderMap;
use http_body::SizeHint;
use pin_project_lite::pin_project;

use crate::{Batch, BatchResult, Source, StreamError, Transform};

/// A transform that shows every batch to a callback. See [`tap`].
#[derive(Debug, Clone)]
pub struct Tap<F> {
    callback: F,
}

/// A transform that calls `callback(Some(&batch))` for each batch, then
/// `callback(None)` once at the normal end (TAP-001).
///
/// Batches pass through unchanged: the same chunks, not copies (CORE-002).
/// On error or early stop the callback is not called with `None` (the
/// pipeline aborts instead of flushing).
///
/// # Errors
/// An error returned by the callback ends the pipeline with that error,
/// unchanged; the pipeline drops its source (TAP-003).
pub fn tap<F>(callback: F) -> Tap<F>
where
    F: FnMut(Option<&Batch>) -> Result<(), StreamError>,
{
    Tap { callback }
}

impl<F> Transform for Tap<F>
where
    F: FnMut(Option<&Batch>) -> Result<(), StreamError>,
{
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        (self.callback)(input.as_ref())?;
        Ok(input)
    }

    fn size_hint(&self, upstream: SizeHint) -> SizeHint {
        upstream
    }
}

pin_project! {
    /// A source whose batches an async callback sees first. See [`tap_async`].
    ///
    /// Dropping it drops the source and the callback's future in flight.
    pub struct TapAsync<S, F, Fut> {
        source: Option<S>,
        callback: F,
        #[pin]
        pending: Option<Fut>,
        // The batch `pending` was made for; `None` while it is the end's call.
        held: Option<Batch>,
        state: State,
        trailers: Option<HeaderMap>,
    }
}

impl<S: std::fmt::Debug, F, Fut> std::fmt::Debug for TapAsync<S, F, Fut> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapAsync")
            .field("source", &self.source)
            .field("held", &self.held)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum State {
    Streaming,
    Done,
    Failed(StreamError),
}

/// Wraps `source` so that `callback(Some(&batch))` is called for each batch
/// and its future awaited before the batch moves on, then `callback(None)`
/// at the end, awaited before the end is reported (TAP-002).
///
/// The future must not borrow the batch; clone what it needs (cloning a
/// chunk is a reference-count increment). Batches pass through unchanged.
///
/// The tap is `Unpin` only if the callback's future is; an `async` block is
/// not, so pin the tap once (`Box::pin(tap_async(..))`, itself a [`Source`])
/// where `Unpin` is needed, as in [`pull`](crate::pull). The futures
/// themselves are stored in place: nothing is allocated per batch.
///
/// # Errors
/// A source error drops the source and is passed on unchanged; the
/// callback is not called for it. An error from a callback's future drops
/// the source and the batch, and is passed on unchanged (TAP-003). Both are
/// sticky.
///
/// # Cancel safety
/// Polling it is cancel-safe: a batch whose callback is still running stays
/// held until the callback completes and is yielded by a later poll.
pub fn tap_async<S, F, Fut>(source: S, callback: F) -> TapAsync<S, F, Fut>
where
    S: Source + Unpin,
    F: FnMut(Option<&Batch>) -> Fut,
    Fut: Future<Output = Result<(), StreamError>>,
{
    TapAsync {
        source: Some(source),
        callback,
        pending: None,
        held: None,
        state: State::Streaming,
        trailers: None,
    }
}

impl<S, F, Fut> Source for TapAsync<S, F, Fut>
where
    S: Source + Unpin,
    F: FnMut(Option<&Batch>) -> Fut,
    Fut: Future<Output = Result<(), StreamError>>,
{
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut this = self.project();
        loop {
            if let Some(fut) = this.pending.as_mut().as_pin_mut() {
                let done = std::task::ready!(fut.poll(cx));
                this.pending.set(None);
                let held = this.held.take();
                return match (done, held) {
                    (Ok(()), Some(batch)) => Poll::Ready(Some(Ok(batch))),
                    (Ok(()), None) => {
                        *this.state = State::Done;
                        Poll::Ready(None)
                    }
                    (Err(e), _) => {
                        *this.source = None;
                        *this.state = State::Failed(e.clone());
                        Poll::Ready(Some(Err(e)))
                    }
                };
            }
            match this.state {
                State::Streaming => {}
                State::Done => return Poll::Ready(None),
                State::Failed(e) => return Poll::Ready(Some(Err(e.clone()))),
            }
            let Some(source) = this.source.as_mut() else {
                return Poll::Ready(None);
            };
            match std::task::ready!(Pin::new(&mut *source).poll_next_batch(cx)) {
                Some(Ok(batch)) => {
                    this.pending.set(Some((this.callback)(Some(&batch))));
                    *this.held = Some(batch);
                }
                Some(Err(e)) => {
                    *this.source = None;
                    *this.state = State::Failed(e.clone());
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    *this.trailers = Pin::new(&mut *source).take_trailers();
                    *this.source = None;
                    this.pending.set(Some((this.callback)(None)));
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.held.as_ref().map_or(0, |b| b.byte_len() as u64);
        match &self.source {
            Some(s) => {
                let h = s.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(h.lower().saturating_add(held));
                if let Some(u) = h.upper().and_then(|u| u.checked_add(held)) {
                    hint.set_upper(u);
                }
                hint
            }
            None => SizeHint::with_exact(held),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.project().trailers.take()
    }
}
