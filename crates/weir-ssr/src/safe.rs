//! Safe points: where out-of-order `async` content may go into the page,
//! and where an `async` fragment's own content may be cut into pieces.
//!
//! Both questions are answered by the tag tracker of `crate::close` run
//! over the bytes in question, plus a look at their last few bytes:
//!
//! - [`PageCursor`] follows every byte the page hands on (template text,
//!   placeholders, in-order fragments). The page is at a safe point when
//!   those bytes end in body content: after a `<body>` start tag, outside
//!   any tag, attribute value, comment, declaration, raw text element
//!   (`script`, `style`, `textarea`, `title`, `noscript`, …) and outside a
//!   `template`, `svg`, `math`, `select`, `pre` or `listing` element, and
//!   not right after a `&` that may start a character reference. A
//!   `<template>…</template><script>…</script>` put there is parsed as
//!   exactly that (WHATWG HTML §13.2.6.4.7: in body, in table and in row
//!   alike take `template` and `script` by the "in head" rules) and leaves
//!   the parser where it was.
//! - [`ContentCursor`] follows an `async` fragment's content: it may be cut
//!   where all it has so far is whole top-level nodes, and it may go out
//!   whole (inside a `<template>` of its own) when it ends in text with no
//!   stray `</template>` that would close Weir's.
//!
//! The page's cursor holds what it is given and reads it only when asked
//! (`OpenElements::hold`), so a page that never asks pays a reference
//! count per chunk.

use bytes::Bytes;

use crate::close::OpenElements;

/// Elements inside which Weir's `<template>` and `<script>` would not be
/// what they seem: a `template`'s content is inert, `svg` and `math` make
/// them foreign elements, `select` content models vary between browsers,
/// and `pre`/`listing` drop a newline that follows their start tag.
const UNSAFE_INSIDE: [&[u8]; 6] = [b"template", b"svg", b"math", b"select", b"pre", b"listing"];

/// Bytes kept from the end of the output: more than the longest character
/// reference name (31 letters, `&CounterClockwiseContourIntegral;`).
const TAIL: usize = 40;

/// The last bytes of what was fed.
#[derive(Debug, Clone, Copy)]
struct Tail {
    buf: [u8; TAIL],
    len: usize,
}

impl Tail {
    const fn new() -> Tail {
        Tail {
            buf: [0; TAIL],
            len: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if chunk.len() >= TAIL {
            self.buf.copy_from_slice(&chunk[chunk.len() - TAIL..]);
            self.len = TAIL;
            return;
        }
        let keep = (TAIL - chunk.len()).min(self.len);
        self.buf.copy_within(self.len - keep..self.len, 0);
        self.buf[keep..keep + chunk.len()].copy_from_slice(chunk);
        self.len = keep + chunk.len();
    }

    /// Whether the bytes end in `&` and then only name or number
    /// characters: a character reference that what follows could still
    /// complete (HTML §13.2.5.72).
    fn in_reference(&self) -> bool {
        let tail = &self.buf[..self.len];
        let run = tail
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'#')
            .count();
        run < tail.len() && tail[tail.len() - run - 1] == b'&'
    }
}

/// Where the page's output stands, for out-of-order content.
#[derive(Debug)]
pub(crate) struct PageCursor {
    tracker: OpenElements,
    tail: Tail,
}

impl PageCursor {
    pub(crate) fn new() -> PageCursor {
        PageCursor {
            tracker: OpenElements::new(),
            tail: Tail::new(),
        }
    }

    /// The page handed on `chunk`.
    pub(crate) fn hold(&mut self, chunk: &Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.tracker.hold(chunk);
        self.tail.push(chunk);
    }

    /// Whether the output so far ends at a safe point (see the module).
    pub(crate) fn is_safe(&mut self) -> bool {
        self.tracker.feed_held();
        self.tracker.in_text()
            && self.tracker.depth().is_some()
            && self.tracker.is_open(&[b"body"])
            && !self.tracker.is_open(&UNSAFE_INSIDE)
            && !self.tail.in_reference()
    }
}

/// An `async` fragment's content so far, for cutting it into pieces.
#[derive(Debug)]
pub(crate) struct ContentCursor {
    tracker: OpenElements,
    tail: Tail,
}

impl ContentCursor {
    pub(crate) fn new() -> ContentCursor {
        ContentCursor {
            tracker: OpenElements::new(),
            tail: Tail::new(),
        }
    }

    /// The next bytes of the content.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        self.tracker.feed(chunk);
        self.tail.push(chunk);
    }

    /// Whether the content so far may end here, inside a `<template>` of
    /// its own: it ends in text, and no `</template>` of it would close
    /// Weir's.
    pub(crate) fn may_end(&self) -> bool {
        self.tracker.in_text() && !self.tracker.stray_template_end()
    }

    /// Whether the content may be cut here: it may end here, every element
    /// it opened is closed, and no character reference is open, so the
    /// pieces on either side parse as they would together.
    pub(crate) fn at_top_level(&self) -> bool {
        self.may_end() && self.tracker.depth() == Some(0) && !self.tail.in_reference()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(parts: &[&str]) -> bool {
        let mut c = PageCursor::new();
        for p in parts {
            c.hold(&Bytes::copy_from_slice(p.as_bytes()));
        }
        c.is_safe()
    }

    #[test]
    fn body_content_is_safe_and_the_rest_is_not() {
        assert!(page(&["<html><head></head><body><main><div class=slot>"]));
        assert!(page(&["<body><p>Price: ", "12 &amp; up "]));
        assert!(page(&["<body><table><tr>"]));
        for unsafe_ in [
            "<html><head><title>x",
            "<html><head>",
            "<body><div class=\"a",
            "<body><div ",
            "<body><!-- x",
            "<body><script>var a = 1;",
            "<body><style>p{}",
            "<body><textarea>",
            "<body><title>x",
            "<body><noscript>",
            "<body><template><p>",
            "<body><svg><g>",
            "<body><select>",
            "<body><p>Fish &am",
            "<body><p>&#12",
            "<body></body>",
            "<body><plaintext>",
        ] {
            assert!(!page(&[unsafe_]), "{unsafe_:?}");
        }
        assert!(page(&["<body><svg><g/></svg><textarea>x</textarea>"]));
        assert!(page(&["<body><template><p>", "</p></template>"]));
    }

    #[test]
    fn the_tail_is_the_last_bytes_whatever_the_chunks() {
        let text = "<body>".to_owned() + &"word ".repeat(20) + "&longname";
        for at in 0..text.len() {
            assert!(!page(&[&text[..at], &text[at..]]), "split at {at}");
        }
        let text = "<body>&".to_owned() + &"a".repeat(TAIL + 5);
        assert!(page(&[&text]), "no reference name is that long");
    }

    #[test]
    fn content_is_cut_between_top_level_nodes_only() {
        let mut c = ContentCursor::new();
        c.feed(b"<li>one</li>");
        assert!(c.at_top_level());
        c.feed(b"<li>tw");
        assert!(c.may_end() && !c.at_top_level());
        c.feed(b"o</li> &amp");
        assert!(!c.at_top_level());
        c.feed(b"; <!-- x");
        assert!(!c.may_end());
        c.feed(b" --></template>");
        assert!(!c.may_end(), "a stray </template> would close Weir's");
    }
}
