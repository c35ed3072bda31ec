//! The markup of `async` fragments: the placeholder left in the slot, the
//! `<template>` that carries the content, and the inline script that moves
//! the content into place.
//!
//! Placeholder `N` is `<template id="weir-slot-N"></template>`; when the
//! include has inline fallback markup, the markup follows it, then
//! `<template id="weir-end-N"></template>`, so that a browser without
//! scripts shows the fallback. The content goes out in one
//! `<template id="weir-async-N">` or, with `async_stream`, in pieces:
//! `weir-async-N`, then `weir-async-N-1`, `weir-async-N-2`, …
//!
//! A mover script names the pieces sent since the previous one. It runs
//! once its pieces and the placeholder are both in the document: the first
//! removes the fallback and the end marker, each inserts its pieces'
//! content before the slot marker, the last removes the slot marker, and
//! each removes its own `<script>` element. After the last, the document
//! holds the content where the include stood and nothing of Weir's. A
//! page whose `Content-Security-Policy` gives a nonce (`crate::csp`) gets
//! it on every mover script.

use std::fmt::Write as _;

use bytes::Bytes;

/// `<template id="weir-slot-N"></template>`, the fallback markup and the
/// end marker (only when there is fallback markup).
pub(crate) fn placeholder(id: usize, fallback: &[u8]) -> Bytes {
    let mut out = format!("<template id=\"weir-slot-{id}\"></template>").into_bytes();
    if !fallback.is_empty() {
        out.extend_from_slice(fallback);
        out.extend_from_slice(format!("<template id=\"weir-end-{id}\"></template>").as_bytes());
    }
    Bytes::from(out)
}

/// The id of piece `k` of async fragment `id`.
fn piece_id(id: usize, k: usize) -> String {
    if k == 0 {
        format!("weir-async-{id}")
    } else {
        format!("weir-async-{id}-{k}")
    }
}

/// `<template id="…">` opening piece `k` of async fragment `id`.
pub(crate) fn piece_open(id: usize, k: usize) -> Bytes {
    Bytes::from(format!("<template id=\"{}\">", piece_id(id, k)))
}

/// What closes a piece.
pub(crate) const PIECE_CLOSE: Bytes = Bytes::from_static(b"</template>");

/// The script that moves pieces `from..to` of async fragment `id` into
/// its slot; `last`: no piece follows them. `nonce`: base64 only (checked
/// by `crate::csp`), so it needs no escaping.
pub(crate) fn script(
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
        let _ = write!(ids, "\"{}\"", piece_id(id, k));
    }
    let nonce = nonce.map_or(String::new(), |n| format!(" nonce=\"{n}\""));
    let done = if last { "a.remove()" } else { "" };
    Bytes::from(format!(
        "<script{nonce}>(function(){{var d=document,s=d.currentScript,\
         a=d.getElementById(\"weir-slot-{id}\"),e=d.getElementById(\"weir-end-{id}\");\
         if(a){{if(e){{if(e.parentNode===a.parentNode)while(a.nextSibling&&a.nextSibling!==e)\
         a.nextSibling.remove();e.remove()}}[{ids}].forEach(function(i){{var t=d.getElementById(i);\
         if(t){{a.before(t.content);t.remove()}}}});{done}}}if(s)s.remove()}})()</script>"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_keep_fallback_markup_between_markers() {
        assert_eq!(
            &placeholder(3, b"")[..],
            b"<template id=\"weir-slot-3\"></template>"
        );
        assert_eq!(
            &placeholder(3, b"<p>wait</p>")[..],
            b"<template id=\"weir-slot-3\"></template><p>wait</p>\
              <template id=\"weir-end-3\"></template>"
        );
    }

    #[test]
    fn scripts_name_their_pieces_and_carry_the_nonce() {
        let s = script(2, 0..2, false, Some("abc="));
        let s = std::str::from_utf8(&s).expect("ascii");
        assert!(s.starts_with("<script nonce=\"abc=\">"), "{s}");
        assert!(s.contains("[\"weir-async-2\",\"weir-async-2-1\"]"), "{s}");
        assert!(!s.contains("a.remove()"), "{s}");
        let s = script(2, 2..3, true, None);
        let s = std::str::from_utf8(&s).expect("ascii");
        assert!(s.starts_with("<script>") && s.contains("a.remove()"), "{s}");
        assert!(s.contains("[\"weir-async-2-2\"]"), "{s}");
        assert_eq!(&piece_open(2, 0)[..], b"<template id=\"weir-async-2\">");
    }
}
