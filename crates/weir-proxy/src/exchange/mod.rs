//! One request's life, as phases in the order it lives them.
//!
//! [`Proxy::handle`] runs the first two on the request head alone, then
//! hands the request to an [`Exchange`]: the per-request context every later
//! phase shares (the access record, the route target, what transform
//! planning needs, the SSR and cache hooks, `head_only`).
//!
//! | phase | what it does | where |
//! |---|---|---|
//! | downstream request filter | refuses `CONNECT` (but RFC 8441's), unknown transfer codings | [`request::filter`] |
//! | route | normalized path, host, route, upstream | [`request::route`] |
//! | upgrade | a protocol switch the route allows becomes a tunnel | [`upgrade`] |
//! | local answers | no route, bad request, a template file | [`local`], [`compose`] |
//! | rate limit | a token from the route's bucket (here, on the fleet owner, in Redis), or `429` | [`rate`] |
//! | fleet | a cacheable request another replica owns goes there, its answer relayed (or answered from the L1); an unsafe one tells the key's owner to drop its entry | [`fleet`], [`invalidate`] |
//! | cache lookup | a hit or a stale entry answers without the upstream | [`cache_lookup`] |
//! | upstream request | target URI, header rules, request body, mirror copy | [`upstream_request`], [`mirror_hook`] |
//! | send | connect and response head (HTTP/1.1 or h2c); the retry point | [`send`] |
//! | gRPC failures | Weir's own 502/503/504 to a gRPC call as `grpc-status` | [`grpc`] |
//! | response head filter | hop-by-hop, `Via`, refusals | [`upstream_response`] |
//! | fan-out | cache fill and body log, on the upstream's bytes | [`cache_hook`], [`response`] |
//! | response body pipeline | SSR composition, the route's transforms | [`compose`], [`response`] |
//! | log | the access log line when the body ends | [`response`] (`ResponseLog`) |
//!
//! A feature plugs in as a hook the exchange holds ([`cache_hook::CacheHook`],
//! [`ssr_hook::SsrHook`]) or a step of one phase ([`mirror_hook`]); each
//! method is named for the phase it serves.

pub(crate) mod cache_hook;
pub(crate) mod cache_lookup;
pub(crate) mod compose;
pub(crate) mod context;
pub(crate) mod fleet;
pub(crate) mod grpc;
pub(crate) mod invalidate;
pub(crate) mod local;
pub(crate) mod mirror_hook;
pub(crate) mod rate;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod send;
pub(crate) mod sent;
pub(crate) mod ssr_hook;
pub(crate) mod upgrade;
pub(crate) mod upstream_request;
pub(crate) mod upstream_response;

use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use self::context::Exchange;
use self::local::Local;
use self::sent::Sent;
use self::ssr_hook::SsrHook;
use crate::access_log::AccessRecord;
use crate::balance::AttemptResult;
use crate::body::response::ResponseBody;
use crate::fleet::Admitted;
use crate::proxy::{Downstream, Proxy};

impl Proxy {
    /// Handles one request from `downstream`. Never fails: every error becomes a
    /// response (4xx/5xx) and an access log line.
    pub async fn handle(
        &self,
        mut req: Request<Incoming>,
        downstream: &Downstream,
    ) -> Response<ResponseBody> {
        // The limits apply to the request as the client sent it, before
        // Weir adds its own fields.
        let filtered = request::filter(&req, &self.settings.limits);
        // A peer's forwarded request proves itself and loses the proof here,
        // before anything reads the fields (crate::fleet).
        let admitted = match &self.fleet {
            Some(f) => f.admit(req.headers_mut(), downstream.addr),
            // Without a fleet, a peer's fields (a replica that still has
            // [fleet] during a rollout) must not reach the upstream either.
            None => crate::fleet::strip(req.headers_mut()),
        };
        if admitted == Admitted::RateAsk
            && let Some(fleet) = &self.fleet
        {
            return local::rate_answer(fleet.answer_rate(req.headers()));
        }
        if admitted == Admitted::Invalidate {
            return self.answer_invalidation(&req);
        }
        let from_peer = matches!(admitted, Admitted::Peer | Admitted::Peek);
        // A peer proved itself with the secret: its X-Request-Id stands.
        let id = crate::request_id::identify(req.headers_mut(), downstream.trusted || from_peer);
        let mut record = AccessRecord::new(&req, downstream.addr, Arc::clone(&self.shutdown_cut));
        record.request_id = Some(id.clone());
        record.count_into(Arc::clone(&self.metrics), self.route_label(None));
        let head_only = req.method() == Method::HEAD;
        let routed = filtered.and_then(|()| request::route(&self.routes, &self.upstreams, &req));
        let mut resp = match routed {
            Ok(_) if admitted == Admitted::BadToken => {
                record.reason = Some("fleet peer token is not this replica's secret".to_owned());
                let mut resp = local::answer(record, local::Local::fleet_refused(), head_only);
                resp.headers_mut().insert(
                    crate::fleet::REFUSED,
                    http::HeaderValue::from_static("token"),
                );
                resp
            }
            Ok(target) if !record.admit(target.route.concurrency.as_ref()) => {
                local::answer(record, Local::too_busy(), head_only)
            }
            // A peer's request was counted where the client sent it.
            Ok(target)
                if !from_peer
                    && let Some(wait) = self.rate_limited(target.route, &req, downstream).await =>
            {
                record.reason = Some("rate limit".to_owned());
                local::answer(record, Local::rate_limited(wait), head_only)
            }
            Ok(target) => {
                // One expression: a named exchange would be kept in this
                // future beside the copy `run` moves into its own.
                Exchange::new(self, target, &req, downstream, record)
                    .admitted(admitted)
                    .run(req)
                    .await
            }
            Err(local) => local::answer(record, local, head_only),
        };
        resp.headers_mut()
            .insert(crate::request_id::X_REQUEST_ID, id);
        resp
    }
}

