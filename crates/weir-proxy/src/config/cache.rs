//! `[cache]`, checked.

use toml::Spanned;

use super::error::{ConfigError, Errors};
use super::raw::RawCache;
use super::types::CacheSettings;

/// Largest `fill_hwm`, in chunks.
const MAX_FILL_HWM: usize = 4096;

/// `[cache]`, checked: `max_bytes` at least 1, `max_object_bytes` in
/// `1..=max_bytes` (left out: 8 MiB or `max_bytes`, whichever is less), `fill_hwm` in `1..=4096`.
pub(super) fn cache_settings(
    c: &RawCache,
    errors: &Errors<'_>,
) -> Result<CacheSettings, ConfigError> {
    let max_bytes = *c.max_bytes.get_ref();
    check(&c.max_bytes, "max_bytes", 1, u64::MAX, errors)?;
    // Left out, `max_object_bytes` follows a smaller `max_bytes` down:
    // the user never wrote it, so it must not be what the error is about.
    let written = c.max_object_bytes.span() != (0..0);
    let max_object_bytes = if written {
        check(
            &c.max_object_bytes,
            "max_object_bytes",
            1,
            max_bytes,
            errors,
        )?;
        *c.max_object_bytes.get_ref()
    } else {
        (*c.max_object_bytes.get_ref()).min(max_bytes)
    };
    let hwm = Spanned::new(c.fill_hwm.span(), *c.fill_hwm.get_ref() as u64);
    check(&hwm, "fill_hwm", 1, MAX_FILL_HWM as u64, errors)?;
    Ok(CacheSettings {
        max_bytes,
        max_object_bytes,
        fill_hwm: *c.fill_hwm.get_ref(),
        collapse_wait: c.collapse_wait,
        fill_on_client_abort: c.fill_on_client_abort,
    })
}

fn check(
    value: &Spanned<u64>,
    key: &str,
    min: u64,
    max: u64,
    errors: &Errors<'_>,
) -> Result<(), ConfigError> {
    let v = *value.get_ref();
    if v < min || v > max {
        let range = if max == u64::MAX {
            format!("at least {min}")
        } else {
            format!("from {min} to {max}")
        };
        return Err(errors.at(
            value.span(),
            format!("cache.{key}"),
            format!("{v} is out of range: expected {range}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    const UP: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n\
                      [[route]]\nupstream = \"app\"\ncache = true\n\n";

    fn parse(lines: &str) -> Result<Config, String> {
        Config::parse(&format!("{UP}{lines}\n"), "t.toml", Path::new("."))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults() {
        let c = parse("").expect("valid");
        assert!(c.routes[0].cache);
        assert_eq!(c.cache.max_bytes, 64 << 20);
        assert_eq!(c.cache.max_object_bytes, 8 << 20);
        assert_eq!(c.cache.fill_hwm, 64);
        assert_eq!(c.cache.collapse_wait.as_secs(), 5);
        assert!(!c.cache.fill_on_client_abort);
    }

    #[test]
    fn object_larger_than_budget_names_file_line_and_key() {
        let e = parse("[cache]\nmax_bytes = 100\nmax_object_bytes = 200\n").expect_err("too big");
        assert!(e.starts_with("t.toml:11:"), "{e}");
        assert!(e.contains("cache.max_object_bytes"), "{e}");
        let e = parse("[cache]\nfill_hwm = 0\n").expect_err("hwm");
        assert!(e.contains("cache.fill_hwm"), "{e}");
    }

    #[test]
    fn a_small_max_bytes_alone_takes_max_object_bytes_down_with_it() {
        let c = parse("[cache]\nmax_bytes = 1048576\n").expect("valid");
        assert_eq!(c.cache.max_object_bytes, 1 << 20);
        let c = parse("[cache]\nmax_bytes = 1073741824\n").expect("valid");
        assert_eq!(c.cache.max_object_bytes, 8 << 20);
    }

    #[test]
    fn unknown_cache_key_is_refused() {
        let e = parse("[cache]\nmax_byte = 1\n").expect_err("typo");
        assert!(e.contains("max_byte"), "{e}");
    }
}
