//! From a complete include tag to an [`Include`]: which attributes count
//! for which syntax, their decoding, and the timeout forms.

use std::time::Duration;

use bytes::Bytes;

use super::entity::decode;
use super::tag::{RawAttr, parse_attrs};
use super::{Include, ScanWarning, Syntax};

/// The attributes an include understands; the bit for "seen" (first wins).
#[derive(Clone, Copy)]
enum Known {
    Src = 0,
    Id,
    Primary,
    Async,
    Timeout,
    TotalTimeout,
    FallbackSrc,
    Alt,
    OnError,
}

fn known(syntax: Syntax, name: &[u8]) -> Option<Known> {
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    let common = if is("src") {
        Some(Known::Src)
    } else if is("id") {
        Some(Known::Id)
    } else if is("timeout") {
        Some(Known::Timeout)
    } else if is("total-timeout") {
        Some(Known::TotalTimeout)
    } else {
        None
    };
    common.or(match syntax {
        Syntax::Fragment if is("primary") => Some(Known::Primary),
        Syntax::Fragment if is("async") => Some(Known::Async),
        Syntax::Fragment if is("fallback-src") => Some(Known::FallbackSrc),
        Syntax::Esi if is("alt") => Some(Known::Alt),
        Syntax::Esi if is("onerror") => Some(Known::OnError),
        _ => None,
    })
}

/// Parses the include tag `tag` (`<` to `>` inclusive), whose name is
/// `tag[..name_len]`. Returns the include (empty fallback), whether the tag
/// self-closes, and pushes a warning to `warnings` for each unusable value.
pub(crate) fn include_from_tag(
    syntax: Syntax,
    tag: &[u8],
    name_len: usize,
    offset: u64,
    warnings: &mut Vec<ScanWarning>,
) -> (Include, bool) {
    let (attrs, self_closing) = parse_attrs(tag.get(name_len..).unwrap_or_default());
    let mut inc = Include {
        syntax,
        src: None,
        id: None,
        primary: false,
        is_async: false,
        timeout: None,
        total_timeout: None,
        fallback_src: None,
        alt: None,
        onerror_continue: false,
        fallback: Bytes::new(),
        offset,
    };
    let mut seen = 0u16;
    for RawAttr { name, value } in attrs {
        let Some(k) = known(syntax, name) else {
            continue;
        };
        let bit = 1u16 << k as u16;
        if seen & bit != 0 {
            continue;
        }
        seen |= bit;
        let decoded = decode(value);
        let text = || {
            let s = String::from_utf8_lossy(&decoded).into_owned();
            (!s.is_empty()).then_some(s)
        };
        let bad = || ScanWarning::BadAttribute {
            offset,
            name: String::from_utf8_lossy(name).to_ascii_lowercase(),
            value: String::from_utf8_lossy(value).into_owned(),
        };
        match k {
            Known::Src => inc.src = text(),
            Known::Id => inc.id = text(),
            Known::FallbackSrc => inc.fallback_src = text(),
            Known::Alt => inc.alt = text(),
            Known::Primary => inc.primary = true,
            Known::Async => inc.is_async = true,
            Known::Timeout | Known::TotalTimeout => match parse_timeout(&decoded) {
                Some(d) if matches!(k, Known::Timeout) => inc.timeout = Some(d),
                Some(d) => inc.total_timeout = Some(d),
                None => warnings.push(bad()),
            },
            Known::OnError => {
                if decoded.trim_ascii().eq_ignore_ascii_case(b"continue") {
                    inc.onerror_continue = true;
                } else {
                    warnings.push(bad());
                }
            }
        }
    }
    (inc, self_closing)
}

/// `timeout` forms: `"500"` (milliseconds), `"500ms"`, `"1.5s"`, `"2s"`;
/// surrounding whitespace allowed, units ASCII case-insensitive. `None` for
/// anything else (empty, negative, other units, overflow).
pub(crate) fn parse_timeout(v: &[u8]) -> Option<Duration> {
    let v = v.trim_ascii();
    let (num, unit_nanos): (&[u8], u128) = if let Some(n) = strip_suffix_ci(v, b"ms") {
        (n, 1_000_000)
    } else if let Some(n) = strip_suffix_ci(v, b"s") {
        (n, 1_000_000_000)
    } else {
        (v, 1_000_000)
    };
    let (int, frac) = match num.iter().position(|&b| b == b'.') {
        Some(dot) => (&num[..dot], Some(&num[dot + 1..])),
        None => (num, None),
    };
    let digits = |d: &[u8]| !d.is_empty() && d.iter().all(u8::is_ascii_digit);
    if !digits(int) || frac.is_some_and(|f| !digits(f)) {
        return None;
    }
    let mut nanos: u128 = 0;
    for &d in int {
        nanos = nanos.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
    }
    nanos = nanos.checked_mul(unit_nanos)?;
    if let Some(frac) = frac {
        // Digits past the nanosecond are dropped.
        let mut scale = unit_nanos;
        for &d in frac {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(d - b'0') * scale;
        }
    }
    let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
    Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

fn strip_suffix_ci<'a>(v: &'a [u8], suffix: &[u8]) -> Option<&'a [u8]> {
    let cut = v.len().checked_sub(suffix.len())?;
    v[cut..].eq_ignore_ascii_case(suffix).then_some(&v[..cut])
}

#[cfg(test)]
mod tests {
    use super::parse_timeout;
    use std::time::Duration;

    #[test]
    fn timeout_forms() {
        let ms = Duration::from_millis;
        assert_eq!(parse_timeout(b"500"), Some(ms(500)));
        assert_eq!(parse_timeout(b"500ms"), Some(ms(500)));
        assert_eq!(parse_timeout(b"500MS"), Some(ms(500)));
        assert_eq!(parse_timeout(b"2s"), Some(ms(2000)));
        assert_eq!(parse_timeout(b"1.5s"), Some(ms(1500)));
        assert_eq!(parse_timeout(b" 0.25s "), Some(ms(250)));
        assert_eq!(parse_timeout(b"1.5"), Some(Duration::from_micros(1500)));
        assert_eq!(parse_timeout(b"0"), Some(ms(0)));
        assert_eq!(parse_timeout(b"1.0000000001s"), Some(ms(1000)));
    }

    #[test]
    fn bad_timeouts() {
        for bad in [
            "",
            "ms",
            "s",
            "-1",
            "+1",
            "1m",
            "1 s",
            "1.s",
            ".5s",
            "1e3",
            "abc",
            "1h",
            "99999999999999999999999999999999999999999s",
        ] {
            assert_eq!(parse_timeout(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
