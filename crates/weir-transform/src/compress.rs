//! The `compress` stage: gzip, brotli and zstd as a streaming
//! [`Transform`], and [`plan`], which decides per response whether to
//! compress and edits the response headers to match.
//!
//! The stage compresses each batch as it comes and returns whatever the
//! codec produced (often nothing: codecs emit in blocks). When the upstream
//! goes idle it does a sync flush ([`Transform::idle`]), so a page or an
//! event stream that arrives piece by piece reaches the client piece by
//! piece, everything sent so far decodable at once; the flush at the end of input
//! finishes the stream (gzip trailer, brotli last meta-block, zstd epilogue).

use std::mem;

use brotli::enc::StandardAlloc;
use brotli::enc::encode::{
    BrotliEncoderOperation, BrotliEncoderParameter, BrotliEncoderStateStruct,
};
use bytes::Bytes;
use flate2::{Compression, FlushCompress, Status};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use serde::{Deserialize, Deserializer};
use weir_http::length::content_length;
use weir_http::{content_coding, media_type};
use weir_stream::{Batch, StreamError, Transform};
use zstd::stream::raw::{InBuffer, Operation, OutBuffer};

use crate::coding::{Coding, negotiate};
use crate::fields::{add_vary_accept_encoding, no_transform, weaken_etag};
// The tests read lists with the same parser the stages use.
#[cfg(test)]
use weir_http::list::members as list_members;

/// `[route.compress]` settings.
///
/// Every field has a default, so an empty table is valid. Unknown keys and
/// out-of-range levels are deserialize errors, reported by the config
/// parser at the offending key.
///
/// ```toml
/// [route.compress]
/// codings = ["zstd", "br", "gzip"]
/// min_length = 256
/// gzip_level = 5
/// brotli_quality = 4
/// zstd_level = 3
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompressSettings {
    /// The codings Weir may use, most preferred first: the order breaks
    /// ties between codings the client weighs equally (browsers send no
    /// weights, so in practice this order decides). An empty list turns
    /// compression off.
    ///
    /// Default `["zstd", "br", "gzip"]`. zstd first: at the default levels,
    /// on the bench's HTML text (`benches/compress.rs`), zstd 3 gives output
    /// as small as gzip 5 and brotli 4 for a quarter of gzip's CPU and a
    /// seventh of brotli's. Brotli before gzip for clients without zstd
    /// (Safari, older browsers): its built-in dictionary of web text
    /// (RFC 7932, Appendix A) favours real pages, at about twice gzip's CPU
    /// with the pure-Rust encoder; list `gzip` before `br` to save CPU
    /// instead. gzip last: every client decodes it.
    pub codings: Vec<Coding>,
    /// Responses whose `Content-Length` is below this, in bytes, are not
    /// compressed (the coding's framing would eat the gain). Responses
    /// without a `Content-Length` (streamed) are compressed whatever their
    /// size. Default 256.
    pub min_length: u64,
    /// Media types that are not compressed, matched case-insensitively
    /// against the `Content-Type` without its parameters. Each entry is one
    /// of:
    /// - `type/` (ends with a slash): every subtype of `type`;
    /// - `type/subtype`: that media type exactly;
    /// - `!type/subtype`: an exception, compressed even if another entry
    ///   matches (`"image/"` with `"!image/svg+xml"`).
    ///
    /// The default skips formats that are already compressed: images except
    /// SVG and the uncompressed BMP/ICO, video, audio, WOFF fonts and
    /// archives, and `application/octet-stream`, which in practice labels
    /// downloads (archives, installers, packed data) far more often than
    /// text. A response without a `Content-Type` is never compressed: its
    /// content is unknown, and likely binary.
    #[serde(deserialize_with = "de_content_types")]
    pub skip_content_types: Vec<String>,
    /// gzip level, 0 (stored, no compression) to 9 (smallest, slowest).
    /// Default 5: close to 6's ratio on text and noticeably faster, which
    /// matters for compression on the fly.
    #[serde(deserialize_with = "de_gzip_level")]
    pub gzip_level: u32,
    /// Brotli quality, 0 (fastest) to 11 (smallest). Default 4, the usual
    /// choice for on-the-fly compression; 10 and 11 are for precompressed
    /// assets and far too slow for a proxy.
    #[serde(deserialize_with = "de_brotli_quality")]
    pub brotli_quality: u32,
    /// zstd level, 1 (fastest) to 19 (smallest). Default 3, zstd's own
    /// default. Levels 20-22 ("ultra") need windows of up to 128 MiB per
    /// response and are refused.
    #[serde(deserialize_with = "de_zstd_level")]
    pub zstd_level: i32,
}

