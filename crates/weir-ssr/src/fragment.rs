//! One fragment's task: fetch, fall back, stream into its spool.
//!
//! A fragment first takes one of the page's fetch slots (`max_parallel`,
//! `crate::permits`), unless the page is already waiting for it (it is at
//! the head of the page's line, or at an async point): then it goes at
//! once, so that fragments holding slots while the page reads elsewhere
//! can never keep the page waiting. Its deadlines start then, when its
//! fetch may start; waiting for a slot is bounded by the page budget only.
//! The slot is given back once its body has been read to its end.
//!
//! The sources are tried in order — `src`, then `fallback-src` (or ESI
//! `alt`) — each with its own first-byte deadline inside the fragment's
//! total deadline. The first that delivers a first byte (or ends cleanly
//! empty) streams; if none does, the inline fallback markup is written, or
//! nothing. A fragment that fails after it started streaming just ends (and,
//! with `close_open_elements`, closes what it opened). The primary fragment
//! has no fallbacks: its head, whatever its status, goes to the page as
//! soon as it arrives, unless its coding cannot be decoded or it is a
//! template past `max_depth` (then the page fails, as for any failure).

use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, StatusCode};
use tokio::time::timeout_at;
use weir_stream::{Batch, SourceExt as _};

use crate::close::OpenElements;
use crate::compose::{Level, PageBody};
use crate::decode::{Decoded, coding_of};
use crate::fetch::BoxSource;
use crate::observe::{Failure, FragmentEvent, FragmentOutcome};
use crate::permits::{Key, Permit};
use crate::scan::Include;
use crate::spool::{Head, SpoolWriter};

/// `X-Weir-Template: 1` on a fragment's response: compose it too.
pub const X_WEIR_TEMPLATE: HeaderName = HeaderName::from_static("x-weir-template");

/// Whether a response says it is a template (`X-Weir-Template: 1`, or
/// `true`).
pub fn is_template(headers: &HeaderMap) -> bool {
    headers.get(&X_WEIR_TEMPLATE).is_some_and(|v| {
        let v = v.as_bytes();
        v == b"1" || v.eq_ignore_ascii_case(b"true")
    })
}

/// A fragment to run.
pub(crate) struct Job {
    pub level: Level,
    pub include: Box<Include>,
    pub primary: bool,
    /// Its place in line for a fetch slot.
    pub key: Key,
    pub writer: SpoolWriter,
}

/// A source that delivered its first byte.
struct Started {
    first: Option<Batch>,
    body: BoxSource,
}

