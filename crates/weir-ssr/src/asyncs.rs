//! `async` fragments: where their content goes out, and when.
//!
//! An `async` include leaves a placeholder in its slot (`crate::mover`).
//! Its content goes out, inside a `<template>` of its own followed by the
//! script that moves it into place, at the first of:
//!
//! - **a safe point of the page** (`crate::safe`), once the fragment is
//!   complete (its body ended, whole in its spool, and it ends where a
//!   template may end), or, with `async_stream`, each time more of it is
//!   there up to a boundary between its top-level nodes. The page looks
//!   for this at every boundary between template text and a slot and
//!   between two batches of an in-order fragment, and whenever it would
//!   otherwise wait; it never waits for it. Only the page (depth 0) does
//!   this, and only before its `</body>`.
//! - **an async point**: right before the first `</body>` (for the
//!   fragments whose placeholder went out before it) and at the end of the
//!   template (for the rest), in the order they become ready, each streamed
//!   inside its template as it arrives, as before out-of-order delivery.
//!
//! Content that goes out before its placeholder waits in the document (a
//! template is inert); the placeholder is then followed, at the next safe
//! point or async point, by the script that moves it.
//!
//! A fragment bigger than its buffer (`fragment_buffer_bytes`) never
//! completes there, and one the page budget holds back may not either:
//! those go at an async point. Following the page's output costs a pass of
//! the tag tracker over it; the page stops as soon as its template was
//! read to the end and no `async` fragment is left, so a page without
//! them pays only while its template is still arriving.

use std::ops::Range;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use weir_stream::Batch;

use crate::mover;
use crate::safe::{ContentCursor, PageCursor};
use crate::spool::SpoolReader;

/// The `async` fragments of one template level.
#[derive(Debug)]
pub(crate) struct Asyncs {
    list: Vec<Entry>,
    /// Follows the page's output while content may still go out early:
    /// at the page level, until its first async point.
    cursor: Option<PageCursor>,
    nonce: Option<Arc<str>>,
    stream: bool,
}

/// One `async` fragment.
#[derive(Debug)]
struct Entry {
    /// Its index among the level's fragments.
    index: usize,
    /// Its placeholder number, page-wide.
    id: usize,
    placeholder_sent: bool,
    /// Pieces of content handed on.
    pieces: usize,
    /// Pieces a script handed on moves.
    moved: usize,
    /// No more content will go out early: all of it went out, or the
    /// rest goes at an async point (`in_order`).
    whole: bool,
    /// Its content goes out at an async point, through the page's slot.
    in_order: bool,
    /// Its content may still go out early.
    early: bool,
    content: ContentCursor,
    /// Chunks of its spool that `content` has seen.
    fed: usize,
    /// Of those, how many end at a boundary between top-level nodes.
    cut: usize,
}

impl Entry {
    fn mover_due(&self) -> bool {
        self.placeholder_sent && self.moved < self.pieces && !self.in_order
    }

    fn pending(&self) -> bool {
        !self.whole || self.mover_due()
    }
}

/// What an async point asks of the page.
#[derive(Debug)]
pub(crate) enum Point {
    /// Nothing is left for this point: go on past it.
    Done,
    /// Hand on `before`, then the fragment `frag`'s slot (if any), then
    /// `after`; then come back to the point.
    Emit {
        before: Bytes,
        frag: Option<usize>,
        after: Bytes,
    },
}

impl Asyncs {
    /// The `async` fragments of a level; `top`: the page itself, where
    /// content may go out early. `nonce` goes on every script.
    pub(crate) fn new(top: bool, nonce: Option<Arc<str>>, stream: bool) -> Asyncs {
        Asyncs {
            list: Vec::new(),
            cursor: top.then(PageCursor::new),
            nonce,
            stream,
        }
    }

    /// A new `async` fragment, the level's fragment `index`, placeholder
    /// `id`: its entry number and its placeholder markup.
    pub(crate) fn add(&mut self, index: usize, id: usize, fallback: &[u8]) -> (usize, Bytes) {
        self.list.push(Entry {
            index,
            id,
            placeholder_sent: false,
            pieces: 0,
            moved: 0,
            whole: false,
            in_order: false,
            early: true,
            content: ContentCursor::new(),
            fed: 0,
            cut: 0,
        });
        (self.list.len() - 1, mover::placeholder(id, fallback))
    }

    /// The page handed on `chunk` (template text or an in-order fragment).
    pub(crate) fn hold(&mut self, chunk: &Bytes) {
        if let Some(c) = &mut self.cursor {
            c.hold(chunk);
        }
    }

    /// The page handed on the placeholder of `entry`.
    pub(crate) fn placeholder_sent(&mut self, entry: usize, markup: &Bytes) {
        self.hold(markup);
        if let Some(e) = self.list.get_mut(entry) {
            e.placeholder_sent = true;
        }
    }

