//! A request the cache sent upstream ([`Ticket`]), and what the cache does
//! with the answer: a `304` refreshes the entry it revalidated, a failure
//! may be answered by a stale entry (`stale-if-error`), anything storable
//! gets a [`Fill`].

use std::sync::Arc;
use std::time::SystemTime;

use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_cache_semantics::AfterResponse;
use weir_http::etag::EntityTag;
use weir_http::ows::trim_ows;

use super::bounded;
use super::collapse::Leader;
use super::conditional;
use super::miss::Fill;
use super::state::{Cache, Hit, X_CACHE};
use super::store::Entry;
use crate::metrics::{CacheResult, FillResult};
use crate::upstream::{PooledBody, UpstreamError};

/// A request sent upstream, and what the cache does with its response.
#[derive(Debug)]
pub struct Ticket {
    pub(super) key: String,
    pub(super) view: http::request::Parts,
    pub(super) kind: Kind,
}

#[derive(Debug)]
pub(super) enum Kind {
    /// Not cacheable (another method, `Authorization`): forwarded as is.
    Plain,
    /// Cacheable, but forwarded without filling (a `HEAD` the cache cannot
    /// answer, a request that waited on a flight and found none to join):
    /// marked `X-Cache: MISS`.
    Uncached,
    /// An unsafe method: a 2xx/3xx answer invalidates the key.
    Invalidate,
    /// A miss (or a revalidation of `stale`) that may fill the cache.
    Lead {
        leader: Leader,
        stale: Option<Arc<Entry>>,
    },
}

/// What to do with the upstream's answer.
// Made and matched once per request, never stored: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum After<B = PooledBody> {
    /// Answer from the cache (a 304-refreshed entry, or a stale one on error).
    Serve(Hit),
    /// Forward the answer; with a [`Fill`], tee its body into the cache.
    Forward(Result<Response<B>, UpstreamError>, Option<Fill>),
}

/// Replaces the client's own `If-None-Match` / `If-Modified-Since` in the
/// upstream request of a fill with `entry`'s validators (RFC 9111 §4.3.1:
/// its `ETag` and `Last-Modified`), or with none: the cache needs the full
/// response, and answers the client's conditional itself.
pub(super) fn set_validators(headers: &mut HeaderMap, entry: Option<&Entry>) {
    headers.remove(header::IF_NONE_MATCH);
    headers.remove(header::IF_MODIFIED_SINCE);
    let Some(entry) = entry else {
        return;
    };
    for (from, to) in [
        (header::ETAG, header::IF_NONE_MATCH),
        (header::LAST_MODIFIED, header::IF_MODIFIED_SINCE),
    ] {
        if let Some(v) = entry.headers.get(&from) {
            headers.insert(to, v.clone());
        }
    }
}

impl Ticket {
    /// Whether this is a miss with no stored entry that may fill the cache
    /// (the leader of its key's flight): what a fleet handoff may fill.
    pub fn is_plain_miss(&self) -> bool {
        matches!(self.kind, Kind::Lead { stale: None, .. })
    }

    /// For a request that may fill the cache: removes the client's own
    /// `If-None-Match` / `If-Modified-Since` from the upstream request (the
    /// cache needs the full response, and answers the client's conditional
    /// from it) and adds the stale entry's validators, if any (RFC 9111
    /// §4.3.1). Other requests are forwarded as they are.
    pub fn prepare(&self, headers: &mut HeaderMap) {
        if let Kind::Lead { stale, .. } = &self.kind {
            set_validators(headers, stale.as_deref());
        }
    }

