//! Content codings Weir can produce, and `Accept-Encoding` negotiation
//! (RFC 9110 §12.5.3).

use std::fmt;

use http::HeaderValue;
use weir_http::qvalue::{self, parse as parse_qvalue};
use weir_http::token::is_token;
use weir_http::{list, params};
// The tests check the trimming the parsers rely on.
#[cfg(test)]
use weir_http::ows::trim_ows;

/// A content coding Weir compresses with (RFC 9110 §8.4.1, IANA HTTP
/// Content Coding Registry).
///
/// In config it is written as its token: `"gzip"`, `"br"`, `"zstd"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
pub enum Coding {
    /// `gzip` (RFC 1952).
    #[serde(rename = "gzip")]
    Gzip,
    /// `br` (RFC 7932).
    #[serde(rename = "br")]
    Brotli,
    /// `zstd` (RFC 8878).
    #[serde(rename = "zstd")]
    Zstd,
}

impl Coding {
    /// The coding's token as written in `Content-Encoding` and `Accept-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// The token as a header value, for `Content-Encoding`.
    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(self.token())
    }
}

impl fmt::Display for Coding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.token())
    }
}

/// A qvalue in thousandths: `q=0.5` is 500, `q=1` is 1000 (RFC 9110 §12.4.2).
type Weight = u16;

/// The highest weight, `q=1`, which a member without a weight has.
const Q_ONE: Weight = qvalue::Q_ONE;

/// The weights an `Accept-Encoding` field gives to what Weir cares about;
/// `None` is "not listed". A coding listed twice keeps its lowest weight.
#[derive(Debug, Default)]
struct Weights {
    gzip: Option<Weight>,
    br: Option<Weight>,
    zstd: Option<Weight>,
    identity: Option<Weight>,
    star: Option<Weight>,
}

impl Weights {
    /// The slot for a coding token (case-insensitive, RFC 9110 §8.4.1), or
    /// `None` for a coding Weir does not produce.
    fn slot(&mut self, token: &[u8]) -> Option<&mut Option<Weight>> {
        let is = |name: &str| token.eq_ignore_ascii_case(name.as_bytes());
        if is("gzip") || is("x-gzip") {
            // `x-gzip` is an alias of `gzip` (RFC 9110 §8.4.1.3).
            Some(&mut self.gzip)
        } else if is("br") {
            Some(&mut self.br)
        } else if is("zstd") {
            Some(&mut self.zstd)
        } else if is("identity") {
            Some(&mut self.identity)
        } else if is("*") {
            Some(&mut self.star)
        } else {
            None
        }
    }

    fn listed(&self, coding: Coding) -> Option<Weight> {
        match coding {
            Coding::Gzip => self.gzip,
            Coding::Brotli => self.br,
            Coding::Zstd => self.zstd,
        }
    }
}

