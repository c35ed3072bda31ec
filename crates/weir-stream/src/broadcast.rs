//! [`broadcast`]: one writer, several consumers, each seeing every later
//! write (catalogue section 6, BCAST-*).
//!
//! The writer is the push [`Writer`] (aliased as
//! [`BroadcastWriter`]): same methods, same four policies, same byte count
//! and clone rules (BCAST-007/011). What differs is the buffer: a ring of
//! *entries* (one per write or writev), each consumer with its own cursor.
//!
//! - [`Broadcast::subscribe`] creates a consumer, counted at once
//!   (BCAST-001). It starts at the **write position**: it sees only writes
//!   made after it subscribed (BCAST-002, D4; `share()` late joiners start at
//!   the oldest retained entry instead).
//! - Each consumer poll returns one entry, not everything pending (BCAST-003).
//!   Entries are shared without copying chunks: the last consumer to read an
//!   entry takes it, the others clone its `Bytes` handles (CORE-002).
//! - Backpressure follows the slowest consumer: the entries held are those
//!   some consumer has not read yet, and `desired_size` = hwm − entries held
//!   (BCAST-004). When the slowest consumer reads or leaves, space is
//!   recomputed at once, promoting waiting writes and waking `ready()`
//!   (BCAST-005).
//! - With no consumers, writes are held up to hwm and then the policy
//!   applies (BCAST-006). Entries written while nobody listens are never
//!   delivered (a new consumer starts at the write position); they are
//!   released when the next consumer subscribes.
//! - `drop-oldest` evicts the oldest entry and moves lagging cursors past it
//!   (BCAST-007).
//! - `end()`: consumers get what they have not read, then the end
//!   (BCAST-008). `fail(r)` (and the token, and dropping the last writer
//!   without end): consumers get what they have not read, then `Err(r)`,
//!   the same rule as push (D6, BCAST-009). A consumer stops counting once it
//!   has returned its end or error, or is dropped.
//! - [`Broadcast::cancel`]: unread data is dropped, consumers end (or get the
//!   reason), writes and waiting writes fail with [`StreamError::Aborted`],
//!   `ready()` resolves `false`; idempotent, never waits (BCAST-010).
//! - When the [`Broadcast`] handle (every clone) and every consumer are gone,
//!   nobody can read again: the writer is closed as when a push consumer
//!   stops (writes fail with [`StreamError::Closed`]).
//!
//! Per-consumer transforms: wrap a consumer with [`crate::pull`] (BCAST-011).

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::policy::{self, Backpressure};
use crate::push::{Phase, Shared, Slot, Store, WakeList, Writer, set_waker};
use crate::sync::Arc;
use crate::{Batch, BatchResult, CancelToken, Source, StreamError};

/// The writer of a broadcast: the push [`Writer`], with the same methods
/// and rules; `desired_size` counts entries held for the slowest consumer.
pub type BroadcastWriter = Writer;

/// Settings of a [`broadcast`].
#[derive(Debug, Clone)]
pub struct BroadcastOptions {
    /// High-water mark, in entries (writes), clamped like push's (PUSH-032).
    /// Default [`policy::DEFAULT_SHARE_HWM`] (16, PUSH-030).
    pub hwm: usize,
    /// What a write does when the slowest consumer is hwm entries behind.
    /// Default [`Backpressure::Strict`].
    pub policy: Backpressure,
    /// A stream-level token: once it fires, the writer fails with its reason
    /// (consumers get their unread entries, then the error).
    pub token: Option<CancelToken>,
}

impl Default for BroadcastOptions {
    fn default() -> Self {
        BroadcastOptions {
            hwm: policy::DEFAULT_SHARE_HWM,
            policy: Backpressure::Strict,
            token: None,
        }
    }
}

impl BroadcastOptions {
    /// The defaults: hwm 16, `strict`, no token.
    pub fn new() -> Self {
        BroadcastOptions::default()
    }

    /// Sets the high-water mark, in entries.
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

/// Creates a broadcast: a writer and a handle to subscribe consumers with
/// (BCAST-001). Allocates once; no consumer exists until
/// [`Broadcast::subscribe`] is called.
pub fn broadcast(options: BroadcastOptions) -> (BroadcastWriter, Broadcast) {
    let shared = Shared::new(
        options.hwm,
        options.policy,
        options.token,
        Store::Broadcast(Entries::new()),
    );
    (Writer::from_shared(shared.clone()), Broadcast { shared })
}

/// One write, and how many consumers still have to read it.
#[derive(Debug)]
struct Entry {
    slot: Slot,
    readers_left: usize,
}

#[derive(Debug)]
struct Cursor {
    /// Absolute index of the next entry to read.
    pos: u64,
    waker: Option<Waker>,
}

/// The broadcast buffer: the entries held and every consumer's cursor.
#[derive(Debug)]
pub(crate) struct Entries {
    entries: VecDeque<Entry>,
    /// Absolute index of `entries[0]`.
    base: u64,
    /// Consumers by id; `None` marks a free id.
    cursors: Vec<Option<Cursor>>,
    /// Consumers counted (BCAST-001).
    live: usize,
    /// Live [`Broadcast`] handles.
    handles: usize,
}

impl Entries {
    fn new() -> Self {
        Entries {
            entries: VecDeque::new(),
            base: 0,
            cursors: Vec::new(),
            live: 0,
            handles: 1,
        }
    }

