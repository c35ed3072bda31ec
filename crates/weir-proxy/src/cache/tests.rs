//! The cache's decisions, without sockets: what a lookup finds, what an
//! upstream answer does to the store, and how each is counted.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Request, Response, StatusCode, header};

use super::*;
use crate::config::CacheSettings;
use crate::counted::ConnectionCounts;
use crate::metrics::{CacheResult, FillResult, Metrics};
use crate::upstream::UpstreamError;

fn cache() -> (Arc<Cache>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new(
        Arc::new(ConnectionCounts::default()),
        Vec::new(),
    ));
    let settings = CacheSettings {
        max_bytes: 1 << 20,
        max_object_bytes: 1 << 16,
        fill_hwm: 8,
        collapse_wait: Duration::from_millis(50),
        fill_on_client_abort: false,
    };
    (Cache::new(&settings, Arc::clone(&metrics)), metrics)
}

fn request(method: Method, fields: &[(&'static str, &'static str)]) -> Request<()> {
    let mut b = Request::builder().method(method).uri("/a?x=1");
    for (k, v) in fields {
        b = b.header(*k, *v);
    }
    b.body(()).expect("request")
}

fn response(status: u16, fields: &[(&'static str, &'static str)]) -> Response<()> {
    let mut b = Response::builder().status(status);
    for (k, v) in fields {
        b = b.header(*k, *v);
    }
    b.body(()).expect("response")
}

async fn lookup(cache: &Arc<Cache>, req: &Request<()>) -> Lookup {
    cache.lookup(req, "/a", Some("example.com")).await
}

