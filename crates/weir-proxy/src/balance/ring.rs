//! A consistent-hash ring, in one of two kinds ([`RingHash`]).
//!
//! **Weir's own** (`"weir"`): 1,024 points per unit of weight per server,
//! so that each server's share of keys is within a few percent of its
//! weight's share (with k points a share varies by about 1/sqrt(k) of
//! itself: 3% here, where 160 points would give 8%), adding a server takes
//! about its share of keys from the others, and no other key moves.
//!
//! A ring holds at most [`MAX_POINTS`] points (16 bytes each, so 4 MiB):
//! past a total weight of 256 the points per unit of weight shrink to fit
//! (64 at the largest total, 4,096). Each server keeps the first of its
//! points, so a server added to a large upstream still moves only about
//! its share of keys plus that share of the others' dropped points.
//!
//! **Ketama as nginx builds it** (`"ketama"`, nginx's `hash … consistent`,
//! `ngx_http_upstream_hash_module`): 160 points per unit of weight, each
//! the CRC-32 of the server's host, a NUL, its port and the previous
//! point's four bytes (little-endian; zero for the first); a key's point
//! is the CRC-32 of the key, and its owner the first point at or after
//! it. Given the same server names (`ip:port` as written) and keys, Weir
//! and nginx pick the same server, so an nginx in front of a fleet can
//! send each request straight to its owner.

pub(crate) use crate::config::RingHash;

/// Points per unit of weight on a ketama ring, as nginx makes them.
const KETAMA_POINTS: u32 = 160;

/// Points on the ring per unit of server weight, up to a total weight of
/// `MAX_POINTS / POINTS_PER_WEIGHT` (256).
pub(crate) const POINTS_PER_WEIGHT: u64 = 1024;

/// The most points a ring holds: 262,144.
pub(crate) const MAX_POINTS: u64 = 1 << 18;

/// Points per unit of weight for servers whose weights sum to `total`:
/// [`POINTS_PER_WEIGHT`], or fewer so that the ring stays within
/// [`MAX_POINTS`] (at least 1).
pub(crate) fn points_per_weight(total: u64) -> u64 {
    (MAX_POINTS / total.max(1)).clamp(1, POINTS_PER_WEIGHT)
}

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
    kind: RingHash,
}

