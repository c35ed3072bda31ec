//! `[route.ssr]`: the route's responses are templates composed from
//! fragments (crate `weir-ssr`), checked.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderName;
use serde::Deserialize;
use toml::Spanned;
use weir_ssr::ComposeSettings;

use super::duration;
use super::error::{ConfigError, Errors};
use super::types::{SsrSpec, TemplateDetect, TemplateFile, Upstream};

/// Largest template file, in bytes (4 MiB).
pub const MAX_TEMPLATE_FILE_BYTES: u64 = 4 << 20;
/// Largest `max_parallel`.
const MAX_PARALLEL: usize = 1024;
/// Largest `max_includes`.
const MAX_INCLUDES: usize = 10_000;
/// Largest `max_depth`.
const MAX_DEPTH: usize = 10;
/// `fragment_buffer_bytes` bounds: 1 KiB to 64 MiB.
const BUFFER_RANGE: (usize, usize) = (1024, 64 << 20);
/// `page_buffer_bytes` bounds: 64 KiB to 1 GiB.
const PAGE_BUFFER_RANGE: (usize, usize) = (64 << 10, 1 << 30);
/// `max_decoded_bytes` bounds: 64 KiB to 16 GiB.
const DECODED_RANGE: (u64, u64) = (64 << 10, 16 << 30);
/// `max_decode_ratio` bounds: 2x to 100,000x.
const RATIO_RANGE: (u64, u64) = (2, 100_000);

/// The client's conditional and range fields, never forwarded to fragments.
static NOT_FOR_FRAGMENTS: [HeaderName; 6] = [
    http::header::IF_NONE_MATCH,
    http::header::IF_MODIFIED_SINCE,
    http::header::IF_MATCH,
    http::header::IF_UNMODIFIED_SINCE,
    http::header::IF_RANGE,
    http::header::RANGE,
];

/// The client request fields forwarded to fragments unless
/// `forward_headers` says otherwise.
pub const DEFAULT_FORWARD_HEADERS: [&str; 3] = ["accept-language", "user-agent", "referer"];

/// `[route.ssr]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSsr {
    /// A template file (relative to the config file's directory) that the
    /// route answers with, instead of asking the upstream for a template.
    pub template_file: Option<Spanned<String>>,
    #[serde(default)]
    pub detect: TemplateDetect,
    #[serde(with = "duration", default = "d_fragment_timeout")]
    pub fragment_timeout: Duration,
    #[serde(with = "duration", default = "d_total_timeout")]
    pub fragment_total_timeout: Duration,
    #[serde(with = "duration", default = "d_page_timeout")]
    pub page_timeout: Duration,
    #[serde(default = "d_max_parallel")]
    pub max_parallel: Spanned<usize>,
    #[serde(default = "d_buffer")]
    pub fragment_buffer_bytes: Spanned<usize>,
    #[serde(default = "d_page_buffer")]
    pub page_buffer_bytes: Spanned<usize>,
    #[serde(default)]
    pub async_stream: bool,
    #[serde(default = "d_max_includes")]
    pub max_includes: Spanned<usize>,
    #[serde(default = "d_max_depth")]
    pub max_depth: Spanned<usize>,
    #[serde(default)]
    pub close_open_elements: bool,
    #[serde(default = "d_max_decoded")]
    pub max_decoded_bytes: Spanned<u64>,
    #[serde(default = "d_max_ratio")]
    pub max_decode_ratio: Spanned<u64>,
    pub forward_headers: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub forward_cookies: bool,
    #[serde(default)]
    pub cache_fragments: bool,
    /// Upstreams whose hosts absolute `src`s may name (default: all).
    pub fragment_upstreams: Option<Vec<Spanned<String>>>,
}

fn defaults() -> ComposeSettings {
    ComposeSettings::default()
}
fn d_fragment_timeout() -> Duration {
    defaults().fragment_timeout
}
fn d_total_timeout() -> Duration {
    defaults().fragment_total_timeout
}
fn d_page_timeout() -> Duration {
    defaults().page_timeout
}
fn d_max_parallel() -> Spanned<usize> {
    Spanned::new(0..0, defaults().max_parallel)
}
fn d_buffer() -> Spanned<usize> {
    Spanned::new(0..0, defaults().fragment_buffer_bytes)
}
fn d_page_buffer() -> Spanned<usize> {
    Spanned::new(0..0, defaults().page_buffer_bytes)
}
fn d_max_includes() -> Spanned<usize> {
    Spanned::new(0..0, defaults().max_includes)
}
fn d_max_depth() -> Spanned<usize> {
    Spanned::new(0..0, defaults().max_depth)
}
fn d_max_decoded() -> Spanned<u64> {
    Spanned::new(0..0, defaults().decode.max_decoded_bytes)
}
fn d_max_ratio() -> Spanned<u64> {
    Spanned::new(0..0, defaults().decode.max_ratio)
}

