//! `[route.body_log]`: the first bytes of request and response bodies, in
//! the log, for debugging a route.
//!
//! The capture is a side branch, not a buffer on the body path: the stage
//! slices the first `limit` bytes off the chunks as they pass (no copy:
//! `Bytes::slice`) and writes them with `try_write` into a `push()` buffer
//! whose policy is `drop-newest`, read by a task that writes one log line
//! when the capture is complete. So the client's body never waits for the
//! log (a full buffer drops the write instead), and the branch never holds
//! more than `limit` bytes.
//!
//! Lines go to `tracing` under the target `weir::body` at INFO, with the
//! fields `direction` (`request` or `response`), `method`, `path`,
//! `captured` (bytes), `end` (`complete`: the body ended and all of it is
//! in the line; `truncated`: it was longer than the limit; `aborted`: it
//! failed or was abandoned before its end), `complete` (`end` is
//! `complete` and no write was dropped), `dropped` (the branch was full
//! and dropped a write, so `body` has a gap) and `body` (the bytes, as
//! text with non-printable bytes escaped). A line is written once the
//! body ends or the limit is passed.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use bytes::Bytes;
use weir_stream::{
    Backpressure, Batch, PushOptions, Readable, Source, StreamError, Transform, Writer, push,
};

/// Batches the branch may hold before it drops new ones.
const BRANCH_HWM: usize = 64;

/// Which body a capture is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The client's request body.
    Request,
    /// The upstream's response body.
    Response,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::Request => "request",
            Direction::Response => "response",
        }
    }
}

/// A pipeline stage that copies the first bytes of a body to the log; a
/// no-op when off. See the [module docs](self).
#[derive(Debug, Default)]
pub struct BodyLog {
    capture: Option<Capture>,
}

#[derive(Debug)]
struct Capture {
    writer: Option<Writer>,
    remaining: usize,
    fate: Arc<Fate>,
}

/// How a captured body ended, shared by the stage and its log task.
#[derive(Debug, Default)]
struct Fate {
    /// [`END_OPEN`], [`END_COMPLETE`], [`END_TRUNCATED`] or [`END_ABORTED`].
    end: AtomicU8,
    dropped: AtomicBool,
}

const END_OPEN: u8 = 0;
const END_COMPLETE: u8 = 1;
const END_TRUNCATED: u8 = 2;
const END_ABORTED: u8 = 3;

impl Fate {
    fn end_name(&self) -> &'static str {
        match self.end.load(Ordering::Acquire) {
            END_COMPLETE => "complete",
            END_TRUNCATED => "truncated",
            _ => "aborted",
        }
    }
}

impl BodyLog {
    /// A stage that logs nothing.
    pub fn off() -> Self {
        BodyLog::default()
    }

    /// A stage that logs the first `limit` bytes of the body (`limit` 0:
    /// nothing). Spawns the log task on the current tokio runtime.
    pub fn capture(limit: usize, direction: Direction, method: &http::Method, path: &str) -> Self {
        if limit == 0 {
            return BodyLog::off();
        }
        let (writer, readable) = push(PushOptions {
            hwm: BRANCH_HWM,
            policy: Backpressure::DropNewest,
            token: None,
        });
        let fate = Arc::new(Fate::default());
        let line = LineHead {
            direction,
            method: method.to_string(),
            path: path.to_owned(),
            fate: Arc::clone(&fate),
        };
        tokio::spawn(log_branch(readable, line));
        BodyLog {
            capture: Some(Capture {
                writer: Some(writer),
                remaining: limit,
                fate,
            }),
        }
    }

    /// Ends the branch with `end` (the first end recorded wins): what was
    /// captured goes to the log.
    fn close(&mut self, end: u8) {
        let Some(capture) = self.capture.as_mut() else {
            return;
        };
        let _ =
            capture
                .fate
                .end
                .compare_exchange(END_OPEN, end, Ordering::AcqRel, Ordering::Acquire);
        if let Some(writer) = capture.writer.take() {
            // The branch may be gone (its task ended); nothing to do then.
            let _ = writer.end();
        }
    }
}

