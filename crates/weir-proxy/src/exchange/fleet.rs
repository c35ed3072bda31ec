//! The fleet phase (`[fleet]`, see [`crate::fleet`]): a cacheable request
//! whose key another replica owns goes to that replica, and its answer is
//! relayed as the owner made it (its cache, its transforms); every other
//! request goes on to the cache lookup here.
//!
//! Sharded: `GET` and `HEAD` without `Authorization` and without a body,
//! on a route with `cache = true`, from a client (a peer's request is
//! served where it lands). The forwarded request is the client's, as it
//! came: same method, target and `Host`, hop-by-hop fields removed,
//! `X-Forwarded-*` and `Via` added as for any upstream, and the peer
//! fields. A forward that fails before the owner's response head (no
//! connection, no head within `peer_timeout`, a head hyper cannot parse)
//! is served here instead, and the owner is skipped for a while.
//!
//! Two more steps serve a change of members ([`crate::fleet`]): on a miss
//! of a key that moved here, the handoff asks the key's previous owner
//! for its cached entry (a peek) before the upstream, and fills this
//! replica's cache from it; and a peer's peek is answered from the cache
//! alone ([`Exchange::answer_peek`]).

use std::net::SocketAddr;

use http::header::HeaderValue;
use http::uri::{Authority, Scheme};
use http::{Method, Request, Response, StatusCode, Version, header};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;

use super::cache_hook::CacheHook;
use super::context::{Exchange, PeerAsk};
use super::local::Local;
use super::sent::Sent;
use crate::access_log::{BodyBlame, BodyEnd};
use crate::body::response::{ResponseBody, ResponseSource};
use crate::cache::Lookup;
use crate::fleet::{Lane, Owner};
use crate::headers;
use crate::metrics::FleetResult;
use crate::proxy::Proxy;
use crate::upstream::PooledBody;

