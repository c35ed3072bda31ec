//! Collecting consumers: a whole stream as one [`Bytes`], a [`String`] or a
//! `Vec<Bytes>`, with a byte limit and a cancellation token (catalogue
//! section 7, CONS-001…006).
//!
//! Each consumer pulls one batch at a time and checks, before every pull,
//! the token and, after every batch, the limit. As soon as either trips the
//! source is dropped (for a proxied body: the connection is closed, not
//! pooled half-read) and the error is returned; nothing more is pulled.
//!
//! The async consumers ([`bytes()`], [`text()`], [`array()`]) take any
//! [`Source`] `+ Unpin`; the sync ones ([`bytes_sync`], [`text_sync`],
//! [`array_sync`]) take any iterator of [`BatchResult`]s, such as a sync
//! pipeline, and follow the same rules (CONS-006).

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

use crate::{Batch, BatchResult, CancelToken, Source, StreamError};

/// Limits for a collecting consumer.
///
/// The default has no limit and no token.
#[derive(Debug, Clone, Default)]
pub struct ConsumeOptions {
    /// The most bytes to collect. A total *equal* to the limit is fine; one
    /// byte more fails with [`StreamError::LimitExceeded`] (CONS-002).
    pub limit: Option<u64>,
    /// Checked before each pull; once it fires the consumer fails with its
    /// reason (CONS-003).
    pub token: Option<CancelToken>,
}

impl ConsumeOptions {
    /// No limit and no token.
    pub fn new() -> Self {
        ConsumeOptions::default()
    }

    /// Sets the byte limit.
    pub fn limit(mut self, bytes: u64) -> Self {
        self.limit = Some(bytes);
        self
    }

    /// Sets the cancellation token.
    pub fn token(mut self, token: CancelToken) -> Self {
        self.token = Some(token);
        self
    }
}

/// Collects `source` into one [`Bytes`] (CONS-001).
///
/// One non-empty chunk in all is returned as it is, uncopied; no bytes give
/// an empty `Bytes`; otherwise the chunks are copied once into a buffer of
/// exactly the total size. Zero-length chunks are ignored.
///
/// # Errors
/// - [`StreamError::LimitExceeded`] as soon as the total passes
///   `options.limit` (CONS-002);
/// - the token's error if it fires, and without polling at all if it had
///   already fired (CONS-003);
/// - the source's error, unchanged.
///
/// In every case the source is dropped before the error is returned.
///
/// # Cancel safety
/// Not cancel-safe: dropping the future drops the source and the bytes
/// collected so far.
pub async fn bytes<S: Source + Unpin>(
    source: S,
    options: ConsumeOptions,
) -> Result<Bytes, StreamError> {
    let chunks = collect(source, options, Chunks::skipping_empty()).await?;
    Ok(concat(chunks))
}

/// Collects `source` into a [`String`], strictly as UTF-8 (CONS-004).
///
/// A character split over chunk or batch boundaries is fine. The bytes are
/// kept exactly: a byte-order mark is not stripped. Only UTF-8 is offered,
/// so there is no unknown encoding to reject.
///
/// # Errors
/// [`StreamError::InvalidUtf8`] as soon as a batch holds bytes that cannot
/// be UTF-8 (pulling stops there), or at the end if the text stops inside
/// a character; otherwise as for [`bytes()`].
///
/// # Cancel safety
/// As for [`bytes()`].
pub async fn text<S: Source + Unpin>(
    source: S,
    options: ConsumeOptions,
) -> Result<String, StreamError> {
    collect(source, options, Text::default())
        .await?
        .into_string()
}

/// Collects `source` into its chunks, keeping their boundaries, zero-length
/// chunks included (CONS-005). No chunk is copied.
///
/// # Errors
/// As for [`bytes()`]; the limit counts bytes, not chunks.
///
/// # Cancel safety
/// As for [`bytes()`].
pub async fn array<S: Source + Unpin>(
    source: S,
    options: ConsumeOptions,
) -> Result<Vec<Bytes>, StreamError> {
    collect(source, options, Chunks::keeping_empty()).await
}

/// [`bytes()`] over a synchronous source: any iterator of [`BatchResult`]s
/// (CONS-006). The token, if any, is checked before each `next()`.
///
/// # Errors
/// As for [`bytes()`]; the iterator is dropped before an error is returned.
pub fn bytes_sync<I>(source: I, options: ConsumeOptions) -> Result<Bytes, StreamError>
where
    I: IntoIterator<Item = BatchResult>,
{
    collect_sync(source, options, Chunks::skipping_empty()).map(concat)
}

