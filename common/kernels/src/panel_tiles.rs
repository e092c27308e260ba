//! The tile kernels of the packed-panel product ([`super::panels`]), one per level
//! ([`Simd`]): each adds `x · panel` into a panel's columns of `y`, for every row of `x`,
//! holding a tile of rows × the panel's columns in registers while it reads the panel front to
//! back.
//!
//! | level | panel width | tile | registers |
//! |---|---|---|---|
//! | AVX-512 | 32 | 8 rows × 32 | 16 of 32 zmm |
//! | AVX2/FMA | 16 | 6 rows × 16 | 12 of 16 ymm |
//! | portable | 16 | 2 rows × 16 | 8 of 16 xmm (SSE2) or of 32 NEON |
//!
//! AVX2's 6 × 16 keeps twelve independent multiply-adds in flight (two FMA units with a latency
//! of 4 need eight) for two weight loads and six broadcasts per `k`; a 16-column panel is one
//! cache line per `k`, read in order.
//!
//! Every tile sums over `k` in order from zero and then adds the sum into `y`. The vector tiles
//! fuse each multiply-add, so AVX-512 and AVX2 give the same bits; the portable tile fuses only
//! where the build has FMA (`-C target-cpu=native`, aarch64) and otherwise rounds the product
//! and the sum apart: `f32::mul_add` without FMA is a call to libm's `fmaf` per multiply-add,
//! which costs more than the whole product.

use crate::fastmath::Simd;

/// Columns per panel of `level`'s tile.
pub(super) fn width(level: Simd) -> usize {
    match level {
        Simd::Avx512 => 32,
        Simd::Avx2 | Simd::Baseline => 16,
    }
}

/// The columns of `y` (`m` rows of stride `n`) a panel's product adds into: `c0..c0 + width`.
#[derive(Clone, Copy)]
pub(super) struct PanelDst {
    pub y: *mut f32,
    pub n: usize,
    pub m: usize,
    pub c0: usize,
    pub width: usize,
}

impl PanelDst {
    /// Adds a row's sums (the first `width` of them) into row `r`.
    ///
    /// # Safety
    /// `y` holds `m` rows of `n` and `c0 + width ≤ n`; `r < m`.
    #[inline(always)]
    unsafe fn add_row(&self, r: usize, sums: &[f32]) {
        // SAFETY: the caller's contract.
        let row = unsafe { self.y.add(r * self.n + self.c0) };
        for (c, &v) in sums[..self.width].iter().enumerate() {
            // SAFETY: `c < width`.
            unsafe { *row.add(c) += v };
        }
    }
}

/// `dst += x · panel` for the `dst.m` rows of `x` (`m × k`) and a panel `k × width(level)`
/// packed for `level`.
///
/// # Safety
/// This CPU runs `level`; `dst` addresses `m` valid rows of `y` at its columns, which no other
/// thread writes meanwhile.
pub(super) unsafe fn multiply(level: Simd, x: &[f32], panel: &[f32], k: usize, dst: PanelDst) {
    debug_assert!(x.len() == dst.m * k && panel.len() == k * width(level));
    debug_assert!(dst.width <= width(level));
    match level {
        // SAFETY: the caller's contract.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => unsafe { x86::avx512(x, panel, k, dst) },
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { x86::avx2(x, panel, k, dst) },
        // SAFETY: the caller's contract.
        _ => unsafe { portable(x, panel, k, dst) },
    }
}

/// The row groups of a tile of at most `max` rows covering `m` rows: as few groups as that
/// allows, their sizes differing by at most one (50 rows in tiles of 6 are 6 groups of 6 and
/// 3 of 5, not 8 of 6 and one of 2, whose few accumulators would wait on each other).
#[inline(always)]
fn row_groups(m: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let groups = m.div_ceil(max);
    let (base, extra) = (m / groups.max(1), m % groups.max(1));
    (0..groups).scan(0, move |r0, g| {
        let rows = base + usize::from(g < extra);
        let start = *r0;
        *r0 += rows;
        Some((start, rows))
    })
}

/// Columns of the portable tile.
const PORTABLE_COLS: usize = 16;