impl Exchange<'_> {
    /// The cache key of a shardable request on a caching route of a
    /// fleet, else `None`.
    fn fleet_key(&self, req: &Request<Incoming>) -> Option<String> {
        self.proxy.fleet.as_ref()?;
        // Without a host (HTTP/1.0), the owner could not route a forward.
        if self.cache.is_none() || self.target.client_host.is_none() || !shardable(req) {
            return None;
        }
        Some(crate::cache::primary_key(
            self.target.client_host.as_deref(),
            &self.target.path,
            req.uri().query(),
        ))
    }

    /// The fleet phase's decision: the owner to forward to and this
    /// replica's ring epoch, or `None` to serve the request here.
    pub(crate) fn fleet_owner(&self, req: &Request<Incoming>) -> Option<(SocketAddr, u64)> {
        if self.from_peer {
            return None;
        }
        let key = self.fleet_key(req)?;
        let fleet = self.proxy.fleet.as_ref()?;
        match fleet.place(&key) {
            Owner::Here => None,
            Owner::Peer { addr, epoch } => Some((addr, epoch)),
        }
    }

    /// Forwards the request to its owner: the owner's response head, or
    /// `None` (logged, counted, the owner in back-off) to serve it here.
    pub(crate) async fn fleet_forward(
        &mut self,
        req: &Request<Incoming>,
        owner: SocketAddr,
        epoch: u64,
    ) -> Option<Response<PooledBody>> {
        let mut forward = self.peer_request(req, &owner.to_string(), epoch)?;
        // An L1 entry's validators, to be refreshed by a `304`.
        if let Some(hook) = &self.cache {
            hook.prepare(forward.headers_mut());
        }
        if !self.within_limits(&forward) {
            return None;
        }
        // Counted for the bound on load until the owner's head arrives.
        let _in_flight = self.proxy.fleet.as_ref()?.forwarding(owner);
        let resp = self
            .proxy
            .send_to_peer(
                owner,
                forward,
                "forwarding a cacheable request to its owner",
            )
            .await?;
        self.proxy.fleet.as_ref()?.count(FleetResult::Forwarded);
        self.record.server = Some(format!("peer {owner}").into());
        self.record.attempts = 1;
        Some(resp)
    }

    /// The handoff's decision: on a miss of a key this replica owns that
    /// may fill the cache, the key's previous owner to peek at (see
    /// [`crate::fleet::Fleet::previous_owner`]).
    pub(crate) fn handoff_from(&self, req: &Request<Incoming>) -> Option<SocketAddr> {
        let ticket = self.cache.as_ref()?.ticket.as_ref()?;
        if self.peek || !ticket.is_plain_miss() {
            return None;
        }
        let key = self.fleet_key(req)?;
        let fleet = self.proxy.fleet.as_ref()?;
        if fleet.owner(&key) != Owner::Here {
            // Served here for a peer that sees another ring, or its owner
            // is in back-off: not a moved key of this replica's.
            return None;
        }
        fleet.previous_owner(&key)
    }

    /// The peek of the handoff (see [`Exchange::handoff_from`]), built
    /// now from the client's request, which the upstream request phase
    /// consumes before the send phase makes the peek.
    pub(crate) fn handoff_ask(&self, req: &Request<Incoming>) -> Option<Box<PeerAsk>> {
        let previous = self.handoff_from(req)?;
        let fleet = self.proxy.fleet.as_ref()?;
        let mut request = self.peer_request(req, &previous.to_string(), fleet.epoch())?;
        *request.method_mut() = Method::GET;
        let headers = request.headers_mut();
        // The whole entry, whatever the client asked of it: this
        // replica's cache answers the client's conditional or range.
        for name in [
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_MATCH,
            header::IF_UNMODIFIED_SINCE,
            header::IF_RANGE,
            header::RANGE,
        ] {
            headers.remove(name);
        }
        headers.insert(crate::fleet::PEEK, HeaderValue::from_static("1"));
        if !self.within_limits(&request) {
            return None;
        }
        Some(Box::new(PeerAsk {
            peer: previous,
            request,
        }))
    }

    /// Makes the handoff's peek: the previous owner's entry (which then
    /// fills this replica's cache and goes through the route's transforms,
    /// as an upstream's answer would), or `None` on a miss or a failure,
    /// to go upstream.
    pub(crate) async fn peek_at(&mut self, ask: PeerAsk) -> Option<Box<Response<PooledBody>>> {
        let PeerAsk {
            peer: previous,
            request,
        } = ask;
        let mut resp = self
            .proxy
            .send_to_peer(
                previous,
                request,
                "asking a moved key's previous owner for it",
            )
            .await?; // Only an entry marked as one: a miss, or any answer the peer made
        // itself (a full route, a limit), sends this request upstream.
        if resp
            .headers()
            .get(crate::fleet::PEEK)
            .map(HeaderValue::as_bytes)
            != Some(b"hit")
        {
            return None;
        }
        resp.headers_mut().remove(crate::fleet::PEEK);
        resp.headers_mut().remove(crate::cache::X_CACHE);
        self.proxy.fleet.as_ref()?.count(FleetResult::Handoff);
        self.record.server = Some(format!("peer {previous} (handoff)").into());
        Some(Box::new(resp))
    }

    /// A peer's peek: this replica's fresh cached entry as stored (no
    /// transform, no SSR), or a `204` with the peek field set to `miss`.
    /// Nothing is fetched, waited for or counted as a cache request for a
    /// peek.
    pub(crate) fn answer_peek(mut self, req: Request<Incoming>) -> Response<ResponseBody> {
        self.transforms = None;
        self.ssr = None;
        let hit = self.cache.as_ref().and_then(|hook| {
            hook.cache
                .peek(&req, &self.target.path, self.target.client_host.as_deref())
        });
        self.cache = None;
        if let Some(mut hit) = hit {
            hit.head
                .headers
                .insert(crate::fleet::PEEK, HeaderValue::from_static("hit"));
            return self.respond_from_cache(hit);
        }
        self.record.reason = Some("fleet peek: not cached here".to_owned());
        let mut resp = self.answer(Local::new(
            StatusCode::NO_CONTENT,
            "",
            crate::outcome::Outcome::Ok,
        ));
        resp.headers_mut()
            .insert(crate::fleet::PEEK, HeaderValue::from_static("miss"));
        resp
    }

    /// Whether a request to a peer stays within this replica's request
    /// head limits, and so the peer's (the replicas of a fleet share a
    /// config). The fields a hop adds may take a head that passed here
    /// over them: such a request is served here, as the client sent it,
    /// rather than refused with a `431` by the peer.
    fn within_limits<B>(&self, req: &Request<B>) -> bool {
        let limits = &self.proxy.settings.limits;
        super::request::head_bytes(req) <= limits.max_head_bytes
            && req.headers().len() <= limits.max_headers
    }

    /// The request forwarded to the owner at `authority`: the client's,
    /// with the head rules of any hop and the peer fields.
    pub(super) fn peer_request(
        &self,
        req: &Request<Incoming>,
        authority: &str,
        epoch: u64,
    ) -> Option<Request<crate::body::request::RequestBody>> {
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let uri = format!("http://{authority}{target}").parse().ok()?;
        let mut headers = req.headers().clone();
        headers::remove_hop_by_hop(&mut headers);
        let received = req.version();
        if received == Version::HTTP_2 {
            headers::join_cookies(&mut headers);
        }
        // The owner routes by the client's host, as this replica did.
        match self.target.client_host.as_deref() {
            Some(host) => {
                headers.insert(header::HOST, host.parse().ok()?);
            }
            None => {
                headers.remove(header::HOST);
            }
        }
        headers::set_forwarded(
            &mut headers,
            Proxy::forwarded_peer(self.downstream, self.target.client_host.as_deref()),
        );
        self.proxy.via.append(&mut headers, received);
        self.proxy.fleet.as_ref()?.mark(&mut headers, epoch);
        let mut forward = Request::new(Either::Right(Empty::new()));
        *forward.method_mut() = req.method().clone();
        *forward.uri_mut() = uri;
        *forward.headers_mut() = headers;
        Some(forward)
    }

    /// The answer of the owner at `owner`, downstream: its head through
    /// the response head filter, its body as it comes. The owner already
    /// ran the route's cache and transforms on it, so neither runs again
    /// here; with an L1, the answer fills it (or, a `304` to its
    /// validators, refreshes it). A body the owner breaks off counts
    /// against it as a failed forward would (see [`blame_owner`]).
    pub(crate) fn relay_from_owner(
        mut self,
        resp: Response<PooledBody>,
        owner: SocketAddr,
    ) -> Response<ResponseBody> {
        let resp = match self.cache.as_mut().map(|hook| hook.after_send(Ok(resp))) {
            Some(Sent::Cached(hit)) => return self.respond_from_owner_copy(hit),
            Some(Sent::Response(resp)) => resp,
            // `after_send` turns an `Ok` into one of the two above.
            Some(Sent::Failed(_)) | None => {
                return self.answer(Local::bad_gateway("502 Bad Gateway\n"));
            }
        };
        let (mut parts, body) = resp.into_parts();
        if let Err(what) = headers::response_head(&mut parts, &self.proxy.via) {
            self.record.reason = Some(format!("fleet peer sent {what}"));
            return self.answer(Local::bad_gateway("502 Bad Gateway\n"));
        }
        let empty = self.bodiless(parts.status, &body);
        if !empty && let Some(fleet) = self.proxy.fleet.clone() {
            self.record.body_blame = Some(BodyBlame(Box::new(move |end| {
                blame_owner(&fleet, owner, end);
            })));
        }
        let source = self.upstream_source(body, empty);
        self.transforms = None;
        self.ssr = None;
        let (source, empty) = match self.cache.take() {
            Some(mut l1) if !self.head_only => l1.fill(&mut parts, source),
            _ => (
                source.map_or_else(ResponseSource::empty, ResponseSource::Upstream),
                empty,
            ),
        };
        self.respond(parts, source, empty)
    }

    /// An owner's answer held in this replica's L1: as stored, without the
    /// route's transforms, which the owner ran.
    pub(crate) fn respond_from_owner_copy(
        mut self,
        hit: crate::cache::Hit,
    ) -> Response<ResponseBody> {
        self.transforms = None;
        self.ssr = None;
        self.cache = None;
        self.record.server = Some("fleet L1".into());
        self.respond_from_cache(hit)
    }

    /// Before forwarding to the owner: this replica's L1 (`[fleet]
    /// l1_bytes`), on a route without transforms (the L1 holds the owner's
    /// transformed answers). A fresh entry answers (`Some`); on a miss the
    /// L1 becomes the exchange's cache hook, with the ticket that its fill
    /// from the owner's answer needs.
    pub(crate) async fn l1_lookup(&mut self, req: &Request<Incoming>) -> Option<crate::cache::Hit> {
        let l1 = self.proxy.l1.as_ref()?;
        if !self.target.route.transforms.is_empty() {
            return None;
        }
        let mut hook = CacheHook::new(l1);
        match l1
            .lookup(req, &self.target.path, self.target.client_host.as_deref())
            .await
        {
            Lookup::Serve(hit) | Lookup::ServeStale(hit, _) => {
                self.proxy.fleet.as_ref()?.count(FleetResult::L1Hit);
                Some(hit)
            }
            Lookup::Forward(ticket) => {
                hook.ticket = Some(ticket);
                self.cache = Some(hook);
                None
            }
        }
    }

    /// The forward failed: the request is served here, through the shared
    /// cache (the L1's ticket, dropped, lets other waiters go).
    pub(crate) fn leave_l1(&mut self) {
        if self.proxy.l1.is_some() {
            self.cache = self
                .proxy
                .cache
                .as_ref()
                .filter(|_| self.target.route.cache)
                .map(CacheHook::new);
        }
    }
}

