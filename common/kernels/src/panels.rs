//! `y += x W` for the rows of a decoding step (one per live caption), with `W` packed once per
//! policy snapshot in column panels, vectorised along the output columns.
//!
//! gemm repacks the weight for every call: at 10–50 rows the repacking of the decoder's weights
//! costs about as much as the product. Here `W` `[k, n]` is stored as panels of a few columns
//! (the width of the level's tile, [`panel_tiles`]), each panel `k × width`
//! contiguous, so a tile of rows × the panel's columns stays in registers while it reads its
//! panel front to back (the panel stays in cache for the next rows), and nothing is copied per
//! call. The sums run over `k` in order, so a value does not depend on the tile it falls in,
//! the panel width or the thread count; the levels' tiles differ only in whether a
//! multiply-add is fused (see `panel_tiles`).

use std::ops::Range;

use candle_core::{CpuStorage, DType, Storage, Tensor};

use super::host_gemm::SendPtr;
use super::panel_tiles::{self, PanelDst};
use crate::fastmath::Simd;
use candle_core::Result;

/// A `[k, n]` weight in column panels of its level's width (the last one padded with zeros).
struct Panels {
    k: usize,
    n: usize,
    /// The level whose tile multiplies it (it fixed the panel width).
    level: Simd,
    data: Vec<f32>,
}

impl Panels {
    /// From `w` `[k, n]` row-major, for `level`'s tile (the portable one where this CPU lacks
    /// the level).
    fn for_level(w: &[f32], k: usize, n: usize, level: Simd) -> Self {
        Self::fill(k, n, level, |panel, c0, c1, cols| {
            for (kk, dst) in panel.chunks_mut(cols).enumerate() {
                dst[..c1 - c0].copy_from_slice(&w[kk * n + c0..kk * n + c1]);
            }
        })
    }

    /// From `w_rows` `[n, k]` row-major (a `[out, in]` parameter: `W` transposed), read row by
    /// row into the panels without a transposed copy first.
    fn from_rows(w_rows: &[f32], k: usize, n: usize, level: Simd) -> Self {
        Self::fill(k, n, level, |panel, c0, c1, cols| {
            // Each panel row is written front to back, reading one value of each of the
            // panel's weight rows (a few cache lines, each used for `cols` panel rows).
            let rows: Vec<&[f32]> = (c0..c1).map(|c| &w_rows[c * k..(c + 1) * k]).collect();
            for (kk, dst) in panel.chunks_exact_mut(cols).enumerate() {
                for (d, row) in dst.iter_mut().zip(&rows) {
                    *d = row[kk];
                }
            }
        })
    }

    /// Panels of `level`'s width (the portable one where this CPU lacks the level), zeros
    /// beyond `n`; `fill(panel, c0, c1, width)` writes columns `c0..c1` into each panel.
    fn fill(
        k: usize,
        n: usize,
        level: Simd,
        mut fill: impl FnMut(&mut [f32], usize, usize, usize),
    ) -> Self {
        let level = match level.supported() {
            true => level,
            false => Simd::Baseline,
        };
        let cols = panel_tiles::width(level);
        let panels = n.div_ceil(cols);
        let mut data = vec![0f32; panels * k * cols];
        for (p, panel) in data.chunks_mut(k * cols).enumerate() {
            fill(panel, p * cols, ((p + 1) * cols).min(n), cols);
        }
        Self { k, n, level, data }
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
        let panels = n.div_ceil(panel_tiles::width(self.level));
        let blocks = threads.clamp(1, panels);
        let dst = SendPtr(y.as_mut_ptr());
        // SAFETY: `y` holds `m` rows of `n`; blocks write disjoint columns of `y`.
        let run = |p0: usize, p1: usize| unsafe { self.mul_panels(x, dst.at(0), p0..p1) };
        if blocks == 1 {
            run(0, panels);
            return;
        }
        let per = panels.div_ceil(blocks);
        use rayon::prelude::*;
        (0..blocks)
            .into_par_iter()
            .for_each(|b| run(b * per, ((b + 1) * per).min(panels)));
    }

