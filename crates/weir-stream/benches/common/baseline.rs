//! The three baselines of the plan (section 3, "Baselines").
//!
//! - (a) a one-item-per-poll `futures::Stream` chain: `stream::iter` with
//!   `.map` stages (hand-written adaptors where a stage is not 1:1), drained
//!   by a `while let Some` loop. Idiomatic Rust without batching.
//! - (b) a tokio `mpsc` channel and a spawned task per stage (capacity 1, the
//!   WHATWG default hwm, or 16), on the 2-worker `multi_thread` runtime;
//!   for fan-out, one task feeding two channels, and `tokio::sync::broadcast`.
//!   Stands in for Web Streams: a queue and a wake-up per stage per chunk.
//! - (c) the physical limits: (c1) iterate `&[Bytes]` summing lengths,
//!   (c2) `copy_from_slice` into a preallocated `Vec<u8>`, (c3) the
//!   transform applied straight over the slices, without allocation.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc};

use super::check::{Sink, Tally, digest_xor};
use super::stages::{Coalescer, Op, split2};

// ---- (a) one item per poll ----

/// Drains a one-item stream into sink `K`.
pub async fn a_drain<K: Sink, S: Stream<Item = Bytes> + Unpin>(mut stream: S) -> Tally {
    let mut t = Tally::default();
    while let Some(c) = stream.next().await {
        t.add::<K>(&c);
    }
    t
}

/// A hand-written adaptor yielding both halves of each chunk ([`split2`]).
#[derive(Debug)]
pub struct Split2Stream<S> {
    inner: S,
    held: Option<Bytes>,
}

impl<S> Split2Stream<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        Split2Stream { inner, held: None }
    }
}

impl<S: Stream<Item = Bytes> + Unpin> Stream for Split2Stream<S> {
    type Item = Bytes;

    #[inline]
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(b) = self.held.take() {
            return Poll::Ready(Some(b));
        }
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(c)) => {
                let (a, b) = split2(c);
                self.held = Some(b);
                Poll::Ready(Some(a))
            }
            other => other,
        }
    }
}

/// A hand-written coalescing adaptor (B11).
#[derive(Debug)]
pub struct CoalesceStream<S> {
    inner: Option<S>,
    co: Coalescer,
    ready: VecDeque<Bytes>,
}

impl<S> CoalesceStream<S> {
    /// Wraps `inner`, emitting `cap`-byte chunks.
    pub fn new(inner: S, cap: usize) -> Self {
        CoalesceStream {
            inner: Some(inner),
            co: Coalescer::new(cap),
            ready: VecDeque::new(),
        }
    }
}

