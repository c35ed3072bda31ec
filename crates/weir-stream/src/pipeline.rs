//! [`Pipeline`]: a source and its transforms, run when the consumer polls.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::HeaderMap;
use http_body::SizeHint;
use pin_project_lite::pin_project;
use tokio::task::coop;

use crate::transform::{concat, non_empty};
use crate::{Batch, BatchResult, CancelToken, Chain, Source, StreamError, Transform, TransformExt};

pin_project! {
    /// A lazy, demand-driven pipeline: a [`Source`] followed by a [`Transform`]
    /// (one stage, or several fused with [`TransformExt::then`] or
    /// [`Pipeline::then`]).
    ///
    /// A pipeline is itself a [`Source`], so pipelines nest, and the
    /// stateful and async layers of [`stateful`](crate::stateful) wrap it.
    ///
    /// - Building one polls nothing (PULL-001); each poll pulls from the source
    ///   only until one non-empty output batch exists (PULL-002).
    /// - The first poll starts the transform with the pipeline-wide token
    ///   ([`Transform::start`], PULL-044) and hands it upstream
    ///   ([`Source::start`]).
    /// - When the source returns `Pending`, the transform is asked once, through
    ///   [`Transform::idle`], to emit what it holds back; not again until a new
    ///   batch has arrived. A pending source is polled again only when it
    ///   wakes the consumer (PULL-050).
    /// - At the source's end the transform is flushed exactly once (PULL-031),
    ///   the source's trailers are kept for [`Source::take_trailers`], and the
    ///   source is dropped. Normal completion does not fire the token (PULL-042).
    /// - On an error the token fires with it, the source is dropped at once,
    ///   the transform is aborted with the error, and the error is returned
    ///   unchanged, now and on every later poll (PULL-040, CORE-006).
    /// - Dropping the pipeline before its end fires the token with
    ///   [`StreamError::Aborted`], drops the source and aborts the transform
    ///   with that same error (PULL-041): for a proxied body, this closes the
    ///   upstream connection instead of pooling it half-read. A pipeline
    ///   dropped before its first poll aborts its transform too, though it
    ///   never started it.
    /// - An external token given with [`Pipeline::with_token`] is checked on
    ///   every poll (PULL-043).
    /// - The outermost layer of a chain spends one unit of tokio's
    ///   cooperative budget per poll, so an always-ready source cannot starve
    ///   the other tasks of its thread (PULL-051); outside a tokio runtime
    ///   this does nothing.
    ///
    /// The token fired is the pipeline's own, made on the first poll by the
    /// outermost layer (or adopted from the layer downstream, see
    /// [`Source::start`]); it is never the external token, which other
    /// pipelines may share.
    #[derive(Debug)]
    #[project = PipelineProj]
    pub struct Pipeline<S, T: Transform> {
        #[pin]
        source: Option<S>,
        // `None` only inside `then`, which consumes the pipeline.
        transform: Option<T>,
        life: Life,
        cancel: Option<CancelToken>,
        // Whether the transform was asked for its idle output since the last batch.
        idle_flushed: bool,
        trailers: Option<HeaderMap>,
    }

    impl<S, T: Transform> PinnedDrop for Pipeline<S, T> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if let Some(reason) = this.life.drop_reason() {
                // The consumer stopped early: release the source first, then
                // let the transforms clean up.
                this.source.set(None);
                if let Some(transform) = this.transform.as_mut() {
                    transform.abort(&reason);
                }
            }
        }
    }
}

/// Builds a pipeline that pulls from `source` through `transform`.
///
/// Pass `()` for a pipeline with no transform.
/// [`SourceExt::then`](crate::SourceExt::then) does the same without the
/// `Unpin` bound.
pub fn pull<S: Source + Unpin, T: Transform>(source: S, transform: T) -> Pipeline<S, T> {
    Pipeline::new(source, transform)
}

impl<S, T: Transform> Pipeline<S, T> {
    /// A pipeline over any source, pinned or not. Polls nothing; allocates nothing.
    pub(crate) fn new(source: S, transform: T) -> Self {
        Pipeline {
            source: Some(source),
            transform: Some(transform),
            life: Life::new(),
            cancel: None,
            idle_flushed: false,
            trailers: None,
        }
    }

