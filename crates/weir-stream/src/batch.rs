//! [`Batch`]: several chunks moved as one unit, and [`BatchBuf`], its
//! [`Buf`] view for vectored writes.

use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes};

/// Several [`Bytes`] chunks handed over together.
///
/// A batch is what one poll of a [`Source`](crate::Source) yields: everything
/// that was ready, in order. Chunk boundaries are kept (a parser may care);
/// chunks are never copied when a batch moves through a pipeline (CORE-002).
/// A batch may hold zero-length chunks (CORE-008); the HTTP adapter skips
/// them, because on an HTTP/1.1 chunked wire a 0-size chunk ends the body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    chunks: Vec<Bytes>,
}

impl Batch {
    /// The most chunks an in-memory source puts in one batch (CORE-004).
    pub const MAX_CHUNKS: usize = 128;

    /// An empty batch. Does not allocate.
    pub const fn new() -> Self {
        Batch { chunks: Vec::new() }
    }

    /// An empty batch with room for `chunks` chunks.
    pub fn with_capacity(chunks: usize) -> Self {
        Batch {
            chunks: Vec::with_capacity(chunks),
        }
    }

    /// A batch of one chunk.
    pub fn one(chunk: impl Into<Bytes>) -> Self {
        Batch {
            chunks: vec![chunk.into()],
        }
    }

    /// Appends a chunk.
    pub fn push(&mut self, chunk: Bytes) {
        self.chunks.push(chunk);
    }

    /// Appends every chunk of `other`, in order.
    pub fn append(&mut self, other: Batch) {
        if self.chunks.is_empty() {
            self.chunks = other.chunks;
        } else {
            self.chunks.extend(other.chunks);
        }
    }

    /// Number of chunks (not bytes).
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// Whether the batch holds no chunk at all.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Total length of all chunks, in bytes.
    pub fn byte_len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Takes the chunks out.
    pub fn into_chunks(self) -> Vec<Bytes> {
        self.chunks
    }

    /// A [`Buf`] over the whole batch, for one vectored write. No copy.
    pub fn into_buf(self) -> BatchBuf {
        BatchBuf::from(self)
    }
}

impl From<Vec<Bytes>> for Batch {
    fn from(chunks: Vec<Bytes>) -> Self {
        Batch { chunks }
    }
}

impl From<Bytes> for Batch {
    fn from(chunk: Bytes) -> Self {
        Batch::one(chunk)
    }
}

impl FromIterator<Bytes> for Batch {
    fn from_iter<I: IntoIterator<Item = Bytes>>(iter: I) -> Self {
        Batch {
            chunks: iter.into_iter().collect(),
        }
    }
}

impl IntoIterator for Batch {
    type Item = Bytes;
    type IntoIter = std::vec::IntoIter<Bytes>;

    fn into_iter(self) -> Self::IntoIter {
        self.chunks.into_iter()
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = &'a Bytes;
    type IntoIter = std::slice::Iter<'a, Bytes>;

    fn into_iter(self) -> Self::IntoIter {
        self.chunks.iter()
    }
}

/// A [`Batch`] as one [`Buf`]: the data of one HTTP body frame.
///
/// [`Buf::chunks_vectored`] exposes every remaining chunk, so hyper can write
/// the whole batch with one `writev` instead of copying it into its buffer.
/// Consumed chunks are released as soon as they are passed.
#[derive(Debug, Default)]
pub struct BatchBuf {
    chunks: Vec<Bytes>,
    /// Index of the first chunk not fully consumed.
    head: usize,
    /// Bytes left from `head` on.
    remaining: usize,
}

impl From<Batch> for BatchBuf {
    fn from(batch: Batch) -> Self {
        let remaining = batch.byte_len();
        let mut buf = BatchBuf {
            chunks: batch.chunks,
            head: 0,
            remaining,
        };
        buf.skip_empty();
        buf
    }
}

impl BatchBuf {
    fn skip_empty(&mut self) {
        while self.head < self.chunks.len() && self.chunks[self.head].is_empty() {
            self.head += 1;
        }
    }
}

impl Buf for BatchBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.get(self.head).map_or(&[], |c| c.as_ref())
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for chunk in self.chunks[self.head.min(self.chunks.len())..]
            .iter()
            .filter(|c| !c.is_empty())
        {
            if n == dst.len() {
                break;
            }
            dst[n] = IoSlice::new(chunk);
            n += 1;
        }
        n
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "BatchBuf::advance: {cnt} bytes past the {} remaining",
            self.remaining
        );
        self.remaining -= cnt;
        while cnt > 0 {
            let chunk = &mut self.chunks[self.head];
            if cnt < chunk.len() {
                chunk.advance(cnt);
                return;
            }
            cnt -= chunk.len();
            // Release the chunk's memory now rather than when the frame drops.
            *chunk = Bytes::new();
            self.head += 1;
        }
        self.skip_empty();
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        // Zero-copy when the request fits in the current chunk.
        if let Some(chunk) = self.chunks.get_mut(self.head)
            && len <= chunk.len()
        {
            let out = chunk.split_to(len);
            self.remaining -= len;
            if chunk.is_empty() {
                self.head += 1;
                self.skip_empty();
            }
            return out;
        }
        assert!(
            len <= self.remaining,
            "BatchBuf::copy_to_bytes: {len} bytes past the {} remaining",
            self.remaining
        );
        let mut out = bytes::BytesMut::with_capacity(len);
        out.put((&mut *self).take(len));
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(parts: &[&'static str]) -> BatchBuf {
        parts
            .iter()
            .map(|p| Bytes::from_static(p.as_bytes()))
            .collect::<Batch>()
            .into_buf()
    }

    #[test]
    fn vectored_view_skips_empty_chunks() {
        let b = buf(&["ab", "", "cde"]);
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(b.chunks_vectored(&mut slices), 2);
        assert_eq!(&*slices[0], b"ab");
        assert_eq!(&*slices[1], b"cde");
        assert_eq!(b.remaining(), 5);
    }

    #[test]
    fn advance_crosses_chunk_boundaries() {
        let mut b = buf(&["ab", "", "cde", "f"]);
        b.advance(3);
        assert_eq!(b.chunk(), b"de");
        assert_eq!(b.remaining(), 3);
        b.advance(2);
        assert_eq!(b.chunk(), b"f");
        b.advance(1);
        assert_eq!(b.remaining(), 0);
        assert_eq!(b.chunk(), b"");
    }

    #[test]
    fn copy_to_bytes_within_a_chunk_is_zero_copy() {
        let data = Bytes::from_static(b"hello world");
        let ptr = data.as_ptr();
        let mut b = Batch::one(data).into_buf();
        let head = b.copy_to_bytes(5);
        assert_eq!(head.as_ptr(), ptr);
        assert_eq!(b.remaining(), 6);
    }

    #[test]
    fn copy_to_bytes_across_chunks_concatenates() {
        let mut b = buf(&["ab", "cd", "ef"]);
        assert_eq!(&b.copy_to_bytes(5)[..], b"abcde");
        assert_eq!(b.chunk(), b"f");
    }
}
