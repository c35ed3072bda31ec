//! What a `<` (or, inside `<!--esi`, a `-`) starts: decided from a few
//! bytes, or "need more" when they run out first.

use super::tag::ends_name;

/// The most bytes [`classify`] looks at before it decides
/// (`</esi:include` and the byte after it).
pub(crate) const MAX_LOOKAHEAD: usize = 14;

/// What the bytes at a `<` or `-` are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Can't tell yet: all the bytes given are a prefix of something.
    NeedMore,
    /// The first `n` bytes are plain text (a lone `<`, `<!DOCTYPE`'s `<`, a `-`).
    Text(usize),
    /// A start or end tag named `kind`; `n` bytes of it (`<` and name, or a
    /// prefix of the name) are consumed, the rest is the tag's inside.
    Tag(Kind, usize),
    /// `<!--` (not `<!--esi`): a comment, 4 bytes.
    CommentOpen,
    /// `<!--esi`: 7 bytes.
    EsiOpen,
    /// `-->` inside `<!--esi`: 3 bytes.
    EsiClose,
}

/// Which tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any other start or end tag: passed through.
    Ordinary,
    Fragment,
    EsiInclude,
    EsiRemove,
    Script,
    Style,
    /// `</body`, the first one.
    BodyEnd,
    /// `</esi:include`.
    EsiIncludeEnd,
}

const START: [(&[u8], Kind); 5] = [
    (b"fragment", Kind::Fragment),
    (b"esi:include", Kind::EsiInclude),
    (b"esi:remove", Kind::EsiRemove),
    (b"script", Kind::Script),
    (b"style", Kind::Style),
];

const END: [(&[u8], Kind); 2] = [
    (b"body", Kind::BodyEnd),
    (b"esi:include", Kind::EsiIncludeEnd),
];

/// Classifies `buf`, which starts with `<`, or with `-` when `in_esi`.
/// `body_seen`: the first `</body` was already reported.
#[inline]
pub(crate) fn classify(buf: &[u8], in_esi: bool, body_seen: bool) -> Class {
    let Some(&first) = buf.first() else {
        return Class::NeedMore;
    };
    if first == b'-' {
        return match (buf.get(1), buf.get(2)) {
            (None, _) | (Some(b'-'), None) => Class::NeedMore,
            (Some(b'-'), Some(b'>')) if in_esi => Class::EsiClose,
            _ => Class::Text(1),
        };
    }
    let Some(&second) = buf.get(1) else {
        return Class::NeedMore;
    };
    match second {
        b'!' => bang(buf),
        b'/' => match buf.get(2) {
            None => Class::NeedMore,
            // Most end tags: decided by their first letter.
            Some(b'b' | b'B') if !body_seen => name(buf, 2, &END),
            Some(b'e' | b'E') => name(buf, 2, &END[1..]),
            Some(b) if b.is_ascii_alphabetic() => Class::Tag(Kind::Ordinary, 2),
            Some(_) => Class::Text(1),
        },
        // Most start tags: decided by their first letter.
        b'f' | b'F' | b'e' | b'E' | b's' | b'S' => name(buf, 1, &START),
        b if b.is_ascii_alphabetic() => Class::Tag(Kind::Ordinary, 1),
        _ => Class::Text(1),
    }
}

/// `<!`: a comment, an ESI comment, or text (doctype, bogus comments).
#[inline(never)]
fn bang(buf: &[u8]) -> Class {
    const OPEN: &[u8] = b"<!--";
    const ESI: &[u8] = b"esi";
    let have = buf.len().min(OPEN.len());
    if buf[..have] != OPEN[..have] {
        return Class::Text(1);
    }
    if have < OPEN.len() {
        return Class::NeedMore;
    }
    let tail = &buf[OPEN.len()..];
    let have = tail.len().min(ESI.len());
    if !tail[..have].eq_ignore_ascii_case(&ESI[..have]) {
        return Class::CommentOpen;
    }
    match tail.get(ESI.len()) {
        None => Class::NeedMore,
        Some(b) if b.is_ascii_alphanumeric() => Class::CommentOpen,
        Some(_) => Class::EsiOpen,
    }
}

/// A tag name from `buf[from]` against `names` (lower case): the kind when
/// it is one of them, `Ordinary` as soon as it can't be.
#[inline(never)]
fn name(buf: &[u8], from: usize, names: &[(&[u8], Kind)]) -> Class {
    let tail = &buf[from..];
    // The longest prefix of the name that matches one of `names`.
    let mut longest = 0;
    for &(n, kind) in names {
        let have = tail.len().min(n.len());
        let same = tail[..have]
            .iter()
            .zip(n)
            .take_while(|(a, b)| a.to_ascii_lowercase() == **b)
            .count();
        if same == n.len() {
            match tail.get(n.len()) {
                None => return Class::NeedMore,
                Some(&b) if ends_name(b) => return Class::Tag(kind, from + n.len()),
                Some(_) => {}
            }
        } else if same == tail.len() {
            return Class::NeedMore;
        }
        longest = longest.max(same);
    }
    // Not one of them: the name goes on at least to the first byte where
    // they all differ (or to where it ends, if earlier).
    let end = tail
        .iter()
        .position(|&b| ends_name(b))
        .map_or(longest, |e| e.min(longest));
    Class::Tag(Kind::Ordinary, from + end)
}

