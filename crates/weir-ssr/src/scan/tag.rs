//! The inside of a tag, after its name: where it ends and what attributes it
//! has, by the HTML tokenizer's attribute states (WHATWG HTML §13.2.5.32–43),
//! with one deviation: a `/` right before `>` self-closes the tag even at
//! the end of an unquoted value (`src=/a/>` is `src="/a"`, self-closed;
//! HTML would read `src="/a/"` and an open tag).
//!
//! One transition table drives both the streaming end finder ([`TagScan`],
//! which only needs to know where the `>` is) and the attribute parser
//! ([`parse_attrs`], run on a complete include tag), so the two cannot
//! disagree about where a quoted value stops.

use super::find::{Quick, find1, find3, quick_gt};

/// A state of the tokenizer between `<name` and `>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Pos {
    /// Still in the tag name.
    Name = 0,
    BeforeAttrName,
    AttrName,
    AfterAttrName,
    BeforeValue,
    /// Inside a `"…"` value.
    Dq,
    /// Inside a `'…'` value.
    Sq,
    Unquoted,
    /// A `/` in an unquoted value: part of it, unless `>` comes next.
    UnquotedSlash,
    AfterQuoted,
    /// Just after a `/` that would self-close the tag if `>` came next.
    SelfClosing,
    /// The `>` was consumed.
    Done,
}

/// What a byte means to the tag states.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Class {
    Ws = 0,
    Slash,
    Gt,
    Eq,
    Dq,
    Sq,
    Other,
}

const CLASSES: usize = 7;
const STATES: usize = 11;

const fn class_of(b: u8) -> Class {
    match b {
        b'\t' | b'\n' | b'\x0c' | b'\r' | b' ' => Class::Ws,
        b'/' => Class::Slash,
        b'>' => Class::Gt,
        b'=' => Class::Eq,
        b'"' => Class::Dq,
        b'\'' => Class::Sq,
        _ => Class::Other,
    }
}

const CLASS: [Class; 256] = {
    let mut t = [Class::Other; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = class_of(i as u8);
        i += 1;
    }
    t
};

const fn next(pos: Pos, c: Class) -> Pos {
    use Class as C;
    use Pos as P;
    match pos {
        P::Name => match c {
            C::Ws => P::BeforeAttrName,
            C::Slash => P::SelfClosing,
            C::Gt => P::Done,
            _ => P::Name,
        },
        // A `=` here starts a name (a parse error, but that is what HTML does).
        P::BeforeAttrName => match c {
            C::Ws => P::BeforeAttrName,
            C::Slash => P::SelfClosing,
            C::Gt => P::Done,
            _ => P::AttrName,
        },
        P::AttrName => match c {
            C::Ws => P::AfterAttrName,
            C::Slash => P::SelfClosing,
            C::Gt => P::Done,
            C::Eq => P::BeforeValue,
            _ => P::AttrName,
        },
        P::AfterAttrName => match c {
            C::Ws => P::AfterAttrName,
            C::Slash => P::SelfClosing,
            C::Gt => P::Done,
            C::Eq => P::BeforeValue,
            _ => P::AttrName,
        },
        P::BeforeValue => match c {
            C::Ws => P::BeforeValue,
            C::Dq => P::Dq,
            C::Sq => P::Sq,
            C::Gt => P::Done,
            C::Slash => P::UnquotedSlash,
            _ => P::Unquoted,
        },
        P::Dq => match c {
            C::Dq => P::AfterQuoted,
            _ => P::Dq,
        },
        P::Sq => match c {
            C::Sq => P::AfterQuoted,
            _ => P::Sq,
        },
        // Quotes belong to an unquoted value, and so does a `/` unless
        // it is the last byte before `>` (see `UnquotedSlash`).
        P::Unquoted => match c {
            C::Ws => P::BeforeAttrName,
            C::Gt => P::Done,
            C::Slash => P::UnquotedSlash,
            _ => P::Unquoted,
        },
        // Unlike HTML, `src=/a/>` self-closes with the value `/a`: a
        // fragment tag read as open would swallow the page as fallback.
        P::UnquotedSlash => match c {
            C::Ws => P::BeforeAttrName,
            C::Gt => P::Done,
            C::Slash => P::UnquotedSlash,
            _ => P::Unquoted,
        },
        P::AfterQuoted | P::SelfClosing => match c {
            C::Ws => P::BeforeAttrName,
            C::Slash => P::SelfClosing,
            C::Gt => P::Done,
            _ => P::AttrName,
        },
        P::Done => P::Done,
    }
}

