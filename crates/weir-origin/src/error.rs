//! The crate's error type.

use http::StatusCode;

/// Longest piece of client input quoted back in an error message, in bytes.
const MAX_QUOTED: usize = 40;

/// What went wrong while serving one request.
///
/// Parameter variants become a `400 Bad Request` whose plain-text body is the
/// `Display` text; body variants end a response body early (hyper then closes
/// the HTTP/1.1 connection or resets the HTTP/2 stream).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OriginError {
    /// A path segment or query value that must be a decimal integer is not.
    #[error("{name}: `{value}` is not a decimal number")]
    NotANumber {
        /// Name of the parameter, e.g. `"length"` or `"chunk"`.
        name: &'static str,
        /// The offending input, cut to 40 bytes.
        value: String,
    },

    /// A number is outside the range the endpoint accepts.
    #[error("{name}: {value} is out of range {min}..={max}")]
    OutOfRange {
        /// Name of the parameter.
        name: &'static str,
        /// The value given.
        value: u64,
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },

    /// The query string names a parameter the endpoint does not know.
    #[error("unknown query parameter `{key}` (known: {})", .known.join(", "))]
    UnknownParameter {
        /// The unknown key, cut to 40 bytes.
        key: String,
        /// The keys the endpoint accepts.
        known: &'static [&'static str],
    },

    /// The query string gives the same parameter twice.
    #[error("query parameter `{key}` is given more than once")]
    DuplicateParameter {
        /// The repeated key.
        key: &'static str,
    },

    /// A test-only parameter asked of an origin run with its test
    /// endpoints off ([`crate::OriginConfig::test_endpoints`]).
    #[error(
        "query parameter `{key}` is for tests only, and this origin runs with test_endpoints = false"
    )]
    TestOnlyParameter {
        /// The parameter.
        key: &'static str,
    },

    /// `/status/{code}` was asked for an informational (1xx) status, which
    /// cannot be a final response.
    #[error("status {code} is informational (1xx) and cannot be a final response")]
    InformationalStatus {
        /// The requested code.
        code: u16,
    },

    /// `/response-headers` was given a pair, or `/fragment`'s `header=` a
    /// value, that is not a valid header field.
    #[error("`{field}` is not a valid header field")]
    InvalidHeader {
        /// The offending `name=value` pair (`name:value` for `/fragment`),
        /// decoded and cut to 40 bytes.
        field: String,
    },

    /// `/fragment/{name}` was given a name outside `[A-Za-z0-9_-]{1,64}`.
    #[error("fragment name `{name}` must be 1 to 64 of A-Z a-z 0-9 _ -")]
    InvalidFragmentName {
        /// The name as given (still percent-encoded), cut to 40 bytes.
        name: String,
    },

    /// A repeatable query parameter is given more often than allowed.
    #[error("query parameter `{key}` is given more than {max} times")]
    TooManyValues {
        /// The repeated key.
        key: &'static str,
        /// How many values are accepted.
        max: usize,
    },

    /// A text query value is not UTF-8 once percent-decoded.
    #[error("{name}: value is not UTF-8 after percent-decoding")]
    NotUtf8 {
        /// Name of the parameter.
        name: &'static str,
    },

    /// `/fragment`'s `header=` names a field whose value the origin's
    /// framing decides (`Content-Length`, `Transfer-Encoding`).
    #[error("header `{name}` is set by the server's framing and cannot be given")]
    ReservedHeader {
        /// The field name, lowercase.
        name: &'static str,
    },

    /// A file under the root's `fragments/` is larger than the origin
    /// reads into memory.
    #[error("fragment file of {len} bytes exceeds the limit of {max} bytes")]
    FragmentFileTooLarge {
        /// The file's length.
        len: u64,
        /// The largest length read.
        max: u64,
    },

    /// Reading a file under the root's `fragments/` failed.
    #[error("reading a fragment file failed")]
    FragmentFile(#[source] std::io::Error),

    /// Gzip-encoding a body frame failed.
    #[error("gzip-encoding the body failed")]
    Gzip(#[source] std::io::Error),

    /// `/abort/{n}` or `/fragment/{name}?fail_after={n}` ended its body on
    /// purpose after sending `after_bytes`.
    #[error("transfer aborted on purpose after {after_bytes} bytes")]
    DeliberateAbort {
        /// Bytes of body handed to hyper before the failure.
        after_bytes: u64,
    },

    /// Reading a static file failed mid-body.
    #[error("reading a static file failed")]
    File(#[source] std::io::Error),

    /// The client's request body failed (reset stream, malformed chunking…).
    #[error("reading the request body failed")]
    RequestBody(#[source] hyper::Error),

    /// The `/echo` report could not be encoded as JSON.
    #[error("encoding the echo report failed")]
    EchoEncoding(#[source] serde_json::Error),
}

impl OriginError {
    /// Builds [`OriginError::NotANumber`], quoting at most 40 bytes of `value`.
    pub(crate) fn not_a_number(name: &'static str, value: &str) -> Self {
        Self::NotANumber {
            name,
            value: quote(value),
        }
    }

    /// Builds [`OriginError::UnknownParameter`], quoting at most 40 bytes of `key`.
    pub(crate) fn unknown_parameter(key: &str, known: &'static [&'static str]) -> Self {
        Self::UnknownParameter {
            key: quote(key),
            known,
        }
    }

    /// The status of the error response sent when this error happens before
    /// the response head: 400 for bad client input, 500 otherwise.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::File(_)
            | Self::EchoEncoding(_)
            | Self::DeliberateAbort { .. }
            | Self::FragmentFileTooLarge { .. }
            | Self::FragmentFile(_)
            | Self::Gzip(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NotANumber { .. }
            | Self::OutOfRange { .. }
            | Self::UnknownParameter { .. }
            | Self::DuplicateParameter { .. }
            | Self::TestOnlyParameter { .. }
            | Self::InformationalStatus { .. }
            | Self::InvalidHeader { .. }
            | Self::InvalidFragmentName { .. }
            | Self::TooManyValues { .. }
            | Self::NotUtf8 { .. }
            | Self::ReservedHeader { .. }
            | Self::RequestBody(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Cuts client input to at most [`MAX_QUOTED`] bytes on a char boundary,
/// writing control characters as escapes (`\r`, `\n`, `\u{1b}`) so that a
/// reason quoting decoded input stays on one line.
pub(crate) fn quote(input: &str) -> String {
    let mut out = String::with_capacity(input.len().min(MAX_QUOTED));
    for c in input.chars() {
        let start = out.len();
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
        if out.len() > MAX_QUOTED {
            out.truncate(start);
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_input_is_cut_on_a_char_boundary() {
        let long = "é".repeat(40);
        let OriginError::NotANumber { value, .. } = OriginError::not_a_number("n", &long) else {
            panic!("wrong variant");
        };
        assert!(value.len() <= MAX_QUOTED);
        assert!(long.starts_with(&value));
    }

    #[test]
    fn quoted_control_characters_are_escaped_and_fit_the_limit() {
        assert_eq!(quote("a\r\nb\0"), "a\\r\\nb\\0");
        let long = "\n".repeat(40);
        let quoted = quote(&long);
        assert!(quoted.len() <= MAX_QUOTED && !quoted.contains('\n'));
        assert_eq!(quoted, "\\n".repeat(20));
    }

    #[test]
    fn unknown_parameter_lists_known_keys() {
        let err = OriginError::unknown_parameter("chunks", &["chunk", "delay_ms"]);
        assert_eq!(
            err.to_string(),
            "unknown query parameter `chunks` (known: chunk, delay_ms)"
        );
    }
}
