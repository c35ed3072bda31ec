//! The admin listener: `GET /metrics` (the proxy's [`Metrics`], OpenMetrics
//! text), `GET /healthz` and `POST /reload`, over HTTP/1.1 on `[admin]
//! address` (default `127.0.0.1:9901`, loopback only unless the config
//! allows otherwise).
//!
//! | request | answer |
//! |---|---|
//! | `GET /metrics` | 200, [`crate::metrics::CONTENT_TYPE`] |
//! | `GET /healthz`, `GET /readyz` | readiness: 200 `ok\n`; 503 `shutting down\n` once shutdown began |
//! | `GET /livez` | liveness: 200 `alive\n`, also while draining (a draining process is not stuck; restarting it would cut its requests) |
//! | `POST /reload` | 200 and a one-line summary; 400 (config refused) or 500 (a new listener cannot bind) and the error; 404 when reloads are off |
//! | another path | 404 |
//! | another method on those paths | 405, `Allow: GET, HEAD` (`Allow: POST` for `/reload`) |
//!
//! `HEAD` is answered as `GET` without the body (RFC 9110 §9.3.2).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::reload::Reloader;

/// How long an admin client may take to send a request head, in seconds.
const HEADER_READ_TIMEOUT_SECS: u64 = 10;

/// What the admin handlers read: the metrics and whether shutdown began.
#[derive(Debug)]
pub struct AdminState {
    metrics: Arc<Metrics>,
    draining: AtomicBool,
    /// What `POST /reload` runs; unset: reloads are off (404).
    reloader: OnceLock<Arc<Reloader>>,
}

impl AdminState {
    /// State serving `metrics`, not draining.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        AdminState {
            metrics,
            draining: AtomicBool::new(false),
            reloader: OnceLock::new(),
        }
    }

    /// Turns `POST /reload` on (the first call wins).
    pub fn set_reloader(&self, reloader: Arc<Reloader>) {
        let _ = self.reloader.set(reloader);
    }

    /// From now on `/healthz` and `/readyz` answer 503, so load balancers
    /// (and a Kubernetes readiness probe) stop sending traffic while
    /// in-flight requests drain; `/livez` stays 200.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}

/// The answer to one admin request (see the module docs for the table).
/// A `POST /reload` is run by [`serve`], which awaits the reload.
pub fn respond<B>(req: &Request<B>, state: &AdminState) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path == "/reload" {
        return reload_refused(req, state).unwrap_or_else(|| {
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 Internal Server Error: POST /reload is answered asynchronously\n".into(),
            )
        });
    }
    if !matches!(path, "/metrics" | "/healthz" | "/readyz" | "/livez") {
        return text(StatusCode::NOT_FOUND, "404 Not Found\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "405 Method Not Allowed\n".into(),
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    if path == "/livez" {
        return text(StatusCode::OK, "alive\n".into());
    }
    if path == "/healthz" || path == "/readyz" {
        return if state.draining.load(Ordering::Relaxed) {
            text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into())
        } else {
            text(StatusCode::OK, "ok\n".into())
        };
    }
    match state.metrics.encode() {
        Ok(body) => {
            let mut resp = Response::new(Full::new(Bytes::from(body)));
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            resp
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("500 Internal Server Error: cannot encode metrics: {e}\n"),
        ),
    }
}

/// The answer to a `/reload` request that does not reload: 404 when
/// reloads are off, 405 for a method other than POST; `None` for a reload.
fn reload_refused<B>(req: &Request<B>, state: &AdminState) -> Option<Response<Full<Bytes>>> {
    if state.reloader.get().is_none() {
        return Some(text(StatusCode::NOT_FOUND, "404 Not Found\n".into()));
    }
    if req.method() != Method::POST {
        let mut resp = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "405 Method Not Allowed\n".into(),
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Some(resp);
    }
    None
}

