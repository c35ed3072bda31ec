//! The stages every contender runs: the same per-chunk work, wrapped as a
//! core [`Transform`], a `futures` adaptor, or an mpsc task.

use std::mem;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use sha2::{Digest as _, Sha256};
use weir_stream::stateful::{StatefulTransform, Upstream};
use weir_stream::{Batch, BatchResult, Source, StreamError, Transform};

/// The XOR key of single-XOR benches; chains use [`KEYS`].
pub const KEY: u8 = 0x5A;
/// Keys for chains of XOR stages.
pub const KEYS: [u8; 3] = [0x5A, 0xC3, 0x3C];
/// Target chunk size of the coalescing stage (B11), in bytes.
pub const COALESCE: usize = 64 * 1024;

/// A fresh, uniquely owned copy of `chunk`: what a socket read yields.
#[inline]
pub fn own(chunk: Bytes) -> Bytes {
    Bytes::copy_from_slice(&chunk)
}

/// XORs every byte with `key`: in place when the chunk is uniquely owned
/// (an owned input), else into a fresh buffer (a shared input).
#[inline]
pub fn xor(chunk: Bytes, key: u8) -> Bytes {
    match chunk.try_into_mut() {
        Ok(mut m) => {
            m.iter_mut().for_each(|b| *b ^= key);
            m.freeze()
        }
        Err(shared) => {
            let mut m = BytesMut::with_capacity(shared.len());
            m.extend(shared.iter().map(|b| b ^ key));
            m.freeze()
        }
    }
}

/// Splits a chunk into two halves, zero-copy (the 1:2 expansion).
#[inline]
pub fn split2(mut chunk: Bytes) -> (Bytes, Bytes) {
    let head = chunk.split_to(chunk.len() / 2);
    (head, chunk)
}

/// Parses one JSON document, serialises it again and hashes the result
/// with SHA-256: the 32-byte digest is the output chunk (B11, the
/// fast-webstreams "transform-cpu" scenario). Panics on invalid JSON: bench
/// inputs are valid.
#[inline]
pub fn json_sha(chunk: &[u8]) -> Bytes {
    let value: serde_json::Value =
        serde_json::from_slice(chunk).expect("bench JSON inputs are valid");
    let text = serde_json::to_vec(&value).expect("a Value always serialises");
    Bytes::copy_from_slice(&Sha256::digest(&text))
}

/// Accumulates chunks into `cap`-byte chunks by copying (B11,
/// "HTTP response assembly"); the last chunk may be short.
#[derive(Debug)]
pub struct Coalescer {
    buf: BytesMut,
    cap: usize,
}

impl Coalescer {
    /// A coalescer emitting `cap`-byte chunks.
    pub fn new(cap: usize) -> Self {
        Coalescer {
            buf: BytesMut::with_capacity(cap),
            cap,
        }
    }

    /// Copies `data` in; calls `emit` with each chunk that fills up.
    #[inline]
    pub fn push(&mut self, mut data: &[u8], mut emit: impl FnMut(Bytes)) {
        while !data.is_empty() {
            let n = (self.cap - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() == self.cap {
                let full = mem::replace(&mut self.buf, BytesMut::with_capacity(self.cap));
                emit(full.freeze());
            }
        }
    }

    /// The partial chunk left at the end, if any.
    pub fn finish(&mut self) -> Option<Bytes> {
        (!self.buf.is_empty()).then(|| mem::take(&mut self.buf).freeze())
    }
}

/// One stage, as data: what baseline (b) runs in each task, and what the
/// reference applies to compute the expected tally.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Pass the chunk on.
    Id,
    /// [`xor`] with the key.
    Xor(u8),
    /// [`split2`].
    Split2,
    /// A [`Coalescer`] of this size (stateful).
    Coalesce(usize),
    /// [`json_sha`]: JSON parse, serialise, SHA-256.
    JsonSha,
}

/// Per-stage state for [`Op::run`].
#[derive(Debug)]
pub enum OpState {
    /// Stateless stages.
    Stateless(Op),
    /// A coalescer.
    Coalesce(Coalescer),
}

impl Op {
    /// A fresh state for one run of this stage.
    pub fn start(self) -> OpState {
        match self {
            Op::Coalesce(n) => OpState::Coalesce(Coalescer::new(n)),
            op => OpState::Stateless(op),
        }
    }
}

