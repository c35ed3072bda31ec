//! Weir's SSR fragment composition.
//!
//! A *template* is an HTML page with include tags: Tailor-style
//! `<fragment src="…">` and an ESI subset (`<esi:include>`, `<esi:remove>`,
//! `<!--esi … -->`). [`compose()`] scans the template as it streams
//! ([`scan`]), starts fetching every fragment at once through a
//! [`Fetcher`] (the proxy implements it), and returns the page as a
//! [`PageBody`]: a `weir_stream` [`Source`](weir_stream::Source) that
//! emits the template and the fragments in document order, each fragment
//! passed on chunk by chunk as it arrives.
//!
//! | module | job |
//! |---|---|
//! | [`scan`] | find include tags in a streaming template |
//! | [`compose`](mod@compose) | the page: slots in order, the primary's head, `async` fragments |
//! | `asyncs` | `async` fragments: out of order at safe points, or at the async points |
//! | `safe` | safe points: where out-of-order content may go into the page |
//! | `content` | an `async` fragment's content: when whole, where cut, how closed |
//! | `mover` | the markup of `async` fragments: placeholder, template, mover script, page token |
//! | [`script_nonce`] | the CSP nonce for the mover script |
//! | [`out_of_order_charset`] | which page encodings allow out-of-order content |
//! | `fragment` | one fragment's task: sources, deadlines, fallbacks, nested templates |
//! | `permits` | the page's fetch slots (`max_parallel`), in priority order |
//! | `spool` | the byte-bounded buffer between a fragment task and the page, and the page-wide budget |
//! | `decode` | gzip/deflate fragments decoded before splicing |
//! | `close` | the tag tracker: where markup stands, what closes it |
//! | `tokenizer` | the HTML tokenizer's states, byte by byte |
//! | `tree` | the stack of open elements, as far as the tokenizer needs it |
//! | `name` | tag and attribute names, inline |
//! | [`fetch`] | the [`Fetcher`] trait |
//! | [`observe`] | per-fragment events for logs and metrics |
//! | [`settings`] | [`ComposeSettings`] and their defaults |
//!
//! This crate depends on `weir-stream` and its own libraries, never on the
//! proxy or hyper.

mod asyncs;
mod charset;
mod close;
pub mod compose;
mod content;
mod csp;
mod decode;
pub mod fetch;
mod fragment;
mod mover;
mod name;
pub mod observe;
mod permits;
mod safe;
pub mod scan;
pub mod settings;
mod spool;
mod tokenizer;
mod tree;

pub use charset::out_of_order_charset;
pub use compose::{PRIMARY_FIELDS, Page, PageBody, PageContext, compose};
pub use csp::script_nonce;
pub use decode::{DecodeError, DecodeLimits, decode_body};
pub use fetch::{BoxSource, FetchError, FetchFuture, Fetcher, FragmentResponse};
pub use fragment::{X_WEIR_TEMPLATE, is_template};
pub use observe::{Counts, Failure, FragmentEvent, FragmentOutcome, NoObserver, Observer};
pub use scan::{Include, Piece, ScanLimits, ScanWarning, Scanner, Syntax};
pub use settings::ComposeSettings;
