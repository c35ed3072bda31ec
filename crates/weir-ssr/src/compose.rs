//! The page: template pieces and fragment slots, emitted in document order.
//!
//! The template is scanned as it arrives, up to `template_read_ahead` bytes
//! ahead of the client (an include counts as its inline fallback plus
//! [`INCLUDE_COST`]), and every include found starts its fragment's task
//! at once (`crate::fragment`). The page is a [`Source`]: each poll hands
//! on the template text up to the next slot and whatever the fragment at the
//! head of the line has received, so that fragment streams chunk by chunk
//! while the ones after it fill their spools (bounded in bytes).
//!
//! At every fragment boundary the page returns `Pending` once (waking
//! itself at once): the pipeline downstream takes that as an idle point and
//! flushes (a compressor's sync flush, a coalescer's partial batch), so a
//! finished fragment reaches the client even when the next one is ready.
//!
//! `async` fragments leave a placeholder where they stand; their content
//! goes out as soon as it is ready at the next safe point of the page, or
//! at the latest before the first `</body>` (or at the end of a template
//! without one), each inside a `<template>` with a small inline script
//! that moves it into place (`crate::asyncs`). Only the page does this:
//! in a nested template, an `async` include is spliced in order, since
//! nothing tells where that template's own slot stands in the page.
//!
//! Every spool of the page draws on one byte budget, `page_buffer_bytes`
//! (`crate::spool`): past it, fragments that hold bytes are not read until
//! the page has taken some.
//!
//! Dropping the page aborts every fragment task: in-flight fetches are
//! cancelled and their upstream connections closed.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, StatusCode};
use tokio::task::AbortHandle;
use weir_stream::{Batch, BatchResult, Source, StreamError};

use crate::asyncs::{Asyncs, Point};
use crate::fetch::{BoxSource, Fetcher};
use crate::fragment::{self, Job};
use crate::mover::Token;
use crate::observe::{Failure, FragmentEvent, FragmentOutcome, Observer};
use crate::permits::{Key, Permits};
use crate::scan::{Include, Piece, Scanner};
use crate::settings::ComposeSettings;
use crate::spool::{Budget, Head, SpoolReader, spool};

/// Fields of the primary fragment's response that become the page's
/// (besides its status): `Set-Cookie` (all of them), `Cache-Control`,
/// `Vary`, and `Location` for a redirect.
pub const PRIMARY_FIELDS: [HeaderName; 4] = [
    header::SET_COOKIE,
    header::CACHE_CONTROL,
    header::VARY,
    header::LOCATION,
];

/// What an include not yet handed on counts against `template_read_ahead`,
/// besides its inline fallback markup: about what its slot, spool and task
/// hold. Without it, a template made of includes would be read without
/// bound while the page waits for a slow fragment.
pub const INCLUDE_COST: usize = 256;

/// What a page needs from the request that asked for it.
#[derive(Clone)]
pub struct PageContext {
    /// Resolves and fetches the fragments.
    pub fetcher: Arc<dyn Fetcher>,
    /// The route's settings.
    pub settings: Arc<ComposeSettings>,
    /// The absolute URL of the template (relative `src`s resolve against it).
    pub base: String,
    /// Whether the template came from `base` (an upstream's response), so
    /// that an include of `base` is an include loop. `false` for a
    /// template read from a file: `base` is only where its `src`s resolve.
    pub template_at_base: bool,
    /// Fields sent with every fragment request (the client's allowed
    /// fields, `traceparent`, `x-request-id`).
    pub headers: HeaderMap,
    /// Receives the fragment events.
    pub observer: Arc<dyn Observer>,
    /// The nonce for the inline scripts that move `async` fragments into
    /// place, when the page's `Content-Security-Policy` requires one
    /// ([`script_nonce`](crate::script_nonce) finds it); base64 only.
    pub script_nonce: Option<String>,
    /// Whether `async` content may go out of order, at safe points of the
    /// page: `false` for a page in an encoding where Weir cannot tell
    /// where its markup stands from its bytes
    /// ([`out_of_order_charset`](crate::out_of_order_charset)); then it
    /// goes only right before `</body>` or at the end.
    pub out_of_order: bool,
}

