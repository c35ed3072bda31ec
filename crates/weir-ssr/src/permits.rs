//! The page's fetch slots (`max_parallel`), handed out in priority order.
//!
//! A fragment takes a slot before its fetch starts and gives it back once
//! its body has been read to its end (or it failed, or it turned out to be
//! a nested template, whose own fragments take slots). When a slot frees
//! up, it goes to the waiting fragment with the lowest [`Key`]: in-order
//! fragments before `async` ones, each kind in document order, so that
//! fragments the page reads later, or out of its flow, cannot keep the
//! earlier ones waiting. (The fragment the page is waiting for does not
//! wait for a slot at all: `crate::fragment`.)

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Who asks for a slot: lower keys are served first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    /// `false` for an in-order fragment, `true` for an `async` one.
    pub is_async: bool,
    /// The include's number in the page (document order, nested
    /// templates' after their parents'); unique.
    pub seq: usize,
}

#[derive(Debug)]
struct State {
    free: usize,
    waiting: BTreeMap<Key, Waker>,
}

/// `max_parallel` slots shared by a page's fragments.
#[derive(Debug)]
pub(crate) struct Permits {
    state: Mutex<State>,
}

impl Permits {
    /// `n` slots (at least one).
    pub(crate) fn new(n: usize) -> Arc<Permits> {
        Arc::new(Permits {
            state: Mutex::new(State {
                free: n.max(1),
                waiting: BTreeMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the first waiter if a slot is free.
    fn wake_first(s: &State) {
        if s.free > 0
            && let Some(w) = s.waiting.values().next()
        {
            w.wake_by_ref();
        }
    }

    /// A slot, once one is free and no lower key waits for one.
    ///
    /// # Cancel safety
    /// Dropped before it completes, it holds no slot and no place in line.
    pub(crate) fn acquire(self: &Arc<Permits>, key: Key) -> Acquire {
        Acquire {
            permits: Arc::clone(self),
            key,
            registered: false,
        }
    }

    /// Slots free now.
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.lock().free
    }
}

/// The future of [`Permits::acquire`].
#[derive(Debug)]
pub(crate) struct Acquire {
    permits: Arc<Permits>,
    key: Key,
    registered: bool,
}

impl Future for Acquire {
    type Output = Permit;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit> {
        let this = self.get_mut();
        let mut s = this.permits.lock();
        let first = s.waiting.keys().next().is_none_or(|k| *k >= this.key);
        if s.free > 0 && first {
            s.free -= 1;
            s.waiting.remove(&this.key);
            this.registered = false;
            Permits::wake_first(&s);
            return Poll::Ready(Permit {
                permits: Arc::clone(&this.permits),
            });
        }
        s.waiting.insert(this.key, cx.waker().clone());
        this.registered = true;
        Poll::Pending
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        if self.registered {
            let mut s = self.permits.lock();
            s.waiting.remove(&self.key);
            Permits::wake_first(&s);
        }
    }
}

/// A slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit {
    permits: Arc<Permits>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut s = self.permits.lock();
        s.free += 1;
        Permits::wake_first(&s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(is_async: bool, seq: usize) -> Key {
        Key { is_async, seq }
    }

    #[tokio::test]
    async fn slots_go_to_in_order_fragments_first_then_in_document_order() {
        let p = Permits::new(1);
        let held = p.acquire(key(false, 0)).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for k in [key(true, 1), key(false, 5), key(true, 2), key(false, 3)] {
            let (p, order) = (Arc::clone(&p), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let _slot = p.acquire(k).await;
                order.lock().expect("lock").push(k);
                tokio::task::yield_now().await;
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(
            *order.lock().expect("lock"),
            [key(false, 3), key(false, 5), key(true, 1), key(true, 2)]
        );
        assert_eq!(p.free(), 1);
    }

    #[tokio::test]
    async fn a_dropped_wait_leaves_the_line() {
        let p = Permits::new(1);
        let held = p.acquire(key(false, 0)).await;
        let mut first = Box::pin(p.acquire(key(false, 1)));
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(first.as_mut().poll(&mut cx).is_pending());
        let second = tokio::spawn({
            let p = Arc::clone(&p);
            async move {
                let _slot = p.acquire(key(false, 2)).await;
            }
        });
        tokio::task::yield_now().await;
        drop(first);
        drop(held);
        second.await.expect("the next in line got the slot");
        assert_eq!(p.free(), 1);
    }
}
