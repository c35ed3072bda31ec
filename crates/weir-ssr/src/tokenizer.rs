//! The HTML tokenizer's states (WHATWG HTML §13.2.5), byte by byte, as far
//! as they decide where markup ends: tags and their attributes, comments
//! and bogus comments, DOCTYPEs, CDATA sections, and the text of RCDATA,
//! RAWTEXT, script data (with its escaped and double-escaped states) and
//! PLAINTEXT. It emits no tokens: a complete tag goes to the
//! [`Tree`], which says what state its text is in.
//!
//! Bytes are read as they come, one state per byte, with the spec's
//! "reconsume" done in place. Only ASCII bytes change states, so the
//! result is the tokenizer's for UTF-8 and for every encoding in which a
//! byte below 0x80 always stands for its ASCII character (see
//! `crate::charset`). Carriage returns count as white space (the input
//! stream turns them into line feeds, §13.2.3.5). Character references
//! are not followed: they never end a construct (`crate::safe` looks at
//! the text's tail for them).
//!
//! States are folded where the spec's differ only in what they emit:
//! the comment's less-than-sign states end where counting dashes does
//! (`<!--` inside a comment leaves the comment end state either way), and
//! a DOCTYPE, like a bogus comment, ends at its first `>` (every DOCTYPE
//! state ends there).
//!
//! A *guarded* tokenizer (for an `async` fragment's content, `crate::content`)
//! does not apply some tags and says where they were ([`Refusal`]):
//! a `</template>` that would close Weir's own template is skipped, and a
//! start tag after which the tracker could not go on (PLAINTEXT, or one
//! that makes the tree uncertain) stops the content there.

use crate::name::Name;
use crate::tree::{StartTag, TextMode, Tree};

/// HTML white space as the tokenizer sees it (§13.2.5: tab, line feed,
/// form feed, space; carriage return is a line feed by then).
fn ws(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')
}

/// Which quote an attribute value is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    Double,
    Single,
    Unquoted,
}

/// The bytes after `<!`, while they may still start `--`, `DOCTYPE` or
/// `[CDATA[` (§13.2.5.42).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decl {
    buf: [u8; 7],
    len: u8,
}

/// What the bytes after `<!` are.
enum DeclIs {
    Prefix,
    Comment,
    Doctype,
    Cdata,
    Bogus,
}

impl Decl {
    const EMPTY: Decl = Decl {
        buf: [0; 7],
        len: 0,
    };

    fn push(mut self, b: u8) -> (Decl, DeclIs) {
        let n = usize::from(self.len);
        if n < self.buf.len() {
            self.buf[n] = b;
            self.len += 1;
        }
        let got = &self.buf[..usize::from(self.len)];
        let is = if b"--".starts_with(got) {
            if got.len() == 2 {
                DeclIs::Comment
            } else {
                DeclIs::Prefix
            }
        } else if got.len() <= 7 && b"doctype"[..got.len()].eq_ignore_ascii_case(got) {
            if got.len() == 7 {
                DeclIs::Doctype
            } else {
                DeclIs::Prefix
            }
        } else if b"[CDATA[".starts_with(got) {
            if got.len() == 7 {
                DeclIs::Cdata
            } else {
                DeclIs::Prefix
            }
        } else {
            DeclIs::Bogus
        };
        (self, is)
    }
}

/// Letters seen so far of an end tag name (or a script's temporary
/// buffer), and whether they still spell the start of the one wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Match {
    n: u8,
    ok: bool,
}

impl Match {
    const START: Match = Match { n: 0, ok: true };

    fn push(self, b: u8, want: &[u8]) -> Match {
        Match {
            n: self.n.saturating_add(1),
            ok: self.ok && want.get(usize::from(self.n)) == Some(&b.to_ascii_lowercase()),
        }
    }

    fn is(self, want: &[u8]) -> bool {
        self.ok && usize::from(self.n) == want.len()
    }
}

