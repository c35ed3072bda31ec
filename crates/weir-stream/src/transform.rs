//! [`Transform`]: a synchronous stage that a pipeline runs inline.

use http::HeaderMap;
use http_body::SizeHint;

use bytes::Bytes;

use crate::map::{
    FilterChunks, FilterMapChunks, MapChunks, TryMapChunks, filter_chunks, filter_map_chunks,
    map_chunks, try_map_chunks,
};
use crate::{Batch, CancelToken, StreamError};

/// A synchronous stage of a [`Pipeline`](crate::Pipeline).
///
/// The pipeline calls it inside its consumer's poll, so a transform never
/// runs ahead of demand, and needs no task, channel or allocation of its own.
///
/// Lifecycle: `start(token)` once, on the pipeline's first poll; then
/// `transform(Some(batch))` for each input batch, in order; then exactly one
/// `transform(None)` (the flush) on normal completion (PULL-031); or, instead
/// of the flush, one `abort(reason)` when the stream fails or its consumer
/// stops early (PULL-032). After either, no method is called again. A
/// pipeline dropped before its first poll calls only `abort`; one whose
/// external token fired before its first poll calls nothing at all (PULL-043).
///
/// The "ctx" of the catalogue (PULL-044) is, in Rust, the transform's own
/// `&mut self` (each stage has its own state) plus the token handed to
/// [`Transform::start`], which is the same token for every transform of a
/// pipeline, across its stateful and async layers too.
pub trait Transform {
    /// Whether the stage passes every batch through untouched and does
    /// nothing on flush, idle or abort: a pipeline then hands the source's
    /// batch on as it came, without running the stage (identity stages are
    /// elided). `false` by default; a constant for every type here, so the
    /// check folds away.
    #[inline]
    fn is_identity(&self) -> bool {
        false
    }

    /// Whether the stage may hold data back and emit it later: from its
    /// flush (`transform(None)`) or from [`Transform::idle`]. `true` by
    /// default. A stage that returns `false` promises that both always
    /// emit nothing and never fail; a pipeline then ends and goes idle
    /// without looking for their output, which keeps its per-batch path
    /// free of the copies that output would cost. A constant for every
    /// type here.
    #[inline]
    fn holds_back(&self) -> bool {
        true
    }

    /// Transforms one batch (`Some`), or flushes at the end of input (`None`).
    ///
    /// Returns the output batch, or `None` (or an empty batch) to emit nothing
    /// this time; the pipeline never passes an empty batch on (CORE-001).
    ///
    /// # Errors
    /// An error ends the stream: it reaches the consumer unchanged, and every
    /// transform of the pipeline is aborted with it (PULL-040).
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError>;

    /// The pipeline was polled for the first time: `token` is the token
    /// shared by every transform of the pipeline (PULL-044).
    ///
    /// The token fires when the pipeline fails (with the error, PULL-040),
    /// when its consumer stops early (with [`StreamError::Aborted`],
    /// PULL-041) or when the pipeline's external token fires (with that
    /// token's reason, PULL-043); never on normal completion (PULL-042). The
    /// transform is also told through [`Transform::abort`]; the token is for
    /// work it handed elsewhere (a task, a thread, an origin fetch): clone it
    /// there. It is for watching: a stage that wants to stop the stream
    /// returns an error instead of firing it. Called once, on the first
    /// poll, before the first batch. Does nothing by default.
    fn start(&mut self, token: &CancelToken) {
        let _ = token;
    }

    /// The upstream went idle (its source returned `Pending`): emit what is
    /// held back, if anything (a compressor's sync flush, a coalescer's partial
    /// batch). Called at most once per idle period. Emits nothing by default.
    ///
    /// # Errors
    /// As for [`Transform::transform`].
    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        Ok(None)
    }

    /// The stream failed or its consumer stopped; `reason` says which.
    /// Release resources here. Does nothing by default.
    fn abort(&mut self, reason: &StreamError) {
        let _ = reason;
    }

    /// Bounds on the output length given bounds on the input length.
    /// Unknown by default; a length-preserving stage returns `upstream`.
    fn size_hint(&self, upstream: SizeHint) -> SizeHint {
        let _ = upstream;
        SizeHint::default()
    }

    /// The source ended with trailers: inspect or edit them before they go
    /// on (a stage that changes the body may have to drop a checksum; a
    /// proxy drops fields a trailer must not carry). Called once, after the
    /// flush, and only when there are trailers. Does nothing by default.
    fn trailers(&mut self, trailers: &mut HeaderMap) {
        let _ = trailers;
    }
}

/// The identity: a pipeline with `()` as its transform forwards batches as they are.
impl Transform for () {
    #[inline]
    fn is_identity(&self) -> bool {
        true
    }

    #[inline]
    fn holds_back(&self) -> bool {
        false
    }

    #[inline(always)]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input)
    }

    fn size_hint(&self, upstream: SizeHint) -> SizeHint {
        upstream
    }
}

impl<T: Transform + ?Sized> Transform for Box<T> {
    #[inline]
    fn is_identity(&self) -> bool {
        (**self).is_identity()
    }

    #[inline]
    fn holds_back(&self) -> bool {
        (**self).holds_back()
    }

    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        (**self).transform(input)
    }

    fn start(&mut self, token: &CancelToken) {
        (**self).start(token)
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        (**self).idle()
    }

    fn abort(&mut self, reason: &StreamError) {
        (**self).abort(reason)
    }

    fn size_hint(&self, upstream: SizeHint) -> SizeHint {
        (**self).size_hint(upstream)
    }

    fn trailers(&mut self, trailers: &mut HeaderMap) {
        (**self).trailers(trailers)
    }
}