/// The valid range of [`CompressSettings::gzip_level`].
pub const GZIP_LEVELS: std::ops::RangeInclusive<u32> = 0..=9;
/// The valid range of [`CompressSettings::brotli_quality`].
pub const BROTLI_QUALITIES: std::ops::RangeInclusive<u32> = 0..=11;
/// The valid range of [`CompressSettings::zstd_level`].
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=19;

/// The default of [`CompressSettings::skip_content_types`].
pub const DEFAULT_SKIP_CONTENT_TYPES: &[&str] = &[
    "image/",
    "!image/svg+xml",
    "!image/bmp",
    "!image/x-icon",
    "!image/vnd.microsoft.icon",
    "video/",
    "audio/",
    "font/woff",
    "font/woff2",
    "application/zip",
    "application/gzip",
    "application/x-gzip",
    "application/zstd",
    "application/x-brotli",
    "application/x-bzip2",
    "application/x-xz",
    "application/x-7z-compressed",
    "application/x-rar-compressed",
    "application/vnd.rar",
    "application/octet-stream",
];

impl Default for CompressSettings {
    fn default() -> Self {
        CompressSettings {
            codings: vec![Coding::Zstd, Coding::Brotli, Coding::Gzip],
            min_length: 256,
            skip_content_types: DEFAULT_SKIP_CONTENT_TYPES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            gzip_level: 5,
            brotli_quality: 4,
            zstd_level: 3,
        }
    }
}

impl CompressSettings {
    /// Whether a response with this `Content-Type` value is left
    /// uncompressed, by [`CompressSettings::skip_content_types`]. Parameters
    /// (`; charset=utf-8`) are ignored.
    pub fn skips_content_type(&self, content_type: &str) -> bool {
        let essence = media_type::essence(content_type);
        let mut skip = false;
        for rule in &self.skip_content_types {
            if let Some(exception) = rule.strip_prefix('!') {
                if exception.as_bytes().eq_ignore_ascii_case(essence) {
                    return false;
                }
            } else if rule.ends_with('/') {
                skip |= essence
                    .get(..rule.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(rule.as_bytes()));
            } else {
                skip |= rule.as_bytes().eq_ignore_ascii_case(essence);
            }
        }
        skip
    }
}

fn de_level<'de, D, T>(deserializer: D, range: std::ops::RangeInclusive<T>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + PartialOrd + std::fmt::Display + Copy,
{
    let level = T::deserialize(deserializer)?;
    if range.contains(&level) {
        Ok(level)
    } else {
        Err(serde::de::Error::custom(format_args!(
            "{level} is out of range: expected an integer from {} to {}",
            range.start(),
            range.end()
        )))
    }
}

fn de_gzip_level<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_level(d, GZIP_LEVELS)
}

fn de_brotli_quality<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_level(d, BROTLI_QUALITIES)
}

fn de_zstd_level<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    de_level(d, ZSTD_LEVELS)
}