/// States inside the text of a raw element (§13.2.5.2–3 and 5.9–5.31).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raw {
    Text,
    Lt,
    EndOpen,
    EndName(Match),
    // Script data only.
    EscapeStart,
    EscapeStartDash,
    Escaped,
    EscapedDash,
    EscapedDashDash,
    EscapedLt,
    EscapedEndOpen,
    EscapedEndName(Match),
    DoubleEscapeStart(Match),
    DoubleEscaped,
    DoubleEscapedDash,
    DoubleEscapedDashDash,
    DoubleEscapedLt,
    DoubleEscapeEnd(Match),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Data,
    TagOpen,
    EndTagOpen,
    TagName,
    BeforeAttrName,
    AttrName,
    AfterAttrName,
    BeforeAttrValue,
    AttrValue(Quote),
    AfterAttrValueQuoted,
    SelfClosing,
    Decl(Decl),
    BogusComment,
    CommentStart,
    CommentStartDash,
    Comment,
    CommentEndDash,
    CommentEnd,
    CommentEndBang,
    Cdata,
    CdataBracket,
    CdataEnd,
    Raw(Raw),
    Plaintext,
    /// A guarded tokenizer stopped: nothing after counts.
    Stopped,
}

/// The next state, and whether the byte is to be read again in it.
enum Next {
    To(State),
    Again(State),
}

/// A tag a guarded tokenizer did not apply; positions count the bytes
/// fed since the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The bytes `from..to` (a whole tag) are to be left out.
    Skip { from: u64, to: u64 },
    /// Everything from `at` on is to be left out.
    Stop { at: u64 },
}

/// An attribute value the tracker reads (a few, on a few tags).
#[derive(Debug, Clone, Copy)]
struct Value {
    buf: [u8; 64],
    len: u8,
    /// Longer than `buf`.
    long: bool,
    /// Holds a `&`: a character reference, not decoded here.
    amp: bool,
}

impl Value {
    const EMPTY: Value = Value {
        buf: [0; 64],
        len: 0,
        long: false,
        amp: false,
    };

