//! Media types, `media-type = type "/" subtype parameters` (RFC 9110
//! §8.3.1): the value of `Content-Type`.
//!
//! The *essence* is `type/subtype` without parameters; compare it
//! case-insensitively (RFC 9110 §8.3.1). Parameters are read with
//! [`crate::params`].

use std::borrow::Cow;

use crate::ows::trim_ows;
use crate::params::parameters;
use crate::quoted::split_unquoted;

/// A media type split at its first `;`: the essence (`OWS`-trimmed, as
/// written) and the parameter text after the `;` (empty without one).
///
/// `text/html; charset=utf-8` → (`text/html`, ` charset=utf-8`).
pub fn split<T: AsRef<[u8]> + ?Sized>(value: &T) -> (&[u8], &[u8]) {
    let (essence, params) = split_unquoted(value.as_ref(), b';');
    (trim_ows(essence), params.unwrap_or_default())
}

/// The essence of a media type, `type/subtype` as written:
/// ` Text/HTML ; charset=utf-8` → `Text/HTML`.
///
/// ```
/// use weir_http::media_type::essence;
/// assert_eq!(essence(" Text/HTML ; charset=utf-8"), b"Text/HTML");
/// assert_eq!(essence("application/json"), b"application/json");
/// ```
pub fn essence<T: AsRef<[u8]> + ?Sized>(value: &T) -> &[u8] {
    split(value).0
}

/// Whether the media type's essence is `expected` (`type/subtype`),
/// ignoring ASCII case.
pub fn is<T: AsRef<[u8]> + ?Sized>(value: &T, expected: &str) -> bool {
    essence(value).eq_ignore_ascii_case(expected.as_bytes())
}

/// Whether a `Content-Type` value is HTML: its essence is `text/html`
/// (any case, any parameters).
///
/// ```
/// use http::HeaderValue;
/// use weir_http::media_type::is_html;
/// assert!(is_html(&HeaderValue::from_static("Text/HTML; charset=utf-8")));
/// assert!(!is_html("text/html-sandboxed") && !is_html("application/xhtml+xml"));
/// ```
pub fn is_html<T: AsRef<[u8]> + ?Sized>(value: &T) -> bool {
    is(value, "text/html")
}

/// The value of the media type's first parameter named `name`
/// (case-insensitive), unquoted; see [`crate::params::Parameters::get`].
pub fn parameter<'a, T: AsRef<[u8]> + ?Sized>(value: &'a T, name: &str) -> Option<Cow<'a, [u8]>> {
    parameters(split(value).1).get(name)
}

/// The `charset` of a media type: its first `charset` parameter,
/// unquoted, `OWS`-trimmed; `None` when there is none or it is empty.
/// Labels are case-insensitive; compare or look them up accordingly.
///
/// ```
/// use weir_http::media_type::charset;
/// assert_eq!(charset(r#"text/html; Charset = "latin1""#).as_deref(), Some(&b"latin1"[..]));
/// assert_eq!(charset("text/html").as_deref(), None);
/// ```
pub fn charset<T: AsRef<[u8]> + ?Sized>(value: &T) -> Option<Cow<'_, [u8]>> {
    let value = match parameter(value, "charset")? {
        Cow::Borrowed(b) => Cow::Borrowed(trim_ows(b)),
        Cow::Owned(o) => Cow::Owned(trim_ows(&o).to_vec()),
    };
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn essences() {
        assert_eq!(essence("text/html"), b"text/html");
        assert_eq!(essence("\ttext/html\t;x=1"), b"text/html");
        assert_eq!(essence(""), b"");
        assert_eq!(essence(";charset=utf-8"), b"");
        assert_eq!(split("text/plain"), (&b"text/plain"[..], &b""[..]));
        assert_eq!(split("a/b;c=d;e"), (&b"a/b"[..], &b"c=d;e"[..]));
    }

    #[test]
    fn html_or_not() {
        for yes in [
            "text/html",
            "TEXT/HTML",
            " text/html ",
            "text/html;charset=utf-8",
            "text/Html; a=\"b;c\"",
        ] {
            assert!(is_html(yes), "{yes:?}");
        }
        for no in [
            "",
            "text/plain",
            "text/htm",
            "text/html5",
            "text /html",
            "text/html,text/plain",
            "\"text/html\"",
        ] {
            assert!(!is_html(no), "{no:?}");
        }
        // obs-text in a quoted parameter is allowed (RFC 9110 §5.6.4).
        let v = http::HeaderValue::from_bytes(b"text/html; title=\"caf\xe9\"").expect("value");
        assert!(is_html(&v));
        assert!(is(&v, "TEXT/html"));
    }

    #[test]
    fn charset_grammar() {
        let c = |v: &'static str| charset(v).map(Cow::into_owned);
        assert_eq!(c("text/html; charset=utf-8"), Some(b"utf-8".to_vec()));
        assert_eq!(c("text/html;charset=\" utf-8 \""), Some(b"utf-8".to_vec()));
        assert_eq!(
            c("text/html; a=\"x;charset=koi8-r\"; charset=windows-1252"),
            Some(b"windows-1252".to_vec())
        );
        assert_eq!(
            c("text/html; a=\"x\\\"y\"; charset=utf-8 "),
            Some(b"utf-8".to_vec())
        );
        assert_eq!(c("text/html; charset=\"a\\\"b\""), Some(b"a\"b".to_vec()));
        assert_eq!(c("text/html; charset=a; charset=b"), Some(b"a".to_vec()));
        assert_eq!(c("text/html; charset="), None);
        assert_eq!(c("text/html; charset=\"\""), None);
        assert_eq!(c("text/html;;"), None);
        assert_eq!(c("text/html; foo"), None);
        assert_eq!(parameter("a/b; X=1", "x").as_deref(), Some(&b"1"[..]));
    }
}
