//! The `compress` stage end to end: bodies through a pull pipeline, then
//! decoded with the codec crates; sync flushes on idle; the end of stream.

mod compress_common;

use bytes::Bytes;
use compress_common::{ALL, StreamDecoder, append, decode, random, text};
use weir_stream::consume::{ConsumeOptions, bytes_sync};
use weir_stream::{Batch, StreamError, Transform, pull_sync_batches};
use weir_transform::coding::Coding;
use weir_transform::compress::{CompressError, CompressSettings, Compressor};

const KB: usize = 1024;
const MB: usize = 1024 * KB;

/// `body` cut into `chunk`-byte chunks, four chunks to a batch (so batches
/// of several chunks are exercised too), through a sync pipeline.
fn compress(coding: Coding, settings: &CompressSettings, body: &[u8], chunk: usize) -> Vec<u8> {
    let body = Bytes::copy_from_slice(body);
    let chunks: Vec<Bytes> = (0..body.len())
        .step_by(chunk.max(1))
        .map(|at| body.slice(at..(at + chunk).min(body.len())))
        .collect();
    let batches: Vec<Result<Batch, StreamError>> = chunks
        .chunks(4)
        .map(|group| Ok(group.iter().cloned().collect::<Batch>()))
        .collect();
    let pipeline = pull_sync_batches(batches, Compressor::new(coding, settings));
    bytes_sync(pipeline, ConsumeOptions::new())
        .unwrap()
        .to_vec()
}

/// `body` through the stage for `coding`, in 1 KB, 16 KB and one-big
/// chunks, decodes to itself.
fn check_round_trip(coding: Coding, body: &[u8], what: &str) {
    let settings = CompressSettings::default();
    for chunk in [KB, 16 * KB, body.len()] {
        let encoded = compress(coding, &settings, body, chunk);
        let decoded = decode(coding, &encoded)
            .unwrap_or_else(|e| panic!("{coding} {what} in {chunk}-byte chunks: {e}"));
        assert!(
            decoded == body,
            "{coding} {what} in {chunk}-byte chunks: decoded {} bytes, want {}",
            decoded.len(),
            body.len()
        );
    }
}

#[test]
fn empty_body_is_a_valid_empty_stream() {
    for coding in ALL {
        let mut c = Compressor::new(coding, &CompressSettings::default());
        let end = c
            .transform(None)
            .unwrap()
            .expect("an empty stream still has framing");
        let encoded: Vec<u8> = end.chunks().iter().flat_map(|c| c.to_vec()).collect();
        assert!(!encoded.is_empty());
        assert_eq!(decode(coding, &encoded).unwrap(), b"", "{coding}");
        check_round_trip(coding, b"", "0 B");
    }
}

#[test]
fn one_byte() {
    for coding in ALL {
        check_round_trip(coding, b"x", "1 B");
    }
}

// One test per coding and size, so the harness runs them in parallel (the
// codecs are slow in a debug build).
macro_rules! sized_round_trips {
    ($($name:ident: $coding:expr, $len:expr;)*) => {$(
        #[test]
        fn $name() {
            check_round_trip($coding, &text($len), "text");
            check_round_trip($coding, &random($len, $len as u64), "random");
        }
    )*};
}

sized_round_trips! {
    gzip_1mb: Coding::Gzip, MB;
    br_1mb: Coding::Brotli, MB;
    zstd_1mb: Coding::Zstd, MB;
    gzip_10mb: Coding::Gzip, 10 * MB;
    br_10mb: Coding::Brotli, 10 * MB;
    zstd_10mb: Coding::Zstd, 10 * MB;
}

#[test]
fn text_actually_shrinks() {
    let body = text(MB);
    for coding in ALL {
        let encoded = compress(coding, &CompressSettings::default(), &body, 16 * KB);
        assert!(
            encoded.len() < body.len() / 3,
            "{coding}: {} bytes from {}",
            encoded.len(),
            body.len()
        );
    }
}

