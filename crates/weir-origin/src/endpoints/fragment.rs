//! `GET /fragment/{name}?…`: an HTML fragment, for testing SSR page
//! composition (a template's include tags fetch these in parallel).
//!
//! - `name`: 1 to 64 of `A-Z a-z 0-9 _ -` (anything else, percent escapes
//!   included, is a 400; so the name never leaves `fragments/`).
//! - Body, in order:
//!   1. the markup: the bytes of `fragments/{name}.html` under the origin's
//!      root if that file exists (at most 1 MiB, else 500), otherwise
//!      `<div class="fragment" data-fragment="{name}">{name}</div>`;
//!   2. one `<fragment src="{src}"></fragment>` per `include` value, in
//!      query order, `src` attribute-escaped (`&` `"` `<` `>` as `&amp;`
//!      `&quot;` `&lt;` `&gt;`);
//!   3. `bytes` of filler: the 64-byte line
//!      `Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do\n`
//!      repeated and cut to length (no markup characters), served as
//!      zero-copy slices of one shared block.
//! - Fields: those of `fragments/{name}.headers` under the root, if that
//!   file exists (one `Name: value` per line, `#` comments), then `header`.
//! - Response: `status`, `Content-Type: text/html; charset=utf-8`,
//!   `Cache-Control: no-store`; with `Content-Length` only when
//!   `chunks=1` and neither `gzip` nor `fail_after` is given.
//!
//! Query parameters, all optional (numbers plain decimal; unknown keys, a
//! number given twice, a value out of range → 400):
//!
//! - `delay_ms` (`0 ..= 60000`, default 0): wait before the response head.
//! - `status` (`200 ..= 599`, default 200). `204`, `205` and `304` get no
//!   body and no `Content-Type` (the body parameters are still checked).
//! - `bytes` (`0 ..= 2^30`, default 0): filler length.
//! - `chunks` (`1 ..= 10000`, default 1) and `chunk_delay_ms`
//!   (`0 ..= 60000`, default 0): the body is cut into `chunks` parts of
//!   nearly equal length (part `k` from 0 is bytes
//!   `k * len / chunks .. (k + 1) * len / chunks`), the first sent at once,
//!   each later one `chunk_delay_ms` after the previous. A part is one data
//!   frame up to 64 KiB, else frames of at most 64 KiB. A body shorter than
//!   `chunks` bytes goes one byte per part.
//! - `lines` (`0` or `1`, default 0): with `1`, every part but the last
//!   ends at a line end instead: each boundary moves forward to just after
//!   the next `\n` (a part that would be empty is skipped, with its pause).
//!   Fragment files with one element per line (the demo's) are then cut
//!   between elements, never mid-word.
//! - `fail_after` (`0 ..= 2^31`): send the head and this many body bytes
//!   (as sent, so gzip-encoded ones with `gzip=1`; the whole body if it is
//!   shorter), wait 50 ms, then fail the transfer as `/abort/{n}` does
//!   (HTTP/1.1: connection closed without the last chunk; HTTP/2: stream
//!   reset).
//! - `gzip` (`0` or `1`): gzip-encode the body, with
//!   `Content-Encoding: gzip`. Every data frame ends with a sync flush, so
//!   each prefix of the body that ends on a frame decodes to the parts sent
//!   so far; the last frame carries the gzip trailer. No `Content-Length`.
//! - `template` (`0` or `1`): add `X-Weir-Template: 1`.
//! - `include` (repeatable, at most 100): a `src` for step 2,
//!   percent-decoded (`+` stays `+`), UTF-8.
//! - `header` (repeatable, at most 100): `{Name}:{value}`, percent-decoded,
//!   split at the first `:`, the value's surrounding spaces and tabs
//!   trimmed; added to the response. A name given here replaces the
//!   endpoint's own field of that name (`Content-Type`, `Cache-Control`,
//!   `Content-Encoding`, `X-Weir-Template`); repeated names give repeated
//!   fields (`Set-Cookie`). An invalid name or value → 400;
//!   `Content-Length` and `Transfer-Encoding` are the framing's and → 400.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{
    CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue,
};
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use percent_encoding::percent_decode_str;
use tokio::io::AsyncReadExt;

use super::abort::GRACE;
use crate::body::{Cut, CutAfter, FailAtEnd, FragmentParts, GzipFrames, Length};
use crate::error::{OriginError, quote};
use crate::params::{Range, query_pairs};
use crate::reply::{self, OriginBody};

