//! Cache keys and the request as the cache sees it.
//!
//! The primary key is method + scheme + host + path + query (the issue's
//! rule; RFC 9111 §2 uses the target URI and method). The Vary-selected
//! request fields (RFC 9111 §4.1) are not in the key string: they are
//! matched per stored variant by `http-cache-semantics`, against the
//! [`view`] of the request.

use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request, Uri};

/// The primary key of a `GET` (or a `HEAD` answered from a `GET` entry):
/// `"GET http://host[:port]/path?query"`. `host` is the client's `Host`,
/// lower-cased; `path` the normalized request path.
pub(crate) fn primary(host: Option<&str>, path: &str, query: Option<&str>) -> String {
    let host = host.unwrap_or("").to_ascii_lowercase();
    let mut key = String::with_capacity(16 + host.len() + path.len());
    key.push_str("GET http://");
    key.push_str(&host);
    key.push_str(path);
    if let Some(q) = query {
        key.push('?');
        key.push_str(q);
    }
    key
}

/// The request as the cache policy sees it: method `GET` (a `HEAD` is
/// answered from the `GET` entry), the origin-form target (so HTTP/1.1 and
/// HTTP/2 clients share entries), and the client's fields with `Host` set
/// to the client's host.
pub(crate) fn view<B>(req: &Request<B>, path: &str, host: Option<&str>) -> http::request::Parts {
    let mut target = path.to_owned();
    if let Some(q) = req.uri().query() {
        target.push('?');
        target.push_str(q);
    }
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = Method::GET;
    parts.uri = target
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    let mut headers: HeaderMap = req.headers().clone();
    headers.remove(header::HOST);
    if let Some(v) = host.and_then(|h| HeaderValue::from_str(&h.to_ascii_lowercase()).ok()) {
        headers.insert(header::HOST, v);
    }
    parts.headers = headers;
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_has_host_path_and_query() {
        assert_eq!(
            primary(Some("Example.COM:8080"), "/a/b", Some("x=1")),
            "GET http://example.com:8080/a/b?x=1"
        );
        assert_eq!(primary(None, "/", None), "GET http:///");
    }

    #[test]
    fn view_is_get_with_origin_form_and_host() {
        let req = Request::builder()
            .method(Method::HEAD)
            .uri("http://h/p?q=1")
            .header("accept-encoding", "gzip")
            .body(())
            .unwrap();
        let v = view(&req, "/p", Some("H:1"));
        assert_eq!(v.method, Method::GET);
        assert_eq!(v.uri, "/p?q=1");
        assert_eq!(v.headers["host"], "h:1");
        assert_eq!(v.headers["accept-encoding"], "gzip");
    }
}
