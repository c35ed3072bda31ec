//! The resumable msgpack scanner: finds where each top-level value ends
//! without decoding it, one input byte at a time at most once, across
//! chunk boundaries that may fall anywhere (inside a header too).
//!
//! Its whole state is a stack of the items each open container still
//! expects, a partial header (at most 9 bytes), and a count of payload bytes
//! (str, bin, ext data) still to skip. Lengths and tags follow the
//! MessagePack specification, "Formats" section
//! (<https://github.com/msgpack/msgpack/blob/master/spec.md#formats>).

use rmp::Marker;

/// The longest header: a marker and 8 bytes (`uint 64`, `int 64`, `float 64`).
const MAX_HEADER: usize = 9;

/// What one [`Scanner::feed`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A top-level value ends after this many bytes of the input given.
    /// The scanner is back at a value boundary.
    Complete(usize),
    /// Every byte given belongs to a value that is not complete yet.
    NeedMore,
}

/// Why scanning stopped. `at` is the offset of the offending byte within
/// the input given to [`Scanner::feed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScanError {
    /// The current top-level value has more bytes than allowed.
    TooLarge,
    /// A container opened at `at` would nest deeper than allowed.
    TooDeep { at: usize },
    /// Marker `0xc1`, which the specification says is never used, at `at`.
    Reserved { at: usize },
}

/// State of the scan of the current top-level value. See the module docs.
#[derive(Debug)]
pub(crate) struct Scanner {
    /// Items still expected by each open container, innermost last (a map
    /// of n pairs expects 2n items).
    open: Vec<u64>,
    /// The header being read, when it straddles chunks.
    header: [u8; MAX_HEADER],
    /// Header bytes held in `header`; 0 at an item boundary.
    have: usize,
    /// Length of the header being read (marker included).
    need: usize,
    /// Payload bytes of the current str, bin or ext still to pass over.
    skip: u64,
    /// Bytes of the current top-level value seen in earlier `feed` calls.
    seen: usize,
    max_len: usize,
    max_depth: usize,
}

/// Header length (marker included) of the item starting with `marker`.
#[inline]
fn header_len(marker: u8) -> usize {
    match Marker::from_u8(marker) {
        Marker::U8 | Marker::I8 | Marker::Str8 | Marker::Bin8 => 2,
        Marker::FixExt1
        | Marker::FixExt2
        | Marker::FixExt4
        | Marker::FixExt8
        | Marker::FixExt16 => 2, // type byte
        Marker::U16 | Marker::I16 | Marker::Str16 | Marker::Bin16 => 3,
        Marker::Array16 | Marker::Map16 | Marker::Ext8 => 3, // Ext8: length, type
        Marker::U32 | Marker::I32 | Marker::F32 | Marker::Str32 | Marker::Bin32 => 5,
        Marker::Array32 | Marker::Map32 => 5,
        Marker::Ext16 => 4, // length (2), type
        Marker::Ext32 => 6, // length (4), type
        Marker::U64 | Marker::I64 | Marker::F64 => 9,
        Marker::FixPos(_)
        | Marker::FixNeg(_)
        | Marker::FixMap(_)
        | Marker::FixArray(_)
        | Marker::FixStr(_)
        | Marker::Null
        | Marker::True
        | Marker::False
        | Marker::Reserved => 1,
    }
}

#[inline]
fn be16(b: &[u8]) -> u64 {
    u64::from(u16::from_be_bytes([b[0], b[1]]))
}