/// Each entry must be `type/`, `type/subtype` or `!type/subtype`, made of
/// token characters.
fn de_content_types<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let rules = Vec::<String>::deserialize(d)?;
    for rule in &rules {
        let (negated, body) = match rule.strip_prefix('!') {
            Some(body) => (true, body),
            None => (false, rule.as_str()),
        };
        let valid = match body.split_once('/') {
            Some((ty, sub)) => {
                let token = |s: &str| {
                    !s.is_empty()
                        && s.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
                };
                token(ty) && (token(sub) || (sub.is_empty() && !negated))
            }
            None => false,
        };
        if !valid {
            return Err(serde::de::Error::custom(format_args!(
                "invalid media type rule {rule:?}: expected \"type/\", \"type/subtype\" or \"!type/subtype\""
            )));
        }
    }
    Ok(rules)
}

/// Decides whether to compress this response and, when it does, edits its
/// headers. Call it once per response, before sending the head.
///
/// Returns the coding to run a [`Compressor`] with, or `None` to send the
/// body as it is.
///
/// The response is not eligible, and its headers are left untouched, when:
/// - `settings.codings` is empty;
/// - the request is `HEAD` (there is no body to compress);
/// - the status is 1xx, 204, 205 or 304 (no content), or 206 (a range of
///   the identity content, RFC 9110 §14.4);
/// - the response already has a `Content-Encoding` other than `identity`;
/// - it has a `Content-Range`;
/// - its `Cache-Control` has `no-transform`: a proxy must not change the
///   content (RFC 9110 §7.7, RFC 9111 §5.2.2.6). A request's `no-transform`
///   is not looked at: a client that wants identity says so in
///   `Accept-Encoding`;
/// - it has no `Content-Type`, or one that
///   [`CompressSettings::skips_content_type`];
/// - its `Content-Length` is below `settings.min_length` bytes.
///
/// Other statuses (200, 201, 203, 404, 500 ...) are compressed like 200.
///
/// An eligible response gets `Vary: Accept-Encoding` (appended to an
/// existing `Vary`, unless that lists it already or is `*`) whatever the
/// negotiation picks, so that a cache keys it on the request's
/// `Accept-Encoding`. Then [`negotiate`] picks the coding; when it picks
/// one, the response gets `Content-Encoding: <coding>` and loses
/// `Content-Length` (unknown until the end), `Accept-Ranges` (ranges of the
/// compressed form are not offered) and the digests of the uncompressed
/// bytes (`Content-Digest`, `Repr-Digest`, `Digest`, `Content-MD5`), and a
/// strong `ETag` becomes weak (`"x"` → `W/"x"`), since the compressed bytes
/// depend on the coding and level (RFC 9110 §8.8.1). A malformed `ETag`
/// (not quoted) is removed, as it cannot be weakened.
pub fn plan(
    settings: &CompressSettings,
    method: &Method,
    request_headers: &HeaderMap,
    status: StatusCode,
    response_headers: &mut HeaderMap,
) -> Option<Coding> {
    if settings.codings.is_empty() || !eligible(settings, method, status, response_headers) {
        return None;
    }
    add_vary_accept_encoding(response_headers);
    let coding = negotiate(
        request_headers.get_all(header::ACCEPT_ENCODING),
        &settings.codings,
    )?;
    response_headers.insert(header::CONTENT_ENCODING, coding.header_value());
    response_headers.remove(header::CONTENT_LENGTH);
    response_headers.remove(header::ACCEPT_RANGES);
    remove_digests(response_headers);
    weaken_etag(response_headers);
    Some(coding)
}

/// Removes the fields that carry a digest of the bytes as the origin sent
/// them, which compression makes wrong.
fn remove_digests(headers: &mut HeaderMap) {
    for name in ["content-digest", "repr-digest", "digest", "content-md5"] {
        headers.remove(HeaderName::from_static(name));
    }
}

/// Every rule of [`plan`] but the negotiation.
fn eligible(
    settings: &CompressSettings,
    method: &Method,
    status: StatusCode,
    headers: &HeaderMap,
) -> bool {
    if method == Method::HEAD
        || status.is_informational()
        || matches!(status.as_u16(), 204 | 205 | 206 | 304)
        || headers.contains_key(header::CONTENT_RANGE)
    {
        return false;
    }
    if !content_coding::is_identity(headers) || no_transform(headers) {
        return false;
    }
    let skipped_type = match headers.get(header::CONTENT_TYPE).map(HeaderValue::to_str) {
        Some(Ok(content_type)) => settings.skips_content_type(content_type),
        _ => true,
    };
    if skipped_type {
        return false;
    }
    content_length(headers).is_none_or(|length| length >= settings.min_length)
}