impl Ring {
    /// A ring of `kind` over servers named `names` with `weights`.
    pub fn of_kind<'a>(kind: RingHash, servers: impl IntoIterator<Item = (&'a str, u32)>) -> Ring {
        match kind {
            RingHash::Weir => Ring::new(servers),
            RingHash::Ketama => Ring::ketama(servers),
        }
    }

    /// A ketama ring as nginx builds it (see the module's text).
    pub fn ketama<'a>(servers: impl IntoIterator<Item = (&'a str, u32)>) -> Ring {
        let mut points = Vec::new();
        for (index, (name, weight)) in servers.into_iter().enumerate() {
            let index = u16::try_from(index).unwrap_or(u16::MAX);
            // `host:port` splits at the last `:` when only digits follow.
            let (host, port) = match name.rsplit_once(':') {
                Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => (h, p),
                _ => (name, ""),
            };
            let mut base = crc32fast::Hasher::new();
            base.update(host.as_bytes());
            base.update(&[0]);
            base.update(port.as_bytes());
            let mut previous = 0u32;
            for _ in 0..weight.saturating_mul(KETAMA_POINTS) {
                let mut h = base.clone();
                h.update(&previous.to_le_bytes());
                previous = h.finalize();
                points.push((u64::from(previous), index));
            }
        }
        points.sort_unstable();
        // One server per point: nginx keeps one of equal points too.
        points.dedup_by_key(|&mut (p, _)| p);
        Ring {
            points,
            kind: RingHash::Ketama,
        }
    }

    /// The point of key `bytes` on this ring.
    pub fn key_point(&self, bytes: &[u8]) -> u64 {
        match self.kind {
            RingHash::Weir => hash(bytes),
            RingHash::Ketama => u64::from(crc32fast::hash(bytes)),
        }
    }

    /// Which hash this ring uses.
    pub fn kind(&self) -> RingHash {
        self.kind
    }

    /// A ring over servers named `names` (their authorities) with `weights`.
    /// A server's points depend only on its own name, so adding or removing
    /// a server leaves every other server's points where they were.
    pub fn new<'a>(servers: impl IntoIterator<Item = (&'a str, u32)>) -> Ring {
        let servers: Vec<(&str, u32)> = servers.into_iter().collect();
        let per_weight = points_per_weight(servers.iter().map(|&(_, w)| u64::from(w)).sum());
        let mut points = Vec::new();
        for (index, &(name, weight)) in servers.iter().enumerate() {
            let index = u16::try_from(index).unwrap_or(u16::MAX);
            let base = hash(name.as_bytes());
            for v in 0..u64::from(weight) * per_weight {
                points.push((point(base, v), index));
            }
        }
        points.sort_unstable();
        Ring {
            points,
            kind: RingHash::Weir,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Which server owns each of `keys` keys.
    fn owners(ring: &Ring, servers: usize, keys: u64) -> Vec<usize> {
        (0..keys)
            .map(|k| {
                ring.pick(hash(format!("key-{k}").as_bytes()), servers, |_| true)
                    .unwrap_or(usize::MAX)
            })
            .collect()
    }

    #[test]
    fn small_upstreams_get_1024_points_per_unit_of_weight() {
        let ring = Ring::new([("a:1", 1), ("b:1", 2), ("c:1", 1)]);
        assert_eq!(ring.points.len(), 4 * 1024);
        assert_eq!(points_per_weight(256), 1024);
        assert_eq!(points_per_weight(257), 1020);
        assert_eq!(points_per_weight(4096), 64);
        assert_eq!(points_per_weight(0), 1024);
    }

    /// The largest upstream config allows (256 servers of weight 16) costs
    /// 4 MiB of ring, not 64, and still spreads keys by weight.
    #[test]
    fn the_largest_ring_stays_within_max_points_and_balanced() {
        let names: Vec<String> = (0..256)
            .map(|i| format!("10.0.{}.{}:80", i / 250, i % 250))
            .collect();
        let ring = Ring::new(names.iter().map(|n| (n.as_str(), 16)));
        assert_eq!(ring.points.len() as u64, MAX_POINTS);
        let keys = 256 * 400;
        let mut counts = vec![0u32; 256];
        for o in owners(&ring, 256, keys) {
            counts[o] += 1;
        }
        // 1,024 points per server: each share within 25% of 400.
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(
            min.is_some_and(|&m| m >= 300) && max.is_some_and(|&m| m <= 500),
            "{min:?}..{max:?}"
        );
    }

    /// nginx's ring, from its definition; `crates/weir/tests/ketama_nginx.rs`
    /// checks it against nginx itself.
    #[test]
    fn a_ketama_ring_has_160_points_per_weight_and_crc32_keys() {
        let ring = Ring::ketama([("127.0.0.1:8080", 1), ("127.0.0.2:8080", 2)]);
        assert_eq!(ring.points.len(), 480);
        assert_eq!(ring.kind(), RingHash::Ketama);
        // The first point of 127.0.0.1:8080 is crc32("127.0.0.1\08080" ++ [0; 4]).
        let first = crc32fast::hash(b"127.0.0.1\x008080\0\0\0\0");
        assert!(
            ring.points
                .iter()
                .any(|&(p, s)| p == u64::from(first) && s == 0)
        );
        assert_eq!(ring.key_point(b"abc"), u64::from(crc32fast::hash(b"abc")));
        // Weight 2 has twice the points, so about twice the keys.
        let mut counts = [0u32; 2];
        for k in 0..30_000u32 {
            let point = ring.key_point(format!("/k/{k}").as_bytes());
            if let Some(s) = ring.pick(point, 2, |_| true) {
                counts[s] += 1;
            }
        }
        assert!((8_000..12_000).contains(&counts[0]), "{counts:?}");
    }

    /// Adding a server to a large upstream (where points per weight shrink)
    /// moves about its share of keys: keys that move go to it, apart from
    /// the few on the others' dropped points.
    #[test]
    fn adding_a_server_to_a_large_ring_moves_about_its_share() {
        let names: Vec<String> = (0..65).map(|i| format!("10.1.0.{i}:80")).collect();
        let before = Ring::new(names[..64].iter().map(|n| (n.as_str(), 16)));
        let after = Ring::new(names.iter().map(|n| (n.as_str(), 16)));
        let keys = 65_000;
        let (a, b) = (owners(&before, 64, keys), owners(&after, 65, keys));
        let moved = a.iter().zip(&b).filter(|(x, y)| x != y).count();
        let to_new = b.iter().filter(|&&o| o == 64).count();
        // Its share is 1/65 (1,000 keys); the others lose 1.6% of their
        // points (256 → 252 per unit of weight), so ~1,000 keys more move.
        assert!((800..=1200).contains(&to_new), "{to_new}");
        assert!(
            moved <= to_new + 1500,
            "moved {moved}, to the new server {to_new}"
        );
    }
}
