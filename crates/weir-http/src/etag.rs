//! Entity tags, `entity-tag = [ weak ] opaque-tag` with `weak = %s"W/"`
//! and `opaque-tag = DQUOTE *etagc DQUOTE` (RFC 9110 §8.8.3), and their
//! comparison (§8.8.3.2): the `ETag` field, and the lists of
//! `If-None-Match` / `If-Match` (`"*" / #entity-tag`, RFC 9110 §13.1).
//!
//! `etagc = %x21 / %x23-7E / obs-text`: an opaque tag may hold commas and
//! bytes above 0x7F, but no `"`, space or control character, so the list
//! is split by reading tags, not by splitting at commas.

use crate::FieldError;
use crate::ows::trim_ows;

/// One entity tag: `"xyzzy"` (strong) or `W/"xyzzy"` (weak).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityTag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

impl<'a> EntityTag<'a> {
    /// The entity tag a field value such as `ETag` holds: exactly one
    /// tag, with `OWS` around it. Like a list of one, stray commas around
    /// the tag are ignored (`"a",`); `None` for anything else (no quotes,
    /// two tags, a space in the tag, `W/` with a space or in lower case).
    ///
    /// ```
    /// use weir_http::etag::EntityTag;
    /// let tag = EntityTag::parse(r#" W/"v1" "#).unwrap();
    /// assert!(tag.is_weak());
    /// assert_eq!(tag.opaque(), br#""v1""#);
    /// assert!(EntityTag::parse("v1").is_none());
    /// ```
    pub fn parse<T: AsRef<[u8]> + ?Sized>(value: &'a T) -> Option<EntityTag<'a>> {
        let mut tags = list(value);
        let tag = tags.next()?.ok()?;
        tags.next().is_none().then_some(tag)
    }

    /// Whether the tag is weak (`W/"…"`).
    pub fn is_weak(&self) -> bool {
        self.weak
    }

    /// The opaque tag, its double quotes included: `W/"v1"` → `"v1"`.
    pub fn opaque(&self) -> &'a [u8] {
        self.opaque
    }

    /// The weak comparison (RFC 9110 §8.8.3.2): the opaque tags are equal,
    /// byte for byte, whether either is weak or not. `W/"1"` matches `"1"`.
    /// What `If-None-Match` uses.
    pub fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }

    /// The strong comparison (RFC 9110 §8.8.3.2): neither tag is weak and
    /// the opaque tags are equal. What `If-Match` and `If-Range` use.
    pub fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }
}

/// Whether a conditional field value is `*` ("any current
/// representation", RFC 9110 §13.1.1, §13.1.2), `OWS` around it allowed.
pub fn is_any<T: AsRef<[u8]> + ?Sized>(value: &T) -> bool {
    trim_ows(value.as_ref()) == b"*"
}

/// The entity tags of a list, in order; made by [`list`].
///
/// Yields `Err` for the first member that is not an entity tag, then
/// ends: what follows a malformed member cannot be trusted to be split
/// right.
#[derive(Debug, Clone)]
pub struct EntityTags<'a> {
    value: &'a [u8],
    rest: &'a [u8],
}

impl<'a> Iterator for EntityTags<'a> {
    type Item = Result<EntityTag<'a>, FieldError>;

    fn next(&mut self) -> Option<Self::Item> {
        // Separators: any run of commas and whitespace (empty list
        // elements are ignored, RFC 9110 §5.6.1).
        let start = self
            .rest
            .iter()
            .position(|&b| !matches!(b, b',' | b' ' | b'\t'));
        let Some(start) = start else {
            self.rest = &[];
            return None;
        };
        let member = &self.rest[start..];
        let offset = self.value.len() - member.len();
        let (weak, quoted) = match member.strip_prefix(b"W/") {
            Some(after) => (true, after),
            None => (false, member),
        };
        let tag = quoted.strip_prefix(b"\"").and_then(|after| {
            let end = after.iter().position(|&b| b == b'"')?;
            let etagc = after[..end]
                .iter()
                .all(|&b| b == 0x21 || (b >= 0x23 && b != 0x7f));
            etagc.then(|| (&quoted[..end + 2], &after[end + 1..]))
        });
        match tag {
            Some((opaque, rest)) => {
                self.rest = rest;
                Some(Ok(EntityTag { weak, opaque }))
            }
            None => {
                self.rest = &[];
                Some(Err(FieldError::MalformedEntityTag { offset }))
            }
        }
    }
}