/// [`text()`] over a synchronous source (CONS-006).
///
/// # Errors
/// As for [`text()`]; the iterator is dropped before an error is returned.
pub fn text_sync<I>(source: I, options: ConsumeOptions) -> Result<String, StreamError>
where
    I: IntoIterator<Item = BatchResult>,
{
    collect_sync(source, options, Text::default())?.into_string()
}

/// [`array()`] over a synchronous source (CONS-006).
///
/// # Errors
/// As for [`array()`]; the iterator is dropped before an error is returned.
pub fn array_sync<I>(source: I, options: ConsumeOptions) -> Result<Vec<Bytes>, StreamError>
where
    I: IntoIterator<Item = BatchResult>,
{
    collect_sync(source, options, Chunks::keeping_empty())
}

/// What a consumer keeps of each batch.
trait Collector {
    type Output;

    /// Takes one batch. An error stops the consumer.
    fn push(&mut self, batch: Batch) -> Result<(), StreamError>;

    fn finish(self) -> Self::Output;
}

/// The byte count and the limit, shared by every consumer.
struct Budget {
    total: u64,
    limit: Option<u64>,
}

impl Budget {
    fn new(limit: Option<u64>) -> Self {
        Budget { total: 0, limit }
    }

    /// Counts `batch`; fails once the total exceeds the limit (CONS-002).
    fn charge(&mut self, batch: &Batch) -> Result<(), StreamError> {
        self.total = self.total.saturating_add(batch.byte_len() as u64);
        match self.limit {
            Some(limit) if self.total > limit => Err(StreamError::LimitExceeded { limit }),
            _ => Ok(()),
        }
    }
}

/// The token's error, if it has fired.
fn cancelled(token: Option<&CancelToken>) -> Option<StreamError> {
    token.and_then(CancelToken::reason)
}

/// Polls `source` once, unless `token` has fired; while the source is
/// pending, also waits for the token.
fn poll_step<S: Source + Unpin>(
    source: &mut S,
    token: Option<&CancelToken>,
    cx: &mut Context<'_>,
) -> Poll<Option<BatchResult>> {
    if let Some(e) = cancelled(token) {
        return Poll::Ready(Some(Err(e)));
    }
    match Pin::new(source).poll_next_batch(cx) {
        Poll::Pending => match token.map(|t| t.poll_cancelled(cx)) {
            Some(Poll::Ready(e)) => Poll::Ready(Some(Err(e))),
            _ => Poll::Pending,
        },
        ready => ready,
    }
}

async fn collect<S, C>(
    mut source: S,
    options: ConsumeOptions,
    mut collector: C,
) -> Result<C::Output, StreamError>
where
    S: Source + Unpin,
    C: Collector,
{
    let token = options.token.as_ref();
    let mut budget = Budget::new(options.limit);
    loop {
        let step = match poll_fn(|cx| poll_step(&mut source, token, cx)).await {
            Some(Ok(batch)) => budget.charge(&batch).and_then(|()| collector.push(batch)),
            Some(Err(e)) => Err(e),
            None => break,
        };
        if let Err(e) = step {
            // Stop pulling and release the source before reporting.
            drop(source);
            return Err(e);
        }
    }
    drop(source);
    Ok(collector.finish())
}

fn collect_sync<I, C>(
    source: I,
    options: ConsumeOptions,
    mut collector: C,
) -> Result<C::Output, StreamError>
where
    I: IntoIterator<Item = BatchResult>,
    C: Collector,
{
    let token = options.token.as_ref();
    let mut budget = Budget::new(options.limit);
    let mut iter = source.into_iter();
    loop {
        let step = match cancelled(token).map(Err).or_else(|| iter.next()) {
            Some(Ok(batch)) => budget.charge(&batch).and_then(|()| collector.push(batch)),
            Some(Err(e)) => Err(e),
            None => break,
        };
        if let Err(e) = step {
            drop(iter);
            return Err(e);
        }
    }
    drop(iter);
    Ok(collector.finish())
}

/// Keeps every chunk, moved, never copied.
struct Chunks {
    chunks: Vec<Bytes>,
    keep_empty: bool,
}

impl Chunks {
    fn skipping_empty() -> Self {
        Chunks {
            chunks: Vec::new(),
            keep_empty: false,
        }
    }

    fn keeping_empty() -> Self {
        Chunks {
            chunks: Vec::new(),
            keep_empty: true,
        }
    }
}

impl Collector for Chunks {
    type Output = Vec<Bytes>;

    fn push(&mut self, batch: Batch) -> Result<(), StreamError> {
        if self.chunks.is_empty() && self.keep_empty {
            // Re-use the batch's vector for the first batch.
            self.chunks = batch.into_chunks();
        } else if self.keep_empty {
            self.chunks.extend(batch);
        } else {
            self.chunks
                .extend(batch.into_iter().filter(|c| !c.is_empty()));
        }
        Ok(())
    }

