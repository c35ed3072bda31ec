//! Response bodies, each an [`http_body::Body`] with one job.
//!
//! Sources produce frames ([`PatternChunks`], [`SseEvents`],
//! [`StaticChunks`], [`HtmlPage`], [`FragmentParts`]); wrappers change when
//! or how they end ([`Paced`], [`FailAtEnd`], [`CutAfter`]) or encode them
//! ([`GzipFrames`]). Endpoints compose them.

mod cut_after;
mod fail_at_end;
mod fragment_parts;
mod gzip_frames;
mod html_page;
mod paced;
mod pattern_chunks;
mod sse_events;
mod static_chunks;

pub(crate) use cut_after::CutAfter;
pub(crate) use fail_at_end::FailAtEnd;
pub(crate) use fragment_parts::{Cut, FragmentParts};
pub(crate) use gzip_frames::GzipFrames;
pub(crate) use html_page::HtmlPage;
pub(crate) use paced::Paced;
pub(crate) use pattern_chunks::{Length, PatternChunks};
pub(crate) use sse_events::SseEvents;
pub(crate) use static_chunks::StaticChunks;
