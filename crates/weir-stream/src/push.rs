//! [`push`]: a [`Writer`] and a [`Readable`] bonded by a small buffer of
//! slots, with explicit backpressure (catalogue section 2, PUSH-*).
//!
//! The producer writes; the consumer polls the [`Readable`] like any other
//! [`Source`]. The buffer holds at most `hwm` *writes* (slots), whatever their
//! size (PUSH-033); what a write does when the buffer is full is the
//! [`Backpressure`] policy (PUSH-040…047).
//!
//! ```text
//!  Writer ──try_write / write / writev──▶ [ slot | slot | … hwm ] ──poll──▶ Readable
//!     ▲                                    pending writes (strict/block)      │
//!     └──────────── woken when a read frees space (ready, promoted writes) ───┘
//! ```
//!
//! - One poll of the readable takes every buffered slot as one flat batch and
//!   frees them all (PUSH-083); waiting writes are then promoted into the freed
//!   slots in FIFO order, and each completes `Ok` exactly when its batch enters
//!   the slots (PUSH-046/047, D2: every write is enqueued exactly once).
//! - A write with room completes on its first poll without allocating
//!   (PUSH-089); so does `try_write`. Only a write that has to wait allocates
//!   (its place in the pending queue grows a `VecDeque`).
//! - Building a pair allocates once (the shared state); the slot ring is
//!   allocated by the first write and reused from then on.
//!
//! # Writer clones
//! [`Writer`] is `Clone`, so several tasks can write to one stream. The
//! clones share everything: `end`, `try_end`, `fail` and `try_fail` through
//! any clone close the stream for all of them, and the writes other clones
//! still have waiting are rejected (with [`StreamError::Closed`] after an end,
//! PUSH-085; with the failure after a fail). A second end through another
//! clone returns `Err(Closed)` (PUSH-082, D5). Dropping a clone does nothing
//! else than release its own waiting write; dropping the *last* clone while
//! the stream is still open fails the consumer with [`StreamError::Aborted`]
//! (PUSH-053), so a truncated body is never taken for a complete one.
//!
//! # Failure delivery (D6)
//! One rule for push and [`broadcast`](mod@crate::broadcast): when the writer
//! fails (`fail`, the stream token, or the last writer dropped without end),
//! the consumer still gets the batches already buffered, then the error
//! (PUSH-010). Writes still waiting when it fails never enter the buffer and
//! are rejected.
//!
//! # Consumer stops
//! Dropping the [`Readable`] (or [`Readable::cancel`]) closes the writer at
//! once: buffered data is released, waiting writes and `ready()` waiters are
//! woken and fail or resolve `false`, and the next write fails (PUSH-050/052).
//! It does not fire the [`CancelToken`] given in [`PushOptions`]: that token
//! belongs to the caller and may be shared; per-consumer transforms added with
//! [`crate::pull`] are aborted by the pipeline's own `Drop`.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::policy::{self, Backpressure};
use crate::sync::{Arc, Mutex, lock};
use crate::{Batch, BatchLimits, BatchResult, CancelToken, Source, StreamError};

/// Settings of a [`push`] stream.
///
/// Build with [`PushOptions::new`] (or `Default`) and the chained setters.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// High-water mark, in writes (slots), not bytes (PUSH-033). Clamped to
    /// `1..=`[`policy::MAX_HWM`] by [`push`]; 0 acts as 1 (PUSH-032).
    /// Default [`policy::DEFAULT_PUSH_HWM`] (4, PUSH-030).
    pub hwm: usize,
    /// What a write does when the buffer is full. Default
    /// [`Backpressure::Strict`].
    pub policy: Backpressure,
    /// A stream-level token: once it fires, the writer fails with its reason
    /// and the consumer gets it after the buffered data (PUSH-060); a token
    /// already fired gives a stream failed from the start (PUSH-061).
    /// A parked reader, write or `ready()` also registers its waker with the
    /// token (once per task), where it stays until the token fires.
    pub token: Option<CancelToken>,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            hwm: policy::DEFAULT_PUSH_HWM,
            policy: Backpressure::Strict,
            token: None,
        }
    }
}

impl PushOptions {
    /// The defaults: hwm 4, `strict`, no token.
    pub fn new() -> Self {
        PushOptions::default()
    }

    /// Sets the high-water mark, in writes.
    pub fn hwm(mut self, hwm: usize) -> Self {
        self.hwm = hwm;
        self
    }

    /// Sets the backpressure policy.
    pub fn policy(mut self, policy: Backpressure) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the stream-level cancellation token.
    pub fn token(mut self, token: CancelToken) -> Self {
        self.token = Some(token);
        self
    }
}

