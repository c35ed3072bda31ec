//! Which elements a fragment left open, so that a fragment cut short can
//! be closed (`close_open_elements`).
//!
//! A small tag tracker, not a parser: a byte-at-a-time state machine that
//! sees start and end tags, attribute quotes, comments, `<!…>`
//! declarations and the text of the raw text and escapable raw text
//! elements (`script`, `style`, `textarea`, `title`, `xmp`, `iframe`,
//! `noembed`, `noframes`, `noscript`; HTML §13.1.2, with scripting on;
//! everything after `plaintext`), and keeps a bounded stack of open element
//! names. Void elements (HTML §13.1.2) and
//! self-closing tags open nothing; an end tag closes the nearest open
//! element of its name and everything opened after it; a `li`, `p`, `dt`,
//! `dd`, `option`, `tr`, `td` or `th` start tag first closes an open
//! element of its kind at the top, as a browser would for the usual
//! markup.
//!
//! The same tracker tells the page where out-of-order content may go
//! (`crate::safe`): [`OpenElements::in_text`], [`OpenElements::depth`],
//! [`OpenElements::is_open`].
//!
//! When the fragment is cut, [`OpenElements::closing`] finishes the
//! construct it was cut inside (a quoted attribute value, a tag, a comment,
//! script text), so the page that follows is not swallowed by it (always
//! done), then closes the open elements, innermost first (only with
//! `close_open_elements`).

use bytes::Bytes;

/// Most open elements tracked; deeper ones are not closed.
const MAX_DEPTH: usize = 256;
/// Longest tag name kept, in bytes (longer names are cut: still matched).
const MAX_NAME: usize = 32;

/// Void elements (HTML §13.1.2): they have no end tag and open nothing.
fn is_void(name: &[u8]) -> bool {
    matches!(
        name,
        b"area"
            | b"base"
            | b"br"
            | b"col"
            | b"embed"
            | b"hr"
            | b"img"
            | b"input"
            | b"link"
            | b"meta"
            | b"param"
            | b"source"
            | b"track"
            | b"wbr"
    )
}

/// Elements whose content is text up to their end tag (HTML §13.1.2: the
/// raw text and escapable raw text elements, and those the tokenizer
/// treats so with scripting on, §13.2.6.4.7). A `/>` does not close them.
fn is_raw(name: &[u8]) -> bool {
    matches!(
        name,
        b"script"
            | b"style"
            | b"textarea"
            | b"title"
            | b"xmp"
            | b"iframe"
            | b"noembed"
            | b"noframes"
            | b"noscript"
    )
}

/// Start tags that close an open element of the same kind at the top.
fn closes_sibling(name: &[u8]) -> bool {
    matches!(
        name,
        b"li" | b"p" | b"dt" | b"dd" | b"option" | b"tr" | b"td" | b"th"
    )
}

/// A tag name, lowercased, cut at [`MAX_NAME`] bytes: kept inline, so
/// tracking tags allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Name {
    bytes: [u8; MAX_NAME],
    len: u8,
}

impl Name {
    const EMPTY: Name = Name {
        bytes: [0; MAX_NAME],
        len: 0,
    };

