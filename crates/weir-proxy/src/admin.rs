//! The admin listener: `GET /metrics` (the proxy's [`Metrics`], OpenMetrics
//! text) and `GET /healthz`, over HTTP/1.1 on `[admin] address` (default
//! `127.0.0.1:9901`, loopback only unless the config allows otherwise).
//!
//! | request | answer |
//! |---|---|
//! | `GET /metrics` | 200, [`crate::metrics::CONTENT_TYPE`] |
//! | `GET /healthz` | 200 `ok\n`; 503 `shutting down\n` once shutdown began |
//! | another path | 404 |
//! | another method on those paths | 405, `Allow: GET, HEAD` |
//!
//! `HEAD` is answered as `GET` without the body (RFC 9110 §9.3.2).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// How long an admin client may take to send a request head, in seconds.
const HEADER_READ_TIMEOUT_SECS: u64 = 10;

/// What the admin handlers read: the metrics and whether shutdown began.
#[derive(Debug)]
pub struct AdminState {
    metrics: Arc<Metrics>,
    draining: AtomicBool,
}

impl AdminState {
    /// State serving `metrics`, not draining.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        AdminState {
            metrics,
            draining: AtomicBool::new(false),
        }
    }

    /// From now on `/healthz` answers 503, so load balancers stop sending
    /// traffic while in-flight requests drain.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }
}

/// The answer to one admin request (see the module docs for the table).
pub fn respond<B>(req: &Request<B>, state: &AdminState) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path != "/metrics" && path != "/healthz" {
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
    if path == "/healthz" {
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
        let resp = respond(&req, &state);
        async move { Ok::<_, Infallible>(resp) }
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
}
