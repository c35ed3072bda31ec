//! Routing: from a request's host and path to a route.
//!
//! Routes that name the request's host are tried first, then routes without
//! a host; within each group the longest matching path prefix wins. A
//! prefix matches whole path segments: `/api` matches `/api` and `/api/x`
//! but not `/apix`.
//!
//! Paths are matched (and forwarded) after dot-segment removal (RFC 3986
//! §5.2.4, [`crate::path`]), so `/public/../admin` cannot reach the
//! `/public` route's upstream as `/admin`.

use std::sync::Arc;

use weir_transform::chain::ChainSpec;

use crate::config::{BodyLogSpec, HostHeader, MirrorSpec, RouteSpec};

/// A route ready for matching.
#[derive(Debug, Clone)]
pub struct Route {
    /// Position in the config, for logs.
    pub index: usize,
    /// Exact host, lower-case, no port; `None` matches any host.
    pub host: Option<String>,
    /// Path prefix, starting with `/`, without trailing `/` (except `/` itself).
    pub path_prefix: String,
    /// Remove the prefix before forwarding.
    pub strip_prefix: bool,
    /// Index of the upstream.
    pub upstream: usize,
    /// What to send as `Host`.
    pub host_header: HostHeader,
    /// The response transforms.
    pub transforms: ChainSpec,
    /// The shadow upstream requests are copied to, if any.
    pub mirror: Option<MirrorSpec>,
    /// How much of each body to log, if any.
    pub body_log: Option<BodyLogSpec>,
    /// Whether responses go through the response cache.
    pub cache: bool,
    /// SSR composition, if the route's responses are templates.
    pub ssr: Option<crate::config::SsrSpec>,
    /// The `Upgrade` protocols (lower-case) this route tunnels.
    pub upgrade: Vec<String>,
    /// Most request body bytes (`max_request_body_bytes`), if limited.
    pub max_body_bytes: Option<u64>,
    /// The slots of `max_concurrent_requests`, if limited.
    pub concurrency: Option<Arc<tokio::sync::Semaphore>>,
    /// `[route.rate_limit]`, if any.
    pub rate_limit: Option<Arc<crate::rate_limit::RouteRateLimit>>,
}

/// All routes, ready for [`RouteTable::find`].
#[derive(Debug, Clone)]
pub struct RouteTable {
    routes: Vec<Route>,
}

impl RouteTable {
    /// Builds the table from validated route specs.
    pub fn new(specs: &[RouteSpec]) -> Self {
        RouteTable {
            routes: specs
                .iter()
                .enumerate()
                .map(|(index, s)| Route {
                    index,
                    host: s.host.clone(),
                    path_prefix: s.path_prefix.clone(),
                    strip_prefix: s.strip_prefix,
                    upstream: s.upstream,
                    host_header: s.host_header,
                    transforms: s.transforms.clone(),
                    mirror: s.mirror.clone(),
                    body_log: s.body_log,
                    cache: s.cache,
                    ssr: s.ssr.clone(),
                    upgrade: s.upgrade.clone(),
                    max_body_bytes: s.limits.max_body_bytes,
                    concurrency: s
                        .limits
                        .max_concurrent_requests
                        .map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
                    rate_limit: s.limits.rate_limit.as_ref().map(|r| {
                        let label = format!("{}{}", s.host.as_deref().unwrap_or(""), s.path_prefix);
                        Arc::new(crate::rate_limit::RouteRateLimit::new(r, label))
                    }),
                })
                .collect(),
        }
    }

    /// The best route for `host` (lower-case, no port) and a normalized `path`.
    pub fn find(&self, host: Option<&str>, path: &str) -> Option<&Route> {
        let best = |want_host: bool| {
            self.routes
                .iter()
                .filter(|r| match (&r.host, host) {
                    (Some(rh), Some(h)) => want_host && rh == h,
                    (None, _) => !want_host,
                    (Some(_), None) => false,
                })
                .filter(|r| prefix_matches(&r.path_prefix, path))
                .max_by_key(|r| r.path_prefix.len())
        };
        best(true).or_else(|| best(false))
    }
}

/// Whether `prefix` matches `path` on a segment boundary.
fn prefix_matches(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path == prefix
        || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

impl Route {
    /// Whether this route tunnels the `Upgrade` protocol `token` (compared
    /// case-insensitively, RFC 9110 §7.8).
    pub fn allows_upgrade(&self, token: &str) -> bool {
        self.upgrade.iter().any(|t| t.eq_ignore_ascii_case(token))
    }

    /// The path to forward: `path` without the prefix if the route strips it.
    pub fn forward_path<'p>(&self, path: &'p str) -> &'p str {
        if !self.strip_prefix || self.path_prefix == "/" {
            return path;
        }
        match path.get(self.path_prefix.len()..) {
            Some("") | None => "/",
            Some(rest) => rest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(routes: &[(Option<&str>, &str)]) -> RouteTable {
        RouteTable {
            routes: routes
                .iter()
                .enumerate()
                .map(|(i, (h, p))| Route {
                    index: i,
                    host: h.map(str::to_owned),
                    path_prefix: (*p).to_owned(),
                    strip_prefix: false,
                    upstream: i,
                    host_header: HostHeader::Preserve,
                    transforms: ChainSpec::default(),
                    mirror: None,
                    body_log: None,
                    cache: false,
                    ssr: None,
                    upgrade: Vec::new(),
                    max_body_bytes: None,
                    concurrency: None,
                    rate_limit: None,
                })
                .collect(),
        }
    }

    #[test]
    fn longest_prefix_wins_on_segment_boundaries() {
        let t = table(&[(None, "/"), (None, "/api"), (None, "/api/v2")]);
        assert_eq!(t.find(None, "/api/v2/x").map(|r| r.index), Some(2));
        assert_eq!(t.find(None, "/api/v1").map(|r| r.index), Some(1));
        assert_eq!(t.find(None, "/apix").map(|r| r.index), Some(0));
        assert_eq!(t.find(None, "/api").map(|r| r.index), Some(1));
    }

    #[test]
    fn host_routes_come_before_hostless_ones() {
        let t = table(&[(None, "/api"), (Some("a.test"), "/")]);
        assert_eq!(t.find(Some("a.test"), "/api/x").map(|r| r.index), Some(1));
        assert_eq!(t.find(Some("b.test"), "/api/x").map(|r| r.index), Some(0));
        assert!(t.find(Some("b.test"), "/other").is_none());
    }

    #[test]
    fn strip_prefix_keeps_a_leading_slash() {
        let mut r = table(&[(None, "/api")]).routes.remove(0);
        r.strip_prefix = true;
        assert_eq!(r.forward_path("/api/users"), "/users");
        assert_eq!(r.forward_path("/api"), "/");
    }
}