    fn push(&mut self, b: u8) {
        if usize::from(self.len) < MAX_NAME {
            self.bytes[usize::from(self.len)] = b;
            self.len += 1;
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Text,
    /// After `<`: the tag's name so far (`end`: after `</`).
    TagOpen {
        name: Name,
        end: bool,
    },
    /// After the name, up to `>`.
    InTag {
        name: Name,
        end: bool,
        quote: Option<u8>,
        slash: bool,
    },
    /// After `<!`, counting the dashes of a `<!--`.
    Bang {
        dashes: u8,
    },
    /// A `<!…>` declaration or bogus comment, up to `>`.
    Declaration,
    /// Inside `<!-- … -->`: dashes just seen.
    Comment {
        dashes: u8,
    },
    /// Inside the text of a raw text element ([`is_raw`]): bytes of
    /// `</name` matched so far.
    RawText {
        name: Name,
        matched: usize,
    },
    /// After `<plaintext>`: text to the end, nothing ends it.
    Plaintext,
}

/// Most bytes [`OpenElements::hold`] keeps unread, in bytes: a fragment
/// that ends whole under this size is never scanned.
const HOLD_BYTES: usize = 16 * 1024;

/// Tracks the elements opened and not yet closed.
#[derive(Debug)]
pub(crate) struct OpenElements {
    stack: Vec<Name>,
    mode: Mode,
    /// An element was opened past [`MAX_DEPTH`]: the stack is not exact.
    overflowed: bool,
    /// A `</template>` came with no `template` open: inside a `<template>`
    /// of the page's, it would close that one.
    stray_template_end: bool,
    /// Chunks taken by `hold` and not yet fed, and their length in bytes.
    held: Vec<Bytes>,
    held_bytes: usize,
}

impl OpenElements {
    pub(crate) fn new() -> OpenElements {
        OpenElements {
            stack: Vec::new(),
            mode: Mode::Text,
            overflowed: false,
            stray_template_end: false,
            held: Vec::new(),
            held_bytes: 0,
        }
    }

    /// Takes the next chunk of the fragment, to be read later.
    ///
    /// What a fragment left open matters only when it is cut, and most
    /// fragments end whole and small. So a chunk is held (a reference
    /// count, no copy) and fed only once more than [`HOLD_BYTES`] are
    /// held, or when [`OpenElements::closing`] asks; the result is the
    /// same as feeding every chunk at once.
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

    /// Looks at the next bytes of the fragment.
    ///
    /// Runs the state machine byte by byte only where a byte can change
    /// it; text, attribute values, the inside of a tag up to its next
    /// quote or `>`, and script text up to its next `<` are skipped with
    /// one search each. The result is the same as stepping every byte.
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        let mut i = 0;
        while i < chunk.len() {
            let rest = &chunk[i..];
            match &mut self.mode {
                Mode::Text => {
                    // Text is most of a fragment: skip to the next tag at once.
                    let Some(n) = memchr::memchr(b'<', rest) else {
                        return;
                    };
                    i += n + 1;
                    self.mode = Mode::TagOpen {
                        name: Name::EMPTY,
                        end: false,
                    };
                    continue;
                }
                Mode::TagOpen { name, .. } => {
                    // The tag's name: a letter, then letters, digits, `-`
                    // and `:`; the byte after it goes through `step`.
                    let mut n = 0;
                    for &b in rest {
                        let name_byte = b.is_ascii_alphabetic()
                            || (!name.is_empty() && (b.is_ascii_digit() || b == b'-' || b == b':'));
                        if !name_byte {
                            break;
                        }
                        name.push(b.to_ascii_lowercase());
                        n += 1;
                    }
                    i += n;
                    if n == rest.len() {
                        return;
                    }
                }
                Mode::InTag { quote: Some(q), .. } => {
                    // An attribute value: nothing in it counts but its quote.
                    let Some(n) = memchr::memchr(*q, rest) else {
                        return;
                    };
                    i += n;
                }
                Mode::InTag {
                    quote: None, slash, ..
                } => {
                    // Up to the next `>` or quote; `slash` is whether the
                    // last byte that is not white space was a `/`.
                    let n = memchr::memchr3(b'>', b'"', b'\'', rest).unwrap_or(rest.len());
                    if let Some(&last) = rest[..n].iter().rev().find(|b| !b.is_ascii_whitespace()) {
                        *slash = last == b'/';
                    }
                    i += n;
                    if n == rest.len() {
                        return;
                    }
                }
                Mode::RawText { matched: 0, .. } => {
                    let Some(n) = memchr::memchr(b'<', rest) else {
                        return;
                    };
                    i += n;
                }
                Mode::Plaintext => return,
                _ => {}
            }
            self.step(chunk[i]);
            i += 1;
        }
    }

    fn step(&mut self, b: u8) {
        self.mode = match self.mode {
            Mode::Text => {
                if b == b'<' {
                    Mode::TagOpen {
                        name: Name::EMPTY,
                        end: false,
                    }
                } else {
                    Mode::Text
                }
            }
            Mode::TagOpen { mut name, end } => {
                if name.is_empty() && !end && b == b'/' {
                    Mode::TagOpen { name, end: true }
                } else if name.is_empty() && !end && b == b'!' {
                    Mode::Bang { dashes: 0 }
                } else if b.is_ascii_alphabetic()
                    || (!name.is_empty() && (b.is_ascii_digit() || b == b'-' || b == b':'))
                {
                    name.push(b.to_ascii_lowercase());
                    Mode::TagOpen { name, end }
                } else if name.is_empty() {
                    // `a < b`, `</ >`: not a tag.
                    if b == b'<' {
                        Mode::TagOpen {
                            name: Name::EMPTY,
                            end: false,
                        }
                    } else {
                        Mode::Text
                    }
                } else if b == b'>' {
                    self.finish(name, end, false)
                } else {
                    Mode::InTag {
                        name,
                        end,
                        quote: None,
                        slash: b == b'/',
                    }
                }
            }
            Mode::InTag {
                name,
                end,
                quote,
                slash,
            } => match quote {
                Some(q) => Mode::InTag {
                    name,
                    end,
                    quote: (b != q).then_some(q),
                    slash: false,
                },
                None if b == b'>' => self.finish(name, end, slash),
                None if b == b'"' || b == b'\'' => Mode::InTag {
                    name,
                    end,
                    quote: Some(b),
                    slash: false,
                },
                None => Mode::InTag {
                    name,
                    end,
                    quote: None,
                    slash: b == b'/' || (slash && b.is_ascii_whitespace()),
                },
            },
            Mode::Bang { dashes } => match b {
                b'-' if dashes == 1 => Mode::Comment { dashes: 0 },
                b'-' => Mode::Bang { dashes: 1 },
                b'>' => Mode::Text,
                _ => Mode::Declaration,
            },
            Mode::Declaration => {
                if b == b'>' {
                    Mode::Text
                } else {
                    Mode::Declaration
                }
            }
            Mode::Comment { dashes } => match b {
                b'-' => Mode::Comment {
                    dashes: (dashes + 1).min(2),
                },
                b'>' if dashes >= 2 => Mode::Text,
                _ => Mode::Comment { dashes: 0 },
            },
            Mode::Plaintext => Mode::Plaintext,
            Mode::RawText { name, matched } => {
                let want = |k: usize| match k {
                    0 => b'<',
                    1 => b'/',
                    k => name.bytes[k - 2],
                };
                let next = if b.to_ascii_lowercase() == want(matched) {
                    matched + 1
                } else if b == b'<' {
                    1
                } else {
                    0
                };
                if next == usize::from(name.len) + 2 {
                    // `</script` seen: the rest of the end tag, up to `>`.
                    Mode::InTag {
                        name,
                        end: true,
                        quote: None,
                        slash: false,
                    }
                } else {
                    Mode::RawText {
                        name,
                        matched: next,
                    }
                }
            }
        };
    }

    /// A complete tag: updates the stack; the mode after it.
    fn finish(&mut self, name: Name, end: bool, self_closing: bool) -> Mode {
        if end {
            match self.stack.iter().rposition(|n| *n == name) {
                Some(at) => self.stack.truncate(at),
                None if name.as_slice() == b"template" => self.stray_template_end = true,
                None => {}
            }
            return Mode::Text;
        }
        if is_raw(name.as_slice()) {
            return Mode::RawText { name, matched: 0 };
        }
        if name.as_slice() == b"plaintext" {
            return Mode::Plaintext;
        }
        if self_closing || is_void(name.as_slice()) {
            return Mode::Text;
        }
        if closes_sibling(name.as_slice()) && self.stack.last().is_some_and(|top| *top == name) {
            self.stack.pop();
        }
        if self.stack.len() < MAX_DEPTH {
            self.stack.push(name);
        } else {
            self.overflowed = true;
        }
        Mode::Text
    }

    /// Whether the bytes fed so far end in text: not inside a tag, an
    /// attribute value, a comment, a declaration or a raw text element.
    /// (Held chunks are not looked at: [`OpenElements::feed_held`] first.)
    pub(crate) fn in_text(&self) -> bool {
        self.mode == Mode::Text
    }

    /// Open elements, outermost first; `None` once more were opened than
    /// the tracker keeps (then it cannot tell).
    pub(crate) fn depth(&self) -> Option<usize> {
        (!self.overflowed).then_some(self.stack.len())
    }

    /// Whether an element named one of `names` (lower case) is open.
    pub(crate) fn is_open(&self, names: &[&[u8]]) -> bool {
        self.stack.iter().any(|n| names.contains(&n.as_slice()))
    }

    /// Whether a `</template>` came that closed no `template` of its own.
    pub(crate) fn stray_template_end(&self) -> bool {
        self.stray_template_end
    }

    /// The bytes that end what the fragment was cut inside of (a quoted
    /// value, a tag, a comment, script text); with `elements`, then the end
    /// tags of the open elements, innermost first.
    pub(crate) fn closing(mut self, elements: bool) -> Vec<u8> {
        self.feed_held();
        let mut out = Vec::new();
        match std::mem::replace(&mut self.mode, Mode::Text) {
            Mode::Text => {}
            Mode::TagOpen { name, end } => {
                if !name.is_empty() {
                    out.push(b'>');
                    let _ = self.finish(name, end, false);
                }
            }
            Mode::InTag {
                name,
                end,
                quote,
                slash,
            } => {
                if let Some(q) = quote {
                    out.push(q);
                }
                out.push(b'>');
                let _ = self.finish(name, end, slash && quote.is_none());
            }
            Mode::Bang { .. } | Mode::Declaration => out.push(b'>'),
            Mode::Comment { .. } => out.extend_from_slice(b"-->"),
            Mode::RawText { name, .. } => {
                // A half-written `</scr` is harmless: it is not followed by
                // `>` or a space, so the end tag below is the one that counts.
                push_end(&mut out, name.as_slice());
            }
            // Nothing ends it.
            Mode::Plaintext => {}
        }
        if elements {
            for name in self.stack.iter().rev() {
                push_end(&mut out, name.as_slice());
            }
        }
        out
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
        assert_eq!(every_split("<div><plaintext></div><p>"), "</div>");
    }

    #[test]
    fn queries_tell_text_depth_open_names_and_stray_template_ends() {
        let mut t = OpenElements::new();
        t.feed(b"<body><div class=\"a\">");
        assert!(t.in_text());
        assert_eq!(t.depth(), Some(2));
        assert!(t.is_open(&[b"body"]) && !t.is_open(&[b"template"]));
        t.feed(b"<p title=\"x");
        assert!(!t.in_text());
        t.feed(b"\"><template>x</template></template>");
        assert!(t.in_text() && t.stray_template_end());
        let mut deep = OpenElements::new();
        deep.feed("<i>".repeat(MAX_DEPTH + 1).as_bytes());
        assert_eq!(deep.depth(), None);
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
        let alphabet = b"<>/\"'!- =abpliscrtyeSCRIPT\n";
        let mut seed: u64 = 0x5745_4952;
        for _ in 0..3000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 48) as usize;
            let text: Vec<u8> = (0..len)
                .map(|k| alphabet[((seed >> (k % 50)) as usize + k * 7) % alphabet.len()])
                .collect();
            let mut whole = OpenElements::new();
            whole.feed(&text);
            let mut bytes = OpenElements::new();
            for &b in &text {
                bytes.step(b);
            }
            assert_eq!(
                whole.mode,
                bytes.mode,
                "{:?}",
                String::from_utf8_lossy(&text)
            );
            assert_eq!(
                whole.stack,
                bytes.stack,
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
