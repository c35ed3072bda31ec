//! `[route.html_rewrite]` settings, validated while they are deserialized.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, de};

/// The default of [`HtmlRewriteSettings::memory_limit`]: 1 MiB.
pub const DEFAULT_MEMORY_LIMIT: usize = 1 << 20;

/// `[route.html_rewrite]` settings.
///
/// Every field is optional; unknown fields are an error. Selectors and
/// attribute names are checked while deserializing, so a bad one fails the
/// config load with the file, line and key (the loader's error). Example:
///
/// ```toml
/// inject_head_end = '<link rel="stylesheet" href="/app/overlay.css">'
/// inject_body_end = '<script src="/app/overlay.js"></script>'
/// memory_limit = 1048576
/// set_attributes = [{ selector = "a[target=_blank]", name = "rel", value = "noopener" }]
/// remove_attributes = [{ selector = "img", name = "loading" }]
/// url_prefixes = [{ from = "/", to = "/app/" }]
/// ```
///
/// What each rewrite does, in order, for an element that several match:
/// `url_prefixes`, then `set_attributes`, then `remove_attributes` (each
/// list in its order), so a value set explicitly is not prefix-rewritten.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HtmlRewriteSettings {
    /// Markup inserted just before the `</head>` end tag that closes the
    /// document's first `<head>` element, i.e. appended inside the head.
    /// Inserted exactly once per document.
    ///
    /// If no `</head>` closes a `<head>` before the first `<body>` start tag
    /// (`</head>` is optional in HTML), the markup goes just before that
    /// `<body>` start tag instead, where a browser closes the head. A
    /// document with neither (a fragment) gets nothing. Inserted as is: it
    /// is HTML, in the document's encoding (characters the encoding lacks
    /// become numeric character references). Empty means none.
    pub inject_head_end: Option<String>,

    /// Markup inserted just before the `</body>` end tag that closes the
    /// document's first `<body>` element. Inserted exactly once per document.
    ///
    /// If the document has a `<body>` start tag but no `</body>` closes it
    /// (the end tag is optional), the markup is appended at the end of the
    /// document, which a browser still parses into the body. A document
    /// without a `<body>` start tag (a fragment, say an htmx partial) gets
    /// nothing. Empty means none.
    pub inject_body_end: Option<String>,

    /// Attributes to set (added, or replaced if present) on every element
    /// that a selector matches.
    pub set_attributes: Vec<SetAttribute>,

    /// Attributes to remove from every element that a selector matches.
    pub remove_attributes: Vec<RemoveAttribute>,

    /// URL prefixes to rewrite in the `href`, `src`, `action`,
    /// `formaction`, `poster` and `srcset` attributes of every element: for
    /// an app mounted under a path. See [`UrlPrefix`] for the exact rule.
    pub url_prefixes: Vec<UrlPrefix>,

    /// The most memory lol_html's parsing buffers may use for one document,
    /// in bytes (its `max_allowed_memory_usage`, which counts its input
    /// buffer, attribute lists and open-element stack; default 1 MiB). A
    /// document that needs more (a start tag held across many chunks, a tag
    /// with very many attributes, very deep nesting) is not rewritten from
    /// that point on: the rest passes through unchanged, nothing is lost
    /// (see [`HtmlRewrite`](super::HtmlRewrite)). 0 in effect turns rewriting off.
    pub memory_limit: usize,
}

impl Default for HtmlRewriteSettings {
    fn default() -> Self {
        HtmlRewriteSettings {
            inject_head_end: None,
            inject_body_end: None,
            set_attributes: Vec::new(),
            remove_attributes: Vec::new(),
            url_prefixes: Vec::new(),
            memory_limit: DEFAULT_MEMORY_LIMIT,
        }
    }
}

impl HtmlRewriteSettings {
    /// Whether these settings change nothing in any document: no snippet
    /// (or only empty ones), no attribute edit, no URL prefix. A route may
    /// then skip the stage (and its parsing cost) altogether.
    pub fn is_noop(&self) -> bool {
        self.head_snippet().is_none()
            && self.body_snippet().is_none()
            && self.set_attributes.is_empty()
            && self.remove_attributes.is_empty()
            && self.url_prefixes.is_empty()
    }

    /// [`Self::inject_head_end`], unless empty.
    pub(crate) fn head_snippet(&self) -> Option<&str> {
        self.inject_head_end.as_deref().filter(|s| !s.is_empty())
    }

    /// [`Self::inject_body_end`], unless empty.
    pub(crate) fn body_snippet(&self) -> Option<&str> {
        self.inject_body_end.as_deref().filter(|s| !s.is_empty())
    }
}

