//! The upgrade phase: a request that asks to switch protocols, on a route
//! that tunnels that protocol (`upgrade = ["websocket"]`), becomes a
//! tunnel ([`crate::tunnel`]).
//!
//! - HTTP/1.1 `Upgrade` (RFC 9110 §7.8, RFC 6455 §4): the request goes
//!   upstream with `Connection: upgrade` and the one `Upgrade` protocol the
//!   route allows (its `Sec-WebSocket-*` fields as they came), on a
//!   connection of its own. Only an upstream `101` gets the client a `101`
//!   (with the upstream's `Upgrade`, `Sec-WebSocket-Accept`, ...); any
//!   other answer is forwarded as a plain response and nothing is switched.
//! - HTTP/2 extended CONNECT with `:protocol = websocket` (RFC 8441 §4):
//!   Weir makes the RFC 6455 handshake upstream itself (a `GET` with
//!   `Upgrade: websocket`, a fresh `Sec-WebSocket-Key`,
//!   `Sec-WebSocket-Version: 13`, the client's `Sec-WebSocket-Protocol`
//!   and `-Extensions`); the upstream's `101` becomes a `200` without
//!   `Sec-WebSocket-Accept` (RFC 8441 §5), and the stream carries the tunnel.
//!
//! The request's access log line is written when the tunnel ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;
use weir_stream::body::SourceBody;
use weir_stream::{TransformExt as _, pull};
use weir_transform::chain::ResponseChain;

use super::context::Exchange;
use super::local::Local;
use super::send::attempt_result;
use crate::access_log::{AccessRecord, ResponseLog};
use crate::balance::AttemptResult;
use crate::body::response::{ResponseBody, ResponseSource};
use crate::body_log::BodyLog;
use crate::headers::{self, Via};
use crate::io::TunnelOnConn;
use crate::metrics::InFlight;
use crate::outcome::Outcome;
use crate::route::Route;
use crate::tunnel::{self, Side, TunnelEnd};
use crate::upstream::PooledBody;

/// `Sec-WebSocket-Key` (RFC 6455 §11.3.1).
const SEC_WEBSOCKET_KEY: HeaderName = HeaderName::from_static("sec-websocket-key");
/// `Sec-WebSocket-Version` (RFC 6455 §11.3.5).
const SEC_WEBSOCKET_VERSION: HeaderName = HeaderName::from_static("sec-websocket-version");
/// `Sec-WebSocket-Accept` (RFC 6455 §11.3.3).
const SEC_WEBSOCKET_ACCEPT: HeaderName = HeaderName::from_static("sec-websocket-accept");

/// The protocol RFC 8441 extended CONNECT may ask for through Weir.
const WEBSOCKET: &str = "websocket";

/// What a request asks to switch to, on a route that tunnels it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ask {
    /// HTTP/1.1 `Upgrade`: the protocol as the client wrote it.
    Upgrade(String),
    /// HTTP/2 extended CONNECT with `:protocol = websocket`.
    ExtendedConnect,
}

impl Ask {
    fn protocol(&self) -> &str {
        match self {
            Ask::Upgrade(p) => p,
            Ask::ExtendedConnect => WEBSOCKET,
        }
    }
}

/// The tunnel `req` asks for that `route` allows. `None`: it asks for
/// none, or for one the route does not tunnel (then `Upgrade` is removed
/// like any hop-by-hop field), or it has a body (not switched).
pub(crate) fn ask<B: http_body::Body>(route: &Route, req: &Request<B>) -> Option<Ask> {
    if req.method() == Method::CONNECT {
        let protocol = req.extensions().get::<hyper::ext::Protocol>()?;
        let websocket = protocol.as_str().eq_ignore_ascii_case(WEBSOCKET);
        return (websocket && route.allows_upgrade(WEBSOCKET)).then_some(Ask::ExtendedConnect);
    }
    if req.version() != Version::HTTP_11 || !req.body().is_end_stream() {
        return None;
    }
    headers::requested_upgrade(req.headers(), |name| route.allows_upgrade(name))
        .map(|p| Ask::Upgrade(p.to_owned()))
}

