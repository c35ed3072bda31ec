//! The cache itself: the store, the flights and the settings, and how a
//! stored response or another request's fill becomes an answer ([`Hit`]).

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_cache_semantics::BeforeRequest;
use weir_http::length::content_length;

use super::collapse::{Flights, Joinable};
use super::conditional;
use super::fill::CacheSource;
use super::store::{Entry, Store};
use crate::config::CacheSettings;
use crate::metrics::{CacheResult, Metrics};

/// The `X-Cache` response field.
pub const X_CACHE: HeaderName = HeaderName::from_static("x-cache");

/// The cache: store, flights and settings. Shared by every request.
#[derive(Debug)]
pub struct Cache {
    pub(super) store: Store,
    pub(super) flights: Flights,
    pub(super) settings: CacheSettings,
    /// Where the cache counts what it does (the only counter).
    pub(super) metrics: Arc<Metrics>,
    /// A fleet non-owner's L1 (see [`Cache::l1`]): the longest an entry
    /// answers without asking the key's owner again.
    pub(super) l1_ttl: Option<std::time::Duration>,
}

/// A response served by the cache instead of the upstream./// A response served by the cache instead of the upstream.
#[derive(Debug)]
pub struct Hit {
    /// Status and fields to send (with `Age` and `X-Cache`).
    pub head: http::response::Parts,
    /// The body.
    pub body: CacheSource,
    /// Whether the body is empty (always for a `304`).
    pub empty: bool,
}

/// What the store holds for a request.
pub(super) enum Found {
    /// A response that answers it as is.
    Fresh(Arc<Entry>),
    /// A matching response that must be revalidated first.
    Stale(Arc<Entry>),
    /// Nothing usable.
    Nothing,
}

impl Cache {
    /// A cache with `settings`, counting into `metrics`.
    pub fn new(settings: &CacheSettings, metrics: Arc<Metrics>) -> Arc<Cache> {
        Arc::new(Cache {
            store: Store::new(settings.max_bytes),
            flights: Flights::default(),
            settings: settings.clone(),
            metrics,
            l1_ttl: None,
        })
    }

    /// A fleet non-owner's L1 of the owners' answers (`[fleet] l1_bytes`):
    /// a cache whose upstream is the key's owner. An entry answers while
    /// it is fresh, as the owner's `Age` says (so never longer than the
    /// owner's copy), and for at most `ttl` after it was stored or
    /// refreshed; then it is revalidated with the owner. It never serves
    /// stale while revalidating in the background, which would go to the
    /// origin behind the owner's back.
    pub fn l1(
        settings: &CacheSettings,
        ttl: std::time::Duration,
        metrics: Arc<Metrics>,
    ) -> Arc<Cache> {
        Arc::new(Cache {
            store: Store::new(settings.max_bytes),
            flights: Flights::default(),
            settings: settings.clone(),
            metrics,
            l1_ttl: Some(ttl),
        })
    }

    /// The stored response that answers `view`, fresh or stale.
    pub(super) fn find(&self, key: &str, view: &http::request::Parts, now: SystemTime) -> Found {
        let Some(entry) = self.store.find(key, view) else {
            return Found::Nothing;
        };
        let held_too_long = self.l1_ttl.is_some_and(|ttl| {
            now.duration_since(entry.stored_at)
                .is_ok_and(|held| held > ttl)
        });
        match entry.policy.before_request(view, now) {
            BeforeRequest::Fresh(_) if held_too_long => Found::Stale(entry),
            BeforeRequest::Fresh(_) => Found::Fresh(entry),
            BeforeRequest::Stale { matches: true, .. } => Found::Stale(entry),
            BeforeRequest::Stale { matches: false, .. } => Found::Nothing,
        }
    }

    /// `entry` as the answer to `view`, labelled `label`: its fields with
    /// `Age` and `X-Cache`, or a `304` when the client's own conditional
    /// fields match it.
    pub(super) fn served(
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
    pub(super) fn not_modified(
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
        self.metrics.cache_not_modified();
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
    pub(super) fn join(&self, j: &Arc<Joinable>, view: &http::request::Parts) -> Option<Hit> {
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
            self.metrics.cache_request(CacheResult::Hit);
            self.metrics.cache_collapsed();
            return Some(hit);
        }
        let body = j.buf.reader();
        self.metrics.cache_request(CacheResult::Hit);
        self.metrics.cache_collapsed();
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
