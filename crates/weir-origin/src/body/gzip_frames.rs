//! A wrapper that gzip-encodes another body frame by frame.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::error::OriginError;

pin_project! {
    /// Encodes the data frames of `inner` as one gzip member (RFC 1952),
    /// one output frame per input frame.
    ///
    /// Each output frame ends with a sync flush (an empty stored deflate
    /// block), so every prefix of the output that ends on a frame boundary
    /// decodes to exactly the input frames so far: a client can decode as
    /// the body streams. The frame after which `inner` reports its end also
    /// carries the gzip trailer (CRC-32 and length); if `inner` ends without
    /// saying so up front (or yields nothing), the trailer follows as a
    /// frame of its own. Other frames (trailers) pass through unchanged.
    ///
    /// The encoded length is not known in advance, so the size hint has no
    /// upper bound (no `Content-Length`).
    #[derive(Debug)]
    pub(crate) struct GzipFrames<B> {
        #[pin]
        inner: B,
        // `None` once the trailer is written.
        encoder: Option<GzEncoder<Vec<u8>>>,
    }
}

impl<B> GzipFrames<B> {
    /// Wraps `inner`, encoding at zlib's default level (6).
    pub(crate) fn new(inner: B) -> Self {
        Self {
            inner,
            encoder: Some(GzEncoder::new(Vec::new(), Compression::default())),
        }
    }
}

/// Feeds `data` to `encoder` and takes everything it has produced, ending
/// with a sync flush, or with the gzip trailer if `last`.
fn encode(encoder: &mut GzEncoder<Vec<u8>>, data: &[u8], last: bool) -> Result<Bytes, OriginError> {
    encoder.write_all(data).map_err(OriginError::Gzip)?;
    if last {
        encoder.try_finish().map_err(OriginError::Gzip)?;
    } else {
        encoder.flush().map_err(OriginError::Gzip)?;
    }
    Ok(Bytes::from(std::mem::take(encoder.get_mut())))
}

impl<B> Body for GzipFrames<B>
where
    B: Body<Data = Bytes, Error = OriginError>,
{
    type Data = Bytes;
    type Error = OriginError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginError>>> {
        let mut this = self.project();
        let Some(encoder) = this.encoder.as_mut() else {
            return Poll::Ready(None);
        };
        match ready!(this.inner.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let last = this.inner.is_end_stream();
                    let encoded = encode(encoder, &data, last);
                    if last || encoded.is_err() {
                        *this.encoder = None;
                    }
                    Poll::Ready(Some(encoded.map(Frame::data)))
                }
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            Some(Err(err)) => {
                *this.encoder = None;
                Poll::Ready(Some(Err(err)))
            }
            None => {
                let encoded = encode(encoder, &[], true);
                *this.encoder = None;
                Poll::Ready(Some(encoded.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::write::GzDecoder;
    use http_body_util::BodyExt;

    use super::*;
    use crate::body::StaticChunks;

    async fn encoded_frames<B>(body: GzipFrames<B>) -> Vec<Bytes>
    where
        B: Body<Data = Bytes, Error = OriginError>,
    {
        let mut body = std::pin::pin!(body);
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            out.push(
                frame
                    .ok()
                    .and_then(|f| f.into_data().ok())
                    .unwrap_or_default(),
            );
        }
        out
    }

    #[tokio::test]
    async fn every_frame_decodes_as_it_arrives() {
        const CHUNKS: &[&[u8]] = &[b"<div>one</div>", b"<div>two</div>", b"<div>three</div>"];
        let frames = encoded_frames(GzipFrames::new(StaticChunks::new(CHUNKS))).await;
        assert_eq!(frames.len(), 3);
        let mut decoder = GzDecoder::new(Vec::new());
        let mut expected = Vec::new();
        for (frame, plain) in frames.iter().zip(CHUNKS) {
            decoder.write_all(frame).expect("decodes");
            decoder.flush().expect("flushes");
            expected.extend_from_slice(plain);
            assert_eq!(decoder.get_ref(), &expected);
        }
        assert_eq!(decoder.finish().expect("complete member"), expected);
    }

    #[tokio::test]
    async fn an_empty_body_is_an_empty_gzip_member() {
        let frames = encoded_frames(GzipFrames::new(StaticChunks::new(&[]))).await;
        assert_eq!(frames.len(), 1);
        let mut decoder = GzDecoder::new(Vec::new());
        decoder.write_all(&frames[0]).expect("decodes");
        assert!(decoder.finish().expect("complete member").is_empty());
    }
}
