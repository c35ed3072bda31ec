//! The rate-limit phase (`[route.rate_limit]`), after routing and before
//! the exchange: a token from the request's bucket, or a `429`.
//!
//! A bucket lives where its route's `scope` says: in this replica, on the
//! key's owner among the fleet (`crate::fleet::rate`), or in Redis
//! (`crate::rate_limit::redis`). When a shared store does not answer, the
//! route's own bucket here decides, and `weir_rate_limit_fallbacks_total`
//! counts it.

use std::net::IpAddr;

use http::uri::Uri;
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::{Either, Empty};

use crate::config::RateLimitScope;
use crate::fleet::Owner;
use crate::metrics::FleetResult;
use crate::proxy::{Downstream, Proxy};
use crate::rate_limit::{Rate, RouteRateLimit};
use crate::route::Route;

impl Proxy {
    /// The route's rate limit for this request: `Some(seconds)` to wait
    /// (the `Retry-After` of a `429`), `None` to go on.
    pub(super) async fn rate_limited<B>(
        &self,
        route: &Route,
        req: &Request<B>,
        downstream: &Downstream,
    ) -> Option<u64> {
        let limit = route.rate_limit.as_deref()?;
        let client = crate::rate_limit::client_addr(
            downstream.addr.ip(),
            &self.settings.trusted_proxies,
            req.headers(),
        );
        let verdict = match limit.scope() {
            RateLimitScope::Replica => limit.check(req.headers(), client),
            // Boxed: the request future stays small for the common case.
            RateLimitScope::Fleet | RateLimitScope::Redis => {
                Box::pin(self.shared_check(limit, req.headers(), client)).await
            }
        };
        verdict.err()
    }

    /// A token from the shared store of `limit`'s scope, or from the
    /// route's own bucket when the store does not answer.
    async fn shared_check(
        &self,
        limit: &RouteRateLimit,
        headers: &HeaderMap,
        client: IpAddr,
    ) -> Result<(), u64> {
        let id = limit.shared_id(headers, client);
        let (answer, scope) = match limit.scope() {
            RateLimitScope::Fleet => (self.owner_token(limit.rate(), &id).await, "fleet"),
            RateLimitScope::Redis => {
                let answer = match &self.redis {
                    Some(redis) => redis.check(limit.rate(), &id).await.ok(),
                    None => None,
                };
                (answer, "redis")
            }
            RateLimitScope::Replica => (None, "replica"),
        };
        answer.unwrap_or_else(|| {
            self.metrics.fleet().count_fallback(scope);
            limit.check(headers, client)
        })
    }

    /// A token from bucket `id` on its fleet owner: taken here when this
    /// replica owns it, else asked of the owner; `None` when the owner
    /// did not answer (it is then in back-off, see `crate::fleet`).
    async fn owner_token(&self, rate: Rate, id: &[u8]) -> Option<Result<(), u64>> {
        let fleet = self.fleet.as_ref()?;
        let (addr, epoch) = match fleet.rate_owner(id)? {
            Owner::Here => return Some(fleet.take_token(rate, id)),
            Owner::Peer { addr, epoch } => (addr, epoch),
        };
        let mut ask = Request::new(Either::Right(Empty::new()));
        *ask.uri_mut() = Uri::try_from(format!("http://{addr}/")).ok()?;
        let headers = ask.headers_mut();
        headers.insert(header::HOST, HeaderValue::try_from(addr.to_string()).ok()?);
        headers.insert(
            crate::fleet::RATE_ASK,
            crate::fleet::rate::ask_value(rate, id)?,
        );
        fleet.mark(headers, epoch);
        fleet.count(FleetResult::RateAsked);
        let resp = super::fleet::send_to_peer(
            &self.client,
            fleet,
            addr,
            ask,
            (crate::fleet::Lane::Rate, fleet.rate_timeout()),
            "asking a rate-limit key's owner for a token",
        )
        .await?;
        match resp.status() {
            StatusCode::NO_CONTENT => Some(Ok(())),
            StatusCode::TOO_MANY_REQUESTS => Some(Err(resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(1)
                .max(1))),
            // An owner that does not know asks (an older build): it routed
            // the ask as a request.
            _ => None,
        }
    }
}
