//! Durations written as human strings: `"250ms"`, `"5s"`, `"2m"`, `"1h 30m"`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// The longest duration a config may give: 7 days. Anything longer is
/// almost certainly a typo, and a deadline far enough in the future
/// overflows `Instant + Duration` inside hyper and tokio.
pub(super) const MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Deserializes a duration from a human string (parsed by `humantime`).
///
/// The duration must be greater than zero and at most 7 days ([`MAX`]);
/// a longer one is rejected as `duration "…" is longer than the maximum of
/// 7 days`, so no timer built from the config can overflow at runtime.
pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    let dur = humantime::parse_duration(&text).map_err(|e| {
        de::Error::custom(format!(
            "invalid duration {text:?} ({e}); write it like \"250ms\", \"5s\" or \"2m\""
        ))
    })?;
    if dur.is_zero() {
        return Err(de::Error::custom(format!(
            "duration {text:?} must be greater than zero"
        )));
    }
    if dur > MAX {
        return Err(de::Error::custom(format!(
            "duration {text:?} is longer than the maximum of 7 days (\"7d\")"
        )));
    }
    Ok(dur)
}

/// A duration as written, for a field whose place in the file an error
/// must name (`Spanned<Written>`); read as [`deserialize`] reads it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Written(pub Duration);

impl<'de> Deserialize<'de> for Written {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d).map(Written)
    }
}

/// A deadline for a peer or a store that answers from memory
/// (`fleet.peer_timeout`, `fleet.rate_timeout`, `redis.timeout`), for
/// `deserialize_with`: as [`deserialize`], and at least 1 ms, since a
/// shorter one fails every ask.
pub(super) fn at_least_1ms<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let dur = deserialize(d)?;
    if dur < Duration::from_millis(1) {
        return Err(de::Error::custom(format!(
            "duration {} is shorter than 1ms: every ask would time out",
            format(dur)
        )));
    }
    Ok(dur)
}

/// Formats a duration the way the config accepts it, for `weir check`: a
/// whole number of the largest unit that represents it exactly, out of
/// seconds, milliseconds, microseconds and nanoseconds (`"90s"`, `"600s"`,
/// `"250ms"`, `"1500ms"`). Parsing the result gives back `d`.
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos.is_multiple_of(1_000_000_000) {
        format!("{}s", d.as_secs())
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else if nanos.is_multiple_of(1_000) {
        format!("{}us", d.as_micros())
    } else {
        format!("{nanos}ns")
    }
}