impl OpState {
    /// Runs the stage on one chunk.
    #[inline]
    pub fn run(&mut self, chunk: Bytes, mut emit: impl FnMut(Bytes)) {
        match self {
            OpState::Stateless(Op::Id) => emit(chunk),
            OpState::Stateless(Op::Xor(k)) => emit(xor(chunk, *k)),
            OpState::Stateless(Op::Split2) => {
                let (a, b) = split2(chunk);
                emit(a);
                emit(b);
            }
            OpState::Stateless(Op::JsonSha) => emit(json_sha(&chunk)),
            OpState::Stateless(Op::Coalesce(_)) => unreachable!("Op::start makes a Coalescer"),
            OpState::Coalesce(c) => c.push(&chunk, emit),
        }
    }

    /// End of input: emits what the stage holds back.
    pub fn finish(&mut self, mut emit: impl FnMut(Bytes)) {
        if let OpState::Coalesce(c) = self
            && let Some(tail) = c.finish()
        {
            emit(tail);
        }
    }
}

/// Runs `ops` over `chunks` the plain way: the reference output.
pub fn reference(chunks: Vec<Bytes>, ops: &[Op]) -> Vec<Bytes> {
    let mut cur = chunks;
    for op in ops {
        let mut st = op.start();
        let mut next = Vec::with_capacity(cur.len());
        for c in cur {
            st.run(c, |o| next.push(o));
        }
        st.finish(|o| next.push(o));
        cur = next;
    }
    cur
}

// ---- The same stages as core transforms. ----

/// A user stage that passes batches on unchanged (not `()`, which the core
/// may elide: this one it must call).
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;

impl Transform for Identity {
    #[inline]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input)
    }
}

/// [`xor`] over every chunk, re-using the batch's `Vec`.
#[derive(Clone, Copy, Debug)]
pub struct Xor(pub u8);

impl Transform for Xor {
    #[inline]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input.map(|b| xor_batch(b, self.0)))
    }
}

/// [`xor`] over every chunk of a batch, in place in the batch (no
/// allocation for the batch itself, one-chunk batches included).
#[inline]
pub fn xor_batch(mut batch: Batch, key: u8) -> Batch {
    for c in batch.chunks_mut() {
        *c = xor(mem::take(c), key);
    }
    batch
}

/// [`json_sha`] over every chunk, in place in the batch.
#[derive(Clone, Copy, Debug)]
pub struct JsonSha;

impl Transform for JsonSha {
    #[inline]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input.map(|mut b| {
            for c in b.chunks_mut() {
                *c = json_sha(c);
            }
            b
        }))
    }
}

/// [`xor`] as a stateful transform (PULL-030): it drives its own loop over
/// the upstream batches, the Rust form of the seeds' async-generator
/// transform (B04 "stateless vs stateful").
#[derive(Clone, Copy, Debug)]
pub struct XorGen(pub u8);

impl StatefulTransform for XorGen {
    #[inline]
    fn poll_transform<S: Source>(
        &mut self,
        cx: &mut Context<'_>,
        input: &mut Upstream<'_, S>,
    ) -> Poll<Option<BatchResult>> {
        Poll::Ready(match ready!(input.poll_next(cx)) {
            Some(Some(batch)) => Some(Ok(xor_batch(batch, self.0))),
            // The flush: nothing held back; an empty batch is skipped.
            Some(None) => Some(Ok(Batch::new())),
            None => None,
        })
    }
}

/// [`split2`] over every chunk.
#[derive(Clone, Copy, Debug)]
pub struct Split2;

impl Transform for Split2 {
    #[inline]
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input.map(|b| {
            let mut out = Batch::with_capacity(2 * b.len());
            for c in b {
                let (x, y) = split2(c);
                out.push(x);
                out.push(y);
            }
            out
        }))
    }
}

/// A hand-written coalescing transform (B11), run next to the core's
/// `weir_stream::coalesce`. It cuts exact `cap`-byte chunks (splitting
/// input chunks); the core keeps input chunks whole, so the two emit
/// different boundaries (checked with the boundary-blind `Flow` sink).
#[derive(Debug)]
pub struct Coalesce(pub Coalescer);

impl Coalesce {
    /// Emits `cap`-byte chunks.
    pub fn new(cap: usize) -> Self {
        Coalesce(Coalescer::new(cap))
    }
}

impl Transform for Coalesce {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let mut out = Batch::new();
        match input {
            Some(b) => {
                for c in &b {
                    self.0.push(c, |full| out.push(full));
                }
            }
            None => {
                if let Some(tail) = self.0.finish() {
                    out.push(tail);
                }
            }
        }
        Ok((!out.is_empty()).then_some(out))
    }
}