    /// Handles the upstream's answer: a `304` for a stale entry refreshes
    /// it and serves it; a 5xx or a failure serves a stale entry still in
    /// its `stale-if-error` window; anything else is forwarded, with a
    /// [`Fill`] when it may be stored.
    pub fn after_send<B>(
        self,
        cache: &Arc<Cache>,
        mut sent: Result<Response<B>, UpstreamError>,
    ) -> After<B> {
        let Ticket { key, view, kind } = self;
        match kind {
            Kind::Plain => After::Forward(sent, None),
            Kind::Uncached => {
                // An L1 relays the owner's `X-Cache`.
                if let Ok(resp) = &mut sent
                    && cache.l1_ttl.is_none()
                {
                    resp.headers_mut()
                        .insert(X_CACHE, HeaderValue::from_static("MISS"));
                }
                After::Forward(sent, None)
            }
            Kind::Invalidate => {
                if let Ok(resp) = &sent
                    && (resp.status().is_success() || resp.status().is_redirection())
                {
                    cache.store.remove(&key);
                }
                After::Forward(sent, None)
            }
            Kind::Lead { leader, stale } => {
                let now = SystemTime::now();
                if let Some(entry) = stale {
                    match &sent {
                        Ok(resp) if resp.status() == StatusCode::NOT_MODIFIED => {
                            if let Some(refreshed) = refresh(&entry, &view, resp, now) {
                                cache.store.insert(&key, &view, Arc::clone(&refreshed));
                                cache.metrics.cache_fill(FillResult::Refreshed);
                                cache.metrics.cache_request(CacheResult::Hit);
                                return After::Serve(cache.served(&refreshed, "HIT", now, &view));
                            }
                            // A 304 about another representation cannot
                            // update this one (RFC 9111 §4.3.4).
                            cache.store.remove_variant(&key, &entry);
                        }
                        Ok(resp)
                            if resp.status().is_server_error()
                                && entry.stale_for(now) <= entry.stale_if_error =>
                        {
                            cache.metrics.cache_request(CacheResult::Stale);
                            return After::Serve(cache.served(&entry, "STALE", now, &view));
                        }
                        Err(_) if entry.stale_for(now) <= entry.stale_if_error => {
                            cache.metrics.cache_request(CacheResult::Stale);
                            return After::Serve(cache.served(&entry, "STALE", now, &view));
                        }
                        _ => {}
                    }
                    cache.metrics.cache_request(CacheResult::Miss);
                }
                After::Forward(sent, Some(Fill { key, view, leader }))
            }
        }
    }
}

/// `entry` refreshed by `resp`, a `304` that answered a conditional
/// request for it, or `None` when the `304` is about another
/// representation: it has an `ETag` the entry lacks or does not match
/// (weak comparison). The `304`'s `Cache-Control`, `Content-Location`,
/// `Date`, `ETag`, `Expires`, `Last-Modified` and `Vary` replace the
/// entry's (RFC 9111 §3.2, §4.3.4), and its freshness restarts from them.
/// A `304` without validators refreshes the entry it answered, as nginx
/// and Varnish do (RFC 9111 §4.3.4 would select only an entry without
/// validators then).
pub(super) fn refresh<B>(
    entry: &Entry,
    view: &http::request::Parts,
    resp: &Response<B>,
    now: SystemTime,
) -> Option<Arc<Entry>> {
    if !same_validator(resp.headers(), &entry.headers) {
        return None;
    }
    let mut headers = entry.headers.clone();
    for (name, v) in &conditional::not_modified_fields(resp.headers()) {
        headers.insert(name, v.clone());
    }
    headers.remove(header::AGE);
    let policy = match bounded::after_response(&entry.policy, view, resp, now) {
        AfterResponse::NotModified(policy, _) => policy,
        // http-cache-semantics pairs a 304 with an entry by validators
        // only; this one answered our request about `entry`.
        AfterResponse::Modified(..) => {
            let mut parts = Response::new(()).into_parts().0;
            parts.status = entry.status;
            parts.headers = headers.clone();
            bounded::policy(view, &parts)
        }
    };
    Some(Arc::new(Entry::new(
        entry.status,
        headers,
        policy,
        entry.body.to_vec(),
    )))
}

/// Whether a `304` with fields `fresh` can be about the entry with fields
/// `stored`: it has no `ETag`, or the entry's `ETag` equals it under the
/// weak comparison (RFC 9110 §8.8.3.2). A malformed `ETag` is compared
/// byte for byte.
fn same_validator(fresh: &HeaderMap, stored: &HeaderMap) -> bool {
    fn tag(h: &HeaderMap) -> Option<&[u8]> {
        let v = h.get(header::ETAG)?;
        Some(EntityTag::parse(v).map_or_else(|| trim_ows(v.as_bytes()), |t| t.opaque()))
    }
    match tag(fresh) {
        None => true,
        Some(new) => tag(stored) == Some(new),
    }
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
    fn a_304_is_about_the_entry_with_the_same_weak_etag() {
        let stored = fields(&[("etag", b"\"v1\"")]);
        assert!(same_validator(&fields(&[]), &stored));
        assert!(same_validator(&fields(&[("etag", b"W/\"v1\"")]), &stored));
        assert!(same_validator(&fields(&[("etag", b" \"v1\" ")]), &stored));
        assert!(!same_validator(&fields(&[("etag", b"\"v2\"")]), &stored));
        assert!(!same_validator(
            &fields(&[("etag", b"\"v1\"")]),
            &fields(&[])
        ));
        // Malformed tags: byte for byte, as before.
        let odd = fields(&[("etag", b"v1")]);
        assert!(same_validator(&odd, &odd));
        assert!(!same_validator(&odd, &stored));
        // obs-text is allowed in an opaque tag (RFC 9110 §8.8.3). Before
        // weir-http such a 304 ETag was not read at all, so any entry
        // matched it.
        let latin = fields(&[("etag", b"\"caf\xe9\"")]);
        assert!(same_validator(&latin, &latin));
        assert!(!same_validator(&latin, &stored));
    }
}
