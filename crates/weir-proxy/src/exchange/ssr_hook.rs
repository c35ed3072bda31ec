//! The SSR hook: a route with `[route.ssr]` composes its templates from
//! fragments ([`weir_ssr::compose`]), fetched through the proxy's
//! [`ProxyFetcher`](crate::ssr::ProxyFetcher).
//!
//! - local answers: with `template_file`, the route answers `GET` and
//!   `HEAD` with the composed file and never asks the upstream for it;
//! - response body pipeline: an upstream response that is a template
//!   (`text/html`, and `X-Weir-Template: 1` unless `detect = "html"`) is
//!   composed; the primary fragment's status and fields become the page's.

use std::sync::Arc;

use http::{HeaderMap, Request};

use super::request::Target;
use crate::config::SsrSpec;
use crate::proxy::{Downstream, Proxy};
use crate::ssr::ProxyFetcher;

/// What composing a route's templates needs, kept from the client's
/// request before it is handed on.
#[derive(Debug)]
pub(crate) struct SsrHook<'p> {
    pub(crate) spec: &'p SsrSpec,
    pub(crate) fetcher: Arc<ProxyFetcher>,
    /// Fields for the fragment requests.
    pub(crate) headers: HeaderMap,
    /// The template's absolute URL upstream, once the upstream request is made.
    pub(crate) template_url: Option<String>,
}

impl<'p> SsrHook<'p> {
    /// The hook of an SSR route, or `None` for any other route.
    pub(crate) fn new<B>(
        proxy: &'p Proxy,
        target: &Target<'p>,
        req: &Request<B>,
        downstream: &Downstream,
    ) -> Option<Self> {
        let spec = target.route.ssr.as_ref()?;
        let fetcher = proxy.fetchers.get(target.route.index)?.clone()?;
        let headers = crate::ssr::fragment_headers(
            req.headers(),
            spec,
            Proxy::forwarded_peer(downstream, target.client_host.as_deref()),
            req.version(),
            &proxy.via,
        );
        Some(SsrHook {
            spec,
            fetcher,
            headers,
            template_url: None,
        })
    }

    /// Whether the route answers with its `template_file` (a local answer).
    pub(crate) fn serves_file(&self) -> bool {
        self.spec.template_file.is_some()
    }

    /// Whether an upstream response with `headers` is a template to compose.
    pub(crate) fn is_template(&self, headers: &HeaderMap) -> bool {
        crate::ssr::is_template(headers, self.spec)
    }
}