/// The answer to an extended CONNECT for a protocol its route does not tunnel.
pub(crate) const NOT_TUNNELLED: Local = Local::new(
    StatusCode::NOT_IMPLEMENTED,
    "501 Not Implemented: this route does not tunnel that protocol\n",
    Outcome::BadRequest,
);

impl Exchange<'_> {
    /// Sends the handshake `parts` to `server`, and, when it could not
    /// connect (nothing was sent, so nothing reached the client either),
    /// to other servers of `group` as far as its retry settings and budget
    /// allow, like any request none of which was written.
    async fn handshake(
        &mut self,
        group: &Arc<crate::balance::UpstreamGroup>,
        mut server: usize,
        parts: http::request::Parts,
        set_host: bool,
    ) -> Result<Response<Incoming>, crate::upstream::UpstreamError> {
        group.deposit();
        let head = (
            parts.method.clone(),
            parts.uri.clone(),
            parts.version,
            parts.headers.clone(),
        );
        let mut req = Request::from_parts(parts, Either::Right(Empty::new()));
        let mut tried = Vec::with_capacity(2);
        loop {
            let s = &group.servers[server];
            tried.push(server);
            self.server = server;
            self.record.attempts = u8::try_from(tried.len()).unwrap_or(u8::MAX);
            self.record.server = Some(Arc::clone(&s.authority));
            self.record.hold_in_flight(InFlight::hold(&s.in_flight));
            let err = match self.proxy.client.send_upgrade(&s.pool, req, set_host).await {
                Ok(resp) => return Ok(resp),
                Err(err) => err,
            };
            let result = attempt_result(&err);
            group.record(server, result);
            let may_retry = result == AttemptResult::ConnectFailed
                && group.can_retry
                && tried.len() < group.retry.attempts as usize;
            let Some(next) = may_retry
                .then(|| self.pick_server(&head.3, &tried))
                .flatten()
            else {
                return Err(err);
            };
            if !group.withdraw() {
                group.retry_budget_exhausted.inc();
                self.record.retry_budget_exhausted = true;
                return Err(err);
            }
            group.retried.inc();
            self.record.note_retry(&s.authority, result.as_str());
            let mut again = Request::new(Either::Right(Empty::new()));
            *again.method_mut() = head.0.clone();
            *again.uri_mut() = head.1.clone();
            *again.version_mut() = head.2;
            *again.headers_mut() = head.3.clone();
            req = again;
            server = next;
        }
    }

    /// The upgrade phase: the handshake upstream on a connection of its
    /// own, then, on a `101`, the client's `101` (or `200`) and a task
    /// that runs the tunnel and logs the exchange when it ends.
    pub(crate) async fn tunnel(
        mut self,
        mut req: Request<Incoming>,
        ask: Ask,
    ) -> Response<ResponseBody> {
        self.cache = None;
        self.ssr = None;
        let client_side = hyper::upgrade::on(&mut req);
        let (mut parts, _) = req.into_parts();
        let Some(server) = self.pick_server(&parts.headers, &[]) else {
            let local = self.no_server();
            return self.answer(local);
        };
        self.server = server;
        if ask == Ask::ExtendedConnect {
            parts.method = Method::GET;
        }
        if let Err(local) = self.upstream_head(&mut parts, server) {
            return self.answer(local);
        }
        parts.headers.remove(header::TE);
        headers::set_upgrade(&mut parts.headers, ask.protocol());
        if ask == Ask::ExtendedConnect {
            let key = match headers::websocket_key() {
                Ok(key) => key,
                Err(e) => {
                    self.record.reason = Some(format!("no random Sec-WebSocket-Key: {e}"));
                    return self.answer(Local::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "500 Internal Server Error\n",
                        Outcome::UpstreamError,
                    ));
                }
            };
            parts.headers.insert(SEC_WEBSOCKET_KEY, key);
            parts
                .headers
                .insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        let group = Arc::clone(&self.target.upstream.group);
        let set_host = !parts.headers.contains_key(header::HOST);
        let mut resp = match self.handshake(&group, server, parts, set_host).await {
            Ok(resp) => resp,
            Err(err) => {
                let local = self.upstream_failure(&err);
                return self.answer(local);
            }
        };
        let server = self.server;
        let status = resp.status();
        if status.is_server_error() {
            group.record_server_error(server, status);
        } else {
            group.record(server, AttemptResult::Ok);
        }
        if status != StatusCode::SWITCHING_PROTOCOLS {
            if ask == Ask::ExtendedConnect && status.is_success() {
                // A 2xx would open the client's tunnel (RFC 8441 §5) with
                // nothing behind it.
                self.record.reason = Some(format!(
                    "upstream answered {status} to a WebSocket handshake"
                ));
                return self.answer(Local::bad_gateway("502 Bad Gateway\n"));
            }
            return self.upstream_response(resp.map(PooledBody::unpooled)).await;
        }
        let upstream_side = hyper::upgrade::on(&mut resp);
        let (mut head, _) = resp.into_parts();
        if let Err(what) = switched_head(&mut head, &self.proxy.via, &ask) {
            tracing::warn!(target: "weir::proxy", upstream = %self.target.upstream.name, "upstream sent {what}");
            self.record.reason = Some(format!("upstream sent {what}"));
            return self.answer(Local::bad_gateway("502 Bad Gateway\n"));
        }
        let mut record = self.record;
        record.status = head.status.as_u16();
        record.upgraded = true;
        let sides = Sides {
            client: client_side,
            upstream: upstream_side,
            idle: self.proxy.settings.upgrade_idle_timeout,
            close: self.proxy.tunnels.admit(),
            _on_conn: self.downstream.tunnels.open(),
        };
        tokio::spawn(sides.run(record));
        Response::from_parts(
            head,
            SourceBody::new(pull(
                ResponseSource::empty(),
                BodyLog::off()
                    .then(ResponseChain::default())
                    .then(ResponseLog::detached()),
            )),
        )
    }
}

