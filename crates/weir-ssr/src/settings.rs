//! The settings of a composition, with their defaults in one place.

use std::time::Duration;

use crate::decode::DecodeLimits;
use crate::scan::ScanLimits;

/// How a page is composed. One per route, shared by its pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComposeSettings {
    /// Deadline for a fragment's first body byte (or its end, for an empty
    /// body), from the moment its fetch may start (it has a fetch slot, or
    /// the page waits for it: see [`ComposeSettings::max_parallel`]); a
    /// fragment's `timeout` attribute replaces it. Each fallback source
    /// gets a deadline of its own. Default 2 s.
    pub fragment_timeout: Duration,
    /// Deadline for a whole fragment, from the moment its fetch may start;
    /// a fragment's `total-timeout` attribute replaces it. A fragment still
    /// streaming at its deadline ends where it is. Default 30 s.
    pub fragment_total_timeout: Duration,
    /// The page budget: no fragment of the page runs past this, from the
    /// start of the composition. Default 60 s.
    pub page_timeout: Duration,
    /// Most fragment fetches of one page in flight at once (nested templates
    /// included), besides the primary's and the one the page is waiting
    /// for, which never wait for a slot. A fragment gives its slot back
    /// once its body has been read to its end; free slots go to in-order
    /// fragments first, then `async` ones, each in document order.
    /// Default 32.
    pub max_parallel: usize,
    /// Bytes a fragment that is not yet at the head of the line may hold;
    /// past it, its upstream body is not read until its turn. Default 256 KiB.
    pub fragment_buffer_bytes: usize,
    /// Bytes all the fragments of one page may hold together in their
    /// buffers (nested templates' included); each also holds at most
    /// `fragment_buffer_bytes`, both bounds apply. Past it, a fragment that
    /// holds bytes is not read until the page has taken some
    /// (backpressure, never an error). A fragment whose buffer is empty
    /// may always take one batch, so the one the page is reading never
    /// waits. Default 8 MiB.
    pub page_buffer_bytes: usize,
    /// Send an `async` fragment's content in pieces as it arrives (each a
    /// run of whole top-level nodes), instead of once it is complete.
    /// Default `false`.
    pub async_stream: bool,
    /// Most includes processed in one page, nested ones included; the rest
    /// get their inline fallback markup without a fetch. Default 256.
    pub max_includes: usize,
    /// Deepest nesting of templates (a fragment answered with
    /// `X-Weir-Template: 1` is composed itself): the page is depth 0, its
    /// fragments' templates depth 1, and so on. Default 3.
    pub max_depth: usize,
    /// When a fragment fails after it started streaming, close the elements
    /// it opened and did not close (`</div></ul>`), so the rest of the page
    /// keeps its structure. Default `false`: the fragment just ends there.
    pub close_open_elements: bool,
    /// Template bytes scanned ahead of what the client has taken, so that
    /// the fetches of later fragments start early; an include not yet
    /// handed on counts as its inline fallback markup plus
    /// [`INCLUDE_COST`](crate::compose::INCLUDE_COST) bytes. Default 1 MiB.
    pub template_read_ahead: usize,
    /// The scanner's bounds.
    pub scan: ScanLimits,
    /// Bounds on decoding gzip or deflate fragments and templates: a
    /// fragment past them is cut short as failed (its fallback when it had
    /// not started streaming), a template past them fails the page.
    pub decode: DecodeLimits,
}

impl Default for ComposeSettings {
    fn default() -> Self {
        ComposeSettings {
            fragment_timeout: Duration::from_secs(2),
            fragment_total_timeout: Duration::from_secs(30),
            page_timeout: Duration::from_secs(60),
            max_parallel: 32,
            fragment_buffer_bytes: 256 * 1024,
            page_buffer_bytes: 8 * 1024 * 1024,
            async_stream: false,
            max_includes: 256,
            max_depth: 3,
            close_open_elements: false,
            template_read_ahead: 1024 * 1024,
            scan: ScanLimits::default(),
            decode: DecodeLimits::default(),
        }
    }
}
