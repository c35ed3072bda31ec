//! A request body that can be sent again: the retry buffer of
//! `[upstream.retry] retry_body_bytes`.
//!
//! The body streams upstream as it arrives (nothing is read ahead of the
//! upstream connection); each batch that goes out is also kept on a
//! [`Tape`], by reference (`Bytes` clones, no copy of the data), while the
//! tape holds at most `cap` bytes. A failed attempt leaves the source on
//! the tape, so [`Tape::rewind`] gives the next attempt a reader that sends
//! what was kept, then goes on reading the client's body where the failed
//! attempt left it. Once more than `cap` bytes went out, the tape lets go
//! of what it kept and cannot be rewound: that request is not retried.
//!
//! Only one reader is live: a rewind retires the previous one, which fails
//! with [`StreamError::Closed`] if its connection still polls it.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use http::HeaderMap;
use http_body::SizeHint;
use weir_stream::{Batch, BatchResult, Source, StreamError};

/// The retry buffer of one request body: the source and what of it went
/// out, up to `cap` bytes.
#[derive(Debug)]
pub struct Tape<S> {
    state: Arc<Mutex<State<S>>>,
}

#[derive(Debug)]
struct State<S> {
    source: S,
    /// The batches read from `source`, in order, while they fit in `cap`.
    kept: Vec<Batch>,
    kept_bytes: u64,
    cap: u64,
    /// More than `cap` bytes went out: `kept` is empty for good.
    overflowed: bool,
    /// The source ended (`Ready(None)`).
    done: bool,
    /// The source failed: the body cannot be sent whole again.
    failed: bool,
    trailers: Option<HeaderMap>,
    /// The whole body's length in bytes, when the source knew it exactly.
    total: Option<u64>,
    /// The live reader's generation.
    live: u64,
}

/// One attempt's reader of a [`Tape`]: a [`Source`] of the whole body.
#[derive(Debug)]
pub struct TapeReader<S> {
    state: Arc<Mutex<State<S>>>,
    generation: u64,
    /// The next kept batch to send.
    next: usize,
    /// Bytes this reader has given out.
    sent: u64,
}

impl<S: Source + Unpin> Tape<S> {
    /// A tape of `source` keeping up to `cap` bytes, and the first reader.
    pub fn new(source: S, cap: u64) -> (Tape<S>, TapeReader<S>) {
        let total = source.size_hint().exact();
        let state = Arc::new(Mutex::new(State {
            source,
            kept: Vec::new(),
            kept_bytes: 0,
            cap,
            overflowed: false,
            done: false,
            failed: false,
            trailers: None,
            total,
            live: 0,
        }));
        let reader = TapeReader::new(&state, 0);
        (Tape { state }, reader)
    }

    /// A reader from the start of the body for another attempt, which
    /// retires the previous reader; `None` when the body cannot be sent
    /// whole again (more than `cap` bytes went out, or the source failed).
    pub fn rewind(&self) -> Option<TapeReader<S>> {
        let mut state = lock(&self.state);
        if state.overflowed || state.failed {
            return None;
        }
        state.live += 1;
        let generation = state.live;
        drop(state);
        Some(TapeReader::new(&self.state, generation))
    }
}

impl<S> TapeReader<S> {
    fn new(state: &Arc<Mutex<State<S>>>, generation: u64) -> Self {
        TapeReader {
            state: Arc::clone(state),
            generation,
            next: 0,
            sent: 0,
        }
    }
}

