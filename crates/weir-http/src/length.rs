//! `Content-Length = 1*DIGIT` (RFC 9110 §8.6).
//!
//! RFC 9110 §8.6 lets a recipient accept a list of identical values
//! (`42, 42`, or `42` on two field lines, which some senders produce by
//! joining fields) as that one value, and hyper does when it frames a
//! message. This module does the same, so that the length Weir reads is
//! always the length hyper framed the body by. Anything else (differing
//! values, an empty element, a sign, a space inside, a number past
//! `u64`) is no valid length.

use http::{HeaderMap, HeaderValue, header};

use crate::delta;
use crate::list::elements;

/// The `Content-Length` of a message: `Some` when there is at least one
/// field line and every element of every line is the same `1*DIGIT`
/// value; `None` otherwise.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use weir_http::length::content_length;
/// let mut h = HeaderMap::new();
/// assert_eq!(content_length(&h), None);
/// h.insert("content-length", HeaderValue::from_static("42"));
/// assert_eq!(content_length(&h), Some(42));
/// h.insert("content-length", HeaderValue::from_static("42, 42"));
/// assert_eq!(content_length(&h), Some(42));
/// h.append("content-length", HeaderValue::from_static("43"));
/// assert_eq!(content_length(&h), None);
/// ```
pub fn content_length(headers: &HeaderMap) -> Option<u64> {
    lines(headers.get_all(header::CONTENT_LENGTH))
}

/// The length one `Content-Length` field line states: `42` or `42, 42`
/// → 42; `None` for a malformed value or differing values.
pub fn parse(value: &HeaderValue) -> Option<u64> {
    lines([value])
}

fn lines<'a>(values: impl IntoIterator<Item = &'a HeaderValue>) -> Option<u64> {
    let mut length = None;
    for value in values {
        for element in elements(value) {
            let n = delta::parse(element)?;
            if length.replace(n).is_some_and(|l| l != n) {
                return None;
            }
        }
    }
    length
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cl(lines: &[&'static str]) -> Option<u64> {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(header::CONTENT_LENGTH, HeaderValue::from_static(l));
        }
        content_length(&h)
    }

    #[test]
    fn one_valid_value() {
        assert_eq!(cl(&["0"]), Some(0));
        assert_eq!(cl(&["42"]), Some(42));
        assert_eq!(cl(&[" 42\t"]), Some(42));
        assert_eq!(cl(&["0042"]), Some(42));
        assert_eq!(cl(&["18446744073709551615"]), Some(u64::MAX));
        assert_eq!(cl(&[]), None);
    }

    #[test]
    fn identical_values_are_one() {
        assert_eq!(cl(&["42, 42"]), Some(42));
        assert_eq!(cl(&["42,42,42"]), Some(42));
        assert_eq!(cl(&["42", "42"]), Some(42));
        assert_eq!(cl(&["42", "042"]), Some(42), "the same number");
    }

    #[test]
    fn malformed_or_differing_values() {
        for bad in [
            "",
            "42, 43",
            "42,",
            ",42",
            "4 2",
            "+42",
            "-1",
            "0x10",
            "42.0",
            "\"42\"",
            "18446744073709551616",
            "abc",
        ] {
            assert_eq!(cl(&[bad]), None, "{bad:?}");
        }
        assert_eq!(cl(&["42", "43"]), None);
        assert_eq!(cl(&["42", ""]), None);
        assert_eq!(parse(&HeaderValue::from_static("7, 7")), Some(7));
        assert_eq!(parse(&HeaderValue::from_static("7, 8")), None);
    }
}