/// How `buf` (which starts with `<`) compares with the end tag `pat`
/// (`</name`, lower case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndMatch {
    /// Not that end tag.
    No,
    /// A prefix of it; need more bytes.
    Partial,
    /// `pat` then a byte that ends a name (not consumed).
    Yes,
}

/// Matches the end tag `pat` at the start of `buf`, ASCII case-insensitively.
pub(crate) fn match_end(buf: &[u8], pat: &[u8]) -> EndMatch {
    let have = buf.len().min(pat.len());
    if !buf[..have].eq_ignore_ascii_case(&pat[..have]) {
        return EndMatch::No;
    }
    match buf.get(pat.len()) {
        None => EndMatch::Partial,
        Some(&b) if ends_name(b) => EndMatch::Yes,
        Some(_) => EndMatch::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Class {
        classify(s.as_bytes(), false, false)
    }

    #[test]
    fn start_tags() {
        assert_eq!(c("<fragment "), Class::Tag(Kind::Fragment, 9));
        assert_eq!(c("<FRAGMENT>"), Class::Tag(Kind::Fragment, 9));
        assert_eq!(c("<fragment/"), Class::Tag(Kind::Fragment, 9));
        assert_eq!(c("<fragment"), Class::NeedMore);
        assert_eq!(c("<fragments"), Class::Tag(Kind::Ordinary, 9));
        assert_eq!(c("<Esi:Include "), Class::Tag(Kind::EsiInclude, 12));
        assert_eq!(c("<esi:remove>"), Class::Tag(Kind::EsiRemove, 11));
        assert_eq!(c("<esi:x"), Class::Tag(Kind::Ordinary, 5));
        assert_eq!(c("<script>"), Class::Tag(Kind::Script, 7));
        assert_eq!(c("<style\n"), Class::Tag(Kind::Style, 6));
        assert_eq!(c("<s"), Class::NeedMore);
        assert_eq!(c("<sp"), Class::Tag(Kind::Ordinary, 2));
        assert_eq!(c("<div"), Class::Tag(Kind::Ordinary, 1));
        assert_eq!(c("<b>"), Class::Tag(Kind::Ordinary, 1));
    }

    #[test]
    fn end_tags_comments_and_text() {
        assert_eq!(c("</body>"), Class::Tag(Kind::BodyEnd, 6));
        assert_eq!(c("</BODY "), Class::Tag(Kind::BodyEnd, 6));
        assert_eq!(
            classify(b"</body>", false, true),
            Class::Tag(Kind::Ordinary, 2)
        );
        assert_eq!(c("</bodyx"), Class::Tag(Kind::Ordinary, 6));
        assert_eq!(c("</esi:include>"), Class::Tag(Kind::EsiIncludeEnd, 13));
        assert_eq!(c("</esi:include"), Class::NeedMore);
        assert_eq!(c("</ x"), Class::Text(1));
        assert_eq!(c("< b"), Class::Text(1));
        assert_eq!(c("<"), Class::NeedMore);
        assert_eq!(c("<!DOCTYPE"), Class::Text(1));
        assert_eq!(c("<!-"), Class::NeedMore);
        assert_eq!(c("<!-x"), Class::Text(1));
        assert_eq!(c("<!-- x"), Class::CommentOpen);
        assert_eq!(c("<!--es"), Class::NeedMore);
        assert_eq!(c("<!--esi"), Class::NeedMore);
        assert_eq!(c("<!--esi "), Class::EsiOpen);
        assert_eq!(c("<!--ESI<"), Class::EsiOpen);
        assert_eq!(c("<!--esix"), Class::CommentOpen);
        assert_eq!(c("<!-->"), Class::CommentOpen);
    }

    #[test]
    fn esi_close() {
        assert_eq!(classify(b"-->", true, false), Class::EsiClose);
        assert_eq!(classify(b"--", true, false), Class::NeedMore);
        assert_eq!(classify(b"-x", true, false), Class::Text(1));
        assert_eq!(classify(b"---", true, false), Class::Text(1));
    }

    #[test]
    fn end_matcher() {
        assert_eq!(match_end(b"</script>", b"</script"), EndMatch::Yes);
        assert_eq!(match_end(b"</SCRIPT ", b"</script"), EndMatch::Yes);
        assert_eq!(match_end(b"</scr", b"</script"), EndMatch::Partial);
        assert_eq!(match_end(b"</script", b"</script"), EndMatch::Partial);
        assert_eq!(match_end(b"</scripts", b"</script"), EndMatch::No);
        assert_eq!(match_end(b"</sx", b"</script"), EndMatch::No);
    }
}
