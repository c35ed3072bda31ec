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
pub(crate) mod grpc;
pub(crate) mod local;
pub(crate) mod mirror_hook;
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
use crate::body::response::ResponseBody;
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
        let id = crate::request_id::identify(req.headers_mut(), downstream.trusted);
        let mut record = AccessRecord::new(&req, downstream.addr, Arc::clone(&self.shutdown_cut));
        record.request_id = Some(id.clone());
        record.count_into(Arc::clone(&self.metrics), self.route_label(None));
        let head_only = req.method() == Method::HEAD;
        let routed = filtered.and_then(|()| request::route(&self.routes, &self.upstreams, &req));
        let mut resp = match routed {
            Ok(target) if !record.admit(target.route.concurrency.as_ref()) => {
                local::answer(record, Local::too_busy(), head_only)
            }
            Ok(target) => {
                Exchange::new(self, target, &req, downstream, record)
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
        if let Some(ask) = upgrade::ask(self.target.route, &req) {
            return self.tunnel(req, ask).await;
        }
        if req.method() == Method::CONNECT {
            // An extended CONNECT (RFC 8441) the route does not tunnel.
            return self.answer(upgrade::NOT_TUNNELLED);
        }
        if self.ssr.as_ref().is_some_and(SsrHook::serves_file) {
            return self.file_page(req.method(), req.uri()).await;
        }
        let req = match self.cache_lookup(req).await {
            Ok(req) => req,
            Err(hit) => return self.respond_from_cache(hit),
        };
        let upstream_req = match self.upstream_request(req) {
            Ok(r) => r,
            Err(local) => return self.answer(local),
        };
        match self.send(upstream_req).await {
            Sent::Response(resp) => self.upstream_response(resp).await,
            Sent::Cached(hit) => self.respond_from_cache(hit),
            Sent::Failed(err) => {
                let local = self.upstream_failure(&err);
                self.answer(local)
            }
        }
    }
}
