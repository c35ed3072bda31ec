//! Drivers for the core under test: drain a weir source, a sync pipeline,
//! a push pair or a share into a tally sink.

use bytes::Bytes;
use weir_stream::push::{PushOptions, Writer, push};
use weir_stream::{Batch, BatchResult, Source, SourceExt};

use super::check::{Sink, Tally};

/// Drains `source` batch by batch into sink `K`; panics on a stream error
/// (no bench source fails). Each batch, and its chunks, drop as consumed.
pub async fn pull_drain<K: Sink, S: Source + Unpin>(mut source: S) -> Tally {
    let mut t = Tally::default();
    while let Some(batch) = source.next_batch().await {
        let batch = batch.expect("a bench pipeline failed");
        for c in batch.chunks() {
            t.add::<K>(c);
        }
    }
    t
}

/// Drains a sync pipeline (any iterator of batch results) into sink `K`,
/// on the calling thread, no runtime.
pub fn pull_sync_drain<K: Sink, I: IntoIterator<Item = BatchResult>>(iter: I) -> Tally {
    let mut t = Tally::default();
    for batch in iter {
        let batch = batch.expect("a bench sync pipeline failed");
        for c in batch.chunks() {
            t.add::<K>(c);
        }
    }
    t
}

/// How a push writer task hands its chunks over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// `write(chunk).await` per chunk.
    Await,
    /// `try_write(chunk)`; when it says the buffer is full, `ready().await`
    /// and try again (the seeds' `writeSync` + `ondrain`).
    TryReady,
    /// `writev(batch).await` with `n` chunks per batch.
    Writev(usize),
}

/// Writes `chunks` into `w` as `mode` says, then ends it. Panics on a
/// write error (no bench reader stops early).
pub async fn write_all(w: Writer, chunks: Vec<Bytes>, mode: WriteMode) {
    match mode {
        WriteMode::Await => {
            for c in chunks {
                w.write(c).await.expect("a bench push write failed");
            }
        }
        WriteMode::TryReady => {
            for c in chunks {
                // `try_write` consumes its chunk even when refused (strict,
                // full): hand it a clone, a reference-count bump.
                while !w.try_write(c.clone()) {
                    let ready = w.ready().expect("the bench push stream closed early");
                    assert!(ready.await.expect("push ready() failed"));
                }
            }
        }
        WriteMode::Writev(n) => {
            let mut it = chunks.into_iter();
            loop {
                let batch: Batch = it.by_ref().take(n).collect();
                if batch.is_empty() {
                    break;
                }
                w.writev(batch).await.expect("a bench push writev failed");
            }
        }
    }
    w.end().expect("ending a bench push stream");
}

/// A push pair with `options`: a writer task ([`write_all`]) and a reader
/// task draining into `K`, both spawned (run inside the 2-worker runtime,
/// like baseline (b)'s source and sink tasks).
pub async fn push_run<K: Sink>(chunks: Vec<Bytes>, options: PushOptions, mode: WriteMode) -> Tally {
    let (w, r) = push(options);
    tokio::spawn(write_all(w, chunks, mode));
    tokio::spawn(pull_drain::<K, _>(r))
        .await
        .expect("push reader task panicked")
}