/// Creates a bonded [`Writer`] and [`Readable`] (PUSH-001).
///
/// Allocates once (the shared state). Nothing runs until someone writes or
/// polls; per-consumer transforms go on the readable with
/// [`crate::pull`]`(readable, transform)` and run only when it is polled.
pub fn push(options: PushOptions) -> (Writer, Readable) {
    let shared = Shared::new(
        options.hwm,
        options.policy,
        options.token,
        Store::Push(Slots::default()),
    );
    (Writer::from_shared(shared.clone()), Readable { shared })
}

// ---------------------------------------------------------------------------
// Slots and wake lists
// ---------------------------------------------------------------------------

/// One buffered write: a single chunk (no `Vec`, so `write` with room never
/// allocates) or a whole `writev` batch.
#[derive(Debug, Clone)]
pub(crate) enum Slot {
    One(Bytes),
    Many(Batch),
}

impl Slot {
    fn byte_len(&self) -> u64 {
        match self {
            Slot::One(c) => c.len() as u64,
            Slot::Many(b) => b.byte_len() as u64,
        }
    }

    fn chunk_count(&self) -> usize {
        match self {
            Slot::One(_) => 1,
            Slot::Many(b) => b.len(),
        }
    }

    fn append_to(self, out: &mut Vec<Bytes>) {
        match self {
            Slot::One(c) => out.push(c),
            Slot::Many(b) => out.extend(b),
        }
    }

    /// The slot as a batch. An empty `writev` gives an empty batch (PUSH-080).
    pub(crate) fn into_batch(self) -> Batch {
        match self {
            Slot::One(c) => Batch::one(c),
            Slot::Many(b) => b,
        }
    }
}

/// Wakers collected under the lock and woken after it is released (on drop).
/// Holds a few inline, so the common case (one reader, one writer) does not
/// allocate.
pub(crate) struct WakeList {
    inline: [Option<Waker>; 4],
    len: usize,
    spill: Vec<Waker>,
}

impl WakeList {
    pub(crate) fn new() -> Self {
        WakeList {
            inline: [const { None }; 4],
            len: 0,
            spill: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, waker: Waker) {
        if let Some(slot) = self.inline.get_mut(self.len) {
            *slot = Some(waker);
            self.len += 1;
        } else {
            self.spill.push(waker);
        }
    }

    fn append(&mut self, wakers: Vec<Waker>) {
        if self.spill.is_empty() {
            self.spill = wakers;
        } else {
            self.spill.extend(wakers);
        }
    }
}

impl Drop for WakeList {
    fn drop(&mut self) {
        for w in self.inline.iter_mut().take(self.len) {
            if let Some(w) = w.take() {
                w.wake();
            }
        }
        for w in self.spill.drain(..) {
            w.wake();
        }
    }
}

/// Stores `waker` in `slot` unless it already holds one that wakes the same task.
pub(crate) fn set_waker(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(w) if w.will_wake(waker) => {}
        _ => *slot = Some(waker.clone()),
    }
}

/// The push buffer: the slots and the parked reader.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    slots: VecDeque<Slot>,
    reader: Option<Waker>,
}

impl Slots {
    /// Takes the slots that are ready as one flat batch (PUSH-083), up to
    /// the batch limits ([`BatchLimits::DEFAULT`]: the first slot always,
    /// then more while the batch holds fewer than 128 chunks and 32 KiB),
    /// or `None` if there is none. The ring keeps its capacity, and the
    /// slots left over are the next read's.
    fn take_ready(&mut self) -> Option<Batch> {
        let first = self.slots.pop_front()?;
        let limits = BatchLimits::DEFAULT;
        let (mut chunks, mut bytes) = (first.chunk_count(), first.byte_len() as usize);
        if self.slots.is_empty() || !limits.has_room(chunks, bytes) {
            return Some(first.into_batch());
        }
        let mut out = Vec::with_capacity(
            chunks
                + self
                    .slots
                    .iter()
                    .map(Slot::chunk_count)
                    .sum::<usize>()
                    .min(limits.chunks),
        );
        first.append_to(&mut out);
        while limits.has_room(chunks, bytes) {
            let Some(slot) = self.slots.pop_front() else {
                break;
            };
            chunks += slot.chunk_count();
            bytes += slot.byte_len() as usize;
            slot.append_to(&mut out);
        }
        Some(Batch::from(out))
    }
}

/// Where accepted writes go: the push slots or the broadcast entries.
pub(crate) enum Store {
    Push(Slots),
    Broadcast(crate::broadcast::Entries),
}

impl Store {
    /// Entries that count against the high-water mark.
    fn held(&self) -> usize {
        match self {
            Store::Push(s) => s.slots.len(),
            Store::Broadcast(e) => e.held(),
        }
    }

    fn push(&mut self, slot: Slot, wake: &mut WakeList) {
        match self {
            Store::Push(s) => {
                s.slots.push_back(slot);
                if let Some(w) = s.reader.take() {
                    wake.push(w);
                }
            }
            Store::Broadcast(e) => e.push(slot, wake),
        }
    }

