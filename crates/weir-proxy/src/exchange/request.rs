//! The first phases: the downstream request filter (what Weir refuses
//! before anything else looks at a request) and routing (the normalized
//! path, the host, the route and its upstream).
//!
//! Both read only the request head, so they take a request with any body
//! and are tested here without sockets.

use http::{Method, Request, StatusCode, Version, header};

use super::local::Local;
use crate::config::{RequestLimits, strip_port};
use crate::outcome::Outcome;
use crate::path::normalize_path;
use crate::proxy::ResolvedUpstream;
use crate::route::{Route, RouteTable};

/// What routing decided.
#[derive(Debug)]
pub(crate) struct Target<'p> {
    pub(crate) route: &'p Route,
    pub(crate) upstream: &'p ResolvedUpstream,
    /// The normalized path, before any prefix strip.
    pub(crate) path: String,
    /// The host the client asked for, as sent (with port).
    pub(crate) client_host: Option<String>,
}

impl Target<'_> {
    /// The path as forwarded (the route's prefix stripped if it says so).
    pub(crate) fn forward_path(&self) -> &str {
        self.route.forward_path(&self.path)
    }
}

/// The downstream request filter.
///
/// # Errors
/// `405` for `CONNECT` (Weir is no forward proxy), except an HTTP/2
/// extended CONNECT (RFC 8441 §4, with `:protocol`), left to the upgrade
/// phase; `501` for a transfer coding other than `chunked` (RFC 9112 §6.1);
/// `414` for a path and query longer than `max_uri_bytes` (RFC 9110
/// §15.5.15); `431` for more field lines than `max_request_headers` (RFC
/// 6585 §5; HTTP/1.1 heads are held to it by hyper already, HTTP/2 ones
/// here).
pub(crate) fn filter<B>(req: &Request<B>, limits: &RequestLimits) -> Result<(), Local> {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if target > limits.max_uri_bytes {
        return Err(Local::new(
            StatusCode::URI_TOO_LONG,
            "414 URI Too Long\n",
            Outcome::BadRequest,
        ));
    }
    if req.version() < Version::HTTP_2 && head_bytes(req) > limits.max_head_bytes {
        return Err(Local::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "431 Request Header Fields Too Large\n",
            Outcome::BadRequest,
        ));
    }
    if req.headers().len() > limits.max_headers {
        return Err(Local::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "431 Request Header Fields Too Large: too many fields\n",
            Outcome::BadRequest,
        ));
    }
    if req.method() == Method::CONNECT && req.extensions().get::<hyper::ext::Protocol>().is_none() {
        return Err(Local::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "405 Method Not Allowed: Weir is not a forward proxy\n",
            Outcome::BadRequest,
        ));
    }
    if !crate::headers::only_chunked_fields(req.headers()) {
        return Err(Local::new(
            StatusCode::NOT_IMPLEMENTED,
            "501 Not Implemented: only the chunked transfer coding is supported\n",
            Outcome::BadRequest,
        ));
    }
    Ok(())
}

/// The size of an HTTP/1.1 request head as written with single spaces:
/// `METHOD SP target SP HTTP/1.1 CRLF`, `name: value CRLF` per field line,
/// and the final CRLF (RFC 9112 §2.1). Whitespace hyper trimmed is not
/// counted.
pub(super) fn head_bytes<B>(req: &Request<B>) -> usize {
    let target = match req.uri().path_and_query() {
        Some(p) if req.uri().scheme().is_none() => p.as_str().len(),
        _ => req.uri().to_string().len(),
    };
    let line = req.method().as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    let fields: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum();
    line + fields + 2
}

/// Routing: the route for the request's host and normalized path, and
/// its upstream.
///
/// # Errors
/// `400` for a path that climbs above the root or hides a dot segment,
/// and for a bad `Host` (see [`request_host`]); `404` when no route matches.
pub(crate) fn route<'p, B>(
    routes: &'p RouteTable,
    upstreams: &'p [ResolvedUpstream],
    req: &Request<B>,
) -> Result<Target<'p>, Local> {
    let Some(path) = normalize_path(req.uri().path()) else {
        return Err(Local::bad_request(
            "400 Bad Request: invalid request path\n",
        ));
    };
    let client_host = request_host(req)?;
    let match_host = client_host
        .as_deref()
        .map(|h| strip_port(h).trim_end_matches('.').to_ascii_lowercase());
    let route = routes.find(match_host.as_deref(), &path).ok_or(Local::new(
        StatusCode::NOT_FOUND,
        "404 Not Found: no route\n",
        Outcome::NoRoute,
    ))?;
    let upstream = upstreams
        .get(route.upstream)
        .ok_or(Local::bad_gateway("502 Bad Gateway\n"))?;
    Ok(Target {
        route,
        upstream,
        path: path.into_owned(),
        client_host,
    })
}

