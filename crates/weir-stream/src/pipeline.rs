//! [`Pipeline`]: a source and its transforms, run when the consumer polls.

use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderMap;
use http_body::SizeHint;

use crate::{Batch, BatchResult, Source, StreamError, Transform};

/// A lazy, demand-driven pipeline: a [`Source`] followed by a [`Transform`]
/// (one stage, or several fused with [`TransformExt::then`](crate::TransformExt::then)).
///
/// A pipeline is itself a [`Source`], so pipelines nest.
///
/// - Building one polls nothing (PULL-001); each poll pulls from the source
///   only until one non-empty output batch exists (PULL-002).
/// - When the source returns `Pending`, the transform is asked once, through
///   [`Transform::idle`], to emit what it holds back; not again until a new
///   batch has arrived.
/// - At the source's end the transform is flushed exactly once (PULL-031),
///   the source's trailers are kept for [`Source::take_trailers`], and the
///   source is dropped.
/// - On an error the source is dropped at once, the transform is aborted with
///   the error, and the error is returned unchanged, now and on every later
///   poll (PULL-040, CORE-006).
/// - Dropping the pipeline before its end aborts the transform with
///   [`StreamError::Aborted`] and drops the source (PULL-041): for a proxied
///   body, this closes the upstream connection instead of pooling it half-read.
#[derive(Debug)]
pub struct Pipeline<S, T: Transform> {
    source: Option<S>,
    transform: T,
    state: State,
    /// Whether the transform was asked for its idle output since the last batch.
    idle_flushed: bool,
    trailers: Option<HeaderMap>,
}

#[derive(Debug)]
enum State {
    Streaming,
    Done,
    Failed(StreamError),
}

/// Builds a pipeline that pulls from `source` through `transform`.
///
/// Pass `()` for a pipeline with no transform.
pub fn pull<S: Source + Unpin, T: Transform>(source: S, transform: T) -> Pipeline<S, T> {
    Pipeline {
        source: Some(source),
        transform,
        state: State::Streaming,
        idle_flushed: false,
        trailers: None,
    }
}

impl<S, T: Transform> Pipeline<S, T> {
    /// The transform, for inspection.
    pub fn transform_ref(&self) -> &T {
        &self.transform
    }

    fn fail(&mut self, err: StreamError) -> Poll<Option<BatchResult>> {
        self.source = None;
        self.transform.abort(&err);
        self.state = State::Failed(err.clone());
        Poll::Ready(Some(Err(err)))
    }

    fn emit(
        &mut self,
        out: Result<Option<Batch>, StreamError>,
    ) -> Option<Poll<Option<BatchResult>>> {
        match out {
            Ok(Some(batch)) if !batch.is_empty() => Some(Poll::Ready(Some(Ok(batch)))),
            Ok(_) => None,
            Err(e) => Some(self.fail(e)),
        }
    }
}

impl<S: Source + Unpin, T: Transform> Pipeline<S, T> {
    /// The source ended: keep its trailers, drop it, flush the transform,
    /// and yield `head` followed by the flush output.
    fn finish(&mut self, head: Option<Batch>) -> Poll<Option<BatchResult>> {
        if let Some(mut source) = self.source.take() {
            self.trailers = Pin::new(&mut source).take_trailers();
        }
        self.state = State::Done;
        let flushed = self.transform.transform(None);
        if let Some(trailers) = self.trailers.as_mut() {
            self.transform.trailers(trailers);
        }
        match flushed {
            Ok(tail) => {
                let out = match (
                    head.filter(|b| !b.is_empty()),
                    tail.filter(|b| !b.is_empty()),
                ) {
                    (Some(mut h), Some(t)) => {
                        h.append(t);
                        Some(h)
                    }
                    (h, t) => h.or(t),
                };
                Poll::Ready(out.map(Ok))
            }
            Err(e) => self.fail(e),
        }
    }
}

impl<S: Source + Unpin, T: Transform + Unpin> Source for Pipeline<S, T> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        loop {
            match &this.state {
                State::Streaming => {}
                State::Done => return Poll::Ready(None),
                State::Failed(e) => return Poll::Ready(Some(Err(e.clone()))),
            }
            let Some(source) = this.source.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(source).poll_next_batch(cx) {
                Poll::Ready(Some(Ok(batch))) => {
                    this.idle_flushed = false;
                    let at_end = this.source.as_ref().is_some_and(|s| s.is_end_stream());
                    let out = this.transform.transform(Some(batch));
                    if at_end {
                        // The source knows it is done: flush in this same
                        // poll, so the last batch carries the flush output
                        // and `is_end_stream` turns true with it.
                        return match out {
                            Ok(head) => this.finish(head),
                            Err(e) => this.fail(e),
                        };
                    }
                    if let Some(ready) = this.emit(out) {
                        return ready;
                    }
                }
                Poll::Ready(Some(Err(e))) => return this.fail(e),
                Poll::Ready(None) => return this.finish(None),
                Poll::Pending => {
                    if this.idle_flushed {
                        return Poll::Pending;
                    }
                    this.idle_flushed = true;
                    let out = this.transform.idle();
                    return this.emit(out).unwrap_or(Poll::Pending);
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.state, &self.source) {
            (State::Streaming, Some(source)) => self.transform.size_hint(source.size_hint()),
            _ => SizeHint::with_exact(0),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.get_mut().trailers.take()
    }
}

impl<S, T: Transform> Drop for Pipeline<S, T> {
    fn drop(&mut self) {
        if matches!(self.state, State::Streaming) {
            // The consumer stopped early: release the source first, then let
            // the transforms clean up.
            self.source = None;
            self.transform
                .abort(&StreamError::aborted("the consumer stopped before the end"));
        }
    }
}