    fn evict_oldest(&mut self) {
        match self {
            Store::Push(s) => {
                s.slots.pop_front();
            }
            Store::Broadcast(e) => e.evict_oldest(),
        }
    }

    fn wake_readers(&mut self, wake: &mut WakeList) {
        match self {
            Store::Push(s) => {
                if let Some(w) = s.reader.take() {
                    wake.push(w);
                }
            }
            Store::Broadcast(e) => e.wake_readers(wake),
        }
    }

    fn clear(&mut self) {
        match self {
            Store::Push(s) => s.slots.clear(),
            Store::Broadcast(e) => e.clear(),
        }
    }
}

// ---------------------------------------------------------------------------
// The state machine
// ---------------------------------------------------------------------------

/// Where the stream is in its life.
#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// Writes are accepted.
    Open,
    /// The writer ended: readers drain the buffer, then get `None`.
    Ended,
    /// The writer failed (or its token fired, or it was dropped): readers
    /// drain the buffer, then get the error (D6).
    Failed(StreamError),
    /// The consumer side stopped: the buffer is gone.
    Closed {
        /// What writes fail with.
        writes: StreamError,
        /// What `ready()` resolves to: `None` is `Ok(false)`.
        ready: Option<StreamError>,
        /// What readers still polling get: `None` is a clean end.
        readers: Option<StreamError>,
    },
}

impl Phase {
    pub(crate) fn is_open(&self) -> bool {
        matches!(self, Phase::Open)
    }

    /// What a write gets once the stream is no longer open.
    fn write_err(&self) -> StreamError {
        match self {
            Phase::Open | Phase::Ended => StreamError::Closed,
            Phase::Failed(e) => e.clone(),
            Phase::Closed { writes, .. } => writes.clone(),
        }
    }

    /// What `ready()` resolves to once the stream is no longer open.
    fn ready_result(&self) -> Result<bool, StreamError> {
        match self {
            Phase::Open => Ok(true),
            Phase::Ended | Phase::Closed { ready: None, .. } => Ok(false),
            Phase::Failed(e) | Phase::Closed { ready: Some(e), .. } => Err(e.clone()),
        }
    }

    /// What a reader gets once the buffer is drained and the stream is not open.
    pub(crate) fn read_result(&self) -> Option<BatchResult> {
        match self {
            Phase::Open | Phase::Ended => None,
            Phase::Failed(e) => Some(Err(e.clone())),
            Phase::Closed { readers, .. } => readers.clone().map(Err),
        }
    }
}

/// A write waiting for room (strict and block only).
struct Pending {
    id: u64,
    slot: Slot,
    waker: Waker,
}

/// The state behind the lock, shared by every writer clone and the consumer side.
pub(crate) struct Core {
    hwm: usize,
    policy: Backpressure,
    pub(crate) phase: Phase,
    pub(crate) store: Store,
    /// Waiting writes, in FIFO order (ids increase front to back).
    pending: VecDeque<Pending>,
    next_id: u64,
    /// Every pending id below this has entered the buffer.
    promoted_upto: u64,
    /// Bytes accepted so far, including bytes a drop policy discarded (PUSH-008).
    bytes: u64,
    /// Live [`Writer`] clones.
    writers: usize,
    /// Parked `ready()` callers.
    ready_wakers: Vec<Waker>,
}

/// How an offered write fared.
enum Admit {
    /// It entered the buffer, or a drop policy disposed of it: done.
    Done,
    /// The buffer is full under `strict` or `block`: the caller decides.
    Full(Slot),
    /// The stream is not open; the slot comes back with the error.
    Refused(Slot, StreamError),
}

impl Core {
    fn has_room(&self) -> bool {
        self.store.held() < self.hwm
    }

    pub(crate) fn is_open(&self) -> bool {
        self.phase.is_open()
    }

    fn desired_size(&self) -> Option<usize> {
        self.is_open()
            .then(|| self.hwm.saturating_sub(self.store.held()))
    }

    fn accept(&mut self, slot: Slot, wake: &mut WakeList) {
        self.bytes += slot.byte_len();
        self.store.push(slot, wake);
    }

    /// Offers one write to the buffer, applying the drop policies.
    fn admit(&mut self, slot: Slot, wake: &mut WakeList) -> Admit {
        if !self.is_open() {
            return Admit::Refused(slot, self.phase.write_err());
        }
        if self.pending.is_empty() && self.has_room() {
            self.accept(slot, wake);
            return Admit::Done;
        }
        match self.policy {
            Backpressure::DropOldest => {
                while !self.has_room() && self.store.held() > 0 {
                    self.store.evict_oldest();
                }
                self.accept(slot, wake);
                Admit::Done
            }
            Backpressure::DropNewest => {
                self.bytes += slot.byte_len();
                Admit::Done
            }
            Backpressure::Strict | Backpressure::Block => Admit::Full(slot),
        }
    }