impl<S: Stream<Item = Bytes> + Unpin> Stream for CoalesceStream<S> {
    type Item = Bytes;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let this = &mut *self;
        loop {
            if let Some(c) = this.ready.pop_front() {
                return Poll::Ready(Some(c));
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(inner).poll_next(cx) {
                Poll::Ready(Some(c)) => {
                    let ready = &mut this.ready;
                    this.co.push(&c, |full| ready.push_back(full));
                }
                Poll::Ready(None) => {
                    this.inner = None;
                    return Poll::Ready(this.co.finish());
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

// ---- (b) one task and one channel per stage ----

/// Source task → one task per op → sink task, each hop a bounded mpsc of
/// capacity `cap`. Must run inside the `multi_thread` runtime.
pub async fn b_chain<K: Sink>(chunks: Vec<Bytes>, ops: &[Op], cap: usize) -> Tally {
    b_chain_from::<K>(chunks, |c| c, ops, cap).await
}

/// [`b_chain`] whose source task yields `make(chunk)` (e.g. an owned copy).
pub async fn b_chain_from<K: Sink>(
    chunks: Vec<Bytes>,
    make: fn(Bytes) -> Bytes,
    ops: &[Op],
    cap: usize,
) -> Tally {
    let (tx, rx) = mpsc::channel::<Bytes>(cap);
    tokio::spawn(async move {
        for c in chunks {
            if tx.send(make(c)).await.is_err() {
                return;
            }
        }
    });
    let rx = spawn_stages(rx, ops, cap);
    let sink = tokio::spawn(mpsc_sink::<K>(rx));
    sink.await.expect("baseline (b) sink task panicked")
}

/// One task per op, each reading the channel before it and writing a new
/// one of capacity `cap`; returns the last channel.
pub fn spawn_stages(
    mut rx: mpsc::Receiver<Bytes>,
    ops: &[Op],
    cap: usize,
) -> mpsc::Receiver<Bytes> {
    for &op in ops {
        let (tx, next_rx) = mpsc::channel::<Bytes>(cap);
        let mut stage_rx = std::mem::replace(&mut rx, next_rx);
        tokio::spawn(async move {
            let mut st = op.start();
            let mut out = Vec::with_capacity(2);
            while let Some(c) = stage_rx.recv().await {
                st.run(c, |o| out.push(o));
                for o in out.drain(..) {
                    if tx.send(o).await.is_err() {
                        return;
                    }
                }
            }
            st.finish(|o| out.push(o));
            for o in out.drain(..) {
                if tx.send(o).await.is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// One channel of capacity `cap` whose messages are `Vec`s of up to
/// `per_msg` chunks (the batched form of (b): the push `writev` baseline).
pub async fn b_vec<K: Sink>(chunks: Vec<Bytes>, per_msg: usize, cap: usize) -> Tally {
    let (tx, mut rx) = mpsc::channel::<Vec<Bytes>>(cap);
    tokio::spawn(async move {
        let mut it = chunks.into_iter();
        loop {
            let msg: Vec<Bytes> = it.by_ref().take(per_msg).collect();
            if msg.is_empty() || tx.send(msg).await.is_err() {
                return;
            }
        }
    });
    let sink = tokio::spawn(async move {
        let mut t = Tally::default();
        while let Some(msg) = rx.recv().await {
            for c in msg {
                t.add::<K>(&c);
            }
        }
        t
    });
    sink.await.expect("baseline (b) sink task panicked")
}

/// Fan-in: one task per part, all sending into one channel of capacity
/// `cap`; a sink task drains it (the channel form of a merge, B09).
pub async fn b_fanin<K: Sink>(parts: Vec<Vec<Bytes>>, cap: usize) -> Tally {
    let (tx, rx) = mpsc::channel::<Bytes>(cap);
    for part in parts {
        let tx = tx.clone();
        tokio::spawn(async move {
            for c in part {
                if tx.send(c).await.is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let sink = tokio::spawn(mpsc_sink::<K>(rx));
    sink.await.expect("baseline (b) sink task panicked")
}

/// Fan-out: a source task sends every chunk into two mpsc channels of
/// capacity `cap`; two sink tasks drain them. Returns both tallies.
pub async fn b_fanout<K: Sink>(chunks: Vec<Bytes>, cap: usize) -> [Tally; 2] {
    let (tx1, rx1) = mpsc::channel::<Bytes>(cap);
    let (tx2, rx2) = mpsc::channel::<Bytes>(cap);
    tokio::spawn(async move {
        for c in chunks {
            // Both readers must see every chunk: stop only when both are gone.
            let r1 = tx1.send(c.clone()).await;
            let r2 = tx2.send(c).await;
            if r1.is_err() && r2.is_err() {
                return;
            }
        }
    });
    let s1 = tokio::spawn(mpsc_sink::<K>(rx1));
    let s2 = tokio::spawn(mpsc_sink::<K>(rx2));
    [
        s1.await.expect("fan-out sink 1 panicked"),
        s2.await.expect("fan-out sink 2 panicked"),
    ]
}

/// Fan-out with a chain of stage tasks on each branch: source task → two
/// channels → `ops[i]` stage tasks → sink task `i`. Returns both tallies.
pub async fn b_fanout_ops<K: Sink>(chunks: Vec<Bytes>, cap: usize, ops: [&[Op]; 2]) -> [Tally; 2] {
    let (tx1, rx1) = mpsc::channel::<Bytes>(cap);
    let (tx2, rx2) = mpsc::channel::<Bytes>(cap);
    tokio::spawn(async move {
        for c in chunks {
            let r1 = tx1.send(c.clone()).await;
            let r2 = tx2.send(c).await;
            if r1.is_err() && r2.is_err() {
                return;
            }
        }
    });
    let s1 = tokio::spawn(mpsc_sink::<K>(spawn_stages(rx1, ops[0], cap)));
    let s2 = tokio::spawn(mpsc_sink::<K>(spawn_stages(rx2, ops[1], cap)));
    [
        s1.await.expect("fan-out sink 1 panicked"),
        s2.await.expect("fan-out sink 2 panicked"),
    ]
}

/// Sequential fan-out: a source task sends every chunk into two unbounded
/// channels (nothing else lets one reader finish before the other starts);
/// one sink task drains the first, then the second.
pub async fn b_fanout_seq<K: Sink>(chunks: Vec<Bytes>) -> [Tally; 2] {
    let (tx1, rx1) = mpsc::unbounded_channel::<Bytes>();
    let (tx2, rx2) = mpsc::unbounded_channel::<Bytes>();
    tokio::spawn(async move {
        for c in chunks {
            let r1 = tx1.send(c.clone());
            let r2 = tx2.send(c);
            if r1.is_err() && r2.is_err() {
                return;
            }
        }
    });
    let sink = tokio::spawn(async move {
        let mut out = [Tally::default(); 2];
        for (t, mut rx) in out.iter_mut().zip([rx1, rx2]) {
            while let Some(c) = rx.recv().await {
                t.add::<K>(&c);
            }
        }
        out
    });
    sink.await.expect("sequential fan-out sink panicked")
}

/// Sequential `tokio::sync::broadcast`: capacity `cap` (at least the chunk
/// count, so nothing lags); one sink task drains the first receiver, then
/// the second.
pub async fn b_broadcast_seq<K: Sink>(chunks: Vec<Bytes>, cap: usize) -> [Tally; 2] {
    let (tx, rx1) = broadcast::channel::<Bytes>(cap);
    let rx2 = tx.subscribe();
    let sink = tokio::spawn(async move {
        let t1 = broadcast_sink::<K>(rx1).await;
        let t2 = broadcast_sink::<K>(rx2).await;
        [t1, t2]
    });
    tokio::spawn(async move {
        for c in chunks {
            while tx.len() >= cap {
                tokio::task::yield_now().await;
            }
            if tx.send(c).is_err() {
                return;
            }
        }
    });
    sink.await.expect("sequential broadcast sink panicked")
}

async fn mpsc_sink<K: Sink>(mut rx: mpsc::Receiver<Bytes>) -> Tally {
    let mut t = Tally::default();
    while let Some(c) = rx.recv().await {
        t.add::<K>(&c);
    }
    t
}

/// `tokio::sync::broadcast` with capacity `cap` and two receivers. The
/// sender waits (yields) while the slowest receiver is `cap` behind, so no
/// chunk is lost; a `Lagged` error (drop-oldest) panics, as a data loss.
pub async fn b_broadcast<K: Sink>(chunks: Vec<Bytes>, cap: usize) -> [Tally; 2] {
    let (tx, rx1) = broadcast::channel::<Bytes>(cap);
    let rx2 = tx.subscribe();
    let s1 = tokio::spawn(broadcast_sink::<K>(rx1));
    let s2 = tokio::spawn(broadcast_sink::<K>(rx2));
    tokio::spawn(async move {
        for c in chunks {
            while tx.len() >= cap {
                tokio::task::yield_now().await;
            }
            if tx.send(c).is_err() {
                return;
            }
        }
    });
    [
        s1.await.expect("broadcast sink 1 panicked"),
        s2.await.expect("broadcast sink 2 panicked"),
    ]
}

async fn broadcast_sink<K: Sink>(mut rx: broadcast::Receiver<Bytes>) -> Tally {
    let mut t = Tally::default();
    loop {
        match rx.recv().await {
            Ok(c) => t.add::<K>(&c),
            Err(broadcast::error::RecvError::Closed) => return t,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                panic!("baseline broadcast lost {n} chunks")
            }
        }
    }
}

// ---- (c) physical limits ----

/// (c1) Iterates `&[Bytes]`, summing lengths: the by-reference ceiling.
#[inline]
pub fn c1_iter(chunks: &[Bytes]) -> Tally {
    let mut t = Tally::default();
    for c in chunks {
        t.bytes += c.len() as u64;
        t.chunks += 1;
    }
    t
}

/// (c1, streaming) Consumes the chunks, summing lengths and dropping each:
/// the ceiling for anything that hands chunks on by value, since every
/// streaming contender pays one `Bytes` drop (a refcount decrement, or a
/// `free` for owned chunks) per chunk, and (c1) pays none.
#[inline]
pub fn c1_drain(chunks: Vec<Bytes>) -> Tally {
    let mut t = Tally::default();
    for c in chunks {
        // Without this, LLVM may elide an owned chunk's allocation and copy
        // altogether when only its length is read.
        let c = std::hint::black_box(c);
        t.bytes += c.len() as u64;
        t.chunks += 1;
    }
    t
}

/// (c2) Copies every chunk into `dst` (preallocated to the total length):
/// the memcpy ceiling.
#[inline]
pub fn c2_copy(chunks: &[Bytes], dst: &mut Vec<u8>) -> Tally {
    let total: usize = chunks.iter().map(Bytes::len).sum();
    dst.resize(total, 0);
    let mut t = Tally::default();
    let mut at = 0;
    for c in chunks {
        dst[at..at + c.len()].copy_from_slice(c);
        at += c.len();
        t.bytes += c.len() as u64;
        t.chunks += 1;
    }
    std::hint::black_box(&dst[..]);
    t
}

/// (c3) The XOR chain `keys` applied straight over the slices and folded
/// as the [`Digest`](super::check::Digest) sink folds, in one pass, without allocating or writing:
/// the CPU-transform ceiling (the keys combine into one, as XORs do).
#[inline]
pub fn c3_xor(chunks: &[Bytes], keys: &[u8]) -> Tally {
    let key = keys.iter().fold(0u8, |a, k| a ^ k);
    let mut t = Tally::default();
    for c in chunks {
        let (sum, xor) = digest_xor(c, key);
        t.bytes += c.len() as u64;
        t.chunks += 1;
        t.sum = t.sum.wrapping_add(sum);
        t.xor ^= xor;
    }
    t
}

/// (c3) Copies straight into `cap`-byte scratch chunks and folds each full
/// one as sink `K`: the coalescing ceiling (B11).
#[inline]
pub fn c3_coalesce<K: Sink>(chunks: &[Bytes], cap: usize, scratch: &mut Vec<u8>) -> Tally {
    let mut t = Tally::default();
    scratch.clear();
    scratch.reserve(cap);
    for c in chunks {
        let mut data = &c[..];
        while !data.is_empty() {
            let n = (cap - scratch.len()).min(data.len());
            scratch.extend_from_slice(&data[..n]);
            data = &data[n..];
            if scratch.len() == cap {
                t.add::<K>(scratch);
                scratch.clear();
            }
        }
    }
    if !scratch.is_empty() {
        t.add::<K>(scratch);
    }
    t
}
