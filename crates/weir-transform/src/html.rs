//! The `html-rewrite` stage (TODO: helper fills in).

use std::sync::Arc;

use http::HeaderMap;
use serde::Deserialize;
use weir_stream::{Batch, StreamError, Transform};

/// `[route.html_rewrite]` settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HtmlRewriteSettings {
    /// Markup inserted just before `</head>`.
    pub inject_head_end: Option<String>,
}

/// The charset to rewrite `response_headers`' body with, or `None` when it
/// is not `text/html` (or its charset is one lol_html cannot parse).
pub fn rewritable(response_headers: &HeaderMap) -> Option<&'static encoding_rs::Encoding> {
    let _ = response_headers;
    None
}

/// A streaming HTML rewriter.
pub struct HtmlRewrite {
    _settings: Arc<HtmlRewriteSettings>,
}

impl std::fmt::Debug for HtmlRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HtmlRewrite").finish_non_exhaustive()
    }
}

impl HtmlRewrite {
    /// A rewriter for a document in `encoding`.
    pub fn new(
        settings: Arc<HtmlRewriteSettings>,
        encoding: &'static encoding_rs::Encoding,
    ) -> Self {
        let _ = encoding;
        HtmlRewrite {
            _settings: settings,
        }
    }
}

impl Transform for HtmlRewrite {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        Ok(input)
    }
}
