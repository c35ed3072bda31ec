//! A route's chain of stages ([`ChainSpec`]), planned per response into
//! the stages that apply to it ([`ResponseChain`]).
//!
//! A route lists its stages by name, in the order the body goes through
//! them (`transforms = ["html-rewrite", "compress"]`). For each response,
//! [`ChainSpec::plan`] looks at the request and response heads, keeps the
//! stages that apply (HTML rewriting only for `text/html`, compression only
//! when the client accepts a coding, ...), edits the response head for each
//! kept stage, and returns them as one [`ResponseChain`], a single
//! [`Transform`] that runs the kept stages in order inside the pipeline's
//! poll. A route with no stages, or a response no stage applies to, gets an
//! empty chain, which hands every batch on as it came.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde::Deserialize;
use weir_http::length::content_length;
use weir_http::{content_coding, media_type};
use weir_stream::{Batch, CancelToken, Coalesce, StreamError, Transform};

use crate::compress::{self, CompressSettings, Compressor};
use crate::fields::{add_vary_accept_encoding, no_transform, weaken_etag};
use crate::html::{self, HtmlRewrite, HtmlRewriteSettings};
use crate::msgpack::{MsgpackJsonSettings, MsgpackToJsonLines};

/// The name of a stage, as written in a route's `transforms` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StageName {
    /// `compress`: gzip, brotli or zstd ([`crate::compress`]).
    Compress,
    /// `html-rewrite`: lol_html rewriting ([`crate::html`]).
    HtmlRewrite,
    /// `coalesce`: small chunks gathered into larger ones ([`weir_stream::Coalesce`]).
    Coalesce,
    /// `msgpack-json`: msgpack values to JSON lines ([`crate::msgpack`]).
    MsgpackJson,
}

impl StageName {
    /// Every stage, in the order the names are listed in error messages.
    pub const ALL: [StageName; 4] = [
        StageName::Compress,
        StageName::HtmlRewrite,
        StageName::Coalesce,
        StageName::MsgpackJson,
    ];

    /// The name as written in config and in log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            StageName::Compress => "compress",
            StageName::HtmlRewrite => "html-rewrite",
            StageName::Coalesce => "coalesce",
            StageName::MsgpackJson => "msgpack-json",
        }
    }
}

impl fmt::Display for StageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a stage.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "unknown transform {name:?}; expected one of compress, html-rewrite, coalesce, msgpack-json"
)]
pub struct UnknownStage {
    /// The name as written.
    pub name: String,
}

impl FromStr for StageName {
    type Err = UnknownStage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StageName::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| UnknownStage { name: s.to_owned() })
    }
}

/// `[route.coalesce]` settings: the bounds of [`weir_stream::coalesce()`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoalesceSettings {
    /// Chunks are gathered until they hold at least this many bytes
    /// (default 8192), or the upstream goes idle. At least 1.
    pub min_bytes: usize,
    /// A gathered chunk never grows past this many bytes (default 65536).
    /// At least `min_bytes`.
    pub max_bytes: usize,
}

impl Default for CoalesceSettings {
    fn default() -> Self {
        CoalesceSettings {
            min_bytes: weir_stream::coalesce::DEFAULT_MIN_BYTES,
            max_bytes: weir_stream::coalesce::DEFAULT_MAX_BYTES,
        }
    }
}

/// One configured stage with its settings.
#[derive(Debug, Clone)]
pub enum StageSpec {
    /// `compress` with its settings.
    Compress(Arc<CompressSettings>),
    /// `html-rewrite` with its settings.
    HtmlRewrite(Arc<HtmlRewriteSettings>),
    /// `coalesce` with its bounds.
    Coalesce(CoalesceSettings),
    /// `msgpack-json` with its settings.
    MsgpackJson(MsgpackJsonSettings),
}

impl StageSpec {
    /// The stage's name.
    pub fn name(&self) -> StageName {
        match self {
            StageSpec::Compress(_) => StageName::Compress,
            StageSpec::HtmlRewrite(_) => StageName::HtmlRewrite,
            StageSpec::Coalesce(_) => StageName::Coalesce,
            StageSpec::MsgpackJson(_) => StageName::MsgpackJson,
        }
    }
}

