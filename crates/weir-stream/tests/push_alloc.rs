//! PUSH-089 and FAST-005: allocation counts, with a counting global
//! allocator (`allocation-counter`, so this file needs no `unsafe`; it
//! counts the current thread only).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use weir_stream::push::{PushOptions, push};
use weir_stream::{Backpressure, Batch, Source};

/// Allocations (a reallocation counts as one) made by `f` on this thread.
fn allocs<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let mut out = None;
    let info = allocation_counter::measure(|| out = Some(f()));
    let out = out.expect("the measured closure ran");
    (info.count_total as usize, out)
}

fn drain<S: Source + Unpin>(s: &mut S) {
    let mut cx = Context::from_waker(Waker::noop());
    while let Poll::Ready(Some(Ok(_))) = Pin::new(&mut *s).poll_next_batch(&mut cx) {}
}

#[test]
fn push_089_fast_paths_do_not_allocate() {
    writes_with_room_do_not_allocate();
    a_parked_reader_woken_by_a_write_costs_the_write_nothing();
}

fn writes_with_room_do_not_allocate() {
    let chunk = Bytes::from_static(b"0123456789");
    let mut cx = Context::from_waker(Waker::noop());

    // FAST-005: building a pair is one allocation (the shared state).
    let (n, (w, mut r)) = allocs(|| push(PushOptions::new().hwm(4).policy(Backpressure::Strict)));
    assert_eq!(n, 1, "allocations per push pair");

    // Warm up: the slot ring is allocated by the first writes and then reused.
    for _ in 0..4 {
        assert!(w.try_write(chunk.clone()));
    }
    drain(&mut r);

    for round in 0..50 {
        // try_write with room.
        let (n, ok) = allocs(|| w.try_write(chunk.clone()));
        assert!(ok);
        assert_eq!(n, 0, "try_write allocated (round {round})");

        // An async write with room: Ready on the first poll, no allocation.
        let (n, polled) = allocs(|| {
            let mut f = w.write(chunk.clone());
            Pin::new(&mut f).poll(&mut cx)
        });
        assert!(matches!(polled, Poll::Ready(Ok(()))));
        assert_eq!(n, 0, "write allocated (round {round})");

        // A writev of a batch built beforehand: no allocation in the write.
        let batch = Batch::from(vec![chunk.clone(), chunk.clone()]);
        let (n, polled) = allocs(|| {
            let mut f = w.writev(batch);
            Pin::new(&mut f).poll(&mut cx)
        });
        assert!(matches!(polled, Poll::Ready(Ok(()))));
        assert_eq!(n, 0, "writev allocated (round {round})");

        // The Sink-style fast path.
        let batch = Batch::from(vec![chunk.clone()]);
        let (n, res) = allocs(|| w.try_write_batch(batch));
        assert!(res.is_ok());
        assert_eq!(n, 0, "try_write_batch allocated (round {round})");

        // `desired_size` and a ready() check with room are free too.
        let (n, size) = allocs(|| w.desired_size());
        assert_eq!(size, Some(0));
        assert_eq!(n, 0);

        drain(&mut r);
    }
}

fn a_parked_reader_woken_by_a_write_costs_the_write_nothing() {
    let chunk = Bytes::from_static(b"x");
    let (w, mut r) = push(PushOptions::default());
    assert!(w.try_write(chunk.clone()));
    drain(&mut r);
    for _ in 0..20 {
        // The reader parks (its waker is stored), then a write wakes it.
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut r).poll_next_batch(&mut cx).is_pending());
        let (n, ok) = allocs(|| w.try_write(chunk.clone()));
        assert!(ok);
        assert_eq!(n, 0);
        drain(&mut r);
    }
}