    /// Entries held: not yet read by some consumer (or written while none
    /// listened).
    pub(crate) fn held(&self) -> usize {
        self.entries.len()
    }

    fn write_pos(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    pub(crate) fn push(&mut self, slot: Slot, wake: &mut WakeList) {
        self.entries.push_back(Entry {
            slot,
            readers_left: self.live,
        });
        self.wake_readers(wake);
    }

    /// Drops the oldest entry; cursors behind it skip to the next one.
    pub(crate) fn evict_oldest(&mut self) {
        if self.entries.pop_front().is_some() {
            self.base += 1;
        }
    }

    pub(crate) fn wake_readers(&mut self, wake: &mut WakeList) {
        for cursor in self.cursors.iter_mut().flatten() {
            if let Some(w) = cursor.waker.take() {
                wake.push(w);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        self.base = self.write_pos();
        self.entries.clear();
    }

    /// Releases the entries every consumer has read. With no consumer,
    /// nothing is released (BCAST-006).
    fn trim(&mut self) {
        if self.live == 0 {
            return;
        }
        while self.entries.front().is_some_and(|e| e.readers_left == 0) {
            self.entries.pop_front();
            self.base += 1;
        }
    }

    fn subscribe(&mut self) -> usize {
        let cursor = Cursor {
            pos: self.write_pos(),
            waker: None,
        };
        self.live += 1;
        // Entries held while nobody listened can never be read now.
        self.trim();
        match self.cursors.iter().position(Option::is_none) {
            Some(id) => {
                self.cursors[id] = Some(cursor);
                id
            }
            None => {
                self.cursors.push(Some(cursor));
                self.cursors.len() - 1
            }
        }
    }

    /// The consumer leaves: it no longer holds back the entries it did not read.
    fn leave(&mut self, id: usize) {
        let Some(cursor) = self.cursors.get_mut(id).and_then(Option::take) else {
            return;
        };
        self.live -= 1;
        let skip = usize::try_from(cursor.pos.saturating_sub(self.base)).unwrap_or(usize::MAX);
        for entry in self.entries.iter_mut().skip(skip) {
            entry.readers_left = entry.readers_left.saturating_sub(1);
        }
        self.trim();
    }

    /// The consumer's next non-empty entry (BCAST-003), if any.
    fn read(&mut self, id: usize) -> Option<Batch> {
        let Some(Some(cursor)) = self.cursors.get_mut(id) else {
            return None;
        };
        let end = self.base + self.entries.len() as u64;
        let mut pos = cursor.pos.max(self.base);
        let mut out = None;
        while pos < end && out.is_none() {
            let Some(entry) = usize::try_from(pos - self.base)
                .ok()
                .and_then(|i| self.entries.get_mut(i))
            else {
                break;
            };
            pos += 1;
            entry.readers_left = entry.readers_left.saturating_sub(1);
            let batch = if entry.readers_left == 0 {
                // Last reader: take the entry instead of cloning it.
                std::mem::replace(&mut entry.slot, Slot::Many(Batch::new())).into_batch()
            } else {
                entry.slot.clone().into_batch()
            };
            // An empty writev delivers nothing (PUSH-080).
            out = (!batch.is_empty()).then_some(batch);
        }
        cursor.pos = pos;
        self.trim();
        out
    }

    fn park(&mut self, id: usize, waker: &Waker) {
        if let Some(Some(cursor)) = self.cursors.get_mut(id) {
            set_waker(&mut cursor.waker, waker);
        }
    }

    /// Whether nobody can ever read again.
    fn abandoned(&self) -> bool {
        self.live == 0 && self.handles == 0
    }
}

/// The phase a broadcast takes when its readers are all gone.
fn abandoned_phase() -> Phase {
    Phase::Closed {
        writes: StreamError::Closed,
        ready: None,
        readers: None,
    }
}

/// A handle to subscribe consumers to a [`broadcast`]. `Clone`.
///
/// Dropping every handle does not stop the consumers; once the handles and
/// the consumers are all gone, the writer is closed.
pub struct Broadcast {
    shared: Arc<Shared>,
}

impl Broadcast {
    /// Creates a consumer, counted at once (BCAST-001), that starts at the
    /// write position (BCAST-002). Subscribing after the end gives a
    /// consumer that ends at once; after a failure, one that fails.
    pub fn subscribe(&self) -> Consumer {
        let id = self.shared.with(|core, wake| {
            let Store::Broadcast(entries) = &mut core.store else {
                return usize::MAX;
            };
            let id = entries.subscribe();
            core.promote(wake);
            id
        });
        Consumer {
            shared: self.shared.clone(),
            id,
            done: None,
        }
    }

    /// Consumers currently counted: subscribed, not dropped, not yet past
    /// their end or error.
    pub fn consumer_count(&self) -> usize {
        self.shared.with(|core, _| match &core.store {
            Store::Broadcast(entries) => entries.live,
            Store::Push(_) => 0,
        })
    }

    /// Stops the broadcast (BCAST-010): unread data is dropped, every
    /// consumer ends cleanly at its next poll, writes (and waiting writes)
    /// fail with [`StreamError::Aborted`], `ready()` resolves `false`.
    /// Idempotent; never waits.
    pub fn cancel(&self) {
        self.close(Phase::Closed {
            writes: StreamError::aborted("the broadcast was cancelled"),
            ready: None,
            readers: None,
        });
    }

    /// [`Broadcast::cancel`], but consumers get `Err(Aborted(reason))`
    /// instead of a clean end, and writes fail with that same error.
    pub fn cancel_with(&self, reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) {
        let err = StreamError::aborted(reason);
        self.close(Phase::Closed {
            writes: err.clone(),
            ready: None,
            readers: Some(err),
        });
    }

    fn close(&self, phase: Phase) {
        self.shared.with(|core, wake| core.close(phase, wake));
    }
}

impl Clone for Broadcast {
    fn clone(&self) -> Self {
        self.shared.with(|core, _| {
            if let Store::Broadcast(entries) = &mut core.store {
                entries.handles += 1;
            }
        });
        Broadcast {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Broadcast {
    fn drop(&mut self) {
        self.shared.with(|core, wake| {
            let Store::Broadcast(entries) = &mut core.store else {
                return;
            };
            entries.handles -= 1;
            if entries.abandoned() {
                core.close(abandoned_phase(), wake);
            }
        });
    }
}

impl fmt::Debug for Broadcast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broadcast")
            .field("consumer_count", &self.consumer_count())
            .finish_non_exhaustive()
    }
}

/// One consumer of a [`broadcast`]: a [`Source`] yielding one entry per poll
/// (BCAST-003).
///
/// After its end or error it stops counting and keeps returning the same
/// result (CORE-006/007). Dropping it releases the entries it held back
/// (BCAST-005).
pub struct Consumer {
    shared: Arc<Shared>,
    id: usize,
    /// Set once the consumer returned its end (`None`) or error.
    done: Option<Option<StreamError>>,
}

impl Source for Consumer {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        if let Some(done) = &this.done {
            return Poll::Ready(done.clone().map(Err));
        }
        let (id, shared) = (this.id, &*this.shared);
        let (polled, finished) = shared.with(|core, wake| {
            loop {
                let open = core.phase.is_open();
                let Store::Broadcast(entries) = &mut core.store else {
                    return (Poll::Ready(None), true);
                };
                let got = entries.read(id);
                // Reading (even past empty writevs only) may have freed space.
                let promoted = core.promote(wake);
                if let Some(batch) = got {
                    return (Poll::Ready(Some(Ok(batch))), false);
                }
                if promoted {
                    // A promoted write is new data for this consumer too.
                    continue;
                }
                let Store::Broadcast(entries) = &mut core.store else {
                    return (Poll::Ready(None), true);
                };
                if open {
                    entries.park(id, cx.waker());
                    if !shared.watch_token(core, cx, wake) {
                        return (Poll::Pending, false);
                    }
                    continue;
                }
                entries.leave(id);
                return (Poll::Ready(core.phase.read_result()), true);
            }
        });
        if finished && let Poll::Ready(result) = &polled {
            this.done = Some(result.as_ref().and_then(|r| r.as_ref().err().cloned()));
        }
        polled
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if self.done.is_some() {
            return;
        }
        let id = self.id;
        self.shared.with(|core, wake| {
            let Store::Broadcast(entries) = &mut core.store else {
                return;
            };
            entries.leave(id);
            let abandoned = entries.abandoned();
            core.promote(wake);
            if abandoned {
                core.close(abandoned_phase(), wake);
            }
        });
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}