/// Why a list of stages cannot form a chain.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// A stage is listed twice.
    #[error("transform \"{0}\" is listed twice")]
    Duplicate(StageName),
    /// A stage that reads the body as text or msgpack comes after `compress`,
    /// so it would see compressed bytes.
    #[error("transform \"{0}\" must come before \"compress\": after it, the body is compressed")]
    AfterCompress(StageName),
    /// `coalesce` bounds out of range.
    #[error(
        "coalesce needs 1 <= min_bytes <= max_bytes (got min_bytes = {min}, max_bytes = {max})"
    )]
    CoalesceBounds {
        /// `min_bytes` as given.
        min: usize,
        /// `max_bytes` as given.
        max: usize,
    },
}

/// A route's stages, checked, ready to be planned for each response.
#[derive(Debug, Clone, Default)]
pub struct ChainSpec {
    stages: Vec<StageSpec>,
}

impl ChainSpec {
    /// Checks `stages` (listed in body order) and keeps them.
    ///
    /// # Errors
    /// [`ChainError::Duplicate`] for a stage listed twice,
    /// [`ChainError::AfterCompress`] for `html-rewrite` or `msgpack-json`
    /// after `compress`, and [`ChainError::CoalesceBounds`] for bad bounds.
    pub fn new(stages: Vec<StageSpec>) -> Result<Self, ChainError> {
        let mut seen: Vec<StageName> = Vec::with_capacity(stages.len());
        for stage in &stages {
            let name = stage.name();
            if seen.contains(&name) {
                return Err(ChainError::Duplicate(name));
            }
            if seen.contains(&StageName::Compress)
                && matches!(name, StageName::HtmlRewrite | StageName::MsgpackJson)
            {
                return Err(ChainError::AfterCompress(name));
            }
            if let StageSpec::Coalesce(c) = stage
                && (c.min_bytes == 0 || c.max_bytes < c.min_bytes)
            {
                return Err(ChainError::CoalesceBounds {
                    min: c.min_bytes,
                    max: c.max_bytes,
                });
            }
            seen.push(name);
        }
        Ok(ChainSpec { stages })
    }

    /// The stages, in body order.
    pub fn stages(&self) -> &[StageSpec] {
        &self.stages
    }

    /// Whether the route has no stages at all.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Whether a stage reads the body's content (`html-rewrite`,
    /// `msgpack-json`): the proxy then asks the upstream for an unencoded
    /// body (`Accept-Encoding: identity`), since those stages cannot read
    /// compressed bytes.
    pub fn reads_content(&self) -> bool {
        self.stages
            .iter()
            .any(|s| matches!(s.name(), StageName::HtmlRewrite | StageName::MsgpackJson))
    }

