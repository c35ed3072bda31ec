//! The response cache (RFC 9111), in memory, for the routes that set
//! `cache = true`.
//!
//! - `key`: the primary key and the request as the cache sees it;
//! - `store`: complete responses, byte-bounded, Vary variants per key;
//! - `fill`: filling while the client streams, and the bodies served;
//! - `collapse`: one upstream request per key at a time.
//!
//! Freshness, Vary matching, validators and storability are decided by
//! `http-cache-semantics` (shared-cache rules). Only `GET` is stored;
//! `HEAD` is answered from a fresh `GET` entry. Requests with
//! `Authorization` bypass the cache. An unsafe method answered 2xx/3xx
//! invalidates the entries of its URI (RFC 9111 §4.4). Responses carry
//! `X-Cache: HIT` (stored, or read from another request's fill),
//! `MISS` (from the upstream, perhaps being stored) or `STALE` (a stale
//! entry served under `stale-if-error`, RFC 5861 §4), and `Age` on hits.
//! A stale entry with validators is revalidated with a conditional
//! request; a `304` refreshes it and the client gets the stored body with
//! `X-Cache: HIT`.

mod collapse;
mod fill;
mod key;
mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_cache_semantics::{AfterResponse, BeforeRequest, CachePolicy};
use hyper::body::Incoming;

pub use fill::{Abandoned, CacheSource};

use crate::body::ResponseSource;
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
    /// Cacheable requests that went upstream.
    pub misses: AtomicU64,
    /// Stale entries served (`stale-if-error`).
    pub stale: AtomicU64,
    /// Stale entries refreshed by a `304`.
    pub revalidated: AtomicU64,
    /// Fills completed and stored.
    pub fills: AtomicU64,
    /// Fills abandoned (writer lag, too large, upstream failure, client gone).
    pub abandoned: AtomicU64,
    /// Where the counts also go (`weir_cache_requests_total`,
    /// `weir_cache_fills_total`), once the proxy has set it.
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
        // Hits by collapsing and by revalidation are hits to a client.
        if std::ptr::eq(counter, &self.hits)
            || std::ptr::eq(counter, &self.collapsed)
            || std::ptr::eq(counter, &self.revalidated)
        {
            m.cache_request(CacheResult::Hit);
        } else if std::ptr::eq(counter, &self.misses) {
            m.cache_request(CacheResult::Miss);
        } else if std::ptr::eq(counter, &self.stale) {
            m.cache_request(CacheResult::Stale);
        } else if std::ptr::eq(counter, &self.fills) {
            m.cache_fill(FillResult::Stored);
        } else if std::ptr::eq(counter, &self.abandoned) {
            m.cache_fill(FillResult::Abandoned);
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
    /// Whether the body is empty.
    pub empty: bool,
}

