//! `y += x W` for the rows of a decoding step (one per live caption), with `W` packed once per
//! policy snapshot in column panels, vectorised along the output columns.
//!
//! gemm repacks the weight for every call: at 10–50 rows the repacking of the decoder's weights
//! costs about as much as the product. Here `W` `[k, n]` is stored as panels of [`COLS`]
//! columns, each panel `k × COLS` contiguous, so a tile of up to 8 rows × [`COLS`] columns
//! stays in registers while it reads its panel front to back (the panel stays in cache for the
//! next row tile), and nothing is copied per call. The sums run over `k` in order with fused
//! multiply-adds (correctly rounded in every build), so a value does not depend on the tile it
//! falls in, the thread count or the vector width.

use std::ops::Range;

use candle_core::{DType, Tensor};

use super::host_gemm::SendPtr;
use crate::model::error::Result;

/// Rows of a tile.
const ROWS: usize = 8;
/// Columns of a panel.
const COLS: usize = 32;

/// A `[k, n]` weight in column panels (the last one padded with zeros).
struct Panels {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl Panels {
    /// From `w` `[k, n]` row-major.
    fn new(w: &[f32], k: usize, n: usize) -> Self {
        let panels = n.div_ceil(COLS);
        let mut data = vec![0f32; panels * k * COLS];
        for (p, panel) in data.chunks_mut(k * COLS).enumerate() {
            let (c0, c1) = (p * COLS, ((p + 1) * COLS).min(n));
            for (kk, dst) in panel.chunks_mut(COLS).enumerate() {
                dst[..c1 - c0].copy_from_slice(&w[kk * n + c0..kk * n + c1]);
            }
        }
        Self { k, n, data }
    }

    /// The weight's values, `k · n`.
    fn len(&self) -> usize {
        self.k * self.n
    }

    /// `y[m, n] += x[m, k] · W` (row-major), the panels split over `threads`.
    fn mul_into(&self, x: &[f32], y: &mut [f32], threads: usize) {
        let (k, n) = (self.k, self.n);
        let m = y.len() / n;
        assert!(
            x.len() == m * k && y.len() == m * n,
            "panel product: shapes do not fit"
        );
        let panels = n.div_ceil(COLS);
        let blocks = threads.clamp(1, panels);
        let dst = SendPtr(y.as_mut_ptr());
        let run = |p0: usize, p1: usize| self.mul_panels(x, dst.at(0), p0..p1);
        if blocks == 1 {
            run(0, panels);
            return;
        }
        let per = panels.div_ceil(blocks);
        use rayon::prelude::*;
        // Blocks write disjoint columns of `y`.
        (0..blocks)
            .into_par_iter()
            .for_each(|b| run(b * per, ((b + 1) * per).min(panels)));
    }
}

/// A step's product runs on several threads (split over its output columns) when it has
/// [`PARALLEL_MIN_MACS`] multiply-adds and a weight of [`PARALLEL_MIN_WEIGHTS`] values — more
/// than one core's L2 cache holds, so that each core streams half: at COCO's width a
/// `[10, 512] × [512, 512]` product is faster on two threads — or, with a smaller weight,
/// [`PARALLEL_MIN_MACS_SMALL_WEIGHT`] multiply-adds: at the synthetic task's width 32 rows are
/// faster on one thread, 160 (5 samples or beams of 32 images) on two (measured with
/// `caprl bench transformer`).
const PARALLEL_MIN_WEIGHTS: usize = 1 << 17;
const PARALLEL_MIN_MACS: usize = 1 << 20;
const PARALLEL_MIN_MACS_SMALL_WEIGHT: usize = 4 << 20;

/// `x W + b` for the rows of a decoding step, `W` `[k, n]` packed in [`Panels`] once per
/// snapshot.
pub(crate) struct PackedLinear {
    w: Panels,
    b: Vec<f32>,
    out: usize,
}

impl PackedLinear {
    /// From `w` `[k, n]` row-major (`Wᵀ` of a `[n, k]` parameter) and the bias `[n]`.
    fn new(w: &[f32], b: Vec<f32>, k: usize, n: usize) -> Self {
        Self {
            w: Panels::new(w, k, n),
            b,
            out: n,
        }
    }

