//! Stages that wrap everything upstream of them as a layer of their own,
//! instead of running inside a pipeline's fused loop: stateful transforms
//! (PULL-030) and async transforms (PULL-020).
//!
//! Chains are built with [`SourceExt`](crate::SourceExt): each
//! [`stateful`](crate::SourceExt::stateful) or
//! [`then_async`](crate::SourceExt::then_async) call wraps the chain so far,
//! so `src.then(t1).stateful(s2).then(t3).stateful(s4)` is
//! `s4(t3(s2(t1(src))))`, and each layer runs only when the layer after it
//! pulls (PULL-033). Runs of synchronous transforms between them stay fused
//! in one [`Pipeline`](crate::Pipeline) loop. No layer spawns a task, opens
//! a channel or boxes anything: a chain is one monomorphised value.
//!
//! Every layer follows the pipeline rules: one flush per transform on normal
//! completion (PULL-031), an abort instead on error or early stop (PULL-032,
//! PULL-040, PULL-041), sticky errors (CORE-006), `None` forever after the
//! end (CORE-007), and one token shared by all transforms (PULL-044).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::HeaderMap;
use http_body::SizeHint;
use pin_project_lite::pin_project;

use crate::pipeline::Life;
use crate::transform::non_empty;
use crate::{Batch, BatchResult, CancelToken, Source, StreamError};

/// A transform that drives its own iteration over the whole upstream
/// (PULL-030): the Rust form of an async generator over the batches.
///
/// Its input is an [`Upstream`], a stream of `Option<Batch>` items: `Some`
/// for each upstream batch, then exactly one `None` (the flush), then the
/// end. Each batch it yields becomes one output batch: for a, b and the
/// flush, one batch each, three in all. It may yield several batches per
/// input, or one for many, and may stop early.
///
/// Run it with [`SourceExt::stateful`](crate::SourceExt::stateful), which
/// wraps it in a [`StatefulStage`]. Because it is a poll state machine, one
/// written for async pipelines runs in a sync one too
/// ([`PipelineSync`](crate::sync_pull::PipelineSync)), where the input is
/// never pending.
///
/// ```
/// use std::task::{Context, Poll, ready};
/// use weir_stream::stateful::{StatefulTransform, Upstream};
/// use weir_stream::{Batch, BatchResult, Source};
///
/// /// One output batch per input item; the flush becomes "END".
/// struct PerItem;
///
/// impl StatefulTransform for PerItem {
///     fn poll_transform<S: Source>(
///         &mut self,
///         cx: &mut Context<'_>,
///         input: &mut Upstream<'_, S>,
///     ) -> Poll<Option<BatchResult>> {
///         Poll::Ready(match ready!(input.poll_next(cx)) {
///             Some(Some(batch)) => Some(Ok(batch)),
///             Some(None) => Some(Ok(Batch::one("END"))),
///             None => None,
///         })
///     }
/// }
/// ```
pub trait StatefulTransform {
    /// Polls for the next output batch, pulling from `input` as needed.
    ///
    /// Returns `Ready(Some(Ok(batch)))` to emit one batch (an empty one is
    /// skipped, CORE-001), `Ready(None)` when done, or `Pending` when `input`
    /// returned `Pending` (which arranged the wake-up). `input` is pending
    /// exactly when the upstream is idle, after the layers upstream were
    /// asked for their idle output: that is the moment to emit what is held
    /// back, the stateful form of [`Transform::idle`](crate::Transform::idle).
    ///
    /// Returning `Ready(None)` before `input` gave its flush ends the stage
    /// early: the layers upstream are dropped and aborted (PULL-041); this
    /// transform is not.
    ///
    /// # Errors
    /// `Ready(Some(Err(e)))` ends the stream with `e`, unchanged (PULL-040).
    /// An upstream error does not go through the transform: `input` ends
    /// without a flush, and the stage fails with the upstream's error
    /// whatever the transform returns, aborting it.
    fn poll_transform<S: Source>(
        &mut self,
        cx: &mut Context<'_>,
        input: &mut Upstream<'_, S>,
    ) -> Poll<Option<BatchResult>>;