/// Why a [`Compressor`] failed. It reaches the consumer as
/// [`StreamError::Failed`]; downcast the reason to this type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompressError {
    /// The gzip (deflate) encoder returned an error.
    #[error("gzip encoder failed: {0}")]
    Gzip(flate2::CompressError),
    /// The brotli encoder refused an operation (its state machine was
    /// misused; brotli reports no detail).
    #[error("brotli encoder failed")]
    Brotli,
    /// libzstd returned an error (creating the context, or compressing).
    #[error("zstd encoder failed: {0}")]
    Zstd(std::io::Error),
    /// The encoder made no progress although it had room to write: a bug
    /// in the codec or in its driving; failing beats looping forever.
    #[error("{coding} encoder made no progress")]
    Stalled {
        /// The coding whose encoder stalled.
        coding: Coding,
    },
    /// A batch or a flush after the end of the stream, or after an error.
    #[error("{coding} compressor used after its end")]
    Ended {
        /// The coding of the compressor.
        coding: Coding,
    },
}

/// Capacity of each output buffer, in bytes. Output larger than this goes
/// out as several chunks of one batch: nothing is ever copied to grow a
/// buffer.
const OUT_CHUNK: usize = 16 * 1024;

/// A buffer with less room than this, in bytes, is closed and a new one
/// started: codecs write flush markers and headers whole (zlib asks for
/// more than 6 bytes on a sync flush).
const MIN_ROOM: usize = 64;

/// The output of one call: full buffers frozen into a batch, and the one
/// being written.
struct Out {
    batch: Batch,
    current: Vec<u8>,
}

impl Out {
    /// Starts with `spare`, the empty buffer a previous call kept.
    fn new(spare: Vec<u8>) -> Self {
        Out {
            batch: Batch::new(),
            current: spare,
        }
    }

    /// The buffer to write into, with at least [`MIN_ROOM`] bytes of spare capacity.
    fn room(&mut self) -> &mut Vec<u8> {
        if self.current.capacity() - self.current.len() < MIN_ROOM {
            let full = mem::replace(&mut self.current, Vec::with_capacity(OUT_CHUNK));
            if !full.is_empty() {
                self.batch.push(Bytes::from(full));
            }
        }
        &mut self.current
    }

    /// Copies `data` in (brotli hands its output out as a borrowed slice).
    fn extend(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let buf = self.room();
            let n = data.len().min(buf.capacity() - buf.len());
            buf.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
    }

    /// The batch, or `None` when nothing was written; an unused buffer goes
    /// back to `spare`. A mostly empty last buffer is shrunk (in place, for
    /// the allocator) so a small flush does not pin a whole chunk.
    fn finish(mut self, spare: &mut Vec<u8>) -> Option<Batch> {
        if self.current.is_empty() {
            *spare = self.current;
        } else {
            if self.current.len() < self.current.capacity() / 4 {
                self.current.shrink_to_fit();
            }
            self.batch.push(Bytes::from(self.current));
        }
        (!self.batch.is_empty()).then_some(self.batch)
    }
}

/// The encoder state of one stream.
enum Codec {
    Gzip(flate2::Compress),
    // Boxed: the state is a few KiB inline, and the stage moves.
    Brotli(Box<BrotliEncoderStateStruct<StandardAlloc>>),
    Zstd(zstd::stream::raw::Encoder<'static>),
    /// Creating the encoder failed; the error is returned on first use.
    Broken(Option<std::io::Error>),
    /// Finished, failed or aborted: the state is released.
    Ended,
}

/// What a call asks of the codec after feeding it input.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Only compress; emit what the codec emits on its own.
    Process,
    /// Sync flush: emit everything so far, byte-aligned, decodable.
    Flush,
    /// End the stream.
    Finish,
}