    /// From tensors: `w_t` `[k, n]` (`Wᵀ` of a `[n, k]` parameter) and the bias `[n]`, zeros
    /// when `None`; read as f32.
    pub(crate) fn from_tensors(w_t: &Tensor, b: Option<&Tensor>) -> Result<Self> {
        let (k, n) = w_t.dims2()?;
        let host = |t: &Tensor| -> Result<Vec<f32>> {
            Ok(t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
        };
        let b = match b {
            Some(b) => host(b)?,
            None => vec![0.0; n],
        };
        Ok(Self::new(&host(&w_t.contiguous()?)?, b, k, n))
    }

    /// `x W + b` for an f32 CPU tensor `x` `[rows, k]`, as one.
    pub(crate) fn forward_tensor(&self, x: &Tensor) -> Result<Tensor> {
        let rows = x.dim(0)?;
        let host = x.flatten_all()?.to_vec1::<f32>()?;
        Ok(Tensor::from_vec(
            self.forward(&host, rows),
            (rows, self.out),
            x.device(),
        )?)
    }

    /// `x W + b` for `n` rows of `x`.
    pub(crate) fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
        let mut y: Vec<f32> = Vec::with_capacity(n * self.out);
        for _ in 0..n {
            y.extend_from_slice(&self.b);
        }
        let weights = self.w.len();
        let min_macs = match weights >= PARALLEL_MIN_WEIGHTS {
            true => PARALLEL_MIN_MACS,
            false => PARALLEL_MIN_MACS_SMALL_WEIGHT,
        };
        let threads = match n * weights >= min_macs {
            true => candle_core::utils::get_num_threads(),
            false => 1,
        };
        self.w.mul_into(x, &mut y, threads);
        y
    }
}

impl Panels {
    /// Panels `panels` of `x W` added into `y` (`m` rows of stride `n`): with AVX-512 the
    /// tiles' accumulators are registers ([`avx512`]), elsewhere the portable tile (the same sums
    /// in the same order).
    fn mul_panels(&self, x: &[f32], y: *mut f32, panels: Range<usize>) {
        #[cfg(target_arch = "x86_64")]
        if crate::fastmath::simd() == crate::fastmath::Simd::Avx512 {
            // SAFETY: the CPU has AVX-512F (checked by `simd`).
            unsafe { self.mul_with(x, y, panels, avx512::tile) };
            return;
        }
        // SAFETY: the portable tile needs no CPU feature; the callers' bounds as above.
        unsafe { self.mul_with(x, y, panels, tile) };
    }

    /// [`Panels::mul_panels`] with the tile kernel `tile`.
    ///
    /// # Safety
    /// `y` holds `x.len() / k` rows of stride `n`; `tile` runs on this CPU.
    #[inline(always)]
    unsafe fn mul_with(&self, x: &[f32], y: *mut f32, panels: Range<usize>, tile: Tile) {
        let (k, n) = (self.k, self.n);
        let m = x.len() / k;
        for p in panels {
            let panel = &self.data[p * k * COLS..(p + 1) * k * COLS];
            let (c0, width) = (p * COLS, (n - p * COLS).min(COLS));
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(ROWS);
                let dst = TileDst {
                    y,
                    n,
                    i,
                    rows,
                    c0,
                    width,
                };
                // SAFETY: rows `i..i + rows` < m, columns `c0..c0 + width` ≤ n of `y`.
                unsafe { tile(&x[i * k..(i + rows) * k], panel, k, dst) };
                i += rows;
            }
        }
    }
}

/// Where a tile adds its sums: `rows` rows of `y` (row stride `n`) from row `i`, the columns
/// `c0..c0 + width`.
#[derive(Clone, Copy)]
struct TileDst {
    y: *mut f32,
    n: usize,
    i: usize,
    rows: usize,
    c0: usize,
    width: usize,
}

impl TileDst {
    /// Adds a tile row's sums (the first `width` of them) into row `r` of the tile.
    ///
    /// # Safety
    /// `y` holds the tile's rows and columns (the tile kernels' contract).
    #[inline(always)]
    unsafe fn add_row(&self, r: usize, sums: &[f32; COLS]) {
        for (c, &v) in sums[..self.width].iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe { *self.y.add((self.i + r) * self.n + self.c0 + c) += v };
        }
    }
}

/// A tile kernel: the tile's rows of `x` (`rows × k`), its panel (`k × COLS`), where it adds.
type Tile = unsafe fn(&[f32], &[f32], usize, TileDst);

