//! Test doubles shared by the pull, core and fast tests: a scripted source
//! that counts its polls and drops, and transforms that record every call.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};

use bytes::Bytes;
use weir_stream::stateful::{StatefulTransform, Upstream};
use weir_stream::{Batch, BatchResult, CancelToken, Source, StreamError, Transform};

/// Poll and drop counters of a [`Scripted`] source.
#[derive(Clone, Default)]
pub struct Counters {
    pub polls: Arc<AtomicUsize>,
    pub drops: Arc<AtomicUsize>,
}

impl Counters {
    pub fn polls(&self) -> usize {
        self.polls.load(Ordering::SeqCst)
    }

    pub fn drops(&self) -> usize {
        self.drops.load(Ordering::SeqCst)
    }
}

/// A source of scripted poll results; `Ready(None)` once the script is out.
pub struct Scripted {
    items: VecDeque<Poll<Option<BatchResult>>>,
    counters: Counters,
    /// Whether a `Pending` step wakes the task at once (for tests driven by tokio).
    wake: bool,
    /// Whether the source says `is_end_stream` once its script is out.
    knows_end: bool,
}

impl Scripted {
    pub fn new(items: Vec<Poll<Option<BatchResult>>>) -> (Self, Counters) {
        let counters = Counters::default();
        (
            Scripted {
                items: items.into(),
                counters: counters.clone(),
                wake: false,
                knows_end: false,
            },
            counters,
        )
    }

    /// Pending steps wake the task right away, like a socket that got data.
    pub fn waking(mut self) -> Self {
        self.wake = true;
        self
    }

    /// The source knows its end: `is_end_stream` is true once the script is out.
    pub fn knowing_its_end(mut self) -> Self {
        self.knows_end = true;
        self
    }
}

impl Source for Scripted {
    fn poll_next_batch(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<BatchResult>> {
        self.counters.polls.fetch_add(1, Ordering::SeqCst);
        let item = self.items.pop_front().unwrap_or(Poll::Ready(None));
        if item.is_pending() && self.wake {
            cx.waker().wake_by_ref();
        }
        item
    }

    fn is_end_stream(&self) -> bool {
        self.knows_end && self.items.is_empty()
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.counters.drops.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn data(s: &'static str) -> Poll<Option<BatchResult>> {
    Poll::Ready(Some(Ok(Batch::one(Bytes::from_static(s.as_bytes())))))
}

pub fn fail(e: &StreamError) -> Poll<Option<BatchResult>> {
    Poll::Ready(Some(Err(e.clone())))
}

pub fn pending() -> Poll<Option<BatchResult>> {
    Poll::Pending
}

/// A shared, thread-safe event log.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, event: impl Into<String>) {
        self.0.lock().expect("log").push(event.into());
    }

    pub fn events(&self) -> Vec<String> {
        self.0.lock().expect("log").clone()
    }

    /// How many events end with `suffix`.
    pub fn count(&self, suffix: &str) -> usize {
        self.events().iter().filter(|e| e.ends_with(suffix)).count()
    }

    /// How many events contain `part`.
    pub fn count_containing(&self, part: &str) -> usize {
        self.events().iter().filter(|e| e.contains(part)).count()
    }
}

/// Where a stage keeps the token it was started with.
pub type TokenSlot = Arc<Mutex<Vec<CancelToken>>>;

/// A transform that appends its name to every chunk, emits `<name-end>` on
/// flush, and records every call.
pub struct Recorder {
    pub name: &'static str,
    pub log: Log,
    pub idle_output: Option<&'static str>,
    pub tokens: TokenSlot,
}

pub fn rec(name: &'static str, log: &Log) -> Recorder {
    Recorder {
        name,
        log: log.clone(),
        idle_output: None,
        tokens: TokenSlot::default(),
    }
}

fn suffixed(batch: Batch, name: &str) -> Batch {
    batch
        .into_iter()
        .map(|c| {
            let mut v = c.to_vec();
            v.extend_from_slice(name.as_bytes());
            Bytes::from(v)
        })
        .collect()
}

impl Transform for Recorder {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match input {
            Some(b) => {
                self.log.push(format!("{}:batch", self.name));
                Ok(Some(suffixed(b, self.name)))
            }
            None => {
                self.log.push(format!("{}:flush", self.name));
                Ok(Some(Batch::one(format!("<{}-end>", self.name))))
            }
        }
    }

