//! The SSR phases: a route's `template_file` page (a local answer), and
//! the composition of a template in the response body pipeline (see
//! [`super::ssr_hook`] for the hook).

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode, Uri, Version};
use weir_stream::once;

use super::context::Exchange;
use super::local::Local;
use super::ssr_hook::SsrHook;
use crate::body::response::{ResponseBody, ResponseSource};
use crate::outcome::Outcome;

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
            .first_url()
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
        self.proxy.via.append(&mut parts.headers, Version::HTTP_11);
        let template = ResponseSource::Local(once(file.bytes.clone()));
        match self
            .compose(&ssr, &mut parts, template, false, base.to_string())
            .await
        {
            Ok((source, no_body)) => {
                let (source, no_body) = if self.head_only {
                    (ResponseSource::empty(), true)
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
        let limits = ssr.spec.compose.decode;
        let template = match weir_ssr::decode_body(Box::pin(source), &parts.headers, limits) {
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
            // The page's own policy: the template's response fields.
            script_nonce: weir_ssr::script_nonce(&parts.headers),
            // Out of order only where Weir can read the page's bytes as
            // the browser will (its charset).
            out_of_order: weir_ssr::out_of_order_charset(&parts.headers),
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
                metrics.ssr_page("composed");
                Ok((ResponseSource::Page(body), false))
            }
            weir_ssr::Page::Redirect { status, headers } => {
                parts.status = status;
                parts.headers.remove(header::CONTENT_TYPE);
                crate::ssr::apply_page_fields(&mut parts.headers, headers);
                metrics.ssr_page("redirect");
                Ok((ResponseSource::empty(), true))
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
