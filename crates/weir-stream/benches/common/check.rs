//! What a sink saw, and the check every bench makes against a reference.
//!
//! A bench that loses, duplicates or fails to transform data must panic,
//! never win (plan, "Correctness inside every bench").

/// What reached the sink.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Bytes seen.
    pub bytes: u64,
    /// Chunks seen (or constructions, for churn benches).
    pub chunks: u64,
    /// Wrapping sum of every byte (`Digest` sinks only; 0 otherwise).
    pub sum: u64,
    /// XOR of every byte (`Digest` sinks only; 0 otherwise).
    pub xor: u8,
}

impl Tally {
    /// Adds one chunk as sink `K` sees it.
    #[inline]
    pub fn add<K: Sink>(&mut self, chunk: &[u8]) {
        K::add(self, chunk);
    }

    /// The field-wise sum of two tallies (two consumers of one stream).
    pub fn plus(self, other: Tally) -> Tally {
        Tally {
            bytes: self.bytes + other.bytes,
            chunks: self.chunks + other.chunks,
            sum: self.sum.wrapping_add(other.sum),
            xor: self.xor ^ other.xor,
        }
    }

    /// Panics unless `self` equals `expect`.
    #[track_caller]
    pub fn check(&self, expect: &Tally, what: &str) {
        assert_eq!(
            self, expect,
            "{what}: the sink saw different data than the reference"
        );
    }
}

/// How a sink looks at a chunk. Both are boundary-independent, so a stage
/// that re-chunks (coalescing, 1:2 expansion) is checked the same way.
pub trait Sink: Copy + Send + 'static {
    /// Accounts for one chunk.
    fn add(t: &mut Tally, chunk: &[u8]);
}

/// Counts bytes and chunks, touching no byte ("logical" throughput).
#[derive(Clone, Copy, Debug)]
pub struct Count;

impl Sink for Count {
    #[inline]
    fn add(t: &mut Tally, chunk: &[u8]) {
        t.bytes += chunk.len() as u64;
        t.chunks += 1;
    }
}

/// Counts, and folds every byte into a sum and an XOR ("touched"): for
/// benches whose stages change the bytes. The sum catches a skipped XOR
/// stage even when the byte count is even.
#[derive(Clone, Copy, Debug)]
pub struct Digest;

impl Sink for Digest {
    #[inline]
    fn add(t: &mut Tally, chunk: &[u8]) {
        let (sum, xor) = digest(chunk);
        t.bytes += chunk.len() as u64;
        t.chunks += 1;
        t.sum = t.sum.wrapping_add(sum);
        t.xor ^= xor;
    }
}

/// Sum and XOR of `data`, in blocks the compiler vectorises.
#[inline]
pub fn digest(data: &[u8]) -> (u64, u8) {
    let mut sum = 0u64;
    let mut xor = 0u8;
    // 255 * 65536 fits a u32, so each block sums without overflow.
    for block in data.chunks(65536) {
        let mut s = 0u32;
        for &b in block {
            s += u32::from(b);
            xor ^= b;
        }
        sum += u64::from(s);
    }
    (sum, xor)
}

/// [`digest`] of `data` XORed with `key`, without materialising it.
#[inline]
pub fn digest_xor(data: &[u8], key: u8) -> (u64, u8) {
    let mut sum = 0u64;
    let mut xor = 0u8;
    for block in data.chunks(65536) {
        let mut s = 0u32;
        for &b in block {
            let b = b ^ key;
            s += u32::from(b);
            xor ^= b;
        }
        sum += u64::from(s);
    }
    (sum, xor)
}

/// Like [`Digest`] but blind to chunk boundaries: counts no chunks. For
/// stages whose output chunking is theirs to choose (the core `coalesce`
/// and a hand-written coalescer emit different chunk sizes).
#[derive(Clone, Copy, Debug)]
pub struct Flow;

impl Sink for Flow {
    #[inline]
    fn add(t: &mut Tally, chunk: &[u8]) {
        let (sum, xor) = digest(chunk);
        t.bytes += chunk.len() as u64;
        t.sum = t.sum.wrapping_add(sum);
        t.xor ^= xor;
    }
}

/// Stride of [`Whole`]'s sample: a prime, so it drifts across chunk sizes.
const SAMPLE: usize = 251;

/// For collecting consumers (`bytes()`, `text()`): one call per collected
/// buffer; counts its bytes and sums every 251st byte, by position. Cheap
/// next to the copy it checks, and it fails if bytes are lost, duplicated
/// or misplaced.
#[derive(Clone, Copy, Debug)]
pub struct Whole;

impl Sink for Whole {
    #[inline]
    fn add(t: &mut Tally, buf: &[u8]) {
        t.bytes += buf.len() as u64;
        t.chunks += 1;
        t.sum = t
            .sum
            .wrapping_add(buf.iter().step_by(SAMPLE).map(|&b| u64::from(b)).sum());
    }
}
