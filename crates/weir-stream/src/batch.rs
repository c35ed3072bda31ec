//! [`Batch`]: several chunks moved as one unit, and [`BatchBuf`], its
//! [`Buf`] view for vectored writes.

use std::io::IoSlice;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};

/// How large a batch a source may build: at most `chunks` chunks, and no
/// chunk is added once the batch holds `bytes` bytes.
///
/// The byte bound keeps what one batch holds (and what its consumer frees
/// at once) in the cache and below the allocator's trim threshold: 128
/// chunks of 8 KiB freed together make glibc return the top of its heap to
/// the kernel and fault it back in on the next batch. A single chunk larger
/// than `bytes` still travels, alone. Both bounds are at least 1.
///
/// Sources that gather what is ready ([`from_iter`](crate::from_iter),
/// [`from_async_read`](crate::adapt::from_async_read),
/// [`HttpBodySource`](crate::body::HttpBodySource),
/// [`pull_sync`](crate::pull_sync)) take their limits from here, default
/// [`BatchLimits::DEFAULT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchLimits {
    /// Most chunks in one batch (CORE-004).
    pub chunks: usize,
    /// Bytes after which no further chunk is added, in bytes.
    pub bytes: usize,
}

impl BatchLimits {
    /// [`Batch::MAX_CHUNKS`] chunks, [`Batch::MAX_BYTES`] bytes.
    pub const DEFAULT: BatchLimits = BatchLimits {
        chunks: Batch::MAX_CHUNKS,
        bytes: Batch::MAX_BYTES,
    };

    /// Limits of `chunks` chunks and `bytes` bytes, each at least 1.
    #[inline]
    pub const fn new(chunks: usize, bytes: usize) -> Self {
        BatchLimits {
            chunks: if chunks == 0 { 1 } else { chunks },
            bytes: if bytes == 0 { 1 } else { bytes },
        }
    }

    /// One chunk per batch: item boundaries stay visible (CORE-005).
    pub const ONE: BatchLimits = BatchLimits::new(1, usize::MAX);

    /// Whether a batch of `chunks` chunks and `bytes` bytes may take one more chunk.
    #[inline]
    pub const fn has_room(&self, chunks: usize, bytes: usize) -> bool {
        chunks < self.chunks && bytes < self.bytes
    }
}

impl Default for BatchLimits {
    #[inline]
    fn default() -> Self {
        BatchLimits::DEFAULT
    }
}

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
///
/// A batch handed to several readers ([`share`](crate::share()),
/// [`Batch::clone_shared`]) shares one list of chunks behind an `Arc`
/// instead of copying it: reading it ([`Batch::chunks`], `&batch`) copies
/// nothing; taking its chunks by value clones each handle (a reference-count
/// increment), unless this batch is the list's last holder, which takes
/// them by move; changing it ([`Batch::chunks_mut`], [`Batch::push`])
/// copies the list first if another reader still holds it.
#[derive(Clone, Debug)]
pub struct Batch {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    One(Bytes),
    Many(List),
    Shared(Arc<Vec<Bytes>>),
}

/// The chunk list of a batch of several chunks. Dropped, it gives its
/// allocation back to a per-thread spare ([`spare_list`]) that the next
/// batch built on the thread takes: a pipeline that drops each batch before
/// it pulls the next (the usual consumer loop) then allocates no list per
/// batch at all.
#[derive(Clone, Debug, Default)]
struct List(Vec<Bytes>);

/// The largest list, in chunks, kept as the per-thread spare.
const SPARE_MAX: usize = 256;

#[cfg(not(loom))]
thread_local! {
    static SPARE: std::cell::Cell<Vec<Bytes>> = const { std::cell::Cell::new(Vec::new()) };
}

/// An empty list with room for at least `capacity` chunks: the thread's
/// spare if it is large enough, else a new allocation.
#[inline]
pub(crate) fn spare_list(capacity: usize) -> Vec<Bytes> {
    #[cfg(not(loom))]
    if capacity <= SPARE_MAX
        && let Ok(spare) = SPARE.try_with(std::cell::Cell::take)
        && spare.capacity() >= capacity
    {
        return spare;
    }
    Vec::with_capacity(capacity)
}

