//! URL prefix rewriting of attribute values ([`UrlPrefix`]).

use super::settings::UrlPrefix;

/// The attribute holding a list of image candidates (HTML Living Standard
/// §4.8.4.3 "srcset attributes").
pub(crate) const SRCSET: &str = "srcset";

/// A selector matching every element with one of the rewritten attributes:
/// `srcset`, and these, which hold one URL each.
pub(crate) const URL_SELECTOR: &str = "[href],[src],[action],[formaction],[poster],[srcset]";

/// `value` with the first applicable prefix of `prefixes` rewritten, or
/// `None` when none applies (rules in [`UrlPrefix`]).
pub(crate) fn rewrite_url(prefixes: &[UrlPrefix], value: &str) -> Option<String> {
    for prefix in prefixes {
        let Some(rest) = value.strip_prefix(prefix.from.as_str()) else {
            continue;
        };
        if is_network_path(value) && !is_network_path(&prefix.from) {
            continue;
        }
        if prefix.to.starts_with(prefix.from.as_str()) && is_under(value, &prefix.to) {
            // Already rewritten: applying the rule again would double it.
            return None;
        }
        let mut out = String::with_capacity(prefix.to.len() + rest.len());
        out.push_str(&prefix.to);
        out.push_str(rest);
        return Some(out);
    }
    None
}

/// `value` (a `srcset`) with each candidate's URL rewritten by
/// [`rewrite_url`], everything else kept byte for byte; `None` when no URL
/// changed.
///
/// Splits as the HTML standard's srcset parsing does: candidates are
/// separated by commas; a URL is a run of non-whitespace, whose trailing
/// commas end the candidate; descriptors run to the next comma outside
/// parentheses.
pub(crate) fn rewrite_srcset(prefixes: &[UrlPrefix], value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let len = bytes.len();
    let mut out = String::new();
    let mut changed = false;
    // Every index below sits on an ASCII byte or the end, so slicing is valid.
    let mut i = 0;
    let mut copied = 0;
    loop {
        while i < len && (is_html_space(bytes[i]) || bytes[i] == b',') {
            i += 1;
        }
        if i == len {
            break;
        }
        let url_start = i;
        while i < len && !is_html_space(bytes[i]) {
            i += 1;
        }
        let mut url_end = i;
        while url_end > url_start && bytes[url_end - 1] == b',' {
            url_end -= 1;
        }
        if let Some(new) = rewrite_url(prefixes, &value[url_start..url_end]) {
            if !changed {
                out.reserve(value.len() + new.len());
                changed = true;
            }
            out.push_str(&value[copied..url_start]);
            out.push_str(&new);
            copied = url_end;
        }
        if url_end < i {
            // The URL's trailing commas ended this candidate.
            continue;
        }
        let mut depth = 0usize;
        while i < len {
            match bytes[i] {
                b'(' => depth += 1,
                b')' => depth = depth.saturating_sub(1),
                b',' if depth == 0 => break,
                _ => {}
            }
            i += 1;
        }
    }
    if !changed {
        return None;
    }
    out.push_str(&value[copied..]);
    Some(out)
}

/// ASCII whitespace as HTML defines it (tab, LF, FF, CR, space).
fn is_html_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0C' | b'\r')
}

/// Whether `s` is a network-path reference (RFC 3986 §4.2): it starts with
/// two slashes, where browsers read `\` as `/` in http(s) URLs (WHATWG URL
/// Standard, "special" schemes).
fn is_network_path(s: &str) -> bool {
    matches!(s.as_bytes(), [b'/' | b'\\', b'/' | b'\\', ..])
}

