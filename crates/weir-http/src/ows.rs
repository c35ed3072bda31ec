//! Optional whitespace, `OWS = *( SP / HTAB )` (RFC 9110 §5.6.3).

/// Whether `b` is whitespace in the sense of `OWS`: a space or a
/// horizontal tab, nothing else.
pub const fn is_ows(b: u8) -> bool {
    matches!(b, b' ' | b'\t')
}

/// `s` without `OWS` at either end: `b" \tgzip \t"` → `b"gzip"`.
///
/// Only spaces and tabs are removed (a line feed is not `OWS`).
///
/// ```
/// use weir_http::ows::trim_ows;
/// assert_eq!(trim_ows(b" \tgzip \t"), b"gzip");
/// assert_eq!(trim_ows(b"\ngzip"), b"\ngzip");
/// ```
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_spaces_and_tabs_only() {
        assert_eq!(trim_ows(b" \tgzip \t"), b"gzip");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"a b"), b"a b");
        assert_eq!(trim_ows(b"\ngzip\r"), b"\ngzip\r");
        assert!(is_ows(b' ') && is_ows(b'\t') && !is_ows(b'\n') && !is_ows(0x0b));
    }
}