impl std::fmt::Debug for PageContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageContext")
            .field("base", &self.base)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What a composition decided before its first byte.
#[derive(Debug)]
pub enum Page {
    /// Stream the composed page.
    Composed {
        /// The primary fragment's status, or `None` (no primary: keep the
        /// template's own status).
        status: Option<StatusCode>,
        /// Fields to set on the response: the primary's [`PRIMARY_FIELDS`]
        /// (replacing the template's, `Set-Cookie` appended) and the `Link`
        /// fields of every fragment whose head had arrived (appended).
        headers: HeaderMap,
        /// The page.
        body: PageBody,
    },
    /// The primary fragment redirected: send its status and fields, no page.
    Redirect {
        /// A 3xx.
        status: StatusCode,
        /// Its `Location` and the other [`PRIMARY_FIELDS`].
        headers: HeaderMap,
    },
    /// The primary fragment failed, timed out or answered 5xx (or the
    /// template failed before the page started): send `status` with a short
    /// error body, no page.
    Failed {
        /// `502`, or `504` on a timeout.
        status: StatusCode,
        /// Why, for the log.
        reason: String,
    },
}

/// The composition's state shared by all its levels and tasks.
pub(crate) struct Shared {
    pub fetcher: Arc<dyn Fetcher>,
    pub settings: Arc<ComposeSettings>,
    pub headers: HeaderMap,
    pub observer: Arc<dyn Observer>,
    /// `max_parallel` fetch slots, page-wide (`crate::permits`).
    pub permits: Arc<Permits>,
    /// Includes processed so far, page-wide.
    pub includes: AtomicUsize,
    /// The next `async` placeholder number, page-wide.
    pub next_async: AtomicUsize,
    /// The page budget's end.
    pub deadline: Instant,
    /// `page_buffer_bytes`, shared by every spool of the page.
    pub budget: Arc<Budget>,
    /// The nonce of the mover scripts (see [`PageContext::script_nonce`]).
    pub nonce: Option<Arc<str>>,
    /// The page's token, in the ids of Weir's markup (`crate::mover`).
    pub token: Token,
    /// See [`PageContext::out_of_order`].
    pub out_of_order: bool,
}

/// One template level: the page (depth 0) or a nested template.
#[derive(Clone)]
pub(crate) struct Level {
    pub shared: Arc<Shared>,
    /// The absolute URL of this level's template.
    pub base: Arc<str>,
    pub depth: usize,
    /// Resolved URLs of the templates composing this one (loop detection).
    pub ancestors: Arc<[Arc<str>]>,
}

impl Level {
    /// The level of a fragment of this one that is itself a template.
    pub fn child(&self, url: String) -> Level {
        let url: Arc<str> = url.into();
        let mut ancestors: Vec<Arc<str>> = self.ancestors.to_vec();
        ancestors.push(Arc::clone(&url));
        Level {
            shared: Arc::clone(&self.shared),
            base: url,
            depth: self.depth + 1,
            ancestors: ancestors.into(),
        }
    }
}

#[derive(Debug)]
enum Slot {
    Text(Bytes),
    Frag(usize),
    /// An `async` fragment's placeholder: its entry in [`Core::asyncs`]
    /// and its markup.
    Placeholder(usize, Bytes),
    /// At an async point: the content of an `async` fragment (its entry in
    /// [`Core::asyncs`] and its index), streamed through the entry.
    AsyncBody(usize, usize),
    /// What closes that content (from the entry), then these bytes.
    AsyncEnd(usize, Bytes),
    /// Where the `async` fragments not yet out go (`true`: the end of the
    /// template; else the first `</body>`).
    AsyncPoint(bool),
}

struct Frag {
    reader: SpoolReader,
    /// What it counts in [`Core::held`] until it is handed on.
    weight: usize,
}

/// A composed page (or nested template) as a [`Source`] of batches.
///
/// Dropping it aborts every fragment task it started. One pointer wide:
/// its state lives in one allocation per page.
pub struct PageBody {
    inner: Box<Core>,
}

