//! The template scanner: finds include tags as the template streams.
//!
//! [`Scanner`] takes the template as chunks of [`Bytes`] split anywhere (one
//! byte at a time included) and appends [`Piece`]s in document order. It is
//! not an HTML parser: it looks at each `<`, decides from a few bytes what
//! starts there, and passes everything it does not care about through.
//! Text pieces are slices of the input chunks (no copy), except a tag or a
//! possible tag start that straddles a chunk boundary: those few bytes are
//! held in a small carry buffer until the next chunk decides them.
//!
//! # What it recognises
//!
//! Tag names are ASCII case-insensitive.
//!
//! | written | result |
//! |---|---|
//! | `<fragment …>fallback</fragment>`, `<fragment …/>` | [`Piece::Include`], [`Syntax::Fragment`]; the markup between the tags is [`Include::fallback`] (raw, not scanned; a nested `<fragment` is fallback text) |
//! | `<esi:include …/>`, `<esi:include …>` | [`Piece::Include`], [`Syntax::Esi`], emitted at the tag's `>`; what follows a non-self-closing tag is scanned as usual, and every `</esi:include>` end tag is removed |
//! | `<esi:remove>…</esi:remove>` | removed, content and all (not scanned) |
//! | `<!--esi … -->` | `<!--esi` and the first `-->` after it removed; the content kept and scanned |
//! | `<!-- … -->` | text, not scanned (as in HTML, `<!-->` and `<!--->` are whole comments) |
//! | `<script …>…</script>`, `<style …>…</style>` | text, not scanned up to the first `</script` / `</style` |
//! | the first `</body` end tag outside those | [`Piece::BodyEnd`] right before the text that holds it |
//! | any other tag | text; it ends at a `>` outside quoted attribute values, so a `<fragment` or `</body>` inside a quoted value is not taken (see below) |
//! | anything else (`a < b`, `<!DOCTYPE html>`) | text |
//!
//! Where a tag ends: an include tag is read by the HTML tokenizer's
//! attribute rules. Any other tag ends at its first `>` when no `'` and an
//! even number of `"` come before it (one pass of 8-byte words over the
//! tag), and by the tokenizer's rules otherwise; the two differ only for
//! a stray `"` (in an attribute name or unquoted value: a parse error in
//! HTML), where the tag may end at a `>` inside a later quoted value.
//!
//! A `/` right before `>` self-closes a tag, also at the end of an unquoted
//! value: `<fragment src=/a/>` is `src="/a"`, self-closed (HTML would read
//! an open tag with `src="/a/"`, and the rest of the page would become its
//! fallback). Quote a value that ends in `/`: `<fragment src="/a/"/>`.
//!
//! # Attributes
//!
//! Names are matched ASCII case-insensitively; values may be double-quoted,
//! single-quoted, unquoted or missing (a bare attribute). Character
//! references `&amp; &lt; &gt; &quot; &apos; &#NN; &#xHH;` in values are
//! decoded (others stay as written). The first of duplicate attributes wins;
//! unknown attributes are ignored. See [`Include`] for which attributes
//! each syntax reads.
//!
//! # Warnings and limits
//!
//! A [`Piece::Warning`] about an include tag (a bad attribute, a fallback
//! cut at [`ScanLimits::max_fallback_bytes`]) comes before that tag's
//! [`Piece::Include`]. An include tag longer than
//! [`ScanLimits::max_tag_bytes`] is passed through as text after a
//! [`ScanWarning::TagTooLong`]. At [`Scanner::finish`], whatever construct
//! is still open gets a [`ScanWarning::Unterminated`] after the bytes it
//! held (an open `<fragment>` is emitted with the fallback collected so
//! far). The scanner never holds more than one include tag
//! (`max_tag_bytes`), one fallback (`max_fallback_bytes`) and a few bytes
//! of look-ahead; an unterminated comment, script or `<esi:remove>` streams
//! through (or is dropped) as it comes.

mod attrs;
mod classify;
mod entity;
mod fallback;
mod find;
mod tag;

use std::time::Duration;

use bytes::Bytes;

use classify::{Class, EndMatch, Kind, MAX_LOOKAHEAD, classify, match_end};
use fallback::{Fallback, Markup};
use find::{Quick, find1, find2, quick_gt};
use tag::TagScan;