/// `[route.ssr]` of route `i`, checked; reads the template file.
pub(super) fn route_ssr(
    i: usize,
    raw: Option<&Spanned<RawSsr>>,
    upstreams: &[Upstream],
    route_upstream: usize,
    base_dir: &Path,
    errors: &Errors<'_>,
) -> Result<Option<SsrSpec>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let s = raw.get_ref();
    let key = |k: &str| format!("route[{i}].ssr.{k}");
    let range = |v: &Spanned<usize>, k: &str, min: usize, max: usize| {
        errors.within(v, || key(k), (min, max))
    };
    let max_parallel = range(&s.max_parallel, "max_parallel", 1, MAX_PARALLEL)?;
    let buffer = range(
        &s.fragment_buffer_bytes,
        "fragment_buffer_bytes",
        BUFFER_RANGE.0,
        BUFFER_RANGE.1,
    )?;
    let page_buffer = range(
        &s.page_buffer_bytes,
        "page_buffer_bytes",
        PAGE_BUFFER_RANGE.0,
        PAGE_BUFFER_RANGE.1,
    )?;
    let max_includes = range(&s.max_includes, "max_includes", 1, MAX_INCLUDES)?;
    let max_depth = range(&s.max_depth, "max_depth", 0, MAX_DEPTH)?;
    let range64 =
        |v: &Spanned<u64>, k: &str, bounds: (u64, u64)| errors.within(v, || key(k), bounds);
    let decode = weir_ssr::DecodeLimits {
        max_decoded_bytes: range64(&s.max_decoded_bytes, "max_decoded_bytes", DECODED_RANGE)?,
        max_ratio: range64(&s.max_decode_ratio, "max_decode_ratio", RATIO_RANGE)?,
        ..weir_ssr::DecodeLimits::default()
    };

    let forward_headers = match &s.forward_headers {
        None => DEFAULT_FORWARD_HEADERS
            .iter()
            .map(|n| HeaderName::from_static(n))
            .collect(),
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for (k, name) in list.iter().enumerate() {
                let parsed = HeaderName::from_bytes(name.get_ref().as_bytes()).map_err(|_| {
                    errors.at(
                        name.span(),
                        format!("route[{i}].ssr.forward_headers[{k}]"),
                        format!("{:?} is not a header field name", name.get_ref()),
                    )
                })?;
                if let Some(why) = refused_forward(&parsed) {
                    return Err(errors.at(
                        name.span(),
                        format!("route[{i}].ssr.forward_headers[{k}]"),
                        format!(
                            "{:?} cannot be forwarded to fragments: {why}",
                            name.get_ref()
                        ),
                    ));
                }
                out.push(parsed);
            }
            out
        }
    };

    let fragment_upstreams = match &s.fragment_upstreams {
        None => (0..upstreams.len()).collect(),
        Some(names) => {
            // The template's own upstream is always allowed: relative
            // `src`s resolve to it.
            let mut out = vec![route_upstream];
            for (k, name) in names.iter().enumerate() {
                let Some(at) = upstreams.iter().position(|u| &u.name == name.get_ref()) else {
                    let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                    return Err(errors.at(
                        name.span(),
                        format!("route[{i}].ssr.fragment_upstreams[{k}]"),
                        format!(
                            "no upstream named {:?} (declared: {})",
                            name.get_ref(),
                            known.join(", ")
                        ),
                    ));
                };
                if !out.contains(&at) {
                    out.push(at);
                }
            }
            out
        }
    };

    let template_file = match &s.template_file {
        None => None,
        Some(path) => Some(read_template(
            path,
            base_dir,
            &key("template_file"),
            errors,
        )?),
    };

    let compose = ComposeSettings {
        fragment_timeout: s.fragment_timeout,
        fragment_total_timeout: s.fragment_total_timeout,
        page_timeout: s.page_timeout,
        max_parallel,
        fragment_buffer_bytes: buffer,
        page_buffer_bytes: page_buffer,
        async_stream: s.async_stream,
        max_includes,
        max_depth,
        close_open_elements: s.close_open_elements,
        decode,
        ..ComposeSettings::default()
    };
    Ok(Some(SsrSpec {
        template_file,
        detect: s.detect,
        compose: Arc::new(compose),
        forward_headers,
        forward_cookies: s.forward_cookies,
        cache_fragments: s.cache_fragments,
        fragment_upstreams,
    }))
}