/// Runs the fragment to its end and reports it.
pub(crate) async fn run(job: Job) {
    let start = Instant::now();
    let mut reporter = Reporter {
        level: job.level.clone(),
        src: job.include.src.clone().unwrap_or_default(),
        start,
        done: false,
    };
    let settings = &job.level.shared.settings;
    let page_deadline = job.level.shared.deadline;
    let total = job
        .include
        .total_timeout
        .unwrap_or(settings.fragment_total_timeout);
    let first_timeout = job.include.timeout.unwrap_or(settings.fragment_timeout);
    // A fetch slot, or the page's turn; the deadlines start after it.
    let slot = slot(&job, page_deadline).await;
    if !job.writer.is_wanted() {
        let src = reporter.src.clone();
        reporter.report(&src, FragmentOutcome::Cancelled, None);
        return;
    }
    let (mut permit, slot_failure) = match slot {
        Ok(p) => (p, None),
        Err(f) => (None, Some(f)),
    };
    let total_deadline = deadline_within(Instant::now(), total, page_deadline);

    let mut candidates: Vec<String> = Vec::with_capacity(3);
    for s in [
        &job.include.src,
        &job.include.fallback_src,
        &job.include.alt,
    ]
    .into_iter()
    .flatten()
    {
        if !candidates.contains(s) {
            candidates.push(s.clone());
        }
    }

    let mut failure = if let Some(f) = slot_failure {
        tracing::warn!(
            target: "weir::ssr", template = %job.level.base, depth = job.level.depth,
            "no fetch slot before the page budget ran out ({f}): its inline fallback"
        );
        candidates.clear();
        Some(f)
    } else if candidates.is_empty() {
        tracing::warn!(
            target: "weir::ssr", template = %job.level.base, depth = job.level.depth,
            "include without src (or fallback-src/alt): its inline fallback"
        );
        Some(Failure::NoSource)
    } else {
        None
    };
    for (n, src) in candidates.iter().enumerate() {
        let tried = Instant::now();
        let first_deadline = deadline_within(tried, first_timeout, total_deadline);
        match attempt(&job, src, first_deadline, &mut permit).await {
            Ok(Some(started)) => {
                let outcome = if n == 0 {
                    FragmentOutcome::Ok
                } else {
                    FragmentOutcome::Fallback
                };
                let end = stream(&job, started, total_deadline, permit).await;
                let (outcome, why) = match end {
                    Ok(()) => (outcome, failure),
                    Err(StreamEnd::Gone) => (FragmentOutcome::Cancelled, failure),
                    Err(StreamEnd::Cut(f)) => {
                        tracing::warn!(
                            target: "weir::ssr", src = %src, depth = job.level.depth,
                            "fragment cut short after it started streaming: {f}"
                        );
                        (FragmentOutcome::Cut, Some(f))
                    }
                };
                reporter.report(src, outcome, why.as_ref());
                return;
            }
            // The primary's head went to the page; its body is not wanted.
            Ok(None) => {
                reporter.report(src, FragmentOutcome::Ok, None);
                return;
            }
            Err(f) => {
                let f = match f {
                    Failure::Timeout { .. } => Failure::Timeout {
                        elapsed_ms: millis(tried.elapsed()),
                    },
                    other => other,
                };
                if !job.writer.is_wanted() {
                    reporter.report(src, FragmentOutcome::Cancelled, Some(&f));
                    return;
                }
                let next = candidates
                    .get(n + 1)
                    .map_or("inline fallback", |s| s.as_str());
                tracing::warn!(
                    target: "weir::ssr", src = %src, depth = job.level.depth,
                    "fragment source failed before its first byte: {f}; next: {next}"
                );
                failure = Some(f);
                if job.primary {
                    break;
                }
            }
        }
    }

    drop(permit);
    let why = failure.unwrap_or(Failure::NoSource);
    job.writer.head(Head::Failed {
        timeout: matches!(why, Failure::Timeout { .. }),
        reason: why.to_string(),
    });
    let src = candidates.first().map_or("", |s| s.as_str());
    if job.primary {
        reporter.report(src, FragmentOutcome::Empty, Some(&why));
        return;
    }
    let outcome = if job.include.fallback.is_empty() {
        FragmentOutcome::Empty
    } else if job.key.is_async {
        // Its placeholder shows the markup already.
        job.writer.keep_inline();
        FragmentOutcome::Inline
    } else if job
        .writer
        .write(Batch::one(job.include.fallback.clone()))
        .await
        .is_ok()
    {
        FragmentOutcome::Inline
    } else {
        FragmentOutcome::Cancelled
    };
    reporter.report(src, outcome, Some(&why));
}

/// Waits for a fetch slot, in line (`crate::permits`), or until the page
/// waits for this fragment (then it needs none). The primary takes none:
/// fragments before it that filled their buffers keep theirs until their
/// turn, which comes only after the page's head, which waits for the
/// primary. `Err` when the page budget ran out first.
async fn slot(job: &Job, page_deadline: Instant) -> Result<Option<Permit>, Failure> {
    if job.primary {
        return Ok(None);
    }
    let permits = &job.level.shared.permits;
    let waited = Instant::now();
    let wait = async {
        tokio::select! {
            p = permits.acquire(job.key) => Some(p),
            () = job.writer.wanted() => None,
        }
    };
    timeout_at(page_deadline, wait)
        .await
        .map_err(|_| Failure::Timeout {
            elapsed_ms: millis(waited.elapsed()),
        })
}