impl List {
    #[inline]
    fn into_vec(mut self) -> Vec<Bytes> {
        std::mem::take(&mut self.0)
    }
}

impl std::ops::Deref for List {
    type Target = Vec<Bytes>;
    #[inline]
    fn deref(&self) -> &Vec<Bytes> {
        &self.0
    }
}

impl std::ops::DerefMut for List {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<Bytes> {
        &mut self.0
    }
}

impl Drop for List {
    fn drop(&mut self) {
        let capacity = self.0.capacity();
        if capacity == 0 || capacity > SPARE_MAX {
            return;
        }
        self.0.clear();
        #[cfg(not(loom))]
        {
            let list = std::mem::take(&mut self.0);
            // During thread teardown the slot may be gone: then it just drops.
            let _ = SPARE.try_with(|spare| spare.replace(list));
        }
    }
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
    /// The most chunks an in-memory source puts in one batch by default (CORE-004).
    pub const MAX_CHUNKS: usize = 128;

    /// The bytes after which a source stops adding chunks to a batch, by
    /// default: 32 KiB. See [`BatchLimits`] for why bytes are bounded, and
    /// `benches/README.md` for how 32 KiB was chosen against 16 and 64.
    pub const MAX_BYTES: usize = 32 * 1024;

    /// An empty batch. Does not allocate.
    #[inline]
    pub const fn new() -> Self {
        Batch {
            repr: Repr::Many(List(Vec::new())),
        }
    }

    /// An empty batch with room for `chunks` chunks (no allocation for 0 or 1).
    #[inline]
    pub fn with_capacity(chunks: usize) -> Self {
        if chunks <= 1 {
            return Batch::new();
        }
        Batch {
            repr: Repr::Many(List(spare_list(chunks))),
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
            Repr::Shared(_) => self.owned().push(chunk),
        }
    }

    /// Moves an inline chunk into a `Vec` with room for `capacity` chunks.
    #[inline]
    fn spill(&mut self, capacity: usize) -> &mut Vec<Bytes> {
        if let Repr::One(first) = &mut self.repr {
            let first = std::mem::take(first);
            let mut v = spare_list(capacity.max(2));
            v.push(first);
            self.repr = Repr::Many(List(v));
        }
        self.owned()
    }

