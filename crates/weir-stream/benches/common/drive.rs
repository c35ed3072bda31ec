//! Drivers for the core under test: drain a weir source into a sink.

use weir_stream::{Source, SourceExt};

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

// TODO(pull_sync, B01/B08): once `weir_stream::sync_pull` lands, add
// `pull_sync_drain<K>(iter)` here: a plain loop over the sync iterator,
// run on the bench thread (no runtime), and a `pull_sync/b1`, `pull_sync/b128`
// contender next to every `pull/*` one in cases.rs (B01, B08).
//
// TODO(consume, B02): once `weir_stream::consume` lands, add drivers for
// `bytes()`, `text()`, `bytes(limit)` and the iteration consumer.
