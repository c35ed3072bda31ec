//! [`share`]: one pull source read by several consumers, each at its own pace.
//!
//! A [`Share`] owns a [`Source`] and a ring of the batches it yielded. Every
//! [`Consumer`] is a [`Source`] with its own cursor into that ring: all
//! consumers see every batch, in order, with the same [`bytes::Bytes`]
//! buffers (SHARE-003). Nothing runs on its own: the source is polled only
//! when a consumer needs a batch that is not in the ring yet (SHARE-001), by
//! that consumer, inside its own poll, while it holds the share's lock, so
//! there is at most one upstream pull at a time and every consumer gets its
//! result (SHARE-004). The ring is trimmed up to the slowest cursor
//! (SHARE-005).
//!
//! # High-water marks and policies
//!
//! The high-water marks count what the ring holds for the slowest primary
//! consumer in chunks *and* in bytes ([`ShareOptions::hwm_chunks`],
//! [`ShareOptions::hwm_bytes`]), never in batches, whose size varies. The
//! ring is *full* once either is reached. A pull appends one whole batch,
//! so the ring holds at most the marks plus one batch (a batch is at most
//! [`Batch::MAX_BYTES`] from the crate's own sources). A primary that needs
//! a new upstream batch while the ring is full:
//! - `strict` gets [`StreamError::BufferFull`]; the error is not terminal,
//!   and the same consumer succeeds once the slowest one moves on (SHARE-007);
//! - `block` (the default) waits until the slowest one moves on or leaves
//!   (SHARE-008, SHARE-011), so the plain loop
//!   `while let Some(b) = consumer.next_batch().await` works in every
//!   consumer, each at its own pace;
//! - `drop-oldest` pulls anyway and evicts the oldest entries until the ring
//!   is back within the marks; lagging primary cursors move forward to the
//!   oldest entry kept (SHARE-009);
//! - `drop-newest` pulls one batch and discards it, for every consumer, so the
//!   ring never exceeds the marks (SHARE-010, D3); the consumer then yields
//!   (wakes itself and returns `Pending`), so one poll pulls at most one batch.
//!
//! # Secondary consumers
//!
//! A consumer made with [`ConsumerOptions::secondary`] (a proxy's cache
//! writer, say) never slows the primaries (the client): fullness and the
//! policies are computed over primaries only. When a secondary is behind
//! the slowest primary and more than a high-water mark behind the newest
//! entry, it is detached: its next poll returns [`StreamError::Lagged`], its
//! cursor stops holding the ring, and it no longer counts as a consumer. A secondary that needs a new batch while
//! the primaries hold a full ring waits (under every policy: it never gets
//! `BufferFull`, never evicts and never discards). With no primary left,
//! secondaries pull freely, and the slower ones are detached once they lag.
//! Either way the ring never holds more than the marks plus one batch.
//!
//! # Ends, errors, cancellation
//!
//! - The source's end and its error are shared: each consumer first gets the
//!   entries it has not read, then `None` or the error, the same
//!   [`Reason`](crate::Reason) for all, on every later poll too (SHARE-012).
//!   The source is dropped as soon as it ends or fails.
//! - [`Share::cancel`] drops the source and the ring at once; every consumer
//!   then ends, cleanly or with the reason given (SHARE-013). A token given in
//!   [`ShareOptions::token`] does the same with its reason, as
//!   [`StreamError::Aborted`]; already cancelled, the share starts cancelled
//!   and its source is dropped at once (SHARE-017).
//! - Otherwise the source lives until the last consumer *and* the [`Share`]
//!   handle are gone (SHARE-014). Dropping the handle alone does not cancel
//!   (the reference's `dispose` is an explicit [`Share::cancel`] here):
//!   consumers made from it read on.
//!
//! [`share_sync`] is the same machine over an iterator, with iterator
//! consumers; where an async consumer would wait, a sync one gets
//! [`StreamError::BufferFull`] (SHARE-016).
//!
//! # Costs
//!
//! The ring holds [`Batch`]es (a `Vec<Bytes>` each). A read clones the batch
//! (one `Vec` allocation plus a reference-count bump per chunk), except for
//! the last cursor to leave an entry, which takes it by move: with one
//! consumer a share allocates nothing per batch, with `n` it allocates
//! `n - 1` vectors per batch. A ring of `Arc<[Bytes]>` was measured and
//! rejected: converting each batch costs one more allocation, and every
//! reader still needs its own `Vec` because a `Batch` owns one, so it makes
//! `n + 1` allocations per batch and is no faster. Every per-consumer scan
//! (slowest cursor, lag) is `O(consumers)`; shares are meant for a handful.
//!
//! # Waking
//!
//! The source is always polled with one waker owned by the share, never with
//! a consumer's: when the source wakes it, every consumer waiting on the
//! share wakes, so the wake-up reaches whoever still waits even if the
//! consumer that polled has gone. While the source has a wake-up pending,
//! consumers that need data wait for it instead of polling the source again.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, Wake, Waker};

use http::HeaderMap;
use http_body::SizeHint;

