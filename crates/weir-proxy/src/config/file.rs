//! Reading a file the config names, without blocking on a FIFO or reading a
//! device or a huge file whole.

use std::fs::File;
use std::io::Read as _;
use std::path::Path;

use super::error::{ConfigError, MAX_CONFIG_BYTES};

/// Reads at most [`MAX_CONFIG_BYTES`] from the regular file at `path`.
///
/// The type is checked before opening, so a FIFO (whose `open` blocks until
/// a writer appears) is refused rather than waited on, and checked again on
/// the opened handle in case the path changed in between.
pub(super) fn read_limited(path: &Path, label: &str) -> Result<Vec<u8>, ConfigError> {
    let read_error = |source| ConfigError::Read {
        file: label.to_owned(),
        source,
    };
    let not_a_file = || ConfigError::NotAFile {
        file: label.to_owned(),
    };
    if !std::fs::metadata(path).map_err(read_error)?.is_file() {
        return Err(not_a_file());
    }
    let file = File::open(path).map_err(read_error)?;
    if !file.metadata().map_err(read_error)?.is_file() {
        return Err(not_a_file());
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            file: label.to_owned(),
            limit_bytes: MAX_CONFIG_BYTES,
        });
    }
    Ok(bytes)
}
