//! One request's life, as phases: route → prepare the upstream request →
//! send → build the downstream response → log.
//!
//! Each phase is a method with one job; [`Proxy::handle`] calls them in order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::uri::PathAndQuery;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use weir_stream::body::{HttpBodySource, SourceBody};
use weir_stream::{ConsumerOptions, ShareOptions, TransformExt as _, once, pull, share};
use weir_transform::chain::ResponseChain;

use crate::access_log::{AccessRecord, ClientBodyFailure, Outcome, RequestTally, ResponseLog};
use crate::body::{IdleTimeout, RequestBody, RequestSource, ResponseBody, ResponseSource};
use crate::body_log::{BodyLog, Direction};
use crate::cache::{self, Cache, CacheStats};
use crate::config::strip_port;
use crate::config::{Config, HostHeader, ServerSettings, UpstreamTarget, UpstreamUrl};
use crate::headers::{self, Peer};
use crate::metrics::{self, Metrics};
use crate::mirror::{Mirror, MirrorStats};
use crate::route::{Route, RouteTable, normalize_path};
use crate::upstream::{UpstreamClient, UpstreamError};

/// Why a [`Proxy`] could not be built from a config.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// An `origin = "embedded"` upstream was not resolved to an address.
    #[error(
        "upstream {name:?} is an embedded origin that was not started (call Config::resolve_embedded first)"
    )]
    UnresolvedEmbedded {
        /// The upstream's name.
        name: String,
    },
}

#[derive(Debug)]
struct ResolvedUpstream {
    name: String,
    url: UpstreamUrl,
}

/// The reverse proxy: routes, upstreams, the upstream client and the
/// header settings. Shared by every connection (`Arc<Proxy>`).
#[derive(Debug)]
pub struct Proxy {
    routes: RouteTable,
    upstreams: Vec<ResolvedUpstream>,
    client: UpstreamClient,
    settings: ServerSettings,
    /// Set when shutdown cut requests short, so their log lines say so.
    shutdown_cut: Arc<AtomicBool>,
    /// Each route's mirror, by route index.
    mirrors: Vec<Option<Mirror>>,
    /// Mirror outcomes, all routes.
    mirror_stats: Arc<MirrorStats>,
    metrics: Arc<Metrics>,
    /// The `route` label of each route, by index; then [`metrics::NO_ROUTE`].
    route_labels: Vec<Arc<String>>,
    /// The response cache, when a route sets `cache = true`.
    cache: Option<Arc<Cache>>,
    /// Each route's SSR fragment fetcher, by route index (`None`: the
    /// route composes nothing).
    fetchers: Vec<Option<Arc<crate::ssr::ProxyFetcher>>>,
    /// Counts SSR fragment outcomes into `metrics`.
    ssr_observer: Arc<crate::ssr::MetricsObserver>,
}

/// What composing a route's template needs of the client's request,
/// kept before the request is handed on.
struct SsrAsk<'a> {
    spec: &'a crate::config::SsrSpec,
    /// The route's fetcher.
    fetcher: Arc<crate::ssr::ProxyFetcher>,
    /// Fields for the fragment requests.
    headers: HeaderMap,
}

/// What routing decided.
struct Target<'a> {
    route: &'a Route,
    upstream: &'a ResolvedUpstream,
    /// The normalized path, before any prefix strip.
    path: String,
    /// The host the client asked for, as sent (with port).
    client_host: Option<String>,
}

/// What planning a route's response transforms needs of the client's
/// request: its method and `Accept-Encoding` fields.
struct TransformAsk {
    method: Method,
    headers: HeaderMap,
}

impl TransformAsk {
    fn of<B>(req: &Request<B>) -> Self {
        let mut headers = HeaderMap::new();
        for v in req.headers().get_all(header::ACCEPT_ENCODING) {
            headers.append(header::ACCEPT_ENCODING, v.clone());
        }
        TransformAsk {
            method: req.method().clone(),
            headers,
        }
    }
}

/// A response Weir makes itself, and how it is logged.
struct Local {
    status: StatusCode,
    body: &'static str,
    outcome: Outcome,
}

