//! The upstream's answer, downstream: its head through the response head
//! filter, its body through the fan-out (the cache fill tees the upstream
//! body, before any transform) and SSR composition, then
//! [`Exchange::respond`].

use http::{Response, StatusCode};
use weir_stream::body::HttpBodySource;

use super::context::Exchange;
use super::local::Local;
use crate::access_log::{BodyBlame, BodyEnd};
use crate::balance::AttemptResult;
use crate::body::idle::IdleTimeout;
use crate::body::response::{ResponseBody, ResponseSource};
use crate::headers;
use crate::upstream::{PooledBody, UpstreamBody};

impl Exchange<'_> {
    /// The upstream's response, downstream: its head filtered, its body
    /// teed into the cache (when the route caches) and composed (when it
    /// is a template on an SSR route).
    ///
    /// A response Weir cannot forward faithfully becomes a 502 (see
    /// [`headers::response_head`]).
    pub(crate) async fn upstream_response(
        mut self,
        resp: Response<PooledBody>,
    ) -> Response<ResponseBody> {
        let (mut parts, mut body) = resp.into_parts();
        let status = parts.status;
        // After `into_parts`: a borrow of `resp` would keep it in this
        // future, 232 bytes more for every request.
        self.invalidate_elsewhere(status);
        if let Err(what) = headers::response_head(&mut parts, &self.proxy.via) {
            tracing::warn!(target: "weir::proxy", upstream = %self.target.upstream.name, "upstream sent {what}");
            self.record.reason = Some(format!("upstream sent {what}"));
            return self.answer(Local::bad_gateway("502 Bad Gateway\n"));
        }
        self.record.status = status.as_u16();
        let empty = self.bodiless(status, &body);
        if !empty && let Err(e) = body.read_ahead().await {
            // Nothing of the response left yet: the client can still get a
            // 502 rather than a head with no body (or an empty reply).
            if std::mem::take(&mut self.body_pending) {
                self.target
                    .upstream
                    .group
                    .note(self.server, AttemptResult::Failed);
            }
            let why = crate::upstream::error_chain(&e);
            tracing::warn!(target: "weir::proxy", upstream = %self.target.upstream.name, "upstream body failed before its first byte: {why}");
            self.record.reason = Some(format!("upstream body failed before its first byte: {why}"));
            return self.answer(Local::bad_gateway("502 Bad Gateway\n"));
        }
        if status.as_u16() >= 400
            && let Some(stop) = self.upload_stop.take()
        {
            // A final error answer: the upstream wants no more of the
            // request body (RFC 9112 §9.6 lets it answer early), so it is
            // no longer sent once the answer is read.
            if empty {
                stop.cancel("the upstream answered before reading the whole request body");
            } else {
                body.stop_upload_at_end(stop);
            }
        }
        let source = self.upstream_source(body, empty);
        let (source, no_body) = match &mut self.cache {
            Some(cache) if !self.head_only => cache.fill(&mut parts, source),
            _ => (
                source.map_or_else(ResponseSource::empty, ResponseSource::Upstream),
                empty,
            ),
        };
        let composed = self
            .ssr
            .as_ref()
            .is_some_and(|ssr| ssr.is_template(&parts.headers));
        if std::mem::take(&mut self.body_pending) {
            self.note_body_end(empty || composed);
        }
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
}

impl Exchange<'_> {
    /// Whether an upstream answer of `status` with `body` has no body for
    /// the client: a `HEAD`, a `1xx`, `204` or `304` (RFC 9110 §6.4.1), or
    /// a body that already ended.
    pub(crate) fn bodiless(&self, status: StatusCode, body: &PooledBody) -> bool {
        self.head_only
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || http_body::Body::is_end_stream(body)
    }

    /// The upstream's body as the response's source, under the idle
    /// timeout; `None` when `empty`. Dropping an ended (or bodiless)
    /// upstream body keeps its connection poolable.
    pub(crate) fn upstream_source(&self, body: PooledBody, empty: bool) -> Option<UpstreamBody> {
        if empty {
            drop(body);
            return None;
        }
        Some(IdleTimeout::new(
            HttpBodySource::new(body),
            self.proxy.settings.body_idle_timeout,
        ))
    }

    /// Tells the server's failure streak how the response body ends: now,
    /// as an ok attempt, when `now` (no body, or a template the SSR
    /// composer reads, whose page's failures are the fragments' as much as
    /// the template's); else when the body ends (see [`BodyBlame`]).
    fn note_body_end(&mut self, now: bool) {
        let group = std::sync::Arc::clone(&self.target.upstream.group);
        let server = self.server;
        if now {
            group.note(server, AttemptResult::Ok);
            return;
        }
        self.record.body_blame = Some(BodyBlame(Box::new(move |end| {
            let result = match end {
                BodyEnd::Clean => {
                    group.note(server, AttemptResult::Ok);
                    return;
                }
                BodyEnd::Failed => AttemptResult::Failed,
                BodyEnd::TimedOut => AttemptResult::Timeout,
            };
            group.record(server, result);
        })));
    }
}
