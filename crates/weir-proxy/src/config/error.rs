//! Why a config was rejected, and where in its text.

use std::ops::Range;

/// Why a config was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read config")]
    Read {
        /// The path.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The path names something other than a regular file (a directory, a
    /// FIFO, a device such as `/dev/zero`); symlinks are followed.
    #[error("{file}: not a regular file; give the path of a TOML file")]
    NotAFile {
        /// The path.
        file: String,
    },
    /// The file is longer than Weir reads.
    #[error("{file}: config is larger than the limit of {limit_bytes} bytes")]
    TooLarge {
        /// The path.
        file: String,
        /// The most Weir reads ([`MAX_CONFIG_BYTES`]).
        limit_bytes: u64,
    },
    /// The file was read but is invalid.
    #[error("{file}:{line}:{column}: {}{message}", key_label(.key))]
    Invalid {
        /// The path or label.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The dotted key path, e.g. `route[1].upstream`; empty for a
        /// syntax error, which belongs to no key yet.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// The most bytes [`Config::from_file`](super::Config::from_file) reads: 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

fn key_label(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("key `{key}`: ")
    }
}

/// Where a config's text came from, to point errors at it.
pub(super) struct Errors<'a> {
    pub(super) text: &'a str,
    pub(super) label: &'a str,
}

impl Errors<'_> {
    /// An error at byte range `span` of the text, about `key`.
    pub(super) fn at(
        &self,
        span: Range<usize>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        let (line, column) = line_col(self.text, span.start);
        ConfigError::Invalid {
            file: self.label.to_owned(),
            line,
            column,
            key: key.into(),
            message: message.into(),
        }
    }
}

impl Errors<'_> {
    /// `v` when it lies within `min..=max`, else an error at its span about
    /// `key` saying `… is out of range: expected min to max`.
    pub(super) fn within<T: PartialOrd + Copy + std::fmt::Display>(
        &self,
        v: &toml::Spanned<T>,
        key: impl FnOnce() -> String,
        (min, max): (T, T),
    ) -> Result<T, ConfigError> {
        let n = *v.get_ref();
        if n < min || n > max {
            return Err(self.at(
                v.span(),
                key(),
                format!("{n} is out of range: expected {min} to {max}"),
            ));
        }
        Ok(n)
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