    /// Panels `panels` of `x W` added into `y` with the tile of the level the weight was
    /// packed for.
    ///
    /// # Safety
    /// `y` holds `x.len() / k` rows of stride `n`, and no other thread writes the panels'
    /// columns meanwhile.
    unsafe fn mul_panels(&self, x: &[f32], y: *mut f32, panels: Range<usize>) {
        let (k, n) = (self.k, self.n);
        let cols = panel_tiles::width(self.level);
        let m = x.len() / k;
        for p in panels {
            let panel = &self.data[p * k * cols..(p + 1) * k * cols];
            let dst = PanelDst {
                y,
                n,
                m,
                c0: p * cols,
                width: (n - p * cols).min(cols),
            };
            // SAFETY: the level was checked when packing; the columns lie within `y`.
            unsafe { panel_tiles::multiply(self.level, x, panel, k, dst) };
        }
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

/// `x W + b` for the rows of a decoding step, `W` `[k, n]` packed in `Panels` once per
/// snapshot.
pub struct PackedLinear {
    w: Panels,
    b: Vec<f32>,
    out: usize,
}

impl PackedLinear {
    /// From tensors: `w_t` `[k, n]` (`Wᵀ` of a `[n, k]` parameter, or its transposed view) and
    /// the bias `[n]`, zeros when `None`; read as f32, where the values lie when they can be.
    pub fn from_tensors(w_t: &Tensor, b: Option<&Tensor>) -> Result<Self> {
        let (k, n) = w_t.dims2()?;
        let b = match b {
            Some(b) => with_values(b, <[f32]>::to_vec)?,
            None => vec![0.0; n],
        };
        let level = crate::fastmath::simd();
        let w = match w_t.is_contiguous() {
            true => with_values(w_t, |w| Panels::for_level(w, k, n, level))?,
            // A transposed view: the parameter's own rows.
            false => with_values(&w_t.t()?, |w| Panels::from_rows(w, k, n, level))?,
        };
        Ok(Self { w, b, out: n })
    }

    /// `x W + b` for an f32 CPU tensor `x` `[rows, k]`, as one.
    pub fn forward_tensor(&self, x: &Tensor) -> Result<Tensor> {
        let rows = x.dim(0)?;
        let host = x.flatten_all()?.to_vec1::<f32>()?;
        Tensor::from_vec(self.forward(&host, rows), (rows, self.out), x.device())
    }

    /// `x W + b` for `n` rows of `x`.
    pub fn forward(&self, x: &[f32], n: usize) -> Vec<f32> {
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

/// `f` of the f32 values of `t` in row-major order: read where they lie when `t` is a contiguous
/// f32 CPU tensor, else from a converted copy.
pub fn with_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::F32(values)), Some((start, end))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&values[start..end]));
        }
    }
    Ok(f(&t
        .flatten_all()?
        .to_dtype(DType::F32)?
        .to_vec1::<f32>()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fastmath::Simd;

    /// A `[out, in]` parameter packs into the same panels read row by row as its transposed
    /// copy does, and `from_tensors` takes either.
    #[test]
    fn a_weight_packs_alike_from_its_rows_and_from_its_transpose() {
        for (k, n) in [(3, 5), (37, 70), (16, 32)] {
            let rows: Vec<f32> = (0..n * k).map(|v| v as f32 * 0.25 - 3.0).collect();
            let mut cols = vec![0f32; k * n];
            for c in 0..n {
                for kk in 0..k {
                    cols[kk * n + c] = rows[c * k + kk];
                }
            }
            for level in Simd::available() {
                let (a, b) = (
                    Panels::from_rows(&rows, k, n, level),
                    Panels::for_level(&cols, k, n, level),
                );
                assert_eq!(a.data, b.data, "{level}, {k}x{n}");
            }
            let w = Tensor::from_vec(rows.clone(), (n, k), &candle_core::Device::Cpu).unwrap();
            let view = PackedLinear::from_tensors(&w.t().unwrap(), None).unwrap();
            let copy = PackedLinear::from_tensors(&w.t().unwrap().contiguous().unwrap(), None);
            assert_eq!(view.w.data, copy.unwrap().w.data);
        }
    }

    /// Every level's tile on any thread count gives exactly the sums in `k` order added to
    /// `y`: fused multiply-adds at the vector levels, a product rounded then added at the
    /// portable one (unless the build has FMA).
    #[test]
    fn panel_products_give_the_k_ordered_sums_at_every_level_and_thread_count() {
        for (m, k, n) in [
            (1, 3, 5),
            (10, 37, 70),
            (7, 64, 129),
            (4, 16, 32),
            (13, 9, 40),
        ] {
            let x: Vec<f32> = (0..m * k)
                .map(|v| ((v * 7 % 13) as f32 - 6.0) / 5.0)
                .collect();
            let w: Vec<f32> = (0..k * n)
                .map(|v| ((v * 5 % 11) as f32 - 5.0) / 7.0)
                .collect();
            let bias: Vec<f32> = (0..m * n).map(|v| (v % 3) as f32).collect();
            let sums = |fused: bool| {
                let mut y = bias.clone();
                for i in 0..m {
                    for c in 0..n {
                        y[i * n + c] += (0..k).fold(0f32, |s, kk| {
                            let (a, b) = (x[i * k + kk], w[kk * n + c]);
                            match fused {
                                true => a.mul_add(b, s),
                                false => s + a * b,
                            }
                        });
                    }
                }
                y
            };
            let portable_fuses = cfg!(any(target_feature = "fma", target_arch = "aarch64"));
            for level in Simd::available() {
                let want = sums(level != Simd::Baseline || portable_fuses);
                let panels = Panels::for_level(&w, k, n, level);
                for threads in [1, 2, 3] {
                    let mut y = bias.clone();
                    panels.mul_into(&x, &mut y, threads);
                    assert_eq!(y, want, "{level}, {threads} threads, {m}x{k}x{n}");
                }
            }
        }
    }
}
