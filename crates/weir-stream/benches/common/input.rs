//! Bench inputs: chunk lists built before the timed region.
//!
//! Two styles, as in the plan (section 3, "Two source variants"):
//! - *shared*: every chunk is a zero-copy slice of one pool (`Bytes::slice`),
//!   the fast-webstreams style;
//! - *owned*: every chunk is a fresh allocation holding a copy, like a socket
//!   source (a transform may then mutate it in place); made from the shared
//!   slices by the case's source, inside the timed region (see [`Input`]).

use bytes::Bytes;

/// Size of the random pool that chunks are cut from, in bytes.
const POOL: usize = 2 * 1024 * 1024 + 64 * 1024;

/// Deterministic pseudo-random bytes (xorshift64*), generated once.
pub fn pool() -> &'static Bytes {
    static POOL_BYTES: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    POOL_BYTES.get_or_init(|| {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut v = Vec::with_capacity(POOL);
        while v.len() < POOL {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            v.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        v.truncate(POOL);
        Bytes::from(v)
    })
}

/// Where chunk `i` of length `len` starts in the pool: a small, varying
/// offset, so contents differ but stay near the cache (as in the seeds,
/// which re-use one chunk).
fn offset(i: usize, len: usize) -> usize {
    let off = (i * 64) % 4096;
    off.min(POOL - len)
}

/// A pseudo-random chunk length in `lo..=hi`, fixed by `i`.
pub fn length(i: usize, lo: usize, hi: usize) -> usize {
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    lo + (x as usize) % (hi - lo + 1)
}

/// One iteration's chunks: zero-copy slices of the pool. A fresh iteration
/// only clones the handles (no copy, no allocation per chunk).
///
/// Owned (socket-like) chunks are not built here: a case that wants them
/// copies each slice with [`own`](super::stages::own) *inside* its source,
/// in every contender, as a socket read would (and as fast-webstreams'
/// response-body variants do). Building 20 MiB of owned chunks per
/// iteration up front would also hold gigabytes when a harness batches
/// inputs.
#[derive(Clone, Debug)]
pub struct Input(Vec<Bytes>);

impl Input {
    /// `count` chunks of `size` bytes.
    pub fn shared(size: usize, count: usize) -> Input {
        let p = pool();
        Input(
            (0..count)
                .map(|i| {
                    let o = offset(i, size);
                    p.slice(o..o + size)
                })
                .collect(),
        )
    }

    /// Chunks of pseudo-random lengths in `lo..=hi`, `total` bytes in all
    /// (the last chunk is cut short).
    pub fn mixed(lo: usize, hi: usize, total: usize) -> Input {
        let p = pool();
        let mut v = Vec::new();
        let mut left = total;
        let mut i = 0;
        while left > 0 {
            let n = length(i, lo, hi).min(left);
            let o = offset(i, n);
            v.push(p.slice(o..o + n));
            left -= n;
            i += 1;
        }
        Input(v)
    }

    /// `count` chunks of `size` bytes of valid UTF-8 text, mixing 1- to
    /// 4-byte characters, cut at fixed byte offsets so that characters
    /// straddle chunk boundaries (B02 `text()`). Zero-copy slices of one
    /// buffer.
    pub fn utf8(size: usize, count: usize) -> Input {
        const PHRASE: &str = "Weir streams bytes: données, naïve café, 日本語の文, €5, 🦀 ok. ";
        let total = size * count;
        let mut text = String::with_capacity(total + PHRASE.len());
        while text.len() + PHRASE.len() <= total {
            text.push_str(PHRASE);
        }
        while text.len() < total {
            text.push('.');
        }
        let all = Bytes::from(text);
        Input(
            (0..count)
                .map(|i| all.slice(i * size..(i + 1) * size))
                .collect(),
        )
    }

    /// `count` chunks, each one JSON document of about `size` bytes
    /// (B11 "JSON + SHA-256 per chunk"). Zero-copy slices of one buffer.
    pub fn json(size: usize, count: usize) -> Input {
        let mut all = Vec::new();
        let mut ends = Vec::with_capacity(count);
        for i in 0..count {
            let start = all.len();
            all.extend_from_slice(
                format!(
                    "{{\"id\":{i},\"name\":\"item-{i}\",\"ok\":{},\"price\":{}.{:02},\"tags\":[\"a\",\"b{}\"],\"values\":[",
                    i % 3 == 0,
                    i % 997,
                    i % 100,
                    i % 7
                )
                .as_bytes(),
            );
            let mut k = 0u64;
            // Numbers until the document is `size` bytes long, give or take one entry.
            while all.len() - start + 40 < size {
                if k > 0 {
                    all.push(b',');
                }
                let v = (i as u64 * 31 + k * 17) % 100_003;
                all.extend_from_slice(v.to_string().as_bytes());
                k += 1;
            }
            all.extend_from_slice(format!("],\"note\":\"chunk {i} of {count}\"}}").as_bytes());
            ends.push((start, all.len()));
        }
        let all = Bytes::from(all);
        Input(ends.into_iter().map(|(a, b)| all.slice(a..b)).collect())
    }

    /// The chunks for one iteration. Call outside the timed region.
    pub fn make(&self) -> Vec<Bytes> {
        self.0.clone()
    }

    /// Number of chunks per iteration.
    pub fn chunks(&self) -> usize {
        self.0.len()
    }

    /// Number of bytes per iteration.
    pub fn bytes(&self) -> usize {
        self.0.iter().map(Bytes::len).sum()
    }
}

/// `size` as a short label: `64K`, `1M`, `100B`.
pub fn size_label(size: usize) -> String {
    if size >= 1 << 20 && size.is_multiple_of(1 << 20) {
        format!("{}M", size >> 20)
    } else if size >= 1024 && size.is_multiple_of(1024) {
        format!("{}K", size >> 10)
    } else {
        format!("{size}B")
    }
}

/// The usual shape label: `8Kx1000`.
pub fn shape(size: usize, count: usize) -> String {
    format!("{}x{count}", size_label(size))
}
