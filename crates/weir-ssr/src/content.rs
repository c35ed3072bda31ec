//! An `async` fragment's content: when it may go out inside a
//! `<template>` of Weir's, where it may be cut into pieces, and, at an
//! async point, which of its bytes go out and what closes them.
//!
//! The content is read by a guarded tag tracker (`crate::close`) that
//! starts inside Weir's `<template>` (an HTML element):
//!
//! - It is *whole* ([`ContentCursor::may_end`]) when it ends in the data
//!   state (WHATWG HTML §13.2.5.1), with no element named `template` open
//!   (any namespace: Weir's `</template>` would close that one instead,
//!   §13.2.6.4.4 and §13.2.6.5), nothing refused and the tracker certain.
//!   Only whole content goes out early, at a safe point of the page.
//! - It may be *cut* ([`ContentCursor::at_top_level`]) where it is whole,
//!   every element it opened is closed and no character reference is
//!   open: pieces then parse as the content would whole.
//! - At an async point, content goes out as it comes, and Weir closes it
//!   however it ends ([`ContentCursor::finish`]): the construct it ends in
//!   (comment, raw text, …) and the templates it left open, so the page
//!   after it is read as it would be without it. To make that always
//!   possible, a tag is held back until it is complete; a `</template>`
//!   that would close Weir's template is left out; and a start tag after
//!   which nothing could close the content (`<plaintext>`, or one that
//!   leaves the tracker uncertain, `crate::tree`) ends the content right
//!   before it, as does a tag longer than [`MAX_TAG_HOLD`] bytes.

use std::collections::VecDeque;

use bytes::Bytes;
use weir_stream::Batch;

use crate::close::OpenElements;
use crate::safe::Tail;
use crate::tokenizer::Refusal;
use crate::tree::El;

/// Most bytes of one unfinished tag held back at an async point; a longer
/// tag ends the content before it.
pub(crate) const MAX_TAG_HOLD: u64 = 64 * 1024;

/// An `async` fragment's content so far.
#[derive(Debug)]
pub(crate) struct ContentCursor {
    tracker: OpenElements,
    tail: Tail,
    /// A tag was refused (skipped or stopped at) at some point.
    refused: bool,
    /// Byte ranges to leave out, not yet passed.
    skips: VecDeque<(u64, u64)>,
    /// Nothing from here on goes out.
    stop: Option<u64>,
    /// Chunks queued to go out at an async point, with where each starts.
    queue: VecDeque<(u64, Bytes)>,
    /// Where the next chunk queued starts.
    queued_to: u64,
    /// Bytes out (or left out) so far.
    out_pos: u64,
}

impl ContentCursor {
    /// A cursor at the start of the content.
    pub(crate) fn new() -> ContentCursor {
        ContentCursor {
            tracker: OpenElements::guarded(),
            tail: Tail::new(),
            refused: false,
            skips: VecDeque::new(),
            stop: None,
            queue: VecDeque::new(),
            queued_to: 0,
            out_pos: 0,
        }
    }

