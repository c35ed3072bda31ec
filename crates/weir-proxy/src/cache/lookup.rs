//! The cache lookup: what the store, the flights and the request's own
//! fields say about a request before it goes upstream.

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderMap, Method, Request, header};
use weir_http::directive;

use super::collapse::{self, Role};
use super::key;
use super::revalidate::Revalidation;
use super::state::{Cache, Found, Hit};
use super::store::Entry;
use super::ticket::{Kind, Ticket};
use crate::metrics::CacheResult;

/// What to do with a request after the lookup.
#[derive(Debug)]
pub enum Lookup {
    /// Answer it from the cache.
    Serve(Hit),
    /// Answer it with this stale entry (`X-Cache: STALE`) at once, and
    /// revalidate the entry in the background with the [`Revalidation`]
    /// (`stale-while-revalidate`, RFC 5861 §3). The request that gets this
    /// holds the key's flight until the revalidation ends: other requests
    /// meanwhile get the stale entry as a plain [`Lookup::Serve`].
    ServeStale(Hit, Revalidation),
    /// Send it upstream; call [`Ticket::prepare`] and [`Ticket::after_send`].
    Forward(Ticket),
}

impl Cache {
    /// A fresh stored answer to `req`, for a fleet peer's peek
    /// (`crate::fleet`): no waiting on a fill, no flight, and not counted
    /// in `weir_cache_requests_total` (the peer counts its own request).
    pub fn peek<B>(&self, req: &Request<B>, path: &str, host: Option<&str>) -> Option<Hit> {
        let key = key::primary(host, path, req.uri().query());
        let view = key::view(req, path, host);
        let now = SystemTime::now();
        match self.find(&key, &view, now) {
            Found::Fresh(entry) => Some(self.served(&entry, "HIT", now, &view)),
            Found::Stale(_) | Found::Nothing => None,
        }
    }

    /// Drops the stored answers to `GET` of `path` (normalized) and `query`
    /// on `host`: what an unsafe method's success does to its target (RFC
    /// 9111 §4.4), here at a fleet peer's word (`crate::fleet`).
    pub fn invalidate(&self, host: Option<&str>, path: &str, query: Option<&str>) {
        self.store.remove(&key::primary(host, path, query));
    }

    /// Looks `req` up. `path` is the normalized request path, `host` the
    /// client's host. May wait up to `collapse_wait` for another request's
    /// fill of the same key.
    pub async fn lookup<B>(
        self: &Arc<Self>,
        req: &Request<B>,
        path: &str,
        host: Option<&str>,
    ) -> Lookup {
        let method = req.method();
        let key = key::primary(host, path, req.uri().query());
        let view = key::view(req, path, host);
        let ticket = |kind| {
            Lookup::Forward(Ticket {
                key: key.clone(),
                view: view.clone(),
                kind,
            })
        };
        if *method != Method::GET && *method != Method::HEAD {
            let safe = matches!(*method, Method::OPTIONS | Method::TRACE);
            return ticket(if safe { Kind::Plain } else { Kind::Invalidate });
        }
        if req.headers().contains_key(header::AUTHORIZATION) {
            return ticket(Kind::Plain);
        }
        let head_only = *method == Method::HEAD;
        let now = SystemTime::now();
        let mut stale = None;
        match self.find(&key, &view, now) {
            Found::Fresh(entry) => {
                self.metrics.cache_request(CacheResult::Hit);
                return Lookup::Serve(self.served(&entry, "HIT", now, &view));
            }
            Found::Stale(entry)
                if self.l1_ttl.is_none() && while_revalidate(&entry, &view, now) =>
            {
                self.metrics.cache_request(CacheResult::Stale);
                let hit = self.served(&entry, "STALE", now, &view);
                return match self.flights.lead_or_wait(&key) {
                    Role::Leader(leader) => {
                        self.metrics.cache_background_revalidation();
                        let reval = Revalidation::new(key.clone(), view.clone(), entry, leader);
                        Lookup::ServeStale(hit, reval)
                    }
                    // Being revalidated (or filled) already.
                    Role::Waiter(_) => Lookup::Serve(hit),
                };
            }
            Found::Stale(entry) => stale = Some(entry),
            Found::Nothing => {}
        }
        if head_only {
            self.metrics.cache_request(CacheResult::Miss);
            return ticket(Kind::Uncached);
        }
        let leader = match self.flights.lead_or_wait(&key) {
            Role::Leader(l) => l,
            Role::Waiter(rx) => {
                if let Some(j) = collapse::wait(rx, self.settings.collapse_wait).await
                    && let Some(hit) = self.join(&j, &view)
                {
                    return Lookup::Serve(hit);
                }
                // Fall back: the leader may have stored or refreshed it meanwhile.
                let now = SystemTime::now();
                stale = match self.find(&key, &view, now) {
                    Found::Fresh(entry) => {
                        self.metrics.cache_request(CacheResult::Hit);
                        return Lookup::Serve(self.served(&entry, "HIT", now, &view));
                    }
                    Found::Stale(entry) => Some(entry),
                    Found::Nothing => None,
                };
                match self.flights.lead_or_wait(&key) {
                    Role::Leader(l) => l,
                    Role::Waiter(_) => {
                        self.metrics.cache_request(CacheResult::Miss);
                        return ticket(Kind::Uncached);
                    }
                }
            }
        };
        // A revalidation is counted once its answer is known.
        if stale.is_none() {
            self.metrics.cache_request(CacheResult::Miss);
        }
        ticket(Kind::Lead { leader, stale })
    }
}

