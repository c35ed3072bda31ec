//! Per-chunk stages: [`map_chunks`], [`filter_map_chunks`],
//! [`filter_chunks`] and [`try_map_chunks`].
//!
//! Each runs a closure on every chunk of every batch, in place: the batch's
//! chunk list is reused (no allocation per batch or per stage), and a
//! pipeline fuses these stages like any other (FAST-006). A batch left
//! with no chunk is not passed on (CORE-001). None of them holds anything
//! back, so their flush emits nothing.

use bytes::Bytes;
use http_body::SizeHint;

use crate::{Batch, StreamError, Transform};

/// A stage that replaces each chunk with `f(chunk)`. See [`map_chunks`].
#[derive(Debug, Clone)]
pub struct MapChunks<F> {
    f: F,
}

/// A stateless transform that replaces every chunk with `f(chunk)`, in
/// order, in place.
///
/// ```
/// use weir_stream::{TransformExt, from_iter, map_chunks, SourceExt};
/// let upper = map_chunks(|c: bytes::Bytes| c.to_ascii_uppercase().into());
/// let pipeline = from_iter(["a", "b"]).then(upper.then(map_chunks(|c| c)));
/// # drop(pipeline);
/// ```
pub fn map_chunks<F>(f: F) -> MapChunks<F>
where
    F: FnMut(Bytes) -> Bytes,
{
    MapChunks { f }
}

impl<F> Transform for MapChunks<F>
where
    F: FnMut(Bytes) -> Bytes,
{
    #[inline(always)]
    fn holds_back(&self) -> bool {
        false
    }

    #[inline(always)]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match input {
            Some(batch) => Ok(Some(batch.map_chunks(&mut self.f))),
            None => Ok(None),
        }
    }
}

/// A stage that keeps and replaces chunks with `f`. See [`filter_map_chunks`].
#[derive(Debug, Clone)]
pub struct FilterMapChunks<F> {
    f: F,
}

/// A stateless transform that keeps each chunk for which `f` returns
/// `Some`, replaced by what it returns, in order, in place.
pub fn filter_map_chunks<F>(f: F) -> FilterMapChunks<F>
where
    F: FnMut(Bytes) -> Option<Bytes>,
{
    FilterMapChunks { f }
}

impl<F> Transform for FilterMapChunks<F>
where
    F: FnMut(Bytes) -> Option<Bytes>,
{
    #[inline(always)]
    fn holds_back(&self) -> bool {
        false
    }

    #[inline(always)]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input.map(|b| b.filter_map_chunks(&mut self.f)))
    }
}

/// A stage that keeps the chunks a predicate accepts. See [`filter_chunks`].
#[derive(Debug, Clone)]
pub struct FilterChunks<F> {
    f: F,
}

/// A stateless transform that keeps the chunks for which `f` returns
/// `true`, in order, in place: `filter_chunks(|c| !c.is_empty())` drops
/// zero-length chunks.
pub fn filter_chunks<F>(f: F) -> FilterChunks<F>
where
    F: FnMut(&Bytes) -> bool,
{
    FilterChunks { f }
}

impl<F> Transform for FilterChunks<F>
where
    F: FnMut(&Bytes) -> bool,
{
    #[inline(always)]
    fn holds_back(&self) -> bool {
        false
    }

    #[inline(always)]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let f = &mut self.f;
        Ok(input.map(|b| b.filter_map_chunks(|c| f(&c).then_some(c))))
    }

    fn size_hint(&self, upstream: SizeHint) -> SizeHint {
        let mut hint = SizeHint::new();
        if let Some(upper) = upstream.upper() {
            hint.set_upper(upper);
        }
        hint
    }
}

/// A stage that replaces each chunk or fails. See [`try_map_chunks`].
#[derive(Debug, Clone)]
pub struct TryMapChunks<F> {
    f: F,
}

/// A stateless transform that replaces every chunk with `f(chunk)`, in
/// order, and fails the stream with the first error `f` returns.
///
/// # Errors
/// `f`'s error, as is: the pipeline fails with it (PULL-040). The chunks of
/// the failing batch are dropped.
pub fn try_map_chunks<F>(f: F) -> TryMapChunks<F>
where
    F: FnMut(Bytes) -> Result<Bytes, StreamError>,
{
    TryMapChunks { f }
}

impl<F> Transform for TryMapChunks<F>
where
    F: FnMut(Bytes) -> Result<Bytes, StreamError>,
{
    #[inline(always)]
    fn holds_back(&self) -> bool {
        false
    }

    #[inline(always)]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let Some(batch) = input else {
            return Ok(None);
        };
        let mut failed = None;
        let f = &mut self.f;
        let out = batch.filter_map_chunks(|c| {
            if failed.is_some() {
                return None;
            }
            f(c).map_err(|e| failed = Some(e)).ok()
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(Some(out)),
        }
    }
}
