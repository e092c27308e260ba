//! Rayon pools of a chosen size, for the tests that compare one thread with several.

/// The result of `work` run on a fresh pool of `threads` threads.
pub fn on_threads<R: Send>(threads: usize, work: impl FnOnce() -> R + Send) -> R {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(work)
}
