//! SSR composition in the proxy: the [`Fetcher`] that `weir-ssr` fetches
//! fragments through, the fields fragment requests carry, and which
//! responses are templates.
//!
//! Fragments go through the same pooled upstream client as every request
//! (counted connections, `connect_timeout`, `response_header_timeout`),
//! only to the upstreams the config names: a relative `src` resolves
//! against the template's own URL (RFC 3986 §5), an absolute one must name
//! the host and port of an upstream.

use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Uri, Version};
use http_body_util::{Either, Empty};
use weir_ssr::{BoxSource, FetchError, FetchFuture, Fetcher, FragmentResponse, Observer};
use weir_stream::body::HttpBodySource;

use crate::body::idle::IdleTimeout;
use crate::body::request::RequestBody;
use crate::body::response::ResponseSource;
use crate::cache::{self, Cache};
use crate::config::{SsrSpec, TemplateDetect, UpstreamUrl};
use crate::headers::{self, Peer};
use crate::metrics::Metrics;
use crate::upstream::UpstreamClient;

use crate::request_id::TRACEPARENT;
pub use crate::request_id::X_REQUEST_ID;
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// Fetches fragments from the config's upstreams, through the response
/// cache when the route has `cache_fragments = true`.
#[derive(Debug, Clone)]
pub struct ProxyFetcher {
    client: UpstreamClient,
    upstreams: Arc<[UpstreamUrl]>,
    /// Each upstream's host (lowercase, without IPv6 brackets) and port,
    /// in the order of `upstreams`: what `src` URLs are matched against.
    origins: Arc<[(String, u16)]>,
    body_idle_timeout: Duration,
    via: headers::Via,
    cache: Option<Arc<Cache>>,
}

impl ProxyFetcher {
    /// A fetcher over `client`, to `upstreams` only; with `cache`, fragment
    /// responses are looked up and stored there (RFC 9111, as for any
    /// caching route).
    pub fn new(
        client: UpstreamClient,
        upstreams: Arc<[UpstreamUrl]>,
        body_idle_timeout: Duration,
        via: headers::Via,
        cache: Option<Arc<Cache>>,
    ) -> ProxyFetcher {
        let origins = upstreams
            .iter()
            .map(|u| {
                let a = &u.authority;
                let host = a.host().trim_start_matches('[').trim_end_matches(']');
                (host.to_ascii_lowercase(), a.port_u16().unwrap_or(80))
            })
            .collect();
        ProxyFetcher {
            client,
            upstreams,
            origins,
            body_idle_timeout,
            via,
            cache,
        }
    }

    /// The upstream whose authority is `host:port` (host compared without
    /// case, the port defaulting to 80).
    fn upstream_for(&self, host: &str, port: u16) -> Option<&UpstreamUrl> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let k = self
            .origins
            .iter()
            .position(|(h, p)| *p == port && h.eq_ignore_ascii_case(host))?;
        self.upstreams.get(k)
    }
}