/// The answer to any admin request: `POST /reload` reloads (and waits for
/// the reload), the rest is [`respond`].
pub async fn answer<B>(req: Request<B>, state: &AdminState) -> Response<Full<Bytes>> {
    if req.uri().path() != "/reload" {
        return respond(&req, state);
    }
    if let Some(resp) = reload_refused(&req, state) {
        return resp;
    }
    // Nothing of the request is needed past this point.
    drop(req);
    let Some(reloader) = state.reloader.get() else {
        return text(StatusCode::NOT_FOUND, "404 Not Found\n".into());
    };
    match reloader.reload().await {
        Ok(summary) => text(StatusCode::OK, format!("{summary}\n")),
        Err(e) => text(
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST),
            format!("{}\n", e.message()),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Serves admin requests on `listener` until `stop` turns true; then stops
/// accepting and drops the open admin connections. Accept errors never end
/// it ([`weir_net::AcceptLoop`]).
pub async fn serve(listener: TcpListener, state: Arc<AdminState>, mut stop: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    // A dropped sender stops the listener too.
    let stopped = async {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    weir_net::AcceptLoop::new(&listener)
        // The admin listener has always left Nagle's algorithm on.
        .nodelay(false)
        .run(stopped, |stream, peer| {
            // Reap finished connection tasks so the set stays small.
            while connections.try_join_next().is_some() {}
            connections.spawn(serve_connection(stream, peer, Arc::clone(&state)));
            async {}
        })
        .await;
    connections.shutdown().await;
}

async fn serve_connection(stream: tokio::net::TcpStream, peer: SocketAddr, state: Arc<AdminState>) {
    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
        let state = Arc::clone(&state);
        async move { Ok::<_, Infallible>(answer(req, &state).await) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(HEADER_READ_TIMEOUT_SECS))
        .serve_connection(TokioIo::new(stream), service);
    if let Err(e) = conn.await {
        tracing::debug!(target: "weir::admin", %peer, "admin connection error: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counted::ConnectionCounts;

    fn state() -> AdminState {
        AdminState::new(Arc::new(Metrics::new(
            Arc::new(ConnectionCounts::default()),
            Vec::new(),
        )))
    }

    fn req(method: Method, path: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .expect("request")
    }

    #[test]
    fn paths_and_methods() {
        let s = state();
        let r = respond(&req(Method::GET, "/metrics"), &s);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        assert_eq!(respond(&req(Method::HEAD, "/metrics"), &s).status(), 200);
        assert_eq!(respond(&req(Method::GET, "/healthz"), &s).status(), 200);
        assert_eq!(respond(&req(Method::GET, "/"), &s).status(), 404);
        assert_eq!(respond(&req(Method::GET, "/metrics/"), &s).status(), 404);
        assert_eq!(respond(&req(Method::POST, "/nope"), &s).status(), 404);
        let r = respond(&req(Method::POST, "/metrics"), &s);
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], "GET, HEAD");
        assert_eq!(respond(&req(Method::DELETE, "/healthz"), &s).status(), 405);
        // Reloads off: no such endpoint.
        assert_eq!(respond(&req(Method::POST, "/reload"), &s).status(), 404);
    }

    #[test]
    fn healthz_says_503_once_draining() {
        let s = state();
        s.set_draining();
        assert_eq!(
            respond(&req(Method::GET, "/healthz"), &s).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(respond(&req(Method::GET, "/metrics"), &s).status(), 200);
    }

    #[test]
    fn readyz_follows_draining_and_livez_stays_200() {
        let s = state();
        assert_eq!(respond(&req(Method::GET, "/readyz"), &s).status(), 200);
        assert_eq!(respond(&req(Method::GET, "/livez"), &s).status(), 200);
        assert_eq!(respond(&req(Method::HEAD, "/livez"), &s).status(), 200);
        assert_eq!(respond(&req(Method::POST, "/readyz"), &s).status(), 405);
        s.set_draining();
        assert_eq!(
            respond(&req(Method::GET, "/readyz"), &s).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(respond(&req(Method::GET, "/livez"), &s).status(), 200);
    }
}
