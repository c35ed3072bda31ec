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

use http::Response;

use super::sent::Sent;
use crate::body::response::ResponseSource;
use crate::cache::{After, Cache, Fill, FillStart, Ticket};
use crate::upstream::UpstreamBody;
use crate::upstream::{PooledBody, UpstreamError};

/// The cache's state for one request: the ticket of a request sent
/// upstream, then the fill of its answer.
#[derive(Debug)]
pub(crate) struct CacheHook<'p> {
    pub(crate) cache: &'p Arc<Cache>,
    pub(crate) ticket: Option<Ticket>,
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

    /// The send phase, after: the cache sees the upstream's answer first,
    /// and may answer instead (a `304` refreshed the entry, or a stale one
    /// stands in for a failure).
    pub(crate) fn after_send(&mut self, sent: Result<Response<PooledBody>, UpstreamError>) -> Sent {
        let Some(ticket) = self.ticket.take() else {
            return Sent::from(sent);
        };
        match ticket.after_send(self.cache, sent) {
            After::Serve(hit) => Sent::Cached(hit),
            After::Forward(sent, fill) => {
                self.fill = fill;
                Sent::from(sent)
            }
        }
    }

    /// The fan-out phase: tees `body` (the upstream's; `None` when the
    /// response has none) into the cache when the answer may be stored.
    /// Returns the client's body and whether it has none (also when the
    /// client's own conditional turned the answer into a `304`).
    pub(crate) fn fill(
        &mut self,
        head: &mut http::response::Parts,
        body: Option<UpstreamBody>,
    ) -> (ResponseSource, bool) {
        let start = match self.fill.take() {
            Some(fill) => fill.start(self.cache, head, body),
            None => FillStart::Pass(body),
        };
        match start {
            FillStart::Pass(Some(body)) => (ResponseSource::Upstream(body), false),
            FillStart::Pass(None) => (ResponseSource::empty(), true),
            FillStart::Teed(body) => (ResponseSource::Cache(body), false),
            FillStart::NotModified => (ResponseSource::empty(), true),
        }
    }
}
