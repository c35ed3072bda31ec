//! Quality values, `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "."
//! 0*3("0") ] )`, the `q=` weights of `Accept-Encoding`, `TE` and the
//! other `Accept-*` fields (RFC 9110 §12.4.2).

/// The weight of `q=1`, the highest, and of a member without a weight.
pub const Q_ONE: u16 = 1000;

/// A qvalue in thousandths: `0.5` → 500, `1` → 1000, `0` → 0.
///
/// `None` for anything else: a value above 1 (`2`, `1.001`), more than
/// three decimals (`0.1234`), a missing leading digit (`.5`), a sign,
/// whitespace, quotes.
///
/// ```
/// use weir_http::qvalue::parse;
/// assert_eq!(parse(b"0.05"), Some(50));
/// assert_eq!(parse(b"1.000"), Some(1000));
/// assert_eq!(parse(b"1.5"), None);
/// ```
pub fn parse(value: &[u8]) -> Option<u16> {
    let (&int, rest) = value.split_first()?;
    let decimals = match rest.split_first() {
        None => &[][..],
        Some((b'.', decimals)) if decimals.len() <= 3 => decimals,
        Some(_) => return None,
    };
    if !decimals.iter().all(u8::is_ascii_digit) {
        return None;
    }
    match int {
        b'1' if decimals.iter().all(|&d| d == b'0') => Some(Q_ONE),
        b'0' => {
            let mut thousandths: u16 = 0;
            for i in 0..3 {
                let digit = decimals.get(i).map_or(0, |d| u16::from(d - b'0'));
                thousandths = thousandths * 10 + digit;
            }
            Some(thousandths)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qvalues() {
        assert_eq!(parse(b"0"), Some(0));
        assert_eq!(parse(b"0."), Some(0));
        assert_eq!(parse(b"0.000"), Some(0));
        assert_eq!(parse(b"0.5"), Some(500));
        assert_eq!(parse(b"0.05"), Some(50));
        assert_eq!(parse(b"0.123"), Some(123));
        assert_eq!(parse(b"0.999"), Some(999));
        assert_eq!(parse(b"1"), Some(1000));
        assert_eq!(parse(b"1."), Some(1000));
        assert_eq!(parse(b"1.000"), Some(1000));
    }

    #[test]
    fn malformed_qvalues() {
        for bad in [
            "1.001", "0.1234", "0.0000", "2", ".5", "0,5", "0.a", "", "-0", "+0", "00", " 0", "0 ",
            "\"0.5\"", "1.0000", "0e0",
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