use crate::policy::{self, Backpressure};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Mutex, Ordering, lock};
use crate::{Batch, BatchResult, CancelToken, Source, StreamError};

/// How a [`Share`] buffers: its high-water marks, its policy and its token.
#[derive(Debug, Clone)]
pub struct ShareOptions {
    /// Most chunks held for the slowest primary consumer before the ring is
    /// full. Default [`policy::DEFAULT_SHARE_HWM_CHUNKS`]; clamped to
    /// `1..=`[`policy::MAX_HWM`].
    pub hwm_chunks: usize,
    /// Most bytes held for the slowest primary consumer before the ring is
    /// full, in bytes. Default [`policy::DEFAULT_SHARE_HWM_BYTES`]; at least 1.
    pub hwm_bytes: usize,
    /// What a consumer that needs a new batch does when the ring is full.
    /// Default [`Backpressure::Block`]: it waits, so a plain consumer loop
    /// never sees an error.
    pub policy: Backpressure,
    /// Cancels the share with the token's reason, as [`Share::cancel`] would,
    /// when it fires (SHARE-017). Waiting consumers are woken for it; the
    /// cancel itself happens in the next consumer poll, so a share nobody
    /// polls keeps its source until then or until it is dropped.
    pub token: Option<CancelToken>,
}

impl Default for ShareOptions {
    fn default() -> Self {
        ShareOptions {
            hwm_chunks: policy::DEFAULT_SHARE_HWM_CHUNKS,
            hwm_bytes: policy::DEFAULT_SHARE_HWM_BYTES,
            policy: Backpressure::Block,
            token: None,
        }
    }
}

/// Whether a consumer sets the pace of the share.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Role {
    /// Holds the ring and is subject to the share's policy.
    #[default]
    Primary,
    /// Never slows the primaries; what happens when it lags is `on_lag`.
    Secondary {
        /// What to do when it falls more than a high-water mark behind.
        on_lag: OnLag,
    },
}

/// What happens to a secondary consumer that falls more than a high-water
/// mark behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnLag {
    /// Detach it: its next poll returns [`StreamError::Lagged`].
    #[default]
    Detach,
}

/// How a consumer takes part in a [`Share`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ConsumerOptions {
    /// Primary (the default) or secondary.
    pub role: Role,
}

impl ConsumerOptions {
    /// A primary consumer: it holds the ring and the policy applies to it.
    pub fn primary() -> Self {
        ConsumerOptions {
            role: Role::Primary,
        }
    }

    /// A secondary consumer detached when it lags (see the [module docs](self)).
    pub fn secondary() -> Self {
        ConsumerOptions {
            role: Role::Secondary {
                on_lag: OnLag::Detach,
            },
        }
    }
}

/// Shares `source` among consumers made with [`Share::consumer`] or [`Share::pull`].
///
/// Polls nothing (SHARE-001). If `options.token` has already fired, the share
/// starts cancelled: `source` is dropped at once, and every consumer fails
/// with the token's reason on its first poll (SHARE-017).
pub fn share<S: Source + Unpin>(source: S, options: ShareOptions) -> Share<S> {
    Share {
        shared: Shared::new(source, options),
    }
}

/// The handle of a shared source; see the [module docs](self).
///
/// Dropping it does not stop the consumers already made; the source is
/// dropped with the last of them (SHARE-014), or by [`Share::cancel`].
pub struct Share<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Share<S> {
    /// A new consumer, counted from now (SHARE-002), starting at the oldest
    /// entry still held (SHARE-006, D4).
    ///
    /// Compose it with [`pull`](crate::pull) for a per-consumer transform
    /// (SHARE-015). On a cancelled share the consumer ends at its first
    /// poll and is not counted.
    pub fn consumer(&self, options: ConsumerOptions) -> Consumer<S> {
        let secondary = matches!(options.role, Role::Secondary { .. });
        let id = lock(&self.shared.state).attach(secondary);
        Consumer {
            shared: self.shared.clone(),
            id,
            done: None,
            trailers_taken: false,
        }
    }

    /// A new primary consumer: `consumer(ConsumerOptions::primary())`.
    pub fn pull(&self) -> Consumer<S> {
        self.consumer(ConsumerOptions::primary())
    }

    /// Number of consumers that have not ended, failed, been detached or
    /// been dropped (SHARE-002).
    pub fn consumer_count(&self) -> usize {
        lock(&self.shared.state).attached
    }

    /// Number of secondary consumers detached for lagging so far. A
    /// detached consumer learns it at its next poll; whoever drives it (a
    /// mirror request, say) can watch this to stop at once instead.
    pub fn lagged_count(&self) -> u64 {
        lock(&self.shared.state).lagged
    }

    /// Number of entries (batches) the ring holds (SHARE-005).
    pub fn buffer_size(&self) -> usize {
        lock(&self.shared.state).entries.len()
    }

    /// Chunks the ring holds.
    pub fn buffered_chunks(&self) -> u64 {
        let state = lock(&self.shared.state);
        state.pulled_chunks
            - state
                .entries
                .front()
                .map_or(state.pulled_chunks, |e| e.chunks_before)
    }