/// Which syntax an include was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// `<fragment src="…">inline fallback</fragment>` (Tailor style).
    Fragment,
    /// `<esi:include src="…" alt="…" onerror="continue"/>` (ESI 1.0 subset).
    Esi,
}

/// One include tag, with its attributes decoded.
///
/// Both syntaxes read `src`, `id`, `timeout` and `total-timeout`; the
/// fragment syntax also `primary`, `async` and `fallback-src`; the ESI
/// syntax also `alt` and `onerror`. String attributes are entity-decoded
/// (invalid UTF-8 replaced by U+FFFD) and `None` when missing or empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Include {
    /// The syntax it was written in.
    pub syntax: Syntax,
    /// `src`, entities decoded; `None` when missing or empty.
    pub src: Option<String>,
    /// `id`; `None` when missing or empty.
    pub id: Option<String>,
    /// `primary` (fragment syntax only): present, with any value or none.
    pub primary: bool,
    /// `async` (fragment syntax only): present, with any value or none.
    pub is_async: bool,
    /// `timeout`: deadline for the first byte (`"500"` = 500 ms, `"500ms"`,
    /// `"1.5s"`, `"2s"`). `None` when missing or unusable (then a
    /// [`ScanWarning::BadAttribute`] comes before the include).
    pub timeout: Option<Duration>,
    /// `total-timeout`: deadline for the whole fragment, same forms.
    pub total_timeout: Option<Duration>,
    /// `fallback-src` (fragment syntax); `None` when missing or empty.
    pub fallback_src: Option<String>,
    /// `alt` (ESI syntax); `None` when missing or empty.
    pub alt: Option<String>,
    /// `onerror="continue"` (ESI syntax); any other value is a
    /// [`ScanWarning::BadAttribute`].
    pub onerror_continue: bool,
    /// The inline fallback markup between `<fragment …>` and `</fragment>`
    /// (empty for a self-closing tag and for ESI), at most
    /// [`ScanLimits::max_fallback_bytes`].
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
    /// "esi:remove", "esi comment", "comment", "script", "style", or "tag"
    /// for any tag whose `>` never came).
    Unterminated {
        /// Offset where it started (its `<`).
        offset: u64,
        /// Which construct.
        what: &'static str,
    },
    /// An attribute value that could not be used (a bad `timeout`, say).
    BadAttribute {
        /// Offset of the tag.
        offset: u64,
        /// The attribute's name, lower case.
        name: String,
        /// Its value as written (quotes removed, entities not decoded).
        value: String,
    },
}

impl std::fmt::Display for ScanWarning {
    /// One line for the log, offsets in bytes from the template's start.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanWarning::TagTooLong { offset } => write!(
                f,
                "the include tag at byte {offset} is longer than max_tag_bytes: sent as text"
            ),
            ScanWarning::FallbackTooLong { offset } => write!(
                f,
                "the inline fallback of the fragment at byte {offset} is longer than \
                 max_fallback_bytes: cut there"
            ),
            ScanWarning::Unterminated { offset, what } => {
                write!(
                    f,
                    "the template ends inside the {what} that starts at byte {offset}"
                )
            }
            ScanWarning::BadAttribute {
                offset,
                name,
                value,
            } => write!(
                f,
                "the include tag at byte {offset} has {name}=\"{value}\", which cannot be \
                 used: ignored, the default applies (a timeout is \"500\" for ms, \"500ms\", \
                 \"1.5s\" or \"2s\")"
            ),
        }
    }
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
///
/// Synchronous and allocation-free per text byte: a chunk without a tag of
/// interest costs a `memchr` pass and yields one [`Piece::Text`] slice of it.
#[derive(Debug, Default)]
pub struct Scanner {
    limits: ScanLimits,
    scanned: u64,
    state: State,
    /// Bytes held across a chunk boundary: a possible tag start (`Text`),
    /// an include tag so far (`IncludeTag`), or a possible end tag (`Raw`,
    /// `Remove`, `Fallback`). Empty in every other state.
    carry: Vec<u8>,
    /// Template offset of `carry[0]`.
    carry_offset: u64,
    /// Inside `<!--esi`: the offset of its `<`.
    esi: Option<u64>,
    /// The first `</body` was reported.
    body_seen: bool,
}