/// The page's state.
struct Core {
    level: Level,
    template: Option<BoxSource>,
    scanner: Scanner,
    scratch: Vec<Piece>,
    slots: VecDeque<Slot>,
    /// Template bytes queued in `slots`, not yet handed on, plus the
    /// weight of every fragment not yet handed on.
    held: usize,
    frags: Vec<Option<Frag>>,
    /// The `async` fragments.
    asyncs: Asyncs,
    /// The first `</body>` was found.
    body_end_seen: bool,
    /// Whether a primary may still be taken (page level, before the head).
    primary_open: bool,
    primary: Option<usize>,
    tasks: Vec<AbortHandle>,
    flush_next: bool,
    failed: Option<StreamError>,
    /// A warning was logged for going over `max_includes`.
    limit_logged: bool,
}

impl std::fmt::Debug for PageBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageBody")
            .field("base", &self.level.base)
            .field("depth", &self.level.depth)
            .field("slots", &self.slots.len())
            .field("fragments", &self.frags.len())
            .finish_non_exhaustive()
    }
}

/// Composes the page for `template` (the template's body, as received).
///
/// Scans the template and starts the fragments; when the template has a
/// primary fragment, waits for its response head (the status line is all
/// that is held); otherwise decides at once. Resolves to what to send.
///
/// # Panics
/// Outside a Tokio runtime (fragments run as tasks).
pub async fn compose(template: BoxSource, ctx: PageContext) -> Page {
    let now = Instant::now();
    let page_buffer = ctx.settings.page_buffer_bytes;
    let shared = Arc::new(Shared {
        permits: Permits::new(ctx.settings.max_parallel),
        // A budget past what the clock can hold is no budget: a year will do.
        deadline: now
            .checked_add(ctx.settings.page_timeout)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600)),
        fetcher: ctx.fetcher,
        settings: ctx.settings,
        headers: ctx.headers,
        observer: ctx.observer,
        includes: AtomicUsize::new(0),
        next_async: AtomicUsize::new(0),
        budget: Budget::new(page_buffer),
        nonce: ctx.script_nonce.map(Arc::from),
        token: Token::new(),
        out_of_order: ctx.out_of_order,
    });
    let base: Arc<str> = ctx.base.into();
    let ancestors: Arc<[Arc<str>]> = if ctx.template_at_base {
        Arc::new([Arc::clone(&base)])
    } else {
        Arc::new([])
    };
    let level = Level {
        shared,
        ancestors,
        base,
        depth: 0,
    };
    let mut body = PageBody::new(template, level, true);
    match poll_fn(|cx| body.inner.poll_head(cx)).await {
        Ok((status, headers)) => Page::Composed {
            status,
            headers,
            body,
        },
        Err(page) => page,
    }
}

/// What [`Core::poll_head`] decides: compose with this status (`None`: the
/// template's) and these fields, or send a page without a body (a redirect
/// or a failure) instead.
type HeadDecision = Result<(Option<StatusCode>, HeaderMap), Page>;

impl PageBody {
    fn new(template: BoxSource, level: Level, top: bool) -> PageBody {
        PageBody {
            inner: Box::new(Core::new(template, level, top)),
        }
    }

    /// A nested template's page: no primary, no head of its own.
    pub(crate) fn nested(template: BoxSource, level: Level) -> PageBody {
        PageBody::new(template, level, false)
    }
}

impl Core {
    fn new(template: BoxSource, level: Level, top: bool) -> Core {
        let scanner = Scanner::new(level.shared.settings.scan);
        let asyncs = Asyncs::new(
            top && level.shared.out_of_order,
            level.shared.nonce.clone(),
            level.shared.settings.async_stream,
            level.shared.token,
        );
        Core {
            level,
            template: Some(template),
            scanner,
            scratch: Vec::new(),
            slots: VecDeque::new(),
            held: 0,
            frags: Vec::new(),
            asyncs,
            body_end_seen: false,
            primary_open: top,
            primary: None,
            tasks: Vec::new(),
            flush_next: false,
            failed: None,
            limit_logged: false,
        }
    }

