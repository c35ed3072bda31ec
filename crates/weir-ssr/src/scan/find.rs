//! Byte searches tuned for the short distances inside markup: the first
//! 32 bytes are searched 8 at a time in a `u64` (no call, no setup), the
//! rest by `memchr`'s SIMD search. Between two tags or two attributes the
//! next interesting byte is usually a few bytes away, where `memchr`'s
//! per-call cost would dominate.

use memchr::{memchr, memchr2, memchr3};

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bytes searched word by word before handing over to `memchr`.
const SHORT: usize = 32;

/// The high bit of each byte of `w` that equals `b` (exact: no carries
/// between bytes).
#[inline(always)]
fn eq_mask(w: u64, b: u8) -> u64 {
    let x = w ^ (LO * u64::from(b));
    let nonzero = ((x & !HI).wrapping_add(!HI)) | x;
    !nonzero & HI
}

/// Like [`eq_mask`] but cheaper, and exact only up to the first match: a
/// byte just above a match may be flagged too (the borrow of the
/// subtraction). Good for "where is the first one" and "is there one".
#[inline(always)]
fn first_mask(w: u64, b: u8) -> u64 {
    let x = w ^ (LO * u64::from(b));
    x.wrapping_sub(LO) & !x & HI
}

#[inline(always)]
fn short_search(
    buf: &[u8],
    mask: impl Fn(u64) -> u64,
    is: impl Fn(u8) -> bool,
) -> Result<Option<usize>, usize> {
    let head = &buf[..buf.len().min(SHORT)];
    let mut words = head.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let mut le = [0u8; 8];
        le.copy_from_slice(w);
        let m = mask(u64::from_le_bytes(le));
        if m != 0 {
            return Ok(Some(at + (m.trailing_zeros() / 8) as usize));
        }
        at += 8;
    }
    if let Some(k) = words.remainder().iter().position(|&b| is(b)) {
        return Ok(Some(at + k));
    }
    if head.len() == buf.len() {
        Ok(None)
    } else {
        // Not in the first SHORT bytes: search on from there.
        Err(SHORT)
    }
}

/// The first `a` in `buf`.
#[inline]
pub(crate) fn find1(a: u8, buf: &[u8]) -> Option<usize> {
    match short_search(buf, |w| eq_mask(w, a), |b| b == a) {
        Ok(r) => r,
        Err(from) => memchr(a, &buf[from..]).map(|k| from + k),
    }
}

/// The first `a` or `b` in `buf`.
#[inline]
pub(crate) fn find2(a: u8, b: u8, buf: &[u8]) -> Option<usize> {
    match short_search(buf, |w| eq_mask(w, a) | eq_mask(w, b), |x| x == a || x == b) {
        Ok(r) => r,
        Err(from) => memchr2(a, b, &buf[from..]).map(|k| from + k),
    }
}

/// The first `a`, `b` or `c` in `buf`.
#[inline]
pub(crate) fn find3(a: u8, b: u8, c: u8, buf: &[u8]) -> Option<usize> {
    match short_search(
        buf,
        |w| eq_mask(w, a) | eq_mask(w, b) | eq_mask(w, c),
        |x| x == a || x == b || x == c,
    ) {
        Ok(r) => r,
        Err(from) => memchr3(a, b, c, &buf[from..]).map(|k| from + k),
    }
}

/// What [`quick_gt`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quick {
    /// The first `>` is `buf[at]`; `odd`: an odd number of `"` before it
    /// (and no `'`); `next_lt`: the first `<` after it, when it is in the
    /// same 8-byte word (else unknown).
    Gt {
        at: usize,
        odd: bool,
        next_lt: Option<usize>,
    },
    /// A `'` comes before any `>`.
    SingleQuote,
    /// No `>` and no `'`; `odd`: the number of `"` in `buf` is odd.
    None { odd: bool },
}