    /// Bytes the ring holds.
    pub fn buffered_bytes(&self) -> u64 {
        let state = lock(&self.shared.state);
        state.pulled_bytes
            - state
                .entries
                .front()
                .map_or(state.pulled_bytes, |e| e.start)
    }

    /// The high-water mark in chunks in effect, after clamping.
    pub fn hwm_chunks(&self) -> usize {
        self.shared.config.hwm_chunks
    }

    /// The high-water mark in bytes in effect.
    pub fn hwm_bytes(&self) -> usize {
        self.shared.config.hwm_bytes
    }

    /// The backpressure policy.
    pub fn policy(&self) -> Backpressure {
        self.shared.config.policy
    }

    /// Stops the share: drops the source and every buffered entry now, and
    /// wakes every waiting consumer. Each consumer's next poll returns
    /// `None` (`reason` is `None`) or `Err(reason)`, and it stops counting
    /// (SHARE-013).
    ///
    /// Idempotent: only the first call counts, and a share whose source
    /// already failed keeps that error. Prefer a reason when a consumer
    /// forwards the data: a clean end after a cancel is a truncated body.
    pub fn cancel(&self, reason: Option<StreamError>) {
        let mut after = After::new();
        lock(&self.shared.state).cancel(reason, &mut after);
        after.run(&self.shared.wake);
    }
}

impl<S> fmt::Debug for Share<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.shared.state);
        f.debug_struct("Share")
            .field("hwm_chunks", &self.shared.config.hwm_chunks)
            .field("hwm_bytes", &self.shared.config.hwm_bytes)
            .field("policy", &self.shared.config.policy)
            .field("consumers", &state.attached)
            .field("buffered", &state.entries.len())
            .finish_non_exhaustive()
    }
}

/// One reader of a [`Share`]: a [`Source`] with its own cursor.
///
/// Counted from its creation until it returns `None` or an error (not
/// [`StreamError::BufferFull`], which is not terminal), is detached, or is
/// dropped (SHARE-002). After `None` or an error, every later poll returns
/// the same (CORE-006, CORE-007).
///
/// Dropping it releases its cursor, trims the ring and wakes the consumers
/// it held back (SHARE-011); the others read on (SHARE-015).
pub struct Consumer<S> {
    shared: Arc<Shared<S>>,
    /// Index of this consumer's cursor slot; the slot is freed only on drop.
    id: usize,
    /// Set once the consumer has returned its end or a terminal error.
    done: Option<Done>,
    trailers_taken: bool,
}

#[derive(Debug, Clone)]
enum Done {
    End,
    Failed(StreamError),
}

impl<S> Consumer<S> {
    /// Whether this consumer is a secondary one.
    pub fn is_secondary(&self) -> bool {
        lock(&self.shared.state)
            .cursor(self.id)
            .is_some_and(|c| c.secondary)
    }

    fn finish(&mut self, done: Done) -> Option<BatchResult> {
        let out = match &done {
            Done::End => None,
            Done::Failed(e) => Some(Err(e.clone())),
        };
        self.done = Some(done);
        out
    }
}

impl<S: Source + Unpin> Consumer<S> {
    /// The common step of the async and sync consumers. With `can_wait`
    /// false, a consumer that would park gets `Full` instead.
    fn step(&mut self, cx: &mut Context<'_>, can_wait: bool) -> Poll<Option<BatchResult>> {
        if let Some(done) = &self.done {
            return Poll::Ready(match done {
                Done::End => None,
                Done::Failed(e) => Some(Err(e.clone())),
            });
        }
        let mut after = After::new();
        let step = {
            let shared = &*self.shared;
            let mut state = lock(&shared.state);
            state.poll_step(self.id, shared, cx, can_wait, &mut after)
        };
        after.run(&self.shared.wake);
        match step {
            Step::Batch(batch) => Poll::Ready(Some(Ok(batch))),
            Step::Full => Poll::Ready(Some(Err(StreamError::BufferFull))),
            Step::End => Poll::Ready(self.finish(Done::End)),
            Step::Failed(e) => Poll::Ready(self.finish(Done::Failed(e))),
            Step::Pending => Poll::Pending,
        }
    }
}

impl<S: Source + Unpin> Source for Consumer<S> {
    /// Polls for this consumer's next batch.
    ///
    /// # Errors
    /// `BufferFull` under `strict` when the ring is full and this consumer
    /// needs a new batch (not terminal: poll again later, SHARE-007);
    /// `Lagged` for a detached secondary; the source's error (SHARE-012);
    /// the cancel reason (SHARE-013, SHARE-017).
    ///
    /// # Cancel safety
    /// A poll takes a batch only when it returns it; a `Pending` poll only
    /// registers the waker. A batch pulled from the source during a poll is
    /// already in the ring, so no consumer loses it.
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        self.get_mut().step(cx, true)
    }

    /// Bytes still to come for this consumer: those buffered past its
    /// cursor plus the source's own hint. Under a drop policy the lower
    /// bound is 0, since entries may be dropped.
    fn size_hint(&self) -> SizeHint {
        if self.done.is_some() {
            return SizeHint::with_exact(0);
        }
        lock(&self.shared.state).size_hint(self.id, self.shared.config.policy)
    }

    /// True once this consumer has read the last entry of a source that ended.
    fn is_end_stream(&self) -> bool {
        match &self.done {
            Some(Done::End) => true,
            Some(Done::Failed(_)) => false,
            None => lock(&self.shared.state).at_end(self.id),
        }
    }

    /// A copy of the source's trailers, once this consumer reached the end.
    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        let this = self.get_mut();
        if this.trailers_taken || !this.is_end_stream() {
            return None;
        }
        this.trailers_taken = true;
        lock(&this.shared.state).trailers.clone()
    }
}

