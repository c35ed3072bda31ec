//! Content codings Weir can produce, and `Accept-Encoding` negotiation
//! (RFC 9110 §12.5.3).

use http::HeaderValue;

/// A content coding Weir compresses with (RFC 9110 §8.4.1, IANA HTTP
/// Content Coding Registry).
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
}

/// Picks the coding for a response (TODO: helper fills in).
pub fn negotiate<'a>(
    accept_encoding: impl IntoIterator<Item = &'a HeaderValue>,
    preference: &[Coding],
) -> Option<Coding> {
    let _ = (accept_encoding.into_iter().count(), preference);
    None
}
