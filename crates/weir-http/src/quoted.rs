//! Quoted strings, `quoted-string = DQUOTE *( qdtext / quoted-pair )
//! DQUOTE`, where `quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )`
//! (RFC 9110 §5.6.4).
//!
//! A quoted string may hold the separators of the grammar around it
//! (`,`, `;`, `=`): the list and parameter parsers of this crate split
//! only outside them.

use std::borrow::Cow;

/// `qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text`.
const fn is_qdtext(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21 | 0x23..=0x5B | 0x5D..=0x7E | 0x80..=0xFF)
}

/// What may follow a backslash: `HTAB / SP / VCHAR / obs-text`.
const fn is_escapable(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21..=0x7E | 0x80..=0xFF)
}

/// The quoted string at the start of `s`, strictly: its content with each
/// `quoted-pair` unescaped, and the rest of `s` after the closing quote.
///
/// `None` when `s` does not start with `"`, when the closing quote is
/// missing, or when a byte is neither `qdtext` nor part of a
/// `quoted-pair` (a control character, DEL). The content is borrowed when
/// it has no backslash.
///
/// ```
/// use weir_http::quoted::parse;
/// let (content, rest) = parse(br#""a \"b\", c"; x"#).unwrap();
/// assert_eq!(&content[..], br#"a "b", c"#);
/// assert_eq!(rest, b"; x");
/// assert!(parse(br#""open"#).is_none());
/// ```
pub fn parse(s: &[u8]) -> Option<(Cow<'_, [u8]>, &[u8])> {
    let body = s.strip_prefix(b"\"")?;
    let mut owned: Option<Vec<u8>> = None;
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        match b {
            b'"' => {
                let content = match owned {
                    Some(v) => Cow::Owned(v),
                    None => Cow::Borrowed(&body[..i]),
                };
                return Some((content, &body[i + 1..]));
            }
            b'\\' => {
                let &next = body.get(i + 1)?;
                if !is_escapable(next) {
                    return None;
                }
                owned.get_or_insert_with(|| body[..i].to_vec()).push(next);
                i += 2;
            }
            b if is_qdtext(b) => {
                if let Some(v) = owned.as_mut() {
                    v.push(b);
                }
                i += 1;
            }
            _ => return None,
        }
    }
    None
}

/// A parameter or directive value as its sender meant it: the content of
/// a quoted string (quoted-pairs unescaped), or the value as it is when it
/// does not start with `"`.
///
/// Lenient, as recipients of real traffic must be: a quoted string
/// without its closing quote runs to the end of `value`, and anything
/// after the closing quote is ignored. Use [`parse`] to refuse those.
///
/// ```
/// use weir_http::quoted::unquote;
/// assert_eq!(&unquote(br#""x\"y""#)[..], br#"x"y"#);
/// assert_eq!(&unquote(b"utf-8")[..], b"utf-8");
/// assert_eq!(&unquote(br#""open"#)[..], b"open");
/// ```
pub fn unquote(value: &[u8]) -> Cow<'_, [u8]> {
    let Some(body) = value.strip_prefix(b"\"") else {
        return Cow::Borrowed(value);
    };
    let mut owned: Option<Vec<u8>> = None;
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        match b {
            b'"' => break,
            b'\\' => {
                let v = owned.get_or_insert_with(|| body[..i].to_vec());
                v.extend(body.get(i + 1));
                i += 2;
            }
            b => {
                if let Some(v) = owned.as_mut() {
                    v.push(b);
                }
                i += 1;
            }
        }
    }
    match owned {
        Some(v) => Cow::Owned(v),
        None => Cow::Borrowed(&body[..i.min(body.len())]),
    }
}

