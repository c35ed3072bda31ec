//! `async` fragments: where their content goes out, and when.
//!
//! An `async` include leaves a placeholder in its slot (`crate::mover`).
//! Its content goes out, inside a `<template>` of its own followed by the
//! script that moves it into place, at the first of:
//!
//! - **a safe point of the page** (`crate::safe`), once the fragment is
//!   complete (its body ended, whole in its spool, and it may end inside
//!   a template: `crate::content`), or, with `async_stream`, each time more
//!   of it is there up to a boundary between its top-level nodes. The page
//!   looks for this at every boundary between template text and a slot and
//!   between two batches of an in-order fragment, and whenever it would
//!   otherwise wait; it never waits for it. Only before its first async
//!   point.
//! - **an async point**: right before the first `</body>` (for the
//!   fragments whose placeholder went out before it) and at the end of the
//!   template (for the rest), in the order they become ready, each streamed
//!   inside its template as it arrives and closed after it
//!   (`crate::content`), as before out-of-order delivery. Nothing goes out
//!   at the `</body>` point unless the page is at a point where Weir's
//!   markup may follow; at the end of the template, what the page left
//!   open is closed first (with a warning), and when it cannot be, the
//!   remaining fragments keep their inline markup (with a warning).
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
//!
//! Only the page itself has `async` fragments: in a nested template,
//! where the tracker cannot know what encloses the slot, they are spliced
//! in order (`crate::compose`).

use std::ops::Range;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use weir_stream::Batch;

use crate::content::ContentCursor;
use crate::mover::{self, Token};
use crate::safe::PageCursor;
use crate::spool::SpoolReader;

/// The `async` fragments of the page.
#[derive(Debug)]
pub(crate) struct Asyncs {
    list: Vec<Entry>,
    /// Follows the page's output while content may still go out (out of
    /// order is allowed for the page).
    cursor: Option<PageCursor>,
    /// Content may go out at safe points: before the first async point.
    early: bool,
    nonce: Option<Arc<str>>,
    stream: bool,
    token: Token,
    /// The end of the template was closed once already.
    end_closed: bool,
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
    /// The script that ends it (removing the slot marker) went out.
    ended: bool,
    /// No more content will go out: all of it went out, or the rest goes
    /// at an async point (`in_order`).
    whole: bool,
    /// Its content goes out at an async point, with its own script.
    in_order: bool,
    /// Its content may still go out early.
    early: bool,
    content: ContentCursor,
    /// Chunks at the front of its spool that `content` has read, and
    /// their bytes.
    fed: usize,
    fed_bytes: u64,
    /// Of those, how many (and how many bytes) end at a boundary between
    /// top-level nodes.
    cut: usize,
    cut_bytes: u64,
    /// At an async point: chunks still to come that `content` read early.
    skip_feed: usize,
}

impl Entry {
    /// The fragment failed to the inline markup its placeholder shows:
    /// nothing of it goes out, and no script (the fallback stays).
    fn keep_inline(&mut self) {
        self.whole = true;
        self.in_order = true;
        self.ended = true;
        self.moved = self.pieces;
    }

    fn mover_due(&self) -> bool {
        self.placeholder_sent
            && !self.in_order
            && (self.moved < self.pieces || (self.whole && !self.ended))
    }

    /// Something of it is still to go out: content, or the script that
    /// ends it (which waits for the placeholder).
    fn pending(&self) -> bool {
        !self.whole || (!self.in_order && !self.ended)
    }
}

/// What an async point asks of the page.
#[derive(Debug)]
pub(crate) enum Point {
    /// Nothing is left for this point: go on past it.
    Done,
    /// Hand on `before`, then (if any) the content of the entry `.0`,
    /// fragment `.1` (through [`Asyncs::body`] and [`Asyncs::body_end`]),
    /// then `after`; then come back to the point.
    Emit {
        before: Bytes,
        body: Option<(usize, usize)>,
        after: Bytes,
    },
}

