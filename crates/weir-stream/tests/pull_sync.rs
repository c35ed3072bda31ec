//! The sync pull pipeline (PULL-060): PULL-005/030/031 and the abort rules
//! through `pull_sync`.

mod pull_support;

use bytes::Bytes;
use pull_support::*;
use weir_stream::sync_pull::{PipelineSync, pull_sync, pull_sync_batches};
use weir_stream::{Batch, BatchResult, StreamError, TransformExt, pull, transform_fn};

fn items(parts: &[&'static str]) -> Vec<BatchResult> {
    parts.iter().map(|p| Ok(Batch::one(*p))).collect()
}

fn texts(p: impl Iterator<Item = BatchResult>) -> Vec<String> {
    p.map(|b| text(&b.expect("ok"))).collect()
}

#[test]
fn pull_060_sync_transforms_run_in_order() {
    let log = Log::default();
    let p = pull_sync_batches(items(&["x"]), rec("1", &log).then(rec("2", &log)));
    assert!(log.events().is_empty(), "PULL-001: building calls nothing");
    assert_eq!(texts(p), ["x12", "<1-end>2<2-end>"]);
}

#[test]
fn pull_060_sync_stateful_transform_probe_gives_three_batches() {
    let log = Log::default();
    let p = pull_sync_batches(items(&["a", "b"]), ()).stateful(per_item("s", &log));
    assert_eq!(texts(p), ["as", "bs", "<s-end>"]);
}

#[test]
fn pull_060_sync_every_transform_flushes_once_in_order() {
    let log = Log::default();
    let p = pull_sync_batches(items(&["x"]), rec("1", &log).then(rec("2", &log)))
        .stateful(per_item("s", &log))
        .then(rec("3", &log));
    let out: String = texts(p).concat();
    assert_eq!(out, "x12s3<1-end>2s3<2-end>s3<s-end>3<3-end>");
    assert_eq!(log.count(":flush"), 4);
    assert_eq!(log.count_containing(":abort"), 0);
}

#[test]
fn pull_060_sync_then_fuses_into_the_pipeline() {
    let log = Log::default();
    let p = pull_sync_batches(items(&["x"]), rec("1", &log)).then(rec("2", &log));
    assert_eq!(texts(p).concat(), "x12<1-end>2<2-end>");
}

#[test]
fn pull_060_sync_errors_are_sticky_abort_every_stage_and_keep_identity() {
    let log = Log::default();
    let err = StreamError::failed("bad input");
    let mut p = pull_sync_batches(
        vec![Ok(Batch::one("a")), Err(err.clone()), Ok(Batch::one("b"))],
        rec("1", &log),
    )
    .stateful(per_item("s", &log));
    assert!(matches!(p.next(), Some(Ok(_))));
    for _ in 0..2 {
        let got = p.next().expect("item").expect_err("error");
        assert!(same_reason(&got, &err));
    }
    assert_eq!(log.count(":abort:bad input"), 2, "{:?}", log.events());
    assert_eq!(log.count(":flush"), 0);
}

#[test]
fn pull_060_sync_early_drop_aborts_instead_of_flushing() {
    let log = Log::default();
    let mut p = pull_sync_batches(items(&["a", "b"]), rec("1", &log)).stateful(per_item("s", &log));
    assert!(matches!(p.next(), Some(Ok(_))));
    drop(p);
    assert_eq!(log.count(":flush"), 0);
    assert_eq!(
        log.count_containing(":abort:aborted"),
        2,
        "{:?}",
        log.events()
    );
}

#[test]
fn pull_060_sync_transform_errors_reach_the_iterator_unchanged() {
    let failing = transform_fn(|b: Option<Batch>| match b {
        Some(_) => Err(StreamError::failed("no")),
        None => Ok(None),
    });
    let mut p = pull_sync_batches(items(&["a"]), failing);
    assert_eq!(p.next().expect("item").expect_err("err").to_string(), "no");
    assert!(p.next().is_some(), "sticky");
}

#[test]
fn pull_060_a_pending_stage_fails_a_sync_pipeline_instead_of_hanging() {
    let log = Log::default();
    let (src, counters) = Scripted::new(vec![data("a"), pending()]);
    let mut p = PipelineSync::new(pull(src, rec("1", &log)));
    assert!(matches!(p.next(), Some(Ok(_))));
    let err = p.next().expect("item").expect_err("error");
    assert!(matches!(err, StreamError::Failed(_)));
    assert_eq!(counters.drops(), 1);
    assert_eq!(log.count_containing("1:abort:"), 1, "{:?}", log.events());
}

#[tokio::test]
async fn pull_060_a_sync_pipeline_ignores_the_coop_budget_inside_a_task() {
    // Inside a tokio task, a sync pipeline must never see a coop yield.
    let chunks: Vec<BatchResult> = (0..10_000).map(|_| Ok(Batch::one("x"))).collect();
    let mut n = 0;
    for b in pull_sync_batches(chunks, ().then(())) {
        b.expect("ok");
        n += 1;
    }
    assert_eq!(n, 10_000);
}

#[test]
fn pull_060_pull_sync_over_chunks_batches_them_by_count_and_bytes() {
    // 300 one-byte chunks: 128, 128, 44 (CORE-004); 20 chunks of 8 KiB:
    // no chunk is added once a batch holds 32 KiB, so 4, 4, 4, 4, 4.
    let small: Vec<usize> = pull_sync(vec![Bytes::from_static(b"x"); 300], ())
        .map(|b| b.expect("ok").len())
        .collect();
    assert_eq!(small, [128, 128, 44]);
    let big: Vec<usize> = pull_sync(vec![Bytes::from(vec![1u8; 8192]); 20], ())
        .map(|b| b.expect("ok").len())
        .collect();
    assert_eq!(big, [4, 4, 4, 4, 4]);
}

#[test]
fn pull_060_pull_sync_over_chunks_runs_a_per_chunk_stage_and_its_flush_once() {
    let log = Log::default();
    let upper = weir_stream::map_chunks(|c: Bytes| c.to_ascii_uppercase().into());
    let out: Vec<Bytes> = pull_sync(["ab", "cd"], upper.then(rec("1", &log)))
        .flat_map(|b| b.expect("ok").into_chunks())
        .collect();
    assert_eq!(out, ["AB1", "CD1", "<1-end>"]);
    assert_eq!(log.count_containing("1:flush"), 1, "{:?}", log.events());
}
