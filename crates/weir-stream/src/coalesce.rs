//! [`coalesce`]: a transform that gathers small chunks into fewer, larger ones.
//!
//! A renderer that writes many tiny pieces (an SSR stream, a template
//! engine) would otherwise put each on the wire as its own frame or
//! `writev` slice. [`Coalesce`] holds small chunks back while more input is
//! ready, and lets go of them as one chunk once it holds enough, when the
//! input goes idle, or at the end.

use bytes::{Bytes, BytesMut};
use http_body::SizeHint;

use crate::{Batch, StreamError, Transform};

/// [`Coalesce`]'s default `min_bytes`: 8 KiB.
pub const DEFAULT_MIN_BYTES: usize = 8 * 1024;

/// [`Coalesce`]'s default `max_bytes`: 64 KiB.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;

/// A stateless [`Transform`] that merges small chunks. See [`coalesce`].
#[derive(Debug)]
pub struct Coalesce {
    min: usize,
    max: usize,
    held: BytesMut,
}

/// A transform that gathers chunks smaller than `min_bytes` into chunks of
/// at least `min_bytes` and at most `max_bytes`.
///
/// - Small chunks (shorter than `min_bytes`) are copied, once, into one
///   buffer. The merged chunk is emitted as soon as it holds `min_bytes`;
///   a small chunk that would take it past `max_bytes` is kept for the
///   next one instead. Merging is the point: downstream sees one `Bytes`
///   (one frame, one `writev` slice) where there were many.
/// - Large chunks (`min_bytes` or more) are already what downstream wants
///   and move untouched, never copied (CORE-002), after whatever was held;
///   one larger than `max_bytes` thus passes alone, as it is. So the
///   copying costs at most `min_bytes` per input chunk, whatever the chunk
///   sizes, and a batch of large chunks with nothing held passes as the
///   same batch, without an allocation.
/// - Zero-length chunks are dropped.
/// - The pipeline keeps pulling while it gets no output, so chunks are
///   gathered for as long as input is immediately ready; when the source
///   goes idle ([`Transform::idle`]) and at the end (the flush), whatever is
///   held is emitted, however small.
///
/// Every emitted chunk but those is thus between `min_bytes` and
/// `max_bytes`. One output batch may hold several chunks when one input
/// batch brought many bytes; chunk boundaries otherwise carry no meaning
/// here, so this is for byte streams, not for framed data.
///
/// `min_bytes` is at least 1, and `max_bytes` at least `min_bytes`.
pub fn coalesce(min_bytes: usize, max_bytes: usize) -> Coalesce {
    let min = min_bytes.max(1);
    Coalesce {
        min,
        max: max_bytes.max(min),
        held: BytesMut::new(),
    }
}

impl Default for Coalesce {
    /// [`DEFAULT_MIN_BYTES`] and [`DEFAULT_MAX_BYTES`].
    fn default() -> Self {
        coalesce(DEFAULT_MIN_BYTES, DEFAULT_MAX_BYTES)
    }
}

impl Coalesce {
    /// The size a merged chunk is emitted at, in bytes.
    pub fn min_bytes(&self) -> usize {
        self.min
    }

    /// The largest merged chunk, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max
    }

    /// The bytes held back right now.
    pub fn held_bytes(&self) -> usize {
        self.held.len()
    }

    /// Moves what is held, if anything, to `out` as one chunk.
    fn release(&mut self, out: &mut Batch) {
        if !self.held.is_empty() {
            out.push(self.held.split().freeze());
        }
    }

    fn hold(&mut self, chunk: &Bytes, out: &mut Batch) {
        if self.held.len() + chunk.len() > self.max {
            self.release(out);
        }
        if self.held.capacity() - self.held.len() < chunk.len() {
            // Room for a whole merged chunk: one allocation per few chunks
            // emitted, not one per chunk held.
            self.held.reserve(self.max);
        }
        self.held.extend_from_slice(chunk);
        if self.held.len() >= self.min {
            self.release(out);
        }
    }

    fn held_batch(&mut self) -> Option<Batch> {
        let mut out = Batch::new();
        self.release(&mut out);
        (!out.is_empty()).then_some(out)
    }
}

impl Transform for Coalesce {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let Some(batch) = input else {
            return Ok(self.held_batch());
        };
        if self.held.is_empty() && batch.chunks().iter().all(|c| c.len() >= self.min) {
            return Ok(Some(batch));
        }
        let mut out = Batch::new();
        for chunk in batch {
            if chunk.len() >= self.min {
                self.release(&mut out);
                out.push(chunk);
            } else if !chunk.is_empty() {
                self.hold(&chunk, &mut out);
            }
        }
        Ok((!out.is_empty()).then_some(out))
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        Ok(self.held_batch())
    }

    fn abort(&mut self, _reason: &StreamError) {
        self.held = BytesMut::new();
    }

    fn size_hint(&self, upstream: SizeHint) -> SizeHint {
        let held = self.held.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(upstream.lower().saturating_add(held));
        if let Some(upper) = upstream.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}
