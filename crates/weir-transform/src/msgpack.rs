//! The `msgpack-json` stage: a body of concatenated msgpack values in, one
//! line of JSON per top-level value out. For looking at msgpack APIs with
//! text tools (`curl … | jq`).
//!
//! [`MsgpackToJsonLines`] is incremental: it keeps its scan position across
//! chunks, so each input byte is scanned once and each value decoded once,
//! whatever the chunk sizes. [`NaiveMsgpackToJsonLines`] is the way not to
//! do it, kept as the counter-example of `benches/msgpack.rs`: it retries
//! the decode from the start of its buffer on every chunk, which is
//! quadratic in the size of a value that spans many chunks.
//!
//! Formats follow the MessagePack specification
//! (<https://github.com/msgpack/msgpack/blob/master/spec.md>).

mod json;
mod naive;
mod scan;

use bytes::Bytes;
use serde::Deserialize;
use weir_stream::{Batch, StreamError, Transform};

pub use naive::NaiveMsgpackToJsonLines;
use scan::{ScanError, Scanner, Step};

/// `[route.msgpack_json]` settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct MsgpackJsonSettings {
    /// Largest single top-level msgpack value, in bytes (its encoded
    /// length). A value is held in memory until it is complete, so this
    /// bounds the stage's buffer. Default 16 MiB.
    pub max_value_bytes: usize,
    /// Most containers (arrays, maps, empty ones included) open at once
    /// within a value; a top-level array is depth 1. Decoding (`rmpv`) and
    /// writing recurse once per level, so this bounds stack use: measured
    /// at about 4 KiB per level in an unoptimized build and under 256 bytes
    /// in a release build. Default 256, which keeps even a debug build well
    /// inside a 2 MiB thread stack (tokio's default for its workers); 512
    /// overflows one in a debug build. It is also the largest value
    /// accepted ([`MAX_DEPTH`]): a deeper limit would let a few bytes of
    /// input overflow a worker's stack, which aborts the whole process.
    #[serde(deserialize_with = "de_max_depth")]
    pub max_depth: usize,
}

/// The largest `max_depth` accepted.
pub const MAX_DEPTH: usize = 256;

fn de_max_depth<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let depth = usize::deserialize(d)?;
    if depth == 0 || depth > MAX_DEPTH {
        return Err(serde::de::Error::custom(format!(
            "{depth} is out of range: expected 1 to {MAX_DEPTH} (deeper nesting would risk a stack overflow)"
        )));
    }
    Ok(depth)
}

impl Default for MsgpackJsonSettings {
    fn default() -> Self {
        MsgpackJsonSettings {
            max_value_bytes: 16 * 1024 * 1024,
            max_depth: 256,
        }
    }
}

/// Why the msgpack stage failed; carried by [`StreamError::Failed`]
/// (`err.reason().and_then(|r| r.downcast_ref::<MsgpackJsonError>())`).
///
/// Offsets count input bytes from the start of the stream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MsgpackJsonError {
    /// A top-level value is longer than `max_value_bytes` (or declares a
    /// str, bin or ext payload that would make it so).
    #[error(
        "msgpack value starting at byte {start} is larger than max_value_bytes ({limit} bytes)"
    )]
    ValueTooLarge {
        /// The limit, in bytes.
        limit: usize,
        /// Offset of the value's first byte.
        start: u64,
    },
    /// A container would nest deeper than `max_depth`.
    #[error("msgpack containers nest deeper than max_depth ({limit}) at byte {offset}")]
    TooDeep {
        /// The limit, in containers.
        limit: usize,
        /// Offset of the first container past the limit (of the value's
        /// first byte, for [`NaiveMsgpackToJsonLines`]).
        offset: u64,
    },
    /// Marker byte `0xc1`, which the specification reserves ("never used").
    #[error("reserved msgpack marker 0xc1 at byte {offset}")]
    ReservedMarker {
        /// Offset of the marker.
        offset: u64,
    },
    /// The input ended inside a value (a truncated body, or trailing bytes
    /// that are not a whole value).
    #[error("input ended inside a msgpack value: {held} bytes from byte {start} on")]
    Truncated {
        /// Bytes of the incomplete value.
        held: usize,
        /// Offset of the value's first byte.
        start: u64,
    },
    /// The msgpack decoder refused a value.
    #[error("msgpack value starting at byte {start} did not decode")]
    Decode {
        /// Offset of the value's first byte.
        start: u64,
        /// What the decoder said.
        #[source]
        source: rmpv::decode::Error,
    },
    /// Writing the JSON text failed.
    #[error("writing JSON")]
    Json(#[from] serde_json::Error),
}