    /// Scans what the template has ready, up to the read-ahead bound.
    fn drive_template(&mut self, cx: &mut Context<'_>) -> Result<(), StreamError> {
        let ahead = self.level.shared.settings.template_read_ahead.max(1);
        while self.held < ahead {
            let Some(t) = self.template.as_mut() else {
                break;
            };
            match t.as_mut().poll_next_batch(cx) {
                Poll::Ready(Some(Ok(batch))) => {
                    for chunk in batch {
                        self.scanner.feed(chunk, &mut self.scratch);
                    }
                    self.take_pieces();
                }
                Poll::Ready(Some(Err(e))) => {
                    self.template = None;
                    self.failed = Some(e.clone());
                    return Err(e);
                }
                Poll::Ready(None) => {
                    self.template = None;
                    self.scanner.finish(&mut self.scratch);
                    self.take_pieces();
                    self.slots.push_back(Slot::AsyncPoint(true));
                }
                Poll::Pending => break,
            }
        }
        Ok(())
    }

    fn take_pieces(&mut self) {
        let mut pieces = std::mem::take(&mut self.scratch);
        for piece in pieces.drain(..) {
            match piece {
                Piece::Text(b) => {
                    self.held += b.len();
                    self.slots.push_back(Slot::Text(b));
                }
                Piece::Include(inc) => self.add_include(inc),
                Piece::BodyEnd => {
                    if !self.body_end_seen {
                        self.body_end_seen = true;
                        self.slots.push_back(Slot::AsyncPoint(false));
                    }
                }
                Piece::Warning(w) => {
                    tracing::warn!(
                        target: "weir::ssr", template = %self.level.base, depth = self.level.depth,
                        "template: {w}"
                    );
                }
            }
        }
        self.scratch = pieces;
    }

    fn add_include(&mut self, inc: Box<Include>) {
        let shared = Arc::clone(&self.level.shared);
        let index = self.frags.len();
        let weight = INCLUDE_COST + inc.fallback.len();
        let fallback = inc.fallback.clone();
        self.held += weight;
        let (writer, reader) = spool(
            shared.settings.fragment_buffer_bytes,
            Arc::clone(&shared.budget),
        );
        let primary = inc.primary && self.primary_open && self.primary.is_none();
        if inc.primary && !primary {
            tracing::debug!(
                target: "weir::ssr", src = ?inc.src, depth = self.level.depth,
                "primary ignored (nested template, a second primary, or after the page's head)"
            );
        }
        // Only the page has async fragments: a nested template's are
        // spliced in order.
        let async_id = (inc.is_async && !primary && self.level.depth == 0)
            .then(|| shared.next_async.fetch_add(1, Ordering::Relaxed));
        let n = shared.includes.fetch_add(1, Ordering::Relaxed);
        if n >= shared.settings.max_includes {
            // Over the limit: no fetch; the inline markup, at once.
            let limit = shared.settings.max_includes;
            if !self.limit_logged {
                self.limit_logged = true;
                tracing::warn!(
                    target: "weir::ssr", template = %self.level.base, limit,
                    "more than max_includes includes: the rest get their inline fallback"
                );
            }
            let failure = Failure::Limit { limit };
            writer.head(Head::Failed {
                timeout: false,
                reason: failure.to_string(),
            });
            if async_id.is_some() {
                // Its placeholder shows the markup already.
                writer.keep_inline();
            } else {
                writer.push_now(inc.fallback.clone());
            }
            shared.observer.fragment(&FragmentEvent {
                src: inc.src.as_deref().unwrap_or(""),
                outcome: FragmentOutcome::Skipped,
                failure: Some(&failure),
                elapsed: std::time::Duration::ZERO,
                depth: self.level.depth,
            });
            drop(writer);
        } else {
            let job = Job {
                level: self.level.clone(),
                include: inc,
                primary,
                key: Key {
                    is_async: async_id.is_some(),
                    seq: n,
                },
                writer,
            };
            self.tasks
                .push(tokio::spawn(fragment::run(job)).abort_handle());
        }
        if primary {
            self.primary = Some(index);
        }
        self.frags.push(Some(Frag { reader, weight }));
        match async_id {
            Some(id) => {
                let (entry, placeholder) = self.asyncs.add(index, id, &fallback);
                self.held += placeholder.len();
                self.slots.push_back(Slot::Placeholder(entry, placeholder));
            }
            None => self.slots.push_back(Slot::Frag(index)),
        }
    }