/// Picks the content coding for a response from the request's
/// `Accept-Encoding` field values, following RFC 9110 §12.5.3.
///
/// - `accept_encoding`: every `Accept-Encoding` field line of the request
///   (`HeaderMap::get_all`); the lines are one comma-separated list.
/// - `preference`: the codings the server may use, most preferred first.
///   A coding not in it is never chosen.
///
/// Returns the coding with the highest weight among `preference`; a weight
/// tie goes to the one earlier in `preference`. Returns `None` for "send
/// the content as it is" (identity). The rules:
///
/// - Tokens are case-insensitive; `x-gzip` counts as `gzip`.
/// - A member's weight is its `q=` parameter, a qvalue (`0` to `1` with at
///   most three decimals, RFC 9110 §12.4.2), or 1 without one. A member with
///   a malformed weight (`q=2`, `q=abc`, `q=0.1234`, two `q=`), a malformed
///   parameter or a token with characters outside `tchar` is ignored, as if
///   it were not there. Spaces around `;` and `=` are tolerated.
/// - `q=0` means "not acceptable". A coding listed more than once keeps its
///   lowest weight (the client said it cannot take it at least once).
/// - `*` gives its weight to every coding not listed by name (and to
///   `identity` when that is not listed).
/// - `identity` competes only when it has a weight from the field (listed,
///   or through `*`): a client that prefers identity
///   (`gzip;q=0.5, identity`) gets identity. Not listed, it is acceptable
///   but yields to any acceptable coding.
/// - When neither a coding nor identity is acceptable (`identity;q=0`, or
///   `*;q=0` without an `identity` member), this still returns `None`: the
///   proxy sends identity anyway rather than a 406 (RFC 9110 §12.5.3 lets
///   a server answer without content coding when nothing listed is
///   available; a client that refuses even identity is better served by
///   the plain content than by an error page).
/// - No field at all returns `None`. RFC 9110 says any coding is then
///   acceptable, but clients that send no `Accept-Encoding` (scripts, old
///   libraries, health checks) often cannot decode, so Weir does not
///   compress for them.
/// - A field whose value is empty (or only commas and spaces) returns
///   `None`: the client wants no content coding (RFC 9110 §12.5.3).
///
/// Never panics and never allocates.
pub fn negotiate<'a>(
    accept_encoding: impl IntoIterator<Item = &'a HeaderValue>,
    preference: &[Coding],
) -> Option<Coding> {
    let mut weights = Weights::default();
    let mut any_member = false;
    // Empty list elements are allowed and mean nothing (RFC 9110 §5.6.1).
    for member in list::members_all(accept_encoding) {
        any_member = true;
        let Some((token, weight)) = parse_member(member) else {
            continue;
        };
        if let Some(slot) = weights.slot(token) {
            *slot = Some(slot.map_or(weight, |old| old.min(weight)));
        }
    }
    if !any_member {
        return None;
    }

    let mut best: Option<(Coding, Weight)> = None;
    for &coding in preference {
        let weight = weights.listed(coding).or(weights.star).unwrap_or(0);
        if weight == 0 {
            continue;
        }
        // Strictly greater: a tie keeps the earlier, preferred coding.
        if best.is_none_or(|(_, w)| weight > w) {
            best = Some((coding, weight));
        }
    }
    let (coding, weight) = best?;
    let identity = weights.identity.or(weights.star);
    if identity.is_some_and(|w| w > weight) {
        return None;
    }
    Some(coding)
}

/// Splits one list member, `token *( OWS ";" OWS name "=" value )`, into its
/// token and weight. `None` when the member is malformed.
fn parse_member(member: &[u8]) -> Option<(&[u8], Weight)> {
    let (token, params) = params::split(member);
    if !is_token(token) {
        return None;
    }
    let mut weight = None;
    for param in params {
        // Every parameter needs `=`; a weight is a bare qvalue, never quoted.
        let value = param.raw_value()?;
        if param.is("q") {
            if weight.is_some() {
                return None;
            }
            weight = Some(parse_qvalue(value)?);
        } else if !is_token(param.name()) {
            return None;
        }
        // Other parameters are not in the grammar of Accept-Encoding; they
        // are ignored rather than voiding the member.
    }
    Some((token, weight.unwrap_or(Q_ONE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qvalues() {
        assert_eq!(parse_qvalue(b"0"), Some(0));
        assert_eq!(parse_qvalue(b"0."), Some(0));
        assert_eq!(parse_qvalue(b"0.5"), Some(500));
        assert_eq!(parse_qvalue(b"0.05"), Some(50));
        assert_eq!(parse_qvalue(b"0.123"), Some(123));
        assert_eq!(parse_qvalue(b"1"), Some(1000));
        assert_eq!(parse_qvalue(b"1.000"), Some(1000));
        assert_eq!(parse_qvalue(b"1.001"), None);
        assert_eq!(parse_qvalue(b"0.1234"), None);
        assert_eq!(parse_qvalue(b"2"), None);
        assert_eq!(parse_qvalue(b".5"), None);
        assert_eq!(parse_qvalue(b"0,5"), None);
        assert_eq!(parse_qvalue(b"0.a"), None);
        assert_eq!(parse_qvalue(b""), None);
    }

    #[test]
    fn semicolons_inside_quoted_parameters_do_not_split() {
        // Before weir-http, `q=0"` was read out of the quoted string and
        // voided the gzip member, so br won.
        let v = HeaderValue::from_static("gzip;ext=\"a;q=0\", br;q=0.5");
        let preference = [Coding::Gzip, Coding::Brotli];
        assert_eq!(negotiate([&v], &preference), Some(Coding::Gzip));
        // A quoted weight is still malformed: the member is ignored.
        let v = HeaderValue::from_static("gzip;q=\"1\", br;q=0.5");
        assert_eq!(negotiate([&v], &preference), Some(Coding::Brotli));
    }

    #[test]
    fn trims_spaces_and_tabs_only() {
        assert_eq!(trim_ows(b" \tgzip \t"), b"gzip");
        assert_eq!(trim_ows(b"   "), b"");
        assert_eq!(trim_ows(b"\ngzip"), b"\ngzip");
    }
}