    /// The stage was polled for the first time; `token` is the
    /// pipeline-wide token (see [`Transform::start`](crate::Transform::start)).
    /// Does nothing by default.
    fn start(&mut self, token: &CancelToken) {
        let _ = token;
    }

    /// The stream failed or its consumer stopped before this transform
    /// ended; `reason` says which. Does nothing by default.
    fn abort(&mut self, reason: &StreamError) {
        let _ = reason;
    }

    /// The upstream ended with trailers: inspect or edit them. Called once,
    /// after the transform ended, only when there are trailers. Does
    /// nothing by default.
    fn trailers(&mut self, trailers: &mut HeaderMap) {
        let _ = trailers;
    }
}

/// The input of a [`StatefulTransform`]: the upstream as a stream of
/// `Option<Batch>` items.
///
/// [`Upstream::poll_next`] yields `Some(Some(batch))` for each non-empty
/// upstream batch, then `Some(None)` once (the flush), then `None`. The
/// upstream is dropped as soon as it has ended, before the flush item is
/// yielded. It is also a [`futures_core::Stream`] of the same items.
pub struct Upstream<'a, S> {
    source: Pin<&'a mut Option<S>>,
    input: &'a mut Input,
    trailers: &'a mut Option<HeaderMap>,
}

/// Where a stateful stage's input stands.
#[derive(Debug)]
enum Input {
    Open,
    /// The upstream ended; the flush item is next.
    Ended,
    Flushed,
    Failed(StreamError),
}

impl<S: Source> Upstream<'_, S> {
    /// Polls for the next item. See the type's documentation.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Option<Batch>>> {
        loop {
            match self.input {
                Input::Open => {}
                Input::Ended => {
                    *self.input = Input::Flushed;
                    return Poll::Ready(Some(None));
                }
                Input::Flushed | Input::Failed(_) => return Poll::Ready(None),
            }
            let Some(source) = self.source.as_mut().as_pin_mut() else {
                *self.input = Input::Ended;
                continue;
            };
            match source.poll_next_batch(cx) {
                Poll::Ready(Some(Ok(batch))) => {
                    if self
                        .source
                        .as_ref()
                        .get_ref()
                        .as_ref()
                        .is_some_and(Source::is_end_stream)
                    {
                        self.end();
                    }
                    if !batch.is_empty() {
                        return Poll::Ready(Some(Some(batch)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    self.source.set(None);
                    *self.input = Input::Failed(e);
                    return Poll::Ready(None);
                }
                Poll::Ready(None) => self.end(),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Whether the flush item has been yielded (or the input failed).
    pub fn is_end_stream(&self) -> bool {
        matches!(self.input, Input::Flushed | Input::Failed(_))
    }

    /// Bounds on the upstream bytes still to come.
    pub fn size_hint(&self) -> SizeHint {
        match self.source.as_ref().get_ref() {
            Some(source) => source.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }

    /// The upstream ended: keep its trailers, drop it, and make the flush next.
    fn end(&mut self) {
        if let Some(source) = self.source.as_mut().as_pin_mut() {
            *self.trailers = source.take_trailers();
        }
        self.source.set(None);
        *self.input = Input::Ended;
    }
}

impl<S: Source> futures_core::Stream for Upstream<'_, S> {
    type Item = Option<Batch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Option<Batch>>> {
        Upstream::poll_next(self.get_mut(), cx)
    }
}

impl<S> fmt::Debug for Upstream<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("input", &self.input)
            .finish_non_exhaustive()
    }
}

pin_project! {
    /// A [`StatefulTransform`] around everything upstream of it, as a
    /// [`Source`] (PULL-030, PULL-033). Built by
    /// [`SourceExt::stateful`](crate::SourceExt::stateful).
    ///
    /// Each poll polls the transform, which pulls from the upstream only as
    /// it needs (PULL-002). Every poll of the transform is followed by a
    /// check of the input: an upstream error fails the stage with that
    /// error, unchanged (PULL-040). The stage ends when the transform does;
    /// [`Source::is_end_stream`] turns true then, and the upstream's
    /// trailers (after [`StatefulTransform::trailers`]) are available.
    ///
    /// Dropping the stage before its end drops the upstream, then aborts
    /// the transform (PULL-041).
    #[derive(Debug)]
    #[project = StatefulProj]
    pub struct StatefulStage<S, T: StatefulTransform> {
        #[pin]
        upstream: Option<S>,
        transform: T,
        input: Input,
        life: Life,
        trailers: Option<HeaderMap>,
    }

    impl<S, T: StatefulTransform> PinnedDrop for StatefulStage<S, T> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(reason) = this.life.drop_reason() {
                let mut upstream = this.upstream;
                upstream.set(None);
                this.transform.abort(&reason);
            }
        }
    }
}