    fn push(&mut self, b: u8) {
        if b == b'&' {
            self.amp = true;
        }
        let n = usize::from(self.len);
        if n < self.buf.len() {
            self.buf[n] = b;
            self.len += 1;
        } else {
            self.long = true;
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

/// Which attribute value is read: `encoding` on `annotation-xml` (does it
/// make an HTML integration point, §13.2.6.5), and `charset`,
/// `http-equiv` and `content` on `meta` (does it declare the page's
/// encoding, §4.2.5.4).
#[derive(Debug, Clone, Copy)]
enum Which {
    Encoding,
    Charset,
    HttpEquiv,
    Content,
}

/// The attribute values read on the tag being read; the first attribute
/// of a name counts (§13.2.5.33).
#[derive(Debug, Clone, Copy)]
struct Attrs {
    values: [Option<Value>; 4],
    reading: Option<Which>,
}

impl Attrs {
    const NONE: Attrs = Attrs {
        values: [None; 4],
        reading: None,
    };

    fn get(&self, w: Which) -> Option<&Value> {
        self.values[w as usize].as_ref()
    }

    /// `encoding` names HTML: `Some(true)`; `None` when it holds a
    /// character reference.
    fn html_encoding(&self) -> Option<bool> {
        let Some(v) = self.get(Which::Encoding) else {
            return Some(false);
        };
        if v.amp {
            return None;
        }
        let bytes = v.bytes();
        Some(
            !v.long
                && (bytes.eq_ignore_ascii_case(b"text/html")
                    || bytes.eq_ignore_ascii_case(b"application/xhtml+xml")),
        )
    }

    /// What a `meta` says of the page's encoding (§4.2.5.4, and the
    /// "algorithm for extracting a character encoding from a meta
    /// element" for `http-equiv="content-type"`).
    fn meta_charset(&self) -> Charset {
        let readable = |v: &Value, label: &[u8]| {
            if v.amp || v.long || crate::charset::meta_breaks_bytes(label) {
                Charset::Unreadable
            } else {
                Charset::Readable
            }
        };
        if let Some(v) = self.get(Which::Charset) {
            return readable(v, v.bytes().trim_ascii());
        }
        let content_type = self
            .get(Which::HttpEquiv)
            .is_some_and(|v| v.bytes().trim_ascii().eq_ignore_ascii_case(b"content-type"));
        match self.get(Which::Content) {
            Some(v) if content_type => match crate::charset::meta_label(v.bytes()) {
                Some(label) => readable(v, label),
                None if v.amp || v.long => Charset::Unreadable,
                None => Charset::None,
            },
            _ => Charset::None,
        }
    }
}

/// What a start tag declares of the page's encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Charset {
    /// Nothing.
    None,
    /// One whose bytes Weir reads as the browser does (or one browsers
    /// ignore).
    Readable,
    /// One whose bytes Weir cannot read (see `crate::charset`), or one it
    /// cannot tell (a character reference in the value, a value too long).
    Unreadable,
}

/// The tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct Tokenizer {
    state: State,
    /// The tag being read.
    tag: Name,
    end: bool,
    self_closing: bool,
    /// The attribute name being read.
    attr: Name,
    font_attrs: bool,
    attrs: Attrs,
    /// The raw element whose text this is: its mode and name.
    raw_mode: TextMode,
    raw_name: Name,
    /// Bytes fed so far.
    pos: u64,
    /// Where the tag being read started (its `<`).
    tag_start: u64,
    /// The tag being read started in the data state (not a raw text end
    /// tag).
    tag_in_data: bool,
    guarded: bool,
    refusals: Vec<Refusal>,
}

impl Tokenizer {
    /// A tokenizer in the data state; `guarded`: see the module.
    pub(crate) fn new(guarded: bool) -> Tokenizer {
        Tokenizer {
            state: State::Data,
            tag: Name::EMPTY,
            end: false,
            self_closing: false,
            attr: Name::EMPTY,
            font_attrs: false,
            attrs: Attrs::NONE,
            raw_mode: TextMode::Data,
            raw_name: Name::EMPTY,
            pos: 0,
            tag_start: 0,
            tag_in_data: false,
            guarded,
            refusals: Vec::new(),
        }
    }

    /// In the data state: outside any tag, comment, raw text and the like.
    pub(crate) fn in_data(&self) -> bool {
        self.state == State::Data
    }

    /// Bytes fed so far.
    pub(crate) fn pos(&self) -> u64 {
        self.pos
    }

    /// Where the start or end tag being read began, if one is: a `<` in
    /// the data state and what may still be a tag after it.
    pub(crate) fn tag_from(&self) -> Option<u64> {
        let in_tag = matches!(
            self.state,
            State::TagOpen
                | State::EndTagOpen
                | State::TagName
                | State::BeforeAttrName
                | State::AttrName
                | State::AfterAttrName
                | State::BeforeAttrValue
                | State::AttrValue(_)
                | State::AfterAttrValueQuoted
                | State::SelfClosing
        );
        (in_tag && self.tag_in_data).then_some(self.tag_start)
    }

    /// Forgets a tag still being read, or a stop: back in the data state,
    /// as right before that tag's `<` (its bytes are not to go out).
    pub(crate) fn rewind_to_data(&mut self) {
        if self.tag_from().is_some() || self.state == State::Stopped {
            self.state = State::Data;
        }
    }

    /// The tags refused since the last call (guarded only).
    pub(crate) fn take_refusals(&mut self) -> Vec<Refusal> {
        std::mem::take(&mut self.refusals)
    }

    /// Whether a guarded tokenizer stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.state == State::Stopped
    }

    /// Stops now: nothing more counts (a guarded tokenizer's content is cut
    /// here).
    pub(crate) fn stop(&mut self) {
        self.state = State::Stopped;
    }