impl Exchange<'_> {
    /// The phases after routing, in order.
    async fn run(mut self, req: Request<Incoming>) -> Response<ResponseBody> {
        // The rarer phases are boxed: their futures are large, and inline
        // they would grow every request's future, which is moved (copied)
        // into its task.
        if let Some(ask) = upgrade::ask(self.target.route, &req) {
            return Box::pin(self.tunnel(req, ask)).await;
        }
        if req.method() == Method::CONNECT {
            // An extended CONNECT (RFC 8441) the route does not tunnel.
            return self.answer(upgrade::NOT_TUNNELLED);
        }
        if self.ssr.as_ref().is_some_and(SsrHook::serves_file) {
            return Box::pin(self.file_page(req.method(), req.uri())).await;
        }
        if self.peek {
            return self.answer_peek(req);
        }
        if let Some((owner, epoch)) = self.fleet_owner(&req) {
            if let Some(hit) = Box::pin(self.l1_lookup(&req)).await {
                return self.respond_from_owner_copy(hit);
            }
            if let Some(resp) = Box::pin(self.fleet_forward(&req, owner, epoch)).await {
                return self.relay_from_owner(resp, owner);
            }
            self.leave_l1();
        }
        self.prepare_invalidation(&req);
        let req = match self.cache_lookup(req).await {
            Ok(req) => req,
            Err(hit) => return self.respond_from_cache(hit),
        };
        let upstream_req = match self.upstream_request(req) {
            Ok(r) => r,
            Err(local) => return self.answer(local),
        };
        let sent = self.send(upstream_req).await;
        match sent {
            Sent::Response(resp) => self.upstream_response(resp).await,
            Sent::Cached(hit) => {
                if std::mem::take(&mut self.body_pending) {
                    self.target
                        .upstream
                        .group
                        .note(self.server, AttemptResult::Ok);
                }
                self.respond_from_cache(hit)
            }
            Sent::Failed(err) => {
                let local = self.upstream_failure(&err);
                self.answer(local)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future an `async fn` returns, from the function
    /// item alone (no value needed).
    fn future_size<'a, F, Fut>(_f: F) -> usize
    where
        F: FnOnce(&'a Proxy, Request<Incoming>, &'a Downstream) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Every request's future is moved into a task (hyper spawns one per
    /// HTTP/2 stream) or a box (HTTP/1.1), a copy each time, so its size is
    /// a per-request cost: with the tunnel, file page and connect phases
    /// inline it was 11.8 KiB, and `memcpy` was 13% of Weir's CPU time in
    /// a `perf` profile of 1 KiB h2c GETs. Rare phases are boxed (see
    /// `Exchange::run`); this keeps the next one from quietly growing it.
    /// 8,520 bytes with the fleet phases (8,488 before them; 8,536 with the
    /// rate-limit phase awaited for shared buckets, 8,608 with the fleet's
    /// L1 and invalidation; a borrow of the upstream's response before
    /// `into_parts` would add 232 more): a value held
    /// across an await, even one moved out already, keeps its room in the
    /// future, so the fleet's peeks and forwards are boxed and the handoff
    /// peek is prepared in the cache lookup and made in the send phase.
    #[test]
    fn a_request_future_stays_under_8_5_kib() {
        let size = future_size(Proxy::handle);
        assert!(size <= 8704, "Proxy::handle's future is {size} bytes");
    }
}
