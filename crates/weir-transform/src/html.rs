//! The `html-rewrite` stage: lol_html over a streamed `text/html` body.
//!
//! [`rewritable`] decides from the response headers whether a body can be
//! rewritten, and in which encoding; [`HtmlRewrite`] is the stage. It injects
//! snippets before `</head>` and `</body>`, sets and removes attributes on
//! elements matched by CSS selectors, and rewrites URL prefixes
//! ([`HtmlRewriteSettings`]). Everything else passes through byte for byte:
//! lol_html re-serializes only the tags it changes.
//!
//! A document lol_html cannot handle is passed through unchanged from that
//! point, never truncated (see [`HtmlRewrite`]).

mod settings;
mod url;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_TYPE;
use lol_html::errors::RewritingError;
use lol_html::html_content::{BailOut, ContentType, DocumentEnd, EndTag};
use lol_html::send::{DocumentContentHandlers, Element, ElementContentHandlers, HtmlRewriter};
use lol_html::{AsciiCompatibleEncoding, HandlerResult, MemorySettings, OutputSink};
use weir_http::{content_coding, media_type, params};
use weir_stream::{Batch, StreamError, Transform};

pub use settings::{
    AttributeName, CssSelector, DEFAULT_MEMORY_LIMIT, HtmlRewriteSettings, RemoveAttribute,
    SetAttribute, SettingError, UrlPrefix,
};

/// The encoding to rewrite a response's body in, or `None` when the body
/// must pass through untouched.
///
/// `Some` only when all of:
/// - there is exactly one `Content-Type` field and its media type is
///   `text/html` (case-insensitive, parameters allowed; RFC 9110 §8.3.1);
/// - its `charset` parameter, if any (the first one, quoted or not), is a
///   label the WHATWG Encoding Standard knows (`Encoding::for_label`) for an
///   ASCII-compatible encoding, the only ones lol_html parses: UTF-16,
///   ISO-2022-JP, `replacement` and unknown labels give `None`;
/// - every `Content-Encoding` coding is `identity` (or there is none): a
///   compressed body cannot be rewritten (RFC 9110 §8.4).
///
/// Without a `charset`, the encoding is UTF-8. (A browser would sniff the
/// bytes, then fall back to a locale default such as windows-1252: HTML
/// Living Standard §13.2.3. UTF-8 is what nearly every document without a
/// charset is, and the rewrites are safe in any ASCII-compatible encoding: a
/// URL whose bytes do not decode is not rewritten, and only the tags changed
/// are re-serialized.) A `<meta charset>` in the document is not consulted.
pub fn rewritable(response_headers: &HeaderMap) -> Option<&'static encoding_rs::Encoding> {
    if !content_coding::is_identity(response_headers) {
        return None;
    }
    let mut types = response_headers.get_all(CONTENT_TYPE).iter();
    let content_type = types.next()?;
    if types.next().is_some() {
        return None;
    }
    // A charset label is text: a value that is not UTF-8 is left alone.
    let content_type = std::str::from_utf8(content_type.as_bytes()).ok()?;
    let (essence, params) = media_type::split(content_type);
    if !essence.eq_ignore_ascii_case(b"text/html") {
        return None;
    }
    let encoding = match charset_param(params) {
        Some(label) => encoding_rs::Encoding::for_label(label.as_bytes())?,
        None => encoding_rs::UTF_8,
    };
    encoding.is_ascii_compatible().then_some(encoding)
}

