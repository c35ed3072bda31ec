//! `msgpack-json`: truncated input, trailing bytes, the size and depth
//! limits, and the settings' config form.

use bytes::Bytes;
use weir_stream::consume::{ConsumeOptions, bytes_sync};
use weir_stream::{Batch, BatchResult, StreamError, Transform, pull_sync_batches};
use weir_transform::msgpack::{
    MsgpackJsonError, MsgpackJsonSettings, MsgpackToJsonLines, NaiveMsgpackToJsonLines,
};

/// Runs `stage` over `input` cut into chunks of `chunk` bytes, one chunk per batch.
fn run<T: Transform>(stage: T, input: &[u8], chunk: usize) -> Result<Vec<u8>, StreamError> {
    let batches: Vec<BatchResult> = input
        .chunks(chunk.max(1))
        .map(|c| Ok(Batch::one(Bytes::copy_from_slice(c))))
        .collect();
    Ok(bytes_sync(pull_sync_batches(batches, stage), ConsumeOptions::new())?.to_vec())
}

/// Which decoder.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Incremental,
    Naive,
}

const BOTH: [Kind; 2] = [Kind::Incremental, Kind::Naive];

fn decode(
    kind: Kind,
    s: MsgpackJsonSettings,
    input: &[u8],
    chunk: usize,
) -> Result<Vec<u8>, StreamError> {
    match kind {
        Kind::Incremental => run(MsgpackToJsonLines::new(s), input, chunk),
        Kind::Naive => run(NaiveMsgpackToJsonLines::new(s), input, chunk),
    }
}

/// The stage's error inside `err`. Fails if it is not a `Failed` with one.
fn stage_error(err: &StreamError) -> &MsgpackJsonError {
    assert!(matches!(err, StreamError::Failed(_)), "{err:?}");
    err.reason()
        .and_then(|r| r.downcast_ref::<MsgpackJsonError>())
        .unwrap_or_else(|| panic!("not a MsgpackJsonError: {err:?}"))
}

fn defaults() -> MsgpackJsonSettings {
    MsgpackJsonSettings::default()
}

fn limited(max_value_bytes: usize, max_depth: usize) -> MsgpackJsonSettings {
    MsgpackJsonSettings {
        max_value_bytes,
        max_depth,
    }
}

/// `depth` nested one-item arrays around `1`.
fn nested(depth: usize) -> Vec<u8> {
    let mut v = vec![0x91; depth];
    v.push(0x01);
    v
}

#[test]
fn input_that_ends_inside_a_value_fails_at_the_flush() {
    // A complete value (3 bytes), then a value cut off: inside a header,
    // inside a str payload, inside an array, inside a map.
    let cut_offs: [&[u8]; 5] = [
        &[0xcd, 0x01],
        &[0xcb, 0, 0, 0],
        &[0xa5, b'a', b'b'],
        &[0x93, 0x01, 0x02],
        &[0x82, 0xa1, b'k'],
    ];
    for tail in cut_offs {
        let input = [&[0x92, 0xc0][..], &[0xc0], tail].concat();
        for kind in BOTH {
            for chunk in [1, 7, input.len()] {
                let err = decode(kind, defaults(), &input, chunk).unwrap_err();
                match stage_error(&err) {
                    MsgpackJsonError::Truncated { held, start } => {
                        assert_eq!(
                            (*held, *start),
                            (tail.len(), 3),
                            "{kind:?} {tail:02x?} {chunk}"
                        );
                    }
                    other => panic!("{kind:?} {tail:02x?}: {other}"),
                }
            }
        }
    }
}

#[test]
fn the_lines_before_a_truncated_value_are_emitted_before_the_error() {
    let mut t = MsgpackToJsonLines::new(defaults());
    let out = t
        .transform(Some(Batch::one(&[0x07, 0x92, 0x01][..])))
        .unwrap();
    assert_eq!(out.unwrap().chunks(), [Bytes::from_static(b"7\n")]);
    let err = t.transform(None).unwrap_err();
    assert!(matches!(
        stage_error(&err),
        MsgpackJsonError::Truncated { held: 2, start: 1 }
    ));
}

#[test]
fn the_reserved_marker_fails_where_it_is() {
    // [1, 0xc1]: the incremental decoder refuses the marker at byte 2.
    let input = [0x92, 0x01, 0xc1];
    for chunk in [1, 3] {
        let err = decode(Kind::Incremental, defaults(), &input, chunk).unwrap_err();
        assert!(
            matches!(
                stage_error(&err),
                MsgpackJsonError::ReservedMarker { offset: 2 }
            ),
            "{err}"
        );
    }
    // The naive one does what rmpv does: null.
    assert_eq!(
        decode(Kind::Naive, defaults(), &input, 1).unwrap(),
        b"[1,null]\n"
    );
}

#[test]
fn a_value_over_max_value_bytes_fails_and_one_at_the_limit_passes() {
    // 1 (1 byte), then a 100-byte value: a bin 8 of 98 bytes.
    let mut input = vec![0x01, 0xc4, 98];
    input.extend([7; 98]);
    for kind in BOTH {
        for chunk in [1, 7, input.len()] {
            let out = decode(kind, limited(100, 8), &input, chunk).unwrap();
            assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 2);
            let err = decode(kind, limited(99, 8), &input, chunk).unwrap_err();
            match stage_error(&err) {
                MsgpackJsonError::ValueTooLarge { limit, start } => {
                    assert_eq!((*limit, *start), (99, 1), "{kind:?} {chunk}");
                }
                other => panic!("{kind:?} {chunk}: {other}"),
            }
        }
    }
}

