//! Which pages may get `async` content out of order, by their encoding.
//!
//! The tag tracker (`crate::tokenizer`) reads bytes: its states are the
//! browser's only when every byte below 0x80 stands for that ASCII
//! character wherever it appears. That holds for UTF-8 and for the
//! single-byte encodings and EUC-JP of the WHATWG Encoding Standard
//! (§4.2, "Names and labels"). It does not hold for:
//!
//! - UTF-16 (and the `utf-16`, `unicode`, `ucs-2`, … labels), where each
//!   character takes two bytes;
//! - ISO-2022-JP, HZ and UTF-7, where escape sequences switch the meaning
//!   of the bytes that follow (a chunk boundary inside kanji turns Weir's
//!   inserted markup into kanji), and the labels the standard maps to its
//!   "replacement" encoding (ISO-2022-KR, ISO-2022-CN, …);
//! - Shift_JIS, Big5, GBK/gb18030 and EUC-KR, whose second bytes may be
//!   ASCII letters and brackets (a `]` that is half a character would end
//!   a CDATA section for the tracker and not for the browser).
//!
//! A page in one of those (by its `Content-Type` charset) gets its async
//! content only at the async points. A label the standard does not know
//! is treated alike, since the browser then falls back on its own guess;
//! no charset at all is taken as the usual UTF-8 or windows-1252. A page
//! whose markup declares one of them (`<meta charset>`, or
//! `<meta http-equiv="content-type" content="…; charset=…">`) stops
//! getting content out of order from there on (`crate::safe`), whatever
//! its `Content-Type` says.

use http::HeaderMap;
use http::header::CONTENT_TYPE;

/// Labels (lowercase) of encodings in which a byte below 0x80 is always
/// that ASCII character (WHATWG Encoding §4.2): UTF-8, the single-byte
/// encodings, EUC-JP, x-user-defined.
const ASCII_SAFE: &[&str] = &[
    // UTF-8
    "unicode-1-1-utf-8",
    "unicode11utf8",
    "unicode20utf8",
    "utf-8",
    "utf8",
    "x-unicode20utf8",
    // IBM866
    "866",
    "cp866",
    "csibm866",
    "ibm866",
    // ISO-8859-2 … 16
    "csisolatin2",
    "iso-8859-2",
    "iso-ir-101",
    "iso8859-2",
    "iso88592",
    "iso_8859-2",
    "iso_8859-2:1987",
    "l2",
    "latin2",
    "csisolatin3",
    "iso-8859-3",
    "iso-ir-109",
    "iso8859-3",
    "iso88593",
    "iso_8859-3",
    "iso_8859-3:1988",
    "l3",
    "latin3",
    "csisolatin4",
    "iso-8859-4",
    "iso-ir-110",
    "iso8859-4",
    "iso88594",
    "iso_8859-4",
    "iso_8859-4:1988",
    "l4",
    "latin4",
    "csisolatincyrillic",
    "cyrillic",
    "iso-8859-5",
    "iso-ir-144",
    "iso8859-5",
    "iso88595",
    "iso_8859-5",
    "iso_8859-5:1988",
    "arabic",
    "asmo-708",
    "csiso88596e",
    "csiso88596i",
    "csisolatinarabic",
    "ecma-114",
    "iso-8859-6",
    "iso-8859-6-e",
    "iso-8859-6-i",
    "iso-ir-127",
    "iso8859-6",
    "iso88596",
    "iso_8859-6",
    "iso_8859-6:1987",
    "csisolatingreek",
    "ecma-118",
    "elot_928",
    "greek",
    "greek8",
    "iso-8859-7",
    "iso-ir-126",
    "iso8859-7",
    "iso88597",
    "iso_8859-7",
    "iso_8859-7:1987",
    "sun_eu_greek",
    "csiso88598e",
    "csisolatinhebrew",
    "hebrew",
    "iso-8859-8",
    "iso-8859-8-e",
    "iso-ir-138",
    "iso8859-8",
    "iso88598",
    "iso_8859-8",
    "iso_8859-8:1988",
    "visual",
    "csiso88598i",
    "iso-8859-8-i",
    "logical",
    "csisolatin6",
    "iso-8859-10",
    "iso-ir-157",
    "iso8859-10",
    "iso885910",
    "l6",
    "latin6",
    "iso-8859-13",
    "iso8859-13",
    "iso885913",
    "iso-8859-14",
    "iso8859-14",
    "iso885914",
    "csisolatin9",
    "iso-8859-15",
    "iso8859-15",
    "iso885915",
    "iso_8859-15",
    "l9",
    "iso-8859-16",
    // KOI8-R, KOI8-U
    "cskoi8r",
    "koi",
    "koi8",
    "koi8-r",
    "koi8_r",
    "koi8-ru",
    "koi8-u",
    // macintosh, x-mac-cyrillic
    "csmacintosh",
    "mac",
    "macintosh",
    "x-mac-roman",
    "x-mac-cyrillic",
    "x-mac-ukrainian",
    // windows-874
    "dos-874",
    "iso-8859-11",
    "iso8859-11",
    "iso885911",
    "tis-620",
    "windows-874",
    // windows-1250 … 1258 (windows-1252 takes the Latin-1 and ASCII labels)
    "cp1250",
    "windows-1250",
    "x-cp1250",
    "cp1251",
    "windows-1251",
    "x-cp1251",
    "ansi_x3.4-1968",
    "ascii",
    "cp1252",
    "cp819",
    "csisolatin1",
    "ibm819",
    "iso-8859-1",
    "iso-ir-100",
    "iso8859-1",
    "iso88591",
    "iso_8859-1",
    "iso_8859-1:1987",
    "l1",
    "latin1",
    "us-ascii",
    "windows-1252",
    "x-cp1252",
    "cp1253",
    "windows-1253",
    "x-cp1253",
    "cp1254",
    "csisolatin5",
    "iso-8859-9",
    "iso-ir-148",
    "iso8859-9",
    "iso88599",
    "iso_8859-9",
    "iso_8859-9:1989",
    "l5",
    "latin5",
    "windows-1254",
    "x-cp1254",
    "cp1255",
    "windows-1255",
    "x-cp1255",
    "cp1256",
    "windows-1256",
    "x-cp1256",
    "cp1257",
    "windows-1257",
    "x-cp1257",
    "cp1258",
    "windows-1258",
    "x-cp1258",
    // EUC-JP: every byte of a two- or three-byte character is 0x8E or more.
    "cseucpkdfmtjapanese",
    "euc-jp",
    "x-euc-jp",
    "x-user-defined",
];

