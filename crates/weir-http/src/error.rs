//! The crate's error type.

use std::fmt;

/// A field value that does not follow its grammar, where the caller needs
/// to know where (most parsers here answer `None` instead).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FieldError {
    /// A member of an entity-tag list is not an `entity-tag` (RFC 9110
    /// §8.8.3); `offset` is its first byte's index in the field value.
    MalformedEntityTag {
        /// Index of the malformed member's first byte in the value.
        offset: usize,
    },
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldError::MalformedEntityTag { offset } => {
                write!(f, "malformed entity-tag at byte {offset}")
            }
        }
    }
}

impl std::error::Error for FieldError {}
