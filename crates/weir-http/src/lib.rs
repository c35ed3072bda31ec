//! HTTP field grammar, in one place: every Weir crate that reads a field
//! value parses it here, with the RFC's rules.
//!
//! | module | grammar | RFC |
//! |---|---|---|
//! | [`ows`] | optional whitespace | RFC 9110 §5.6.3 |
//! | [`token`] | `token`, `tchar` | RFC 9110 §5.6.2 |
//! | [`quoted`] | `quoted-string`, `quoted-pair` | RFC 9110 §5.6.4 |
//! | [`list`] | comma-separated lists, `#element` | RFC 9110 §5.6.1 |
//! | [`params`] | `;`-separated parameters | RFC 9110 §5.6.6 |
//! | [`directive`] | `Cache-Control` / `Pragma` directives | RFC 9111 §5.2, §5.4 |
//! | [`delta`] | `delta-seconds` | RFC 9111 §1.2.2 |
//! | [`qvalue`] | weights, `q=0.5` | RFC 9110 §12.4.2 |
//! | [`length`] | `Content-Length` | RFC 9110 §8.6 |
//! | [`media_type`] | `Content-Type` media types | RFC 9110 §8.3.1 |
//! | [`content_coding`] | `Content-Encoding` | RFC 9110 §8.4 |
//! | [`transfer_coding`] | `Transfer-Encoding`, `TE` | RFC 9112 §6.1, RFC 9110 §10.1.4 |
//! | [`etag`] | entity tags and their comparison | RFC 9110 §8.8.3 |
//! | [`host`] | `host[:port]` | RFC 9110 §7.2, RFC 3986 §3.2.2 |
//!
//! Values are read as bytes (`&[u8]`, or anything that is
//! `AsRef<[u8]>`, such as [`http::HeaderValue`] and `&str`): a field may
//! carry `obs-text` (bytes above 0x7F) inside a quoted string, which
//! `HeaderValue::to_str` refuses. Parsing never panics and never trusts
//! the peer: malformed input gives `None`, `false` or an error, as each
//! item documents.
//!
//! This crate depends on `http` only.

pub mod content_coding;
pub mod delta;
pub mod directive;
mod error;
pub mod etag;
pub mod host;
pub mod length;
pub mod list;
pub mod media_type;
pub mod ows;
pub mod params;
pub mod quoted;
pub mod qvalue;
pub mod token;
pub mod transfer_coding;

pub use error::FieldError;
