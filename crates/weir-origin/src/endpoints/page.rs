//! `GET /page?chunks={n}&delay_ms={d}&pad={p}`: an HTML page streamed in
//! paced data frames, for checking that HTML transforms (rewriting,
//! compression) stream instead of buffering.
//!
//! - `chunks`: number of data frames, `2 ..= 10000`, default 20.
//! - `delay_ms`: pause between two frames, in ms, `0 ..= 300000`,
//!   default 50. There is no pause before the first frame.
//! - `pad`: filler bytes in each section, `0 ..= 1048576`, default 0.
//! - Response: `200`, `Content-Type: text/html; charset=utf-8`,
//!   `Cache-Control: no-store`, no `Content-Length` (chunked on HTTP/1.1).
//!   Frame 1 is the doctype, `<head>` and opening `<body>`; frame `k` for
//!   `2 ..= n - 1` is
//!   `<section id="s{k}"><p>chunk {k} of {n}</p>{filler}</section>\n`;
//!   the last frame is `</body>\n</html>\n`. The filler is `p` bytes of
//!   `lorem ipsum ` repeated and cut to length (ASCII letters and spaces
//!   only, so it needs no escaping).

use std::time::Duration;

use http::header::{CACHE_CONTROL, HeaderValue};
use http::{Response, StatusCode};

use super::MAX_WAIT_MS;
use crate::body::{HtmlPage, Paced};
use crate::error::OriginError;
use crate::params::{Range, query_values};
use crate::reply::{self, OriginBody};

/// Default `chunks`.
pub(crate) const DEFAULT_CHUNKS: u64 = 20;

/// Default `delay_ms`.
pub(crate) const DEFAULT_DELAY_MS: u64 = 50;

/// Largest `pad`, in bytes (1 MiB).
pub(crate) const MAX_PAD: usize = 1 << 20;

const CHUNKS: Range = Range {
    name: "chunks",
    min: 2,
    max: 10_000,
};

const DELAY_MS: Range = Range {
    name: "delay_ms",
    min: 0,
    max: MAX_WAIT_MS,
};

const PAD: Range = Range {
    name: "pad",
    min: 0,
    max: MAX_PAD as u64,
};

/// Builds the response for `/page?{query}`.
///
/// # Errors
///
/// A parameter error (→ 400) for a bad or out-of-range number or an unknown
/// or repeated query parameter.
pub(crate) fn respond(query: Option<&str>) -> Result<Response<OriginBody>, OriginError> {
    let [chunks, delay_ms, pad] = query_values(query, &["chunks", "delay_ms", "pad"])?;
    let chunks = CHUNKS.parse_or(chunks, DEFAULT_CHUNKS)?;
    let delay = Duration::from_millis(DELAY_MS.parse_or(delay_ms, DEFAULT_DELAY_MS)?);
    let pad = PAD.parse_or(pad, 0)?;
    // `pad` is at most MAX_PAD, so the fallback is never taken.
    let pad = usize::try_from(pad).unwrap_or(MAX_PAD);
    let body = Paced::new(HtmlPage::new(chunks, pad), delay);
    let mut response = reply::with_body(StatusCode::OK, reply::TEXT_HTML, body);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