    /// `try_write`: never waits (PUSH-041/043/044/045).
    fn try_write(&mut self, slot: Slot, wake: &mut WakeList) -> bool {
        match self.admit(slot, wake) {
            Admit::Done => true,
            Admit::Full(slot) => {
                if self.policy == Backpressure::Block {
                    // PUSH-043: enqueued past hwm; `false` is a slow-down hint.
                    self.accept(slot, wake);
                }
                false
            }
            Admit::Refused(..) => false,
        }
    }

    /// Parks a write at the back of the pending queue; returns its id.
    fn park(&mut self, slot: Slot, waker: Waker) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push_back(Pending { id, slot, waker });
        id
    }

    /// Polls a parked write.
    fn poll_parked(&mut self, id: u64, waker: &Waker) -> Poll<Result<(), StreamError>> {
        if id < self.promoted_upto {
            return Poll::Ready(Ok(()));
        }
        if !self.is_open() {
            return Poll::Ready(Err(self.phase.write_err()));
        }
        match self.pending_index(id) {
            Some(i) => {
                let p = &mut self.pending[i];
                if !p.waker.will_wake(waker) {
                    p.waker = waker.clone();
                }
                Poll::Pending
            }
            // Unreachable while the invariants hold: an open stream's parked
            // id is either promoted or still queued.
            None => Poll::Ready(Err(StreamError::Closed)),
        }
    }

    fn pending_index(&self, id: u64) -> Option<usize> {
        self.pending.binary_search_by_key(&id, |p| p.id).ok()
    }

    /// Removes a parked write whose future was dropped (PUSH-062). A write
    /// already promoted stays written; a rejected one is already gone.
    fn cancel_parked(&mut self, id: u64) {
        if id >= self.promoted_upto
            && let Some(i) = self.pending_index(id)
        {
            self.pending.remove(i);
        }
    }

    /// Space may have appeared: promote waiting writes in FIFO order
    /// (PUSH-046/047), then wake `ready()` callers if room is left.
    /// Returns whether a write was promoted (new data is buffered).
    pub(crate) fn promote(&mut self, wake: &mut WakeList) -> bool {
        let mut promoted = false;
        while self.has_room() {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.promoted_upto = p.id + 1;
            self.accept(p.slot, wake);
            wake.push(p.waker);
            promoted = true;
        }
        if self.has_room() && !self.ready_wakers.is_empty() {
            wake.append(std::mem::take(&mut self.ready_wakers));
        }
        promoted
    }

    /// Leaves the open phase: rejects waiting writes and wakes everyone.
    fn finish(&mut self, phase: Phase, wake: &mut WakeList) {
        self.phase = phase;
        for p in self.pending.drain(..) {
            wake.push(p.waker);
        }
        self.store.wake_readers(wake);
        wake.append(std::mem::take(&mut self.ready_wakers));
    }

    fn end(&mut self, wake: &mut WakeList) -> Result<u64, StreamError> {
        if !self.is_open() {
            return Err(self.phase.write_err());
        }
        self.finish(Phase::Ended, wake);
        Ok(self.bytes)
    }

    pub(crate) fn fail(&mut self, err: StreamError, wake: &mut WakeList) -> bool {
        if !self.is_open() {
            return false;
        }
        self.finish(Phase::Failed(err), wake);
        true
    }

    /// The consumer side stopped: drop the buffer and close, unless already
    /// closed (idempotent).
    pub(crate) fn close(&mut self, phase: Phase, wake: &mut WakeList) {
        if matches!(self.phase, Phase::Closed { .. }) {
            return;
        }
        self.finish(phase, wake);
        self.store.clear();
    }
}

/// The shared state of a stream: the lock and the token.
pub(crate) struct Shared {
    token: Option<CancelToken>,
    core: Mutex<Core>,
}

impl Shared {
    pub(crate) fn new(
        hwm: usize,
        policy: Backpressure,
        token: Option<CancelToken>,
        store: Store,
    ) -> Arc<Shared> {
        let phase = match token.as_ref().and_then(CancelToken::reason) {
            Some(reason) => Phase::Failed(reason), // PUSH-061
            None => Phase::Open,
        };
        Arc::new(Shared {
            token,
            core: Mutex::new(Core {
                hwm: policy::clamp_hwm(hwm),
                policy,
                phase,
                store,
                pending: VecDeque::new(),
                next_id: 0,
                promoted_upto: 0,
                bytes: 0,
                writers: 1,
                ready_wakers: Vec::new(),
            }),
        })
    }