    /// The page's head: waits for the primary's, if there is one.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<HeadDecision> {
        if let Err(e) = self.drive_template(cx) {
            return Poll::Ready(Err(Page::Failed {
                status: StatusCode::BAD_GATEWAY,
                reason: format!("template body failed: {e}"),
            }));
        }
        let Some(p) = self.primary else {
            self.primary_open = false;
            return Poll::Ready(Ok((None, self.links())));
        };
        let Some(frag) = self.frags.get(p).and_then(Option::as_ref) else {
            return Poll::Ready(Err(Page::Failed {
                status: StatusCode::BAD_GATEWAY,
                reason: "primary fragment lost".into(),
            }));
        };
        let head = std::task::ready!(frag.reader.poll_head(cx));
        self.primary_open = false;
        Poll::Ready(match head {
            Head::Failed { timeout, reason } => Err(Page::Failed {
                status: if timeout {
                    StatusCode::GATEWAY_TIMEOUT
                } else {
                    StatusCode::BAD_GATEWAY
                },
                reason: format!("primary fragment failed: {reason}"),
            }),
            Head::Response { status, headers } => {
                let mut set = primary_fields(&headers, status.is_redirection());
                // A 5xx, and a 3xx that leads nowhere (a 304, a redirect
                // without Location): there is no page to send.
                let dead_end = status == StatusCode::NOT_MODIFIED
                    || (status.is_redirection() && !headers.contains_key(header::LOCATION));
                if status.is_server_error() || dead_end {
                    Err(Page::Failed {
                        status: StatusCode::BAD_GATEWAY,
                        reason: format!("primary fragment answered {status}"),
                    })
                } else if status.is_redirection() {
                    Err(Page::Redirect {
                        status,
                        headers: set,
                    })
                } else {
                    for v in self.links().get_all(header::LINK) {
                        set.append(header::LINK, v.clone());
                    }
                    Ok((Some(status), set))
                }
            }
        })
    }

    /// The `Link` fields of every fragment whose head is known now.
    fn links(&self) -> HeaderMap {
        let mut out = HeaderMap::new();
        for frag in self.frags.iter().flatten() {
            if let Some(Head::Response { headers, .. }) = frag.reader.head() {
                for v in headers.get_all(header::LINK) {
                    out.append(header::LINK, v.clone());
                }
            }
        }
        out
    }

    /// At a boundary of the page's output: whatever `async` content is
    /// ready and may go out here (see `crate::asyncs`), into `out`.
    fn splice(&mut self, cx: &mut Context<'_>, out: &mut Batch) {
        if !self.asyncs.is_early() {
            return;
        }
        let frags = &self.frags;
        let done = self.asyncs.splice(
            |i| frags.get(i).and_then(Option::as_ref).map(|f| &f.reader),
            cx,
            out,
        );
        for i in done {
            if let Some(f) = self.frags.get_mut(i).and_then(Option::take) {
                self.held = self.held.saturating_sub(f.weight);
            }
        }
        self.asyncs.settle(self.template.is_none());
    }

    /// At an async point: queues what goes next in front of it;
    /// `Ready(true)` when nothing is left for it.
    fn poll_async_point(&mut self, cx: &mut Context<'_>, end: bool) -> Poll<bool> {
        let frags = &self.frags;
        let point = std::task::ready!(self.asyncs.poll_point(
            |i| frags.get(i).and_then(Option::as_ref).map(|f| &f.reader),
            cx,
            end,
            &self.level.base,
        ));
        Poll::Ready(match point {
            Point::Done => true,
            Point::Emit {
                before,
                body,
                after,
            } => {
                self.held += before.len() + after.len();
                match body {
                    Some((entry, i)) => {
                        self.slots.push_front(Slot::AsyncEnd(entry, after));
                        self.slots.push_front(Slot::AsyncBody(entry, i));
                    }
                    None if !after.is_empty() => self.slots.push_front(Slot::Text(after)),
                    None => {}
                }
                self.slots.push_front(Slot::Text(before));
                false
            }
        })
    }
}

/// The primary's fields that the page takes.
fn primary_fields(headers: &HeaderMap, redirect: bool) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in PRIMARY_FIELDS {
        if name == header::LOCATION && !redirect {
            continue;
        }
        for v in headers.get_all(&name) {
            out.append(name.clone(), v.clone());
        }
    }
    out
}