    /// The chunk list as an owned `Vec` (copying a shared one only if
    /// another reader still holds it).
    ///
    /// Inline on purpose, like every method that takes a batch by
    /// reference on a hot path: a batch whose address reaches an
    /// out-of-line call cannot stay in registers, and then every move of it
    /// between the layers of a pipeline goes through the stack.
    #[inline]
    fn owned(&mut self) -> &mut Vec<Bytes> {
        let repr = std::mem::replace(&mut self.repr, Repr::Many(List(Vec::new())));
        self.repr = Repr::Many(match repr {
            Repr::One(c) => List(vec![c]),
            Repr::Many(v) => v,
            Repr::Shared(list) => {
                List(Arc::try_unwrap(list).unwrap_or_else(|list| (*list).clone()))
            }
        });
        match &mut self.repr {
            Repr::Many(v) => v,
            Repr::One(_) | Repr::Shared(_) => unreachable!("set to Many just above"),
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
                let more = more.into_vec();
                let extra = more.len();
                match &mut self.repr {
                    Repr::Many(v) => v.extend(more),
                    Repr::One(_) => self.spill(1 + extra).extend(more),
                    Repr::Shared(_) => self.owned().extend(more),
                }
            }
            Repr::Shared(_) => {
                let more = other.into_iter();
                match &mut self.repr {
                    Repr::Many(v) => v.extend(more),
                    Repr::One(_) => self.spill(1 + more.len()).extend(more),
                    Repr::Shared(_) => self.owned().extend(more),
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
            Repr::Shared(list) => list.len(),
        }
    }

    /// Whether the batch holds no chunk at all.
    #[inline]
    pub fn is_empty(&self) -> bool {
        match &self.repr {
            Repr::One(_) => false,
            Repr::Many(v) => v.is_empty(),
            Repr::Shared(list) => list.is_empty(),
        }
    }

    /// Total length of all chunks, in bytes.
    #[inline]
    pub fn byte_len(&self) -> usize {
        match &self.repr {
            Repr::One(c) => c.len(),
            Repr::Many(v) => v.iter().map(Bytes::len).sum(),
            Repr::Shared(list) => list.iter().map(Bytes::len).sum(),
        }
    }

    /// The chunks, in order.
    #[inline]
    pub fn chunks(&self) -> &[Bytes] {
        match &self.repr {
            Repr::One(c) => std::slice::from_ref(c),
            Repr::Many(v) => v.as_slice(),
            Repr::Shared(list) => list,
        }
    }

    /// The chunks, in order, to modify in place. Allocates nothing, except
    /// for a batch whose chunk list another reader still holds: its list is
    /// copied first (the chunks themselves are not).
    #[inline]
    pub fn chunks_mut(&mut self) -> &mut [Bytes] {
        if let Repr::Shared(_) = self.repr {
            return self.owned();
        }
        match &mut self.repr {
            Repr::One(c) => std::slice::from_mut(c),
            Repr::Many(v) => v.as_mut_slice(),
            Repr::Shared(_) => unreachable!("made owned just above"),
        }
    }

    /// Takes the chunks out. Allocates a `Vec` for a one-chunk batch;
    /// prefer [`Batch::chunks_mut`] or iteration where that matters.
    #[inline]
    pub fn into_chunks(mut self) -> Vec<Bytes> {
        match self.repr {
            Repr::One(c) => vec![c],
            Repr::Many(v) => v.into_vec(),
            Repr::Shared(_) => std::mem::take(self.owned()),
        }
    }

    /// A second handle on this batch that shares its chunk list instead of
    /// copying it: one allocation the first time a list of several chunks
    /// is shared, none after, and none for a one-chunk batch (its chunk is
    /// cloned, a reference-count increment). `self` then shares the list
    /// too; see the type's docs for what reading and changing cost.
    #[inline]
    pub fn clone_shared(&mut self) -> Batch {
        let repr = match &mut self.repr {
            Repr::One(c) => Repr::One(c.clone()),
            Repr::Shared(list) => Repr::Shared(Arc::clone(list)),
            Repr::Many(v) => {
                let list = Arc::new(std::mem::take(&mut v.0));
                let other = Repr::Shared(Arc::clone(&list));
                self.repr = Repr::Shared(list);
                other
            }
        };
        Batch { repr }
    }

    /// Replaces each chunk with `f(chunk)`, in place: no allocation, and
    /// the chunk list is reused (copied only if shared, see
    /// [`Batch::chunks_mut`]).
    #[inline(always)]
    pub fn map_chunks(self, mut f: impl FnMut(Bytes) -> Bytes) -> Batch {
        // By value: a one-chunk batch then stays in registers from the
        // source to the consumer. A list goes out of line by its parts
        // only, so the batch itself never has to be spilled to the stack
        // (every later move of a spilled batch waits on those stores).
        let repr = match self.repr {
            Repr::One(c) => Repr::One(f(c)),
            Repr::Many(v) => Repr::Many(map_vec(v.into_vec(), f)),
            Repr::Shared(list) => Repr::Many(map_shared(list, f)),
        };
        Batch { repr }
    }

    /// Keeps the chunks for which `f` returns `Some`, replaced by what it
    /// returns, in order; in place, like [`Batch::map_chunks`]. The result
    /// may be empty.
    #[inline]
    pub fn filter_map_chunks(mut self, mut f: impl FnMut(Bytes) -> Option<Bytes>) -> Batch {
        self.repr = match self.repr {
            Repr::One(c) => match f(c) {
                Some(c) => Repr::One(c),
                None => Repr::Many(List(Vec::new())),
            },
            Repr::Many(v) => Repr::Many(List(v.into_vec().into_iter().filter_map(f).collect())),
            Repr::Shared(list) => Repr::Many(List(match Arc::try_unwrap(list) {
                Ok(v) => v.into_iter().filter_map(f).collect(),
                Err(list) => list.iter().cloned().filter_map(f).collect(),
            })),
        };
        self
    }

    /// Drops a batch that [`Batch::is_empty`] said is empty, without
    /// taking its address (so that a caller's other batches can stay in
    /// registers; see [`Batch::owned`]).
    #[inline]
    pub(crate) fn discard_empty(self) {
        match self.repr {
            Repr::Many(v) => drop(v),
            Repr::Shared(list) => drop(list),
            // Never empty: not reached. Forgetting a chunk would only leak
            // a reference count, and takes no address.
            Repr::One(chunk) => {
                debug_assert!(false, "discard_empty on a one-chunk batch");
                std::mem::forget(chunk);
            }
        }
    }

    /// A [`Buf`] over the whole batch, for one vectored write. No copy.
    #[inline]
    pub fn into_buf(self) -> BatchBuf {
        BatchBuf::from(self)
    }
}

/// [`Batch::map_chunks`] over a list, in place: each chunk is taken out
/// (an empty placeholder goes in) and its replacement written back; the
/// placeholder owns nothing and is forgotten rather than dropped.
#[inline(never)]
fn map_vec(mut v: Vec<Bytes>, mut f: impl FnMut(Bytes) -> Bytes) -> List {
    for chunk in &mut v {
        let new = f(std::mem::take(chunk));
        std::mem::forget(std::mem::replace(chunk, new));
    }
    List(v)
}

/// [`Batch::map_chunks`] over a shared list: taken if this is its last
/// holder, else its chunks are cloned (reference counts) into a new one.
#[inline(never)]
fn map_shared(list: Arc<Vec<Bytes>>, f: impl FnMut(Bytes) -> Bytes) -> List {
    List(match Arc::try_unwrap(list) {
        Ok(v) => v.into_iter().map(f).collect(),
        Err(list) => list.iter().cloned().map(f).collect(),
    })
}

impl From<Vec<Bytes>> for Batch {
    #[inline]
    fn from(chunks: Vec<Bytes>) -> Self {
        Batch {
            repr: Repr::Many(List(chunks)),
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
        let mut v = spare_list(iter.size_hint().0.saturating_add(2));
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
    /// A list another reader still holds: its chunks are cloned out.
    Shared(Arc<Vec<Bytes>>, usize),
}

impl Iterator for IntoIter {
    type Item = Bytes;

    #[inline]
    fn next(&mut self) -> Option<Bytes> {
        match &mut self.inner {
            IntoIterRepr::One(c) => c.take(),
            IntoIterRepr::Many(it) => it.next(),
            IntoIterRepr::Shared(list, next) => {
                let chunk = list.get(*next).cloned();
                *next += 1;
                chunk
            }
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.inner {
            IntoIterRepr::One(c) => usize::from(c.is_some()),
            IntoIterRepr::Many(it) => it.len(),
            IntoIterRepr::Shared(list, next) => list.len().saturating_sub(*next),
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
                Repr::Many(v) => IntoIterRepr::Many(v.into_vec().into_iter()),
                Repr::Shared(list) => match Arc::try_unwrap(list) {
                    Ok(v) => IntoIterRepr::Many(v.into_iter()),
                    Err(list) => IntoIterRepr::Shared(list, 0),
                },
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
/// Consumed chunks are released as soon as they are passed, unless another
/// reader shares the batch's chunk list (then they go with the frame).
#[derive(Debug, Default)]
pub struct BatchBuf {
    chunks: Batch,
    /// Index of the first chunk not fully consumed.
    head: usize,
    /// Bytes of the `head` chunk already consumed.
    offset: usize,
    /// Bytes left from `head` (and `offset`) on.
    remaining: usize,
}

impl From<Batch> for BatchBuf {
    #[inline]
    fn from(mut batch: Batch) -> Self {
        if let Repr::Shared(list) = &mut batch.repr
            && Arc::get_mut(list).is_some()
        {
            // The last holder: take the list, so chunks can be released.
            batch.owned();
        }
        let remaining = batch.byte_len();
        let mut buf = BatchBuf {
            chunks: batch,
            head: 0,
            offset: 0,
            remaining,
        };
        buf.skip_empty();
        buf
    }
}

impl BatchBuf {
    #[inline]
    fn skip_empty(&mut self) {
        let chunks = self.chunks.chunks();
        while self.head < chunks.len() && chunks[self.head].len() == self.offset {
            self.head += 1;
            self.offset = 0;
        }
    }

    /// The unconsumed part of the `head` chunk.
    #[inline]
    fn head_chunk(&self) -> &[u8] {
        self.chunks
            .chunks()
            .get(self.head)
            .map_or(&[], |c| &c[self.offset.min(c.len())..])
    }

    /// Drops chunk `i`'s memory now rather than when the frame drops.
    #[inline]
    fn release(&mut self, i: usize) {
        match &mut self.chunks.repr {
            Repr::One(c) => *c = Bytes::new(),
            Repr::Many(v) => {
                if let Some(c) = v.get_mut(i) {
                    *c = Bytes::new();
                }
            }
            // Another reader holds the list: the chunk goes with the frame.
            Repr::Shared(_) => {}
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
        self.head_chunk()
    }

    #[inline]
    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        if dst.is_empty() || self.remaining == 0 {
            return 0;
        }
        dst[0] = IoSlice::new(self.head_chunk());
        let mut n = 1;
        let chunks = self.chunks.chunks();
        for chunk in chunks[(self.head + 1).min(chunks.len())..]
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
            let left = self.head_chunk().len();
            if cnt < left {
                self.offset += cnt;
                return;
            }
            cnt -= left;
            self.release(self.head);
            self.head += 1;
            self.offset = 0;
        }
        self.skip_empty();
    }

    #[inline]
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        // Zero-copy when the request fits in the current chunk.
        if let Some(chunk) = self.chunks.chunks().get(self.head)
            && len <= chunk.len() - self.offset
        {
            let out = chunk.slice(self.offset..self.offset + len);
            self.advance(len);
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

    #[test]
    fn a_shared_batch_reads_without_copying_and_its_last_holder_takes_the_list() {
        let mut a: Batch = ["ab", "cd"].map(Bytes::from).into_iter().collect();
        let b = a.clone_shared();
        assert_eq!(a.chunks().as_ptr(), b.chunks().as_ptr(), "one list");
        let list = a.chunks().as_ptr();
        drop(b);
        // `a` is the last holder: by-value iteration moves, no copy.
        let Repr::Shared(_) = &a.repr else {
            panic!("a shares its list")
        };
        let v = a.into_chunks();
        assert_eq!(v.as_ptr(), list);
    }

    #[test]
    fn a_shared_batch_changed_while_shared_is_copied_first() {
        let mut a: Batch = ["ab", "cd"].map(Bytes::from).into_iter().collect();
        let b = a.clone_shared();
        a.chunks_mut()[0] = Bytes::from_static(b"xy");
        assert_eq!(b.chunks()[0], "ab");
        assert_eq!(a.chunks()[0], "xy");
        let cloned: Vec<Bytes> = b.clone().into_iter().collect();
        assert_eq!(cloned, ["ab", "cd"]);
    }

    #[test]
    fn a_shared_batch_as_a_buf_writes_every_byte() {
        let mut a: Batch = ["ab", "", "cde"].map(Bytes::from).into_iter().collect();
        let b = a.clone_shared();
        let mut buf = a.into_buf();
        buf.advance(1);
        assert_eq!(buf.chunk(), b"b");
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(buf.chunks_vectored(&mut slices), 2);
        assert_eq!(&*slices[1], b"cde");
        assert_eq!(&buf.copy_to_bytes(3)[..], b"bcd");
        assert_eq!(buf.remaining(), 1);
        assert_eq!(b.byte_len(), 5, "the other reader is untouched");
    }

    #[test]
    fn map_chunks_reuses_the_list() {
        let a: Batch = ["ab", "cd"].map(Bytes::from).into_iter().collect();
        let list = a.chunks().as_ptr();
        let b = a.map_chunks(|c| c.slice(1..));
        assert_eq!(b.chunks().as_ptr(), list);
        assert_eq!(b.chunks(), ["b", "d"]);
        let c = b.filter_map_chunks(|c| (c != "b").then_some(c));
        assert_eq!(c.chunks(), ["d"]);
    }

    #[test]
    fn limits_are_at_least_one() {
        assert_eq!(
            BatchLimits::new(0, 0),
            BatchLimits {
                chunks: 1,
                bytes: 1
            }
        );
        assert!(BatchLimits::DEFAULT.has_room(127, Batch::MAX_BYTES - 1));
        assert!(!BatchLimits::DEFAULT.has_room(128, 0));
        assert!(!BatchLimits::DEFAULT.has_room(1, Batch::MAX_BYTES));
    }
}
