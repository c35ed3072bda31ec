//! Safe points: where out-of-order `async` content may go into the page.
//!
//! [`PageCursor`] follows every byte the page hands on (template text,
//! placeholders, in-order fragments, and Weir's own templates and
//! scripts) with the tag tracker of `crate::close`, which follows the
//! HTML tokenizer (WHATWG HTML §13.2.5) and the stack of open elements as
//! far as it decides it (§13.2.6). The page is at a safe point when the
//! tracker is certain that its output ends in plain body data:
//!
//! - in the data state: not inside a tag, an attribute value, a comment,
//!   a bogus comment (`<?…`, `</ …`, `<!x…`), a DOCTYPE, CDATA, or the
//!   text of `script` (escaped or not), `style`, `textarea`, `title`,
//!   `xmp`, `iframe`, `noembed`, `noframes`, `noscript` or `plaintext`;
//! - with no `template` (of any namespace), no `svg` or `math` element
//!   (nor anything inside one), and no `select`, `pre`, `listing` or
//!   `colgroup` open: a template's content is inert, foreign content makes
//!   Weir's elements foreign, `select` content is parsed differently
//!   from browser to browser, `pre` and `listing` drop a newline that
//!   follows their start tag, and `colgroup` is closed by a `<script>`;
//! - once the body has started: after a `<body>` start tag, or whatever
//!   opens the body without one (text that is not white space, a start tag
//!   that does not belong in the head);
//! - and not right after a `&` that may start a character reference.
//!
//! - not where text is table text (the current node a `table`, `tbody`,
//!   `thead`, `tfoot` or `tr`), in a column group after a `<col>`, or
//!   after `</body>` or `</html>` (`Tree::unsettled`): there the white
//!   space, `col`s or comments that follow would land elsewhere.
//!
//! A `<template>…</template><script>…</script>` put there is parsed as
//! exactly that (§13.2.6.4.7: "in body" and "in cell" take `template`
//! and `script` by the "in head" rules) and leaves the parser where it
//! was.
//!
//! At an async point (right before `</body>`, or at the end of the
//! template), the page is followed by markup of Weir's, not by more of its
//! own text, so the body and character references do not matter there;
//! the rest does ([`PageCursor::at_point`]). At the end of the template,
//! [`PageCursor::closing`] finishes what the page left open so that the
//! end is such a point.
//!
//! The cursor holds what it is given and reads it only when asked
//! (`OpenElements::hold`), so a page that never asks pays a reference
//! count per chunk.

use bytes::Bytes;

use crate::close::OpenElements;
use crate::tree::{El, Ns, TABLE_TEXT_PARENTS};

/// HTML elements inside which Weir's `<template>` and `<script>` would not
/// be what they seem or would change the page (see the module); raw text
/// elements are here too, though the tokenizer state already says so.
const UNSAFE_INSIDE: &[&[u8]] = &[
    b"template",
    b"select",
    b"pre",
    b"listing",
    b"colgroup",
    b"textarea",
    b"title",
    b"script",
    b"style",
    b"xmp",
    b"iframe",
    b"noembed",
    b"noframes",
    b"noscript",
    b"plaintext",
];

fn unsafe_inside(e: &El) -> bool {
    e.ns != Ns::Html || e.name.is_any(UNSAFE_INSIDE)
}

/// Bytes kept from the end of the output: more than the longest character
/// reference name (31 letters, `&CounterClockwiseContourIntegral;`).
const TAIL: usize = 40;

/// The last bytes of what was fed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tail {
    buf: [u8; TAIL],
    len: usize,
}

