//! The two tokio runtimes, built once, outside every timed region.
//!
//! - `current_thread` for pull cases and baseline (a): pure overhead,
//!   closest to single-threaded JS;
//! - `multi_thread` with exactly 2 workers for baseline (b) and, later,
//!   push and multi-consumer cases: the cross-core wake-ups a proxy pays.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Runtime};

/// The `current_thread` runtime.
pub fn current() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Builder::new_current_thread()
            .build()
            .expect("building a current_thread runtime")
    })
}

/// The `multi_thread` runtime with 2 workers.
pub fn multi() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("building a 2-worker multi_thread runtime")
    })
}

/// A `multi_thread` runtime with 2 workers and timers: for the slow sink
/// (1 ms per write) of `memory.rs`. Timed cases of `cases.rs` avoid timers:
/// a 1 ms tick would swamp what they measure.
pub fn timed() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .expect("building a 2-worker multi_thread runtime with timers")
    })
}
