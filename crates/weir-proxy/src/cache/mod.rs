//! The response cache (RFC 9111), in memory, for the routes that set
//! `cache = true`.
//!
//! - `key`: the primary key and the request as the cache sees it;
//! - `store`: complete responses, byte-bounded, Vary variants per key;
//! - `fill`: filling while the client streams, and the bodies served;
//! - `collapse`: one upstream request per key at a time;
//! - `revalidate`: background revalidation (`stale-while-revalidate`);
//! - `conditional`: a client's own conditional request against an entry.
//! - `bounded`: response heads as the policy sees them (delta-seconds
//!   capped at 2^31, RFC 9111 §1.2.2).
//!
//! Freshness, Vary matching, validators and storability are decided by
//! `http-cache-semantics` (shared-cache rules). Only `GET` is stored;
//! `HEAD` is answered from a fresh `GET` entry. Requests with
//! `Authorization` bypass the cache. An unsafe method answered 2xx/3xx
//! invalidates the entries of its URI (RFC 9111 §4.4). Responses carry
//! `X-Cache: HIT` (stored, or read from another request's fill),
//! `MISS` (from the upstream, perhaps being stored) or `STALE` (a stale
//! entry served under `stale-while-revalidate` or `stale-if-error`, RFC
//! 5861 §3 and §4), and `Age` on hits.
//!
//! A stale entry with validators is revalidated with a conditional
//! request; a `304` refreshes it and the client gets the stored body with
//! `X-Cache: HIT`. Inside its `stale-while-revalidate` window it is served
//! at once instead, and one request per key revalidates it in the
//! background ([`Revalidation`]). A client's own `If-None-Match` /
//! `If-Modified-Since` is evaluated against the response the cache
//! serves, which then becomes a `304`; requests that fill the cache go
//! upstream without them, so the cache always gets the full response.

mod bounded;
mod collapse;
mod conditional;
mod fill;
mod key;
mod revalidate;
mod store;
#[doc(hidden)]
pub mod test_hooks;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_cache_semantics::{AfterResponse, BeforeRequest, CachePolicy};
use hyper::body::Incoming;
use weir_http::directive;
use weir_http::etag::EntityTag;
use weir_http::length::content_length;
use weir_http::ows::trim_ows;

use fill::UpstreamBody;
pub use fill::{Abandoned, CacheSource};
pub use revalidate::Revalidation;

use crate::config::CacheSettings;
use crate::upstream::UpstreamError;
use collapse::{Flights, Joinable, Leader, Role};
use store::{Entry, Store};

/// The `X-Cache` response field.
pub const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// Cache counters, all routes. Read with `Ordering::Relaxed`.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Requests answered from a fresh stored entry (or a 304-refreshed one).
    pub hits: AtomicU64,
    /// Requests answered from another request's fill (collapsed).
    pub collapsed: AtomicU64,
    /// Cacheable requests answered by the upstream.
    pub misses: AtomicU64,
    /// Stale entries served (`stale-while-revalidate`, `stale-if-error`).
    pub stale: AtomicU64,
    /// Requests answered `304 Not Modified` by the cache because their own
    /// `If-None-Match` / `If-Modified-Since` matched (each also counted as
    /// a hit, miss or stale answer, by where the response came from).
    pub not_modified: AtomicU64,
    /// Stale entries refreshed by a `304`, in the request's path or in the
    /// background.
    pub revalidated: AtomicU64,
    /// Background revalidations started (`stale-while-revalidate`).
    pub background: AtomicU64,
    /// Background revalidations that stored nothing: the upstream failed
    /// or answered 5xx (the stale entry stays), or sent a `304` for another
    /// representation or a response that may not be stored (the stale
    /// entry is dropped).
    pub background_failed: AtomicU64,
    /// Fills completed and stored (background replacements included).
    pub fills: AtomicU64,
    /// Fills abandoned (writer lag, too large, upstream failure, client gone).
    pub abandoned: AtomicU64,
    /// Of the abandoned fills, those whose writer fell `fill_hwm` batches
    /// behind the client and was detached from the shared body.
    pub lagged: AtomicU64,
    /// Where the counts also go (`weir_cache_requests_total`,
    /// `weir_cache_fills_total`, `weir_share_lag_detaches_total`), once the
    /// proxy has set it.
    metrics: std::sync::OnceLock<Arc<crate::metrics::Metrics>>,
}

