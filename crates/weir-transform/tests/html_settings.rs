//! `HtmlRewriteSettings`: deserialized from TOML, validated at load.

use weir_transform::html::{AttributeName, DEFAULT_MEMORY_LIMIT, HtmlRewriteSettings};

fn parse(text: &str) -> Result<HtmlRewriteSettings, toml::de::Error> {
    toml::from_str(text)
}

/// As the proxy's config loader sees it: a table inside a route table.
#[derive(Debug, serde::Deserialize)]
struct Route {
    #[allow(dead_code)]
    html_rewrite: HtmlRewriteSettings,
}

#[test]
fn defaults() {
    let s = parse("").unwrap();
    assert_eq!(s.memory_limit, DEFAULT_MEMORY_LIMIT);
    assert_eq!(DEFAULT_MEMORY_LIMIT, 1024 * 1024);
    assert!(s.inject_head_end.is_none() && s.inject_body_end.is_none());
    assert!(s.set_attributes.is_empty() && s.remove_attributes.is_empty());
    assert!(s.url_prefixes.is_empty());
    assert!(s.is_noop());
    assert!(HtmlRewriteSettings::default().is_noop());
    assert_eq!(
        HtmlRewriteSettings::default().memory_limit,
        DEFAULT_MEMORY_LIMIT
    );
}

#[test]
fn full_example() {
    let s = parse(
        r#"
inject_head_end = '<link rel="stylesheet" href="/o.css">'
inject_body_end = '<script src="/o.js"></script>'
memory_limit = 65536
set_attributes = [{ selector = "a[target=_blank]", name = "REL", value = "noopener" }]
remove_attributes = [{ selector = "img", name = "loading" }]
url_prefixes = [{ from = "/", to = "/app/" }]
"#,
    )
    .unwrap();
    assert_eq!(s.memory_limit, 65536);
    assert_eq!(s.set_attributes[0].selector.as_str(), "a[target=_blank]");
    // Attribute names are case-insensitive: kept lowercased.
    assert_eq!(s.set_attributes[0].name.as_str(), "rel");
    assert_eq!(s.set_attributes[0].value, "noopener");
    assert_eq!(s.remove_attributes[0].name.as_str(), "loading");
    assert_eq!(s.url_prefixes[0].from, "/");
    assert_eq!(s.url_prefixes[0].to, "/app/");
    assert!(!s.is_noop());
}

#[test]
fn is_noop_per_field() {
    for text in [
        "inject_head_end = 'x'",
        "inject_body_end = 'x'",
        "set_attributes = [{ selector = 'a', name = 'b', value = 'c' }]",
        "remove_attributes = [{ selector = 'a', name = 'b' }]",
        "url_prefixes = [{ from = '/', to = '/x/' }]",
    ] {
        assert!(!parse(text).unwrap().is_noop(), "{text}");
    }
    // Empty snippets inject nothing; the memory limit changes nothing.
    for text in [
        "inject_head_end = ''",
        "inject_body_end = ''",
        "memory_limit = 1",
    ] {
        assert!(parse(text).unwrap().is_noop(), "{text}");
    }
}

#[test]
fn bad_selector_names_the_key() {
    let err = toml::from_str::<Route>(
        r#"
[html_rewrite]
set_attributes = [
  { selector = "a > > b", name = "rel", value = "x" },
]
"#,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("selector"), "{msg}");
    assert!(msg.contains("a > > b"), "{msg}");
    assert!(msg.contains("invalid CSS selector"), "{msg}");
    // The loader reports where: line 4 holds the bad value.
    assert!(msg.contains("line 4"), "{msg}");

    // A selector lol_html does not implement is refused too.
    let err = parse("remove_attributes = [{ selector = 'a:hover', name = 'x' }]").unwrap_err();
    assert!(err.to_string().contains("a:hover"), "{err}");
    let err = parse("remove_attributes = [{ selector = '', name = 'x' }]").unwrap_err();
    assert!(err.to_string().contains("invalid CSS selector"), "{err}");
}

#[test]
fn bad_attribute_names() {
    for name in ["", "a b", "a=b", "a/b", "a>b", "a\"b", "a'b", "a<b", "a\tb"] {
        let text = format!("remove_attributes = [{{ selector = 'a', name = {name:?} }}]");
        let err = parse(&text).unwrap_err();
        assert!(
            err.to_string().contains("invalid attribute name"),
            "{name:?}: {err}"
        );
    }
    // Controls (not writable in a TOML basic string as Rust debug-prints them).
    assert!("a\u{1}b".parse::<AttributeName>().is_err());
    assert!("a\u{7f}".parse::<AttributeName>().is_err());
    for name in ["data-x", "aria-label", "x:y", "ü"] {
        let text = format!("remove_attributes = [{{ selector = 'a', name = {name:?} }}]");
        assert!(parse(&text).is_ok(), "{name:?}");
    }
}

#[test]
fn unknown_fields_and_bad_prefixes() {
    let err = parse("inject_head = 'x'").unwrap_err();
    assert!(err.to_string().contains("inject_head"), "{err}");
    let err =
        parse("set_attributes = [{ selector = 'a', name = 'b', value = 'c', x = 1 }]").unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err = parse("url_prefixes = [{ from = '/', to = '/a/', x = 1 }]").unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err = parse("url_prefixes = [{ from = '', to = '/a/' }]").unwrap_err();
    assert!(err.to_string().contains("must not be empty"), "{err}");
    let err = parse("url_prefixes = [{ from = '/' }]").unwrap_err();
    assert!(err.to_string().contains("to"), "{err}");
}
