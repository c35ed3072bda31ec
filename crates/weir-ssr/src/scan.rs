//! The template scanner: finds include tags as the template streams.
//!
//! PLACEHOLDER: the real scanner replaces this file; the API below is the
//! contract (see the crate docs). This stub passes every byte through as text.

use std::time::Duration;

use bytes::Bytes;

/// Which syntax an include was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// `<fragment src="…">inline fallback</fragment>` (Tailor style).
    Fragment,
    /// `<esi:include src="…" alt="…" onerror="continue"/>` (ESI 1.0 subset).
    Esi,
}

/// One include tag, with its attributes decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Include {
    /// The syntax it was written in.
    pub syntax: Syntax,
    /// `src`, entities decoded; `None` when missing or empty.
    pub src: Option<String>,
    /// `id`.
    pub id: Option<String>,
    /// `primary` (fragment syntax only).
    pub primary: bool,
    /// `async` (fragment syntax only).
    pub is_async: bool,
    /// `timeout`: deadline for the first byte (`"500"` = 500 ms, `"500ms"`, `"2s"`).
    pub timeout: Option<Duration>,
    /// `total-timeout`: deadline for the whole fragment, same forms.
    pub total_timeout: Option<Duration>,
    /// `fallback-src` (fragment syntax).
    pub fallback_src: Option<String>,
    /// `alt` (ESI syntax).
    pub alt: Option<String>,
    /// `onerror="continue"` (ESI syntax).
    pub onerror_continue: bool,
    /// The inline fallback markup between `<fragment …>` and `</fragment>`
    /// (empty for a self-closing tag and for ESI).
    pub fallback: Bytes,
    /// Byte offset of the tag's `<` in the template.
    pub offset: u64,
}

/// Something the scanner tolerated; the template still streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanWarning {
    /// An include tag longer than `max_tag_bytes`: passed through as text.
    TagTooLong {
        /// Offset of its `<`.
        offset: u64,
    },
    /// Inline fallback markup longer than `max_fallback_bytes`: cut there.
    FallbackTooLong {
        /// Offset of the `<fragment`.
        offset: u64,
    },
    /// The template ended inside a construct (`what`: "fragment",
    /// "esi:remove", "esi comment", "comment", "tag").
    Unterminated {
        /// Offset where it started.
        offset: u64,
        /// Which construct.
        what: &'static str,
    },
    /// An attribute value that could not be used (a bad `timeout`, say).
    BadAttribute {
        /// Offset of the tag.
        offset: u64,
        /// The attribute's name.
        name: String,
        /// Its value as written.
        value: String,
    },
}

/// What the scanner emits, in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Template bytes to send as they are.
    Text(Bytes),
    /// An include tag (replaced by the fragment's body).
    Include(Box<Include>),
    /// The first `</body>` end tag comes next (async fragments go here).
    BodyEnd,
    /// Something tolerated.
    Warning(ScanWarning),
}

/// Bounds on what the scanner holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// Longest include tag, `<` to `>`, in bytes. Default 16 KiB.
    pub max_tag_bytes: usize,
    /// Longest inline fallback markup, in bytes. Default 64 KiB.
    pub max_fallback_bytes: usize,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits {
            max_tag_bytes: 16 * 1024,
            max_fallback_bytes: 64 * 1024,
        }
    }
}

/// The streaming scanner. Feed it chunks; it appends pieces to `out`.
#[derive(Debug, Default)]
pub struct Scanner {
    limits: ScanLimits,
    scanned: u64,
}

impl Scanner {
    /// A scanner with `limits`.
    pub fn new(limits: ScanLimits) -> Scanner {
        Scanner { limits, scanned: 0 }
    }

    /// Scans `chunk`, appending what it completes to `out`.
    pub fn feed(&mut self, chunk: Bytes, out: &mut Vec<Piece>) {
        let _ = self.limits;
        self.scanned += chunk.len() as u64;
        if !chunk.is_empty() {
            out.push(Piece::Text(chunk));
        }
    }

    /// The template ended: flushes what is held.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        let _ = out;
    }

    /// Bytes fed so far.
    pub fn bytes_scanned(&self) -> u64 {
        self.scanned
    }
}
