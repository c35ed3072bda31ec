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
///
/// A batch of one chunk, the common case for a body read off a socket,
/// holds it inline: making, moving and dropping it allocates nothing. More
/// chunks live in a `Vec`, which moves through identity stages as is.
/// (Measured against `SmallVec<[Bytes; N]>` in `benches/batch_container.rs`:
/// the inline slot pays off only for one chunk, and a small-vector is
/// slower from four chunks up, so the inline case is kept to exactly one.)
#[derive(Clone, Debug)]
pub struct Batch {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    One(Bytes),
    Many(Vec<Bytes>),
}

impl Default for Batch {
    #[inline]
    fn default() -> Self {
        Batch::new()
    }
}

impl PartialEq for Batch {
    #[inline]
    fn eq(&self, other: &Batch) -> bool {
        self.chunks() == other.chunks()
    }
}

impl Eq for Batch {}

impl Batch {
    /// The most chunks an in-memory source puts in one batch (CORE-004).
    pub const MAX_CHUNKS: usize = 128;

    /// An empty batch. Does not allocate.
    #[inline]
    pub const fn new() -> Self {
        Batch {
            repr: Repr::Many(Vec::new()),
        }
    }

    /// An empty batch with room for `chunks` chunks (no allocation for 0 or 1).
    #[inline]
    pub fn with_capacity(chunks: usize) -> Self {
        if chunks <= 1 {
            return Batch::new();
        }
        Batch {
            repr: Repr::Many(Vec::with_capacity(chunks)),
        }
    }

    /// A batch of one chunk. Does not allocate.
    #[inline]
    pub fn one(chunk: impl Into<Bytes>) -> Self {
        Batch {
            repr: Repr::One(chunk.into()),
        }
    }

    /// Appends a chunk. The first chunk of an empty batch without reserved
    /// room is kept inline; the second moves both into a `Vec`.
    #[inline]
    pub fn push(&mut self, chunk: Bytes) {
        match &mut self.repr {
            Repr::Many(v) if v.capacity() > v.len() || !v.is_empty() => v.push(chunk),
            Repr::Many(_) => self.repr = Repr::One(chunk),
            Repr::One(_) => self.spill(4).push(chunk),
        }
    }

    /// Moves an inline chunk into a `Vec` with room for `capacity` chunks.
    #[cold]
    fn spill(&mut self, capacity: usize) -> &mut Vec<Bytes> {
        if let Repr::One(first) = &mut self.repr {
            let first = std::mem::take(first);
            let mut v = Vec::with_capacity(capacity.max(2));
            v.push(first);
            self.repr = Repr::Many(v);
        }
        match &mut self.repr {
            Repr::Many(v) => v,
            Repr::One(_) => unreachable!("spilled just above"),
        }
    }

    /// Appends every chunk of `other`, in order.
    #[inline]
    pub fn append(&mut self, other: Batch) {
        if self.is_empty() {
            *self = other;
            return;
        }
        match other.repr {
            Repr::One(chunk) => self.push(chunk),
            Repr::Many(more) => {
                let extra = more.len();
                match &mut self.repr {
                    Repr::Many(v) => v.extend(more),
                    Repr::One(_) => self.spill(1 + extra).extend(more),
                }
            }
        }
    }

    /// Number of chunks (not bytes).
    #[inline]
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::One(_) => 1,
            Repr::Many(v) => v.len(),
        }
    }

    /// Whether the batch holds no chunk at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        match &self.repr {
            Repr::One(_) => false,
            Repr::Many(v) => v.is_empty(),
        }
    }

    /// Total length of all chunks, in bytes.
    #[inline]
    pub fn byte_len(&self) -> usize {
        match &self.repr {
            Repr::One(c) => c.len(),
            Repr::Many(v) => v.iter().map(Bytes::len).sum(),
        }
    }

    /// The chunks, in order.
    #[inline]
    pub fn chunks(&self) -> &[Bytes] {
        match &self.repr {
            Repr::One(c) => std::slice::from_ref(c),
            Repr::Many(v) => v,
        }
    }

    /// The chunks, in order, to modify in place (no allocation).
    #[inline]
    pub fn chunks_mut(&mut self) -> &mut [Bytes] {
        match &mut self.repr {
            Repr::One(c) => std::slice::from_mut(c),
            Repr::Many(v) => v,
        }
    }

    /// Takes the chunks out. Allocates a `Vec` for a one-chunk batch;
    /// prefer [`Batch::chunks_mut`] or iteration where that matters.
    #[inline]
    pub fn into_chunks(self) -> Vec<Bytes> {
        match self.repr {
            Repr::One(c) => vec![c],
            Repr::Many(v) => v,
        }
    }

    /// A [`Buf`] over the whole batch, for one vectored write. No copy.
    #[inline]
    pub fn into_buf(self) -> BatchBuf {
        BatchBuf::from(self)
    }
}