/// The pending buffer's capacity kept after a value that spanned chunks,
/// in bytes; a larger one is released.
const KEEP_CAPACITY: usize = 64 * 1024;

/// msgpack values in, one JSON text per line out; incremental.
///
/// Input: a byte stream of msgpack values, one after another, with nothing
/// between them (chunk boundaries may fall anywhere, inside a header too).
/// Output: for each top-level value, its JSON text (compact, UTF-8)
/// followed by `\n`, as soon as the value's last byte has arrived. All lines
/// completed by one input batch leave as one chunk.
///
/// # Cost
/// A small state machine over the msgpack markers (a stack of the items
/// each open container still expects, a partial header of at most 9 bytes,
/// the count of payload bytes to pass over) is kept across chunks: each
/// input byte is scanned once. A value that ends inside the chunk it started
/// in is decoded straight from that chunk; the bytes of one that spans
/// chunks are copied once into a buffer. Each value is then decoded once
/// (`rmpv`) and written once. So the cost does not depend on chunk sizes.
///
/// # JSON mapping
/// | msgpack | JSON |
/// |---|---|
/// | nil | `null` |
/// | bool | `true`, `false` |
/// | int (any width) | the number, exactly (up to `u64::MAX`, down to `i64::MIN`) |
/// | float 32, float 64 | the shortest text that reads back to the same float of that width; NaN and ±infinity (which JSON lacks) become `null` |
/// | str | a string; bytes that are not UTF-8 become U+FFFD |
/// | bin | an array of the byte values (0–255) |
/// | array | an array |
/// | map | an object, pairs in order, duplicate keys kept; a key that is not a str becomes the string of its own JSON text (`1` → `"1"`, nil → `"null"`, `[1,2]` → `"[1,2]"`), so it may collide with a str key |
/// | ext | `{"ext": type, "data": [bytes]}`; the timestamp type (-1) is not converted |
///
/// # Errors
/// As [`StreamError::Failed`] with a [`MsgpackJsonError`]:
/// [`ValueTooLarge`](MsgpackJsonError::ValueTooLarge),
/// [`TooDeep`](MsgpackJsonError::TooDeep) and
/// [`ReservedMarker`](MsgpackJsonError::ReservedMarker) as soon as the byte
/// that breaks the rule arrives; [`Truncated`](MsgpackJsonError::Truncated)
/// at the flush, when the input ended inside a value.
///
/// # Idle
/// [`Transform::idle`] emits nothing: every complete value has already been
/// written by the call that completed it, and an incomplete value has no
/// JSON to give yet.
pub struct MsgpackToJsonLines {
    settings: MsgpackJsonSettings,
    scan: Scanner,
    /// The bytes, so far, of a value that spans chunks.
    pending: Vec<u8>,
    /// Offset of the next input byte.
    offset: u64,
    /// Offset of the current value's first byte.
    start: u64,
}

