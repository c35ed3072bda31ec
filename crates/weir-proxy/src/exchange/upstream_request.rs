//! The upstream request phase: the target URI and the request fields as
//! sent upstream, and the client's body streamed through (with a mirror
//! copy split off it when the route mirrors).

use http::header::{self, HeaderValue};
use http::{Method, Request, StatusCode, Version};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use weir_stream::body::HttpBodySource;
use weir_stream::{TransformExt as _, pull};

use super::context::Exchange;
use super::local::Local;
use super::mirror_hook;
use crate::access_log::RequestTally;
use crate::body::idle::IdleTimeout;
use crate::body::limits::{BodyBounds, ClientLimits};
use crate::body::request::{Outgoing, RequestBody, RequestSource};
use crate::body_log::{BodyLog, Direction};
use crate::config::HostHeader;
use crate::headers;
use crate::outcome::Outcome;
use crate::proxy::Proxy;

impl Exchange<'_> {
    /// The upstream request: a server of the upstream picked (503 when none
    /// is available), [`Exchange::upstream_head`], then the body:
    /// the client's, read with `body_idle_timeout`, through the body log
    /// and the byte tally; shared with a mirror copy when the route has one.
    ///
    /// # Errors
    /// 400 when the rewritten target is not a valid URI.
    pub(crate) fn upstream_request(
        &mut self,
        req: Request<Incoming>,
    ) -> Result<Request<RequestBody>, Local> {
        let (mut parts, body) = req.into_parts();
        self.body_within_limit(&parts.headers)?;
        let Some(server) = self.pick_server(&parts.headers, &[]) else {
            return Err(self.no_server());
        };
        self.server = server;
        self.upstream_head(&mut parts, server)?;
        if let Some(ssr) = &mut self.ssr {
            ssr.template_url = Some(parts.uri.to_string());
        }
        let mut mirror = mirror_hook::admit(self.proxy, self.target.route);
        let source = if http_body::Body::is_end_stream(&body) {
            None
        } else {
            if parts.version != Version::HTTP_2
                && !parts.headers.contains_key(header::CONTENT_LENGTH)
            {
                // Say so explicitly: for GET and HEAD, hyper would otherwise
                // assume there is no body and drop it.
                parts.headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
            }
            let client = ClientLimits::new(
                IdleTimeout::new(
                    HttpBodySource::new(body),
                    self.proxy.settings.body_idle_timeout,
                ),
                self.body_bounds(),
            );
            Some(match &mut mirror {
                Some(m) => m.split(client),
                None => RequestSource::Direct(client),
            })
        };
        let body = match source {
            Some(source) => {
                let body_log = match self.target.route.body_log {
                    Some(spec) => BodyLog::capture(
                        spec.request_bytes,
                        Direction::Request,
                        &parts.method,
                        &self.target.path,
                    ),
                    None => BodyLog::off(),
                };
                let tally = RequestTally::new(self.record.counters().clone());
                let pipeline = pull(source, body_log.then(tally));
                let stop = weir_stream::CancelToken::new();
                self.upload_stop = Some(stop.clone());
                match self.retry_body_cap(&parts) {
                    Some(cap) => {
                        let (body, tape) = Outgoing::taped(pipeline, cap, stop);
                        self.tape = Some(tape);
                        body
                    }
                    None => Outgoing::once(pipeline, stop),
                }
            }
            None => Either::Right(Empty::new()),
        };
        if let Some(m) = mirror {
            m.send(&parts, self.target.forward_path(), self.proxy);
        }
        Ok(Request::from_parts(parts, body))
    }

    /// The bounds of the client's body on this route.
    fn body_bounds(&self) -> BodyBounds {
        let limits = &self.proxy.settings.limits;
        BodyBounds {
            max_bytes: self.target.route.max_body_bytes,
            min_rate: limits.body_min_rate,
            grace: limits.body_rate_grace,
        }
    }

    /// A `413` for a body whose `Content-Length` is over the route's
    /// `max_request_body_bytes` (RFC 9110 §15.5.14), before anything goes
    /// upstream. A chunked body is held to the limit as it streams.
    fn body_within_limit(&mut self, headers: &http::HeaderMap) -> Result<(), Local> {
        let Some(limit) = self.target.route.max_body_bytes else {
            return Ok(());
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        match declared {
            Some(n) if n > limit => {
                let reason = format!("Content-Length {n} over max_request_body_bytes = {limit}");
                tracing::debug!(target: "weir::proxy", "{reason}");
                self.record.reason = Some(reason);
                Err(Local::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "413 Content Too Large: the request body is over this route's limit\n",
                    Outcome::BadRequest,
                ))
            }
            _ => Ok(()),
        }
    }

    /// The `503` of a request whose upstream has no server available.
    pub(crate) fn no_server(&mut self) -> Local {
        let group = &self.target.upstream.group;
        let reason = format!("no server of upstream {:?} is available", group.name);
        tracing::warn!(target: "weir::proxy", upstream = %group.name, status = 503, "{reason}");
        self.record.reason = Some(reason);
        Local::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "503 Service Unavailable: no upstream server is available\n",
            Outcome::UpstreamError,
        )
    }

    /// The retry buffer a request body gets, in bytes: on an upstream that
    /// can retry, for an idempotent method (RFC 9110 §9.2.2) or any request
    /// sent over HTTP/2 (a refused stream is retried whatever its method), when
    /// `retry_body_bytes` is not 0 and a declared `Content-Length` fits in
    /// it. `None`: the body is sent once, and the request is retried only
    /// when none of it was written.
    fn retry_body_cap(&self, parts: &http::request::Parts) -> Option<u64> {
        let group = &self.target.upstream.group;
        let cap = group.retry.body_bytes;
        let declared = parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        (group.can_retry
            && cap > 0
            && (parts.method.is_idempotent() || parts.version == Version::HTTP_2)
            && declared.is_none_or(|n| n <= cap))
        .then_some(cap)
    }

    /// The upstream request's head: the target (base path, prefix strip,
    /// query) and the fields as sent upstream: hop-by-hop removed (`TE:
    /// trailers` kept when the client takes trailers), `Host` by the route's
    /// `host_header`, `X-Forwarded-*`, `Via`, `Accept-Encoding: identity`
    /// for stages that read the body, no `Range` or validators on SSR
    /// routes, `Connection: close` for `HEAD` over HTTP/1.1. The version is
    /// the one the upstream's `protocol` picks for this request: HTTP/2 or
    /// HTTP/1.1.
    ///
    /// # Errors
    /// 400 when the rewritten target is not a valid URI.
    pub(crate) fn upstream_head(
        &self,
        parts: &mut http::request::Parts,
        server: usize,
    ) -> Result<(), Local> {
        let target = &self.target;
        let uri = target.upstream.group.servers[server]
            .url
            .request_uri(target.forward_path(), parts.uri.query())
            .ok_or(Local::bad_request(
                "400 Bad Request: invalid request target\n",
            ))?;
        let received = parts.version;
        let h2 = target
            .upstream
            .group
            .protocol
            .speaks_h2(received, self.grpc);
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
        let mut peer = Proxy::forwarded_peer(self.downstream, target.client_host.as_deref());
        // A fleet peer proved itself with the secret: its X-Forwarded-*
        // fields (the client's address, https) are kept as a trusted
        // proxy's would be.
        peer.trusted |= self.from_peer;
        headers::set_forwarded(headers, peer);
        self.proxy.via.append(headers, received);
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
        parts.version = if h2 {
            Version::HTTP_2
        } else {
            Version::HTTP_11
        };
        if parts.method == Method::HEAD && !h2 {
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
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use http::{HeaderMap, Request};

    use super::super::request;
    use super::*;
    use crate::access_log::AccessRecord;
    use crate::config::Config;
    use crate::proxy::Proxy;

    const CONFIG: &str = r#"
[server]
trusted_proxies = ["10.0.0.0/8"]

[[upstream]]
name = "app"
url = "http://127.0.0.1:3000/base"

[[upstream]]
name = "pages"
url = "http://127.0.0.1:3001"

[[route]]
path_prefix = "/app"
strip_prefix = true
upstream = "app"
host_header = "upstream"

[[route]]
path_prefix = "/page"
upstream = "pages"

[route.ssr]

[[route]]
path_prefix = "/"
upstream = "app"
transforms = ["html-rewrite"]
"#;

    fn proxy() -> Arc<Proxy> {
        let config = Config::parse(CONFIG, "t.toml", std::path::Path::new(".")).expect("valid");
        Proxy::new(&config).expect("proxy")
    }

    /// The head `req` (from `peer`) goes upstream with.
    fn upstream_head(req: Request<()>, peer: &str) -> http::request::Parts {
        let proxy = proxy();
        let peer: SocketAddr = peer.parse().expect("peer");
        let target = request::route(&proxy.routes, &proxy.upstreams, &req).expect("routed");
        let record = AccessRecord::new(&req, peer, Arc::new(AtomicBool::new(false)));
        let downstream = proxy.downstream(peer, false);
        let exchange = Exchange::new(&proxy, target, &req, &downstream, record);
        let (mut parts, ()) = req.into_parts();
        exchange.upstream_head(&mut parts, 0).expect("valid head");
        parts
    }

    fn get(uri: &str, fields: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().uri(uri).header("host", "example.com");
        for (k, v) in fields {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request")
    }

    fn all(h: &HeaderMap, name: &str) -> Vec<String> {
        h.get_all(name)
            .iter()
            .map(|v| v.to_str().expect("ASCII").to_owned())
            .collect()
    }

    #[tokio::test]
    async fn the_target_gets_the_base_path_the_stripped_path_and_the_query() {
        let head = upstream_head(get("/app/users?x=1&y", &[]), "192.0.2.1:5000");
        assert_eq!(head.uri, "http://127.0.0.1:3000/base/users?x=1&y");
        assert_eq!(head.version, Version::HTTP_11);
        // host_header = "upstream": hyper sets Host from the URI.
        assert!(head.headers.get(header::HOST).is_none());
        let kept = upstream_head(get("/other", &[]), "192.0.2.1:5000");
        assert_eq!(kept.uri, "http://127.0.0.1:3000/base/other");
        assert_eq!(all(&kept.headers, "host"), ["example.com"]);
    }

    #[tokio::test]
    async fn hop_by_hop_fields_go_and_te_trailers_stays() {
        let head = upstream_head(
            get(
                "/app/x",
                &[
                    ("connection", "keep-alive, x-secret"),
                    ("x-secret", "1"),
                    ("keep-alive", "timeout=5"),
                    ("upgrade", "websocket"),
                    ("te", "trailers"),
                    ("x-kept", "yes"),
                ],
            ),
            "192.0.2.1:5000",
        );
        for gone in ["connection", "x-secret", "keep-alive", "upgrade"] {
            assert!(head.headers.get(gone).is_none(), "{gone} forwarded");
        }
        assert_eq!(all(&head.headers, "te"), ["trailers"]);
        assert_eq!(all(&head.headers, "x-kept"), ["yes"]);
        assert_eq!(all(&head.headers, "via"), ["1.1 weir"]);
    }

    #[tokio::test]
    async fn forwarded_fields_are_replaced_for_strangers_and_appended_for_trusted_peers() {
        let fields = [
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=203.0.113.9"),
        ];
        let stranger = upstream_head(get("/app/x", &fields), "192.0.2.1:5000");
        assert_eq!(all(&stranger.headers, "x-forwarded-for"), ["192.0.2.1"]);
        assert_eq!(all(&stranger.headers, "x-forwarded-host"), ["example.com"]);
        assert!(stranger.headers.get("forwarded").is_none());
        let trusted = upstream_head(get("/app/x", &fields), "10.1.2.3:5000");
        assert_eq!(
            all(&trusted.headers, "x-forwarded-for"),
            ["203.0.113.9, 10.1.2.3"]
        );
    }

    #[tokio::test]
    async fn an_http2_request_gets_te_trailers_and_one_cookie_line() {
        let mut req = get("/app/x", &[("cookie", "a=1"), ("cookie", "b=2")]);
        *req.version_mut() = Version::HTTP_2;
        let head = upstream_head(req, "192.0.2.1:5000");
        assert_eq!(all(&head.headers, "te"), ["trailers"]);
        assert_eq!(all(&head.headers, "cookie"), ["a=1; b=2"]);
        assert_eq!(all(&head.headers, "via"), ["2 weir"]);
    }

    #[tokio::test]
    async fn stages_that_read_the_body_and_ssr_routes_ask_for_it_whole_and_unencoded() {
        let fields = [
            ("accept-encoding", "gzip"),
            ("range", "bytes=0-9"),
            ("if-none-match", "\"a\""),
            ("if-modified-since", "Tue, 01 Dec 2026 00:00:00 GMT"),
        ];
        let ssr = upstream_head(get("/page/x", &fields), "192.0.2.1:5000");
        assert_eq!(all(&ssr.headers, "accept-encoding"), ["identity"]);
        for gone in ["range", "if-none-match", "if-modified-since"] {
            assert!(
                ssr.headers.get(gone).is_none(),
                "{gone} forwarded on an SSR route"
            );
        }
        let rewrite = upstream_head(get("/other", &fields), "192.0.2.1:5000");
        assert_eq!(all(&rewrite.headers, "accept-encoding"), ["identity"]);
        assert_eq!(all(&rewrite.headers, "range"), ["bytes=0-9"]);
        let plain = upstream_head(get("/app/x", &fields), "192.0.2.1:5000");
        assert_eq!(all(&plain.headers, "accept-encoding"), ["gzip"]);
    }

    #[tokio::test]
    async fn head_closes_the_upstream_connection() {
        let mut req = get("/app/x", &[]);
        *req.method_mut() = Method::HEAD;
        let head = upstream_head(req, "192.0.2.1:5000");
        assert_eq!(all(&head.headers, "connection"), ["close"]);
    }
}
