//! The response phases: the upstream's head through the response head
//! filter, its body through the fan-out (cache fill) and the body pipeline
//! (SSR composition, the route's transforms), then the body log and the
//! access log stage. Every response Weir forwards, upstream or cached or
//! composed, leaves through [`Exchange::respond`].

use http::{Response, StatusCode};
use hyper::body::Incoming;
use weir_stream::body::{HttpBodySource, SourceBody};
use weir_stream::{TransformExt as _, pull};
use weir_transform::chain::ResponseChain;

use super::context::Exchange;
use super::local::Local;
use crate::access_log::ResponseLog;
use crate::body::idle::IdleTimeout;
use crate::body::response::{ResponseBody, ResponseSource};
use crate::body_log::{BodyLog, Direction};
use crate::cache::Hit;
use crate::headers;
use crate::outcome::Outcome;

impl Exchange<'_> {
    /// The upstream's response, downstream: its head filtered, its body
    /// teed into the cache (when the route caches) and composed (when it
    /// is a template on an SSR route).
    ///
    /// A response Weir cannot forward faithfully becomes a 502 (see
    /// [`headers::response_head`]).
    pub(crate) async fn upstream_response(
        mut self,
        resp: Response<Incoming>,
    ) -> Response<ResponseBody> {
        let (mut parts, body) = resp.into_parts();
        let status = parts.status;
        if let Err(what) = headers::response_head(&mut parts, &self.proxy.settings.via_pseudonym) {
            tracing::warn!(target: "weir::proxy", upstream = %self.target.upstream.name, "upstream sent {what}");
            self.record.reason = Some(format!("upstream sent {what}"));
            return self.answer(Local::bad_gateway("502 Bad Gateway\n"));
        }
        self.record.status = status.as_u16();
        let empty = self.head_only
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || http_body::Body::is_end_stream(&body);
        let source = if empty {
            // Dropping an ended (or bodiless) upstream body keeps its connection poolable.
            drop(body);
            None
        } else {
            Some(IdleTimeout::new(
                HttpBodySource::new(body),
                self.proxy.settings.body_idle_timeout,
            ))
        };
        let (source, no_body) = match &mut self.cache {
            Some(cache) if !self.head_only => cache.fill(&mut parts, source, &mut self.record),
            _ => (
                source.map_or_else(ResponseSource::empty, ResponseSource::Upstream),
                empty,
            ),
        };
        let (source, no_body) = match self.ssr.take() {
            Some(ssr) if ssr.is_template(&parts.headers) => {
                let url = ssr.template_url.clone().unwrap_or_default();
                match self.compose(&ssr, &mut parts, source, no_body, url).await {
                    Ok(page) => page,
                    Err(local) => return self.answer(local),
                }
            }
            _ => (source, no_body),
        };
        self.respond(parts, source, no_body)
    }

    /// A response the cache answers (a hit, a collapsed fill, a refreshed
    /// or stale entry).
    pub(crate) fn respond_from_cache(mut self, hit: Hit) -> Response<ResponseBody> {
        let Hit { head, body, empty } = hit;
        self.record.status = head.status.as_u16();
        let no_body = self.head_only || empty;
        let source = if no_body {
            ResponseSource::empty()
        } else {
            ResponseSource::Cache(body)
        };
        self.respond(head, source, no_body)
    }

    /// The last phases of every forwarded response: the route's transforms
    /// (planned on the final head; a `HEAD` or `304` gets their head edits,
    /// the same fields as the `GET` or `200` it stands for, and no stage),
    /// the body log, and the access log stage.
    pub(crate) fn respond(
        self,
        mut parts: http::response::Parts,
        source: ResponseSource,
        no_body: bool,
    ) -> Response<ResponseBody> {
        let status = parts.status;
        let route = self.target.route;
        let plan_head = !no_body || self.head_only || status == StatusCode::NOT_MODIFIED;
        let chain = match &self.transforms {
            Some(ask) if plan_head => {
                route
                    .transforms
                    .plan(&ask.method, &ask.headers, status, &mut parts.headers)
            }
            _ => ResponseChain::default(),
        };
        let body_log = match route.body_log {
            Some(spec) if !no_body => BodyLog::capture(
                spec.response_bytes,
                Direction::Response,
                self.record.method(),
                &self.target.path,
            ),
            _ => BodyLog::off(),
        };
        let log = ResponseLog::new(self.record, Outcome::Ok, !no_body);
        Response::from_parts(
            parts,
            SourceBody::new(pull(source, body_log.then(chain).then(log))),
        )
    }
}
