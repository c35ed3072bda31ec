//! The markup of `async` fragments: the placeholder left in the slot, the
//! `<template>` that carries the content, and the inline script that moves
//! the content into place.
//!
//! Every id carries the page's [`Token`] `T`, 16 hex digits drawn anew for
//! each page, so that markup of the page's own (a fragment showing user
//! content, say) cannot name Weir's elements in advance and take their
//! place (DOM clobbering: `getElementById` returns the first element
//! with the id).
//!
//! Placeholder `N` is `<template id="weir-slot-T-N"></template>`; when the
//! include has inline fallback markup, the markup follows it, then
//! `<template id="weir-end-T-N"></template>`, so that a browser without
//! scripts shows the fallback. The content goes out in one
//! `<template id="weir-async-T-N">` or, with `async_stream`, in pieces:
//! `weir-async-T-N`, then `weir-async-T-N-1`, `weir-async-T-N-2`, …
//!
//! A mover script names the pieces sent since the previous one. It runs
//! once its pieces and the placeholder are both in the document: the first
//! removes the fallback and the end marker, each inserts its pieces'
//! content before the slot marker, the last removes the slot marker, and
//! each removes its own `<script>` element. After the last, the document
//! holds the content where the include stood and nothing of Weir's. A
//! page whose `Content-Security-Policy` gives a nonce (`crate::csp`) gets
//! it on every mover script.

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

/// A page's token: 16 lowercase hex digits (64 bits) that no one can
/// guess before the page is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token([u8; 16]);

impl Token {
    /// A new token: SipHash, keyed with the process's random keys
    /// (`RandomState`, a new key per call), of a page counter and the
    /// clock.
    pub(crate) fn new() -> Token {
        static PAGES: AtomicU64 = AtomicU64::new(0);
        let mut h = RandomState::new().build_hasher();
        h.write_u64(PAGES.fetch_add(1, Ordering::Relaxed));
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        h.write_u128(nanos);
        let n = h.finish();
        let mut out = [0u8; 16];
        for (k, b) in out.iter_mut().enumerate() {
            *b = b"0123456789abcdef"[((n >> (60 - 4 * k)) & 0xf) as usize];
        }
        Token(out)
    }

    /// The hex digits.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or("0")
    }
}

/// `<template id="weir-slot-T-N"></template>`, the fallback markup and the
/// end marker (only when there is fallback markup).
pub(crate) fn placeholder(t: Token, id: usize, fallback: &[u8]) -> Bytes {
    let t = t.as_str();
    let mut out = format!("<template id=\"weir-slot-{t}-{id}\"></template>").into_bytes();
    if !fallback.is_empty() {
        out.extend_from_slice(fallback);
        out.extend_from_slice(format!("<template id=\"weir-end-{t}-{id}\"></template>").as_bytes());
    }
    Bytes::from(out)
}

/// The id of piece `k` of async fragment `id`.
fn piece_id(t: Token, id: usize, k: usize) -> String {
    let t = t.as_str();
    if k == 0 {
        format!("weir-async-{t}-{id}")
    } else {
        format!("weir-async-{t}-{id}-{k}")
    }
}

/// `<template id="…">` opening piece `k` of async fragment `id`.
pub(crate) fn piece_open(t: Token, id: usize, k: usize) -> Bytes {
    Bytes::from(format!("<template id=\"{}\">", piece_id(t, id, k)))
}

/// What closes a piece.
pub(crate) const PIECE_CLOSE: Bytes = Bytes::from_static(b"</template>");

/// The script that moves pieces `from..to` of async fragment `id` into
/// its slot; `last`: no piece follows them. `nonce`: base64 only (checked
/// by `crate::csp`), so it needs no escaping.
pub(crate) fn script(
    t: Token,
    id: usize,
    pieces: std::ops::Range<usize>,
    last: bool,
    nonce: Option<&str>,
) -> Bytes {
    let mut ids = String::new();
    for k in pieces {
        if !ids.is_empty() {
            ids.push(',');
        }
        let _ = write!(ids, "\"{}\"", piece_id(t, id, k));
    }
    let t = t.as_str();
    let nonce = nonce.map_or(String::new(), |n| format!(" nonce=\"{n}\""));
    let done = if last { "a.remove()" } else { "" };
    Bytes::from(format!(
        "<script{nonce}>(function(){{var d=document,s=d.currentScript,\
         a=d.getElementById(\"weir-slot-{t}-{id}\"),e=d.getElementById(\"weir-end-{t}-{id}\");\
         if(a){{if(e){{if(e.parentNode===a.parentNode)while(a.nextSibling&&a.nextSibling!==e)\
         a.nextSibling.remove();e.remove()}}[{ids}].forEach(function(i){{var t=d.getElementById(i);\
         if(t){{a.before(t.content);t.remove()}}}});{done}}}if(s)s.remove()}})()</script>"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Token = Token(*b"0123456789abcdef");

    #[test]
    fn placeholders_keep_fallback_markup_between_markers() {
        assert_eq!(
            &placeholder(T, 3, b"")[..],
            b"<template id=\"weir-slot-0123456789abcdef-3\"></template>"
        );
        assert_eq!(
            &placeholder(T, 3, b"<p>wait</p>")[..],
            b"<template id=\"weir-slot-0123456789abcdef-3\"></template><p>wait</p>\
              <template id=\"weir-end-0123456789abcdef-3\"></template>"
        );
    }

    #[test]
    fn scripts_name_their_pieces_and_carry_the_nonce() {
        let s = script(T, 2, 0..2, false, Some("abc="));
        let s = std::str::from_utf8(&s).expect("ascii");
        assert!(s.starts_with("<script nonce=\"abc=\">"), "{s}");
        assert!(
            s.contains("[\"weir-async-0123456789abcdef-2\",\"weir-async-0123456789abcdef-2-1\"]"),
            "{s}"
        );
        assert!(
            s.contains("getElementById(\"weir-slot-0123456789abcdef-2\")"),
            "{s}"
        );
        assert!(!s.contains("a.remove()"), "{s}");
        let s = script(T, 2, 2..3, true, None);
        let s = std::str::from_utf8(&s).expect("ascii");
        assert!(s.starts_with("<script>") && s.contains("a.remove()"), "{s}");
        assert!(s.contains("[\"weir-async-0123456789abcdef-2-2\"]"), "{s}");
        assert_eq!(
            &piece_open(T, 2, 0)[..],
            b"<template id=\"weir-async-0123456789abcdef-2\">"
        );
    }

    /// Tokens are hex, and two pages do not share one (A6: page content
    /// cannot name Weir's ids in advance).
    #[test]
    fn every_page_gets_a_token_of_its_own() {
        let tokens: Vec<Token> = (0..64).map(|_| Token::new()).collect();
        for t in &tokens {
            assert_eq!(t.as_str().len(), 16);
            assert!(t.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        }
        let mut unique = tokens.clone();
        unique.sort_by_key(|t| t.0);
        unique.dedup();
        assert_eq!(unique.len(), tokens.len());
    }
}