/// A streaming compressor: a [`Transform`] that turns the body into its
/// `gzip`, `br` or `zstd` content coding.
///
/// - `transform(Some(batch))` compresses every chunk of the batch and
///   returns what the codec produced, maybe nothing.
/// - [`Transform::idle`] does a sync flush (deflate `Z_SYNC_FLUSH`, brotli
///   `FLUSH`, zstd `flush`) and returns its bytes, so what was received so
///   far can be decoded by the client now. It returns `None` when nothing
///   came in since the last flush.
/// - `transform(None)` finishes the stream. A body of 0 bytes still gets a
///   valid (tiny) stream, since the headers already say it is encoded.
///
/// Output goes into buffers of 16 KiB frozen into the batch as they fill:
/// no copy for gzip and zstd (they write into the buffer), one copy for
/// brotli (it hands out its internal buffer). Memory per stream is the
/// encoder's: about 260 KiB for gzip (a 32 KiB window, deflate's default
/// tables); for brotli and zstd a window of up to 4 MiB (brotli, 2^22) and
/// 2 MiB (zstd level 3, 2^21) plus hash tables.
///
/// Errors are [`StreamError::Failed`] with a [`CompressError`]. Never panics.
pub struct Compressor {
    coding: Coding,
    codec: Codec,
    /// An empty output buffer kept from a call that produced nothing.
    spare: Vec<u8>,
    /// Input came in since the last flush.
    dirty: bool,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor")
            .field("coding", &self.coding)
            .field("ended", &matches!(self.codec, Codec::Ended))
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

impl Compressor {
    /// A compressor for `coding` at the level `settings` gives for it.
    ///
    /// Levels outside the valid ranges ([`GZIP_LEVELS`],
    /// [`BROTLI_QUALITIES`], [`ZSTD_LEVELS`]; only settings built in code
    /// can have them) are clamped into them. If libzstd cannot create its
    /// context, the error is returned by the first call.
    pub fn new(coding: Coding, settings: &CompressSettings) -> Self {
        let codec = match coding {
            Coding::Gzip => {
                let level = settings.gzip_level.min(*GZIP_LEVELS.end());
                Codec::Gzip(flate2::Compress::new_gzip(Compression::new(level), 15))
            }
            Coding::Brotli => {
                let quality = settings.brotli_quality.min(*BROTLI_QUALITIES.end());
                let mut state = Box::new(BrotliEncoderStateStruct::new(StandardAlloc::default()));
                state.set_parameter(BrotliEncoderParameter::BROTLI_PARAM_QUALITY, quality);
                Codec::Brotli(state)
            }
            Coding::Zstd => {
                let level = settings
                    .zstd_level
                    .clamp(*ZSTD_LEVELS.start(), *ZSTD_LEVELS.end());
                match zstd::stream::raw::Encoder::new(level) {
                    Ok(encoder) => Codec::Zstd(encoder),
                    Err(e) => Codec::Broken(Some(e)),
                }
            }
        };
        Compressor {
            coding,
            codec,
            spare: Vec::new(),
            dirty: false,
        }
    }

    /// Tells the compressor the body's expected length, in bytes, when it
    /// is known (the origin's `Content-Length`, read before [`plan`]
    /// removes it). Only a hint: a body of another length still compresses
    /// correctly. Brotli picks its match finder from it, as its one-shot
    /// API does with the input's length: from 1 MiB up, at quality 4, a
    /// larger hash table, for about 10% smaller output on large text at some
    /// more CPU and memory. gzip and zstd ignore it. Call it before the
    /// first batch.
    pub fn with_size_hint(mut self, bytes: u64) -> Self {
        if let Codec::Brotli(state) = &mut self.codec {
            // Brotli caps its hint at 1 GiB.
            let hint = u32::try_from(bytes.min(1 << 30)).unwrap_or(1 << 30);
            state.set_parameter(BrotliEncoderParameter::BROTLI_PARAM_SIZE_HINT, hint);
        }
        self
    }