#[test]
fn a_container_over_max_value_bytes_fails_before_its_end_arrives() {
    // An array of 1000 ones, cut off after 600 bytes, limit 500: it fails
    // on the chunk that passes the limit, not at the flush.
    let mut input = vec![0xdc, 0x03, 0xe8];
    input.extend([0x01; 600]);
    for kind in BOTH {
        let err = decode(kind, limited(500, 8), &input, 100).unwrap_err();
        assert!(
            matches!(
                stage_error(&err),
                MsgpackJsonError::ValueTooLarge {
                    limit: 500,
                    start: 0
                }
            ),
            "{kind:?}: {err}"
        );
    }
}

#[test]
fn a_declared_payload_over_the_limit_fails_on_its_header() {
    // A bin 32 that announces 4 GiB - 1: refused on its 5-byte header,
    // nothing buffered, no wait for the bytes.
    let mut t = MsgpackToJsonLines::new(defaults());
    let err = t
        .transform(Some(Batch::one(&[0xc6, 0xff, 0xff, 0xff, 0xff][..])))
        .unwrap_err();
    assert!(matches!(
        stage_error(&err),
        MsgpackJsonError::ValueTooLarge {
            limit: 16_777_216,
            start: 0
        }
    ));
}

#[test]
fn nesting_over_max_depth_fails_and_at_max_depth_passes() {
    for kind in BOTH {
        for chunk in [1, 1000] {
            let ok = decode(kind, limited(1 << 20, 5), &nested(5), chunk).unwrap();
            assert_eq!(ok, b"[[[[[1]]]]]\n");
            let err = decode(kind, limited(1 << 20, 5), &nested(6), chunk).unwrap_err();
            match (kind, stage_error(&err)) {
                // The sixth array starts at byte 5.
                (
                    Kind::Incremental,
                    MsgpackJsonError::TooDeep {
                        limit: 5,
                        offset: 5,
                    },
                )
                | (
                    Kind::Naive,
                    MsgpackJsonError::TooDeep {
                        limit: 5,
                        offset: 0,
                    },
                ) => {}
                (_, other) => panic!("{kind:?} {chunk}: {other}"),
            }
        }
    }
    // A map counts like an array; an empty container counts too.
    let input = [0x81, 0xa1, b'k', 0x90];
    let err = decode(Kind::Incremental, limited(1 << 20, 1), &input, 1).unwrap_err();
    assert!(matches!(
        stage_error(&err),
        MsgpackJsonError::TooDeep {
            limit: 1,
            offset: 3
        }
    ));
}

#[test]
fn the_default_depth_is_256_and_fits_a_2_mib_stack() {
    // A tokio worker's default stack; this test runs unoptimized, where
    // each level costs the most.
    let worker = std::thread::Builder::new().stack_size(2 << 20);
    let handle = worker
        .spawn(|| {
            for kind in BOTH {
                let out = decode(kind, defaults(), &nested(256), 4096).unwrap();
                assert_eq!(out.len(), 2 * 256 + 2);
                let err = decode(kind, defaults(), &nested(257), 4096).unwrap_err();
                assert!(matches!(
                    stage_error(&err),
                    MsgpackJsonError::TooDeep { limit: 256, .. }
                ));
                // Far deeper input is refused before anything recurses.
                let err = decode(kind, defaults(), &nested(100_000), 4096).unwrap_err();
                assert!(matches!(
                    stage_error(&err),
                    MsgpackJsonError::TooDeep { limit: 256, .. }
                ));
            }
        })
        .unwrap();
    handle.join().unwrap();
}

#[test]
fn an_error_is_typed_when_the_stage_runs_in_a_pipeline() {
    let batches: Vec<BatchResult> = vec![Ok(Batch::one(&[0x01, 0x92][..]))];
    let mut pipeline = pull_sync_batches(batches, MsgpackToJsonLines::new(defaults()));
    assert_eq!(
        pipeline.next().unwrap().unwrap().chunks(),
        [Bytes::from_static(b"1\n")]
    );
    let err = pipeline.next().unwrap().unwrap_err();
    assert!(matches!(
        stage_error(&err),
        MsgpackJsonError::Truncated { held: 1, start: 1 }
    ));
}

#[test]
fn settings_have_defaults_and_refuse_unknown_fields() {
    let s: MsgpackJsonSettings = serde_json::from_str("{}").unwrap();
    assert_eq!(s, MsgpackJsonSettings::default());
    assert_eq!((s.max_value_bytes, s.max_depth), (16 * 1024 * 1024, 256));
    let s: MsgpackJsonSettings = serde_json::from_str(r#"{"max_depth": 3}"#).unwrap();
    assert_eq!((s.max_value_bytes, s.max_depth), (16 * 1024 * 1024, 3));
    assert!(serde_json::from_str::<MsgpackJsonSettings>(r#"{"max_bytes": 3}"#).is_err());
}