/// `a · b + c`, fused where the build has FMA (one instruction), else rounded twice.
#[inline(always)]
fn mul_add(a: f32, b: f32, c: f32) -> f32 {
    if cfg!(any(target_feature = "fma", target_arch = "aarch64")) {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// The portable tile: rows two at a time, each row's 16 sums in vector registers of the
/// baseline build (the compiler vectorises the fixed-width column loop).
///
/// # Safety
/// As [`multiply`].
unsafe fn portable(x: &[f32], panel: &[f32], k: usize, dst: PanelDst) {
    #[inline(always)]
    fn rows<const R: usize>(x: &[f32], panel: &[f32], k: usize, r0: usize) -> [[f32; 16]; R] {
        let mut acc = [[0f32; PORTABLE_COLS]; R];
        for (kk, w) in panel.chunks_exact(PORTABLE_COLS).enumerate() {
            for (r, a) in acc.iter_mut().enumerate() {
                let xv = x[(r0 + r) * k + kk];
                for (s, &wv) in a.iter_mut().zip(w) {
                    *s = mul_add(xv, wv, *s);
                }
            }
        }
        acc
    }
    for (r0, n) in row_groups(dst.m, 2) {
        let sums: &[[f32; 16]] = match n {
            1 => &rows::<1>(x, panel, k, r0),
            _ => &rows::<2>(x, panel, k, r0),
        };
        for (r, s) in sums.iter().enumerate() {
            // SAFETY: `r0 + r < m`; the caller's contract.
            unsafe { dst.add_row(r0 + r, s) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::PanelDst;

    /// A vector tile function: up to `$rows` rows × `$cols` columns, each row's sums in two
    /// registers of `$cols / 2` lanes, written with the level's intrinsics for zeroing, loading,
    /// broadcasting, fused multiply-add and storing. Each `group => rows` arm runs a group of
    /// that many rows with a constant bound, so that the loop over them unrolls; the last
    /// arm's pattern is `_`.
    macro_rules! tile {
        (
            $(#[$attr:meta])*
            fn $name:ident: $rows:literal rows, $cols:literal columns;
            row groups: $($group:pat => $r:literal),+;
            $zero:ident, $load:ident, $set1:ident, $fmadd:ident, $store:ident $(,)?
        ) => {
            $(#[$attr])*
            pub(super) unsafe fn $name(x: &[f32], panel: &[f32], k: usize, dst: PanelDst) {
                const ROWS: usize = $rows;
                const COLS: usize = $cols;
                const LANES: usize = COLS / 2;
                let wp = panel.as_ptr();
                for (r0, rows) in super::row_groups(dst.m, ROWS) {
                    let xp = x[r0 * k..].as_ptr();
                    let z = $zero();
                    let mut acc = [[z; 2]; ROWS];
                    match rows {
                        $($group => {
                            for kk in 0..k {
                                // SAFETY: `kk < k`: within the panel (`k × COLS`) and each
                                // row's inputs.
                                let (w0, w1) = unsafe {
                                    (
                                        $load(wp.add(kk * COLS)),
                                        $load(wp.add(kk * COLS + LANES)),
                                    )
                                };
                                for r in 0..$r {
                                    let xv = $set1(unsafe { *xp.add(r * k + kk) });
                                    acc[r][0] = $fmadd(xv, w0, acc[r][0]);
                                    acc[r][1] = $fmadd(xv, w1, acc[r][1]);
                                }
                            }
                        })+
                    }
                    let mut out = [0f32; COLS];
                    for (r, a) in acc.iter().enumerate().take(rows) {
                        // SAFETY: `out` holds `COLS` values; `r0 + r < m`, the caller's
                        // contract.
                        unsafe {
                            $store(out.as_mut_ptr(), a[0]);
                            $store(out.as_mut_ptr().add(LANES), a[1]);
                            dst.add_row(r0 + r, &out);
                        }
                    }
                }
            }
        };
    }

    tile! {
        /// The AVX-512 tile: up to 8 rows × 32 columns in 16 registers.
        ///
        /// # Safety
        /// As [`super::multiply`], and the CPU has AVX-512F.
        #[target_feature(enable = "avx512f")]
        fn avx512: 8 rows, 32 columns;
        row groups: 8 => 8, 7 => 7, 6 => 6, 5 => 5, 4 => 4, 3 => 3, 2 => 2, _ => 1;
        _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_storeu_ps,
    }

    tile! {
        /// The AVX2/FMA tile: up to 6 rows × 16 columns in 12 registers.
        ///
        /// # Safety
        /// As [`super::multiply`], and the CPU has AVX2 and FMA.
        #[target_feature(enable = "avx2,fma")]
        fn avx2: 6 rows, 16 columns;
        row groups: 6 => 6, 5 => 5, 4 => 4, 3 => 3, 2 => 2, _ => 1;
        _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_storeu_ps,
    }
}

#[cfg(test)]
mod tests {
    use super::row_groups;

    #[test]
    fn row_groups_cover_the_rows_in_near_equal_tiles() {
        for (m, max, want) in [
            (50, 6, vec![6, 6, 6, 6, 6, 5, 5, 5, 5]),
            (10, 6, vec![5, 5]),
            (6, 6, vec![6]),
            (7, 8, vec![7]),
            (17, 8, vec![6, 6, 5]),
            (0, 6, vec![]),
        ] {
            let groups: Vec<(usize, usize)> = row_groups(m, max).collect();
            assert_eq!(
                groups.iter().map(|g| g.1).collect::<Vec<_>>(),
                want,
                "{m} rows"
            );
            let mut next = 0;
            for (r0, rows) in groups {
                assert_eq!(r0, next);
                next += rows;
            }
            assert_eq!(next, m);
        }
    }
}