impl Proxy {
    /// Sends `req` to the peer at `addr` within `peer_timeout`; a failure
    /// is logged as `doing` failed, counted, and puts the peer in back-off.
    pub(super) async fn send_to_peer(
        &self,
        addr: SocketAddr,
        req: Request<crate::body::request::RequestBody>,
        doing: &str,
    ) -> Option<Response<PooledBody>> {
        let fleet = self.fleet.as_deref()?;
        let timeout = fleet.peer_timeout();
        send_to_peer(
            &self.client,
            fleet,
            addr,
            req,
            (Lane::Forward, timeout),
            doing,
        )
        .await
    }
}

/// [`Proxy::send_to_peer`] with the client, the fleet, and the lane whose
/// failures count and the deadline for the response head given (for a
/// task of its own, or a rate-limit ask).
pub(super) async fn send_to_peer(
    client: &crate::upstream::UpstreamClient,
    fleet: &crate::fleet::Fleet,
    addr: SocketAddr,
    req: Request<crate::body::request::RequestBody>,
    (lane, timeout): (Lane, std::time::Duration),
    doing: &str,
) -> Option<Response<PooledBody>> {
    let authority: Authority = addr.to_string().parse().ok()?;
    let sent = match client.pool(&Scheme::HTTP, &authority, None) {
        Ok(pool) => client
            .send_on(&pool, req, false, Some(timeout))
            .await
            .map_err(|f| {
                let timed_out = matches!(
                    f.error,
                    crate::upstream::UpstreamError::ResponseHeaderTimeout { .. }
                );
                (f.error.to_string(), timed_out)
            }),
        Err(e) => Err((e.to_string(), false)),
    };
    let sent = sent.and_then(|resp| {
        let refused = resp.status() == StatusCode::FORBIDDEN
            && resp.headers().contains_key(crate::fleet::REFUSED);
        if refused {
            Err((
                "it refused this replica's peer token: the replicas' [fleet] secrets differ"
                    .to_owned(),
                false,
            ))
        } else {
            Ok(resp)
        }
    });
    match sent {
        Ok(resp) => {
            fleet.peer_answered(addr, lane);
            Some(resp)
        }
        Err((why, timed_out)) => {
            if fleet.peer_failed(addr, lane, timed_out) {
                tracing::warn!(
                    target: "weir::fleet",
                    peer = %addr,
                    "{doing} failed; served here, and the peer is skipped for {}s: {why}",
                    crate::fleet::PEER_BACKOFF.as_secs()
                );
            } else {
                tracing::warn!(
                    target: "weir::fleet",
                    peer = %addr,
                    "{doing} failed; served here (the peer is skipped after {} timeouts in a row): {why}",
                    crate::fleet::TIMEOUTS_BEFORE_BACKOFF
                );
            }
            None
        }
    }
}

