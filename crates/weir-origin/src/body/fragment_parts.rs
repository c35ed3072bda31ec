//! A body of markup followed by filler, sent in timed parts.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::Length;
use crate::error::OriginError;
use crate::filler;

/// Largest data frame, in bytes (64 KiB).
pub(crate) const MAX_FRAME: usize = filler::MAX_SLICE;

/// Where [`FragmentParts`] ends its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// At `k * len / parts`: parts of nearly equal size, cut anywhere.
    Even,
    /// At the first line end (just after a `\n`) at or after
    /// `k * len / parts`, or the body's end: never mid-line.
    Lines,
}

pin_project! {
    /// Yields `prefix` followed by `filler_len` bytes of [filler](crate::filler),
    /// cut into `parts` parts of nearly equal size: part `k` (from 0) is the
    /// bytes `k * len / parts .. (k + 1) * len / parts` of the whole, rounded
    /// down. A part is one data frame when it holds at most 64 KiB, else
    /// consecutive frames of at most 64 KiB each.
    ///
    /// With [`Cut::Lines`], each boundary moves forward to the next line
    /// end instead, and parts left empty by that are skipped.
    ///
    /// The first part is yielded at once; each later part waits `interval`
    /// after the previous one ended. A body shorter than `parts` bytes has
    /// one part per byte; an empty body has none and is at its end at once.
    ///
    /// Frames that lie inside the prefix or the filler are zero-copy slices;
    /// only a frame that straddles the two is copied. Never fails.
    #[derive(Debug)]
    pub(crate) struct FragmentParts {
        prefix: Bytes,
        len: u64,
        parts: u64,
        // Bytes yielded so far.
        pos: u64,
        // The part holding the byte at `pos`.
        part: u64,
        interval: Duration,
        length: Length,
        cut: Cut,
        #[pin]
        pause: Option<Sleep>,
        waiting: bool,
    }
}

impl FragmentParts {
    /// A body of `prefix` then `filler_len` filler bytes in `parts` parts
    /// (`parts` ≥ 1 expected; 0 is taken as 1), `interval` apart.
    pub(crate) fn new(
        prefix: Bytes,
        filler_len: u64,
        parts: u64,
        interval: Duration,
        length: Length,
    ) -> Self {
        let len = prefix.len() as u64 + filler_len;
        Self {
            prefix,
            len,
            parts: parts.max(1).min(len),
            pos: 0,
            part: 0,
            interval,
            length,
            cut: Cut::Even,
            pause: None,
            waiting: false,
        }
    }

    /// The same body, its parts ended as `cut` says.
    pub(crate) fn cut(mut self, cut: Cut) -> Self {
        self.cut = cut;
        self
    }

    /// Offset where part `k` starts (`k = parts` gives the end).
    fn boundary(&self, k: u64) -> u64 {
        // At most 10^4 parts of a few GiB: the product fits u128 easily,
        // and the quotient is at most `len`, which fits u64.
        let at = u128::from(k) * u128::from(self.len) / u128::from(self.parts.max(1));
        let at = u64::try_from(at).unwrap_or(self.len);
        match self.cut {
            Cut::Even => at,
            Cut::Lines => self.line_end(at),
        }
    }

    /// The first offset at or after `at` that starts the body, follows a
    /// `\n`, or ends the body.
    fn line_end(&self, at: u64) -> u64 {
        let split = self.prefix.len() as u64;
        if at == 0 || at >= self.len {
            return at.min(self.len);
        }
        if at <= split {
            // Offsets up to `split` index the prefix (fits usize).
            let from = at as usize - 1;
            if let Some(i) = self.prefix[from..].iter().position(|&b| b == b'\n') {
                return (from + i + 1) as u64;
            }
        }
        // In the filler, a line ends every UNIT bytes (its last byte is `\n`).
        let unit = filler::UNIT.len() as u64;
        let into = at.max(split) - split;
        let past = if into > 0 && into.is_multiple_of(unit) {
            into
        } else {
            (into / unit + 1) * unit
        };
        (split + past).min(self.len)
    }

    /// The body's bytes `start .. end` (at most [`MAX_FRAME`] of them).
    fn bytes(&self, start: u64, end: u64) -> Bytes {
        let split = self.prefix.len() as u64;
        // Every offset here is at most `len`; those below `split` fit usize.
        let len = (end - start) as usize;
        if end <= split {
            return self.prefix.slice(start as usize..end as usize);
        }
        if start >= split {
            return filler::slice(start - split, len);
        }
        let mut frame = BytesMut::with_capacity(len);
        frame.extend_from_slice(&self.prefix[start as usize..]);
        frame.extend_from_slice(&filler::slice(0, (end - split) as usize));
        frame.freeze()
    }
}

impl Body for FragmentParts {
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        if self.waiting {
            let mut this = self.as_mut().project();
            if let Some(pause) = this.pause.as_mut().as_pin_mut() {
                ready!(pause.poll(cx));
            }
            *this.waiting = false;
        }
        if self.pos >= self.len {
            return Poll::Ready(None);
        }
        let start = self.pos;
        let mut part_end = self.boundary(self.part + 1);
        // A part left empty by moving boundaries to line ends.
        while part_end <= start && self.part + 1 < self.parts {
            let next = self.part + 1;
            *self.as_mut().project().part = next;
            part_end = self.boundary(next + 1);
        }
        let end = part_end.min(start + MAX_FRAME as u64);
        let data = self.bytes(start, end);
        let mut this = self.project();
        *this.pos = end;
        if end == part_end {
            *this.part += 1;
            if end < *this.len && !this.interval.is_zero() {
                let deadline = tokio::time::Instant::now() + *this.interval;
                match this.pause.as_mut().as_pin_mut() {
                    Some(pause) => pause.reset(deadline),
                    None => this.pause.set(Some(tokio::time::sleep_until(deadline))),
                }
                *this.waiting = true;
            }
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.pos >= self.len
    }

