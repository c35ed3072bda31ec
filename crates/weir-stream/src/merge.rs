//! [`merge`]: several sources as one, batches in the order they become ready
//! (catalogue section 8, MERGE-001…005).

use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderMap;
use http_body::SizeHint;

use crate::{BatchResult, CancelToken, Source, StreamError};

/// Several sources read as one. See [`merge`].
///
/// - No sources: it ends at once. One source: its batches pass through
///   unchanged (MERGE-001).
/// - Each poll polls the live sources in turn, starting one past the source
///   that yielded last (fairness), and returns the first batch that is
///   ready: batches come out in the order they become ready, each exactly
///   once (MERGE-002). A source is polled again only once its last batch has
///   been taken, so nothing is read ahead (MERGE-003). Sources that are
///   pending are polled again on the merge's next poll, which their wakers
///   trigger.
/// - A source that ends is dropped at once; its trailers, if any, are kept
///   for [`Source::take_trailers`] (several sources' trailers are combined,
///   a later one replacing a field of the same name). The merge ends when
///   every source has.
/// - A source error drops every other source and ends the merge with that
///   error, unchanged and sticky (MERGE-004, CORE-006).
/// - Dropping the merge drops every source; a token that fires (or had
///   fired before the first poll) fails it with the token's reason, without
///   polling any source, and drops them all (MERGE-005).
#[derive(Debug)]
pub struct Merge<S> {
    /// Live sources; `None` once a source has ended.
    sources: Vec<Option<S>>,
    live: usize,
    /// Where the next poll starts.
    next: usize,
    token: Option<CancelToken>,
    trailers: Option<HeaderMap>,
    failed: Option<StreamError>,
}

/// Merges `sources` into one [`Source`]. Polls nothing.
///
/// Sources of different types merge once boxed:
/// `Box<dyn Source + Unpin + Send>`.
pub fn merge<S, I>(sources: I) -> Merge<S>
where
    I: IntoIterator<Item = S>,
    S: Source + Unpin,
{
    let sources: Vec<Option<S>> = sources.into_iter().map(Some).collect();
    Merge {
        live: sources.len(),
        sources,
        next: 0,
        token: None,
        trailers: None,
        failed: None,
    }
}

impl<S> Merge<S> {
    /// Fails the merge with the token's reason once `token` fires.
    pub fn with_token(mut self, token: CancelToken) -> Self {
        self.token = Some(token);
        self
    }

    /// How many sources have not ended yet.
    pub fn live(&self) -> usize {
        self.live
    }

    fn fail(&mut self, err: StreamError) -> Poll<Option<BatchResult>> {
        self.sources.clear();
        self.live = 0;
        self.failed = Some(err.clone());
        Poll::Ready(Some(Err(err)))
    }
}

impl<S: Source + Unpin> Source for Merge<S> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        if let Some(e) = &this.failed {
            return Poll::Ready(Some(Err(e.clone())));
        }
        if let Some(e) = this.token.as_ref().and_then(CancelToken::reason) {
            return this.fail(e);
        }
        let n = this.sources.len();
        for k in 0..n {
            let i = (this.next + k) % n;
            let Some(source) = this.sources[i].as_mut() else {
                continue;
            };
            match Pin::new(&mut *source).poll_next_batch(cx) {
                Poll::Ready(Some(Ok(batch))) => {
                    this.next = (i + 1) % n;
                    return Poll::Ready(Some(Ok(batch)));
                }
                Poll::Ready(Some(Err(e))) => return this.fail(e),
                Poll::Ready(None) => {
                    if let Some(t) = Pin::new(&mut *source).take_trailers() {
                        match &mut this.trailers {
                            Some(all) => all.extend(t),
                            None => this.trailers = Some(t),
                        }
                    }
                    this.sources[i] = None;
                    this.live -= 1;
                }
                Poll::Pending => {}
            }
        }
        if this.live == 0 {
            // Release the slots too.
            this.sources = Vec::new();
            return Poll::Ready(None);
        }
        if let Some(Poll::Ready(e)) = this.token.as_ref().map(|t| t.poll_cancelled(cx)) {
            return this.fail(e);
        }
        Poll::Pending
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = SizeHint::new();
        let mut upper = Some(0u64);
        let mut lower = 0u64;
        for s in self.sources.iter().flatten() {
            let h = s.size_hint();
            lower = lower.saturating_add(h.lower());
            upper = upper.zip(h.upper()).and_then(|(a, b)| a.checked_add(b));
        }
        hint.set_lower(lower);
        if let Some(u) = upper {
            hint.set_upper(u);
        }
        hint
    }

    fn is_end_stream(&self) -> bool {
        self.failed.is_none() && self.sources.iter().flatten().all(Source::is_end_stream)
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.get_mut().trailers.take()
    }
}