impl<S> Drop for Consumer<S> {
    fn drop(&mut self) {
        let mut after = After::new();
        lock(&self.shared.state).release(self.id, self.shared.config, &mut after);
        self.shared.wake.unregister(self.id);
        after.run(&self.shared.wake);
    }
}

impl<S> fmt::Debug for Consumer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("id", &self.id)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------
// Synchronous share (SHARE-016)
// ---------------------------------------------------------------------------

/// Shares a synchronous source, an iterator of batch results, among
/// iterator consumers (SHARE-016).
///
/// Same rules as [`share`], except that nothing can wait: where an async
/// consumer would wait (`block` on a full ring, a secondary behind full
/// primaries) or yield (`drop-newest` after discarding a batch), a sync
/// consumer gets [`StreamError::BufferFull`], which is not terminal.
pub fn share_sync<I>(source: I, options: ShareOptions) -> SyncShare<I>
where
    I: Iterator<Item = BatchResult>,
{
    SyncShare {
        inner: share(IterBatches(source), options),
    }
}

/// The handle of a synchronous shared source. See [`share_sync`].
pub struct SyncShare<I> {
    inner: Share<IterBatches<I>>,
}

impl<I: Iterator<Item = BatchResult>> SyncShare<I> {
    /// A new consumer; as [`Share::consumer`].
    pub fn consumer(&self, options: ConsumerOptions) -> SyncConsumer<I> {
        SyncConsumer {
            inner: self.inner.consumer(options),
        }
    }

    /// A new primary consumer; as [`Share::pull`].
    pub fn pull(&self) -> SyncConsumer<I> {
        self.consumer(ConsumerOptions::primary())
    }

    /// As [`Share::consumer_count`].
    pub fn consumer_count(&self) -> usize {
        self.inner.consumer_count()
    }

    /// As [`Share::buffer_size`].
    pub fn buffer_size(&self) -> usize {
        self.inner.buffer_size()
    }

    /// As [`Share::cancel`].
    pub fn cancel(&self, reason: Option<StreamError>) {
        self.inner.cancel(reason)
    }
}

impl<I> fmt::Debug for SyncShare<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SyncShare").field(&self.inner).finish()
    }
}

/// One reader of a [`SyncShare`]: an iterator of batch results.
///
/// # Errors
/// As [`Consumer`], and `BufferFull` wherever an async consumer would wait.
pub struct SyncConsumer<I> {
    inner: Consumer<IterBatches<I>>,
}

impl<I: Iterator<Item = BatchResult>> Iterator for SyncConsumer<I> {
    type Item = BatchResult;

    fn next(&mut self) -> Option<BatchResult> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.inner.step(&mut cx, false) {
            Poll::Ready(item) => item,
            // Unreachable: the source never returns `Pending` and waiting
            // turns into `Full`. Say so rather than end silently.
            Poll::Pending => Some(Err(StreamError::BufferFull)),
        }
    }
}

impl<I> fmt::Debug for SyncConsumer<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SyncConsumer").field(&self.inner).finish()
    }
}

/// An iterator of batch results as a [`Source`] that is never pending.
struct IterBatches<I>(I);

// Never pinned structurally: the iterator is only reached through `&mut`.
impl<I> Unpin for IterBatches<I> {}

impl<I: Iterator<Item = BatchResult>> Source for IterBatches<I> {
    fn poll_next_batch(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        Poll::Ready(self.get_mut().0.next())
    }
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Config {
    hwm_chunks: usize,
    hwm_bytes: usize,
    policy: Backpressure,
}

impl Config {
    /// Whether `chunks` chunks and `bytes` bytes reach a high-water mark.
    fn reached(&self, chunks: u64, bytes: u64) -> bool {
        chunks >= self.hwm_chunks as u64 || bytes >= self.hwm_bytes as u64
    }

