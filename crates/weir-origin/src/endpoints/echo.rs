//! `ANY /echo`: a JSON report of the request as the origin received it.
//!
//! The request body is read frame by frame, never held whole: only its
//! length and SHA-256 are kept, so uploads of any size work.
//!
//! Response: `200`, `Content-Type: application/json`, body
//!
//! ```json
//! {
//!   "method": "POST",
//!   "uri": "/echo?x=1",
//!   "version": "HTTP/1.1",
//!   "headers": [["host", "127.0.0.1:8080"], ["x-a", "1"], ["x-a", "2"]],
//!   "body_sha256": "e3b0…",
//!   "body_len": 0,
//!   "trailers": [["x-sum", "abc"]]
//! }
//! ```
//!
//! - `uri`: the request target as hyper parsed it (origin form on HTTP/1.1,
//!   absolute form with scheme and authority on HTTP/2).
//! - `version`: `"HTTP/1.0"`, `"HTTP/1.1"` or `"HTTP/2.0"`.
//! - `headers`: every field, names lowercase, each value its own pair.
//!   The order is the one hyper's `HeaderMap` keeps: names in order of first
//!   appearance, and all values of a repeated name together, in received
//!   order (so `a: 1`, `b: 2`, `a: 3` is listed as `a 1`, `a 3`, `b 2`).
//!   Values that are not UTF-8 are decoded lossily. HTTP/2 pseudo-headers
//!   are not fields and are not listed.
//! - `body_sha256`: lowercase hex; `body_len`: bytes.
//! - `trailers`: present only if the request body ended with trailer
//!   fields, in the same shape as `headers`.
//!
//! A request body that fails mid-way (peer reset, bad chunking) gets a 400.

use std::borrow::Cow;

use http::header::HeaderValue;
use http::{HeaderMap, Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::OriginError;
use crate::hex;
use crate::reply::{self, OriginBody};

/// One header or trailer field: `[name, value]`.
type Field<'a> = (&'a str, Cow<'a, str>);

/// The JSON document `/echo` returns.
#[derive(Debug, Serialize)]
struct EchoReport<'a> {
    method: &'a str,
    uri: String,
    version: &'static str,
    headers: Vec<Field<'a>>,
    body_sha256: String,
    body_len: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    trailers: Option<Vec<Field<'a>>>,
}

/// What reading the request body left behind.
struct BodySummary {
    sha256: String,
    len: u64,
    trailers: Option<HeaderMap>,
}

/// Reads the body of `request` and builds the JSON report.
///
/// # Errors
///
/// [`OriginError::RequestBody`] (→ 400) if the request body fails;
/// [`OriginError::EchoEncoding`] (→ 500) if JSON encoding fails.
///
/// # Cancel safety
///
/// Dropping the future (the client went away) drops the request body.
pub(crate) async fn respond(
    request: Request<Incoming>,
) -> Result<Response<OriginBody>, OriginError> {
    let (parts, body) = request.into_parts();
    let summary = summarize(body).await?;
    let report = EchoReport {
        method: parts.method.as_str(),
        uri: parts.uri.to_string(),
        version: version_name(parts.version),
        headers: fields(&parts.headers),
        body_sha256: summary.sha256,
        body_len: summary.len,
        trailers: summary.trailers.as_ref().map(fields),
    };
    let json = serde_json::to_vec(&report).map_err(OriginError::EchoEncoding)?;
    Ok(reply::full(
        StatusCode::OK,
        HeaderValue::from_static("application/json"),
        json,
    ))
}

/// Streams `body`, hashing and counting its data and keeping its trailers.
async fn summarize(mut body: Incoming) -> Result<BodySummary, OriginError> {
    let mut hasher = Sha256::new();
    let mut len = 0_u64;
    let mut trailers: Option<HeaderMap> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(OriginError::RequestBody)?;
        match frame.into_data() {
            Ok(data) => {
                len += data.len() as u64;
                hasher.update(&data);
            }
            Err(frame) => {
                if let Ok(map) = frame.into_trailers() {
                    trailers.get_or_insert_with(HeaderMap::new).extend(map);
                }
            }
        }
    }
    Ok(BodySummary {
        sha256: hex::encode(&hasher.finalize()),
        len,
        trailers,
    })
}

/// Every field of `map` in order, repeated names as separate pairs.
fn fields(map: &HeaderMap) -> Vec<Field<'_>> {
    map.iter()
        .map(|(name, value)| (name.as_str(), String::from_utf8_lossy(value.as_bytes())))
        .collect()
}

/// The protocol name of `version`, as `/echo` reports it.
fn version_name(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "unknown",
    }
}
