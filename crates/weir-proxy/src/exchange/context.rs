//! The per-request context: what every phase after routing shares.

use std::sync::Arc;

use http::{HeaderMap, Method, Request, Response, header};

use super::cache_hook::CacheHook;
use super::local;
use super::request::Target;
use super::ssr_hook::SsrHook;
use crate::access_log::AccessRecord;
use crate::body::replay::Tape;
use crate::body::request::RequestPipeline;
use crate::body::response::ResponseBody;
use crate::proxy::{Downstream, Proxy};

/// What planning a route's response transforms needs of the client's
/// request: its method and `Accept-Encoding` fields.
#[derive(Debug)]
pub(crate) struct TransformAsk {
    pub(crate) method: Method,
    pub(crate) headers: HeaderMap,
}

impl TransformAsk {
    pub(crate) fn of<B>(req: &Request<B>) -> Self {
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
    /// The connection's peer.
    pub(crate) downstream: &'p Downstream,
    /// The access log line, filled in as the phases learn things.
    pub(crate) record: AccessRecord,
    /// A `HEAD`: the response gets a head and no body.
    pub(crate) head_only: bool,
    pub(crate) target: Target<'p>,
    /// The upstream server of the current attempt (an index into the
    /// group's servers), picked by the upstream request phase.
    pub(crate) server: usize,
    /// Set when the route has transforms.
    pub(crate) transforms: Option<TransformAsk>,
    /// Set when the route composes templates.
    pub(crate) ssr: Option<SsrHook<'p>>,
    /// Set when the route caches.
    pub(crate) cache: Option<CacheHook<'p>>,
    /// The request body's retry buffer, when the upstream request phase
    /// kept one (see `retry_body_bytes`).
    pub(crate) tape: Option<Tape<RequestPipeline>>,
    /// A gRPC call (`Content-Type: application/grpc…`): Weir's own
    /// failures are answered as gRPC ones ([`super::grpc`]).
    pub(crate) grpc: bool,
    /// The attempt's response head was fine and its body is to come: the
    /// server's failure streak waits for the body's end.
    pub(crate) body_pending: bool,
    /// Stops sending the request body upstream (see
    /// [`crate::body::request::Stoppable`]); `None` without a body.
    pub(crate) upload_stop: Option<weir_stream::CancelToken>,
    /// A fleet peer forwarded this request (its token checked): it is
    /// served here, never forwarded again.
    pub(crate) from_peer: bool,
    /// A fleet peer's peek: answered from the cache alone.
    pub(crate) peek: bool,
    /// The peek the send phase makes before the upstream, for a moved key
    /// this replica misses (`crate::exchange::fleet`).
    pub(crate) handoff: Option<Box<PeerAsk>>,
    /// The invalidation for the key's owner, for an unsafe method on a
    /// caching route of a fleet (`crate::exchange::invalidate`).
    pub(crate) invalidate: Option<Box<PeerAsk>>,
}

/// A request to a fleet peer made from the client's request before a
/// phase consumes it, and sent later (`crate::fleet`): the handoff's peek
/// at a moved key's previous owner, prepared by the cache lookup and made
/// by the send phase; or an invalidation for a key's owner, prepared
/// before the upstream request and sent once the upstream said yes.
#[derive(Debug)]
pub(crate) struct PeerAsk {
    /// The peer.
    pub(crate) peer: std::net::SocketAddr,
    /// The peek, as sent.
    pub(crate) request: Request<crate::body::request::RequestBody>,
}

impl<'p> Exchange<'p> {
    /// The exchange of a routed request: what the later phases need of its
    /// head is taken now, before the request is handed on.
    pub(crate) fn new<B>(
        proxy: &'p Proxy,
        target: Target<'p>,
        req: &Request<B>,
        downstream: &'p Downstream,
        mut record: AccessRecord,
    ) -> Self {
        record.upstream = Some(target.upstream.name.clone());
        record.count_into(
            Arc::clone(&proxy.metrics),
            proxy.route_label(Some(target.route.index)),
        );
        let transforms = (!target.route.transforms.is_empty()).then(|| TransformAsk::of(req));
        let ssr = SsrHook::new(proxy, &target, req, downstream);
        let cache = proxy
            .cache
            .as_ref()
            .filter(|_| target.route.cache)
            .map(CacheHook::new);
        Exchange {
            proxy,
            downstream,
            record,
            head_only: req.method() == Method::HEAD,
            target,
            server: 0,
            transforms,
            ssr,
            cache,
            tape: None,
            grpc: super::grpc::is_grpc(req.headers()),
            body_pending: false,
            upload_stop: None,
            from_peer: false,
            peek: false,
            handoff: None,
            invalidate: None,
        }
    }

    /// The exchange of a request [`crate::fleet::Fleet::admit`] said came
    /// from a peer (served here, never forwarded again) or is a peek.
    pub(crate) fn admitted(mut self, admitted: crate::fleet::Admitted) -> Self {
        use crate::fleet::Admitted;
        self.from_peer = admitted != Admitted::Client;
        self.peek = admitted == Admitted::Peek;
        self
    }

    /// A server of the request's upstream for an attempt, by the group's
    /// policy, skipping those in `tried`; `None` when none is available.
    pub(crate) fn pick_server(&self, headers: &http::HeaderMap, tried: &[usize]) -> Option<usize> {
        let key = crate::balance::PickKey {
            headers,
            client: crate::rate_limit::client_addr(
                self.downstream.addr.ip(),
                &self.proxy.settings.trusted_proxies,
                headers,
            ),
            host: self.target.client_host.as_deref(),
        };
        self.target.upstream.group.pick(&key, tried)
    }

    /// A local answer, logged as this request; to a gRPC call, a failure
    /// to reach the upstream is a gRPC failure ([`super::grpc::answer`]).
    pub(crate) fn answer(self, local: local::Local) -> Response<ResponseBody> {
        if self.grpc && super::grpc::replaces(&local) {
            return super::grpc::answer(self.record, local);
        }
        local::answer(self.record, local, self.head_only)
    }
}