impl Proxy {
    /// Builds the proxy for a validated config whose embedded upstreams are resolved.
    ///
    /// # Errors
    /// [`ProxyError::UnresolvedEmbedded`] if an upstream is still `Embedded`.
    pub fn new(config: &Config) -> Result<Arc<Proxy>, ProxyError> {
        let upstreams: Vec<ResolvedUpstream> = config
            .upstreams
            .iter()
            .map(|u| match &u.target {
                UpstreamTarget::Url(url) => Ok(ResolvedUpstream {
                    name: u.name.clone(),
                    url: url.clone(),
                }),
                UpstreamTarget::Embedded { .. } => Err(ProxyError::UnresolvedEmbedded {
                    name: u.name.clone(),
                }),
            })
            .collect::<Result<Vec<ResolvedUpstream>, _>>()?;
        let client = UpstreamClient::new(&config.client);
        let authorities = upstreams
            .iter()
            .map(|u| u.url.authority.to_string())
            .collect();
        let metrics = Arc::new(Metrics::new(Arc::clone(client.connections()), authorities));
        let route_labels = config
            .routes
            .iter()
            .map(|r| metrics::route_label(r.host.as_deref(), &r.path_prefix))
            .chain([metrics::NO_ROUTE.to_owned()])
            .map(Arc::new)
            .collect();
        let mirrors = config
            .routes
            .iter()
            .map(|r| {
                r.mirror.as_ref().and_then(|m| {
                    let up = upstreams.get(m.upstream)?;
                    Some(Mirror::new(up.name.clone(), up.url.clone(), m.clone()))
                })
            })
            .collect();
        let cache = config
            .routes
            .iter()
            .any(|r| r.cache || r.ssr.as_ref().is_some_and(|s| s.cache_fragments))
            .then(|| {
                let cache = Cache::new(&config.cache);
                cache.stats().count_into(Arc::clone(&metrics));
                cache
            });
        let fetchers = config
            .routes
            .iter()
            .map(|r| {
                r.ssr.as_ref().map(|s| {
                    let allowed: Arc<[UpstreamUrl]> = s
                        .fragment_upstreams
                        .iter()
                        .filter_map(|&i| upstreams.get(i).map(|u| u.url.clone()))
                        .collect();
                    Arc::new(crate::ssr::ProxyFetcher::new(
                        client.clone(),
                        allowed,
                        config.server.body_idle_timeout,
                        &config.server.via_pseudonym,
                        cache.clone().filter(|_| s.cache_fragments),
                    ))
                })
            })
            .collect();
        Ok(Arc::new(Proxy {
            fetchers,
            ssr_observer: Arc::new(crate::ssr::MetricsObserver(Arc::clone(&metrics))),
            routes: RouteTable::new(&config.routes),
            mirrors,
            mirror_stats: Arc::new(MirrorStats::with_metrics(Arc::clone(&metrics))),
            upstreams,
            cache,
            client,
            metrics,
            route_labels,
            settings: config.server.clone(),
            shutdown_cut: Arc::new(AtomicBool::new(false)),
        }))
    }

    /// Mirror outcomes so far, all routes.
    pub fn mirror_stats(&self) -> &Arc<MirrorStats> {
        &self.mirror_stats
    }

    /// Response cache counters, all routes (zero when no route caches).
    pub fn cache_stats(&self) -> Arc<CacheStats> {
        self.cache
            .as_ref()
            .map_or_else(Arc::default, |c| Arc::clone(c.stats()))
    }

    /// Live upstream connection counts.
    pub fn upstream_connections(&self) -> &Arc<crate::counted::ConnectionCounts> {
        self.client.connections()
    }

    /// The proxy's metrics (served on the admin listener's `/metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The `route` label of route `index`, or of no route.
    fn route_label(&self, index: Option<usize>) -> Arc<String> {
        let last = self.route_labels.len() - 1;
        Arc::clone(&self.route_labels[index.map_or(last, |i| i.min(last))])
    }

