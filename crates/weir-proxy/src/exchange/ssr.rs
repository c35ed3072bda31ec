//! The SSR hook: a route with `[route.ssr]` composes its templates from
//! fragments ([`weir_ssr::compose`]), fetched through the proxy's
//! [`ProxyFetcher`](crate::ssr::ProxyFetcher).
//!
//! - local answers: with `template_file`, the route answers `GET` and
//!   `HEAD` with the composed file and never asks the upstream for it;
//! - response body pipeline: an upstream response that is a template
//!   (`text/html`, and `X-Weir-Template: 1` unless `detect = "html"`) is
//!   composed; the primary fragment's status and fields become the page's.

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};

use super::Exchange;
use super::local::Local;
use super::request::Target;
use super::response::empty_body;
use crate::body::response::{ResponseBody, ResponseSource};
use crate::config::SsrSpec;
use crate::headers::{self, Peer};
use crate::outcome::Outcome;
use crate::proxy::Proxy;
use crate::ssr::ProxyFetcher;
use weir_stream::once;

/// What composing a route's templates needs, kept from the client's
/// request before it is handed on.
#[derive(Debug)]
pub(crate) struct SsrHook<'p> {
    spec: &'p SsrSpec,
    fetcher: Arc<ProxyFetcher>,
    /// Fields for the fragment requests.
    headers: HeaderMap,
    /// The template's absolute URL upstream, once the upstream request is made.
    pub(crate) template_url: Option<String>,
}

impl<'p> SsrHook<'p> {
    /// The hook of an SSR route, or `None` for any other route.
    pub(crate) fn new(
        proxy: &'p Proxy,
        target: &Target<'p>,
        req: &Request<hyper::body::Incoming>,
        peer: SocketAddr,
    ) -> Option<Self> {
        let spec = target.route.ssr.as_ref()?;
        let fetcher = proxy.fetchers.get(target.route.index)?.clone()?;
        let headers = crate::ssr::fragment_headers(
            req.headers(),
            spec,
            Peer {
                ip: peer.ip(),
                trusted: proxy.is_trusted(peer),
                proto: "http",
                host: target.client_host.as_deref(),
            },
            req.version(),
            &proxy.settings.via_pseudonym,
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

impl Exchange<'_> {
    /// A local answer: the page composed from the route's `template_file`,
    /// whose fragments resolve against the route's upstream at the request's
    /// path. Other methods than `GET` and `HEAD` get `405`.
    pub(crate) async fn file_page(mut self, method: &Method, uri: &Uri) -> Response<ResponseBody> {
        if *method != Method::GET && *method != Method::HEAD {
            return self.answer(Local {
                allow: Some("GET, HEAD"),
                ..Local::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "405 Method Not Allowed: this page answers GET and HEAD\n",
                    Outcome::BadRequest,
                )
            });
        }
        let Some(ssr) = self.ssr.take() else {
            return self.answer(Local::bad_request("400 Bad Request\n"));
        };
        let Some(file) = &ssr.spec.template_file else {
            return self.answer(Local::bad_request("400 Bad Request\n"));
        };
        let Some(base) = self
            .target
            .upstream
            .url
            .request_uri(self.target.forward_path(), uri.query())
        else {
            return self.answer(Local::bad_request(
                "400 Bad Request: invalid request target\n",
            ));
        };
        let mut parts = Response::new(()).into_parts().0;
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        headers::append_via(
            &mut parts.headers,
            Version::HTTP_11,
            &self.proxy.settings.via_pseudonym,
        );
        self.record.status = 200;
        let template = ResponseSource::Local(once(file.bytes.clone()));
        match self
            .compose(&ssr, &mut parts, template, false, base.to_string())
            .await
        {
            Ok((source, no_body)) => {
                let (source, no_body) = if self.head_only {
                    (empty_body(), true)
                } else {
                    (source, no_body)
                };
                self.respond(parts, source, no_body)
            }
            Err(local) => self.answer(local),
        }
    }

    /// Composes the template `source` (at absolute URL `url`) into the
    /// page: the primary's status and fields, or a redirect with no body.
    /// Returns the page's source and whether it has no body.
    ///
    /// # Errors
    /// A 502/504 [`Local`] when the primary fragment failed, timed out or
    /// answered 5xx, or the template's coding cannot be decoded.
    pub(crate) async fn compose(
        &mut self,
        ssr: &SsrHook<'_>,
        parts: &mut http::response::Parts,
        source: ResponseSource,
        no_body: bool,
        url: String,
    ) -> Result<(ResponseSource, bool), Local> {
        crate::ssr::strip_template_fields(&mut parts.headers);
        if no_body {
            return Ok((source, no_body));
        }
        let metrics = &self.proxy.metrics;
        let template = match weir_ssr::decode_body(Box::pin(source), &parts.headers) {
            Ok(t) => t,
            Err(e) => {
                self.record.reason = Some(format!("template: {e}"));
                metrics.ssr_page("failed");
                return Err(Local::bad_gateway(
                    "502 Bad Gateway: the page template could not be decoded\n",
                ));
            }
        };
        parts.headers.remove(header::CONTENT_ENCODING);
        let ctx = weir_ssr::PageContext {
            fetcher: Arc::clone(&ssr.fetcher) as Arc<dyn weir_ssr::Fetcher>,
            settings: Arc::clone(&ssr.spec.compose),
            base: url,
            // With `template_file`, the template is no response of `url`.
            template_at_base: ssr.spec.template_file.is_none(),
            headers: ssr.headers.clone(),
            observer: Arc::clone(&self.proxy.ssr_observer) as Arc<dyn weir_ssr::Observer>,
        };
        match weir_ssr::compose(template, ctx).await {
            weir_ssr::Page::Composed {
                status,
                headers,
                body,
            } => {
                if let Some(status) = status {
                    parts.status = status;
                }
                crate::ssr::apply_page_fields(&mut parts.headers, headers);
                self.record.status = parts.status.as_u16();
                metrics.ssr_page("composed");
                Ok((ResponseSource::Page(body), false))
            }
            weir_ssr::Page::Redirect { status, headers } => {
                parts.status = status;
                parts.headers.remove(header::CONTENT_TYPE);
                crate::ssr::apply_page_fields(&mut parts.headers, headers);
                self.record.status = status.as_u16();
                metrics.ssr_page("redirect");
                Ok((empty_body(), true))
            }
            weir_ssr::Page::Failed { status, reason } => {
                tracing::warn!(target: "weir::ssr", "page failed: {reason}");
                self.record.reason = Some(reason);
                metrics.ssr_page("failed");
                Err(if status == StatusCode::GATEWAY_TIMEOUT {
                    Local::new(
                        status,
                        "504 Gateway Timeout: the page's primary fragment did not answer in time\n",
                        Outcome::UpstreamTimeout,
                    )
                } else {
                    Local::bad_gateway("502 Bad Gateway: the page's primary fragment failed\n")
                })
            }
        }
    }
}
