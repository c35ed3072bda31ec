//! Model-checks the share's locking and waking with loom.
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p weir-stream --test loom_share --release`
#![cfg(loom)]

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use loom::sync::{Arc, Mutex};
use loom::thread;
use weir_stream::share::{ShareOptions, share};
use weir_stream::{Backpressure, Batch, BatchResult, Source, SourceExt, StreamError};

/// Unparks the thread that blocks on a future.
struct Unpark(loom::thread::Thread);

impl Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `f` on the current loom thread, parking while it is pending.
/// (loom's own `block_on` needs its `futures` feature.)
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let waker = Waker::from(std::sync::Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

fn text(batch: Batch) -> String {
    batch
        .chunks()
        .iter()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect()
}

async fn collect<S: Source + Unpin>(source: &mut S) -> Result<Vec<String>, StreamError> {
    let mut out = Vec::new();
    while let Some(batch) = source.next_batch().await {
        out.push(text(batch?));
    }
    Ok(out)
}

/// An in-memory source of one-chunk batches, one per poll.
struct Items(std::slice::Iter<'static, &'static str>);

fn items(names: &'static [&'static str]) -> Items {
    Items(names.iter())
}

impl Source for Items {
    fn poll_next_batch(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let next = self.get_mut().0.next();
        Poll::Ready(next.map(|s| Ok(Batch::one(Bytes::from_static(s.as_bytes())))))
    }
}

fn block(hwm: usize) -> ShareOptions {
    ShareOptions {
        hwm_chunks: hwm,
        policy: Backpressure::Block,
        ..ShareOptions::default()
    }
}

/// Two consumers on two threads; the fast one must wait for the slow one.
#[test]
fn two_consumers_on_two_threads_see_everything_under_block() {
    loom::model(|| {
        let sh = share(items(&["a", "b"]), block(1));
        let mut a = sh.pull();
        let mut b = sh.pull();
        drop(sh);
        let t = thread::spawn(move || block_on(collect(&mut a)));
        let got_b = block_on(collect(&mut b)).unwrap();
        let got_a = t.join().unwrap().unwrap();
        assert_eq!(got_a, ["a", "b"]);
        assert_eq!(got_b, ["a", "b"]);
    });
}

/// The slow consumer leaves while the fast one waits for room: the fast
/// one must be woken and finish.
#[test]
fn consumer_dropped_while_another_waits() {
    loom::model(|| {
        let sh = share(items(&["a", "b"]), block(1));
        let mut fast = sh.pull();
        let mut slow = sh.pull();
        drop(sh);
        let t = thread::spawn(move || {
            let first = block_on(slow.next_batch());
            drop(slow);
            first.map(|r| r.map(text))
        });
        let got = block_on(collect(&mut fast)).unwrap();
        assert_eq!(got, ["a", "b"]);
        let first = t.join().unwrap();
        assert!(matches!(first, Some(Ok(ref s)) if s == "a"), "{first:?}");
    });
}

/// A one-item channel: pending until a producer thread fills it.
struct Chan {
    slot: Arc<Mutex<ChanState>>,
}

#[derive(Default)]
struct ChanState {
    item: Option<&'static str>,
    ended: bool,
    waker: Option<Waker>,
}

impl Source for Chan {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut s = self.slot.lock().unwrap();
        if let Some(item) = s.item.take() {
            return Poll::Ready(Some(Ok(Batch::one(Bytes::from_static(item.as_bytes())))));
        }
        if s.ended {
            return Poll::Ready(None);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// One consumer waits on a pending source while the main thread feeds it
/// and then reads with a second consumer: the source's one wake-up must
/// reach whoever waits, and both must see the item once.
#[test]
fn a_source_wake_reaches_every_waiting_consumer() {
    loom::model(|| {
        let slot = Arc::new(Mutex::new(ChanState::default()));
        let sh = share(Chan { slot: slot.clone() }, ShareOptions::default());
        let mut a = sh.pull();
        let mut b = sh.pull();
        drop(sh);
        let t = thread::spawn(move || block_on(collect(&mut a)));
        // Feed the source while the other thread may be polling it.
        let waker = {
            let mut s = slot.lock().unwrap();
            s.item = Some("x");
            s.ended = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        let got_b = block_on(collect(&mut b)).unwrap();
        let got_a = t.join().unwrap().unwrap();
        assert_eq!(got_a, ["x"]);
        assert_eq!(got_b, ["x"]);
    });
}
