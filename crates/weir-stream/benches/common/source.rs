//! A bench source whose batch size is a parameter (1 or 128 chunks), so
//! batching gains stay apart from implementation gains (plan, section 3).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use weir_stream::{Batch, BatchResult, Source};

/// Yields the chunks of `iter`, `per_batch` at a time; knows its end.
#[derive(Debug)]
pub struct ChunkSource<I> {
    iter: I,
    per_batch: usize,
}

/// A source over `chunks`, `per_batch` chunks per batch.
pub fn chunks(chunks: Vec<Bytes>, per_batch: usize) -> ChunkSource<std::vec::IntoIter<Bytes>> {
    ChunkSource::new(chunks.into_iter(), per_batch)
}

impl<I: ExactSizeIterator<Item = Bytes>> ChunkSource<I> {
    /// A source over `iter`, `per_batch` chunks per batch (at least 1).
    pub fn new(iter: I, per_batch: usize) -> Self {
        ChunkSource {
            iter,
            per_batch: per_batch.max(1),
        }
    }
}

impl<I: ExactSizeIterator<Item = Bytes> + Unpin> Source for ChunkSource<I> {
    #[inline]
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        let n = self.per_batch.min(self.iter.len());
        if n == 0 {
            return Poll::Ready(None);
        }
        // `collect` (generic, so inlined here) rather than `Batch::push` in
        // a loop: `push` is not `#[inline]` and would cost a call per chunk.
        let batch: Batch = self.iter.by_ref().take(n).collect();
        Poll::Ready(Some(Ok(batch)))
    }

    fn is_end_stream(&self) -> bool {
        self.iter.len() == 0
    }
}