/// Where the scanner is between two bytes.
#[derive(Debug, Default)]
enum State {
    /// Markup, looking for `<` (and `-->` inside `<!--esi`).
    #[default]
    Text,
    /// Inside a tag that is passed through or dropped.
    Tag(TagState),
    /// Inside an include tag; `carry` holds it from its `<`.
    IncludeTag {
        syntax: Syntax,
        name_len: usize,
        scan: TagScan,
        offset: u64,
    },
    /// Collecting a fragment's inline fallback.
    Fallback(Box<Fallback>),
    /// Inside a script or style element (text, not scanned).
    Raw { kind: RawKind, offset: u64 },
    /// Inside `<esi:remove>` (dropped).
    Remove { offset: u64 },
    /// Inside `<!--` (text, not scanned); `dashes`: how many `-` came just
    /// before the current byte (at most 2).
    Comment { offset: u64, dashes: u8 },
}

#[derive(Debug)]
struct TagState {
    scan: TagScan,
    /// Offset of the tag's `<`.
    offset: u64,
    /// Passed through (true) or dropped.
    keep: bool,
    then: Then,
    /// The construct named if the template ends inside the tag.
    what: &'static str,
}

impl TagState {
    fn kept(offset: u64, then: Then) -> TagState {
        TagState {
            scan: TagScan::new(),
            offset,
            keep: true,
            then,
            what: "tag",
        }
    }

    fn dropped(offset: u64, then: Then, what: &'static str) -> TagState {
        TagState {
            scan: TagScan::new(),
            offset,
            keep: false,
            then,
            what,
        }
    }
}

/// What comes after a tag's `>`.
#[derive(Debug, Clone, Copy)]
enum Then {
    Text,
    Raw(RawKind),
    /// `<esi:remove>`'s content (unless the tag self-closed).
    Remove,
}

#[derive(Debug, Clone, Copy)]
enum RawKind {
    Script,
    Style,
}

impl RawKind {
    fn end(self) -> &'static [u8] {
        match self {
            RawKind::Script => b"</script",
            RawKind::Style => b"</style",
        }
    }

    fn what(self) -> &'static str {
        match self {
            RawKind::Script => "script",
            RawKind::Style => "style",
        }
    }
}

const REMOVE_END: &[u8] = b"</esi:remove";
const FRAGMENT_END: &[u8] = b"</fragment";

/// The chunk being scanned.
struct Cur {
    chunk: Bytes,
    /// Template offset of `chunk[0]`.
    base: u64,
    /// Next byte to look at.
    pos: usize,
    /// Start of the text not yet emitted (`<= pos`).
    text_from: usize,
}

/// Emits `chunk[*from..upto]` as text (if any) and moves `from` there.
fn emit(out: &mut Vec<Piece>, chunk: &Bytes, from: &mut usize, upto: usize) {
    if upto > *from {
        out.push(Piece::Text(chunk.slice(*from..upto)));
    }
    *from = upto;
}

/// [`classify`] of `buf[q..]`, with the common case inline: a start or end
/// tag whose first two letters no tag of interest has (`fr`, `es`, `sc`,
/// `st`; `bo`, `es` for end tags).
#[inline(always)]
fn classify_at(buf: &[u8], q: usize, in_esi: bool, body_seen: bool) -> Class {
    let slow = || classify(&buf[q..], in_esi, body_seen);
    if buf[q] != b'<' {
        return slow();
    }
    let (from, interesting): (usize, &[[u8; 2]]) = match buf.get(q + 1) {
        Some(b'/') if body_seen => (2, &[*b"es"]),
        Some(b'/') => (2, &[*b"bo", *b"es"]),
        Some(_) => (1, &[*b"fr", *b"es", *b"sc", *b"st"]),
        None => return slow(),
    };
    let (Some(&a), Some(&b)) = (buf.get(q + from), buf.get(q + from + 1)) else {
        return slow();
    };
    if !a.is_ascii_alphabetic() {
        return slow();
    }
    if interesting.contains(&[a | 0x20, b | 0x20]) {
        slow()
    } else {
        Class::Tag(Kind::Ordinary, from)
    }
}

fn copied(out: &mut Vec<Piece>, bytes: &[u8]) {
    if !bytes.is_empty() {
        out.push(Piece::Text(Bytes::copy_from_slice(bytes)));
    }
}