    fn finish(self) -> Vec<Bytes> {
        self.chunks
    }
}

/// Decodes the chunks as UTF-8 on the way in, into one `String`: each byte
/// is validated once and copied once.
#[derive(Default)]
struct Text {
    text: String,
    check: Utf8Check,
}

impl Text {
    fn into_string(self) -> Result<String, StreamError> {
        self.check.finish()?;
        Ok(self.text)
    }
}

impl Collector for Text {
    type Output = Self;

    fn push(&mut self, batch: Batch) -> Result<(), StreamError> {
        for chunk in batch.chunks() {
            if !chunk.is_empty() {
                self.check.feed(chunk, &mut self.text)?;
            }
        }
        Ok(())
    }

    fn finish(self) -> Self {
        self
    }
}

/// An incremental UTF-8 validator: fails on the first byte that no
/// continuation could make valid, and carries an unfinished character (at
/// most 3 bytes) over to the next chunk.
#[derive(Default)]
struct Utf8Check {
    carry: [u8; 4],
    carry_len: usize,
}

impl Utf8Check {
    /// Validates `chunk` (after any carried bytes) and appends the complete
    /// characters to `out`.
    fn feed(&mut self, mut chunk: &[u8], out: &mut String) -> Result<(), StreamError> {
        if self.carry_len > 0 {
            // The lead byte was accepted as the start of an unfinished
            // character, so it names a width of 2 to 4 bytes.
            let width = match self.carry[0] {
                0xF0.. => 4,
                0xE0.. => 3,
                _ => 2,
            };
            let take = (width - self.carry_len).min(chunk.len());
            self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&chunk[..take]);
            self.carry_len += take;
            chunk = &chunk[take..];
            match std::str::from_utf8(&self.carry[..self.carry_len]) {
                Ok(c) => {
                    out.push_str(c);
                    self.carry_len = 0;
                }
                Err(e) if e.error_len().is_some() => return Err(StreamError::InvalidUtf8),
                // Still unfinished: the chunk was too short to complete it.
                Err(_) => return Ok(()),
            }
        }
        match std::str::from_utf8(chunk) {
            Ok(text) => {
                out.push_str(text);
                Ok(())
            }
            Err(e) if e.error_len().is_some() => Err(StreamError::InvalidUtf8),
            Err(e) => {
                let (valid, tail) = chunk.split_at(e.valid_up_to());
                // `valid` is the part `from_utf8` already accepted.
                out.push_str(std::str::from_utf8(valid).map_err(|_| StreamError::InvalidUtf8)?);
                self.carry[..tail.len()].copy_from_slice(tail);
                self.carry_len = tail.len();
                Ok(())
            }
        }
    }

    /// Fails if the text stopped inside a character.
    fn finish(&self) -> Result<(), StreamError> {
        if self.carry_len == 0 {
            Ok(())
        } else {
            Err(StreamError::InvalidUtf8)
        }
    }
}

/// One chunk as is; several copied once into a buffer of the exact size.
fn concat(mut chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let total = chunks.iter().map(Bytes::len).sum();
            let mut out = BytesMut::with_capacity(total);
            for chunk in &chunks {
                out.extend_from_slice(chunk);
            }
            out.freeze()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(parts: &[&[u8]]) -> Result<(), StreamError> {
        let mut c = Utf8Check::default();
        let mut out = String::new();
        for p in parts {
            c.feed(p, &mut out)?;
        }
        c.finish()
    }

    #[test]
    fn utf8_check_carries_characters_over_boundaries() {
        let s = "aé€😀z".as_bytes();
        // Every way of cutting the text in three keeps it valid.
        for i in 0..=s.len() {
            for j in i..=s.len() {
                assert!(check(&[&s[..i], &s[i..j], &s[j..]]).is_ok(), "{i} {j}");
            }
        }
        // One byte at a time.
        let bytes: Vec<&[u8]> = s.chunks(1).collect();
        assert!(check(&bytes).is_ok());
    }

    #[test]
    fn utf8_check_rejects_bad_and_unfinished_text() {
        assert!(check(&[b"\xFF\xFE"]).is_err());
        assert!(check(&[b"a\xC3"]).is_err(), "unfinished at the end");
        assert!(check(&[b"\xC3", b"("]).is_err(), "bad continuation");
        assert!(check(&[b"\xF0\x9F", b"\x98"]).is_err(), "unfinished emoji");
        assert!(check(&[b"\xED", b"\xA0\x80"]).is_err(), "surrogate");
    }
}
