//! The cache lookup phase: a route with `cache = true` asks the cache
//! before anything goes upstream (see [`super::cache_hook`] for the hook).

use std::sync::Arc;

use http::{Method, Request, header};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;

use super::context::Exchange;
use crate::cache::{Cache, Hit, Lookup, Revalidation};

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
                // A moved key this replica misses: the send phase asks its
                // previous owner's cache first (crate::fleet).
                self.handoff = self.handoff_ask(&req);
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
        let Some(server) = self.pick_server(&parts.headers, &[]) else {
            return;
        };
        if self.upstream_head(&mut parts, server).is_err() {
            return;
        }
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::TRANSFER_ENCODING);
        let upstream_req = Request::from_parts(parts, Either::Right(Empty::new()));
        let proxy = self.proxy;
        let in_flight =
            crate::metrics::InFlight::hold(&self.target.upstream.group.servers[server].in_flight);
        revalidation.spawn(
            Arc::clone(cache),
            proxy.client.clone(),
            upstream_req,
            proxy.via.clone(),
            proxy.settings.body_idle_timeout,
            Some(in_flight),
        );
    }
}
