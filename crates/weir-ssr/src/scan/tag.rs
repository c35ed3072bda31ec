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

use memchr::memchr;

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
#[derive(Debug, Clone, Copy)]
pub(crate) struct TagScan {
    pos: Pos,
    self_closing: bool,
}

impl TagScan {
    /// A scan that starts inside the tag name.
    pub(crate) fn new() -> TagScan {
        TagScan {
            pos: Pos::Name,
            self_closing: false,
        }
    }

    /// Scans `buf`; `Some(n)` when the tag's `>` is `buf[n - 1]`, `None`
    /// when the tag goes on past `buf`.
    pub(crate) fn run(&mut self, buf: &[u8]) -> Option<usize> {
        let mut i = 0;
        let mut pos = self.pos;
        while i < buf.len() {
            let quote = match pos {
                Pos::Dq => Some(b'"'),
                Pos::Sq => Some(b'\''),
                _ => None,
            };
            if let Some(q) = quote {
                match memchr(q, &buf[i..]) {
                    Some(k) => {
                        i += k + 1;
                        pos = Pos::AfterQuoted;
                        continue;
                    }
                    None => {
                        self.pos = pos;
                        return None;
                    }
                }
            }
            let b = buf[i];
            i += 1;
            let was = pos;
            pos = step(pos, b);
            if pos == Pos::Done {
                self.self_closing = matches!(was, Pos::SelfClosing | Pos::UnquotedSlash);
                self.pos = pos;
                return Some(i);
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
            let mut s = TagScan::new();
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
}
