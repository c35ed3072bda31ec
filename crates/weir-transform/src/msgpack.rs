//! The `msgpack-json` stage (TODO: helper fills in).

use serde::Deserialize;
use weir_stream::{Batch, StreamError, Transform};

/// `[route.msgpack_json]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MsgpackJsonSettings {
    /// Largest single msgpack value, in bytes.
    pub max_value_bytes: usize,
}

impl Default for MsgpackJsonSettings {
    fn default() -> Self {
        MsgpackJsonSettings {
            max_value_bytes: 16 * 1024 * 1024,
        }
    }
}

/// msgpack values in, one JSON text per line out.
#[derive(Debug)]
pub struct MsgpackToJsonLines {
    _settings: MsgpackJsonSettings,
}

impl MsgpackToJsonLines {
    /// A decoder with `settings`.
    pub fn new(settings: MsgpackJsonSettings) -> Self {
        MsgpackToJsonLines {
            _settings: settings,
        }
    }
}

impl Transform for MsgpackToJsonLines {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input)
    }
}
