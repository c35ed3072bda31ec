//! The cache hook: the response cache ([`crate::cache`]) plugged into the
//! phases of a route with `cache = true`.
//!
//! - cache lookup: a fresh entry (or another request's fill) answers at
//!   once; a stale one inside `stale-while-revalidate` answers at once and
//!   is revalidated in the background; anything else goes upstream with a
//!   [`Ticket`];
//! - send: the ticket's validators go upstream, and the cache sees the
//!   answer first (a `304` refreshes the entry, a failure may be answered
//!   by a stale entry);
//! - fan-out: a storable answer's body is teed into the cache as it
//!   streams to the client, before the route's transforms (a stored body
//!   serves every `Accept-Encoding`).

use std::sync::Arc;

use http::{Method, Request, Response, header};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;

use super::Exchange;
use super::response::empty_body;
use super::send::Sent;
use crate::access_log::AccessRecord;
use crate::body::idle::UpstreamBody;
use crate::body::response::ResponseSource;
use crate::cache::{After, Cache, Fill, FillStart, Hit, Lookup, Revalidation, Ticket};
use crate::upstream::UpstreamError;

/// The cache's state for one request: the ticket of a request sent
/// upstream, then the fill of its answer.
#[derive(Debug)]
pub(crate) struct CacheHook<'p> {
    cache: &'p Arc<Cache>,
    ticket: Option<Ticket>,
    fill: Option<Fill>,
}

impl<'p> CacheHook<'p> {
    pub(crate) fn new(cache: &'p Arc<Cache>) -> Self {
        CacheHook {
            cache,
            ticket: None,
            fill: None,
        }
    }

    /// The send phase, before: the ticket's validators on the upstream request.
    pub(crate) fn prepare(&self, headers: &mut http::HeaderMap) {
        if let Some(ticket) = &self.ticket {
            ticket.prepare(headers);
        }
    }

    /// The send phase, after: the cache sees the upstream's answer first.
    pub(crate) fn after_send(&mut self, sent: Result<Response<Incoming>, UpstreamError>) -> Sent {
        let forwarded = match self.ticket.take() {
            Some(ticket) => match ticket.after_send(self.cache, sent) {
                After::Serve(hit) => return Sent::Cached(hit),
                After::Forward(sent, fill) => {
                    self.fill = fill;
                    sent
                }
            },
            None => sent,
        };
        match forwarded {
            Ok(resp) => Sent::Response(resp),
            Err(e) => Sent::Failed(e),
        }
    }

    /// The fan-out phase: tees `body` (the upstream's; `None` when the
    /// response has none) into the cache when the answer may be stored.
    /// Returns the client's body and whether it has none (also when the
    /// client's own conditional turned the answer into a `304`, which
    /// `record` then says).
    pub(crate) fn fill(
        &mut self,
        head: &mut http::response::Parts,
        body: Option<UpstreamBody>,
        record: &mut AccessRecord,
    ) -> (ResponseSource, bool) {
        let start = match self.fill.take() {
            Some(fill) => fill.start(self.cache, head, body),
            None => FillStart::Pass(body),
        };
        match start {
            FillStart::Pass(Some(body)) => (ResponseSource::Upstream(body), false),
            FillStart::Pass(None) => (empty_body(), true),
            FillStart::Teed(body) => (ResponseSource::Cache(body), false),
            FillStart::NotModified => {
                record.status = head.status.as_u16();
                (empty_body(), true)
            }
        }
    }
}

impl Exchange<'_> {
    /// The cache lookup phase: `Err` with the answer when the cache has
    /// one (the request never reaches the upstream), else the request back.
    pub(crate) async fn cache_lookup(
        &mut self,
        req: Request<Incoming>,
    ) -> Result<Request<Incoming>, Hit> {
        let Some(hook) = &mut self.cache else {
            return Ok(req);
        };
        let cache = hook.cache;
        match cache
            .lookup(&req, &self.target.path, self.target.client_host.as_deref())
            .await
        {
            Lookup::Serve(hit) => Err(hit),
            Lookup::ServeStale(hit, revalidation) => {
                self.revalidate_in_background(req, cache, revalidation);
                Err(hit)
            }
            Lookup::Forward(ticket) => {
                hook.ticket = Some(ticket);
                Ok(req)
            }
        }
    }

    /// Sends the background revalidation of a stale entry served under
    /// `stale-while-revalidate`: a `GET` with the head the client's request
    /// would have had upstream (no body), through the same pooled, counted
    /// client, counted in flight.
    fn revalidate_in_background(
        &self,
        req: Request<Incoming>,
        cache: &Arc<Cache>,
        revalidation: Revalidation,
    ) {
        let (mut parts, body) = req.into_parts();
        drop(body);
        parts.method = Method::GET;
        if self.upstream_head(&mut parts).is_err() {
            return;
        }
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::TRANSFER_ENCODING);
        let upstream_req = Request::from_parts(parts, Either::Right(Empty::new()));
        let proxy = self.proxy;
        let in_flight = proxy
            .metrics
            .upstream_request(self.target.upstream.url.authority.as_str());
        revalidation.spawn(
            Arc::clone(cache),
            proxy.client.clone(),
            upstream_req,
            Arc::from(proxy.settings.via_pseudonym.as_str()),
            proxy.settings.body_idle_timeout,
            Some(in_flight),
        );
    }
}
