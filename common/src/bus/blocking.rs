//! Snapshot work off the async runtime's threads: a whole version's write, read, map, hash, delta
//! or rebuild is a tenth of a second and more at full size. A panic in it is the caller's.

/// `work` on tokio's blocking threads; its panic resumes here.
pub(super) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}
