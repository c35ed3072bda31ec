//! [`NaiveMsgpackToJsonLines`]: the decoder that restarts on every chunk.

use std::io::ErrorKind;

use rmpv::Value;
use weir_stream::{Batch, StreamError, Transform};

use super::{MsgpackJsonError, MsgpackJsonSettings, decode_error, json, lines, rmpv_depth};

/// msgpack values in, JSON lines out, the naive way: **do not use it in a
/// route**; it is the counter-example measured in `benches/msgpack.rs`.
///
/// On each input chunk it appends the chunk to its buffer and runs the
/// decoder (`rmpv::decode::read_value`) from the start of the buffer; when
/// the decoder runs out of bytes it throws that work away and waits for the
/// next chunk. A value of `n` bytes that arrives in chunks of `c` bytes is
/// thus decoded, in part, about `n / c` times: `n² / 2c` bytes of work
/// instead of `n` (a 7 MB value in 8 KB chunks: about 3 GB). Gathering the
/// chunks first (`weir_stream::coalesce`) divides that by the gathering
/// factor; [`MsgpackToJsonLines`](super::MsgpackToJsonLines) removes it.
/// Streams of many small values barely suffer, since only the value cut by
/// a chunk boundary is retried.
///
/// Output, for well-formed input, is the same as
/// [`MsgpackToJsonLines`](super::MsgpackToJsonLines)'s, and so are the
/// settings and errors, but for two differences: a reserved `0xc1` marker
/// decodes as `null` (what `rmpv` does) instead of failing, and a
/// [`TooDeep`](MsgpackJsonError::TooDeep) error gives the value's offset,
/// not the container's. Depth is checked on each decoded value; `rmpv`'s
/// own depth limit (set one level above `max_depth`) keeps the retries from
/// recursing deeper than that.
pub struct NaiveMsgpackToJsonLines {
    settings: MsgpackJsonSettings,
    /// Input not yet decoded, from a value boundary on.
    pending: Vec<u8>,
    /// Offset of `pending[0]` in the stream.
    start: u64,
}

impl std::fmt::Debug for NaiveMsgpackToJsonLines {
    /// The settings and counts; not the held bytes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NaiveMsgpackToJsonLines")
            .field("settings", &self.settings)
            .field("held_bytes", &self.pending.len())
            .field("offset", &self.start)
            .finish_non_exhaustive()
    }
}

impl NaiveMsgpackToJsonLines {
    /// A decoder with `settings`.
    pub fn new(settings: MsgpackJsonSettings) -> Self {
        NaiveMsgpackToJsonLines {
            settings,
            pending: Vec::new(),
            start: 0,
        }
    }

    /// Decodes every complete value at the start of the buffer.
    fn drain(&mut self, out: &mut Vec<u8>) -> Result<(), MsgpackJsonError> {
        let max_depth = self.settings.max_depth;
        let mut used = 0;
        while used < self.pending.len() {
            let start = self.start + used as u64;
            let mut rd = &self.pending[used..];
            let before = rd.len();
            match rmpv::decode::read_value_with_max_depth(&mut rd, rmpv_depth(max_depth + 1)) {
                Ok(value) => {
                    let len = before - rd.len();
                    if len > self.settings.max_value_bytes {
                        return Err(MsgpackJsonError::ValueTooLarge {
                            limit: self.settings.max_value_bytes,
                            start,
                        });
                    }
                    if depth(&value) > max_depth {
                        return Err(MsgpackJsonError::TooDeep {
                            limit: max_depth,
                            offset: start,
                        });
                    }
                    json::write_line(out, &value, json::output_budget(len))?;
                    used += len;
                }
                // Not enough bytes yet: wait for more, then start over.
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(decode_error(e, max_depth, start)),
            }
        }
        self.pending.drain(..used);
        self.start += used as u64;
        if self.pending.len() > self.settings.max_value_bytes {
            return Err(MsgpackJsonError::ValueTooLarge {
                limit: self.settings.max_value_bytes,
                start: self.start,
            });
        }
        Ok(())
    }
}

/// Containers nested in `value`, itself included.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Map(pairs) => {
            1 + pairs
                .iter()
                .map(|(k, v)| depth(k).max(depth(v)))
                .max()
                .unwrap_or(0)
        }
        _ => 0,
    }
}

impl Transform for NaiveMsgpackToJsonLines {
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
            self.pending.extend_from_slice(chunk);
            self.drain(&mut out).map_err(StreamError::failed)?;
        }
        Ok(lines(out))
    }

    fn abort(&mut self, _reason: &StreamError) {
        self.pending = Vec::new();
    }
}