/// Why a client field may not be listed in `forward_headers`, if it may not.
///
/// A fragment request is a `GET` of its own, to its own host: the client's
/// connection fields, framing and `Host` are not its to carry (a
/// `Content-Length` on a bodiless GET would make the upstream read the
/// next pooled request as a body, RFC 9112 §6); validators and ranges are
/// about the page the client has, not a fragment (a 304 would fail the
/// fragment, a 206 would splice a part of it into the page).
fn refused_forward(name: &HeaderName) -> Option<&'static str> {
    let n = name.as_str();
    if n == "cookie" {
        return Some("use `forward_cookies = true`");
    }
    const SET_BY_WEIR: [&str; 10] = [
        "host",
        "accept-encoding",
        "via",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        "x-request-id",
        "traceparent",
        "tracestate",
    ];
    if SET_BY_WEIR.contains(&n) {
        return Some("Weir sets it on every fragment request");
    }
    const FRAMING: [&str; 4] = ["content-length", "transfer-encoding", "trailer", "expect"];
    if crate::headers::is_hop_by_hop(name) || FRAMING.contains(&n) || n.starts_with("proxy-") {
        return Some("it describes the client's own message or connection");
    }
    if NOT_FOR_FRAGMENTS.contains(name) {
        return Some("it is about the page the client has, not a fragment");
    }
    None
}

