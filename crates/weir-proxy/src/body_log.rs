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
//! `captured` (bytes), `complete` (the whole body fit in the limit) and
//! `body` (the bytes, as text with non-printable bytes escaped).

use std::fmt::Write as _;

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
        let line = LineHead {
            direction,
            method: method.to_string(),
            path: path.to_owned(),
            limit,
        };
        tokio::spawn(log_branch(readable, line));
        BodyLog {
            capture: Some(Capture {
                writer: Some(writer),
                remaining: limit,
            }),
        }
    }

    /// Ends the branch: what was captured goes to the log.
    fn close(&mut self) {
        if let Some(writer) = self.capture.as_mut().and_then(|c| c.writer.take()) {
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
            Some(batch) if capture.remaining > 0 => {
                let mut taken = Batch::new();
                for chunk in batch.chunks() {
                    let take = chunk.len().min(capture.remaining);
                    if take == 0 {
                        break;
                    }
                    taken.push(chunk.slice(..take));
                    capture.remaining -= take;
                }
                if let Some(writer) = &capture.writer {
                    // drop-newest: a full branch drops this write, never waits.
                    let _ = writer.try_writev(taken);
                }
                if capture.remaining == 0 {
                    self.close();
                }
            }
            Some(_) => {}
            None => self.close(),
        }
        Ok(input)
    }

    fn abort(&mut self, _reason: &StreamError) {
        // Log what was seen: a failed or abandoned body is when one wants it most.
        self.close();
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
    limit: usize,
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
    let mut text = String::with_capacity(len.min(head.limit) + 16);
    for chunk in &captured {
        escape_into(&mut text, chunk);
    }
    tracing::info!(
        target: "weir::body",
        direction = head.direction.as_str(),
        method = %head.method,
        path = %head.path,
        captured = len,
        complete = len < head.limit,
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
        assert!(capture.writer.is_none(), "closed once the limit is reached");
    }

    #[test]
    fn off_is_a_pass_through() {
        let mut stage = BodyLog::off();
        let out = stage.transform(Some(Batch::one("x"))).expect("ok");
        assert_eq!(out.map(|b| b.byte_len()), Some(1));
    }
}
