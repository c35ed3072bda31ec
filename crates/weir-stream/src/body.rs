//! Adapters at the HTTP boundary: an [`http_body::Body`] as a [`Source`],
//! and a [`Source`] as an [`http_body::Body`].
//!
//! These are the only places where the streaming core meets the HTTP layer;
//! nothing here depends on hyper.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::{Batch, BatchBuf, BatchLimits, BatchResult, Source, StreamError};

pin_project! {
    /// An [`http_body::Body`] as a [`Source`].
    ///
    /// Each poll gathers every data frame that is ready into one batch (up to
    /// the batch limits, [`BatchLimits::DEFAULT`] unless set with
    /// [`HttpBodySource::batch_limits`]), so a fast body becomes
    /// few, large batches (PUSH-083). Data is converted with
    /// [`Buf::copy_to_bytes`], which for `Bytes` (hyper's `Incoming`) is
    /// zero-copy. A trailers frame ends the data and is kept for
    /// [`Source::take_trailers`]. A body error becomes
    /// [`StreamError::Failed`], delivered after the data received before it.
    ///
    /// Dropping the source drops the body.
    #[derive(Debug)]
    pub struct HttpBodySource<B> {
        #[pin]
        body: B,
        state: ReadState,
        limits: BatchLimits,
        trailers: Option<HeaderMap>,
    }
}

#[derive(Debug)]
enum ReadState {
    Reading,
    Done,
    Failed(StreamError),
}

impl<B> HttpBodySource<B> {
    /// Wraps `body`. Polls nothing.
    pub fn new(body: B) -> Self {
        HttpBodySource {
            body,
            state: ReadState::Reading,
            limits: BatchLimits::DEFAULT,
            trailers: None,
        }
    }

    /// Sets the batch limits (each at least 1). Builds only.
    pub fn batch_limits(mut self, limits: BatchLimits) -> Self {
        self.limits = BatchLimits::new(limits.chunks, limits.bytes);
        self
    }
}

impl<B> Source for HttpBodySource<B>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn poll_next_batch(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        let mut this = self.project();
        match this.state {
            ReadState::Reading => {}
            ReadState::Done => return Poll::Ready(None),
            ReadState::Failed(e) => return Poll::Ready(Some(Err(e.clone()))),
        }
        let mut batch = Batch::new();
        let mut bytes = 0usize;
        loop {
            if !this.limits.has_room(batch.len(), bytes) {
                return Poll::Ready(Some(Ok(batch)));
            }
            match this.body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(mut data) => {
                        let len = data.remaining();
                        if len > 0 {
                            bytes += len;
                            batch.push(data.copy_to_bytes(len));
                        }
                        if this.body.is_end_stream() {
                            // A body of known length that is complete: stop
                            // here, so `is_end_stream` says so with this batch.
                            *this.state = ReadState::Done;
                            return Poll::Ready((!batch.is_empty()).then_some(Ok(batch)));
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            match this.trailers {
                                Some(t) => t.extend(trailers),
                                None => *this.trailers = Some(trailers),
                            }
                        }
                        // Other frame kinds carry nothing a byte stream keeps.
                    }
                },
                Poll::Ready(Some(Err(e))) => {
                    let err = StreamError::failed(e);
                    *this.state = ReadState::Failed(err.clone());
                    return Poll::Ready(Some(if batch.is_empty() {
                        Err(err)
                    } else {
                        Ok(batch)
                    }));
                }
                Poll::Ready(None) => {
                    *this.state = ReadState::Done;
                    return Poll::Ready((!batch.is_empty()).then_some(Ok(batch)));
                }
                Poll::Pending => {
                    return if batch.is_empty() {
                        Poll::Pending
                    } else {
                        Poll::Ready(Some(Ok(batch)))
                    };
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            ReadState::Reading => self.body.size_hint(),
            _ => SizeHint::with_exact(0),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self.state {
            ReadState::Reading => self.body.is_end_stream(),
            ReadState::Done => true,
            ReadState::Failed(_) => false,
        }
    }

    fn take_trailers(self: Pin<&mut Self>) -> Option<HeaderMap> {
        self.project().trailers.take()
    }
}

pin_project! {
    /// A [`Source`] as an [`http_body::Body`].
    ///
    /// Each non-empty batch becomes one data frame whose [`BatchBuf`] exposes
    /// all its chunks to a vectored write. Batches of zero bytes are skipped
    /// (CORE-008: a 0-size chunk would end an HTTP/1.1 chunked body). After the
    /// data, the source's trailers, if any, become a trailers frame.
    ///
    /// A source error is returned as the body's error, which makes hyper abort
    /// the transfer (HTTP/1.1: close without the final chunk; HTTP/2: reset
    /// the stream) instead of ending it cleanly.
    #[derive(Debug)]
    pub struct SourceBody<S> {
        #[pin]
        source: S,
        data_done: bool,
        trailers: Option<HeaderMap>,
        finished: bool,
    }
}

impl<S> SourceBody<S> {
    /// Wraps `source`. Polls nothing.
    pub fn new(source: S) -> Self {
        SourceBody {
            source,
            data_done: false,
            trailers: None,
            finished: false,
        }
    }

    /// The wrapped source.
    pub fn get_ref(&self) -> &S {
        &self.source
    }
}

impl<S: Source> Body for SourceBody<S> {
    type Data = BatchBuf;
    type Error = StreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        if *this.finished {
            return Poll::Ready(None);
        }
        if !*this.data_done {
            loop {
                match this.source.as_mut().poll_next_batch(cx) {
                    Poll::Ready(Some(Ok(batch))) => {
                        if this.source.is_end_stream() {
                            // The source is done: take its trailers now, so
                            // `is_end_stream` is exact right after this frame.
                            *this.data_done = true;
                            *this.trailers = this.source.as_mut().take_trailers();
                            *this.finished = this.trailers.is_none();
                        }
                        if batch.byte_len() == 0 {
                            if *this.data_done {
                                break;
                            }
                            continue;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(batch.into_buf()))));
                    }
                    Poll::Ready(Some(Err(e))) => {
                        *this.finished = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Ready(None) => {
                        *this.data_done = true;
                        break;
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
        }
        *this.finished = true;
        let trailers = match this.trailers.take() {
            Some(t) => Some(t),
            None => this.source.take_trailers(),
        };
        Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }

    fn size_hint(&self) -> SizeHint {
        if self.finished || self.data_done {
            SizeHint::with_exact(0)
        } else {
            self.source.size_hint()
        }
    }
}