/// The upstream's `101` head as the client gets it: hop-by-hop fields
/// removed, then `Connection: upgrade` and the upstream's `Upgrade` for an
/// HTTP/1.1 client; for an extended CONNECT, `200` without
/// `Sec-WebSocket-Accept` (RFC 8441 §5). Weir's `Via` is appended.
///
/// # Errors
/// A `101` to another protocol than the one asked for (RFC 9110 §15.2.2:
/// the server names the protocol it switches to in `Upgrade`).
fn switched_head(
    parts: &mut http::response::Parts,
    via: &Via,
    ask: &Ask,
) -> Result<(), &'static str> {
    let asked = headers::upgrade_name(ask.protocol());
    let upgrade = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let same = upgrade
        .as_deref()
        .is_some_and(|u| headers::upgrade_name(u).eq_ignore_ascii_case(asked));
    if !same {
        return Err("a 101 Switching Protocols to another protocol than asked");
    }
    headers::remove_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::CONTENT_LENGTH);
    via.append(&mut parts.headers, parts.version);
    parts.version = Version::default();
    match (ask, upgrade) {
        (Ask::Upgrade(_), Some(upgrade)) => headers::set_upgrade(&mut parts.headers, &upgrade),
        _ => {
            parts.status = StatusCode::OK;
            parts.headers.remove(SEC_WEBSOCKET_ACCEPT);
        }
    }
    Ok(())
}

/// Both ends of a tunnel about to open, and what it runs under.
struct Sides {
    client: OnUpgrade,
    upstream: OnUpgrade,
    idle: Duration,
    close: watch::Receiver<bool>,
    /// Keeps the client connection's own idle deadline off.
    _on_conn: TunnelOnConn,
}