    /// Whether `chunks` chunks and `bytes` bytes are past a high-water mark.
    fn exceeded(&self, chunks: u64, bytes: u64) -> bool {
        chunks > self.hwm_chunks as u64 || bytes > self.hwm_bytes as u64
    }
}

struct Shared<S> {
    config: Config,
    state: Mutex<State<S>>,
    /// The waiting consumers. Held in a `std` `Arc` because a [`Waker`] is
    /// built from one; it holds no reference back to the state, so a source
    /// that keeps the waker keeps no cycle alive.
    wake: std::sync::Arc<WakeAll>,
    /// Built from `wake`: the only waker the source and the token ever see.
    source_waker: Waker,
}

impl<S> Shared<S> {
    fn new(source: S, options: ShareOptions) -> Arc<Self> {
        let wake = std::sync::Arc::new(WakeAll::new());
        let source_waker = Waker::from(wake.clone());
        let mut state = State {
            source: Some(source),
            status: Status::Open,
            entries: VecDeque::new(),
            base: 0,
            pulled_bytes: 0,
            pulled_chunks: 0,
            cursors: Vec::new(),
            free: Vec::new(),
            attached: 0,
            primaries: 0,
            trailers: None,
            token: options.token,
            token_watched: false,
            space_waiting: false,
            lagged: 0,
        };
        let mut after = After::new();
        if let Some(reason) = state.token.as_ref().and_then(CancelToken::reason) {
            state.cancel(Some(reason), &mut after);
        }
        after.run(&wake);
        Arc::new(Shared {
            config: Config {
                hwm_chunks: policy::clamp_hwm(options.hwm_chunks),
                hwm_bytes: options.hwm_bytes.max(1),
                policy: options.policy,
            },
            state: Mutex::new(state),
            wake,
            source_waker,
        })
    }
}

/// Where the share stands.
enum Status {
    /// The source may yield more.
    Open,
    /// The source ended; the ring holds what is left to read.
    Done,
    /// The source failed; consumers get what they have not read, then this.
    Failed(StreamError),
    /// [`Share::cancel`] or the token: the ring is empty, consumers end.
    Cancelled(Option<StreamError>),
}

/// One buffered batch.
struct Entry {
    batch: Batch,
    /// Bytes pulled before this batch: for [`Source::size_hint`] and the
    /// byte mark.
    start: u64,
    /// Chunks pulled before this batch, for the chunk mark.
    chunks_before: u64,
}

/// A consumer's place in the ring.
struct Cursor {
    /// Absolute index of the next entry it reads.
    pos: u64,
    secondary: bool,
    link: Link,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Counted, holding the ring.
    Attached,
    /// A secondary detached for lagging; its next poll says so.
    Lagged,
    /// Ended, failed or cancelled: holds nothing, no longer counted.
    Released,
}

struct State<S> {
    /// `None` once the source ended, failed or was cancelled.
    source: Option<S>,
    status: Status,
    entries: VecDeque<Entry>,
    /// Absolute index of `entries[0]`.
    base: u64,
    pulled_bytes: u64,
    pulled_chunks: u64,
    /// Cursor slots, indexed by consumer id; a slot is freed when its
    /// consumer drops, so an id is never reused while its consumer lives.
    cursors: Vec<Option<Cursor>>,
    free: Vec<usize>,
    /// Cursors with `Link::Attached`.
    attached: usize,
    /// Attached cursors that are primary.
    primaries: usize,
    trailers: Option<HeaderMap>,
    token: Option<CancelToken>,
    /// Whether the shared waker is registered with the token.
    token_watched: bool,
    /// Whether a consumer waits for the ring to have room.
    space_waiting: bool,
    /// Secondaries detached for lagging, since the start.
    lagged: u64,
}

/// What a consumer's step produced.
enum Step {
    Batch(Batch),
    End,
    Failed(StreamError),
    /// Not terminal: `BufferFull`.
    Full,
    Pending,
}

/// Work to do once the state lock is released: drop the source (its drop
/// may run arbitrary code) and wake waiting consumers.
#[must_use]
struct After<S> {
    source: Option<S>,
    notify: bool,
}

impl<S> After<S> {
    fn new() -> Self {
        After {
            source: None,
            notify: false,
        }
    }

    fn run(self, wake: &WakeAll) {
        drop(self.source);
        if self.notify {
            wake.notify_all();
        }
    }
}

impl<S> State<S> {
    fn tail(&self) -> u64 {
        self.base + self.entries.len() as u64
    }

    fn cursor(&self, id: usize) -> Option<&Cursor> {
        self.cursors.get(id).and_then(Option::as_ref)
    }

    fn cursor_mut(&mut self, id: usize) -> Option<&mut Cursor> {
        self.cursors.get_mut(id).and_then(Option::as_mut)
    }

    fn attached(&self) -> impl Iterator<Item = &Cursor> {
        self.cursors
            .iter()
            .flatten()
            .filter(|c| c.link == Link::Attached)
    }

    /// The slowest attached cursor, among primaries only if `primaries_only`.
    fn slowest(&self, primaries_only: bool) -> Option<u64> {
        self.attached()
            .filter(|c| !(primaries_only && c.secondary))
            .map(|c| c.pos)
            .min()
    }

    /// Chunks and bytes held from absolute entry `pos` to the tail.
    fn held_from(&self, pos: u64) -> (u64, u64) {
        match self.entries.get(pos.saturating_sub(self.base) as usize) {
            Some(e) => (
                self.pulled_chunks - e.chunks_before,
                self.pulled_bytes - e.start,
            ),
            None => (0, 0),
        }
    }