impl From<Vec<Bytes>> for Batch {
    #[inline]
    fn from(chunks: Vec<Bytes>) -> Self {
        Batch {
            repr: Repr::Many(chunks),
        }
    }
}

impl From<Bytes> for Batch {
    #[inline]
    fn from(chunk: Bytes) -> Self {
        Batch::one(chunk)
    }
}

impl FromIterator<Bytes> for Batch {
    /// One chunk stays inline; more are collected into a `Vec`.
    #[inline]
    fn from_iter<I: IntoIterator<Item = Bytes>>(iter: I) -> Self {
        let mut iter = iter.into_iter();
        let Some(first) = iter.next() else {
            return Batch::new();
        };
        let Some(second) = iter.next() else {
            return Batch::one(first);
        };
        let mut v = Vec::with_capacity(iter.size_hint().0.saturating_add(2));
        v.push(first);
        v.push(second);
        v.extend(iter);
        Batch::from(v)
    }
}

/// The owning iterator of a [`Batch`].
#[derive(Debug)]
pub struct IntoIter {
    inner: IntoIterRepr,
}

#[derive(Debug)]
enum IntoIterRepr {
    One(Option<Bytes>),
    Many(std::vec::IntoIter<Bytes>),
}

impl Iterator for IntoIter {
    type Item = Bytes;

    #[inline]
    fn next(&mut self) -> Option<Bytes> {
        match &mut self.inner {
            IntoIterRepr::One(c) => c.take(),
            IntoIterRepr::Many(it) => it.next(),
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.inner {
            IntoIterRepr::One(c) => usize::from(c.is_some()),
            IntoIterRepr::Many(it) => it.len(),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for IntoIter {}

impl IntoIterator for Batch {
    type Item = Bytes;
    type IntoIter = IntoIter;

    #[inline]
    fn into_iter(self) -> IntoIter {
        IntoIter {
            inner: match self.repr {
                Repr::One(c) => IntoIterRepr::One(Some(c)),
                Repr::Many(v) => IntoIterRepr::Many(v.into_iter()),
            },
        }
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = &'a Bytes;
    type IntoIter = std::slice::Iter<'a, Bytes>;

    #[inline]
    fn into_iter(self) -> Self::IntoIter {
        self.chunks().iter()
    }
}

/// A [`Batch`] as one [`Buf`]: the data of one HTTP body frame.
///
/// [`Buf::chunks_vectored`] exposes every remaining chunk, so hyper can write
/// the whole batch with one `writev` instead of copying it into its buffer.
/// Consumed chunks are released as soon as they are passed.
#[derive(Debug, Default)]
pub struct BatchBuf {
    chunks: Batch,
    /// Index of the first chunk not fully consumed.
    head: usize,
    /// Bytes left from `head` on.
    remaining: usize,
}

impl From<Batch> for BatchBuf {
    #[inline]
    fn from(batch: Batch) -> Self {
        let remaining = batch.byte_len();
        let mut buf = BatchBuf {
            chunks: batch,
            head: 0,
            remaining,
        };
        buf.skip_empty();
        buf
    }
}

impl BatchBuf {
    #[inline]
    fn skip_empty(&mut self) {
        while self.head < self.chunks.len() && self.chunks.chunks()[self.head].is_empty() {
            self.head += 1;
        }
    }
}

impl Buf for BatchBuf {
    #[inline]
    fn remaining(&self) -> usize {
        self.remaining
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.chunks
            .chunks()
            .get(self.head)
            .map_or(&[], |c| c.as_ref())
    }

    #[inline]
    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        let chunks = self.chunks.chunks();
        for chunk in chunks[self.head.min(chunks.len())..]
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

    #[inline]
    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.remaining,
            "BatchBuf::advance: {cnt} bytes past the {} remaining",
            self.remaining
        );
        self.remaining -= cnt;
        while cnt > 0 {
            let chunk = &mut self.chunks.chunks_mut()[self.head];
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

    #[inline]
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        // Zero-copy when the request fits in the current chunk.
        if let Some(chunk) = self.chunks.chunks_mut().get_mut(self.head)
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
