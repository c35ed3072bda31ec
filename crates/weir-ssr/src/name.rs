//! Tag and attribute names as the tag tracker keeps them: lowercased, inline
//! (no allocation), at most [`MAX_NAME`] bytes.

/// Longest name kept, in bytes. A longer name is marked cut: it matches
/// no other name, not even another cut one, since the bytes that would
/// tell them apart are gone (every name the tracker looks for is shorter).
pub(crate) const MAX_NAME: usize = 32;

/// A name, ASCII-lowercased as the HTML tokenizer does (WHATWG HTML
/// §13.2.5.8: uppercase ASCII letters are lowered, every other byte is
/// kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Name {
    bytes: [u8; MAX_NAME],
    len: u8,
    /// More than [`MAX_NAME`] bytes were pushed.
    cut: bool,
}

impl Name {
    /// No name.
    pub(crate) const EMPTY: Name = Name {
        bytes: [0; MAX_NAME],
        len: 0,
        cut: false,
    };

    /// A name from its bytes.
    pub(crate) fn of(name: &[u8]) -> Name {
        let mut n = Name::EMPTY;
        for &b in name {
            n.push(b);
        }
        n
    }

    /// Appends `b`, lowercased if it is an ASCII letter.
    pub(crate) fn push(&mut self, b: u8) {
        if usize::from(self.len) < MAX_NAME {
            self.bytes[usize::from(self.len)] = b.to_ascii_lowercase();
            self.len += 1;
        } else {
            self.cut = true;
        }
    }

    /// The bytes kept.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// How many bytes are kept.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Nothing was pushed.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0 && !self.cut
    }

    /// Whether the name is exactly `lower` (a lowercase name).
    pub(crate) fn is(&self, lower: &[u8]) -> bool {
        !self.cut && self.as_slice() == lower
    }

    /// Whether the name is one of `names`.
    pub(crate) fn is_any(&self, names: &[&[u8]]) -> bool {
        !self.cut && names.contains(&self.as_slice())
    }

    /// Whether both are the same name (never for a cut one).
    pub(crate) fn same(&self, other: &Name) -> bool {
        !self.cut && !other.cut && self.as_slice() == other.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercased_and_long_ones_match_nothing() {
        let mut n = Name::EMPTY;
        for &b in b"TexTArea" {
            n.push(b);
        }
        assert!(n.is(b"textarea") && n.same(&Name::of(b"textarea")));
        let long = [b'a'; MAX_NAME + 3];
        let (a, b) = (Name::of(&long), Name::of(&long[..MAX_NAME + 1]));
        assert!(!a.same(&b) && !a.same(&a) && !a.is(a.as_slice()));
        assert!(!Name::EMPTY.is_any(&[b"a"]) && Name::EMPTY.is_empty());
    }
}