    fn size_hint(&self) -> SizeHint {
        match self.length {
            Length::Announced => SizeHint::with_exact(self.len - self.pos),
            Length::Hidden => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use tokio::time::Instant;

    use super::*;

    /// `(ms since start, frame)` for every frame of `body`.
    async fn frames(body: FragmentParts) -> Vec<(u128, Bytes)> {
        let start = Instant::now();
        let mut body = std::pin::pin!(body);
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame
                .ok()
                .and_then(|f| f.into_data().ok())
                .unwrap_or_default();
            out.push((start.elapsed().as_millis(), data));
        }
        out
    }

    fn filler_text(len: usize) -> Vec<u8> {
        filler::UNIT.iter().copied().cycle().take(len).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn parts_are_near_equal_and_spaced_in_time() {
        let body = FragmentParts::new(
            Bytes::from_static(b"0123456789"),
            0,
            3,
            Duration::from_millis(100),
            Length::Hidden,
        );
        let got = frames(body).await;
        let texts: Vec<&[u8]> = got.iter().map(|(_, d)| &d[..]).collect();
        assert_eq!(texts, [&b"012"[..], b"345", b"6789"]);
        let at: Vec<u128> = got.iter().map(|(t, _)| *t).collect();
        assert_eq!(at, [0, 100, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn line_cuts_end_every_part_after_a_newline() {
        let markup = "<ul>\n<li>one</li>\n<li>two</li>\n<li>three</li>\n</ul>\n";
        let body = FragmentParts::new(
            Bytes::from_static(markup.as_bytes()),
            0,
            4,
            Duration::from_millis(100),
            Length::Hidden,
        )
        .cut(Cut::Lines);
        let got = frames(body).await;
        let texts: Vec<&[u8]> = got.iter().map(|(_, d)| &d[..]).collect();
        assert_eq!(
            texts,
            [
                &b"<ul>\n<li>one</li>\n"[..],
                b"<li>two</li>\n",
                b"<li>three</li>\n",
                b"</ul>\n"
            ]
        );
        // Into the filler: its lines end every 64 bytes.
        let body = FragmentParts::new(
            Bytes::from_static(b"<p>x</p>"),
            256,
            3,
            Duration::ZERO,
            Length::Hidden,
        )
        .cut(Cut::Lines);
        let got = frames(body).await;
        let sizes: Vec<usize> = got.iter().map(|(_, d)| d.len()).collect();
        assert_eq!(sizes, [8 + 128, 64, 64]);
        assert!(got[..2].iter().all(|(_, d)| d.ends_with(b"\n")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_straddling_prefix_and_filler_is_joined() {
        let body = FragmentParts::new(
            Bytes::from_static(b"<p>x</p>"),
            100,
            1,
            Duration::ZERO,
            Length::Announced,
        );
        assert_eq!(body.size_hint().exact(), Some(108));
        let got = frames(body).await;
        assert_eq!(got.len(), 1);
        let mut expected = b"<p>x</p>".to_vec();
        expected.extend(filler_text(100));
        assert_eq!(&got[0].1[..], &expected[..]);
    }

    #[tokio::test(start_paused = true)]
    async fn large_parts_are_split_into_64_kib_frames_without_pauses() {
        let filler_len = 3 * MAX_FRAME as u64;
        let body = FragmentParts::new(
            Bytes::from_static(b"ab"),
            filler_len,
            2,
            Duration::from_millis(50),
            Length::Hidden,
        );
        let got = frames(body).await;
        let sizes: Vec<usize> = got.iter().map(|(_, d)| d.len()).collect();
        let half = (3 * MAX_FRAME + 2) / 2;
        assert_eq!(
            sizes,
            [MAX_FRAME, half - MAX_FRAME, MAX_FRAME, half - MAX_FRAME]
        );
        let at: Vec<u128> = got.iter().map(|(t, _)| *t).collect();
        assert_eq!(at, [0, 0, 50, 50]);
        let all: Vec<u8> = got.iter().flat_map(|(_, d)| d.iter().copied()).collect();
        assert_eq!(&all[..2], b"ab");
        assert_eq!(&all[2..], &filler_text(3 * MAX_FRAME)[..]);
    }

    #[tokio::test(start_paused = true)]
    async fn short_bodies_get_one_part_per_byte_and_empty_ones_none() {
        let body = FragmentParts::new(
            Bytes::from_static(b"ab"),
            0,
            5,
            Duration::ZERO,
            Length::Hidden,
        );
        assert_eq!(frames(body).await.len(), 2);
        let empty = FragmentParts::new(Bytes::new(), 0, 5, Duration::ZERO, Length::Announced);
        assert!(empty.is_end_stream());
        assert!(frames(empty).await.is_empty());
    }
}