/// How the body of the answer relayed from the owner at `owner` ended. A
/// body broken off or stalled past `body_idle_timeout` (the client's
/// answer is cut short: nothing can replace it now) is counted and
/// logged; the third in a row with no clean one between puts the owner in
/// back-off (see [`crate::fleet::Fleet::peer_body_ended`]).
fn blame_owner(fleet: &crate::fleet::Fleet, owner: SocketAddr, end: BodyEnd) {
    let what = match end {
        BodyEnd::Clean => {
            fleet.peer_body_ended(owner, true);
            return;
        }
        BodyEnd::Failed => "broke off",
        BodyEnd::TimedOut => "stalled past body_idle_timeout in",
    };
    let skipped = fleet.peer_body_ended(owner, false);
    tracing::warn!(
        target: "weir::fleet",
        peer = %owner,
        "a key's owner {what} its answer's body (the client's answer was cut short){}",
        if skipped {
            format!(
                "; the peer is skipped for {}s after {} in a row",
                crate::fleet::PEER_BACKOFF.as_secs(),
                crate::fleet::TIMEOUTS_BEFORE_BACKOFF
            )
        } else {
            String::new()
        }
    );
}

/// Whether a request may be answered by the key's owner: a `GET` or
/// `HEAD` with no body and no `Authorization` (which the cache never
/// stores for).
fn shardable(req: &Request<Incoming>) -> bool {
    let method = req.method();
    (*method == Method::GET || *method == Method::HEAD)
        && !req.headers().contains_key(header::AUTHORIZATION)
        && !req.headers().contains_key(header::TRANSFER_ENCODING)
        && req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_none_or(|v| v.as_bytes() == b"0")
        && (req.version() != Version::HTTP_2 || http_body::Body::is_end_stream(req.body()))
}
