//! Cache directives, `cache-directive = token [ "=" ( token /
//! quoted-string ) ]` (RFC 9111 §5.2), the members of `Cache-Control`;
//! `Pragma` has the same shape (`extension-pragma`, RFC 9111 §5.4).
//!
//! Directive names are case-insensitive; an argument may be quoted
//! (`max-age="60"` is `max-age=60`, RFC 9111 §5.2). The members come from
//! [`crate::list`], so a comma inside a quoted argument
//! (`no-cache="set-cookie, x"`) does not start a directive.

use std::borrow::Cow;

use http::HeaderValue;

use crate::list::members_all;
use crate::params::name_value;
use crate::quoted::unquote;

/// One directive: `no-store`, `max-age=60`, `private="set-cookie"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Directive<'a> {
    name: &'a [u8],
    raw_argument: Option<&'a [u8]>,
}

impl<'a> Directive<'a> {
    /// The name as written. Not checked to be a token.
    pub fn name(&self) -> &'a [u8] {
        self.name
    }

    /// Whether the name is `name`, ignoring ASCII case.
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name.as_bytes())
    }

    /// The argument as written after `=` (`OWS` trimmed, quotes kept);
    /// `None` without `=`.
    pub fn raw_argument(&self) -> Option<&'a [u8]> {
        self.raw_argument
    }

    /// The argument as meant, unquoted ([`crate::quoted::unquote`]);
    /// `None` without `=`. `max-age="60"` → `60`.
    pub fn argument(&self) -> Option<Cow<'a, [u8]>> {
        self.raw_argument.map(unquote)
    }
}

/// One list member read as a directive: the name before the first `=`,
/// the argument after it (`OWS` around `=` tolerated).
///
/// ```
/// use weir_http::directive::parse;
/// let d = parse(br#"No-Cache="set-cookie, x""#);
/// assert!(d.is("no-cache"));
/// assert_eq!(d.argument().as_deref(), Some(&b"set-cookie, x"[..]));
/// assert_eq!(parse(b"no-store").argument(), None);
/// ```
pub fn parse(member: &[u8]) -> Directive<'_> {
    let (name, raw_argument) = name_value(member);
    Directive { name, raw_argument }
}

/// The directives of every field line of one field (`HeaderMap::get_all`
/// of `Cache-Control` or `Pragma`), in order.
pub fn directives<'a, I>(values: I) -> impl Iterator<Item = Directive<'a>>
where
    I: IntoIterator<Item = &'a HeaderValue>,
{
    members_all(values).map(parse)
}

/// Whether the field lines carry directive `name` (with or without an
/// argument).
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use weir_http::directive::has;
/// let mut h = HeaderMap::new();
/// h.insert("cache-control", HeaderValue::from_static(r#"private="x, no-transform", max-age=5"#));
/// assert!(has(h.get_all("cache-control"), "Max-Age"));
/// assert!(!has(h.get_all("cache-control"), "no-transform"), "inside a quoted string");
/// ```
pub fn has<'a, I>(values: I, name: &str) -> bool
where
    I: IntoIterator<Item = &'a HeaderValue>,
{
    directives(values).any(|d| d.is(name))
}

/// The argument (unquoted) of the first directive named `name` that has
/// one; directives of that name without `=` are passed over. `None` when
/// there is none.
pub fn argument<'a, I>(values: I, name: &str) -> Option<Cow<'a, [u8]>>
where
    I: IntoIterator<Item = &'a HeaderValue>,
{
    directives(values)
        .filter(|d| d.is(name))
        .find_map(|d| d.argument())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn fields(lines: &[&'static str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append("cache-control", HeaderValue::from_static(l));
        }
        h
    }

    #[test]
    fn names_are_case_insensitive_and_arguments_unquoted() {
        let h = fields(&["Max-Age = \"60\", s-maxage=30", "NO-STORE"]);
        let cc = || h.get_all("cache-control");
        assert_eq!(argument(cc(), "max-age").as_deref(), Some(&b"60"[..]));
        assert_eq!(argument(cc(), "S-MAXAGE").as_deref(), Some(&b"30"[..]));
        assert!(has(cc(), "no-store"));
        assert!(!has(cc(), "no-cache"));
        let names: Vec<&[u8]> = directives(cc()).map(|d| d.name()).collect();
        assert_eq!(names, [&b"Max-Age"[..], b"s-maxage", b"NO-STORE"]);
    }

    #[test]
    fn quoted_commas_do_not_start_directives() {
        let h = fields(&["no-cache=\"a, must-revalidate, stale-if-error=30\", max-age=1"]);
        let cc = || h.get_all("cache-control");
        assert!(!has(cc(), "must-revalidate"));
        assert_eq!(argument(cc(), "stale-if-error"), None);
        assert_eq!(
            argument(cc(), "no-cache").as_deref(),
            Some(&b"a, must-revalidate, stale-if-error=30"[..])
        );
        let h = fields(&[r#"private="x\", no-store", public"#]);
        assert!(!has(h.get_all("cache-control"), "no-store"));
        assert!(has(h.get_all("cache-control"), "public"));
    }

    #[test]
    fn argument_skips_directives_without_one() {
        let h = fields(&["stale-if-error, stale-if-error=30, stale-if-error=40"]);
        assert_eq!(
            argument(h.get_all("cache-control"), "stale-if-error").as_deref(),
            Some(&b"30"[..])
        );
        let d = parse(b"max-age=");
        assert_eq!(d.raw_argument(), Some(&b""[..]));
        let d = parse(b"=5");
        assert_eq!(d.name(), b"");
    }

    #[test]
    fn empty_and_odd_values() {
        let h = fields(&["", " , ,", "\tpublic\t"]);
        let names: Vec<&[u8]> = directives(h.get_all("cache-control"))
            .map(|d| d.name())
            .collect();
        assert_eq!(names, [&b"public"[..]]);
    }
}
