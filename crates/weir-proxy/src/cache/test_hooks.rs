//! Test hooks: a process-wide stall of the cache writers, so a test can
//! make a writer fall behind its client for real (and be detached for
//! lagging) without a slow machine. Nothing in Weir calls these; a test
//! that does should run in a test binary of its own, since every cache in
//! the process is affected.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

/// Bytes a writer may hold before it stalls; `u64::MAX`: no stall.
static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);
/// The same limit, for writers waiting on a change.
static CHANGED: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::Sender::new(u64::MAX));

/// From now on, every cache writer that holds `bytes` or more of its fill
/// stops reading its branch of the shared body (while staying attached)
/// until [`resume_cache_writers`].
pub fn stall_cache_writers_after(bytes: u64) {
    LIMIT.store(bytes, Ordering::SeqCst);
    CHANGED.send_replace(bytes);
}

/// Lets stalled cache writers read on.
pub fn resume_cache_writers() {
    LIMIT.store(u64::MAX, Ordering::SeqCst);
    CHANGED.send_replace(u64::MAX);
}

/// Waits while a stall set by [`stall_cache_writers_after`] applies to a
/// writer holding `held` bytes. One atomic load when no stall is set.
pub(crate) async fn wait_while_stalled(held: u64) {
    if held < LIMIT.load(Ordering::Relaxed) {
        return;
    }
    let mut rx = CHANGED.subscribe();
    // The sender is a static: it is never dropped, so this only returns
    // once the limit moved above `held`.
    let _ = rx.wait_for(|limit| held < *limit).await;
}
