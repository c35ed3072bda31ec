//! Which elements a fragment left open and where its markup stands, so
//! that a fragment cut short can be closed ([`OpenElements::closing`]) and
//! the page can tell where out-of-order content may go (`crate::safe`).
//!
//! A tag tracker, not a parser: the HTML tokenizer's states
//! (`crate::tokenizer`, WHATWG HTML §13.2.5) and the stack of open
//! elements as far as it decides them (`crate::tree`, §13.2.6), fed byte
//! by byte (with long runs skipped), building nothing.
//!
//! When a fragment is cut, [`OpenElements::closing`] finishes the
//! construct it was cut inside (a tag, a quoted attribute value, a
//! comment, CDATA, script or other raw text), so the page that follows is
//! not swallowed by it (always done), then closes the open elements,
//! innermost first (only with `close_open_elements`). The closing is
//! checked by running the tracker over it.

use bytes::Bytes;

use crate::tokenizer::{Refusal, Tokenizer};
use crate::tree::{El, Tree};

/// Most bytes [`OpenElements::hold`] keeps unread, in bytes: a fragment
/// that ends whole under this size is never scanned.
const HOLD_BYTES: usize = 16 * 1024;

/// Tracks where the markup fed so far stands.
#[derive(Debug, Clone)]
pub(crate) struct OpenElements {
    tokens: Tokenizer,
    tree: Tree,
    /// Chunks taken by `hold` and not yet fed, and their length in bytes.
    held: Vec<Bytes>,
    held_bytes: usize,
}

impl OpenElements {
    /// Markup that starts inside an HTML element (a fragment in its slot).
    pub(crate) fn new() -> OpenElements {
        OpenElements::with(Tree::new(false), Tokenizer::new(false))
    }

    /// A whole page, from its first byte: tracks its body too.
    pub(crate) fn page() -> OpenElements {
        OpenElements::with(Tree::new(true), Tokenizer::new(false))
    }

    /// An `async` fragment's content inside Weir's `<template>`: a
    /// `</template>` that would close Weir's is skipped, and a tag after
    /// which the tracker could not go on stops it (see
    /// [`OpenElements::take_refusals`]).
    pub(crate) fn guarded() -> OpenElements {
        OpenElements::with(Tree::template_content(), Tokenizer::new(true))
    }

    fn with(tree: Tree, tokens: Tokenizer) -> OpenElements {
        OpenElements {
            tokens,
            tree,
            held: Vec::new(),
            held_bytes: 0,
        }
    }

    /// Takes the next chunk, to be read later.
    ///
    /// What a fragment left open matters only when it is cut, and most
    /// fragments end whole and small. So a chunk is held (a reference
    /// count, no copy) and fed only once more than [`HOLD_BYTES`] are
    /// held, or when asked ([`OpenElements::feed_held`]); the result is
    /// the same as feeding every chunk at once.
    pub(crate) fn hold(&mut self, chunk: &Bytes) {
        self.held_bytes += chunk.len();
        self.held.push(chunk.clone());
        if self.held_bytes > HOLD_BYTES {
            self.feed_held();
        }
    }

    /// Feeds every held chunk now.
    pub(crate) fn feed_held(&mut self) {
        let mut held = std::mem::take(&mut self.held);
        for chunk in held.drain(..) {
            self.feed(&chunk);
        }
        self.held = held;
        self.held_bytes = 0;
    }