#[test]
fn every_level_round_trips_with_flushes() {
    let body = text(100 * KB);
    let mut runs = Vec::new();
    for level in 0..=9 {
        let settings = CompressSettings {
            gzip_level: level,
            ..CompressSettings::default()
        };
        runs.push((Coding::Gzip, settings));
    }
    for quality in 0..=11 {
        let settings = CompressSettings {
            brotli_quality: quality,
            ..CompressSettings::default()
        };
        runs.push((Coding::Brotli, settings));
    }
    for level in 1..=19 {
        let settings = CompressSettings {
            zstd_level: level,
            ..CompressSettings::default()
        };
        runs.push((Coding::Zstd, settings));
    }
    for (coding, settings) in runs {
        let mut c = Compressor::new(coding, &settings);
        let mut decoder = StreamDecoder::new(coding);
        let mut whole = Vec::new();
        for (i, piece) in body.chunks(7 * KB).enumerate() {
            let mut out = c
                .transform(Some(Batch::one(Bytes::copy_from_slice(piece))))
                .unwrap();
            if i % 3 == 2 {
                let flushed = c.idle().unwrap().expect("a flush after input emits bytes");
                out = Some(match out {
                    Some(mut b) => {
                        b.append(flushed);
                        b
                    }
                    None => flushed,
                });
                for chunk in out.iter().flat_map(Batch::chunks) {
                    whole.extend_from_slice(chunk);
                }
                let so_far = (i + 1) * 7 * KB;
                assert!(
                    decoder.feed(&whole[..]) == &body[..so_far.min(body.len())],
                    "{coding} {settings:?}: flush {i} does not decode to the input so far"
                );
                whole.clear();
                continue;
            }
            for chunk in out.iter().flat_map(Batch::chunks) {
                whole.extend_from_slice(chunk);
            }
        }
        for chunk in c.transform(None).unwrap().iter().flat_map(Batch::chunks) {
            whole.extend_from_slice(chunk);
        }
        assert!(
            decoder.feed(&whole) == &body[..],
            "{coding} {settings:?}: whole body"
        );
    }
}

/// After `idle()`, the bytes emitted so far decode to exactly the input so
/// far: nothing is held back from the client.
#[test]
fn idle_flush_makes_everything_so_far_decodable() {
    let body = text(300 * KB);
    for coding in ALL {
        let mut c = Compressor::new(coding, &CompressSettings::default());
        let mut decoder = StreamDecoder::new(coding);
        let mut fed = 0;
        for piece in body.chunks(5 * KB + 13) {
            let mut emitted = Vec::new();
            if let Some(b) = c
                .transform(Some(Batch::one(Bytes::copy_from_slice(piece))))
                .unwrap()
            {
                b.chunks().iter().for_each(|c| emitted.extend_from_slice(c));
            }
            fed += piece.len();
            let flushed = c.idle().unwrap().expect("input since the last flush");
            assert!(flushed.byte_len() > 0);
            flushed
                .chunks()
                .iter()
                .for_each(|c| emitted.extend_from_slice(c));
            let decoded = decoder.feed(&emitted);
            assert_eq!(decoded.len(), fed, "{coding}");
            assert!(
                decoded == &body[..fed],
                "{coding}: wrong bytes after a flush"
            );
        }
        let mut tail = Vec::new();
        if let Some(b) = c.transform(None).unwrap() {
            b.chunks().iter().for_each(|c| tail.extend_from_slice(c));
        }
        assert!(!tail.is_empty(), "{coding}: the end has framing");
        assert!(decoder.feed(&tail) == &body[..]);
    }
}

#[test]
fn idle_without_new_input_emits_nothing() {
    for coding in ALL {
        let mut c = Compressor::new(coding, &CompressSettings::default());
        assert!(
            c.idle().unwrap().is_none(),
            "{coding}: idle before any input"
        );
        // Zero-length chunks are no input.
        let out = c
            .transform(Some(Batch::from(vec![Bytes::new(), Bytes::new()])))
            .unwrap();
        assert!(out.is_none());
        assert!(
            c.idle().unwrap().is_none(),
            "{coding}: idle after empty chunks"
        );
        c.transform(Some(Batch::one(Bytes::from_static(b"hello, world"))))
            .unwrap();
        assert!(c.idle().unwrap().is_some(), "{coding}: idle after input");
        assert!(
            c.idle().unwrap().is_none(),
            "{coding}: second idle in a row"
        );
        let end = c.transform(None).unwrap();
        assert!(end.is_some());
        assert!(c.idle().unwrap().is_none(), "{coding}: idle after the end");
    }
}