    /// Reads `chunk`. Runs that cannot change the state (text up to the
    /// next `<`, a comment up to its next `-`, a quoted value up to its
    /// quote, …) are skipped with one search each; the result is the same
    /// as [`Tokenizer::step`] on every byte.
    pub(crate) fn feed(&mut self, chunk: &[u8], tree: &mut Tree) {
        let mut i = 0;
        while i < chunk.len() {
            let rest = &chunk[i..];
            let skip = match self.state {
                State::Data => {
                    let n = memchr::memchr(b'<', rest).unwrap_or(rest.len());
                    if tree.wants_text() && rest[..n].iter().any(|&b| !ws(b)) {
                        tree.text();
                    }
                    n
                }
                State::Raw(Raw::Text) => memchr::memchr(b'<', rest).unwrap_or(rest.len()),
                State::Raw(Raw::Escaped | Raw::DoubleEscaped) => {
                    memchr::memchr2(b'-', b'<', rest).unwrap_or(rest.len())
                }
                State::Comment => memchr::memchr(b'-', rest).unwrap_or(rest.len()),
                State::BogusComment => memchr::memchr(b'>', rest).unwrap_or(rest.len()),
                State::Cdata => memchr::memchr(b']', rest).unwrap_or(rest.len()),
                State::AttrValue(Quote::Double) if self.attrs.reading.is_none() => {
                    memchr::memchr(b'"', rest).unwrap_or(rest.len())
                }
                State::AttrValue(Quote::Single) if self.attrs.reading.is_none() => {
                    memchr::memchr(b'\'', rest).unwrap_or(rest.len())
                }
                State::AttrValue(Quote::Unquoted) if self.attrs.reading.is_none() => rest
                    .iter()
                    .position(|&b| ws(b) || b == b'>')
                    .unwrap_or(rest.len()),
                State::TagName => {
                    // The name runs to white space, `/` or `>`.
                    let n = rest
                        .iter()
                        .position(|&b| ws(b) || b == b'/' || b == b'>')
                        .unwrap_or(rest.len());
                    for &b in &rest[..n] {
                        self.tag.push(b);
                    }
                    n
                }
                State::AttrName => {
                    let n = rest
                        .iter()
                        .position(|&b| ws(b) || b == b'/' || b == b'>' || b == b'=')
                        .unwrap_or(rest.len());
                    for &b in &rest[..n] {
                        self.attr.push(b);
                    }
                    n
                }
                State::Plaintext | State::Stopped => rest.len(),
                _ => 0,
            };
            self.pos += skip as u64;
            i += skip;
            if let Some(&b) = chunk.get(i) {
                self.step(b, tree);
                i += 1;
            }
        }
    }

    /// Reads one byte.
    pub(crate) fn step(&mut self, b: u8, tree: &mut Tree) {
        loop {
            match self.next(b, tree) {
                Next::To(s) => {
                    self.state = s;
                    break;
                }
                Next::Again(s) => self.state = s,
            }
        }
        self.pos += 1;
    }

    fn begin_tag(&mut self, end: bool, first: u8) -> State {
        self.tag = Name::EMPTY;
        self.tag.push(first);
        self.end = end;
        self.self_closing = false;
        self.font_attrs = false;
        self.attrs = Attrs::NONE;
        State::TagName
    }

    fn begin_attr(&mut self) {
        self.attr = Name::EMPTY;
        self.attrs.reading = None;
    }

    /// The attribute's name is complete.
    fn attr_named(&mut self) {
        if self.end {
            return;
        }
        if self.tag.is(b"font") && self.attr.is_any(&[b"color", b"face", b"size"]) {
            self.font_attrs = true;
        }
        let which = if self.tag.is(b"annotation-xml") && self.attr.is(b"encoding") {
            Some(Which::Encoding)
        } else if self.tag.is(b"meta") {
            if self.attr.is(b"charset") {
                Some(Which::Charset)
            } else if self.attr.is(b"http-equiv") {
                Some(Which::HttpEquiv)
            } else if self.attr.is(b"content") {
                Some(Which::Content)
            } else {
                None
            }
        } else {
            None
        };
        if let Some(w) = which
            && self.attrs.values[w as usize].is_none()
        {
            // An attribute without a value has the empty one.
            self.attrs.values[w as usize] = Some(Value::EMPTY);
            self.attrs.reading = Some(w);
        }
    }