/// What to do with a request after the lookup.
#[derive(Debug)]
pub enum Lookup {
    /// Answer it from the cache.
    Serve(Hit),
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
    /// Not cached: forwarded as is.
    Plain,
    /// An unsafe method: a 2xx/3xx answer invalidates the key.
    Invalidate,
    /// A miss (or a revalidation of `stale`) that may fill the cache.
    Lead {
        leader: Leader,
        stale: Option<Arc<Entry>>,
        validators: HeaderMap,
    },
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
        let mut stale = None;
        let mut validators = HeaderMap::new();
        if let Some(hit) = self.fresh(&key, &view, &mut stale, &mut validators) {
            return Lookup::Serve(hit);
        }
        if head_only {
            return ticket(Kind::Plain);
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
                stale = None;
                validators.clear();
                if let Some(hit) = self.fresh(&key, &view, &mut stale, &mut validators) {
                    return Lookup::Serve(hit);
                }
                match self.flights.lead_or_wait(&key) {
                    Role::Leader(l) => l,
                    Role::Waiter(_) => return ticket(Kind::Plain),
                }
            }
        };
        self.stats.bump(&self.stats.misses);
        ticket(Kind::Lead {
            leader,
            stale,
            validators,
        })
    }

    /// A fresh stored answer to `view`; else records a stale match and the
    /// validators to revalidate it with.
    fn fresh(
        &self,
        key: &str,
        view: &http::request::Parts,
        stale: &mut Option<Arc<Entry>>,
        validators: &mut HeaderMap,
    ) -> Option<Hit> {
        let entry = self.store.find(key, view)?;
        let now = SystemTime::now();
        match entry.policy.before_request(view, now) {
            BeforeRequest::Fresh(_) => {
                self.stats.bump(&self.stats.hits);
                Some(served(&entry, "HIT", now))
            }
            BeforeRequest::Stale { request, matches } => {
                if matches {
                    for name in [header::IF_NONE_MATCH, header::IF_MODIFIED_SINCE] {
                        if let Some(v) = request.headers.get(&name) {
                            validators.insert(name, v.clone());
                        }
                    }
                    *stale = Some(entry);
                }
                None
            }
        }
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

/// An entry as a response: its fields, `Age` from the policy, `X-Cache`.
fn served(entry: &Entry, label: &'static str, now: SystemTime) -> Hit {
    let mut head = Response::new(()).into_parts().0;
    head.status = entry.status;
    head.headers = entry.headers.clone();
    let age = entry.policy.age(now).as_secs();
    head.headers.insert(header::AGE, HeaderValue::from(age));
    head.headers
        .insert(X_CACHE, HeaderValue::from_static(label));
    Hit {
        head,
        body: CacheSource::stored(Arc::clone(&entry.body)),
        empty: entry.body_len == 0,
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl Ticket {
    /// Adds the stale entry's validators (`If-None-Match`,
    /// `If-Modified-Since`, RFC 9111 §4.3.1) to the upstream request.
    pub fn prepare(&self, headers: &mut HeaderMap) {
        if let Kind::Lead { validators, .. } = &self.kind {
            for (name, v) in validators {
                headers.insert(name, v.clone());
            }
        }
    }

    /// Handles the upstream's answer: a `304` for a stale entry refreshes
    /// it and serves it; a 5xx or a failure serves a stale entry still in
    /// its `stale-if-error` window; anything else is forwarded, with a
    /// [`Fill`] when it may be stored.
    pub fn after_send(
        self,
        cache: &Arc<Cache>,
        sent: Result<Response<Incoming>, UpstreamError>,
    ) -> After {
        let Ticket { key, view, kind } = self;
        match kind {
            Kind::Plain => After::Forward(sent, None),
            Kind::Invalidate => {
                if let Ok(resp) = &sent
                    && (resp.status().is_success() || resp.status().is_redirection())
                {
                    cache.store.remove(&key);
                }
                After::Forward(sent, None)
            }
            Kind::Lead { leader, stale, .. } => {
                let now = SystemTime::now();
                if let Some(entry) = stale {
                    match &sent {
                        Ok(resp) if resp.status() == StatusCode::NOT_MODIFIED => {
                            if let AfterResponse::NotModified(policy, _) =
                                entry.policy.after_response(&view, resp, now)
                            {
                                let refreshed = refresh(&entry, policy, resp.headers());
                                cache.store.insert(&key, &view, Arc::clone(&refreshed));
                                cache.stats.bump(&cache.stats.revalidated);
                                cache.stats.bump(&cache.stats.hits);
                                return After::Serve(served(&refreshed, "HIT", now));
                            }
                        }
                        Ok(resp)
                            if resp.status().is_server_error()
                                && entry.stale_for(now) <= entry.stale_if_error =>
                        {
                            cache.stats.bump(&cache.stats.stale);
                            return After::Serve(served(&entry, "STALE", now));
                        }
                        Err(_) if entry.stale_for(now) <= entry.stale_if_error => {
                            cache.stats.bump(&cache.stats.stale);
                            return After::Serve(served(&entry, "STALE", now));
                        }
                        _ => {}
                    }
                }
                After::Forward(sent, Some(Fill { key, view, leader }))
            }
        }
    }
}

/// `entry` with the policy and fields of a matching `304` (RFC 9111 §4.3.4).
fn refresh(entry: &Entry, policy: CachePolicy, fresh: &HeaderMap) -> Arc<Entry> {
    let mut headers = entry.headers.clone();
    for name in [
        header::CACHE_CONTROL,
        header::DATE,
        header::ETAG,
        header::EXPIRES,
        header::LAST_MODIFIED,
        header::VARY,
    ] {
        if let Some(v) = fresh.get(&name) {
            headers.insert(name, v.clone());
        }
    }
    headers.remove(header::AGE);
    Arc::new(Entry::new(
        entry.status,
        headers,
        policy,
        entry.body.to_vec(),
    ))
}

impl Fill {
    /// Marks the response `X-Cache: MISS` and, when `http-cache-semantics`
    /// says it is storable, tees its body into the cache. `head` holds the
    /// fields as forwarded; `source` is the upstream body (`empty` when the
    /// response has none, which is stored at once).
    pub fn start(
        self,
        cache: &Arc<Cache>,
        head: &mut http::response::Parts,
        source: ResponseSource,
        empty: bool,
    ) -> ResponseSource {
        let policy = CachePolicy::new(&self.view, &*head);
        let stored_fields = head.headers.clone();
        head.headers
            .insert(X_CACHE, HeaderValue::from_static("MISS"));
        if !policy.is_storable() || head.status == StatusCode::PARTIAL_CONTENT {
            return source;
        }
        if empty {
            let entry = Arc::new(Entry::new(head.status, stored_fields, policy, Vec::new()));
            cache.store.insert(&self.key, &self.view, entry);
            cache.stats.bump(&cache.stats.fills);
            return source;
        }
        let max = cache.settings.max_object_bytes;
        let length = content_length(&head.headers);
        let ResponseSource::Upstream(body) = source else {
            return source;
        };
        if length.is_some_and(|l| l > max) {
            return ResponseSource::Upstream(body);
        }
        let (client, buf, writer) = fill::tee(
            body,
            cache.settings.fill_hwm,
            cache.settings.fill_on_client_abort,
        );
        let client = CacheSource::Primary(client);
        let status = head.status;
        if length.is_some() {
            self.leader.stream(Arc::new(Joinable {
                status,
                headers: stored_fields.clone(),
                policy: policy.clone(),
                buf,
            }));
        }
        let cache = Arc::clone(cache);
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
                }
            }
            drop(leader);
        });
        ResponseSource::Cache(client)
    }
}
