//! Backpressure policies and high-water marks, chosen where a buffer is made.

use std::fmt;
use std::str::FromStr;

/// What a full buffer does with one more write.
///
/// A buffer is full when it holds its high-water mark (hwm) of entries; hwm
/// counts writes (batches), not bytes (PUSH-033).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Backpressure {
    /// The write waits; once `hwm` writes are waiting, the next one fails
    /// with [`StreamError::BackpressureViolation`](crate::StreamError)
    /// (PUSH-040). `try_write` on a full buffer returns `false` (PUSH-041).
    #[default]
    Strict,
    /// The write waits; the queue of waiting writes is unbounded (PUSH-042).
    Block,
    /// The oldest entry is evicted to make room; never waits (PUSH-044).
    DropOldest,
    /// The new entry is discarded but reported written; never waits (PUSH-045).
    DropNewest,
}

impl Backpressure {
    /// The name used in config files: `strict`, `block`, `drop-oldest`, `drop-newest`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backpressure::Strict => "strict",
            Backpressure::Block => "block",
            Backpressure::DropOldest => "drop-oldest",
            Backpressure::DropNewest => "drop-newest",
        }
    }
}

impl fmt::Display for Backpressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backpressure policy {0:?}: use strict, block, drop-oldest or drop-newest")]
pub struct UnknownPolicy(pub String);

impl FromStr for Backpressure {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "strict" => Ok(Backpressure::Strict),
            "block" => Ok(Backpressure::Block),
            "drop-oldest" => Ok(Backpressure::DropOldest),
            "drop-newest" => Ok(Backpressure::DropNewest),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// Default high-water mark of `push()`, in batches (PUSH-030).
pub const DEFAULT_PUSH_HWM: usize = 4;
/// Default high-water mark of `broadcast()`, in batches (PUSH-030).
pub const DEFAULT_SHARE_HWM: usize = 16;
/// Default high-water mark of `share()` in chunks.
pub const DEFAULT_SHARE_HWM_CHUNKS: usize = 1024;
/// Default high-water mark of `share()` in bytes: 1 MiB.
pub const DEFAULT_SHARE_HWM_BYTES: usize = 1024 * 1024;
/// Largest high-water mark counted in batches or chunks; larger values are
/// clamped (PUSH-032).
pub const MAX_HWM: usize = 1 << 16;

/// Clamps a high-water mark to `1..=MAX_HWM` (0 acts as 1, PUSH-032).
pub fn clamp_hwm(hwm: usize) -> usize {
    hwm.clamp(1, MAX_HWM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in [
            Backpressure::Strict,
            Backpressure::Block,
            Backpressure::DropOldest,
            Backpressure::DropNewest,
        ] {
            assert_eq!(p.as_str().parse::<Backpressure>(), Ok(p));
        }
        assert!("fast".parse::<Backpressure>().is_err());
    }

    #[test]
    fn push_032_hwm_is_clamped() {
        assert_eq!(clamp_hwm(0), 1);
        assert_eq!(clamp_hwm(usize::MAX), MAX_HWM);
        const { assert!(MAX_HWM >= 1024) };
    }
}
