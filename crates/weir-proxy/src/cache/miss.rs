//! A miss's answer into the cache: [`Fill::start`] stores it, or tees its
//! body into the cache while it streams to the client.

use std::sync::Arc;

use http::header::HeaderValue;
use http::{HeaderMap, StatusCode};
use http_cache_semantics::CachePolicy;
use weir_http::length::content_length;

use super::bounded;
use super::collapse::{Joinable, Leader};
use super::conditional;
use super::fill::{self, Abandoned, CacheSource, UpstreamBody};
use super::state::{Cache, X_CACHE};
use super::store::Entry;
use crate::metrics::FillResult;

/// A response that may be stored: call [`Fill::start`] when its body is known.
#[derive(Debug)]
pub struct Fill {
    pub(super) key: String,
    pub(super) view: http::request::Parts,
    pub(super) leader: Leader,
}

/// What [`Fill::start`] made of the upstream body. (`Pass` is the large
/// variant and the common one: not boxed, see `ResponseSource`.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
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
    /// [`Ticket::prepare`](super::Ticket::prepare) kept from the upstream) matches the response,
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
        // An L1 relays the owner's answer, and the owner's `X-Cache` with it.
        if cache.l1_ttl.is_none() {
            head.headers
                .insert(X_CACHE, HeaderValue::from_static("MISS"));
        }
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
        cache.metrics.cache_not_modified();
        head.status = StatusCode::NOT_MODIFIED;
        head.headers = conditional::not_modified_fields(&stored_fields);
        if cache.l1_ttl.is_none() {
            head.headers
                .insert(X_CACHE, HeaderValue::from_static("MISS"));
        }
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
            cache.metrics.cache_fill(FillResult::Stored);
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
            // The writer never needs more than one object's worth.
            max,
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
                    cache.metrics.cache_fill(FillResult::Stored);
                }
                Err(why) => {
                    tracing::debug!(target: "weir::cache", key = %key, "{why}");
                    cache.metrics.cache_fill(FillResult::Abandoned);
                    if why == Abandoned::Lagged {
                        cache.metrics.share_lag_detach("cache");
                    }
                }
            }
            drop(leader);
        });
        FillStart::Teed(CacheSource::Primary(client))
    }
}
