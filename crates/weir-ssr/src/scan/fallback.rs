//! A fragment's inline fallback while it is collected: shared with the
//! input chunk while it lies in one, copied once it spans two, cut at the
//! limit with one warning.

use bytes::{Bytes, BytesMut};

use super::{Include, Piece, ScanWarning};

/// A fragment waiting for its `</fragment>`.
#[derive(Debug)]
pub(crate) struct Fallback {
    pub(crate) include: Box<Include>,
    pub(crate) markup: Markup,
    /// The markup was cut at the limit (the warning went out).
    pub(crate) cut: bool,
}

/// Fallback markup so far: a slice of one chunk while it fits in one.
#[derive(Debug, Default)]
pub(crate) enum Markup {
    #[default]
    Empty,
    Shared(Bytes),
    Owned(BytesMut),
}

impl Markup {
    fn len(&self) -> usize {
        match self {
            Markup::Empty => 0,
            Markup::Shared(b) => b.len(),
            Markup::Owned(b) => b.len(),
        }
    }

    fn extend(&mut self, bytes: &[u8]) {
        match self {
            Markup::Empty => *self = Markup::Owned(BytesMut::from(bytes)),
            Markup::Shared(b) => {
                let mut owned = BytesMut::with_capacity(b.len() + bytes.len());
                owned.extend_from_slice(b);
                owned.extend_from_slice(bytes);
                *self = Markup::Owned(owned);
            }
            Markup::Owned(b) => b.extend_from_slice(bytes),
        }
    }

    fn freeze(self) -> Bytes {
        match self {
            Markup::Empty => Bytes::new(),
            Markup::Shared(b) => b,
            Markup::Owned(b) => b.freeze(),
        }
    }
}

impl Fallback {
    /// Adds `chunk[from..to]` (shared when it is the first piece), up to `max`.
    pub(crate) fn collect(
        &mut self,
        chunk: &Bytes,
        from: usize,
        to: usize,
        max: usize,
        out: &mut Vec<Piece>,
    ) {
        let take = self.room(to - from, max, out);
        if take == 0 {
            return;
        }
        match self.markup {
            Markup::Empty => self.markup = Markup::Shared(chunk.slice(from..from + take)),
            _ => self.markup.extend(&chunk[from..from + take]),
        }
    }

    /// Adds copied bytes, up to `max`.
    pub(crate) fn collect_copy(&mut self, bytes: &[u8], max: usize, out: &mut Vec<Piece>) {
        let take = self.room(bytes.len(), max, out);
        if take > 0 {
            self.markup.extend(&bytes[..take]);
        }
    }

    /// How many of `n` more bytes fit; warns once when some don't.
    fn room(&mut self, n: usize, max: usize, out: &mut Vec<Piece>) -> usize {
        let room = max.saturating_sub(self.markup.len());
        if n > room && !self.cut {
            self.cut = true;
            out.push(Piece::Warning(ScanWarning::FallbackTooLong {
                offset: self.include.offset,
            }));
        }
        n.min(room)
    }

    pub(crate) fn into_piece(self) -> Piece {
        let mut include = self.include;
        include.fallback = self.markup.freeze();
        Piece::Include(include)
    }
}