fn lock<S>(state: &Mutex<State<S>>) -> MutexGuard<'_, State<S>> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Source + Unpin> Source for TapeReader<S> {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = self.get_mut();
        let mut state = lock(&this.state);
        if state.live != this.generation {
            return Poll::Ready(Some(Err(StreamError::Closed)));
        }
        if let Some(batch) = state.kept.get(this.next) {
            let batch = batch.clone();
            this.next += 1;
            this.sent += batch.byte_len() as u64;
            return Poll::Ready(Some(Ok(batch)));
        }
        if state.done {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut state.source).poll_next_batch(cx);
        match polled {
            Poll::Ready(Some(Ok(batch))) => {
                let len = batch.byte_len() as u64;
                if !state.overflowed {
                    if state.kept_bytes + len > state.cap {
                        state.overflowed = true;
                        state.kept = Vec::new();
                    } else {
                        state.kept.push(batch.clone());
                        state.kept_bytes += len;
                        this.next = state.kept.len();
                    }
                }
                this.sent += len;
                Poll::Ready(Some(Ok(batch)))
            }
            Poll::Ready(Some(Err(e))) => {
                state.failed = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                state.done = true;
                state.trailers = Pin::new(&mut state.source).take_trailers();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn size_hint(&self) -> SizeHint {
        let state = lock(&self.state);
        match state.total {
            Some(total) => SizeHint::with_exact(total.saturating_sub(self.sent)),
            None => SizeHint::default(),
        }
    }

    fn is_end_stream(&self) -> bool {
        let state = lock(&self.state);
        state.live == self.generation && state.done && self.next >= state.kept.len()
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        let state = lock(&self.state);
        (state.live == self.generation)
            .then(|| state.trailers.clone())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use bytes::Bytes;
    use weir_stream::SourceExt;

    use super::*;

    /// A source of `chunks` that fails after them when `fail` is set.
    struct Chunks {
        chunks: std::iter::Copied<std::slice::Iter<'static, &'static str>>,
        fail: bool,
    }

    impl Source for Chunks {
        fn poll_next_batch(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<BatchResult>> {
            let this = self.get_mut();
            Poll::Ready(match this.chunks.next() {
                Some(c) => Some(Ok(Batch::from(Bytes::from_static(c.as_bytes())))),
                None if this.fail => Some(Err(StreamError::Closed)),
                None => None,
            })
        }
    }

    fn chunks(chunks: &'static [&'static str]) -> Chunks {
        Chunks {
            chunks: chunks.iter().copied(),
            fail: false,
        }
    }

    async fn next(reader: &mut TapeReader<Chunks>) -> Option<String> {
        let batch = poll_fn(|cx| Pin::new(&mut *reader).poll_next_batch(cx)).await?;
        let batch = batch.ok()?;
        Some(
            batch
                .chunks()
                .iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect(),
        )
    }

    async fn rest(reader: &mut TapeReader<Chunks>) -> String {
        let mut out = String::new();
        while let Some(s) = next(reader).await {
            out.push_str(&s);
        }
        out
    }

    #[tokio::test]
    async fn a_rewound_reader_sends_what_went_out_then_the_rest() {
        let (tape, mut first) = Tape::new(chunks(&["ab", "cd", "ef"]), 64);
        assert_eq!(next(&mut first).await.as_deref(), Some("ab"));
        let mut second = tape.rewind().expect("under the cap");
        assert_eq!(rest(&mut second).await, "abcdef");
        // The retired reader fails rather than sending into a dead attempt.
        let retired = first.next_batch().await;
        assert!(matches!(retired, Some(Err(StreamError::Closed))));
        // A third attempt after the body ended sends it whole from the tape.
        let mut third = tape.rewind().expect("under the cap");
        assert!(!third.is_end_stream());
        assert_eq!(rest(&mut third).await, "abcdef");
        assert!(third.is_end_stream());
    }

    #[tokio::test]
    async fn a_body_over_the_cap_cannot_be_rewound() {
        let (tape, mut first) = Tape::new(chunks(&["abcd", "efgh"]), 6);
        assert_eq!(next(&mut first).await.as_deref(), Some("abcd"));
        assert!(tape.rewind().is_some(), "4 bytes fit in 6");
        let mut second = tape.rewind().expect("still 4 bytes");
        assert_eq!(rest(&mut second).await, "abcdefgh");
        assert!(tape.rewind().is_none(), "8 bytes went out, 6 kept at most");
    }

    #[tokio::test]
    async fn a_failed_source_cannot_be_rewound() {
        let source = Chunks {
            chunks: ["ab"].iter().copied(),
            fail: true,
        };
        let (tape, mut first) = Tape::new(source, 64);
        assert_eq!(next(&mut first).await.as_deref(), Some("ab"));
        assert!(next(&mut first).await.is_none(), "the error ends the body");
        assert!(tape.rewind().is_none());
    }
}