/// Largest `delay_ms` and `chunk_delay_ms`: 60 000 ms (1 minute).
pub(crate) const MAX_WAIT_MS: u64 = 60_000;

/// Largest `bytes`: 1 GiB.
pub(crate) const MAX_FILLER: u64 = 1 << 30;

/// Largest `fail_after`: 2 GiB, past the end of any body this sends.
pub(crate) const MAX_FAIL_AFTER: u64 = 1 << 31;

/// Most `include` values, and most `header` values, per request.
pub(crate) const MAX_REPEATS: usize = 100;

/// Largest fragment file read, in bytes (1 MiB).
pub(crate) const MAX_FILE_LEN: u64 = 1 << 20;

/// Longest fragment name, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 64;

/// `X-Weir-Template`, the field that marks a response as a template.
pub(crate) const X_WEIR_TEMPLATE: HeaderName = HeaderName::from_static("x-weir-template");

/// The query keys `/fragment` accepts.
const KNOWN: &[&str] = &[
    "delay_ms",
    "status",
    "bytes",
    "chunks",
    "chunk_delay_ms",
    "fail_after",
    "gzip",
    "template",
    "lines",
    "include",
    "header",
];

const DELAY_MS: Range = Range {
    name: "delay_ms",
    min: 0,
    max: MAX_WAIT_MS,
};

const STATUS: Range = Range {
    name: "status",
    min: 200,
    max: 599,
};

const FILLER: Range = Range {
    name: "bytes",
    min: 0,
    max: MAX_FILLER,
};

const CHUNKS: Range = Range {
    name: "chunks",
    min: 1,
    max: 10_000,
};

const CHUNK_DELAY_MS: Range = Range {
    name: "chunk_delay_ms",
    min: 0,
    max: MAX_WAIT_MS,
};

const FAIL_AFTER: Range = Range {
    name: "fail_after",
    min: 0,
    max: MAX_FAIL_AFTER,
};

const GZIP: Range = Range {
    name: "gzip",
    min: 0,
    max: 1,
};

const TEMPLATE: Range = Range {
    name: "template",
    min: 0,
    max: 1,
};

const LINES: Range = Range {
    name: "lines",
    min: 0,
    max: 1,
};

/// The fragment endpoint for one origin root.
#[derive(Debug, Clone)]
pub(crate) struct Fragments {
    /// `{root}/fragments`.
    dir: PathBuf,
    /// Whether the test-only parameters (`bytes`, `fail_after`,
    /// `include`, `header`) are accepted.
    test_parameters: bool,
}

impl Fragments {
    /// Serves markup files from `root/fragments/`; without
    /// `test_parameters`, `bytes`, `fail_after`, `include` and `header`
    /// are a `400`.
    pub(crate) fn new(root: &Path, test_parameters: bool) -> Self {
        Self {
            dir: root.join("fragments"),
            test_parameters,
        }
    }

    /// Validates the request, reads the markup, waits `delay_ms`, then
    /// builds the response for `/fragment/{raw_name}?{query}`.
    ///
    /// # Errors
    ///
    /// A parameter error (→ 400), returned at once without waiting, for a
    /// bad name or query; [`OriginError::FragmentFile`] or
    /// [`OriginError::FragmentFileTooLarge`] (→ 500) if the markup file
    /// cannot be read.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future (the client went away) ends the file read or the
    /// wait; nothing else is held.
    pub(crate) async fn respond(
        &self,
        raw_name: &str,
        query: Option<&str>,
    ) -> Result<Response<OriginBody>, OriginError> {
        let name = check_name(raw_name)?;
        let mut params = Params::parse(query)?;
        if !self.test_parameters {
            params.check_no_test_parameters()?;
        }
        let markup = self.markup(name).await?;
        for (field, value) in self.file_headers(name).await? {
            params.headers.append(field, value);
        }
        tokio::time::sleep(params.delay).await;
        Ok(params.into_response(markup))
    }