impl CacheStats {
    /// Counts into `metrics` too from now on (the first call wins).
    pub fn count_into(&self, metrics: Arc<crate::metrics::Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    fn bump(&self, counter: &AtomicU64) {
        use crate::metrics::{CacheResult, FillResult};
        counter.fetch_add(1, Ordering::Relaxed);
        let Some(m) = self.metrics.get() else {
            return;
        };
        // Each cacheable request is counted once: hit (collapsed ones
        // too), miss or stale.
        if std::ptr::eq(counter, &self.hits) || std::ptr::eq(counter, &self.collapsed) {
            m.cache_request(CacheResult::Hit);
        } else if std::ptr::eq(counter, &self.misses) {
            m.cache_request(CacheResult::Miss);
        } else if std::ptr::eq(counter, &self.stale) {
            m.cache_request(CacheResult::Stale);
        } else if std::ptr::eq(counter, &self.fills) {
            m.cache_fill(FillResult::Stored);
        } else if std::ptr::eq(counter, &self.abandoned) {
            m.cache_fill(FillResult::Abandoned);
        } else if std::ptr::eq(counter, &self.revalidated) {
            m.cache_fill(FillResult::Refreshed);
        } else if std::ptr::eq(counter, &self.background_failed) {
            m.cache_fill(FillResult::Failed);
        } else if std::ptr::eq(counter, &self.lagged) {
            m.share_lag_detach("cache");
        }
    }
}

/// The cache: store, flights and settings. Shared by every request.
#[derive(Debug)]
pub struct Cache {
    store: Store,
    flights: Flights,
    settings: CacheSettings,
    stats: Arc<CacheStats>,
}

/// A response served by the cache instead of the upstream.
#[derive(Debug)]
pub struct Hit {
    /// Status and fields to send (with `Age` and `X-Cache`).
    pub head: http::response::Parts,
    /// The body.
    pub body: CacheSource,
    /// Whether the body is empty (always for a `304`).
    pub empty: bool,
}

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

/// A request sent upstream, and what the cache does with its response.
#[derive(Debug)]
pub struct Ticket {
    key: String,
    view: http::request::Parts,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
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

/// What the store holds for a request.
enum Found {
    /// A response that answers it as is.
    Fresh(Arc<Entry>),
    /// A matching response that must be revalidated first.
    Stale(Arc<Entry>),
    /// Nothing usable.
    Nothing,
}

/// What to do with the upstream's answer.
// Made and matched once per request, never stored: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum After {
    /// Answer from the cache (a 304-refreshed entry, or a stale one on error).
    Serve(Hit),
    /// Forward the answer; with a [`Fill`], tee its body into the cache.
    Forward(Result<Response<Incoming>, UpstreamError>, Option<Fill>),
}

/// A response that may be stored: call [`Fill::start`] when its body is known.
#[derive(Debug)]
pub struct Fill {
    key: String,
    view: http::request::Parts,
    leader: Leader,
}

impl Cache {
    /// A cache with `settings`.
    pub fn new(settings: &CacheSettings) -> Arc<Cache> {
        Arc::new(Cache {
            store: Store::new(settings.max_bytes),
            flights: Flights::default(),
            settings: settings.clone(),
            stats: Arc::default(),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<CacheStats> {
        &self.stats
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
                self.stats.bump(&self.stats.hits);
                return Lookup::Serve(self.served(&entry, "HIT", now, &view));
            }
            Found::Stale(entry) if while_revalidate(&entry, &view, now) => {
                self.stats.bump(&self.stats.stale);
                let hit = self.served(&entry, "STALE", now, &view);
                return match self.flights.lead_or_wait(&key) {
                    Role::Leader(leader) => {
                        self.stats.bump(&self.stats.background);
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
            self.stats.bump(&self.stats.misses);
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
                        self.stats.bump(&self.stats.hits);
                        return Lookup::Serve(self.served(&entry, "HIT", now, &view));
                    }
                    Found::Stale(entry) => Some(entry),
                    Found::Nothing => None,
                };
                match self.flights.lead_or_wait(&key) {
                    Role::Leader(l) => l,
                    Role::Waiter(_) => {
                        self.stats.bump(&self.stats.misses);
                        return ticket(Kind::Uncached);
                    }
                }
            }
        };
        // A revalidation is counted once its answer is known.
        if stale.is_none() {
            self.stats.bump(&self.stats.misses);
        }
        ticket(Kind::Lead { leader, stale })
    }

    /// The stored response that answers `view`, fresh or stale.
    fn find(&self, key: &str, view: &http::request::Parts, now: SystemTime) -> Found {
        let Some(entry) = self.store.find(key, view) else {
            return Found::Nothing;
        };
        match entry.policy.before_request(view, now) {
            BeforeRequest::Fresh(_) => Found::Fresh(entry),
            BeforeRequest::Stale { matches: true, .. } => Found::Stale(entry),
            BeforeRequest::Stale { matches: false, .. } => Found::Nothing,
        }
    }

    /// `entry` as the answer to `view`, labelled `label`: its fields with
    /// `Age` and `X-Cache`, or a `304` when the client's own conditional
    /// fields match it.
    fn served(
        &self,
        entry: &Entry,
        label: &'static str,
        now: SystemTime,
        view: &http::request::Parts,
    ) -> Hit {
        let age = entry.policy.age(now).as_secs();
        if let Some(hit) = self.not_modified(view, entry.status, &entry.headers, age, label) {
            return hit;
        }
        let mut head = Response::new(()).into_parts().0;
        head.status = entry.status;
        head.headers = entry.headers.clone();
        head.headers.insert(header::AGE, HeaderValue::from(age));
        head.headers
            .insert(X_CACHE, HeaderValue::from_static(label));
        Hit {
            head,
            body: CacheSource::stored(Arc::clone(&entry.body)),
            empty: entry.body_len == 0,
        }
    }

    /// A `304 Not Modified` for `view`, if its `If-None-Match` or
    /// `If-Modified-Since` matches the response (`status`, `fields`) the
    /// cache would serve (RFC 9111 §4.3.2); `age` in seconds.
    fn not_modified(
        &self,
        view: &http::request::Parts,
        status: StatusCode,
        fields: &HeaderMap,
        age: u64,
        label: &'static str,
    ) -> Option<Hit> {
        if !conditional::not_modified(&view.headers, status, fields) {
            return None;
        }
        self.stats.bump(&self.stats.not_modified);
        let mut head = Response::new(()).into_parts().0;
        head.status = StatusCode::NOT_MODIFIED;
        head.headers = conditional::not_modified_fields(fields);
        head.headers.insert(header::AGE, HeaderValue::from(age));
        head.headers
            .insert(X_CACHE, HeaderValue::from_static(label));
        let none: Arc<[Bytes]> = Arc::new([]);
        Some(Hit {
            head,
            body: CacheSource::stored(none),
            empty: true,
        })
    }

    /// Joins another request's fill, if it answers `view` and its length is known and within bounds.
    fn join(&self, j: &Arc<Joinable>, view: &http::request::Parts) -> Option<Hit> {
        if !j
            .policy
            .before_request(view, SystemTime::now())
            .satisfies_without_revalidation()
        {
            return None;
        }
        let len = content_length(&j.headers)?;
        if len > self.settings.max_object_bytes {
            return None;
        }
        if let Some(hit) = self.not_modified(view, j.status, &j.headers, 0, "HIT") {
            self.stats.bump(&self.stats.collapsed);
            return Some(hit);
        }
        let body = j.buf.reader();
        self.stats.bump(&self.stats.collapsed);
        let mut head = Response::new(()).into_parts().0;
        head.status = j.status;
        head.headers = j.headers.clone();
        head.headers
            .insert(header::AGE, HeaderValue::from_static("0"));
        head.headers
            .insert(X_CACHE, HeaderValue::from_static("HIT"));
        Some(Hit {
            head,
            body,
            empty: len == 0,
        })
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

/// Replaces the client's own `If-None-Match` / `If-Modified-Since` in the
/// upstream request of a fill with `entry`'s validators (RFC 9111 §4.3.1:
/// its `ETag` and `Last-Modified`), or with none: the cache needs the full
/// response, and answers the client's conditional itself.
fn set_validators(headers: &mut HeaderMap, entry: Option<&Entry>) {
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
    pub fn after_send(
        self,
        cache: &Arc<Cache>,
        mut sent: Result<Response<Incoming>, UpstreamError>,
    ) -> After {
        let Ticket { key, view, kind } = self;
        match kind {
            Kind::Plain => After::Forward(sent, None),
            Kind::Uncached => {
                if let Ok(resp) = &mut sent {
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
                                cache.stats.bump(&cache.stats.revalidated);
                                cache.stats.bump(&cache.stats.hits);
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
                            cache.stats.bump(&cache.stats.stale);
                            return After::Serve(cache.served(&entry, "STALE", now, &view));
                        }
                        Err(_) if entry.stale_for(now) <= entry.stale_if_error => {
                            cache.stats.bump(&cache.stats.stale);
                            return After::Serve(cache.served(&entry, "STALE", now, &view));
                        }
                        _ => {}
                    }
                    cache.stats.bump(&cache.stats.misses);
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
fn refresh(
    entry: &Entry,
    view: &http::request::Parts,
    resp: &Response<Incoming>,
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

/// What [`Fill::start`] made of the upstream body.
#[derive(Debug)]
pub enum FillStart {
    /// Forward the upstream body as it came (`None`: the response has
    /// none): it is not stored, or it was empty and is stored already.
    Pass(Option<UpstreamBody>),
    /// Forward this body: the upstream's, teed into the cache (a writer
    /// task reads the other branch).
    Teed(CacheSource),
    /// The client's own `If-None-Match` / `If-Modified-Since` matched the
    /// response: the head is now a `304 Not Modified` and the client gets
    /// no body; the fill, if any, goes on without it.
    NotModified,
}

impl Fill {
    /// Marks the response `X-Cache: MISS` and, when `http-cache-semantics`
    /// says it is storable, tees its body into the cache. `head` holds the
    /// fields as forwarded; `body` is the upstream body (`None` when the
    /// response has none, which is stored at once).
    ///
    /// When the client's own `If-None-Match` / `If-Modified-Since` (which
    /// [`Ticket::prepare`] kept from the upstream) matches the response,
    /// `head` becomes a `304 Not Modified` (RFC 9110 §15.4.5) and the
    /// answer is [`FillStart::NotModified`].
    pub fn start(
        self,
        cache: &Arc<Cache>,
        head: &mut http::response::Parts,
        body: Option<UpstreamBody>,
    ) -> FillStart {
        let policy = bounded::policy(&self.view, head);
        let stored_fields = head.headers.clone();
        let not_modified =
            conditional::not_modified(&self.view.headers, head.status, &stored_fields);
        head.headers
            .insert(X_CACHE, HeaderValue::from_static("MISS"));
        let start = self.tee(
            cache,
            head.status,
            policy,
            &stored_fields,
            body,
            not_modified,
        );
        if !not_modified {
            return start;
        }
        // The body, if not teed, is dropped unread: its connection closes.
        drop(start);
        cache.stats.bump(&cache.stats.not_modified);
        head.status = StatusCode::NOT_MODIFIED;
        head.headers = conditional::not_modified_fields(&stored_fields);
        head.headers
            .insert(X_CACHE, HeaderValue::from_static("MISS"));
        FillStart::NotModified
    }

    /// Stores or tees the response when it may be stored. `detached`: the
    /// client will not read it (it gets a `304`).
    fn tee(
        self,
        cache: &Arc<Cache>,
        status: StatusCode,
        policy: CachePolicy,
        stored_fields: &HeaderMap,
        body: Option<UpstreamBody>,
        detached: bool,
    ) -> FillStart {
        // A 304 that reaches here answered a request the cache did not
        // make conditional (it is never storable anyway, but say so).
        if !policy.is_storable()
            || status == StatusCode::PARTIAL_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return FillStart::Pass(body);
        }
        let Some(body) = body else {
            let entry = Arc::new(Entry::new(
                status,
                stored_fields.clone(),
                policy,
                Vec::new(),
            ));
            cache.store.insert(&self.key, &self.view, entry);
            cache.stats.bump(&cache.stats.fills);
            return FillStart::Pass(None);
        };
        let max = cache.settings.max_object_bytes;
        let length = content_length(stored_fields);
        if length.is_some_and(|l| l > max) {
            return FillStart::Pass(Some(body));
        }
        let (client, buf, writer) = fill::tee(
            body,
            cache.settings.fill_hwm,
            cache.settings.fill_on_client_abort || detached,
        );
        if length.is_some() {
            self.leader.stream(Arc::new(Joinable {
                status,
                headers: stored_fields.clone(),
                policy: policy.clone(),
                buf,
            }));
        }
        let cache = Arc::clone(cache);
        let stored_fields = stored_fields.clone();
        tokio::spawn(async move {
            let Fill { key, view, leader } = self;
            match writer.run(max).await {
                Ok(chunks) => {
                    let entry = Arc::new(Entry::new(status, stored_fields, policy, chunks));
                    cache.store.insert(&key, &view, entry);
                    cache.stats.bump(&cache.stats.fills);
                }
                Err(why) => {
                    tracing::debug!(target: "weir::cache", key = %key, "{why}");
                    cache.stats.bump(&cache.stats.abandoned);
                    if why == Abandoned::Lagged {
                        cache.stats.bump(&cache.stats.lagged);
                    }
                }
            }
            drop(leader);
        });
        FillStart::Teed(CacheSource::Primary(client))
    }
}

#[cfg(test)]
mod tests {
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