impl<S, T: StatefulTransform> StatefulStage<S, T> {
    /// Wraps `upstream`. Polls nothing; allocates nothing (PULL-001).
    pub fn new(upstream: S, transform: T) -> Self {
        StatefulStage {
            upstream: Some(upstream),
            transform,
            input: Input::Open,
            life: Life::new(),
            trailers: None,
        }
    }

    /// The transform, for inspection.
    pub fn transform_ref(&self) -> &T {
        &self.transform
    }
}

impl<S: Source, T: StatefulTransform> Source for StatefulStage<S, T> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut this = self.project();
        if let Some(end) = this.life.finished() {
            return Poll::Ready(end);
        }
        if let Some(token) = this.life.begin() {
            this.transform.start(token);
            if let Some(upstream) = this.upstream.as_mut().as_pin_mut() {
                upstream.start(token);
            }
        }
        ready!(this.life.poll_budget(cx));
        loop {
            let mut input = Upstream {
                source: this.upstream.as_mut(),
                input: &mut *this.input,
                trailers: &mut *this.trailers,
            };
            let out = this.transform.poll_transform(cx, &mut input);
            if let Input::Failed(e) = &*this.input {
                let e = e.clone();
                return stateful_fail(&mut this, e);
            }
            let out = match out {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(batch))) if batch.is_empty() => continue,
                Poll::Ready(Some(Ok(batch))) => Poll::Ready(Some(Ok(batch))),
                Poll::Ready(Some(Err(e))) => return stateful_fail(&mut this, e),
                Poll::Ready(None) => {
                    // Ended, perhaps before its input did: the upstream goes.
                    this.upstream.set(None);
                    this.life.finish();
                    if let Some(trailers) = this.trailers.as_mut() {
                        this.transform.trailers(trailers);
                    }
                    Poll::Ready(None)
                }
            };
            return out;
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.life.is_live() {
            SizeHint::default()
        } else {
            SizeHint::with_exact(0)
        }
    }

    fn is_end_stream(&self) -> bool {
        self.life.is_done()
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.project().trailers.take()
    }

    fn start(self: Pin<&mut Self>, token: &CancelToken) {
        self.project().life.adopt(token);
    }
}

fn stateful_fail<S, T: StatefulTransform>(
    this: &mut StatefulProj<'_, S, T>,
    err: StreamError,
) -> Poll<Option<BatchResult>> {
    let started = this.life.fail(&err);
    this.upstream.set(None);
    if started {
        this.transform.abort(&err);
    }
    Poll::Ready(Some(Err(err)))
}

/// A transform whose work is asynchronous (PULL-020): each call returns a
/// future, which the stage awaits before the output moves on.
///
/// The lifecycle is [`Transform`](crate::Transform)'s: `transform(Some(batch))`
/// per batch, then exactly one `transform(None)` (the flush), or an abort
/// instead. The future owns what it needs (it does not borrow the
/// transform), so the stage can hold it while the consumer waits.
/// [`async_fn`] makes one from a closure.
pub trait AsyncTransform {
    /// The future of one call: the output batch, or `None` to emit nothing.
    type Future: Future<Output = Result<Option<Batch>, StreamError>>;

    /// Starts transforming one batch (`Some`), or the flush (`None`).
    fn transform(&mut self, input: Option<Batch>) -> Self::Future;

