//! The deterministic content that `/bytes`, `/stream` and `/abort` serve.
//!
//! The pattern is an endless byte sequence: a block of [`BLOCK_LEN`] bytes
//! (1 MiB) repeated forever, so the byte at offset `i` is
//! `BLOCK[i % BLOCK_LEN]`. The block comes from the xorshift64* generator
//! seeded with [`SEED`]: each step updates the state `x` with
//! `x ^= x >> 12; x ^= x << 25; x ^= x >> 27` and emits
//! `x * 0x2545_F491_4F6C_DD1D` (wrapping) as 8 little-endian bytes.
//!
//! The block is built once, on first use, and kept for the life of the
//! process as `'static` memory. Serving slices it with [`Bytes`] so no byte
//! of the pattern is copied per request; [`fill`] and [`bytes()`] (for lengths
//! above one block) are the only copying entry points and exist for tests
//! and tools.

use std::sync::LazyLock;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::hex;

/// Length of the repeated block, in bytes (1 MiB).
pub const BLOCK_LEN: usize = 1 << 20;

/// Seed of the xorshift64* generator that fills the block.
pub const SEED: u64 = 0x5745_4952_2D4F_5247;

/// Multiplier of xorshift64* (Vigna, 2016).
const MULTIPLIER: u64 = 0x2545_F491_4F6C_DD1D;

/// The block written twice back to back (2 MiB), so that any run of at most
/// [`BLOCK_LEN`] bytes starting anywhere in the first copy is contiguous.
static DOUBLED: LazyLock<Bytes> = LazyLock::new(build_doubled_block);

fn build_doubled_block() -> Bytes {
    let mut buf = vec![0_u8; 2 * BLOCK_LEN];
    let mut state = SEED;
    for word in buf[..BLOCK_LEN].chunks_exact_mut(8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        word.copy_from_slice(&state.wrapping_mul(MULTIPLIER).to_le_bytes());
    }
    buf.copy_within(..BLOCK_LEN, BLOCK_LEN);
    // Leaked on purpose, once per process: `'static` bytes make every slice
    // a plain pointer copy, with no reference count shared between cores.
    Bytes::from_static(Box::leak(buf.into_boxed_slice()))
}

/// Position of pattern offset `offset` inside the block.
fn block_index(offset: u64) -> usize {
    // The remainder is below BLOCK_LEN, which fits any usize.
    (offset % BLOCK_LEN as u64) as usize
}

/// Zero-copy view of `len` pattern bytes starting at `offset`.
///
/// `len` must be at most [`BLOCK_LEN`]; callers in this crate clamp it.
pub(crate) fn slice(offset: u64, len: usize) -> Bytes {
    debug_assert!(
        len <= BLOCK_LEN,
        "pattern slice of {len} bytes exceeds one block"
    );
    let len = len.min(BLOCK_LEN);
    let start = block_index(offset);
    DOUBLED.slice(start..start + len)
}

/// Writes the pattern bytes at offsets `offset .. offset + dst.len()` into
/// `dst`.
pub fn fill(offset: u64, dst: &mut [u8]) {
    let doubled = &DOUBLED[..];
    let mut start = block_index(offset);
    for piece in dst.chunks_mut(BLOCK_LEN) {
        piece.copy_from_slice(&doubled[start..start + piece.len()]);
        start = (start + piece.len()) % BLOCK_LEN;
    }
}

/// Returns the `len` pattern bytes starting at `offset`.
///
/// Up to [`BLOCK_LEN`] bytes this is a zero-copy view of the shared block;
/// longer runs are copied into a new buffer of `len` bytes.
#[must_use]
pub fn bytes(offset: u64, len: usize) -> Bytes {
    if len <= BLOCK_LEN {
        return slice(offset, len);
    }
    let mut buf = vec![0_u8; len];
    fill(offset, &mut buf);
    Bytes::from(buf)
}

/// SHA-256 of the first `len` bytes of the pattern (offsets `0 .. len`), as
/// 64 lowercase hex digits.
///
/// Takes time proportional to `len` (no allocation beyond the result).
#[must_use]
pub fn sha256_hex(len: u64) -> String {
    let block = &DOUBLED[..BLOCK_LEN];
    let mut hasher = Sha256::new();
    let mut remaining = len;
    while remaining > 0 {
        let take = usize::try_from(remaining).map_or(BLOCK_LEN, |r| r.min(BLOCK_LEN));
        hasher.update(&block[..take]);
        remaining -= take as u64;
    }
    hex::encode(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_starts_with_the_first_xorshift_output() {
        let mut x = SEED;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let first = x.wrapping_mul(MULTIPLIER).to_le_bytes();
        assert_eq!(&bytes(0, 8)[..], &first[..]);
    }

    #[test]
    fn pattern_repeats_every_block() {
        assert_eq!(bytes(5, 100), bytes(BLOCK_LEN as u64 + 5, 100));
        assert_eq!(
            bytes(3 * BLOCK_LEN as u64 - 7, 50),
            bytes(BLOCK_LEN as u64 - 7, 50)
        );
    }

    #[test]
    fn slice_across_block_end_is_contiguous() {
        let across = bytes(BLOCK_LEN as u64 - 4, 8);
        let mut expected = [0_u8; 8];
        expected[..4].copy_from_slice(&bytes(BLOCK_LEN as u64 - 4, 4));
        expected[4..].copy_from_slice(&bytes(0, 4));
        assert_eq!(&across[..], &expected[..]);
    }

    #[test]
    fn fill_matches_bytes_for_multi_block_runs() {
        let len = 2 * BLOCK_LEN + 123;
        let mut buf = vec![0_u8; len];
        fill(77, &mut buf);
        assert_eq!(&bytes(77, len)[..], &buf[..]);
        assert_eq!(&buf[BLOCK_LEN..BLOCK_LEN + 10], &bytes(77, 10)[..]);
    }

    #[test]
    fn sha256_of_nothing_is_the_empty_digest() {
        assert_eq!(
            sha256_hex(0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn sha256_hex_matches_hashing_the_bytes() {
        let len = BLOCK_LEN + 999;
        let expected = hex::encode(&Sha256::digest(bytes(0, len)));
        assert_eq!(sha256_hex(len as u64), expected);
    }
}
