//! Comma-separated lists, `#element` (RFC 9110 §5.6.1), the shape of most
//! field values: `Cache-Control`, `Connection`, `Vary`, the codings.
//!
//! Commas inside quoted strings (RFC 9110 §5.6.4) do not separate. The
//! field lines of one field combine into one list (RFC 9110 §5.3):
//! [`members_all`] reads them in order.

use http::HeaderValue;

use crate::ows::trim_ows;
use crate::quoted::split_unquoted;

/// Every element of a list, empty ones included, each without the `OWS`
/// around it: `b"a, ,b,"` → `a`, ``, `b`, ``; an empty value is one empty
/// element. See [`elements`].
#[derive(Debug, Clone)]
pub struct Elements<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (element, rest) = split_unquoted(self.rest?, b',');
        self.rest = rest;
        Some(trim_ows(element))
    }
}

/// The elements of one field value, empty ones included (see
/// [`Elements`]). For the rare rule that must see them; most callers want
/// [`members`].
///
/// ```
/// use weir_http::list::elements;
/// let all: Vec<&[u8]> = elements("chunked, ").collect();
/// assert_eq!(all, [&b"chunked"[..], b""]);
/// ```
pub fn elements<T: AsRef<[u8]> + ?Sized>(value: &T) -> Elements<'_> {
    Elements {
        rest: Some(value.as_ref()),
    }
}

/// The non-empty members of a list, each without the `OWS` around it. See
/// [`members`].
#[derive(Debug, Clone)]
pub struct Members<'a> {
    elements: Elements<'a>,
}

impl<'a> Iterator for Members<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        self.elements.by_ref().find(|e| !e.is_empty())
    }
}

/// The members of one field value: split at commas outside quoted
/// strings, `OWS` trimmed, empty elements skipped (a recipient must
/// ignore them, RFC 9110 §5.6.1).
///
/// `private="a, b", , max-age=3 ,x` → `private="a, b"`, `max-age=3`, `x`.
/// The members are returned as written (quotes and escapes kept); split
/// them further with [`crate::params`] or [`crate::directive`].
///
/// ```
/// use weir_http::list::members;
/// let m: Vec<&[u8]> = members(r#"private="a, b", , max-age=3 ,x"#).collect();
/// assert_eq!(m, [&br#"private="a, b""#[..], b"max-age=3", b"x"]);
/// ```
pub fn members<T: AsRef<[u8]> + ?Sized>(value: &T) -> Members<'_> {
    Members {
        elements: elements(value),
    }
}

/// The members of every field line of one field, in order: `values` is
/// what `HeaderMap::get_all` returns. Each line is split on its own (a
/// quoted string never spans lines).
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use weir_http::list::members_all;
/// let mut h = HeaderMap::new();
/// h.append("vary", HeaderValue::from_static("accept, "));
/// h.append("vary", HeaderValue::from_static("origin"));
/// let m: Vec<&[u8]> = members_all(h.get_all("vary")).collect();
/// assert_eq!(m, [&b"accept"[..], b"origin"]);
/// ```
pub fn members_all<'a, I>(values: I) -> impl Iterator<Item = &'a [u8]>
where
    I: IntoIterator<Item = &'a HeaderValue>,
{
    values.into_iter().flat_map(|v| members(v.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(value: &str) -> Vec<&[u8]> {
        members(value).collect()
    }

    #[test]
    fn members_respect_quotes() {
        assert_eq!(
            m("private=\"a, no-transform\", , max-age=3 ,x"),
            [&b"private=\"a, no-transform\""[..], b"max-age=3", b"x"]
        );
        // An escaped quote does not close the string.
        assert_eq!(m(r#"a="x\", y", b"#), [&br#"a="x\", y""#[..], b"b"]);
        // An escaped backslash does not escape the closing quote.
        assert_eq!(m(r#"a="x\\", b"#), [&br#"a="x\\""#[..], b"b"]);
        // Unterminated: the string runs to the end.
        assert_eq!(m(r#"a="x, b"#), [&br#"a="x, b"#[..]]);
    }

    #[test]
    fn empty_members_and_odd_whitespace() {
        assert!(m("").is_empty());
        assert!(m(" , ,\t,").is_empty());
        assert_eq!(m(",a,,b,"), [&b"a"[..], b"b"]);
        assert_eq!(m(" \ta \t,\tb c "), [&b"a"[..], b"b c"]);
        assert_eq!(m("a"), [&b"a"[..]]);
    }

    #[test]
    fn elements_keep_empty_ones() {
        let e = |v: &'static str| elements(v).collect::<Vec<_>>();
        assert_eq!(e(""), [&b""[..]]);
        assert_eq!(e("a,"), [&b"a"[..], b""]);
        assert_eq!(e(",a"), [&b""[..], b"a"]);
        assert_eq!(e(" a , \"b,c\" "), [&b"a"[..], b"\"b,c\""]);
    }

    #[test]
    fn obs_text_is_kept() {
        let v = HeaderValue::from_bytes(b"x=\"caf\xe9, y\", z").expect("value");
        let all: Vec<&[u8]> = members(&v).collect();
        assert_eq!(all, [&b"x=\"caf\xe9, y\""[..], b"z"]);
    }

    #[test]
    fn all_lines_are_one_list() {
        let mut h = http::HeaderMap::new();
        h.append("x", HeaderValue::from_static("a, \"b"));
        h.append("x", HeaderValue::from_static("c\", d"));
        // A quote left open on one line does not swallow the next.
        let all: Vec<&[u8]> = members_all(h.get_all("x")).collect();
        assert_eq!(all, [&b"a"[..], b"\"b", b"c\", d"]);
        assert_eq!(members_all(h.get_all("missing")).count(), 0);
    }
}