    /// Handles one request from `peer`. Never fails: every error becomes a
    /// response (4xx/5xx) and an access log line.
    pub async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<ResponseBody> {
        let mut record = AccessRecord::new(&req, peer, self.shutdown_cut.clone());
        record.count_into(Arc::clone(&self.metrics), self.route_label(None));
        let head_only = req.method() == Method::HEAD;

        let target = match self.route(&req) {
            Ok(target) => target,
            Err(local) => return self.local_response(local, record, head_only),
        };
        record.upstream = Some(target.upstream.name.clone());
        record.count_into(
            Arc::clone(&self.metrics),
            self.route_label(Some(target.route.index)),
        );
        // What planning the response transforms needs of the request, kept
        // before the request is handed on.
        let ask = (!target.route.transforms.is_empty()).then(|| TransformAsk::of(&req));
        let fetcher = self.fetchers.get(target.route.index).cloned().flatten();
        let ssr = target
            .route
            .ssr
            .as_ref()
            .zip(fetcher)
            .map(|(spec, fetcher)| SsrAsk {
                spec,
                fetcher,
                headers: crate::ssr::fragment_headers(
                    req.headers(),
                    spec,
                    Peer {
                        ip: peer.ip(),
                        trusted: self.is_trusted(peer),
                        proto: "http",
                        host: target.client_host.as_deref(),
                    },
                    req.version(),
                    &self.settings.via_pseudonym,
                ),
            });
        if let Some(ssr) = ssr.as_ref().filter(|s| s.spec.template_file.is_some()) {
            return self
                .file_page(req.method(), req.uri(), ssr, record, &target, ask)
                .await;
        }

        // --- cache hook 1: lookup (crate::cache); hits never reach the upstream.
        let cache = self.cache.as_ref().filter(|_| target.route.cache);
        let mut ticket = None;
        if let Some(cache) = cache {
            match cache
                .lookup(&req, &target.path, target.client_host.as_deref())
                .await
            {
                cache::Lookup::Serve(hit) => {
                    return self.cache_response(hit, record, head_only, &target, ask);
                }
                cache::Lookup::ServeStale(hit, revalidation) => {
                    self.revalidate_in_background(req, &target, peer, cache, revalidation);
                    return self.cache_response(hit, record, head_only, &target, ask);
                }
                cache::Lookup::Forward(t) => ticket = Some(t),
            }
        }
        // --- end cache hook 1

        let mut upstream_req = match self.upstream_request(req, &target, peer, &record) {
            Ok(r) => r,
            Err(local) => return self.local_response(local, record, head_only),
        };

        let template_url = ssr.as_ref().map(|_| upstream_req.uri().to_string());
        // --- cache hook 2: revalidate a stale entry; a 304 or stale-if-error answers from the cache.
        if let Some(t) = &ticket {
            t.prepare(upstream_req.headers_mut());
        }
        record.hold_in_flight(
            self.metrics
                .upstream_request(target.upstream.url.authority.as_str()),
        );
        let sent = self.client.send(upstream_req).await;
        let (sent, fill) = match (cache, ticket) {
            (Some(cache), Some(t)) => match t.after_send(cache, sent) {
                cache::After::Serve(hit) => {
                    return self.cache_response(hit, record, head_only, &target, ask);
                }
                cache::After::Forward(sent, fill) => (sent, fill),
            },
            _ => (sent, None),
        };
        // --- end cache hook 2

        match sent {
            Ok(resp) => {
                let ssr = ssr.zip(template_url);
                match self
                    .downstream_response(resp, record, head_only, &target, ask, fill, ssr)
                    .await
                {
                    Ok(resp) => resp,
                    Err((local, record)) => self.local_response(local, record, head_only),
                }
            }
            Err(err) => {
                let local = self.upstream_failure(&err, &target, &mut record);
                self.local_response(local, record, head_only)
            }
        }
    }

    /// The response for a request that got no upstream response. When the
    /// client's own request body broke (malformed, stalled, abandoned), the
    /// upstream is not to blame: 400 or 408, and no upstream warning.
    fn upstream_failure(
        &self,
        err: &UpstreamError,
        target: &Target<'_>,
        record: &mut AccessRecord,
    ) -> Local {
        record.reason = Some(err.to_string());
        match record.counters().client_failure() {
            Some(ClientBodyFailure::IdleTimeout) => {
                tracing::debug!(target: "weir::proxy", "request body stalled: {err}");
                Local {
                    status: StatusCode::REQUEST_TIMEOUT,
                    body: "408 Request Timeout: the request body stalled\n",
                    outcome: Outcome::ClientAborted,
                }
            }
            Some(ClientBodyFailure::Broken) => {
                tracing::debug!(target: "weir::proxy", "request body failed: {err}");
                Local {
                    status: StatusCode::BAD_REQUEST,
                    body: "400 Bad Request: the request body was malformed or cut short\n",
                    outcome: Outcome::ClientAborted,
                }
            }
            None => {
                tracing::warn!(
                    target: "weir::proxy",
                    upstream = %target.upstream.name,
                    status = err.status().as_u16(),
                    "upstream failed: {err}"
                );
                if err.is_timeout() {
                    Local {
                        status: err.status(),
                        body: "504 Gateway Timeout\n",
                        outcome: Outcome::UpstreamTimeout,
                    }
                } else {
                    Local {
                        status: err.status(),
                        body: "502 Bad Gateway\n",
                        outcome: Outcome::UpstreamError,
                    }
                }
            }
        }
    }