    fn start(&mut self, token: &CancelToken) {
        self.log.push(format!("{}:start", self.name));
        self.tokens.lock().expect("tokens").push(token.clone());
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        self.log.push(format!("{}:idle", self.name));
        Ok(self.idle_output.take().map(Batch::one))
    }

    fn abort(&mut self, reason: &StreamError) {
        self.log.push(format!("{}:abort:{reason}", self.name));
    }
}

/// A stateful transform that yields one batch per input item: each batch
/// with its name appended, and `<name-end>` for the flush; records calls.
pub struct PerItem {
    pub name: &'static str,
    pub log: Log,
    pub tokens: TokenSlot,
}

pub fn per_item(name: &'static str, log: &Log) -> PerItem {
    PerItem {
        name,
        log: log.clone(),
        tokens: TokenSlot::default(),
    }
}

impl StatefulTransform for PerItem {
    fn poll_transform<S: Source>(
        &mut self,
        cx: &mut Context<'_>,
        input: &mut Upstream<'_, S>,
    ) -> Poll<Option<BatchResult>> {
        self.log.push(format!("{}:poll", self.name));
        Poll::Ready(match ready!(input.poll_next(cx)) {
            Some(Some(batch)) => {
                self.log.push(format!("{}:item", self.name));
                Some(Ok(suffixed(batch, self.name)))
            }
            Some(None) => {
                self.log.push(format!("{}:flush", self.name));
                Some(Ok(Batch::one(format!("<{}-end>", self.name))))
            }
            None => None,
        })
    }

    fn start(&mut self, token: &CancelToken) {
        self.log.push(format!("{}:start", self.name));
        self.tokens.lock().expect("tokens").push(token.clone());
    }

    fn abort(&mut self, reason: &StreamError) {
        self.log.push(format!("{}:abort:{reason}", self.name));
    }
}

/// A stateful transform that hands every batch on as it is and adds nothing.
pub struct Passthrough;

impl StatefulTransform for Passthrough {
    fn poll_transform<S: Source>(
        &mut self,
        cx: &mut Context<'_>,
        input: &mut Upstream<'_, S>,
    ) -> Poll<Option<BatchResult>> {
        loop {
            match ready!(input.poll_next(cx)) {
                Some(Some(batch)) => return Poll::Ready(Some(Ok(batch))),
                Some(None) => continue,
                None => return Poll::Ready(None),
            }
        }
    }
}

/// Polls once with a no-op waker.
pub fn poll<S: Source + Unpin>(s: &mut S) -> Poll<Option<BatchResult>> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(s).poll_next_batch(&mut cx)
}

/// The batch's chunks as one string.
pub fn text(batch: &Batch) -> String {
    batch
        .chunks()
        .iter()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect()
}

/// Polls with a no-op waker until the end, an error or `Pending`; returns
/// each batch's text and the error, if any.
pub fn drain<S: Source + Unpin>(s: &mut S) -> (Vec<String>, Option<StreamError>) {
    let mut out = Vec::new();
    loop {
        match poll(s) {
            Poll::Ready(Some(Ok(b))) => out.push(text(&b)),
            Poll::Ready(Some(Err(e))) => return (out, Some(e)),
            Poll::Ready(None) | Poll::Pending => return (out, None),
        }
    }
}

/// Whether two errors carry the same reason (`Arc` identity, CORE-006).
pub fn same_reason(a: &StreamError, b: &StreamError) -> bool {
    match (a.reason(), b.reason()) {
        (Some(a), Some(b)) => weir_stream::Reason::ptr_eq(a, b),
        _ => false,
    }
}