/// Whether a page with these response fields may get `async` content out
/// of order: its `Content-Type` has no `charset` parameter, or one whose
/// label (ASCII case-insensitive, white space trimmed, quotes removed)
/// names an encoding in which bytes below 0x80 are always ASCII (see the
/// module).
///
/// ```
/// use http::HeaderMap;
/// let mut h = HeaderMap::new();
/// h.insert("content-type", "text/html; charset=UTF-8".parse().unwrap());
/// assert!(weir_ssr::out_of_order_charset(&h));
/// h.insert("content-type", "text/html; charset=ISO-2022-JP".parse().unwrap());
/// assert!(!weir_ssr::out_of_order_charset(&h));
/// ```
pub fn out_of_order_charset(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return true;
    };
    match charset(value.as_bytes()) {
        None => true,
        Some(label) => ASCII_SAFE.contains(&label.as_str()),
    }
}

/// The `charset` parameter of a media type (RFC 9110 §8.3.1), lowercased,
/// unquoted and trimmed; `None` when there is none.
fn charset(value: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(value);
    for param in text.split(';').skip(1) {
        let Some((name, v)) = param.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("charset") {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            return Some(v.trim().to_ascii_lowercase());
        }
    }
    None
}

/// Labels (lowercase) of the encodings that a `meta` may switch a page to
/// and whose bytes below 0x80 are not always ASCII: ISO-2022-JP, the
/// "replacement" labels, Shift_JIS, Big5, GBK, gb18030, EUC-KR. (A `meta`
/// naming UTF-16 means UTF-8, HTML §13.2.3.4; one naming a label the
/// Encoding Standard does not know is ignored.)
const META_UNSAFE: &[&str] = &[
    "csiso2022jp",
    "iso-2022-jp",
    "csiso2022kr",
    "hz-gb-2312",
    "iso-2022-cn",
    "iso-2022-cn-ext",
    "iso-2022-kr",
    "replacement",
    "csshiftjis",
    "ms932",
    "ms_kanji",
    "shift-jis",
    "shift_jis",
    "sjis",
    "windows-31j",
    "x-sjis",
    "big5",
    "big5-hkscs",
    "cn-big5",
    "csbig5",
    "x-x-big5",
    "chinese",
    "csgb2312",
    "csiso58gb231280",
    "gb2312",
    "gb_2312",
    "gb_2312-80",
    "gbk",
    "iso-ir-58",
    "x-gbk",
    "gb18030",
    "cseuckr",
    "csksc56011987",
    "euc-kr",
    "iso-ir-149",
    "korean",
    "ks_c_5601-1987",
    "ks_c_5601-1989",
    "ksc5601",
    "ksc_5601",
    "windows-949",
];