/// One pass over a tag's bytes: the first `>`, and the `"` and `'`
/// before it, 8 bytes at a time.
#[inline]
pub(crate) fn quick_gt(buf: &[u8]) -> Quick {
    let mut dq = 0u64;
    let odd = |dq: u64| dq.count_ones() % 2 == 1;
    let mut words = buf.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let mut le = [0u8; 8];
        le.copy_from_slice(w);
        let w = u64::from_le_bytes(le);
        let gt = first_mask(w, b'>');
        let (d, s) = (eq_mask(w, b'"'), first_mask(w, b'\''));
        // The bits of the bytes before the first `>` (all when none).
        let before = if gt == 0 {
            u64::MAX
        } else {
            (gt & gt.wrapping_neg()) - 1
        };
        if s & before != 0 {
            return Quick::SingleQuote;
        }
        // Only the parity of the count matters, and popcount(a ^ b) has the
        // parity of popcount(a) + popcount(b).
        dq ^= d & before;
        if gt != 0 {
            let after = !(before | (gt & gt.wrapping_neg()));
            let lt = eq_mask(w, b'<') & after;
            return Quick::Gt {
                at: at + (gt.trailing_zeros() / 8) as usize,
                odd: odd(dq),
                next_lt: (lt != 0).then(|| at + (lt.trailing_zeros() / 8) as usize),
            };
        }
        at += 8;
    }
    let mut tail_odd = false;
    for (k, &b) in words.remainder().iter().enumerate() {
        match b {
            b'>' => {
                return Quick::Gt {
                    at: at + k,
                    odd: odd(dq) != tail_odd,
                    next_lt: None,
                };
            }
            b'\'' => return Quick::SingleQuote,
            b'"' => tail_odd = !tail_odd,
            _ => {}
        }
    }
    Quick::None {
        odd: odd(dq) != tail_odd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_memchr_at_every_length_and_position() {
        let mut buf = [b'x'; 100];
        for len in 0..buf.len() {
            for at in 0..=len {
                if at < len {
                    buf[at] = b'<';
                }
                let h = &buf[..len];
                assert_eq!(find1(b'<', h), memchr(b'<', h), "{len} {at}");
                assert_eq!(find2(b'"', b'<', h), memchr2(b'"', b'<', h));
                assert_eq!(find3(b'>', b'\'', b'<', h), memchr3(b'>', b'\'', b'<', h));
                if at < len {
                    buf[at] = b'x';
                }
            }
        }
        for len in 0..40 {
            for at in 0..len {
                let mut t = vec![b'a'; len];
                t[at] = b'>';
                let gt = |t: &[u8]| match quick_gt(t) {
                    Quick::Gt { at, odd, next_lt } => Some((at, odd, next_lt)),
                    _ => None,
                };
                for dq in 0..at {
                    t[dq] = b'"';
                    assert_eq!(
                        gt(&t).map(|g| (g.0, g.1)),
                        Some((at, true)),
                        "{len} {at} {dq}"
                    );
                    t[dq] = b'a';
                }
                assert_eq!(gt(&t).map(|g| (g.0, g.1)), Some((at, false)));
                assert_eq!(gt(&t).and_then(|g| g.2), None);
                if at + 1 < len {
                    t[at + 1] = b'\'';
                    assert_eq!(gt(&t).map(|g| (g.0, g.1)), Some((at, false)));
                    for lt in at + 1..len {
                        t[lt] = b'<';
                        let next = gt(&t).and_then(|g| g.2);
                        // Exact when known, and known within the `>`'s word.
                        assert!(next.is_none() || next == Some(lt), "{len} {at} {lt}");
                        if lt / 8 == at / 8 && len - len % 8 > lt {
                            assert_eq!(next, Some(lt), "{len} {at} {lt}");
                        }
                        t[lt] = b'a';
                    }
                }
                t[at] = b'\'';
                assert_eq!(quick_gt(&t), Quick::SingleQuote);
            }
            assert_eq!(
                quick_gt(&vec![b'"'; len]),
                Quick::None { odd: len % 2 == 1 }
            );
        }
        // High bytes and neighbours of the needle do not confuse the mask.
        let h = [0x80u8, 0xff, b'<' ^ 0x80, b'<' + 1, b'<' - 1, 0, b'<', 0x3c];
        assert_eq!(find1(b'<', &h), Some(6));
    }
}