const NEXT: [[Pos; CLASSES]; STATES] = {
    const ALL: [Pos; STATES] = [
        Pos::Name,
        Pos::BeforeAttrName,
        Pos::AttrName,
        Pos::AfterAttrName,
        Pos::BeforeValue,
        Pos::Dq,
        Pos::Sq,
        Pos::Unquoted,
        Pos::UnquotedSlash,
        Pos::AfterQuoted,
        Pos::SelfClosing,
    ];
    const CLS: [Class; CLASSES] = [
        Class::Ws,
        Class::Slash,
        Class::Gt,
        Class::Eq,
        Class::Dq,
        Class::Sq,
        Class::Other,
    ];
    let mut t = [[Pos::Done; CLASSES]; STATES];
    let mut s = 0;
    while s < STATES {
        let mut c = 0;
        while c < CLASSES {
            t[s][c] = next(ALL[s], CLS[c]);
            c += 1;
        }
        s += 1;
    }
    t
};

#[inline]
fn step(pos: Pos, b: u8) -> Pos {
    NEXT[pos as usize][CLASS[b as usize] as usize]
}

/// Finds the end of a tag across chunks: feed it the bytes after the tag
/// name's first byte, in pieces, until [`TagScan::run`] reports the `>`.
///
/// Two ways to find the end:
/// - exact ([`TagScan::exact`], for include tags, whose attributes are
///   parsed by the same table): the HTML tokenizer's end;
/// - quick ([`TagScan::new`], for every other tag): the first `>` when the
///   bytes before it hold no `'` and an even number of `"`, else the exact
///   end. The two agree unless a `"` is stray (in a name or an unquoted
///   value: a parse error in HTML); the quick way does one pass of 8-byte
///   words over a typical tag instead of a step per attribute.
///
/// Either is a function of the tag's bytes alone, not of how they are
/// split into chunks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TagScan {
    /// The table's state after the bytes seen in earlier calls (kept in
    /// the quick way too, for when it gives up).
    pos: Pos,
    self_closing: bool,
    /// Still trying the quick way.
    quick: bool,
    /// Quick way: an odd number of `"` so far.
    odd: bool,
    /// The last byte seen in earlier calls was `/`.
    slash: bool,
}

impl TagScan {
    /// A quick scan that starts inside the tag name.
    pub(crate) fn new() -> TagScan {
        TagScan {
            pos: Pos::Name,
            self_closing: false,
            quick: true,
            odd: false,
            slash: false,
        }
    }

    /// An exact scan that starts inside the tag name.
    pub(crate) fn exact() -> TagScan {
        TagScan {
            quick: false,
            ..TagScan::new()
        }
    }

    /// Scans `buf`; `Some(n)` when the tag's `>` is `buf[n - 1]`, `None`
    /// when the tag goes on past `buf`.
    #[inline]
    pub(crate) fn run(&mut self, buf: &[u8]) -> Option<usize> {
        if self.quick {
            match quick_gt(buf) {
                Quick::Gt { at, odd, .. } if odd == self.odd => {
                    self.self_closing = if at > 0 {
                        buf[at - 1] == b'/'
                    } else {
                        self.slash
                    };
                    self.pos = Pos::Done;
                    return Some(at + 1);
                }
                Quick::Gt { .. } | Quick::SingleQuote => self.quick = false,
                Quick::None { odd } => self.odd ^= odd,
            }
        }
        if let Some(&last) = buf.last() {
            self.slash = last == b'/';
        }
        self.run_exact(buf)
    }

