//! Weir's response transforms, each a [`weir_stream::Transform`] stage of a
//! pull pipeline: it runs only when the client pulls, and flushes what it
//! holds when the upstream goes idle ([`weir_stream::Transform::idle`]).
//!
//! | module | stage | what it does |
//! |---|---|---|
//! | [`coding`] | — | `Accept-Encoding` negotiation (RFC 9110 §12.5.3) |
//! | [`compress`] | `compress` | gzip, brotli, zstd |
//! | [`html`] | `html-rewrite` | lol_html: inject snippets, edit attributes, rewrite URL prefixes |
//! | [`chain`] | — | a route's list of stages, planned per response from its headers |
//! | [`msgpack`] | `msgpack-json` | msgpack values to JSON lines, incremental |
//!
//! `coalesce` is the core's [`weir_stream::Coalesce`]; [`chain`] wires it.
//!
//! The proxy builds a [`chain::ChainSpec`] from a route's config once, and
//! for each response calls [`chain::ChainSpec::plan`], which edits the
//! response headers (`Content-Encoding`, `Content-Length`, `Vary`, `ETag`)
//! and returns the [`chain::ResponseChain`] to run over the body.

pub mod chain;
pub mod coding;
pub mod compress;
mod fields;
pub mod html;
pub mod msgpack;
