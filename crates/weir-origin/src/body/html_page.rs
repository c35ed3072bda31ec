//! A body of an HTML page cut into numbered sections.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::error::OriginError;

/// First data frame: the document's head and the opening `<body>`.
pub(crate) const PAGE_START: &str = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Weir streamed page</title></head>\n<body>\n";

/// Last data frame: the closing tags.
pub(crate) const PAGE_END: &str = "</body>\n</html>\n";

/// The filler text, repeated and cut to length. ASCII letters and spaces
/// only, so it is safe anywhere in HTML text content.
const FILLER_UNIT: &str = "lorem ipsum ";

/// `len` bytes of filler: [`FILLER_UNIT`] repeated, cut after `len` bytes.
pub(crate) fn filler(len: usize) -> String {
    let mut text = FILLER_UNIT.repeat(len.div_ceil(FILLER_UNIT.len()));
    text.truncate(len);
    text
}

/// Yields an HTML page as `chunks` data frames (`chunks` ≥ 2 expected; a
/// smaller value still yields [`PAGE_START`] and [`PAGE_END`]):
///
/// - frame 1 is [`PAGE_START`];
/// - frame `k` for `2 ..= chunks - 1` is
///   `<section id="s{k}"><p>chunk {k} of {chunks}</p>{filler}</section>\n`,
///   where `filler` is `pad` bytes of [`filler`];
/// - the last frame is [`PAGE_END`].
///
/// Never fails. Reports no exact length, so HTTP/1.1 uses chunked coding.
#[derive(Debug)]
pub(crate) struct HtmlPage {
    /// Number of the next frame, from 1; past `chunks` once ended.
    next: u64,
    chunks: u64,
    filler: String,
}

impl HtmlPage {
    /// A page of `chunks` frames whose sections carry `pad` filler bytes.
    pub(crate) fn new(chunks: u64, pad: usize) -> Self {
        Self {
            next: 1,
            chunks: chunks.max(2),
            filler: filler(pad),
        }
    }

    /// The bytes of frame `k` (1-based, at most `self.chunks`).
    fn frame_bytes(&self, k: u64) -> Bytes {
        if k == 1 {
            return Bytes::from_static(PAGE_START.as_bytes());
        }
        if k == self.chunks {
            return Bytes::from_static(PAGE_END.as_bytes());
        }
        let n = self.chunks;
        let mut section = format!("<section id=\"s{k}\"><p>chunk {k} of {n}</p>");
        section.reserve(self.filler.len() + "</section>\n".len());
        section.push_str(&self.filler);
        section.push_str("</section>\n");
        Bytes::from(section)
    }
}

impl Body for HtmlPage {
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        let this = self.get_mut();
        if this.next > this.chunks {
            return Poll::Ready(None);
        }
        let k = this.next;
        this.next += 1;
        Poll::Ready(Some(Ok(Frame::data(this.frame_bytes(k)))))
    }

    fn is_end_stream(&self) -> bool {
        self.next > self.chunks
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    async fn frames(mut body: HtmlPage) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.ok().and_then(|f| f.into_data().ok());
            let data = data.map(|d| String::from_utf8(d.to_vec()));
            out.push(data.and_then(Result::ok).unwrap_or_default());
        }
        out
    }

    #[tokio::test]
    async fn two_chunks_are_start_and_end_only() {
        assert_eq!(frames(HtmlPage::new(2, 100)).await, [PAGE_START, PAGE_END]);
    }

    #[tokio::test]
    async fn middle_frames_are_numbered_sections_with_filler() {
        assert_eq!(
            frames(HtmlPage::new(4, 15)).await,
            [
                PAGE_START,
                "<section id=\"s2\"><p>chunk 2 of 4</p>lorem ipsum lor</section>\n",
                "<section id=\"s3\"><p>chunk 3 of 4</p>lorem ipsum lor</section>\n",
                PAGE_END,
            ]
        );
    }

    #[test]
    fn filler_is_cut_to_exact_length() {
        assert_eq!(filler(0), "");
        assert_eq!(filler(5), "lorem");
        assert_eq!(filler(12), "lorem ipsum ");
        assert_eq!(filler(1 << 20).len(), 1 << 20);
    }

    #[test]
    fn ends_after_the_last_frame() {
        let mut body = HtmlPage::new(2, 0);
        assert!(!body.is_end_stream());
        body.next = 3;
        assert!(body.is_end_stream());
    }
}
