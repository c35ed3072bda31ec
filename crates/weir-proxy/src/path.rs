//! Request paths as routing sees them: dot segments removed (RFC 3986
//! §5.2.4), and refused where a lenient upstream would see one that
//! routing did not.

use std::borrow::Cow;

/// Removes `.` and `..` segments (also written `%2e`), RFC 3986 §5.2.4.
///
/// Returns `None` if a `..` would climb above the root, if the path does
/// not start with `/`, or if a dot segment hides behind an encoded slash or
/// a backslash (`..%2f`, `..%5c`, `..\`) or a path parameter (`..;`):
/// upstreams that decode those would see a `..` that routing never saw.
pub fn normalize_path(path: &str) -> Option<Cow<'_, str>> {
    // The common paths, borrowed without allocating: with nothing
    // percent-encoded, no segment can decode to a dot segment; then without
    // a `.` there is none, and without `\` or `;` to hide one behind, only
    // a segment that is exactly `.` or `..` is one (`/app.js`, `/a.b/c`).
    if path.starts_with('/') && !path.contains('%') {
        let dotted = path.contains('.');
        if !dotted
            || (!path.contains(['\\', ';'])
                && !path.split('/').any(|seg| seg == "." || seg == ".."))
        {
            return Some(Cow::Borrowed(path));
        }
    }
    let normalized = remove_dot_segments(path)?;
    if hides_dot_segment(&normalized) {
        return None;
    }
    Some(normalized)
}

/// Whether `path`, read the way a lenient upstream might (`%2f`, `%5c` and
/// `\` as separators, `;params` dropped), has a `.` or `..` segment.
fn hides_dot_segment(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    if !lower.contains(['%', '\\', ';']) {
        return false;
    }
    let probe = lower
        .replace("%2e", ".")
        .replace("%2f", "/")
        .replace("%5c", "/")
        .replace('\\', "/");
    probe
        .split('/')
        .map(|seg| seg.split(';').next().unwrap_or(""))
        .any(|seg| seg == "." || seg == "..")
}

/// How many dots `segment` is made of, each written `.` or `%2e` (any
/// case), or `None` if it holds anything else or more than two.
fn dots(segment: &str) -> Option<usize> {
    let mut rest = segment.as_bytes();
    let mut n = 0;
    while !rest.is_empty() {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', b'e' | b'E', tail @ ..] => tail,
            _ => return None,
        };
        n += 1;
        if n > 2 {
            return None;
        }
    }
    (n > 0).then_some(n)
}

fn remove_dot_segments(path: &str) -> Option<Cow<'_, str>> {
    if !path.starts_with('/') {
        return None;
    }
    let is_dot = |s: &str| dots(s) == Some(1);
    let is_dotdot = |s: &str| dots(s) == Some(2);
    if !path.split('/').any(|s| is_dot(s) || is_dotdot(s)) {
        return Some(Cow::Borrowed(path));
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        if is_dot(seg) {
            if i == last {
                out.push("");
            }
        } else if is_dotdot(seg) {
            out.pop()?;
            if i == last {
                out.push("");
            }
        } else {
            out.push(seg);
        }
    }
    Some(Cow::Owned(format!("/{}", out.join("/"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast paths of `normalize_path` agree with the full check on
    /// every path of up to 6 bytes after its `/` over an alphabet of what matters.
    #[test]
    fn fast_paths_agree_with_the_full_check() {
        fn full(path: &str) -> Option<Cow<'_, str>> {
            let normalized = remove_dot_segments(path)?;
            (!hides_dot_segment(&normalized)).then_some(normalized)
        }
        let alphabet = [b'/', b'.', b'a', b'%', b'2', b'e', b'E', b';', b'\\'];
        let mut checked = 0;
        for len in 1..=6u32 {
            for mut k in 0..alphabet.len().pow(len) {
                let mut bytes = vec![b'/'];
                for _ in 0..len {
                    bytes.push(alphabet[k % alphabet.len()]);
                    k /= alphabet.len();
                }
                let path = String::from_utf8(bytes).expect("ascii");
                assert_eq!(normalize_path(&path), full(&path), "{path:?}");
                checked += 1;
            }
        }
        assert!(checked > 500_000);
    }

    #[test]
    fn dot_segments_are_removed() {
        assert_eq!(normalize_path("/a/b").as_deref(), Some("/a/b"));
        assert_eq!(
            normalize_path("/public/../admin").as_deref(),
            Some("/admin")
        );
        assert_eq!(
            normalize_path("/public/%2E%2e/admin").as_deref(),
            Some("/admin")
        );
        assert_eq!(normalize_path("/a/./b/.").as_deref(), Some("/a/b/"));
        assert_eq!(normalize_path("/a/.."), Some(Cow::Owned("/".to_owned())));
        assert_eq!(normalize_path("/../etc/passwd"), None);
        assert_eq!(normalize_path("*"), None);
    }

    #[test]
    fn dot_segments_hidden_behind_encoded_separators_are_refused() {
        for path in [
            "/public/..%2fadmin/",
            "/public/%2e%2e%2Fadmin",
            "/a/..%5cb",
            "/a/..\\b",
            "/a/..;/b",
            "/a/.%2e;x/b",
        ] {
            assert_eq!(normalize_path(path), None, "{path}");
        }
        // An encoded slash without dots is an ordinary character.
        assert_eq!(
            normalize_path("/projects/group%2Fname").as_deref(),
            Some("/projects/group%2Fname")
        );
    }
}
