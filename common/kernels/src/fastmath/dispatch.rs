//! Running a loop compiled for the level in use ([`super::simd`]).
//!
//! The crate is built for the target's baseline (SSE2 on x86-64), so a plain loop runs 4 lanes
//! wide unless it is compiled again with wider features. [`vectorised!`](crate::fastmath::vectorised)
//! compiles its body three times — AVX-512, AVX2/FMA and baseline — and runs the build of the
//! level in use: the choice is made once per call, not per element.

/// Runs `f` compiled for `level`, which this CPU must run (as [`super::simd`]'s always is;
/// else the baseline build runs). `f` must be inlined into the builds for its body to take
/// their features: call it through [`vectorised!`](crate::fastmath::vectorised), which marks
/// the closure `#[inline(always)]` (and so must every function it calls whose loops should
/// vectorise), or mark the closure so.
#[doc(hidden)]
#[inline(always)]
pub fn run_at<R>(level: super::Simd, f: impl FnOnce() -> R) -> R {
    // Other targets have one level: their baseline (NEON on aarch64).
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level;
    #[cfg(target_arch = "x86_64")]
    if level.supported() {
        use super::Simd;
        #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        match level {
            // SAFETY: the CPU has the build's features (checked above).
            Simd::Avx512 => return unsafe { avx512(f) },
            Simd::Avx2 => return unsafe { avx2(f) },
            Simd::Baseline => {}
        }
    }
    f()
}

/// `vectorised! { body }`: the block compiled for every level and run at the one in use
/// ([`super::simd`]). The block is a closure's body: `return` leaves the block, `?` needs the
/// block's type to be a `Result`. Functions it calls should be `#[inline(always)]` so that
/// their loops are compiled with the level's features too.
#[doc(hidden)]
#[macro_export]
macro_rules! __vectorised {
    ($($body:tt)*) => {
        $crate::fastmath::dispatch::run_at(
            $crate::fastmath::simd(),
            #[inline(always)]
            || { $($body)* },
        )
    };
}
pub use crate::__vectorised as vectorised;

#[cfg(test)]
mod tests {
    use super::super::Simd;
    use super::run_at;

    #[test]
    fn every_level_runs_the_same_loop_to_the_same_bits() {
        let x: Vec<f32> = (0..1003).map(|i| (i as f32 * 0.37).sin()).collect();
        let at = |level| {
            run_at(
                level,
                #[inline(always)]
                || x.iter().map(|v| v * 1.5 + 0.25).collect::<Vec<f32>>(),
            )
        };
        let want = at(Simd::Baseline);
        for level in Simd::available() {
            assert_eq!(at(level), want, "{level}");
        }
    }
}