    /// The transform, for inspection.
    pub fn transform_ref(&self) -> &T {
        match &self.transform {
            Some(transform) => transform,
            None => unreachable!("only `then` takes the transform, and it consumes the pipeline"),
        }
    }

    /// Makes the pipeline fail once `token` fires (PULL-043).
    ///
    /// Before the first poll, a fired token fails the first poll with
    /// [`StreamError::Aborted`] carrying the token's reason, and no
    /// transform is called (not even [`Transform::start`]). Later, the next
    /// poll fails the same way: the pipeline's own token fires with that
    /// reason, the source is dropped and every transform, upstream layers
    /// included, is aborted with it. A pending pipeline is woken when the
    /// token fires. The token itself is only read: failures of the pipeline
    /// never fire it.
    pub fn with_token(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Fuses `next` after the pipeline's transform: the result is still one
    /// pipeline with one loop, its transform a [`Chain`] (FAST-006).
    ///
    /// Meant for building. Called on a pipeline that already runs, `next`
    /// is started at once and sees only the batches that come after; on
    /// one that has ended or failed, it is never called.
    pub fn then<U: Transform>(mut self, mut next: U) -> Pipeline<S, Chain<T, U>> {
        let life = std::mem::replace(&mut self.life, Life::ended());
        if let Some(token) = life.running_token() {
            next.start(token);
        }
        Pipeline {
            source: self.source.take(),
            transform: self.transform.take().map(|t| t.then(next)),
            life,
            cancel: self.cancel.take(),
            idle_flushed: self.idle_flushed,
            trailers: self.trailers.take(),
        }
    }
}

impl<S: Source, T: Transform> Source for Pipeline<S, T> {
    #[inline(always)]
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut this = self.project();
        if !this.life.is_running() || this.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            // Off the hot path: the first poll, a poll after the end, or a
            // fired token. Only small values come back from here: a batch
            // merged in from a cold path would cost the hot one its copies.
            match gate(&mut this) {
                Gate::Go => {}
                Gate::End => return Poll::Ready(None),
                Gate::Fail(e) => return Poll::Ready(Some(Err(e))),
            }
        }
        ready!(this.life.poll_budget(cx));
        run(&mut this, cx)
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.source, &self.transform) {
            (Some(source), Some(transform)) if self.life.is_live() => {
                transform.size_hint(source.size_hint())
            }
            _ => SizeHint::with_exact(0),
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

/// What a poll off the hot path decided.
enum Gate {
    /// Run the pipeline.
    Go,
    /// It has ended: `None`.
    End,
    /// It has failed, or failed now: this error.
    Fail(StreamError),
}

/// The first poll (start the stages), a poll after the end or the error
/// (the same answer again, CORE-006/007), or a fired external token
/// (fail with its reason, PULL-043).
#[cold]
#[inline(never)]
fn gate<S: Source, T: Transform>(this: &mut PipelineProj<'_, S, T>) -> Gate {
    match this.life.finished() {
        Some(None) => return Gate::End,
        Some(Some(Err(e))) => return Gate::Fail(e),
        Some(Some(Ok(_))) | None => {}
    }
    if let Some(err) = this.cancel.as_ref().and_then(CancelToken::reason) {
        return Gate::Fail(fail(this, err));
    }
    if let Some(token) = this.life.begin() {
        if let Some(transform) = this.transform.as_mut() {
            transform.start(token);
        }
        if let Some(source) = this.source.as_mut().as_pin_mut() {
            source.start(token);
        }
    }
    Gate::Go
}

/// Pulls until one output batch, the end, an error, or `Pending`.
///
/// Shaped for the compiler: after the source's poll, every value returned
/// is built here from what the source or the transform gave (errors go to
/// [`failed`], which only records them). A batch that comes from an
/// out-of-line path merged into the returned value makes the compiler spill
/// every batch through the stack in pieces, and the consumer's next copy of
/// it then waits on those stores: that alone tripled the cost of a
/// one-chunk batch. So the end and idle paths that can produce a batch of
/// their own run only for stages that hold data back
/// ([`Transform::holds_back`]), a constant the compiler folds away for the
/// others.
#[inline(always)]
fn run<S: Source, T: Transform>(
    this: &mut PipelineProj<'_, S, T>,
    cx: &mut Context<'_>,
) -> Poll<Option<BatchResult>> {
    loop {
        // Both taken before the poll: no path after it may drop the batch
        // through out-of-line glue (see above).
        let (Some(source), Some(transform)) =
            (this.source.as_mut().as_pin_mut(), this.transform.as_mut())
        else {
            // Only a pipeline that ended or failed has neither, and `gate`
            // answers for those before `run` is called.
            return Poll::Ready(None);
        };
        match source.poll_next_batch(cx) {
            Poll::Ready(Some(Ok(batch))) => {
                *this.idle_flushed = false;
                let at_end = this
                    .source
                    .as_ref()
                    .get_ref()
                    .as_ref()
                    .is_some_and(Source::is_end_stream);
                if transform.holds_back() {
                    if at_end {
                        // The source knows it is done: flush in this same
                        // poll, so the last batch carries the flush output
                        // and `is_end_stream` turns true with it.
                        return finished(last(this, batch));
                    }
                    let out = if transform.is_identity() {
                        // Elided (a boxed identity would cost a call).
                        Ok(Some(batch))
                    } else {
                        transform.transform(Some(batch))
                    };
                    match out {
                        Ok(Some(out)) if !out.is_empty() => return Poll::Ready(Some(Ok(out))),
                        Ok(_) => continue,
                        Err(e) => {
                            failed(this, e.clone());
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
                // Each arm returns what it was given, built in place: see
                // the doc comment above.
                match transform.transform(Some(batch)) {
                    Ok(out) => {
                        if at_end {
                            end_quietly(this);
                        }
                        if let Some(out) = out {
                            if !out.is_empty() {
                                return Poll::Ready(Some(Ok(out)));
                            }
                            out.discard_empty();
                        }
                        if at_end {
                            return Poll::Ready(None);
                        }
                    }
                    Err(e) => {
                        failed(this, e.clone());
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
            Poll::Ready(Some(Err(e))) => {
                failed(this, e.clone());
                return Poll::Ready(Some(Err(e)));
            }
            Poll::Ready(None) => {
                if this.transform.as_ref().is_some_and(Transform::holds_back) {
                    return finished(finish(this, None));
                }
                end_quietly(this);
                return Poll::Ready(None);
            }
            Poll::Pending => {
                if this.transform.as_ref().is_some_and(Transform::holds_back) {
                    return idle(this, cx);
                }
                watch_token(this, cx);
                return Poll::Pending;
            }
        }
    }
}

/// The source ended and the transform emits nothing at its flush
/// ([`Transform::holds_back`] is false): flush it all the same (PULL-031),
/// keep the trailers, drop the source.
#[cold]
#[inline(never)]
fn end_quietly<S: Source, T: Transform>(this: &mut PipelineProj<'_, S, T>) {
    let flushed = finish(this, None);
    debug_assert!(
        matches!(flushed, Ok(None)),
        "a transform that does not hold back emitted or failed at its flush"
    );
}

/// The source is pending and the transform holds nothing back: make a
/// fired external token wake this pipeline; the next poll fails with its
/// reason (PULL-043).
#[inline]
fn watch_token<S: Source, T: Transform>(this: &mut PipelineProj<'_, S, T>, cx: &mut Context<'_>) {
    if let Some(cancel) = this.cancel.as_ref()
        && cancel.poll_cancelled(cx).is_ready()
    {
        cx.waker().wake_by_ref();
    }
}

/// The answer of [`finish`] as a poll result.
#[inline]
fn finished(out: Result<Option<Batch>, StreamError>) -> Poll<Option<BatchResult>> {
    Poll::Ready(match out {
        Ok(Some(batch)) => Some(Ok(batch)),
        Ok(None) => None,
        Err(e) => Some(Err(e)),
    })
}

/// The source went pending: check the external token, then give the
/// transform its one idle call for this idle period.
#[cold]
#[inline(never)]
fn idle<S: Source, T: Transform>(
    this: &mut PipelineProj<'_, S, T>,
    cx: &mut Context<'_>,
) -> Poll<Option<BatchResult>> {
    if let Some(cancel) = this.cancel.as_ref()
        && let Poll::Ready(err) = cancel.poll_cancelled(cx)
    {
        return Poll::Ready(Some(Err(fail(this, err))));
    }
    if *this.idle_flushed {
        return Poll::Pending;
    }
    *this.idle_flushed = true;
    let Some(transform) = this.transform.as_mut() else {
        return Poll::Pending;
    };
    match transform.idle() {
        Ok(out) => non_empty(out).map_or(Poll::Pending, |b| Poll::Ready(Some(Ok(b)))),
        Err(e) => Poll::Ready(Some(Err(fail(this, e)))),
    }
}

/// The source's last batch: through the transform, then the flush.
#[cold]
#[inline(never)]
fn last<S: Source, T: Transform>(
    this: &mut PipelineProj<'_, S, T>,
    batch: Batch,
) -> Result<Option<Batch>, StreamError> {
    let out = match this.transform.as_mut() {
        Some(transform) => transform.transform(Some(batch)),
        None => Ok(Some(batch)),
    };
    match out {
        Ok(head) => finish(this, head),
        Err(e) => Err(fail(this, e)),
    }
}

/// The source ended: keep its trailers, drop it, flush the transform, and
/// return `head` followed by the flush output.
#[cold]
#[inline(never)]
fn finish<S: Source, T: Transform>(
    this: &mut PipelineProj<'_, S, T>,
    head: Option<Batch>,
) -> Result<Option<Batch>, StreamError> {
    let head = non_empty(head);
    if let Some(source) = this.source.as_mut().as_pin_mut() {
        *this.trailers = source.take_trailers();
    }
    this.source.set(None);
    this.life.finish();
    let Some(transform) = this.transform.as_mut() else {
        return Ok(head);
    };
    let tail = match transform.transform(None) {
        Ok(tail) => non_empty(tail),
        Err(e) => return Err(fail(this, e)),
    };
    if let Some(trailers) = this.trailers.as_mut() {
        transform.trailers(trailers);
    }
    Ok(match tail {
        Some(tail) => Some(concat(head, tail)),
        None => head,
    })
}

/// The pipeline failed with `err`: fire the token, drop the source, abort
/// the transform (if it was started).
#[cold]
#[inline(never)]
fn failed<S, T: Transform>(this: &mut PipelineProj<'_, S, T>, err: StreamError) {
    let started = this.life.fail(&err);
    this.source.set(None);
    if started && let Some(transform) = this.transform.as_mut() {
        transform.abort(&err);
    }
}

/// [`failed`], handing `err` back.
#[inline]
fn fail<S, T: Transform>(this: &mut PipelineProj<'_, S, T>, err: StreamError) -> StreamError {
    failed(this, err.clone());
    err
}

/// The lifecycle every pull layer shares ([`Pipeline`], the stateful and
/// async stages, the sync iterator): whether it has started, ended or
/// failed, and the pipeline-wide token (PULL-041..044).
///
/// The outermost layer of a chain makes the token on its first poll and
/// *owns* it: it alone fires it on an early drop, and it alone spends
/// tokio's coop budget. Inner layers adopt it through [`Source::start`].
/// Any layer that fails fires it, since its error ends the whole chain.
#[derive(Debug)]
pub(crate) struct Life {
    phase: Phase,
    token: Option<CancelToken>,
    owner: bool,
    /// Polls so far, for spending the coop budget every `COOP_EVERY` polls.
    polls: u32,
}

/// How many polls of a chain's outermost layer spend one unit of tokio's
/// cooperative budget (PULL-051).
const COOP_EVERY: u32 = 16;

#[derive(Debug)]
enum Phase {
    /// Built, never polled: no stage has been called.
    Built,
    Running,
    Done,
    Failed(StreamError),
}

impl Life {
    pub(crate) const fn new() -> Self {
        Life {
            phase: Phase::Built,
            token: None,
            owner: false,
            polls: 0,
        }
    }

    /// A downstream layer hands over its token: keep it, unless already started.
    pub(crate) fn adopt(&mut self, token: &CancelToken) {
        if matches!(self.phase, Phase::Built) && self.token.is_none() {
            self.token = Some(token.clone());
        }
    }

    /// What every poll returns once the layer has ended (`None`) or failed
    /// (the same error, CORE-006); `None` while it is live.
    #[inline]
    pub(crate) fn finished(&self) -> Option<Option<BatchResult>> {
        match &self.phase {
            Phase::Done => Some(None),
            Phase::Failed(e) => Some(Some(Err(e.clone()))),
            Phase::Built | Phase::Running => None,
        }
    }

    /// A lifecycle that is over: for the shell a builder leaves behind.
    pub(crate) const fn ended() -> Self {
        Life {
            phase: Phase::Done,
            token: None,
            owner: false,
            polls: 0,
        }
    }

    /// Marks the layer running. On the first call, returns the token to
    /// start its stages and its upstream with, making it if none was adopted
    /// (one allocation per chain, on its first poll).
    pub(crate) fn begin(&mut self) -> Option<&CancelToken> {
        if !matches!(self.phase, Phase::Built) {
            return None;
        }
        self.phase = Phase::Running;
        if self.token.is_none() {
            self.owner = true;
        }
        Some(self.token.get_or_insert_with(CancelToken::new))
    }

    /// The token, if the layer is running.
    pub(crate) fn running_token(&self) -> Option<&CancelToken> {
        match self.phase {
            Phase::Running => self.token.as_ref(),
            _ => None,
        }
    }

    /// Started, and neither ended nor failed: the hot path.
    #[inline]
    pub(crate) fn is_running(&self) -> bool {
        matches!(self.phase, Phase::Running)
    }

    /// Neither ended nor failed.
    #[inline]
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Built | Phase::Running)
    }

    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    #[inline]
    pub(crate) fn finish(&mut self) {
        self.phase = Phase::Done;
    }

    /// The layer failed with `err`, for good, and fires the token with it:
    /// the error is on its way to the consumer and ends the whole chain, so
    /// the layers upstream, dropped next, abort with it too (PULL-040).
    /// Returns whether the layer's stages were started, and so must be
    /// aborted.
    pub(crate) fn fail(&mut self, err: &StreamError) -> bool {
        let started = !matches!(self.phase, Phase::Built);
        self.phase = Phase::Failed(err.clone());
        if let Some(token) = &self.token {
            token.cancel_with(err.clone());
        }
        started
    }

    /// For `Drop`: if the layer has not ended, the reason its stages are
    /// aborted with (PULL-041). The owner fires the token first, so that
    /// every layer upstream, dropped next, aborts with the same reason
    /// (CORE-006); an inner layer dropped while the token is quiet (a stage
    /// downstream ended early) aborts with a reason of its own and leaves
    /// the token alone. A layer never polled has no token yet: its stages
    /// are aborted all the same, so that they can tell an unused stream
    /// from a finished one.
    pub(crate) fn drop_reason(&mut self) -> Option<StreamError> {
        match self.phase {
            Phase::Running => {}
            Phase::Built => return Some(crate::error::stopped_early()),
            Phase::Done | Phase::Failed(_) => return None,
        }
        let token = self.token.as_ref()?;
        if self.owner && !token.is_cancelled() {
            token.cancel_with(crate::error::stopped_early());
        }
        Some(token.reason().unwrap_or_else(crate::error::stopped_early))
    }

    /// The owner spends one unit of tokio's coop budget every
    /// `COOP_EVERY` polls (PULL-051); `Pending` (with a wake-up already
    /// arranged) when the task has spent its budget and should yield.
    /// Inner layers spend nothing, so a yield never reaches a layer's idle
    /// logic.
    #[inline(always)]
    pub(crate) fn poll_budget(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.owner {
            return Poll::Ready(());
        }
        // The budget lives in a thread-local; touching it on every poll
        // costs more than a pass-through poll itself. One unit every
        // `COOP_EVERY` polls still makes an always-ready chain yield.
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(COOP_EVERY) {
            return Poll::Ready(());
        }
        poll_coop(cx)
    }
}

/// Spends one unit of tokio's coop budget; `Pending` when it is spent.
/// The unit counts as progress at once: a poll that then finds its source
/// pending has spent it all the same, which only makes the task yield a
/// little sooner.
#[cold]
#[inline(never)]
fn poll_coop(cx: &mut Context<'_>) -> Poll<()> {
    coop::poll_proceed(cx).map(|restore| restore.made_progress())
}
