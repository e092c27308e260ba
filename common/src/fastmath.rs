//! Branch-free elementary functions that vectorise, shared by the fused RNN kernels (gate
//! sigmoids and tanhs) and the contrastive rewards (log-sum-exps over a caption's rivals).

/// `eˣ` for f32 without branches or library calls, so that loops over it vectorise (Cephes
/// `expf`: `x = n ln2 + r`, `|r| ≤ ln2/2`, degree-6 polynomial for `eʳ`, `2ⁿ` built from its
/// bits; relative error about 2e-7). The input is clamped to `[-87, 88]`.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // Adding 1.5·2²³ rounds to the nearest integer n and leaves n in the low bits of the sum,
    // so `2ⁿ` needs no float-to-int cast (a saturating cast that stays scalar).
    const ROUND: f32 = 12_582_912.0;
    const ROUND_BITS: i32 = 0x4B40_0000;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_BITS);
    e * f32::from_bits(((n + 127) as u32) << 23)
}

/// The widest build of a host loop this CPU runs (std checks the features once and caches
/// them): loops that take it are compiled for AVX-512, AVX2/FMA and baseline x86-64 from one
/// body, with the same bits (Rust never fuses `a * b + c` on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    Avx512,
    Avx2,
    Baseline,
}

/// See [`Simd`].
#[inline(always)]
pub fn simd() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f") && has!("avx512vl") && has!("avx2") && has!("fma") {
            return Simd::Avx512;
        }
        if has!("avx2") && has!("fma") {
            return Simd::Avx2;
        }
    }
    Simd::Baseline
}

/// Defines `$name` to run the body of `$plain` (an `#[inline(always)]` function of the same
/// signature) compiled for the widest [`Simd`] level of this CPU.
macro_rules! simd_dispatch {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty = $plain:ident) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) -> $ret {
                    $plain($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $plain($($arg),*)
                }
                match $crate::fastmath::simd() {
                    // SAFETY: the CPU has the features of the build (checked by `simd`).
                    $crate::fastmath::Simd::Avx512 => return unsafe { avx512($($arg),*) },
                    $crate::fastmath::Simd::Avx2 => return unsafe { avx2($($arg),*) },
                    $crate::fastmath::Simd::Baseline => {}
                }
            }
            $plain($($arg),*)
        }
    };
}
pub(crate) use simd_dispatch;
