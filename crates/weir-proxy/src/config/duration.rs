//! Durations written as human strings: `"250ms"`, `"5s"`, `"2m"`, `"1h 30m"`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// Deserializes a duration from a human string (parsed by `humantime`).
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
    Ok(dur)
}

/// Formats a duration the way the config accepts it, for `weir check`.
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