/// The value of the first `charset` parameter in `params` (what follows the
/// media type's first `;`), unquoted and trimmed; `None` when it is
/// missing or empty. Parameter grammar: RFC 9110 §5.6.6 (`weir_http::params`).
fn charset_param<T: AsRef<[u8]> + ?Sized>(params: &T) -> Option<String> {
    let value = params::parameters(params).get("charset")?;
    let value = std::str::from_utf8(&value).ok()?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// Why a rewriter could not be built, or failed beyond recovery.
#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    /// lol_html parses only ASCII-compatible encodings (not UTF-16,
    /// ISO-2022-JP or `replacement`). [`rewritable`] never returns one.
    #[error("html-rewrite: lol_html cannot parse {0}-encoded documents")]
    UnsupportedEncoding(&'static str),
    /// lol_html failed without handing back the input it held (it does so
    /// for every error it can return with our settings, so this is not
    /// expected): the output would have lost bytes, so the stream fails
    /// rather than go on silently broken.
    #[error("html-rewrite: lol_html failed and lost buffered input: {0}")]
    Lost(#[source] RewritingError),
}

fn lock(out: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
    // Nothing panics while holding the lock; a poisoned one is still whole.
    out.lock().unwrap_or_else(PoisonError::into_inner)
}

/// lol_html's output sink for the stage: appends to a buffer shared with the
/// stage (the rewriter owns its sink), which takes it after each call.
struct Sink(Arc<Mutex<Vec<u8>>>);

impl OutputSink for Sink {
    #[inline]
    fn handle_chunk(&mut self, chunk: &[u8]) {
        if !chunk.is_empty() {
            lock(&self.0).extend_from_slice(chunk);
        }
    }
}

/// Whether each snippet went in, shared by the handlers of one document.
#[derive(Debug, Default)]
struct Injected {
    head: AtomicBool,
    body_started: AtomicBool,
    body: AtomicBool,
}

impl Injected {
    fn head(&self) -> &AtomicBool {
        &self.head
    }

    fn body(&self) -> &AtomicBool {
        &self.body
    }
}

/// `head`, `body` and [`url::URL_SELECTOR`], parsed once per process.
static HEAD: LazyLock<lol_html::Selector> =
    LazyLock::new(|| "head".parse().expect("constant selector"));
static BODY: LazyLock<lol_html::Selector> =
    LazyLock::new(|| "body".parse().expect("constant selector"));
static URLS: LazyLock<lol_html::Selector> =
    LazyLock::new(|| url::URL_SELECTOR.parse().expect("constant selector"));

enum State {
    Rewriting(Box<HtmlRewriter<'static, Sink>>),
    /// lol_html failed, or cannot parse the encoding: input goes out as is.
    Passthrough,
    /// Flushed or aborted.
    Done,
}

/// The `html-rewrite` stage: a streaming HTML rewriter ([lol_html]).
///
/// Input chunks are written to lol_html as they come; each call returns the
/// output lol_html produced for them, as one chunk. lol_html emits
/// everything it can as soon as it can: it holds back only an unfinished
/// construct at the end of a chunk (a tag, comment or doctype cut in two),
/// so a streamed page reaches the client piece by piece and
/// [`Transform::idle`] has nothing to add. Changes: [`HtmlRewriteSettings`].
///
/// # Failure passthrough
///
/// A document lol_html cannot handle is passed through unchanged from that
/// point, with a `tracing` warning, never truncated. lol_html's errors with
/// our settings are:
/// - *memory limit exceeded* ([`HtmlRewriteSettings::memory_limit`]):
///   lol_html's buffers outgrew the limit (a start tag held across many
///   chunks, a tag with very many attributes, very deep element nesting);
/// - *content handler error*: a handler of ours failed; only `set_attributes`
///   can, with a name the document's encoding cannot represent (`ü` in a
///   KOI8-R document).
///
/// For both, lol_html's graceful bail-out
/// (`MemorySettings::with_graceful_bail_out_on_memory_limit_exceeded`,
/// `Settings::with_graceful_bail_out_on_content_handler_error`) writes to
/// the output, before returning the error, every input byte it had received
/// but not yet emitted, raw: the unfinished tail it buffered from earlier
/// chunks, then the rest of the failing chunk. lol_html tracks exactly where
/// its output stopped in the input (the start of the construct it could not
/// finish), so the client gets the rewritten output up to that point, then
/// the raw input from there on: nothing lost, nothing doubled. The rest of
/// the batch and all later batches are forwarded as they are, without copy.
/// Limits: a change lol_html had already scheduled for a later end tag (an
/// injection before `</head>` or `</body>`) is not made if that end tag
/// comes after the failure point.
///
/// The third error, *parsing ambiguity*, comes only from lol_html's strict
/// mode, which has no graceful bail-out: the stage turns strict mode off, so
/// markup such as `<select><xmp>` is rewritten on lol_html's best reading
/// of it. That can only decide whether a rewrite applies at such a spot
/// (lol_html may read as a tag what a browser reads as text, or the
/// reverse); the bytes outside rewrites are untouched either way.
/// Should lol_html ever fail without the bail-out flush (not possible with
/// lol_html 3.0.3 and these settings), the stage fails the stream with
/// [`HtmlError::Lost`] instead of sending a document with a hole in it.
///
/// [lol_html]: https://docs.rs/lol_html
pub struct HtmlRewrite {
    state: State,
    /// Output produced since it was last returned.
    out: Arc<Mutex<Vec<u8>>>,
    /// lol_html flushed everything it held, raw, before failing.
    bailed_out: Arc<AtomicBool>,
}

impl std::fmt::Debug for HtmlRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Rewriting(_) => "rewriting",
            State::Passthrough => "passthrough",
            State::Done => "done",
        };
        f.debug_struct("HtmlRewrite")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl HtmlRewrite {
    /// A rewriter for a document in `encoding` (from [`rewritable`]).
    ///
    /// An encoding lol_html cannot parse (not ASCII-compatible, which
    /// [`rewritable`] never returns) makes a stage that passes the body
    /// through untouched, with a warning; [`HtmlRewrite::try_new`] reports
    /// it instead.
    pub fn new(
        settings: Arc<HtmlRewriteSettings>,
        encoding: &'static encoding_rs::Encoding,
    ) -> Self {
        match Self::try_new(settings, encoding) {
            Ok(stage) => stage,
            Err(e) => {
                tracing::warn!(error = %e, "html-rewrite: passing the document through unchanged");
                HtmlRewrite {
                    state: State::Passthrough,
                    out: Arc::default(),
                    bailed_out: Arc::default(),
                }
            }
        }
    }

    /// A rewriter for a document in `encoding`.
    ///
    /// # Errors
    /// [`HtmlError::UnsupportedEncoding`] when `encoding` is not
    /// ASCII-compatible.
    pub fn try_new(
        settings: Arc<HtmlRewriteSettings>,
        encoding: &'static encoding_rs::Encoding,
    ) -> Result<Self, HtmlError> {
        let encoding = AsciiCompatibleEncoding::new(encoding)
            .ok_or(HtmlError::UnsupportedEncoding(encoding.name()))?;
        let out = Arc::new(Mutex::new(Vec::new()));
        let bailed_out = Arc::new(AtomicBool::new(false));
        let rewriter = build(&settings, encoding, &bailed_out, Sink(Arc::clone(&out)));
        Ok(HtmlRewrite {
            state: State::Rewriting(Box::new(rewriter)),
            out,
            bailed_out,
        })
    }

    /// The output held since the last call, as one chunk, if any.
    fn take_output(&self) -> Option<Bytes> {
        let mut out = lock(&self.out);
        if out.is_empty() {
            return None;
        }
        Some(Bytes::from(std::mem::take(&mut *out)))
    }

    /// lol_html failed with `error` (its rewriter is gone): from now on,
    /// input passes through. Returns the output so far (which ends with
    /// lol_html's raw flush) followed by `rest`, the input not yet written.
    #[cold]
    fn fail(
        &mut self,
        error: RewritingError,
        rest: impl Iterator<Item = Bytes>,
    ) -> Result<Option<Batch>, StreamError> {
        self.state = State::Passthrough;
        if !self.bailed_out.load(Ordering::Relaxed) {
            tracing::warn!(error = %error, "html-rewrite: lol_html failed and lost input; failing the response");
            return Err(StreamError::failed(HtmlError::Lost(error)));
        }
        tracing::warn!(error = %error, "html-rewrite: lol_html cannot rewrite this document; passing the rest through unchanged");
        let mut out = Batch::new();
        if let Some(done) = self.take_output() {
            out.push(done);
        }
        for chunk in rest {
            out.push(chunk);
        }
        Ok((!out.is_empty()).then_some(out))
    }
}

impl Transform for HtmlRewrite {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let rewriter = match &mut self.state {
            State::Rewriting(rewriter) => rewriter,
            State::Passthrough | State::Done => return Ok(input),
        };
        let Some(batch) = input else {
            // The flush: lol_html emits what it held, then the body fallback.
            let State::Rewriting(rewriter) = std::mem::replace(&mut self.state, State::Done) else {
                return Ok(None);
            };
            if let Err(e) = rewriter.end() {
                return self.fail(e, std::iter::empty());
            }
            return Ok(self.take_output().map(Batch::one));
        };
        lock(&self.out).reserve(batch.byte_len());
        let mut chunks = batch.into_iter();
        while let Some(chunk) = chunks.next() {
            if let Err(e) = rewriter.write(&chunk) {
                return self.fail(e, chunks);
            }
        }
        Ok(self.take_output().map(Batch::one))
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        // lol_html hands its sink all it can emit within `write`, and
        // `transform` returns it all, so this is empty in practice.
        Ok(self.take_output().map(Batch::one))
    }

    fn abort(&mut self, _reason: &StreamError) {
        self.state = State::Done;
    }
}

/// Rewrites a whole buffered `document` in `encoding` at once, as
/// [`HtmlRewrite`] would in a stream, with one lol_html `write` and `end`.
///
/// For a body that is in memory anyway (a cached response), and the
/// baseline of the stage's benchmark. On a lol_html failure, the output is
/// the same as the stage's: rewritten up to the failure point, raw after.
///
/// # Errors
/// [`HtmlError::UnsupportedEncoding`] when `encoding` is not
/// ASCII-compatible; [`HtmlError::Lost`] as for the stage.
pub fn rewrite_document(
    settings: &Arc<HtmlRewriteSettings>,
    encoding: &'static encoding_rs::Encoding,
    document: &[u8],
) -> Result<Vec<u8>, HtmlError> {
    let ascii = AsciiCompatibleEncoding::new(encoding)
        .ok_or(HtmlError::UnsupportedEncoding(encoding.name()))?;
    let mut out = Vec::with_capacity(document.len() + document.len() / 16);
    let bailed_out = Arc::new(AtomicBool::new(false));
    let mut rewriter = build(settings, ascii, &bailed_out, |c: &[u8]| {
        out.extend_from_slice(c);
    });
    let result = match rewriter.write(document) {
        Ok(()) => rewriter.end(),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Ok(out),
        Err(e) if bailed_out.load(Ordering::Relaxed) => {
            tracing::warn!(error = %e, "html-rewrite: lol_html cannot rewrite this document; passing the rest through unchanged");
            Ok(out)
        }
        Err(e) => Err(HtmlError::Lost(e)),
    }
}

/// lol_html's rewriter for `settings`, writing to `sink`; `bailed_out` is
/// set when lol_html flushes its held input before failing.
fn build<O: OutputSink>(
    settings: &Arc<HtmlRewriteSettings>,
    encoding: AsciiCompatibleEncoding,
    bailed_out: &Arc<AtomicBool>,
    sink: O,
) -> HtmlRewriter<'static, O> {
    let limit = settings.memory_limit;
    let memory = MemorySettings::new()
        .with_max_allowed_memory_usage(limit)
        // lol_html counts its preallocated buffer against the limit.
        .with_preallocated_parsing_buffer_size(limit.min(1024 * 2) / 2)
        .with_graceful_bail_out_on_memory_limit_exceeded(true);
    let bail_flag = Arc::clone(bailed_out);
    let mut lol = lol_html::Settings::new_send()
        .with_encoding(encoding)
        .with_strict(false)
        .with_memory_settings(memory)
        .with_graceful_bail_out_on_content_handler_error(true)
        .append_bail_out_handler(move |_: &RewritingError, _: &mut BailOut<'_>| {
            bail_flag.store(true, Ordering::Relaxed);
        });

    if !settings.url_prefixes.is_empty() {
        let s = Arc::clone(settings);
        lol = lol.append_element_content_handler((
            std::borrow::Cow::Borrowed(&*URLS),
            ElementContentHandlers::default().element(
                move |el: &mut Element<'_, '_>| -> HandlerResult {
                    rewrite_urls(&s, el);
                    Ok(())
                },
            ),
        ));
    }
    for (i, set) in settings.set_attributes.iter().enumerate() {
        let s = Arc::clone(settings);
        lol = lol.append_element_content_handler((
            std::borrow::Cow::Borrowed(&set.selector.parsed),
            ElementContentHandlers::default().element(
                move |el: &mut Element<'_, '_>| -> HandlerResult {
                    let set = &s.set_attributes[i];
                    el.set_attribute(set.name.as_str(), &set.value)?;
                    Ok(())
                },
            ),
        ));
    }
    for (i, remove) in settings.remove_attributes.iter().enumerate() {
        let s = Arc::clone(settings);
        lol = lol.append_element_content_handler((
            std::borrow::Cow::Borrowed(&remove.selector.parsed),
            ElementContentHandlers::default().element(
                move |el: &mut Element<'_, '_>| -> HandlerResult {
                    el.remove_attribute(s.remove_attributes[i].name.as_str());
                    Ok(())
                },
            ),
        ));
    }

    let injected = Arc::new(Injected::default());
    if settings.head_snippet().is_some() {
        let (s, inj) = (Arc::clone(settings), Arc::clone(&injected));
        lol = lol.append_element_content_handler((
            std::borrow::Cow::Borrowed(&*HEAD),
            ElementContentHandlers::default().element(
                move |el: &mut Element<'_, '_>| -> HandlerResult {
                    on_end_tag_once(
                        el,
                        &s,
                        &inj,
                        HtmlRewriteSettings::head_snippet,
                        Injected::head,
                    );
                    Ok(())
                },
            ),
        ));
    }
    if settings.head_snippet().is_some() || settings.body_snippet().is_some() {
        let (s, inj) = (Arc::clone(settings), Arc::clone(&injected));
        lol = lol.append_element_content_handler((
            std::borrow::Cow::Borrowed(&*BODY),
            ElementContentHandlers::default().element(
                move |el: &mut Element<'_, '_>| -> HandlerResult {
                    // `</head>` is optional: the head closes at `<body>`.
                    if let Some(snippet) = s.head_snippet()
                        && !inj.head.swap(true, Ordering::Relaxed)
                    {
                        el.before(snippet, ContentType::Html);
                    }
                    inj.body_started.store(true, Ordering::Relaxed);
                    on_end_tag_once(
                        el,
                        &s,
                        &inj,
                        HtmlRewriteSettings::body_snippet,
                        Injected::body,
                    );
                    Ok(())
                },
            ),
        ));
    }
    if settings.body_snippet().is_some() {
        let (s, inj) = (Arc::clone(settings), injected);
        lol = lol.append_document_content_handler(DocumentContentHandlers::default().end(
            move |end: &mut DocumentEnd<'_>| -> HandlerResult {
                // `</body>` is optional too: append at the end of the document.
                if let Some(snippet) = s.body_snippet()
                    && inj.body_started.load(Ordering::Relaxed)
                    && !inj.body.swap(true, Ordering::Relaxed)
                {
                    end.append(snippet, ContentType::Html);
                }
                Ok(())
            },
        ));
    }

    HtmlRewriter::new(lol, sink)
}

