//! Fast CPU arithmetic: the vector level the hand-written kernels run at ([`simd`], forced by
//! `CAPRL_SIMD`), the one way to compile a loop for it ([`vectorised!`]), and branch-free
//! elementary functions that vectorise, shared by the fused RNN kernels (gate sigmoids and
//! tanhs), the decoding softmaxes and the contrastive rewards (log-sum-exps over a caption's
//! rivals).

pub mod dispatch;
mod level;
mod peak;

pub use dispatch::vectorised;
pub use level::{describe, set_simd, simd, simd_from_env, Simd, SimdError, SIMD_ENV};
pub use peak::fma_peak_gflops;

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