/// Splits `s` at its first `delim` outside a quoted string: the bytes
/// before it, and `Some` of the bytes after it (`None` when there is no
/// such `delim`).
///
/// A `"` opens or closes a quoted string wherever it appears; inside one, a
/// backslash escapes the next byte. An unterminated quoted string runs to
/// the end of `s`.
pub(crate) fn split_unquoted(s: &[u8], delim: u8) -> (&[u8], Option<&[u8]>) {
    let mut quoted = false;
    let mut escaped = false;
    for (i, &b) in s.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == delim && !quoted => return (&s[..i], Some(&s[i + 1..])),
            _ => {}
        }
    }
    (s, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_unescapes_and_returns_the_rest() {
        let (c, rest) = parse(b"\"abc\"def").expect("quoted");
        assert!(matches!(c, Cow::Borrowed(b"abc")));
        assert_eq!(rest, b"def");
        let (c, rest) = parse(b"\"a\\\\b\\\"c\"").expect("quoted");
        assert_eq!(&c[..], b"a\\b\"c");
        assert_eq!(rest, b"");
        let (c, _) = parse(b"\"\"").expect("empty");
        assert_eq!(&c[..], b"");
        // obs-text is qdtext, and may be escaped.
        let (c, _) = parse(b"\"caf\xe9 \\\xe9\"").expect("obs-text");
        assert_eq!(&c[..], b"caf\xe9 \xe9");
        // Separators are content.
        let (c, _) = parse(b"\"a, b; c=d\"").expect("separators");
        assert_eq!(&c[..], b"a, b; c=d");
    }

    #[test]
    fn parse_refuses_malformed_strings() {
        assert!(parse(b"abc").is_none());
        assert!(parse(b"").is_none());
        assert!(parse(b"\"abc").is_none());
        assert!(parse(b"\"abc\\\"").is_none(), "the last quote is escaped");
        assert!(parse(b"\"abc\\").is_none());
        assert!(parse(b"\"a\x01b\"").is_none(), "control character");
        assert!(parse(b"\"a\x7fb\"").is_none(), "DEL");
        assert!(parse(b"\"a\\\nb\"").is_none(), "escaped line feed");
        assert!(parse(b" \"a\"").is_none(), "leading space");
    }

    #[test]
    fn unquote_is_lenient() {
        assert_eq!(&unquote(b"token")[..], b"token");
        assert_eq!(&unquote(b"")[..], b"");
        assert_eq!(&unquote(b"\"x\"")[..], b"x");
        assert_eq!(&unquote(b"\"x\"junk")[..], b"x");
        assert_eq!(&unquote(b"\"open")[..], b"open");
        assert_eq!(&unquote(b"\"end\\")[..], b"end");
        assert_eq!(&unquote(b"\"")[..], b"");
        assert_eq!(&unquote(b"\"a\\\"b\"")[..], b"a\"b");
        assert!(matches!(unquote(b"\"plain\""), Cow::Borrowed(b"plain")));
        // Not quoted: kept as is, quotes inside included.
        assert_eq!(&unquote(b"a\"b\"")[..], b"a\"b\"");
    }

    #[test]
    fn split_outside_quotes_only() {
        assert_eq!(split_unquoted(b"a,b", b','), (&b"a"[..], Some(&b"b"[..])));
        assert_eq!(
            split_unquoted(b"\"a,b\",c", b','),
            (&b"\"a,b\""[..], Some(&b"c"[..]))
        );
        assert_eq!(
            split_unquoted(b"\"a\\\",b\",c", b','),
            (&b"\"a\\\",b\""[..], Some(&b"c"[..]))
        );
        assert_eq!(split_unquoted(b"\"a,b", b','), (&b"\"a,b"[..], None));
        assert_eq!(
            split_unquoted(b"a\\,b", b','),
            (&b"a\\"[..], Some(&b"b"[..])),
            "no escapes outside quotes"
        );
        assert_eq!(split_unquoted(b"", b','), (&b""[..], None));
        assert_eq!(split_unquoted(b",", b','), (&b""[..], Some(&b""[..])));
    }
}