    /// Picks the stages that apply to one response, edits its head for
    /// them, and returns them as one transform.
    ///
    /// `method` and `request_headers` are the client's; `status` and
    /// `response_headers` the upstream's response, after the proxy's own
    /// header rules. Stages are planned in order, each seeing the head as
    /// the stages before it left it. A `HEAD` gets the head edits a `GET`
    /// would get, and no stage (RFC 9110 §9.3.2); a `304` gets the `Vary`
    /// and weakened `ETag` of the `200` it stands for; 1xx, 204 and 206 (a
    /// part of a representation cannot be rewritten or compressed on its
    /// own) get nothing. `Cache-Control: no-transform` keeps `html-rewrite`
    /// and `msgpack-json` away (RFC 9110 §7.7), as it does `compress`.
    ///
    /// - `coalesce` is skipped when the upstream sent
    ///   `X-Accel-Buffering: no` (the nginx convention for "do not hold").
    /// - `html-rewrite` applies to `text/html` without a `Content-Encoding`
    ///   ([`html::rewritable`]), unless its settings change nothing; it removes `Content-Length` and
    ///   `Accept-Ranges` and weakens a strong `ETag` (RFC 9110 §8.8.1).
    /// - `msgpack-json` applies to `application/msgpack`,
    ///   `application/x-msgpack` and `application/vnd.msgpack` without a
    ///   `Content-Encoding`; it sets `Content-Type: application/x-ndjson`
    ///   and edits the head like `html-rewrite`.
    /// - `compress` decides with [`compress::plan`].
    pub fn plan(
        &self,
        method: &Method,
        request_headers: &HeaderMap,
        status: StatusCode,
        response_headers: &mut HeaderMap,
    ) -> ResponseChain {
        let mut stages = Vec::new();
        if self.stages.is_empty() {
            return ResponseChain { stages };
        }
        // A HEAD gets the head a GET would get (RFC 9110 §9.3.2: the same
        // fields), so the stages are planned as for a GET and then dropped.
        let head_only = *method == Method::HEAD;
        let method = if head_only { &Method::GET } else { method };
        if !has_body(method, status) {
            if status == StatusCode::NOT_MODIFIED {
                self.not_modified(response_headers);
            }
            return ResponseChain { stages };
        }
        // A part of a representation (a 200 may carry Content-Range too)
        // cannot be rewritten or compressed on its own.
        if response_headers.contains_key(header::CONTENT_RANGE) {
            return ResponseChain { stages };
        }
        let no_transform = no_transform(response_headers);
        for spec in &self.stages {
            let stage = match spec {
                StageSpec::Coalesce(c) => (!no_buffering(response_headers))
                    .then(|| Stage::Coalesce(weir_stream::coalesce(c.min_bytes, c.max_bytes))),
                // Settings that change nothing cost a parse for nothing: skip.
                StageSpec::HtmlRewrite(settings) if settings.is_noop() => None,
                // RFC 9110 §7.7: an intermediary must not change the content.
                StageSpec::HtmlRewrite(_) | StageSpec::MsgpackJson(_) if no_transform => None,
                StageSpec::HtmlRewrite(settings) => html::rewritable(response_headers).map(|enc| {
                    content_changes(response_headers);
                    Stage::Html(HtmlRewrite::new(Arc::clone(settings), enc))
                }),
                StageSpec::MsgpackJson(settings) => is_msgpack(response_headers).then(|| {
                    content_changes(response_headers);
                    response_headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/x-ndjson"),
                    );
                    Stage::Msgpack(MsgpackToJsonLines::new(settings.clone()))
                }),
                StageSpec::Compress(settings) => {
                    // The length, while it is still known (plan() removes
                    // it): brotli sizes its window and tables from it.
                    let length = content_length(response_headers);
                    compress::plan(settings, method, request_headers, status, response_headers).map(
                        |coding| {
                            let stage = Compressor::new(coding, settings);
                            Stage::Compress(match length {
                                Some(len) => stage.with_size_hint(len),
                                None => stage,
                            })
                        },
                    )
                }
            };
            stages.extend(stage);
        }
        if head_only {
            stages.clear();
        }
        ResponseChain { stages }
    }

    /// The head edits for a `304`: it stands for the `200` the client
    /// cached, which went through this chain, so it carries the same `Vary`
    /// and the same (weakened) validator (RFC 9110 §15.4.5).
    fn not_modified(&self, response_headers: &mut HeaderMap) {
        let changes_content = self.stages.iter().any(|s| {
            matches!(
                s.name(),
                StageName::Compress | StageName::HtmlRewrite | StageName::MsgpackJson
            )
        });
        if self.stages.iter().any(|s| s.name() == StageName::Compress) {
            add_vary_accept_encoding(response_headers);
        }
        if changes_content && !no_transform(response_headers) {
            weaken_etag(response_headers);
        }
    }
}

/// Whether a response to `method` with `status` has a body to transform.
fn has_body(method: &Method, status: StatusCode) -> bool {
    *method != Method::HEAD
        && !status.is_informational()
        && status != StatusCode::NO_CONTENT
        && status != StatusCode::NOT_MODIFIED
        && status != StatusCode::PARTIAL_CONTENT
}

/// `X-Accel-Buffering: no` (nginx's convention).
fn no_buffering(headers: &HeaderMap) -> bool {
    headers
        .get_all("x-accel-buffering")
        .iter()
        .any(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"no"))
}

/// The body is unencoded msgpack: every `Content-Encoding` coding is
/// `identity` (or there is none) and the media type is one of msgpack's.
fn is_msgpack(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    content_coding::is_identity(headers)
        && [
            "application/msgpack",
            "application/x-msgpack",
            "application/vnd.msgpack",
        ]
        .iter()
        .any(|t| media_type::is(ct, t))
}

/// The head edits of a stage that changes the content: the length is no
/// longer known, byte ranges of the new content cannot be served, and a
/// strong validator no longer matches byte for byte (RFC 9110 §8.8.1).
fn content_changes(headers: &mut HeaderMap) {
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::ACCEPT_RANGES);
    weaken_etag(headers);
}

/// A stage failed: the error names it, so the access log can.
#[derive(Debug, thiserror::Error)]
#[error("transform {stage}: {source}")]
pub struct StageError {
    /// The stage that failed.
    pub stage: StageName,
    /// Its error.
    pub source: StreamError,
}

