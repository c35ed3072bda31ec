//! `host[:port]`, the `Host` field and URI authorities (RFC 9110 §7.2,
//! RFC 3986 §3.2.2); IPv6 literals are bracketed (`[::1]:8080`).
//!
//! To parse and validate an authority, use [`http::uri::Authority`]; these
//! helpers only split text that is already known to be one, and borrow
//! from it.

/// `host` without a trailing `:port` (digits only, possibly none); IPv6
/// literals keep their brackets.
///
/// ```
/// use weir_http::host::strip_port;
/// assert_eq!(strip_port("example.com:8080"), "example.com");
/// assert_eq!(strip_port("[::1]:80"), "[::1]");
/// assert_eq!(strip_port("[::1]"), "[::1]");
/// ```
pub fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i)
            if !host[i..].contains(']') && host[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            &host[..i]
        }
        _ => host,
    }
}

/// The port written after the host in `authority`, if any, as text: it
/// may be empty or out of range (`Authority::port_u16` cannot tell those
/// from none).
///
/// ```
/// use weir_http::host::port;
/// assert_eq!(port("example.com:8080"), Some("8080"));
/// assert_eq!(port("example.com:"), Some(""));
/// assert_eq!(port("[::1]"), None);
/// ```
pub fn port(authority: &str) -> Option<&str> {
    let after_host = match authority.rfind(']') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    after_host.rfind(':').map(|i| &after_host[i + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_port_keeps_ipv6_brackets() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com:"), "example.com");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("[2001:db8::1]"), "[2001:db8::1]");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("example.com:http"), "example.com:http");
        assert_eq!(strip_port(""), "");
        assert_eq!(strip_port(":80"), "");
    }

    #[test]
    fn port_text() {
        assert_eq!(port("a:1"), Some("1"));
        assert_eq!(port("a:99999"), Some("99999"));
        assert_eq!(port("a"), None);
        assert_eq!(port("[::1]:443"), Some("443"));
        assert_eq!(port("[::1]:"), Some(""));
        assert_eq!(port("[::1]"), None);
    }
}
