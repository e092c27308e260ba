//! The process-wide settings the `caprl` binary starts with, and the benchmarks too so that
//! their figures are the binary's. Both run on mimalloc (each declares it as its
//! `#[global_allocator]`); the allocator setting here applies to it.

/// Applies every setting: element-wise ops on one thread
/// ([`crate::model::keep_elementwise_ops_on_one_thread`]) and freed pages kept
/// ([`keep_freed_pages`]).
pub fn set_up() {
    crate::model::keep_elementwise_ops_on_one_thread();
    keep_freed_pages();
}

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (the same index in its v2 and v3
/// headers; the bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the pages mimalloc frees instead of handing them back to the OS after 10 ms.
///
/// A training step frees and allocates the same large buffers every step (gradient sums,
/// backward temporaries of `[rows, vocabulary]`); pages handed back come back from the kernel
/// zero-filled at the next fault, which was 15–26% of the SCST iteration and of the att model's
/// XE step at COCO's shapes. The price: the process keeps its peak resident size.
fn keep_freed_pages() {
    // SAFETY: sets one integer option; mimalloc reads options atomically and allows this at any
    // time, from any thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}
