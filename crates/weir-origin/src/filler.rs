//! The filler text that `/fragment/{name}?bytes={n}` appends to its markup.
//!
//! The filler is an endless run of [`UNIT`] (64 bytes of ASCII letters,
//! spaces, commas and a newline: nothing HTML would read as markup),
//! repeated, so the byte at offset `i` is `UNIT[i % 64]`. Like the
//! [pattern](crate::pattern), it is served as zero-copy slices of one
//! shared block, so a body of any length costs no per-byte work.

use std::sync::LazyLock;

use bytes::Bytes;

/// The repeated text: 64 bytes, ending in a newline.
pub(crate) const UNIT: &[u8; 64] =
    b"Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do\n";

/// Longest slice [`slice`] returns, in bytes (64 KiB, 1024 units).
pub(crate) const MAX_SLICE: usize = 64 * 1024;

/// [`MAX_SLICE`] bytes of filler written twice, so that any run of at most
/// [`MAX_SLICE`] bytes starting in the first copy is contiguous.
static DOUBLED: LazyLock<Bytes> = LazyLock::new(|| {
    let block = UNIT.repeat(2 * MAX_SLICE / UNIT.len());
    // Leaked on purpose, once per process, as in `pattern`: slices of
    // `'static` bytes share no reference count.
    Bytes::from_static(Box::leak(block.into_boxed_slice()))
});

/// Zero-copy view of the `len` filler bytes starting at `offset`.
///
/// `len` is clamped to [`MAX_SLICE`]; callers in this crate never ask for
/// more.
pub(crate) fn slice(offset: u64, len: usize) -> Bytes {
    debug_assert!(len <= MAX_SLICE, "filler slice of {len} bytes");
    let len = len.min(MAX_SLICE);
    // `MAX_SLICE` is a multiple of the unit, so starting inside the first
    // block keeps the text in phase. The remainder fits any usize.
    let start = (offset % MAX_SLICE as u64) as usize;
    DOUBLED.slice(start..start + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filler as its definition says: `UNIT` repeated.
    fn reference(offset: u64, len: usize) -> Vec<u8> {
        (offset..offset + len as u64)
            .map(|i| UNIT[(i % UNIT.len() as u64) as usize])
            .collect()
    }

    #[test]
    fn slices_follow_the_unit_at_any_offset() {
        for (offset, len) in [
            (0, 100),
            (63, 2),
            (65_535, 10),
            (1 << 30, MAX_SLICE),
            (7, 0),
        ] {
            assert_eq!(
                &slice(offset, len)[..],
                &reference(offset, len)[..],
                "{offset}"
            );
        }
    }

    #[test]
    fn unit_has_no_markup_characters() {
        assert!(UNIT.iter().all(|b| b.is_ascii() && !b"<>&\"'".contains(b)));
        assert_eq!(MAX_SLICE % UNIT.len(), 0);
    }
}