    /// Runs `f` under the lock, after noticing a fired token; wakes what `f`
    /// collected once the lock is released.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Core, &mut WakeList) -> R) -> R {
        let mut wake = WakeList::new();
        let mut core = lock(&self.core);
        if let Some(token) = &self.token
            && core.is_open()
            && token.is_cancelled()
        {
            self.token_fired(&mut core, &mut wake);
        }
        let out = f(&mut core, &mut wake);
        drop(core);
        drop(wake);
        out
    }

    fn token_fired(&self, core: &mut Core, wake: &mut WakeList) {
        let reason = self
            .token
            .as_ref()
            .and_then(CancelToken::reason)
            .unwrap_or_else(|| StreamError::aborted("the stream token fired"));
        core.fail(reason, wake);
    }

    /// Before parking: registers `cx` with the token too, so a parked party
    /// wakes when it fires. Returns `true` if it has fired (the core is now
    /// failed and the caller must not park).
    pub(crate) fn watch_token(
        &self,
        core: &mut Core,
        cx: &mut Context<'_>,
        wake: &mut WakeList,
    ) -> bool {
        match &self.token {
            Some(token) if core.is_open() && token.poll_cancelled(cx).is_ready() => {
                self.token_fired(core, wake);
                true
            }
            _ => false,
        }
    }

    /// Drives one write: offers `op.slot`, or polls the write it parked.
    /// A refused slot is left in `op.slot`.
    fn poll_write(&self, cx: &mut Context<'_>, op: &mut WriteOp) -> Poll<Result<(), StreamError>> {
        self.with(|core, wake| {
            if let Some(id) = op.parked {
                let mut polled = core.poll_parked(id, cx.waker());
                if polled.is_pending() && self.watch_token(core, cx, wake) {
                    polled = core.poll_parked(id, cx.waker());
                }
                if polled.is_ready() {
                    op.parked = None;
                }
                return polled;
            }
            let Some(slot) = op.slot.take() else {
                return Poll::Ready(Ok(()));
            };
            match core.admit(slot, wake) {
                Admit::Done => Poll::Ready(Ok(())),
                Admit::Refused(slot, err) => {
                    op.slot = Some(slot);
                    Poll::Ready(Err(err))
                }
                Admit::Full(slot) => {
                    if core.policy == Backpressure::Strict && core.pending.len() >= core.hwm {
                        // PUSH-040: hwm writes already wait.
                        op.slot = Some(slot);
                        return Poll::Ready(Err(StreamError::BackpressureViolation));
                    }
                    let id = core.park(slot, cx.waker().clone());
                    if self.watch_token(core, cx, wake) {
                        return Poll::Ready(Err(core.phase.write_err()));
                    }
                    op.parked = Some(id);
                    Poll::Pending
                }
            }
        })
    }

    fn cancel_parked(&self, id: u64) {
        self.with(|core, _| core.cancel_parked(id));
    }

    fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<Result<bool, StreamError>> {
        self.with(|core, wake| {
            if core.is_open() {
                if core.has_room() {
                    return Poll::Ready(Ok(true));
                }
                if !core.ready_wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    core.ready_wakers.push(cx.waker().clone());
                }
                if !self.watch_token(core, cx, wake) {
                    return Poll::Pending;
                }
            }
            Poll::Ready(core.phase.ready_result())
        })
    }
}

// ---------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------

/// The producing half of a [`push`] (or [`broadcast`](mod@crate::broadcast)) stream.
///
/// `Clone`: clones share the stream (see the module docs for how `end` and
/// `fail` through one clone affect the others). `Send + Sync`; write methods
/// take `&self`, so one writer may have several writes in flight, each
/// completing in FIFO order.
///
/// Dropping the last clone without [`Writer::end`] fails the consumer with
/// [`StreamError::Aborted`] (PUSH-053).
pub struct Writer {
    shared: Arc<Shared>,
    /// The write parked by [`Writer::poll_write_batch`], if any.
    parked: Option<u64>,
}

impl Writer {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> Writer {
        Writer {
            shared,
            parked: None,
        }
    }

    /// Writes one chunk without waiting. Returns whether the write was
    /// accepted without exceeding the buffer:
    ///
    /// | buffer | `strict` | `block` | `drop-oldest` | `drop-newest` |
    /// |---|---|---|---|---|
    /// | room | `true` | `true` | `true` | `true` |
    /// | full | `false`, nothing enqueued (PUSH-041) | `false`, enqueued past hwm (PUSH-043) | `true`, oldest slot evicted (PUSH-044) | `true`, chunk discarded (PUSH-045) |
    ///
    /// `false` once the stream is ended, failed or closed (PUSH-050/084).
    /// A zero-length chunk is delivered as one 0-byte chunk (CORE-008,
    /// PUSH-080). Does not allocate (PUSH-089).
    pub fn try_write(&self, chunk: impl Into<Bytes>) -> bool {
        let slot = Slot::One(chunk.into());
        self.shared.with(|core, wake| core.try_write(slot, wake))
    }

    /// Writes a batch as one slot without waiting (PUSH-004): atomic, in
    /// order. Same results as [`Writer::try_write`]. An empty batch takes a
    /// slot but delivers nothing (PUSH-080).
    pub fn try_writev(&self, batch: impl Into<Batch>) -> bool {
        let slot = Slot::Many(batch.into());
        self.shared.with(|core, wake| core.try_write(slot, wake))
    }