    /// Reads the next bytes of the content.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        if self.tracker.stopped() {
            return;
        }
        self.tracker.feed(chunk);
        self.tail.push(chunk);
        for r in self.tracker.take_refusals() {
            self.refused = true;
            match r {
                Refusal::Skip { from, to } => self.skips.push_back((from, to)),
                Refusal::Stop { at } => self.stop = Some(self.stop.map_or(at, |s| s.min(at))),
            }
        }
    }

    /// No element named `template` is open.
    fn no_template(&self) -> bool {
        !self.tracker.stack().iter().any(|e| e.name.is(b"template"))
    }

    /// Whether the content so far may end here, inside a `<template>` of
    /// Weir's (see the module).
    pub(crate) fn may_end(&self) -> bool {
        self.tracker.in_text()
            && !self.refused
            && !self.tracker.uncertain()
            && !self.tracker.stray_template_end()
            && self.no_template()
    }

    /// Whether the content may be cut here (see the module).
    pub(crate) fn at_top_level(&self) -> bool {
        self.may_end() && self.tracker.depth() == Some(0) && !self.tail.in_reference()
    }

    /// The first `n` bytes went out early (whole pieces).
    pub(crate) fn taken(&mut self, n: u64) {
        self.out_pos += n;
        self.queued_to = self.queued_to.max(self.out_pos);
    }

    /// At an async point: `chunk` comes next (`fed`: it was fed already).
    pub(crate) fn push(&mut self, chunk: Bytes, fed: bool) {
        if !fed {
            self.feed(&chunk);
        }
        let start = self.queued_to;
        self.queued_to += chunk.len() as u64;
        if !chunk.is_empty() {
            self.queue.push_back((start, chunk));
        }
    }

    /// Whether nothing more of the content goes out.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.is_some()
    }

    /// Moves into `out` the queued bytes that may go out now: all but a
    /// tag still being read, the tags left out, and what comes after a
    /// stop. A tag held past [`MAX_TAG_HOLD`] stops the content.
    pub(crate) fn drain(&mut self, out: &mut Batch) {
        if let Some(from) = self.tracker.tag_from()
            && self.stop.is_none()
            && self.queued_to.saturating_sub(from) > MAX_TAG_HOLD
        {
            self.stop = Some(from);
            self.tracker.stop();
        }
        let limit = [
            self.stop,
            self.tracker.tag_from(),
            Some(self.queued_to),
            Some(self.tracker.pos()),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(0);
        while self.out_pos < limit {
            let Some(&(start, ref bytes)) = self.queue.front() else {
                break;
            };
            let end = start + bytes.len() as u64;
            if self.out_pos >= end {
                self.queue.pop_front();
                continue;
            }
            if let Some(&(from, to)) = self.skips.front()
                && from <= self.out_pos
            {
                self.out_pos = self.out_pos.max(to.min(end));
                if self.out_pos >= to {
                    self.skips.pop_front();
                }
                continue;
            }
            let next_skip = self.skips.front().map_or(u64::MAX, |s| s.0);
            let seg_end = end.min(limit).min(next_skip);
            let (a, b) = (self.out_pos - start, seg_end - start);
            out.push(bytes.slice(usize::try_from(a).unwrap_or(0)..usize::try_from(b).unwrap_or(0)));
            self.out_pos = seg_end;
        }
        if self.stop.is_some_and(|s| self.out_pos >= s) {
            self.queue.clear();
        }
    }

    /// The content ended (or stopped): the bytes that close what went out
    /// (the construct it ends in, then the templates it left open). A tag
    /// still being read was held back and is dropped.
    pub(crate) fn finish(&mut self) -> Bytes {
        self.queue.clear();
        let mut tracker = std::mem::replace(&mut self.tracker, OpenElements::guarded());
        if self.stop.is_some() || tracker.tag_from().is_some() {
            // What went out ends where that tag (or the stop) began, in
            // the data state, with the elements open now.
            tracker.rewind_to_data();
        }
        let keep = |stack: &[El]| {
            stack
                .iter()
                .position(|e| e.name.is(b"template"))
                .unwrap_or(stack.len())
        };
        tracker
            .closing_to(keep)
            .map(|(out, _)| Bytes::from(out))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(parts: &[&str]) -> ContentCursor {
        let mut c = ContentCursor::new();
        for p in parts {
            c.feed(p.as_bytes());
        }
        c
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
        c.feed(b" -->");
        assert!(c.at_top_level());
        c.feed(b"</template>");
        assert!(!c.may_end(), "a stray </template> would close Weir's");
    }

    /// The reviewers' endings (A2, A5): none of them may end inside
    /// Weir's template as it is.
    #[test]
    fn content_that_does_not_end_in_plain_data_is_not_whole() {
        for ending in [
            "<?",
            "<?xml ",
            "</ x",
            "</1",
            "<!x",
            "<script>a</scriptx>",
            "<script><!--<script></script>",
            "<svg><![CDATA[ a>b </svg>",
            "<a x\"y><b title=\">",
            "<svg><style></svg><a title=\"</style>",
            "<template><template></template>",
            "<template>",
            "<svg><template>",
            "<math><mtext><template>",
            "<!--",
            "<a href=\"",
            "<script>",
            "<textarea>",
            "<plaintext>",
            "<select><style>",
            "<frameset>",
            "<form><svg></form><xmp>",
            "<svg><desc><tbody><![CDATA[<br>",
            // F5: a charset declared in content could re-decode the page.
            "<p>Great kayak!<meta charset=\"iso-2022-jp\">\u{1b}$B</p>",
            "<meta http-equiv=content-type content=\"text/html; charset=utf-8\">",
            // The third review (R1): the browser closed an element the
            // tracker keeps, and its current node is foreign: CDATA.
            "<svg><desc><select><input><![CDATA[>",
            "<tr><svg><foreignObject><table><![CDATA[>",
            "<math><mi><form></form><![CDATA[>",
            "<svg><title><select><hr><select></select><![CDATA[>",
            "<svg><foreignobject><select><b><select><![CDATA[>",
        ] {
            let c = content(&["<p class=async>x</p>", ending]);
            assert!(!c.may_end(), "{ending:?}");
        }
        // The first start tag of the content sets the mode of Weir's
        // template (§13.2.6.4.18).
        for alone in [
            // The second review (F2): "in column group" ignores `<style>`,
            // so `<!--` opens a comment.
            "<col><style><!--</style>",
            "<col><script><!--</script>",
            // A template whose first element is a cell is "in row": a
            // `<td>` deeper down clears back to it.
            "<th><math><mi><td><keygen><mglyph><iframe><applet>",
            // The fourth review: the template's table mode ignores parts
            // whose context is not open; `<table>` in a table mode closes
            // the table; a table end tag closes a select in a table.
            "<tr><col><svg><desc><caption><![CDATA[>",
            "<tr><col><svg><desc><tbody><![CDATA[>",
            "<td><tr><svg><desc><tr><![CDATA[>",
            "<th><caption></caption><svg><desc><tr><![CDATA[>",
            "<tr><table><col><svg><desc><col><![CDATA[>",
            "<table><svg><desc><table></table></desc><style>",
            "<table><table></table><svg><desc><caption><![CDATA[>",
            "<table><select></table></select><svg><desc><td><![CDATA[>",
        ] {
            assert!(!content(&[alone]).may_end(), "{alone:?}");
        }
        for rows in [
            "<tr><td>a</td><td>b</td></tr><tr><td>c</td></tr>",
            "<td>a</td><th>b</th>",
            "<tbody><tr><td>a</td></tr></tbody><tfoot><tr><td>b</td></tr></tfoot>",
        ] {
            assert!(content(&[rows]).may_end(), "{rows:?}");
        }
        // After a `<p>` the mode is "in body", which ignores `<col>`.
        assert!(content(&["<p>x</p><col><style><!--</style>"]).may_end());
        for fine in [
            "<svg><g>",
            "<div><p>",
            "<select><option>",
            "<svg><![CDATA[ a>b ]]></svg>",
            "<script><!--<script></script>--></script>",
            "<a x\"y>t",
            "<!-- a --!>",
            "<!-->",
            "<tr><td>row</td></tr>",
            "<table><colgroup><col></colgroup><tr><td>x</td></tr></table>",
            "<meta name=description content=x>",
        ] {
            assert!(content(&[fine]).may_end(), "{fine:?}");
        }
    }

    fn at_point(parts: &[&str]) -> String {
        let mut c = ContentCursor::new();
        let mut out = Batch::new();
        for p in parts {
            c.push(Bytes::copy_from_slice(p.as_bytes()), false);
            c.drain(&mut out);
        }
        let mut s: Vec<u8> = out.into_iter().flat_map(|b| b.to_vec()).collect();
        s.extend_from_slice(&c.finish());
        String::from_utf8(s).expect("utf-8")
    }

    #[test]
    fn at_a_point_content_is_closed_and_what_could_not_be_is_left_out() {
        assert_eq!(at_point(&["<p>a<!-- b"]), "<p>a<!-- b-->");
        assert_eq!(at_point(&["<p>a<script>x"]), "<p>a<script>x</script>");
        assert_eq!(at_point(&["<p>a<a href=\"", "x"]), "<p>a");
        assert_eq!(at_point(&["<p>a</templ", "ate><b>c</b>"]), "<p>a<b>c</b>");
        assert_eq!(
            at_point(&["<i>a</i><template><b>t"]),
            "<i>a</i><template><b>t</b></template>"
        );
        assert_eq!(at_point(&["x<plain", "text>y<p>z"]), "x");
        assert_eq!(at_point(&["x<select><style>y"]), "x<select>");
        assert_eq!(at_point(&["<col><style><!--", "<p>a</p>"]), "");
        assert_eq!(
            at_point(&["<p>k<meta charset=iso-2022-jp>", "x</p>"]),
            "<p>kx</p>"
        );
        assert_eq!(
            at_point(&["<svg><template><foreignObject><div>"]),
            "<svg><template><foreignObject><div></div></foreignobject></template>"
        );
        let long = format!("<p>a<div title=\"{}", "x".repeat(70 * 1024));
        let (a, b) = long.split_at(40 * 1024);
        assert_eq!(at_point(&[a, b, "\">b"]), "<p>a");
    }
}