fn x_cache(head: &http::response::Parts) -> &str {
    head.headers
        .get(X_CACHE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(none)")
}

/// Sends `req` through the cache as a miss answered by `answer` (a
/// bodiless response, stored at once if it may be). Returns the client's
/// head.
async fn miss(
    cache: &Arc<Cache>,
    req: &Request<()>,
    answer: Response<()>,
) -> http::response::Parts {
    let Lookup::Forward(ticket) = lookup(cache, req).await else {
        panic!("expected a miss");
    };
    match ticket.after_send(cache, Ok(answer)) {
        After::Forward(Ok(resp), fill) => {
            let (mut head, ()) = resp.into_parts();
            if let Some(fill) = fill {
                let start = fill.start(cache, &mut head, None);
                assert!(matches!(
                    start,
                    FillStart::Pass(None) | FillStart::NotModified
                ));
            }
            cache.store.sync();
            head
        }
        other => panic!("expected the answer forwarded, got {other:?}"),
    }
}

#[tokio::test]
async fn a_storable_miss_is_stored_and_the_next_request_is_a_hit() {
    let (cache, metrics) = cache();
    let get = request(Method::GET, &[]);
    let head = miss(
        &cache,
        &get,
        response(200, &[("cache-control", "max-age=60")]),
    )
    .await;
    assert_eq!(x_cache(&head), "MISS");
    assert_eq!(metrics.cache_request_count(CacheResult::Miss), 1);
    assert_eq!(metrics.cache_fill_count(FillResult::Stored), 1);
    let Lookup::Serve(hit) = lookup(&cache, &get).await else {
        panic!("expected a hit");
    };
    assert_eq!(hit.head.status, StatusCode::OK);
    assert_eq!(x_cache(&hit.head), "HIT");
    assert!(hit.head.headers.contains_key(header::AGE));
    assert!(hit.empty);
    assert_eq!(metrics.cache_request_count(CacheResult::Hit), 1);
}

#[tokio::test]
async fn no_store_and_authorization_are_not_stored() {
    let (cache, metrics) = cache();
    let get = request(Method::GET, &[]);
    miss(
        &cache,
        &get,
        response(200, &[("cache-control", "no-store")]),
    )
    .await;
    assert_eq!(metrics.cache_fill_count(FillResult::Stored), 0);
    assert!(matches!(lookup(&cache, &get).await, Lookup::Forward(_)));

    let auth = request(Method::GET, &[("authorization", "Bearer x")]);
    let Lookup::Forward(ticket) = lookup(&cache, &auth).await else {
        panic!("expected the request forwarded");
    };
    let After::Forward(Ok(resp), None) = ticket.after_send(
        &cache,
        Ok(response(200, &[("cache-control", "max-age=60")])),
    ) else {
        panic!("expected no fill for a request with Authorization");
    };
    // Not a cacheable request: no X-Cache at all.
    assert!(!resp.headers().contains_key(X_CACHE));
}

#[tokio::test]
async fn an_unsafe_method_answered_2xx_drops_the_entry() {
    let (cache, _) = cache();
    let get = request(Method::GET, &[]);
    miss(
        &cache,
        &get,
        response(200, &[("cache-control", "max-age=60")]),
    )
    .await;
    assert!(matches!(lookup(&cache, &get).await, Lookup::Serve(_)));
    let post = request(Method::POST, &[]);
    let Lookup::Forward(ticket) = lookup(&cache, &post).await else {
        panic!("expected the POST forwarded");
    };
    assert!(matches!(
        ticket.after_send(&cache, Ok(response(201, &[]))),
        After::Forward(Ok(_), None)
    ));
    cache.store.sync();
    assert!(matches!(lookup(&cache, &get).await, Lookup::Forward(_)));
}

#[tokio::test]
async fn a_stale_entry_is_revalidated_and_a_304_refreshes_it() {
    let (cache, metrics) = cache();
    let get = request(Method::GET, &[("if-none-match", "\"client\"")]);
    miss(
        &cache,
        &get,
        response(200, &[("cache-control", "max-age=0"), ("etag", "\"v1\"")]),
    )
    .await;
    let Lookup::Forward(ticket) = lookup(&cache, &get).await else {
        panic!("a stale entry goes upstream");
    };
    // The upstream request carries the entry's validator, not the client's.
    let mut fields = HeaderMap::new();
    fields.insert(header::IF_NONE_MATCH, "\"client\"".parse().expect("value"));
    ticket.prepare(&mut fields);
    assert_eq!(
        fields.get(header::IF_NONE_MATCH).map(|v| v.as_bytes()),
        Some(&b"\"v1\""[..])
    );
    let answer = response(304, &[("cache-control", "max-age=60"), ("etag", "\"v1\"")]);
    let After::Serve(hit) = ticket.after_send(&cache, Ok(answer)) else {
        panic!("a 304 for the entry is answered from the cache");
    };
    assert_eq!(
        (hit.head.status, x_cache(&hit.head)),
        (StatusCode::OK, "HIT")
    );
    assert_eq!(metrics.cache_fill_count(FillResult::Refreshed), 1);
}

#[tokio::test]
async fn a_failed_upstream_is_answered_stale_inside_stale_if_error() {
    let (cache, metrics) = cache();
    let get = request(Method::GET, &[]);
    let fields = [
        ("cache-control", "max-age=0, stale-if-error=60"),
        ("etag", "\"v1\""),
    ];
    miss(&cache, &get, response(200, &fields)).await;
    let Lookup::Forward(ticket) = lookup(&cache, &get).await else {
        panic!("a stale entry goes upstream");
    };
    let failed: Result<Response<()>, UpstreamError> = Err(UpstreamError::ConnectRefused {
        authority: "127.0.0.1:1".into(),
    });
    let After::Serve(hit) = ticket.after_send(&cache, failed) else {
        panic!("stale-if-error answers");
    };
    assert_eq!(x_cache(&hit.head), "STALE");
    assert_eq!(metrics.cache_request_count(CacheResult::Stale), 1);
}

#[tokio::test]
async fn the_clients_own_conditional_gets_a_304_from_the_cache() {
    let (cache, metrics) = cache();
    let fresh = [("cache-control", "max-age=60"), ("etag", "\"v1\"")];
    // On the miss itself: the fill goes on, the client gets a 304.
    let conditional = request(Method::GET, &[("if-none-match", "W/\"v1\"")]);
    let head = miss(&cache, &conditional, response(200, &fresh)).await;
    assert_eq!(
        (head.status, x_cache(&head)),
        (StatusCode::NOT_MODIFIED, "MISS")
    );
    assert_eq!(metrics.cache_fill_count(FillResult::Stored), 1);
    // From the stored entry.
    let Lookup::Serve(hit) = lookup(&cache, &conditional).await else {
        panic!("expected a hit");
    };
    assert_eq!(hit.head.status, StatusCode::NOT_MODIFIED);
    assert!(hit.empty);
    assert_eq!(metrics.cache_not_modified_count(), 2);
}