impl Source for PageBody {
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let this = &mut *self.get_mut().inner;
        if let Some(e) = &this.failed {
            return Poll::Ready(Some(Err(e.clone())));
        }
        if let Err(e) = this.drive_template(cx) {
            return Poll::Ready(Some(Err(e)));
        }
        // A template read to its end without `async` fragments: the page
        // stops following its own output at once.
        this.asyncs.settle(this.template.is_none());
        if this.flush_next {
            this.flush_next = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut out = Batch::new();
        while let Some(slot) = this.slots.front() {
            match slot {
                Slot::Text(_) => {
                    if let Some(Slot::Text(b)) = this.slots.pop_front() {
                        this.held = this.held.saturating_sub(b.len());
                        this.asyncs.hold(&b);
                        out.push(b);
                    }
                }
                Slot::Placeholder(..) => {
                    if let Some(Slot::Placeholder(entry, b)) = this.slots.pop_front() {
                        this.held = this.held.saturating_sub(b.len());
                        this.asyncs.placeholder_sent(entry, &b);
                        out.push(b);
                    }
                }
                &Slot::Frag(i) => {
                    // A boundary: before the slot, or between two batches.
                    this.splice(cx, &mut out);
                    let Some(frag) = this.frags[i].as_mut() else {
                        this.slots.pop_front();
                        continue;
                    };
                    match Pin::new(&mut frag.reader).poll_next_batch(cx) {
                        Poll::Ready(Some(Ok(batch))) => {
                            for c in batch.chunks() {
                                this.asyncs.hold(c);
                            }
                            out.append(batch);
                            break;
                        }
                        Poll::Ready(Some(Err(_)) | None) => {
                            this.slots.pop_front();
                            if let Some(done) = this.frags[i].take() {
                                this.held = this.held.saturating_sub(done.weight);
                            }
                            // A boundary after the slot.
                            this.splice(cx, &mut out);
                            // A boundary: let the pipeline flush.
                            if out.is_empty() {
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                            this.flush_next = true;
                            break;
                        }
                        Poll::Pending => break,
                    }
                }
                &Slot::AsyncBody(entry, i) => {
                    let Some(frag) = this.frags[i].as_mut() else {
                        this.slots.pop_front();
                        continue;
                    };
                    match Pin::new(&mut frag.reader).poll_next_batch(cx) {
                        Poll::Ready(Some(Ok(batch))) => {
                            if this.asyncs.body(entry, batch, &mut out) {
                                // Nothing more of it goes out.
                                this.slots.pop_front();
                                if let Some(done) = this.frags[i].take() {
                                    this.held = this.held.saturating_sub(done.weight);
                                }
                                continue;
                            }
                            if out.is_empty() {
                                // All of it held back (a tag being read):
                                // poll again, to wait for more.
                                continue;
                            }
                            break;
                        }
                        Poll::Ready(Some(Err(_)) | None) => {
                            this.slots.pop_front();
                            if let Some(done) = this.frags[i].take() {
                                this.held = this.held.saturating_sub(done.weight);
                            }
                        }
                        Poll::Pending => break,
                    }
                }
                Slot::AsyncEnd(..) => {
                    if let Some(Slot::AsyncEnd(entry, after)) = this.slots.pop_front() {
                        this.held = this.held.saturating_sub(after.len());
                        this.asyncs.body_end(entry, &mut out);
                        this.asyncs.hold(&after);
                        out.push(after);
                        // A boundary: let the pipeline flush.
                        this.flush_next = true;
                        break;
                    }
                }
                &Slot::AsyncPoint(end) => match this.poll_async_point(cx, end) {
                    Poll::Ready(true) => {
                        this.slots.pop_front();
                    }
                    Poll::Ready(false) => {}
                    Poll::Pending => break,
                },
            }
        }
        if this.slots.is_empty() && this.template.is_some() {
            // Waiting for more template: a boundary too.
            this.splice(cx, &mut out);
        }
        if !out.is_empty() {
            return Poll::Ready(Some(Ok(out)));
        }
        if this.slots.is_empty() && this.template.is_none() {
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