    /// The exact way over `buf`, from the state the earlier bytes left.
    ///
    /// Between attributes it jumps from one `>` or quote to the next
    /// (`find3`) and decides whether a quote opens a value by looking at
    /// the few bytes before it ([`opens_value`]); when that look is not
    /// conclusive it runs the transition table over the bytes it jumped,
    /// so the result is always the table's.
    #[inline(never)]
    fn run_exact(&mut self, buf: &[u8]) -> Option<usize> {
        let mut i = 0;
        let mut pos = self.pos;
        while i < buf.len() {
            match pos {
                Pos::Dq | Pos::Sq => {
                    let q = if pos == Pos::Dq { b'"' } else { b'\'' };
                    let Some(k) = find1(q, &buf[i..]) else {
                        self.pos = pos;
                        return None;
                    };
                    i += k + 1;
                    pos = Pos::AfterQuoted;
                }
                Pos::BeforeAttrName | Pos::AfterAttrName | Pos::AfterQuoted | Pos::SelfClosing => {
                    let Some(k) = find3(b'>', b'"', b'\'', &buf[i..]) else {
                        // No quote and no `>` up to the end: the table gives the
                        // state to resume in.
                        self.pos = run_table(pos, &buf[i..]);
                        return None;
                    };
                    let at = i + k;
                    if buf[at] == b'>' {
                        // Every non-quoted state goes to Done on `>`, and every
                        // `/` leads to a state that self-closes on it.
                        self.self_closing = if k > 0 {
                            buf[at - 1] == b'/'
                        } else {
                            pos == Pos::SelfClosing
                        };
                        self.pos = Pos::Done;
                        return Some(at + 1);
                    }
                    pos = if opens_value(&buf[i..at], pos) {
                        if buf[at] == b'"' { Pos::Dq } else { Pos::Sq }
                    } else {
                        run_table(pos, &buf[i..=at])
                    };
                    i = at + 1;
                }
                Pos::Name => {
                    // Anything but whitespace, `/` and `>` belongs to the name.
                    let Some(k) = buf[i..].iter().position(|&b| ends_name(b)) else {
                        self.pos = pos;
                        return None;
                    };
                    i += k + 1;
                    match buf[i - 1] {
                        b'>' => {
                            self.self_closing = false;
                            self.pos = Pos::Done;
                            return Some(i);
                        }
                        b'/' => pos = Pos::SelfClosing,
                        _ => pos = Pos::BeforeAttrName,
                    }
                }
                _ => {
                    let was = pos;
                    pos = step(pos, buf[i]);
                    i += 1;
                    if pos == Pos::Done {
                        self.self_closing = matches!(was, Pos::SelfClosing | Pos::UnquotedSlash);
                        self.pos = pos;
                        return Some(i);
                    }
                }
            }
        }
        self.pos = pos;
        None
    }

    /// Whether the tag ended with `/>` (meaningful once `run` found the end).
    pub(crate) fn self_closing(&self) -> bool {
        self.self_closing
    }
}

/// The table's state after `seg` from `pos`.
fn run_table(pos: Pos, seg: &[u8]) -> Pos {
    seg.iter().fold(pos, |p, &b| step(p, b))
}

/// Whether a quote right after `seg` opens a quoted value, when `seg` has
/// no quote and no `>` and starts in `from` (one of BeforeAttrName,
/// AfterAttrName, AfterQuoted, SelfClosing). `true` only when sure: the
/// bytes end in `name ws* = ws*`, and the name is one (it starts the
/// segment, or follows whitespace that does not follow a `=`). `false`
/// means "not sure", and the caller runs the table.
fn opens_value(seg: &[u8], from: Pos) -> bool {
    let is_other = |b: u8| matches!(CLASS[b as usize], Class::Other);
    let skip_ws = |mut i: usize| {
        while i > 0 && is_ws(seg[i - 1]) {
            i -= 1;
        }
        i
    };
    let mut i = skip_ws(seg.len());
    if i == 0 || seg[i - 1] != b'=' {
        return false;
    }
    i = skip_ws(i - 1);
    if i == 0 {
        // `ws* =` from the start: a value only after a name's whitespace.
        return from == Pos::AfterAttrName;
    }
    if !is_other(seg[i - 1]) {
        return false;
    }
    while i > 0 && is_other(seg[i - 1]) {
        i -= 1;
    }
    // `i` starts the name run. Any of the four states and whitespace
    // after them make it a name; so does whitespace after anything but a
    // `=` (only `=` leaves the table in BeforeValue, which would make the
    // run an unquoted value).
    if i == 0 {
        return true;
    }
    if !is_ws(seg[i - 1]) {
        return false;
    }
    let j = skip_ws(i - 1);
    j == 0 || seg[j - 1] != b'='
}