/// Whether a `meta` naming `label` switches the page to an encoding whose
/// bytes the tag tracker cannot read (see the module).
pub(crate) fn meta_breaks_bytes(label: &[u8]) -> bool {
    let label = String::from_utf8_lossy(label.trim_ascii()).to_ascii_lowercase();
    META_UNSAFE.contains(&label.as_str())
}

/// The label in a `meta`'s `content` (HTML §2.6.8, "algorithm for
/// extracting a character encoding from a meta element"): after
/// `charset`, white space, `=`, white space, a quoted value or one up to
/// white space or `;`. `None` when there is none.
pub(crate) fn meta_label(content: &[u8]) -> Option<&[u8]> {
    let ws = |b: &u8| matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ');
    let mut from = 0;
    loop {
        let at = content[from..]
            .windows(7)
            .position(|w| w.eq_ignore_ascii_case(b"charset"))?
            + from
            + 7;
        let rest = &content[at..];
        let skip = rest.iter().take_while(|b| ws(b)).count();
        let Some(rest) = rest[skip..].strip_prefix(b"=") else {
            from = at;
            continue;
        };
        let rest = &rest[rest.iter().take_while(|b| ws(b)).count()..];
        return match rest.first() {
            Some(&q) if q == b'"' || q == b'\'' => {
                let end = rest[1..].iter().position(|&b| b == q)?;
                Some(&rest[1..1 + end])
            }
            Some(_) => {
                let end = rest
                    .iter()
                    .position(|b| ws(b) || *b == b';')
                    .unwrap_or(rest.len());
                Some(&rest[..end])
            }
            None => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ct: Option<&str>) -> bool {
        let mut h = HeaderMap::new();
        if let Some(ct) = ct {
            h.insert(CONTENT_TYPE, ct.parse().expect("value"));
        }
        out_of_order_charset(&h)
    }

    #[test]
    fn meta_labels_are_found_as_browsers_find_them() {
        assert_eq!(
            meta_label(b"text/html; charset=ISO-2022-JP"),
            Some(&b"ISO-2022-JP"[..])
        );
        assert_eq!(
            meta_label(b"text/html;charset = \"sjis\" x"),
            Some(&b"sjis"[..])
        );
        assert_eq!(meta_label(b"charsetx; charset=utf-8"), Some(&b"utf-8"[..]));
        assert_eq!(meta_label(b"text/html"), None);
        assert_eq!(meta_label(b"charset='unterminated"), None);
        assert!(meta_breaks_bytes(b" ISO-2022-JP "));
        assert!(meta_breaks_bytes(b"Shift_JIS"));
        assert!(!meta_breaks_bytes(b"utf-16"), "a meta's UTF-16 means UTF-8");
        assert!(!meta_breaks_bytes(b"klingon"), "ignored");
        assert!(!meta_breaks_bytes(b"windows-1252"));
    }

    #[test]
    fn ascii_safe_encodings_allow_out_of_order_and_the_others_do_not() {
        for good in [
            None,
            Some("text/html"),
            Some("text/html; charset=utf-8"),
            Some("text/html;charset=\"UTF-8\""),
            Some("text/html; Charset=ISO-8859-1"),
            Some("text/html; charset=windows-1251"),
            Some("text/html; charset=euc-jp"),
        ] {
            assert!(ok(good), "{good:?}");
        }
        for bad in [
            "text/html; charset=ISO-2022-JP",
            "text/html; charset=csISO2022JP",
            "text/html; charset=utf-16",
            "text/html; charset=UTF-16LE",
            "text/html; charset=utf-7",
            "text/html; charset=hz-gb-2312",
            "text/html; charset=iso-2022-kr",
            "text/html; charset=shift_jis",
            "text/html; charset=big5",
            "text/html; charset=gbk",
            "text/html; charset=gb18030",
            "text/html; charset=euc-kr",
            "text/html; charset=klingon",
        ] {
            assert!(!ok(Some(bad)), "{bad}");
        }
    }
}
