//! Background revalidation of a stale entry served under
//! `stale-while-revalidate` (RFC 5861 §3).
//!
//! The request that finds the entry stale inside its window gets it at
//! once and, holding the key's flight, hands a [`Revalidation`] to the
//! proxy, which sends a conditional `GET` (the entry's `ETag` and
//! `Last-Modified` as `If-None-Match` / `If-Modified-Since`; a plain `GET`
//! when it has neither) through its upstream client from a task of its
//! own. Requests for the key meanwhile are served the stale entry and
//! start nothing. The answer:
//! - `304`: refreshes the entry in place (`refreshed`);
//! - a storable response: its body is read to the end (bounded by
//!   `max_object_bytes` and the body idle timeout) and replaces the entry
//!   (`stored`); one that fails or grows too large mid-way is dropped,
//!   which closes its connection (`abandoned`);
//! - an upstream failure or a 5xx: the entry stays as it is, to be served
//!   stale until its window ends (`failed`);
//! - a `304` for another representation, or a response that may not be
//!   stored: the entry is dropped, unread bodies with it (`failed`).

use std::fmt::Display;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use weir_stream::SourceExt as _;
use weir_stream::body::HttpBodySource;

use super::collapse::Leader;
use super::fill::Abandoned;
use super::state::Cache;
use super::store::Entry;
use super::ticket::{refresh, set_validators};
use crate::body::idle::IdleTimeout;
use crate::body::request::RequestBody;
use crate::metrics::FillResult;
use crate::metrics::InFlight;
use crate::upstream::PooledBody;
use crate::upstream::UpstreamClient;
use weir_http::length::content_length;

/// A background revalidation of one stale entry: what
/// [`Lookup::ServeStale`](super::Lookup::ServeStale) hands the proxy. It
/// holds the key's flight until it is finished or dropped (dropping it
/// abandons the revalidation; the entry stays stale).
#[derive(Debug)]
pub struct Revalidation {
    key: String,
    view: http::request::Parts,
    entry: Arc<Entry>,
    leader: Leader,
}

impl Revalidation {
    pub(super) fn new(
        key: String,
        view: http::request::Parts,
        entry: Arc<Entry>,
        leader: Leader,
    ) -> Revalidation {
        Revalidation {
            key,
            view,
            entry,
            leader,
        }
    }

    /// Replaces the conditional fields of the upstream request (the
    /// client's own included) with the entry's validators: `If-None-Match`
    /// from its `ETag`, `If-Modified-Since` from its `Last-Modified` (RFC
    /// 9111 §4.3.1); with neither, the request is a plain `GET`.
    pub fn prepare(&self, headers: &mut HeaderMap) {
        set_validators(headers, Some(&self.entry));
    }

    /// Sends `req` (the head the client's request would have had upstream,
    /// as a bodiless `GET`) with the entry's validators, through `client`
    /// from a task of its own, and finishes with its answer (see
    /// [`Revalidation::finish`]; the answer's head goes through the
    /// response head filter first, with `via`). `in_flight`, if
    /// given, is held until then.
    pub fn spawn(
        self,
        cache: Arc<Cache>,
        client: UpstreamClient,
        mut req: Request<RequestBody>,
        via: crate::headers::Via,
        body_idle_timeout: Duration,
        in_flight: Option<InFlight>,
    ) {
        self.prepare(req.headers_mut());
        tokio::spawn(async move {
            let answer = match client.send(req).await {
                Ok(resp) => {
                    let (mut parts, body) = resp.into_parts();
                    crate::headers::response_head(&mut parts, &via)
                        .map(|()| Response::from_parts(parts, body))
                        .map_err(|what| format!("upstream sent {what}"))
                }
                Err(e) => Err(e.to_string()),
            };
            self.finish(&cache, answer, body_idle_timeout).await;
            drop(in_flight);
        });
    }

    /// Handles the upstream's `answer` to the revalidation request (its
    /// fields as forwarded: hop-by-hop removed, `Via` added; `Err` with the
    /// reason when there was none, or one Weir cannot forward): refreshes,
    /// replaces, keeps or drops the entry as the module docs say, reading
    /// a replacement body to its end with `body_idle_timeout` between
    /// reads. Releases the key's flight when done.
    ///
    /// # Cancel safety
    /// Dropping the future drops the upstream body (its connection is
    /// closed) and leaves the entry as it was.
    pub async fn finish<E: Display>(
        self,
        cache: &Arc<Cache>,
        answer: Result<Response<PooledBody>, E>,
        body_idle_timeout: Duration,
    ) {
        let Revalidation {
            key,
            view,
            entry,
            leader,
        } = self;
        let metrics = &cache.metrics;
        let resp = match answer {
            Ok(resp) => resp,
            Err(why) => {
                tracing::debug!(target: "weir::cache", key = %key, "background revalidation failed: {why}");
                metrics.cache_fill(FillResult::Failed);
                return;
            }
        };
        let now = SystemTime::now();
        let status = resp.status();
        if status == StatusCode::NOT_MODIFIED {
            match refresh(&entry, &view, &resp, now) {
                Some(refreshed) => {
                    cache.store.insert(&key, &view, refreshed);
                    metrics.cache_fill(FillResult::Refreshed);
                }
                None => {
                    tracing::debug!(target: "weir::cache", key = %key, "background revalidation: a 304 for another representation");
                    cache.store.remove_variant(&key, &entry);
                    metrics.cache_fill(FillResult::Failed);
                }
            }
            return;
        }
        if status.is_server_error() {
            tracing::debug!(target: "weir::cache", key = %key, status = status.as_u16(), "background revalidation: upstream error");
            metrics.cache_fill(FillResult::Failed);
            return;
        }
        let (parts, body) = resp.into_parts();
        let policy = super::bounded::policy(&view, &parts);
        if !policy.is_storable() || status == StatusCode::PARTIAL_CONTENT {
            // Superseded by a response the cache may not keep.
            cache.store.remove_variant(&key, &entry);
            metrics.cache_fill(FillResult::Failed);
            return;
        }
        let max = cache.settings.max_object_bytes;
        let read = if content_length(&parts.headers).is_some_and(|l| l > max) {
            Err(Abandoned::TooLarge)
        } else {
            read_to_end(body, max, body_idle_timeout).await
        };
        match read {
            Ok(chunks) => {
                let replacement = Entry::new(status, parts.headers, policy, chunks);
                cache.store.insert(&key, &view, Arc::new(replacement));
                metrics.cache_fill(FillResult::Stored);
            }
            Err(why) => {
                tracing::debug!(target: "weir::cache", key = %key, "background revalidation: {why}");
                if why == Abandoned::TooLarge {
                    // The current representation cannot be stored.
                    cache.store.remove_variant(&key, &entry);
                }
                metrics.cache_fill(FillResult::Abandoned);
            }
        }
        drop(leader);
    }
}

/// Reads `body` to its end: its chunks, or why not (more than `max`
/// bytes, the upstream failed or stalled for `idle`). On an error the body
/// is dropped half-read, which closes its connection.
async fn read_to_end(body: PooledBody, max: u64, idle: Duration) -> Result<Vec<Bytes>, Abandoned> {
    let mut source = IdleTimeout::new(HttpBodySource::new(body), idle);
    let mut chunks = Vec::new();
    let mut total = 0u64;
    while let Some(batch) = source.next_batch().await {
        let batch = batch.map_err(|_| Abandoned::UpstreamFailed)?;
        for chunk in batch {
            total += chunk.len() as u64;
            if total > max {
                return Err(Abandoned::TooLarge);
            }
            chunks.push(chunk);
        }
    }
    Ok(chunks)
}