    fn value_byte(&mut self, b: u8) {
        if let Some(w) = self.attrs.reading
            && let Some(v) = self.attrs.values[w as usize].as_mut()
        {
            v.push(b);
        }
    }

    fn value_done(&mut self) {
        self.attrs.reading = None;
    }

    fn next(&mut self, b: u8, tree: &mut Tree) -> Next {
        use Next::{Again, To};
        match self.state {
            State::Data => {
                if b == b'<' {
                    self.tag_start = self.pos;
                    self.tag_in_data = true;
                    return To(State::TagOpen);
                }
                if !ws(b) {
                    tree.text();
                }
                To(State::Data)
            }
            State::TagOpen => match b {
                b'!' => To(State::Decl(Decl::EMPTY)),
                b'/' => To(State::EndTagOpen),
                // A processing instruction is a bogus comment (§13.2.5.6).
                b'?' => To(State::BogusComment),
                _ if b.is_ascii_alphabetic() => To(self.begin_tag(false, b)),
                _ => {
                    // The `<` was text.
                    tree.text();
                    Again(State::Data)
                }
            },
            State::EndTagOpen => match b {
                _ if b.is_ascii_alphabetic() => To(self.begin_tag(true, b)),
                // `</>` is dropped.
                b'>' => To(State::Data),
                // `</ x>`, `</1>`: a bogus comment (§13.2.5.7).
                _ => To(State::BogusComment),
            },
            State::TagName => match b {
                _ if ws(b) => To(State::BeforeAttrName),
                b'/' => To(State::SelfClosing),
                b'>' => To(self.emit_tag(tree)),
                _ => {
                    self.tag.push(b);
                    To(State::TagName)
                }
            },
            State::BeforeAttrName => match b {
                _ if ws(b) => To(State::BeforeAttrName),
                b'/' | b'>' => Again(State::AfterAttrName),
                b'=' => {
                    self.begin_attr();
                    self.attr.push(b);
                    To(State::AttrName)
                }
                _ => {
                    self.begin_attr();
                    Again(State::AttrName)
                }
            },
            State::AttrName => match b {
                _ if ws(b) || b == b'/' || b == b'>' => {
                    self.attr_named();
                    Again(State::AfterAttrName)
                }
                b'=' => {
                    self.attr_named();
                    To(State::BeforeAttrValue)
                }
                // `"`, `'` and `<` are part of the name (§13.2.5.33).
                _ => {
                    self.attr.push(b);
                    To(State::AttrName)
                }
            },
            State::AfterAttrName => match b {
                _ if ws(b) => To(State::AfterAttrName),
                b'/' => To(State::SelfClosing),
                b'=' => To(State::BeforeAttrValue),
                b'>' => To(self.emit_tag(tree)),
                _ => {
                    self.begin_attr();
                    Again(State::AttrName)
                }
            },
            State::BeforeAttrValue => match b {
                _ if ws(b) => To(State::BeforeAttrValue),
                b'"' => To(State::AttrValue(Quote::Double)),
                b'\'' => To(State::AttrValue(Quote::Single)),
                b'>' => {
                    self.value_done();
                    To(self.emit_tag(tree))
                }
                _ => Again(State::AttrValue(Quote::Unquoted)),
            },
            State::AttrValue(q) => {
                let ends = match q {
                    Quote::Double => b == b'"',
                    Quote::Single => b == b'\'',
                    Quote::Unquoted => ws(b) || b == b'>',
                };
                if !ends {
                    self.value_byte(b);
                    return To(State::AttrValue(q));
                }
                self.value_done();
                match q {
                    Quote::Double | Quote::Single => To(State::AfterAttrValueQuoted),
                    Quote::Unquoted if b == b'>' => To(self.emit_tag(tree)),
                    Quote::Unquoted => To(State::BeforeAttrName),
                }
            }
            State::AfterAttrValueQuoted => match b {
                _ if ws(b) => To(State::BeforeAttrName),
                b'/' => To(State::SelfClosing),
                b'>' => To(self.emit_tag(tree)),
                _ => Again(State::BeforeAttrName),
            },
            State::SelfClosing => {
                if b == b'>' {
                    self.self_closing = true;
                    To(self.emit_tag(tree))
                } else {
                    Again(State::BeforeAttrName)
                }
            }
            State::Decl(d) => {
                let (d, is) = d.push(b);
                match is {
                    DeclIs::Prefix => To(State::Decl(d)),
                    DeclIs::Comment => To(State::CommentStart),
                    DeclIs::Doctype => To(State::BogusComment),
                    DeclIs::Cdata if tree.foreign_current() => To(State::Cdata),
                    DeclIs::Cdata if tree.foreign_open() => {
                        // A browser that closed an element the tracker
                        // keeps may have a foreign current node, where
                        // this opens CDATA that only `]]>` ends.
                        tree.give_up();
                        if self.guarded {
                            self.refusals.push(Refusal::Stop { at: self.tag_start });
                            To(State::Stopped)
                        } else {
                            To(State::BogusComment)
                        }
                    }
                    DeclIs::Cdata => To(State::BogusComment),
                    // The bytes so far start a bogus comment; none is `>`.
                    DeclIs::Bogus => Again(State::BogusComment),
                }
            }
            State::BogusComment => To(if b == b'>' {
                State::Data
            } else {
                State::BogusComment
            }),
            State::CommentStart => match b {
                b'-' => To(State::CommentStartDash),
                b'>' => To(State::Data),
                _ => Again(State::Comment),
            },
            State::CommentStartDash => match b {
                b'-' => To(State::CommentEnd),
                b'>' => To(State::Data),
                _ => Again(State::Comment),
            },
            State::Comment => To(if b == b'-' {
                State::CommentEndDash
            } else {
                State::Comment
            }),
            State::CommentEndDash => match b {
                b'-' => To(State::CommentEnd),
                _ => Again(State::Comment),
            },
            State::CommentEnd => match b {
                b'>' => To(State::Data),
                b'!' => To(State::CommentEndBang),
                b'-' => To(State::CommentEnd),
                _ => Again(State::Comment),
            },
            State::CommentEndBang => match b {
                b'-' => To(State::CommentEndDash),
                b'>' => To(State::Data),
                _ => Again(State::Comment),
            },
            State::Cdata => To(if b == b']' {
                State::CdataBracket
            } else {
                State::Cdata
            }),
            State::CdataBracket => match b {
                b']' => To(State::CdataEnd),
                _ => Again(State::Cdata),
            },
            State::CdataEnd => match b {
                b']' => To(State::CdataEnd),
                b'>' => To(State::Data),
                _ => Again(State::Cdata),
            },
            State::Raw(r) => self.raw(r, b, tree),
            State::Plaintext => To(State::Plaintext),
            State::Stopped => To(State::Stopped),
        }
    }