    /// The fields of `fragments/{name}.headers`, if that file exists: one
    /// `Name: value` per line (blank lines and lines starting with `#`
    /// skipped), added to the response as `header` parameters are. This
    /// is how a site's fragment sets a field (the demo's `Set-Cookie`)
    /// when the test parameters are off.
    ///
    /// # Errors
    /// [`OriginError::FragmentFile`] (→ 500) for a file that cannot be
    /// read, is over 1 MiB, or holds a line that is not a valid field.
    async fn file_headers(
        &self,
        name: &str,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, OriginError> {
        let path = self.dir.join(format!("{name}.headers"));
        let text = match tokio::fs::read(&path).await {
            Ok(bytes) if bytes.len() as u64 <= MAX_FILE_LEN => bytes,
            Ok(_) => {
                return Err(OriginError::FragmentFile(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is over 1 MiB", path.display()),
                )));
            }
            Err(err) if is_absent(&err) => return Ok(Vec::new()),
            Err(err) => return Err(OriginError::FragmentFile(err)),
        };
        let bad = |why: String| {
            OriginError::FragmentFile(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {why}", path.display()),
            ))
        };
        let text = String::from_utf8(text).map_err(|_| bad("not UTF-8".to_owned()))?;
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|line| {
                let (field, value) = line
                    .split_once(':')
                    .ok_or_else(|| bad(format!("{line:?} is not `Name: value`")))?;
                let field = HeaderName::from_bytes(field.trim().as_bytes())
                    .map_err(|_| bad(format!("{:?} is not a field name", field.trim())))?;
                if field == CONTENT_LENGTH || field == http::header::TRANSFER_ENCODING {
                    return Err(bad(format!("{field} is the framing's")));
                }
                let value = HeaderValue::from_str(value.trim())
                    .map_err(|_| bad(format!("the value of {field} is not valid")))?;
                Ok((field, value))
            })
            .collect()
    }

    /// The bytes of `fragments/{name}.html`, or the generated `<div>` if
    /// there is no such file.
    async fn markup(&self, name: &str) -> Result<Bytes, OriginError> {
        let path = self.dir.join(format!("{name}.html"));
        let file = match tokio::fs::File::open(&path).await {
            Ok(file) => file,
            Err(err) if is_absent(&err) => return Ok(default_markup(name)),
            Err(err) => return Err(OriginError::FragmentFile(err)),
        };
        let metadata = file.metadata().await.map_err(OriginError::FragmentFile)?;
        if !metadata.is_file() {
            return Ok(default_markup(name));
        }
        if metadata.len() > MAX_FILE_LEN {
            return Err(OriginError::FragmentFileTooLarge {
                len: metadata.len(),
                max: MAX_FILE_LEN,
            });
        }
        // The length was checked; `take` keeps a file that grows meanwhile
        // from being read past the limit.
        let mut content = Vec::with_capacity(metadata.len() as usize);
        file.take(MAX_FILE_LEN)
            .read_to_end(&mut content)
            .await
            .map_err(OriginError::FragmentFile)?;
        Ok(Bytes::from(content))
    }
}

/// Whether opening a fragment file failed because there is none.
fn is_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// `raw` if it is a valid fragment name.
fn check_name(raw: &str) -> Result<&str, OriginError> {
    let valid = (1..=MAX_NAME_LEN).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(raw)
    } else {
        Err(OriginError::InvalidFragmentName { name: quote(raw) })
    }
}

/// The markup of a fragment without a file.
fn default_markup(name: &str) -> Bytes {
    Bytes::from(format!(
        "<div class=\"fragment\" data-fragment=\"{name}\">{name}</div>"
    ))
}

/// What the query asks for, validated.
#[derive(Debug)]
struct Params {
    delay: Duration,
    status: StatusCode,
    filler: u64,
    chunks: u64,
    chunk_delay: Duration,
    fail_after: Option<u64>,
    gzip: bool,
    template: bool,
    /// Parts end at line ends.
    lines: bool,
    includes: Vec<String>,
    headers: HeaderMap,
}

impl Params {
    /// Refuses the parameters that only tests need: filler, a failing
    /// transfer, includes and extra fields.
    fn check_no_test_parameters(&self) -> Result<(), OriginError> {
        let key = if self.filler > 0 {
            "bytes"
        } else if self.fail_after.is_some() {
            "fail_after"
        } else if !self.includes.is_empty() {
            "include"
        } else if !self.headers.is_empty() {
            // Any field on request (a Location, a Set-Cookie) would make
            // the site an open redirect or a cookie setter.
            "header"
        } else {
            return Ok(());
        };
        Err(OriginError::TestOnlyParameter { key })
    }

