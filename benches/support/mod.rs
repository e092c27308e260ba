//! What the model benchmarks start with: the `caprl` binary's process settings, so that the
//! figures are the binary's.

/// Applies the binary's settings (element-wise ops on one thread, freed pages kept) and returns
/// the thread count the rows are named by: `RAYON_NUM_THREADS`, 0 when unset (rayon's default).
pub fn set_up_as_the_binary() -> usize {
    caprl_common::process::set_up();
    eprintln!("{}", caprl_kernels::fastmath::describe());
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0)
}
