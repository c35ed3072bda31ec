//! A route's side branches: `[route.mirror]` and `[route.body_log]`.

use toml::Spanned;

use super::error::{ConfigError, Errors};
use super::raw::RawRoute;
use super::types::{BodyLogSpec, MirrorSpec, Upstream};

/// Largest mirror `hwm`, in chunks.
const MAX_MIRROR_HWM: usize = 1024;

/// `[route.mirror]`, checked: the upstream exists and is not the route's own.
pub(super) fn route_mirror(
    i: usize,
    r: &RawRoute,
    upstreams: &[Upstream],
    errors: &Errors<'_>,
) -> Result<Option<MirrorSpec>, ConfigError> {
    let Some(m) = &r.mirror else {
        return Ok(None);
    };
    let m = m.get_ref();
    let name = m.upstream.get_ref();
    let Some(index) = upstreams.iter().position(|u| &u.name == name) else {
        let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
        return Err(errors.at(
            m.upstream.span(),
            format!("route[{i}].mirror.upstream"),
            format!(
                "no upstream named {name:?} (declared: {})",
                known.join(", ")
            ),
        ));
    };
    if name == r.upstream.get_ref() {
        return Err(errors.at(
            m.upstream.span(),
            format!("route[{i}].mirror.upstream"),
            "the mirror is the route's own upstream: every request would be sent twice",
        ));
    }
    check_range(i, &m.hwm, "hwm", 1, MAX_MIRROR_HWM, errors)?;
    check_range(i, &m.max_in_flight, "max_in_flight", 1, usize::MAX, errors)?;
    Ok(Some(MirrorSpec {
        upstream: index,
        timeout: m.timeout,
        hwm: *m.hwm.get_ref(),
        max_in_flight: *m.max_in_flight.get_ref(),
    }))
}

fn check_range(
    i: usize,
    value: &Spanned<usize>,
    key: &str,
    min: usize,
    max: usize,
    errors: &Errors<'_>,
) -> Result<(), ConfigError> {
    let v = *value.get_ref();
    if v < min || v > max {
        let range = if max == usize::MAX {
            format!("at least {min}")
        } else {
            format!("from {min} to {max}")
        };
        return Err(errors.at(
            value.span(),
            format!("route[{i}].mirror.{key}"),
            format!("{v} is out of range: expected {range}"),
        ));
    }
    Ok(())
}

/// Largest `[route.body_log]` limit, in bytes (1 MiB): a log line is not
/// a place for whole bodies.
pub const MAX_BODY_LOG_BYTES: usize = 1 << 20;

/// `[route.body_log]`, checked: each limit at most [`MAX_BODY_LOG_BYTES`]
/// (0 turns a side off).
pub(super) fn route_body_log(
    i: usize,
    r: &RawRoute,
    errors: &Errors<'_>,
) -> Result<Option<BodyLogSpec>, ConfigError> {
    let Some(b) = &r.body_log else {
        return Ok(None);
    };
    let span = b.span();
    let b = b.get_ref();
    for (key, v) in [
        ("request_bytes", b.request_bytes),
        ("response_bytes", b.response_bytes),
    ] {
        if v > MAX_BODY_LOG_BYTES {
            return Err(errors.at(
                span.clone(),
                format!("route[{i}].body_log.{key}"),
                format!("{v} is out of range: expected 0 to {MAX_BODY_LOG_BYTES} (1 MiB)"),
            ));
        }
    }
    Ok(Some(BodyLogSpec {
        request_bytes: b.request_bytes,
        response_bytes: b.response_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    const UP: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n\
                      [[upstream]]\nname = \"shadow\"\nurl = \"http://127.0.0.1:3001\"\n\n\
                      [[route]]\nupstream = \"app\"\n";

    fn parse(lines: &str) -> Result<Config, String> {
        Config::parse(&format!("{UP}{lines}\n"), "t.toml", Path::new("."))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn mirror_defaults_and_values() {
        let c = parse("[route.mirror]\nupstream = \"shadow\"\n").expect("valid");
        let m = c.routes[0].mirror.as_ref().expect("mirror");
        assert_eq!(m.upstream, 1);
        assert_eq!(m.hwm, 16);
        assert_eq!(m.max_in_flight, 64);
        assert_eq!(m.timeout.as_secs(), 5);
        assert!(c.routes[0].body_log.is_none());
    }

    #[test]
    fn mirror_to_an_unknown_or_own_upstream_is_refused() {
        let e = parse("[route.mirror]\nupstream = \"nope\"\n").expect_err("unknown");
        assert!(e.starts_with("t.toml:12:"), "{e}");
        assert!(e.contains("route[0].mirror.upstream"), "{e}");
        let e = parse("[route.mirror]\nupstream = \"app\"\n").expect_err("own");
        assert!(e.contains("sent twice"), "{e}");
    }

    #[test]
    fn mirror_hwm_out_of_range_names_the_key() {
        let e = parse("[route.mirror]\nupstream = \"shadow\"\nhwm = 0\n").expect_err("hwm");
        assert!(e.contains("route[0].mirror.hwm"), "{e}");
        assert!(e.starts_with("t.toml:13:"), "{e}");
    }

    #[test]
    fn body_log_limit_is_capped() {
        let e =
            parse("[route.body_log]\nresponse_bytes = 18446744073709551615\n").expect_err("cap");
        assert!(e.contains("route[0].body_log.response_bytes"), "{e}");
    }

    #[test]
    fn body_log_defaults() {
        let c = parse("[route.body_log]\nresponse_bytes = 10\n").expect("valid");
        let b = c.routes[0].body_log.expect("body_log");
        assert_eq!((b.request_bytes, b.response_bytes), (1024, 10));
    }
}
