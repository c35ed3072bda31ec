//! Parameters, `parameters = *( OWS ";" OWS [ parameter ] )` with
//! `parameter = parameter-name "=" parameter-value` and
//! `parameter-value = ( token / quoted-string )` (RFC 9110 §5.6.6): the
//! `; charset=utf-8` of a media type, the `;q=0.5` of a coding.
//!
//! Recipients meet more than the grammar allows, and this parser takes it
//! the way Weir always has: `OWS` around `=` is tolerated, empty
//! parameters (`;;`) are skipped, a parameter without `=` is returned with
//! no value (callers decide whether that voids the member), and a quoted
//! value is read leniently ([`crate::quoted::unquote`]). `;` inside a
//! quoted string does not separate.

use std::borrow::Cow;

use crate::ows::trim_ows;
use crate::quoted::{split_unquoted, unquote};

/// One parameter: `name=value`, `name="quoted value"`, or a bare `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parameter<'a> {
    name: &'a [u8],
    raw_value: Option<&'a [u8]>,
}

impl<'a> Parameter<'a> {
    /// Splits one `name=value` segment at its first `=`, `OWS` trimmed.
    pub(crate) fn from_segment(segment: &'a [u8]) -> Parameter<'a> {
        let (name, raw_value) = name_value(segment);
        Parameter { name, raw_value }
    }

    /// The name as written (compare it case-insensitively, or use
    /// [`Parameter::is`]). Not checked to be a token.
    pub fn name(&self) -> &'a [u8] {
        self.name
    }

    /// Whether the name is `name`, ignoring ASCII case (parameter names are
    /// case-insensitive, RFC 9110 §5.6.6).
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name.as_bytes())
    }

    /// The value as written after `=` (`OWS` trimmed, quotes and escapes
    /// kept); `None` without `=`.
    pub fn raw_value(&self) -> Option<&'a [u8]> {
        self.raw_value
    }

    /// The value as meant: a quoted string's content unescaped, a token as
    /// it is; `None` without `=`. `charset="utf\-8"` → `utf-8`.
    pub fn value(&self) -> Option<Cow<'a, [u8]>> {
        self.raw_value.map(unquote)
    }
}

/// `segment` split at its first `=`: the name and `Some` of the value,
/// both `OWS`-trimmed; `None` for the value when there is no `=`.
pub(crate) fn name_value(segment: &[u8]) -> (&[u8], Option<&[u8]>) {
    match segment.iter().position(|&b| b == b'=') {
        Some(eq) => (trim_ows(&segment[..eq]), Some(trim_ows(&segment[eq + 1..]))),
        None => (trim_ows(segment), None),
    }
}

/// The parameters of a member, in order; see the [module](self) for what
/// is tolerated. Made by [`split`] or [`parameters`].
#[derive(Debug, Clone)]
pub struct Parameters<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Iterator for Parameters<'a> {
    type Item = Parameter<'a>;

    fn next(&mut self) -> Option<Parameter<'a>> {
        loop {
            let (segment, rest) = split_unquoted(self.rest?, b';');
            self.rest = rest;
            let segment = trim_ows(segment);
            if !segment.is_empty() {
                return Some(Parameter::from_segment(segment));
            }
        }
    }
}

impl<'a> Parameters<'a> {
    /// The value ([`Parameter::value`]) of the first parameter named
    /// `name` (case-insensitive); `None` when there is none, or when the
    /// first one has no `=`. Later parameters of the same name are not
    /// consulted.
    ///
    /// ```
    /// use weir_http::params::parameters;
    /// let p = parameters(br#" a="x;charset=koi8-r"; Charset="utf-8"; charset=b"#);
    /// assert_eq!(p.get("charset").as_deref(), Some(&b"utf-8"[..]));
    /// ```
    pub fn get(mut self, name: &str) -> Option<Cow<'a, [u8]>> {
        self.find(|p| p.is(name))?.value()
    }
}