/// One stage running over a response body.
#[derive(Debug)]
enum Stage {
    Compress(Compressor),
    Html(HtmlRewrite),
    Coalesce(Coalesce),
    Msgpack(MsgpackToJsonLines),
}

impl Stage {
    fn name(&self) -> StageName {
        match self {
            Stage::Compress(_) => StageName::Compress,
            Stage::Html(_) => StageName::HtmlRewrite,
            Stage::Coalesce(_) => StageName::Coalesce,
            Stage::Msgpack(_) => StageName::MsgpackJson,
        }
    }

    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        let out = match self {
            Stage::Compress(t) => t.transform(input),
            Stage::Html(t) => t.transform(input),
            Stage::Coalesce(t) => t.transform(input),
            Stage::Msgpack(t) => t.transform(input),
        };
        out.map_err(|e| self.wrap(e))
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        let out = match self {
            Stage::Compress(t) => t.idle(),
            Stage::Html(t) => t.idle(),
            Stage::Coalesce(t) => t.idle(),
            Stage::Msgpack(t) => t.idle(),
        };
        out.map_err(|e| self.wrap(e))
    }

    fn wrap(&self, source: StreamError) -> StreamError {
        StreamError::failed(StageError {
            stage: self.name(),
            source,
        })
    }

    fn transform_dyn(&mut self) -> &mut dyn Transform {
        match self {
            Stage::Compress(t) => t,
            Stage::Html(t) => t,
            Stage::Coalesce(t) => t,
            Stage::Msgpack(t) => t,
        }
    }
}

/// The stages that apply to one response, run in order as one
/// [`Transform`]: each batch goes through every stage inside the
/// pipeline's poll, with no queue between them.
///
/// Idle and end cascade: on idle, each stage's held output goes through
/// the stages after it, which are then asked for theirs; on the flush,
/// likewise with each stage's final output. A stage's error ends the
/// stream as a [`StageError`] naming the stage.
#[derive(Debug, Default)]
pub struct ResponseChain {
    stages: Vec<Stage>,
}

impl ResponseChain {
    /// Whether no stage applies: batches pass as they came.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The names of the stages that apply, in order.
    pub fn names(&self) -> Vec<StageName> {
        self.stages.iter().map(Stage::name).collect()
    }

    /// Runs `input` through every stage.
    fn run(&mut self, input: Batch) -> Result<Option<Batch>, StreamError> {
        let mut carry = input;
        for stage in &mut self.stages {
            match stage.transform(Some(carry))? {
                Some(b) if !b.is_empty() => carry = b,
                _ => return Ok(None),
            }
        }
        Ok(Some(carry))
    }

    /// The idle or end cascade: each stage in turn gets the output of the
    /// ones before it, then is asked for its held output (`end` false) or
    /// flushed (`end` true).
    fn cascade(&mut self, end: bool) -> Result<Option<Batch>, StreamError> {
        let mut carry: Option<Batch> = None;
        for stage in &mut self.stages {
            let mut out = match carry.take() {
                Some(b) => stage.transform(Some(b))?.unwrap_or_default(),
                None => Batch::new(),
            };
            let held = if end {
                stage.transform(None)?
            } else {
                stage.idle()?
            };
            if let Some(held) = held {
                out.append(held);
            }
            carry = (!out.is_empty()).then_some(out);
        }
        Ok(carry)
    }
}

impl Transform for ResponseChain {
    fn transform(&mut self, input: Option<Batch>) -> Result<Option<Batch>, StreamError> {
        match input {
            Some(batch) if self.stages.is_empty() => Ok(Some(batch)),
            Some(batch) => self.run(batch),
            None => self.cascade(true),
        }
    }

    fn start(&mut self, token: &CancelToken) {
        for stage in &mut self.stages {
            stage.transform_dyn().start(token);
        }
    }

    fn idle(&mut self) -> Result<Option<Batch>, StreamError> {
        if self.stages.is_empty() {
            return Ok(None);
        }
        self.cascade(false)
    }

    fn abort(&mut self, reason: &StreamError) {
        for stage in &mut self.stages {
            stage.transform_dyn().abort(reason);
        }
    }

    fn size_hint(&self, upstream: http_body::SizeHint) -> http_body::SizeHint {
        self.stages
            .iter()
            .fold(upstream, |hint, stage| match stage {
                Stage::Compress(t) => t.size_hint(hint),
                Stage::Html(t) => t.size_hint(hint),
                Stage::Coalesce(t) => t.size_hint(hint),
                Stage::Msgpack(t) => t.size_hint(hint),
            })
    }
}