    /// Phase 1: check the request line and host, pick the route and upstream.
    fn route(&self, req: &Request<Incoming>) -> Result<Target<'_>, Local> {
        if req.method() == Method::CONNECT {
            return Err(Local {
                status: StatusCode::METHOD_NOT_ALLOWED,
                body: "405 Method Not Allowed: Weir is not a forward proxy\n",
                outcome: Outcome::BadRequest,
            });
        }
        if let Some(te) = req.headers().get(header::TRANSFER_ENCODING)
            && !only_chunked(te)
        {
            // RFC 9112 §6.1: a coding the server does not understand → 501.
            return Err(Local {
                status: StatusCode::NOT_IMPLEMENTED,
                body: "501 Not Implemented: only the chunked transfer coding is supported\n",
                outcome: Outcome::BadRequest,
            });
        }
        let Some(path) = normalize_path(req.uri().path()) else {
            return Err(bad_request("400 Bad Request: invalid request path\n"));
        };
        let client_host = request_host(req)?;
        let match_host = client_host
            .as_deref()
            .map(|h| strip_port(h).trim_end_matches('.').to_ascii_lowercase());
        let Some(route) = self.routes.find(match_host.as_deref(), &path) else {
            return Err(Local {
                status: StatusCode::NOT_FOUND,
                body: "404 Not Found: no route\n",
                outcome: Outcome::NoRoute,
            });
        };
        Ok(Target {
            route,
            upstream: &self.upstreams[route.upstream],
            path: path.into_owned(),
            client_host,
        })
    }

    /// Phase 2: rewrite target and headers, and stream the body through.
    fn upstream_request(
        &self,
        req: Request<Incoming>,
        target: &Target<'_>,
        peer: SocketAddr,
        record: &AccessRecord,
    ) -> Result<Request<RequestBody>, Local> {
        let (mut parts, body) = req.into_parts();
        self.upstream_head(&mut parts, target, peer)?;

        // A mirror copy, if the route has one and a slot is free.
        let mirror = self.mirrors[target.route.index]
            .as_ref()
            .and_then(|m| m.admit(&self.mirror_stats).map(|permit| (m, permit)));
        let (body, mirror_body, branch) = if http_body::Body::is_end_stream(&body) {
            (None, None, None)
        } else {
            if !parts.headers.contains_key(header::CONTENT_LENGTH) {
                // Say so explicitly: for GET and HEAD, hyper would otherwise
                // assume there is no body and drop it.
                parts.headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
            }
            let source =
                IdleTimeout::new(HttpBodySource::new(body), self.settings.body_idle_timeout);
            match &mirror {
                Some((m, _)) => {
                    let shared = share(
                        source,
                        ShareOptions {
                            hwm: m.spec.hwm,
                            ..ShareOptions::default()
                        },
                    );
                    let primary = shared.consumer(ConsumerOptions::primary());
                    let copy = shared.consumer(Mirror::branch());
                    (
                        Some(RequestSource::Shared(primary)),
                        Some(RequestSource::Shared(copy)),
                        Some(shared),
                    )
                }
                None => (Some(RequestSource::Direct(source)), None, None),
            }
        };
        let body_log = match (target.route.body_log, &body) {
            (Some(spec), Some(_)) => BodyLog::capture(
                spec.request_bytes,
                Direction::Request,
                &parts.method,
                &target.path,
            ),
            _ => BodyLog::off(),
        };
        let body = match body {
            Some(source) => Either::Left(SourceBody::new(pull(
                source,
                body_log.then(RequestTally::new(record.counters().clone())),
            ))),
            None => Either::Right(Empty::new()),
        };
        if let Some((m, permit)) = mirror {
            let copy = mirror_request(
                &parts,
                m,
                target.route.forward_path(&target.path),
                mirror_body,
            );
            m.spawn(
                self.client.clone(),
                copy,
                branch,
                permit,
                Arc::clone(&self.mirror_stats),
            );
        }
        Ok(Request::from_parts(parts, body))
    }

    /// Phase 2, the head: the upstream target (base path, prefix strip,
    /// query) and the request fields as sent upstream (hop-by-hop removed,
    /// `Host`, `X-Forwarded-*`, `Via`, `Accept-Encoding` for transforms
    /// that read the body, no `Range` or `If-None-Match`/`If-Modified-Since`
    /// on SSR routes, `Connection: close` for `HEAD`).
    ///
    /// # Errors
    /// 400 when the rewritten target is not a valid URI.
    fn upstream_head(
        &self,
        parts: &mut http::request::Parts,
        target: &Target<'_>,
        peer: SocketAddr,
    ) -> Result<(), Local> {
        let url = &target.upstream.url;
        let mut path = String::with_capacity(url.base_path.len() + target.path.len() + 32);
        path.push_str(&url.base_path);
        path.push_str(target.route.forward_path(&target.path));
        if let Some(q) = parts.uri.query() {
            path.push('?');
            path.push_str(q);
        }
        let uri = PathAndQuery::try_from(path)
            .ok()
            .and_then(|pq| {
                Uri::builder()
                    .scheme(url.scheme.clone())
                    .authority(url.authority.clone())
                    .path_and_query(pq)
                    .build()
                    .ok()
            })
            .ok_or(Local {
                status: StatusCode::BAD_REQUEST,
                body: "400 Bad Request: invalid request target\n",
                outcome: Outcome::BadRequest,
            })?;

        let received = parts.version;
        let headers = &mut parts.headers;
        let te_trailers = headers::remove_hop_by_hop(headers);
        // HTTP/2 clients always accept trailers; HTTP/1.1 ones say so.
        if te_trailers || received == Version::HTTP_2 {
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
        if received == Version::HTTP_2 {
            headers::join_cookies(headers);
        }
        match (target.route.host_header, &target.client_host) {
            (HostHeader::Preserve, Some(host)) => {
                if let Ok(v) = HeaderValue::try_from(host.as_str()) {
                    headers.insert(header::HOST, v);
                }
            }
            _ => {
                // hyper sets Host from the upstream URI.
                headers.remove(header::HOST);
            }
        }
        headers::set_forwarded(
            headers,
            Peer {
                ip: peer.ip(),
                trusted: self.is_trusted(peer),
                proto: "http",
                host: target.client_host.as_deref(),
            },
        );
        headers::append_via(headers, received, &self.settings.via_pseudonym);
        if target.route.transforms.reads_content() || target.route.ssr.is_some() {
            // html-rewrite and msgpack-json read the body: ask for it unencoded
            // (RFC 9110 §12.5.3). `compress`, if listed, encodes it afterwards.
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        if target.route.ssr.is_some() {
            // A composed page has no validators and no ranges of its own:
            // the template's 304 or 206 cannot stand for it (RFC 9110
            // §13.1, §14.2 let a server ignore these; Weir does, for every
            // response of an SSR route).
            for name in [
                header::RANGE,
                header::IF_RANGE,
                header::IF_NONE_MATCH,
                header::IF_MODIFIED_SINCE,
            ] {
                headers.remove(name);
            }
        }

        parts.uri = uri;
        parts.version = Version::HTTP_11;
        if parts.method == Method::HEAD {
            // A response to HEAD has no content (RFC 9110 §9.3.2), so hyper
            // reads none; an upstream that sends some anyway, late, would
            // have it read as the next request's response on a pooled
            // connection. Closing after a HEAD (RFC 9112 §9.6) rules that out.
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Ok(())
    }

    /// Phase 4: the upstream's response, with hop-by-hop fields removed,
    /// `Via` added, and its body streamed through the log stage.
    ///
    /// A response Weir cannot forward faithfully becomes a 502: a `101`
    /// (Weir never asks to switch protocols, RFC 9110 §15.2.2), or a
    /// transfer coding other than `chunked`.
    #[allow(clippy::result_large_err, clippy::too_many_arguments)]
    async fn downstream_response(
        &self,
        resp: Response<Incoming>,
        mut record: AccessRecord,
        head_only: bool,
        target: &Target<'_>,
        ask: Option<TransformAsk>,
        fill: Option<cache::Fill>,
        ssr: Option<(SsrAsk<'_>, String)>,
    ) -> Result<Response<ResponseBody>, (Local, AccessRecord)> {
        let (mut parts, body) = resp.into_parts();
        let status = parts.status;
        if let Err(what) = downstream_head(&mut parts, &self.settings.via_pseudonym) {
            let authority = record.upstream.clone().unwrap_or_default();
            tracing::warn!(target: "weir::proxy", upstream = %authority, "upstream sent {what}");
            record.reason = Some(format!("upstream sent {what}"));
            let local = Local {
                status: StatusCode::BAD_GATEWAY,
                body: "502 Bad Gateway\n",
                outcome: Outcome::UpstreamError,
            };
            return Err((local, record));
        }
        record.status = status.as_u16();

        let mut no_body = head_only
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || http_body::Body::is_end_stream(&body);
        let source = if no_body {
            // Dropping an ended (or bodiless) upstream body keeps its connection poolable.
            drop(body);
            ResponseSource::Local(once(Bytes::new()))
        } else {
            ResponseSource::Upstream(IdleTimeout::new(
                HttpBodySource::new(body),
                self.settings.body_idle_timeout,
            ))
        };
        // --- cache hook 3: tee a storable body into the cache (X-Cache: MISS).
        let source = match (fill, &self.cache) {
            (Some(fill), Some(cache)) if !head_only => {
                fill.start(cache, &mut parts, source, no_body)
            }
            _ => source,
        };
        if parts.status != status {
            // The client's own conditional matched: a 304 from the cache.
            record.status = parts.status.as_u16();
            no_body = true;
        }
        // --- end cache hook 3
        // SSR: a template is composed with its fragments.
        let (source, no_body) = match ssr {
            Some((ssr, url)) if crate::ssr::is_template(&parts.headers, ssr.spec) => match self
                .compose_page(&mut parts, source, no_body, &ssr, url, &mut record)
                .await
            {
                Ok(page) => page,
                Err(local) => return Err((local, record)),
            },
            _ => (source, no_body),
        };
        Ok(self.respond(parts, source, no_body, head_only, record, target, ask))
    }

    /// The response's last phase: the route's transforms (planned on the
    /// final head), the body log and the access log stage.
    #[allow(clippy::too_many_arguments)]
    fn respond(
        &self,
        mut parts: http::response::Parts,
        source: ResponseSource,
        no_body: bool,
        head_only: bool,
        record: AccessRecord,
        target: &Target<'_>,
        ask: Option<TransformAsk>,
    ) -> Response<ResponseBody> {
        let status = parts.status;
        let ask_method = ask
            .as_ref()
            .map_or_else(|| record.method().clone(), |a| a.method.clone());
        // HEAD and 304 get the head edits of the stages (not the stages):
        // the same fields as the GET / the 200 they stand for.
        let plan_head = !no_body || head_only || status == StatusCode::NOT_MODIFIED;
        let chain = match ask {
            Some(ask) if plan_head => {
                target
                    .route
                    .transforms
                    .plan(&ask.method, &ask.headers, status, &mut parts.headers)
            }
            _ => ResponseChain::default(),
        };
        let body_log = match target.route.body_log {
            Some(spec) if !no_body => BodyLog::capture(
                spec.response_bytes,
                Direction::Response,
                &ask_method,
                &target.path,
            ),
            _ => BodyLog::off(),
        };
        let log = ResponseLog::new(record, Outcome::Ok, !no_body);
        Response::from_parts(
            parts,
            SourceBody::new(pull(source, body_log.then(chain).then(log))),
        )
    }

    /// A route with `[route.ssr] template_file`: the page composed from the
    /// file, whose fragments resolve against the route's upstream.
    async fn file_page(
        &self,
        method: &Method,
        uri: &Uri,
        ssr: &SsrAsk<'_>,
        mut record: AccessRecord,
        target: &Target<'_>,
        ask: Option<TransformAsk>,
    ) -> Response<ResponseBody> {
        let head_only = *method == Method::HEAD;
        if *method != Method::GET && !head_only {
            let mut resp = self.local_response(
                Local {
                    status: StatusCode::METHOD_NOT_ALLOWED,
                    body: "405 Method Not Allowed: this page answers GET and HEAD\n",
                    outcome: Outcome::BadRequest,
                },
                record,
                false,
            );
            // RFC 9110 §15.5.6: a 405 lists the methods the target supports.
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return resp;
        }
        let Some(file) = &ssr.spec.template_file else {
            return self.local_response(bad_request("400 Bad Request\n"), record, head_only);
        };
        let url = &target.upstream.url;
        let mut base = format!(
            "{}://{}{}{}",
            url.scheme,
            url.authority,
            url.base_path,
            target.route.forward_path(&target.path)
        );
        if let Some(q) = uri.query() {
            base.push('?');
            base.push_str(q);
        }
        let mut parts = Response::new(()).into_parts().0;
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        headers::append_via(
            &mut parts.headers,
            Version::HTTP_11,
            &self.settings.via_pseudonym,
        );
        record.status = 200;
        let template = ResponseSource::Local(once(file.bytes.clone()));
        match self
            .compose_page(&mut parts, template, false, ssr, base, &mut record)
            .await
        {
            Ok((source, no_body)) => {
                let no_body = no_body || head_only;
                let source = if head_only {
                    ResponseSource::Local(once(Bytes::new()))
                } else {
                    source
                };
                self.respond(parts, source, no_body, head_only, record, target, ask)
            }
            Err(local) => self.local_response(local, record, head_only),
        }
    }

    /// Composes the template `source` (at absolute URL `url`) into the
    /// page: the primary's status and fields, or a redirect with no body.
    /// Returns the page's source and whether it has no body.
    ///
    /// # Errors
    /// A 502/504 [`Local`] when the primary fragment failed, timed out or
    /// answered 5xx, or the template's coding cannot be decoded.
    async fn compose_page(
        &self,
        parts: &mut http::response::Parts,
        source: ResponseSource,
        no_body: bool,
        ssr: &SsrAsk<'_>,
        url: String,
        record: &mut AccessRecord,
    ) -> Result<(ResponseSource, bool), Local> {
        crate::ssr::strip_template_fields(&mut parts.headers);
        if no_body {
            return Ok((source, no_body));
        }
        let template = match weir_ssr::decode_body(Box::pin(source), &parts.headers) {
            Ok(t) => t,
            Err(e) => {
                record.reason = Some(format!("template: {e}"));
                self.metrics.ssr_page("failed");
                return Err(Local {
                    status: StatusCode::BAD_GATEWAY,
                    body: "502 Bad Gateway: the page template could not be decoded\n",
                    outcome: Outcome::UpstreamError,
                });
            }
        };
        parts.headers.remove(header::CONTENT_ENCODING);
        let ctx = weir_ssr::PageContext {
            fetcher: Arc::clone(&ssr.fetcher) as Arc<dyn weir_ssr::Fetcher>,
            settings: Arc::clone(&ssr.spec.compose),
            base: url,
            // With `template_file` (the only way here then: `file_page`),
            // the template is no response of `url`.
            template_at_base: ssr.spec.template_file.is_none(),
            headers: ssr.headers.clone(),
            observer: Arc::clone(&self.ssr_observer) as Arc<dyn weir_ssr::Observer>,
        };
        match weir_ssr::compose(template, ctx).await {
            weir_ssr::Page::Composed {
                status,
                headers,
                body,
            } => {
                if let Some(status) = status {
                    parts.status = status;
                }
                crate::ssr::apply_page_fields(&mut parts.headers, headers);
                record.status = parts.status.as_u16();
                self.metrics.ssr_page("composed");
                Ok((ResponseSource::Page(body), false))
            }
            weir_ssr::Page::Redirect { status, headers } => {
                parts.status = status;
                parts.headers.remove(header::CONTENT_TYPE);
                crate::ssr::apply_page_fields(&mut parts.headers, headers);
                record.status = status.as_u16();
                self.metrics.ssr_page("redirect");
                Ok((ResponseSource::Local(once(Bytes::new())), true))
            }
            weir_ssr::Page::Failed { status, reason } => {
                tracing::warn!(target: "weir::ssr", "page failed: {reason}");
                record.reason = Some(reason);
                self.metrics.ssr_page("failed");
                Err(if status == StatusCode::GATEWAY_TIMEOUT {
                    Local {
                        status,
                        body: "504 Gateway Timeout: the page's primary fragment did not answer in time\n",
                        outcome: Outcome::UpstreamTimeout,
                    }
                } else {
                    Local {
                        status: StatusCode::BAD_GATEWAY,
                        body: "502 Bad Gateway: the page's primary fragment failed\n",
                        outcome: Outcome::UpstreamError,
                    }
                })
            }
        }
    }

    /// Sends the background revalidation of a stale entry served under
    /// `stale-while-revalidate`: a `GET` with the head the client's request
    /// would have had upstream (no body), the entry's validators in place
    /// of the client's, through the same pooled, counted upstream client
    /// and counted in flight; its answer is handed to the cache from a
    /// task of its own (see [`cache::Revalidation::finish`]).
    fn revalidate_in_background(
        &self,
        req: Request<Incoming>,
        target: &Target<'_>,
        peer: SocketAddr,
        cache: &Arc<Cache>,
        revalidation: cache::Revalidation,
    ) {
        let (mut parts, body) = req.into_parts();
        drop(body);
        parts.method = Method::GET;
        if self.upstream_head(&mut parts, target, peer).is_err() {
            return;
        }
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(header::TRANSFER_ENCODING);
        revalidation.prepare(&mut parts.headers);
        let upstream_req = Request::from_parts(parts, Either::Right(Empty::new()));
        let in_flight = self
            .metrics
            .upstream_request(target.upstream.url.authority.as_str());
        let client = self.client.clone();
        let cache = Arc::clone(cache);
        let idle = self.settings.body_idle_timeout;
        let via = self.settings.via_pseudonym.clone();
        tokio::spawn(async move {
            let answer = match client.send(upstream_req).await {
                Ok(resp) => {
                    let (mut parts, body) = resp.into_parts();
                    match downstream_head(&mut parts, &via) {
                        Ok(()) => Ok(Response::from_parts(parts, body)),
                        Err(what) => Err(format!("upstream sent {what}")),
                    }
                }
                Err(e) => Err(e.to_string()),
            };
            revalidation.finish(&cache, answer, idle).await;
            drop(in_flight);
        });
    }

    /// A response the cache answers (a hit, a collapsed fill, a refreshed
    /// or stale entry), through the route's transforms and the log stage.
    fn cache_response(
        &self,
        hit: cache::Hit,
        mut record: AccessRecord,
        head_only: bool,
        target: &Target<'_>,
        ask: Option<TransformAsk>,
    ) -> Response<ResponseBody> {
        let cache::Hit {
            mut head,
            body,
            empty,
        } = hit;
        record.status = head.status.as_u16();
        let no_body = head_only || empty;
        let source = if no_body {
            ResponseSource::Local(once(Bytes::new()))
        } else {
            ResponseSource::Cache(body)
        };
        // HEAD and 304 get the head edits of the stages (not the stages),
        // as in `downstream_response`.
        let plan_head = !no_body || head_only || head.status == StatusCode::NOT_MODIFIED;
        let chain = match ask {
            Some(ask) if plan_head => target.route.transforms.plan(
                &ask.method,
                &ask.headers,
                head.status,
                &mut head.headers,
            ),
            _ => ResponseChain::default(),
        };
        let body_log = match target.route.body_log {
            Some(spec) if !no_body => BodyLog::capture(
                spec.response_bytes,
                Direction::Response,
                record.method(),
                &target.path,
            ),
            _ => BodyLog::off(),
        };
        let log = ResponseLog::new(record, Outcome::Ok, !no_body);
        Response::from_parts(
            head,
            SourceBody::new(pull(source, body_log.then(chain).then(log))),
        )
    }

    /// A response Weir makes itself.
    fn local_response(
        &self,
        local: Local,
        mut record: AccessRecord,
        head_only: bool,
    ) -> Response<ResponseBody> {
        record.status = local.status.as_u16();
        let log = ResponseLog::new(record, local.outcome, !head_only);
        let mut resp = Response::new(SourceBody::new(pull(
            ResponseSource::Local(once(Bytes::from_static(local.body.as_bytes()))),
            BodyLog::off().then(ResponseChain::default()).then(log),
        )));
        *resp.status_mut() = local.status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp
    }

    /// Marks that the shutdown grace period is over: requests still running
    /// are being cut, and their access log lines say `outcome=shutdown`.
    pub fn mark_shutdown_cut(&self) {
        self.shutdown_cut.store(true, Ordering::Relaxed);
    }

    fn is_trusted(&self, peer: SocketAddr) -> bool {
        let ip = peer.ip().to_canonical();
        self.settings
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&ip))
    }
}

fn bad_request(body: &'static str) -> Local {
    Local {
        status: StatusCode::BAD_REQUEST,
        body,
        outcome: Outcome::BadRequest,
    }
}

/// Phase 4, the head: hop-by-hop fields removed, `Content-Length`
/// dropped where it cannot be (1xx, 204), `Via` appended.
///
/// # Errors
/// What the upstream sent that Weir cannot forward faithfully: a `101`
/// (Weir never asks to switch protocols, RFC 9110 §15.2.2), or a
/// transfer coding other than `chunked`.
pub(crate) fn downstream_head(
    parts: &mut http::response::Parts,
    via_pseudonym: &str,
) -> Result<(), &'static str> {
    let status = parts.status;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err("101 Switching Protocols that was never asked for");
    }
    if parts
        .headers
        .get(header::TRANSFER_ENCODING)
        .is_some_and(|te| !only_chunked(te))
    {
        return Err("a transfer coding other than chunked");
    }
    headers::remove_hop_by_hop(&mut parts.headers);
    if status.is_informational() || status == StatusCode::NO_CONTENT {
        // RFC 9110 §8.6: these never carry Content-Length.
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    headers::append_via(&mut parts.headers, parts.version, via_pseudonym);
    parts.version = Version::default();
    Ok(())
}