/// Two transforms fused into one: `first`'s output is `second`'s input.
///
/// Built with [`TransformExt::then`]. The fused chain is monomorphised into
/// one call path: no queue between the stages.
#[derive(Debug, Clone, Default)]
pub struct Chain<A, B> {
    first: A,
    second: B,
}

impl<A: Transform, B: Transform> Chain<A, B> {
    /// The hot path: one batch through both stages.
    #[inline(always)]
    fn pass(&mut self, batch: Batch) -> Result<Option<Batch>, StreamError> {
        // No `?` and no plain drop of the middle batch: either would hand
        // its address to out-of-line code, and the batch would then go
        // through the stack between the stages.
        match self.first.transform(Some(batch)) {
            Ok(Some(mid)) => {
                if !mid.is_empty() {
                    return self.second.transform(Some(mid));
                }
                mid.discard_empty();
                Ok(None)
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Flush `first`, feed its last output to `second`, then flush `second`.
    #[cold]
    #[inline(never)]
    fn flush(&mut self) -> Result<Option<Batch>, StreamError> {
        let mut out = match non_empty(self.first.transform(None)?) {
            Some(mid) => self.second.transform(Some(mid))?,
            None => None,
        };
        if let Some(tail) = self.second.transform(None)? {
            out = Some(concat(out, tail));
        }
        Ok(out)
    }
}

impl<A: Transform, B: Transform> Transform for Chain<A, B> {
    #[inline]
    fn is_identity(&self) -> bool {
        self.first.is_identity() && self.second.is_identity()
    }

    #[inline]
    fn holds_back(&self) -> bool {
        self.first.holds_back() || self.second.holds_back()
    }

    #[inline(always)]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match input {
            Some(batch) => self.pass(batch),
            None => self.flush(),
        }
    }

    fn start(&mut self, token: &CancelToken) {
        self.first.start(token);
        self.second.start(token);
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        let mut out = match non_empty(self.first.idle()?) {
            Some(mid) => self.second.transform(Some(mid))?,
            None => None,
        };
        if let Some(tail) = self.second.idle()? {
            out = Some(concat(out, tail));
        }
        Ok(out)
    }

    fn abort(&mut self, reason: &StreamError) {
        self.first.abort(reason);
        self.second.abort(reason);
    }

    fn size_hint(&self, upstream: SizeHint) -> SizeHint {
        self.second.size_hint(self.first.size_hint(upstream))
    }

    fn trailers(&mut self, trailers: &mut HeaderMap) {
        self.first.trailers(trailers);
        self.second.trailers(trailers);
    }
}

/// `batch`, unless it is `None` or holds no chunk (CORE-001).
#[inline]
pub(crate) fn non_empty(batch: Option<Batch>) -> Option<Batch> {
    batch.filter(|b| !b.is_empty())
}

/// `tail` appended to `head`, if any.
pub(crate) fn concat(head: Option<Batch>, tail: Batch) -> Batch {
    match head {
        Some(mut head) => {
            head.append(tail);
            head
        }
        None => tail,
    }
}

/// Combinators for every [`Transform`]. Each returns one fused [`Chain`].
pub trait TransformExt: Transform + Sized {
    /// Runs `self`, then `next` on its output.
    fn then<B: Transform>(self, next: B) -> Chain<Self, B> {
        Chain {
            first: self,
            second: next,
        }
    }

    /// Runs `self`, then replaces every chunk of its output with `f(chunk)`,
    /// in place: `self.then(map_chunks(f))`, see [`map_chunks`].
    fn map_chunks<F>(self, f: F) -> Chain<Self, MapChunks<F>>
    where
        F: FnMut(Bytes) -> Bytes,
    {
        self.then(map_chunks(f))
    }

    /// Runs `self`, then keeps the chunks `f` maps to `Some`:
    /// `self.then(filter_map_chunks(f))`, see [`filter_map_chunks`].
    fn filter_map_chunks<F>(self, f: F) -> Chain<Self, FilterMapChunks<F>>
    where
        F: FnMut(Bytes) -> Option<Bytes>,
    {
        self.then(filter_map_chunks(f))
    }

    /// Runs `self`, then keeps the chunks `f` accepts:
    /// `self.then(filter_chunks(f))`, see [`filter_chunks`].
    fn filter_chunks<F>(self, f: F) -> Chain<Self, FilterChunks<F>>
    where
        F: FnMut(&Bytes) -> bool,
    {
        self.then(filter_chunks(f))
    }

    /// Runs `self`, then replaces every chunk with `f(chunk)` or fails:
    /// `self.then(try_map_chunks(f))`, see [`try_map_chunks`].
    fn try_map_chunks<F>(self, f: F) -> Chain<Self, TryMapChunks<F>>
    where
        F: FnMut(Bytes) -> Result<Bytes, StreamError>,
    {
        self.then(try_map_chunks(f))
    }
}

impl<T: Transform> TransformExt for T {}

/// A stateless transform made from a closure. See [`transform_fn`].
#[derive(Debug, Clone)]
pub struct FnTransform<F> {
    f: F,
}

/// A transform from a closure that receives each batch as `Some(batch)` and
/// the flush as `None`, exactly once.
pub fn transform_fn<F>(f: F) -> FnTransform<F>
where
    F: FnMut(Option<Batch>) -> Result<Option<Batch>, StreamError>,
{
    FnTransform { f }
}

impl<F> Transform for FnTransform<F>
where
    F: FnMut(Option<Batch>) -> Result<Option<Batch>, StreamError>,
{
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        (self.f)(input)
    }
}