    /// Whether the ring holds a high-water mark for the slowest primary.
    fn is_full(&self, config: Config) -> bool {
        self.slowest(true).is_some_and(|slowest| {
            let (chunks, bytes) = self.held_from(slowest);
            config.reached(chunks, bytes)
        })
    }

    /// The oldest absolute entry from which the ring up to the tail is
    /// within the high-water marks: cursors before it lag. The newest entry
    /// is always within, however large.
    fn floor(&self, config: Config) -> u64 {
        let within = self
            .entries
            .partition_point(|e| {
                config.exceeded(
                    self.pulled_chunks - e.chunks_before,
                    self.pulled_bytes - e.start,
                )
            })
            .min(self.entries.len().saturating_sub(1));
        self.base + within as u64
    }

    /// Drops the entries no attached cursor still needs.
    fn trim(&mut self) {
        let keep_from = self.slowest(false).unwrap_or_else(|| self.tail());
        while self.base < keep_from && self.entries.pop_front().is_some() {
            self.base += 1;
        }
    }

    /// A cursor moved forward or left: trim, and wake the consumers waiting
    /// for room if there is room now.
    fn moved(&mut self, config: Config, after: &mut After<S>) {
        self.trim();
        if self.space_waiting && !self.is_full(config) {
            self.space_waiting = false;
            after.notify = true;
        }
    }