/// Whether a `Transfer-Encoding` value is exactly `chunked`, the one coding
/// Weir decodes (hyper decodes it; anything else would pass through opaque).
fn only_chunked(te: &HeaderValue) -> bool {
    te.to_str().is_ok_and(|v| {
        v.split(',')
            .map(str::trim)
            .all(|c| c.eq_ignore_ascii_case("chunked"))
    })
}

/// The host the client asked for: the absolute-form or HTTP/2 authority,
/// else the single `Host` field (RFC 9112 §3.2).
///
/// # Errors
/// 400 for several `Host` fields, for a missing `Host` on HTTP/1.1, and for
/// a host that is not a valid `host[:port]` (user info included).
fn request_host(req: &Request<Incoming>) -> Result<Option<String>, Local> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host_field = hosts.next();
    if hosts.next().is_some() {
        return Err(bad_request("400 Bad Request: more than one Host field\n"));
    }
    let raw = match (req.uri().authority(), host_field) {
        // RFC 9112 §3.2.2: an absolute-form target's authority wins over Host.
        (Some(a), _) => a.as_str().to_owned(),
        (None, Some(h)) => match h.to_str() {
            Ok(h) => h.to_owned(),
            Err(_) => return Err(bad_request("400 Bad Request: invalid Host\n")),
        },
        (None, None) if req.version() == Version::HTTP_11 => {
            return Err(bad_request("400 Bad Request: missing Host\n"));
        }
        (None, None) => return Ok(None),
    };
    let host = strip_port(&raw);
    // A port, if written, must be a number that fits.
    let port_ok = host.len() == raw.len() || raw[host.len() + 1..].parse::<u16>().is_ok();
    let valid = !raw.is_empty()
        && port_ok
        && !raw.contains(['@', ' ', ',', '/', '?', '#'])
        && raw.parse::<http::uri::Authority>().is_ok();
    if !valid {
        return Err(bad_request("400 Bad Request: invalid Host\n"));
    }
    Ok(Some(raw))
}