/// The entity tags of one `#entity-tag` field value (`If-None-Match`,
/// `If-Match`), in order. Commas inside an opaque tag do not separate;
/// tags may be separated by any run of commas and `OWS` (a missing comma
/// between two tags is tolerated).
///
/// ```
/// use weir_http::etag::list;
/// let tags: Vec<_> = list(r#""a,b", W/"c""#).map(|t| t.unwrap().opaque()).collect();
/// assert_eq!(tags, [&br#""a,b""#[..], br#""c""#]);
/// ```
pub fn list<T: AsRef<[u8]> + ?Sized>(value: &T) -> EntityTags<'_> {
    let value = value.as_ref();
    EntityTags { value, rest: value }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(v: &str) -> Vec<Result<(bool, &[u8]), FieldError>> {
        list(v)
            .map(|t| t.map(|t| (t.is_weak(), t.opaque())))
            .collect()
    }

    #[test]
    fn lists_of_tags() {
        assert_eq!(tags(""), []);
        assert_eq!(tags(" , ,"), []);
        assert_eq!(tags("\"a\""), [Ok((false, &b"\"a\""[..]))]);
        assert_eq!(
            tags(" W/\"a\" ,\t\"b\",,"),
            [Ok((true, &b"\"a\""[..])), Ok((false, &b"\"b\""[..]))]
        );
        // Commas and obs-text inside the opaque tag.
        assert_eq!(tags("\"v1,x\""), [Ok((false, &b"\"v1,x\""[..]))]);
        let v = http::HeaderValue::from_bytes(b"\"caf\xe9\"").expect("value");
        assert_eq!(list(&v).count(), 1);
        assert_eq!(tags("\"\""), [Ok((false, &b"\"\""[..]))]);
    }

    #[test]
    fn malformed_members_end_the_list() {
        assert_eq!(
            tags("\"a\", v1, \"b\""),
            [
                Ok((false, &b"\"a\""[..])),
                Err(FieldError::MalformedEntityTag { offset: 5 })
            ]
        );
        for bad in [
            "v1",
            "\"open",
            "w/\"a\"",
            "W/ \"a\"",
            "W/a",
            "\"a b\"",
            "\"a\\\"b\"",
            "*",
        ] {
            let all = tags(bad);
            assert!(matches!(all.last(), Some(Err(_))), "{bad:?}: {all:?}");
        }
        let e = FieldError::MalformedEntityTag { offset: 3 };
        assert_eq!(e.to_string(), "malformed entity-tag at byte 3");
    }

    #[test]
    fn one_tag() {
        assert!(EntityTag::parse("\"a\"").is_some());
        assert!(EntityTag::parse(" \"a\" ,").is_some());
        assert!(EntityTag::parse("\"a\", \"b\"").is_none());
        assert!(EntityTag::parse("\"a\" x").is_none());
        assert!(EntityTag::parse("").is_none());
        assert!(EntityTag::parse("*").is_none());
    }

    #[test]
    fn weak_and_strong_comparison() {
        // The table of RFC 9110 §8.8.3.2.
        let p = |v: &'static str| EntityTag::parse(v).expect("tag");
        let cases = [
            ("W/\"1\"", "W/\"1\"", false, true),
            ("W/\"1\"", "W/\"2\"", false, false),
            ("W/\"1\"", "\"1\"", false, true),
            ("\"1\"", "\"1\"", true, true),
        ];
        for (a, b, strong, weak) in cases {
            assert_eq!(p(a).strong_eq(&p(b)), strong, "{a} {b}");
            assert_eq!(p(a).weak_eq(&p(b)), weak, "{a} {b}");
        }
        assert!(
            !p("\"a\"").weak_eq(&p("\"A\"")),
            "opaque tags are case-sensitive"
        );
    }

    #[test]
    fn star() {
        assert!(is_any("*"));
        assert!(is_any(" * "));
        assert!(!is_any("*, \"a\""));
        assert!(!is_any("\"*\""));
        assert!(!is_any(""));
    }
}
