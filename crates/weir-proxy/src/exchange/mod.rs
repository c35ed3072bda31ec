//! One request's life, as phases in the order it lives them.
//!
//! [`Proxy::handle`] runs the first two on the request head alone, then
//! hands the request to an [`Exchange`]: the per-request context every later
//! phase shares (the access record, the route target, what transform
//! planning needs, the SSR and cache hooks, `head_only`).
//!
//! | phase | what it does | where |
//! |---|---|---|
//! | downstream request filter | refuses `CONNECT`, unknown transfer codings | [`request::filter`] |
//! | route | normalized path, host, route, upstream | [`request::route`] |
//! | local answers | no route, bad request, a template file | [`local`], [`ssr`] |
//! | cache lookup | a hit or a stale entry answers without the upstream | [`cache`] |
//! | upstream request | target URI, header rules, request body, mirror copy | [`upstream_request`], [`mirror`] |
//! | send | connect and response head; the retry point | [`send`] |
//! | response head filter | hop-by-hop, `Via`, refusals | [`response`] |
//! | response body pipeline | SSR composition, the route's transforms | [`ssr`], [`response`] |
//! | fan-out | cache fill, body log | [`cache`], [`response`] |
//! | log | the access log line when the body ends | [`response`] (`ResponseLog`) |
//!
//! A feature plugs in as a hook the exchange holds ([`cache::CacheHook`],
//! [`ssr::SsrHook`]) or a step of one phase ([`mirror`]); each method is
//! named for the phase it serves.

pub(crate) mod cache;
pub(crate) mod local;
pub(crate) mod mirror;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod send;
pub(crate) mod ssr;
pub(crate) mod upstream_request;

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderMap, Method, Request, Response, header};
use hyper::body::Incoming;

use self::cache::CacheHook;
use self::request::Target;
use self::send::Sent;
use self::ssr::SsrHook;
use crate::access_log::AccessRecord;
use crate::body::response::ResponseBody;
use crate::proxy::Proxy;

/// What planning a route's response transforms needs of the client's
/// request: its method and `Accept-Encoding` fields.
#[derive(Debug)]
pub(crate) struct TransformAsk {
    pub(crate) method: Method,
    pub(crate) headers: HeaderMap,
}

impl TransformAsk {
    fn of<B>(req: &Request<B>) -> Self {
        let mut headers = HeaderMap::new();
        for v in req.headers().get_all(header::ACCEPT_ENCODING) {
            headers.append(header::ACCEPT_ENCODING, v.clone());
        }
        TransformAsk {
            method: req.method().clone(),
            headers,
        }
    }
}

/// One request on its way through the phases after routing.
#[derive(Debug)]
pub(crate) struct Exchange<'p> {
    pub(crate) proxy: &'p Proxy,
    pub(crate) peer: SocketAddr,
    /// The access log line, filled in as the phases learn things.
    pub(crate) record: AccessRecord,
    /// A `HEAD`: the response gets a head and no body.
    pub(crate) head_only: bool,
    pub(crate) target: Target<'p>,
    /// Set when the route has transforms.
    pub(crate) transforms: Option<TransformAsk>,
    /// Set when the route composes templates.
    pub(crate) ssr: Option<SsrHook<'p>>,
    /// Set when the route caches.
    pub(crate) cache: Option<CacheHook<'p>>,
}

impl Proxy {
    /// Handles one request from `peer`. Never fails: every error becomes a
    /// response (4xx/5xx) and an access log line.
    pub async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<ResponseBody> {
        let mut record = AccessRecord::new(&req, peer, Arc::clone(&self.shutdown_cut));
        record.count_into(Arc::clone(&self.metrics), self.route_label(None));
        let head_only = req.method() == Method::HEAD;
        let routed = request::filter(&req)
            .and_then(|()| request::route(&self.routes, &self.upstreams, &req));
        match routed {
            Ok(target) => {
                Exchange::new(self, target, &req, peer, record)
                    .run(req)
                    .await
            }
            Err(local) => local::answer(record, local, head_only),
        }
    }
}

impl<'p> Exchange<'p> {
    /// The exchange of a routed request: what the later phases need of its
    /// head is taken now, before the request is handed on.
    fn new(
        proxy: &'p Proxy,
        target: Target<'p>,
        req: &Request<Incoming>,
        peer: SocketAddr,
        mut record: AccessRecord,
    ) -> Self {
        record.upstream = Some(target.upstream.name.clone());
        record.count_into(
            Arc::clone(&proxy.metrics),
            proxy.route_label(Some(target.route.index)),
        );
        let transforms = (!target.route.transforms.is_empty()).then(|| TransformAsk::of(req));
        let ssr = SsrHook::new(proxy, &target, req, peer);
        let cache = proxy
            .cache
            .as_ref()
            .filter(|_| target.route.cache)
            .map(CacheHook::new);
        Exchange {
            proxy,
            peer,
            record,
            head_only: req.method() == Method::HEAD,
            target,
            transforms,
            ssr,
            cache,
        }
    }

    /// The phases after routing, in order.
    async fn run(mut self, req: Request<Incoming>) -> Response<ResponseBody> {
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

    /// A local answer, logged as this request.
    fn answer(self, local: local::Local) -> Response<ResponseBody> {
        local::answer(self.record, local, self.head_only)
    }
}