/// Whether `entry`, stale, may be served at once while it is revalidated
/// in the background: it is inside its `stale-while-revalidate` window
/// (RFC 5861 §3; the window is zero when the response forbids stale
/// answers) and the request does not ask for a fresher response
/// (`no-cache`, `max-age`, `min-fresh`, `Pragma: no-cache`; RFC 9111
/// §5.2.1, §5.4).
fn while_revalidate(entry: &Entry, view: &http::request::Parts, now: SystemTime) -> bool {
    let window = entry.stale_while_revalidate;
    if window.is_zero() || !entry.policy.is_stale(now) || entry.stale_for(now) > window {
        return false;
    }
    !asks_fresher(&view.headers)
}

/// Whether a request's `Cache-Control` has `no-cache`, `max-age` or
/// `min-fresh` (RFC 9111 §5.2.1), or its `Pragma` has `no-cache` (RFC 9111
/// §5.4): it wants a response fresher than a stale one.
fn asks_fresher(request: &HeaderMap) -> bool {
    let cache_control = directive::directives(request.get_all(header::CACHE_CONTROL))
        .any(|d| ["no-cache", "max-age", "min-fresh"].iter().any(|n| d.is(n)));
    cache_control || directive::has(request.get_all(header::PRAGMA), "no-cache")
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn fields(pairs: &[(&'static str, &'static [u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_bytes(v).expect("value"));
        }
        h
    }

    #[test]
    fn requests_that_ask_for_fresher_responses() {
        let asks = |pairs: &[(&'static str, &'static [u8])]| asks_fresher(&fields(pairs));
        assert!(!asks(&[]));
        assert!(asks(&[("cache-control", b"max-age=0")]));
        assert!(asks(&[("cache-control", b"no-store, No-Cache")]));
        assert!(asks(&[("cache-control", b"min-fresh=5")]));
        assert!(!asks(&[("cache-control", b"max-stale=5, no-transform")]));
        assert!(asks(&[("pragma", b"no-cache")]));
        assert!(asks(&[("pragma", b"x, NO-CACHE")]));
        // Before weir-http: the quoted `max-age=5` was a directive, and
        // `Pragma` matched `no-cache` anywhere in its text.
        assert!(!asks(&[("cache-control", b"ext=\"a, max-age=5\"")]));
        assert!(!asks(&[("pragma", b"x-no-cache-please")]));
        assert!(!asks(&[("pragma", b"ext=\"no-cache\"")]));
    }
}