    /// Reads the next bytes.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        self.tokens.feed(chunk, &mut self.tree);
    }

    /// Whether the bytes fed so far end in the data state: not inside a
    /// tag, an attribute value, a comment, a DOCTYPE, CDATA or raw text.
    /// (Held chunks are not looked at: [`OpenElements::feed_held`] first.)
    pub(crate) fn in_text(&self) -> bool {
        self.tokens.in_data()
    }

    /// Whether the tracker lost track (see `crate::tree`): it cannot tell
    /// what a browser does from here on.
    pub(crate) fn uncertain(&self) -> bool {
        self.tree.uncertain()
    }

    /// Whether the browser is, for now, in a mode where Weir's markup
    /// would move what follows (`Tree::unsettled`).
    pub(crate) fn unsettled(&self) -> bool {
        self.tree.unsettled()
    }

    /// A `meta` declared an encoding the tracker cannot read
    /// (`Tree::unreadable`).
    pub(crate) fn unreadable(&self) -> bool {
        self.tree.unreadable()
    }

    /// The page's body is open ([`OpenElements::page`] only).
    pub(crate) fn body(&self) -> bool {
        self.tree.body()
    }

    /// Open elements, outermost first.
    pub(crate) fn stack(&self) -> &[El] {
        self.tree.stack()
    }

    /// Open elements, or `None` once the tracker is uncertain.
    pub(crate) fn depth(&self) -> Option<usize> {
        (!self.tree.uncertain()).then_some(self.tree.stack().len())
    }

    /// Whether a `</template>` came that closed no `template` of its own
    /// (for a guarded tracker: one was skipped).
    pub(crate) fn stray_template_end(&self) -> bool {
        self.tree.stray_template_end()
    }

    /// Bytes fed so far.
    pub(crate) fn pos(&self) -> u64 {
        self.tokens.pos()
    }

    /// Where a tag still being read started ([`Tokenizer::tag_from`]).
    pub(crate) fn tag_from(&self) -> Option<u64> {
        self.tokens.tag_from()
    }

    /// The tags a guarded tracker refused since the last call.
    pub(crate) fn take_refusals(&mut self) -> Vec<Refusal> {
        self.tokens.take_refusals()
    }

    /// Whether a guarded tracker stopped (nothing after counts).
    pub(crate) fn stopped(&self) -> bool {
        self.tokens.stopped()
    }

    /// Forgets a tag still being read, or a stop ([`Tokenizer::rewind_to_data`]).
    pub(crate) fn rewind_to_data(&mut self) {
        self.feed_held();
        self.tokens.rewind_to_data();
    }

    /// Stops here (a guarded tracker's content is cut).
    pub(crate) fn stop(&mut self) {
        self.tokens.stop();
    }

    /// The bytes that end the construct the input stopped inside of, then
    /// the end tags of the open elements past the first `keep(stack)` (the
    /// stack once the construct is ended), innermost first, each checked by the tracker (an end tag that closes nothing
    /// ends the list); and the tracker after them. `None` when nothing can
    /// end the construct (PLAINTEXT).
    pub(crate) fn closing_to(
        &self,
        keep: impl Fn(&[El]) -> usize,
    ) -> Option<(Vec<u8>, OpenElements)> {
        let mut after = self.clone();
        after.feed_held();
        let mut out = after.tokens.finish()?;
        after.feed(&out);
        let keep = keep(after.tree.stack());
        while after.tree.stack().len() > keep {
            let before = after.tree.stack().len();
            let Some(top) = after.tree.stack().last().copied() else {
                break;
            };
            let mut end = Vec::with_capacity(top.name.len() + 3);
            push_end(&mut end, top.name.as_slice());
            after.feed(&end);
            if after.tree.stack().len() >= before {
                break;
            }
            out.extend_from_slice(&end);
        }
        Some((out, after))
    }

    /// The bytes that end what the fragment was cut inside of (a tag, a
    /// quoted value, a comment, script text); with `elements`, then the
    /// end tags of the open elements, innermost first. Nothing inside
    /// PLAINTEXT, which nothing ends.
    pub(crate) fn closing(self, elements: bool) -> Vec<u8> {
        let keep = |stack: &[El]| if elements { 0 } else { stack.len() };
        self.closing_to(keep)
            .map(|(out, _)| out)
            .unwrap_or_default()
    }
}