impl Scanner {
    /// A scanner with `limits`.
    pub fn new(limits: ScanLimits) -> Scanner {
        Scanner {
            limits,
            ..Scanner::default()
        }
    }

    /// Scans `chunk`, appending what it completes to `out`: all its text up
    /// to the last byte that could still start a tag, and every include,
    /// `BodyEnd` and warning that it decides. An empty chunk is a no-op.
    pub fn feed(&mut self, chunk: Bytes, out: &mut Vec<Piece>) {
        let base = self.scanned;
        self.scanned += chunk.len() as u64;
        self.run(chunk, base, out);
    }

    /// The template ended: flushes what is held (as text, or an open
    /// fragment as its [`Include`]) and reports what was left open
    /// ([`ScanWarning::Unterminated`]). Call it once, after the last
    /// [`Scanner::feed`]; the scanner is then back in text state.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        let carry = std::mem::take(&mut self.carry);
        let unterminated =
            |offset, what| Piece::Warning(ScanWarning::Unterminated { offset, what });
        match std::mem::take(&mut self.state) {
            State::Text => copied(out, &carry),
            State::IncludeTag { offset, .. } => {
                copied(out, &carry);
                out.push(unterminated(offset, "tag"));
            }
            State::Tag(t) => out.push(unterminated(t.offset, t.what)),
            State::Fallback(mut f) => {
                f.collect_copy(&carry, self.limits.max_fallback_bytes, out);
                let offset = f.include.offset;
                out.push(f.into_piece());
                out.push(unterminated(offset, "fragment"));
            }
            State::Raw { kind, offset } => out.push(unterminated(offset, kind.what())),
            State::Remove { offset } => out.push(unterminated(offset, "esi:remove")),
            State::Comment { offset, .. } => out.push(unterminated(offset, "comment")),
        }
        if let Some(offset) = self.esi.take() {
            out.push(unterminated(offset, "esi comment"));
        }
    }

    /// Bytes fed so far.
    pub fn bytes_scanned(&self) -> u64 {
        self.scanned
    }

    /// Scans `chunk`, which starts at template offset `base`.
    fn run(&mut self, chunk: Bytes, base: u64, out: &mut Vec<Piece>) {
        let mut cur = Cur {
            chunk,
            base,
            pos: 0,
            text_from: 0,
        };
        while cur.pos < cur.chunk.len() {
            if !self.carry.is_empty() {
                self.resume(&mut cur, out);
                continue;
            }
            match self.state {
                State::Text => self.text(&mut cur, out),
                State::Tag(_) => self.tag(&mut cur),
                State::IncludeTag { .. } => {
                    // Always holds its tag in `carry`.
                    debug_assert!(false, "include tag without carry");
                    self.state = State::Text;
                }
                State::Fallback(_) | State::Raw { .. } | State::Remove { .. } => {
                    self.until_end(&mut cur, out)
                }
                State::Comment { .. } => self.comment(&mut cur),
            }
        }
        emit(out, &cur.chunk, &mut cur.text_from, cur.chunk.len());
    }

    /// Markup: the hot loop. Ordinary tags that end in this chunk are
    /// skipped here without leaving it.
    fn text(&mut self, cur: &mut Cur, out: &mut Vec<Piece>) {
        let len = cur.chunk.len();
        if self.esi.is_none() {
            self.skim(cur);
        }
        loop {
            let buf = &cur.chunk[..];
            let rest = &buf[cur.pos..];
            let found = if self.esi.is_some() {
                find2(b'<', b'-', rest)
            } else {
                find1(b'<', rest)
            };
            let Some(k) = found else {
                cur.pos = len;
                return;
            };
            let q = cur.pos + k;
            let offset = cur.base + q as u64;
            match classify_at(buf, q, self.esi.is_some(), self.body_seen) {
                Class::NeedMore => {
                    emit(out, &cur.chunk, &mut cur.text_from, q);
                    self.hold(&cur.chunk[q..], offset);
                    cur.pos = len;
                    cur.text_from = len;
                    return;
                }
                Class::Text(n) => cur.pos = q + n,
                Class::CommentOpen => {
                    cur.pos = q + 4;
                    self.state = State::Comment { offset, dashes: 2 };
                    return;
                }
                Class::EsiOpen => {
                    emit(out, &cur.chunk, &mut cur.text_from, q);
                    cur.pos = q + 7;
                    cur.text_from = cur.pos;
                    self.esi.get_or_insert(offset);
                }
                Class::EsiClose => {
                    emit(out, &cur.chunk, &mut cur.text_from, q);
                    cur.pos = q + 3;
                    cur.text_from = cur.pos;
                    self.esi = None;
                }
                Class::Tag(Kind::Ordinary, n) => {
                    let mut scan = TagScan::new();
                    match scan.run(&buf[q + n..]) {
                        Some(m) => cur.pos = q + n + m,
                        None => {
                            cur.pos = len;
                            self.state = State::Tag(TagState {
                                scan,
                                ..TagState::kept(offset, Then::Text)
                            });
                            return;
                        }
                    }
                }
                Class::Tag(kind, n) => {
                    match kind {
                        Kind::Fragment | Kind::EsiInclude => {
                            emit(out, &cur.chunk, &mut cur.text_from, q);
                            self.include_here(cur, q, n, kind, out);
                        }
                        _ => {
                            let state = self.tag_state(kind, offset);
                            if !state.keep {
                                emit(out, &cur.chunk, &mut cur.text_from, q);
                                cur.text_from = q + n;
                            } else if kind == Kind::BodyEnd {
                                emit(out, &cur.chunk, &mut cur.text_from, q);
                                out.push(Piece::BodyEnd);
                            }
                            cur.pos = q + n;
                            self.state = State::Tag(state);
                        }
                    }
                    return;
                }
            }
        }
    }

    /// The common case of [`Scanner::text`], outside `<!--esi`: text and
    /// ordinary tags that end the quick way in this chunk, with nothing to
    /// emit or hold. Stops at the first `<` it leaves to `text` (with
    /// `cur.pos` there) or at the end of the chunk.
    #[inline(always)]
    fn skim(&self, cur: &mut Cur) {
        let buf = &cur.chunk[..];
        let mut pos = cur.pos;
        let mut next: Option<usize> = None;
        loop {
            let q = match next.take() {
                Some(q) => q,
                None => match find1(b'<', &buf[pos..]) {
                    Some(k) => pos + k,
                    None => {
                        cur.pos = buf.len();
                        return;
                    }
                },
            };
            let n = match classify_at(buf, q, false, self.body_seen) {
                Class::Tag(Kind::Ordinary, n) => n,
                _ => {
                    cur.pos = q;
                    return;
                }
            };
            match quick_gt(&buf[q + n..]) {
                Quick::Gt {
                    at,
                    odd: false,
                    next_lt,
                } => {
                    pos = q + n + at + 1;
                    next = next_lt.map(|l| q + n + l);
                }
                _ => {
                    cur.pos = q;
                    return;
                }
            }
        }
    }

    /// The state for a tag of `kind` other than an include or an ordinary
    /// one; notes the first `</body`.
    fn tag_state(&mut self, kind: Kind, offset: u64) -> TagState {
        match kind {
            Kind::Script => TagState::kept(offset, Then::Raw(RawKind::Script)),
            Kind::Style => TagState::kept(offset, Then::Raw(RawKind::Style)),
            Kind::BodyEnd => {
                self.body_seen = true;
                TagState::kept(offset, Then::Text)
            }
            Kind::EsiIncludeEnd => TagState::dropped(offset, Then::Text, "tag"),
            Kind::EsiRemove => TagState::dropped(offset, Then::Remove, "esi:remove"),
            Kind::Ordinary | Kind::Fragment | Kind::EsiInclude => {
                TagState::kept(offset, Then::Text)
            }
        }
    }

    /// Keeps `bytes` (starting at `offset`) for the next chunk.
    fn hold(&mut self, bytes: &[u8], offset: u64) {
        self.carry.clear();
        self.carry.extend_from_slice(bytes);
        self.carry_offset = offset;
    }

    /// An include tag whose `<` is `chunk[q]` and whose name ends at `q + n`.
    fn include_here(
        &mut self,
        cur: &mut Cur,
        q: usize,
        n: usize,
        kind: Kind,
        out: &mut Vec<Piece>,
    ) {
        let syntax = if kind == Kind::Fragment {
            Syntax::Fragment
        } else {
            Syntax::Esi
        };
        let offset = cur.base + q as u64;
        let max = self.limits.max_tag_bytes;
        let len = cur.chunk.len();
        let mut scan = TagScan::exact();
        match scan.run(&cur.chunk[q + n..]) {
            Some(m) => {
                let end = q + n + m;
                cur.pos = end;
                if end - q > max {
                    out.push(Piece::Warning(ScanWarning::TagTooLong { offset }));
                    cur.text_from = q;
                } else {
                    cur.text_from = end;
                    self.include_tag(syntax, &cur.chunk[q..end], n, offset, out);
                }
            }
            None if len - q >= max => {
                out.push(Piece::Warning(ScanWarning::TagTooLong { offset }));
                cur.text_from = q;
                cur.pos = len;
                self.state = State::Tag(TagState {
                    scan,
                    ..TagState::kept(offset, Then::Text)
                });
            }
            None => {
                self.hold(&cur.chunk[q..], offset);
                cur.pos = len;
                cur.text_from = len;
                self.state = State::IncludeTag {
                    syntax,
                    name_len: n,
                    scan,
                    offset,
                };
            }
        }
    }

    /// A complete include tag: emits it, or starts collecting its fallback.
    fn include_tag(
        &mut self,
        syntax: Syntax,
        tag: &[u8],
        name_len: usize,
        offset: u64,
        out: &mut Vec<Piece>,
    ) {
        let mut warnings = Vec::new();
        let (include, self_closing) =
            attrs::include_from_tag(syntax, tag, name_len, offset, &mut warnings);
        out.extend(warnings.into_iter().map(Piece::Warning));
        let include = Box::new(include);
        if syntax == Syntax::Fragment && !self_closing {
            self.state = State::Fallback(Box::new(Fallback {
                include,
                markup: Markup::Empty,
                cut: false,
            }));
        } else {
            out.push(Piece::Include(include));
            self.state = State::Text;
        }
    }

    /// Inside a passed-through or dropped tag.
    fn tag(&mut self, cur: &mut Cur) {
        let State::Tag(t) = &mut self.state else {
            return;
        };
        let found = t.scan.run(&cur.chunk[cur.pos..]);
        cur.pos = found.map_or(cur.chunk.len(), |m| cur.pos + m);
        if !t.keep {
            cur.text_from = cur.pos;
        }
        if found.is_none() {
            return;
        }
        self.state = match t.then {
            Then::Text => State::Text,
            Then::Raw(kind) => State::Raw {
                kind,
                offset: t.offset,
            },
            Then::Remove if t.scan.self_closing() => State::Text,
            Then::Remove => State::Remove { offset: t.offset },
        };
    }

    /// Inside a comment: passed through up to `-->` (or `<!-->`, `<!--->`).
    fn comment(&mut self, cur: &mut Cur) {
        let State::Comment { dashes, .. } = &mut self.state else {
            return;
        };
        let buf = &cur.chunk[..];
        let mut from = cur.pos;
        loop {
            let Some(k) = find1(b'>', &buf[from..]) else {
                let seg = &buf[from..];
                let trailing = seg.iter().rev().take(2).take_while(|&&b| b == b'-').count() as u8;
                *dashes = if trailing as usize == seg.len() {
                    (*dashes + trailing).min(2)
                } else {
                    trailing
                };
                cur.pos = buf.len();
                return;
            };
            let q = from + k;
            let closes = match q - from {
                0 => *dashes >= 2,
                1 => buf[q - 1] == b'-' && *dashes >= 1,
                _ => buf[q - 1] == b'-' && buf[q - 2] == b'-',
            };
            if closes {
                cur.pos = q + 1;
                self.state = State::Text;
                return;
            }
            from = q + 1;
            *dashes = 0;
        }
    }

    /// Inside a script, style, `<esi:remove>` or fragment fallback: looks
    /// for the end tag that closes it.
    fn until_end(&mut self, cur: &mut Cur, out: &mut Vec<Piece>) {
        let pat = self.end_pattern();
        let buf = &cur.chunk[..];
        let len = buf.len();
        let mut from = cur.pos;
        loop {
            let Some(k) = find1(b'<', &buf[from..]) else {
                self.content(cur, len, out);
                cur.pos = len;
                return;
            };
            let q = from + k;
            match match_end(&buf[q..], pat) {
                EndMatch::No => from = q + 1,
                EndMatch::Partial => {
                    self.content(cur, q, out);
                    self.hold(&cur.chunk[q..], cur.base + q as u64);
                    cur.pos = len;
                    if !matches!(self.state, State::Raw { .. }) {
                        cur.text_from = len;
                    }
                    return;
                }
                EndMatch::Yes => {
                    self.content(cur, q, out);
                    cur.pos = q + pat.len();
                    self.end_found(cur.base + q as u64, out);
                    if !matches!(self.state, State::Tag(TagState { keep: true, .. })) {
                        cur.text_from = cur.pos;
                    }
                    return;
                }
            }
        }
    }

    /// The end tag the current state waits for.
    fn end_pattern(&self) -> &'static [u8] {
        match &self.state {
            State::Raw { kind, .. } => kind.end(),
            State::Remove { .. } => REMOVE_END,
            _ => FRAGMENT_END,
        }
    }

    /// `chunk[cur.pos..to]` is content of the current element: text for a
    /// script or style (already counted), dropped for `<esi:remove>`,
    /// fallback for a fragment.
    fn content(&mut self, cur: &mut Cur, to: usize, out: &mut Vec<Piece>) {
        match &mut self.state {
            State::Raw { .. } => {}
            State::Fallback(f) => {
                f.collect(&cur.chunk, cur.pos, to, self.limits.max_fallback_bytes, out);
                cur.text_from = to;
            }
            _ => cur.text_from = to,
        }
    }

    /// The end tag starting at `offset` closes the current element; its
    /// name is consumed, its inside comes next.
    fn end_found(&mut self, offset: u64, out: &mut Vec<Piece>) {
        self.state = match std::mem::take(&mut self.state) {
            State::Raw { .. } => State::Tag(TagState::kept(offset, Then::Text)),
            State::Remove { .. } => State::Tag(TagState::dropped(offset, Then::Text, "esi:remove")),
            State::Fallback(f) => {
                out.push(f.into_piece());
                State::Tag(TagState::dropped(offset, Then::Text, "tag"))
            }
            other => other,
        };
    }

    /// Continues what `carry` holds with the bytes of `cur`.
    fn resume(&mut self, cur: &mut Cur, out: &mut Vec<Piece>) {
        match self.state {
            State::Text => self.resume_candidate(cur, out),
            State::IncludeTag { .. } => self.resume_include(cur, out),
            State::Fallback(_) | State::Raw { .. } | State::Remove { .. } => {
                self.resume_end(cur, out)
            }
            State::Tag(_) | State::Comment { .. } => {
                debug_assert!(false, "carry in a state that holds nothing");
                self.carry.clear();
            }
        }
    }

    /// A possible tag start held from the previous chunk.
    fn resume_candidate(&mut self, cur: &mut Cur, out: &mut Vec<Piece>) {
        let old = self.carry.len();
        let take = MAX_LOOKAHEAD
            .saturating_sub(old)
            .min(cur.chunk.len() - cur.pos);
        self.carry
            .extend_from_slice(&cur.chunk[cur.pos..cur.pos + take]);
        let mut class = classify(&self.carry, self.esi.is_some(), self.body_seen);
        if class == Class::NeedMore {
            if take == cur.chunk.len() - cur.pos {
                cur.pos += take;
                cur.text_from = cur.pos;
                return;
            }
            // Unreachable: MAX_LOOKAHEAD bytes always decide.
            class = Class::Text(1);
        }
        let n = match class {
            Class::NeedMore => 1,
            Class::Text(n) | Class::Tag(_, n) => n,
            Class::CommentOpen => 4,
            Class::EsiOpen => 7,
            Class::EsiClose => 3,
        };
        // The bytes past the consumed ones go back: those from this chunk
        // by not advancing over them, those held from before by scanning
        // them again (a few bytes at most).
        let again = if n < old {
            Bytes::copy_from_slice(&self.carry[n..old])
        } else {
            cur.pos += n - old;
            Bytes::new()
        };
        cur.text_from = cur.pos;
        self.carry.truncate(n);
        let offset = self.carry_offset;
        match class {
            Class::Tag(kind @ (Kind::Fragment | Kind::EsiInclude), n) => {
                let syntax = if kind == Kind::Fragment {
                    Syntax::Fragment
                } else {
                    Syntax::Esi
                };
                self.state = State::IncludeTag {
                    syntax,
                    name_len: n,
                    scan: TagScan::exact(),
                    offset,
                };
                debug_assert!(again.is_empty());
                return;
            }
            Class::NeedMore | Class::Text(_) => copied(out, &self.carry),
            Class::CommentOpen => {
                copied(out, &self.carry);
                self.state = State::Comment { offset, dashes: 2 };
            }
            Class::EsiOpen => {
                self.esi.get_or_insert(offset);
            }
            Class::EsiClose => self.esi = None,
            Class::Tag(Kind::Ordinary, _) => {
                copied(out, &self.carry);
                self.state = State::Tag(TagState::kept(offset, Then::Text));
            }
            Class::Tag(kind, _) => {
                let state = self.tag_state(kind, offset);
                if kind == Kind::BodyEnd {
                    out.push(Piece::BodyEnd);
                }
                if state.keep {
                    copied(out, &self.carry);
                }
                self.state = State::Tag(state);
            }
        }
        self.carry.clear();
        if !again.is_empty() {
            self.run(again, offset + n as u64, out);
        }
    }

    /// An include tag held from the previous chunk.
    fn resume_include(&mut self, cur: &mut Cur, out: &mut Vec<Piece>) {
        let State::IncludeTag {
            syntax,
            name_len,
            scan,
            offset,
        } = &mut self.state
        else {
            return;
        };
        let (syntax, name_len, offset) = (*syntax, *name_len, *offset);
        let max = self.limits.max_tag_bytes;
        let rest = &cur.chunk[cur.pos..];
        match scan.run(rest) {
            Some(m) if self.carry.len() + m > max => {
                out.push(Piece::Warning(ScanWarning::TagTooLong { offset }));
                copied(out, &self.carry);
                self.carry.clear();
                cur.text_from = cur.pos;
                cur.pos += m;
                self.state = State::Text;
            }
            Some(m) => {
                self.carry.extend_from_slice(&rest[..m]);
                cur.pos += m;
                cur.text_from = cur.pos;
                let tag = std::mem::take(&mut self.carry);
                self.include_tag(syntax, &tag, name_len, offset, out);
                // Keep the allocation for the next carry.
                self.carry = tag;
                self.carry.clear();
            }
            None if self.carry.len() + rest.len() >= max => {
                let scan = *scan;
                out.push(Piece::Warning(ScanWarning::TagTooLong { offset }));
                copied(out, &self.carry);
                self.carry.clear();
                cur.text_from = cur.pos;
                cur.pos = cur.chunk.len();
                self.state = State::Tag(TagState {
                    scan,
                    ..TagState::kept(offset, Then::Text)
                });
            }
            None => {
                self.carry.extend_from_slice(rest);
                cur.pos = cur.chunk.len();
                cur.text_from = cur.pos;
            }
        }
    }

    /// A possible end tag (`</script`, `</fragment`, …) held from the
    /// previous chunk.
    fn resume_end(&mut self, cur: &mut Cur, out: &mut Vec<Piece>) {
        let pat = self.end_pattern();
        let old = self.carry.len();
        let take = (pat.len() + 1)
            .saturating_sub(old)
            .min(cur.chunk.len() - cur.pos);
        self.carry
            .extend_from_slice(&cur.chunk[cur.pos..cur.pos + take]);
        let keep = matches!(self.state, State::Raw { .. });
        match match_end(&self.carry, pat) {
            EndMatch::Partial => {
                cur.pos += take;
                if !keep {
                    cur.text_from = cur.pos;
                }
            }
            EndMatch::No => {
                // The held bytes were content after all (their `<` is the
                // only one: the pattern has no other).
                self.carry.truncate(old);
                if let State::Fallback(f) = &mut self.state {
                    f.collect_copy(&self.carry, self.limits.max_fallback_bytes, out);
                }
                self.carry.clear();
            }
            EndMatch::Yes => {
                cur.pos += pat.len() - old;
                let offset = self.carry_offset;
                self.carry.clear();
                self.end_found(offset, out);
                if !keep {
                    cur.text_from = cur.pos;
                }
            }
        }
    }
}
