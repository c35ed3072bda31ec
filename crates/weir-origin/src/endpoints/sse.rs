//! `GET /sse?count={c}&interval_ms={i}`: a stream of server-sent events.
//!
//! - `count`: number of events, `0 ..= 1000000`, default 10.
//! - `interval_ms`: pause between two events, in ms, `0 ..= 300000`,
//!   default 100. The first event is sent at once.
//! - Response: `200`, `Content-Type: text/event-stream`,
//!   `Cache-Control: no-cache`, no `Content-Length`. Event `k` (1 to `c`)
//!   is its own data frame `id: k\ndata: event k\n\n`; the body ends after
//!   the last event.

use std::time::Duration;

use http::header::{CACHE_CONTROL, HeaderValue};
use http::{Response, StatusCode};

use super::MAX_WAIT_MS;
use crate::body::{Paced, SseEvents};
use crate::error::OriginError;
use crate::params::{Range, query_values};
use crate::reply::{self, OriginBody};

/// Default `count`.
pub(crate) const DEFAULT_COUNT: u64 = 10;

/// Default `interval_ms`.
pub(crate) const DEFAULT_INTERVAL_MS: u64 = 100;

const COUNT: Range = Range {
    name: "count",
    min: 0,
    max: 1_000_000,
};

const INTERVAL_MS: Range = Range {
    name: "interval_ms",
    min: 0,
    max: MAX_WAIT_MS,
};

/// Builds the response for `/sse?{query}`.
///
/// # Errors
///
/// A parameter error (→ 400) for a bad or out-of-range number or an unknown
/// or repeated query parameter.
pub(crate) fn respond(query: Option<&str>) -> Result<Response<OriginBody>, OriginError> {
    let [count, interval_ms] = query_values(query, &["count", "interval_ms"])?;
    let count = COUNT.parse_or(count, DEFAULT_COUNT)?;
    let interval = Duration::from_millis(INTERVAL_MS.parse_or(interval_ms, DEFAULT_INTERVAL_MS)?);
    let body = Paced::new(SseEvents::new(count), interval);
    let mut response = reply::with_body(
        StatusCode::OK,
        HeaderValue::from_static("text/event-stream"),
        body,
    );
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}
