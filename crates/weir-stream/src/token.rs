//! [`CancelToken`]: the stream-level abort signal.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::StreamError;
use crate::sync::{Arc, AtomicBool, Mutex, Ordering, lock};

/// A cancellation token carrying a reason (the Rust side of an `AbortSignal`).
///
/// Cloning shares the token. [`CancelToken::cancel`] fires it once; later
/// calls do nothing. Pipelines, push streams, shares and `pipe_to` take a
/// token and fail with [`StreamError::Aborted`] carrying its reason once it
/// fires (PUSH-060, PULL-043, PIPE-003, SHARE-017).
#[derive(Clone, Debug, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Fast path for `is_cancelled`: no lock on the hot path.
    fired: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    reason: Option<StreamError>,
    wakers: Vec<Waker>,
}

impl CancelToken {
    /// A token that has not fired.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Fires the token with `reason` (anything that converts into an error
    /// box, e.g. a `&str`). The reason reaches consumers as
    /// [`StreamError::Aborted`]. Idempotent: only the first reason counts.
    pub fn cancel(&self, reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) {
        self.cancel_with(StreamError::aborted(reason));
    }

    /// Fires the token with an already-built error (kept as is, so its
    /// identity survives, CORE-006). Idempotent.
    pub fn cancel_with(&self, err: StreamError) {
        let wakers = {
            let mut state = lock(&self.inner.state);
            if state.reason.is_some() {
                return;
            }
            state.reason = Some(err);
            self.inner.fired.store(true, Ordering::Release);
            std::mem::take(&mut state.wakers)
        };
        for w in wakers {
            w.wake();
        }
    }

    /// Whether the token has fired.
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.inner.fired.load(Ordering::Acquire)
    }

    /// The error the token fired with, if it has.
    pub fn reason(&self) -> Option<StreamError> {
        if !self.is_cancelled() {
            return None;
        }
        lock(&self.inner.state).reason.clone()
    }

    /// Polls for the token to fire; registers `cx`'s waker until it does.
    pub fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<StreamError> {
        let mut state = lock(&self.inner.state);
        if let Some(reason) = &state.reason {
            return Poll::Ready(reason.clone());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Resolves with the reason once the token fires.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future only stops waiting.
    pub fn cancelled(&self) -> Cancelled<'_> {
        Cancelled { token: self }
    }
}

/// Future returned by [`CancelToken::cancelled`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Cancelled<'a> {
    token: &'a CancelToken,
}

impl Future for Cancelled<'_> {
    type Output = StreamError;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<StreamError> {
        self.token.poll_cancelled(cx)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Reason;

    #[test]
    fn first_reason_wins_and_keeps_its_identity() {
        let t = CancelToken::new();
        assert!(!t.is_cancelled());
        let err = StreamError::aborted("client left");
        t.cancel_with(err.clone());
        t.cancel("second");
        let got = t.reason().expect("fired");
        let (Some(a), Some(b)) = (got.reason(), err.reason()) else {
            panic!("no reason")
        };
        assert!(Reason::ptr_eq(a, b));
    }

    #[test]
    fn poll_wakes_on_cancel() {
        use std::sync::atomic::AtomicUsize;
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let t = CancelToken::new();
        assert!(t.poll_cancelled(&mut cx).is_pending());
        assert!(t.poll_cancelled(&mut cx).is_pending());
        t.cancel("stop");
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(matches!(
            t.poll_cancelled(&mut cx),
            Poll::Ready(StreamError::Aborted(_))
        ));
    }
}