#[test]
fn small_input_is_held_until_a_flush() {
    // The codecs buffer: a short input alone produces no output, which the
    // stage reports as None (the pipeline never sees an empty batch).
    for coding in ALL {
        let mut c = Compressor::new(coding, &CompressSettings::default());
        let out = c
            .transform(Some(Batch::one(Bytes::from_static(b"<p>hi</p>"))))
            .unwrap();
        assert!(
            out.as_ref().is_none_or(|b| b.byte_len() > 0),
            "{coding}: empty batch"
        );
        let end = c.transform(None).unwrap().unwrap();
        let mut all: Vec<u8> = out
            .iter()
            .flat_map(|b| b.chunks().to_vec())
            .flat_map(|c| c.to_vec())
            .collect();
        all.extend(end.chunks().iter().flat_map(|c| c.to_vec()));
        assert_eq!(decode(coding, &all).unwrap(), b"<p>hi</p>");
    }
}

#[test]
fn without_the_final_flush_the_stream_is_incomplete() {
    let body = text(64 * KB);
    for coding in ALL {
        let mut c = Compressor::new(coding, &CompressSettings::default());
        let mut encoded = Vec::new();
        append(
            &mut encoded,
            c.transform(Some(Batch::one(Bytes::from(body.clone()))))
                .unwrap(),
        );
        append(&mut encoded, c.idle().unwrap());
        assert!(
            decode(coding, &encoded).is_err(),
            "{coding}: decodes without its end"
        );
    }
}

#[test]
fn use_after_the_end_is_a_typed_error() {
    for coding in ALL {
        let mut c = Compressor::new(coding, &CompressSettings::default());
        c.transform(None).unwrap();
        let err = c
            .transform(Some(Batch::one(Bytes::from_static(b"late"))))
            .unwrap_err();
        let reason = err.reason().expect("a Failed error");
        assert!(
            matches!(reason.downcast_ref::<CompressError>(), Some(CompressError::Ended { coding: c }) if *c == coding),
            "{coding}: {err:?}"
        );
    }
}

#[test]
fn abort_releases_and_later_calls_fail_cleanly() {
    for coding in ALL {
        let mut c = Compressor::new(coding, &CompressSettings::default());
        c.transform(Some(Batch::one(Bytes::from(text(10 * KB)))))
            .unwrap();
        c.abort(&StreamError::Closed);
        assert!(c.idle().unwrap().is_none());
        assert!(c.transform(None).is_err());
    }
}

#[test]
fn a_wrong_size_hint_is_only_a_hint() {
    for coding in ALL {
        for (hint, len) in [
            (4 * MB as u64, KB),
            (10, 2 * MB),
            (0, 100 * KB),
            (u64::MAX, 10),
        ] {
            let body = text(len);
            let mut c = Compressor::new(coding, &CompressSettings::default()).with_size_hint(hint);
            let mut encoded = Vec::new();
            for piece in body.chunks(16 * KB) {
                append(
                    &mut encoded,
                    c.transform(Some(Batch::one(Bytes::copy_from_slice(piece))))
                        .unwrap(),
                );
            }
            append(&mut encoded, c.transform(None).unwrap());
            assert!(
                decode(coding, &encoded).unwrap() == body,
                "{coding} hint {hint} for {len}"
            );
        }
    }
}

#[test]
fn digests_are_dropped_from_trailers() {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("content-digest", "sha-256=:AAAA:".parse().unwrap());
    trailers.insert("x-checksum-kept", "1".parse().unwrap());
    let mut c = Compressor::new(Coding::Gzip, &CompressSettings::default());
    c.transform(None).unwrap();
    c.trailers(&mut trailers);
    assert!(!trailers.contains_key("content-digest"));
    assert!(trailers.contains_key("x-checksum-kept"));
}

#[test]
fn stage_is_send_and_static() {
    fn assert_send_static<T: Send + 'static>(_: &T) {}
    let c = Compressor::new(Coding::Brotli, &CompressSettings::default());
    assert_send_static(&c);
    assert_eq!(c.coding(), Coding::Brotli);
}
