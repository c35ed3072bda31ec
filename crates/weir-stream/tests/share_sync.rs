//! `share_sync()`: the synchronous share, whose consumers are iterators
//! (SHARE-016 and the SHARE items that carry over to sync code).

use bytes::Bytes;
use weir_stream::share::{ConsumerOptions, ShareOptions, share_sync};
use weir_stream::{Backpressure, Batch, BatchResult, Reason, StreamError};

fn items(names: &'static [&'static str]) -> impl Iterator<Item = BatchResult> {
    names
        .iter()
        .map(|s| Ok(Batch::one(Bytes::from_static(s.as_bytes()))))
}

fn text(item: Option<BatchResult>) -> String {
    let batch = item.expect("an item").expect("a batch");
    batch
        .chunks()
        .iter()
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect()
}

fn opts(hwm: usize, policy: Backpressure) -> ShareOptions {
    ShareOptions {
        hwm_chunks: hwm,
        policy,
        ..ShareOptions::default()
    }
}

#[test]
fn share_016_sync_strict_overflow_is_an_error() {
    let sh = share_sync(items(&["c0", "c1", "c2"]), opts(2, Backpressure::Strict));
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    assert_eq!(text(fast.next()), "c0");
    assert_eq!(text(fast.next()), "c1");
    assert!(matches!(fast.next(), Some(Err(StreamError::BufferFull))));
    // Not terminal: once the slow one moves on, the fast one goes on.
    assert_eq!(text(slow.next()), "c0");
    assert_eq!(text(fast.next()), "c2");
    // Full again: even the end needs an upstream pull.
    assert!(matches!(fast.next(), Some(Err(StreamError::BufferFull))));
    drop(slow);
    assert!(fast.next().is_none());
}

#[test]
fn share_016_sync_block_cannot_wait_so_it_errors_too() {
    let sh = share_sync(items(&["c0", "c1", "c2"]), opts(2, Backpressure::Block));
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    assert_eq!(text(fast.next()), "c0");
    assert_eq!(text(fast.next()), "c1");
    assert!(matches!(fast.next(), Some(Err(StreamError::BufferFull))));
    assert_eq!(sh.buffer_size(), 2);
    assert_eq!(text(slow.next()), "c0");
    assert_eq!(text(fast.next()), "c2");
}

#[test]
fn share_016_sync_drop_policies() {
    // drop-oldest: the slow one lost the oldest entries (SHARE-009).
    let sh = share_sync(
        items(&["c0", "c1", "c2", "c3"]),
        opts(2, Backpressure::DropOldest),
    );
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    let got: Vec<String> = fast.by_ref().map(|i| text(Some(i))).collect();
    assert_eq!(got, ["c0", "c1", "c2", "c3"]);
    let got: Vec<String> = slow.by_ref().map(|i| text(Some(i))).collect();
    assert_eq!(got, ["c2", "c3"]);

    // drop-newest: the batch pulled while full is discarded for everyone,
    // and the puller is told (it cannot yield in sync code) (SHARE-010).
    let sh = share_sync(
        items(&["c0", "c1", "c2"]),
        opts(1, Backpressure::DropNewest),
    );
    let mut fast = sh.pull();
    let mut slow = sh.pull();
    assert_eq!(text(fast.next()), "c0");
    assert!(matches!(fast.next(), Some(Err(StreamError::BufferFull))));
    assert_eq!(sh.buffer_size(), 1);
    assert_eq!(text(slow.next()), "c0");
    assert_eq!(text(fast.next()), "c2", "c1 was discarded");
    assert_eq!(text(slow.next()), "c2");
}

#[test]
fn share_016_sync_error_is_shared_and_sticky() {
    let err = StreamError::failed("disk gone");
    let source = items(&["c0"]).chain(std::iter::once(Err(err.clone())));
    let sh = share_sync(source, ShareOptions::default());
    let mut a = sh.pull();
    let mut b = sh.consumer(ConsumerOptions::primary());
    assert_eq!(sh.consumer_count(), 2);
    for c in [&mut a, &mut b] {
        assert_eq!(text(c.next()), "c0");
        for _ in 0..2 {
            let Some(Err(e)) = c.next() else {
                panic!("no error")
            };
            assert!(Reason::ptr_eq(e.reason().unwrap(), err.reason().unwrap()));
        }
    }
    assert_eq!(sh.consumer_count(), 0);
}

#[test]
fn share_016_sync_cancel_ends_consumers() {
    let sh = share_sync(items(&["c0", "c1"]), ShareOptions::default());
    let mut a = sh.pull();
    assert_eq!(text(a.next()), "c0");
    sh.cancel(None);
    assert!(a.next().is_none());
    assert!(a.next().is_none());
}

#[test]
fn share_016_sync_secondary_is_detached_when_it_lags() {
    let sh = share_sync(items(&["c0", "c1", "c2"]), opts(1, Backpressure::Strict));
    let mut client = sh.pull();
    let mut cache = sh.consumer(ConsumerOptions::secondary());
    let got: Vec<String> = client.by_ref().map(|i| text(Some(i))).collect();
    assert_eq!(got, ["c0", "c1", "c2"]);
    assert!(matches!(
        cache.next(),
        Some(Err(StreamError::Lagged { hwm_chunks: 1, .. }))
    ));
}