/// `src` resolved against `base` without a URL parser, for the usual
/// include: an absolute path (and query) of plain characters against a
/// base whose origin is written as the parser would write it (`http://`,
/// a lowercase host, no user info, an explicit port that is not 80).
/// Returns the URL and its host and port, or `None` for anything else,
/// which takes the parser's road (RFC 3986 §5.2).
fn resolve_plain<'a>(base: &'a str, src: &str) -> Option<(String, &'a str, u16)> {
    let rest = base.strip_prefix("http://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (host, port) = authority.split_once(':')?;
    let plain_host = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let port_ok =
        !port.is_empty() && !port.starts_with('0') && port.bytes().all(|b| b.is_ascii_digit());
    let port: u16 = if plain_host && port_ok {
        port.parse().ok()?
    } else {
        return None;
    };
    if port == 80 || !src.starts_with('/') || src.starts_with("//") {
        return None;
    }
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-._~/!$&()*+,;=:@".contains(&b);
    let (path, query) = src.split_once('?').unwrap_or((src, ""));
    if !path.bytes().all(plain)
        || !query.bytes().all(plain)
        || path.split('/').any(|seg| seg == "." || seg == "..")
    {
        return None;
    }
    let mut url = String::with_capacity("http://".len() + authority.len() + src.len());
    url.push_str("http://");
    url.push_str(authority);
    url.push_str(src);
    Some((url, host, port))
}

impl Fetcher for ProxyFetcher {
    fn resolve(&self, base: &str, src: &str) -> Result<String, FetchError> {
        if let Some((url, host, port)) = resolve_plain(base, src) {
            return match self.upstream_for(host, port) {
                Some(_) => Ok(url),
                None => Err(FetchError::NotAllowed {
                    src: src.to_owned(),
                }),
            };
        }
        let invalid = |reason: String| FetchError::Invalid {
            src: src.to_owned(),
            reason,
        };
        let base = url::Url::parse(base).map_err(|e| invalid(format!("bad base URL: {e}")))?;
        let mut url = base.join(src.trim()).map_err(|e| invalid(e.to_string()))?;
        url.set_fragment(None);
        if url.scheme() != "http" {
            return Err(FetchError::NotAllowed {
                src: src.to_owned(),
            });
        }
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Err(invalid("no host".into()));
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("user info is not allowed".into()));
        }
        if self.upstream_for(host, port).is_none() {
            return Err(FetchError::NotAllowed {
                src: src.to_owned(),
            });
        }
        Ok(url.into())
    }

    fn fetch(&self, url: &str, mut headers: HeaderMap) -> FetchFuture {
        let this = self.clone();
        let uri = url.parse::<Uri>();
        let url = url.to_owned();
        Box::pin(async move {
            let uri = uri.map_err(|e| FetchError::Invalid {
                src: url.clone(),
                reason: e.to_string(),
            })?;
            // weir-ssr decodes gzip; nothing else is asked for.
            headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
            // Host from the URL's authority, as the client pool would
            // write it (RFC 9110 §7.2), without its formatting per request.
            if let Some(authority) = uri.authority()
                && let Ok(host) = HeaderValue::from_str(authority.as_str())
            {
                headers.insert(header::HOST, host);
            }
            match this.cache.clone() {
                Some(cache) => this.fetch_cached(&cache, uri, headers).await,
                None => {
                    let sent = this.client.send(get(uri, headers)).await;
                    this.response(sent, None)
                }
            }
        })
    }
}

/// `GET uri` with `headers` and no body.
fn get(uri: Uri, headers: HeaderMap) -> Request<RequestBody> {
    let mut req = Request::new(Either::Right(Empty::new()));
    *req.method_mut() = Method::GET;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    req
}

impl ProxyFetcher {
    /// The fragment from the cache, or from the upstream and teed into it.
    async fn fetch_cached(
        &self,
        cache: &Arc<Cache>,
        uri: Uri,
        headers: HeaderMap,
    ) -> Result<FragmentResponse, FetchError> {
        let view = get(uri.clone(), headers.clone());
        let host = uri.authority().map(|a| a.as_str().to_owned());
        let path = uri.path().to_owned();
        match cache.lookup(&view, &path, host.as_deref()).await {
            cache::Lookup::Serve(hit) => Ok(from_hit(hit)),
            cache::Lookup::ServeStale(hit, revalidation) => {
                revalidation.spawn(
                    Arc::clone(cache),
                    self.client.clone(),
                    get(uri, headers),
                    self.via.clone(),
                    self.body_idle_timeout,
                    None,
                );
                Ok(from_hit(hit))
            }
            cache::Lookup::Forward(ticket) => {
                let mut req = get(uri, headers);
                ticket.prepare(req.headers_mut());
                let sent = self.client.send(req).await;
                match ticket.after_send(cache, sent) {
                    cache::After::Serve(hit) => Ok(from_hit(hit)),
                    cache::After::Forward(sent, fill) => self.response(sent, fill),
                }
            }
        }
    }