/// Whether `value` is under the prefix `to`: starts with it, or is `to`
/// without its trailing slash, alone or before a query or fragment.
fn is_under(value: &str, to: &str) -> bool {
    if value.starts_with(to) {
        return true;
    }
    let base = to.trim_end_matches('/');
    if base.len() == to.len() {
        return false;
    }
    match value.strip_prefix(base) {
        Some(rest) => rest.is_empty() || rest.starts_with('?') || rest.starts_with('#'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(pairs: &[(&str, &str)]) -> Vec<UrlPrefix> {
        pairs
            .iter()
            .map(|(from, to)| UrlPrefix {
                from: (*from).to_owned(),
                to: (*to).to_owned(),
            })
            .collect()
    }

    #[test]
    fn root_to_mount_point() {
        let r = rules(&[("/", "/app/")]);
        assert_eq!(rewrite_url(&r, "/x/y?z").as_deref(), Some("/app/x/y?z"));
        assert_eq!(rewrite_url(&r, "/").as_deref(), Some("/app/"));
        assert_eq!(rewrite_url(&r, "/apple").as_deref(), Some("/app/apple"));
        // Network-path references, with either slash.
        assert_eq!(rewrite_url(&r, "//cdn.example/x"), None);
        assert_eq!(rewrite_url(&r, "/\\cdn.example/x"), None);
        // Already under the mount point.
        for v in ["/app/x", "/app/", "/app", "/app?q=1", "/app#top"] {
            assert_eq!(rewrite_url(&r, v), None, "{v}");
        }
        // Relative and absolute URLs do not start with "/".
        for v in ["x.html", "https://example.com/", "#top", "", "mailto:a@b"] {
            assert_eq!(rewrite_url(&r, v), None, "{v}");
        }
    }

    #[test]
    fn shortening_rule_is_not_blocked_by_its_target() {
        // `to` does not start with `from`: nothing can be rewritten twice.
        let r = rules(&[("/old/", "/")]);
        assert_eq!(rewrite_url(&r, "/old/x").as_deref(), Some("/x"));
        assert_eq!(rewrite_url(&r, "/x"), None);
    }

    #[test]
    fn network_path_rule_applies_to_network_paths() {
        let r = rules(&[("//old.example/", "//new.example/"), ("/", "/app/")]);
        assert_eq!(
            rewrite_url(&r, "//old.example/a").as_deref(),
            Some("//new.example/a")
        );
        assert_eq!(rewrite_url(&r, "//other.example/a"), None);
        assert_eq!(rewrite_url(&r, "/a").as_deref(), Some("/app/a"));
    }

    #[test]
    fn first_applicable_rule_wins() {
        let r = rules(&[("/static/", "/s/"), ("/", "/app/")]);
        assert_eq!(
            rewrite_url(&r, "/static/a.css").as_deref(),
            Some("/s/a.css")
        );
        assert_eq!(rewrite_url(&r, "/b").as_deref(), Some("/app/b"));
    }

    #[test]
    fn srcset_candidates() {
        let r = rules(&[("/", "/app/")]);
        assert_eq!(
            rewrite_srcset(&r, "/a.png 1x, /b.png 2x").as_deref(),
            Some("/app/a.png 1x, /app/b.png 2x")
        );
        assert_eq!(
            rewrite_srcset(&r, " /a.png,//cdn/b.png 2x ,\n/app/c.png 3x").as_deref(),
            Some(" /app/a.png,//cdn/b.png 2x ,\n/app/c.png 3x")
        );
        // Trailing commas end a candidate; parentheses shield commas.
        assert_eq!(
            rewrite_srcset(&r, "/a.png,, /b.png (x, y), /c.png").as_deref(),
            Some("/app/a.png,, /app/b.png (x, y), /app/c.png")
        );
        assert_eq!(rewrite_srcset(&r, "a.png 1x, https://x/b.png 2x"), None);
        assert_eq!(rewrite_srcset(&r, ""), None);
        assert_eq!(rewrite_srcset(&r, " , ,"), None);
    }

    #[test]
    fn srcset_keeps_non_ascii() {
        let r = rules(&[("/", "/app/")]);
        assert_eq!(
            rewrite_srcset(&r, "/é.png 1x, ü.png 2x").as_deref(),
            Some("/app/é.png 1x, ü.png 2x")
        );
    }
}