    /// The `Sink`-style synchronous fast path: accepts `batch` only if that
    /// needs no waiting (room in the buffer, or a drop policy), and hands it
    /// back otherwise, so the caller can fall back to
    /// [`Writer::poll_write_batch`] without losing it (PIPE-002). Unlike
    /// [`Writer::try_writev`] under `block`, it never enqueues past hwm.
    ///
    /// # Errors
    /// `Err(batch)` when the buffer is full under `strict`/`block`, or the
    /// stream is no longer open (`poll_write_batch` then reports why).
    pub fn try_write_batch(&self, batch: Batch) -> Result<(), Batch> {
        self.shared
            .with(|core, wake| match core.admit(Slot::Many(batch), wake) {
                Admit::Done => Ok(()),
                Admit::Full(slot) | Admit::Refused(slot, _) => Err(slot.into_batch()),
            })
    }

    /// Writes one chunk, waiting for room if the policy says so.
    ///
    /// With room (or under a drop policy) the future completes on its first
    /// poll without allocating (PUSH-089). When full: `strict` waits in the
    /// pending queue unless hwm writes already wait, in which case it fails
    /// with [`StreamError::BackpressureViolation`] (PUSH-040); `block` waits
    /// in an unbounded queue (PUSH-042). A waiting write completes `Ok`
    /// exactly when its chunk enters the buffer, in FIFO order (PUSH-046/047).
    ///
    /// # Errors
    /// [`StreamError::BackpressureViolation`] as above; [`StreamError::Closed`]
    /// after an end or when the consumer dropped the readable (PUSH-050/084);
    /// the consumer's reason after [`Readable::cancel`] (PUSH-052); the
    /// failure after a fail or when the token fired (PUSH-060).
    ///
    /// # Cancel safety
    /// Cancel-safe (PUSH-062): dropping the future before it completes
    /// removes only this write. If it was still waiting, its chunk is never
    /// delivered and leaves no slot or waiter behind; the writer stays open.
    /// Once the future has returned `Pending`, its chunk may still enter the
    /// buffer (and be delivered) if a read promotes it before the drop.
    pub fn write(&self, chunk: impl Into<Bytes>) -> Write<'_> {
        Write {
            shared: &self.shared,
            op: WriteOp {
                slot: Some(Slot::One(chunk.into())),
                parked: None,
            },
        }
    }

    /// Writes a batch as one slot (PUSH-004), waiting like [`Writer::write`].
    ///
    /// # Errors
    /// As for [`Writer::write`].
    ///
    /// # Cancel safety
    /// As for [`Writer::write`]: the batch enters whole or not at all.
    pub fn writev(&self, batch: impl Into<Batch>) -> Write<'_> {
        Write {
            shared: &self.shared,
            op: WriteOp {
                slot: Some(Slot::Many(batch.into())),
                parked: None,
            },
        }
    }

    /// The `Sink`-style poll primitive: writes `*batch` as one slot.
    ///
    /// Returns `Ready(Ok(()))` once the batch (taken out of `batch`) entered
    /// the buffer or was disposed of by a drop policy, and once any write this
    /// writer parked earlier has entered too. Returns `Pending` when the batch
    /// had to wait: it is then held by the stream (taken out of `batch`) and
    /// the next call, with `batch` `None` or a new batch, first waits for it.
    /// No allocation per batch unless it has to wait.
    ///
    /// # Errors
    /// As for [`Writer::write`]. A batch refused outright
    /// (`BackpressureViolation`, or a closed stream) is left in `batch`.
    ///
    /// # Cancel safety
    /// The parked batch belongs to the writer, not to the caller's future:
    /// it stays queued until written, rejected, or the writer is dropped (which
    /// withdraws it, as dropping a [`Write`] does).
    pub fn poll_write_batch(
        &mut self,
        cx: &mut Context<'_>,
        batch: &mut Option<Batch>,
    ) -> Poll<Result<(), StreamError>> {
        if let Err(e) = std::task::ready!(self.poll_parked(cx)) {
            return Poll::Ready(Err(e));
        }
        let Some(b) = batch.take() else {
            return Poll::Ready(Ok(()));
        };
        let mut op = WriteOp {
            slot: Some(Slot::Many(b)),
            parked: None,
        };
        let polled = self.shared.poll_write(cx, &mut op);
        self.parked = op.parked;
        if let Some(slot) = op.slot {
            *batch = Some(slot.into_batch());
        }
        polled
    }

    /// Waits for the write parked by `poll_write_batch`, if any.
    fn poll_parked(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamError>> {
        if self.parked.is_none() {
            return Poll::Ready(Ok(()));
        }
        let mut op = WriteOp {
            slot: None,
            parked: self.parked,
        };
        let polled = self.shared.poll_write(cx, &mut op);
        self.parked = op.parked;
        polled
    }

    /// Ends the stream: the consumer gets what is buffered, then `None`.
    /// Returns the total bytes written, including bytes a drop policy
    /// discarded (PUSH-008). Returns at once, without waiting for the
    /// consumer (D5); writes other clones still have waiting are rejected
    /// with `Closed` (PUSH-085), as is one parked by
    /// [`Writer::poll_write_batch`] (use [`Writer::poll_end`] to wait for it).
    ///
    /// # Errors
    /// [`StreamError::Closed`] if the stream was already ended through
    /// another clone (PUSH-082) or the consumer dropped the readable; the
    /// failure if it failed, or the consumer's reason after a cancel.
    pub fn end(self) -> Result<u64, StreamError> {
        self.shared.with(|core, wake| core.end(wake))
    }

    /// Ends the stream through a shared handle, if it is open and the buffer
    /// is not full (PUSH-086); returns the byte count. `None` (the JS −1)
    /// while the buffer is full, or once the stream is ended, failed or
    /// closed (PUSH-084). Later drops of this writer do nothing.
    pub fn try_end(&self) -> Option<u64> {
        self.shared.with(|core, wake| {
            if core.is_open() && core.has_room() {
                core.end(wake).ok()
            } else {
                None
            }
        })
    }

    /// The `Sink`-style close: waits for the write parked by
    /// [`Writer::poll_write_batch`], then ends as [`Writer::end`] does (it
    /// does not wait for room). The writer stays usable for queries; its
    /// later drop does nothing.
    ///
    /// # Errors
    /// The parked write's error, or as for [`Writer::end`].
    pub fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<u64, StreamError>> {
        if let Err(e) = std::task::ready!(self.poll_parked(cx)) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(self.shared.with(|core, wake| core.end(wake)))
    }

    /// Fails the stream with `err` (kept as is, CORE-006): the consumer gets
    /// the buffered batches, then `Err(err)`; a read already waiting fails at
    /// once (PUSH-010, D6). Waiting writes are rejected with `err`. Does
    /// nothing if the stream is already ended, failed or closed (PUSH-087).
    pub fn fail(self, err: StreamError) {
        self.try_fail(err);
    }

    /// [`Writer::fail`] through a shared handle; returns whether it changed
    /// the stream's state (PUSH-087).
    pub fn try_fail(&self, err: StreamError) -> bool {
        self.shared.with(|core, wake| core.fail(err, wake))
    }

    /// Free slots: hwm − occupied slots, never below 0; waiting writes do not
    /// count (PUSH-020/024). `None` after end, fail, or once the consumer
    /// stopped (PUSH-022).
    pub fn desired_size(&self) -> Option<usize> {
        self.shared.with(|core, _| core.desired_size())
    }

    /// Total bytes written so far, including bytes a drop policy discarded.
    pub fn bytes_written(&self) -> u64 {
        self.shared.with(|core, _| core.bytes)
    }

    /// Waits until there is room (the JS `ondrain`, PUSH-090…097).
    ///
    /// `None` at once if the stream is already ended, failed or closed.
    /// Otherwise a future that resolves `Ok(true)` at once when
    /// `desired_size > 0`, else `Ok(true)` when space appears, `Ok(false)` if
    /// the stream is ended or the consumer drops the readable first
    /// (PUSH-100), and `Err` if it fails or the consumer cancels with a
    /// reason (PUSH-101). Every waiter wakes together.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future only stops waiting.
    pub fn ready(&self) -> Option<Ready<'_>> {
        self.shared.with(|core, _| core.is_open()).then_some(Ready {
            shared: &self.shared,
        })
    }

    /// The poll form of [`Writer::ready`] (a `Sink::poll_ready`): same
    /// results, with `Ok(false)` or `Err` also when the stream is already
    /// closed or failed. Registers `cx` until space appears.
    ///
    /// # Errors
    /// As for [`Writer::ready`].
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<Result<bool, StreamError>> {
        self.shared.poll_ready(cx)
    }
}

