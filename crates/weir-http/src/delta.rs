//! Delta seconds, `delta-seconds = 1*DIGIT` (RFC 9111 §1.2.2): `Age`,
//! `max-age`, `s-maxage`, `stale-if-error` and friends.

/// The largest delta-seconds value a cache needs to represent: RFC 9111
/// §1.2.2 has a recipient take any greater value, or one that overflows,
/// as 2147483648 (2^31).
pub const MAX_DELTA_SECONDS: u64 = 1 << 31;

/// A delta-seconds value exactly: `None` when `value` is not `1*DIGIT`
/// (empty, a sign, a space, a quote, a dot) or does not fit a `u64`.
///
/// ```
/// use weir_http::delta::parse;
/// assert_eq!(parse(b"0060"), Some(60));
/// assert_eq!(parse(b"+60"), None);
/// assert_eq!(parse(b"99999999999999999999"), None);
/// ```
pub fn parse(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        let digit = digit(b)?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// A delta-seconds value as a cache takes it (RFC 9111 §1.2.2): `None`
/// when `value` is not `1*DIGIT`; a value greater than
/// [`MAX_DELTA_SECONDS`], however many digits it has, is
/// [`MAX_DELTA_SECONDS`].
///
/// ```
/// use weir_http::delta::{MAX_DELTA_SECONDS, parse_capped};
/// assert_eq!(parse_capped(b"60"), Some(60));
/// assert_eq!(parse_capped(b"18446744073709551616"), Some(MAX_DELTA_SECONDS));
/// assert_eq!(parse_capped(b"6O"), None);
/// ```
pub fn parse_capped(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |n, &b| {
        let digit = digit(b)?;
        // n ≤ 2^31, so n * 10 + 9 cannot overflow.
        Some((n * 10 + digit).min(MAX_DELTA_SECONDS))
    })
}

fn digit(b: u8) -> Option<u64> {
    b.is_ascii_digit().then(|| u64::from(b - b'0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_values() {
        assert_eq!(parse(b"0"), Some(0));
        assert_eq!(parse(b"2147483648"), Some(MAX_DELTA_SECONDS));
        assert_eq!(parse(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse(b"18446744073709551616"), None);
        for bad in ["", " 1", "1 ", "-1", "+1", "1.0", "\"1\"", "1e3", "x"] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn capped_values() {
        assert_eq!(parse_capped(b"2147483647"), Some(MAX_DELTA_SECONDS - 1));
        assert_eq!(parse_capped(b"2147483648"), Some(MAX_DELTA_SECONDS));
        assert_eq!(parse_capped(b"2147483649"), Some(MAX_DELTA_SECONDS));
        assert_eq!(
            parse_capped(b"99999999999999999999999999999999999999"),
            Some(MAX_DELTA_SECONDS)
        );
        assert_eq!(parse_capped(b"000000000000000000000000000000007"), Some(7));
        assert_eq!(parse_capped(b""), None);
        assert_eq!(parse_capped(b"99999999999999999999999x"), None);
    }
}