/// A copy of the upstream request `parts` (headers already rewritten),
/// aimed at mirror `m`, with `body` (a secondary branch of the client's
/// body) or none.
fn mirror_request(
    parts: &http::request::Parts,
    m: &Mirror,
    forward_path: &str,
    body: Option<RequestSource>,
) -> Request<RequestBody> {
    let mut path = String::with_capacity(m.url.base_path.len() + forward_path.len() + 32);
    path.push_str(&m.url.base_path);
    path.push_str(forward_path);
    if let Some(q) = parts.uri.query() {
        path.push('?');
        path.push_str(q);
    }
    let uri = PathAndQuery::try_from(path).ok().and_then(|pq| {
        Uri::builder()
            .scheme(m.url.scheme.clone())
            .authority(m.url.authority.clone())
            .path_and_query(pq)
            .build()
            .ok()
    });
    let body = match body {
        Some(source) => Either::Left(SourceBody::new(pull(
            source,
            BodyLog::off().then(RequestTally::new(Arc::default())),
        ))),
        None => Either::Right(Empty::new()),
    };
    let mut req = Request::new(body);
    *req.method_mut() = parts.method.clone();
    // The primary's URI parts are valid, so this only fails on a path the
    // primary request could not have had either.
    *req.uri_mut() = uri.unwrap_or_else(|| parts.uri.clone());
    *req.headers_mut() = parts.headers.clone();
    req
}