/// The host the client asked for: the absolute-form or HTTP/2 authority,
/// else the single `Host` field (RFC 9112 §3.2).
///
/// # Errors
/// 400 for several `Host` fields, for a missing `Host` on HTTP/1.1, and for
/// a host that is not a valid `host[:port]` (user info included).
fn request_host<B>(req: &Request<B>) -> Result<Option<String>, Local> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host_field = hosts.next();
    if hosts.next().is_some() {
        return Err(Local::bad_request(
            "400 Bad Request: more than one Host field\n",
        ));
    }
    let raw = match (req.uri().authority(), host_field) {
        // RFC 9112 §3.2.2: an absolute-form target's authority wins over Host.
        (Some(a), _) => a.as_str().to_owned(),
        (None, Some(h)) => match h.to_str() {
            Ok(h) => h.to_owned(),
            Err(_) => return Err(Local::bad_request("400 Bad Request: invalid Host\n")),
        },
        (None, None) if req.version() == Version::HTTP_11 => {
            return Err(Local::bad_request("400 Bad Request: missing Host\n"));
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
        return Err(Local::bad_request("400 Bad Request: invalid Host\n"));
    }
    Ok(Some(raw))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;

    const CONFIG: &str = r#"
[[upstream]]
name = "app"
url = "http://127.0.0.1:3000"

[[upstream]]
name = "api"
url = "http://127.0.0.1:3001/base"

[[route]]
path_prefix = "/app"
upstream = "app"

[[route]]
host = "api.example"
path_prefix = "/v1"
strip_prefix = true
upstream = "api"
"#;

    fn table() -> (RouteTable, Vec<ResolvedUpstream>) {
        let config = Config::parse(CONFIG, "t.toml", std::path::Path::new(".")).expect("valid");
        let client = crate::upstream::UpstreamClient::new(&config.client);
        let metrics = crate::metrics::Metrics::new(Arc::clone(client.connections()), Vec::new());
        let upstreams = config
            .upstreams
            .iter()
            .map(|u| ResolvedUpstream {
                name: u.name.clone(),
                group: Arc::new(crate::proxy::group(u, &client, &metrics).expect("group")),
                spec: u.clone(),
            })
            .collect();
        (RouteTable::new(&config.routes), upstreams)
    }

    fn get(uri: &str, host: Option<&str>) -> Request<()> {
        let mut b = Request::builder().uri(uri);
        if let Some(h) = host {
            b = b.header(header::HOST, h);
        }
        b.body(()).expect("request")
    }

    fn refused<B>(req: &Request<B>) -> Local {
        let (routes, upstreams) = table();
        match filter(req, &RequestLimits::default()).and_then(|()| route(&routes, &upstreams, req))
        {
            Ok(t) => panic!("routed to {}", t.upstream.name),
            Err(local) => local,
        }
    }

    #[test]
    fn connect_is_405_and_an_unknown_transfer_coding_501() {
        let connect = Request::builder()
            .method(Method::CONNECT)
            .uri("example.com:443")
            .body(())
            .expect("request");
        assert_eq!(refused(&connect).status, StatusCode::METHOD_NOT_ALLOWED);
        let mut gzip = get("/", Some("a"));
        gzip.headers_mut().insert(
            header::TRANSFER_ENCODING,
            "gzip, chunked".parse().expect("value"),
        );
        assert_eq!(refused(&gzip).status, StatusCode::NOT_IMPLEMENTED);
        let mut two_lines = get("/", Some("a"));
        two_lines
            .headers_mut()
            .append(header::TRANSFER_ENCODING, "chunked".parse().expect("value"));
        two_lines
            .headers_mut()
            .append(header::TRANSFER_ENCODING, "gzip".parse().expect("value"));
        assert_eq!(
            refused(&two_lines).status,
            StatusCode::NOT_IMPLEMENTED,
            "every line counts"
        );
        let mut chunked = get("/", Some("a"));
        chunked
            .headers_mut()
            .insert(header::TRANSFER_ENCODING, "chunked".parse().expect("value"));
        assert!(filter(&chunked, &RequestLimits::default()).is_ok());
    }

    #[test]
    fn host_routes_win_and_the_prefix_is_stripped() {
        let (routes, upstreams) = table();
        let req = get("/v1/users?x=1", Some("API.example.:8080"));
        let t = route(&routes, &upstreams, &req).expect("routed");
        assert_eq!(t.upstream.name, "api");
        assert_eq!(t.forward_path(), "/users");
        assert_eq!(t.client_host.as_deref(), Some("API.example.:8080"));
        let app = get("/app/users", Some("api.example"));
        assert_eq!(
            route(&routes, &upstreams, &app)
                .expect("routed")
                .upstream
                .name,
            "app"
        );
        let other = refused(&get("/v1/users", Some("other.example")));
        assert_eq!(
            (other.status, other.outcome),
            (StatusCode::NOT_FOUND, Outcome::NoRoute)
        );
    }

    #[test]
    fn the_absolute_form_authority_wins_over_host() {
        let (routes, upstreams) = table();
        let req = get("http://api.example/v1/x", Some("other.example"));
        let t = route(&routes, &upstreams, &req).expect("routed");
        assert_eq!(t.upstream.name, "api");
        assert_eq!(t.client_host.as_deref(), Some("api.example"));
    }

    #[test]
    fn bad_paths_and_hosts_are_400() {
        for (uri, host, why) in [
            ("/../etc/passwd", Some("a"), "invalid request path"),
            ("/a/..%2fb", Some("a"), "invalid request path"),
            ("/app", None, "missing Host"),
            ("/app", Some("a@b"), "invalid Host"),
            ("/app", Some("a:99999"), "invalid Host"),
            ("/app", Some("a b"), "invalid Host"),
        ] {
            let local = refused(&get(uri, host));
            assert_eq!(local.status, StatusCode::BAD_REQUEST, "{uri} {host:?}");
            assert!(local.body.contains(why), "{uri} {host:?}: {}", local.body);
        }
        let mut two = get("/app", Some("a"));
        two.headers_mut()
            .append(header::HOST, "b".parse().expect("value"));
        assert!(refused(&two).body.contains("more than one Host"));
    }

    #[test]
    fn an_http2_request_without_authority_or_host_routes_without_a_host() {
        let (routes, upstreams) = table();
        let req = Request::builder()
            .version(Version::HTTP_2)
            .uri("/app/x")
            .body(())
            .expect("request");
        let t = route(&routes, &upstreams, &req).expect("routed");
        assert_eq!((t.upstream.name.as_str(), t.client_host), ("app", None));
    }
}
