//! The `compress` stage (TODO: helper fills in).

use http::{HeaderMap, Method, StatusCode};
use serde::Deserialize;
use weir_stream::{Batch, StreamError, Transform};

use crate::coding::Coding;

/// `[route.compress]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompressSettings {
    /// Server preference order.
    pub codings: Vec<Coding>,
}

impl Default for CompressSettings {
    fn default() -> Self {
        CompressSettings {
            codings: vec![Coding::Zstd, Coding::Brotli, Coding::Gzip],
        }
    }
}

/// Decides whether to compress this response and, when it does, edits its headers.
pub fn plan(
    settings: &CompressSettings,
    method: &Method,
    request_headers: &HeaderMap,
    status: StatusCode,
    response_headers: &mut HeaderMap,
) -> Option<Coding> {
    let _ = (settings, method, request_headers, status, response_headers);
    None
}

/// A streaming compressor.
pub struct Compressor {
    _coding: Coding,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor").finish_non_exhaustive()
    }
}

impl Compressor {
    /// A compressor for `coding` with the levels in `settings`.
    pub fn new(coding: Coding, settings: &CompressSettings) -> Self {
        let _ = settings;
        Compressor { _coding: coding }
    }
}

impl Transform for Compressor {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input)
    }
}