/// `from + timeout`, but no later than `cap`. A `timeout` attribute may
/// name more seconds than an `Instant` can hold (`"18446744073709551615s"`
/// parses); such a deadline is `cap`.
fn deadline_within(from: Instant, timeout: Duration, cap: Instant) -> Instant {
    from.checked_add(timeout).map_or(cap, |d| d.min(cap))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Reports the fragment's end once: with [`Reporter::report`], or as
/// [`FragmentOutcome::Cancelled`] when the task is dropped first (the page
/// went away and aborted it).
struct Reporter {
    level: Level,
    src: String,
    start: Instant,
    done: bool,
}

impl Reporter {
    fn report(&mut self, src: &str, outcome: FragmentOutcome, failure: Option<&Failure>) {
        self.done = true;
        let elapsed = self.start.elapsed();
        tracing::debug!(
            target: "weir::ssr", src = %src, outcome = outcome.as_str(),
            elapsed_ms = millis(elapsed), depth = self.level.depth, "fragment done"
        );
        self.level.shared.observer.fragment(&FragmentEvent {
            src,
            outcome,
            failure,
            elapsed,
            depth: self.level.depth,
        });
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if !self.done {
            let src = std::mem::take(&mut self.src);
            self.report(&src, FragmentOutcome::Cancelled, None);
        }
    }
}

/// Tries one source up to its first byte. `Ok(None)`: the primary's head
/// was reported and its body is not used (a redirect or a 5xx).
async fn attempt(
    job: &Job,
    src: &str,
    first_deadline: Instant,
    permit: &mut Option<Permit>,
) -> Result<Option<Started>, Failure> {
    let shared = &job.level.shared;
    let timeout = || Failure::Timeout { elapsed_ms: 0 };
    let url = shared.fetcher.resolve(&job.level.base, src)?;
    if job.level.ancestors.iter().any(|a| **a == *url) {
        return Err(Failure::Loop { url });
    }
    let resp = timeout_at(
        first_deadline,
        shared.fetcher.fetch(&url, shared.headers.clone()),
    )
    .await
    .map_err(|_| timeout())??;
    let report_head = |job: &Job| {
        job.writer.head(Head::Response {
            status: resp.status,
            headers: resp.headers.clone(),
        })
    };
    if job.primary && (resp.status.is_redirection() || resp.status.is_server_error()) {
        report_head(job);
        return Ok(None);
    }
    if !job.primary && !resp.status.is_success() {
        return Err(Failure::Status(resp.status.as_u16()));
    }
    // The checks that fail a source come before the primary's head goes to
    // the page: once it has, the page's status is decided.
    let coding = coding_of(&resp.headers)?;
    let template = is_template(&resp.headers) && resp.status != StatusCode::NO_CONTENT;
    if template && job.level.depth + 1 > shared.settings.max_depth {
        return Err(Failure::Depth {
            limit: shared.settings.max_depth,
        });
    }
    if job.primary {
        report_head(job);
    }
    let mut body = resp.body;
    if let Some(coding) = coding {
        body = Box::pin(Decoded::new(body, coding, shared.settings.decode));
    }
    if template {
        // Its own fragments do the fetching from here on.
        *permit = None;
        body = Box::pin(PageBody::nested(body, job.level.child(url)));
    }
    let first = match timeout_at(first_deadline, body.next_batch())
        .await
        .map_err(|_| timeout())?
    {
        Some(Ok(b)) => Some(b),
        Some(Err(e)) => return Err(Failure::Body(e.to_string())),
        None => None,
    };
    if !job.primary {
        job.writer.head(Head::Response {
            status: resp.status,
            headers: resp.headers,
        });
    }
    Ok(Some(Started { first, body }))
}

enum StreamEnd {
    /// The page dropped the fragment.
    Gone,
    /// The fragment failed mid-way.
    Cut(Failure),
}

/// Streams a started source into the spool until its end or its deadline.
/// Time spent waiting for the page to take bytes does not count against
/// the fragment's total deadline (it is not the fragment's doing); the
/// page budget still bounds it. The fetch slot is given back as soon as
/// the body has been read to its end, whatever is still to be written.
async fn stream(
    job: &Job,
    started: Started,
    total_deadline: Instant,
    permit: Option<Permit>,
) -> Result<(), StreamEnd> {
    let Started { first, mut body } = started;
    let page_deadline = job.level.shared.deadline;
    let close_elements = job.level.shared.settings.close_open_elements;
    let mut tracker = OpenElements::new();
    let mut deadline = total_deadline;
    let began = Instant::now();
    let Some(first) = first else {
        return Ok(());
    };
    write(job, &mut tracker, first, &mut deadline, page_deadline).await?;
    loop {
        let cut = match timeout_at(deadline, body.next_batch()).await {
            // Read to its end: the slot goes back now.
            Ok(None) => {
                drop(permit);
                return Ok(());
            }
            Ok(Some(Ok(batch))) => {
                write(job, &mut tracker, batch, &mut deadline, page_deadline).await?;
                continue;
            }
            Ok(Some(Err(e))) => Failure::Body(e.to_string()),
            Err(_) => Failure::Timeout {
                elapsed_ms: millis(began.elapsed()),
            },
        };
        drop(body);
        drop(permit);
        // Finish the tag, quoted value or comment it was cut inside of, so
        // the page after it is not swallowed; close its elements if asked.
        let tail = tracker.closing(close_elements);
        if !tail.is_empty() {
            let _ = job.writer.write(Batch::one(Bytes::from(tail))).await;
        }
        return Err(StreamEnd::Cut(cut));
    }
}

async fn write(
    job: &Job,
    tracker: &mut OpenElements,
    batch: Batch,
    deadline: &mut Instant,
    page_deadline: Instant,
) -> Result<(), StreamEnd> {
    for c in batch.chunks() {
        tracker.hold(c);
    }
    let waited = Instant::now();
    job.writer.write(batch).await.map_err(|_| StreamEnd::Gone)?;
    *deadline = (*deadline + waited.elapsed()).min(page_deadline);
    Ok(())
}