/// One attribute as written: the name and the value without its quotes,
/// both raw bytes (a bare attribute has an empty value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawAttr<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) value: &'a [u8],
}

/// Parses the attributes of a complete tag. `rest` is the tag from just
/// after its name to its `>` inclusive (bytes past the first `>` that ends
/// the tag are ignored). Returns the attributes in order, duplicates kept,
/// and whether the tag self-closes.
pub(crate) fn parse_attrs(rest: &[u8]) -> (Vec<RawAttr<'_>>, bool) {
    let mut attrs = Vec::new();
    let mut pos = Pos::Name;
    let mut name_from = 0;
    let mut value_from = 0;
    let mut self_closing = false;
    for (i, &b) in rest.iter().enumerate() {
        let was = pos;
        pos = step(was, b);
        let unquoted = |p| matches!(p, Pos::Unquoted | Pos::UnquotedSlash);
        if pos == was || (unquoted(was) && unquoted(pos)) {
            continue;
        }
        // Leaving a name or a value closes it.
        match was {
            Pos::AttrName => attrs.push(RawAttr {
                name: &rest[name_from..i],
                value: &[],
            }),
            Pos::Dq | Pos::Sq | Pos::Unquoted | Pos::UnquotedSlash => {
                // A self-closing `/` is not part of the value.
                let end = if was == Pos::UnquotedSlash && pos == Pos::Done {
                    i - 1
                } else {
                    i
                };
                if let Some(last) = attrs.last_mut() {
                    last.value = &rest[value_from..end];
                }
            }
            _ => {}
        }
        match pos {
            Pos::AttrName => name_from = i,
            Pos::Dq | Pos::Sq => value_from = i + 1,
            Pos::Unquoted | Pos::UnquotedSlash => value_from = i,
            Pos::Done => {
                self_closing = matches!(was, Pos::SelfClosing | Pos::UnquotedSlash);
                break;
            }
            _ => {}
        }
    }
    (attrs, self_closing)
}

/// HTML whitespace, as the tokenizer sees it (CR included: the template is
/// not newline-normalised).
pub(crate) fn is_ws(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')
}