/// One `set_attributes` entry: on every element `selector` matches, set
/// attribute `name` to `value`.
///
/// `value` is written as given between double quotes: `"` becomes `&quot;`,
/// other characters (`&` included) are kept, so entities may be used.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetAttribute {
    /// Which elements.
    pub selector: CssSelector,
    /// The attribute's name.
    pub name: AttributeName,
    /// Its new value (HTML attribute text).
    pub value: String,
}

/// One `remove_attributes` entry: on every element `selector` matches,
/// remove attribute `name` if present.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveAttribute {
    /// Which elements.
    pub selector: CssSelector,
    /// The attribute's name.
    pub name: AttributeName,
}

/// One `url_prefixes` entry: a URL attribute value that starts with `from`
/// gets that `from` replaced by `to`.
///
/// The first entry that applies wins; the others are not tried. An entry
/// does not apply to:
/// - a network-path reference (`//cdn.example/x`, or with `\` for `/` as
///   browsers read it) unless `from` is one too, so `from = "/"` leaves
///   `//cdn.example/x` alone;
/// - a value already under `to`, when `to` starts with `from` (the case
///   where a rewrite would apply twice): with `from = "/"`, `to = "/app/"`,
///   the values `/app/x`, `/app`, `/app?q` and `/app#f` are left alone,
///   `/apple` becomes `/app/apple`;
/// - a value whose bytes the document's encoding cannot decode (it would
///   not be written back identically), which is left alone.
///
/// The match is on the attribute's source text (entities are not decoded)
/// and is case-sensitive. In `srcset`, each candidate URL is matched on its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "UrlPrefixFields")]
pub struct UrlPrefix {
    /// The prefix to replace; not empty.
    pub from: String,
    /// Its replacement.
    pub to: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UrlPrefixFields {
    from: String,
    to: String,
}

impl TryFrom<UrlPrefixFields> for UrlPrefix {
    type Error = String;

    fn try_from(fields: UrlPrefixFields) -> Result<Self, String> {
        if fields.from.is_empty() {
            return Err("url_prefixes: `from` must not be empty".to_owned());
        }
        Ok(UrlPrefix {
            from: fields.from,
            to: fields.to,
        })
    }
}

/// A CSS selector that lol_html supports, parsed once at config load.
///
/// Deserializes from a string; one lol_html cannot parse (bad syntax, or a
/// pseudo-class it does not implement, such as `:hover`) is a deserialize
/// error naming the selector.
#[derive(Clone)]
pub struct CssSelector {
    source: String,
    pub(crate) parsed: lol_html::Selector,
}

impl CssSelector {
    /// The selector as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for CssSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.source, f)
    }
}

/// Why a selector or an attribute name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// lol_html cannot parse the selector (its message follows).
    #[error("invalid CSS selector {selector:?}: {message}")]
    Selector {
        /// The selector as written.
        selector: String,
        /// lol_html's reason.
        message: String,
    },
    /// The attribute name is empty or has a character HTML does not allow
    /// in one (whitespace, a control, `"`, `'`, `<`, `>`, `/`, `=`).
    #[error(
        "invalid attribute name {0:?}: must be non-empty, without whitespace, controls or any of \"'<>/="
    )]
    AttributeName(String),
}

impl FromStr for CssSelector {
    type Err = SettingError;

    fn from_str(source: &str) -> Result<Self, SettingError> {
        match source.parse::<lol_html::Selector>() {
            Ok(parsed) => Ok(CssSelector {
                source: source.to_owned(),
                parsed,
            }),
            Err(e) => Err(SettingError::Selector {
                selector: source.to_owned(),
                message: e.to_string(),
            }),
        }
    }
}

impl<'de> Deserialize<'de> for CssSelector {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let source = String::deserialize(deserializer)?;
        source.parse().map_err(de::Error::custom)
    }
}

/// An HTML attribute name, ASCII-lowercased (HTML attribute names are
/// case-insensitive).
///
/// Refused: empty, or any whitespace, control, `"`, `'`, `<`, `>`, `/`,
/// `=` (HTML Living Standard §13.1.2.3, "Attributes").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributeName(String);

impl AttributeName {
    /// The name, lowercased.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for AttributeName {
    type Err = SettingError;

    fn from_str(name: &str) -> Result<Self, SettingError> {
        let bad = |c: char| {
            c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '<' | '>' | '/' | '=')
        };
        if name.is_empty() || name.chars().any(bad) {
            return Err(SettingError::AttributeName(name.to_owned()));
        }
        Ok(AttributeName(name.to_ascii_lowercase()))
    }
}

impl<'de> Deserialize<'de> for AttributeName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(de::Error::custom)
    }
}