    /// The coding this compressor produces.
    pub fn coding(&self) -> Coding {
        self.coding
    }

    /// Feeds `input` (may be empty), then does `step`; output goes to `out`.
    fn run(&mut self, input: &[u8], step: Step, out: &mut Out) -> Result<(), CompressError> {
        let coding = self.coding;
        match &mut self.codec {
            Codec::Gzip(c) => gzip(c, input, step, out),
            Codec::Brotli(s) => brotli(s, input, step, out),
            Codec::Zstd(e) => zstd_run(e, input, step, out),
            Codec::Broken(e) => Err(match e.take() {
                Some(e) => CompressError::Zstd(e),
                None => CompressError::Ended { coding },
            }),
            Codec::Ended => Err(CompressError::Ended { coding }),
        }
    }

    /// Runs one call: `feed` writes into a fresh [`Out`]; errors end the stream.
    fn call(
        &mut self,
        feed: impl FnOnce(&mut Self, &mut Out) -> Result<(), CompressError>,
    ) -> Result<Option<Batch>, StreamError> {
        let mut out = Out::new(mem::take(&mut self.spare));
        match feed(self, &mut out) {
            Ok(()) => Ok(out.finish(&mut self.spare)),
            Err(e) => {
                self.codec = Codec::Ended;
                Err(StreamError::failed(e))
            }
        }
    }
}

impl Transform for Compressor {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match input {
            Some(batch) => self.call(|this, out| {
                for chunk in batch.chunks().iter().filter(|c| !c.is_empty()) {
                    this.dirty = true;
                    this.run(chunk, Step::Process, out)?;
                }
                Ok(())
            }),
            None => {
                let result = self.call(|this, out| this.run(&[], Step::Finish, out));
                // Release the encoder now rather than when the body drops.
                self.codec = Codec::Ended;
                self.spare = Vec::new();
                self.dirty = false;
                result
            }
        }
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        if !self.dirty || matches!(self.codec, Codec::Ended) {
            return Ok(None);
        }
        self.dirty = false;
        self.call(|this, out| this.run(&[], Step::Flush, out))
    }

    fn abort(&mut self, _reason: &StreamError) {
        self.codec = Codec::Ended;
        self.spare = Vec::new();
    }

    /// Drops digests of the uncompressed bytes from the trailers
    /// (`Content-Digest`, `Repr-Digest`, `Digest`, `Content-MD5`), as
    /// [`plan`] does from the head.
    fn trailers(&mut self, trailers: &mut HeaderMap) {
        remove_digests(trailers);
    }
}

/// Deflate with a gzip wrapper, through zlib-rs.
fn gzip(
    c: &mut flate2::Compress,
    mut input: &[u8],
    step: Step,
    out: &mut Out,
) -> Result<(), CompressError> {
    let flush = match step {
        Step::Process => FlushCompress::None,
        Step::Flush => FlushCompress::Sync,
        Step::Finish => FlushCompress::Finish,
    };
    loop {
        let buf = out.room();
        let (len_before, in_before) = (buf.len(), c.total_in());
        let status = c
            .compress_vec(input, buf, flush)
            .map_err(CompressError::Gzip)?;
        let consumed = usize::try_from(c.total_in() - in_before).unwrap_or(usize::MAX);
        input = input.get(consumed..).unwrap_or_default();
        let has_room = buf.len() < buf.capacity();
        let progressed = consumed > 0 || buf.len() > len_before;
        match step {
            // Input all taken; output the codec holds comes out later.
            Step::Process if input.is_empty() => return Ok(()),
            // zlib: the flush is complete when it returns with room left.
            Step::Flush if input.is_empty() && (has_room || !progressed) => return Ok(()),
            Step::Finish if status == Status::StreamEnd => return Ok(()),
            _ => {}
        }
        if !progressed && has_room {
            return Err(CompressError::Stalled {
                coding: Coding::Gzip,
            });
        }
    }
}