/// A list member split at its first `;` outside a quoted string: the
/// value before it (`OWS`-trimmed) and its parameters.
///
/// `gzip;q=0.5` → (`gzip`, [`q` = `0.5`]); `text/html; charset="utf-8"`
/// → (`text/html`, [`charset` = `utf-8`]); `br` → (`br`, []).
///
/// ```
/// use weir_http::params::split;
/// let (coding, mut params) = split("gzip ; q=0.5");
/// assert_eq!(coding, b"gzip");
/// let q = params.next().unwrap();
/// assert!(q.is("Q"));
/// assert_eq!(q.raw_value(), Some(&b"0.5"[..]));
/// assert!(params.next().is_none());
/// ```
pub fn split<T: AsRef<[u8]> + ?Sized>(member: &T) -> (&[u8], Parameters<'_>) {
    let (value, rest) = split_unquoted(member.as_ref(), b';');
    (trim_ows(value), Parameters { rest })
}

/// The parameters in `text`, the part of a member after its value (a
/// leading `;` is allowed and ignored): `" charset=utf-8"`,
/// `"; q=0.5"`.
pub fn parameters<T: AsRef<[u8]> + ?Sized>(text: &T) -> Parameters<'_> {
    Parameters {
        rest: Some(text.as_ref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<(&[u8], Option<Vec<u8>>)> {
        parameters(text)
            .map(|p| (p.name(), p.value().map(Cow::into_owned)))
            .collect()
    }

    #[test]
    fn names_values_and_quotes() {
        assert_eq!(
            all(" a=1; B=\"two; 2\" ;c"),
            [
                (&b"a"[..], Some(b"1".to_vec())),
                (b"B", Some(b"two; 2".to_vec())),
                (b"c", None),
            ]
        );
        assert_eq!(
            all(r#"a="x\"y"; b=z"#),
            [
                (&b"a"[..], Some(b"x\"y".to_vec())),
                (b"b", Some(b"z".to_vec()))
            ]
        );
        assert_eq!(all("a="), [(&b"a"[..], Some(Vec::new()))]);
        assert_eq!(all("=x"), [(&b""[..], Some(b"x".to_vec()))]);
    }

    #[test]
    fn tolerated_spacing_and_empty_parameters() {
        assert_eq!(
            all(" ;; Charset = \"latin1\" ;\t; q\t=\t0 "),
            [
                (&b"Charset"[..], Some(b"latin1".to_vec())),
                (b"q", Some(b"0".to_vec())),
            ]
        );
        assert!(all("").is_empty());
        assert!(all(" ; ; ").is_empty());
    }

    #[test]
    fn get_takes_the_first_of_a_name() {
        let get = |t: &'static str| parameters(t).get("charset").map(Cow::into_owned);
        assert_eq!(get(" charset=a; charset=b"), Some(b"a".to_vec()));
        assert_eq!(get(" CHARSET=a"), Some(b"a".to_vec()));
        assert_eq!(
            get(" a=\"x;charset=koi8-r\"; charset=w"),
            Some(b"w".to_vec())
        );
        assert_eq!(get(" charset; charset=b"), None, "the first has no value");
        assert_eq!(get(" foo"), None);
        assert_eq!(get(" charset=\"u\\\"8\" junk; x"), Some(b"u\"8".to_vec()));
    }

    #[test]
    fn split_takes_the_value_first() {
        let (v, p) = split(" text/html ; charset=utf-8");
        assert_eq!(v, b"text/html");
        assert_eq!(p.get("charset").as_deref(), Some(&b"utf-8"[..]));
        let (v, mut p) = split("br");
        assert_eq!(v, b"br");
        assert!(p.next().is_none());
        let (v, _) = split("");
        assert_eq!(v, b"");
        // A `;` in a quoted string is not the end of the value.
        let (v, _) = split("\"a;b\";c");
        assert_eq!(v, b"\"a;b\"");
    }
}