impl Clone for Writer {
    fn clone(&self) -> Self {
        self.shared.with(|core, _| core.writers += 1);
        Writer::from_shared(self.shared.clone())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let parked = self.parked.take();
        self.shared.with(|core, wake| {
            if let Some(id) = parked {
                core.cancel_parked(id);
            }
            core.writers -= 1;
            if core.writers == 0 && core.is_open() {
                core.fail(crate::error::writer_dropped(), wake);
            }
        });
    }
}

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("desired_size", &self.desired_size())
            .finish_non_exhaustive()
    }
}

/// The data of one write in flight.
#[derive(Debug, Default)]
struct WriteOp {
    /// Not yet offered (or refused and handed back).
    slot: Option<Slot>,
    /// Waiting in the pending queue under this id.
    parked: Option<u64>,
}

/// Future returned by [`Writer::write`] and [`Writer::writev`].
///
/// # Cancel safety
/// Dropping it withdraws the write if it is still waiting (PUSH-062).
#[must_use = "futures do nothing unless polled"]
pub struct Write<'a> {
    shared: &'a Shared,
    op: WriteOp,
}

impl Future for Write<'_> {
    type Output = Result<(), StreamError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.shared.poll_write(cx, &mut this.op)
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.op.parked.take() {
            self.shared.cancel_parked(id);
        }
    }
}

