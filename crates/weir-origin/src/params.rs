//! Parsing and range-checking of the numbers in paths and query strings.
//!
//! Numbers are plain ASCII decimal (`0`–`9` only: no sign, no spaces, no
//! hex). Query strings are `key=value` pairs joined by `&`; numeric values
//! are not percent-decoded, since every accepted one is a plain number.

use crate::error::OriginError;

/// An inclusive range of accepted values for one named parameter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Range {
    /// Parameter name used in error messages.
    pub(crate) name: &'static str,
    /// Smallest accepted value.
    pub(crate) min: u64,
    /// Largest accepted value.
    pub(crate) max: u64,
}

impl Range {
    /// Parses `raw` as a decimal number inside this range.
    ///
    /// # Errors
    ///
    /// [`OriginError::NotANumber`] if `raw` is empty, has a non-digit or
    /// overflows `u64`; [`OriginError::OutOfRange`] if it is outside
    /// `min..=max`.
    pub(crate) fn parse(self, raw: &str) -> Result<u64, OriginError> {
        if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
            return Err(OriginError::not_a_number(self.name, raw));
        }
        let value: u64 = raw
            .parse()
            .map_err(|_| OriginError::not_a_number(self.name, raw))?;
        if value < self.min || value > self.max {
            return Err(OriginError::OutOfRange {
                name: self.name,
                value,
                min: self.min,
                max: self.max,
            });
        }
        Ok(value)
    }

    /// Parses `raw` if present, or returns `default` (not range-checked).
    ///
    /// # Errors
    ///
    /// As [`Range::parse`].
    pub(crate) fn parse_or(self, raw: Option<&str>, default: u64) -> Result<u64, OriginError> {
        raw.map_or(Ok(default), |raw| self.parse(raw))
    }
}

/// Splits `query` into the values of the `known` keys, in the order of
/// `known`.
///
/// Empty pieces (`a=1&&b=2`, a trailing `&`) are skipped; a key without `=`
/// has the empty value.
///
/// # Errors
///
/// [`OriginError::UnknownParameter`] for a key not in `known`,
/// [`OriginError::DuplicateParameter`] for a key given twice.
pub(crate) fn query_values<'q, const N: usize>(
    query: Option<&'q str>,
    known: &'static [&'static str; N],
) -> Result<[Option<&'q str>; N], OriginError> {
    let mut values = [None; N];
    for (key, value) in query_pairs(query) {
        let slot = known
            .iter()
            .position(|k| *k == key)
            .ok_or_else(|| OriginError::unknown_parameter(key, known))?;
        if values[slot].replace(value).is_some() {
            return Err(OriginError::DuplicateParameter { key: known[slot] });
        }
    }
    Ok(values)
}

/// The `(key, value)` pairs of `query` in order, neither percent-decoded.
///
/// Empty pieces are skipped; a key without `=` has the empty value; the
/// value runs from the first `=` to the next `&`.
pub(crate) fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| piece.split_once('=').unwrap_or((piece, "")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Range = Range {
        name: "n",
        min: 1,
        max: 1000,
    };

    #[test]
    fn accepts_plain_decimal_in_range() {
        assert_eq!(R.parse("1").ok(), Some(1));
        assert_eq!(R.parse("0001000").ok(), Some(1000));
    }

    #[test]
    fn rejects_signs_spaces_and_empty() {
        for raw in ["", "+5", "-5", " 5", "5 ", "0x10", "1e3", "5.0"] {
            assert!(
                matches!(R.parse(raw), Err(OriginError::NotANumber { .. })),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn rejects_overflow_as_not_a_number() {
        assert!(matches!(
            R.parse("99999999999999999999999"),
            Err(OriginError::NotANumber { .. })
        ));
    }

    #[test]
    fn rejects_out_of_range() {
        assert!(matches!(
            R.parse("0"),
            Err(OriginError::OutOfRange { value: 0, .. })
        ));
        assert!(matches!(
            R.parse("1001"),
            Err(OriginError::OutOfRange { .. })
        ));
    }

    #[test]
    fn query_values_in_known_order() {
        let v = query_values(Some("b=2&a=1&"), &["a", "b"]).ok();
        assert_eq!(v, Some([Some("1"), Some("2")]));
        assert_eq!(query_values(None, &["a"]).ok(), Some([None]));
    }

    #[test]
    fn query_pairs_split_at_the_first_equals_sign() {
        let pairs: Vec<_> = query_pairs(Some("a=1=2&&b&c=")).collect();
        assert_eq!(pairs, [("a", "1=2"), ("b", ""), ("c", "")]);
    }

    #[test]
    fn query_rejects_unknown_and_duplicate_keys() {
        assert!(matches!(
            query_values(Some("c=1"), &["a", "b"]),
            Err(OriginError::UnknownParameter { .. })
        ));
        assert!(matches!(
            query_values(Some("a=1&a=2"), &["a", "b"]),
            Err(OriginError::DuplicateParameter { key: "a" })
        ));
    }
}
