//! The upstream request phase: the target URI and the request fields as
//! sent upstream, and the client's body streamed through (with a mirror
//! copy split off it when the route mirrors).

use http::header::{self, HeaderValue};
use http::{Method, Request, Version};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use weir_stream::body::{HttpBodySource, SourceBody};
use weir_stream::{TransformExt as _, pull};

use super::Exchange;
use super::local::Local;
use super::mirror;
use crate::access_log::RequestTally;
use crate::body::idle::IdleTimeout;
use crate::body::request::{RequestBody, RequestSource};
use crate::body_log::{BodyLog, Direction};
use crate::config::HostHeader;
use crate::headers::{self, Peer};

impl Exchange<'_> {
    /// The upstream request: [`Exchange::upstream_head`], then the body:
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
        self.upstream_head(&mut parts)?;
        if let Some(ssr) = &mut self.ssr {
            ssr.template_url = Some(parts.uri.to_string());
        }
        let mut mirror = mirror::admit(self.proxy, self.target.route);
        let source = if http_body::Body::is_end_stream(&body) {
            None
        } else {
            if !parts.headers.contains_key(header::CONTENT_LENGTH) {
                // Say so explicitly: for GET and HEAD, hyper would otherwise
                // assume there is no body and drop it.
                parts.headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
            }
            let client = IdleTimeout::new(
                HttpBodySource::new(body),
                self.proxy.settings.body_idle_timeout,
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
                Either::Left(SourceBody::new(pull(source, body_log.then(tally))))
            }
            None => Either::Right(Empty::new()),
        };
        if let Some(m) = mirror {
            m.send(&parts, self.target.forward_path(), self.proxy);
        }
        Ok(Request::from_parts(parts, body))
    }

    /// The upstream request's head: the target (base path, prefix strip,
    /// query) and the fields as sent upstream: hop-by-hop removed (`TE:
    /// trailers` kept when the client takes trailers), `Host` by the route's
    /// `host_header`, `X-Forwarded-*`, `Via`, `Accept-Encoding: identity`
    /// for stages that read the body, no `Range` or validators on SSR
    /// routes, `Connection: close` for `HEAD`.
    ///
    /// # Errors
    /// 400 when the rewritten target is not a valid URI.
    pub(crate) fn upstream_head(&self, parts: &mut http::request::Parts) -> Result<(), Local> {
        let target = &self.target;
        let uri = target
            .upstream
            .url
            .request_uri(target.forward_path(), parts.uri.query())
            .ok_or(Local::bad_request(
                "400 Bad Request: invalid request target\n",
            ))?;
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
        headers::set_forwarded(headers, self.forwarded_peer());
        headers::append_via(headers, received, &self.proxy.settings.via_pseudonym);
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

    /// The downstream peer as `X-Forwarded-*` describe it.
    pub(crate) fn forwarded_peer(&self) -> Peer<'_> {
        Peer {
            ip: self.peer.ip(),
            trusted: self.proxy.is_trusted(self.peer),
            proto: "http",
            host: self.target.client_host.as_deref(),
        }
    }
}