    fn attach(&mut self, secondary: bool) -> usize {
        let link = if matches!(self.status, Status::Cancelled(_)) {
            Link::Released
        } else {
            self.attached += 1;
            if !secondary {
                self.primaries += 1;
            }
            Link::Attached
        };
        let cursor = Cursor {
            pos: self.base,
            secondary,
            link,
        };
        match self.free.pop() {
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

    /// Stops counting an attached cursor; it no longer holds the ring.
    fn detach(&mut self, id: usize, link: Link) {
        let Some(cursor) = self.cursor_mut(id) else {
            return;
        };
        if cursor.link != Link::Attached {
            return;
        }
        cursor.link = link;
        let secondary = cursor.secondary;
        self.attached -= 1;
        if !secondary {
            self.primaries -= 1;
        }
    }

    /// The consumer dropped: free its slot.
    fn release(&mut self, id: usize, config: Config, after: &mut After<S>) {
        self.detach(id, Link::Released);
        if let Some(slot) = self.cursors.get_mut(id)
            && slot.take().is_some()
        {
            self.free.push(id);
        }
        self.moved(config, after);
    }

    fn cancel(&mut self, reason: Option<StreamError>, after: &mut After<S>) {
        if matches!(self.status, Status::Cancelled(_) | Status::Failed(_)) {
            return;
        }
        self.status = Status::Cancelled(reason);
        self.base = self.tail();
        self.entries.clear();
        for cursor in self.cursors.iter_mut().flatten() {
            if cursor.link == Link::Attached {
                cursor.link = Link::Released;
            }
        }
        self.attached = 0;
        self.primaries = 0;
        self.space_waiting = false;
        after.source = self.source.take();
        after.notify = true;
    }

    /// The source ended (`Done`) or failed: release it and wake everyone.
    fn close(&mut self, status: Status, after: &mut After<S>)
    where
        S: Source + Unpin,
    {
        if let Some(mut source) = self.source.take() {
            if matches!(status, Status::Done) {
                self.trailers = Pin::new(&mut source).take_trailers();
            }
            after.source = Some(source);
        }
        self.status = status;
        self.space_waiting = false;
        after.notify = true;
    }

    /// Appends a batch, then enforces the lag bound: an attached cursor
    /// more than a high-water mark behind the tail is detached (a secondary
    /// behind the slowest primary) or moved to the oldest entry kept (a
    /// primary, under `drop-oldest` only: under the other policies a
    /// primary never pulls past a full ring, so it is never more than the
    /// marks plus this batch behind).
    fn append(&mut self, batch: Batch, config: Config) {
        let (len, chunks) = (batch.byte_len() as u64, batch.len() as u64);
        self.entries.push_back(Entry {
            batch,
            start: self.pulled_bytes,
            chunks_before: self.pulled_chunks,
        });
        self.pulled_bytes += len;
        self.pulled_chunks += chunks;
        let drop_oldest = config.policy == Backpressure::DropOldest;
        if !drop_oldest && self.attached == self.primaries {
            // No secondary to detach and no primary to move: under the
            // other policies a primary never pulls past a full ring.
            return;
        }
        let floor = self.floor(config);
        // A secondary level with the slowest primary holds nothing extra.
        let secondary_floor = self.slowest(true).map_or(floor, |p| floor.min(p));
        let mut lagged = Vec::new();
        for (id, slot) in self.cursors.iter_mut().enumerate() {
            if let Some(cursor) = slot
                && cursor.link == Link::Attached
            {
                if cursor.secondary && cursor.pos < secondary_floor {
                    lagged.push(id);
                } else if !cursor.secondary && drop_oldest && cursor.pos < floor {
                    cursor.pos = floor;
                }
            }
        }
        for id in lagged {
            // A lagging cursor is behind the tail, so its consumer is not
            // parked on the share: no wake-up is owed.
            self.detach(id, Link::Lagged);
            self.lagged += 1;
        }
        self.trim();
    }

    /// Reads the entry at `pos` for cursor `id`: moved out if no other
    /// cursor still needs it, shared otherwise ([`Batch::clone_shared`]:
    /// no copy).
    fn read(&mut self, id: usize, pos: u64) -> Batch {
        if let Some(cursor) = self.cursor_mut(id) {
            cursor.pos = pos + 1;
        }
        let index = (pos - self.base) as usize;
        let keep_from = self.slowest(false).unwrap_or_else(|| self.tail());
        if index == 0 && keep_from > self.base {
            let batch = self
                .entries
                .pop_front()
                .map(|e| e.batch)
                .unwrap_or_default();
            self.base += 1;
            self.trim();
            return batch;
        }
        self.entries
            .get_mut(index)
            .map(|e| e.batch.clone_shared())
            .unwrap_or_default()
    }

    /// Registers the shared waker with the token, once. Returns the token's
    /// reason if it has fired.
    fn watch_token(&mut self, source_waker: &Waker) -> Option<StreamError> {
        let token = self.token.as_ref()?;
        if self.token_watched {
            return token.reason();
        }
        self.token_watched = true;
        match token.poll_cancelled(&mut Context::from_waker(source_waker)) {
            Poll::Ready(reason) => Some(reason),
            Poll::Pending => None,
        }
    }

    fn size_hint(&self, id: usize, policy: Backpressure) -> SizeHint
    where
        S: Source,
    {
        let Some(cursor) = self.cursor(id).filter(|c| c.link == Link::Attached) else {
            return SizeHint::with_exact(0);
        };
        let ahead = self
            .entries
            .get(cursor.pos.saturating_sub(self.base) as usize)
            .map_or(0, |e| self.pulled_bytes - e.start);
        let upstream = match (&self.status, &self.source) {
            (Status::Open, Some(source)) => source.size_hint(),
            _ => SizeHint::with_exact(0),
        };
        let mut hint = SizeHint::new();
        if matches!(policy, Backpressure::Strict | Backpressure::Block) {
            hint.set_lower(upstream.lower().saturating_add(ahead));
        }
        if let Some(upper) = upstream.upper() {
            hint.set_upper(upper.saturating_add(ahead));
        }
        hint
    }

    fn at_end(&self, id: usize) -> bool {
        matches!(self.status, Status::Done)
            && self
                .cursor(id)
                .is_some_and(|c| c.link == Link::Attached && c.pos >= self.tail())
    }
}

impl<S: Source + Unpin> State<S> {
    /// One poll of consumer `id`: read an entry, or pull one from the
    /// source, or wait. Runs with the state lock held.
    fn poll_step(
        &mut self,
        id: usize,
        shared: &Shared<S>,
        cx: &mut Context<'_>,
        can_wait: bool,
        after: &mut After<S>,
    ) -> Step {
        let config = shared.config;
        let policy = config.policy;
        loop {
            let Some(cursor) = self.cursor(id) else {
                return Step::End;
            };
            let (pos, secondary) = (cursor.pos, cursor.secondary);
            match cursor.link {
                Link::Attached => {}
                Link::Lagged => {
                    if let Some(cursor) = self.cursor_mut(id) {
                        cursor.link = Link::Released;
                    }
                    return Step::Failed(StreamError::Lagged {
                        hwm_chunks: config.hwm_chunks,
                        hwm_bytes: config.hwm_bytes,
                    });
                }
                Link::Released => {
                    return match &self.status {
                        Status::Cancelled(Some(e)) | Status::Failed(e) => Step::Failed(e.clone()),
                        _ => Step::End,
                    };
                }
            }
            if let Some(token) = &self.token
                && token.is_cancelled()
                && matches!(self.status, Status::Open | Status::Done)
            {
                let reason = token.reason();
                self.cancel(reason, after);
                continue;
            }

            // An entry this consumer has not read yet.
            if pos < self.tail() {
                let batch = self.read(id, pos);
                if !secondary {
                    self.moved(config, after);
                }
                return Step::Batch(batch);
            }

            // At the tail: the end, the error, or a new upstream batch.
            match &self.status {
                Status::Open => {}
                Status::Done => {
                    self.detach(id, Link::Released);
                    self.moved(config, after);
                    return Step::End;
                }
                Status::Failed(e) => {
                    let e = e.clone();
                    self.detach(id, Link::Released);
                    self.moved(config, after);
                    return Step::Failed(e);
                }
                // Cancelling released every cursor; handled above.
                Status::Cancelled(_) => return Step::End,
            }
            let full = self.is_full(config);
            if full && (secondary || policy == Backpressure::Block) {
                if !can_wait {
                    return Step::Full;
                }
                self.space_waiting = true;
                shared.wake.register(id, cx.waker());
                if self.park_on_token(shared, after) {
                    continue;
                }
                return Step::Pending;
            }
            if full && policy == Backpressure::Strict {
                return Step::Full;
            }

            // Pull. Not while the source owes a wake-up: wait for it instead.
            if can_wait && shared.wake.wait_if_armed(id, cx.waker()) {
                if self.park_on_token(shared, after) {
                    continue;
                }
                return Step::Pending;
            }
            let seen = shared.wake.wakes();
            let Some(source) = self.source.as_mut() else {
                return Step::End;
            };
            let polled = Pin::new(&mut *source)
                .poll_next_batch(&mut Context::from_waker(&shared.source_waker));
            match polled {
                Poll::Ready(Some(Ok(batch))) => {
                    let ends = source.is_end_stream();
                    if full {
                        // Only `drop-newest` and `drop-oldest` pull when full.
                        if policy == Backpressure::DropNewest {
                            drop(batch);
                            if ends {
                                self.close(Status::Done, after);
                                continue;
                            }
                            if !can_wait {
                                return Step::Full;
                            }
                            cx.waker().wake_by_ref();
                            return Step::Pending;
                        }
                    }
                    self.append(batch, config);
                    if ends {
                        self.close(Status::Done, after);
                    }
                }
                Poll::Ready(Some(Err(e))) => self.close(Status::Failed(e), after),
                Poll::Ready(None) => self.close(Status::Done, after),
                Poll::Pending => {
                    if !can_wait {
                        return Step::Full;
                    }
                    if !shared.wake.park(id, cx.waker(), seen) {
                        // Woken while being polled: try again soon.
                        cx.waker().wake_by_ref();
                        return Step::Pending;
                    }
                    if self.park_on_token(shared, after) {
                        continue;
                    }
                    return Step::Pending;
                }
            }
        }
    }

    /// Before returning `Pending`: make sure the token wakes us. Returns
    /// true if it has already fired (the share is now cancelled).
    fn park_on_token(&mut self, shared: &Shared<S>, after: &mut After<S>) -> bool {
        match self.watch_token(&shared.source_waker) {
            Some(reason) => {
                self.cancel(Some(reason), after);
                true
            }
            None => false,
        }
    }
}

// ---------------------------------------------------------------------------
// Waking
// ---------------------------------------------------------------------------

/// The waker the source and the token see: wakes every waiting consumer.
struct WakeAll {
    waiters: Mutex<Waiters>,
    /// Number of wake-ups from the source or the token so far; changed
    /// only with `waiters` locked.
    wakes: AtomicUsize,
    /// `waiters.armed`, readable without the lock: a consumer about to
    /// poll the source checks it first, and takes the lock only when the
    /// source may owe a wake-up. A stale `false` costs one needless poll of
    /// the source, never a lost wake-up.
    armed: AtomicBool,
}

struct Waiters {
    /// The source returned `Pending` and has not woken us since: polling it
    /// again would be wasted.
    armed: bool,
    /// Waiting consumers, by id.
    list: Vec<(usize, Waker)>,
}

impl Waiters {
    fn register(&mut self, id: usize, waker: &Waker) {
        match self.list.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
            }
            None => self.list.push((id, waker.clone())),
        }
    }
}

impl WakeAll {
    fn new() -> Self {
        WakeAll {
            waiters: Mutex::new(Waiters {
                armed: false,
                list: Vec::new(),
            }),
            wakes: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
        }
    }

    fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }

    fn register(&self, id: usize, waker: &Waker) {
        lock(&self.waiters).register(id, waker);
    }

    fn unregister(&self, id: usize) {
        lock(&self.waiters).list.retain(|(i, _)| *i != id);
    }

    /// If the source owes a wake-up, registers `waker` for it and returns true.
    fn wait_if_armed(&self, id: usize, waker: &Waker) -> bool {
        if !self.armed.load(Ordering::Acquire) {
            return false;
        }
        let mut waiters = lock(&self.waiters);
        if waiters.armed {
            waiters.register(id, waker);
        }
        waiters.armed
    }

    /// The source returned `Pending`. Unless it woke us since `seen`, arms
    /// and registers `waker`, returning true; returns false if it did wake.
    fn park(&self, id: usize, waker: &Waker, seen: usize) -> bool {
        let mut waiters = lock(&self.waiters);
        if self.wakes.load(Ordering::SeqCst) != seen {
            return false;
        }
        waiters.armed = true;
        self.armed.store(true, Ordering::Release);
        waiters.register(id, waker);
        true
    }

    /// Wakes every waiting consumer.
    fn notify_all(&self) {
        let mut taken = std::mem::take(&mut lock(&self.waiters).list);
        for (_, waker) in taken.drain(..) {
            waker.wake();
        }
        // Keep the allocation for the next waiters.
        let mut waiters = lock(&self.waiters);
        if waiters.list.is_empty() {
            waiters.list = taken;
        }
    }
}

impl Wake for WakeAll {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        {
            let mut waiters = lock(&self.waiters);
            waiters.armed = false;
            self.armed.store(false, Ordering::Release);
            self.wakes.fetch_add(1, Ordering::SeqCst);
        }
        self.notify_all();
    }
}