    /// Parses and checks every query parameter.
    fn parse(query: Option<&str>) -> Result<Self, OriginError> {
        // The single-valued keys, in `KNOWN` order.
        let mut single: [Option<&str>; 9] = [None; 9];
        let mut includes = Vec::new();
        let mut headers = HeaderMap::new();
        let mut header_count = 0;
        for (key, value) in query_pairs(query) {
            let slot = KNOWN
                .iter()
                .position(|k| *k == key)
                .ok_or_else(|| OriginError::unknown_parameter(key, KNOWN))?;
            match KNOWN[slot] {
                "include" => {
                    if includes.len() == MAX_REPEATS {
                        return Err(too_many("include"));
                    }
                    includes.push(decode_text("include", value)?);
                }
                "header" => {
                    if header_count == MAX_REPEATS {
                        return Err(too_many("header"));
                    }
                    let (name, value) = parse_header(value)?;
                    headers.append(name, value);
                    header_count += 1;
                }
                _ => {
                    // Every other key is one of the first nine in `KNOWN`,
                    // so the lookup always finds its cell.
                    let cell = single.get_mut(slot).ok_or_else(|| too_many(KNOWN[slot]))?;
                    if cell.replace(value).is_some() {
                        return Err(OriginError::DuplicateParameter { key: KNOWN[slot] });
                    }
                }
            }
        }
        let [
            delay_ms,
            status,
            filler,
            chunks,
            chunk_delay_ms,
            fail_after,
            gzip,
            template,
            lines,
        ] = single;
        let status = STATUS.parse_or(status, 200)?;
        // In 200..=599, so both conversions succeed.
        let status = u16::try_from(status)
            .ok()
            .and_then(|code| StatusCode::from_u16(code).ok())
            .unwrap_or(StatusCode::OK);
        Ok(Self {
            delay: Duration::from_millis(DELAY_MS.parse_or(delay_ms, 0)?),
            status,
            filler: FILLER.parse_or(filler, 0)?,
            chunks: CHUNKS.parse_or(chunks, 1)?,
            chunk_delay: Duration::from_millis(CHUNK_DELAY_MS.parse_or(chunk_delay_ms, 0)?),
            fail_after: fail_after.map(|raw| FAIL_AFTER.parse(raw)).transpose()?,
            gzip: GZIP.parse_or(gzip, 0)? == 1,
            template: TEMPLATE.parse_or(template, 0)? == 1,
            lines: LINES.parse_or(lines, 0)? == 1,
            includes,
            headers,
        })
    }

    /// The response: head fields, then the body composed as asked.
    fn into_response(self, markup: Bytes) -> Response<OriginBody> {
        let mut response = if matches!(self.status.as_u16(), 204 | 205 | 304) {
            reply::empty(self.status)
        } else {
            self.with_body(markup)
        };
        let headers = response.headers_mut();
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self.template {
            headers.insert(X_WEIR_TEMPLATE, HeaderValue::from_static("1"));
        }
        for name in self.headers.keys() {
            headers.remove(name);
        }
        for (name, value) in &self.headers {
            headers.append(name, value.clone());
        }
        response
    }

    /// A response with `self.status` and the composed body.
    fn with_body(&self, markup: Bytes) -> Response<OriginBody> {
        let announce = self.chunks == 1 && !self.gzip && self.fail_after.is_none();
        let length = if announce {
            Length::Announced
        } else {
            Length::Hidden
        };
        let prefix = with_includes(markup, &self.includes);
        let cut = if self.lines { Cut::Lines } else { Cut::Even };
        let parts =
            FragmentParts::new(prefix, self.filler, self.chunks, self.chunk_delay, length).cut(cut);
        let total = parts.size_hint().exact();
        let body = match (self.gzip, self.fail_after) {
            (false, None) => parts.boxed_unsync(),
            (true, None) => GzipFrames::new(parts).boxed_unsync(),
            (false, Some(limit)) => {
                FailAtEnd::new(CutAfter::new(parts, limit), GRACE).boxed_unsync()
            }
            (true, Some(limit)) => {
                FailAtEnd::new(CutAfter::new(GzipFrames::new(parts), limit), GRACE).boxed_unsync()
            }
        };
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, reply::TEXT_HTML);
        if let Some(total) = total {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(total));
        }
        if self.gzip {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    }
}

/// [`OriginError::TooManyValues`] for `key`.
fn too_many(key: &'static str) -> OriginError {
    OriginError::TooManyValues {
        key,
        max: MAX_REPEATS,
    }
}