    /// An upstream answer as a fragment response; with `fill`, its body
    /// is teed into the cache.
    fn response(
        &self,
        sent: Result<http::Response<crate::upstream::PooledBody>, crate::upstream::UpstreamError>,
        fill: Option<cache::Fill>,
    ) -> Result<FragmentResponse, FetchError> {
        let resp = sent.map_err(|e| FetchError::Upstream {
            reason: e.to_string(),
        })?;
        let (mut parts, body) = resp.into_parts();
        crate::headers::response_head(&mut parts, &self.via).map_err(|what| {
            FetchError::Upstream {
                reason: format!("upstream sent {what}"),
            }
        })?;
        let status = parts.status;
        let empty = status == http::StatusCode::NO_CONTENT
            || status == http::StatusCode::NOT_MODIFIED
            || http_body::Body::is_end_stream(&body);
        let body = if empty {
            drop(body);
            None
        } else {
            Some(IdleTimeout::new(
                HttpBodySource::new(body),
                self.body_idle_timeout,
            ))
        };
        let start = match (fill, &self.cache) {
            (Some(fill), Some(cache)) => fill.start(cache, &mut parts, body),
            _ => cache::FillStart::Pass(body),
        };
        let source = match start {
            cache::FillStart::Pass(Some(body)) => ResponseSource::Upstream(body),
            cache::FillStart::Teed(body) => ResponseSource::Cache(body),
            cache::FillStart::Pass(None) | cache::FillStart::NotModified => {
                ResponseSource::Local(weir_stream::once(bytes::Bytes::new()))
            }
        };
        let body: BoxSource = Box::pin(source);
        Ok(FragmentResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// A cache hit as a fragment response.
fn from_hit(hit: cache::Hit) -> FragmentResponse {
    let body: BoxSource = if hit.empty {
        Box::pin(weir_stream::once(bytes::Bytes::new()))
    } else {
        Box::pin(hit.body)
    };
    FragmentResponse {
        status: hit.head.status,
        headers: hit.head.headers,
        body,
    }
}

/// What a fragment request carries of the client's request `headers`:
/// the route's `forward_headers`, `Cookie` when `forward_cookies`,
/// `traceparent`/`tracestate`, `x-request-id` (the request's, see
/// [`crate::request_id::identify`]),
/// `X-Forwarded-*` as for any upstream request, and Weir's `Via`.
pub fn fragment_headers(
    client: &HeaderMap,
    spec: &SsrSpec,
    peer: Peer<'_>,
    version: Version,
    via: &headers::Via,
) -> HeaderMap {
    // Room for what is usually set below, so that building it does not grow.
    let mut out = HeaderMap::with_capacity(12);
    let copy = |out: &mut HeaderMap, name: &HeaderName| {
        for v in client.get_all(name) {
            out.append(name.clone(), v.clone());
        }
    };
    for name in &spec.forward_headers {
        copy(&mut out, name);
    }
    if spec.forward_cookies {
        copy(&mut out, &header::COOKIE);
        headers::join_cookies(&mut out);
    }
    for name in [TRACEPARENT, TRACESTATE, X_REQUEST_ID] {
        copy(&mut out, &name);
    }
    // The client's own X-Forwarded-* chain, when the peer is trusted.
    if peer.trusted {
        for name in ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"] {
            copy(&mut out, &HeaderName::from_static(name));
        }
    }
    headers::set_forwarded(&mut out, peer);
    via.append(&mut out, version);
    out
}

/// Whether a response on an SSR route is a template: `text/html`, and
/// `X-Weir-Template: 1` unless `detect = "html"`.
pub fn is_template(headers: &HeaderMap, spec: &SsrSpec) -> bool {
    let html = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(weir_http::media_type::is_html);
    html && (spec.detect == TemplateDetect::Html || weir_ssr::is_template(headers))
}

/// Removes the fields of a template response that do not describe the
/// composed page: its length and validators, ranges, digests, and
/// `X-Weir-Template` itself.
pub fn strip_template_fields(headers: &mut HeaderMap) {
    for name in [
        header::CONTENT_LENGTH,
        header::ETAG,
        header::LAST_MODIFIED,
        header::ACCEPT_RANGES,
        header::CONTENT_RANGE,
        HeaderName::from_static("content-md5"),
        HeaderName::from_static("digest"),
        HeaderName::from_static("content-digest"),
        HeaderName::from_static("repr-digest"),
        weir_ssr::X_WEIR_TEMPLATE,
    ] {
        headers.remove(name);
    }
}

/// Applies a composition's fields to the page's: the primary's replace
/// (`Set-Cookie` and `Link` are appended).
pub fn apply_page_fields(page: &mut HeaderMap, set: HeaderMap) {
    let mut last: Option<HeaderName> = None;
    for (name, value) in set {
        let name = match name {
            Some(n) => {
                if n != header::SET_COOKIE && n != header::LINK {
                    page.remove(&n);
                }
                last = Some(n.clone());
                n
            }
            None => match &last {
                Some(n) => n.clone(),
                None => continue,
            },
        };
        page.append(name, value);
    }
}

/// Counts fragment outcomes into the proxy's metrics.
#[derive(Debug)]
pub struct MetricsObserver(pub Arc<Metrics>);

impl Observer for MetricsObserver {
    fn fragment(&self, event: &weir_ssr::FragmentEvent<'_>) {
        self.0.ssr_fragment(event.outcome, event.failure);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut gives what the URL parser gives, or steps aside.
    #[test]
    fn plain_includes_resolve_as_the_url_parser_resolves_them() {
        let parse = |base: &str, src: &str| {
            let mut u = url::Url::parse(base)
                .expect("base")
                .join(src)
                .expect("join");
            u.set_fragment(None);
            String::from(u)
        };
        for base in [
            "http://127.0.0.1:3000/ssr/page.html",
            "http://app.internal:8080/a/b?x=1",
        ] {
            for src in [
                "/frag/f1.html",
                "/f?id=7&lang=en",
                "/a/b-c_d~e/f.html",
                "/",
                "/x:y@z;p=1",
            ] {
                let (fast, _, _) = resolve_plain(base, src).expect("plain");
                assert_eq!(fast, parse(base, src), "{base} + {src}");
            }
        }
        for (base, src) in [
            ("http://127.0.0.1:3000/p", "frag/f1.html"),
            ("http://127.0.0.1:3000/p", "//other:1/x"),
            ("http://127.0.0.1:3000/p", "/a/../b"),
            ("http://127.0.0.1:3000/p", "/a/./b"),
            ("http://127.0.0.1:3000/p", "/a%20b"),
            ("http://127.0.0.1:3000/p", "/a b"),
            ("http://127.0.0.1:3000/p", "/a#frag"),
            ("http://127.0.0.1:3000/p", "/q?x='1'"),
            ("http://App:3000/p", "/x"),
            ("http://app:80/p", "/x"),
            ("http://app/p", "/x"),
            ("http://u@app:1/p", "/x"),
            ("http://[::1]:1/p", "/x"),
        ] {
            assert!(resolve_plain(base, src).is_none(), "{base} + {src}");
        }
    }

    fn fetcher() -> ProxyFetcher {
        let client = UpstreamClient::new(&crate::config::ClientSettings {
            connect_timeout: Duration::from_secs(1),
            response_header_timeout: Duration::from_secs(1),
            pool_idle_timeout: Duration::from_secs(1),
            pool_max_idle_per_host: 1,
        });
        let up = |a: &str| UpstreamUrl {
            scheme: http::uri::Scheme::HTTP,
            authority: a.parse().expect("authority"),
            base_path: String::new(),
        };
        ProxyFetcher::new(
            client,
            vec![up("127.0.0.1:8081"), up("frags.internal")].into(),
            Duration::from_secs(1),
            headers::Via::new("weir"),
            None,
        )
    }

    #[tokio::test]
    async fn src_resolves_against_the_template_and_only_to_named_upstreams() {
        let f = fetcher();
        let base = "http://127.0.0.1:8081/shop/page?x=1";
        assert_eq!(
            f.resolve(base, "/fragment/a?delay_ms=5").expect("abs path"),
            "http://127.0.0.1:8081/fragment/a?delay_ms=5"
        );
        assert_eq!(
            f.resolve(base, "nav#top").expect("relative"),
            "http://127.0.0.1:8081/shop/nav"
        );
        assert_eq!(
            f.resolve(base, "http://FRAGS.internal:80/x")
                .expect("other upstream"),
            "http://frags.internal/x"
        );
        for bad in [
            "http://evil.example/x",
            "http://127.0.0.1:9999/x",
            "https://127.0.0.1:8081/x",
            "//evil.example/x",
            "file:///etc/passwd",
        ] {
            assert!(
                matches!(f.resolve(base, bad), Err(FetchError::NotAllowed { .. })),
                "{bad}"
            );
        }
        assert!(f.resolve(base, "http://u:p@127.0.0.1:8081/").is_err());
    }

    #[test]
    fn page_fields_replace_but_cookies_and_links_add() {
        let mut page = HeaderMap::new();
        page.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=60"),
        );
        page.insert(header::SET_COOKIE, HeaderValue::from_static("t=1"));
        let mut set = HeaderMap::new();
        set.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        set.append(header::SET_COOKIE, HeaderValue::from_static("a=1"));
        set.append(header::SET_COOKIE, HeaderValue::from_static("b=2"));
        apply_page_fields(&mut page, set);
        assert_eq!(page[header::CACHE_CONTROL], "no-store");
        assert_eq!(page.get_all(header::SET_COOKIE).iter().count(), 3);
    }
}
