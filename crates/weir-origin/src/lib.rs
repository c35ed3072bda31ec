//! Weir's built-in origin server.
//!
//! One server, three uses: the default upstream of `weir serve`, the
//! backend of the proxy's integration tests, and a load-test target. It
//! speaks HTTP/1.1 and cleartext HTTP/2 (prior knowledge) on one listener
//! and serves deterministic, verifiable content from shared memory.
//!
//! # Endpoints
//!
//! | path | what it sends |
//! | --- | --- |
//! | `GET /bytes/{n}` | `n` bytes of the [`pattern`], with `Content-Length`, in 64 KiB frames |
//! | `GET /stream/{n}?chunk={size}&delay_ms={d}` | `n` pattern bytes in `size`-byte frames (default 16384), `d` ms apart (default 0), no `Content-Length` |
//! | `GET /status/{code}` | status `code` (200–599) with a short text body (none for 204, 205, 304) |
//! | `GET /delay/{ms}` | `200 ok` after waiting `ms` (at most 300000) before the head |
//! | `ANY /echo` | JSON report of method, URI, version, headers, body SHA-256 and length, trailers |
//! | `GET /sse?count={c}&interval_ms={i}` | `c` server-sent events (default 10), `i` ms apart (default 100) |
//! | `GET /page?chunks={n}&delay_ms={d}&pad={p}` | an HTML page in `n` frames (default 20), `d` ms apart (default 50), each section padded with `p` filler bytes (default 0), no `Content-Length` |
//! | `GET /trailers` | a chunked text body followed by `x-body-sha256` and `x-trailer-test` trailers |
//! | `GET /abort/{n}` | `n` pattern bytes, then a failed transfer (connection closed or stream reset) |
//! | `GET /response-headers?{name}={value}&…` | `200 ok` with each query pair appended as a response header |
//! | `GET /fragment/{name}?…` | an HTML fragment for SSR composition: `fragments/{name}.html` under the root (or a generated `<div>`), include tags and filler; delayed, chunked, gzipped, failing, or with extra headers on request |
//! | anything else | static files under [`OriginConfig::root`] |
//!
//! Each endpoint's module documents its exact semantics. Every number is
//! checked: malformed or out-of-range input, unknown or repeated query
//! parameters (`/fragment`'s `include` and `header` may repeat) get `400`
//! with a one-line plain-text reason. Endpoints other than `/echo` answer
//! `GET` and `HEAD`, and `405` to other methods; a
//! `HEAD` gets the head a `GET` would get, without body. A path that is
//! neither an endpoint nor a file gets `404`.
//!
//! # Running
//!
//! [`serve`] runs on a listener you bound; [`spawn`] binds, runs the server
//! on a background task and returns an [`OriginHandle`].

mod body;
mod config;
mod endpoints;
mod error;
mod filler;
mod handle;
mod hex;
mod params;
pub mod pattern;
mod reply;
mod router;
mod server;

pub use config::OriginConfig;
pub use error::OriginError;
pub use handle::{OriginHandle, spawn};
pub use server::{DRAIN_TIMEOUT, serve};
