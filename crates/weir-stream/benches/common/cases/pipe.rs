//! B06, `pipe_to`: 1000×4K drained into a sink, on the `current_thread`
//! runtime. The core pipe is the same in each row; what changes is the
//! sink's write path (`common/sinks.rs`): a sync-capable sink (the
//! `try_write_batch` fast path), a sink with only the poll path, and an
//! async-only sink with one boxed future per write. `pipe_to_sync` drives a
//! `pull_sync` chain into the sync sink. Against (a) (a one-item stream in
//! a `while let` loop) and (b) (source task → mpsc → sink task).

use weir_stream::pipe::{PipeOptions, pipe_to, pipe_to_sync};
use weir_stream::pull_sync_batches;

use super::{expect, on_current, with_a, with_b};
use crate::common::check::Count;
use crate::common::harness::Case;
use crate::common::input::{Input, shape};
use crate::common::sinks::{BoxedSink, PollSink, SyncSink};
use crate::common::source::{batches, chunks};

/// Pipes `chunks(v, n)` into a fresh sink of type `$sink`; checks the byte
/// count `pipe_to` returns and gives the sink's tally.
macro_rules! pipe_into {
    ($sink:ty, $v:expr, $n:expr) => {{
        let mut sink = <$sink>::default();
        let n = on_current(pipe_to(chunks($v, $n), &mut sink, PipeOptions::new()))
            .expect("a bench pipe failed");
        assert_eq!(n, sink.tally.bytes, "pipe_to's byte count");
        sink.tally
    }};
}

/// B06 `pipe_to` 4K×1000. Target: the sync sink ≥3× the async-only one,
/// ≥10× over (b).
pub fn b06_pipe_to() -> Vec<Case> {
    let input = Input::shared(4 << 10, 1000);
    let mut case = Case::new(
        format!("B06/pipe_to/{}", shape(4 << 10, 1000)),
        input.clone(),
        expect::<Count>(&input, &[]),
        true,
    )
    .core("pipe_to/sync_sink/b1", |v| {
        pipe_into!(SyncSink<Count>, v, 1)
    })
    .core("pipe_to/sync_sink/b128", |v| {
        pipe_into!(SyncSink<Count>, v, 128)
    });
    for n in [1usize, 128] {
        case = case.core(&format!("pipe_to_sync/b{n}"), move |v| {
            let mut sink = SyncSink::<Count>::default();
            pipe_to_sync(
                pull_sync_batches(batches(v, n), ()),
                &mut sink,
                PipeOptions::new(),
            )
            .expect("a bench sync pipe failed");
            sink.tally
        });
    }
    case = case
        .baseline("pipe_to/poll_sink/b1", |v| {
            pipe_into!(PollSink<Count>, v, 1)
        })
        .baseline("pipe_to/boxed_sink/b1", |v| {
            pipe_into!(BoxedSink<Count>, v, 1)
        });
    case = with_a::<Count, _, _>(case, futures_util::stream::iter);
    vec![with_b::<Count>(case, &[])]
}