    /// The states of raw text.
    fn raw(&mut self, r: Raw, b: u8, tree: &mut Tree) -> Next {
        use Next::{Again, To};
        let script = self.raw_mode == TextMode::Script;
        let raw = |r: Raw| State::Raw(r);
        let alpha = b.is_ascii_alphabetic();
        let delimiter = ws(b) || b == b'/' || b == b'>';
        match r {
            Raw::Text => To(raw(if b == b'<' { Raw::Lt } else { Raw::Text })),
            Raw::Lt => match b {
                b'/' => To(raw(Raw::EndOpen)),
                b'!' if script => To(raw(Raw::EscapeStart)),
                _ => Again(raw(Raw::Text)),
            },
            Raw::EndOpen => {
                if alpha {
                    Again(raw(Raw::EndName(Match::START)))
                } else {
                    Again(raw(Raw::Text))
                }
            }
            Raw::EndName(m) | Raw::EscapedEndName(m) => {
                let back = if matches!(r, Raw::EndName(_)) {
                    Raw::Text
                } else {
                    Raw::Escaped
                };
                if alpha {
                    let m = m.push(b, self.raw_name.as_slice());
                    return To(raw(match r {
                        Raw::EndName(_) => Raw::EndName(m),
                        _ => Raw::EscapedEndName(m),
                    }));
                }
                if delimiter && m.is(self.raw_name.as_slice()) {
                    // An appropriate end tag (§13.2.5.11): read as a tag.
                    self.tag = self.raw_name;
                    self.end = true;
                    self.self_closing = false;
                    self.tag_in_data = false;
                    return match b {
                        b'>' => To(self.emit_tag(tree)),
                        b'/' => To(State::SelfClosing),
                        _ => To(State::BeforeAttrName),
                    };
                }
                Again(raw(back))
            }
            Raw::EscapeStart => match b {
                b'-' => To(raw(Raw::EscapeStartDash)),
                _ => Again(raw(Raw::Text)),
            },
            Raw::EscapeStartDash => match b {
                b'-' => To(raw(Raw::EscapedDashDash)),
                _ => Again(raw(Raw::Text)),
            },
            Raw::Escaped => To(raw(match b {
                b'-' => Raw::EscapedDash,
                b'<' => Raw::EscapedLt,
                _ => Raw::Escaped,
            })),
            Raw::EscapedDash => To(raw(match b {
                b'-' => Raw::EscapedDashDash,
                b'<' => Raw::EscapedLt,
                _ => Raw::Escaped,
            })),
            Raw::EscapedDashDash => To(raw(match b {
                b'-' => Raw::EscapedDashDash,
                b'<' => Raw::EscapedLt,
                b'>' => Raw::Text,
                _ => Raw::Escaped,
            })),
            Raw::EscapedLt => match b {
                b'/' => To(raw(Raw::EscapedEndOpen)),
                _ if alpha => Again(raw(Raw::DoubleEscapeStart(Match::START))),
                _ => Again(raw(Raw::Escaped)),
            },
            Raw::EscapedEndOpen => {
                if alpha {
                    Again(raw(Raw::EscapedEndName(Match::START)))
                } else {
                    Again(raw(Raw::Escaped))
                }
            }
            Raw::DoubleEscapeStart(m) => {
                if delimiter {
                    To(raw(if m.is(b"script") {
                        Raw::DoubleEscaped
                    } else {
                        Raw::Escaped
                    }))
                } else if alpha {
                    To(raw(Raw::DoubleEscapeStart(m.push(b, b"script"))))
                } else {
                    Again(raw(Raw::Escaped))
                }
            }
            Raw::DoubleEscaped => To(raw(match b {
                b'-' => Raw::DoubleEscapedDash,
                b'<' => Raw::DoubleEscapedLt,
                _ => Raw::DoubleEscaped,
            })),
            Raw::DoubleEscapedDash => To(raw(match b {
                b'-' => Raw::DoubleEscapedDashDash,
                b'<' => Raw::DoubleEscapedLt,
                _ => Raw::DoubleEscaped,
            })),
            Raw::DoubleEscapedDashDash => To(raw(match b {
                b'-' => Raw::DoubleEscapedDashDash,
                b'<' => Raw::DoubleEscapedLt,
                b'>' => Raw::Text,
                _ => Raw::DoubleEscaped,
            })),
            Raw::DoubleEscapedLt => match b {
                b'/' => To(raw(Raw::DoubleEscapeEnd(Match::START))),
                _ => Again(raw(Raw::DoubleEscaped)),
            },
            Raw::DoubleEscapeEnd(m) => {
                if delimiter {
                    To(raw(if m.is(b"script") {
                        Raw::Escaped
                    } else {
                        Raw::DoubleEscaped
                    }))
                } else if alpha {
                    To(raw(Raw::DoubleEscapeEnd(m.push(b, b"script"))))
                } else {
                    Again(raw(Raw::DoubleEscaped))
                }
            }
        }
    }