impl Asyncs {
    /// The `async` fragments of the page; `early`: their content may go
    /// out of order (see `crate::charset`). `nonce` goes on every script,
    /// `token` in every id.
    pub(crate) fn new(early: bool, nonce: Option<Arc<str>>, stream: bool, token: Token) -> Asyncs {
        Asyncs {
            list: Vec::new(),
            cursor: early.then(PageCursor::new),
            early,
            nonce,
            stream,
            token,
            end_closed: false,
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
            ended: false,
            whole: false,
            in_order: false,
            early: true,
            content: ContentCursor::new(),
            fed: 0,
            fed_bytes: 0,
            cut: 0,
            cut_bytes: 0,
            skip_feed: 0,
        });
        (
            self.list.len() - 1,
            mover::placeholder(self.token, id, fallback),
        )
    }

    /// The page handed on `chunk` (template text, an in-order fragment, or
    /// markup of Weir's).
    pub(crate) fn hold(&mut self, chunk: &Bytes) {
        if let Some(c) = &mut self.cursor {
            c.hold(chunk);
        }
    }

    /// Hands `b` on into `out`, following it.
    fn emit(&mut self, b: Bytes, out: &mut Batch) {
        if b.is_empty() {
            return;
        }
        self.hold(&b);
        out.push(b);
    }

    /// The page handed on the placeholder of `entry`.
    pub(crate) fn placeholder_sent(&mut self, entry: usize, markup: &Bytes) {
        self.hold(markup);
        if let Some(e) = self.list.get_mut(entry) {
            e.placeholder_sent = true;
        }
    }

    /// Stops following the page if its markup declared an encoding whose
    /// bytes the cursor cannot read (`crate::charset`): from there on the
    /// page is one without out-of-order delivery.
    fn check_charset(&mut self) {
        if self.cursor.as_mut().is_some_and(PageCursor::unreadable) {
            self.cursor = None;
            self.early = false;
        }
    }

    /// Whether content may still go out at safe points.
    pub(crate) fn is_early(&self) -> bool {
        self.early && self.cursor.is_some()
    }

    /// Stops following the page once nothing more can go out: the template
    /// was read to its end and every fragment is out and moved.
    pub(crate) fn settle(&mut self, template_done: bool) {
        if template_done && !self.list.iter().any(Entry::pending) {
            self.cursor = None;
            self.early = false;
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
        if !self.is_early() {
            return Vec::new();
        }
        let mut ready = Vec::new();
        let mut due = false;
        let mut finished = Vec::new();
        for (k, e) in self.list.iter_mut().enumerate() {
            due |= e.mover_due();
            if e.whole || !e.early {
                continue;
            }
            let Some(r) = reader(e.index) else {
                continue;
            };
            let (chunks, closed) = r.peek(e.fed, cx);
            // Asked only once the fragment ended (nothing was written then).
            if closed && r.keeps_inline() {
                e.keep_inline();
                finished.push(e.index);
                continue;
            }
            for c in &chunks {
                e.content.feed(c);
                e.fed += 1;
                e.fed_bytes += c.len() as u64;
                if self.stream && e.content.at_top_level() {
                    e.cut = e.fed;
                    e.cut_bytes = e.fed_bytes;
                }
            }
            if closed {
                if e.content.may_end() {
                    e.cut = e.fed;
                    e.cut_bytes = e.fed_bytes;
                    ready.push((k, true));
                } else {
                    // It goes at an async point, closed there.
                    e.early = false;
                }
            } else if e.cut > 0 {
                ready.push((k, false));
            }
        }
        self.check_charset();
        let safe = self.cursor.as_mut().is_some_and(PageCursor::is_safe);
        if (ready.is_empty() && !due) || !safe {
            return finished;
        }
        for (k, last) in ready {
            let Some(e) = self.list.get_mut(k) else {
                continue;
            };
            let Some(r) = reader(e.index) else {
                continue;
            };
            let mut piece = Batch::new();
            if e.cut > 0 {
                piece.push(mover::piece_open(self.token, e.id, e.pieces));
                piece.append(r.take_front(e.cut));
                piece.push(mover::PIECE_CLOSE);
                e.pieces += 1;
                e.content.taken(e.cut_bytes);
                e.fed -= e.cut;
                e.fed_bytes -= e.cut_bytes;
                e.cut = 0;
                e.cut_bytes = 0;
            }
            if last {
                e.whole = true;
                finished.push(e.index);
            }
            for b in piece {
                self.emit(b, out);
            }
        }
        for b in self.due_scripts() {
            self.emit(b, out);
        }
        finished
    }

    /// The scripts due: each moves the pieces sent since the previous one.
    fn due_scripts(&mut self) -> Vec<Bytes> {
        let nonce = self.nonce.as_deref();
        let mut out = Vec::new();
        for e in self.list.iter_mut().filter(|e| e.mover_due()) {
            out.push(mover::script(
                self.token,
                e.id,
                e.moved..e.pieces,
                e.whole,
                nonce,
            ));
            e.moved = e.pieces;
            e.ended = e.whole;
        }
        out
    }

    /// At an async point (`end`: the end of the template, else the first
    /// `</body>`): the scripts that are due, then the next fragment whose
    /// placeholder went out and that has bytes (or has ended), streamed in
    /// a template of its own; `Done` when none is left for this point.
    /// Early delivery ends at the first async point. `page` names the
    /// page in warnings.
    pub(crate) fn poll_point<'a>(
        &mut self,
        reader: impl Fn(usize) -> Option<&'a SpoolReader>,
        cx: &mut Context<'_>,
        end: bool,
        page: &str,
    ) -> Poll<Point> {
        self.early = false;
        let waiting = |e: &Entry| !e.whole && (e.placeholder_sent || end);
        let due = self.list.iter().any(Entry::mover_due);
        if !due && !self.list.iter().any(waiting) {
            return Poll::Ready(Point::Done);
        }
        self.check_charset();
        if let Some(c) = &mut self.cursor
            && !c.at_point()
        {
            if !end {
                // Not here: at the end of the template.
                return Poll::Ready(Point::Done);
            }
            let closing = if self.end_closed { None } else { c.closing() };
            self.end_closed = true;
            return Poll::Ready(match closing {
                Some(closing) if !closing.is_empty() => {
                    tracing::warn!(
                        target: "weir::ssr", template = %page,
                        closing = %String::from_utf8_lossy(&closing),
                        "the page ends inside markup that async content cannot follow: closed it first"
                    );
                    Point::Emit {
                        before: closing,
                        body: None,
                        after: Bytes::new(),
                    }
                }
                _ => {
                    let left = self.list.iter().filter(|e| e.pending()).count();
                    tracing::warn!(
                        target: "weir::ssr", template = %page, fragments = left,
                        "the page ends inside markup that nothing closes: async fragments keep their inline markup"
                    );
                    for e in &mut self.list {
                        e.whole = true;
                        e.in_order = true;
                    }
                    Point::Done
                }
            });
        }
        let scripts = self.due_scripts();
        if !scripts.is_empty() {
            return Poll::Ready(Point::Emit {
                before: Bytes::from(scripts.concat()),
                body: None,
                after: Bytes::new(),
            });
        }
        let nonce = self.nonce.as_deref();
        let mut any = false;
        for (k, e) in self.list.iter_mut().enumerate() {
            if !waiting(e) {
                continue;
            }
            let r = reader(e.index);
            if !r.is_none_or(|r| r.poll_ready(cx).is_ready()) {
                any = true;
                continue;
            }
            if r.is_some_and(SpoolReader::keeps_inline) {
                e.keep_inline();
                continue;
            }
            if r.is_none_or(SpoolReader::is_drained) {
                // Nothing (more) to send: only the script that ends it.
                e.whole = true;
                let script = mover::script(self.token, e.id, e.moved..e.pieces, true, nonce);
                e.moved = e.pieces;
                e.ended = true;
                e.in_order = true;
                return Poll::Ready(Point::Emit {
                    before: script,
                    body: None,
                    after: Bytes::new(),
                });
            }
            let piece = e.pieces;
            e.whole = true;
            e.in_order = true;
            e.pieces += 1;
            e.moved = e.pieces;
            e.ended = true;
            e.skip_feed = e.fed;
            let range: Range<usize> = piece..piece + 1;
            let mut after = mover::PIECE_CLOSE.to_vec();
            after.extend_from_slice(&mover::script(self.token, e.id, range, true, nonce));
            return Poll::Ready(Point::Emit {
                before: mover::piece_open(self.token, e.id, piece),
                body: Some((k, e.index)),
                after: Bytes::from(after),
            });
        }
        if !any {
            return Poll::Ready(Point::Done);
        }
        // The page waits here: the first of them in document order may
        // fetch without a slot, so the point never waits on slots that
        // fragments read later hold.
        if let Some(r) = self
            .list
            .iter()
            .find(|e| waiting(e))
            .and_then(|e| reader(e.index))
        {
            r.want();
        }
        Poll::Pending
    }

    /// At an async point: the next batch of entry `entry`'s content; hands
    /// on into `out` what may go out now. Returns whether the content
    /// stopped (nothing more of it goes out: the page may drop it).
    pub(crate) fn body(&mut self, entry: usize, batch: Batch, out: &mut Batch) -> bool {
        let Some(e) = self.list.get_mut(entry) else {
            return true;
        };
        for c in batch {
            let fed = e.skip_feed > 0;
            e.skip_feed = e.skip_feed.saturating_sub(1);
            e.content.push(c, fed);
        }
        let mut ready = Batch::new();
        e.content.drain(&mut ready);
        let stopped = e.content.stopped();
        for b in ready {
            self.emit(b, out);
        }
        stopped
    }

    /// At an async point: entry `entry`'s content ended; what closes it,
    /// handed on into `out`.
    pub(crate) fn body_end(&mut self, entry: usize, out: &mut Batch) {
        let Some(e) = self.list.get_mut(entry) else {
            return;
        };
        let closing = e.content.finish();
        self.emit(closing, out);
    }
}
