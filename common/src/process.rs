//! The process-wide settings the `caprl` binary starts with, and the benchmarks too so that
//! their figures are the binary's. Both run on mimalloc (each declares it as its
//! `#[global_allocator]`); the allocator setting here applies to it.

/// Applies every setting: element-wise ops on one thread
/// ([`caprl_model::model::keep_elementwise_ops_on_one_thread`]) and freed pages kept
/// (`keep_freed_pages`).
pub fn set_up() {
    caprl_model::model::keep_elementwise_ops_on_one_thread();
    keep_freed_pages();
    no_transparent_huge_pages();
}

/// Turns transparent huge pages off for this process.
///
/// mimalloc asks for them on its arenas (`madvise(MADV_HUGEPAGE)`), so on a kernel whose THP
/// mode is `madvise` (many distributions' default) each first touch of a 2 MiB region zeroes
/// all of it: a decoding benchmark spent 10–15% of its time in the kernel clearing pages it
/// used a fraction of. With 4 KiB pages the same runs spend under 1% there. The allocator's
/// own switch is read before `main` runs, so this is the process-wide one.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with an integer option and integer arguments; it changes only this
    // process's memory policy, and failure (an old kernel) leaves the default in place.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
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

/// Runs `f`, a set-up whose memory is mostly freed by the time it returns (a data-set check,
/// reference tables built from every caption), handing the pages freed meanwhile back to the
/// OS; pages freed afterwards are kept again (`keep_freed_pages`). At COCO's Karpathy size
/// opening the data set alone peaks at 640 MB, which a supervisor or a reward worker would
/// otherwise hold for the whole run.
pub fn handing_back_freed_pages<R>(f: impl FnOnce() -> R) -> R {
    // Memory freed while pages are kept is never handed back later: purge from the start.
    // SAFETY: sets one integer option, as `keep_freed_pages` does.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    let r = f();
    // SAFETY: asks the allocator to purge what is free now; allowed at any time.
    unsafe { libmimalloc_sys::mi_collect(true) };
    keep_freed_pages();
    r
}

/// A size field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`, ...) in KiB, for the process `pid`
/// or, with `None`, this one; `None` where there is no such process, field or procfs.
pub fn status_kib(pid: Option<u32>, field: &str) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".to_string(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}
