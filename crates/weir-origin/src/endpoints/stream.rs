//! `GET /stream/{n}?chunk={size}&delay_ms={d}`: `n` bytes of the
//! [pattern](crate::pattern), written in paced chunks.
//!
//! - `n`: decimal, `0 ..= 2^40` (1 TiB).
//! - `chunk`: bytes per data frame, `1 ..= 1048576`, default 16384.
//! - `delay_ms`: pause between two frames, in ms, `0 ..= 300000`, default 0.
//!   There is no pause before the first frame, so the first chunk leaves at
//!   once: tests use this to prove a proxy streams instead of buffering.
//! - Response: `200`, `Content-Type: application/octet-stream`, no
//!   `Content-Length` (chunked on HTTP/1.1); the body is pattern offsets
//!   `0 .. n`.

use std::time::Duration;

use http::{Response, StatusCode};

use super::{MAX_BODY_LEN, MAX_WAIT_MS};
use crate::body::{Length, Paced, PatternChunks};
use crate::error::OriginError;
use crate::params::{Range, query_values};
use crate::pattern::BLOCK_LEN;
use crate::reply::{self, OriginBody};

/// Default `chunk`, in bytes (16 KiB).
pub(crate) const DEFAULT_CHUNK: u64 = 16 * 1024;

const LENGTH: Range = Range {
    name: "length",
    min: 0,
    max: MAX_BODY_LEN,
};

const CHUNK: Range = Range {
    name: "chunk",
    min: 1,
    max: BLOCK_LEN as u64,
};

const DELAY_MS: Range = Range {
    name: "delay_ms",
    min: 0,
    max: MAX_WAIT_MS,
};

/// Builds the response for `/stream/{raw_len}?{query}`.
///
/// # Errors
///
/// A parameter error (→ 400) for a bad or out-of-range number or an unknown
/// or repeated query parameter.
pub(crate) fn respond(
    raw_len: &str,
    query: Option<&str>,
) -> Result<Response<OriginBody>, OriginError> {
    let [chunk, delay_ms] = query_values(query, &["chunk", "delay_ms"])?;
    let len = LENGTH.parse(raw_len)?;
    let chunk = CHUNK.parse_or(chunk, DEFAULT_CHUNK)?;
    let delay = Duration::from_millis(DELAY_MS.parse_or(delay_ms, 0)?);
    // `chunk` is at most BLOCK_LEN, so the fallback is never taken.
    let chunk = usize::try_from(chunk).unwrap_or(BLOCK_LEN);
    let chunks = PatternChunks::new(len, chunk, Length::Hidden);
    Ok(reply::with_body(
        StatusCode::OK,
        reply::OCTET_STREAM,
        Paced::new(chunks, delay),
    ))
}
