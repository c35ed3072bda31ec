//! Character references in attribute values: the five XML names and
//! numeric references; anything else is left as written.

use std::borrow::Cow;

/// Decodes `&amp; &lt; &gt; &quot; &apos; &#NN; &#xHH;` in `raw`. A
/// reference needs its `;`; one that is not recognised stays as it is. A
/// numeric reference to 0, a surrogate or past U+10FFFF becomes U+FFFD
/// (as in HTML).
pub(crate) fn decode(raw: &[u8]) -> Cow<'_, [u8]> {
    let Some(first) = memchr::memchr(b'&', raw) else {
        return Cow::Borrowed(raw);
    };
    let mut out = Vec::with_capacity(raw.len());
    out.extend_from_slice(&raw[..first]);
    let mut i = first;
    while i < raw.len() {
        if raw[i] != b'&' {
            let next = memchr::memchr(b'&', &raw[i..]).map_or(raw.len(), |k| i + k);
            out.extend_from_slice(&raw[i..next]);
            i = next;
            continue;
        }
        match reference(&raw[i + 1..]) {
            Some((c, used)) => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                i += 1 + used;
            }
            None => {
                out.push(b'&');
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// The reference at the start of `s` (just after its `&`): the character
/// and how many bytes it used, `;` included.
fn reference(s: &[u8]) -> Option<(char, usize)> {
    const NAMED: [(&[u8], char); 5] = [
        (b"amp;", '&'),
        (b"lt;", '<'),
        (b"gt;", '>'),
        (b"quot;", '"'),
        (b"apos;", '\''),
    ];
    for (name, c) in NAMED {
        if s.starts_with(name) {
            return Some((c, name.len()));
        }
    }
    let rest = s.strip_prefix(b"#")?;
    let (radix, digits_from) = match rest.first() {
        Some(b'x' | b'X') => (16, 2),
        _ => (10, 1),
    };
    let digits = &s[digits_from..];
    let n = digits
        .iter()
        .take_while(|b| (**b as char).is_digit(radix))
        .count();
    if n == 0 || digits.get(n) != Some(&b';') {
        return None;
    }
    let mut value: u32 = 0;
    for &d in &digits[..n] {
        let v = (d as char).to_digit(radix).unwrap_or(0);
        // Saturates past U+10FFFF; the result is U+FFFD either way.
        value = value.saturating_mul(radix).saturating_add(v);
    }
    let c = if value == 0 {
        char::REPLACEMENT_CHARACTER
    } else {
        char::from_u32(value).unwrap_or(char::REPLACEMENT_CHARACTER)
    };
    Some((c, digits_from + n + 1))
}

#[cfg(test)]
mod tests {
    use super::decode;

    fn d(s: &str) -> String {
        String::from_utf8(decode(s.as_bytes()).into_owned()).expect("utf-8")
    }

    #[test]
    fn named_and_numeric_references() {
        assert_eq!(d("/a?x=1&amp;y=2"), "/a?x=1&y=2");
        assert_eq!(d("&lt;&gt;&quot;&apos;"), "<>\"'");
        assert_eq!(d("&#65;&#x42;&#X43;&#233;"), "ABCé");
        assert_eq!(
            d("&#0;&#xD800;&#x110000;&#99999999999;"),
            "\u{fffd}\u{fffd}\u{fffd}\u{fffd}"
        );
    }

    #[test]
    fn others_left_as_written() {
        assert_eq!(
            d("&nbsp; &amp &#; &#x; &#65 & &&amp;"),
            "&nbsp; &amp &#; &#x; &#65 & &&"
        );
        assert_eq!(d("plain"), "plain");
        assert!(matches!(decode(b"plain"), std::borrow::Cow::Borrowed(_)));
    }
}
