//! Shared bench helpers: inputs, checks, stages, baselines, runtimes, and the
//! scenario table every bench binary registers (criterion) or pairs
//! (`paired`). See `benches/README.md`.
//!
//! Each bench binary uses only part of this module.
#![allow(dead_code)]

pub mod baseline;
pub mod cases;
pub mod check;
pub mod drive;
pub mod harness;
pub mod input;
pub mod rt;
pub mod sinks;
pub mod source;
pub mod stages;