/// Inserts `snippet(settings)` before `el`'s end tag, unless `flag(injected)`
/// says it went in already (at an earlier element's end tag, or before `<body>`).
fn on_end_tag_once(
    el: &mut Element<'_, '_>,
    settings: &Arc<HtmlRewriteSettings>,
    injected: &Arc<Injected>,
    snippet: fn(&HtmlRewriteSettings) -> Option<&str>,
    flag: fn(&Injected) -> &AtomicBool,
) {
    if snippet(settings).is_none() || flag(injected).load(Ordering::Relaxed) {
        return;
    }
    let Some(handlers) = el.end_tag_handlers() else {
        return;
    };
    let (s, inj) = (Arc::clone(settings), Arc::clone(injected));
    handlers.push(Box::new(move |end: &mut EndTag<'_>| -> HandlerResult {
        if let Some(snippet) = snippet(&s)
            && !flag(&inj).swap(true, Ordering::Relaxed)
        {
            end.before(snippet, ContentType::Html);
        }
        Ok(())
    }));
}

/// Applies `settings.url_prefixes` to `el`'s URL attributes (the first
/// of each name, as browsers read duplicates).
fn rewrite_urls(settings: &HtmlRewriteSettings, el: &mut Element<'_, '_>) {
    let prefixes = &settings.url_prefixes;
    let mut seen = 0u8;
    let mut changes = Vec::new();
    for attr in el.attributes() {
        let name = attr.name();
        let (bit, srcset) = match name.as_str() {
            "href" => (1, false),
            "src" => (2, false),
            "action" => (4, false),
            "formaction" => (8, false),
            "poster" => (16, false),
            url::SRCSET => (32, true),
            _ => continue,
        };
        if seen & bit != 0 {
            continue;
        }
        seen |= bit;
        let value = attr.value();
        if !decodes(&value) {
            continue;
        }
        let new = if srcset {
            url::rewrite_srcset(prefixes, &value)
        } else {
            url::rewrite_url(prefixes, &value)
        };
        if let Some(new) = new {
            changes.push((name, new));
        }
    }
    for (name, new) in changes {
        // Infallible: the name is one of the constant ones above.
        let _ = el.set_attribute(&name, &new);
    }
}