impl std::fmt::Debug for MsgpackToJsonLines {
    /// The settings and counts; not the held bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsgpackToJsonLines")
            .field("settings", &self.settings)
            .field("held_bytes", &self.pending.len())
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl MsgpackToJsonLines {
    /// A decoder with `settings`.
    pub fn new(settings: MsgpackJsonSettings) -> Self {
        MsgpackToJsonLines {
            scan: Scanner::new(settings.max_value_bytes, settings.max_depth),
            settings,
            pending: Vec::new(),
            offset: 0,
            start: 0,
        }
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &MsgpackJsonSettings {
        &self.settings
    }

    /// Bytes held back: those of the incomplete value at the end of the
    /// input so far.
    pub fn held_bytes(&self) -> usize {
        self.pending.len()
    }

    fn feed(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<(), MsgpackJsonError> {
        let mut rest = chunk;
        while !rest.is_empty() {
            let step = self.scan.feed(rest).map_err(|e| self.scan_error(e))?;
            match step {
                Step::Complete(n) => {
                    let (value, tail) = rest.split_at(n);
                    if self.pending.is_empty() {
                        decode_line(value, self.settings.max_depth, self.start, out)?;
                    } else {
                        self.pending.extend_from_slice(value);
                        decode_line(&self.pending, self.settings.max_depth, self.start, out)?;
                        if self.pending.capacity() > KEEP_CAPACITY {
                            self.pending = Vec::new();
                        } else {
                            self.pending.clear();
                        }
                    }
                    self.offset += n as u64;
                    self.start = self.offset;
                    rest = tail;
                }
                Step::NeedMore => {
                    self.pending.extend_from_slice(rest);
                    self.offset += rest.len() as u64;
                    break;
                }
            }
        }
        Ok(())
    }

    fn scan_error(&self, e: ScanError) -> MsgpackJsonError {
        match e {
            ScanError::TooLarge => MsgpackJsonError::ValueTooLarge {
                limit: self.settings.max_value_bytes,
                start: self.start,
            },
            ScanError::TooDeep { at } => MsgpackJsonError::TooDeep {
                limit: self.settings.max_depth,
                offset: self.offset + at as u64,
            },
            ScanError::Reserved { at } => MsgpackJsonError::ReservedMarker {
                offset: self.offset + at as u64,
            },
        }
    }
}

/// The `rmpv` depth budget for values of at most `max_depth` containers:
/// `rmpv` spends two units per container and up to three on its innermost
/// item (a str or ext).
fn rmpv_depth(max_depth: usize) -> usize {
    max_depth.saturating_mul(2).saturating_add(3)
}

/// Decodes the one complete value `bytes` (starting at stream offset
/// `start`) and appends its JSON line to `out`.
fn decode_line(
    bytes: &[u8],
    max_depth: usize,
    start: u64,
    out: &mut Vec<u8>,
) -> Result<(), MsgpackJsonError> {
    let mut rd = bytes;
    let value = rmpv::decode::read_value_with_max_depth(&mut rd, rmpv_depth(max_depth))
        .map_err(|source| decode_error(source, max_depth, start))?;
    debug_assert!(
        rd.is_empty(),
        "the scanner and rmpv disagree on a value's end"
    );
    json::write_line(out, &value, json::output_budget(bytes.len()))?;
    Ok(())
}

fn decode_error(source: rmpv::decode::Error, max_depth: usize, start: u64) -> MsgpackJsonError {
    match source {
        rmpv::decode::Error::DepthLimitExceeded => MsgpackJsonError::TooDeep {
            limit: max_depth,
            offset: start,
        },
        source => MsgpackJsonError::Decode { start, source },
    }
}

/// `out` as an output batch, unless empty.
fn lines(out: Vec<u8>) -> Option<Batch> {
    (!out.is_empty()).then(|| Batch::one(Bytes::from(out)))
}

impl Transform for MsgpackToJsonLines {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let Some(batch) = input else {
            if self.pending.is_empty() {
                return Ok(None);
            }
            return Err(StreamError::failed(MsgpackJsonError::Truncated {
                held: self.pending.len(),
                start: self.start,
            }));
        };
        let mut out = Vec::new();
        for chunk in batch.chunks() {
            self.feed(chunk, &mut out).map_err(StreamError::failed)?;
        }
        debug_assert_eq!(self.pending.is_empty(), self.scan.at_boundary());
        Ok(lines(out))
    }

    fn abort(&mut self, _reason: &StreamError) {
        self.pending = Vec::new();
        self.scan.reset();
    }
}