    /// A complete tag: the tree takes it (unless a guard refuses it); the
    /// state after it.
    fn emit_tag(&mut self, tree: &mut Tree) -> State {
        let from = self.tag_start;
        if self.end {
            let plan = tree.plan_end(&self.tag);
            if self.guarded && plan.stray_template && self.tag_in_data {
                self.refusals.push(Refusal::Skip {
                    from,
                    to: self.pos + 1,
                });
                return State::Data;
            }
            if self.guarded && plan.uncertain {
                self.refusals.push(Refusal::Stop { at: from });
                return State::Stopped;
            }
            tree.apply_end(&plan);
            self.raw_mode = TextMode::Data;
            return State::Data;
        }
        let charset = if self.tag.is(b"meta") {
            self.attrs.meta_charset()
        } else {
            Charset::None
        };
        let plan = tree.plan_start(&StartTag {
            name: self.tag,
            self_closing: self.self_closing,
            font_attrs: self.font_attrs,
            html_encoding: self.attrs.html_encoding(),
            charset,
        });
        if self.guarded && (plan.uncertain || plan.mode == TextMode::Plaintext) {
            self.refusals.push(Refusal::Stop { at: from });
            return State::Stopped;
        }
        if self.guarded && charset != Charset::None {
            // A page whose `Content-Type` names no charset takes the
            // encoding from a `meta` in its first 1024 bytes wherever it
            // stands (WHATWG HTML §13.2.3.2): async content declares none.
            self.refusals.push(Refusal::Skip {
                from,
                to: self.pos + 1,
            });
            return State::Data;
        }
        tree.apply_start(&plan);
        self.raw_mode = plan.mode;
        match plan.mode {
            TextMode::Data => State::Data,
            TextMode::Plaintext => State::Plaintext,
            TextMode::Rcdata | TextMode::Rawtext | TextMode::Script => {
                self.raw_name = self.tag;
                State::Raw(Raw::Text)
            }
        }
    }

