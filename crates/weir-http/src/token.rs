//! Tokens, `token = 1*tchar` (RFC 9110 §5.6.2): field names, codings,
//! directive and parameter names.

/// Whether `b` is a `tchar`: a letter, a digit or one of
/// ``!#$%&'*+-.^_`|~``.
pub const fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// Whether `s` is a `token`: one or more `tchar`s, nothing else (no
/// whitespace, no separators such as `"`, `,`, `;`, `=`, `/`).
///
/// ```
/// use weir_http::token::is_token;
/// assert!(is_token("gzip"));
/// assert!(is_token(b"x-my_field.v2"));
/// assert!(!is_token("a b") && !is_token("") && !is_token("text/html"));
/// ```
pub fn is_token<T: AsRef<[u8]> + ?Sized>(s: &T) -> bool {
    let s = s.as_ref();
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tchars_are_exactly_the_rfc_set() {
        let tchars: Vec<u8> = (0u8..=255).filter(|&b| is_tchar(b)).collect();
        let mut expected: Vec<u8> = b"!#$%&'*+-.^_`|~".to_vec();
        expected.extend(b'0'..=b'9');
        expected.extend(b'A'..=b'Z');
        expected.extend(b'a'..=b'z');
        expected.sort_unstable();
        assert_eq!(tchars, expected);
    }

    #[test]
    fn tokens() {
        assert!(is_token("weir"));
        assert!(is_token("1.0"));
        assert!(is_token("!#$%&'*+-.^_`|~"));
        for bad in [
            "", " ", "a b", "a,b", "a;b", "a=b", "\"a\"", "a/b", "a\tb", "é",
        ] {
            assert!(!is_token(bad), "{bad:?}");
        }
        assert!(!is_token(&b"a\x80"[..]));
    }
}