    /// The stage was polled for the first time; `token` is the
    /// pipeline-wide token (see [`Transform::start`](crate::Transform::start)).
    /// Does nothing by default.
    fn start(&mut self, token: &CancelToken) {
        let _ = token;
    }

    /// The stream failed or its consumer stopped; `reason` says which. A
    /// future in flight has already been dropped. Does nothing by default.
    fn abort(&mut self, reason: &StreamError) {
        let _ = reason;
    }
}

/// An [`AsyncTransform`] made from a closure. See [`async_fn`].
#[derive(Debug, Clone)]
pub struct AsyncFn<F> {
    f: F,
}

/// An async transform from a closure that receives each batch as
/// `Some(batch)` and the flush as `None`, exactly once, and returns a future
/// of the output (`async move { .. }`).
pub fn async_fn<F, Fut>(f: F) -> AsyncFn<F>
where
    F: FnMut(Option<Batch>) -> Fut,
    Fut: Future<Output = Result<Option<Batch>, StreamError>>,
{
    AsyncFn { f }
}

impl<F, Fut> AsyncTransform for AsyncFn<F>
where
    F: FnMut(Option<Batch>) -> Fut,
    Fut: Future<Output = Result<Option<Batch>, StreamError>>,
{
    type Future = Fut;

    fn transform(&mut self, input: Option<Batch>) -> Fut {
        (self.f)(input)
    }
}

/// Where an async stage stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AsyncPhase {
    /// Pulling; the future in flight, if any, is for a batch.
    Open,
    /// The upstream has ended; the future in flight is for its last batch.
    LastBatch,
    /// The future in flight is the flush.
    Flushing,
}

pin_project! {
    /// An [`AsyncTransform`] around everything upstream of it, as a
    /// [`Source`] (PULL-020). Built by
    /// [`SourceExt::then_async`](crate::SourceExt::then_async).
    ///
    /// Each upstream batch is handed to the transform and its future is
    /// awaited, inside the consumer's polls, before the next batch is
    /// pulled: the output order is the input order, and at most one future
    /// is in flight. The future is held in place (pinned inside the stage),
    /// so an `async` block needs no box; a stage holding a future that is
    /// not `Unpin` is not `Unpin` either, which a pipeline accepts
    /// ([`SourceExt::then`](crate::SourceExt::then)); to poll it through
    /// [`SourceExt::next_batch`](crate::SourceExt::next_batch), pin it
    /// (`std::pin::pin!` or `Box::pin`).
    ///
    /// # Cancel safety
    /// Dropping the stage drops the future in flight and the upstream, then
    /// aborts the transform (PULL-041).
    #[project = AsyncProj]
    pub struct AsyncStage<S, A: AsyncTransform> {
        #[pin]
        upstream: Option<S>,
        #[pin]
        pending: Option<A::Future>,
        transform: A,
        phase: AsyncPhase,
        life: Life,
        trailers: Option<HeaderMap>,
    }

    impl<S, A: AsyncTransform> PinnedDrop for AsyncStage<S, A> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(reason) = this.life.drop_reason() {
                let (mut upstream, mut pending) = (this.upstream, this.pending);
                pending.set(None);
                upstream.set(None);
                this.transform.abort(&reason);
            }
        }
    }
}

impl<S, A: AsyncTransform> AsyncStage<S, A> {
    /// Wraps `upstream`. Polls nothing; allocates nothing (PULL-001).
    pub fn new(upstream: S, transform: A) -> Self {
        AsyncStage {
            upstream: Some(upstream),
            pending: None,
            transform,
            phase: AsyncPhase::Open,
            life: Life::new(),
            trailers: None,
        }
    }
}

impl<S, A: AsyncTransform> fmt::Debug for AsyncStage<S, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncStage")
            .field("phase", &self.phase)
            .field("in_flight", &self.pending.is_some())
            .field("life", &self.life)
            .finish_non_exhaustive()
    }
}