impl Transform for BodyLog {
    fn is_identity(&self) -> bool {
        false
    }

    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let Some(capture) = self.capture.as_mut() else {
            return Ok(input);
        };
        match &input {
            Some(batch) if capture.writer.is_some() => {
                let mut taken = Batch::new();
                let mut left_over = false;
                for chunk in batch.chunks() {
                    let take = chunk.len().min(capture.remaining);
                    if take < chunk.len() {
                        left_over = true;
                    }
                    if take > 0 {
                        taken.push(chunk.slice(..take));
                        capture.remaining -= take;
                    }
                }
                if !taken.is_empty()
                    && let Some(writer) = &capture.writer
                    && !writer.try_writev(taken)
                {
                    // drop-newest: a full branch drops this write, never waits.
                    capture.fate.dropped.store(true, Ordering::Release);
                }
                if left_over {
                    self.close(END_TRUNCATED);
                }
            }
            Some(_) => {}
            None => self.close(END_COMPLETE),
        }
        Ok(input)
    }

    fn abort(&mut self, _reason: &StreamError) {
        // Log what was seen: a failed or abandoned body is when one wants it most.
        self.close(END_ABORTED);
    }

    fn size_hint(&self, upstream: http_body::SizeHint) -> http_body::SizeHint {
        upstream
    }
}

/// What the log line says besides the bytes.
struct LineHead {
    direction: Direction,
    method: String,
    path: String,
    fate: Arc<Fate>,
}

/// Reads the branch to its end and writes the line.
async fn log_branch(mut readable: Readable, head: LineHead) {
    let mut captured: Vec<Bytes> = Vec::new();
    let mut len = 0;
    while let Some(item) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut readable).poll_next_batch(cx)).await
    {
        match item {
            Ok(batch) => {
                for chunk in batch {
                    len += chunk.len();
                    captured.push(chunk);
                }
            }
            Err(_) => break,
        }
    }
    let mut text = String::with_capacity(len + 16);
    for chunk in &captured {
        escape_into(&mut text, chunk);
    }
    tracing::info!(
        target: "weir::body",
        direction = head.direction.as_str(),
        method = %head.method,
        path = %head.path,
        captured = len,
        end = head.fate.end_name(),
        complete = head.fate.end.load(Ordering::Acquire) == END_COMPLETE
            && !head.fate.dropped.load(Ordering::Acquire),
        dropped = head.fate.dropped.load(Ordering::Acquire),
        body = %text,
    );
}

/// Printable ASCII as is (and `\n`, `\t` escaped as such); other bytes as `\xNN`.
fn escape_into(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_text_and_marks_bytes() {
        let mut s = String::new();
        escape_into(&mut s, b"a\\b\n\x00\xff");
        assert_eq!(s, "a\\\\b\\n\\x00\\xff");
    }

    #[tokio::test]
    async fn captures_at_most_the_limit_and_passes_batches_unchanged() {
        let mut stage = BodyLog::capture(5, Direction::Request, &http::Method::POST, "/x");
        let a = Bytes::from_static(b"abc");
        let b = Bytes::from_static(b"defgh");
        let out = stage
            .transform(Some(Batch::from(vec![a.clone(), b.clone()])))
            .expect("ok")
            .expect("batch");
        assert_eq!(out.chunks()[0].as_ptr(), a.as_ptr());
        assert_eq!(out.byte_len(), 8);
        let capture = stage.capture.as_ref().expect("on");
        assert_eq!(capture.remaining, 0);
        assert!(capture.writer.is_none(), "closed once the limit is passed");
        assert_eq!(capture.fate.end_name(), "truncated");
    }

    #[tokio::test]
    async fn a_body_of_exactly_the_limit_is_complete_and_an_abort_is_not() {
        let mut stage = BodyLog::capture(3, Direction::Response, &http::Method::GET, "/x");
        stage.transform(Some(Batch::one("abc"))).expect("ok");
        stage.transform(None).expect("ok");
        assert_eq!(
            stage.capture.as_ref().expect("on").fate.end_name(),
            "complete"
        );

        let mut stage = BodyLog::capture(10, Direction::Request, &http::Method::POST, "/x");
        stage.transform(Some(Batch::one("abc"))).expect("ok");
        stage.abort(&StreamError::aborted("client left"));
        assert_eq!(
            stage.capture.as_ref().expect("on").fate.end_name(),
            "aborted"
        );
    }

    #[test]
    fn off_is_a_pass_through() {
        let mut stage = BodyLog::off();
        let out = stage.transform(Some(Batch::one("x"))).expect("ok");
        assert_eq!(out.map(|b| b.byte_len()), Some(1));
    }
}
