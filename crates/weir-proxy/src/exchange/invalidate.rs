//! Invalidation across a fleet (`crate::fleet`): an unsafe method (`POST`,
//! `PUT`, `DELETE`, `PATCH`, …) on a caching route is served where it
//! lands, and its success drops the cached answers to `GET` of its URI
//! (RFC 9111 §4.4). Where it lands, that is the shared cache's entry (the
//! cache lookup's ticket) and the L1's; the key's owner, which holds the
//! fleet's entry, is told with a small request of its own: the peer token
//! and [`crate::fleet::INVALIDATE`], sent in the background once the
//! upstream answered `2xx` or `3xx`. The owner drops its entry and
//! answers `204`, without an access log line. Other replicas' L1 entries
//! live until their `l1_ttl` ends.

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use super::context::{Exchange, PeerAsk};
use crate::body::response::ResponseBody;
use crate::fleet::Owner;
use crate::proxy::Proxy;

impl Exchange<'_> {
    /// Before the upstream request consumes it: for an unsafe method on a
    /// caching route of a fleet, from a client, the invalidation to send
    /// the key's owner if it is another replica.
    pub(crate) fn prepare_invalidation(&mut self, req: &Request<Incoming>) {
        if self.from_peer || self.cache.is_none() || !unsafe_method(req.method()) {
            return;
        }
        let Some(fleet) = self.proxy.fleet.as_ref() else {
            return;
        };
        let key = crate::cache::primary_key(
            self.target.client_host.as_deref(),
            &self.target.path,
            req.uri().query(),
        );
        let Owner::Peer { addr, epoch } = fleet.ring_owner(key.as_bytes()) else {
            return;
        };
        let Some(mut request) = self.peer_request(req, &addr.to_string(), epoch) else {
            return;
        };
        *request.method_mut() = Method::GET;
        // The owner routes it by host and path, and drops every variant:
        // the client's other fields (a large cookie, say) are not sent.
        let mut headers = http::HeaderMap::with_capacity(4);
        for name in [
            header::HOST,
            crate::fleet::PEER_TOKEN,
            crate::fleet::RING_EPOCH,
        ] {
            if let Some(v) = request.headers().get(&name) {
                headers.insert(name, v.clone());
            }
        }
        headers.insert(
            crate::fleet::INVALIDATE,
            http::HeaderValue::from_static("1"),
        );
        *request.headers_mut() = headers;
        self.invalidate = Some(Box::new(PeerAsk {
            peer: addr,
            request,
        }));
    }

    /// The upstream answered the unsafe method with `status`: on a `2xx`
    /// or `3xx`, this replica's L1 drops the URI's entry and the key's
    /// owner is told, in a task of its own.
    pub(crate) fn invalidate_elsewhere(&mut self, status: StatusCode) {
        let Some(ask) = self.invalidate.take() else {
            return;
        };
        if !(status.is_success() || status.is_redirection()) {
            return;
        }
        if let Some(l1) = &self.proxy.l1 {
            l1.invalidate(
                self.target.client_host.as_deref(),
                &self.target.path,
                ask.request.uri().query(),
            );
        }
        let Some(fleet) = self.proxy.fleet.clone() else {
            return;
        };
        let client = self.proxy.client.clone();
        tokio::spawn(async move {
            let PeerAsk { peer, request } = *ask;
            super::fleet::send_to_peer(
                &client,
                &fleet,
                peer,
                request,
                (crate::fleet::Lane::Forward, fleet.peer_timeout()),
                "telling a key's owner to drop its cached entry",
            )
            .await;
        });
    }
}

impl Proxy {
    /// A peer's invalidation ([`crate::fleet::Admitted::Invalidate`]): the
    /// cached answers to `GET` of the request's URI are dropped; `204`, or
    /// `404` when no caching route takes the URI. No access log line.
    pub(super) fn answer_invalidation<B>(&self, req: &Request<B>) -> Response<ResponseBody> {
        let target = match super::request::route(&self.routes, &self.upstreams, req) {
            Ok(t) if t.route.cache => t,
            _ => return super::local::unlogged(StatusCode::NOT_FOUND),
        };
        let Some(cache) = self.cache.as_ref().map(Arc::as_ref) else {
            return super::local::unlogged(StatusCode::NOT_FOUND);
        };
        cache.invalidate(
            target.client_host.as_deref(),
            &target.path,
            req.uri().query(),
        );
        // Counted once dropped: a test waits for the count.
        if let Some(fleet) = &self.fleet {
            fleet.count(crate::metrics::FleetResult::Invalidated);
        }
        super::local::unlogged(StatusCode::NO_CONTENT)
    }
}

/// Whether `method` may change the resource: not `GET`, `HEAD`, `OPTIONS`
/// or `TRACE` (RFC 9110 §9.2.1).
fn unsafe_method(method: &Method) -> bool {
    !matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}