fn read_template(
    path: &Spanned<String>,
    base_dir: &Path,
    key: &str,
    errors: &Errors<'_>,
) -> Result<TemplateFile, ConfigError> {
    let full = base_dir.join(path.get_ref());
    let shown = std::path::absolute(&full).unwrap_or_else(|_| full.clone());
    let fail = |m: String| errors.at(path.span(), key, m);
    let meta = std::fs::metadata(&full)
        .map_err(|e| fail(format!("cannot read {}: {e}", shown.display())))?;
    if !meta.is_file() {
        return Err(fail(format!("{} is not a file", shown.display())));
    }
    if meta.len() > MAX_TEMPLATE_FILE_BYTES {
        return Err(fail(format!(
            "{} is {} bytes, more than the limit of {MAX_TEMPLATE_FILE_BYTES}",
            shown.display(),
            meta.len()
        )));
    }
    let bytes =
        std::fs::read(&full).map_err(|e| fail(format!("cannot read {}: {e}", shown.display())))?;
    Ok(TemplateFile {
        path: shown,
        bytes: Bytes::from(bytes),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{Config, TemplateDetect};

    const UP: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n\
                      [[route]]\nupstream = \"app\"\n";

    fn parse(lines: &str) -> Result<Config, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        Config::parse(&format!("{UP}{lines}\n"), "t.toml", &root).map_err(|e| e.to_string())
    }

    #[test]
    fn decode_limits_have_defaults_and_bounds() {
        let c = parse("[route.ssr]\n").expect("valid");
        let d = c.routes[0].ssr.as_ref().expect("ssr").compose.decode;
        assert_eq!((d.max_decoded_bytes, d.max_ratio), (64 << 20, 100));
        let c = parse("[route.ssr]\nmax_decoded_bytes = 1048576\nmax_decode_ratio = 20\n")
            .expect("valid");
        let d = c.routes[0].ssr.as_ref().expect("ssr").compose.decode;
        assert_eq!((d.max_decoded_bytes, d.max_ratio), (1 << 20, 20));
        let e = parse("[route.ssr]\nmax_decode_ratio = 1\n").expect_err("too small");
        assert!(e.contains("route[0].ssr.max_decode_ratio"), "{e}");
        assert!(e.contains("t.toml:8"), "{e}");
        let e = parse("[route.ssr]\nmax_decoded_bytes = 10\n").expect_err("too small");
        assert!(e.contains("route[0].ssr.max_decoded_bytes"), "{e}");
    }

    #[test]
    fn defaults_and_a_template_file() {
        let c = parse("[route.ssr]\n").expect("valid");
        let s = c.routes[0].ssr.as_ref().expect("ssr");
        assert_eq!(s.detect, TemplateDetect::Header);
        assert_eq!(s.compose.max_parallel, 32);
        assert_eq!(s.compose.fragment_buffer_bytes, 256 * 1024);
        assert_eq!(s.compose.page_buffer_bytes, 8 << 20);
        assert!(!s.compose.async_stream);
        assert_eq!(s.compose.max_includes, 256);
        assert_eq!(s.compose.max_depth, 3);
        assert!(!s.forward_cookies);
        assert!(s.forward_headers.iter().any(|h| h == "accept-language"));
        assert!(s.template_file.is_none());
        let c = parse("[route.ssr]\ntemplate_file = \"fixtures/index.html\"\ndetect = \"html\"\n")
            .expect("valid");
        let s = c.routes[0].ssr.as_ref().expect("ssr");
        assert!(!s.template_file.as_ref().expect("file").bytes.is_empty());
        assert_eq!(s.detect, TemplateDetect::Html);
    }

    #[test]
    fn page_buffer_bytes_and_async_stream_are_read_and_checked() {
        let c = parse("[route.ssr]\npage_buffer_bytes = 1048576\nasync_stream = true\n")
            .expect("valid");
        let s = &c.routes[0].ssr.as_ref().expect("ssr").compose;
        assert_eq!(s.page_buffer_bytes, 1 << 20);
        assert!(s.async_stream);
        for bad in ["1024", "2147483648"] {
            let e = parse(&format!("[route.ssr]\npage_buffer_bytes = {bad}\n")).expect_err(bad);
            assert!(
                e.starts_with("t.toml:8:") && e.contains("route[0].ssr.page_buffer_bytes"),
                "{e}"
            );
        }
        let e = parse("[route.ssr]\nasync_stream = \"yes\"\n").expect_err("bool");
        assert!(e.contains("async_stream"), "{e}");
    }

    #[test]
    fn bad_values_name_file_line_and_key() {
        let e = parse("[route.ssr]\nmax_parallel = 0\n").expect_err("range");
        assert!(e.starts_with("t.toml:8:"), "{e}");
        assert!(e.contains("route[0].ssr.max_parallel"), "{e}");
        let e = parse("[route.ssr]\ntemplate_file = \"no/such.html\"\n").expect_err("file");
        assert!(
            e.contains("route[0].ssr.template_file") && e.contains("no/such.html"),
            "{e}"
        );
        let e = parse("[route.ssr]\nforward_headers = [\"bad header\"]\n").expect_err("name");
        assert!(e.contains("forward_headers[0]"), "{e}");
        let e = parse("[route.ssr]\nforward_headers = [\"Cookie\"]\n").expect_err("cookie");
        assert!(e.contains("forward_cookies"), "{e}");
        for framing in [
            "Content-Length",
            "host",
            "Connection",
            "te",
            "Proxy-Authorization",
            "via",
        ] {
            let e = parse(&format!(
                "[route.ssr]\nforward_headers = [\"x-ok\", \"{framing}\"]\n"
            ))
            .expect_err(framing);
            assert!(
                e.contains("forward_headers[1]") && e.contains("cannot be forwarded"),
                "{e}"
            );
        }
        parse("[route.ssr]\nforward_headers = [\"authorization\", \"x-tenant\"]\n")
            .expect("allowed");
        let e = parse("[route.ssr]\ndetect = \"sometimes\"\n").expect_err("detect");
        assert!(e.contains("detect"), "{e}");
        let e = parse("[route.ssr]\nfragment_timout = \"1s\"\n").expect_err("typo");
        assert!(e.contains("fragment_timout"), "{e}");
    }

    #[test]
    fn forward_headers_refuse_hop_by_hop_framing_and_host_fields() {
        for name in [
            "Connection",
            "keep-alive",
            "TE",
            "transfer-encoding",
            "upgrade",
            "proxy-connection",
            "content-length",
            "host",
        ] {
            let e = parse(&format!(
                "[route.ssr]\nforward_headers = [\"accept-language\", \"{name}\"]\n"
            ))
            .expect_err(name);
            assert!(
                e.starts_with("t.toml:8:") && e.contains("route[0].ssr.forward_headers[1]"),
                "{e}"
            );
            assert!(e.contains(&format!("{name:?}")), "{e}");
        }
    }

    #[test]
    fn fragment_upstreams_default_to_all_and_always_include_the_routes_own() {
        let two = "[[upstream]]\nname = \"frags\"\nurl = \"http://127.0.0.1:3001\"\n\n";
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let parse2 = |lines: &str| {
            Config::parse(&format!("{two}{UP}{lines}\n"), "t.toml", &root)
                .map_err(|e| e.to_string())
        };
        let c = parse2("[route.ssr]\n").expect("valid");
        assert_eq!(
            c.routes[0].ssr.as_ref().expect("ssr").fragment_upstreams,
            vec![0, 1]
        );
        let c = parse2("[route.ssr]\nfragment_upstreams = []\n").expect("valid");
        assert_eq!(
            c.routes[0].ssr.as_ref().expect("ssr").fragment_upstreams,
            vec![1]
        );
        let e = parse2("[route.ssr]\nfragment_upstreams = [\"nope\"]\n").expect_err("unknown");
        assert!(
            e.contains("route[0].ssr.fragment_upstreams[0]") && e.contains("frags"),
            "{e}"
        );
    }

    #[test]
    fn forward_headers_refuse_conditional_and_range_fields() {
        // A fragment's 304 or 206 to the client's validators or range would
        // fail it, or splice a part of it into the page.
        for name in [
            "If-None-Match",
            "if-modified-since",
            "if-match",
            "if-unmodified-since",
            "if-range",
            "range",
        ] {
            let e =
                parse(&format!("[route.ssr]\nforward_headers = [\"{name}\"]\n")).expect_err(name);
            assert!(
                e.starts_with("t.toml:8:") && e.contains("route[0].ssr.forward_headers[0]"),
                "{e}"
            );
        }
    }
}
