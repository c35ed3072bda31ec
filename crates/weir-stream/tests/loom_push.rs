//! Loom models of the push state machine (FAST-004, PUSH-046/050/062).
//!
//! Run with:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=2
//!  cargo test -p weir-stream --test loom_push --release`
#![cfg(loom)]

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use loom::future::block_on;
use loom::thread;
use weir_stream::push::{PushOptions, Readable, push};
use weir_stream::{Backpressure, CancelToken, Source, StreamError};

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

/// Reads until the end or an error; returns the chunks and the error.
fn read_all(r: &mut Readable) -> (Vec<Bytes>, Option<StreamError>) {
    let mut out = Vec::new();
    loop {
        match block_on(poll_fn(|cx| Pin::new(&mut *r).poll_next_batch(cx))) {
            Some(Ok(batch)) => out.extend(batch),
            Some(Err(e)) => return (out, Some(e)),
            None => return (out, None),
        }
    }
}

#[test]
fn loom_strict_writer_and_reader_deliver_every_chunk_once_in_order() {
    loom::model(|| {
        let (w, mut r) = push(PushOptions::new().hwm(1));
        let writer = thread::spawn(move || {
            block_on(w.write(b("a"))).expect("a");
            block_on(w.write(b("b"))).expect("b");
            w.end().expect("end")
        });
        let (got, err) = read_all(&mut r);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got, [b("a"), b("b")]);
        assert_eq!(writer.join().expect("writer"), 2);
    });
}

#[test]
fn loom_block_two_writers_each_chunk_arrives_exactly_once() {
    loom::model(|| {
        let (w1, mut r) = push(PushOptions::new().hwm(1).policy(Backpressure::Block));
        let w2 = w1.clone();
        let t1 = thread::spawn(move || {
            block_on(w1.write(b("1"))).expect("1");
            w1
        });
        let t2 = thread::spawn(move || {
            block_on(w2.write(b("2"))).expect("2");
            w2
        });
        let reader = thread::spawn(move || read_all(&mut r));
        let w1 = t1.join().expect("t1");
        let _w2 = t2.join().expect("t2");
        assert_eq!(w1.end().expect("end"), 2);
        let (mut got, err) = reader.join().expect("reader");
        assert!(err.is_none(), "{err:?}");
        got.sort();
        assert_eq!(got, [b("1"), b("2")]);
    });
}

#[test]
fn loom_a_dropped_parked_write_is_delivered_only_if_it_was_written() {
    loom::model(|| {
        let (w, mut r) = push(PushOptions::new().hwm(1));
        assert!(w.try_write(b("a")));
        let writer = thread::spawn(move || {
            let mut f = w.write(b("b"));
            let first = Pin::new(&mut f).poll(&mut Context::from_waker(Waker::noop()));
            drop(f);
            let total = w.end().expect("end");
            (first, total)
        });
        let (got, err) = read_all(&mut r);
        let (first, total) = writer.join().expect("writer");
        assert!(err.is_none(), "{err:?}");
        // What was counted written is exactly what arrived, never twice.
        let delivered: u64 = got.iter().map(|c| c.len() as u64).sum();
        assert_eq!(delivered, total);
        assert!(got == [b("a")] || got == [b("a"), b("b")], "{got:?}");
        if matches!(first, Poll::Ready(Ok(()))) {
            assert_eq!(got, [b("a"), b("b")]);
        }
    });
}

#[test]
fn loom_dropping_the_readable_wakes_a_parked_write() {
    loom::model(|| {
        let (w, r) = push(PushOptions::new().hwm(1).policy(Backpressure::Block));
        assert!(w.try_write(b("a")));
        let writer = thread::spawn(move || block_on(w.write(b("b"))));
        drop(r);
        let res = writer.join().expect("writer");
        assert!(matches!(res, Err(StreamError::Closed)), "{res:?}");
    });
}

#[test]
fn loom_the_token_wakes_a_parked_reader() {
    loom::model(|| {
        let token = CancelToken::new();
        let (w, mut r) = push(PushOptions::new().token(token.clone()));
        let canceller = thread::spawn(move || token.cancel("stop"));
        let (got, err) = read_all(&mut r);
        canceller.join().expect("canceller");
        assert!(got.is_empty());
        assert!(matches!(err, Some(StreamError::Aborted(_))), "{err:?}");
        assert!(!w.try_write(b("late")));
    });
}
