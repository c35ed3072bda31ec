//! The origin's endpoints, one module each.
//!
//! Every endpoint validates its numbers before doing anything; bad input is
//! an [`OriginError`](crate::OriginError) that the router turns into a
//! `400 Bad Request` with a one-line plain-text reason.

pub(crate) mod abort;
pub(crate) mod bytes;
pub(crate) mod delay;
pub(crate) mod echo;
pub(crate) mod file_cache;
pub(crate) mod files;
pub(crate) mod fragment;
pub(crate) mod page;
pub(crate) mod response_headers;
pub(crate) mod sse;
pub(crate) mod status;
pub(crate) mod stream;
pub(crate) mod trailers;

/// Largest body length `/bytes`, `/stream` and `/abort` accept: 1 TiB.
pub(crate) const MAX_BODY_LEN: u64 = 1 << 40;

/// Largest wait, in ms, any endpoint accepts: 300 000 ms (5 minutes).
pub(crate) const MAX_WAIT_MS: u64 = 300_000;