/// Brotli, driving its state machine with no output buffer of ours and
/// taking its output as it comes (the `TakeOutput` pattern).
fn brotli(
    s: &mut BrotliEncoderStateStruct<StandardAlloc>,
    input: &[u8],
    step: Step,
    out: &mut Out,
) -> Result<(), CompressError> {
    let op = match step {
        Step::Process => BrotliEncoderOperation::BROTLI_OPERATION_PROCESS,
        Step::Flush => BrotliEncoderOperation::BROTLI_OPERATION_FLUSH,
        Step::Finish => BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
    };
    let mut available_in = input.len();
    let mut in_offset = 0;
    let (mut available_out, mut out_offset, mut total_out) = (0, 0, None);
    loop {
        let in_before = available_in;
        let ok = s.compress_stream(
            op,
            &mut available_in,
            input,
            &mut in_offset,
            &mut available_out,
            &mut [],
            &mut out_offset,
            &mut total_out,
            &mut |_, _, _, _| (),
        );
        if !ok {
            return Err(CompressError::Brotli);
        }
        let mut produced = false;
        while s.has_more_output() {
            // `size` in: at most this much (0: all); out: how much was taken.
            // The slice may run past it (it is the rest of brotli's buffer).
            let mut size = 0;
            let pending = s.take_output(&mut size);
            let bytes = pending.get(..size).unwrap_or(pending);
            produced |= !bytes.is_empty();
            out.extend(bytes);
        }
        // With all input taken and all output drained, one call has done
        // the whole operation (a flush or finish runs once input is in).
        if available_in == 0 && (step != Step::Finish || s.is_finished()) {
            return Ok(());
        }
        if !produced && available_in == in_before {
            return Err(CompressError::Stalled {
                coding: Coding::Brotli,
            });
        }
    }
}

/// zstd through libzstd's streaming API (`ZSTD_compressStream2`).
fn zstd_run(
    e: &mut zstd::stream::raw::Encoder<'static>,
    input: &[u8],
    step: Step,
    out: &mut Out,
) -> Result<(), CompressError> {
    let mut input = InBuffer::around(input);
    while input.pos() < input.src.len() {
        let buf = out.room();
        let pos = buf.len();
        let mut output = OutBuffer::around_pos(buf, pos);
        e.run(&mut input, &mut output)
            .map_err(CompressError::Zstd)?;
    }
    if step == Step::Process {
        return Ok(());
    }
    loop {
        let buf = out.room();
        let pos = buf.len();
        let mut output = OutBuffer::around_pos(buf, pos);
        let left = match step {
            Step::Finish => e.finish(&mut output, true),
            _ => e.flush(&mut output),
        }
        .map_err(CompressError::Zstd)?;
        if left == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_members_respects_quotes() {
        let members: Vec<&[u8]> =
            list_members(b"private=\"a, no-transform\", , max-age=3 ,x").collect();
        assert_eq!(
            members,
            vec![&b"private=\"a, no-transform\""[..], b"max-age=3", b"x"]
        );
    }

    #[test]
    fn out_splits_into_chunks_without_growing() {
        let mut spare = Vec::new();
        let mut out = Out::new(mem::take(&mut spare));
        out.extend(&vec![7u8; OUT_CHUNK * 2 + 10]);
        let batch = out.finish(&mut spare).unwrap();
        assert_eq!(batch.byte_len(), OUT_CHUNK * 2 + 10);
        assert!(batch.len() >= 3);
        assert!(batch.chunks().iter().all(|c| c.len() <= OUT_CHUNK));
    }

    #[test]
    fn out_keeps_an_unused_buffer() {
        let mut spare = Vec::with_capacity(100);
        let out = Out::new(mem::take(&mut spare));
        assert!(out.finish(&mut spare).is_none());
        assert_eq!(spare.capacity(), 100);
    }
}