impl fmt::Debug for Write<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Write")
            .field("waiting", &self.op.parked.is_some())
            .finish_non_exhaustive()
    }
}

/// Future returned by [`Writer::ready`].
///
/// # Cancel safety
/// Cancel-safe: dropping it only stops waiting.
#[must_use = "futures do nothing unless polled"]
pub struct Ready<'a> {
    shared: &'a Shared,
}

impl Future for Ready<'_> {
    type Output = Result<bool, StreamError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.shared.poll_ready(cx)
    }
}

impl fmt::Debug for Ready<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ready").finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------
// Readable
// ---------------------------------------------------------------------------

/// The consuming half of a [`push`] stream: a [`Source`].
///
/// Each poll takes every buffered slot as one flat batch and frees them all
/// (PUSH-083); an empty batch (only empty `writev`s were buffered) is never
/// yielded. After the end, polls return `None`; after a failure, the same
/// error (CORE-006/007).
///
/// Dropping it closes the writer (PUSH-050); see [`Readable::cancel`] to
/// pass a reason.
pub struct Readable {
    shared: Arc<Shared>,
}

impl Readable {
    /// Stops consuming with a reason (the JS `iterator.throw`, PUSH-052):
    /// later writes and waiting writes fail with [`StreamError::Aborted`]
    /// carrying `reason`, and `ready()` waiters get it (PUSH-101).
    pub fn cancel(self, reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) {
        self.cancel_with(StreamError::aborted(reason));
    }

    /// [`Readable::cancel`] with an already-built error, kept as is.
    pub fn cancel_with(self, err: StreamError) {
        self.shared.with(|core, wake| {
            core.close(
                Phase::Closed {
                    writes: err.clone(),
                    ready: Some(err.clone()),
                    readers: Some(err),
                },
                wake,
            )
        });
    }
}

impl Source for Readable {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let shared = &*self.shared;
        shared.with(|core, wake| {
            loop {
                let open = core.phase.is_open();
                let Store::Push(slots) = &mut core.store else {
                    return Poll::Ready(None);
                };
                if let Some(batch) = slots.take_ready() {
                    core.promote(wake);
                    if !batch.is_empty() {
                        return Poll::Ready(Some(Ok(batch)));
                    }
                    // Only empty writevs: look again (promoted writes may be there).
                    continue;
                }
                if open {
                    set_waker(&mut slots.reader, cx.waker());
                    if !shared.watch_token(core, cx, wake) {
                        return Poll::Pending;
                    }
                    continue;
                }
                return Poll::Ready(core.phase.read_result());
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.shared.with(|core, _| {
            matches!(core.phase, Phase::Ended)
                && matches!(&core.store, Store::Push(s) if s.slots.is_empty())
        })
    }
}

impl Drop for Readable {
    fn drop(&mut self) {
        self.shared.with(|core, wake| {
            core.close(
                Phase::Closed {
                    writes: StreamError::Closed,
                    ready: None,
                    readers: None,
                },
                wake,
            )
        });
    }
}

impl fmt::Debug for Readable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Readable").finish_non_exhaustive()
    }
}

/// # Mapping onto a future `Sink` trait
///
/// A sink trait for `pipe_to` (PIPE-001/002) would look like
///
/// ```text
/// trait Sink {
///     fn try_write_batch(&mut self, batch: Batch) -> Result<(), Batch>;
///     fn poll_write_batch(&mut self, cx, batch: &mut Option<Batch>) -> Poll<Result<(), StreamError>>;
///     fn poll_end(&mut self, cx) -> Poll<Result<u64, StreamError>>;
///     fn fail(&mut self, err: StreamError);
/// }
/// ```
///
/// and each method is one call on [`Writer`]:
///
/// - `try_write_batch` → [`Writer::try_write_batch`]: the sync fast path;
///   accepts without waiting or hands the batch back, never allocates.
/// - `poll_write_batch` → [`Writer::poll_write_batch`]: the batch waits in
///   the pending queue (owned by the stream, tracked by the writer), so no
///   future or box is created per batch; `Pending` means "parked, call again".
/// - `poll_end` → [`Writer::poll_end`]: finishes a parked write, then ends.
/// - `fail` → [`Writer::try_fail`] (through `&self`; the state change is
///   reported, PUSH-087).
///
/// `pipe_to` then runs: `try_write_batch` first, on `Err(b)` put `b` into
/// the `Option` and drive `poll_write_batch` to completion; finally
/// `poll_end` or `try_fail`.
impl Writer {}