/// Whether an attribute value came out of the document's encoding whole:
/// one with U+FFFD (bytes the encoding cannot decode, or a real U+FFFD) is
/// not rewritten, as writing it back would not give the same bytes.
fn decodes(value: &str) -> bool {
    !value.contains('\u{FFFD}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charset_parameter_grammar() {
        assert_eq!(charset_param(" charset=utf-8").as_deref(), Some("utf-8"));
        assert_eq!(
            charset_param(" Charset = \"latin1\"").as_deref(),
            Some("latin1")
        );
        assert_eq!(
            charset_param(" a=\"x;charset=koi8-r\"; charset=windows-1252").as_deref(),
            Some("windows-1252")
        );
        assert_eq!(
            charset_param(" a=\"x\\\"y\"; charset=utf-8 ").as_deref(),
            Some("utf-8")
        );
        assert_eq!(charset_param(" charset=a; charset=b").as_deref(), Some("a"));
        assert_eq!(charset_param(""), None);
        assert_eq!(charset_param("charset="), None);
        assert_eq!(charset_param(";;"), None);
        assert_eq!(charset_param(" foo"), None);
    }

    #[test]
    fn stage_is_send_and_static() {
        fn check<T: Send + 'static>() {}
        check::<HtmlRewrite>();
    }
}