#[inline]
fn be32(b: &[u8]) -> u64 {
    u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// What a complete header says comes next.
enum Item {
    /// Nothing: the header was the whole item.
    Scalar,
    /// This many payload bytes.
    Payload(u64),
    /// A container of this many items.
    Container(u64),
    /// Marker `0xc1`.
    Reserved,
}

/// Reads a complete header (`h.len() == header_len(h[0])`).
#[inline]
fn item(h: &[u8]) -> Item {
    match Marker::from_u8(h[0]) {
        Marker::FixStr(n) => Item::Payload(u64::from(n)),
        Marker::Str8 | Marker::Bin8 | Marker::Ext8 => Item::Payload(u64::from(h[1])),
        Marker::Str16 | Marker::Bin16 | Marker::Ext16 => Item::Payload(be16(&h[1..])),
        Marker::Str32 | Marker::Bin32 | Marker::Ext32 => Item::Payload(be32(&h[1..])),
        Marker::FixExt1 => Item::Payload(1),
        Marker::FixExt2 => Item::Payload(2),
        Marker::FixExt4 => Item::Payload(4),
        Marker::FixExt8 => Item::Payload(8),
        Marker::FixExt16 => Item::Payload(16),
        Marker::FixArray(n) => Item::Container(u64::from(n)),
        Marker::FixMap(n) => Item::Container(2 * u64::from(n)),
        Marker::Array16 => Item::Container(be16(&h[1..])),
        Marker::Array32 => Item::Container(be32(&h[1..])),
        Marker::Map16 => Item::Container(2 * be16(&h[1..])),
        Marker::Map32 => Item::Container(2 * be32(&h[1..])),
        Marker::Reserved => Item::Reserved,
        Marker::FixPos(_)
        | Marker::FixNeg(_)
        | Marker::Null
        | Marker::True
        | Marker::False
        | Marker::U8
        | Marker::U16
        | Marker::U32
        | Marker::U64
        | Marker::I8
        | Marker::I16
        | Marker::I32
        | Marker::I64
        | Marker::F32
        | Marker::F64 => Item::Scalar,
    }
}

impl Scanner {
    /// A scanner at a value boundary. A top-level value may have at most
    /// `max_len` bytes and nest at most `max_depth` containers.
    pub(crate) fn new(max_len: usize, max_depth: usize) -> Self {
        Scanner {
            open: Vec::new(),
            header: [0; MAX_HEADER],
            have: 0,
            need: 0,
            skip: 0,
            seen: 0,
            max_len,
            max_depth,
        }
    }

    /// Scans `input`, which continues the current value (or starts the
    /// next one), up to the end of the current top-level value or of
    /// `input`, whichever comes first. Each byte is looked at once.
    ///
    /// After an error the scanner must not be fed again.
    pub(crate) fn feed(&mut self, input: &[u8]) -> Result<Step, ScanError> {
        let mut i = 0;
        loop {
            // Pass over a payload.
            if self.skip > 0 {
                let avail = input.len() - i;
                if (avail as u64) < self.skip {
                    self.skip -= avail as u64;
                    return self.need_more(input.len());
                }
                // `skip <= avail` here, so it fits in a usize.
                i += self.skip as usize;
                self.skip = 0;
                if self.item_done() {
                    return self.complete(i);
                }
                continue;
            }
            if i == input.len() {
                return self.need_more(i);
            }
            // Read a header: in place when the input holds all of it,
            // otherwise through `self.header`.
            let start = i;
            let found = if self.have == 0 {
                let need = header_len(input[i]);
                if input.len() - i >= need {
                    i += need;
                    item(&input[start..i])
                } else {
                    let avail = input.len() - i;
                    self.header[..avail].copy_from_slice(&input[i..]);
                    self.have = avail;
                    self.need = need;
                    return self.need_more(input.len());
                }
            } else {
                let take = (self.need - self.have).min(input.len() - i);
                self.header[self.have..self.have + take].copy_from_slice(&input[i..i + take]);
                self.have += take;
                i += take;
                if self.have < self.need {
                    return self.need_more(i);
                }
                self.have = 0;
                item(&self.header[..self.need])
            };
            let done = match found {
                Item::Scalar => self.item_done(),
                Item::Payload(0) => self.item_done(),
                Item::Payload(n) => {
                    // Refuse a declared payload that cannot fit, before
                    // buffering any of it.
                    if (self.seen + i) as u64 + n > self.max_len as u64 {
                        return Err(ScanError::TooLarge);
                    }
                    self.skip = n;
                    false
                }
                Item::Container(n) => {
                    if self.open.len() >= self.max_depth {
                        return Err(ScanError::TooDeep { at: start });
                    }
                    if n == 0 {
                        self.item_done()
                    } else {
                        self.open.push(n);
                        false
                    }
                }
                Item::Reserved => return Err(ScanError::Reserved { at: start }),
            };
            if done {
                return self.complete(i);
            }
        }
    }

    /// Whether the scanner is between top-level values.
    pub(crate) fn at_boundary(&self) -> bool {
        self.seen == 0 && self.have == 0 && self.skip == 0 && self.open.is_empty()
    }

    /// Releases the container stack (after an abort).
    pub(crate) fn reset(&mut self) {
        *self = Scanner::new(self.max_len, self.max_depth);
    }

    /// An item ended: count it against every container it completes.
    /// Returns whether that completes the top-level value.
    #[inline]
    fn item_done(&mut self) -> bool {
        while let Some(left) = self.open.last_mut() {
            *left -= 1;
            if *left > 0 {
                return false;
            }
            self.open.pop();
        }
        true
    }

    #[inline]
    fn complete(&mut self, used: usize) -> Result<Step, ScanError> {
        let len = self.seen + used;
        self.seen = 0;
        if len > self.max_len {
            return Err(ScanError::TooLarge);
        }
        Ok(Step::Complete(used))
    }

    #[inline]
    fn need_more(&mut self, used: usize) -> Result<Step, ScanError> {
        self.seen += used;
        if self.seen > self.max_len {
            return Err(ScanError::TooLarge);
        }
        Ok(Step::NeedMore)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(bytes: &[u8]) -> Vec<usize> {
        let mut s = Scanner::new(usize::MAX, 64);
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            match s.feed(&bytes[pos..]).unwrap() {
                Step::Complete(n) => {
                    pos += n;
                    out.push(pos);
                }
                Step::NeedMore => break,
            }
        }
        out
    }

    #[test]
    fn finds_value_ends() {
        // 1, [1, "ab"], {} , bin8 of 2, fixext1
        let doc = [
            0x01, 0x92, 0x01, 0xa2, b'a', b'b', 0x80, 0xc4, 2, 9, 9, 0xd4, 5, 7,
        ];
        assert_eq!(ends(&doc), vec![1, 6, 7, 11, 14]);
    }

    #[test]
    fn header_split_byte_by_byte() {
        // uint 64 then str16 "xyz"
        let doc = [0xcf, 0, 0, 0, 0, 0, 0, 0, 1, 0xda, 0, 3, b'x', b'y', b'z'];
        let mut s = Scanner::new(usize::MAX, 8);
        let mut completes = Vec::new();
        for (k, b) in doc.iter().enumerate() {
            if let Step::Complete(1) = s.feed(std::slice::from_ref(b)).unwrap() {
                completes.push(k);
            }
        }
        assert_eq!(completes, vec![8, 14]);
        assert!(s.at_boundary());
    }

    #[test]
    fn declared_payload_over_limit_fails_at_header() {
        let mut s = Scanner::new(100, 8);
        assert_eq!(s.feed(&[0xc6, 0, 0, 1, 0]), Err(ScanError::TooLarge));
    }

    #[test]
    fn depth_counts_open_containers() {
        // [[]]: two containers, the empty one included.
        let mut s = Scanner::new(usize::MAX, 2);
        assert_eq!(s.feed(&[0x91, 0x90]), Ok(Step::Complete(2)));
        // [[[]]]: the third is refused where it starts.
        let mut s = Scanner::new(usize::MAX, 2);
        assert_eq!(
            s.feed(&[0x91, 0x91, 0x90]),
            Err(ScanError::TooDeep { at: 2 })
        );
    }
}
