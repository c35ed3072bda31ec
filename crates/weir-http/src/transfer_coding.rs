//! Transfer codings: `Transfer-Encoding = #transfer-coding` (RFC 9112
//! §6.1), the codings a message's body was framed with, and the codings a
//! client takes, `TE = #t-codings` (RFC 9110 §10.1.4).

use http::HeaderValue;

use crate::list::{elements, members_all};
use crate::params::split;
use crate::qvalue;

/// Whether a `Transfer-Encoding` field value names only `chunked`, the
/// one transfer coding Weir (through hyper) decodes: every element is
/// `chunked` (any case, `OWS` around it).
///
/// Stricter than a list parser on purpose: an empty element makes it
/// `false`. hyper frames a message by what follows the value's last comma,
/// so `chunked,` is not chunked to hyper (a request is refused, a response
/// is read to the end of the connection); saying "only chunked" for it
/// would let the raw chunked bytes through as content. Parameters
/// (`chunked;x=1`) make it `false` too: `chunked` has none.
///
/// ```
/// use http::HeaderValue;
/// use weir_http::transfer_coding::only_chunked;
/// assert!(only_chunked(&HeaderValue::from_static("chunked")));
/// assert!(only_chunked(&HeaderValue::from_static(" Chunked ")));
/// assert!(!only_chunked(&HeaderValue::from_static("gzip, chunked")));
/// assert!(!only_chunked(&HeaderValue::from_static("chunked,")));
/// ```
pub fn only_chunked<T: AsRef<[u8]> + ?Sized>(value: &T) -> bool {
    elements(value).all(|c| c.eq_ignore_ascii_case(b"chunked"))
}

/// Whether the `TE` field lines (`HeaderMap::get_all`) say the client
/// accepts trailer fields: a `trailers` member (any case), none of whose
/// `q` parameters is zero.
///
/// `trailers` takes no weight in the grammar, but clients send one; a
/// weight of zero means "not acceptable" (RFC 9110 §12.4.2), and a weight
/// that is not a qvalue (`q=2`, `q=abc`, `q=0.0000`) voids the member, as
/// a malformed member of `Accept-Encoding` is ignored. A `trailers` inside
/// a quoted parameter of another member does not count.
///
/// ```
/// use http::HeaderValue;
/// use weir_http::transfer_coding::accepts_trailers;
/// let te = |v| accepts_trailers([&HeaderValue::from_static(v)]);
/// assert!(te("gzip, trailers"));
/// assert!(!te("trailers;q=0"));
/// assert!(!te(r#"gzip;x="a, trailers""#));
/// ```
pub fn accepts_trailers<'a, I>(te: I) -> bool
where
    I: IntoIterator<Item = &'a HeaderValue>,
{
    members_all(te).any(|member| {
        let (coding, mut params) = split(member);
        coding.eq_ignore_ascii_case(b"trailers")
            && params
                .all(|p| !p.is("q") || p.raw_value().and_then(qvalue::parse).is_some_and(|q| q > 0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: &'static str) -> HeaderValue {
        HeaderValue::from_static(v)
    }

    #[test]
    fn chunked_only() {
        for yes in ["chunked", "CHUNKED", "\tchunked ", "chunked, chunked"] {
            assert!(only_chunked(&value(yes)), "{yes:?}");
        }
        for no in [
            "",
            "gzip",
            "gzip, chunked",
            "chunked, gzip",
            "chunked,",
            ",chunked",
            "chunked,,chunked",
            "chunked;x=1",
            "\"chunked\"",
            "chunk",
            "chunked, \"a,chunked\"",
        ] {
            assert!(!only_chunked(&value(no)), "{no:?}");
        }
    }

    #[test]
    fn trailers_with_weights() {
        let te = |lines: &[&'static str]| {
            let values: Vec<HeaderValue> = lines.iter().map(|l| value(l)).collect();
            accepts_trailers(&values)
        };
        assert!(te(&["trailers"]));
        assert!(te(&["Trailers"]));
        assert!(te(&["gzip", "trailers"]));
        assert!(te(&["trailers;q=0.5"]));
        assert!(te(&["trailers; Q = 1"]));
        assert!(te(&["trailers;foo=bar"]));
        for zero in ["trailers;q=0", "trailers; q=0.0", "trailers;Q=0.000"] {
            assert!(!te(&[zero]), "{zero}");
        }
        for malformed in [
            "trailers;q=2",
            "trailers;q=abc",
            "trailers;q=0.0000",
            "trailers;q",
            "trailers;q=\"1\"",
        ] {
            assert!(!te(&[malformed]), "{malformed}");
        }
        assert!(!te(&[]));
        assert!(!te(&["gzip", "deflate;q=0.5"]));
        assert!(!te(&["gzip;x=\"a, trailers\""]));
        assert!(!te(&["\"trailers\""]));
    }
}