fn push_end(out: &mut Vec<u8>, name: &[u8]) {
    out.extend_from_slice(b"</");
    out.extend_from_slice(name);
    out.push(b'>');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close_after(parts: &[&str]) -> String {
        let mut t = OpenElements::new();
        for p in parts {
            t.feed(p.as_bytes());
        }
        String::from_utf8(t.closing(true)).expect("ascii")
    }

    /// Whatever the split, the same closing bytes.
    fn every_split(text: &str) -> String {
        let whole = close_after(&[text]);
        for at in 0..=text.len() {
            if text.is_char_boundary(at) {
                assert_eq!(
                    close_after(&[&text[..at], &text[at..]]),
                    whole,
                    "{text:?} split at {at}"
                );
            }
        }
        whole
    }

    #[test]
    fn closes_what_is_open_innermost_first() {
        assert_eq!(
            every_split("<div class=a><ul><li>one</li><li>tw"),
            "</li></ul></div>"
        );
        assert_eq!(every_split("<div><p>x</div>"), "");
        assert_eq!(
            every_split("<section><img src=x><br/><input>"),
            "</section>"
        );
        assert_eq!(every_split("<ul><li>one<li><b>two"), "</b></li></ul>");
        assert_eq!(every_split("a < b && c<d"), "></d>");
    }

    #[test]
    fn a_cut_inside_a_tag_attribute_comment_or_script_is_finished_first() {
        assert_eq!(
            every_split("<section><div class=\"fragmen"),
            "\"></div></section>"
        );
        assert_eq!(every_split("<ul><li title='a v"), "'></li></ul>");
        assert_eq!(every_split("<div><span"), "></span></div>");
        assert_eq!(every_split("<div></spa"), "></div>");
        assert_eq!(every_split("<div><!-- a com"), "--></div>");
        assert_eq!(every_split("<div><!-- a -- b -"), "--></div>");
        assert_eq!(every_split("<div><!DOCTYP"), "></div>");
        assert_eq!(
            every_split("<div><script>if (a<b) '<p>' </scr"),
            "</script></div>"
        );
        assert_eq!(every_split("<div><img src=\"a>b\" alt='x"), "'></div>");
    }

    #[test]
    fn raw_text_elements_are_finished_and_their_text_is_not_markup() {
        assert_eq!(
            every_split("<div><textarea>a <b>bold</b> </textar"),
            "</textarea></div>"
        );
        assert_eq!(every_split("<title>a<p>b</title><em>"), "</em>");
        assert_eq!(every_split("<noscript><p>x"), "</noscript>");
        assert_eq!(every_split("<script/>var a='<p>';"), "</script>");
        // Nothing ends PLAINTEXT: anything after it would be text.
        assert_eq!(every_split("<div><plaintext></div><p>"), "");
    }

    #[test]
    fn queries_tell_text_depth_and_stray_template_ends() {
        let mut t = OpenElements::new();
        t.feed(b"<body><div class=\"a\">");
        assert!(t.in_text());
        assert_eq!(t.depth(), Some(1), "a fragment's <body> opens nothing");
        t.feed(b"<p title=\"x");
        assert!(!t.in_text());
        t.feed(b"\"><template>x</template></template>");
        assert!(t.in_text() && t.stray_template_end());
        let mut deep = OpenElements::new();
        deep.feed("<i>".repeat(crate::tree::MAX_DEPTH + 1).as_bytes());
        assert_eq!(deep.depth(), None);
    }

    /// The tokenizer's edge cases (WHATWG HTML §13.2.5): what a browser
    /// reads as the end of a construct, and what it does not.
    #[test]
    fn constructs_end_where_the_tokenizer_ends_them() {
        // Script data escaped and double escaped (§13.2.5.20–31).
        assert_eq!(
            every_split("<div><script><!--<script></script>x"),
            "</script></div>"
        );
        assert_eq!(
            every_split("<div><script><!--<script></script>--></script><em>"),
            "</em></div>"
        );
        assert_eq!(
            every_split("<div><script><!--<script>a</scr"),
            "--></script></div>"
        );
        assert_eq!(every_split("<div><script><!--a-->b</script>"), "</div>");
        // An end tag ends raw text only if its name is followed by white
        // space, `/` or `>`.
        assert_eq!(every_split("<div><script>a</scriptx>b"), "</script></div>");
        assert_eq!(every_split("<div><style>a</style/>b"), "</div>");
        // Bogus comments: `<?`, `</` + not a letter, `<!` + not a comment.
        assert_eq!(every_split("<div><?xml version=\"1"), "></div>");
        assert_eq!(every_split("<div></ x"), "></div>");
        assert_eq!(every_split("<div></1 <b"), "></div>");
        assert_eq!(every_split("<div><!x <b"), "></div>");
        // A bogus comment ends at the first `>`, even a tag's.
        assert_eq!(every_split("<div></1 <p>"), "</div>");
        assert_eq!(every_split("<div><?x><p>"), "</p></div>");
        // Comments that end early or oddly.
        assert_eq!(every_split("<div><!--><p>"), "</p></div>");
        assert_eq!(every_split("<div><!---><p>"), "</p></div>");
        assert_eq!(every_split("<div><!-- a --!><p>"), "</p></div>");
        assert_eq!(every_split("<div><!-- <!-- -- -><p>"), "--></div>");
        // CDATA only in foreign content; a bogus comment elsewhere.
        assert_eq!(every_split("<svg><![CDATA[ a>b <p>"), "]]></svg>");
        assert_eq!(every_split("<div><![CDATA[ a>b <p>"), "</p></div>");
        // Quotes and `<` in attribute names; quotes in unquoted values.
        assert_eq!(every_split("<a x\"y><b title=\">"), "\"></b></a>");
        assert_eq!(every_split("<a href=x\"y>z<i>"), "</i></a>");
        assert_eq!(every_split("<div<p>"), "</div<p>");
        // No raw text in foreign content, except at integration points.
        assert_eq!(
            every_split("<svg><style></svg><a title=\"</style>"),
            "\"></a>"
        );
        assert_eq!(
            every_split("<svg><foreignObject><style>x"),
            "</style></foreignobject></svg>"
        );
        assert_eq!(
            every_split("<math><annotation-xml encoding=\"text/html\"><style>x"),
            "</style></annotation-xml></math>"
        );
        assert_eq!(
            every_split("<math><annotation-xml encoding=svg><style>x"),
            "</style></annotation-xml></math>"
        );
        // A breakout tag leaves foreign content.
        assert_eq!(every_split("<svg><g><p><style>x"), "</style></p>");
        assert_eq!(
            every_split("<svg><font color=red><style>x"),
            "</style></font>"
        );
        assert_eq!(every_split("<svg><font><style>x"), "</style></font></svg>");
    }

    #[test]
    fn templates_of_every_namespace_stay_open_until_their_own_end() {
        let open = |text: &str| {
            let mut t = OpenElements::new();
            t.feed(text.as_bytes());
            t.stack().iter().any(|e| e.name.is(b"template"))
        };
        for text in [
            "<template>",
            "<template/>",
            "<template><template></template>",
            "<svg><template>",
            "<svg><template></g>",
            "<math><mtext><template>",
            "<svg><template><foreignObject><div></template>",
        ] {
            assert!(open(text), "{text:?}");
        }
        for text in ["<template></template>", "<svg><template></template>"] {
            assert!(!open(text), "{text:?}");
        }
    }

    #[test]
    fn without_elements_only_the_cut_construct_is_finished() {
        let mut t = OpenElements::new();
        t.feed(b"<div><p title=\"x");
        assert_eq!(t.closing(false), b"\">");
        let mut t = OpenElements::new();
        t.feed(b"<div><p>text");
        assert_eq!(t.closing(false), b"");
    }

    #[test]
    fn skips_comments_and_script_text() {
        assert_eq!(every_split("<div><!-- <p> --><span>"), "</span></div>");
        assert_eq!(
            every_split("<div><script>if (a<b) '<p>'</script><em>"),
            "</em></div>"
        );
        assert_eq!(every_split("<div><style>a>b{}</STYLE ><em>"), "</em></div>");
        assert_eq!(every_split("<article data-x=\"1\">"), "</article>");
        assert_eq!(every_split("<p a=\"x>y\">"), "</p>");
    }

    /// The runs `feed` skips end where stepping byte by byte would have
    /// changed state: `feed` of the whole text and `step` of every byte agree,
    /// on every input of a markup-heavy alphabet (a fixed pseudo-random
    /// sample).
    #[test]
    fn skipping_runs_agrees_with_stepping_every_byte() {
        let alphabet = b"<>/\"'!-?[]= =abplisctyeSCRIPTDAgvm\n&";
        let mut seed: u64 = 0x5745_4952;
        for _ in 0..6000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 64) as usize;
            let text: Vec<u8> = (0..len)
                .map(|k| alphabet[((seed >> (k % 50)) as usize + k * 7) % alphabet.len()])
                .collect();
            let mut whole = OpenElements::page();
            whole.feed(&text);
            let mut bytes = OpenElements::page();
            for &b in &text {
                bytes.tokens.step(b, &mut bytes.tree);
            }
            assert_eq!(
                format!("{:?} {:?}", whole.tokens, whole.tree),
                format!("{:?} {:?}", bytes.tokens, bytes.tree),
                "{:?}",
                String::from_utf8_lossy(&text)
            );
        }
    }

    /// Held chunks give the same closing as fed ones, whether the
    /// fragment stays under the hold size or goes past it.
    #[test]
    fn held_chunks_close_as_fed_ones() {
        let small = ["<div><p title=\"x", "y\">te", "xt<!-- a"];
        let mut big: Vec<String> = vec!["<section>".to_owned()];
        big.extend((0..800).map(|k| format!("<p>para {k} with some text</p>")));
        big.push("<ul><li>open".to_owned());
        assert!(big.iter().map(String::len).sum::<usize>() > HOLD_BYTES);
        for parts in [small.map(str::to_owned).to_vec(), big] {
            let mut fed = OpenElements::new();
            let mut held = OpenElements::new();
            for p in &parts {
                fed.feed(p.as_bytes());
                held.hold(&Bytes::copy_from_slice(p.as_bytes()));
            }
            assert!(held.held_bytes <= HOLD_BYTES);
            assert_eq!(held.closing(true), fed.closing(true));
        }
    }
}