/// `raw` percent-decoded as UTF-8 text.
fn decode_text(name: &'static str, raw: &str) -> Result<String, OriginError> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(|_| OriginError::NotUtf8 { name })
}

/// A `header=` value, `{Name}:{value}` percent-encoded, as a field.
fn parse_header(raw: &str) -> Result<(HeaderName, HeaderValue), OriginError> {
    let decoded: Vec<u8> = percent_decode_str(raw).collect();
    let invalid = || OriginError::InvalidHeader {
        field: quote(&String::from_utf8_lossy(&decoded)),
    };
    let colon = decoded
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(invalid)?;
    let (name, value) = (&decoded[..colon], &decoded[colon + 1..]);
    let name = HeaderName::from_bytes(name).map_err(|_| invalid())?;
    let value = HeaderValue::from_bytes(trim_blanks(value)).map_err(|_| invalid())?;
    match name.as_str() {
        "content-length" => Err(OriginError::ReservedHeader {
            name: "content-length",
        }),
        "transfer-encoding" => Err(OriginError::ReservedHeader {
            name: "transfer-encoding",
        }),
        _ => Ok((name, value)),
    }
}

/// `bytes` without leading and trailing spaces and tabs.
fn trim_blanks(bytes: &[u8]) -> &[u8] {
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !blank(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !blank(b))
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// `markup` followed by one include tag per `src`.
fn with_includes(markup: Bytes, includes: &[String]) -> Bytes {
    if includes.is_empty() {
        return markup;
    }
    let mut out = BytesMut::with_capacity(markup.len() + includes.len() * 64);
    out.put_slice(&markup);
    for src in includes {
        out.put_slice(b"<fragment src=\"");
        for c in src.chars() {
            match c {
                '&' => out.put_slice(b"&amp;"),
                '"' => out.put_slice(b"&quot;"),
                '<' => out.put_slice(b"&lt;"),
                '>' => out.put_slice(b"&gt;"),
                c => out.put_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out.put_slice(b"\"></fragment>");
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_restricted_to_a_safe_alphabet() {
        for good in ["a", "header", "footer-static", "A_9", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a.b", "..", "a%2Fb", "a b", "é", &"x".repeat(65)] {
            assert!(
                matches!(
                    check_name(bad),
                    Err(OriginError::InvalidFragmentName { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn include_sources_are_attribute_escaped() {
        let out = with_includes(
            Bytes::from_static(b"<p></p>"),
            &["/a?x=1&y=\"<b>\"".to_owned(), "/é".to_owned()],
        );
        assert_eq!(
            &out[..],
            "<p></p><fragment src=\"/a?x=1&amp;y=&quot;&lt;b&gt;&quot;\"></fragment>\
             <fragment src=\"/é\"></fragment>"
                .as_bytes()
        );
    }

    #[test]
    fn header_values_split_at_the_first_colon_and_are_trimmed() {
        let (name, value) = parse_header("Location:%20http://x/y%20").expect("valid");
        assert_eq!(name, "location");
        assert_eq!(value, "http://x/y");
        for bad in ["no-colon", ":v", "bad%20name:1", "x:%0D%0Ay", "X-A:%00"] {
            assert!(
                matches!(parse_header(bad), Err(OriginError::InvalidHeader { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_header("Content-Length:5"),
            Err(OriginError::ReservedHeader { .. })
        ));
    }

    #[test]
    fn defaults_and_repeats() {
        let p = Params::parse(None).expect("defaults");
        assert_eq!(p.status, StatusCode::OK);
        assert_eq!((p.filler, p.chunks, p.fail_after), (0, 1, None));
        assert!(!p.gzip && !p.template && p.includes.is_empty());
        let p = Params::parse(Some("include=/a&include=/b&header=X:1&header=X:2")).expect("ok");
        assert_eq!(p.includes, ["/a", "/b"]);
        assert_eq!(p.headers.get_all("x").iter().count(), 2);
        let many = "include=/a&".repeat(MAX_REPEATS + 1);
        assert!(matches!(
            Params::parse(Some(&many)),
            Err(OriginError::TooManyValues { key: "include", .. })
        ));
        assert!(matches!(
            Params::parse(Some("gzip=1&gzip=1")),
            Err(OriginError::DuplicateParameter { key: "gzip" })
        ));
    }
}