/// A byte that ends a tag name: whitespace, `/` or `>`.
pub(crate) fn ends_name(b: u8) -> bool {
    is_ws(b) || b == b'/' || b == b'>'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(tag: &str) -> (Vec<(String, String)>, bool) {
        let (a, sc) = parse_attrs(tag.as_bytes());
        (
            a.iter()
                .map(|a| {
                    (
                        String::from_utf8_lossy(a.name).into_owned(),
                        String::from_utf8_lossy(a.value).into_owned(),
                    )
                })
                .collect(),
            sc,
        )
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn quoted_unquoted_and_bare_values() {
        let (a, sc) = attrs(r#" src="/a>b" id='x"y' n=1 primary async>"#);
        assert_eq!(
            a,
            pairs(&[
                ("src", "/a>b"),
                ("id", "x\"y"),
                ("n", "1"),
                ("primary", ""),
                ("async", "")
            ])
        );
        assert!(!sc);
    }

    #[test]
    fn slash_before_gt_self_closes_even_after_an_unquoted_value() {
        assert_eq!(attrs(r#" src="a"/>"#), (pairs(&[("src", "a")]), true));
        assert_eq!(attrs(" src=/a/>"), (pairs(&[("src", "/a")]), true));
        assert_eq!(attrs(" src=/a//>"), (pairs(&[("src", "/a/")]), true));
        assert_eq!(attrs(" src=/a/ >"), (pairs(&[("src", "/a/")]), false));
        assert_eq!(attrs(" src=/a/b>"), (pairs(&[("src", "/a/b")]), false));
        assert_eq!(attrs(" src=a />"), (pairs(&[("src", "a")]), true));
        assert_eq!(attrs("/>"), (vec![], true));
        assert_eq!(attrs(" src=/>"), (pairs(&[("src", "")]), true));
        assert_eq!(attrs(" a / b>"), (pairs(&[("a", ""), ("b", "")]), false));
    }

    #[test]
    fn spaces_around_equals_and_missing_whitespace() {
        assert_eq!(
            attrs(r#" a = "1"b='2' c= d>"#),
            (pairs(&[("a", "1"), ("b", "2"), ("c", "d")]), false)
        );
        assert_eq!(attrs(" a=>"), (pairs(&[("a", "")]), false));
        assert_eq!(attrs(r#" ="x">"#), (pairs(&[("=\"x\"", "")]), false));
    }

    #[test]
    fn end_finder_agrees_with_parser_in_any_split() {
        let tag = br#" a="x>y" b='>' c=d/ e / >tail"#;
        for split in 0..tag.len() {
            let mut s = TagScan::exact();
            let end = match s.run(&tag[..split]) {
                Some(n) => n,
                None => s.run(&tag[split..]).map(|n| n + split).unwrap_or(0),
            };
            assert_eq!(
                &tag[..end],
                br#" a="x>y" b='>' c=d/ e / >"#,
                "split {split}"
            );
            assert!(!s.self_closing());
        }
    }

    /// The transition table alone, byte by byte: where the tag ends and
    /// whether it self-closes.
    fn by_table(buf: &[u8]) -> Option<(usize, bool)> {
        let mut pos = Pos::Name;
        for (i, &b) in buf.iter().enumerate() {
            let was = pos;
            pos = step(pos, b);
            if pos == Pos::Done {
                return Some((i + 1, matches!(was, Pos::SelfClosing | Pos::UnquotedSlash)));
            }
        }
        None
    }

    /// The quick way's definition: the first `>` when no `'` and an even
    /// number of `"` come before it, else the table's end.
    fn by_definition(buf: &[u8]) -> Option<(usize, bool)> {
        if let Some(g) = buf.iter().position(|&b| b == b'>') {
            let before = &buf[..g];
            if !before.contains(&b'\'') && before.iter().filter(|&&b| b == b'"').count() % 2 == 0 {
                return Some((g + 1, g > 0 && buf[g - 1] == b'/'));
            }
        }
        by_table(buf)
    }

    #[test]
    fn end_finders_match_their_definitions_on_random_tags() {
        const ATOMS: &[&[u8]] = &[
            b" ", b"\n", b"a", b"src", b"=", b"\"", b"'", b"/", b">", b"x=\"v\"", b"y='w'", b"z=u",
            b" = ", b"==", b"<", b"-",
        ];
        let mut seed: u64 = 0x1234_5678_9abc_def1;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..3000 {
            let mut tag = b"d".to_vec();
            for _ in 0..(next() % 12) {
                tag.extend_from_slice(ATOMS[(next() % ATOMS.len() as u64) as usize]);
            }
            tag.extend_from_slice(b">tail");
            let want = by_table(&tag);
            for (new, want) in [
                (TagScan::exact as fn() -> TagScan, want),
                (TagScan::new, by_definition(&tag)),
            ] {
                for split in 0..=tag.len() {
                    let mut s = new();
                    let got = match s.run(&tag[..split]) {
                        Some(n) => Some(n),
                        None => s.run(&tag[split..]).map(|n| n + split),
                    };
                    assert_eq!(
                        got.map(|n| (n, s.self_closing())),
                        want,
                        "{:?} split {split}",
                        String::from_utf8_lossy(&tag)
                    );
                }
            }
            if let Some((_, want_sc)) = want {
                assert_eq!(parse_attrs(&tag).1, want_sc);
            }
        }
    }
}