    /// Whether content may still go out early.
    pub(crate) fn is_early(&self) -> bool {
        self.cursor.is_some()
    }

    /// Stops looking for early chances once none can come: the template
    /// was read to its end and every fragment is out and moved.
    pub(crate) fn settle(&mut self, template_done: bool) {
        if template_done && !self.list.iter().any(Entry::pending) {
            self.cursor = None;
        }
    }

    /// At a boundary of the page's output: hands on into `out` whatever
    /// content is ready, and the scripts that are due, if the page is at a
    /// safe point. `reader(i)` is fragment `i`'s spool, while the page
    /// has it. Returns the fragments whose content is all out (the page
    /// lets go of them). Registers `cx` with the fragments not yet ready.
    pub(crate) fn splice<'a>(
        &mut self,
        reader: impl Fn(usize) -> Option<&'a SpoolReader>,
        cx: &mut Context<'_>,
        out: &mut Batch,
    ) -> Vec<usize> {
        let Some(cursor) = &mut self.cursor else {
            return Vec::new();
        };
        let mut ready = Vec::new();
        let mut due = false;
        for (k, e) in self.list.iter_mut().enumerate() {
            due |= e.mover_due();
            if e.whole || !e.early {
                continue;
            }
            let Some(r) = reader(e.index) else {
                continue;
            };
            let (chunks, closed) = r.peek(e.fed, cx);
            for c in &chunks {
                e.content.feed(c);
                e.fed += 1;
                if self.stream && e.content.at_top_level() {
                    e.cut = e.fed;
                }
            }
            if closed {
                if e.content.may_end() {
                    e.cut = e.fed;
                    ready.push((k, true));
                } else {
                    // It goes at an async point, as it is.
                    e.early = false;
                }
            } else if e.cut > 0 {
                ready.push((k, false));
            }
        }
        if (ready.is_empty() && !due) || !cursor.is_safe() {
            return Vec::new();
        }
        let mut finished = Vec::new();
        for (k, last) in ready {
            let Some(e) = self.list.get_mut(k) else {
                continue;
            };
            let Some(r) = reader(e.index) else {
                continue;
            };
            out.push(mover::piece_open(e.id, e.pieces));
            out.append(r.take_front(e.cut));
            out.push(mover::PIECE_CLOSE);
            e.pieces += 1;
            e.fed -= e.cut;
            e.cut = 0;
            if last {
                e.whole = true;
                finished.push(e.index);
            }
        }
        let nonce = self.nonce.as_deref();
        for e in self.list.iter_mut().filter(|e| e.mover_due()) {
            out.push(mover::script(e.id, e.moved..e.pieces, e.whole, nonce));
            e.moved = e.pieces;
        }
        finished
    }

    /// At an async point (`end`: the end of the template, else the first
    /// `</body>`): the scripts that are due, then the next fragment whose
    /// placeholder went out and that has bytes (or has ended), streamed in
    /// a template of its own; `Done` when none is left for this point.
    /// Early delivery ends at the first async point.
    pub(crate) fn poll_point<'a>(
        &mut self,
        reader: impl Fn(usize) -> Option<&'a SpoolReader>,
        cx: &mut Context<'_>,
        end: bool,
    ) -> Poll<Point> {
        self.cursor = None;
        let nonce = self.nonce.as_deref();
        let mut scripts = Vec::new();
        for e in self.list.iter_mut().filter(|e| e.mover_due()) {
            scripts.extend_from_slice(&mover::script(e.id, e.moved..e.pieces, e.whole, nonce));
            e.moved = e.pieces;
        }
        if !scripts.is_empty() {
            return Poll::Ready(Point::Emit {
                before: Bytes::from(scripts),
                frag: None,
                after: Bytes::new(),
            });
        }
        let waiting = |e: &&mut Entry| !e.whole && (e.placeholder_sent || end);
        let mut any = false;
        for e in self.list.iter_mut().filter(waiting) {
            any = true;
            let ready = reader(e.index).is_none_or(|r| r.poll_ready(cx).is_ready());
            if !ready {
                continue;
            }
            let k = e.pieces;
            e.whole = true;
            e.in_order = true;
            e.pieces += 1;
            e.moved = e.pieces;
            let range: Range<usize> = k..k + 1;
            let mut after = mover::PIECE_CLOSE.to_vec();
            after.extend_from_slice(&mover::script(e.id, range, true, nonce));
            return Poll::Ready(Point::Emit {
                before: mover::piece_open(e.id, k),
                frag: Some(e.index),
                after: Bytes::from(after),
            });
        }
        if any {
            Poll::Pending
        } else {
            Poll::Ready(Point::Done)
        }
    }
}