    /// The bytes that end the construct the input stopped inside of (a
    /// tag, a quoted value, a comment, CDATA, raw text), so that what
    /// follows is read in the data state; `None` inside PLAINTEXT (nothing
    /// ends it) or once stopped.
    pub(crate) fn finish(&self) -> Option<Vec<u8>> {
        let end_raw = |prefix: &[u8]| {
            let mut out = prefix.to_vec();
            out.extend_from_slice(b"</");
            out.extend_from_slice(self.raw_name.as_slice());
            out.push(b'>');
            out
        };
        Some(match self.state {
            // A lone `<` is text before any `<` that follows.
            State::Data | State::TagOpen => Vec::new(),
            State::EndTagOpen
            | State::TagName
            | State::BeforeAttrName
            | State::AttrName
            | State::AfterAttrName
            | State::BeforeAttrValue
            | State::AttrValue(Quote::Unquoted)
            | State::AfterAttrValueQuoted
            | State::SelfClosing
            | State::Decl(_)
            | State::BogusComment => b">".to_vec(),
            State::AttrValue(Quote::Double) => b"\">".to_vec(),
            State::AttrValue(Quote::Single) => b"'>".to_vec(),
            // `-->` ends a comment from each of its states.
            State::CommentStart
            | State::CommentStartDash
            | State::Comment
            | State::CommentEndDash
            | State::CommentEnd
            | State::CommentEndBang => b"-->".to_vec(),
            State::Cdata | State::CdataBracket | State::CdataEnd => b"]]>".to_vec(),
            // `</script>` ends script data from the escaped states too; a
            // half-written `</scr` or `<!-` before it is text.
            State::Raw(
                Raw::DoubleEscaped
                | Raw::DoubleEscapedDash
                | Raw::DoubleEscapedDashDash
                | Raw::DoubleEscapedLt
                | Raw::DoubleEscapeEnd(_),
            ) => end_raw(b"-->"),
            State::Raw(_) => end_raw(b""),
            State::Plaintext | State::Stopped => return None,
        })
    }
}
