//! The nonce a page's `Content-Security-Policy` gives its inline scripts,
//! for the script that moves `async` fragments into place.
//!
//! Grammar (Content Security Policy Level 3, §2.2 and §2.3.1): a field
//! value is a comma-separated list of policies; a policy is directives
//! separated by `;`; a directive is a name and source expressions
//! separated by ASCII whitespace; a nonce source is
//! `'nonce-<base64-value>'`, where base64-value is letters, digits, `+`,
//! `/`, `-`, `_`, then at most two `=`. Directive names are
//! case-insensitive; `nonce-` is too.
//!
//! An inline `<script>` is checked against `script-src-elem`, else
//! `script-src`, else `default-src` (§6.1.1, the directive fallback list),
//! so the nonce is taken from the first of those a policy has. Only the
//! enforced field counts, not `Content-Security-Policy-Report-Only`.

use http::HeaderMap;
use http::header::CONTENT_SECURITY_POLICY;

/// The directives that govern an inline script, in fallback order.
const SCRIPT_DIRECTIVES: [&str; 3] = ["script-src-elem", "script-src", "default-src"];

/// The nonce of the page's Content-Security-Policy for inline scripts: the
/// first `'nonce-…'` source of the directive that governs them
/// (`script-src-elem`, else `script-src`, else `default-src`), in the
/// first policy that has one. `None` when there is no such field, no such
/// source, or its value is not base64 (so it can go into an attribute
/// as it is).
///
/// ```
/// use http::HeaderMap;
/// let mut h = HeaderMap::new();
/// h.insert(
///     "content-security-policy",
///     "default-src 'self'; script-src 'self' 'nonce-r4nd0m+/='".parse().unwrap(),
/// );
/// assert_eq!(weir_ssr::script_nonce(&h).as_deref(), Some("r4nd0m+/="));
/// ```
pub fn script_nonce(headers: &HeaderMap) -> Option<String> {
    let values = headers.get_all(CONTENT_SECURITY_POLICY);
    values
        .iter()
        .flat_map(|v| weir_http::list::members(v.as_bytes()))
        .find_map(policy_nonce)
}

/// The nonce of one policy, from the directive that governs inline scripts.
fn policy_nonce(policy: &[u8]) -> Option<String> {
    let directives: Vec<(&[u8], &[u8])> = policy
        .split(|&b| b == b';')
        .filter_map(|d| {
            let d = d.trim_ascii();
            let end = d
                .iter()
                .position(u8::is_ascii_whitespace)
                .unwrap_or(d.len());
            (end > 0).then(|| (&d[..end], &d[end..]))
        })
        .collect();
    let governing = SCRIPT_DIRECTIVES.iter().find_map(|want| {
        // The first directive of a name counts; later ones are ignored (§2.2.1).
        directives
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(want.as_bytes()))
    })?;
    governing
        .1
        .split(u8::is_ascii_whitespace)
        .find_map(nonce_source)
}

/// `'nonce-<base64-value>'` → the value.
fn nonce_source(source: &[u8]) -> Option<String> {
    const PREFIX: &[u8] = b"'nonce-";
    let inner = source.strip_suffix(b"'")?;
    if inner.len() <= PREFIX.len() || !inner[..PREFIX.len()].eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let value = &inner[PREFIX.len()..];
    let pad = value.iter().rev().take_while(|&&b| b == b'=').count();
    let body = &value[..value.len() - pad];
    let base64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_');
    (pad <= 2 && !body.is_empty() && body.iter().all(base64))
        .then(|| String::from_utf8_lossy(value).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nonce(values: &[&str]) -> Option<String> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(CONTENT_SECURITY_POLICY, v.parse().expect("value"));
        }
        script_nonce(&h)
    }

    #[test]
    fn the_directive_that_governs_inline_scripts_gives_the_nonce() {
        assert_eq!(nonce(&[]), None);
        assert_eq!(nonce(&["default-src 'self'"]), None);
        assert_eq!(
            nonce(&["default-src 'nonce-d1'; script-src 'nonce-s1'"]).as_deref(),
            Some("s1")
        );
        assert_eq!(
            nonce(&["script-src 'nonce-s1'; Script-Src-Elem 'self' 'NONCE-e1=='"]).as_deref(),
            Some("e1==")
        );
        assert_eq!(nonce(&["default-src 'nonce-d1'"]).as_deref(), Some("d1"));
        // script-src without a nonce governs: default-src's is not used.
        assert_eq!(nonce(&["default-src 'nonce-d1'; script-src 'self'"]), None);
        // The second policy of the field, and a second field.
        assert_eq!(
            nonce(&["img-src *, script-src 'nonce-p2'"]).as_deref(),
            Some("p2")
        );
        assert_eq!(
            nonce(&["img-src *", "script-src 'nonce-f2'"]).as_deref(),
            Some("f2")
        );
    }

    #[test]
    fn a_nonce_that_is_not_base64_is_not_taken() {
        for bad in [
            "script-src 'nonce-a\"b'",
            "script-src 'nonce-a<b'",
            "script-src 'nonce-'",
            "script-src 'nonce-abc'x",
            "script-src 'nonce-a==='",
            "script-src nonce-abc",
        ] {
            assert_eq!(nonce(&[bad]), None, "{bad}");
        }
    }
}
