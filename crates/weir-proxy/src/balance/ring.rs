//! A consistent-hash ring: 1,024 points per unit of weight per server,
//! so that each server's share of keys is within a few percent of its
//! weight's share (with k points a share varies by about 1/sqrt(k) of
//! itself: 3% here, where 160 points would give 8%), adding a server takes
//! about its share of keys from the others, and no other key moves.

/// Points on the ring per unit of server weight. Config validation caps a
/// hash upstream's total weight at 4,096, so a ring has at most 4M points.
pub(crate) const POINTS_PER_WEIGHT: u64 = 1024;

/// 64-bit FNV-1a of `bytes`, then the murmur3 finalizer, so that similar
/// inputs (`host:1`, `host:2`) land far apart.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    fmix(h)
}

/// The murmur3 64-bit finalizer: every input bit moves every output bit.
fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Point `v` of the server whose name hashes to `base`: the murmur3
/// finalizer of the two mixed, so a server's points spread over the ring.
fn point(base: u64, v: u64) -> u64 {
    fmix(base ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The ring: `(point, server index)`, sorted by point.
#[derive(Debug)]
pub(crate) struct Ring {
    points: Vec<(u64, u16)>,
}

impl Ring {
    /// A ring over servers named `names` (their authorities) with `weights`.
    /// A server's points depend only on its own name, so adding or removing
    /// a server leaves every other server's points where they were.
    pub fn new<'a>(servers: impl IntoIterator<Item = (&'a str, u32)>) -> Ring {
        let mut points = Vec::new();
        for (index, (name, weight)) in servers.into_iter().enumerate() {
            let index = u16::try_from(index).unwrap_or(u16::MAX);
            let base = hash(name.as_bytes());
            for v in 0..u64::from(weight) * POINTS_PER_WEIGHT {
                points.push((point(base, v), index));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// The servers in ring order from `key`'s point: the owner first, then
    /// each next distinct server met going round (for when the owner is
    /// unavailable). `usable` says which servers may be returned; the
    /// first usable one is.
    pub fn pick(
        &self,
        key: u64,
        servers: usize,
        mut usable: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let start = self.points.partition_point(|&(p, _)| p < key);
        // Servers met so far (an upstream has at most 256).
        let mut seen = [0u64; 4];
        let mut met = 0;
        for k in 0..self.points.len() {
            let (_, s) = self.points[(start + k) % self.points.len()];
            let s = usize::from(s);
            let (word, bit) = (s / 64 % 4, 1u64 << (s % 64));
            if seen[word] & bit != 0 {
                continue;
            }
            seen[word] |= bit;
            if usable(s) {
                return Some(s);
            }
            met += 1;
            if met >= servers {
                return None;
            }
        }
        None
    }
}