/// The portable tile (see [`Tile`]).
///
/// # Safety
/// `dst` addresses valid rows and columns of `y`.
unsafe fn tile(xs: &[f32], panel: &[f32], k: usize, dst: TileDst) {
    for r in 0..dst.rows {
        let mut acc = [0f32; COLS];
        for (kk, wr) in panel.chunks_exact(COLS).enumerate() {
            let xv = xs[r * k + kk];
            for (a, &wv) in acc.iter_mut().zip(wr) {
                *a = xv.mul_add(wv, *a);
            }
        }
        // SAFETY: the caller's contract.
        unsafe { dst.add_row(r, &acc) };
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{TileDst, COLS, ROWS};

    /// The AVX-512 tile: up to 8 rows × 32 columns in 16 registers.
    ///
    /// # Safety
    /// As [`super::tile`], and the CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tile(xs: &[f32], panel: &[f32], k: usize, dst: TileDst) {
        let rows = dst.rows;
        debug_assert!(rows <= ROWS && xs.len() == rows * k && panel.len() == k * COLS);
        let z = _mm512_setzero_ps();
        let mut acc = [[z; 2]; ROWS];
        let wp = panel.as_ptr();
        let xp = xs.as_ptr();
        macro_rules! rows_loop {
            ($r:literal) => {
                for kk in 0..k {
                    // SAFETY: `kk < k`: within the panel (`k × 32`) and each row's `k` inputs.
                    let (w0, w1) = unsafe {
                        (
                            _mm512_loadu_ps(wp.add(kk * COLS)),
                            _mm512_loadu_ps(wp.add(kk * COLS + 16)),
                        )
                    };
                    for r in 0..$r {
                        let xv = _mm512_set1_ps(unsafe { *xp.add(r * k + kk) });
                        acc[r][0] = _mm512_fmadd_ps(xv, w0, acc[r][0]);
                        acc[r][1] = _mm512_fmadd_ps(xv, w1, acc[r][1]);
                    }
                }
            };
        }
        match rows {
            8 => rows_loop!(8),
            7 => rows_loop!(7),
            6 => rows_loop!(6),
            5 => rows_loop!(5),
            4 => rows_loop!(4),
            3 => rows_loop!(3),
            2 => rows_loop!(2),
            _ => rows_loop!(1),
        }
        let mut out = [0f32; COLS];
        for (r, a) in acc.iter().enumerate().take(rows) {
            // SAFETY: `out` holds 32 values; `dst` as the caller's contract.
            unsafe {
                _mm512_storeu_ps(out.as_mut_ptr(), a[0]);
                _mm512_storeu_ps(out.as_mut_ptr().add(16), a[1]);
                dst.add_row(r, &out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panel_products_match_the_plain_product_on_any_thread_count() {
        for (m, k, n) in [(1, 3, 5), (10, 37, 70), (7, 64, 129), (4, 16, 32)] {
            let x: Vec<f32> = (0..m * k)
                .map(|v| ((v * 7 % 13) as f32 - 6.0) / 5.0)
                .collect();
            let w: Vec<f32> = (0..k * n)
                .map(|v| ((v * 5 % 11) as f32 - 5.0) / 7.0)
                .collect();
            let bias: Vec<f32> = (0..m * n).map(|v| (v % 3) as f32).collect();
            let mut want = bias.clone();
            for i in 0..m {
                for c in 0..n {
                    want[i * n + c] += (0..k).fold(0f32, |s, kk| s + x[i * k + kk] * w[kk * n + c]);
                }
            }
            let panels = Panels::new(&w, k, n);
            let mut first = None;
            for threads in [1, 2, 3] {
                let mut y = bias.clone();
                panels.mul_into(&x, &mut y, threads);
                for (a, b) in y.iter().zip(&want) {
                    assert!(
                        (a - b).abs() <= 1e-4 * b.abs().max(1.0),
                        "{m}x{k}x{n}: {a} vs {b}"
                    );
                }
                // The same bits whatever the thread count.
                assert_eq!(*first.get_or_insert_with(|| y.clone()), y);
            }
            // The portable tile gives the AVX-512 tile's bits (both fuse every multiply-add).
            let mut y = bias.clone();
            // SAFETY: `y` holds `m` rows of `n`; all panels.
            unsafe { panels.mul_with(&x, y.as_mut_ptr(), 0..n.div_ceil(COLS), tile) };
            assert_eq!(first.unwrap(), y);
        }
    }
}