impl Tail {
    pub(crate) const fn new() -> Tail {
        Tail {
            buf: [0; TAIL],
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
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
    /// Whether the last byte is a CR: a LF after it is one newline with
    /// it, not after Weir's markup (WHATWG HTML §13.2.3.5).
    pub(crate) fn after_cr(&self) -> bool {
        self.len > 0 && self.buf[self.len - 1] == b'\r'
    }

    pub(crate) fn in_reference(&self) -> bool {
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
    /// A cursor at the page's first byte.
    pub(crate) fn new() -> PageCursor {
        PageCursor {
            tracker: OpenElements::page(),
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

    /// Whether the output so far ends in the data state, with the tracker
    /// certain and nothing unsafe open.
    fn plain(&self) -> bool {
        self.tracker.in_text()
            && !self.tracker.uncertain()
            && !self.tracker.stack().iter().any(unsafe_inside)
            && !self
                .tracker
                .stack()
                .last()
                .is_some_and(|e| e.html_any(TABLE_TEXT_PARENTS))
    }

    /// Whether a `meta` of the page declared an encoding whose bytes the
    /// tracker cannot read as the browser will (`crate::charset`): from
    /// there on, nothing the cursor says holds.
    pub(crate) fn unreadable(&mut self) -> bool {
        self.tracker.feed_held();
        self.tracker.unreadable()
    }

    /// Whether the output so far ends at a safe point (see the module).
    pub(crate) fn is_safe(&mut self) -> bool {
        self.tracker.feed_held();
        self.plain()
            && self.tracker.body()
            && !self.tracker.unsettled()
            && !self.tail.in_reference()
            && !self.tail.after_cr()
    }

    /// Whether Weir's markup may follow the output at an async point (see
    /// the module).
    pub(crate) fn at_point(&mut self) -> bool {
        self.tracker.feed_held();
        self.plain()
    }

    /// At the end of the template: the bytes that finish what the page
    /// left open (the construct it ends in, then its elements down to the
    /// outermost unsafe one), after which Weir's markup may follow; `None`
    /// when none can (PLAINTEXT, or the tracker is uncertain).
    pub(crate) fn closing(&mut self) -> Option<Bytes> {
        self.tracker.feed_held();
        if self.tracker.uncertain() {
            return None;
        }
        let keep = |stack: &[El]| stack.iter().position(unsafe_inside).unwrap_or(stack.len());
        let (out, after) = self.tracker.closing_to(keep)?;
        let ok = after.in_text() && !after.uncertain() && !after.stack().iter().any(unsafe_inside);
        ok.then(|| Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(parts: &[&str]) -> PageCursor {
        let mut c = PageCursor::new();
        for p in parts {
            c.hold(&Bytes::copy_from_slice(p.as_bytes()));
        }
        c
    }

    fn page(parts: &[&str]) -> bool {
        cursor(parts).is_safe()
    }

    #[test]
    fn body_content_is_safe_and_the_rest_is_not() {
        assert!(page(&["<html><head></head><body><main><div class=slot>"]));
        assert!(page(&["<body><p>Price: ", "12 &amp; up "]));
        assert!(page(&["<body><table><tr><td>"]));
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
            "<body><plaintext>",
            "<body><pre>",
            "<body><table><colgroup>",
            // Table text: white space around Weir's markup would move.
            "<body><table><tr>",
        ] {
            assert!(!page(&[unsafe_]), "{unsafe_:?}");
        }
        assert!(page(&["<body><svg><g/></svg><textarea>x</textarea>"]));
        assert!(page(&["<body><template><p>", "</p></template>"]));
    }

    /// The second review's page-side cases (F1, F3, F4 of issue 15), and
    /// the modes where Weir's markup would move what follows: each is
    /// unsafe where the tracker said safe before.
    #[test]
    fn the_page_is_unsafe_where_a_browser_closes_what_the_tracker_kept() {
        for unsafe_ in [
            // F1: `</table>` in a cell closes the `svg` in it; the tracker
            // then read `<script>` as markup and `</svg>` as its end.
            "<body><table><tr><td><svg></table><script>//</svg>",
            "<body><table><tr><td><svg></table>",
            // F3: "in body" ignores table parts; their end tags closed a
            // `math` or `svg` the browser keeps.
            "<body><td><math></td>",
            "<body><caption><math></caption>",
            "<body><td><svg></td><![CDATA[ x>",
            "<body><div class=row><td>cell <svg><rect/></td>",
            // F4: "in select" ignores these end tags.
            "<body><div><select></div>",
            "<body><p><select></p>",
            "<body><h1><select></h2>",
            "<body><div><select><option>x</div><xmp><!--</xmp>",
            // "in column group" and "after body".
            "<body><table><col>",
            "<body><table><col> ",
            "<body><p>x</p></body>",
            "<body><p>x</p></html><html>",
            // The third review (R1-R3): a browser whose current node is
            // foreign after it closed what the tracker keeps opens CDATA;
            // table modes pop what the tracker kept; a CR waits for its LF.
            "<body><svg><desc><select><input><![CDATA[></select></svg>",
            "<body><table><form> ",
            "<body><table><form>",
            "<body><table><tr><div></tr> ",
            "<body><table><nobr><col><template></template>",
            "<body>a\r",
            // The fourth review: `<table>` in a table mode closes the open
            // table; table end tags close a select inside a table.
            "<body><table><table></table><svg><desc><caption><![CDATA[>",
            "<body><table><table></table><svg><desc><caption>",
            "<body><table><tr><table></table><svg><desc><td>",
            "<body><table><svg><desc><table></table></desc><style></svg><div>",
            "<body><table><select></table></select><svg><desc><td><![CDATA[>",
            "<body><table><select></table></select><math><mi><td>",
        ] {
            assert!(!page(&[unsafe_]), "{unsafe_:?}");
        }
        for safe in [
            // `</table>` from HTML content in a cell closes everything in
            // it, the `svg` too: the tracker follows that.
            "<body><table><tr><td><div><svg><foreignObject><p></table></p></foreignObject>",
            "<body><table><col><tbody><tr><td>",
            "<body><p>x</p></body><p>",
            "<body><svg><g></g></svg><div>",
            "<body><table><tr><td><svg></svg></td></tr></table>",
        ] {
            assert!(page(&[safe]), "{safe:?}");
        }
    }

    /// The reviewers' page-side cases (A1, A2): each is unsafe where the
    /// old tracker said safe.
    #[test]
    fn the_page_is_unsafe_wherever_the_tokenizer_is_not_in_plain_data() {
        for unsafe_ in [
            // A1: `</script>` inside `<!-- <script>` does not end the script.
            "<body><script nonce=r><!--\ndocument.write('<script src=x></script>'); // ad",
            "<body><script><!--<script></script>",
            "<body><script>a</scriptx>",
            "<body><p>before</p><?xml version=",
            "<body><p>before</p><?",
            "<body></ x",
            "<body></1",
            "<body><!doc",
            "<body><!x",
            "<body><svg><![CDATA[ a>b </svg>",
            "<body><a x\"y><b title=\">",
            "<body><svg><style></svg><a title=\"</style>",
            "<body><svg><foreignObject><div></svg>",
            "<body><template/>",
            "<body><math><mtext><template>",
            "<body><select><style>",
            "<body><select><style></style></select>",
            "<frameset>",
        ] {
            assert!(!page(&[unsafe_]), "{unsafe_:?}");
        }
        for safe in [
            "<body><script><!--<script></script>--></script>",
            "<body><script>a</scriptx></script >",
            "<body><?xml version=\"1.0\"?><p>",
            "<body></ x><p>",
            "<body><svg><![CDATA[ a>b ]]></svg>",
            "<body><a x\"y>t",
            "<body><!-- a --!>",
            "<body><!-->",
            "<body><div><p>x</div>",
            "<body><select><option>a</select>",
            "<!doctype html><title>t</title><main>",
            "<html><head></head>Hello ",
        ] {
            assert!(page(&[safe]), "{safe:?}");
        }
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
    fn points_need_no_body_and_the_end_closes_what_is_open() {
        assert!(cursor(&["<title>t</title>"]).at_point());
        assert!(cursor(&["<body><p>Fish &am"]).at_point());
        assert!(!cursor(&["<body><textarea>"]).at_point());
        let closing = |text: &str| cursor(&[text]).closing().map(|b| b.to_vec());
        assert_eq!(
            closing("<body><div><textarea>x").as_deref(),
            Some(&b"</textarea>"[..])
        );
        assert_eq!(
            closing("<body><div><svg><g><title>t").as_deref(),
            Some(&b"</title></g></svg>"[..])
        );
        assert_eq!(
            closing("<body><template><p title=\"x").as_deref(),
            Some(&b"\"></p></template>"[..])
        );
        assert_eq!(closing("<body><div><!-- c").as_deref(), Some(&b"-->"[..]));
        assert_eq!(closing("<body><plaintext>"), None);
        assert_eq!(closing("<body><select><style>"), None);
    }

    /// A7: a page that declares an encoding the tracker cannot read.
    #[test]
    fn a_meta_declaring_a_stateful_or_multibyte_encoding_makes_the_page_unreadable() {
        for text in [
            "<head><meta charset=\"iso-2022-jp\">",
            "<head><meta charset=Shift_JIS>",
            "<head><META HTTP-EQUIV=Content-Type CONTENT=\"text/html; charset=euc-kr\">",
            "<head><meta charset=\"&#115;jis\">",
        ] {
            assert!(cursor(&[text]).unreadable(), "{text:?}");
        }
        for text in [
            "<head><meta charset=\"utf-8\">",
            "<head><meta charset=utf-16>",
            "<head><meta name=x content=\"charset=sjis\">",
            "<head><meta http-equiv=refresh content=\"charset=sjis\">",
            "<body><svg><meta2 charset=sjis>",
        ] {
            assert!(!cursor(&[text]).unreadable(), "{text:?}");
        }
    }
}
