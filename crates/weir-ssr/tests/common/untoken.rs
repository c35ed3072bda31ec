//! Shared by the SSR tests of `weir-ssr` and of the `weir` binary
//! (`weir/tests/common/mod.rs` includes this file by path).

/// The page with the token taken out of Weir's ids (`weir-slot-T-N` →
/// `weir-slot-N`, and so for `weir-end-` and `weir-async-`), so that
/// tests can name them; panics if an id lacks a 16-hex-digit token.
pub fn untoken(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(at) = rest.find("weir-") {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let kind = ["weir-slot-", "weir-end-", "weir-async-"]
            .into_iter()
            .find(|k| rest.starts_with(k));
        let Some(kind) = kind else {
            out.push_str("weir-");
            rest = &rest["weir-".len()..];
            continue;
        };
        let after = &rest[kind.len()..];
        let token = after.get(..17).unwrap_or("");
        assert!(
            token.len() == 17
                && token[..16].bytes().all(|b| b.is_ascii_hexdigit())
                && token.ends_with('-'),
            "an id without its token: {}",
            &rest[..rest.len().min(40)]
        );
        out.push_str(kind);
        rest = &after[17..];
    }
    out.push_str(rest);
    out
}