impl Sides {
    /// Waits for both sides to switch, runs the tunnel, and writes the
    /// access log line when it ends.
    async fn run(self, mut record: AccessRecord) {
        let (client, upstream) = match tokio::join!(self.client, self.upstream) {
            (Ok(c), Ok(u)) => (c, u),
            (Err(e), _) => {
                record.reason = Some(format!("the client side did not switch: {e}"));
                record.emit(Outcome::ClientAborted, 0);
                return;
            }
            (_, Err(e)) => {
                record.reason = Some(format!("the upstream side did not switch: {e}"));
                record.emit(Outcome::UpstreamError, 0);
                return;
            }
        };
        let stats = tunnel::run(
            TokioIo::new(client),
            TokioIo::new(upstream),
            self.idle,
            self.close,
        )
        .await;
        record
            .counters()
            .bytes_in
            .fetch_add(stats.bytes_in, Ordering::Relaxed);
        let outcome = match stats.end {
            TunnelEnd::Closed => {
                record.reason = Some("tunnel closed".to_owned());
                Outcome::Ok
            }
            TunnelEnd::IdleTimeout { ms } => {
                record.reason = Some(format!("tunnel idle: no byte moved for {ms} ms"));
                Outcome::Ok
            }
            TunnelEnd::Shutdown => Outcome::Shutdown,
            TunnelEnd::Failed {
                side: Side::Client,
                error,
            } => {
                // The client reset or dropped its connection: not the
                // upstream's failure.
                record.reason = Some(format!("tunnel: client side: {error}"));
                Outcome::ClientAborted
            }
            TunnelEnd::Failed {
                side: Side::Upstream,
                error,
            } => {
                record.reason = Some(format!("tunnel: upstream side: {error}"));
                Outcome::UpstreamError
            }
        };
        record.emit(outcome, stats.bytes_out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(upgrade: &[&str]) -> Route {
        let config = crate::config::Config::parse(
            &format!(
                "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n[[route]]\nupstream = \"a\"\nupgrade = {upgrade:?}\n"
            ),
            "t.toml",
            std::path::Path::new("."),
        )
        .expect("valid");
        crate::route::RouteTable::new(&config.routes)
            .find(None, "/")
            .expect("route")
            .clone()
    }

    fn upgrade_request(fields: &[(&str, &str)]) -> Request<Empty<bytes::Bytes>> {
        let mut b = Request::builder().uri("/chat").header("host", "a");
        for (k, v) in fields {
            b = b.header(*k, *v);
        }
        b.body(Empty::new()).expect("request")
    }

    #[test]
    fn only_an_allowed_protocol_with_connection_upgrade_is_tunnelled() {
        let ws = route(&["websocket"]);
        let asked = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "h2c, WebSocket"),
        ];
        assert_eq!(
            ask(&ws, &upgrade_request(&asked)),
            Some(Ask::Upgrade("WebSocket".to_owned()))
        );
        assert_eq!(
            ask(&ws, &upgrade_request(&[("upgrade", "websocket")])),
            None
        );
        assert_eq!(ask(&route(&[]), &upgrade_request(&asked)), None);
        let mut h2 = upgrade_request(&[]);
        *h2.method_mut() = Method::CONNECT;
        h2.extensions_mut()
            .insert(hyper::ext::Protocol::from_static("websocket"));
        assert_eq!(ask(&ws, &h2), Some(Ask::ExtendedConnect));
        assert_eq!(ask(&route(&["tcp"]), &h2), None);
    }

    #[test]
    fn a_switched_head_keeps_the_handshake_and_rfc_8441_gets_200_without_accept() {
        let head = || {
            let (parts, ()) = Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
                .header("sec-websocket-protocol", "chat")
                .body(())
                .expect("response")
                .into_parts();
            parts
        };
        let via = Via::new("weir");
        let mut h1 = head();
        switched_head(&mut h1, &via, &Ask::Upgrade("websocket".into())).expect("switched");
        assert_eq!(h1.status, StatusCode::SWITCHING_PROTOCOLS);
        for (k, v) in [
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
            ("sec-websocket-protocol", "chat"),
            ("via", "1.1 weir"),
        ] {
            assert_eq!(
                h1.headers.get(k).and_then(|v| v.to_str().ok()),
                Some(v),
                "{k}"
            );
        }
        let mut h2 = head();
        switched_head(&mut h2, &via, &Ask::ExtendedConnect).expect("switched");
        assert_eq!(h2.status, StatusCode::OK);
        for gone in ["connection", "upgrade", "sec-websocket-accept"] {
            assert!(h2.headers.get(gone).is_none(), "{gone}");
        }
        let mut other = head();
        assert!(switched_head(&mut other, &via, &Ask::Upgrade("h2c".into())).is_err());
    }
}
