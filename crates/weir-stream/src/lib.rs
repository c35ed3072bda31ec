//! Weir's streaming core.
//!
//! A body is a sequence of *batches*; a [`Batch`] is several [`bytes::Bytes`]
//! chunks handed over together so that one poll moves everything that is
//! ready and one vectored write can put it on the socket.
//!
//! The model is pull-based: a [`Source`] produces batches only when its
//! consumer polls it, and a [`Pipeline`] runs its synchronous
//! [`Transform`]s inline, inside that same poll. Nothing is read ahead and
//! nothing is buffered behind the consumer's back, so the consumer's pace
//! (a client socket, say) is the backpressure that reaches the producer
//! (an upstream socket).
//!
//! # Map
//!
//! | need | use | catalogue |
//! |---|---|---|
//! | a pull chain of sync stages, fused into one poll loop | [`pull`], [`TransformExt::then`], [`Pipeline`] | PULL, FAST |
//! | a per-chunk stage, in place | [`map_chunks`], [`filter_map_chunks`], [`filter_chunks`], [`try_map_chunks`] ([`map`](mod@map)) | FAST-006 |
//! | a stage that drives its upstream itself, or awaits | [`stateful`] ([`StatefulTransform`], [`AsyncTransform`]) | PULL-020/030/033 |
//! | the same rules with no async at all, over chunks | [`pull_sync`] ([`sync_pull`]) | PULL-060 |
//! | how large a batch a source builds | [`BatchLimits`] (128 chunks, 32 KiB by default) | CORE-004 |
//! | gather small chunks, emit early when the upstream idles | [`coalesce()`](mod@coalesce) | — |
//! | a producer that writes, with a buffer and a policy | [`push()`](mod@push) ([`Writer`], [`Readable`]) | PUSH |
//! | one body to several consumers, pulled | [`share()`](mod@share) ([`Share`]): marks in chunks and bytes, `block` by default, no copy per reader, secondary consumers that detach on lag | SHARE |
//! | one writer to several consumers, pushed | [`broadcast()`](mod@broadcast) ([`Broadcast`]) | BCAST |
//! | drain into a sink with a sync fast path | [`pipe_to`], [`Sink`] | PIPE |
//! | collect with a byte limit | [`consume`] (`bytes`, `text`, `array`) | CONS |
//! | interleave sources as they become ready | [`merge()`](mod@merge) | MERGE |
//! | look at batches on the way (hash, log, meter) | [`tap()`](mod@tap) | TAP |
//! | adapt `Stream`, `AsyncRead`, iterators | [`adapt`] | CORE-003/005 |
//! | policies and high-water marks | [`policy`] ([`Backpressure`]) | PUSH-030..047 |
//! | abort with a reason | [`CancelToken`] | PUSH-060, PULL-043 |
//!
//! The [`body`] module adapts at the HTTP boundary, and only there:
//! [`body::HttpBodySource`] turns any [`http_body::Body`] into a source, and
//! [`body::SourceBody`] turns any source (a pipeline, typically) back into a
//! body whose data frames are whole batches ([`BatchBuf`]).
//!
//! Rules every type here keeps (IDs refer to the behaviour catalogue in
//! `shared/spec/streams-semantics.md`):
//! - building a pipeline polls nothing and calls nothing (PULL-001);
//! - one consumer poll pulls only what one output batch needs (PULL-002);
//! - pipelines never yield an empty batch (CORE-001);
//! - chunks are moved, never copied (CORE-002), and a batch's list of
//!   chunks is reused: stages work in it in place, share readers share it,
//!   and a dropped batch gives it back to the next one built on its thread;
//! - every transform gets exactly one flush on normal completion (PULL-031),
//!   and an abort with the reason instead on error or early stop (PULL-032);
//! - errors are sticky and keep their identity (CORE-006); after the end,
//!   polls keep returning `None` (CORE-007).

mod batch;
pub mod body;
mod error;
pub mod map;
mod pipeline;
pub mod policy;
mod source;
pub(crate) mod sync;
mod token;
mod transform;

// The full model; each module documents its part of the catalogue.
pub mod adapt;
pub mod broadcast;
pub mod coalesce;
pub mod consume;
pub mod merge;
pub mod pipe;
pub mod push;
pub mod share;
pub mod stateful;
pub mod sync_pull;
pub mod tap;

pub use adapt::{IntoBatch, map_batches};
/// The owning iterator of a [`Batch`].
pub use batch::IntoIter as BatchIntoIter;
pub use batch::{Batch, BatchBuf, BatchLimits};
pub use broadcast::{Broadcast, BroadcastOptions, broadcast};
pub use coalesce::{Coalesce, coalesce};
pub use error::{Reason, StreamError};
pub use map::{filter_chunks, filter_map_chunks, map_chunks, try_map_chunks};
pub use merge::{Merge, merge};
pub use pipe::{IoSink, PipeOptions, Sink, TryWrite, pipe_to, pipe_to_sync};
pub use pipeline::{Pipeline, pull};
pub use policy::Backpressure;
pub use push::{PushOptions, Readable, Writer, push};
pub use share::{ConsumerOptions, OnLag, Role, Share, ShareOptions, SyncShare, share, share_sync};
pub use source::{Empty, IterSource, NextBatch, Once, Source, SourceExt, empty, from_iter, once};
pub use stateful::{
    AsyncStage, AsyncTransform, StatefulStage, StatefulTransform, Upstream, async_fn,
};
pub use sync_pull::{PipelineSync, pull_sync, pull_sync_batches};
pub use tap::{Tap, TapAsync, tap, tap_async};
pub use token::{CancelToken, Cancelled};
pub use transform::{Chain, FnTransform, Transform, TransformExt, transform_fn};

/// What a source yields on each successful poll: a batch, an error, or `None` at the end.
pub type BatchResult = Result<Batch, StreamError>;
