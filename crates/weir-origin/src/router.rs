//! Dispatch of a request to the endpoint its path names.
//!
//! Endpoint paths are matched on exact segments (`/bytes/{n}` has exactly
//! two); any other path, including `/bytes` or `/bytes/1/2`, goes to the
//! static files. Endpoints other than `/echo` answer `GET` and `HEAD` only
//! and send `405` with `Allow: GET, HEAD` for other methods. A `HEAD`
//! request gets the head the `GET` would get (after the same validation and,
//! for `/delay` and `/fragment`, the same wait) and no body.

use http::{Method, Request, Response, Uri};
use hyper::body::Incoming;

use crate::config::OriginConfig;
use crate::endpoints::{
    abort, bytes, delay, echo, files::Files, fragment::Fragments, page, response_headers, sse,
    status, stream, trailers,
};
use crate::reply::{self, OriginBody};

/// Where a request path leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    Bytes(&'a str),
    Stream(&'a str),
    Status(&'a str),
    Delay(&'a str),
    Abort(&'a str),
    Fragment(&'a str),
    Echo,
    Sse,
    Page,
    Trailers,
    ResponseHeaders,
    Files,
}

impl<'a> Route<'a> {
    /// The route for `path` (the URI path, still percent-encoded).
    fn of(path: &'a str) -> Self {
        let mut segments = path.strip_prefix('/').unwrap_or(path).split('/');
        let first = segments.next().unwrap_or("");
        let second = segments.next();
        if segments.next().is_some() {
            return Self::Files;
        }
        match (first, second) {
            ("bytes", Some(n)) => Self::Bytes(n),
            ("stream", Some(n)) => Self::Stream(n),
            ("status", Some(code)) => Self::Status(code),
            ("delay", Some(ms)) => Self::Delay(ms),
            ("abort", Some(n)) => Self::Abort(n),
            ("fragment", Some(name)) => Self::Fragment(name),
            ("echo", None) => Self::Echo,
            ("sse", None) => Self::Sse,
            ("page", None) => Self::Page,
            ("trailers", None) => Self::Trailers,
            ("response-headers", None) => Self::ResponseHeaders,
            _ => Self::Files,
        }
    }

    /// Whether the route answers only `GET` and `HEAD` itself.
    fn is_get_only(self) -> bool {
        !matches!(self, Self::Echo | Self::Files)
    }

    /// Whether the route is a test or load-test endpoint (off unless
    /// [`OriginConfig::test_endpoints`]).
    fn is_test_only(self) -> bool {
        !matches!(self, Self::Fragment(_) | Self::Files)
    }
}

/// Routes requests to the endpoints and the static files.
#[derive(Debug)]
pub(crate) struct Router {
    files: Files,
    fragments: Fragments,
    test_endpoints: bool,
}

impl Router {
    /// A router serving static files from `config.root` and fragment
    /// markup from its `fragments/` directory.
    pub(crate) fn new(config: &OriginConfig) -> Self {
        Self {
            files: Files::new(&config.root),
            fragments: Fragments::new(&config.root, config.test_endpoints),
            test_endpoints: config.test_endpoints,
        }
    }

    /// Answers one request. Never fails: errors become error responses.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (the client went away) abandons the request.
    pub(crate) async fn handle(&self, request: Request<Incoming>) -> Response<OriginBody> {
        // Cloning a `Uri` bumps reference counts; it frees `request` to move.
        let uri: Uri = request.uri().clone();
        let mut route = Route::of(uri.path());
        if !self.test_endpoints && route.is_test_only() {
            route = Route::Files;
        }
        if route.is_get_only() && !matches!(*request.method(), Method::GET | Method::HEAD) {
            return reply::method_not_allowed("GET, HEAD");
        }
        let is_head = request.method() == Method::HEAD;
        let query = uri.query();
        let result = match route {
            Route::Bytes(n) => bytes::respond(n, query),
            Route::Stream(n) => stream::respond(n, query),
            Route::Status(code) => status::respond(code, query),
            Route::Delay(ms) => delay::respond(ms, query).await,
            Route::Abort(n) => abort::respond(n, query),
            Route::Fragment(name) => self.fragments.respond(name, query).await,
            Route::Sse => sse::respond(query),
            Route::Page => page::respond(query),
            Route::Trailers => trailers::respond(query),
            Route::ResponseHeaders => response_headers::respond(query),
            Route::Echo => echo::respond(request).await,
            Route::Files => return self.files.respond(request).await,
        };
        let response = result.unwrap_or_else(|err| {
            tracing::debug!(%uri, error = %err, "request refused");
            reply::error(&err)
        });
        if is_head {
            reply::without_body(response)
        } else {
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Route;

    #[test]
    fn endpoints_match_exact_segment_counts() {
        assert_eq!(Route::of("/bytes/10"), Route::Bytes("10"));
        assert_eq!(Route::of("/bytes/"), Route::Bytes(""));
        assert_eq!(Route::of("/bytes"), Route::Files);
        assert_eq!(Route::of("/bytes/1/2"), Route::Files);
        assert_eq!(Route::of("/echo"), Route::Echo);
        assert_eq!(Route::of("/echo/"), Route::Files);
        assert_eq!(Route::of("/sse"), Route::Sse);
        assert_eq!(Route::of("/page"), Route::Page);
        assert_eq!(Route::of("/page/2"), Route::Files);
        assert_eq!(Route::of("/fragment/nav"), Route::Fragment("nav"));
        assert_eq!(Route::of("/fragment"), Route::Files);
        assert_eq!(Route::of("/fragment/a/b"), Route::Files);
        assert_eq!(Route::of("/"), Route::Files);
        assert_eq!(Route::of("/index.html"), Route::Files);
    }
}
