//! The multiply-add peak of one core at the level in use: independent chains of fused
//! multiply-adds on registers (no memory traffic), enough of them to cover the FMA units'
//! latency, so the figure is the arithmetic limit the benchmarks compare achieved GFLOP/s with.
//! `Baseline` has no FMA: its chains are a multiply and an add (still 2 FLOPs per element).

use std::hint::black_box;
use std::time::{Duration, Instant};

use super::{simd, vectorised, Simd};

/// Floats kept in flight per level: 8 AVX-512 registers (2 FMA ports × 4 cycles of latency),
/// 10 AVX2 registers, 10 SSE registers; fewer than the level's register file, so nothing spills.
const fn lanes_in_flight(level: Simd) -> usize {
    match level {
        Simd::Avx512 => 8 * 16,
        Simd::Avx2 => 10 * 8,
        Simd::Baseline => 10 * 4,
    }
}

/// `rounds` rounds of `acc = acc · a + b` over `N` independent floats, fused where `FUSED`
/// (without the FMA feature `mul_add` would be a library call).
#[inline(always)]
fn chains<const N: usize, const FUSED: bool>(rounds: u64, a: f32, b: f32) -> f32 {
    let mut acc = [1.0_f32; N];
    for _ in 0..rounds {
        for x in acc.iter_mut() {
            *x = if FUSED { x.mul_add(a, b) } else { *x * a + b };
        }
    }
    acc.iter().sum()
}

/// FLOPs one call of [`run`] does per round at `level`.
fn flops_per_round(level: Simd) -> f64 {
    2.0 * lanes_in_flight(level) as f64
}

fn run(level: Simd, rounds: u64) -> f32 {
    let (a, b) = (black_box(0.999_9_f32), black_box(1e-4_f32));
    match level {
        Simd::Avx512 => {
            vectorised! { chains::<{ lanes_in_flight(Simd::Avx512) }, true>(rounds, a, b) }
        }
        Simd::Avx2 => vectorised! { chains::<{ lanes_in_flight(Simd::Avx2) }, true>(rounds, a, b) },
        Simd::Baseline => {
            vectorised! { chains::<{ lanes_in_flight(Simd::Baseline) }, false>(rounds, a, b) }
        }
    }
}

/// The multiply-add GFLOP/s of the calling thread at the level in use ([`simd`]): the best of
/// a few runs of about `budget / 4` each.
pub fn fma_peak_gflops(budget: Duration) -> f64 {
    let level = simd();
    // Calibrate the rounds to a quarter of the budget, then keep the fastest of three runs.
    let mut rounds = 1u64 << 14;
    loop {
        let started = Instant::now();
        black_box(run(level, rounds));
        if started.elapsed() * 4 >= budget || rounds >= 1 << 34 {
            break;
        }
        rounds *= 2;
    }
    (0..3)
        .map(|_| {
            let started = Instant::now();
            black_box(run(level, rounds));
            rounds as f64 * flops_per_round(level) / started.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every level's chains compute `acc · a + b` round after round (the timed work is the
    /// work counted), and the peak is a positive rate.
    #[test]
    fn the_chains_do_the_counted_work_at_every_level() {
        let (a, b, rounds) = (0.5_f32, 1.0_f32, 40);
        // acc → acc/2 + 1 from 1 converges to 2; every chain holds the same value.
        let mut one = 1.0_f32;
        for _ in 0..rounds {
            one = one * a + b;
        }
        for level in Simd::available() {
            let sum = crate::fastmath::dispatch::run_at(level, || match level {
                Simd::Avx512 => chains::<{ lanes_in_flight(Simd::Avx512) }, true>(rounds, a, b),
                Simd::Avx2 => chains::<{ lanes_in_flight(Simd::Avx2) }, true>(rounds, a, b),
                Simd::Baseline => {
                    chains::<{ lanes_in_flight(Simd::Baseline) }, false>(rounds, a, b)
                }
            });
            let want = one * lanes_in_flight(level) as f32;
            assert!(
                (sum - want).abs() <= 1e-3 * want,
                "{level}: {sum} vs {want}"
            );
        }
        let peak = fma_peak_gflops(Duration::from_millis(20));
        assert!(peak.is_finite() && peak > 0.0, "{peak}");
    }
}