impl<S: Source, A: AsyncTransform> Source for AsyncStage<S, A> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut this = self.project();
        if let Some(end) = this.life.finished() {
            return Poll::Ready(end);
        }
        if let Some(token) = this.life.begin() {
            this.transform.start(token);
            if let Some(upstream) = this.upstream.as_mut().as_pin_mut() {
                upstream.start(token);
            }
        }
        ready!(this.life.poll_budget(cx));
        run_async(&mut this, cx)
    }

    fn size_hint(&self) -> SizeHint {
        if self.life.is_live() {
            SizeHint::default()
        } else {
            SizeHint::with_exact(0)
        }
    }

    fn is_end_stream(&self) -> bool {
        self.life.is_done()
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.project().trailers.take()
    }

    fn start(self: Pin<&mut Self>, token: &CancelToken) {
        self.project().life.adopt(token);
    }
}

/// Awaits the future in flight, pulls, and starts the next future, until
/// one output batch, the end, an error, or `Pending`.
fn run_async<S: Source, A: AsyncTransform>(
    this: &mut AsyncProj<'_, S, A>,
    cx: &mut Context<'_>,
) -> Poll<Option<BatchResult>> {
    loop {
        if let Some(future) = this.pending.as_mut().as_pin_mut() {
            let out = ready!(future.poll(cx));
            this.pending.set(None);
            let out = match out {
                Ok(out) => non_empty(out),
                Err(e) => return async_fail(this, e),
            };
            match *this.phase {
                AsyncPhase::Flushing => {
                    this.life.finish();
                    return Poll::Ready(out.map(Ok));
                }
                AsyncPhase::LastBatch => {
                    // Flush right away, so the last batch carries the
                    // flush output when the flush has something.
                    *this.phase = AsyncPhase::Flushing;
                    let flush = this.transform.transform(None);
                    this.pending.set(Some(flush));
                    if let Some(batch) = out {
                        // Deliver the last batch now; the flush is awaited next poll.
                        return Poll::Ready(Some(Ok(batch)));
                    }
                    continue;
                }
                AsyncPhase::Open => {
                    if let Some(batch) = out {
                        return Poll::Ready(Some(Ok(batch)));
                    }
                    continue;
                }
            }
        }
        let Some(upstream) = this.upstream.as_mut().as_pin_mut() else {
            // The flush was delivered already (pending is None, phase is past Open).
            this.life.finish();
            return Poll::Ready(None);
        };
        match upstream.poll_next_batch(cx) {
            Poll::Ready(Some(Ok(batch))) => {
                let at_end = this
                    .upstream
                    .as_ref()
                    .get_ref()
                    .as_ref()
                    .is_some_and(Source::is_end_stream);
                if at_end {
                    end_upstream(this);
                }
                if batch.is_empty() {
                    if at_end {
                        start_flush(this);
                    }
                    continue;
                }
                if at_end {
                    *this.phase = AsyncPhase::LastBatch;
                }
                let future = this.transform.transform(Some(batch));
                this.pending.set(Some(future));
            }
            Poll::Ready(Some(Err(e))) => return async_fail(this, e),
            Poll::Ready(None) => {
                end_upstream(this);
                start_flush(this);
            }
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// The upstream ended: keep its trailers and drop it.
fn end_upstream<S: Source, A: AsyncTransform>(this: &mut AsyncProj<'_, S, A>) {
    if let Some(upstream) = this.upstream.as_mut().as_pin_mut() {
        *this.trailers = upstream.take_trailers();
    }
    this.upstream.set(None);
}

fn start_flush<S, A: AsyncTransform>(this: &mut AsyncProj<'_, S, A>) {
    *this.phase = AsyncPhase::Flushing;
    let flush = this.transform.transform(None);
    this.pending.set(Some(flush));
}

fn async_fail<S, A: AsyncTransform>(
    this: &mut AsyncProj<'_, S, A>,
    err: StreamError,
) -> Poll<Option<BatchResult>> {
    let started = this.life.fail(&err);
    this.pending.set(None);
    this.upstream.set(None);
    if started {
        this.transform.abort(&err);
    }
    Poll::Ready(Some(Err(err)))
}
